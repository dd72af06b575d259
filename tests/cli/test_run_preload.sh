#!/bin/sh
# SPDX-License-Identifier: MIT
# test_run_preload.sh -- `vram run` with the real preload library over the
# fake driver (tests/fakecuda), where the quota acts: --report on a command
# whose only allocation is refused (it counts the refusal, not "no GPU
# memory used"), the trace a quota'd command records (limit= in its
# metadata, which `vram analyze` and `vram doctor` judge the OOM against),
# and per-device entries that name no GPU of the fake's two (UUIDs
# GPU-facecda0-0001-4000-8000-00000000000N): the library disables CUDA
# with one line, `vram run` refuses to start.
# Usage: test_run_preload.sh VRAM LIBVRAM_PRELOAD.so PROBE_DIR FAKECUDA_DIR
set -u

if [ $# -ne 4 ]; then
    echo "usage: test_run_preload.sh VRAM LIBVRAM_PRELOAD PROBE_DIR FAKECUDA_DIR" >&2
    exit 2
fi
VRAM=$1
PRELOAD=$2
PROBE=$3/preload_probe
FAKE=$4

. "$(dirname "$0")/lib.sh"
test_begin runp
export LD_LIBRARY_PATH="$FAKE:$3${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ---- --report: a command whose only allocation is refused ----
"$VRAM" run --preload "$PRELOAD" --limit 64M --group "rp$$" --report -- \
    "$PROBE" alloc 128 0 2 >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 0 ] &&
    grep -q "^vram: run: GPU-[0-9a-f-]*: refused 1 allocation, none granted, quota 64.00 MiB\$" "$TMP/err" &&
    ! grep -q "no GPU memory used" "$TMP/err"; then
    pass "--report counts the refusal of a command that got nothing"
else
    fail "--report counts the refusal" "exit $rc"
fi
if ls /dev/shm 2>/dev/null | grep -q "rp$$"; then
    fail "--report leaves no ledger behind" "$(ls /dev/shm | grep "rp$$")"
else
    pass "--report leaves no ledger behind"
fi

# ---- --report: exact peaks and refusals of short commands, from the ledger ----
# (FAKECUDA_MEMORY: 8 GiB devices, room for the sizes below.)
# report NAME EXPECTED-LINE ARGS...: `vram run --report ARGS` must exit 0
# and print EXPECTED-LINE (with the device's UUID in place of @) to stderr.
report() {
    name=$1
    want=$2
    shift 2
    FAKECUDA_MEMORY=8G "$VRAM" run --preload "$PRELOAD" --report "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    line=$(printf '%s\n' "$want" | sed 's/@/GPU-facecda0-0001-4000-8000-000000000000/')
    if [ $rc -eq 0 ] && grep -qxF -- "$line" "$TMP/err"; then
        pass "$name"
    else
        fail "$name" "exit $rc, no line '$line' in: $(cat "$TMP/err")"
    fi
}
report "--report: 4 x 512 MiB granted, 2 refused, exit at once" \
    "vram: run: @: peak 2.00 GiB in use at once by 1 process, quota 2.50 GiB, 2 allocations refused" \
    --limit 2560M -- "$PROBE" burst 512 4 2 768
report "--report: a 3 GiB command that exits at once" \
    "vram: run: @: peak 3.00 GiB in use at once by 1 process, quota 4.00 GiB, 0 allocations refused" \
    --limit 4G -- "$PROBE" burst 3072 1 0 0
report "--report: two short commands one after the other: the most at once, not the sum" \
    "vram: run: @: peak 1.00 GiB in use at once by 2 processes, quota 4.00 GiB, 1 allocation refused" \
    --limit 4G -- sh -c "'$PROBE' burst 512 2 0 0 && '$PROBE' burst 256 4 1 4096"
report "--report: two at once: their sum" \
    "vram: run: @: peak 768.00 MiB in use at once by 2 processes, quota 4.00 GiB, 0 allocations refused" \
    --limit 4G -- sh -c "'$PROBE' hold 512 0 '$TMP/stop' >'$TMP/held' & i=0; while [ \$i -lt 100 ] && ! grep -q held '$TMP/held'; do sleep 0.1; i=\$((i+1)); done; '$PROBE' burst 256 1 0 0; touch '$TMP/stop'; wait"
report "--report: no limit: the peak all the same" \
    "vram: run: @: peak 1.50 GiB in use at once by 1 process, quota none, 0 allocations refused" \
    --group "rq$$" -- "$PROBE" burst 512 3 0 0

# ---- no limit from any source: one line says so; the command runs ----
"$VRAM" run --preload "$PRELOAD" -- "$PROBE" alloc 32 0 0 >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
    grep -q "^vram: run: no GPU memory limit" "$TMP/err"; then
    pass "no limit: one line on stderr, the command runs"
else
    fail "no limit: one line" "exit $rc"
fi

# ---- the trace of a command under a quota names the quota ----
VRAM_TRACE=$TMP/t.csv "$VRAM" run --preload "$PRELOAD" --limit 64M -- \
    "$PROBE" alloc 128 0 2 >"$TMP/out" 2>"$TMP/err"
if head -n 1 "$TMP/t.csv" | grep -q "^# workload=vram-preload .* limit=67108864\$"; then
    pass "the trace's metadata carries limit="
else
    fail "the trace's metadata carries limit=" "$(head -n 1 "$TMP/t.csv")"
fi
"$VRAM" analyze --json "$TMP/t.csv" >"$TMP/out" 2>"$TMP/err"
if /usr/bin/python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))["oom"]
assert o["cap_bytes"] == 64 << 20 and o["cause"] == "over_cap", o' "$TMP/out"; then
    pass "vram analyze judges the OOM against the trace's limit"
else
    fail "vram analyze judges the OOM against the trace's limit" "$(cat "$TMP/out")"
fi
# vram doctor on a trace of one refused allocation: readable sentences.
"$VRAM" doctor "$TMP/t.csv" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 1 ] &&
    grep -q "^\[problem\] oom-too-big: the last allocation (128.00 MiB) was refused with nothing else live: it alone exceeds the cap (64.00 MiB)\." "$TMP/out" &&
    grep -q "^\[ok\] preallocation: no allocation in the trace was granted" "$TMP/out" &&
    ! grep -q "live then: \.\|0.0x less" "$TMP/out"; then
    pass "vram doctor on a refused allocation alone"
else
    fail "vram doctor on a refused allocation alone" "exit $rc: $(cat "$TMP/out")"
fi

# ---- a per-device entry that names no GPU fails closed ----
U0=GPU-facecda0-0001-4000-8000-000000000000
U1=GPU-facecda0-0001-4000-8000-000000000001
# closed NAME LINE: the last probe stopped at cuInit (exit 1) and stderr
# is exactly LINE.
closed() {
    if [ "$rc" -eq 1 ] && [ "$(cat "$TMP/err")" = "$2" ] && grep -q "FAIL cuInit returned 3" "$TMP/out"; then
        pass "$1"
    else
        fail "$1" "exit $rc"
    fi
}
# The library alone (no vram run to check first): one line, and CUDA is
# disabled in the process (the entry would limit nothing).
VRAM_LIMIT=GPU-deadbeef:1G LD_PRELOAD=$PRELOAD "$PROBE" alloc 32 0 0 >"$TMP/out" 2>"$TMP/err"
rc=$?
closed "the library: a UUID entry that names no GPU disables CUDA, one line" \
    "vram: VRAM_LIMIT entry 'GPU-deadbeef' names no GPU (0: $U0, 1: $U1): it would limit nothing; CUDA is disabled in this process"
VRAM_LIMIT=0:1G,5:1G LD_PRELOAD=$PRELOAD "$PROBE" alloc 32 1 0 >"$TMP/out" 2>"$TMP/err"
rc=$?
closed "the library: an ordinal past the last GPU disables CUDA" \
    "vram: VRAM_LIMIT entry '5' names no GPU (0: $U0, 1: $U1): it would limit nothing; CUDA is disabled in this process"
CUDA_DEVICE_MEMORY_LIMIT_7=1g LD_PRELOAD=$PRELOAD "$PROBE" alloc 32 0 0 >"$TMP/out" 2>"$TMP/err"
rc=$?
closed "the library: HAMi's variable for a GPU that does not exist disables CUDA" \
    "vram: CUDA_DEVICE_MEMORY_LIMIT_7 names no GPU (0: $U0, 1: $U1): it would limit nothing; CUDA is disabled in this process"
# Ordinals are the process's: CUDA_VISIBLE_DEVICES=1 leaves it one GPU.
CUDA_VISIBLE_DEVICES=1 VRAM_LIMIT=1:1G LD_PRELOAD=$PRELOAD "$PROBE" alloc 32 0 0 >"$TMP/out" 2>"$TMP/err"
rc=$?
closed "the library: ordinal 1 where CUDA_VISIBLE_DEVICES leaves one GPU" \
    "vram: VRAM_LIMIT entry '1' names no GPU (0: $U1): it would limit nothing; CUDA is disabled in this process"
VRAM_LIMIT="$U1:1G,0:1G" LD_PRELOAD=$PRELOAD "$PROBE" alloc 32 0 0 >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ] && [ ! -s "$TMP/err" ]; then
    pass "entries that name GPUs: nothing said, the program runs"
else
    fail "entries that name GPUs: nothing said, the program runs" "$(cat "$TMP/err")"
fi
# A UUID of a GPU of the host that CUDA_VISIBLE_DEVICES hides from this
# process names a GPU: a launcher may give each worker one GPU of a job's
# list. The one it sees is limited (64M: 128 MiB refused).
CUDA_VISIBLE_DEVICES=1 VRAM_LIMIT="$U0:1G,$U1:64M" LD_PRELOAD=$PRELOAD "$PROBE" alloc 128 0 2 \
    >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ] && grep -q "refused by VRAM_LIMIT; quota 64.00 MiB" "$TMP/err" &&
    ! grep -q "names no GPU" "$TMP/err"; then
    pass "a UUID of the host hidden by CUDA_VISIBLE_DEVICES: the process runs, limited by its own"
else
    fail "a UUID of the host hidden by CUDA_VISIBLE_DEVICES" "$(cat "$TMP/err")"
fi
# vram run sees the devices through the driver: refused, nothing run.
for spec in GPU-deadbeef:1G 2:1G "0:1G,GPU-facecda1:50%"; do
    rm -f "$TMP/ran"
    "$VRAM" run --preload "$PRELOAD" --limit "$spec" -- touch "$TMP/ran" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ $rc -eq 2 ] && [ ! -e "$TMP/ran" ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
        grep -q "^vram: run: VRAM_LIMIT entry '.*' names no GPU (0: $U0, 1: $U1): it would limit nothing; nothing was run\$" "$TMP/err"; then
        pass "vram run --limit $spec: refused, one line, nothing run"
    else
        fail "vram run --limit $spec: refused" "exit $rc"
    fi
done
# vram run is stricter than the library: the command inherits its
# CUDA_VISIBLE_DEVICES, so a UUID hidden from vram run limits nothing the
# command sees.
CUDA_VISIBLE_DEVICES=1 "$VRAM" run --preload "$PRELOAD" --limit "$U0:1G" -- true >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 2 ] && grep -q "names no GPU (0: $U1)" "$TMP/err"; then
    pass "vram run: a UUID hidden by CUDA_VISIBLE_DEVICES is refused"
else
    fail "vram run: a UUID hidden by CUDA_VISIBLE_DEVICES is refused" "exit $rc"
fi
"$VRAM" run --preload "$PRELOAD" --limit "$U1:64M,0:64M" -- "$PROBE" alloc 128 1 2 >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 0 ] && ! grep -q "names no GPU" "$TMP/err"; then
    pass "vram run: entries naming visible devices run and limit"
else
    fail "vram run: entries naming visible devices run and limit" "exit $rc"
fi
# No driver to ask: the run goes on (the library checks in each process).
FAKECUDA_FAIL=cuInit "$VRAM" run --preload "$PRELOAD" --limit GPU-deadbeef:1G -- touch "$TMP/ran" \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 0 ] && [ -e "$TMP/ran" ]; then
    pass "vram run: no driver to list the devices, the command runs"
else
    fail "vram run: no driver to list the devices, the command runs" "exit $rc"
fi

# ---- HAMi's variables that VRAM_GROUP turns off: one line, once ----
VRAM_GROUP="hg$$" CUDA_DEVICE_MEMORY_LIMIT=64m CUDA_DEVICE_MEMORY_LIMIT_1=32m \
    CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/vgpu.cache LD_PRELOAD=$PRELOAD \
    "$PROBE" alloc 128 0 0 >"$TMP/out" 2>"$TMP/err"
rc=$?
want="vram: CUDA_DEVICE_MEMORY_LIMIT, CUDA_DEVICE_MEMORY_LIMIT_1, CUDA_DEVICE_MEMORY_SHARED_CACHE ignored: VRAM_GROUP is set and VRAM_LIMIT is not, and HAMi's variables count only when both are unset; give the limit as VRAM_LIMIT"
if [ $rc -eq 0 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && [ "$(cat "$TMP/err")" = "$want" ]; then
    pass "HAMi's variables turned off by VRAM_GROUP: one line"
else
    fail "HAMi's variables turned off by VRAM_GROUP: one line" "exit $rc"
fi
for env in "VRAM_LIMIT=1G VRAM_GROUP=hg$$" "VRAM_GROUP=" "VRAM_LIMIT=1G"; do
    env $env CUDA_DEVICE_MEMORY_LIMIT=64m LD_PRELOAD=$PRELOAD \
        "$PROBE" alloc 32 0 0 >"$TMP/out" 2>"$TMP/err"
    if ! grep -q "ignored" "$TMP/err"; then
        pass "HAMi's variables with $env: nothing said"
    else
        fail "HAMi's variables with $env: nothing said" "$(cat "$TMP/err")"
    fi
done
# vram run turns HAMi's limits into VRAM_LIMIT before setting its group.
CUDA_DEVICE_MEMORY_LIMIT=64m "$VRAM" run --preload "$PRELOAD" -- "$PROBE" alloc 128 0 2 \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 0 ] && ! grep -q "ignored" "$TMP/err"; then
    pass "vram run under HAMi's variables: they limit, nothing said"
else
    fail "vram run under HAMi's variables: they limit, nothing said" "exit $rc"
fi

# ---- names from other processes reach the terminal escaped ----
# A member of the group whose command name is a clear-screen sequence, a
# line end and a stray byte holds 8 MiB: the library's refusal line names
# it; and `vram run --report` names a device by the ledger's UUID bytes.
FILL=$(dirname "$3")/ledger_fill
U0=GPU-facecda0-0001-4000-8000-000000000000
BADNAME=$(printf 'x\033[2J\033]0;t\007\nz\377')
cp "$FILL" "$TMP/$BADNAME"
"$TMP/$BADNAME" "hn$$" "$U0" 8 16 >"$TMP/fill.bad" 2>&1 &
hostile=$!
i=0
while [ $i -lt 600 ] && ! grep -q ready "$TMP/fill.bad"; do sleep 0.1; i=$((i + 1)); done
# clean FILE: valid UTF-8, no control character but the line end, no C1.
clean() {
    python3 -c '
import sys
t = open(sys.argv[1], "rb").read().decode("utf-8")
sys.exit(1 if [c for c in t if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f] else 0)' "$1"
}
VRAM_GROUP="hn$$" VRAM_LIMIT=16M LD_PRELOAD=$PRELOAD "$PROBE" alloc 16 0 2 >"$TMP/out" 2>"$TMP/err"
if clean "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
    grep -qF "(pid $hostile x\\x1b[2J\\x1b]0;t\\x07\\x0az\\xff 8.00 MiB)" "$TMP/err"; then
    pass "the refusal line names a hostile member escaped, on one line"
else
    fail "the refusal line names a hostile member escaped" "$(od -c "$TMP/err" | head -n 3)"
fi
kill "$hostile" 2>/dev/null
wait "$hostile" 2>/dev/null
# A member of the run's group, started by the command, holds 8 MiB on a
# device whose UUID in the ledger is hostile bytes: the report names it.
BADUUID=$(printf 'GPU-\033[31mred\nx\377')
"$VRAM" run --preload "$PRELOAD" --group "hr$$" --report -- sh -c \
    '"$0" "$1" "$2" 8 0 >"$3" 2>&1 & p=$!
     until grep -q ready "$3" || ! kill -0 $p 2>/dev/null; do sleep 0.1; done; kill $p; wait $p' \
    "$FILL" "hr$$" "$BADUUID" "$TMP/fill.badu" >"$TMP/out" 2>"$TMP/err"
if clean "$TMP/err" && grep -qF 'vram: run: GPU-\x1b[31mred\x0ax\xff: ' "$TMP/err"; then
    pass "--report names a device by the ledger's bytes, escaped"
else
    fail "--report names a device by the ledger's bytes, escaped" "$(od -c "$TMP/err" | head -n 3)"
fi
kill "$hostile" 2>/dev/null
wait "$hostile" 2>/dev/null
rm -f "/dev/shm/vram-$(id -u)/hn$$" "/dev/shm/vram-$(id -u)/hr$$"

test_end
