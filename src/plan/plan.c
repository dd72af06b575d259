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

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

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
static uint64_t
mm_in(const struct dtypes *d, uint64_t n)
{
    return d->autocast ? n * d->low : d->res;
}

/* Bytes per token of an RMSNorm written as HF's LlamaRMSNorm: the fp32
** input kept by pow (4h), the normalized tensor kept by the weight multiply
** (res), and the output kept by the N matmuls that read it. */
static uint64_t
rmsnorm_bytes(const struct dtypes *d, uint64_t h, uint64_t n)
{
    return 4 * h + d->res * h + mm_in(d, n) * h;
}

/* ------------------------------------------------------------------ */
/* Parameters                                                           */
/* ------------------------------------------------------------------ */

uint64_t
plan_param_count(const struct plan_model *m)
{
    uint64_t h = m->hidden, i = m->intermediate, v = m->vocab, L = m->layers;
    uint64_t kv = m->heads ? h / m->heads * m->kv_heads : h;
    uint64_t n = 0;
    switch (m->arch) {
    case PLAN_GPT2: /* wte, wpe; ln_1, c_attn, c_proj, ln_2, c_fc, c_proj; ln_f */
        n = v * h + m->positions * h;
        n += L * (2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * i + i) +
                  (i * h + h));
        n += 2 * h;
        if (!m->tied)
            n += v * h;
        break;
    case PLAN_BERT: /* embeddings + LN; q,k,v,o, LN, intermediate, output, LN; MLM head */
        n = v * h + m->positions * h + m->type_vocab * h + 2 * h;
        n += L * (4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h);
        n += (h * h + h) + 2 * h + v; /* transform dense, LN, decoder bias */
        if (!m->tied)
            n += v * h;
        break;
    case PLAN_LLAMA: /* embed; q,k,v,o, gate,up,down, 2 RMSNorms; norm; lm_head */
        n = v * h;
        n += L * (2 * h * h + 2 * h * kv + 3 * h * i + 2 * h);
        n += h;
        if (!m->tied)
            n += v * h;
        break;
    }
    return n;
}

/* Parameters that matmuls read (autocast keeps a low-precision copy of
** each while its matmul is in the graph). */
static uint64_t
matmul_params(const struct plan_model *m)
{
    uint64_t h = m->hidden, i = m->intermediate, L = m->layers;
    uint64_t kv = m->heads ? h / m->heads * m->kv_heads : h;
    switch (m->arch) {
    case PLAN_GPT2:
        return L * (4 * h * h + 2 * h * i);
    case PLAN_BERT:
        return L * (4 * h * h + 2 * h * i) + h * h;
    case PLAN_LLAMA:
        return L * (2 * h * h + 2 * h * kv + 3 * h * i);
    }
    return 0;
}

static uint64_t
layer_matmul_params(const struct plan_model *m)
{
    return m->layers ? (matmul_params(m) - (m->arch == PLAN_BERT ? m->hidden * m->hidden : 0)) /
                           m->layers
                     : 0;
}

/* ------------------------------------------------------------------ */
/* Activations                                                          */
/* ------------------------------------------------------------------ */

/* Does this attention keep an S x S matrix per head? Eager always does;
** SDPA falls back to its math kernel (which does) for grouped-query
** attention in fp32: flash attention needs 16-bit inputs and the
** memory-efficient kernel has no GQA. */
static bool
keeps_scores(const struct plan_model *m, const struct dtypes *d, enum plan_attention a)
{
    if (a == PLAN_EAGER)
        return true;
    return m->arch == PLAN_LLAMA && m->kv_heads < m->heads && d->low == 4;
}

/* Bytes per score element kept by the explicit attention: the softmax
** output (fp32 under autocast, and always in LLaMA's eager code), the
** low-precision copy the value matmul reads, and the dropout mask. */
static uint64_t
score_bytes(const struct plan_model *m, const struct dtypes *d)
{
    uint64_t sm = m->arch == PLAN_LLAMA ? 4 : d->f32op;
    if (m->dropout)
        return sm + 1 + d->low;
    return sm + (d->low != sm ? d->low : 0);
}

uint64_t
plan_layer_bytes_per_token(const struct plan_model *m, enum plan_precision p,
                           enum plan_attention a, uint64_t seq)
{
    struct dtypes d = dtypes_of(p);
    uint64_t h = m->hidden, i = m->intermediate;
    uint64_t kv = m->heads ? h / m->heads * m->kv_heads : h;
    uint64_t mask = m->dropout ? 1 : 0; /* bool dropout mask per element */
    bool scores = keeps_scores(m, &d, a);
    /* Fused kernels (flash, memory-efficient) allocate their output as
    ** (batch, seq, heads, dim): merging the heads is a view. The explicit
    ** attention's output needs a contiguous copy. */
    uint64_t merged = scores ? d.low : 0;
    uint64_t b = 0;

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
    case PLAN_LLAMA:
        b += rmsnorm_bytes(&d, h, 3);      /* input_layernorm, read by q, k, v */
        b += d.low * (h + 2 * kv);         /* q (roped), k (roped), v */
        b += d.low * h;                    /* attention output */
        b += merged * h;                   /* heads merged: o_proj input */
        b += rmsnorm_bytes(&d, h, 2);      /* post_attention_layernorm, gate, up */
        b += 4 * d.low * i;                /* gate, silu(gate), up, product */
        if (scores)                        /* k, v repeated to all heads */
            b += 2 * d.low * (h - kv);
        break;
    }
    if (scores)
        b += m->heads * seq * score_bytes(m, &d);
    return b;
}

/* Bytes per token kept outside the layers: embeddings, final norm, head
** input. */
static uint64_t
outer_bytes_per_token(const struct plan_model *m, const struct dtypes *d)
{
    uint64_t h = m->hidden, mask = m->dropout ? 1 : 0;
    switch (m->arch) {
    case PLAN_GPT2:
        return mask * h + d->res * h + mm_in(d, 1) * h; /* emb dropout, ln_f, lm_head in */
    case PLAN_BERT:
        return d->res * h + mask * h +     /* embedding LayerNorm, dropout */
               mm_in(d, 1) * h +           /* transform dense input */
               d->low * h + d->f32op * h + /* gelu input, LayerNorm input */
               mm_in(d, 1) * h;            /* decoder input */
    case PLAN_LLAMA:
        return rmsnorm_bytes(d, h, 1);
    }
    return 0;
}

/* Bytes per token of the loss at its backward: log_softmax's output, the
** gradient nll_loss hands it and the gradient it produces, each a row of
** the vocabulary. The causal-LM loss of transformers upcasts the logits
** to fp32 (logits.float()); BERT's masked-LM loss calls cross_entropy on
** the logits as they are, which autocast runs in fp32 and a pure 16-bit
** model in 16 bits. */
static uint64_t
loss_bytes_per_token(const struct plan_model *m, const struct dtypes *d)
{
    uint64_t elem = m->arch == PLAN_BERT ? d->f32op : 4;
    return 3 * elem * m->vocab;
}

/* ------------------------------------------------------------------ */
/* The peak                                                             */
/* ------------------------------------------------------------------ */

static uint64_t
max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

bool
plan_predict(const struct plan_model *m, const struct plan_job *j, struct plan_result *out,
             const char **why)
{
    const char *w = NULL;
    if (j->batch == 0)
        w = "batch must be at least 1";
    else if (j->seq == 0)
        w = "sequence length must be at least 1";
    else if (j->accum == 0 || j->batch % j->accum != 0)
        w = "accum must divide the batch";
    else if (j->data_parallel == 0)
        w = "data-parallel size must be at least 1";
    else if (j->zero < 0 || j->zero > 3)
        w = "ZeRO stage must be 0, 1, 2 or 3";
    else if (m->layers == 0 || m->hidden == 0 || m->heads == 0 || m->vocab == 0 ||
             m->hidden % m->heads != 0 || m->kv_heads == 0 || m->heads % m->kv_heads != 0)
        w = "the model needs layers, hidden size, heads dividing it and a vocabulary";
    if (w != NULL) {
        if (why)
            *why = w;
        return false;
    }

    struct dtypes d = dtypes_of(j->precision);
    struct plan_result r;
    memset(&r, 0, sizeof r);
    uint64_t P = plan_param_count(m);
    uint64_t dp = j->data_parallel;
    uint64_t states = 0;
    switch (j->optimizer) {
    case PLAN_SGD: states = 0; break;
    case PLAN_SGD_MOMENTUM: states = 1; break;
    case PLAN_ADAM:
    case PLAN_ADAMW: states = 2; break;
    }
    uint64_t W = P * d.weight, G = P * d.weight, O = states * P * d.weight;
    if (j->zero >= 1) O /= dp;
    if (j->zero >= 2) G /= dp;
    if (j->zero >= 3) W /= dp;
    /* foreach Adam(W) builds one state-sized temporary (the denominator) */
    uint64_t opt_tmp = states == 2 ? P * d.weight / (j->zero >= 1 ? dp : 1) : 0;

    uint64_t tokens = j->batch / j->accum * j->seq;
    uint64_t layer = plan_layer_bytes_per_token(m, j->precision, j->attention, j->seq);
    uint64_t outer = outer_bytes_per_token(m, &d);
    uint64_t loss = loss_bytes_per_token(m, &d);
    uint64_t head_params = m->vocab * m->hidden;
    uint64_t grads_held = j->accum > 1 ? G : 0; /* earlier micro-batches' */

    /* Peak A: the loss's backward, every activation still held. */
    uint64_t acts, cast;
    if (j->checkpointing) {
        acts = tokens * (m->layers * d.res * m->hidden + outer);
        cast = d.autocast ? 2 * head_params : 0;
    } else {
        acts = tokens * (m->layers * layer + outer);
        cast = d.autocast ? 2 * (matmul_params(m) + head_params) : 0;
    }
    uint64_t tmpA = tokens * loss + cast;
    uint64_t peakA = W + O + grads_held + acts + tmpA;

    /* Peak B: the optimizer step. */
    uint64_t peakB = W + G + O + opt_tmp;

    /* Peak C (checkpointing): recomputing the first layer in backward, all
    ** gradients but the first layers' already there. */
    uint64_t peakC = 0, actsC = 0, tmpC = 0;
    if (j->checkpointing) {
        actsC = tokens * (m->layers * d.res * m->hidden + layer);
        tmpC = d.autocast ? 2 * layer_matmul_params(m) : 0;
        peakC = W + O + G + actsC + tmpC;
    }

    r.params = P;
    r.weights_bytes = W;
    r.optimizer_bytes = O;
    if (peakA >= peakB && peakA >= peakC) {
        r.gradients_bytes = grads_held;
        r.activations_bytes = acts;
        r.temporary_bytes = tmpA;
        r.peak_phase = "backward";
    } else if (peakB >= peakC) {
        r.gradients_bytes = G;
        r.temporary_bytes = opt_tmp;
        r.peak_phase = "optimizer step";
    } else {
        r.gradients_bytes = G;
        r.activations_bytes = actsC;
        r.temporary_bytes = tmpC;
        r.peak_phase = "recompute";
    }
    r.tensor_peak_bytes = max_u64(peakA, max_u64(peakB, peakC));
    /* PyTorch's caching allocator rounds blocks and keeps freed ones: on
    ** the measurements its reserved memory sits 3-10% above the tensor
    ** peak; we allow 8%. */
    r.allocator_bytes = r.tensor_peak_bytes / 100 * 8;
    r.context_bytes = PLAN_CONTEXT_BYTES;
    r.total_bytes = r.tensor_peak_bytes + r.allocator_bytes + r.context_bytes;
    *out = r;
    return true;
}

/* ------------------------------------------------------------------ */
/* config.json                                                          */
/* ------------------------------------------------------------------ */

/* The first of KEYS present in O as a positive integer, into *OUT. */
static bool
get_uint(struct json_object *o, const char *const *keys, uint64_t *out)
{
    for (; *keys != NULL; keys++) {
        struct json_object *v;
        if (json_object_object_get_ex(o, *keys, &v) && json_object_is_type(v, json_type_int)) {
            int64_t x = json_object_get_int64(v);
            if (x <= 0)
                return false;
            *out = (uint64_t)x;
            return true;
        }
    }
    return false;
}

bool
plan_config_parse(const char *text, struct plan_model *out, char *err, size_t len)
{
    struct json_tokener *tok = json_tokener_new();
    struct json_object *o = tok ? json_tokener_parse_ex(tok, text, (int)strlen(text)) : NULL;
    bool complete = tok && json_tokener_get_error(tok) == json_tokener_success;
    if (tok)
        json_tokener_free(tok);
    if (o == NULL || !complete || !json_object_is_type(o, json_type_object)) {
        snprintf(err, len, "config is not a JSON object");
        if (o)
            json_object_put(o);
        return false;
    }
    struct plan_model m;
    memset(&m, 0, sizeof m);
    struct json_object *v;
    const char *type = NULL;
    if (json_object_object_get_ex(o, "model_type", &v) && json_object_is_type(v, json_type_string))
        type = json_object_get_string(v);
    bool ok = true;
    if (type == NULL) {
        snprintf(err, len, "config has no model_type");
        ok = false;
    } else if (strcmp(type, "gpt2") == 0) {
        m.arch = PLAN_GPT2;
        m.tied = true;
        m.dropout = true;
    } else if (strcmp(type, "bert") == 0) {
        m.arch = PLAN_BERT;
        m.tied = true;
        m.dropout = true;
        m.type_vocab = 2;
    } else if (strcmp(type, "llama") == 0 || strcmp(type, "mistral") == 0 ||
               strcmp(type, "qwen2") == 0) {
        m.arch = PLAN_LLAMA;
        m.tied = false;
        m.dropout = false;
    } else {
        snprintf(err, len, "unsupported model_type '%.40s' (gpt2, bert, llama)", type);
        ok = false;
    }
    static const char *const k_layers[] = {"num_hidden_layers", "n_layer", NULL};
    static const char *const k_hidden[] = {"hidden_size", "n_embd", NULL};
    static const char *const k_heads[] = {"num_attention_heads", "n_head", NULL};
    static const char *const k_kv[] = {"num_key_value_heads", NULL};
    static const char *const k_inter[] = {"intermediate_size", "n_inner", NULL};
    static const char *const k_vocab[] = {"vocab_size", NULL};
    static const char *const k_pos[] = {"max_position_embeddings", "n_positions", NULL};
    static const char *const k_type[] = {"type_vocab_size", NULL};
    if (ok && !(get_uint(o, k_layers, &m.layers) && get_uint(o, k_hidden, &m.hidden) &&
                get_uint(o, k_heads, &m.heads) && get_uint(o, k_vocab, &m.vocab))) {
        snprintf(err, len, "config lacks layers, hidden size, heads or vocab_size");
        ok = false;
    }
    if (ok) {
        if (!get_uint(o, k_kv, &m.kv_heads))
            m.kv_heads = m.heads;
        if (!get_uint(o, k_inter, &m.intermediate))
            m.intermediate = 4 * m.hidden; /* GPT-2's n_inner: null */
        if (!get_uint(o, k_pos, &m.positions))
            m.positions = m.arch == PLAN_LLAMA ? 0 : 512;
        if (m.arch == PLAN_BERT)
            (void)get_uint(o, k_type, &m.type_vocab);
        if (json_object_object_get_ex(o, "tie_word_embeddings", &v) &&
            json_object_is_type(v, json_type_boolean))
            m.tied = json_object_get_boolean(v);
        if (m.hidden % m.heads != 0 || m.heads % m.kv_heads != 0) {
            snprintf(err, len, "config: heads must divide hidden size, kv heads the heads");
            ok = false;
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

bool
plan_precision_parse(const char *s, enum plan_precision *out)
{
    for (size_t k = 0; k < sizeof precision_names / sizeof precision_names[0]; k++)
        if (strcmp(s, precision_names[k]) == 0) {
            *out = (enum plan_precision)k;
            return true;
        }
    return false;
}

bool
plan_optimizer_parse(const char *s, enum plan_optimizer *out)
{
    for (size_t k = 0; k < sizeof optimizer_names / sizeof optimizer_names[0]; k++)
        if (strcmp(s, optimizer_names[k]) == 0) {
            *out = (enum plan_optimizer)k;
            return true;
        }
    return false;
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

const char *
plan_arch_name(enum plan_arch a)
{
    return a == PLAN_GPT2 ? "gpt2" : a == PLAN_BERT ? "bert" : "llama";
}
