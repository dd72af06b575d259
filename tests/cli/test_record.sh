#!/bin/sh
# SPDX-License-Identifier: MIT
# test_record.sh -- `vram record` as a user runs it: bad usage is one line
# and exit 2 before anything runs; the environment the command gets (the
# trace path, the frameworks' allocator settings, kept when the user set
# them, none with --driver-view, LD_PRELOAD from vram run's setup); and a
# recording of the fake driver (a probe that allocates as PyTorch's
# cudaMallocAsync backend does) that vram analyze reads, leak and rate
# included. The last line is "N passed, M failed"; exit 1 if any failed.
# Usage: test_record.sh VRAM PRELOAD_SO PROBE FAKECUDA_DIR
set -u

if [ $# -ne 4 ]; then
    echo "usage: test_record.sh VRAM PRELOAD_SO PROBE FAKECUDA_DIR" >&2
    exit 2
fi
VRAM=$1
LIB=$2
PROBE=$3
FAKE=$4

. "$(dirname "$0")/lib.sh"
absolute VRAM LIB PROBE FAKE
test_begin record

# rec VAR=VALUE... -- ARGS...: vram record over the fake driver (lib.sh's
# vram_cmd).
run_env="LD_LIBRARY_PATH=$FAKE"
rec() { vram_cmd record "$@"; }

P="--preload $LIB"

# ---- usage: one line, exit 2, nothing runs ----
rec -- --help
if [ "$rc" -eq 0 ] && grep -q -- "--driver-view" "$TMP/out"; then pass "record --help"; else fail "record --help" "exit $rc"; fi
rec -- $P
expect_error "no command" 2 "record: no command given"
rec -- $P --limit 6Q -- echo ran
expect_error "malformed --limit" 2 "record: --limit:"
rec -- $P -o "$TMP/no/such/dir/t.csv" -- echo ran
expect_error "an output that cannot be written" 2 "record: --output '$TMP/no/such/dir/t.csv':"
rec -- --preload "$TMP/missing.so" -- echo ran
expect_error "a missing preload library" 2 "record: --preload"
rec -- $P -o "$TMP/t.csv" -- "$TMP/no-such-command"
if [ "$rc" -eq 127 ]; then pass "a missing command: 127"; else fail "a missing command: 127" "exit $rc"; fi

# ---- the environment the command gets ----
rec -- $P -o "$TMP/env.csv" -- env
expect_line "VRAM_TRACE is the output, absolute" "VRAM_TRACE=$TMP/env.csv"
expect_line "PyTorch: the cudaMallocAsync backend" "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"
expect_line "TensorFlow: cuda_malloc_async" "TF_GPU_ALLOCATOR=cuda_malloc_async"
expect_line "JAX: the stream-ordered allocator" "XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async"
expect_line "JAX: no pool reserved at start" "XLA_PYTHON_CLIENT_PREALLOCATE=false"
expect_line "LD_PRELOAD: the library" "LD_PRELOAD=$LIB"
if grep -q "^VRAM_GROUP=run-" "$TMP/out"; then pass "a fresh group"; else fail "a fresh group" "no VRAM_GROUP"; fi
if [ "$rc" -eq 0 ] && grep -q "no GPU allocation was seen" "$TMP/err"; then
    pass "a command without CUDA: its status, and said"
else
    fail "a command without CUDA: its status, and said" "exit $rc"
fi
(cd "$TMP" && env LD_LIBRARY_PATH="$FAKE" "$VRAM" record $P -o rel.csv -- env >"$TMP/out" 2>"$TMP/err")
expect_line "a relative output is made absolute" "VRAM_TRACE=$TMP/rel.csv"
rec PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- $P -o "$TMP/env.csv" -- env
expect_line "PyTorch's other options are kept" \
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,backend:cudaMallocAsync"
rec PYTORCH_CUDA_ALLOC_CONF=backend:native TF_GPU_ALLOCATOR=bfc XLA_PYTHON_CLIENT_PREALLOCATE=true \
    -- $P -o "$TMP/env.csv" -- env
expect_line "a backend the user named is kept" "PYTORCH_CUDA_ALLOC_CONF=backend:native"
expect_line "JAX's preallocation the user set is kept" "XLA_PYTHON_CLIENT_PREALLOCATE=true"
expect_line "a TensorFlow allocator the user named is kept" "TF_GPU_ALLOCATOR=bfc"
if [ "$(grep -c "recorded as its pool" "$TMP/err")" -eq 2 ]; then
    pass "each kept pool is said"
else
    fail "each kept pool is said" "$(cat "$TMP/err")"
fi
rec -- $P --driver-view -o "$TMP/env.csv" -- env
expect_no "--driver-view: no framework setting" \
    "^(PYTORCH_CUDA_ALLOC_CONF|TF_GPU_ALLOCATOR|XLA_PYTHON_CLIENT_ALLOCATOR|XLA_PYTHON_CLIENT_PREALLOCATE)="
expect_line "--driver-view: still a trace" "VRAM_TRACE=$TMP/env.csv"
rec -- $P -o "$TMP/env.csv" -- sh -c 'exit 3'
if [ "$rc" -eq 3 ]; then pass "the command's exit status"; else fail "the command's exit status" "exit $rc"; fi

# ---- recording the fake driver ----
# json_number KEY FILE: the number after "KEY": in one-line JSON.
json_number() {
    sed -n "s/.*\"$1\": *\([-0-9.]*\).*/\1/p" "$2"
}
rec -- -o "$TMP/leak.csv.gz" --preload "$LIB" -- "$PROBE" --via gpa12000 train 40 256
if [ "$rc" -eq 0 ] && grep -q "record: $TMP/leak.csv.gz: .* allocations" "$TMP/err"; then
    pass "a recording: the command ran, the trace summarized"
else
    fail "a recording: the command ran, the trace summarized" "exit $rc: $(cat "$TMP/err" "$TMP/out")"
fi
"$VRAM" analyze --json "$TMP/leak.csv.gz" >"$TMP/a.json" 2>"$TMP/err"
rate=$(json_number leak_bytes_per_iteration "$TMP/a.json")
if grep -q '"leak": *true' "$TMP/a.json" && [ "${rate:-0}" -eq 262144 ]; then
    pass "vram analyze: the 256 KiB a step leak, at its rate ($rate B)"
else
    fail "vram analyze: the 256 KiB a step leak, at its rate" "rate ${rate:-none}: $(cat "$TMP/err")"
fi
"$VRAM" analyze --html "$TMP/a.html" "$TMP/leak.csv.gz" >/dev/null 2>&1
if [ -s "$TMP/a.html" ]; then pass "vram analyze --html reads it"; else fail "vram analyze --html reads it" "no page"; fi
rec -- -o "$TMP/capped.csv" --limit 8G --preload "$LIB" -- "$PROBE" --via gpa12000 train 40 256
"$VRAM" analyze "$TMP/capped.csv" >"$TMP/out" 2>"$TMP/err"
expect_line "the projection: the --limit of the recording is the cap" \
    "  at this rate the 8.00 GiB cap is full after about 32,000 more iterations"
rec -- -o "$TMP/clean.csv" --preload "$LIB" -- "$PROBE" --via dlsym train 40 0
"$VRAM" analyze --json "$TMP/clean.csv" >"$TMP/a.json" 2>"$TMP/err"
if grep -q '"leak": *false' "$TMP/a.json" && [ "$(json_number iterations "$TMP/a.json")" -ge 30 ]; then
    pass "a clean loop: no leak"
else
    fail "a clean loop: no leak" "$(head -c 300 "$TMP/a.json")"
fi
n_alloc=$(grep -c ',a,' "$TMP/clean.csv")
if [ "$n_alloc" -eq 161 ]; then
    pass "every tensor an allocation (161: the weights and 4 x 40)"
else
    fail "every tensor an allocation" "$n_alloc 'a' events"
fi

# ---- killed: nothing recorded is lost, nothing runs on, no ledger stays ----
# The probe runs under a name of its own, so that what is left running can
# be found; a wrapper shell in between, as a training script's launcher.
ME=$(id -u)
ln -s "$PROBE" "$TMP/probe-rec$$"
# (Anchored: vram record's own command line names it too.)
leftover() { pgrep -f "^$TMP/probe-rec$$" >/dev/null; }
# start_rec OUT ARGS...: vram record in the background, recording the
# endless probe loop (train 0) into OUT; waits for 50 lines in OUT. (A
# shell starts a background job with SIGINT ignored, which the command
# would inherit: python3 gives it back its default first.)
start_rec() {
    out=$1
    shift
    env LD_LIBRARY_PATH="$FAKE" python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$VRAM" record --preload "$LIB" -o "$out" "$@" \
        >"$TMP/out" 2>"$TMP/err" &
    rec_pid=$!
    i=0
    while [ $i -lt 200 ] && [ "$(zcat -f "$out" 2>/dev/null | wc -l)" -lt 50 ]; do
        sleep 0.05
        i=$((i + 1))
    done
}
# wait_rec: vram record's exit status into $rc (or 255 after 20 s).
wait_rec() {
    i=0
    while [ $i -lt 400 ] && kill -0 "$rec_pid" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
    if kill -0 "$rec_pid" 2>/dev/null; then kill -KILL "$rec_pid"; rc=255; else wait "$rec_pid"; rc=$?; fi
}
# whole OUT NAME: OUT reads in vram analyze with many events, and no
# ledger of vram record's group is left.
whole() {
    "$VRAM" analyze --json "$1" >"$TMP/a.json" 2>"$TMP/aerr"
    if [ $? -eq 0 ] && python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["events"] > 50' "$TMP/a.json"; then
        pass "$2: the trace reads, every event recorded"
    else
        fail "$2: the trace reads, every event recorded" "$(cat "$TMP/aerr")"
    fi
    if ls /dev/shm/vram-$ME/run-$rec_pid-* >/dev/null 2>&1; then
        fail "$2: no ledger left in /dev/shm" "$(ls /dev/shm/vram-$ME/)"
        rm -f /dev/shm/vram-$ME/run-$rec_pid-*
    else
        pass "$2: no ledger left in /dev/shm"
    fi
}
for sig in TERM INT HUP; do
    start_rec "$TMP/k$sig.csv" -- sh -c "\"$TMP/probe-rec$$\" --via gpa12000 train 0 0; exit 0"
    kill -$sig "$rec_pid"
    wait_rec
    if [ "$rc" -ne 255 ] && [ "$rc" -ne 0 ] && ! leftover; then
        pass "SIG$sig to vram record stops the command and what it started (exit $rc)"
    else
        fail "SIG$sig to vram record stops the command and what it started" "exit $rc"
        pkill -KILL -f "^$TMP/probe-rec$$"
    fi
    whole "$TMP/k$sig.csv" "SIG$sig to vram record"
done
# A command that ignores SIGTERM: the second signal kills it.
start_rec "$TMP/kig.csv" -- sh -c "trap '' TERM; exec \"$TMP/probe-rec$$\" --via gpa12000 train 0 0"
kill -TERM "$rec_pid"
sleep 0.5
if leftover && kill -0 "$rec_pid"; then
    pass "a command that ignores SIGTERM runs on after the first"
else
    fail "a command that ignores SIGTERM runs on after the first"
fi
kill -TERM "$rec_pid"
wait_rec
check "a second SIGTERM kills it (exit 137)" "[ $rc -eq 137 ] && ! leftover"
whole "$TMP/kig.csv" "two SIGTERMs"
# The command killed by SIGKILL, plain and gzip: the trace keeps every
# event (a gzip one is cut at its last one and says so), no ledger stays.
for ext in csv csv.gz; do
    start_rec "$TMP/k9.$ext" -- "$TMP/probe-rec$$" --via gpa12000 train 0 0
    pkill -KILL -f "^$TMP/probe-rec$$"
    wait_rec
    check "the command killed by SIGKILL ($ext): exit 137" "[ $rc -eq 137 ]"
    whole "$TMP/k9.$ext" "the command killed ($ext)"
    if [ "$ext" = csv.gz ]; then
        check "the gzip trace of a killed command: one warning where it stops" \
            "[ \$(wc -l <$TMP/aerr) -eq 1 ] && grep -q 'the trace is cut short here (the file ends inside its gzip stream' $TMP/aerr"
    else
        check "the plain trace of a killed command: no warning" "[ ! -s $TMP/aerr ]"
    fi
done
# vram record itself killed by SIGKILL: the command dies with it (its
# parent-death signal); the trace keeps every event; the ledger of the
# group stays (nothing can remove it), with no live member in it.
start_rec "$TMP/kv.csv" -- "$TMP/probe-rec$$" --via gpa12000 train 0 0
kill -KILL "$rec_pid"
wait_rec
i=0
while [ $i -lt 100 ] && leftover; do sleep 0.05; i=$((i + 1)); done
check "SIGKILL of vram record: the command ends with it" "! leftover"
"$VRAM" analyze "$TMP/kv.csv" >/dev/null 2>"$TMP/aerr"
check "SIGKILL of vram record: the trace reads, no warning" "[ $? -eq 0 ] && [ ! -s $TMP/aerr ]"
rm -f /dev/shm/vram-$ME/run-$rec_pid-*

# ---- a full disk: one line, what was written is kept ----
# A 64 KiB tmpfs in a private mount namespace (root only).
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null; then
    for ext in csv csv.gz; do
        unshare -m --propagation private sh -c "
            mkdir -p '$TMP/full' && mount -t tmpfs -o size=64k vram-full$$ '$TMP/full' || exit 99
            env LD_LIBRARY_PATH='$FAKE' '$VRAM' record --preload '$LIB' -o '$TMP/full/t.$ext' -- \
                '$PROBE' --via gpa12000 train 3000 0 >'$TMP/out' 2>'$TMP/err'
            echo \$? >'$TMP/rc'
            cp '$TMP/full/t.$ext' '$TMP/full.$ext'" 
        rc=$(cat "$TMP/rc" 2>/dev/null || echo none)
        kept=$(sed -n 's/^vram: trace: .*: No space left on device (the trace keeps the \([0-9]*\) events written before); no further events are recorded$/\1/p' "$TMP/err")
        if [ "$rc" = 0 ] && [ -n "$kept" ] && [ "$(grep -c 'No space left' "$TMP/err")" -eq 1 ]; then
            pass "a full disk ($ext): the command runs on, one line says how many events the trace keeps ($kept)"
        else
            fail "a full disk ($ext): one line" "exit $rc: $(head -n 3 "$TMP/err")"
        fi
        "$VRAM" analyze --json "$TMP/full.$ext" >"$TMP/a.json" 2>"$TMP/aerr"
        if [ -n "$kept" ] && python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["events"] == int(sys.argv[2])' "$TMP/a.json" "$kept"; then
            pass "a full disk ($ext): the trace reads its $kept events"
        else
            fail "a full disk ($ext): the trace reads its events" "$(cat "$TMP/aerr")"
        fi
    done
else
    echo "skipped: the full disk (needs root and unshare)"
fi

# ---- PyTorch's memory snapshot of a recording ----
rec -- $P --torch-snapshot "$TMP/no/such/dir/s.pickle" -o "$TMP/s.csv" -- echo ran
expect_error "--torch-snapshot that cannot be written: before anything runs" 2 \
    "record: --torch-snapshot '$TMP/no/such/dir/s.pickle':"
rec -- $P --snapshot-at step -o "$TMP/s.csv" -- echo ran
expect_error "--snapshot-at without --torch-snapshot" 2 "record: --snapshot-at needs --torch-snapshot"
rec -- -o "$TMP/snap.csv" --torch-snapshot "$TMP/snap.pickle" --preload "$LIB" -- \
    "$PROBE" --via gpa12000 train 12 256
if [ "$rc" -eq 0 ] && grep -q "record: $TMP/snap.pickle: PyTorch's memory snapshot" "$TMP/err" &&
    python3 - "$TMP/snap.pickle" "$TMP/snap.csv" <<'PY'
import pickle, sys
snap = pickle.load(open(sys.argv[1], "rb"))
allocs = sum(1 for line in open(sys.argv[2]) if ",a," in line)
trace = snap["device_traces"][0]
assert sum(e["action"] == "alloc" for e in trace) == allocs, (len(trace), allocs)
frees = [e for e in trace if e["action"] == "free_completed"]
addrs = {e["addr"] for e in trace if e["action"] == "alloc"}
assert len(addrs) == allocs and all(e["addr"] in addrs for e in frees)
live = sum(s["total_size"] for s in snap["segments"])
assert live == sum(b["size"] for s in snap["segments"] for b in s["blocks"]) and live > 0
PY
then
    pass "record --torch-snapshot: every allocation and free, the live set as segments"
else
    fail "record --torch-snapshot" "exit $rc: $(cat "$TMP/err")"
fi
rec -- -o "$TMP/snap.csv" --torch-snapshot "$TMP/snap.pickle" --snapshot-at nomark \
    --preload "$LIB" -- "$PROBE" --via gpa12000 train 4 256
if [ "$rc" -eq 1 ] && grep -q "^vram: $TMP/snap.csv: no mark 'nomark'" "$TMP/err"; then
    pass "--snapshot-at a mark the trace lacks: said, exit 1"
else
    fail "--snapshot-at a mark the trace lacks" "exit $rc: $(cat "$TMP/err")"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
