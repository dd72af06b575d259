#!/bin/sh
# SPDX-License-Identifier: MIT
# demo.sh -- `make demo`: replay the real traces under every strategy on a
# simulated H200 and print vram's table beside the other allocators'
# figures, which are read from the README.md next to the traces (the one
# place they are written down).
# Usage: scripts/demo.sh VRAM_BINARY TRACE...
set -eu

if [ $# -lt 2 ]; then
    echo "usage: scripts/demo.sh VRAM_BINARY TRACE..." >&2
    exit 2
fi
vram=$1
shift
readme="$(dirname "$1")/README.md"

echo "vram demo: $# real PyTorch allocation traces replayed under every strategy on a simulated NVIDIA H200"
echo "(fragmentation = peak bytes reserved from the device / peak bytes in use; 1.000 is ideal)"
echo
"$vram" replay --strategy all "$@"
echo

if [ ! -r "$readme" ]; then
    echo "vram: $readme not found: no peer figures to show" >&2
    exit 0
fi
echo "Other allocators on the same traces (fragmentation), from $readme:"
# The rows of the first table after the "What other allocators did" heading;
# long column titles are shortened, figures are printed as written.
awk '
function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
function short(s) {
    if (s ~ /expandable/) return "PyTorch expandable_segments"
    if (s ~ /caching/) return "PyTorch caching"
    if (s ~ /cudaMallocAsync/) return "cudaMallocAsync pool"
    if (s ~ /BFC/) return "TensorFlow BFC growth"
    return s
}
/^## / { insec = ($0 ~ /What other allocators/); next }
insec && /^\|/ {
    if ($0 ~ /^\|[ \t-]*-[ \t|:-]*$/) next          # the |---| line
    n = split($0, f, "|")
    nrow++; ncell[nrow] = 0
    for (i = 2; i < n; i++) {
        c = trim(f[i]); if (nrow == 1) c = short(c)
        cell[nrow, i - 1] = c; ncell[nrow] = i - 1
        if (length(c) > w[i - 1]) w[i - 1] = length(c)
    }
    next
}
insec && nrow > 0 && /^[ \t]*$/ { insec = 0 }
END {
    if (nrow == 0) { print "  (no table found)"; exit }
    for (r = 1; r <= nrow; r++) {
        line = ""
        for (c = 1; c <= ncell[r]; c++) {
            if (c == 1) line = sprintf("%-" w[c] "s", cell[r, c])
            else line = line sprintf("  %" w[c] "s", cell[r, c])
        }
        print line
    }
}' "$readme"
