#!/bin/sh
# SPDX-License-Identifier: MIT
# test_tune.sh -- `vram tune` as a user runs it: over the real traces of
# data/traces (--trace): the recommended cap is the smallest cap that
# replays (as `vram replay --min-limit` finds it) plus 10 % after a steady
# state, 15 % otherwise, the strategy the one with the lowest peak reserved,
# each framework's setting computed from it, the JSON schema whole; over the
# fake driver: a training loop without end is stopped once steady (and is
# gone), a leaking one at --seconds and --iterations, one that ends by
# itself is tuned from what it did; bad input: one line and the documented
# status. The last line is "N passed, M failed"; exit 1 if any failed.
# Usage: test_tune.sh VRAM PRELOAD_SO PROBE FAKECUDA_DIR TRACES_DIR TEST_DATA_DIR
set -u

if [ $# -ne 6 ]; then
    echo "usage: test_tune.sh VRAM PRELOAD_SO PROBE FAKECUDA_DIR TRACES_DIR TEST_DATA_DIR" >&2
    exit 2
fi
VRAM=$1
LIB=$2
PROBE=$3
FAKE=$4
TRACES=$5
DATA=$6

. "$(dirname "$0")/lib.sh"
absolute VRAM LIB PROBE FAKE TRACES DATA
test_begin tune

# tune VAR=VALUE... -- ARGS...: vram tune over the fake driver, at most 120 s
# (lib.sh's vram_cmd).
run_env="LD_LIBRARY_PATH=$FAKE"
run_wrap="timeout 120"
tune() { vram_cmd tune "$@"; }

# check NAME PYTHON-EXPRESSIONS...: each expression, over j (the JSON of
# $TMP/out), must be true; the first that is not is the failure.
check() {
    cname=$1
    shift
    if why=$(python3 - "$TMP/out" "$@" <<'EOF'
import json, math, sys
MIB = 1 << 20
try:
    j = json.load(open(sys.argv[1]))
except ValueError as e:
    print("not one JSON object: %s" % e)
    sys.exit(1)
rows = {r["strategy"]: r for r in j.get("strategies", [])}
rec = j.get("recommended", {})
for expr in sys.argv[2:]:
    try:
        ok = eval(expr)
    except Exception as e:
        ok, expr = False, "%s (%s: %s)" % (expr, type(e).__name__, e)
    if not ok:
        print(expr)
        sys.exit(1)
EOF
    ); then
        pass "$cname"
    else
        fail "$cname" "$why"
    fi
}

# The JSON schema (docs/RECORD.md): every key, its type.
SCHEMA='set(j) == {"trace","trace_kept","events","iterations","iterations_from","complete_iterations","steady","peak_spread","recorded","stopped","command_status","peak_in_use_bytes","leak","leak_bytes_per_iteration","device_memory_bytes","replay_device_memory_bytes","strategies","recommended","settings"}'
SCHEMA2='[r["strategy"] for r in j["strategies"]] == ["growth","preallocate","growth:tf-compat","expandable"] and all(set(r) == {"strategy","peak_reserved_bytes","fragmentation","min_limit_bytes","cap_bytes"} for r in j["strategies"])'
SCHEMA3='set(rec) == {"strategy","min_limit_bytes","headroom","headroom_reason","cap_bytes"} and set(j["settings"]) == {"vram_run","pytorch_vram","pytorch","pytorch_fraction","tensorflow","tensorflow_memory_limit_mb","jax","jax_mem_fraction"}'
SCHEMA4='isinstance(j["steady"], bool) and isinstance(j["events"], int) and j["iterations_from"] in ("marks","period","floor","none")'
# The recommendation's arithmetic, whatever the trace.
CAP_OVER_MIN='rec["min_limit_bytes"] >= j["peak_in_use_bytes"] and rec["cap_bytes"] >= rec["min_limit_bytes"] and rec["cap_bytes"] % MIB == 0'
HEADROOM='rec["headroom"] == (0.10 if j["steady"] else 0.15) and rec["min_limit_bytes"] * (1 + rec["headroom"]) <= rec["cap_bytes"] < rec["min_limit_bytes"] * (1 + rec["headroom"]) + MIB'
WITHIN_10_15='0.10 <= rec["cap_bytes"] / rec["min_limit_bytes"] - 1 <= 0.15 + MIB / rec["min_limit_bytes"]'
LOWEST='rec["strategy"] == min((r for r in j["strategies"] if r["min_limit_bytes"] is not None), key=lambda r: r["peak_reserved_bytes"] / 1.0101)["strategy"] or rows[rec["strategy"]]["peak_reserved_bytes"] <= 1.01 * min(r["peak_reserved_bytes"] for r in j["strategies"])'
ROW_CAPS='all(r["cap_bytes"] == math.ceil(r["min_limit_bytes"] * (1 + rec["headroom"]) / MIB) * MIB for r in j["strategies"] if r["min_limit_bytes"] is not None) and rows[rec["strategy"]]["cap_bytes"] == rec["cap_bytes"]'
SETTINGS='j["settings"]["vram_run"] == "vram run --limit %dM -- COMMAND" % (rec["cap_bytes"] // MIB) and j["settings"]["pytorch_vram"] == "vram.torch.use(limit=\"%dM\", strategy=\"%s\")" % (rec["cap_bytes"] // MIB, rec["strategy"]) and j["settings"]["tensorflow_memory_limit_mb"] == rows["preallocate"]["cap_bytes"] // MIB and "memory_limit=%d)" % (rows["preallocate"]["cap_bytes"] // MIB) in j["settings"]["tensorflow"]'
FRACTIONS='j["settings"]["pytorch_fraction"] == math.ceil(rec["cap_bytes"] / j["device_memory_bytes"] * 1000) / 1000 and j["settings"]["jax_mem_fraction"] == math.ceil(rows["growth:tf-compat"]["cap_bytes"] / j["device_memory_bytes"] * 1000) / 1000 and "set_per_process_memory_fraction(%.3f, 0)" % j["settings"]["pytorch_fraction"] in j["settings"]["pytorch"] and "XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=%.3f" % j["settings"]["jax_mem_fraction"] == j["settings"]["jax"]'

# ---- --trace over the real traces (an 80 GiB device, so fractions too) ----
# name, expected exit status, steady, leak
for spec in resnet50_fp32:0:True:False gpt2_bf16_b16:0:True:False leak_mlp:3:False:True \
    gpt2m_generate:3:False:False; do
    IFS=: read -r name want steady leak <<EOF
$spec
EOF
    f="$TRACES/$name.trace.csv.gz"
    "$VRAM" tune --trace "$f" --device-memory 80G --json >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name: exit $want" "exit $rc: $(cat "$TMP/err")"
        continue
    fi
    pass "$name: exit $want"
    check "$name: schema, cap = smallest cap + headroom, strategy, settings" \
        "j['steady'] == $steady and j['leak'] == $leak and j['recorded'] is False and j['device_memory_bytes'] == 80 << 30" \
        "$SCHEMA" "$SCHEMA2" "$SCHEMA3" "$SCHEMA4" "$CAP_OVER_MIN" "$HEADROOM" "$WITHIN_10_15" \
        "$LOWEST" "$ROW_CAPS" "$SETTINGS" "$FRACTIONS"
    if [ "$want" -eq 3 ]; then
        if grep -q "^vram: tune: no steady state in $f: " "$TMP/err"; then
            pass "$name: no steady state, said"
        else
            fail "$name: no steady state, said" "$(cat "$TMP/err")"
        fi
    fi
    # The smallest cap is vram replay's own, to the byte (not for the
    # 1.5 million events of gpt2m_generate: replayed twice already).
    [ "$name" = gpt2m_generate ] && continue
    cp "$TMP/out" "$TMP/tune.json"
    strategy=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["recommended"]["strategy"])' "$TMP/tune.json")
    "$VRAM" replay --strategy "$strategy" --min-limit --device-memory 80G --json "$f" >"$TMP/out" 2>&1
    min=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["min_limit_bytes"])' "$TMP/out")
    cp "$TMP/tune.json" "$TMP/out"
    check "$name: the smallest cap is vram replay --min-limit's ($min B under $strategy)" \
        "rec['min_limit_bytes'] == $min"
done
# Steady states found where the peaks repeat: resnet50's and GPT-2's steps.
# resnet50's peak reserved is 10.70 GiB under expandable, 10.80 under
# growth: within 1 %, so the simpler growth is recommended.
"$VRAM" tune --trace "$TRACES/resnet50_fp32.trace.csv.gz" --json >"$TMP/out" 2>"$TMP/err"
check "resnet50: 15 iterations, 13 complete after the first, steady to 0.0 %, growth, 10 %" \
    "j['iterations'] == 15 and j['complete_iterations'] == 13 and j['peak_spread'] == 0.0" \
    "rec['strategy'] == 'growth' and rec['headroom'] == 0.10" \
    "j['device_memory_bytes'] is None and j['settings']['pytorch_fraction'] is None" \
    "j['settings']['pytorch'] == 'torch.cuda.set_per_process_memory_fraction(%dM / the GPU\\'s total, 0)' % (rec['cap_bytes'] // MIB)"
"$VRAM" tune --trace "$TRACES/leak_mlp.trace.csv.gz" --device-memory 80G >"$TMP/out" 2>"$TMP/err"
if grep -q "^leak: 12.00 MiB per iteration" "$TMP/out" &&
    grep -q "^cap: 1.33 GiB = 1.15 GiB + 15%: a leak of 12.00 MiB per iteration" "$TMP/out" &&
    grep -q "^  vram: *vram run --limit 1360M -- COMMAND$" "$TMP/out"; then
    pass "leak_mlp, text: the leak, the cap and its headroom, vram run's line"
else
    fail "leak_mlp, text" "$(cat "$TMP/out")"
fi

# A recording cut while a JIT compiler autotunes: a warm-up, then 17
# identical rounds of trial workspaces in 17 ms, 3.8 s later (as XLA did on
# the H200). Their peaks agree, but they are no steady state.
awk 'BEGIN {
    print "t_us,op,id,size,stream,device,label"
    print "1000000,a,0,104857600,0,0,"
    t = 4800000; id = 1
    for (r = 0; r < 17; r++) {
        printf "%d,a,%d,8192000,0,0,\n%d,a,%d,24969216,0,0,\n", t, id, t + 200, id + 1
        printf "%d,f,%d,24969216,0,0,\n%d,f,%d,8192000,0,0,\n", t + 600, id + 1, t + 900, id
        t += 1000; id += 2
    }
}' >"$TMP/autotune.csv"
"$VRAM" tune --trace "$TMP/autotune.csv" --json >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 3 ] && grep -q "of the recording, 10% needed for a steady state" "$TMP/err"; then
    pass "a burst of identical rounds early in a recording: no steady state, exit 3"
else
    fail "a burst of rounds: no steady state" "exit $rc: $(cat "$TMP/err")"
fi

# ---- a command over the fake driver ----
P="--preload $LIB"
# A training loop without end: 64 MiB of weights, 4 x 8 MiB a step. Tuned
# once steady, stopped (SIGINT: status 130), and gone.
tune -- $P --json -o "$TMP/rec.csv" -- sh -c "echo \$\$ >'$TMP/pid'; exec '$PROBE' --via gpa12000 train 0 0"
if [ "$rc" -eq 0 ]; then pass "a loop without end: exit 0"; else fail "a loop without end: exit 0" "exit $rc: $(cat "$TMP/err")"; fi
check "a loop without end: stopped once steady, 96 MiB, cap 106 MiB (96 + 10 %), the fake's 1 GiB" \
    "$SCHEMA" "$SCHEMA2" "$SCHEMA3" "$CAP_OVER_MIN" "$HEADROOM" "$ROW_CAPS" "$SETTINGS" "$FRACTIONS" \
    "j['recorded'] is True and j['stopped'] == 'steady' and j['command_status'] == 130" \
    "j['steady'] is True and j['complete_iterations'] >= 3 and j['leak'] is False" \
    "j['peak_in_use_bytes'] == 96 * MIB and rec['min_limit_bytes'] == 96 * MIB" \
    "rec['strategy'] == 'growth' and rec['cap_bytes'] == 106 * MIB" \
    "j['device_memory_bytes'] == 1 << 30 and j['settings']['pytorch_fraction'] == 0.104" \
    "j['trace'] == '$TMP/rec.csv' and j['trace_kept'] is True"
pid=$(cat "$TMP/pid" 2>/dev/null)
if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
    pass "the stopped command is gone"
else
    fail "the stopped command is gone" "pid ${pid:-none} still runs"
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
fi
# The command died by a signal, so its library could not remove the
# group's ledger: vram did, and /dev/shm keeps nothing of it.
group=$(sed -n '1s/.* group=\([^ ]*\).*/\1/p' "$TMP/rec.csv")
if [ -n "$group" ] && ! ls /dev/shm/vram-*/"$group" >/dev/null 2>&1; then
    pass "the stopped command's group ledger is removed"
else
    fail "the stopped command's group ledger is removed" "group '${group:-?}': $(ls /dev/shm/vram-*/"$group" 2>&1)"
fi
"$VRAM" analyze --json "$TMP/rec.csv" >"$TMP/out" 2>"$TMP/err"
check "the kept recording: whole lines, vram analyze reads it" \
    "j['peak_bytes'] == 96 * MIB and j['iterations'] >= 5"
tune -- $P -- "$PROBE" --via gpa12000 train 0 0
if [ "$rc" -eq 0 ] && grep -q "^steady state: the last 3 of [0-9]* complete iterations peak at 96.00 MiB to 96.00 MiB (within 0.0%)$" "$TMP/out" &&
    grep -q "^cap: 106.00 MiB = 96.00 MiB + 10%: the peak repeated" "$TMP/out" &&
    grep -q "^  vram: *vram run --limit 106M -- COMMAND$" "$TMP/out" &&
    grep -q "^  PyTorch: *torch.cuda.set_per_process_memory_fraction(0.104, 0) " "$TMP/out" &&
    grep -q "^  TensorFlow: *tf.config.set_logical_device_configuration(gpu, \[tf.config.LogicalDeviceConfiguration(memory_limit=[0-9]*)\])" "$TMP/out" &&
    grep -q "^  JAX: *XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.104 " "$TMP/out"; then
    pass "text: the steady state, the cap and every framework's setting"
else
    fail "text: the steady state, the cap and every framework's setting" "exit $rc: $(cat "$TMP/out" "$TMP/err")"
fi
# Leaking 256 KiB a step never settles: stopped at --seconds, then at
# --iterations; recommended from what was seen, exit 3. A 64 GiB device,
# since the fake charges 2 MiB granules, and a second at most: it holds
# 1024 allocations. The probe's output goes to standard error (--json).
tune FAKECUDA_MEMORY=64G -- $P --json --seconds 1 -- "$PROBE" --via gpa12000 train 0 256
if [ "$rc" -eq 3 ]; then pass "a leak: exit 3"; else fail "a leak: exit 3" "exit $rc: $(cat "$TMP/err")"; fi
check "a leak: stopped at --seconds, the leak's rate, 15 %" \
    "$SCHEMA" "$CAP_OVER_MIN" "$HEADROOM" "$WITHIN_10_15" \
    "j['stopped'] == 'seconds' and j['steady'] is False and j['leak'] is True" \
    "j['leak_bytes_per_iteration'] == 262144 and rec['headroom'] == 0.15" \
    "j['device_memory_bytes'] == 64 << 30"
if grep -q "^vram: tune: no steady state in .*: a leak of 256.00 KiB per iteration: no cap holds for long; recommended from what was seen$" "$TMP/err"; then
    pass "a leak: said"
else
    fail "a leak: said" "$(cat "$TMP/err")"
fi
tune FAKECUDA_MEMORY=64G -- $P --json --iterations 10 -- "$PROBE" --via gpa12000 train 0 256
check "a leak: stopped at --iterations" \
    "j['stopped'] == 'iterations' and j['steady'] is False and 9 <= j['complete_iterations'] and j['iterations'] < 200"
if [ "$rc" -eq 3 ]; then pass "--iterations: exit 3"; else fail "--iterations: exit 3" "exit $rc"; fi
# A loop that ends by itself before tune would stop it: tuned from its
# whole run.
tune -- $P --json --periods 5 -- "$PROBE" --via gpa12000 train 40 0
check "a command that ends by itself: tuned from its 40 steps" \
    "j['stopped'] == 'ended' and j['command_status'] == 0 and j['steady'] is True" \
    "j['peak_in_use_bytes'] == 96 * MIB and rec['cap_bytes'] == 106 * MIB"
tune -- $P --json -- "$PROBE" --via gpa12000 train 2 0
check "two steps: too short for a steady state, recommended from them with 15 %" \
    "j['steady'] is False and rec['headroom'] == 0.15 and rec['cap_bytes'] == math.ceil(96 * 1.15) * MIB"
if [ "$rc" -eq 3 ]; then pass "too short: exit 3"; else fail "too short: exit 3" "exit $rc"; fi

# Interrupted from outside (a scheduler's SIGTERM, Ctrl-C): the signal is
# passed on, and what was recorded is tuned (never steady here: --periods
# 1000).
env LD_LIBRARY_PATH="$FAKE" "$VRAM" tune $P --json --periods 1000 -- "$PROBE" --via gpa12000 \
    train 0 0 >"$TMP/out" 2>"$TMP/err" &
tpid=$!
sleep 2
kill -TERM "$tpid"
wait "$tpid"
rc=$?
check "interrupted from outside: tuned from what was recorded, exit 3" \
    "j['stopped'] == 'interrupted' and j['command_status'] == 143 and j['trace_kept'] is False" \
    "j['steady'] is False and j['peak_in_use_bytes'] == 96 * MIB and rec['cap_bytes'] == math.ceil(96 * 1.15) * MIB"
if [ "$rc" -eq 3 ]; then pass "interrupted: exit 3"; else fail "interrupted: exit 3" "exit $rc: $(cat "$TMP/err")"; fi

# ---- bad input: one line, the documented status ----
tune -- $P -- sh -c 'exit 3'
expect_error "a command that fails: 1" 1 "tune: the command failed (exit status 3)"
tune -- $P -- true
expect_error "a command with no CUDA: 1" 1 "tune: no GPU allocation was recorded"
tune -- $P -- "$TMP/no-such-command"
expect_error "a missing command: 127" 127 "tune: '$TMP/no-such-command': command not found"
tune -- --trace "$TMP/none.csv"
expect_error "--trace of a missing file: 2" 2 "$TMP/none.csv:"
tune -- --trace "$DATA/truncated.trace.csv.gz"
if [ "$rc" -le 3 ] && [ "$rc" -ne 2 ] &&
    grep -q "^vram: $DATA/truncated.trace.csv.gz:667: the trace is cut short here" "$TMP/err"; then
    pass "--trace of a trace cut short: tuned from its whole lines, said"
else
    fail "--trace of a trace cut short: tuned from its whole lines, said" "exit $rc"
fi
printf 'not a trace\n' >"$TMP/junk.csv"
tune -- --trace "$TMP/junk.csv"
expect_error "--trace of a foreign file: 2" 2 "$TMP/junk.csv:1:"
printf 't_us,op,id,size,stream\n' >"$TMP/empty.csv"
tune -- --trace "$TMP/empty.csv"
expect_error "--trace with no allocation: 2" 2 "tune: $TMP/empty.csv: no allocation in the trace"
tune --
expect_error "no command" 2 "tune: no command given"
tune -- --trace "$TMP/empty.csv" -- true
expect_error "--trace and a command" 2 "tune: --trace and a command"
tune -- --periods 1 -- true
expect_error "--periods 1" 2 "tune: --periods '1'"
tune -- -o "$TMP/t.csv.gz" -- true
expect_error "a gzip --output" 2 "tune: --output '$TMP/t.csv.gz'"
tune -- --seconds 0 -- true
expect_error "--seconds 0" 2 "tune: --seconds"
"$VRAM" help tune >"$TMP/out" 2>&1
if [ $? -eq 0 ] && grep -q -- "--periods N" "$TMP/out" && grep -q "^  0 recommended from a steady state; 3" "$TMP/out"; then
    pass "vram help tune"
else
    fail "vram help tune" "$(head -3 "$TMP/out")"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
