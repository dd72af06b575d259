#!/bin/sh
# check_targets.sh -- the performance targets of the allocator, on every
# trace in data/traces: under `growth`, fragmentation at most 1.10 and host
# time at most 100 ns per operation (median of 3; measured ~30, so the
# margin absorbs a loaded CI machine). Labelled "slow": not run under the
# sanitizers, whose timings mean nothing.
# Usage: check_targets.sh VRAM_BINARY REPO_ROOT
set -eu
vram=$1
root=$2
out=$("$vram" replay --strategy growth --repeat 3 --json "$root"/data/traces/*.trace.csv.gz)
echo "$out"
echo "$out" | python3 -c '
import json, sys
bad = 0
for line in sys.stdin:
    r = json.loads(line)
    ok = r["fragmentation"] <= 1.10 and r["ns_per_op"] <= 100 and r["ooms"] == 0
    print("%-16s frag %.3f  ns/op %6.1f  %s" % (r["trace"], r["fragmentation"], r["ns_per_op"],
          "ok" if ok else "MISSED TARGET"))
    bad += not ok
sys.exit(1 if bad else 0)
'
