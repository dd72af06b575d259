#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_hook_misses.sh -- the cache lines the preload library's counted
# hooks touch after a driver call: callgrind's cache simulation of
# tests/preload/hook_cost over the fake driver, which walks 1 MB at each
# call as the real driver's work does to the CPU's caches. Prints the data
# read misses per alloc + free pair of each counted step (the reservation
# before cuMemAlloc_v2, the table's put after it, the release after
# cuMemFree_v2) and per cuMemGetInfo_v2, and the instructions per pair.
# A measure that a loaded machine does not change, for comparing builds.
# Usage: scripts/bench_hook_misses.sh BUILD_DIR
set -eu

if [ $# -ne 1 ]; then
    echo "usage: scripts/bench_hook_misses.sh BUILD_DIR" >&2
    exit 2
fi
command -v valgrind >/dev/null || { echo "bench_hook_misses.sh: valgrind is not installed" >&2; exit 2; }
b=$(cd "$1" && pwd)
for f in "$b/lib/libvram-preload.so" "$b/tests/preload/hook_cost" "$b/tests/fakecuda/libcuda.so.1"; do
    [ -e "$f" ] || { echo "bench_hook_misses.sh: $f is missing (build it first)" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
FAKECUDA_DEVICES=1 FAKECUDA_EVICT=1000000 VRAM_LIMIT=100G LD_LIBRARY_PATH="$b/tests/fakecuda" \
    LD_PRELOAD="$b/lib/libvram-preload.so" valgrind --tool=callgrind --cache-sim=yes \
    --D1=32768,8,64 --LL=1048576,16,64 --callgrind-out-file="$tmp/out" \
    --toggle-collect=hook_reserve --toggle-collect=hook_granted --toggle-collect=taken_freed \
    --toggle-collect=track_take --toggle-collect=room_left --toggle-collect=effective_limit \
    "$b/tests/preload/hook_cost" --batches 40 >"$tmp/json" 2>"$tmp/log" ||
    { cat "$tmp/log" >&2; exit 1; }
callgrind_annotate --inclusive=yes --auto=no --threshold=100 --show=Ir,D1mr "$tmp/out" \
    >"$tmp/ann" 2>/dev/null
python3 - "$tmp/ann" "$tmp/json" <<'PY'
import json, re, sys
ann, raw = open(sys.argv[1]).read(), json.loads(open(sys.argv[2]).read().splitlines()[-1])
def incl(fn):
    for line in ann.splitlines():
        if re.search(r"[:/]%s \[" % fn, line):
            nums = [int(x.replace(",", "")) for x in re.findall(r"([\d,]+) \(", line)]
            if len(nums) >= 2:
                return nums[0], nums[1]
            if len(nums) == 1:
                return nums[0], 0
    return 0, 0
# Calls: the hooked side's, warm-up batches included (hook_cost.c). The
# plain and the stream-ordered pairs run the same hooks: a pair is either.
b = raw["batches"]
pairs = (b + b // 20 + 2) * raw["pairs"] * (2 if "async_hooked" in raw else 1)
infos = (b + b // 20 + 2) * raw["info_calls"]
rows = [("reserve (alloc, before)", "hook_reserve"), ("put (alloc, after)", "hook_granted"),
        ("take (free, before)", "track_take"), ("release (free, after)", "taken_freed")]
total_m = total_i = 0
for name, fn in rows:
    ir, m = incl(fn)
    total_m += m
    total_i += ir
    print("%-26s %6.1f read misses a pair" % (name, m / pairs))
print("%-26s %6.1f read misses, %d instructions a pair" % ("a pair", total_m / pairs,
                                                           round(total_i / pairs)))
ir, m = incl("room_left")
print("%-26s %6.1f read misses" % ("a cuMemGetInfo_v2", m / infos))
PY
