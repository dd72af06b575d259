# SPDX-License-Identifier: MIT
"""exporter_clients.py -- clients of `vram exporter` for its tests and its
benchmark: hostile ones that hold connections until told to stop, and a
scraper that says what it got.

    exporter_clients.py PORT STOPFILE hold N        N idle connections, each
        from a random address of 127/8, held until STOPFILE exists
    exporter_clients.py PORT STOPFILE loris N       N connections each sending
        a header line every second, never ending their request,
        reconnecting when cut, until STOPFILE exists
    exporter_clients.py PORT STOPFILE bytes         one connection sending a
        never-ending request a byte every 0.3 s; prints "cut" when the
        exporter ends it, "never cut" if STOPFILE came first
    exporter_clients.py PORT STOPFILE garbage       malformed requests, a huge
        header, a huge path, an unknown method; prints each answer's status
    exporter_clients.py PORT - scrape N             N scrapes of /metrics one
        after the other, each waited for up to 60 s; prints one line per
        scrape (status, seconds) and a summary

A hostile mode prints "ready" once its connections are open (on stdout,
flushed), then holds them. Nothing here judges time: the tests judge what
was answered, the benchmark prints the times.
"""
import os
import random
import resource
import socket
import sys
import time
import urllib.error
import urllib.request


def loopback():
    return "127.%d.%d.%d" % (random.randint(0, 255), random.randint(0, 255),
                             random.randint(2, 254))


def connect(port, addr=None, timeout=30):
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((addr or loopback(), 0))
    s.connect(("127.0.0.1", port))
    return s


def stopped(stopfile):
    return os.path.exists(stopfile)


def ready():
    print("ready", flush=True)


def hold(port, stopfile, n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, n + 64)), hard))
    held, failed = [], 0
    for _ in range(n):
        try:
            held.append(connect(port, timeout=5))
        except OSError:
            failed += 1
    print("held %d failed %d" % (len(held), failed), flush=True)
    ready()
    while not stopped(stopfile):
        time.sleep(0.05)
    for s in held:
        s.close()


def loris(port, stopfile, n):
    import threading
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, n + 64)), hard))
    cuts = [0]

    def one():
        s = None
        while not stopped(stopfile):
            try:
                if s is None:
                    s = connect(port, timeout=5)
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                s.sendall(b"X-a: b\r\n")
            except OSError:
                if s is not None:
                    s.close()
                    cuts[0] += 1
                s = None
            time.sleep(1)
        if s is not None:
            s.close()

    ts = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in ts:
        t.start()
    ready()
    for t in ts:
        t.join()
    print("loris done, reconnected %d times" % cuts[0], flush=True)


def bytes_trickler(port, stopfile):
    s = connect(port, timeout=5)
    ready()
    req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-long: "
    i = 0
    while not stopped(stopfile):
        try:
            s.sendall(req[i:i + 1] if i < len(req) else b"a")
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    print("cut", flush=True)
                    return
            except BlockingIOError:
                pass
            s.setblocking(True)
        except OSError:
            print("cut", flush=True)
            return
        i += 1
        time.sleep(0.3)
    print("never cut", flush=True)


def garbage(port):
    for name, payload in [
            ("garbage", b"\x00\xff garbage \r\n\r\n"),
            ("huge header", b"GET /metrics HTTP/1.1\r\nX-Big: " + b"A" * 200000 + b"\r\n\r\n"),
            ("huge path", b"GET " + b"/" * 100000 + b" HTTP/1.1\r\n\r\n"),
            ("no method", b"NOTAMETHOD\r\n\r\n")]:
        try:
            s = connect(port)
            s.sendall(payload)
            r = s.recv(64)
            s.close()
            print("%s: %s" % (name, r[:12].decode("latin-1") or "closed"), flush=True)
        except OSError as e:
            print("%s: %s" % (name, e.__class__.__name__), flush=True)


def scrape(port, n):
    times, bad = [], 0
    for _ in range(n):
        t0 = time.monotonic()
        try:
            r = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=60)
            r.read()
            status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError as e:
            status = e.__class__.__name__
        dt = time.monotonic() - t0
        times.append(dt)
        bad += status != 200
        print("scrape %s %.4f" % (status, dt), flush=True)
        time.sleep(0.1)
    times.sort()
    print("scrapes %d not-200 %d median %.4f max %.4f" % (
        n, bad, times[len(times) // 2], times[-1]), flush=True)


def main():
    port, stopfile, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if mode == "hold":
        hold(port, stopfile, n)
    elif mode == "loris":
        loris(port, stopfile, n)
    elif mode == "bytes":
        bytes_trickler(port, stopfile)
    elif mode == "garbage":
        garbage(port)
    elif mode == "scrape":
        scrape(port, n)
    else:
        sys.exit("exporter_clients.py: unknown mode " + mode)


if __name__ == "__main__":
    main()
