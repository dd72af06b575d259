/* SPDX-License-Identifier: MIT */
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
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cliopt.h"
#include "cmd.h"
#include "config/env.h"
#include "installdirs.h"
#include "plan/plan.h"
#include "base/size.h"

/* The options plan_option parses; the table stores the others. */
enum opt_id { OPT_PRECISION = 1, OPT_OPTIMIZER, OPT_ATTENTION, OPT_GPU_MEMORY };

/* What the command line asks of `vram plan`. */
struct plan_args {
    const char *config, *arch;
    /* The model's sizes over the config's or the architecture's; 0: unset. */
    uint64_t layers, hidden, heads, kv_heads, intermediate, vocab, positions;
    bool untied, json, generate;
    const char *model_spec, *trace_path, *gpu_text;
    const char *torch_version; /* --torch-version, for --model */
    uint64_t image, steps;     /* --image, --steps: named models of --model */
    bool precision_set, optimizer_set;
    uint64_t gpu_memory, prompt, new_tokens;
    uint64_t zero; /* --zero, given to job.zero after the walk */
    struct plan_job job; /* its batch and seq 0: not given */
};

#define AT(member) offsetof(struct plan_args, member)

/* The values of --arch, --precision, --optimizer and --attention, from the
** model's own names (src/plan/plan.h): the I-th, NULL past the last
** (completion and "did you mean"; the model's parsers decide). */
static const char *
arch_value(size_t i)
{
    return i < PLAN_N_ARCH ? plan_arch_name((enum plan_arch)i) : NULL;
}

static const char *
precision_value(size_t i)
{
    return i <= PLAN_BF16 ? plan_precision_name((enum plan_precision)i) : NULL;
}

static const char *
optimizer_value(size_t i)
{
    return i <= PLAN_ADAMW ? plan_optimizer_name((enum plan_optimizer)i) : NULL;
}

static const char *
attention_value(size_t i)
{
    static const char *const names[] = {"sdpa", "eager"}; /* PLAN_SDPA, PLAN_EAGER */
    return i < sizeof names / sizeof names[0] ? names[i] : NULL;
}

/* A size of the model or the job: a whole number from 1 to 2^40 (0, the
** default, meaning not given). */
#define COUNT_MAX (1ULL << 40)
#define COUNT_OPT(name, member, help)                                                    \
    {0, name, 0, "N", help, .store = CLIOPT_COUNT, .field = AT(member), .min = 1,       \
     .max = COUNT_MAX}

static const struct cli_opt opt_table[] = {
    {0, "model", 0, "PATH.py:FUNC", "trace FUNC of a PyTorch program instead (any model); "
     "or torchvision:NAME, hf:DIR, hf:ORG/NAME with --batch",
     .store = CLIOPT_STRING, .field = AT(model_spec)},
    {0, "torch-version", 0, "X.Y", "with --model: the PyTorch the job runs on (default: the "
     "tracing one)", .store = CLIOPT_STRING, .field = AT(torch_version)},
    COUNT_OPT("image", image, "with --model torchvision:NAME: image side in pixels (224)"),
    COUNT_OPT("steps", steps, "with --model NAME: training steps traced (2)"),
    {0, "trace", 0, "FILE", "with --model: write the allocations as a vram trace",
     .store = CLIOPT_STRING, .field = AT(trace_path)},
    {0, "config", 0, "FILE|DIR", "Hugging Face config.json, or the model directory",
     .store = CLIOPT_STRING, .field = AT(config)},
    {0, "arch", 0, "NAME", "without --config: a model_type listed below",
     .store = CLIOPT_STRING, .field = AT(arch), .values = arch_value},
    COUNT_OPT("layers", layers, "transformer layers (overrides the config)"),
    COUNT_OPT("hidden", hidden, "hidden size"),
    COUNT_OPT("heads", heads, "attention heads"),
    COUNT_OPT("kv-heads", kv_heads, "key/value heads (default: the heads)"),
    COUNT_OPT("intermediate", intermediate, "MLP size (default: 4 x hidden)"),
    COUNT_OPT("vocab", vocab, "vocabulary size"),
    COUNT_OPT("positions", positions, "learned positions (gpt2, bert)"),
    {0, "untied", 0, NULL, "the output layer does not share the input embedding",
     .store = CLIOPT_SET, .field = AT(untied)},
    COUNT_OPT("batch", job.batch, "sequences per optimizer step (per data-parallel rank)"),
    COUNT_OPT("seq", job.seq, "tokens per sequence"),
    {OPT_PRECISION, "precision", 0, "P", "fp32 (default), mixed-fp16, mixed-bf16, fp16, bf16",
     .store = CLIOPT_CALL, .values = precision_value},
    {OPT_OPTIMIZER, "optimizer", 0, "O", "sgd, sgd-momentum, adam, adamw (default)",
     .store = CLIOPT_CALL, .values = optimizer_value},
    COUNT_OPT("accum", job.accum, "gradient accumulation steps (default 1; divides --batch)"),
    {0, "checkpointing", 0, NULL, "activation checkpointing on every layer",
     .store = CLIOPT_SET, .field = AT(job.checkpointing)},
    {OPT_ATTENTION, "attention", 0, "A", "sdpa (default; fused, math for fp32 GQA) or eager",
     .store = CLIOPT_CALL, .values = attention_value},
    COUNT_OPT("data-parallel", job.data_parallel, "data-parallel ranks (default 1)"),
    {0, "zero", 0, "STAGE", "ZeRO stage 0 (default), 1, 2 or 3",
     .store = CLIOPT_COUNT, .field = AT(zero), .min = 0, .max = 3},
    {0, "generate", 0, NULL, "inference: generation with a KV cache (not training)",
     .store = CLIOPT_SET, .field = AT(generate)},
    COUNT_OPT("prompt", prompt, "with --generate: prompt tokens per sequence"),
    COUNT_OPT("new-tokens", new_tokens, "with --generate: tokens generated per sequence"),
    {OPT_GPU_MEMORY, "gpu-memory", 0, "SIZE", "the GPU's memory: largest micro-batch, cap",
     .store = CLIOPT_CALL},
    {0, "json", 0, NULL, "print one JSON object (sizes in integer bytes)",
     .store = CLIOPT_SET, .field = AT(json)},
};

/* Headroom of the recommended cap above the predicted total: 12.5%, the
** middle of the seeds' 10-15% rule. */
#define HEADROOM_DIV 8

/* The exit status of a prediction that does not fit --gpu-memory (the
** report is printed all the same), so that a script can tell it from a
** failure (1) and from bad input (2). */
#define PLAN_EXIT_NO_FIT 3

/* The exit status of a prediction of TOTAL bytes: 0, or PLAN_EXIT_NO_FIT
** when GPU_MEMORY (0: not given) is smaller. */
static int
fit_status(uint64_t total, uint64_t gpu_memory)
{
    return gpu_memory != 0 && total > gpu_memory ? PLAN_EXIT_NO_FIT : 0;
}

static void
plan_notes(FILE *out)
{
    char types[512];
    snprintf(types, sizeof types, "model_type accepted by --config and --arch: %s.",
             plan_arch_list());
    cliopt_wrap(out, 0, 0, types);
    cliopt_sizes_note(out, "80G");
}

static const struct cli_command plan_cmd = {
    .prog = "vram plan",
    .synopsis = "--config FILE|DIR --batch N --seq N [OPTIONS]\n"
                "--config FILE|DIR --generate --prompt N --new-tokens N [...]\n"
                "--model PATH.py:FUNCTION [--json] [--trace FILE] [...]\n"
                "--model torchvision:NAME|hf:DIR|hf:ID --batch N [...]",
    .about = "Predict the peak GPU memory of a training step (PyTorch + transformers):\n"
             "weights, gradients, optimizer states, activations, temporary buffers and\n"
             "the CUDA context; the largest micro-batch that fits --gpu-memory and the\n"
             "cap to give the job. --generate: inference with a key/value cache, the\n"
             "largest batch and prompt that fit; its peak is the largest of three\n"
             "phases: construction (weights, plus a tied output layer's own weight\n"
             "before tying frees it), prefill (cache, cuBLAS workspace and the last\n"
             "layer's MLP, attention or logits on the prompt) and the last decode step\n"
             "(cache, its concatenation, one token). --model: any PyTorch program, traced\n"
             "on a fake CUDA device (no GPU; python3 with PyTorch), or a named model of\n"
             "torchvision's zoo or Hugging Face (built from its config) trained --steps\n"
             "steps with --precision and --optimizer. See docs/PLAN.md.\n",
    CLIOPT_TABLE(opt_table),
    .notes = plan_notes,
    .exit_status = "0 ok (and, with --gpu-memory, the job fits); 3 the job does not fit "
                   "--gpu-memory (the report is printed all the same); 1 failure; 2 bad "
                   "usage or bad input. With --model, the tracer's status.",
    .no_operands = true,
};

/* Read the whole of PATH into a NUL-terminated buffer the caller frees,
** its length in *LEN; NULL with errno set on failure. */
static char *
slurp(const char *path, size_t *len)
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
    if (buf != NULL) {
        buf[n] = '\0';
        *len = n;
        if (ferror(f)) {
            free(buf);
            buf = NULL;
            errno = EIO;
        }
    }
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

/* The vram Python package: where `make install` puts it, relative to the
** vram binary's directory (cmake/Install.cmake), else the checkout's
** python/ (VRAM_PYTHON_DIR, for the build tree). */
#ifndef VRAM_BINDIR_TO_PYTHONDIR
#define VRAM_BINDIR_TO_PYTHONDIR "../share/vram/python"
#endif
#ifndef VRAM_PYTHON_DIR
#define VRAM_PYTHON_DIR ""
#endif

const char *
cli_python_dir(const struct env_run *env, char *buf, size_t len)
{
    if (env->python_dir[0] != '\0')
        return env->python_dir;
    return installed_path(VRAM_BINDIR_TO_PYTHONDIR, buf, len) ? buf : VRAM_PYTHON_DIR;
}

/* Does PY run and find PyTorch (without importing it: that takes seconds)? */
static bool
python_has_torch(const char *py)
{
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execlp(py, py, "-c",
               "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)",
               (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return false;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* `vram plan --model`: run the tracer (python/vram/plan.py) with the first
** of $VRAM_PYTHON, python3 and /usr/bin/python3 that has PyTorch, and
** return its exit status (its output is ours). */
static int
plan_traced(const struct plan_args *pa)
{
    const char *spec = pa->model_spec, *trace = pa->trace_path, *gpu_memory = pa->gpu_text;
    bool json = pa->json;
    struct env_run env;
    if (env_run_load(NULL, NULL, &env) != VRAM_OK) {
        cli_error("plan: %s", vram_last_error());
        return 2;
    }
    const char *cands[] = {env.python, "python3", "/usr/bin/python3"};
    const char *py = NULL;
    for (size_t k = 0; k < sizeof cands / sizeof cands[0] && py == NULL; k++)
        if (cands[k] != NULL && cands[k][0] != '\0' && python_has_torch(cands[k]))
            py = cands[k];
    if (py == NULL) {
        cli_error("plan: --model needs python3 with PyTorch (set VRAM_PYTHON to one)");
        return 1;
    }
    /* The package, before whatever PYTHONPATH the user has. */
    char installed[PATH_MAX];
    const char *dir = cli_python_dir(&env, installed, sizeof installed);
    const char *old = env.pythonpath;
    size_t n = strlen(dir) + (old ? strlen(old) : 0) + 2;
    char *path = malloc(n);
    if (path == NULL) {
        cli_error("plan: out of memory");
        return 1;
    }
    snprintf(path, n, "%s%s%s", dir, old && old[0] ? ":" : "", old && old[0] ? old : "");
    const char *args[32];
    char nums[4][24];
    size_t a = 0;
    args[a++] = py;
    args[a++] = "-m";
    args[a++] = "vram.plan";
    if (json)
        args[a++] = "--json";
    if (trace) {
        args[a++] = "--trace";
        args[a++] = trace;
    }
    if (gpu_memory) {
        args[a++] = "--gpu-memory";
        args[a++] = gpu_memory;
    }
    if (pa->torch_version) {
        args[a++] = "--torch-version";
        args[a++] = pa->torch_version;
    }
    /* A named model's job: its sizes, precision and optimizer. */
    const char *nflag[4] = {"--batch", "--seq", "--image", "--steps"};
    uint64_t nval[4] = {pa->job.batch, pa->job.seq, pa->image, pa->steps};
    for (size_t k = 0; k < 4; k++)
        if (nval[k] != 0) {
            snprintf(nums[k], sizeof nums[k], "%llu", (unsigned long long)nval[k]);
            args[a++] = nflag[k];
            args[a++] = nums[k];
        }
    if (pa->precision_set) {
        args[a++] = "--precision";
        args[a++] = plan_precision_name(pa->job.precision);
    }
    if (pa->optimizer_set) {
        args[a++] = "--optimizer";
        args[a++] = plan_optimizer_name(pa->job.optimizer);
    }
    args[a++] = "--";
    args[a++] = spec;
    args[a] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        cli_error("plan: cannot start %s: %s", py, strerror(errno));
        free(path);
        return 1;
    }
    if (pid == 0) {
        if (dir[0] != '\0')
            setenv("PYTHONPATH", path, 1);
        execvp(py, (char *const *)args);
        fprintf(stderr, "vram: plan: cannot run %s: %s\n", py, strerror(errno));
        _exit(1);
    }
    free(path);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return 1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* The largest batch (then prompt) of generation job J whose total fits in
** LIMIT; 0: none. WHICH 0 searches the batch, 1 the prompt. */
static uint64_t
gen_max(const struct plan_model *m, const struct plan_gen_job *j, uint64_t limit, int which)
{
    struct plan_gen_job t = *j;
    struct plan_gen_result r;
    uint64_t *x = which == 0 ? &t.batch : &t.prompt;
    uint64_t cap = which == 0 ? PLAN_MAX_BATCH : PLAN_MAX_SEQ;
    /* The prompt and new tokens within the model's positions, where known. */
    if (which == 1 && m->positions != 0)
        cap = m->positions > j->new_tokens ? m->positions - j->new_tokens : 0;
    if (cap == 0)
        return 0;
    uint64_t lo = 0, hi = 1;
    for (;;) {
        *x = hi;
        if (!plan_generate(m, &t, &r, NULL) || r.total_bytes > limit)
            break;
        lo = hi;
        if (hi >= cap)
            return lo;
        hi = hi * 2 > cap ? cap : hi * 2;
    }
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        *x = mid;
        if (plan_generate(m, &t, &r, NULL) && r.total_bytes <= limit)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The last lines of a text breakdown, training or generation alike. */
static void
print_peak_lines(uint64_t tensor_peak, const char *phase, uint64_t allocator,
                 uint64_t context, uint64_t total)
{
    char a[32];
    printf("  tensor peak        %12s  (max_memory_allocated, at the %s)\n",
           fmt(tensor_peak, a, sizeof a), phase);
    printf("  allocator overhead %12s\n", fmt(allocator, a, sizeof a));
    printf("  CUDA context       %12s\n", fmt(context, a, sizeof a));
    printf("  total              %12s\n", fmt(total, a, sizeof a));
}

/* The peak of a JSON report, training or generation alike. */
static void
json_add_peak(struct json_object *root, const char *phase, uint64_t tensor_peak,
              uint64_t total)
{
    json_object_object_add(root, "peak_phase", json_object_new_string(phase));
    json_object_object_add(root, "tensor_peak_bytes",
                           json_object_new_uint64(tensor_peak));
    json_object_object_add(root, "total_bytes", json_object_new_uint64(total));
}

/* With --gpu-memory: the GPU's memory and whether TOTAL fits it. */
static void
json_add_fit(struct json_object *root, uint64_t gpu_memory, uint64_t total)
{
    json_object_object_add(root, "gpu_memory_bytes", json_object_new_uint64(gpu_memory));
    json_object_object_add(root, "fits", json_object_new_boolean(total <= gpu_memory));
}

static int
report_generate(const struct plan_model *m, const struct plan_gen_job *j, uint64_t gpu_memory,
                bool json)
{
    struct plan_gen_result r;
    const char *why = NULL;
    if (!plan_generate(m, j, &r, &why)) {
        cli_error("plan: %s", why);
        return 2;
    }
    uint64_t mb = gpu_memory ? gen_max(m, j, gpu_memory, 0) : 0;
    uint64_t mp = gpu_memory ? gen_max(m, j, gpu_memory, 1) : 0;
    uint64_t recommended = r.total_bytes + r.total_bytes / HEADROOM_DIV;
    if (json) {
        struct json_object *root = json_object_new_object();
        json_object_object_add(root, "task", json_object_new_string("generate"));
        json_object_object_add(root, "arch", json_object_new_string(plan_arch_name(m->arch)));
        json_object_object_add(root, "params", json_object_new_uint64(r.params));
        json_object_object_add(root, "precision",
                               json_object_new_string(plan_precision_name(j->precision)));
        json_object_object_add(root, "batch", json_object_new_uint64(j->batch));
        json_object_object_add(root, "prompt", json_object_new_uint64(j->prompt));
        json_object_object_add(root, "new_tokens", json_object_new_uint64(j->new_tokens));
        json_add_peak(root, r.peak_phase, r.tensor_peak_bytes, r.total_bytes);
        struct json_object *b = json_object_new_object();
        json_object_object_add(b, "weights", json_object_new_uint64(r.weights_bytes));
        json_object_object_add(b, "kv_cache", json_object_new_uint64(r.kv_cache_bytes));
        json_object_object_add(b, "activations", json_object_new_uint64(r.activations_bytes));
        json_object_object_add(b, "allocator_overhead", json_object_new_uint64(r.allocator_bytes));
        json_object_object_add(b, "cuda_context", json_object_new_uint64(r.context_bytes));
        json_object_object_add(b, "cublas_workspace", json_object_new_uint64(r.workspace_bytes));
        json_object_object_add(b, "token_ids", json_object_new_uint64(r.token_ids_bytes));
        json_object_object_add(root, "breakdown", b);
        struct json_object *ph = json_object_new_object();
        json_object_object_add(ph, "construction", json_object_new_uint64(r.construction_bytes));
        json_object_object_add(ph, "prefill", json_object_new_uint64(r.prefill_bytes));
        json_object_object_add(ph, "last_decode_step", json_object_new_uint64(r.decode_bytes));
        json_object_object_add(root, "phases", ph);
        json_object_object_add(root, "prefill_at", json_object_new_string(r.prefill_at));
        json_object_object_add(root, "attention",
                               json_object_new_string(j->attention == PLAN_EAGER ? "eager"
                                                                                 : "sdpa"));
        if (gpu_memory) {
            json_add_fit(root, gpu_memory, r.total_bytes);
            json_object_object_add(root, "max_batch", json_object_new_uint64(mb));
            json_object_object_add(root, "max_prompt", json_object_new_uint64(mp));
            json_object_object_add(root, "recommended_limit_bytes",
                                   json_object_new_uint64(recommended));
        }
        printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
        json_object_put(root);
        return fit_status(r.total_bytes, gpu_memory);
    }
    char a[32];
    printf("%s, %llu parameters; generate: batch %llu, prompt %llu + %llu new tokens, %s\n",
           plan_arch_name(m->arch), (unsigned long long)r.params,
           (unsigned long long)j->batch, (unsigned long long)j->prompt,
           (unsigned long long)j->new_tokens, plan_precision_name(j->precision));
    printf("  weights            %12s\n", fmt(r.weights_bytes, a, sizeof a));
    printf("  KV cache           %12s\n", fmt(r.kv_cache_bytes, a, sizeof a));
    printf("  cuBLAS workspace   %12s\n", fmt(r.workspace_bytes, a, sizeof a));
    printf("  token ids          %12s\n", fmt(r.token_ids_bytes, a, sizeof a));
    printf("  %-18s %12s\n",
           strcmp(r.peak_phase, "construction") == 0 ? "head before tying" : "activations",
           fmt(r.activations_bytes, a, sizeof a));
    print_peak_lines(r.tensor_peak_bytes, r.peak_phase, r.allocator_bytes,
                     r.context_bytes, r.total_bytes);
    char c1[32], c2[32];
    printf("tensor peak of each phase: construction %s, prefill %s (widest at the %s),\n"
           "  last decode step %s\n",
           fmt(r.construction_bytes, a, sizeof a), fmt(r.prefill_bytes, c1, sizeof c1),
           r.prefill_at, fmt(r.decode_bytes, c2, sizeof c2));
    if (gpu_memory) {
        printf("GPU memory %s: %s; largest batch that fits: %llu; largest prompt: %llu\n",
               fmt(gpu_memory, a, sizeof a), r.total_bytes <= gpu_memory ? "fits" : "does NOT fit",
               (unsigned long long)mb, (unsigned long long)mp);
        printf("cap to give the job (12.5%% headroom): %s\n",
               fmt(recommended, a, sizeof a));
    }
    return fit_status(r.total_bytes, gpu_memory);
}

/* One option of `vram plan` that the table does not store (cliopt_handler). */
static int
plan_option(void *ctx, const struct cli_opt *o, const char *value)
{
    struct plan_args *pa = ctx;
    struct plan_job *job = &pa->job;
    size_t k;
    /* A value the option does not list: the values, and the nearest. */
    if (o->values != NULL && !cliopt_choice(&plan_cmd, o, value, &k))
        return CLI_EXIT_USAGE;
    switch (o->id) {
    case OPT_PRECISION:
        pa->precision_set = true;
        if (!plan_precision_parse(value, &job->precision))
            return cliopt_usage_error(&plan_cmd, "--precision '%.40s': unknown (fp32, "
                                      "mixed-fp16, mixed-bf16, fp16, bf16)", value);
        break;
    case OPT_OPTIMIZER:
        pa->optimizer_set = true;
        if (!plan_optimizer_parse(value, &job->optimizer))
            return cliopt_usage_error(&plan_cmd, "--optimizer '%.40s': unknown (sgd, "
                                      "sgd-momentum, adam, adamw)", value);
        break;
    case OPT_ATTENTION:
        if (!plan_attention_parse(value, &job->attention))
            return cliopt_usage_error(&plan_cmd, "--attention '%.40s': unknown (sdpa, eager)",
                                      value);
        break;
    case OPT_GPU_MEMORY:
        if (!cliopt_size(&plan_cmd, o->name, value, &pa->gpu_memory))
            return CLI_EXIT_USAGE;
        pa->gpu_text = value;
        break;
    }
    return CLIOPT_GO_ON;
}

int
cmd_plan(int argc, char **argv)
{
    struct plan_args pa = {
        .job = {.batch = 0, .seq = 0, .accum = 1, .data_parallel = 1, .zero = 0,
                .precision = PLAN_FP32, .optimizer = PLAN_ADAMW, .attention = PLAN_SDPA,
                .checkpointing = false}};
    int rc = cliopt_parse(&plan_cmd, argc, argv, plan_option, &pa, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;
    pa.job.zero = (int)pa.zero;
    if (pa.model_spec != NULL) {
        bool named = strncmp(pa.model_spec, "torchvision:", 12) == 0 ||
                     strncmp(pa.model_spec, "hf:", 3) == 0;
        if (pa.config != NULL || pa.arch != NULL || pa.generate ||
            (!named && (pa.job.batch != 0 || pa.job.seq != 0 || pa.image != 0 ||
                        pa.steps != 0 || pa.precision_set || pa.optimizer_set))) {
            cli_error("plan: --model traces the program as it is: its sizes come from it, "
                      "not from --config, --arch, --batch or --seq");
            return 2;
        }
        return plan_traced(&pa);
    }
    if (pa.torch_version != NULL || pa.image != 0 || pa.steps != 0) {
        cli_error("plan: --torch-version, --image and --steps go with --model");
        return 2;
    }
    if (pa.trace_path != NULL) {
        cli_error("plan: --trace goes with --model (a traced program)");
        return 2;
    }
    if (pa.generate ? (!pa.job.batch || !pa.prompt || !pa.new_tokens)
                    : (!pa.job.batch || !pa.job.seq)) {
        cli_error(pa.generate ? "plan: --generate needs --batch, --prompt and --new-tokens"
                           : "plan: --batch and --seq are required (try 'vram plan --help')");
        return 2;
    }

    /* The model: the config, then the flags over it. */
    struct plan_model m;
    memset(&m, 0, sizeof m);
    if (pa.config != NULL) {
        /* A model directory: its config.json. */
        char dirconf[4096];
        struct stat sb;
        if (stat(pa.config, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            if ((size_t)snprintf(dirconf, sizeof dirconf, "%s/config.json", pa.config) >=
                sizeof dirconf) {
                cli_error("plan: --config: path too long");
                return 2;
            }
            pa.config = dirconf;
        }
        size_t len = 0;
        char *text = slurp(pa.config, &len);
        if (text == NULL) {
            cli_error("plan: cannot read '%.200s': %s", pa.config, strerror(errno));
            return 2;
        }
        char err[256];
        bool ok = plan_config_parse_n(text, len, &m, err, sizeof err);
        free(text);
        if (!ok) {
            cli_error("plan: %.200s: %s", pa.config, err);
            return 2;
        }
    } else if (pa.arch != NULL) {
        enum plan_arch a;
        if (!plan_arch_parse(pa.arch, &a)) {
            cli_error("--arch '%.40s': unknown (%s; any other model: --model FILE.py:FUNCTION)",
                      pa.arch, plan_arch_list());
            return 2;
        }
        m = plan_model_defaults(a);
    } else {
        cli_error("plan: give --config FILE or --arch with the model's sizes");
        return 2;
    }
    if (pa.layers) m.layers = pa.layers;
    if (pa.hidden) m.hidden = pa.hidden;
    if (pa.heads) m.heads = pa.heads;
    if (pa.kv_heads) m.kv_heads = pa.kv_heads;
    else if (pa.config == NULL) m.kv_heads = m.heads;
    if (pa.intermediate) m.intermediate = pa.intermediate;
    else if (m.intermediate == 0) m.intermediate = 4 * m.hidden;
    if (pa.vocab) m.vocab = pa.vocab;
    if (pa.positions) m.positions = pa.positions;
    if (pa.untied) m.tied = false;

    if (pa.generate) {
        struct plan_gen_job g = {pa.job.batch, pa.prompt, pa.new_tokens, pa.job.precision,
                                 pa.job.attention};
        return report_generate(&m, &g, pa.gpu_memory, pa.json);
    }
    struct plan_result r;
    const char *why = NULL;
    if (!plan_predict(&m, &pa.job, &r, &why)) {
        cli_error("plan: %s", why);
        return 2;
    }
    uint64_t recommended = r.total_bytes + r.total_bytes / HEADROOM_DIV;
    uint64_t mmb = pa.gpu_memory ? max_micro_batch(&m, &pa.job, pa.gpu_memory) : 0;
    struct whatif w[3];
    size_t nw = whatifs(&m, &pa.job, w);

    if (pa.json) {
        struct json_object *root = json_object_new_object();
        json_object_object_add(root, "arch", json_object_new_string(plan_arch_name(m.arch)));
        json_object_object_add(root, "params", json_object_new_uint64(r.params));
        json_object_object_add(root, "precision",
                               json_object_new_string(plan_precision_name(pa.job.precision)));
        json_object_object_add(root, "optimizer",
                               json_object_new_string(plan_optimizer_name(pa.job.optimizer)));
        json_object_object_add(root, "micro_batch",
                               json_object_new_uint64(pa.job.batch / pa.job.accum));
        json_add_peak(root, r.peak_phase, r.tensor_peak_bytes, r.total_bytes);
        json_object_object_add(root, "breakdown", breakdown_json(&r));
        if (pa.gpu_memory) {
            json_add_fit(root, pa.gpu_memory, r.total_bytes);
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
        return fit_status(r.total_bytes, pa.gpu_memory);
    }

    char a[32], b2[32];
    printf("%s, %llu parameters; micro-batch %llu x %llu tokens, accum %llu, %s, %s%s\n",
           plan_arch_name(m.arch), (unsigned long long)r.params,
           (unsigned long long)(pa.job.batch / pa.job.accum), (unsigned long long)pa.job.seq,
           (unsigned long long)pa.job.accum, plan_precision_name(pa.job.precision),
           plan_optimizer_name(pa.job.optimizer), pa.job.checkpointing ? ", checkpointing" : "");
    printf("  weights            %12s\n", fmt(r.weights_bytes, a, sizeof a));
    printf("  gradients          %12s\n", fmt(r.gradients_bytes, a, sizeof a));
    printf("  optimizer states   %12s\n", fmt(r.optimizer_bytes, a, sizeof a));
    printf("  activations        %12s\n", fmt(r.activations_bytes, a, sizeof a));
    printf("  temporary buffers  %12s\n", fmt(r.temporary_bytes, a, sizeof a));
    print_peak_lines(r.tensor_peak_bytes, r.peak_phase, r.allocator_bytes,
                     r.context_bytes, r.total_bytes);
    if (pa.gpu_memory) {
        printf("GPU memory %s: %s; largest micro-batch that fits: %llu\n",
               fmt(pa.gpu_memory, a, sizeof a),
               r.total_bytes <= pa.gpu_memory ? "fits" : "does NOT fit",
               (unsigned long long)mmb);
        printf("cap to give the job (12.5%% headroom): %s%s\n", fmt(recommended, b2, sizeof b2),
               recommended > pa.gpu_memory ? " (more than the GPU has)" : "");
    }
    for (size_t k = 0; k < nw; k++)
        if (w[k].ok)
            printf("what if %-14s total %s\n", w[k].name, fmt(w[k].r.total_bytes, a, sizeof a));
    return fit_status(r.total_bytes, pa.gpu_memory);
}
