/* SPDX-License-Identifier: MIT */
/*
** test_plan_accuracy.c -- `vram plan`'s model against real training runs:
** every row of data/measurements/training_peaks.jsonl (61 runs on an
** H200, see data/measurements/README.md) is predicted from its model's
** config.json and the row's job, and compared with the measured
** max_memory_allocated. Prints the error table (markdown, as in
** BENCHMARKS.md and docs/PLAN.md) and the median and maximum absolute
** error overall and per family. Nothing is fitted to these rows.
**
** With --generate, the same for `vram plan --generate`: every generation
** run of data/measurements/plan_peaks_h200.jsonl (Hugging Face generate()
** with a KV cache on an H200), predicted from its family's config.json
** (gpt2.json, qwen2-0.5b.json, llama-300m.json: the configurations
** bench/gpu/plan_measure.py builds).
**
** Fails (exit 1) when the median absolute error exceeds 5% or any row
** exceeds 15% (the planner's accuracy targets, docs/PLAN.md); exit 2 when the data cannot be read.
** Usage: test_plan_accuracy [--generate] MEASUREMENTS_DIR
*/
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

#define MAX_ROWS 256
#define MEDIAN_LIMIT 0.05
#define MAX_LIMIT 0.15

static const char *const families[] = {"gpt2", "bert-base", "llama-300m"};

/* The families of the generation runs and the config each was built from
** (GPT2, QWEN2 and llama_cfg in bench/gpu/plan_measure.py). */
static const char *const gen_families[][2] = {{"gpt2", "gpt2"}, {"qwen2", "qwen2-0.5b"},
                                              {"llama", "llama-300m"}};
#define N_GEN_FAM (sizeof gen_families / sizeof gen_families[0])

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
median(double *v, size_t n)
{
    qsort(v, n, sizeof v[0], cmp_double);
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static struct json_object *
get(struct json_object *o, const char *k)
{
    struct json_object *v = NULL;
    return o != NULL && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static const char *
str_of(struct json_object *o, const char *k)
{
    struct json_object *v = get(o, k);
    return v != NULL ? json_object_get_string(v) : "";
}

static int64_t
int_of(struct json_object *o, const char *k)
{
    struct json_object *v = get(o, k);
    return v != NULL ? json_object_get_int64(v) : -1;
}

/* Load DIR/configs/MODEL.json into *M; false on any failure. */
static bool
load_config(const char *dir, const char *model, struct plan_model *m)
{
    char path[1024], err[160];
    snprintf(path, sizeof path, "%s/configs/%s.json", dir, model);
    /* Read the configuration the row's model was built from. */
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return false;
    char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    if (!plan_config_parse(text, m, err, sizeof err)) {
        fprintf(stderr, "vram: %s: %s\n", path, err);
        return false;
    }
    return true;
}

/* Print the median and maximum absolute errors per family (NAMES, NF of
** them; ERR_FAM[k] holds N_FAM[k] errors) and of all N in ERR_ALL; 1 when
** they miss the targets, else 0. */
static int
summary(const char *const *names, size_t nf, double err_fam[][MAX_ROWS], const size_t *n_fam,
        double *err_all, size_t n)
{
    printf("\n| family | runs | median abs. error | max abs. error |\n|---|---|---|---|\n");
    for (size_t k = 0; k < nf; k++) {
        double mx = 0;
        for (size_t i = 0; i < n_fam[k]; i++)
            mx = err_fam[k][i] > mx ? err_fam[k][i] : mx;
        printf("| %s | %zu | %.2f%% | %.2f%% |\n", names[k], n_fam[k],
               median(err_fam[k], n_fam[k]) * 100, mx * 100);
    }
    double mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = err_all[i] > mx ? err_all[i] : mx;
    double med = median(err_all, n);
    printf("| all | %zu | %.2f%% | %.2f%% |\n", n, med * 100, mx * 100);
    if (med > MEDIAN_LIMIT || mx > MAX_LIMIT) {
        printf("FAIL: median %.2f%% (limit %.0f%%), max %.2f%% (limit %.0f%%)\n", med * 100,
               MEDIAN_LIMIT * 100, mx * 100, MAX_LIMIT * 100);
        return 1;
    }
    printf("ok: median %.2f%% <= %.0f%%, max %.2f%% <= %.0f%%\n", med * 100, MEDIAN_LIMIT * 100,
           mx * 100, MAX_LIMIT * 100);
    return 0;
}

/* The generation runs: every row of DIR/plan_peaks_h200.jsonl whose spec
** is of kind "generate", predicted by plan_generate from its family's
** config (gen_families). Returns the exit status. */
static int
generate_accuracy(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/plan_peaks_h200.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "vram: cannot read %s\n", path);
        return 2;
    }
    static double err_all[MAX_ROWS], err_fam[N_GEN_FAM][MAX_ROWS];
    size_t n = 0, n_fam[N_GEN_FAM] = {0};
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    printf("| family | precision | batch | prompt | new | measured MiB | predicted MiB | error "
           "| phase |\n|---|---|---|---|---|---|---|---|---|\n");
    while (getline(&line, &cap, f) > 0 && n < MAX_ROWS) {
        struct json_object *o = json_tokener_parse(line);
        struct json_object *spec = get(o, "spec");
        int64_t meas_i = int_of(get(o, "measured"), "peak_allocated");
        if (spec == NULL || strcmp(str_of(spec, "kind"), "generate") != 0 || meas_i <= 0) {
            json_object_put(o);
            continue;
        }
        const char *fam = str_of(spec, "family");
        size_t k = 0;
        while (k < N_GEN_FAM && strcmp(fam, gen_families[k][0]) != 0)
            k++;
        struct plan_model m;
        struct plan_gen_job g = {0};
        struct plan_gen_result r;
        const char *why = "";
        if (k == N_GEN_FAM || !load_config(dir, gen_families[k][1], &m)) {
            fprintf(stderr, "vram: no usable config for family '%s'\n", fam);
            json_object_put(o);
            rc = 2;
            break;
        }
        g.batch = (uint64_t)int_of(spec, "batch");
        g.prompt = (uint64_t)int_of(spec, "prompt");
        g.new_tokens = (uint64_t)int_of(spec, "new_tokens");
        g.attention = PLAN_SDPA;
        if (!plan_precision_parse(str_of(spec, "precision"), &g.precision) ||
            !plan_generate(&m, &g, &r, &why)) {
            fprintf(stderr, "vram: row %zu: cannot predict (%s)\n", n + 1, why);
            json_object_put(o);
            rc = 2;
            break;
        }
        double meas = (double)meas_i;
        double e = ((double)r.tensor_peak_bytes - meas) / meas;
        printf("| %s | %s | %llu | %llu | %llu | %.0f | %.0f | %+.1f%% | %s%s%s |\n", fam,
               str_of(spec, "precision"), (unsigned long long)g.batch,
               (unsigned long long)g.prompt, (unsigned long long)g.new_tokens,
               meas / 1048576.0, (double)r.tensor_peak_bytes / 1048576.0, e * 100,
               r.peak_phase, strcmp(r.peak_phase, "prefill") == 0 ? ", " : "",
               strcmp(r.peak_phase, "prefill") == 0 ? r.prefill_at : "");
        double ae = e < 0 ? -e : e;
        err_all[n++] = ae;
        err_fam[k][n_fam[k]++] = ae;
        json_object_put(o);
    }
    free(line);
    fclose(f);
    if (rc != 0)
        return rc;
    if (n == 0) {
        fprintf(stderr, "vram: no generation rows in %s\n", path);
        return 2;
    }
    const char *names[N_GEN_FAM];
    for (size_t k = 0; k < N_GEN_FAM; k++)
        names[k] = gen_families[k][0];
    return summary(names, N_GEN_FAM, err_fam, n_fam, err_all, n);
}

int
main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--generate") == 0)
        return generate_accuracy(argv[2]);
    if (argc != 2) {
        fprintf(stderr, "vram: usage: test_plan_accuracy [--generate] MEASUREMENTS_DIR\n");
        return 2;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/training_peaks.jsonl", argv[1]);
    /* The measured runs, one JSON object a line. */
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "vram: cannot read %s\n", path);
        return 2;
    }
    static double err_all[MAX_ROWS], err_fam[3][MAX_ROWS];
    size_t n = 0, n_fam[3] = {0, 0, 0};
    char line[4096];
    printf("| model | precision | optimizer | batch | accum | seq | ckpt | attn | measured MiB "
           "| predicted MiB | error |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    while (fgets(line, sizeof line, f) != NULL && n < MAX_ROWS) {
        struct json_object *o = json_tokener_parse(line);
        if (o == NULL)
            continue;
        const char *model = str_of(o, "model");
        struct plan_model m;
        struct plan_job j = {0};
        struct plan_result r;
        const char *why = "";
        if (!load_config(argv[1], model, &m)) {
            fprintf(stderr, "vram: no usable config for model '%s'\n", model);
            json_object_put(o);
            fclose(f);
            return 2;
        }
        j.batch = (uint64_t)int_of(o, "batch");
        j.seq = (uint64_t)int_of(o, "seq");
        j.accum = (uint64_t)int_of(o, "accum");
        j.data_parallel = 1;
        struct json_object *ck;
        j.checkpointing = json_object_object_get_ex(o, "checkpointing", &ck) &&
                          json_object_get_boolean(ck);
        if (!plan_precision_parse(str_of(o, "precision"), &j.precision) ||
            !plan_optimizer_parse(str_of(o, "optimizer"), &j.optimizer) ||
            !plan_attention_parse(str_of(o, "attn"), &j.attention) ||
            !plan_predict(&m, &j, &r, &why)) {
            fprintf(stderr, "vram: row %zu: cannot predict (%s)\n", n + 1, why);
            json_object_put(o);
            fclose(f);
            return 2;
        }
        if ((int64_t)plan_param_count(&m) != int_of(o, "params")) {
            fprintf(stderr, "vram: row %zu: parameter count %llu, measured model has %lld\n",
                    n + 1, (unsigned long long)plan_param_count(&m),
                    (long long)int_of(o, "params"));
            json_object_put(o);
            fclose(f);
            return 1;
        }
        double meas = (double)int_of(o, "peak_allocated");
        double e = ((double)r.tensor_peak_bytes - meas) / meas;
        printf("| %s | %s | %s | %llu | %llu | %llu | %s | %s | %.0f | %.0f | %+.1f%% |\n", model,
               str_of(o, "precision"), str_of(o, "optimizer"), (unsigned long long)j.batch,
               (unsigned long long)j.accum, (unsigned long long)j.seq,
               j.checkpointing ? "yes" : "no", str_of(o, "attn"), meas / 1048576.0,
               (double)r.tensor_peak_bytes / 1048576.0, e * 100);
        double ae = e < 0 ? -e : e;
        err_all[n++] = ae;
        for (size_t k = 0; k < 3; k++)
            if (strcmp(model, families[k]) == 0)
                err_fam[k][n_fam[k]++] = ae;
        json_object_put(o);
    }
    fclose(f);
    if (n == 0) {
        fprintf(stderr, "vram: no rows in %s\n", path);
        return 2;
    }
    return summary(families, 3, err_fam, n_fam, err_all, n);
}
