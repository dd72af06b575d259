/* SPDX-License-Identifier: MIT */
/*
** fuzz_plan.c -- a fuzz test of `vram plan` over config files and flags.
**
** Two levels, both checked for crashes, hangs and undefined behaviour
** (run it in the ASan+UBSan build):
**  - in process, LLVMFuzzerTestOneInput: the input is a config.json text,
**    optionally followed by a NUL and bytes that pick a job; the config is
**    parsed (src/plan/plan.c), and whatever parses is predicted for
**    training and generation. Invariants: a refused config or job leaves
**    its output alone; a prediction's total is its tensor peak plus the
**    allocator's share and the context, every part at most the peak.
**  - the command: now and then the mutated config is written to a file and
**    `vram plan --config FILE` runs with flags drawn from its option table
**    and hostile values. It must exit 0 or 2 (never die by a signal), and
**    on 2 print exactly one line.
**
** Without libFuzzer (the default, and CTest's fuzz_plan), main() is a
** deterministic mutational fuzzer: it starts from the seed configs and
** mutates them (bit flips, digits, huge numbers, duplicated keys, splices,
** truncation) for VRAM_FUZZ_SECONDS (default 10) or VRAM_FUZZ_RUNS inputs.
** Built with -DVRAM_LIBFUZZER and clang's -fsanitize=fuzzer, the same
** LLVMFuzzerTestOneInput is a libFuzzer target (`make fuzz`); with
** -DVRAM_FUZZ_REPLAY, tests/fuzz/replay.c's main() runs the corpus
** tests/fuzz/corpus/plan once (CTest fuzz_plan_replay).
**
** Usage: fuzz_plan VRAM_BINARY SEED_DIR   (SEED_DIR: data/measurements/configs)
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "plan/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fail(const char *what)
{
    fprintf(stderr, "fuzz_plan: invariant broken: %s\n", what);
    abort();
}

static uint64_t
take(const uint8_t **p, size_t *n, int bits)
{
    uint64_t v = 0;
    for (int k = 0; k < 8 && *n > 0; k++, (*p)++, (*n)--)
        v = v << 8 | **p;
    return bits >= 64 ? v : v & ((UINT64_C(1) << bits) - 1);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t clen = nul ? (size_t)(nul - data) : size;
    struct plan_model m, before;
    memset(&m, 0x5a, sizeof m);
    before = m;
    char err[256];
    if (!plan_config_parse_n((const char *)data, clen, &m, err, sizeof err)) {
        if (memcmp(&m, &before, sizeof m) != 0)
            fail("a refused config changed the model");
        if (err[0] == '\0' || strchr(err, '\n') != NULL)
            fail("a refusal is not one line");
        return 0;
    }
    const uint8_t *p = nul ? nul + 1 : data + size;
    size_t n = nul ? size - clen - 1 : 0;
    struct plan_job j = {1 + take(&p, &n, 31), 1 + take(&p, &n, 25), 1 + take(&p, &n, 4),
                         1 + take(&p, &n, 21), (int)take(&p, &n, 3),
                         (enum plan_precision)(take(&p, &n, 8) % 5),
                         (enum plan_optimizer)(take(&p, &n, 8) % 4),
                         (enum plan_attention)(take(&p, &n, 8) % 2), take(&p, &n, 1) != 0};
    if (n == 0 && !nul) /* config only: an ordinary job */
        j = (struct plan_job){8, 512, 1, 1, 0, PLAN_MIXED_BF16, PLAN_ADAMW, PLAN_SDPA, false};
    struct plan_result r;
    memset(&r, 0x33, sizeof r);
    struct plan_result rb = r;
    const char *why = NULL;
    if (plan_predict(&m, &j, &r, &why)) {
        if (r.total_bytes != r.tensor_peak_bytes + r.allocator_bytes + r.context_bytes ||
            r.total_bytes < r.tensor_peak_bytes || r.weights_bytes > r.tensor_peak_bytes ||
            r.activations_bytes > r.tensor_peak_bytes || r.temporary_bytes > r.tensor_peak_bytes ||
            r.optimizer_bytes > r.tensor_peak_bytes || r.gradients_bytes > r.tensor_peak_bytes)
            fail("training: the total is not the sum of its parts");
    } else {
        if (memcmp(&r, &rb, sizeof r) != 0 || why == NULL)
            fail("a refused job changed the result or gave no reason");
    }
    struct plan_gen_job g = {j.batch, j.seq, 1 + j.accum * 64,
                             j.precision % 2 ? PLAN_BF16 : PLAN_FP32, j.attention};
    struct plan_gen_result gr;
    if (plan_generate(&m, &g, &gr, &why)) {
        uint64_t top = gr.construction_bytes;
        top = gr.prefill_bytes > top ? gr.prefill_bytes : top;
        top = gr.decode_bytes > top ? gr.decode_bytes : top;
        if (gr.total_bytes != gr.tensor_peak_bytes + gr.allocator_bytes + gr.context_bytes ||
            gr.weights_bytes > gr.tensor_peak_bytes || gr.kv_cache_bytes > gr.tensor_peak_bytes)
            fail("generation: the total is not the sum of its parts");
        if (gr.tensor_peak_bytes != top ||
            gr.tensor_peak_bytes != gr.weights_bytes + gr.kv_cache_bytes + gr.activations_bytes +
                                        gr.workspace_bytes + gr.token_ids_bytes)
            fail("generation: the peak is not its phase's parts, or not the largest phase");
    }
    return 0;
}

#if !defined(VRAM_LIBFUZZER) && !defined(VRAM_FUZZ_REPLAY)

/* xorshift64*: the same inputs on every run (a failure is reproducible). */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t
rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dULL;
}

#define MAX_SEEDS 64
#define BUF (1 << 16)
static char *seeds[MAX_SEEDS];
static size_t seed_len[MAX_SEEDS];
static size_t n_seeds;

static void
add_seed(const char *text, size_t len)
{
    if (n_seeds < MAX_SEEDS && (seeds[n_seeds] = malloc(len + 1)) != NULL) {
        memcpy(seeds[n_seeds], text, len);
        seeds[n_seeds][len] = '\0';
        seed_len[n_seeds++] = len;
    }
}

static const char *const tokens[] = {
    "99999999999999999999999", "-1", "0", "1e308", "4096", "1048577", "null", "true",
    "\"model_type\": \"qwen2\"", "\"model_type\": \"mistral\"", "\"model_type\": \"t5\"",
    "\"n_layer\": 1,", "\"sliding_window\": 1,", "\"head_dim\": 7,", "{", "}", "[", "]", ",",
    ":", "\"", "\\u0000", "\"a\": {\"a\": 1, \"a\": 2},", " /* c */ ", "18446744073709551615",
};

/* One mutation of BUF (LEN bytes, room for BUF) in place; the new length. */
static size_t
mutate(char *b, size_t len)
{
    size_t pos = len ? rnd() % len : 0;
    switch (rnd() % 7) {
    case 0: /* flip a bit */
        if (len)
            b[pos] ^= (char)(1u << (rnd() % 8));
        break;
    case 1: /* a digit */
        if (len)
            b[pos] = (char)('0' + rnd() % 10);
        break;
    case 2: { /* insert a token */
        const char *t = tokens[rnd() % (sizeof tokens / sizeof tokens[0])];
        size_t tl = strlen(t);
        if (len + tl < BUF - 1) {
            memmove(b + pos + tl, b + pos, len - pos);
            memcpy(b + pos, t, tl);
            len += tl;
        }
        break;
    }
    case 3: /* cut */
        len = pos;
        break;
    case 4: { /* delete a run */
        size_t k = 1 + rnd() % 16;
        if (pos + k <= len) {
            memmove(b + pos, b + pos + k, len - pos - k);
            len -= k;
        }
        break;
    }
    case 5: { /* splice another seed's tail */
        size_t s = rnd() % n_seeds, from = seed_len[s] ? rnd() % seed_len[s] : 0;
        size_t k = seed_len[s] - from;
        if (pos + k < BUF - 1) {
            memcpy(b + pos, seeds[s] + from, k);
            len = pos + k;
        }
        break;
    }
    default: { /* append job bytes after a NUL */
        if (len + 41 < BUF) {
            b[len++] = '\0';
            for (int k = 0; k < 40; k++)
                b[len++] = (char)rnd();
        }
        break;
    }
    }
    return len;
}

static const char *const flags[] = {"--batch", "--seq", "--accum", "--layers", "--hidden",
                                    "--heads", "--kv-heads", "--intermediate", "--vocab",
                                    "--positions", "--precision", "--optimizer", "--attention",
                                    "--data-parallel", "--zero", "--gpu-memory", "--prompt",
                                    "--new-tokens", "--generate", "--checkpointing", "--json",
                                    "--untied", "--arch", "--bogus", "--trace", "--config"};
static const char *const values[] = {"0", "1", "8", "512", "4097", "1099511627776",
                                     "18446744073709551616", "-3", "", "x", "80G", "0x10",
                                     "bf16", "mixed-bf16", "adamw", "eager", "3", "4", "gpt2",
                                     "qwen2", "mistral", "1e9", "9999999999999999999999"};

/* Run `vram plan --config PATH` with random flags; check how it ends. */
static int
run_cli(const char *vram, const char *path)
{
    char *argv[32];
    int a = 0;
    argv[a++] = (char *)vram;
    argv[a++] = (char *)"plan";
    argv[a++] = (char *)"--config";
    argv[a++] = (char *)path;
    int nf = (int)(rnd() % 8);
    for (int k = 0; k < nf && a < 29; k++) {
        argv[a++] = (char *)flags[rnd() % (sizeof flags / sizeof flags[0])];
        argv[a++] = (char *)values[rnd() % (sizeof values / sizeof values[0])];
    }
    if (rnd() % 2) {
        argv[a++] = (char *)"--batch";
        argv[a++] = (char *)"4";
    }
    argv[a] = NULL;
    int errp[2];
    if (pipe(errp) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(errp[1], 2);
        close(errp[0]);
        alarm(20);
        execv(vram, argv);
        _exit(126);
    }
    close(errp[1]);
    char out[4096];
    size_t got = 0;
    ssize_t r;
    while ((r = read(errp[0], out + got, sizeof out - 1 - got)) > 0)
        got += (size_t)r;
    close(errp[0]);
    out[got] = '\0';
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    size_t lines = 0;
    for (size_t k = 0; k < got; k++)
        lines += out[k] == '\n';
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 2) ||
        (WEXITSTATUS(st) == 2 && (lines != 1 || strncmp(out, "vram: ", 6) != 0))) {
        fprintf(stderr, "fuzz_plan: `vram plan` ended badly (%s %d) on:",
                WIFEXITED(st) ? "exit" : "signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        for (int k = 1; argv[k]; k++)
            fprintf(stderr, " '%s'", argv[k]);
        fprintf(stderr, "\nstderr: %s\n", out);
        return 1;
    }
    return 0;
}

static void
load_seeds(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        static char text[BUF];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        add_seed(text, n);
    }
    if (d)
        closedir(d);
    static const char *const builtin[] = {
        "{\"model_type\": \"qwen2\", \"hidden_size\": 896, \"intermediate_size\": 4864, "
        "\"num_hidden_layers\": 24, \"num_attention_heads\": 14, \"num_key_value_heads\": 2, "
        "\"vocab_size\": 151936, \"tie_word_embeddings\": true, \"use_sliding_window\": false, "
        "\"sliding_window\": 32768}",
        "{\"model_type\": \"mistral\", \"hidden_size\": 4096, \"intermediate_size\": 14336, "
        "\"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"num_key_value_heads\": 8, "
        "\"head_dim\": 128, \"vocab_size\": 32000, \"sliding_window\": 4096}",
        "{\"model_type\": \"bert\", \"hidden_size\": 8, \"num_hidden_layers\": 1, "
        "\"num_attention_heads\": 2, \"vocab_size\": 10, \"type_vocab_size\": 2}",
    };
    for (size_t k = 0; k < sizeof builtin / sizeof builtin[0]; k++)
        add_seed(builtin[k], strlen(builtin[k]));
}

int
main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fuzz_plan VRAM_BINARY SEED_DIR\n");
        return 2;
    }
    load_seeds(argv[2]);
    const char *s = getenv("VRAM_FUZZ_SECONDS"), *rs = getenv("VRAM_FUZZ_RUNS");
    double seconds = s ? atof(s) : 10.0;
    long runs = rs ? atol(rs) : 2000000;
    char tmpl[] = "/tmp/vram-fuzz-plan-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) {
        perror("fuzz_plan: mkstemp");
        return 2;
    }
    close(fd);
    static char buf[BUF];
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long n = 0, cli = 0;
    int bad = 0;
    for (; n < runs && !bad; n++) {
        size_t k = n < (long)n_seeds ? (size_t)n : rnd() % n_seeds;
        size_t len = seed_len[k];
        memcpy(buf, seeds[k], len);
        int muts = n < (long)n_seeds ? 0 : 1 + (int)(rnd() % 6);
        for (int m = 0; m < muts; m++)
            len = mutate(buf, len);
        LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
        if (n % 64 == 0) { /* the command, with flags */
            FILE *f = fopen(tmpl, "wb");
            if (f) {
                fwrite(buf, 1, len, f);
                fclose(f);
                bad = run_cli(argv[1], tmpl);
                cli++;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 > seconds)
            break;
    }
    unlink(tmpl);
    printf("fuzz_plan: %ld inputs, %ld runs of `vram plan` with flags: %s\n", n, cli,
           bad ? "FAILED" : "ok");
    return bad ? 1 : 0;
}

#endif
