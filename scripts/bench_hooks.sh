#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_hooks.sh -- `make bench`: what the preload library's hooks add to a
# driver call over the fake driver, paired in one process with a 95 %
# confidence interval (tests/preload/hook_cost.py): at most 200 ns per
# hooked call (400 per alloc+free pair) where the bare fake cuMemGetInfo_v2
# takes 25 ns, scaled by how much slower this machine runs the bare call;
# the method checked (an A/A run reports no cost, a planted 300 ns per
# hooked call is found); each hook's own time from the measurement build.
# A verdict on timings, so never part of `make test`.
# Usage: scripts/bench_hooks.sh BUILD_DIR
set -eu
B=${1:-build}
LD_LIBRARY_PATH="$B/tests/fakecuda" exec python3 "$(dirname "$0")/../tests/preload/hook_cost.py" \
    --bin "$B/tests/preload/hook_cost" --preload "$B/lib/libvram-preload.so" \
    --batches 4000 --seconds 20 --env VRAM_LIMIT=100G --bare-ref-ns 25 --validate \
    --timing-preload "$B/lib/libvram-preload-timing.so"
