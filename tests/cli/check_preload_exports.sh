#!/bin/sh
# SPDX-License-Identifier: MIT
# check_preload_exports.sh -- libvram-preload.so exports exactly the
# interposed symbols: the global list of its version script (generated from
# PRELOAD_HOOKS in src/preload/hooks.h), nothing else and nothing less; the
# linker's own markers are allowed (docs/STYLE.md, habit 2).
# Usage: tests/cli/check_preload_exports.sh path/to/libvram-preload.so MAP
set -eu

if [ $# -ne 2 ] || [ ! -r "$1" ] || [ ! -r "$2" ]; then
    echo "usage: check_preload_exports.sh LIBRARY.so VERSION_SCRIPT" >&2
    exit 2
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vram-exports.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM

nm -D --defined-only "$1" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' |
    grep -v -E '^(_init|_fini|_edata|_end|__bss_start)$' | sort -u >"$TMP/exported" || {
    echo "vram: nm failed on $1" >&2
    exit 1
}
# The names between "global:" and "local:", one per line.
tr -s ' \t\n;' '\n' <"$2" | sed -n '/^global:$/,/^local:$/p' |
    grep -v -E '^(global:|local:|)$' | sort -u >"$TMP/wanted"
[ -s "$TMP/wanted" ] || { echo "vram: no global symbols in $2" >&2; exit 1; }

bad=0
extra=$(comm -23 "$TMP/exported" "$TMP/wanted")
missing=$(comm -13 "$TMP/exported" "$TMP/wanted")
if [ -n "$extra" ]; then
    echo "exported by $1 but not interposed:"
    printf '%s\n' "$extra" | sed 's/^/  /'
    bad=1
fi
if [ -n "$missing" ]; then
    echo "interposed but not exported by $1:"
    printf '%s\n' "$missing" | sed 's/^/  /'
    bad=1
fi
[ $bad -eq 0 ] && echo "ok: $(wc -l <"$TMP/exported") exported symbols, exactly the interposed ones"
exit $bad
