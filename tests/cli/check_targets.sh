#!/bin/sh
# SPDX-License-Identifier: MIT
# check_targets.sh -- the performance targets of the allocator, on every
# trace in data/traces (median of 3 runs each):
#   growth      fragmentation at most 1.10, host time at most 100 ns per
#               operation (measured 23-36 on the development machine);
#   expandable  fragmentation at most 1.02, host time at most 150 ns per
#               operation (measured 33-80), every replay of the simulator.
# Fragmentation is deterministic and checked as is. Host time depends on the
# machine: CI machines have measured 2.3x slower than the development machine
# on every trace and strategy alike, so a time over its limit is measured
# again (median of 7) and judged against the limit scaled by how much slower
# this machine runs the growth strategy than the development machine did
# (at least 1). A regression of the expandable strategy alone still fails.
# Labelled "slow": not run under the sanitizers, whose timings mean nothing.
# Usage: check_targets.sh VRAM_BINARY REPO_ROOT
set -eu
vram=$1
root=$2
out=$("$vram" replay --strategy growth --repeat 3 --json "$root"/data/traces/*.trace.csv.gz)
out="$out
$("$vram" replay --strategy expandable --repeat 3 --json "$root"/data/traces/*.trace.csv.gz)"
echo "$out"
echo "$out" | VRAM_BIN="$vram" TRACES="$root/data/traces" python3 -c '
import json, os, subprocess, sys
limits = {"growth": (1.10, 100.0), "expandable": (1.02, 150.0)}
# Growth ns/op per trace on the development machine (BENCHMARKS.md).
dev_growth = {"gpt2_bf16_b16": 36.1, "gpt2m_generate": 28.8,
              "leak_mlp": 22.6, "resnet50_fp32": 35.0}
rows = [json.loads(line) for line in sys.stdin if line.strip()]
ratios = sorted(r["ns_per_op"] / dev_growth[r["trace"]] for r in rows
                if r["strategy"] == "growth" and r["trace"] in dev_growth)
speed = max(1.0, ratios[len(ratios) // 2]) if ratios else 1.0
print("machine: %.2fx the development machine'"'"'s time (growth, median)" % speed)

def again(r):
    path = os.path.join(os.environ["TRACES"], r["trace"] + ".trace.csv.gz")
    p = subprocess.run([os.environ["VRAM_BIN"], "replay", "--strategy", r["strategy"],
                        "--repeat", "7", "--json", path],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.splitlines()[-1])

bad = 0
for r in rows:
    frag, ns = limits[r["strategy"]]
    ok_frag = r["fragmentation"] <= frag and r["ooms"] == 0
    note = ""
    if ok_frag and r["ns_per_op"] > ns:
        r2 = again(r)
        note = " (again: %.1f, limit x%.2f)" % (r2["ns_per_op"], speed)
        r["ns_per_op"] = r2["ns_per_op"]
        ns *= speed
    ok = ok_frag and r["ns_per_op"] <= ns
    print("%-16s %-10s frag %.3f (<= %.2f)  ns/op %6.1f (<= %.0f)  %s%s" % (
        r["trace"], r["strategy"], r["fragmentation"], frag, r["ns_per_op"], ns,
        "ok" if ok else "MISSED TARGET", note))
    bad += not ok
sys.exit(1 if bad else 0)
'
