#!/bin/sh
# SPDX-License-Identifier: MIT
# check_exports.sh -- the shared library exports only vram_* symbols
# (docs/STYLE.md, habit 2); the linker's own markers are allowed.
# Usage: tests/cli/check_exports.sh path/to/libvram.so
set -eu

if [ $# -ne 1 ] || [ ! -r "$1" ]; then
    echo "usage: check_exports.sh LIBRARY.so" >&2
    exit 2
fi
syms=$(nm -D --defined-only "$1" | awk 'NF >= 3 { print $3 }') || {
    echo "vram: nm failed on $1" >&2
    exit 1
}
[ -n "$syms" ] || { echo "vram: $1 exports nothing" >&2; exit 1; }
bad=$(printf '%s\n' "$syms" | sed 's/@.*//' |
      grep -v -E '^(vram_.*|_init|_fini|_edata|_end|__bss_start)$' || true)
if [ -n "$bad" ]; then
    echo "symbols exported by $1 that do not start with vram_:"
    printf '%s\n' "$bad" | sed 's/^/  /'
    exit 1
fi
echo "ok: $(printf '%s\n' "$syms" | wc -l) exported symbols, all vram_*"
