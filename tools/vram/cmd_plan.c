/*
** cmd_plan.c -- `vram plan`: predict a training job's peak GPU memory
** before it runs, from a Hugging Face config.json (or the same values as
** flags) and the job's settings. Prints the breakdown, the largest
** micro-batch that fits a GPU, the cap to give the job and what-ifs; or,
** with --json, one object in integer bytes. The model is src/plan/plan.c;
** docs/PLAN.md gives its formulas and measured accuracy.
*/
#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "cmd.h"
#include "plan/plan.h"
#include "util/size.h"

enum opt_id {
    OPT_CONFIG, OPT_ARCH, OPT_LAYERS, OPT_HIDDEN, OPT_HEADS, OPT_KV_HEADS,
    OPT_INTERMEDIATE, OPT_VOCAB, OPT_POSITIONS, OPT_UNTIED,
    OPT_BATCH, OPT_SEQ, OPT_PRECISION, OPT_OPTIMIZER, OPT_ACCUM, OPT_CHECKPOINTING,
    OPT_ATTENTION, OPT_DATA_PARALLEL, OPT_ZERO, OPT_GPU_MEMORY, OPT_JSON, OPT_HELP
};

static const struct cli_opt opt_table[] = {
    {OPT_CONFIG, "config", "FILE", "Hugging Face config.json (gpt2, bert or llama family)"},
    {OPT_ARCH, "arch", "NAME", "without --config: gpt2, bert or llama"},
    {OPT_LAYERS, "layers", "N", "transformer layers (overrides the config)"},
    {OPT_HIDDEN, "hidden", "N", "hidden size"},
    {OPT_HEADS, "heads", "N", "attention heads"},
    {OPT_KV_HEADS, "kv-heads", "N", "key/value heads (default: the heads)"},
    {OPT_INTERMEDIATE, "intermediate", "N", "MLP size (default: 4 x hidden)"},
    {OPT_VOCAB, "vocab", "N", "vocabulary size"},
    {OPT_POSITIONS, "positions", "N", "learned positions (gpt2, bert)"},
    {OPT_UNTIED, "untied", NULL, "the output layer does not share the input embedding"},
    {OPT_BATCH, "batch", "N", "sequences per optimizer step (per data-parallel rank)"},
    {OPT_SEQ, "seq", "N", "tokens per sequence"},
    {OPT_PRECISION, "precision", "P", "fp32 (default), mixed-fp16, mixed-bf16, fp16, bf16"},
    {OPT_OPTIMIZER, "optimizer", "O", "sgd, sgd-momentum, adam, adamw (default)"},
    {OPT_ACCUM, "accum", "N", "gradient accumulation steps (default 1; divides --batch)"},
    {OPT_CHECKPOINTING, "checkpointing", NULL, "activation checkpointing on every layer"},
    {OPT_ATTENTION, "attention", "A", "sdpa (default, fused) or eager"},
    {OPT_DATA_PARALLEL, "data-parallel", "N", "data-parallel ranks (default 1)"},
    {OPT_ZERO, "zero", "STAGE", "ZeRO stage 0 (default), 1, 2 or 3"},
    {OPT_GPU_MEMORY, "gpu-memory", "SIZE", "the GPU's memory: largest micro-batch, cap"},
    {OPT_JSON, "json", NULL, "print one JSON object (sizes in integer bytes)"},
    {OPT_HELP, "help", NULL, "print this help"},
};

#define N_OPTS (sizeof opt_table / sizeof opt_table[0])

/* Headroom of the recommended cap above the predicted total: 12.5%, the
** middle of the seeds' 10-15% rule. */
#define HEADROOM_DIV 8

static void
plan_usage(FILE *out)
{
    fprintf(out, "usage: vram plan --config FILE --batch N --seq N [OPTIONS]\n\n"
                 "Predict the peak GPU memory of a training step (PyTorch + transformers):\n"
                 "weights, gradients, optimizer states, activations, temporary buffers and\n"
                 "the CUDA context; the largest micro-batch that fits --gpu-memory and the\n"
                 "cap to give the job. See docs/PLAN.md.\n\nOptions:\n");
    cliopt_help(out, opt_table, N_OPTS);
    fprintf(out, "\nSizes accept 1073741824, 512M, 80G, 80GiB, 80GB (all 1024-based).\n"
                 "Exit status: 0 ok, 1 failure, 2 bad usage or bad input.\n");
}

/* Parse VALUE of --NAME as an integer in [MIN, 2^40]. */
static bool
parse_count(const char *name, const char *value, uint64_t min, uint64_t *out)
{
    char *end;
    errno = 0;
    if (value[0] < '0' || value[0] > '9') {
        cli_error("--%s '%.40s': not a number", name, value);
        return false;
    }
    unsigned long long v = strtoull(value, &end, 10);
    if (errno != 0 || *end != '\0' || v > (1ULL << 40)) {
        cli_error("--%s '%.40s': not a number", name, value);
        return false;
    }
    if (v < min) {
        cli_error("--%s must be at least %llu", name, (unsigned long long)min);
        return false;
    }
    *out = v;
    return true;
}

/* Read the whole of PATH into a NUL-terminated buffer the caller frees. */
static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0 || n > (1u << 24))
            break;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf != NULL)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

static const char *
fmt(uint64_t bytes, char *buf, size_t len)
{
    return size_format(bytes, buf, len);
}

/* The largest micro-batch (accum 1) whose total fits in LIMIT; 0: none. */
static uint64_t
max_micro_batch(const struct plan_model *m, const struct plan_job *j, uint64_t limit)
{
    struct plan_job t = *j;
    struct plan_result r;
    t.accum = 1;
    uint64_t lo = 0, hi = 1;
    for (;;) {
        t.batch = hi;
        if (!plan_predict(m, &t, &r, NULL) || r.total_bytes > limit)
            break;
        lo = hi;
        if (hi >= (1ULL << 30))
            return lo;
        hi *= 2;
    }
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        t.batch = mid;
        if (plan_predict(m, &t, &r, NULL) && r.total_bytes <= limit)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

struct whatif {
    const char *name;
    bool ok;
    struct plan_result r;
};

/* The same job with mixed precision, with accumulation, with checkpointing. */
static size_t
whatifs(const struct plan_model *m, const struct plan_job *j, struct whatif *w)
{
    size_t n = 0;
    struct plan_job t;
    if (j->precision == PLAN_FP32) {
        t = *j;
        t.precision = PLAN_MIXED_BF16;
        w[n].name = "mixed-bf16";
        w[n].ok = plan_predict(m, &t, &w[n].r, NULL);
        n++;
    }
    t = *j;
    t.accum = j->accum * 4;
    if (j->batch % t.accum == 0) {
        w[n].name = "accum x4";
        w[n].ok = plan_predict(m, &t, &w[n].r, NULL);
        n++;
    }
    if (!j->checkpointing) {
        t = *j;
        t.checkpointing = true;
        w[n].name = "checkpointing";
        w[n].ok = plan_predict(m, &t, &w[n].r, NULL);
        n++;
    }
    return n;
}

static struct json_object *
breakdown_json(const struct plan_result *r)
{
    struct json_object *b = json_object_new_object();
    json_object_object_add(b, "weights", json_object_new_uint64(r->weights_bytes));
    json_object_object_add(b, "gradients", json_object_new_uint64(r->gradients_bytes));
    json_object_object_add(b, "optimizer_states", json_object_new_uint64(r->optimizer_bytes));
    json_object_object_add(b, "activations", json_object_new_uint64(r->activations_bytes));
    json_object_object_add(b, "temporary", json_object_new_uint64(r->temporary_bytes));
    json_object_object_add(b, "allocator_overhead", json_object_new_uint64(r->allocator_bytes));
    json_object_object_add(b, "cuda_context", json_object_new_uint64(r->context_bytes));
    return b;
}

int
cmd_plan(int argc, char **argv)
{
    struct cliopt_iter it;
    const struct cli_opt *o;
    const char *value;
    const char *config = NULL, *arch = NULL;
    uint64_t ov[OPT_UNTIED] = {0}; /* model overrides by option id; 0: unset */
    bool untied = false, json = false, have_batch = false, have_seq = false;
    uint64_t gpu_memory = 0, u = 0;
    struct plan_job job = {.batch = 0, .seq = 0, .accum = 1, .data_parallel = 1, .zero = 0,
                           .precision = PLAN_FP32, .optimizer = PLAN_ADAMW,
                           .attention = PLAN_SDPA, .checkpointing = false};

    cliopt_begin(&it, argc, argv, opt_table, N_OPTS);
    for (;;) {
        enum cliopt_kind k = cliopt_next(&it, &o, &value);
        if (k == CLIOPT_END)
            break;
        if (k == CLIOPT_ERROR) {
            cli_error("%s", it.error);
            return 2;
        }
        if (k == CLIOPT_HELP) {
            plan_usage(stdout);
            return 0;
        }
        if (k == CLIOPT_OPERAND) {
            cli_error("plan: unexpected argument '%.40s' (try 'vram plan --help')", value);
            return 2;
        }
        switch (o->id) {
        case OPT_CONFIG: config = value; break;
        case OPT_ARCH: arch = value; break;
        case OPT_LAYERS: case OPT_HIDDEN: case OPT_HEADS: case OPT_KV_HEADS:
        case OPT_INTERMEDIATE: case OPT_VOCAB: case OPT_POSITIONS:
            if (!parse_count(o->name, value, 1, &ov[o->id]))
                return 2;
            break;
        case OPT_UNTIED: untied = true; break;
        case OPT_BATCH:
            if (!parse_count(o->name, value, 1, &job.batch))
                return 2;
            have_batch = true;
            break;
        case OPT_SEQ:
            if (!parse_count(o->name, value, 1, &job.seq))
                return 2;
            have_seq = true;
            break;
        case OPT_PRECISION:
            if (!plan_precision_parse(value, &job.precision)) {
                cli_error("--precision '%.40s': unknown (fp32, mixed-fp16, mixed-bf16, fp16, "
                          "bf16)", value);
                return 2;
            }
            break;
        case OPT_OPTIMIZER:
            if (!plan_optimizer_parse(value, &job.optimizer)) {
                cli_error("--optimizer '%.40s': unknown (sgd, sgd-momentum, adam, adamw)",
                          value);
                return 2;
            }
            break;
        case OPT_ACCUM:
            if (!parse_count(o->name, value, 1, &job.accum))
                return 2;
            break;
        case OPT_CHECKPOINTING: job.checkpointing = true; break;
        case OPT_ATTENTION:
            if (!plan_attention_parse(value, &job.attention)) {
                cli_error("--attention '%.40s': unknown (sdpa, eager)", value);
                return 2;
            }
            break;
        case OPT_DATA_PARALLEL:
            if (!parse_count(o->name, value, 1, &job.data_parallel))
                return 2;
            break;
        case OPT_ZERO:
            if (!parse_count(o->name, value, 0, &u) || u > 3) {
                if (u > 3)
                    cli_error("--zero must be 0, 1, 2 or 3");
                return 2;
            }
            job.zero = (int)u;
            break;
        case OPT_GPU_MEMORY:
            if (!cli_parse_size(o->name, value, &gpu_memory))
                return 2;
            break;
        case OPT_JSON: json = true; break;
        case OPT_HELP: plan_usage(stdout); return 0;
        }
    }
    if (!have_batch || !have_seq) {
        cli_error("plan: --batch and --seq are required (try 'vram plan --help')");
        return 2;
    }

    /* The model: the config, then the flags over it. */
    struct plan_model m;
    memset(&m, 0, sizeof m);
    if (config != NULL) {
        char *text = slurp(config);
        if (text == NULL) {
            cli_error("plan: cannot read '%.200s': %s", config, strerror(errno));
            return 2;
        }
        char err[160];
        bool ok = plan_config_parse(text, &m, err, sizeof err);
        free(text);
        if (!ok) {
            cli_error("plan: %.200s: %s", config, err);
            return 2;
        }
    } else if (arch != NULL) {
        if (strcmp(arch, "gpt2") == 0)
            m = (struct plan_model){.arch = PLAN_GPT2, .tied = true, .dropout = true,
                                    .positions = 1024};
        else if (strcmp(arch, "bert") == 0)
            m = (struct plan_model){.arch = PLAN_BERT, .tied = true, .dropout = true,
                                    .positions = 512, .type_vocab = 2};
        else if (strcmp(arch, "llama") == 0)
            m = (struct plan_model){.arch = PLAN_LLAMA};
        else {
            cli_error("--arch '%.40s': unknown (gpt2, bert, llama)", arch);
            return 2;
        }
    } else {
        cli_error("plan: give --config FILE or --arch with the model's sizes");
        return 2;
    }
    if (ov[OPT_LAYERS]) m.layers = ov[OPT_LAYERS];
    if (ov[OPT_HIDDEN]) m.hidden = ov[OPT_HIDDEN];
    if (ov[OPT_HEADS]) m.heads = ov[OPT_HEADS];
    if (ov[OPT_KV_HEADS]) m.kv_heads = ov[OPT_KV_HEADS];
    else if (config == NULL) m.kv_heads = m.heads;
    if (ov[OPT_INTERMEDIATE]) m.intermediate = ov[OPT_INTERMEDIATE];
    else if (m.intermediate == 0) m.intermediate = 4 * m.hidden;
    if (ov[OPT_VOCAB]) m.vocab = ov[OPT_VOCAB];
    if (ov[OPT_POSITIONS]) m.positions = ov[OPT_POSITIONS];
    if (untied) m.tied = false;

    struct plan_result r;
    const char *why = NULL;
    if (!plan_predict(&m, &job, &r, &why)) {
        cli_error("plan: %s", why);
        return 2;
    }
    uint64_t recommended = r.total_bytes + r.total_bytes / HEADROOM_DIV;
    uint64_t mmb = gpu_memory ? max_micro_batch(&m, &job, gpu_memory) : 0;
    struct whatif w[3];
    size_t nw = whatifs(&m, &job, w);

    if (json) {
        struct json_object *root = json_object_new_object();
        json_object_object_add(root, "arch", json_object_new_string(plan_arch_name(m.arch)));
        json_object_object_add(root, "params", json_object_new_uint64(r.params));
        json_object_object_add(root, "precision",
                               json_object_new_string(plan_precision_name(job.precision)));
        json_object_object_add(root, "optimizer",
                               json_object_new_string(plan_optimizer_name(job.optimizer)));
        json_object_object_add(root, "micro_batch",
                               json_object_new_uint64(job.batch / job.accum));
        json_object_object_add(root, "peak_phase", json_object_new_string(r.peak_phase));
        json_object_object_add(root, "tensor_peak_bytes",
                               json_object_new_uint64(r.tensor_peak_bytes));
        json_object_object_add(root, "total_bytes", json_object_new_uint64(r.total_bytes));
        json_object_object_add(root, "breakdown", breakdown_json(&r));
        if (gpu_memory) {
            json_object_object_add(root, "gpu_memory_bytes", json_object_new_uint64(gpu_memory));
            json_object_object_add(root, "fits", json_object_new_boolean(r.total_bytes <= gpu_memory));
            json_object_object_add(root, "max_micro_batch", json_object_new_uint64(mmb));
            json_object_object_add(root, "recommended_limit_bytes",
                                   json_object_new_uint64(recommended));
        }
        struct json_object *wa = json_object_new_array();
        for (size_t k = 0; k < nw; k++) {
            if (!w[k].ok)
                continue;
            struct json_object *e = json_object_new_object();
            json_object_object_add(e, "change", json_object_new_string(w[k].name));
            json_object_object_add(e, "tensor_peak_bytes",
                                   json_object_new_uint64(w[k].r.tensor_peak_bytes));
            json_object_object_add(e, "total_bytes", json_object_new_uint64(w[k].r.total_bytes));
            json_object_array_add(wa, e);
        }
        json_object_object_add(root, "what_ifs", wa);
        printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
        json_object_put(root);
        return 0;
    }

    char a[32], b2[32];
    printf("%s, %llu parameters; micro-batch %llu x %llu tokens, accum %llu, %s, %s%s\n",
           plan_arch_name(m.arch), (unsigned long long)r.params,
           (unsigned long long)(job.batch / job.accum), (unsigned long long)job.seq,
           (unsigned long long)job.accum, plan_precision_name(job.precision),
           plan_optimizer_name(job.optimizer), job.checkpointing ? ", checkpointing" : "");
    printf("  weights            %12s\n", fmt(r.weights_bytes, a, sizeof a));
    printf("  gradients          %12s\n", fmt(r.gradients_bytes, a, sizeof a));
    printf("  optimizer states   %12s\n", fmt(r.optimizer_bytes, a, sizeof a));
    printf("  activations        %12s\n", fmt(r.activations_bytes, a, sizeof a));
    printf("  temporary buffers  %12s\n", fmt(r.temporary_bytes, a, sizeof a));
    printf("  tensor peak        %12s  (max_memory_allocated, at the %s)\n",
           fmt(r.tensor_peak_bytes, a, sizeof a), r.peak_phase);
    printf("  allocator overhead %12s\n", fmt(r.allocator_bytes, a, sizeof a));
    printf("  CUDA context       %12s\n", fmt(r.context_bytes, a, sizeof a));
    printf("  total              %12s\n", fmt(r.total_bytes, a, sizeof a));
    if (gpu_memory) {
        printf("GPU memory %s: %s; largest micro-batch that fits: %llu\n",
               fmt(gpu_memory, a, sizeof a), r.total_bytes <= gpu_memory ? "fits" : "does NOT fit",
               (unsigned long long)mmb);
        printf("cap to give the job (12.5%% headroom): %s%s\n", fmt(recommended, b2, sizeof b2),
               recommended > gpu_memory ? " (more than the GPU has)" : "");
    }
    for (size_t k = 0; k < nw; k++)
        if (w[k].ok)
            printf("what if %-14s total %s\n", w[k].name, fmt(w[k].r.total_bytes, a, sizeof a));
    return 0;
}
