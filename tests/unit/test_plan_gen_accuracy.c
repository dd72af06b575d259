/* SPDX-License-Identifier: MIT */
/*
** test_plan_gen_accuracy.c -- `vram plan --generate`'s model against real
** generation runs: every row of data/measurements/plan_peaks_h200.jsonl
** whose spec is of kind "generate" (Hugging Face generate() with a KV
** cache on an H200, see data/measurements/README.md) is predicted from its
** family's config.json (configs/gpt2.json, qwen2-0.5b.json, llama-300m.json: the
** configurations bench/gpu/plan_measure.py builds) and compared with the
** measured max_memory_allocated. Prints the error table and the median and
** maximum absolute error per family and overall. Nothing is fitted to
** these rows.
**
** Fails (exit 1) when the median absolute error exceeds 5% or any row
** exceeds 15% (the planner's accuracy targets, docs/PLAN.md); exit 2 when
** the data cannot be read.
** Usage: test_plan_gen_accuracy MEASUREMENTS_DIR
*/
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

#define MAX_ROWS 256
#define MEDIAN_LIMIT 0.05
#define MAX_LIMIT 0.15

/* The families measured and the config each was built from. */
static const char *const families[][2] = {{"gpt2", "gpt2"}, {"qwen2", "qwen2-0.5b"},
                                            {"llama", "llama-300m"}};
#define N_FAM (sizeof families / sizeof families[0])

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

/* Load DIR/configs/NAME.json into *M; false on any failure. */
static bool
load_config(const char *dir, const char *name, struct plan_model *m)
{
    char path[1024], err[160], text[65536];
    snprintf(path, sizeof path, "%s/configs/%s.json", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return false;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    if (!plan_config_parse(text, m, err, sizeof err)) {
        fprintf(stderr, "vram: %s: %s\n", path, err);
        return false;
    }
    return true;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "vram: usage: test_plan_gen_accuracy MEASUREMENTS_DIR\n");
        return 2;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/plan_peaks_h200.jsonl", argv[1]);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "vram: cannot read %s\n", path);
        return 2;
    }
    static double err_all[MAX_ROWS], err_fam[N_FAM][MAX_ROWS];
    size_t n = 0, n_fam[N_FAM] = {0};
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
        while (k < N_FAM && strcmp(fam, families[k][0]) != 0)
            k++;
        struct plan_model m;
        struct plan_gen_job g = {0};
        struct plan_gen_result r;
        const char *why = "";
        if (k == N_FAM || !load_config(argv[1], families[k][1], &m)) {
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
    printf("\n| family | runs | median abs. error | max abs. error |\n|---|---|---|---|\n");
    for (size_t k = 0; k < N_FAM; k++) {
        double mx = 0;
        for (size_t i = 0; i < n_fam[k]; i++)
            mx = err_fam[k][i] > mx ? err_fam[k][i] : mx;
        printf("| %s | %zu | %.2f%% | %.2f%% |\n", families[k][0], n_fam[k],
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
