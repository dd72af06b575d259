#!/bin/sh
# SPDX-License-Identifier: MIT
# test_conventions.sh -- the command-line conventions every `vram` subcommand
# keeps (tools/common/cliopt.c): --help and -h print the same complete help
# on standard output and exit 0 (a usage line, "Options:", -h/--help,
# -V/--version, "Exit status:"), `vram help CMD` prints it too, -V and
# --version print "vram VERSION", and an unknown option is one line naming
# the option and the command plus "try 'vram CMD --help'", exit 2. The
# commands are read from `vram help`, so a new one is tested without a
# change here. Also: sizes written 6Gi and 6GiB alike, `vram env --json`.
# Usage: tests/cli/test_conventions.sh path/to/vram
set -u

if [ $# -ne 1 ]; then
    echo "usage: test_conventions.sh VRAM_BINARY" >&2
    exit 2
fi
VRAM=$1

. "$(dirname "$0")/lib.sh"
test_begin conv

run() {
    "$VRAM" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

VERSION=$("$VRAM" --version)
case $VERSION in
"vram "[0-9]*) pass "vram --version: $VERSION" ;;
*) fail "vram --version" "'$VERSION'" ;;
esac

run help
COMMANDS=$(sed -n '/^Commands:/,/^$/p' "$TMP/out" | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p')
n=$(echo "$COMMANDS" | wc -w)
if [ "$n" -ge 10 ]; then pass "vram help lists $n commands"; else fail "vram help" "$n commands"; fi

for cmd in $COMMANDS; do
    run "$cmd" --help
    if [ "$rc" -ne 0 ]; then fail "$cmd --help" "exit $rc"; continue; fi
    if [ -s "$TMP/err" ]; then fail "$cmd --help" "wrote to stderr"; continue; fi
    cp "$TMP/out" "$TMP/help"
    missing=""
    head -n 1 "$TMP/help" | grep -q "^Usage: vram $cmd" || missing="$missing usage-line"
    for want in '^Options:' '^  -h, --help' '^  -V, --version' '^Exit status:'; do
        grep -q -- "$want" "$TMP/help" || missing="$missing '$want'"
    done
    long=$(awk 'length > 80' "$TMP/help" | wc -l)
    [ "$long" -eq 0 ] || missing="$missing $long-lines-over-80-columns"
    if [ -z "$missing" ]; then pass "$cmd --help is complete"; else fail "$cmd --help" "lacks$missing"; fi

    run "$cmd" -h
    if [ "$rc" -eq 0 ] && cmp -s "$TMP/out" "$TMP/help"; then pass "$cmd -h"; else fail "$cmd -h" "exit $rc or other text"; fi
    run help "$cmd"
    if [ "$rc" -eq 0 ] && cmp -s "$TMP/out" "$TMP/help"; then pass "vram help $cmd"; else fail "vram help $cmd" "exit $rc or other text"; fi
    for v in -V --version; do
        run "$cmd" $v
        if [ "$rc" -eq 0 ] && [ "$(cat "$TMP/out")" = "$VERSION" ]; then pass "$cmd $v"; else fail "$cmd $v" "exit $rc, '$(cat "$TMP/out")'"; fi
    done

    run "$cmd" --no-such-option
    want="vram: $cmd: unknown option '--no-such-option' (try 'vram $cmd --help')"
    if [ "$rc" -eq 2 ] && [ "$(cat "$TMP/err")" = "$want" ] && [ ! -s "$TMP/out" ]; then
        pass "$cmd --no-such-option"
    else
        fail "$cmd --no-such-option" "exit $rc, '$(head -n 1 "$TMP/err")'"
    fi
    run "$cmd" -Y
    if [ "$rc" -eq 2 ] && grep -q "^vram: $cmd: unknown option '-Y' (try 'vram $cmd --help')\$" "$TMP/err"; then
        pass "$cmd -Y"
    else
        fail "$cmd -Y" "exit $rc, '$(head -n 1 "$TMP/err")'"
    fi
done

run help no-such-command
if [ "$rc" -eq 2 ] && grep -q "unknown command 'no-such-command'" "$TMP/err"; then pass "vram help no-such-command"; else fail "vram help no-such-command" "exit $rc"; fi
run --no-such-option
if [ "$rc" -eq 2 ] && grep -q "^vram: unknown option '--no-such-option' (try 'vram --help')" "$TMP/err"; then pass "vram --no-such-option"; else fail "vram --no-such-option" "exit $rc"; fi

# A flag given a value, a value missing: one line each, exit 2.
run stat --json=yes
if [ "$rc" -eq 2 ] && grep -q "^vram: stat: option '--json' takes no value (try 'vram stat --help')" "$TMP/err"; then pass "stat --json=yes"; else fail "stat --json=yes" "exit $rc"; fi
run top -d
if [ "$rc" -eq 2 ] && grep -q "^vram: top: option '-d' needs a value" "$TMP/err"; then pass "top -d"; else fail "top -d" "exit $rc"; fi

# Sizes: 6Gi is 6GiB is 6G (one parser, src/base/size.c).
for s in 6G 6Gi 6GiB 6GB 6gi; do
    run plan --arch gpt2 --layers 2 --hidden 64 --heads 2 --vocab 100 --positions 64 \
        --batch 1 --seq 8 --gpu-memory "$s" --json
    if [ "$rc" -eq 0 ] && grep -q '"gpu_memory_bytes": *6442450944' "$TMP/out"; then
        pass "--gpu-memory $s is 6 GiB"
    else
        fail "--gpu-memory $s" "exit $rc"
    fi
done

# vram env --json: every variable of the table, with value and source.
VRAM_LIMIT=6Gi run env --json
if [ "$rc" -eq 0 ] && /usr/bin/python3 - "$TMP/out" <<'EOF'; then pass "env --json"; else fail "env --json" "exit $rc"; fi
import json, sys
d = json.load(open(sys.argv[1]))
rows = {v["name"]: v for v in d["variables"]}
assert len(rows) >= 10, rows
assert rows["VRAM_LIMIT"]["source"] == "environment", rows["VRAM_LIMIT"]
assert rows["VRAM_STRATEGY"]["source"] == "default", rows["VRAM_STRATEGY"]
assert rows["VRAM_STRATEGY"]["value"] == "expandable", rows["VRAM_STRATEGY"]
assert rows["VRAM_STRATEGY"]["default_from"] == "vram", rows["VRAM_STRATEGY"]
assert rows["TF_DEVICE_MIN_SYS_MEMORY_IN_MB"]["default_from"] == "TensorFlow", rows
assert "default_from" not in rows["VRAM_LIMIT"], rows["VRAM_LIMIT"]
EOF
# A malformed value: flagged in the output, exit 2 (vram env, --json, --check).
VRAM_STRATEGY=nope run env --json
if [ "$rc" -eq 2 ] && /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
r = [v for v in d["variables"] if v["name"] == "VRAM_STRATEGY"][0]
assert "error" in r and "value" not in r, r' "$TMP/out"; then pass "env --json: a malformed value as error"; else fail "env --json malformed" "exit $rc"; fi
run env --json --markdown
if [ "$rc" -eq 2 ] && grep -q "cannot be combined" "$TMP/err"; then pass "env --json --markdown"; else fail "env --json --markdown" "exit $rc"; fi

test_end
