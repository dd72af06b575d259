/* SPDX-License-Identifier: MIT */
/*
** plan.h -- the memory model behind `vram plan`: the peak GPU memory of a
** training step of a transformer (GPT-2, BERT, LLaMA families) under
** PyTorch + Hugging Face transformers, derived from the model's structure
** (parameters, the tensors each layer keeps for backward, the logits and
** loss buffers, optimizer state). Pure functions, no I/O except
** plan_config_parse, which reads a config.json text. docs/PLAN.md gives
** every formula and assumption.
*/
#ifndef VRAM_PLAN_PLAN_H
#define VRAM_PLAN_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The families whose structure the model knows. Mistral and Qwen2 are
** LLaMA-shaped (RMSNorm, RoPE, SwiGLU, grouped-query attention) with their
** own differences: Qwen2's q/k/v projections carry biases; both may use a
** sliding attention window (Mistral by default, Qwen2 when
** use_sliding_window is set), which makes the attention mask explicit. */
enum plan_arch { PLAN_GPT2, PLAN_BERT, PLAN_LLAMA, PLAN_MISTRAL, PLAN_QWEN2 };
#define PLAN_N_ARCH 5

/* Limits beyond what any model has; larger values are refused. */
#define PLAN_MAX_LAYERS 4096
#define PLAN_MAX_HIDDEN (1u << 20)
#define PLAN_MAX_HEADS 4096
#define PLAN_MAX_INTERMEDIATE (1u << 22)
#define PLAN_MAX_VOCAB (1u << 24)
#define PLAN_MAX_POSITIONS (1u << 24)
#define PLAN_MAX_BATCH (1u << 30)
#define PLAN_MAX_SEQ (1u << 24)
#define PLAN_MAX_RANKS (1u << 20)
enum plan_precision {
    PLAN_FP32,       /* everything fp32 */
    PLAN_MIXED_FP16, /* fp32 weights, fp16 autocast */
    PLAN_MIXED_BF16, /* fp32 weights, bf16 autocast */
    PLAN_FP16,       /* weights, grads, states in fp16 */
    PLAN_BF16        /* weights, grads, states in bf16 */
};
enum plan_optimizer { PLAN_SGD, PLAN_SGD_MOMENTUM, PLAN_ADAM, PLAN_ADAMW };
enum plan_attention { PLAN_SDPA, PLAN_EAGER };

/* The model: counts, not bytes. */
struct plan_model {
    enum plan_arch arch;
    uint64_t layers, hidden, heads, kv_heads, intermediate, vocab, positions;
    uint64_t type_vocab; /* BERT token types (2) */
    bool tied;           /* output layer shares the input embedding */
    bool dropout;        /* training dropout > 0 (GPT-2, BERT defaults) */
    uint64_t head_dim;   /* per-head size; 0: hidden / heads */
    bool qkv_bias;       /* q, k, v projections have biases (Qwen2, attention_bias) */
    bool o_bias;         /* the output projection has one (LLaMA attention_bias) */
    bool mlp_bias;       /* the MLP's projections have biases (LLaMA mlp_bias) */
    uint64_t window;     /* sliding attention window in tokens; 0: none */
};

/* The job. batch is per optimizer step per data-parallel rank; each
** forward/backward sees batch/accum sequences. */
struct plan_job {
    uint64_t batch, seq, accum, data_parallel;
    int zero; /* ZeRO stage 0..3 */
    enum plan_precision precision;
    enum plan_optimizer optimizer;
    enum plan_attention attention;
    bool checkpointing;
};

/* The terms, in bytes, of the peak. */
struct plan_result {
    uint64_t params;             /* parameter count */
    uint64_t weights_bytes;      /* parameters (this rank's share) */
    uint64_t gradients_bytes;    /* gradients live at the peak */
    uint64_t optimizer_bytes;    /* optimizer state (this rank's share) */
    uint64_t activations_bytes;  /* tensors saved for backward at the peak */
    uint64_t temporary_bytes;    /* logits/loss buffers, autocast weight copies,
                                    optimizer temporaries at the peak */
    uint64_t tensor_peak_bytes;  /* max_memory_allocated prediction */
    uint64_t allocator_bytes;    /* caching-allocator overhead above it */
    uint64_t context_bytes;      /* CUDA context of the process */
    uint64_t total_bytes;        /* tensor peak + allocator + context */
    const char *peak_phase;      /* "backward", "optimizer step", "recompute" */
};

/* CUDA context of a PyTorch process on an H200 (measured, README). */
#define PLAN_CONTEXT_BYTES 591855616ULL

/* Parameter count of M. */
uint64_t plan_param_count(const struct plan_model *m);

/* Bytes one transformer layer keeps for backward per token (checkpointing
** off), for precision P and attention A at sequence length SEQ. */
uint64_t plan_layer_bytes_per_token(const struct plan_model *m, enum plan_precision p,
                                    enum plan_attention a, uint64_t seq);

/* Predict the peak of job J on model M into *OUT. Returns false (and
** leaves *OUT alone) when J is invalid (batch 0, accum not dividing batch,
** zero outside 0..3, data_parallel 0); WHY then names the problem. */
bool plan_predict(const struct plan_model *m, const struct plan_job *j,
                  struct plan_result *out, const char **why);

/* Parse a Hugging Face config.json TEXT into *OUT. Returns false with a
** one-line reason in ERR (LEN bytes) on malformed JSON (trailing data,
** duplicate keys included), an unknown family, missing or absurd sizes. */
bool plan_config_parse(const char *text, struct plan_model *out, char *err, size_t len);
/* The same for N bytes at TEXT (which need not end in NUL); a NUL byte
** inside is refused. */
bool plan_config_parse_n(const char *text, size_t n, struct plan_model *out, char *err,
                         size_t len);

/* Is M within the limits above, its heads dividing its sizes? Returns
** false with a one-line reason in ERR. */
bool plan_model_check(const struct plan_model *m, char *err, size_t len);

/* Defaults of a family (tied embeddings, dropout, ...), sizes zero. */
struct plan_model plan_model_defaults(enum plan_arch a);

/* ---- inference: generation with a key/value cache ---- */

/* A generation job: BATCH sequences of PROMPT tokens, NEW_TOKENS generated
** greedily by Hugging Face's generate() with its dynamic cache; weights,
** cache and activations all of precision P (fp32, fp16 or bf16); the
** model built on the GPU from its configuration (from_config under
** torch.device("cuda")), attention A (SDPA unless eager is asked for). */
struct plan_gen_job {
    uint64_t batch, prompt, new_tokens;
    enum plan_precision precision;
    enum plan_attention attention; /* zero: PLAN_SDPA */
};

/* The peak is the largest of three phases, each given in bytes:
**   construction  the weights, and for a tied output layer its own weight
**                 (built before tying frees it);
**   prefill       the prompt's pass: cache, the last layer's widest moment
**                 (its MLP, its attention, or the logits);
**   decode        the last generated token's step. */
struct plan_gen_result {
    uint64_t params;
    uint64_t weights_bytes;      /* the model */
    uint64_t kv_cache_bytes;     /* the cache at the peak */
    uint64_t activations_bytes;  /* the peak phase's transient tensors */
    uint64_t tensor_peak_bytes;
    uint64_t allocator_bytes, context_bytes, total_bytes;
    const char *peak_phase;      /* "construction", "prefill" or "last decode step" */
    uint64_t workspace_bytes;    /* cuBLAS workspace at the peak (0 at construction) */
    uint64_t token_ids_bytes;    /* int64 ids, attention mask, positions at the peak */
    uint64_t construction_bytes, prefill_bytes, decode_bytes; /* each phase's peak */
    const char *prefill_at;      /* the prefill's widest moment: "mlp", "attention",
                                    "logits" */
};

/* Predict a generation's peak; false (with WHY) for an invalid job or a
** family without a causal LM (BERT). */
bool plan_generate(const struct plan_model *m, const struct plan_gen_job *j,
                   struct plan_gen_result *out, const char **why);

/* Names <-> enums; the parse functions return false on unknown text. */
bool plan_precision_parse(const char *s, enum plan_precision *out);
bool plan_optimizer_parse(const char *s, enum plan_optimizer *out);
bool plan_attention_parse(const char *s, enum plan_attention *out);
const char *plan_precision_name(enum plan_precision p);
const char *plan_optimizer_name(enum plan_optimizer o);
const char *plan_arch_name(enum plan_arch a);
/* model_type -> family; false for a model_type the model does not know. */
bool plan_arch_parse(const char *s, enum plan_arch *out);
/* "gpt2, bert, llama, mistral, qwen2": every accepted model_type. */
const char *plan_arch_list(void);

#endif
