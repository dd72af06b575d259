/* SPDX-License-Identifier: MIT */
/*
** test_plan.c -- the memory model of `vram plan` (src/plan/plan.c, the
** formulas in docs/PLAN.md): parameter counts of GPT-2 small, BERT-base
** and the 250M LLaMA exactly; each term's formula on a toy model; the
** directions every prediction must move in (more batch, more memory;
** checkpointing and ZeRO less); config parsing and invalid jobs.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "plan/plan.h"

static const struct plan_model gpt2_small = {PLAN_GPT2, 12, 768, 12, 12, 3072, 50257, 1024,
                                             0, true, true, 0, false, false, false, 0};
static const struct plan_model bert_base = {PLAN_BERT, 12, 768, 12, 12, 3072, 30522, 512,
                                            2, true, true, 0, false, false, false, 0};
static const struct plan_model llama_250m = {PLAN_LLAMA, 16, 1024, 16, 4, 2816, 32000, 4096,
                                             0, false, false, 0, false, false, false, 0};
/* A toy GPT-2: one layer, h=4, 2 heads, MLP 16, vocabulary 10, 8 positions. */
static const struct plan_model toy = {PLAN_GPT2, 1, 4, 2, 2, 16, 10, 8, 0, true, true, 0, false, false, false, 0};

static struct plan_job
job(uint64_t batch, uint64_t seq, enum plan_precision p)
{
    struct plan_job j = {batch, seq, 1, 1, 0, p, PLAN_ADAMW, PLAN_SDPA, false};
    return j;
}

static void
test_param_counts(void **state)
{
    (void)state;
    assert_int_equal(plan_param_count(&gpt2_small), 124439808);
    assert_int_equal(plan_param_count(&bert_base), 109514298);
    assert_int_equal(plan_param_count(&llama_250m), 245924864);
    /* toy: wte 40 + wpe 32 + layer (8 + 60 + 20 + 8 + 80 + 68) + ln_f 8 */
    assert_int_equal(plan_param_count(&toy), 40 + 32 + 244 + 8);
}

static void
test_config_parse(void **state)
{
    (void)state;
    static const char gpt2[] = "{\"model_type\": \"gpt2\", \"n_layer\": 12, \"n_embd\": 768,"
                               " \"n_head\": 12, \"n_inner\": null, \"n_positions\": 1024,"
                               " \"vocab_size\": 50257, \"tie_word_embeddings\": true}";
    static const char llama[] = "{\"model_type\": \"llama\", \"hidden_size\": 1024,"
                                " \"intermediate_size\": 2816, \"num_hidden_layers\": 16,"
                                " \"num_attention_heads\": 16, \"num_key_value_heads\": 4,"
                                " \"max_position_embeddings\": 4096, \"vocab_size\": 32000,"
                                " \"tie_word_embeddings\": false}";
    struct plan_model m;
    char err[160];
    assert_true(plan_config_parse(gpt2, &m, err, sizeof err));
    assert_int_equal(plan_param_count(&m), 124439808);
    assert_int_equal(m.intermediate, 3072);
    assert_true(plan_config_parse(llama, &m, err, sizeof err));
    assert_int_equal(plan_param_count(&m), 245924864);
    assert_int_equal(m.kv_heads, 4);
    assert_false(m.tied);

    memset(&m, 0x5a, sizeof m);
    struct plan_model before = m;
    assert_false(plan_config_parse("{\"model_type\": ", &m, err, sizeof err));
    assert_non_null(strstr(err, "JSON"));
    assert_false(plan_config_parse("{\"model_type\": \"t5\", \"n_layer\": 2}", &m, err, sizeof err));
    assert_non_null(strstr(err, "t5"));
    assert_false(plan_config_parse("{\"model_type\": \"gpt2\", \"n_layer\": 2}", &m, err, sizeof err));
    assert_false(plan_config_parse("[1, 2]", &m, err, sizeof err));
    assert_memory_equal(&m, &before, sizeof m); /* written only on success */
}

/* The per-layer formula of docs/PLAN.md on the toy, h=4, i=16, fused
** attention (no S x S scores; its output is already laid out as the merged
** heads, so no copy):
** fp32  h(2*4 + 6*4 + 2) + i(3*4 + 2*4) = 136 + 320
** mixed h(2*4 + 6*2 + 2) + i(3*4 + 2*2) = 88 + 256
** bf16  h(2*2 + 6*2 + 2) + i(3*2 + 2*2) = 72 + 160
** eager adds the merged copy (2h) and heads * seq * (softmax 4 + mask 1 +
** copy 2) under mixed. */
static void
test_layer_formula(void **state)
{
    (void)state;
    assert_int_equal(plan_layer_bytes_per_token(&toy, PLAN_FP32, PLAN_SDPA, 8), 456);
    assert_int_equal(plan_layer_bytes_per_token(&toy, PLAN_MIXED_BF16, PLAN_SDPA, 8), 344);
    assert_int_equal(plan_layer_bytes_per_token(&toy, PLAN_BF16, PLAN_SDPA, 8), 232);
    assert_int_equal(plan_layer_bytes_per_token(&toy, PLAN_MIXED_BF16, PLAN_EAGER, 8),
                     344 + 2 * 4 + 2 * 8 * 7);
    /* fused attention keeps no S x S matrix: bytes per token do not grow with S */
    assert_int_equal(plan_layer_bytes_per_token(&gpt2_small, PLAN_MIXED_BF16, PLAN_SDPA, 512),
                     plan_layer_bytes_per_token(&gpt2_small, PLAN_MIXED_BF16, PLAN_SDPA, 4096));
}

/* Model states of the toy (P = 324) in fp32 with AdamW, SGD and ZeRO. */
static void
test_state_terms(void **state)
{
    (void)state;
    const uint64_t P = 324;
    struct plan_result r;
    struct plan_job j = job(1, 1, PLAN_FP32);
    assert_true(plan_predict(&toy, &j, &r, NULL));
    assert_int_equal(r.params, P);
    assert_int_equal(r.weights_bytes, 4 * P);
    assert_int_equal(r.optimizer_bytes, 8 * P);
    j.optimizer = PLAN_SGD_MOMENTUM;
    assert_true(plan_predict(&toy, &j, &r, NULL));
    assert_int_equal(r.optimizer_bytes, 4 * P);
    j.optimizer = PLAN_SGD;
    assert_true(plan_predict(&toy, &j, &r, NULL));
    assert_int_equal(r.optimizer_bytes, 0);
    j = job(1, 1, PLAN_BF16);
    assert_true(plan_predict(&toy, &j, &r, NULL));
    assert_int_equal(r.weights_bytes, 2 * P);
    assert_int_equal(r.optimizer_bytes, 4 * P);
    /* A toy this small peaks in the optimizer step: W + G + 2 states + one
    ** state-sized temporary. */
    j = job(1, 1, PLAN_FP32);
    assert_true(plan_predict(&toy, &j, &r, NULL));
    assert_string_equal(r.peak_phase, "optimizer step");
    assert_int_equal(r.tensor_peak_bytes, 4 * P + 4 * P + 8 * P + 4 * P);
    assert_int_equal(r.total_bytes,
                     r.tensor_peak_bytes + r.allocator_bytes + PLAN_CONTEXT_BYTES);
}

/* Activations and the loss on the toy at batch 2 x seq 8 (16 tokens),
** fp32: layers 456 + outer (mask h + ln_f h*4 + lm_head input h*4 = 36)
** per token, the loss 3 fp32 vocabulary rows (120) per token. */
static void
test_activation_terms(void **state)
{
    (void)state;
    struct plan_model big = toy;
    big.layers = 64; /* enough activations to move the peak into backward */
    struct plan_result r;
    struct plan_job j = job(2, 8, PLAN_FP32);
    assert_true(plan_predict(&big, &j, &r, NULL));
    assert_string_equal(r.peak_phase, "backward");
    assert_int_equal(r.activations_bytes, 16 * (64 * 456 + 36));
    assert_int_equal(r.temporary_bytes, 16 * 120);
    assert_int_equal(r.gradients_bytes, 0);
    assert_int_equal(r.tensor_peak_bytes, r.weights_bytes + r.optimizer_bytes +
                                              r.activations_bytes + r.temporary_bytes);
}

static void
test_monotonic(void **state)
{
    (void)state;
    const struct plan_model *models[] = {&gpt2_small, &bert_base, &llama_250m};
    for (size_t k = 0; k < 3; k++) {
        struct plan_result a, b;
        for (int p = PLAN_FP32; p <= PLAN_BF16; p++) {
            struct plan_job j = job(8, 512, (enum plan_precision)p);
            assert_true(plan_predict(models[k], &j, &a, NULL));
            j.batch = 16;
            assert_true(plan_predict(models[k], &j, &b, NULL));
            assert_true(b.tensor_peak_bytes > a.tensor_peak_bytes);
            j.seq = 1024;
            assert_true(plan_predict(models[k], &j, &a, NULL));
            assert_true(a.tensor_peak_bytes > b.tensor_peak_bytes);
            /* checkpointing keeps fewer activations */
            j = job(16, 1024, (enum plan_precision)p);
            assert_true(plan_predict(models[k], &j, &a, NULL));
            j.checkpointing = true;
            assert_true(plan_predict(models[k], &j, &b, NULL));
            assert_true(b.activations_bytes < a.activations_bytes);
            assert_true(b.tensor_peak_bytes < a.tensor_peak_bytes);
            /* accumulation: smaller micro-batches, less memory */
            j = job(16, 1024, (enum plan_precision)p);
            j.accum = 4;
            assert_true(plan_predict(models[k], &j, &b, NULL));
            assert_true(b.tensor_peak_bytes < a.tensor_peak_bytes);
            /* eager attention keeps the scores */
            j = job(16, 1024, (enum plan_precision)p);
            j.attention = PLAN_EAGER;
            assert_true(plan_predict(models[k], &j, &b, NULL));
            if (models[k] == &llama_250m && p == PLAN_FP32) /* SDPA's math path keeps them too */
                assert_true(b.tensor_peak_bytes == a.tensor_peak_bytes);
            else
                assert_true(b.tensor_peak_bytes > a.tensor_peak_bytes);
        }
    }
}

static void
test_zero(void **state)
{
    (void)state;
    struct plan_result r0, r1, r2, r3;
    struct plan_job j = job(8, 1024, PLAN_MIXED_BF16);
    j.data_parallel = 8;
    assert_true(plan_predict(&llama_250m, &j, &r0, NULL));
    j.zero = 1;
    assert_true(plan_predict(&llama_250m, &j, &r1, NULL));
    j.zero = 2;
    assert_true(plan_predict(&llama_250m, &j, &r2, NULL));
    j.zero = 3;
    assert_true(plan_predict(&llama_250m, &j, &r3, NULL));
    assert_int_equal(r1.optimizer_bytes, r0.optimizer_bytes / 8);
    assert_int_equal(r3.weights_bytes, r0.weights_bytes / 8);
    assert_int_equal(r2.weights_bytes, r0.weights_bytes);
    assert_true(r1.tensor_peak_bytes < r0.tensor_peak_bytes);
    assert_true(r3.tensor_peak_bytes < r1.tensor_peak_bytes);
}

/* Held out: other sizes of the three families, measured on an H200 on
** 2026-11-30 the way data/measurements/README.md describes (random weights
** and tokens, labels = inputs, three AdamW steps, max_memory_allocated
** minus what was allocated before the model; PyTorch 2.11, transformers
** 5.17), batch 8: GPT-2 medium, a 99M LLaMA (8 layers, h 768, 12 heads, 4
** kv heads, MLP 2048), BERT-large. Recorded in docs/PLAN.md; each within 5%. */
static void
test_heldout_sizes(void **state)
{
    (void)state;
    static const struct plan_model gpt2_medium = {PLAN_GPT2, 24, 1024, 16, 16, 4096, 50257,
                                                  1024, 0, true, true, 0, false, false, false, 0};
    static const struct plan_model llama_99m = {PLAN_LLAMA, 8, 768, 12, 4, 2048, 32000, 0,
                                                0, false, false, 0, false, false, false, 0};
    static const struct plan_model bert_large = {PLAN_BERT, 24, 1024, 16, 16, 4096, 30522, 512,
                                                 2, true, true, 0, false, false, false, 0};
    static const struct {
        const struct plan_model *m;
        uint64_t params, seq;
        enum plan_precision p;
        double measured;
    } runs[] = {
        {&gpt2_medium, 354823168, 1024, PLAN_MIXED_BF16, 28167412736.0},
        {&gpt2_medium, 354823168, 512, PLAN_FP32, 19057796096.0},
        {&gpt2_medium, 354823168, 512, PLAN_BF16, 10871536640.0},
        {&llama_99m, 99496704, 1024, PLAN_MIXED_BF16, 7223512064.0},
        {&llama_99m, 99496704, 512, PLAN_FP32, 5691878400.0},
        {&llama_99m, 99496704, 512, PLAN_BF16, 3284802048.0},
        {&bert_large, 335174458, 512, PLAN_MIXED_BF16, 10240851968.0},
        {&bert_large, 335174458, 512, PLAN_FP32, 12262956544.0},
        {&bert_large, 335174458, 512, PLAN_BF16, 6238252032.0},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        struct plan_result r;
        struct plan_job j = job(8, runs[k].seq, runs[k].p);
        assert_int_equal(plan_param_count(runs[k].m), runs[k].params);
        assert_true(plan_predict(runs[k].m, &j, &r, NULL));
        double e = ((double)r.tensor_peak_bytes - runs[k].measured) / runs[k].measured;
        assert_true(e > -0.05 && e < 0.05);
    }
}

/* Generation, by hand (docs/PLAN.md, "Generation with a KV cache"), with the
** cuBLAS workspace WS = 32 MiB. The toy GPT-2 (324 parameters, tied), batch
** 2, prompt 3, 2 new tokens, fp32 (4 bytes):
**   construction  weights 1296 + its own head 10 x 4 x 4 = 1456
**   prefill       weights + WS + ids 6 tokens x 32 (192) + cache 1 layer x K,V
**                 x 6 tokens x 4 x 4 (192) + the MLP: 6 x (6h + 4I) x 4 = 2112
**                 (attention 6 x 9h x 4 = 864, logits max(96 + 80, 160))
**   decode        weights + WS + ids 8 x 32 + cache 2 x 8 x 4 x 4 (256) + one
**                 token's MLP per sequence, 2 x 88 x 4 = 704 */
static void
test_generate_gpt2(void **state)
{
    (void)state;
    const uint64_t ws = 32u << 20;
    struct plan_gen_job g = {2, 3, 2, PLAN_FP32, PLAN_SDPA};
    struct plan_gen_result r;
    assert_true(plan_generate(&toy, &g, &r, NULL));
    assert_int_equal(r.weights_bytes, 1296);
    assert_int_equal(r.tensor_peak_bytes, 1296 + ws + 192 + 192 + 2112);
    assert_string_equal(r.peak_phase, "prefill");
    assert_int_equal(r.kv_cache_bytes, 192);
    assert_int_equal(r.activations_bytes, 2112);
    assert_int_equal(r.construction_bytes, 1456);
    assert_int_equal(r.decode_bytes, 1296 + ws + 256 + 256 + 704);
    assert_int_equal(r.workspace_bytes, ws);
    assert_int_equal(r.token_ids_bytes, 192);
    assert_string_equal(r.prefill_at, "mlp");
}

/* A tied LLaMA-shaped toy whose vocabulary dwarfs the rest: layer 1, h 8,
** heads 2 (kv 1, head_dim 4), MLP 16, vocabulary 2^22, q/k/v biases:
** 2^25 + 608 + 8 parameters, bf16. Built from its config, its head's own
** 2^22 x 8 x 2-byte weight lives until tying frees it: the construction
** (weights 67110096 + 67108864) outweighs prefill and decode, which are
** the logits and their fp32 copy: 2^22 x (2 + 4). Untied, construction is
** the weights alone. */
static void
test_generate_construction(void **state)
{
    (void)state;
    const uint64_t ws = 32u << 20;
    struct plan_model m = {PLAN_QWEN2, 1, 8, 2, 1, 16, 1u << 22, 0, 0, true, false, 0,
                           true, false, false, 0};
    struct plan_gen_job g = {1, 4, 1, PLAN_BF16, PLAN_SDPA};
    struct plan_gen_result r;
    assert_true(plan_generate(&m, &g, &r, NULL));
    assert_int_equal(r.params, (1u << 25) + 608 + 8);
    assert_int_equal(r.tensor_peak_bytes, 67110096ull + 67108864ull);
    assert_string_equal(r.peak_phase, "construction");
    assert_int_equal(r.activations_bytes, 67108864);
    assert_int_equal(r.kv_cache_bytes, 0);
    assert_int_equal(r.workspace_bytes, 0);
    /* prefill: ids 4 x 32, cache 2 x 4 tokens x 4 x 2 bytes, logits */
    assert_int_equal(r.prefill_bytes, 67110096ull + ws + 128 + 64 + 25165824);
    assert_string_equal(r.prefill_at, "logits");
    m.tied = false;
    assert_true(plan_generate(&m, &g, &r, NULL));
    assert_int_equal(r.construction_bytes, r.weights_bytes);
    assert_string_equal(r.peak_phase, "prefill");
}

/* fp32 grouped-query attention: SDPA's math path. The LLaMA-shaped toy
** (h 8, q 8, kv 4, MLP 16, vocabulary 10, untied: 776 parameters), batch 2,
** prompt 16 (32 tokens): at the last layer's attention, its inputs
** 32 x (3h + 2 x head_dim + q) x 4 = 5120, and inside the kernel q scaled
** (2 x 16 x 8 x 4 = 1024), k and v to every head (2048), the causal mask
** (16 x 16 x 4 = 1024), the scores, softmax and -inf test for
** 2 x 2 x 16 x 16 = 1024 elements (9216) and one byte per row (64): 18496,
** above the MLP's 32 x (4h + 2 x 4 + 3I) x 4 = 11264. In bf16 flash
** attention takes grouped-query attention: the MLP is the widest. */
static void
test_generate_math_sdpa(void **state)
{
    (void)state;
    const uint64_t ws = 32u << 20;
    struct plan_model m = {PLAN_QWEN2, 1, 8, 2, 1, 16, 10, 0, 0, false, false, 0,
                           true, false, false, 0};
    struct plan_gen_job g = {2, 16, 1, PLAN_FP32, PLAN_SDPA};
    struct plan_gen_result r;
    assert_true(plan_generate(&m, &g, &r, NULL));
    assert_int_equal(r.weights_bytes, 776 * 4);
    assert_string_equal(r.peak_phase, "prefill");
    assert_string_equal(r.prefill_at, "attention");
    assert_int_equal(r.activations_bytes, 5120 + 1024 + 2048 + 1024 + 9216 + 64);
    assert_int_equal(r.tensor_peak_bytes, 3104 + ws + 1024 + 1024 + 18496);
    g.precision = PLAN_BF16;
    assert_true(plan_generate(&m, &g, &r, NULL));
    assert_string_equal(r.prefill_at, "mlp");
    assert_int_equal(r.activations_bytes, 32 * 88 * 2);
}

static void
test_invalid_jobs(void **state)
{
    (void)state;
    struct plan_result r;
    memset(&r, 0x77, sizeof r);
    struct plan_result before = r;
    const char *why = NULL;
    struct plan_job j = job(0, 512, PLAN_FP32);
    assert_false(plan_predict(&gpt2_small, &j, &r, &why));
    assert_non_null(strstr(why, "batch"));
    j = job(6, 512, PLAN_FP32);
    j.accum = 4;
    assert_false(plan_predict(&gpt2_small, &j, &r, &why));
    j = job(8, 512, PLAN_FP32);
    j.zero = 4;
    assert_false(plan_predict(&gpt2_small, &j, &r, &why));
    j = job(8, 0, PLAN_FP32);
    assert_false(plan_predict(&gpt2_small, &j, &r, &why));
    assert_memory_equal(&r, &before, sizeof r);

    enum plan_precision p;
    assert_true(plan_precision_parse("mixed-bf16", &p));
    assert_int_equal(p, PLAN_MIXED_BF16);
    assert_false(plan_precision_parse("fp8", &p));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_counts),   cmocka_unit_test(test_config_parse),
        cmocka_unit_test(test_layer_formula),  cmocka_unit_test(test_state_terms),
        cmocka_unit_test(test_activation_terms), cmocka_unit_test(test_monotonic),
        cmocka_unit_test(test_zero),           cmocka_unit_test(test_heldout_sizes),
        cmocka_unit_test(test_generate_gpt2),  cmocka_unit_test(test_generate_construction),
        cmocka_unit_test(test_generate_math_sdpa), cmocka_unit_test(test_invalid_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
