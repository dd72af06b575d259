#!/bin/sh
# check_targets.sh -- the performance targets of the allocator, on every
# trace in data/traces (median of 3 runs each):
#   growth      fragmentation at most 1.10, host time at most 100 ns per
#               operation (measured ~30);
#   expandable  fragmentation at most 1.02, host time at most 150 ns per
#               operation (measured 35-65), every replay of the simulator.
# The margins absorb a loaded CI machine. Labelled "slow": not run under the
# sanitizers, whose timings mean nothing.
# Usage: check_targets.sh VRAM_BINARY REPO_ROOT
set -eu
vram=$1
root=$2
out=$("$vram" replay --strategy growth --repeat 3 --json "$root"/data/traces/*.trace.csv.gz)
out="$out
$("$vram" replay --strategy expandable --repeat 3 --json "$root"/data/traces/*.trace.csv.gz)"
echo "$out"
echo "$out" | python3 -c '
import json, sys
limits = {"growth": (1.10, 100.0), "expandable": (1.02, 150.0)}
bad = 0
for line in sys.stdin:
    r = json.loads(line)
    frag, ns = limits[r["strategy"]]
    ok = r["fragmentation"] <= frag and r["ns_per_op"] <= ns and r["ooms"] == 0
    print("%-16s %-10s frag %.3f (<= %.2f)  ns/op %6.1f (<= %.0f)  %s" % (
        r["trace"], r["strategy"], r["fragmentation"], frag, r["ns_per_op"], ns,
        "ok" if ok else "MISSED TARGET"))
    bad += not ok
sys.exit(1 if bad else 0)
'
