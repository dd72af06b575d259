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

enum plan_arch { PLAN_GPT2, PLAN_BERT, PLAN_LLAMA };
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
** one-line reason in ERR (LEN bytes) on malformed JSON, an unknown family
** or missing sizes. */
bool plan_config_parse(const char *text, struct plan_model *out, char *err, size_t len);

/* Names <-> enums; the parse functions return false on unknown text. */
bool plan_precision_parse(const char *s, enum plan_precision *out);
bool plan_optimizer_parse(const char *s, enum plan_optimizer *out);
bool plan_attention_parse(const char *s, enum plan_attention *out);
const char *plan_precision_name(enum plan_precision p);
const char *plan_optimizer_name(enum plan_optimizer o);
const char *plan_arch_name(enum plan_arch a);

#endif
