#!/bin/sh
# SPDX-License-Identifier: MIT
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
. "$(dirname "$0")/lib.sh"
test_begin plan

# jget KEY FILE: the first integer value of "KEY" in FILE (the top level
# comes before the what-ifs).
jget() { grep -o "\"$1\":[0-9]*" "$2" | head -n 1 | cut -d: -f2; }

# Checks pass quietly here: only a failure says what it was.
ok() { passed=$((passed + 1)); }
bad() { fail "$*"; }

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

# The example of docs/PLAN.md, as text.
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

# --json: one object, the documented keys, integer bytes.
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
# A bad count is worded as every command's (the command-line layer's), with
# the option's range and the pointer to --help.
for args in "--batch 0" "--batch eight" "--layers 0" "--zero 4"; do
    # shellcheck disable=SC2086
    "$VRAM" plan --config "$CONF/gpt2.json" --batch 8 --seq 512 $args >/dev/null 2>"$TMP/err"
    if grep -q "^vram: plan: --[a-z]* '[a-z0-9]*': expected a whole number from [0-9]* to [0-9]* (try 'vram plan --help')\$" "$TMP/err"; then
        ok
    else
        bad "$args: $(head -c 200 "$TMP/err")"
    fi
done
expect_usage "bad size" --config "$CONF/gpt2.json" --batch 8 --seq 512 --gpu-memory 80X
expect_usage "unknown option" --config "$CONF/gpt2.json" --batch 8 --seq 512 --frobnicate
expect_usage "no model" --batch 8 --seq 512

# --config DIR reads DIR/config.json.
mkdir -p "$TMP/gpt2dir" && cp "$CONF/gpt2.json" "$TMP/gpt2dir/config.json"
"$VRAM" plan --config "$TMP/gpt2dir" --batch 8 --seq 512 --json >"$TMP/dir" 2>&1
if cmp -s "$TMP/dir" "$TMP/conf"; then ok; else bad "--config DIR: $(head -c 200 "$TMP/dir")"; fi
# Every accepted model_type is listed in --help.
"$VRAM" plan --help >"$TMP/help"
for t in gpt2 bert llama mistral qwen2; do
    if grep -q "model_type accepted.*$t" "$TMP/help"; then ok; else bad "--help lacks $t"; fi
done
# Mistral and Qwen2 are their own families, not LLaMA: Qwen2's q/k/v
# biases add 3 x hidden (q) + 2 x kv width per layer; a sliding window
# shorter than the sequence keeps an explicit mask.
llama_cfg='"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 16,
  "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
  "tie_word_embeddings": false'
printf '{"model_type": "llama", %s}' "$llama_cfg" >"$TMP/llama.json"
printf '{"model_type": "qwen2", %s}' "$llama_cfg" >"$TMP/qwen2.json"
printf '{"model_type": "mistral", "sliding_window": 256, %s}' "$llama_cfg" >"$TMP/mistral.json"
for f in llama qwen2 mistral; do
    "$VRAM" plan --config "$TMP/$f.json" --batch 4 --seq 1024 --precision bf16 --json \
        >"$TMP/$f.out" 2>&1
done
pl=$(jget params "$TMP/llama.out"); pq=$(jget params "$TMP/qwen2.out")
if [ -n "$pl" ] && [ "$pq" = $((pl + 16 * (1024 + 2 * 256))) ]; then ok; else
    bad "qwen2 params $pq, llama $pl"; fi
if grep -q '"arch":"qwen2"' "$TMP/qwen2.out" && grep -q '"arch":"mistral"' "$TMP/mistral.out"
then ok; else bad "qwen2/mistral reported as another family"; fi
tl=$(jget tensor_peak_bytes "$TMP/llama.out"); tm=$(jget tensor_peak_bytes "$TMP/mistral.out")
if [ -n "$tm" ] && [ "$tm" -gt "$tl" ]; then ok; else bad "mistral window: $tm vs llama $tl"; fi

# Generation with a KV cache: the cache grows with the context, the
# largest batch fits and one more does not.
"$VRAM" plan --config "$CONF/llama-300m.json" --generate --batch 8 --prompt 1024 \
    --new-tokens 256 --precision bf16 --gpu-memory 24G --json >"$TMP/g" 2>&1
"$VRAM" plan --config "$CONF/llama-300m.json" --generate --batch 8 --prompt 2048 \
    --new-tokens 256 --precision bf16 --json >"$TMP/g2" 2>&1
k1=$(grep -o '"kv_cache":[0-9]*' "$TMP/g" | cut -d: -f2)
k2=$(grep -o '"kv_cache":[0-9]*' "$TMP/g2" | cut -d: -f2)
# 16 layers x K and V x 8 x 1024 tokens x 4 kv heads x 64 x 2 bytes at the prefill
if [ "$k1" = $((16 * 2 * 8 * 1024 * 256 * 2)) ] || [ "$k1" = $((16 * 2 * 8 * 1279 * 256 * 2)) ]
then ok; else bad "kv cache $k1"; fi
if [ -n "$k2" ] && [ "$k2" -gt "$k1" ]; then ok; else bad "kv cache does not grow: $k1 $k2"; fi
mb=$(jget max_batch "$TMP/g")
"$VRAM" plan --config "$CONF/llama-300m.json" --generate --batch "$mb" --prompt 1024 \
    --new-tokens 256 --precision bf16 --gpu-memory 24G --json >"$TMP/ga" 2>&1
"$VRAM" plan --config "$CONF/llama-300m.json" --generate --batch $((mb + 1)) --prompt 1024 \
    --new-tokens 256 --precision bf16 --gpu-memory 24G --json >"$TMP/gb" 2>&1
if grep -q '"fits":true' "$TMP/ga" && grep -q '"fits":false' "$TMP/gb"; then ok; else
    bad "max_batch $mb does not bound what fits"; fi

# Generation's phases: Qwen2 0.5B (tied) at batch 1 peaks while it is built
# (weights + its head's own 151936 x 896 bf16 weight); at batch 16 x 1024 in
# fp32 at the prefill's attention (math SDPA). The JSON keeps its keys and
# adds the phases; the text report names them.
"$VRAM" plan --config "$CONF/qwen2-0.5b.json" --generate --batch 1 --prompt 256 \
    --new-tokens 64 --precision bf16 --json >"$TMP/q1" 2>&1
"$VRAM" plan --config "$CONF/qwen2-0.5b.json" --generate --batch 16 --prompt 1024 \
    --new-tokens 64 --precision fp32 --json >"$TMP/q2" 2>&1
w=$(jget weights "$TMP/q1"); t=$(jget tensor_peak_bytes "$TMP/q1")
if grep -q '"peak_phase":"construction"' "$TMP/q1" && [ -n "$w" ] &&
    [ "$t" = $((w + 151936 * 896 * 2)) ] && [ "$(jget construction "$TMP/q1")" = "$t" ]; then ok
else bad "qwen2 b1: construction not the peak: $(head -c 300 "$TMP/q1")"; fi
if grep -q '"peak_phase":"prefill"' "$TMP/q2" && grep -q '"prefill_at":"attention"' "$TMP/q2"
then ok; else bad "qwen2 fp32 b16: $(head -c 300 "$TMP/q2")"; fi
for k in task arch params precision batch prompt new_tokens peak_phase tensor_peak_bytes \
    total_bytes weights kv_cache activations allocator_overhead cuda_context \
    cublas_workspace token_ids last_decode_step; do
    grep -q "\"$k\":" "$TMP/q2" || bad "generate --json lacks $k"
done
"$VRAM" plan --config "$CONF/qwen2-0.5b.json" --generate --batch 1 --prompt 256 \
    --new-tokens 64 --precision bf16 >"$TMP/q3" 2>&1
if grep -q "at the construction" "$TMP/q3" && grep -q "each phase: construction" "$TMP/q3"
then ok; else bad "generate text report: $(cat "$TMP/q3")"; fi

# Hostile input: absurd sizes, overflow, trailing data, duplicate keys.
printf '{"model_type": "gpt2", "n_layer": 100000000000000000000000, "n_embd": 768, "n_head": 12, "vocab_size": 50257}' >"$TMP/huge.json"
printf '{"model_type": "gpt2", "n_layer": 100000, "n_embd": 768, "n_head": 12, "vocab_size": 50257}' >"$TMP/layers.json"
printf '{"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257} {}' >"$TMP/trail.json"
printf '{"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_head": 16, "vocab_size": 50257}' >"$TMP/dup.json"
printf '{"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "x": {"a": 1, "a": 2}}' >"$TMP/dup2.json"
printf '{"model_type": "mistral", %s}' "$llama_cfg" >"$TMP/mistral-nowin.json"
expect_usage "n_layer 10^23" --config "$TMP/huge.json" --batch 8 --seq 512
expect_usage "100000 layers" --config "$TMP/layers.json" --batch 8 --seq 512
expect_usage "trailing data" --config "$TMP/trail.json" --batch 8 --seq 512
expect_usage "duplicate key" --config "$TMP/dup.json" --batch 8 --seq 512
expect_usage "nested duplicate key" --config "$TMP/dup2.json" --batch 8 --seq 512
expect_usage "sizes of 10^6" --arch gpt2 --layers 12 --hidden 1000000 --heads 1000 \
    --vocab 1000000 --batch 1000000 --seq 1000000
expect_usage "heads 10^6" --arch llama --layers 12 --hidden 1048576 --heads 1048576 \
    --vocab 1000 --batch 1 --seq 1
expect_usage "generate bert" --config "$CONF/bert-base.json" --generate --batch 1 --prompt 8 \
    --new-tokens 8
expect_usage "generate without prompt" --config "$CONF/gpt2.json" --generate --batch 1
expect_usage "trace without model" --config "$CONF/gpt2.json" --batch 8 --seq 512 --trace x
expect_usage "model with batch" --model x.py:f --batch 8
expect_usage "program with --image" --model x.py:f --image 64
expect_usage "torch-version without model" --config "$CONF/gpt2.json" --batch 8 --seq 512 \
    --torch-version 2.11
expect_usage "image without model" --config "$CONF/gpt2.json" --batch 8 --seq 512 --image 64
# A named model: its job's flags reach the tracer (a python3 with PyTorch
# and torchvision is needed; skipped without one).
if "$VRAM" plan --model torchvision:resnet18 --batch 2 --image 32 --precision mixed-bf16 \
    --optimizer sgd-momentum --torch-version 2.11 --json >"$TMP/named" 2>"$TMP/err"; then
    if grep -q '"torch_target":"2.11"' "$TMP/named" && grep -q '"model":"torchvision:resnet18"' \
        "$TMP/named" && [ "$(jget weights "$TMP/named")" -gt 0 ]; then ok; else
        bad "named model: $(head -c 300 "$TMP/named")"; fi
elif grep -q "needs python3 with PyTorch\|torchvision is not importable\|No module named" \
    "$TMP/err"; then
    ok
else
    bad "named model: $(cat "$TMP/err")"
fi
"$VRAM" plan --model torchvision:resnet18 --batch 2 --torch-version 0.4 >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] || grep -q "needs python3" "$TMP/err"; then ok
else bad "--torch-version 0.4: rc=$rc $(cat "$TMP/err")"; fi
if "$VRAM" plan --config "$TMP/mistral-nowin.json" --batch 1 --seq 64 >/dev/null 2>&1; then ok
else bad "mistral without sliding_window refused"; fi

test_end
