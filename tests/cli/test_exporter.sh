#!/bin/sh
# SPDX-License-Identifier: MIT
# test_exporter.sh -- `vram exporter` on a free loopback port, against
# ledgers filled by ledger_fill: /metrics by curl (names, types, values),
# 404 and 405, bad --listen; hostile clients (garbage, a huge header, 20
# slowloris connections dribbling bytes, from their own address) while a
# normal scrape must still
# be answered within 3 s; 50 concurrent scrapes; a killed process leaving
# the metrics; then a real Prometheus (Debian package) scraping the
# exporter every second, queried through its HTTP API. All traffic goes
# to 127.0.0.1; every loop is bounded. Exit 77 without curl, python3 or
# prometheus. With REPO_ROOT, also checks contrib/: the Grafana dashboard's
# JSON and the metrics it queries (the alert rules: test_alerts.sh).
# Usage: test_exporter.sh VRAM LEDGER_FILL [REPO_ROOT]
set -u
VRAM=$1
FILL=$2
ROOT=${3:-}
for t in curl python3 prometheus; do
    command -v $t >/dev/null || { echo "skipped: no $t (scripts/install-deps.sh)"; exit 77; }
done
G="ex$$"
U="GPU-exporter-test-0000"
. "$(dirname "$0")/lib.sh"
test_begin exp
pids=""
test_cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    [ -n "${stopped:-}" ] && kill -9 "$stopped" 2>/dev/null
    wait 2>/dev/null
    rm -f "/dev/shm/vram-$(id -u)/$G" "/dev/shm/vram-$(id -u)/${G}s"
    rmdir "/dev/shm/vram-$(id -u)" 2>/dev/null
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() {
    "$FILL" "$G" "$U" "$@" >"$TMP/fill.$1" 2>&1 &
    pids="$pids $!"
    last=$!
    i=0
    while [ $i -lt 50 ] && ! grep -q ready "$TMP/fill.$1"; do sleep 0.1; i=$((i + 1)); done
}
start 64 256 0 512
keeper=$last
start 32 256
victim=$last
# A member of another group stopped for good inside the ledger's critical
# step: the exporter starts and answers at once all the same.
"$FILL" --stopped "${G}s" "$U" 8 >"$TMP/fill.stopped" 2>&1 &
stopped=$!
pids="$pids $stopped"
i=0
while [ $i -lt 50 ] && ! grep -q ready "$TMP/fill.stopped"; do sleep 0.1; i=$((i + 1)); done

PORT=$(free_port)
URL="http://127.0.0.1:$PORT/metrics"
"$VRAM" exporter --no-nvml --listen "127.0.0.1:$PORT" --interval 0.5 >"$TMP/exp.out" 2>"$TMP/exp.err" &
EXP=$!
pids="$pids $EXP"
i=0
while [ $i -lt 50 ] && ! curl -s -o /dev/null "$URL"; do sleep 0.1; i=$((i + 1)); done
check "exporter answers within 1 s of its start despite a stopped member" "[ $i -le 10 ]"
check "the stopped member's group is served" \
    "curl -s -m 1 $URL | grep -q 'vram_process_used_bytes{.*,group=\"${G}s\",pid=\"$stopped\".* 8388608\$'"

curl -s -D "$TMP/hdr" "$URL" >"$TMP/m"
check "GET /metrics answers 200" "grep -q '^HTTP/1.1 200' $TMP/hdr"
check "content type is the text format 0.0.4" "grep -qi '^Content-Type: text/plain; version=0.0.4' $TMP/hdr"
for m in vram_device_memory_total_bytes vram_device_memory_used_bytes vram_group_quota_bytes \
         vram_group_used_bytes vram_process_used_bytes vram_process_peak_bytes \
         vram_oom_refusals_total; do
    check "/metrics has $m" "grep -q '^# TYPE $m ' $TMP/m"
done
# dcgm-exporter's labels first (gpu and modelName empty: a GPU NVML does not know).
LBL="gpu=\"\",UUID=\"$U\",modelName=\"\",Hostname=\"$(hostname)\""
check "the GPU's UUID is one label, UUID, as dcgm-exporter's (no uuid)" \
    "grep -q 'UUID=\"$U\"' $TMP/m && ! grep -q 'uuid=' $TMP/m"
check "group used is 96 MiB" "grep -q '^vram_group_used_bytes{$LBL,group=\"$G\"} 100663296\$' $TMP/m"
check "group quota is 256 MiB" "grep -q '^vram_group_quota_bytes{$LBL,group=\"$G\"} 268435456\$' $TMP/m"
check "one OOM refusal counted" "grep -q '^vram_oom_refusals_total{$LBL,group=\"$G\"} 1\$' $TMP/m"
check "process used of the keeper" "grep -q '^vram_process_used_bytes{$LBL,group=\"$G\",pid=\"$keeper\",.*} 67108864\$' $TMP/m"
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
check "GET /: 200, an HTML page linking /metrics" "[ \$(code http://127.0.0.1:$PORT/) = 200 ] && curl -s http://127.0.0.1:$PORT/ | grep -q '<a href=\"/metrics\">'"
check "other path: 404" "[ \$(code http://127.0.0.1:$PORT/nothing) = 404 ]"
check "the default port is not dcgm-exporter's 9400" "\"$VRAM\" exporter --help | grep -q 'default 127.0.0.1:10042'"
check "POST: 405" "[ \$(code -X POST -d x=1 $URL) = 405 ]"
check "DELETE: 405" "[ \$(code -X DELETE $URL) = 405 ]"

# Hostile clients (from 127.0.0.4), in the background for at most 8 s, while normal scrapes go on.
python3 - "$PORT" >"$TMP/hostile" 2>&1 <<'PY' &
import socket, sys, time
port = int(sys.argv[1])
def conn():
    # From an address of its own: the exporter caps connections per address.
    s = socket.create_connection(("127.0.0.1", port), timeout=3, source_address=("127.0.0.4", 0))
    return s
out = []
for payload in [b"\x00\xff garbage \r\n\r\n", b"GET /metrics HTTP/1.1\r\nX-Big: " + b"A" * 200000 + b"\r\n\r\n",
                b"GET " + b"/" * 100000 + b" HTTP/1.1\r\n\r\n", b"NOTAMETHOD\r\n\r\n"]:
    try:
        s = conn(); s.sendall(payload); r = s.recv(64); out.append(r[:12]); s.close()
    except OSError as e:
        out.append(repr(e))
slow = []
for _ in range(20):
    try:
        s = conn(); s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"); slow.append(s)
    except OSError:
        pass
end = time.time() + 8
while time.time() < end:
    for s in slow:
        try: s.sendall(b"X-a: b\r\n")
        except OSError: pass
    time.sleep(1)
print("hostile done", out, len(slow))
PY
HOSTILE=$!
pids="$pids $HOSTILE"
sleep 1
t0=$(date +%s)
served=0
for k in 1 2 3 4 5; do
    curl -s -m 3 -o /dev/null -w '%{http_code}\n' "$URL" | grep -q 200 && served=$((served + 1))
    sleep 0.5
done
# 4 of 5: a busy machine may delay one; an exporter the hostile clients
# hold up answers none until they are gone (8 s).
check "scrapes answered during the slowloris ($served/5 within 3 s)" "[ $served -ge 4 ]"
wait "$HOSTILE"
check "hostile client ran" "grep -q 'hostile done' $TMP/hostile"
check "exporter still running after hostile requests" "kill -0 $EXP"

# Slowloris: 100 clients from one address (127.0.0.2) each trickling one
# header line every 2 s, reconnecting when cut, for 8 s; meanwhile a
# scrape from 127.0.0.1 every 0.25 s must be answered within 1 s (every
# one answered within 3 s and at most one in ten over 1 s: a busy machine
# may delay a few, an exporter the tricklers hold up delays them all). And
# a single client trickling a byte every 0.3 s (127.0.0.3) must be cut by
# the whole-request deadline (2 s), although it is never idle (by 6 s: a
# busy machine may wake the client late; uncut, it trickles for 15 s).
python3 - "$PORT" >"$TMP/loris" 2>&1 <<'PY'
import socket, sys, threading, time, urllib.request
port = int(sys.argv[1])
stop = time.time() + 8
def trickler():
    s = None
    while time.time() < stop:
        try:
            if s is None:
                s = socket.socket(); s.settimeout(2)
                s.bind(("127.0.0.2", 0)); s.connect(("127.0.0.1", port))
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            s.sendall(b"X-a: b\r\n")
        except OSError:
            if s is not None: s.close()
            s = None
            time.sleep(0.2)
            continue
        time.sleep(2)
    if s is not None: s.close()
ts = [threading.Thread(target=trickler, daemon=True) for _ in range(100)]
for t in ts: t.start()
cut_after = None
def byte_trickler():
    global cut_after
    s = socket.socket(); s.bind(("127.0.0.3", 0)); s.connect(("127.0.0.1", port))
    t0 = time.time()
    try:
        for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-long: " + b"a" * 40:
            s.sendall(bytes([b]))
            time.sleep(0.3)
            s.setblocking(False)
            try:
                if s.recv(1) == b"": break
            except BlockingIOError: pass
            s.setblocking(True)
    except OSError:
        pass
    cut_after = time.time() - t0
    s.close()
bt = threading.Thread(target=byte_trickler, daemon=True); bt.start()
time.sleep(1)
worst, fails, slow, n = 0.0, 0, 0, 0
while time.time() < stop:
    t0 = time.time()
    try:
        r = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=3)
        ok = r.status == 200 and b"vram_group_used_bytes" in r.read()
    except Exception as e:
        ok = False
    dt = time.time() - t0
    n += 1
    worst = max(worst, dt)
    if not ok: fails += 1
    if dt > 1: slow += 1
    time.sleep(0.25)
bt.join(20)
print("scrapes %d failed %d slow %d (%s) worst %.3f s; byte trickler cut after %s s" % (
    n, fails, slow, "ok" if fails == 0 and slow * 10 <= n else "too many", worst,
    "%.1f" % cut_after if cut_after is not None else "never"))
PY
cat "$TMP/loris"
check "100 trickling clients: every scrape answered, nearly all within 1 s" "grep -q 'failed 0 slow [0-9]* (ok)' $TMP/loris"
check "a byte trickler is cut by the 2 s request deadline" \
    "awk '/cut after/ { v = \$NF; sub(/ s\$/, \"\", v); exit !(\$(NF-1) + 0 > 1.5 && \$(NF-1) + 0 < 6) }' $TMP/loris"
check "exporter still running after the trickling clients" "kill -0 $EXP"

# 50 concurrent scrapes.
k=0
while [ $k -lt 50 ]; do
    curl -s -m 10 -o "$TMP/c.$k" -w '%{http_code}\n' "$URL" >"$TMP/code.$k" &
    k=$((k + 1))
done
i=0
while [ $i -lt 100 ] && [ "$(cat "$TMP"/code.* 2>/dev/null | grep -c 200)" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
check "50 concurrent scrapes all answered 200" "[ \$(cat $TMP/code.* | grep -c 200) -eq 50 ]"
check "every concurrent answer is complete" "[ \$(grep -l '^# TYPE vram_oom_refusals_total counter' $TMP/c.* | wc -l) -eq 50 ]"

# A killed process leaves the metrics at the next sample.
kill -9 "$victim"
wait "$victim" 2>/dev/null
# The next sample drops it (0.5 s apart); on a loaded machine it may take
# longer, so the scrape is repeated for up to 10 s.
i=0
while :; do
    curl -s "$URL" >"$TMP/m2"
    ! grep -q "pid=\"$victim\"" "$TMP/m2" || [ $i -ge 50 ] && break
    sleep 0.2
    i=$((i + 1))
done
check "killed process gone from /metrics" "! grep -q 'pid=\"$victim\"' $TMP/m2 && grep -q 'pid=\"$keeper\"' $TMP/m2"
check "group used back to 64 MiB" "grep -q '^vram_group_used_bytes{$LBL,group=\"$G\"} 67108864\$' $TMP/m2"

# Bad --listen: exit 2, one line.
"$VRAM" exporter --listen nonsense >/dev/null 2>"$TMP/err"
check "bad --listen: exit 2, one 'vram: ' line" "[ $? -eq 2 ] && [ \$(wc -l <$TMP/err) -eq 1 ] && grep -q '^vram: ' $TMP/err"
"$VRAM" exporter --no-nvml --listen "127.0.0.1:$PORT" >/dev/null 2>"$TMP/err"
check "port in use: exit 1" "[ $? -eq 1 ] && grep -q '^vram: ' $TMP/err"

# A real Prometheus scrapes the exporter every second.
PPORT=$(free_port)
cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: vram
    static_configs:
      - targets: ['127.0.0.1:$PORT']
YML
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
    --web.listen-address="127.0.0.1:$PPORT" >"$TMP/prom.log" 2>&1 &
PROM=$!
pids="$pids $PROM"
Q="http://127.0.0.1:$PPORT/api/v1/query?query=vram_group_used_bytes%7Bgroup%3D%22$G%22%7D"
i=0
got=""
while [ $i -lt 60 ]; do
    got=$(curl -s -m 2 "$Q")
    echo "$got" | grep -q '"67108864"' && break
    sleep 0.5
    i=$((i + 1))
done
if echo "$got" | grep -q '"67108864"'; then pass "Prometheus scraped vram_group_used_bytes = 64 MiB"
else fail "Prometheus query: $got"; tail -n 5 "$TMP/prom.log"; fi
got=$(curl -s -m 2 "http://127.0.0.1:$PPORT/api/v1/query?query=vram_oom_refusals_total%7Bgroup%3D%22$G%22%7D")
check "Prometheus sees the refusal counter" "echo '$got' | grep -q '\"1\"'"
got=$(curl -s -m 2 "http://127.0.0.1:$PPORT/api/v1/query?query=up%7Bjob%3D%22vram%22%7D")
check "Prometheus marks the target up" "echo '$got' | grep -q '\"1\"'"
kill "$PROM"
wait "$PROM" 2>/dev/null

if [ -n "$ROOT" ]; then
    # The alert rules: tests/prometheus/test_alerts.sh (CTest alerts).
    check "contrib Grafana dashboard is JSON naming only listed metrics" \
        "python3 -c 'import json,re,sys; d=json.load(open(sys.argv[1])); m=open(sys.argv[2]).read(); e=[t[\"expr\"] for p in d[\"panels\"] for t in p[\"targets\"]]; n=set(x for s in e for x in re.findall(r\"vram_[a-z_]+\", s)); sys.exit(0 if n and all(\"# TYPE \"+x+\" \" in m for x in n) else 1)' $ROOT/contrib/grafana/vram-dashboard.json $TMP/m"
fi

kill -TERM "$EXP"
wait "$EXP"
check "SIGTERM stops the exporter with status 0" "[ $? -eq 0 ]"

test_end
