/* SPDX-License-Identifier: MIT */
/*
** plan.c -- the memory model of `vram plan` (plan.h): the peak tensor
** memory of a training step, term by term, from the model's structure.
**
** Every byte count below names the tensor it stands for; docs/PLAN.md
** lists them with the PyTorch/transformers behaviour they assume. Nothing
** here is fitted to measurements: the only measured constant is the CUDA
** context of a PyTorch process (PLAN_CONTEXT_BYTES).
*/
#include "plan/plan.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

/* Sizes are computed in 128 bits and checked against 64 at the end. With
** the inputs within the PLAN_MAX_* limits no intermediate exceeds 2^110
** (the largest product: tokens 2^54 x layers 2^12 x score bytes per token
** 2^39), so a result above 2^64 - 1 is refused, never wrapped. */
__extension__ typedef unsigned __int128 wide;
#define WIDE_MAX64 ((wide)UINT64_MAX)

/* ------------------------------------------------------------------ */
/* Element sizes per precision                                          */
/* ------------------------------------------------------------------ */

/* Sizes, in bytes, of the element types one precision produces. */
struct dtypes {
    uint64_t weight; /* parameters, gradients, optimizer states */
    uint64_t res;    /* the residual stream (fp32 under autocast) */
    uint64_t low;    /* matmul / attention outputs */
    uint64_t f32op;  /* ops autocast runs in fp32 (layer_norm, pow, softmax) */
    bool autocast;   /* fp32 weights, low-precision matmuls */
};

static struct dtypes
dtypes_of(enum plan_precision p)
{
    struct dtypes d;
    switch (p) {
    case PLAN_FP32:
        d = (struct dtypes){4, 4, 4, 4, false};
        break;
    case PLAN_MIXED_FP16:
    case PLAN_MIXED_BF16:
        d = (struct dtypes){4, 4, 2, 4, true};
        break;
    default: /* PLAN_FP16, PLAN_BF16 */
        d = (struct dtypes){2, 2, 2, 2, false};
        break;
    }
    return d;
}

/* Bytes per element of a matmul input that N matmuls read: under autocast
** each matmul saves its own low-precision cast copy; otherwise the input
** tensor itself is saved once. */
static wide
mm_in(const struct dtypes *d, wide n)
{
    return d->autocast ? n * d->low : d->res;
}

/* Bytes per token of an RMSNorm written as HF's LlamaRMSNorm: the fp32
** input kept by pow (4h), the normalized tensor kept by the weight multiply
** (res), and the output kept by the N matmuls that read it. */
static wide
rmsnorm_bytes(const struct dtypes *d, wide h, wide n)
{
    return 4 * h + d->res * h + mm_in(d, n) * h;
}

static bool
llama_like(enum plan_arch a)
{
    return a == PLAN_LLAMA || a == PLAN_MISTRAL || a == PLAN_QWEN2;
}

/* Widths of the attention projections: q (and o's input) heads x head_dim,
** k and v kv_heads x head_dim. */
struct widths {
    wide h, i, q, kv;
};

static struct widths
widths_of(const struct plan_model *m)
{
    struct widths w;
    wide hd = m->head_dim ? m->head_dim : (m->heads ? m->hidden / m->heads : m->hidden);
    w.h = m->hidden;
    w.i = m->intermediate;
    w.q = (wide)m->heads * hd;
    w.kv = (wide)m->kv_heads * hd;
    return w;
}

/* ------------------------------------------------------------------ */
/* Parameters                                                           */
/* ------------------------------------------------------------------ */

static wide
param_count(const struct plan_model *m)
{
    struct widths w = widths_of(m);
    wide h = w.h, i = w.i, v = m->vocab, L = m->layers;
    wide n = 0;
    switch (m->arch) {
    case PLAN_GPT2: /* wte, wpe; ln_1, c_attn, c_proj, ln_2, c_fc, c_proj; ln_f */
        n = v * h + (wide)m->positions * h;
        n += L * (2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * i + i) +
                  (i * h + h));
        n += 2 * h;
        break;
    case PLAN_BERT: /* embeddings + LN; q,k,v,o, LN, intermediate, output, LN; MLM head */
        n = v * h + (wide)m->positions * h + (wide)m->type_vocab * h + 2 * h;
        n += L * (4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h);
        n += (h * h + h) + 2 * h + v; /* transform dense, LN, decoder bias */
        break;
    case PLAN_LLAMA:
    case PLAN_MISTRAL:
    case PLAN_QWEN2: /* embed; q,k,v,o, gate,up,down, 2 RMSNorms; norm; lm_head */
        n = v * h;
        n += L * (h * w.q + 2 * h * w.kv + w.q * h + 3 * h * i + 2 * h +
                  (m->qkv_bias ? w.q + 2 * w.kv : 0) + (m->o_bias ? h : 0) +
                  (m->mlp_bias ? 2 * i + h : 0));
        n += h;
        break;
    }
    if (!m->tied)
        n += v * h;
    return n;
}

uint64_t
plan_param_count(const struct plan_model *m)
{
    wide n = param_count(m);
    return n > WIDE_MAX64 ? UINT64_MAX : (uint64_t)n;
}

/* Parameters of one layer that matmuls read (autocast keeps a
** low-precision copy of each while its matmul is in the graph). */
static wide
layer_matmul_params(const struct plan_model *m)
{
    struct widths w = widths_of(m);
    switch (m->arch) {
    case PLAN_GPT2:
    case PLAN_BERT:
        return 4 * w.h * w.h + 2 * w.h * w.i;
    default:
        return 2 * w.h * w.q + 2 * w.h * w.kv + 3 * w.h * w.i;
    }
}

static wide
matmul_params(const struct plan_model *m)
{
    return (wide)m->layers * layer_matmul_params(m) +
           (m->arch == PLAN_BERT ? (wide)m->hidden * m->hidden : 0);
}

/* ------------------------------------------------------------------ */
/* Activations                                                          */
/* ------------------------------------------------------------------ */

/* Does a sliding window make the attention mask explicit at SEQ? */
static bool
windowed(const struct plan_model *m, uint64_t seq)
{
    return m->window != 0 && seq > m->window;
}

/* Does this attention keep an S x S matrix per head? Eager always does;
** SDPA falls back to its math kernel (which does) for grouped-query
** attention in fp32: flash attention needs 16-bit inputs and the
** memory-efficient kernel has no GQA. */
static bool
keeps_scores(const struct plan_model *m, const struct dtypes *d, enum plan_attention a)
{
    if (a == PLAN_EAGER)
        return true;
    return llama_like(m->arch) && m->kv_heads < m->heads && d->low == 4;
}

/* Bytes per score element kept by the explicit attention: the softmax
** output (fp32 under autocast, and always in LLaMA's eager code), the
** low-precision copy the value matmul reads, and the dropout mask. */
static wide
score_bytes(const struct plan_model *m, const struct dtypes *d)
{
    wide sm = llama_like(m->arch) ? 4 : d->f32op;
    if (m->dropout)
        return sm + 1 + d->low;
    return sm + (d->low != sm ? d->low : 0);
}

static wide
layer_bytes(const struct plan_model *m, enum plan_precision p, enum plan_attention a,
            uint64_t seq)
{
    struct dtypes d = dtypes_of(p);
    struct widths w = widths_of(m);
    wide h = w.h, i = w.i;
    wide mask = m->dropout ? 1 : 0; /* bool dropout mask per element */
    bool scores = keeps_scores(m, &d, a);
    /* Fused kernels (flash, memory-efficient) allocate their output as
    ** (batch, seq, heads, dim): merging the heads is a view. The explicit
    ** attention's output needs a contiguous copy. */
    wide merged = scores ? d.low : 0;
    wide b = 0;

    switch (m->arch) {
    case PLAN_GPT2:
        b += d.res * h;              /* ln_1 input */
        b += mm_in(&d, 1) * h;       /* c_attn input (ln_1 output) */
        b += 3 * d.low * h;          /* q, k, v (kept by attention) */
        b += d.low * h;              /* attention output (+ logsumexp) */
        b += merged * h;             /* heads merged: c_proj input */
        b += mask * h;               /* resid dropout */
        b += d.res * h;              /* ln_2 input */
        b += mm_in(&d, 1) * h;       /* c_fc input */
        b += 3 * d.f32op * i;        /* gelu_new: x (fp32 for pow), tanh, 1+tanh */
        b += d.low * i;              /* gelu_new: 0.5*x */
        b += d.low * i;              /* gelu output: c_proj input */
        b += mask * h;               /* mlp dropout */
        break;
    case PLAN_BERT:
        b += mm_in(&d, 3) * h;       /* layer input read by q, k, v */
        b += 3 * d.low * h;          /* q, k, v */
        b += d.low * h;              /* attention output */
        b += merged * h;             /* heads merged: output dense input */
        b += mask * h;               /* hidden dropout */
        b += d.res * h;              /* LayerNorm input */
        b += mm_in(&d, 1) * h;       /* LayerNorm output: intermediate input */
        b += 2 * d.low * i;          /* intermediate output (gelu), gelu output */
        b += mask * h;               /* hidden dropout */
        b += d.res * h;              /* LayerNorm input */
        break;
    default: /* LLaMA, Mistral, Qwen2 */
        b += rmsnorm_bytes(&d, h, 3);      /* input_layernorm, read by q, k, v */
        b += d.low * (w.q + 2 * w.kv);     /* q (roped), k (roped), v */
        b += d.low * w.q;                  /* attention output */
        b += merged * w.q;                 /* heads merged: o_proj input */
        b += rmsnorm_bytes(&d, h, 2);      /* post_attention_layernorm, gate, up */
        b += 4 * d.low * i;                /* gate, silu(gate), up, product */
        if (scores)                        /* k, v repeated to all heads */
            b += 2 * d.low * (w.q - w.kv);
        break;
    }
    if (scores)
        b += (wide)m->heads * seq * score_bytes(m, &d);
    /* A sliding window shorter than the sequence: the mask is explicit, and
    ** SDPA turns it into an additive mask in the query's dtype (rows padded
    ** to 16 elements) that each layer keeps for its backward. */
    if (windowed(m, seq))
        b += ((wide)seq + 15) / 16 * 16 * d.low;
    return b;
}

uint64_t
plan_layer_bytes_per_token(const struct plan_model *m, enum plan_precision p,
                           enum plan_attention a, uint64_t seq)
{
    wide b = layer_bytes(m, p, a, seq);
    return b > WIDE_MAX64 ? UINT64_MAX : (uint64_t)b;
}

/* Bytes per token kept outside the layers: embeddings, final norm, head
** input (and the boolean mask of a sliding window, one row per token). */
static wide
outer_bytes_per_token(const struct plan_model *m, const struct dtypes *d, uint64_t seq)
{
    wide h = m->hidden, mask = m->dropout ? 1 : 0;
    switch (m->arch) {
    case PLAN_GPT2:
        return mask * h + d->res * h + mm_in(d, 1) * h; /* emb dropout, ln_f, lm_head in */
    case PLAN_BERT:
        return d->res * h + mask * h +     /* embedding LayerNorm, dropout */
               mm_in(d, 1) * h +           /* transform dense input */
               d->low * h + d->f32op * h + /* gelu input, LayerNorm input */
               mm_in(d, 1) * h;            /* decoder input */
    default:
        return rmsnorm_bytes(d, h, 1) + (windowed(m, seq) ? seq : 0);
    }
}

/* Bytes per token of the loss at its backward: log_softmax's output, the
** gradient nll_loss hands it and the gradient it produces, each a row of
** the vocabulary. The causal-LM loss of transformers upcasts the logits
** to fp32 (logits.float()); BERT's masked-LM loss calls cross_entropy on
** the logits as they are, which autocast runs in fp32 and a pure 16-bit
** model in 16 bits. */
static wide
loss_bytes_per_token(const struct plan_model *m, const struct dtypes *d)
{
    wide elem = m->arch == PLAN_BERT ? d->f32op : 4;
    return 3 * elem * m->vocab;
}

/* ------------------------------------------------------------------ */
/* Checks                                                               */
/* ------------------------------------------------------------------ */

/* A condition a model or a job must not meet, and what to say if it does. */
struct check {
    bool fails;
    const char *what;
};

/* What the first of the N CHECKS that fails says, or NULL: checks are
** listed in the order they are reported. */
static const char *
first_failed(const struct check *checks, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (checks[k].fails)
            return checks[k].what;
    return NULL;
}

bool
plan_model_check(const struct plan_model *m, char *err, size_t len)
{
    const struct check checks[] = {
        {m->layers == 0 || m->hidden == 0 || m->heads == 0 || m->vocab == 0,
         "the model needs layers, a hidden size, heads and a vocabulary"},
        {m->layers > PLAN_MAX_LAYERS, "more layers than any model has (limit 4096)"},
        {m->hidden > PLAN_MAX_HIDDEN, "hidden size beyond any model's (limit 1048576)"},
        {m->heads > PLAN_MAX_HEADS || m->kv_heads > PLAN_MAX_HEADS,
         "more attention heads than any model has (limit 4096)"},
        {m->intermediate > PLAN_MAX_INTERMEDIATE, "MLP size beyond any model's (limit 4194304)"},
        {m->vocab > PLAN_MAX_VOCAB, "vocabulary beyond any model's (limit 16777216)"},
        {m->positions > PLAN_MAX_POSITIONS || m->window > PLAN_MAX_POSITIONS,
         "positions beyond any model's (limit 16777216)"},
        {m->type_vocab > 65536, "token types beyond any model's (limit 65536)"},
        {m->head_dim > 65536, "head size beyond any model's (limit 65536)"},
        {m->kv_heads == 0 || m->heads % m->kv_heads != 0,
         "the key/value heads must divide the heads"},
        {m->heads != 0 && m->head_dim == 0 && m->hidden % m->heads != 0,
         "the heads must divide the hidden size"},
        {!llama_like(m->arch) && m->head_dim != 0 && m->head_dim * m->heads != m->hidden,
         "head size x heads must be the hidden size in this family"},
    };
    const char *w = first_failed(checks, sizeof checks / sizeof *checks);
    if (w != NULL) {
        if (err)
            snprintf(err, len, "%s", w);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* The peak                                                             */
/* ------------------------------------------------------------------ */

static wide
max_w(wide a, wide b)
{
    return a > b ? a : b;
}

/* PyTorch's caching allocator rounds blocks and keeps freed ones: on the
** measurements its reserved memory sits 3-10% above the tensor peak; we
** allow 8%. */
static wide
allocator_overhead(wide peak)
{
    return peak / 100 * 8;
}

/* The index of the largest of the N PEAKS, the first of equals. */
static int
peak_index(const wide *peaks, int n)
{
    int at = 0;
    for (int k = 1; k < n; k++)
        if (peaks[k] > peaks[at])
            at = k;
    return at;
}

/* What a prediction adds to its tensor PEAK: the allocator's overhead and
** the CUDA context, into *ALLOCATOR and *CONTEXT, the peak into *TENSOR and
** the sum into *TOTAL. False, with *WHY, when the sum does not fit 64 bits. */
static bool
totals(wide peak, uint64_t *tensor, uint64_t *allocator, uint64_t *context, uint64_t *total,
       const char **why)
{
    wide sum = peak + allocator_overhead(peak) + PLAN_CONTEXT_BYTES;
    if (sum > WIDE_MAX64) {
        if (why)
            *why = "the sizes overflow 64 bits (no GPU has that much memory)";
        return false;
    }
    *tensor = (uint64_t)peak;
    *allocator = (uint64_t)allocator_overhead(peak);
    *context = PLAN_CONTEXT_BYTES;
    *total = (uint64_t)sum;
    return true;
}

static _Thread_local char check_err[96]; /* the reason plan_model_check gave */

/* False, with *WHY, when one of the N CHECKS of a job fails (the first) or
** its model M does not pass plan_model_check. */
static bool
job_ok(const struct check *checks, size_t n, const struct plan_model *m, const char **why)
{
    const char *w = first_failed(checks, n);
    if (w == NULL && !plan_model_check(m, check_err, sizeof check_err))
        w = check_err;
    if (w != NULL && why)
        *why = w;
    return w == NULL;
}

bool
plan_predict(const struct plan_model *m, const struct plan_job *j, struct plan_result *out,
             const char **why)
{
    const struct check checks[] = {
        {j->batch == 0, "batch must be at least 1"},
        {j->seq == 0, "sequence length must be at least 1"},
        {j->batch > PLAN_MAX_BATCH, "batch beyond any job's (limit 1073741824)"},
        {j->seq > PLAN_MAX_SEQ, "sequence length beyond any model's (limit 16777216)"},
        {j->accum == 0 || j->batch % j->accum != 0, "accum must divide the batch"},
        {j->data_parallel == 0 || j->data_parallel > PLAN_MAX_RANKS,
         "data-parallel size must be 1..1048576"},
        {j->zero < 0 || j->zero > 3, "ZeRO stage must be 0, 1, 2 or 3"},
    };
    if (!job_ok(checks, sizeof checks / sizeof *checks, m, why))
        return false;

    struct dtypes d = dtypes_of(j->precision);
    wide P = param_count(m);
    wide dp = j->data_parallel;
    wide states = 0;
    switch (j->optimizer) {
    case PLAN_SGD: states = 0; break;
    case PLAN_SGD_MOMENTUM: states = 1; break;
    case PLAN_ADAM:
    case PLAN_ADAMW: states = 2; break;
    }
    wide W = P * d.weight, G = P * d.weight, O = states * P * d.weight;
    if (j->zero >= 1) O /= dp;
    if (j->zero >= 2) G /= dp;
    if (j->zero >= 3) W /= dp;
    /* foreach Adam(W) builds one state-sized temporary (the denominator) */
    wide opt_tmp = states == 2 ? P * d.weight / (j->zero >= 1 ? dp : 1) : 0;

    wide tokens = (wide)(j->batch / j->accum) * j->seq;
    wide layer = layer_bytes(m, j->precision, j->attention, j->seq);
    wide outer = outer_bytes_per_token(m, &d, j->seq);
    wide loss = loss_bytes_per_token(m, &d);
    wide head_params = (wide)m->vocab * m->hidden;
    wide grads_held = j->accum > 1 ? G : 0; /* earlier micro-batches' */

    /* Peak A: the loss's backward, every activation still held. */
    wide acts, cast;
    if (j->checkpointing) {
        acts = tokens * ((wide)m->layers * d.res * m->hidden + outer);
        cast = d.autocast ? 2 * head_params : 0;
    } else {
        acts = tokens * ((wide)m->layers * layer + outer);
        cast = d.autocast ? 2 * (matmul_params(m) + head_params) : 0;
    }
    wide tmpA = tokens * loss + cast;
    wide peakA = W + O + grads_held + acts + tmpA;

    /* Peak B: the optimizer step. */
    wide peakB = W + G + O + opt_tmp;

    /* Peak C (checkpointing): recomputing the first layer in backward, all
    ** gradients but the first layers' already there. */
    wide peakC = 0, actsC = 0, tmpC = 0;
    if (j->checkpointing) {
        actsC = tokens * ((wide)m->layers * d.res * m->hidden + layer);
        tmpC = d.autocast ? 2 * layer_matmul_params(m) : 0;
        peakC = W + O + G + actsC + tmpC;
    }
    const wide peaks[] = {peakA, peakB, peakC};
    int at = peak_index(peaks, 3);
    struct plan_result r = {
        .params = (uint64_t)P, .weights_bytes = (uint64_t)W, .optimizer_bytes = (uint64_t)O};
    if (at == 0) {
        r.gradients_bytes = (uint64_t)grads_held;
        r.activations_bytes = (uint64_t)acts;
        r.temporary_bytes = (uint64_t)tmpA;
        r.peak_phase = "backward";
    } else if (at == 1) {
        r.gradients_bytes = (uint64_t)G;
        r.temporary_bytes = (uint64_t)opt_tmp;
        r.peak_phase = "optimizer step";
    } else {
        r.gradients_bytes = (uint64_t)G;
        r.activations_bytes = (uint64_t)actsC;
        r.temporary_bytes = (uint64_t)tmpC;
        r.peak_phase = "recompute";
    }
    if (!totals(peaks[at], &r.tensor_peak_bytes, &r.allocator_bytes, &r.context_bytes,
                &r.total_bytes, why))
        return false;
    *out = r;
    return true;
}

/* ------------------------------------------------------------------ */
/* Generation with a key/value cache                                    */
/* ------------------------------------------------------------------ */

/* cuBLAS's workspace, allocated through PyTorch's caching allocator at the
** first matmul and kept: 4096 x 8 KiB on sm90 (Hopper; PyTorch's default
** for CUBLAS_WORKSPACE_CONFIG there, the probe in
** data/measurements/plan_peaks_h200.jsonl saw 33554432 bytes); cuBLASLt
** shares it. A model being built runs no matmul. */
#define GEN_WORKSPACE_BYTES ((wide)4096 * 8 * 1024)

/* int64 tensors per token of the context: the ids and attention mask the
** caller passes and the two generate() derives from them (the sequence it
** extends, the position ids), 4 x 8 bytes. */
#define GEN_IDS_PER_TOKEN 32

/* Does SDPA take PyTorch's math path, which materializes the scores? With
** no explicit mask transformers passes enable_gqa to SDPA; flash attention
** handles grouped-query attention but needs 16-bit inputs, the
** memory-efficient kernel has no GQA, so fp32 GQA falls to math. */
static bool
gen_math_path(const struct plan_model *m, wide e, bool explicit_mask)
{
    return llama_like(m->arch) && m->kv_heads < m->heads && e == 4 && !explicit_mask;
}

/* Bytes per token live at the last layer's MLP on the prompt (no_grad, so
** a tensor lives while a Python name holds it). GPT-2: the token and
** position embeddings (locals of the model's forward), the block's input
** (held by the caller), the attention output, the residual after it and
** ln_2's output, then gelu_new on the MLP input: the input, 0.5 * x
** (evaluated first) and two temporaries of the tanh argument at once.
** LLaMA-shaped: the input embeddings, the layer's input, the residual and
** post_attention_layernorm's output, RoPE's cos and sin (head_dim each,
** computed once per forward), then act(gate), up and their product. */
static wide
gen_mlp_per_token(const struct plan_model *m, const struct widths *w, wide hd, wide e)
{
    if (m->arch == PLAN_GPT2)
        return (6 * w->h + 4 * w->i) * e;
    return (4 * w->h + 2 * hd + 3 * w->i) * e;
}

/* Bytes per token live in the last layer's attention as its kernel starts
** (IN) and after it (OUT, added to IN). GPT-2: both embeddings, the
** block's input, ln_1's output, c_attn's output (q, k and v are views of
** it); then the attention output and c_proj's. LLaMA-shaped: the input
** embeddings, the layer's input, the norm's output, cos and sin and the
** roped q; then the attention output and o_proj's. The new keys and values
** are in the cache. */
static wide
gen_attention_in(const struct plan_model *m, const struct widths *w, wide hd, wide e)
{
    if (m->arch == PLAN_GPT2)
        return 7 * w->h * e;
    return (3 * w->h + 2 * hd + w->q) * e;
}

static wide
gen_attention_out(const struct plan_model *m, const struct widths *w, wide e)
{
    return (m->arch == PLAN_GPT2 ? 2 * w->h : w->q + w->h) * e;
}

/* Bytes that one layer's attention kernel holds beyond its inputs when it
** is not a fused one, or its mask explicit: B sequences, Q
** query tokens against K keys (the prompt: Q = K = P; a decode step: Q = 1,
** no causal mask). */
static wide
gen_attention_extra(const struct plan_model *m, const struct widths *w, wide e, wide B, wide Q,
                    wide K, enum plan_attention a, bool explicit_mask)
{
    wide H = m->heads, S = B * H * Q * K; /* score elements */
    bool gqa = llama_like(m->arch) && m->kv_heads < m->heads;
    wide x = 0;
    if (a == PLAN_EAGER) {
        /* transformers' eager attention: k and v repeated to every head,
        ** the additive mask (B x Q x K in the model's dtype), and at the
        ** softmax the scores with their input; LLaMA's softmax runs in
        ** fp32 and is cast back while both live (2 x dtype + 4 bytes). */
        x += gqa ? 2 * B * K * w->q * e : 0;
        x += B * Q * K * e;
        x += S * (llama_like(m->arch) ? 2 * e + 4 : 2 * e);
        return x;
    }
    if (gen_math_path(m, e, explicit_mask)) {
        /* PyTorch's math SDPA: q scaled, k and v repeat_interleave'd to
        ** every head (fp32, q-wide each); with is_causal (more than one
        ** query) the causal mask made additive (Q x K fp32); the scores
        ** and their softmax (fp32 each) and _safe_softmax's boolean test
        ** for -inf (1 byte each), with its reduction per row. */
        x += B * Q * w->q * 4 + 2 * B * K * w->q * 4 + (Q > 1 ? Q * K * 4 : 0);
        x += S * (4 + 4 + 1) + B * H * Q;
        return x;
    }
    if (explicit_mask) {
        /* A sliding window shorter than the context: the mask is explicit,
        ** so transformers repeats k and v itself, and SDPA's memory-
        ** efficient kernel reads the boolean mask made additive in the
        ** query's dtype (rows padded to 16). */
        x += gqa ? 2 * B * K * w->q * e : 0;
        x += B * Q * K + B * Q * ((K + 15) / 16 * 16) * e;
    }
    return x;
}

bool
plan_generate(const struct plan_model *m, const struct plan_gen_job *j,
              struct plan_gen_result *out, const char **why)
{
    const struct check checks[] = {
        {m->arch == PLAN_BERT, "bert has no causal language-model head to generate with"},
        {j->batch == 0 || j->batch > PLAN_MAX_BATCH, "batch must be 1..1073741824"},
        {j->prompt == 0 || j->prompt > PLAN_MAX_SEQ, "the prompt must be 1..16777216 tokens"},
        {j->new_tokens == 0 || j->new_tokens > PLAN_MAX_SEQ, "new tokens must be 1..16777216"},
        {j->precision != PLAN_FP32 && j->precision != PLAN_FP16 && j->precision != PLAN_BF16,
         "inference precision is fp32, fp16 or bf16"},
        {j->attention != PLAN_SDPA && j->attention != PLAN_EAGER, "attention is sdpa or eager"},
    };
    if (!job_ok(checks, sizeof checks / sizeof *checks, m, why))
        return false;
    struct widths wd = widths_of(m);
    wide hd = m->heads ? wd.q / m->heads : 0;
    wide e = j->precision == PLAN_FP32 ? 4 : 2;
    wide B = j->batch, L = m->layers, V = m->vocab, P = j->prompt;
    wide kvw = m->arch == PLAN_GPT2 ? wd.h : wd.kv;
    wide params = param_count(m);
    wide W = params * e;
    wide ws = GEN_WORKSPACE_BYTES;

    /* Construction: a tied model's output layer is built with its own
    ** vocabulary x hidden weight, which tying then frees. */
    wide head_copy = m->tied ? V * wd.h * e : 0;
    wide peak_con = W + head_copy;

    /* The cache of LEN tokens: keys and values of every layer (each a copy:
    ** the dynamic cache concatenates onto an empty tensor); a sliding
    ** window keeps only its last WINDOW tokens. */
    wide len_pre = P, len_end = P + j->new_tokens - 1;
    if (m->window) {
        if (len_pre > m->window) len_pre = m->window;
        if (len_end > m->window) len_end = m->window;
    }
    wide cache_pre = L * 2 * B * len_pre * kvw * e;
    wide cache_end = L * 2 * B * len_end * kvw * e;

    /* Prefill, at the last layer (every layer's cache written): its MLP,
    ** its attention, or the logits of the last position (transformers
    ** computes only those during generation) and their fp32 copy. */
    bool explicit_mask = windowed(m, j->prompt);
    wide T = B * P;
    wide ids_pre = T * GEN_IDS_PER_TOKEN;
    wide mlp_pre = T * gen_mlp_per_token(m, &wd, hd, e);
    wide att_pre = T * gen_attention_in(m, &wd, hd, e) +
                   max_w(T * gen_attention_out(m, &wd, e),
                         gen_attention_extra(m, &wd, e, B, P, P, j->attention, explicit_mask));
    wide logits = max_w(T * wd.h * e + B * V * e, B * V * (e + 4));
    wide act_pre = mlp_pre;
    const char *at = "mlp";
    if (att_pre > act_pre) {
        act_pre = att_pre;
        at = "attention";
    }
    if (logits > act_pre) {
        act_pre = logits;
        at = "logits";
    }
    wide peak_pre = W + ws + ids_pre + cache_pre + act_pre;

    /* The last decode step: the cache appends by concatenation, so one
    ** layer's new key tensor coexists with the old; then the one token's
    ** attention over the context (with the math path's or eager's extras),
    ** its MLP, and the logits with their fp32 copy. */
    wide ctx = B * len_end;
    wide att_end = B * gen_attention_in(m, &wd, hd, e) +
                   max_w(B * gen_attention_out(m, &wd, e),
                         gen_attention_extra(m, &wd, e, B, 1, len_end, j->attention,
                                             windowed(m, len_end + 1)));
    wide act_end = max_w(ctx * kvw * e, att_end);
    act_end = max_w(act_end, B * gen_mlp_per_token(m, &wd, hd, e));
    act_end = max_w(act_end, B * V * (e + 4));
    wide ids_end = B * ((wide)P + j->new_tokens - 1) * GEN_IDS_PER_TOKEN;
    wide peak_end = W + ws + ids_end + cache_end + act_end;

    const wide peaks[] = {peak_con, peak_pre, peak_end};
    int k = peak_index(peaks, 3);
    struct plan_gen_result r = {.params = (uint64_t)params,
                                .weights_bytes = (uint64_t)W,
                                .construction_bytes = (uint64_t)peak_con,
                                .prefill_bytes = (uint64_t)peak_pre,
                                .decode_bytes = (uint64_t)peak_end,
                                .prefill_at = at};
    if (k == 0) {
        r.activations_bytes = (uint64_t)head_copy;
        r.peak_phase = "construction";
    } else { /* the prefill or the last decode step */
        r.kv_cache_bytes = (uint64_t)(k == 1 ? cache_pre : cache_end);
        r.activations_bytes = (uint64_t)(k == 1 ? act_pre : act_end);
        r.workspace_bytes = (uint64_t)ws;
        r.token_ids_bytes = (uint64_t)(k == 1 ? ids_pre : ids_end);
        r.peak_phase = k == 1 ? "prefill" : "last decode step";
    }
    if (!totals(peaks[k], &r.tensor_peak_bytes, &r.allocator_bytes, &r.context_bytes,
                &r.total_bytes, why))
        return false;
    *out = r;
    return true;
}

/* ------------------------------------------------------------------ */
/* config.json                                                          */
/* ------------------------------------------------------------------ */

/* The first of KEYS present in O: 1 and *OUT set for a positive integer
** up to 2^62; 0 when none is present (or it is null); -1 when present but
** not such an integer. */
static int
get_uint(struct json_object *o, const char *const *keys, uint64_t *out)
{
    for (; *keys != NULL; keys++) {
        struct json_object *v;
        if (!json_object_object_get_ex(o, *keys, &v) || v == NULL)
            continue;
        if (!json_object_is_type(v, json_type_int))
            return -1;
        errno = 0;
        int64_t x = json_object_get_int64(v);
        if (x <= 0 || errno != 0 || x > (INT64_C(1) << 62))
            return -1;
        *out = (uint64_t)x;
        return 1;
    }
    return 0;
}

static int
get_bool(struct json_object *o, const char *key, bool *out)
{
    struct json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || v == NULL)
        return 0;
    if (!json_object_is_type(v, json_type_boolean))
        return -1;
    *out = json_object_get_boolean(v);
    return 1;
}

/* Keys in all objects of the tree under O. */
static size_t
count_keys(struct json_object *o)
{
    size_t n = 0;
    if (o == NULL)
        return 0;
    if (json_object_is_type(o, json_type_object)) {
        json_object_object_foreach(o, k, v) {
            (void)k;
            n += 1 + count_keys(v);
        }
    } else if (json_object_is_type(o, json_type_array)) {
        size_t len = json_object_array_length(o);
        for (size_t i = 0; i < len; i++)
            n += count_keys(json_object_array_get_idx(o, i));
    }
    return n;
}

/* Colons outside strings in N bytes of TEXT: in valid JSON, one per key.
** json-c keeps the last of duplicate keys, so the parsed tree then holds
** fewer keys than the text names. */
static size_t
count_colons(const char *text, size_t n)
{
    size_t c = 0;
    bool in_str = false;
    for (size_t k = 0; k < n; k++) {
        char ch = text[k];
        if (in_str) {
            if (ch == '\\')
                k++;
            else if (ch == '"')
                in_str = false;
        } else if (ch == '"') {
            in_str = true;
        } else if (ch == ':') {
            c++;
        }
    }
    return c;
}

struct plan_model
plan_model_defaults(enum plan_arch a)
{
    struct plan_model m;
    memset(&m, 0, sizeof m);
    m.arch = a;
    switch (a) {
    case PLAN_GPT2:
        m.tied = true;
        m.dropout = true;
        m.positions = 1024;
        break;
    case PLAN_BERT:
        m.tied = true;
        m.dropout = true;
        m.positions = 512;
        m.type_vocab = 2;
        break;
    case PLAN_LLAMA:
        break;
    case PLAN_MISTRAL:
        m.window = 4096; /* MistralConfig's default sliding_window */
        break;
    case PLAN_QWEN2:
        m.qkv_bias = true;
        break;
    }
    return m;
}

bool
plan_config_parse(const char *text, struct plan_model *out, char *err, size_t len)
{
    return plan_config_parse_n(text, strlen(text), out, err, len);
}

bool
plan_config_parse_n(const char *text, size_t n, struct plan_model *out, char *err,
                    size_t len)
{
    if (memchr(text, '\0', n) != NULL) {
        snprintf(err, len, "config contains a NUL byte: not JSON text");
        return false;
    }
    if (n > (1u << 24)) {
        snprintf(err, len, "config is larger than 16 MiB");
        return false;
    }
    struct json_tokener *tok = json_tokener_new();
    if (tok == NULL) {
        snprintf(err, len, "out of memory");
        return false;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    struct json_object *o = json_tokener_parse_ex(tok, text, (int)n);
    enum json_tokener_error te = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    bool ok = true;
    if (o == NULL || te != json_tokener_success) {
        snprintf(err, len, "config is not valid JSON (%s)",
                 te == json_tokener_continue ? "it ends too early"
                                             : json_tokener_error_desc(te));
        ok = false;
    } else if (!json_object_is_type(o, json_type_object)) {
        snprintf(err, len, "config is not a JSON object");
        ok = false;
    } else {
        while (end < n && (text[end] == ' ' || text[end] == '\t' || text[end] == '\n' ||
                           text[end] == '\r'))
            end++;
        if (end < n) {
            snprintf(err, len, "config has data after its JSON object (at byte %zu)", end);
            ok = false;
        } else if (count_colons(text, n) != count_keys(o)) {
            snprintf(err, len, "config names a key twice in one object");
            ok = false;
        }
    }
    if (!ok) {
        if (o)
            json_object_put(o);
        return false;
    }
    struct json_object *v;
    const char *type = NULL;
    enum plan_arch arch = PLAN_LLAMA;
    if (json_object_object_get_ex(o, "model_type", &v) && json_object_is_type(v, json_type_string))
        type = json_object_get_string(v);
    if (type == NULL) {
        snprintf(err, len, "config has no model_type");
        ok = false;
    } else if (!plan_arch_parse(type, &arch)) {
        char shown[41]; /* the config's text, one line of printable bytes */
        size_t k = 0;
        for (; type[k] != '\0' && k < sizeof shown - 1; k++)
            shown[k] = (unsigned char)type[k] < 0x20 || type[k] == 0x7f ? '?' : type[k];
        shown[k] = '\0';
        snprintf(err, len,
                 "model_type '%s' is not one the structural model knows (%s); trace the "
                 "model instead: vram plan --model FILE.py:FUNCTION",
                 shown, plan_arch_list());
        ok = false;
    }
    struct plan_model m = plan_model_defaults(arch);
    static const char *const k_layers[] = {"num_hidden_layers", "n_layer", NULL};
    static const char *const k_hidden[] = {"hidden_size", "n_embd", NULL};
    static const char *const k_heads[] = {"num_attention_heads", "n_head", NULL};
    static const char *const k_kv[] = {"num_key_value_heads", NULL};
    static const char *const k_inter[] = {"intermediate_size", "n_inner", NULL};
    static const char *const k_vocab[] = {"vocab_size", NULL};
    static const char *const k_pos[] = {"max_position_embeddings", "n_positions", NULL};
    static const char *const k_type[] = {"type_vocab_size", NULL};
    static const char *const k_hd[] = {"head_dim", NULL};
    static const char *const k_win[] = {"sliding_window", NULL};
    int rl = 0, rh = 0, rn = 0, rv = 0;
    if (ok) {
        rl = get_uint(o, k_layers, &m.layers);
        rh = get_uint(o, k_hidden, &m.hidden);
        rn = get_uint(o, k_heads, &m.heads);
        rv = get_uint(o, k_vocab, &m.vocab);
        if (rl < 0 || rh < 0 || rn < 0 || rv < 0) {
            snprintf(err, len, "config: layers, hidden size, heads and vocab_size must be "
                               "positive integers");
            ok = false;
        } else if (rl == 0 || rh == 0 || rn == 0 || rv == 0) {
            snprintf(err, len, "config lacks layers, hidden size, heads or vocab_size");
            ok = false;
        }
    }
    if (ok) {
        int r1 = get_uint(o, k_kv, &m.kv_heads);
        int r2 = get_uint(o, k_inter, &m.intermediate);
        int r3 = get_uint(o, k_pos, &m.positions);
        int r4 = m.arch == PLAN_BERT ? get_uint(o, k_type, &m.type_vocab) : 0;
        int r5 = llama_like(m.arch) ? get_uint(o, k_hd, &m.head_dim) : 0;
        uint64_t win = 0;
        int r6 = llama_like(m.arch) ? get_uint(o, k_win, &win) : 0;
        bool use_window = m.arch == PLAN_MISTRAL, b = false;
        int r7 = 0, r8 = 0, r9 = 0, r10 = 0;
        if (m.arch == PLAN_QWEN2)
            r7 = get_bool(o, "use_sliding_window", &use_window);
        if (m.arch == PLAN_LLAMA) {
            r8 = get_bool(o, "attention_bias", &b);
            m.qkv_bias = m.o_bias = b;
            b = false;
            r9 = get_bool(o, "mlp_bias", &b);
            m.mlp_bias = b;
        }
        r10 = get_bool(o, "tie_word_embeddings", &m.tied);
        if (r1 < 0 || r2 < 0 || r3 < 0 || r4 < 0 || r5 < 0 || r6 < 0) {
            snprintf(err, len, "config: a size is not a positive integer");
            ok = false;
        } else if (r7 < 0 || r8 < 0 || r9 < 0 || r10 < 0) {
            snprintf(err, len, "config: a flag is not true or false");
            ok = false;
        } else {
            if (r1 == 0)
                m.kv_heads = m.heads;
            if (r2 == 0)
                m.intermediate = 4 * m.hidden; /* GPT-2's n_inner: null */
            if (r3 == 0 && llama_like(m.arch))
                m.positions = 0;
            /* sliding_window null (Mistral v0.2 on) or absent: none */
            if (llama_like(m.arch))
                m.window = use_window && r6 > 0 ? win : 0;
            ok = plan_model_check(&m, err, len);
            if (!ok) {
                char tmp[128];
                snprintf(tmp, sizeof tmp, "%s", err);
                snprintf(err, len, "config: %s", tmp);
            }
        }
    }
    json_object_put(o);
    if (ok)
        *out = m;
    return ok;
}

/* ------------------------------------------------------------------ */
/* Names                                                                */
/* ------------------------------------------------------------------ */

static const char *const precision_names[] = {"fp32", "mixed-fp16", "mixed-bf16", "fp16",
                                              "bf16"};
static const char *const optimizer_names[] = {"sgd", "sgd-momentum", "adam", "adamw"};

/* The index of S among the N NAMES, or -1. */
static int
name_index(const char *s, const char *const *names, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (strcmp(s, names[k]) == 0)
            return (int)k;
    return -1;
}

bool
plan_precision_parse(const char *s, enum plan_precision *out)
{
    int k = name_index(s, precision_names, sizeof precision_names / sizeof *precision_names);
    if (k >= 0)
        *out = (enum plan_precision)k;
    return k >= 0;
}

bool
plan_optimizer_parse(const char *s, enum plan_optimizer *out)
{
    int k = name_index(s, optimizer_names, sizeof optimizer_names / sizeof *optimizer_names);
    if (k >= 0)
        *out = (enum plan_optimizer)k;
    return k >= 0;
}

bool
plan_attention_parse(const char *s, enum plan_attention *out)
{
    if (strcmp(s, "sdpa") == 0)
        *out = PLAN_SDPA;
    else if (strcmp(s, "eager") == 0)
        *out = PLAN_EAGER;
    else
        return false;
    return true;
}

const char *
plan_precision_name(enum plan_precision p)
{
    return precision_names[p];
}

const char *
plan_optimizer_name(enum plan_optimizer o)
{
    return optimizer_names[o];
}

static const char *const arch_names[PLAN_N_ARCH] = {"gpt2", "bert", "llama", "mistral",
                                                    "qwen2"};

const char *
plan_arch_name(enum plan_arch a)
{
    return (unsigned)a < PLAN_N_ARCH ? arch_names[a] : "?";
}

bool
plan_arch_parse(const char *s, enum plan_arch *out)
{
    int k = name_index(s, arch_names, PLAN_N_ARCH);
    if (k >= 0)
        *out = (enum plan_arch)k;
    return k >= 0;
}

const char *
plan_arch_list(void)
{
    return "gpt2, bert, llama, mistral, qwen2";
}
