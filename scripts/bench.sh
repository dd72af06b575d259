#!/bin/sh
# SPDX-License-Identifier: MIT
# bench.sh -- `make bench`: replay the traces under every strategy five
# times (median ns/op) and print the machine and the table as Markdown that
# can be pasted into BENCHMARKS.md.
# Usage: scripts/bench.sh VRAM_BINARY TRACE...
set -eu

if [ $# -lt 2 ]; then
    echo "usage: scripts/bench.sh VRAM_BINARY TRACE..." >&2
    exit 2
fi
vram=$1
shift

cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1)
[ -n "$cpu" ] || cpu=$(uname -m)

echo "## Replay of the traces, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "- machine: $cpu, $(nproc) CPUs, $(uname -sr)"
echo "- vram: $("$vram" --version)"
echo "- command: \`vram replay --strategy all --repeat 5 $*\`"
echo "- ns/op: host time inside vram_alloc/vram_free per trace event, median of 5 runs;"
echo "  simulated NVIDIA H200 (143771 MiB), no cap."
echo
echo '```'
"$vram" replay --strategy all --repeat 5 "$@"
echo '```'
