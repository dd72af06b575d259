#!/bin/sh
# SPDX-License-Identifier: MIT
# test_host_memory.sh -- each process's host memory beside its GPU use: a
# probe (probe.c, scenario "pinned") under libvram-preload.so over the fake
# driver pins 15 MiB (cuMemAllocHost 3, cuMemHostAlloc 5, cuMemHostRegister
# 7) beside 8 MiB on the device; `vram stat --json`, `vram stat` and the
# exporter's /metrics show the 15 MiB and a resident set; after the frees
# they show 0 pinned. Also: a ledger of the previous file version is
# refused by stat with one line naming its version, never read.
# The last line is "N passed, M failed"; the exit status is 1 if anything
# failed.
# Usage: test_host_memory.sh VRAM LIBVRAM_PRELOAD PROBE_DIR FAKECUDA_DIR
set -u
if [ $# -ne 4 ]; then
    echo "usage: test_host_memory.sh VRAM LIBVRAM_PRELOAD PROBE_DIR FAKECUDA_DIR" >&2
    exit 2
fi
VRAM=$1
PRELOAD=$2
PROBE=$3/preload_probe
FAKE=$4
G="hm$$"
DIR="/dev/shm/vram-$(id -u)"
. "$(dirname "$0")/../cli/lib.sh"
test_begin hostmem
pid=""
exp=""
test_cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    [ -n "$exp" ] && kill "$exp" 2>/dev/null
    wait 2>/dev/null
    rm -f "$DIR/$G" "$DIR/${G}old"
    rmdir "$DIR" 2>/dev/null
}

# wait_line FILE TEXT: until FILE holds TEXT (at most 30 s: a loaded machine).
wait_line() {
    i=0
    while [ $i -lt 600 ] && ! grep -q "$2" "$1"; do sleep 0.1; i=$((i + 1)); done
    grep -q "$2" "$1"
}

# json_field PID KEY: the process row's KEY in $TMP/json (empty if none).
json_field() {
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
rows = [p for p in d["processes"] if p["pid"] == int(sys.argv[2])]
print(rows[0].get(sys.argv[3], "") if rows else "")' "$TMP/json" "$1" "$2"
}

# env execs the probe: $! is its pid (it gives up waiting after 60 s). The
# fake NVML (beside the probe) shows its context, so that it is measured.
env VRAM_GROUP="$G" VRAM_LIMIT=256M LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$FAKE:$3" \
    "$PROBE" pinned "$TMP/stop1" "$TMP/stop2" >"$TMP/probe" 2>"$TMP/probe.err" &
pid=$!
check "the probe pins its 15 MiB" "wait_line $TMP/probe pinned"

"$VRAM" stat --json --no-nvml >"$TMP/json" 2>"$TMP/err"
# (Other tests running at once may leave other ledgers, of other
# versions: only lines about this group would be wrong here.)
check "stat --json exits 0, no line about the group" "[ $? -eq 0 ] && ! grep -q $G $TMP/err"
check "stat --json: pinned_bytes is 15 MiB" "[ \"\$(json_field $pid pinned_bytes)\" = 15728640 ]"
check "stat --json: used_bytes is the 8 MiB on the device (pinned memory is no quota's)" \
    "[ \"\$(json_field $pid used_bytes)\" = 8388608 ]"
rss=$(json_field "$pid" rss_bytes)
check "stat --json: rss_bytes, the resident set from /proc, is there (> 0)" \
    "[ -n \"$rss\" ] && [ \"$rss\" -gt 0 ]"
check "stat table: HOST MEMORY, the probe's row with 15.00 MiB pinned" \
    "\"$VRAM\" stat --no-nvml | sed -n '/^HOST MEMORY/,\$p' | grep -E '^ *$pid ' | grep -q ' 15.00 MiB '"

# The exporter, on a free loopback port, sampling every 0.1 s.
if command -v curl >/dev/null && command -v python3 >/dev/null; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$VRAM" exporter --listen "127.0.0.1:$port" --interval 0.1 --no-nvml >"$TMP/exp.out" 2>&1 &
    exp=$!
    scrape() {
        i=0
        while [ $i -lt 600 ]; do
            curl -s "http://127.0.0.1:$port/metrics" >"$TMP/metrics" 2>/dev/null &&
                grep -q "pid=\"$pid\"" "$TMP/metrics" && return 0
            sleep 0.1
            i=$((i + 1))
        done
        return 1
    }
    scrape
    check "exporter: HELP and TYPE of vram_process_host_pinned_bytes" \
        "grep -q '^# HELP vram_process_host_pinned_bytes ' $TMP/metrics && grep -q '^# TYPE vram_process_host_pinned_bytes gauge' $TMP/metrics"
    check "exporter: HELP and TYPE of vram_process_host_resident_bytes" \
        "grep -q '^# TYPE vram_process_host_resident_bytes gauge' $TMP/metrics"
    check "exporter: the probe's pinned bytes, 15728640" \
        "grep '^vram_process_host_pinned_bytes{' $TMP/metrics | grep \"pid=\\\"$pid\\\"\" | grep -q '} 15728640\$'"
fi

touch "$TMP/stop1"
check "the probe frees its pinned memory" "wait_line $TMP/probe freed"
"$VRAM" stat --json --no-nvml >"$TMP/json" 2>"$TMP/err"
check "after the frees: pinned_bytes 0, the device's 8 MiB still there" \
    "[ \"\$(json_field $pid pinned_bytes)\" = 0 ] && [ \"\$(json_field $pid used_bytes)\" = 8388608 ]"
if [ -n "$exp" ]; then
    # The exporter samples every 0.1 s: a loaded machine may take longer.
    zero() { grep '^vram_process_host_pinned_bytes{' "$TMP/metrics" | grep "pid=\"$pid\"" | grep -q '} 0$'; }
    i=0
    while [ $i -lt 600 ]; do
        curl -s "http://127.0.0.1:$port/metrics" >"$TMP/metrics" 2>/dev/null && zero && break
        sleep 0.1
        i=$((i + 1))
    done
    check "exporter after the frees: 0 pinned" zero
fi
touch "$TMP/stop2"
wait "$pid"
check "the probe's own checks held (exit 0, no FAIL)" "[ $? -eq 0 ] && ! grep -q FAIL $TMP/probe"
pid=""

# A ledger file of version 4 (the layout before each device's counters
# were put side by side, 238816 bytes): refused with one line naming the
# version, never read.
# The directory goes with the last ledger in it, which a test running at
# the same time may remove between a mkdir and the file's creation: both
# are retried.
python3 - "$DIR" "${G}old" <<'PY'
import os, struct, sys
head = struct.pack("<QII", 0x5652414d4c444734, 4, 238816)
for attempt in range(50):
    try:
        os.makedirs(sys.argv[1], mode=0o700, exist_ok=True)
        with open(os.path.join(sys.argv[1], sys.argv[2]), "wb") as f:
            f.write(head + b"\0" * (238816 - len(head)))
        break
    except FileNotFoundError:
        continue
PY
chmod 0600 "$DIR/${G}old"
"$VRAM" stat --json --no-nvml >"$TMP/json" 2>"$TMP/err"
rc=$?
check "an old ledger: stat still exits 0 with valid JSON" \
    "[ $rc -eq 0 ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' $TMP/json"
check "an old ledger: one line naming its version and the one this vram reads" \
    "[ \$(grep -c ${G}old $TMP/err) -eq 1 ] && grep -q '${G}old has version 4, this vram reads only 6' $TMP/err"
check "an old ledger: none of it is shown" "! grep -q '${G}old' $TMP/json"

test_end
