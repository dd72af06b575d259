#!/bin/sh
# SPDX-License-Identifier: MIT
# test_analyze.sh -- `vram analyze` and `vram doctor` as a user runs them:
# the JSON keys and the verdicts on the real traces (leak_mlp leaks at
# 12 MiB a step, the others do not), exit codes and one-line errors,
# --html, --compare, and doctor's "[ok|warn|problem] name: evidence. Next:
# step." lines on the environment, the real traces and synthetic ones (a
# final OOM above and below the cap, two unevenly used GPUs). The last line
# is "N passed, M failed"; the exit status is 1 if anything failed.
# Usage: tests/cli/test_analyze.sh path/to/vram REPO_ROOT
set -u

if [ $# -ne 2 ]; then
    echo "usage: test_analyze.sh VRAM_BINARY REPO_ROOT" >&2
    exit 2
fi
VRAM=$1
ROOT=$2
TRACES=$ROOT/data/traces
LEAK=$TRACES/leak_mlp.trace.csv.gz
RESNET=$TRACES/resnet50_fp32.trace.csv.gz
GPT2=$TRACES/gpt2_bf16_b16.trace.csv.gz
GEN=$TRACES/gpt2m_generate.trace.csv.gz
MIB=1048576

. "$(dirname "$0")/lib.sh"
test_begin analyze

# run ARGS...: run vram; stdout in $TMP/out, stderr in $TMP/err, status in $rc.
run() {
    "$VRAM" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# runenv "VAR=VALUE..." ARGS...: run with those variables set (by env, so
# that nothing leaks into the next run).
runenv() {
    vars=$1
    shift
    # shellcheck disable=SC2086
    env $vars "$VRAM" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# expect_rc NAME CODE: the last run exited with CODE and wrote no error.
expect_rc() {
    if [ "$rc" -ne "$2" ]; then fail "$1" "exit $rc, expected $2"; return; fi
    if [ -s "$TMP/err" ]; then fail "$1" "unexpected stderr"; return; fi
    pass "$1"
}

# json_check NAME EXPR: EXPR (Python, over the object d read from $TMP/out)
# is true.
json_check() {
    if python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
' "$TMP/out" "$2" 2>"$TMP/pyerr"; then
        pass "$1"
    else
        fail "$1" "not true of the JSON: $2 ($(tail -n 1 "$TMP/pyerr"))"
    fi
}

# doctor_lines NAME: every stdout line is a check line.
doctor_lines() {
    if [ ! -s "$TMP/out" ]; then fail "$1" "no output"; return; fi
    if grep -Evq '^\[(ok|warn|problem)\] [a-z-]+: .+\. Next: .+\.$' "$TMP/out"; then
        fail "$1" "a line is not '[ok|warn|problem] name: evidence. Next: step.': $(grep -Ev '^\[(ok|warn|problem)\] [a-z-]+: .+\. Next: .+\.$' "$TMP/out" | head -n 1)"
    else
        pass "$1"
    fi
}

# ---------------------------------------------------------------------------
# vram analyze on the real traces
# ---------------------------------------------------------------------------

run analyze --json "$LEAK"
expect_rc "analyze --json leak_mlp exits 0" 0
json_check "the JSON has the promised keys" \
    'all(k in d for k in ("peak_bytes", "peak_time_us", "iterations", "leak", "leak_bytes_per_iteration"))'
json_check "sizes are integers" \
    'isinstance(d["peak_bytes"], int) and isinstance(d["leak_bytes_per_iteration"], int)'
json_check "leak_mlp: peak as the loader computes it" 'd["peak_bytes"] == 1234337796'
json_check "leak_mlp: a leak" 'd["leak"] is True'
# The true growth: three 4 MiB tensors kept alive per step (120 over 40 steps).
json_check "leak_mlp: rate within 10% of 12 MiB per step" \
    "abs(d['leak_bytes_per_iteration'] - 12 * $MIB) <= 0.1 * 12 * $MIB"
json_check "leak_mlp: 40 iterations" 'abs(d["iterations"] - 40) <= 1'
json_check "leak_mlp: suspects are 4 MiB tensors" \
    "len(d['suspects']) > 0 and d['suspects'][0]['size'] == 4 * $MIB"

for pair in "resnet50_fp32 15" "gpt2_bf16_b16 12" "gpt2m_generate 12"; do
    set -- $pair
    run analyze --json "$TRACES/$1.trace.csv.gz"
    expect_rc "analyze --json $1 exits 0" 0
    json_check "$1: no leak" 'd["leak"] is False'
    json_check "$1: $2 iterations (+-1)" "abs(d['iterations'] - $2) <= 1"
done

run analyze "$LEAK"
expect_rc "analyze leak_mlp (text) exits 0" 0
expect_match "the text gives the verdict and the rate" '^leak +YES: memory grew 12\.00 MiB per iteration'
expect_match "the text names the peak" '^peak +1\.15 GiB live'
# The JSON counts events as the text does (from 1).
text_event=$(sed -n 's/^peak .*(event \([0-9]*\).*/\1/p' "$TMP/out")
run analyze --json "$LEAK"
json_check "--json's peak_event is the text's event $text_event" "d['peak_event'] == $text_event"
json_check "--json's iterations count events from 1" \
    "d['iteration_list'][0]['first_event'] == 1 and d['iteration_list'][-1]['last_event'] == d['events']"

run analyze --strategy expandable --limit 2G --json "$RESNET"
expect_rc "analyze --strategy expandable --limit 2G exits 0" 0
json_check "the replay under a 2 GiB cap refuses allocations" \
    'd["strategy"] == "expandable" and d["replay_ooms"] > 0'

run analyze --html "$TMP/report.html" "$LEAK"
expect_rc "analyze --html FILE exits 0" 0
if head -c 200 "$TMP/report.html" | grep -qi '<!doctype html'; then
    pass "--html writes an HTML page"
else
    fail "--html writes an HTML page" "no doctype at the start of $TMP/report.html"
fi

# ---------------------------------------------------------------------------
# A trace cut short (a recording killed, or stopped by a full disk): analyze,
# doctor and replay read it up to its last whole line, with one warning
# saying where it stops
# ---------------------------------------------------------------------------

CUT=$ROOT/tests/data/truncated.trace.csv.gz
CUT_LINE="vram: $CUT:667: the trace is cut short here (the file ends inside its gzip stream, as a recording that was killed or ran out of disk leaves it): it is read up to line 666, its last whole line"
for sub in analyze doctor replay; do
    run $sub "$CUT"
    if [ "$rc" -le 1 ] && [ -s "$TMP/out" ] && [ "$(cat "$TMP/err")" = "$CUT_LINE" ]; then
        pass "$sub reads a gzip trace cut short, one warning"
    else
        fail "$sub reads a gzip trace cut short, one warning" "exit $rc"
    fi
done
run analyze --json "$CUT"
check "analyze --json of the cut trace: its 664 events" \
    "python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))[\"events\"] == 664' $TMP/out"
printf 't_us,op,id,size,stream\n1,a,0,512,0\n2,a,1,256,0\n3,f,0,51' >"$TMP/cut.csv"
run analyze --json "$TMP/cut.csv"
if [ "$rc" -eq 0 ] && grep -q '"events": *2' "$TMP/out" &&
    [ "$(cat "$TMP/err")" = "vram: $TMP/cut.csv:4: the trace is cut short here (the last line has no line end and does not read: expected 5 fields as in the header, found 4): it is read up to line 3, its last whole line" ]; then
    pass "a plain trace cut inside its last line: read up to the line before, one warning"
else
    fail "a plain trace cut inside its last line" "exit $rc"
fi

# ---------------------------------------------------------------------------
# Errors: one line, exit 2
# ---------------------------------------------------------------------------

run analyze
expect_error "analyze without a trace" 2 "analyze: no trace"
run analyze "$TMP/none.csv"
expect_error "analyze of a missing file" 2 "$TMP/none.csv"
run analyze --strategy nope "$LEAK"
expect_error "analyze --strategy nope" 2 "analyze: --strategy: unknown strategy 'nope'"
run analyze --limit 6X "$LEAK"
expect_error "analyze --limit 6X" 2 "analyze: --limit"
run analyze --bogus "$LEAK"
expect_error "analyze --bogus" 2 "analyze:"
run analyze "$LEAK" "$RESNET"
expect_error "analyze of two traces without --compare" 2 "analyze: two traces"
run analyze --compare "$LEAK"
expect_error "analyze --compare with one trace" 2 "analyze: --compare needs two"
run analyze --html /nonexistent-dir/x.html "$LEAK"
expect_error "analyze --html into a missing directory" 1 "/nonexistent-dir/x.html"
run analyze --help
expect_rc "analyze --help exits 0" 0

# ---------------------------------------------------------------------------
# Synthetic traces: marks, a final OOM, two GPUs
# ---------------------------------------------------------------------------

# write_loop FILE ACT_BYTES: 6 marked steps; four activations of ACT_BYTES
# made in "forward" and freed in "backward"; ends in an OOM of 100 MiB.
write_loop() {
    python3 - "$1" "$2" <<'EOF'
import sys
path, act = sys.argv[1], int(sys.argv[2])
MIB = 1 << 20
lines = ["# workload=synthetic", "t_us,op,id,size,stream,label"]
t, nid = 1000, 0
def ev(op, i, size, label=""):
    global t
    t += 10
    lines.append(f"{t},{op},{i},{size},0,{label}")
ev("a", nid, 8 * MIB); nid += 1
for step in range(6):
    ev("m", 0, 0, "forward")
    acts = []
    for k in range(4):
        ev("a", nid, act); acts.append(nid); nid += 1
    ev("m", 0, 0, "backward")
    for a in acts:
        ev("f", a, act)
ev("o", 0, 100 * MIB)
open(path, "w").write("\n".join(lines) + "\n")
EOF
}
write_loop "$TMP/fp32.csv" $((4 * MIB))
write_loop "$TMP/half.csv" $((2 * MIB))

run analyze --json "$TMP/fp32.csv"
expect_rc "analyze of a marked trace exits 0" 0
json_check "iterations from the marks" 'd["iterations"] == 6 and d["iterations_from"] == "marks"'
json_check "the final OOM is reported" \
    "d['ends_in_oom'] is True and d['oom']['request_bytes'] == 100 * $MIB and d['oom']['live_bytes'] == 8 * $MIB"

run analyze --compare "$TMP/fp32.csv" "$TMP/half.csv"
expect_rc "analyze --compare exits 0" 0
expect_match "--compare: peak live, A, B and the change" '^  peak live +24\.00 MiB +16\.00 MiB +-8\.00 MiB'
expect_match "--compare: the forward phase matched by label" '^  forward +24\.00 MiB +16\.00 MiB'

run analyze --compare --json "$TMP/fp32.csv" "$TMP/half.csv"
expect_rc "analyze --compare --json exits 0" 0
json_check "--compare --json: the peak delta" "d['delta']['peak_bytes']['delta'] == -8 * $MIB"
json_check "--compare --json: phases and classes" \
    "any(p['label'] == 'forward' for p in d['phases']) and any(c['lo'] == 4 * $MIB and c['b'] is None for c in d['classes'])"

# --compare --html: the comparison as a page (and the text still on stdout).
run analyze --compare --html "$TMP/cmp.html" "$TMP/fp32.csv" "$TMP/half.csv"
expect_rc "analyze --compare --html exits 0" 0
expect_match "--compare --html: the text too" '^  peak live +24\.00 MiB +16\.00 MiB +-8\.00 MiB'
if grep -q '<td>peak live</td><td class="num">24.00 MiB</td><td class="num">16.00 MiB</td><td class="num">&minus;8.00 MiB</td>' "$TMP/cmp.html" &&
    grep -q '<td>forward</td>' "$TMP/cmp.html" && grep -q '</html>' "$TMP/cmp.html"; then
    pass "--compare --html: peaks, phases and the change in the page"
else
    fail "--compare --html: peaks, phases and the change in the page" "$(head -c 300 "$TMP/cmp.html")"
fi
run analyze --compare --html - "$TMP/fp32.csv" "$TMP/half.csv"
if [ "$rc" -eq 0 ] && head -n 1 "$TMP/out" | grep -q '^<!DOCTYPE html>'; then
    pass "--compare --html -: the page on stdout instead of the text"
else
    fail "--compare --html -" "exit $rc"
fi

# ---------------------------------------------------------------------------
# vram doctor
# ---------------------------------------------------------------------------

runenv "VRAM_BACKEND=sim VRAM_STRATEGY=growth" doctor
expect_rc "doctor on a sound environment exits 0" 0
doctor_lines "doctor prints one check a line"
expect_match "doctor checks the environment" '^\[ok\] environment: '
expect_match "doctor sees the simulated GPU" '^\[ok\] devices: 1 GPU'

runenv "VRAM_BACKEND=sim" doctor
expect_rc "doctor with the default strategy exits 0" 0
expect_match "doctor: the default (expandable) is no setting to warn about" \
    '^\[ok\] preallocation: the strategy is expandable'

runenv "VRAM_BACKEND=sim TF_FORCE_GPU_ALLOW_GROWTH=false" doctor
expect_rc "doctor with TensorFlow's preallocation exits 0 (a warning)" 0
expect_match "doctor warns of preallocation, naming the setting that chose it" \
    '^\[warn\] preallocation: TF_FORCE_GPU_ALLOW_GROWTH chose preallocate.*Next: unset TF_FORCE_GPU_ALLOW_GROWTH'

runenv "VRAM_BACKEND=sim VRAM_STRATEGY=preallocate" doctor
expect_match "doctor warns of VRAM_STRATEGY=preallocate" \
    '^\[warn\] preallocation: VRAM_STRATEGY chose preallocate.*Next: set VRAM_STRATEGY=expandable or growth'

runenv "VRAM_BACKEND=sim VRAM_MEMORY_LIMIT=6X" doctor
expect_rc "doctor on a malformed environment exits 1" 1
expect_match "doctor names the malformed variable" "^\[problem\] environment: VRAM_MEMORY_LIMIT='6X'"

runenv "VRAM_BACKEND=sim VRAM_STRATEGY=growth" doctor --json
expect_rc "doctor --json exits 0" 0
json_check "doctor --json: checks with status, evidence and next" \
    'len(d["checks"]) == 3 and all(set(c) == {"name", "status", "evidence", "next"} for c in d["checks"]) and d["problems"] == 0'

runenv "VRAM_STRATEGY=growth" doctor "$LEAK"
expect_rc "doctor leak_mlp exits 1 (a problem)" 1
doctor_lines "doctor leak_mlp: one check a line"
expect_match "doctor finds the leak, with its rate" '^\[problem\] leak: memory grew 12\.00 MiB per iteration'

runenv "VRAM_STRATEGY=growth" doctor "$RESNET"
expect_rc "doctor resnet50_fp32 exits 0" 0
expect_match "doctor resnet50_fp32: no leak" '^\[ok\] leak: '
expect_match "doctor resnet50_fp32: growth needs no warning" '^\[ok\] preallocation: '

run doctor "$GPT2"
expect_rc "doctor gpt2_bf16_b16 under the default exits 0" 0
expect_match "doctor gpt2_bf16_b16: the default strategy needs no warning" \
    '^\[ok\] preallocation: preallocate would hold .*strategy is expandable'

runenv "TF_FORCE_GPU_ALLOW_GROWTH=false" doctor "$GPT2"
expect_rc "doctor gpt2_bf16_b16 under TensorFlow's preallocation exits 0 (a warning)" 0
expect_match "doctor: preallocate vs growth on a trace, with a cap to try" \
    '^\[warn\] preallocation: preallocate would hold .*VRAM_MEMORY_LIMIT=[0-9]+M'

runenv "VRAM_STRATEGY=growth" doctor --limit 32M "$TMP/fp32.csv"
expect_rc "doctor: an OOM above the cap exits 1" 1
expect_match "doctor: the job is too big, see vram plan" '^\[problem\] oom-too-big: .*vram plan'
expect_match "doctor: not fragmentation" '^\[ok\] oom-fragmentation: '

runenv "VRAM_STRATEGY=growth" doctor --limit 200M "$TMP/fp32.csv"
expect_rc "doctor: an OOM below the cap exits 1" 1
expect_match "doctor: fragmentation, try expandable" '^\[problem\] oom-fragmentation: .*VRAM_STRATEGY=expandable'

python3 - "$TMP/two.csv" <<'EOF'
import sys
MIB = 1 << 20
rows = ["t_us,op,id,size,stream,device"]
t = 0
for i in range(4):
    t += 1; rows.append(f"{t},a,{i},{10 * MIB},0,0")
for i in range(4, 6):
    t += 1; rows.append(f"{t},a,{i},{10 * MIB},0,1")
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
EOF
runenv "VRAM_STRATEGY=growth" doctor "$TMP/two.csv"
expect_rc "doctor: uneven GPUs are a warning (exit 0)" 0
expect_match "doctor: per-device peaks" '^\[warn\] multi-gpu: peak live per device: 0: 40\.00 MiB, 1: 20\.00 MiB'

run doctor "$LEAK" "$RESNET"
expect_error "doctor of two traces" 2 "doctor: one trace"
run doctor --limit 1G
expect_error "doctor --limit without a trace" 2 "doctor: --strategy and --limit"
run doctor "$TMP/none.csv"
expect_error "doctor of a missing file" 2 "$TMP/none.csv"
run doctor --help
expect_rc "doctor --help exits 0" 0

test_end
