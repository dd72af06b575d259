#!/bin/sh
# SPDX-License-Identifier: MIT
# run_cli_tests.sh -- drive the `vram` command as a user would: exit codes,
# one-line errors, `vram replay` on a real trace under every strategy (the
# strategy names are read from `vram replay --help`, so new ones are tested
# without a change here), --json output, --min-limit, malformed traces and
# bad option values. The last line is "N passed, M failed"; the exit status
# is 1 if anything failed.
# Usage: tests/cli/run_cli_tests.sh path/to/vram REPO_ROOT
set -u

if [ $# -ne 2 ]; then
    echo "usage: run_cli_tests.sh VRAM_BINARY REPO_ROOT" >&2
    exit 2
fi
VRAM=$1
ROOT=$2
TRACE=$ROOT/data/traces/leak_mlp.trace.csv.gz
LEAK_OPS=1971
KEYS="trace strategy ops ns_per_op peak_in_use_bytes peak_reserved_bytes fragmentation ooms backend_calls"

. "$(dirname "$0")/lib.sh"
test_begin cli

# run ARGS...: run vram; stdout in $TMP/out, stderr in $TMP/err, status in $rc.
run() {
    "$VRAM" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# expect_rc NAME CODE: the last run exited with CODE.
expect_rc() {
    if [ "$rc" -eq "$2" ]; then pass "$1"; else fail "$1" "exit $rc, expected $2"; fi
}

# jcheck NAME LINES EXPR...: $TMP/out holds LINES JSON objects, one a line
# (LINES 0: any number), each with every key of $KEYS, and each EXPR (Python,
# the object is `o`) holds for every one of them.
jcheck() {
    jname=$1
    jlines=$2
    shift 2
    if python3 -c '
import json, sys
keys, want = sys.argv[1].split(), int(sys.argv[2])
exprs = sys.argv[3:]
lines = [l for l in sys.stdin if l.strip()]
if want and len(lines) != want:
    sys.exit("%d lines, expected %d" % (len(lines), want))
if not lines:
    sys.exit("no output")
for l in lines:
    o = json.loads(l)
    missing = [k for k in keys if k not in o]
    if missing:
        sys.exit("missing keys %s in %s" % (missing, l.strip()))
    for e in exprs:
        if not eval(e, {}, {"o": o}):
            sys.exit("%s is false for %s" % (e, l.strip()))
' "$KEYS" "$jlines" "$@" <"$TMP/out" 2>"$TMP/jerr"; then
        pass "$jname"
    else
        fail "$jname" "$(tail -n 1 "$TMP/jerr")"
    fi
}

# jget KEY: the value of KEY in the first JSON line of $TMP/out.
jget() {
    python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())[sys.argv[1]])' "$1" \
        <"$TMP/out" 2>/dev/null
}

# ---- the command itself ----
run
expect_rc "vram alone is a usage error" 2
if grep -qi '^usage: vram' "$TMP/err"; then pass "vram alone prints the usage to stderr"; else fail "vram alone prints the usage to stderr" "no usage line"; fi
run help
expect_rc "vram help" 0
run --version
expect_ok "vram --version"
run frobnicate
expect_error "unknown command" 2

# ---- replay: usage ----
run replay
expect_error "replay without a trace" 2
run replay --help
expect_ok "replay --help"
for opt in --strategy --limit --device-memory --repeat --min-limit --warm --json; do
    if grep -q -- "$opt" "$TMP/out"; then pass "help lists $opt"; else fail "help lists $opt" "missing"; fi
done
STRATEGIES=$(sed -n 's/^Strategies://p' "$TMP/out" | sed 's/(.*//')
n_strategies=$(echo "$STRATEGIES" | wc -w)
if [ "$n_strategies" -ge 3 ]; then
    pass "help names the strategies ($STRATEGIES)"
else
    fail "help names the strategies" "found '$STRATEGIES'"
fi

# ---- replay of a real trace under every strategy ----
for s in $STRATEGIES; do
    run replay --strategy "$s" --json "$TRACE"
    expect_ok "replay --strategy $s --json"
    jcheck "replay --strategy $s: figures" 1 \
        "o['strategy'] == '$s'" "o['trace'] == 'leak_mlp'" "o['ops'] == $LEAK_OPS" \
        "o['ooms'] == 0" "o['fragmentation'] >= 1.0" "o['ns_per_op'] > 0" \
        "o['peak_reserved_bytes'] >= o['peak_in_use_bytes'] > 0" "o['backend_calls'] >= 1" \
        "'min_limit_bytes' not in o"
    run replay --strategy "$s" "$TRACE"
    expect_ok "replay --strategy $s (table)"
    if grep -q '^trace  *strategy' "$TMP/out" && grep -q "^leak_mlp  *$s " "$TMP/out"; then
        pass "replay --strategy $s: table has a header and a row"
    else
        fail "replay --strategy $s: table has a header and a row" "$(head -n 2 "$TMP/out")"
    fi
done

run replay --json "$TRACE"
expect_ok "replay default strategy"
jcheck "default strategy is growth" 1 "o['strategy'] == 'growth'"

run replay --strategy all --json "$TRACE"
expect_ok "replay --strategy all"
jcheck "--strategy all: one line per strategy" "$n_strategies" "o['ops'] == $LEAK_OPS"

run replay --strategy preallocate,growth --repeat 3 --json "$TRACE" "$TRACE"
expect_ok "comma list, --repeat 3, two traces"
jcheck "comma list x two traces: four lines" 4 "o['strategy'] in ('preallocate', 'growth')"

run replay --strategy growth,expandable --warm --json "$TRACE"
expect_ok "replay --warm"
jcheck "--warm: a timed second pass, same figures" 2 "o['warm'] is True" "o['ops'] == $LEAK_OPS" "o['ooms'] == 0"
run replay --json "$TRACE"
jcheck "without --warm: warm is false" 1 "o['warm'] is False"

# The same trace uncompressed, and a tiny hand-written .csv.
gzip -dc "$TRACE" >"$TMP/leak_plain.trace.csv"
run replay --json "$TMP/leak_plain.trace.csv"
expect_ok "replay of an uncompressed .csv"
jcheck "uncompressed: same figures" 1 "o['ops'] == $LEAK_OPS" "o['trace'] == 'leak_plain'"
printf 't_us,op,id,size,stream\n1,a,0,1048576,0\n2,a,1,512,0\n3,f,0,1048576,0\n' >"$TMP/tiny.csv"
run replay --json "$TMP/tiny.csv"
expect_ok "replay of a tiny .csv with an unfreed id"
jcheck "tiny: 3 ops, peak 1 MiB + 512" 1 "o['ops'] == 3" "o['peak_in_use_bytes'] == 1049088"

# ---- --min-limit and --limit ----
run replay --strategy all --min-limit --json "$TRACE"
expect_ok "replay --min-limit"
jcheck "--min-limit: min_limit_bytes >= peak in use, whole MiB" "$n_strategies" \
    "o['min_limit_bytes'] is not None" \
    "o['min_limit_bytes'] >= o['peak_in_use_bytes']" "o['min_limit_bytes'] % 1048576 == 0"
for s in $STRATEGIES; do
    run replay --strategy "$s" --min-limit --json "$TRACE"
    min=$(jget min_limit_bytes)
    case $min in
    '' | *[!0-9]*) fail "--min-limit $s" "no min_limit_bytes"; continue ;;
    esac
    # --json's integer bytes go back with their unit, B.
    run replay --strategy "$s" --limit "${min}B" --json "$TRACE"
    expect_ok "--strategy $s --limit min_limit (${min}B)"
    jcheck "--strategy $s --limit min_limit: no OOM" 1 "o['ooms'] == 0"
    run replay --strategy "$s" --limit "$((min - 1048576))B" --json "$TRACE"
    jcheck "--strategy $s --limit min_limit - 1 MiB: OOMs" 1 "o['ooms'] > 0"
done
run replay --limit 100M --json "$TRACE"
expect_ok "replay --limit 100M"
jcheck "--limit 100M: OOMs counted, ops unchanged" 1 "o['ooms'] > 0" "o['ops'] == $LEAK_OPS" \
    "o['peak_in_use_bytes'] <= 100 * 1048576"
run replay --device-memory 1GiB --json "$TRACE"
expect_ok "replay --device-memory 1GiB"
jcheck "--device-memory 1GiB: OOMs" 1 "o['ooms'] > 0"
run replay --limit 100M "$TRACE"
expect_ok "replay --limit 100M (table)"
run replay --min-limit "$TRACE"
if [ "$rc" -eq 0 ] && grep -q 'min limit' "$TMP/out"; then
    pass "--min-limit table has a min limit column"
else
    fail "--min-limit table has a min limit column" "exit $rc"
fi

# ---- malformed traces: exit 2, "vram: FILE:LINE: reason" ----
H='t_us,op,id,size,stream'
printf '%s\n1,a,0,512,0\n2,x,1,512,0\n' "$H" >"$TMP/bad_op.csv"
printf '%s\n1,a,0,512,0\n2,a,1,12ab,0\n' "$H" >"$TMP/bad_size.csv"
printf '%s\n1,a,0,512,0\n2,f,7,512,0\n' "$H" >"$TMP/unknown_free.csv"
printf '%s\n1,a,0,512,0\n2,a,0,512,0\n' "$H" >"$TMP/dup_id.csv"
for f in bad_op bad_size unknown_free dup_id; do
    run replay "$TMP/$f.csv"
    expect_error "malformed trace: $f" 2 "$TMP/$f.csv:3: "
done
# A gzip trace cut short (a killed recording): replayed up to its last whole
# line, with one warning naming the line where it stops.
head -c 5000 "$TRACE" >"$TMP/truncated.trace.csv.gz"
run replay "$TMP/truncated.trace.csv.gz"
if [ "$rc" -eq 0 ] && [ -s "$TMP/out" ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
    grep -q "^vram: $TMP/truncated.trace.csv.gz:[0-9][0-9]*: the trace is cut short here" "$TMP/err"; then
    pass "a gzip trace cut short: replayed, one warning with a line number"
else
    fail "a gzip trace cut short: replayed, one warning with a line number" "exit $rc"
fi
# A byte flipped inside the compressed data: named as a corrupt gzip
# stream, whatever the garbled line looked like.
python3 -c 'import sys; d = bytearray(open(sys.argv[1], "rb").read()); d[len(d) // 2] ^= 0x10; open(sys.argv[2], "wb").write(d)' \
    "$TRACE" "$TMP/flipped.trace.csv.gz"
run replay "$TMP/flipped.trace.csv.gz"
expect_error "flipped byte in a gzip trace" 2 "$TMP/flipped.trace.csv.gz:"
if grep -q "^vram: $TMP/flipped.trace.csv.gz:[0-9][0-9]*: corrupt gzip stream" "$TMP/err"; then
    pass "flipped byte: named as a corrupt gzip stream, with a line number"
else
    fail "flipped byte: named as a corrupt gzip stream, with a line number" "$(cat "$TMP/err")"
fi
# A trace naming device 1023: the trace and the cause are named.
printf '%s,device\n1,a,0,512,0,1023\n2,f,0,512,0,1023\n' "$H" >"$TMP/dev1023.csv"
run replay "$TMP/dev1023.csv"
expect_error "device 1023 in a trace: replay" 2 "$TMP/dev1023.csv: the trace names device 1023"
run analyze "$TMP/dev1023.csv"
expect_error "device 1023 in a trace: analyze" 2 "$TMP/dev1023.csv: analyze: the trace names device 1023"
# A UTF-8 byte-order mark before the header is not part of the first column.
printf '\357\273\277%s\n1,a,0,512,0\n2,f,0,512,0\n' "$H" >"$TMP/bom.csv"
run replay "$TMP/bom.csv"
expect_ok "a UTF-8 byte-order mark before the header"
run replay "$TMP/does-not-exist.csv.gz"
expect_error "missing trace file" 2 "$TMP/does-not-exist.csv.gz"
run replay --json "$TRACE" "$TMP/bad_op.csv"
expect_error "a good trace then a bad one: nothing replayed" 2
if [ -s "$TMP/out" ]; then fail "a bad trace stops the run before any output" "stdout not empty"; else pass "a bad trace stops the run before any output"; fi

# ---- bad option values: exit 2, one line ----
for args in "--limit 6X" "--limit 0" "--limit" "--device-memory -1" "--repeat 0" \
    "--repeat 1001" "--repeat abc" "--strategy nope" "--strategy growth,,all" \
    "--bogus" "--json=yes"; do
    # shellcheck disable=SC2086
    run replay $args "$TRACE"
    expect_error "bad option: $args" 2
done

# ---- contrib: the exporter's service listens on the exporter's own port ----
# 9400 is NVIDIA dcgm-exporter's: vram's service must not take it, and no
# file may name it but as dcgm-exporter's.
port=$("$VRAM" exporter --help | sed -n 's/.*(default 127\.0\.0\.1:\([0-9]*\)).*/\1/p' | head -n 1)
unit=$ROOT/contrib/systemd/vram-exporter.service.in
if [ -n "$port" ] && grep -q "^ExecStart=.* exporter --listen 127\.0\.0\.1:$port " "$unit"; then
    pass "the systemd unit listens on the exporter's default port ($port)"
else
    fail "the systemd unit listens on the exporter's default port (${port:-none})" \
        "$(grep '^ExecStart' "$unit")"
fi
if grep -rn '9400' "$ROOT/contrib" "$ROOT/docs" "$ROOT/tools" "$ROOT/src" "$ROOT/README.md" |
    grep -vi 'dcgm' >"$TMP/9400"; then
    fail "9400 is named only as dcgm-exporter's port" "$(head -n 3 "$TMP/9400")"
else
    pass "9400 is named only as dcgm-exporter's port"
fi

test_end
