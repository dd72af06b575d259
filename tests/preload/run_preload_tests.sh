#!/bin/sh
# SPDX-License-Identifier: MIT
# run_preload_tests.sh -- libvram-preload.so preloaded into test programs
# (probe.c) that reach the fake CUDA driver as real programs do: a direct
# link, dlopen + dlsym, and cuGetProcAddress the way the CUDA runtime uses
# it (versions 11030 and 12000, with and without the per-thread-stream
# flag). It covers: refusal with CUDA_ERROR_OUT_OF_MEMORY on every path and
# frees giving the quota back; what the device really holds (rounding,
# pages, pools' reserves, graphs' memory, mappings, exports: quota_truth
# and the memory scenarios); the refusal line; reported totals and free
# memory (never negative); 4 processes x 4 threads racing in one group
# (the fake's own shared count never passes the quota); kill -9 of a
# member; CUDA_VISIBLE_DEVICES reordered or given as UUIDs; fork; malformed
# settings; HAMi's variables; NVML; passive mode; the trace (VRAM_TRACE).
# The last line is "N passed, M failed"; the exit status is 1 if anything
# failed.
# Usage: run_preload_tests.sh LIBVRAM_PRELOAD.so PROBE_DIR FAKECUDA_DIR
set -u

if [ $# -ne 3 ]; then
    echo "usage: run_preload_tests.sh LIBVRAM_PRELOAD PROBE_DIR FAKECUDA_DIR" >&2
    exit 2
fi
PRELOAD=$1
BIN=$2
FAKE=$3
PROBE=$BIN/preload_probe
LINKED=$BIN/preload_probe_linked

. "$(dirname "$0")/../cli/lib.sh"
test_begin preload
GROUP="t$$"
test_cleanup() {
    rm -f /dev/shm/vram-$(id -u)/$GROUP-*
    rmdir /dev/shm/vram-$(id -u) 2>/dev/null
}
# The fakes first on the library path, ahead of any real driver.
LIBPATH="$FAKE:$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# A failure shows the probe's output as well as its errors.
fail() {
    failed=$((failed + 1))
    echo "FAIL $1: $2"
    sed 's/^/     out: /' "$TMP/out" | head -n 8
    sed 's/^/     err: /' "$TMP/err" | head -n 5
}

# run VAR=VALUE... -- PROGRAM ARGS...: run PROGRAM with the preload and
# those variables; stdout in $TMP/out, stderr in $TMP/err, status in $rc.
# A run that hangs is killed after 60 s (status 124).
run() {
    vars=""
    while [ "$1" != "--" ]; do
        vars="$vars $1"
        shift
    done
    shift
    # shellcheck disable=SC2086
    env $vars LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$LIBPATH" timeout 60 "$@" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# expect_lines NAME REGEX MIN MAX: exit 0, between MIN and MAX stderr
# lines, each matching the extended REGEX.
expect_lines() {
    if [ "$rc" -ne 0 ]; then fail "$1" "exit $rc"; return; fi
    n=$(wc -l <"$TMP/err")
    if [ "$n" -lt "$3" ] || [ "$n" -gt "$4" ]; then
        fail "$1" "$n stderr lines, expected $3..$4"
        return
    fi
    if grep -v -q -E -- "$2" "$TMP/err"; then
        fail "$1" "a stderr line does not match '$2'"
        return
    fi
    pass "$1"
}

# wait_for FILE TEXT: until FILE holds TEXT (60 s at most: a hang). (Background
# holders run without `timeout`, whose child a kill -9 would miss: they
# give up by themselves after 60 s.)
wait_for() {
    i=0
    while ! grep -q -- "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        if [ $i -gt 600 ]; then return 1; fi
        sleep 0.1
    done
}

Q="VRAM_LIMIT=64M"
UUID0=GPU-facecda0-0001-4000-8000-000000000000
UUID1=GPU-facecda0-0001-4000-8000-000000000001
REFUSED="^vram: out of GPU memory quota on $UUID0: [A-Za-z0-9_]+ of [0-9.]+ MiB refused by VRAM_LIMIT; quota 64.00 MiB, group [a-z0-9-]+ uses [0-9.]+ MiB \(pid [0-9]+ preload_probe[_a-z]* [0-9.]+ MiB\)$"

# ---- every path, every way of reaching the driver ----
for via in "direct" "direct --ptsz" "dlsym" "dlsym --ptsz" "gpa11030" "gpa12000" \
    "gpa12000 --ptsz"; do
    # shellcheck disable=SC2086
    run $Q -- "$LINKED" --via $via paths
    expect_lines "paths via $via: quota refuses, frees give back" "$REFUSED" 1 15
done
run $Q -- "$PROBE" --via gpa12000 paths
if head -n 1 "$TMP/err" | grep -q -E "^vram: out of GPU memory quota on $UUID0: cuMemAlloc_v2 of 32.00 MiB refused by VRAM_LIMIT; quota 64.00 MiB, group pid-[0-9]+-[0-9]+ uses 48.00 MiB \(pid [0-9]+ preload_probe 48.00 MiB\)$"; then
    pass "the refusal line names the call, sizes, group and biggest users"
else
    fail "the refusal line names the call, sizes, group and biggest users" "$(head -n 1 "$TMP/err")"
fi
# A driver that calls its own hooked entry point from inside another: the
# inner call is not counted again (48 MiB of managed memory, quota 64).
run $Q FAKECUDA_NESTED=1 -- "$PROBE" --via gpa12000 paths
expect_lines "re-entry: a hooked call made inside a hook forwards" "$REFUSED" 1 15
for via in dlsym gpa12000; do
    run $Q -- "$PROBE" --via $via vmm
    expect_lines "virtual memory via $via: counted to the last cuMemRelease" "$REFUSED" 1 1
done

# ---- what the device holds, as the driver holds it ----
# quota_truth (tests/gpu/quota_truth.c, the GPU battery's program): each
# way of getting memory pushed against a 64 MiB quota with a 16 MiB
# context; the fake NVML's per-process figure (what the fake driver holds
# for the process, context included) must never pass the quota, and the
# refusal must be the driver's out-of-memory error.
TRUTH=$BIN/quota_truth
for case in tiny odd mib_plus1 2mib_minus1 2mib_plus1 huge fragment pitch array array_tiny \
    array3d mipmap vmm release_after_map pool pool_threshold pool_created graph dlvsym; do
    run $Q FAKECUDA_CONTEXT_BYTES=16M -- "$TRUTH" "$case" --quota 67108864
    if [ "$rc" -eq 0 ] && grep -q '"pass": true' "$TMP/out"; then
        pass "quota_truth $case: NVML's figure within the quota, refused at it"
    else
        fail "quota_truth $case: NVML's figure within the quota, refused at it" "exit $rc"
    fi
done
for case in capture pool_trim pool_destroy graph_upload export ipc getinfo; do
    run $Q -- "$PROBE" --via gpa12000 memory "$case"
    expect_lines "memory $case: the device never holds more than the quota counts" \
        "^vram: out of GPU memory quota on $UUID0: " 0 3
done

# ---- the routes around the interposer ----
run $Q -- "$PROBE" --via dlsym bypass "$BIN/libvram_route_helper.so"
expect_lines "glibc's dlsym by dlvsym or libc's handle, private lookups, RTLD_DEEPBIND, dlmopen: closed" \
    "^vram: (dlopen of .* with RTLD_DEEPBIND: loaded without it|dlmopen of .* refused|out of GPU memory quota on $UUID0: cuMemAlloc_v2 of 32.00 MiB refused)" 3 3

# ---- what each route hands out ----
for via in "dlsym" "dlsym --ptsz" "gpa11030" "gpa12000" "gpa12000 --ptsz"; do
    # shellcheck disable=SC2086
    run $Q -- "$PROBE" --via $via routes
    expect_ok "active, via $via: hooks for hooked names, the driver's otherwise"
    # shellcheck disable=SC2086
    run -- "$PROBE" --via $via routes real
    expect_ok "passive, via $via: the driver's own functions"
done
run $Q -- "$PROBE" versions
expect_ok "cuGetProcAddress: old ABIs pass, itself by version, _ptsz by flag"
run -- "$PROBE" versions real
expect_ok "cuGetProcAddress, passive: the driver's answers untouched"

# ---- reports ----
run $Q -- "$PROBE" info 0 64 64
expect_ok "cuMemGetInfo and cuDeviceTotalMem report the quota"
# After the first answer the hooks no longer ask the driver which device
# the context is on: with one visible device at all, with two while the
# context is one they have seen (a per-thread cache of context -> device).
run $Q FAKECUDA_DEVICES=1 -- "$PROBE" ctxdevice 64
expect_ok "one device: the current device is not asked again"
run $Q -- "$PROBE" ctxdevice 64
expect_ok "two devices: a context's device is not asked again"
for via in dlsym gpa12000; do
    run $Q -- "$PROBE" --via $via ctxswitch 64
    expect_ok "two devices, via $via: switching contexts charges each its own device, cuCtxGetDevice not asked in the steady state"
done
run VRAM_LIMIT=0:64M -- "$PROBE" --via gpa12000 info 1 1024 1024
expect_ok "a device without a limit reports its physical figures"
run VRAM_LIMIT=25% -- "$PROBE" --via gpa11030 info 0 256 256
expect_ok "a fractional quota is a share of the device"
run VRAM_GROUP=$GROUP-g -- "$PROBE" info 0 1024 1024
expect_ok "a group without a limit counts but does not limit"

# Free never negative: a member holding more than another member's
# (smaller) quota.
rm -f "$TMP/stop" "$TMP/hold"
env VRAM_GROUP=$GROUP-neg VRAM_LIMIT=64M LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$LIBPATH" \
    "$PROBE" hold 48 0 "$TMP/stop" >"$TMP/hold" 2>&1 &
holder=$!
if wait_for "$TMP/hold" held; then
    run VRAM_GROUP=$GROUP-neg VRAM_LIMIT=32M -- "$PROBE" info 0 32 0
    expect_ok "free is 0, not negative, when the group holds more than the quota"
    run VRAM_GROUP=$GROUP-neg VRAM_LIMIT=32M -- "$PROBE" alloc 2 0 2
    expect_lines "and every allocation is refused" "^vram: out of GPU memory quota" 1 1
else
    : >"$TMP/out"; cp "$TMP/hold" "$TMP/err"
    fail "free is 0, not negative" "the holder did not start"
fi
touch "$TMP/stop"
wait $holder

# ---- N processes x M threads in one group ----
rm -f "$TMP/shared"
pids=""
i=0
for via in direct dlsym gpa11030 gpa12000; do
    env VRAM_GROUP=$GROUP-race $Q FAKECUDA_SHARED="$TMP/shared" LD_PRELOAD="$PRELOAD" \
        LD_LIBRARY_PATH="$LIBPATH" timeout 120 "$LINKED" --via $via race 4 20000 \
        >"$TMP/race$i" 2>&1 &
    pids="$pids $!"
    i=$((i + 1))
done
racers_ok=1
for p in $pids; do
    wait "$p" || racers_ok=0
done
cat "$TMP"/race[0-9] >"$TMP/out"
: >"$TMP/err"
if [ $racers_ok -eq 1 ]; then
    pass "4 processes x 4 threads racing: only quota refusals"
else
    fail "4 processes x 4 threads racing: only quota refusals" "a racer failed"
fi
run FAKECUDA_SHARED="$TMP/shared" -- "$PROBE" peak 64
expect_ok "the race: the fake's own high-water mark never passed the quota"
run VRAM_GROUP=$GROUP-race $Q -- "$PROBE" info 0 64 64
expect_ok "the race: the group's use is back to 0"

# ---- kill -9 of a member holding memory ----
rm -f "$TMP/stop" "$TMP/hold"
env VRAM_GROUP=$GROUP-kill $Q LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$LIBPATH" \
    "$PROBE" hold 48 0 "$TMP/stop" >"$TMP/hold" 2>&1 &
holder=$!
if wait_for "$TMP/hold" held; then
    run VRAM_GROUP=$GROUP-kill $Q -- "$PROBE" alloc 48 0 2
    expect_lines "a live member's share is respected" "^vram: out of GPU memory quota" 1 1
    kill -9 $holder
    wait $holder 2>/dev/null
    run VRAM_GROUP=$GROUP-kill $Q -- "$PROBE" alloc 48 0 0
    expect_ok "kill -9, reaped: its share is reclaimed at the next allocation"
else
    kill -9 $holder 2>/dev/null
    : >"$TMP/out"; cp "$TMP/hold" "$TMP/err"
    fail "kill -9" "the holder did not start"
fi

# ---- CUDA_VISIBLE_DEVICES: limits follow the physical GPU ----
for cvd in "1,0" "$UUID1,$UUID0" "GPU-facecda0-0001-4000-8000-000000000001,0"; do
    run CUDA_VISIBLE_DEVICES=$cvd VRAM_LIMIT=$UUID1:32M -- "$PROBE" info 0 32 32
    expect_ok "CUDA_VISIBLE_DEVICES=$cvd, limit by UUID: ordinal 0 is GPU 1, limited"
    run CUDA_VISIBLE_DEVICES=$cvd VRAM_LIMIT=$UUID1:32M -- "$PROBE" info 1 1024 1024
    expect_ok "CUDA_VISIBLE_DEVICES=$cvd, limit by UUID: ordinal 1 is GPU 0, not limited"
    run CUDA_VISIBLE_DEVICES=$cvd VRAM_LIMIT=$UUID1:32M -- "$PROBE" alloc 48 0 2
    expect_lines "CUDA_VISIBLE_DEVICES=$cvd: refused on ordinal 0" \
        "^vram: out of GPU memory quota on $UUID1: " 1 1
    run CUDA_VISIBLE_DEVICES=$cvd VRAM_LIMIT=$UUID1:32M -- "$PROBE" alloc 48 1 0
    expect_ok "CUDA_VISIBLE_DEVICES=$cvd: granted on ordinal 1"
done
run CUDA_VISIBLE_DEVICES=1,0 VRAM_LIMIT=0:32M -- "$PROBE" info 0 32 32
expect_ok "ordinal keys count after CUDA_VISIBLE_DEVICES"
# Two members that number the GPUs differently share one count per GPU.
rm -f "$TMP/stop" "$TMP/hold"
env CUDA_VISIBLE_DEVICES=1,0 VRAM_GROUP=$GROUP-cvd $Q LD_PRELOAD="$PRELOAD" \
    LD_LIBRARY_PATH="$LIBPATH" "$PROBE" hold 48 0 "$TMP/stop" >"$TMP/hold" 2>&1 &
holder=$!
if wait_for "$TMP/hold" held; then
    run VRAM_GROUP=$GROUP-cvd $Q -- "$PROBE" alloc 32 1 2
    expect_lines "members with other orders: GPU 1's use is shared" \
        "^vram: out of GPU memory quota on $UUID1: " 1 1
    run VRAM_GROUP=$GROUP-cvd $Q -- "$PROBE" alloc 32 0 0
    expect_ok "members with other orders: GPU 0 is free"
else
    : >"$TMP/out"; cp "$TMP/hold" "$TMP/err"
    fail "members with other orders" "the holder did not start"
fi
touch "$TMP/stop"
wait $holder

# ---- fork ----
for via in dlsym gpa12000; do
    run $Q -- "$PROBE" --via $via fork
    expect_lines "fork via $via: a child's allocations are its own" \
        "^vram: out of GPU memory quota" 1 1
done

# ---- malformed settings: CUDA off, one line, the process goes on ----
for setting in "VRAM_LIMIT=6X" "VRAM_LIMIT=0:" "VRAM_GROUP=a/b" "CUDA_DEVICE_MEMORY_LIMIT=12Q"; do
    name=${setting%%=*}
    for via in dlsym gpa12000 direct; do
        run "$setting" -- "$LINKED" --via $via malformed
        if grep -q "still running" "$TMP/out"; then
            expect_lines "$setting via $via: cuInit fails, one line, no exit" \
                "^vram: .*$name.*; CUDA is disabled in this process$" 1 1
        else
            fail "$setting via $via" "the process did not run on"
        fi
    done
done
run VRAM_LIMIT=6X -- "$PROBE" routes
expect_lines "malformed: the hooks are still handed out (so cuInit fails)" \
    "; CUDA is disabled in this process$" 1 1

# ---- the trace (VRAM_TRACE) ----
# check_trace NAME FILE: FILE is a trace the reader accepts, judged here by
# awk (this script has no vram binary): the header, 7 fields a line, ids
# allocated once, each free naming a live id with its size and device, each
# 'o' with a size above 0; then "A F O" (counts of each op) in $TMP/counts.
check_trace() {
    awk -F, '
        /^#/ { next }
        !hdr { hdr = 1; if ($0 != "t_us,op,id,size,stream,device,label") bad = "header " $0; next }
        NF != 7 { bad = "line " NR ": " NF " fields"; exit }
        $2 == "a" { if ($3 in seen) { bad = "id " $3 " twice"; exit }
                    seen[$3] = 1; live[$3] = $4 "/" $6; na++; next }
        $2 == "f" { if (live[$3] != $4 "/" $6) { bad = "free of " $3 " not live"; exit }
                    delete live[$3]; nf++; next }
        $2 == "o" { if ($4 <= 0 || $3 != 0) { bad = "bad o line " NR; exit }; no++; next }
        { bad = "op " $2 " on line " NR; exit }
        END { if (!hdr) bad = "no header"
              if (bad != "") { print bad; exit 1 }
              print na + 0, nf + 0, no + 0 }' "$2" >"$TMP/counts" 2>&1
    if [ $? -ne 0 ]; then fail "$1" "$(cat "$TMP/counts")"; return 1; fi
    return 0
}
run $Q VRAM_TRACE="$TMP/t.csv" -- "$PROBE" --via gpa12000 paths
expect_lines "trace: the paths scenario runs as without one" "$REFUSED" 1 15
if check_trace "trace: every counted allocation, free and refusal" "$TMP/t.csv"; then
    read -r na nf no <"$TMP/counts"
    if [ "$na" -gt 0 ] && [ "$na" -eq "$nf" ] && [ "$no" -gt 0 ] &&
        head -n 1 "$TMP/t.csv" | grep -q "^# workload=vram-preload pid=[0-9]* group="; then
        pass "trace: every counted allocation, free and refusal ($na a, $nf f, $no o)"
    else
        fail "trace: every counted allocation, free and refusal" "$na a, $nf f, $no o"
    fi
fi
run $Q VRAM_TRACE="$TMP/t.csv.gz" -- "$PROBE" fork
expect_lines "trace (gzip) across fork: the child runs as without one" \
    "^vram: out of GPU memory quota" 1 1
if gzip -dc "$TMP/t.csv.gz" >"$TMP/t2.csv" 2>"$TMP/err" &&
    check_trace "trace across fork: only the parent's events, each once" "$TMP/t2.csv"; then
    read -r na nf no <"$TMP/counts"
    if [ "$na" -eq 1 ] && [ "$nf" -eq 1 ] && [ "$no" -eq 0 ]; then
        pass "trace across fork: only the parent's events, each once"
    else
        fail "trace across fork: only the parent's events, each once" "$na a, $nf f, $no o"
    fi
fi
run $Q VRAM_TRACE=/nonexistent-dir/t.csv -- "$PROBE" info 0 64 64
expect_lines "trace that cannot be opened: one line, the quota still applies" \
    "^vram: VRAM_TRACE: /nonexistent-dir/t.csv: No such file or directory; no trace is recorded$" 1 1
run VRAM_TRACE="$TMP/t3.csv" -- "$PROBE" info 0 1024 1024
if [ ! -s "$TMP/t3.csv" ]; then
    expect_ok "passive: no trace is written"
else
    fail "passive: no trace is written" "$TMP/t3.csv exists"
fi

# ---- HAMi's variables ----
run CUDA_DEVICE_MEMORY_LIMIT=64m -- "$PROBE" info 0 64 64
expect_ok "CUDA_DEVICE_MEMORY_LIMIT=64m is 64 MiB"
run CUDA_DEVICE_MEMORY_LIMIT_1=32m -- "$PROBE" info 1 32 32
expect_ok "CUDA_DEVICE_MEMORY_LIMIT_1 limits device 1"
run CUDA_DEVICE_MEMORY_LIMIT_1=32m -- "$PROBE" info 0 1024 1024
expect_ok "CUDA_DEVICE_MEMORY_LIMIT_1 leaves device 0 alone"

# ---- NVML ----
run VRAM_LIMIT=$UUID0:64M -- "$PROBE" nvml
expect_ok "NVML's memory info reports the quota and the group's use"

# ---- passive and private groups ----
run -- "$PROBE" ledger-file passive
expect_ok "passive: no ledger file, the driver's figures"
run -- "$PROBE" info 0 1024 1024
expect_ok "passive: cuMemGetInfo is the fake's physical figures"
env $Q LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$LIBPATH" "$PROBE" \
    ledger-file active >"$TMP/out" 2>"$TMP/err" &
p=$!
wait $p
rc=$?
if [ $rc -eq 0 ] && ! ls /dev/shm/vram-"$(id -u)"/pid-$p-* >/dev/null 2>&1; then
    pass "active alone: a private group, its ledger file gone at exit"
else
    fail "active alone: a private group, its ledger file gone at exit" "exit $rc"
fi

test_end
