#!/bin/sh
# SPDX-License-Identifier: MIT
# test_exporter.sh -- `vram exporter` on a free loopback port, against
# ledgers filled by ledger_fill: /metrics by curl (names, types, values),
# 404 and 405, bad --listen; hostile clients of another local user
# (garbage, huge requests, tricklers, slowloris, 2,000 idle connections
# from addresses all over 127/8), held until told to stop, while root's
# scrapes must all be served; the fairness rule (one user is one client,
# whatever its address: a 9th connection is answered 503 with the reason,
# another user is served meanwhile); 50 concurrent scrapes each answered;
# a killed process leaving the metrics; then a real Prometheus (Debian
# package) scraping the exporter every second, queried through its HTTP
# API. Nothing is timed: a wait lasts until what it waits for happens
# (CTest's timeout is the watchdog). Exit 77 without curl, python3,
# setpriv or prometheus. With REPO_ROOT, also checks contrib/: the Grafana
# dashboard's JSON and the metrics it queries (the alert rules:
# test_alerts.sh). Needs root (the hostile clients run as nobody).
# Usage: test_exporter.sh VRAM LEDGER_FILL [REPO_ROOT]
set -u
VRAM=$1
FILL=$2
ROOT=${3:-}
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (hostile clients run as nobody)"; exit 77; }
for t in curl python3 prometheus setpriv /usr/bin/python3; do
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
    rm -f "/dev/shm/vram-$(id -u)/$G" "/dev/shm/vram-$(id -u)/${G}s" "/dev/shm/vram-$(id -u)/${G}d"
    rmdir "/dev/shm/vram-$(id -u)" 2>/dev/null
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() {
    "$FILL" "$G" "$U" "$@" >"$TMP/fill.$1" 2>&1 &
    pids="$pids $!"
    last=$!
    until grep -q ready "$TMP/fill.$1"; do sleep 0.1; done
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
until grep -q ready "$TMP/fill.stopped"; do sleep 0.1; done

PORT=$(free_port)
URL="http://127.0.0.1:$PORT/metrics"
"$VRAM" exporter --no-nvml --listen "127.0.0.1:$PORT" --interval 0.5 >"$TMP/exp.out" 2>"$TMP/exp.err" &
EXP=$!
pids="$pids $EXP"
# The member stays stopped throughout: answering at all proves no wait on it.
until curl -s -o /dev/null "$URL"; do kill -0 $EXP 2>/dev/null || break; sleep 0.1; done
check "exporter answers despite a member stopped for good" "curl -s -m 60 -o /dev/null $URL"
check "the stopped member's group is served" \
    "curl -s -m 60 $URL | grep -q 'vram_process_used_bytes{.*,group=\"${G}s\",pid=\"$stopped\".* 8388608\$'"

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

# Hostile clients are another local user (nobody), held until told to stop
# ($TMP/stop.N exists): the exporter must serve root's scrapes while they
# hold, so a scrape that is answered at all proves they do not block it
# (nothing here is timed: they never give up by themselves).
CLIENTS="$(dirname "$0")/exporter_clients.py"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
# The system's python3 (nobody cannot run one under root's home).
SYSPY=/usr/bin/python3
# hostile N MODE [ARG]: start a hostile client (pid in $last), wait until ready.
hostile() {
    n=$1; shift
    as_nobody $SYSPY "$CLIENTS" "$PORT" "$TMP/stop.$n" "$@" >"$TMP/hostile.$n" 2>&1 &
    last=$!
    pids="$pids $last"
    until grep -q ready "$TMP/hostile.$n"; do
        kill -0 "$last" 2>/dev/null || { cat "$TMP/hostile.$n"; return 1; }
        sleep 0.1
    done
}
# scrapes N: N scrapes by root (60 s each at most), summary in $TMP/scrapes.
scrapes() { python3 "$CLIENTS" "$PORT" - scrape "$1" >"$TMP/scrapes" 2>&1; tail -n 1 "$TMP/scrapes"; }
chmod 755 "$TMP"

# Garbage, a huge header and path, an unknown method: error answers.
python3 "$CLIENTS" "$PORT" - garbage >"$TMP/garbage" 2>&1
check "a huge header gets 431, a huge path 414, garbage is closed" \
    "grep -q '^huge header: HTTP/1.1 431' $TMP/garbage && grep -q '^huge path: HTTP/1.1 414' $TMP/garbage && [ \$(wc -l <$TMP/garbage) -eq 4 ]"

# 20 slowloris connections, 100 header tricklers and a byte trickler of
# another user, all at once, from addresses all over 127/8.
hostile 1 loris 100
hostile 2 bytes
HOSTILE2=$last
hostile 3 hold 20
scrapes 10
check "root's scrapes answered while nobody trickles and holds" "grep -q 'scrapes 10 not-200 0 ' $TMP/scrapes"
# The byte trickler never ends its request: only the whole-request deadline
# (not the idle timeout, which it never meets) can end it.
until grep -Eq 'cut|never' "$TMP/hostile.2" || ! kill -0 $HOSTILE2 2>/dev/null; do sleep 0.2; done
check "a byte trickler is cut by the request deadline" "grep -qx cut $TMP/hostile.2"
touch "$TMP/stop.1" "$TMP/stop.2" "$TMP/stop.3"
check "exporter still running after the trickling clients" "kill -0 $EXP"

# The fairness rule (exporter_http.h, "Clients"): one local user is one
# client whatever loopback address it uses. Root holds 8 connections from
# 8 addresses; a 9th, from a 9th address, is refused with a 503 that says
# why; another user's scrape is served meanwhile.
python3 - "$PORT" "$TMP/stop.4" >"$TMP/fair" 2>&1 <<'PY' &
import os, socket, sys, time
port, stop = int(sys.argv[1]), sys.argv[2]
held = []
for i in range(8):
    s = socket.socket(); s.bind(("127.0.1.%d" % (i + 1), 0)); s.connect(("127.0.0.1", port)); held.append(s)
time.sleep(0.5)  # the exporter has taken them all (it serves one after the other)
s = socket.socket(); s.settimeout(60); s.bind(("127.0.2.1", 0)); s.connect(("127.0.0.1", port))
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
answer = b""
while True:
    b = s.recv(4096)
    if not b: break
    answer += b
print(answer.decode("latin-1"), flush=True)
print("ready", flush=True)
while not os.path.exists(stop): time.sleep(0.05)
PY
FAIR=$!
pids="$pids $FAIR"
until grep -q ready "$TMP/fair" || ! kill -0 $FAIR 2>/dev/null; do sleep 0.1; done
check "a 9th connection of one user: 503, Retry-After, the reason" \
    "grep -q '^HTTP/1.1 503' $TMP/fair && grep -qi '^Retry-After: 1' $TMP/fair && grep -q 'too many connections from this client (local user 0): at most 8 at once per client' $TMP/fair"
as_nobody curl -s -m 60 -o /dev/null -w '%{http_code}' "$URL" >"$TMP/other.code"
check "another user's scrape is served while root holds 8" "[ \$(cat $TMP/other.code) = 200 ]"
touch "$TMP/stop.4"
wait $FAIR

# Thousands of idle connections of one user from addresses all over 127/8
# (the attack that a per-address limit cannot stop): another client's
# scrapes are all served while they are held.
hostile 5 hold 2000
scrapes 5
check "scrapes served while nobody holds 2000 connections" "grep -q 'scrapes 5 not-200 0 ' $TMP/scrapes"
check "nobody's connections were taken, not refused by the kernel" "grep -Eq 'held [0-9]{4} ' $TMP/hostile.5"
touch "$TMP/stop.5"

# 50 concurrent scrapes of one client: each answered, 200 or a 503 that
# says why, none reset or left hanging.
k=0
while [ $k -lt 50 ]; do
    curl -s -m 60 -o "$TMP/c.$k" -w '%{http_code}\n' "$URL" >"$TMP/code.$k" &
    k=$((k + 1))
done
wait_curls() { while [ "$(cat "$TMP"/code.* 2>/dev/null | wc -l)" -lt 50 ]; do sleep 0.1; done; }
wait_curls
ok=$(cat "$TMP"/code.* | grep -c 200)
busy=$(cat "$TMP"/code.* | grep -c 503)
check "50 concurrent scrapes: each answered 200 or 503 ($ok and $busy)" "[ $((ok + busy)) -eq 50 ] && [ $ok -ge 1 ]"
check "every 200 is a complete exposition" "[ \$(grep -l '^# TYPE vram_oom_refusals_total counter' $TMP/c.* | wc -l) -eq $ok ]"
check "every 503 says why" "[ \$(grep -l 'too many connections from this client' $TMP/c.* | wc -l) -eq $busy ]"

# A killed process leaves the metrics at the next sample.
kill -9 "$victim"
wait "$victim" 2>/dev/null
# A later sample drops it (0.5 s apart; a loaded machine takes longer).
while :; do
    curl -s -m 60 "$URL" >"$TMP/m2"
    grep -q "pid=\"$victim\"" "$TMP/m2" || break
    sleep 0.2
done
check "killed process gone from /metrics" "! grep -q 'pid=\"$victim\"' $TMP/m2 && grep -q 'pid=\"$keeper\"' $TMP/m2"
check "group used back to 64 MiB" "grep -q '^vram_group_used_bytes{$LBL,group=\"$G\"} 67108864\$' $TMP/m2"

# A group whose members are all killed leaves the metrics within a few
# samples (0.5 s apart; up to 10 s on a loaded machine), and its file is
# removed by the exporter's sample.
"$FILL" "${G}d" "$U" 16 0 >"$TMP/fill.dead" 2>&1 &
dead=$!
pids="$pids $dead"
i=0
while [ $i -lt 50 ] && ! grep -q ready "$TMP/fill.dead"; do sleep 0.1; i=$((i + 1)); done
i=0
while [ $i -lt 50 ] && ! curl -s "$URL" | grep -q "group=\"${G}d\""; do sleep 0.2; i=$((i + 1)); done
check "a group of one member is served" "curl -s $URL | grep -q 'group=\"${G}d\"'"
kill -9 "$dead"
wait "$dead" 2>/dev/null
i=0
while [ $i -lt 50 ] && curl -s "$URL" | grep -q "group=\"${G}d\""; do sleep 0.2; i=$((i + 1)); done
check "a group whose members are all gone leaves /metrics" "! curl -s $URL | grep -q 'group=\"${G}d\"'"
check "... and its file is removed" "[ ! -e /dev/shm/vram-$(id -u)/${G}d ]"

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
while [ $i -lt 600 ]; do
    got=$(curl -s -m 30 "$Q")
    echo "$got" | grep -q '"67108864"' && break
    sleep 0.5
    i=$((i + 1))
done
if echo "$got" | grep -q '"67108864"'; then pass "Prometheus scraped vram_group_used_bytes = 64 MiB"
else fail "Prometheus query: $got"; tail -n 5 "$TMP/prom.log"; fi
got=$(curl -s -m 30 "http://127.0.0.1:$PPORT/api/v1/query?query=vram_oom_refusals_total%7Bgroup%3D%22$G%22%7D")
check "Prometheus sees the refusal counter" "echo '$got' | grep -q '\"1\"'"
got=$(curl -s -m 30 "http://127.0.0.1:$PPORT/api/v1/query?query=up%7Bjob%3D%22vram%22%7D")
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
