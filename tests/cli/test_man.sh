#!/bin/sh
# SPDX-License-Identifier: MIT
# test_man.sh -- the man pages the build makes (cmake/gen-man.sh): each
# renders without a groff warning and has a NAME line man's index can
# read; vram(1) has ENVIRONMENT with every variable `vram env` knows, FILES
# and SEE ALSO naming policy.conf(5) and vram(3); vram(3) has every
# function of vram.h; policy.conf(5) every keyword of the policy parser;
# every page also exists compressed as it is installed (gzip -9n: no name,
# no time, the same text). Exit 77 when the build made no pages (help2man).
# Usage: test_man.sh VRAM BUILD_DIR REPO_ROOT
set -u
VRAM=$1
BUILD=$2
ROOT=$3
MAN=$BUILD/man
[ -f "$MAN/stamp" ] || { echo "skipped: the build made no man pages (help2man)"; exit 77; }
command -v groff >/dev/null || { echo "skipped: no groff"; exit 77; }
. "$(dirname "$0")/lib.sh"
test_begin man

for page in "$MAN"/man1/*.1 "$MAN"/man3/vram.3 "$MAN"/man5/policy.conf.5; do
    name=$(basename "$page")
    if [ ! -f "$page" ]; then
        fail "$name exists"
        continue
    fi
    groff -man -ww -z "$page" >"$TMP/warn" 2>&1
    check "$name renders without a groff warning" "[ ! -s '$TMP/warn' ]"
    if command -v lexgrog >/dev/null; then
        check "$name: man's index reads its NAME line" "lexgrog '$page' >/dev/null 2>&1"
    fi
    dir=$(basename "$(dirname "$page")")
    gz=$MAN/gz/$dir/$name.gz
    # gzip's header: flags (byte 3) without FNAME, MTIME (bytes 4-7) zero.
    check "$name.gz: the same page, compressed without a name or a time" \
        "gzip -dc '$gz' | cmp -s - '$page' && [ \"\$(od -An -tx1 -j3 -N5 '$gz' | tr -d ' ')\" = 0000000000 ]"
done

render() { MANWIDTH=100 man -l "$1" 2>/dev/null | col -b; }
render "$MAN/man1/vram.1" >"$TMP/vram.1.txt"
for sect in ENVIRONMENT FILES "SEE ALSO"; do
    check "vram(1) has $sect" "grep -q '^$sect\$' '$TMP/vram.1.txt'"
done
"$VRAM" env --json | /usr/bin/python3 -c '
import json, sys
for v in json.load(sys.stdin)["variables"]:
    print(v["name"])' >"$TMP/names"
missing=""
while read -r n; do
    sed -n '/^ENVIRONMENT$/,/^FILES$/p' "$TMP/vram.1.txt" | grep -qF "       $n" || missing="$missing $n"
done <"$TMP/names"
check "vram(1)'s ENVIRONMENT lists every variable of vram env ($(wc -l <"$TMP/names"))${missing:+; missing:$missing}" \
    "[ -z '$missing' ] && [ -s '$TMP/names' ]"
check "vram(1)'s SEE ALSO names policy.conf(5) and vram(3)" \
    "grep -q 'policy.conf(5)' '$TMP/vram.1.txt' && grep -q 'vram(3)' '$TMP/vram.1.txt'"

render "$MAN/man3/vram.3" >"$TMP/vram.3.txt"
sed -n 's/^VRAM_API [^(]*[ *]\(vram_[a-z_0-9]*\)(.*/\1/p' "$ROOT/include/vram.h" | sort -u >"$TMP/functions"
missing=""
while read -r f; do
    grep -q "[ *]$f(" "$TMP/vram.3.txt" || missing="$missing $f"
done <"$TMP/functions"
check "vram(3) declares every function of vram.h ($(wc -l <"$TMP/functions"))${missing:+; missing:$missing}" \
    "[ -z '$missing' ] && [ \$(wc -l <'$TMP/functions') -gt 30 ]"
check "vram(3) has the header's statuses and its description" \
    "grep -q 'VRAM_E_OOM' '$TMP/vram.3.txt' && grep -q 'This header is the specification' '$TMP/vram.3.txt'"

render "$MAN/man5/policy.conf.5" >"$TMP/policy.txt"
keywords=$(sed -n 's/^#define KEYWORDS "\(.*\)"/\1/p' "$ROOT/src/policy/policy.c" | tr -d ,)
missing=""
for k in $keywords; do
    grep -qE "^       $k( |$)" "$TMP/policy.txt" || missing="$missing $k"
done
check "policy.conf(5) describes every keyword of the parser ($keywords)${missing:+; missing:$missing}" \
    "[ -z '$missing' ] && [ -n '$keywords' ]"
check "policy.conf(5)'s example is contrib/policy/policy.conf" \
    "grep -q 'user alice 20G' '$TMP/policy.txt' && grep -q 'reader group gpu-admins' '$TMP/policy.txt'"
test_end
