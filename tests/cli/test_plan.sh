#!/bin/sh
# test_plan.sh -- `vram plan` as a user runs it: the text report, the
# --json keys, flags instead of a config, the what-ifs, the largest
# micro-batch against --gpu-memory, and malformed input (bad config JSON,
# unknown precision, batch 0, ...) answered with exit 2 and one line
# starting "vram: ". The last line is "N passed, M failed"; the exit
# status is 1 if anything failed.
# Usage: tests/cli/test_plan.sh path/to/vram REPO_ROOT
set -u
if [ $# -ne 2 ]; then
    echo "usage: test_plan.sh VRAM_BINARY REPO_ROOT" >&2
    exit 2
fi
VRAM=$1
CONF=$2/data/measurements/configs
passed=0
failed=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vram-plan.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

# jget KEY FILE: the first integer value of "KEY" in FILE (the top level
# comes before the what-ifs).
jget() { grep -o "\"$1\":[0-9]*" "$2" | head -n 1 | cut -d: -f2; }

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# expect_usage NAME ARGS...: exit 2, nothing on stdout, one "vram: " line on stderr.
expect_usage() {
    name=$1; shift
    "$VRAM" plan "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    lines=$(wc -l <"$TMP/err")
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q '^vram: ' "$TMP/err" && [ ! -s "$TMP/out" ]; then
        ok
    else
        bad "$name: rc=$rc, stderr lines=$lines: $(head -c 200 "$TMP/err")"
    fi
}

# The issue's example, as text.
if "$VRAM" plan --config "$CONF/gpt2.json" --batch 16 --seq 1024 --precision mixed-bf16 \
    --optimizer adamw --accum 4 --checkpointing --gpu-memory 80G >"$TMP/out" 2>"$TMP/err"; then
    for w in weights gradients "optimizer states" activations "temporary buffers" \
        "CUDA context" total "largest micro-batch" "cap to give the job" "what if"; do
        if grep -q "$w" "$TMP/out"; then ok; else bad "text lacks '$w'"; fi
    done
    if grep -q 'GiB' "$TMP/out"; then ok; else bad "text sizes not in IEC units"; fi
else
    bad "example exit $?: $(cat "$TMP/err")"
fi

# --json: one object, the keys of the issue, integer bytes.
"$VRAM" plan --config "$CONF/llama-300m.json" --batch 8 --seq 2048 --precision mixed-bf16 \
    --gpu-memory 80G --json >"$TMP/json" 2>"$TMP/err" || bad "json run: $(cat "$TMP/err")"
for k in '"tensor_peak_bytes":' '"total_bytes":' '"breakdown":' '"max_micro_batch":' \
    '"recommended_limit_bytes":' '"weights":' '"gradients":' '"optimizer_states":' \
    '"activations":' '"temporary":' '"cuda_context":' '"what_ifs":'; do
    if grep -q "$k" "$TMP/json"; then ok; else bad "json lacks $k"; fi
done
if [ "$(wc -l <"$TMP/json")" -eq 1 ] && grep -qE '"tensor_peak_bytes":[0-9]+,' "$TMP/json"; then
    ok
else
    bad "json is not one line with integer bytes: $(head -c 300 "$TMP/json")"
fi
# Measured in data/measurements: 24,092,702,720 bytes; the prediction is within 15%.
peak=$(jget tensor_peak_bytes "$TMP/json")
if [ -n "$peak" ] && [ "$peak" -gt 20478797312 ] && [ "$peak" -lt 27706608128 ]; then
    ok
else
    bad "llama b8 s2048 mixed-bf16 peak $peak, measured 24092702720"
fi
# Without --gpu-memory there is no max_micro_batch.
"$VRAM" plan --config "$CONF/gpt2.json" --batch 8 --seq 512 --json >"$TMP/json2" 2>&1
if grep -q '"max_micro_batch"' "$TMP/json2"; then bad "max_micro_batch without --gpu-memory"; else ok; fi

# The largest micro-batch fits, one more does not.
mmb=$(jget max_micro_batch "$TMP/json")
if [ -n "$mmb" ] && [ "$mmb" -ge 1 ]; then
    "$VRAM" plan --config "$CONF/llama-300m.json" --batch "$mmb" --seq 2048 \
        --precision mixed-bf16 --json >"$TMP/a" 2>&1
    "$VRAM" plan --config "$CONF/llama-300m.json" --batch $((mmb + 1)) --seq 2048 \
        --precision mixed-bf16 --json >"$TMP/b" 2>&1
    ta=$(jget total_bytes "$TMP/a")
    tb=$(jget total_bytes "$TMP/b")
    if [ "$ta" -le 85899345920 ] && [ "$tb" -gt 85899345920 ]; then ok; else
        bad "max_micro_batch $mmb: totals $ta, $tb against 80 GiB"; fi
else
    bad "max_micro_batch '$mmb'"
fi

# Flags instead of a config: GPT-2 small by hand equals the config.
"$VRAM" plan --arch gpt2 --layers 12 --hidden 768 --heads 12 --vocab 50257 --positions 1024 \
    --batch 8 --seq 512 --json >"$TMP/flags" 2>&1
"$VRAM" plan --config "$CONF/gpt2.json" --batch 8 --seq 512 --json >"$TMP/conf" 2>&1
if grep -q '"params":124439808' "$TMP/flags" && cmp -s "$TMP/flags" "$TMP/conf"; then ok; else
    bad "flags differ from config: $(head -c 200 "$TMP/flags")"; fi
# ZeRO-3 over 8 ranks needs less than plain data parallelism.
"$VRAM" plan --config "$CONF/llama-300m.json" --batch 4 --seq 1024 --data-parallel 8 \
    --json >"$TMP/z0" 2>&1
"$VRAM" plan --config "$CONF/llama-300m.json" --batch 4 --seq 1024 --data-parallel 8 \
    --zero 3 --json >"$TMP/z3" 2>&1
z0=$(jget tensor_peak_bytes "$TMP/z0")
z3=$(jget tensor_peak_bytes "$TMP/z3")
if [ -n "$z0" ] && [ -n "$z3" ] && [ "$z3" -lt "$z0" ]; then ok; else bad "zero 3: $z3 vs $z0"; fi
# --help
if "$VRAM" plan --help | grep -q -- '--checkpointing'; then ok; else bad "--help"; fi

# Malformed input: exit 2, one line.
printf '{"model_type": "gpt2", "n_layer": ' >"$TMP/broken.json"
printf '{"model_type": "t5", "num_layers": 6}' >"$TMP/t5.json"
expect_usage "bad config JSON" --config "$TMP/broken.json" --batch 8 --seq 512
expect_usage "unsupported family" --config "$TMP/t5.json" --batch 8 --seq 512
expect_usage "missing config" --config "$TMP/none.json" --batch 8 --seq 512
expect_usage "unknown precision" --config "$CONF/gpt2.json" --batch 8 --seq 512 --precision fp8
expect_usage "unknown optimizer" --config "$CONF/gpt2.json" --batch 8 --seq 512 --optimizer lion
expect_usage "unknown attention" --config "$CONF/gpt2.json" --batch 8 --seq 512 --attention flash3
expect_usage "batch 0" --config "$CONF/gpt2.json" --batch 0 --seq 512
expect_usage "batch text" --config "$CONF/gpt2.json" --batch eight --seq 512
expect_usage "no seq" --config "$CONF/gpt2.json" --batch 8
expect_usage "accum not dividing" --config "$CONF/gpt2.json" --batch 6 --accum 4 --seq 512
expect_usage "zero 4" --config "$CONF/gpt2.json" --batch 8 --seq 512 --zero 4
expect_usage "bad size" --config "$CONF/gpt2.json" --batch 8 --seq 512 --gpu-memory 80X
expect_usage "unknown option" --config "$CONF/gpt2.json" --batch 8 --seq 512 --frobnicate
expect_usage "no model" --batch 8 --seq 512

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
