/* SPDX-License-Identifier: MIT */
/*
** compare.c -- `vram analyze --compare A B`: two results side by side
** (an_compare()): peak live and reserved, iterations, the leak verdict,
** phase peaks matched by mark label and live bytes at the peak matched by
** size class; printed as text or as JSON (both results and the deltas).
*/
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze.h"
#include "analyze/analyze_internal.h"
#include "base/error.h"
#include "base/text.h"

/* an_compare's rows follow it in one block. */
_Static_assert(_Alignof(struct an_cmp_row) <= _Alignof(struct an_compare) &&
                   sizeof(struct an_compare) % _Alignof(struct an_cmp_row) == 0,
               "rows after struct an_compare are aligned");

/* Phase rows: one per distinct label of A then of B, largest peak each. */
static void
add_phase_rows(struct an_cmp_row *rows, size_t *n, const struct an_result *r, bool is_a)
{
    const struct trace *t = r->trace;
    for (size_t i = 0; i < r->n_phases; i++) {
        int32_t label = r->phases[i].label;
        const char *text = label >= 0 ? label_text(t, label) : NULL;
        size_t k = 0;
        for (; k < *n; k++) {
            bool same = (text == NULL && rows[k].label == NULL) ||
                        (text != NULL && rows[k].label != NULL &&
                         strcmp(text, rows[k].label) == 0);
            if (same)
                break;
        }
        if (k == *n) {
            memset(&rows[k], 0, sizeof rows[k]);
            rows[k].label = text;
            (*n)++;
        }
        uint64_t *v = is_a ? &rows[k].a : &rows[k].b;
        if (r->phases[i].peak_live > *v)
            *v = r->phases[i].peak_live;
        if (is_a)
            rows[k].in_a = true;
        else
            rows[k].in_b = true;
    }
}

static int
cmp_row_lo_desc(const void *x, const void *y)
{
    const struct an_cmp_row *a = x, *b = y;
    return (a->lo < b->lo) - (a->lo > b->lo);
}

vram_status
an_compare(const struct an_result *a, const struct an_result *b, struct an_compare **out)
{
    if (a == NULL || b == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "an_compare: NULL argument");
    /* One block: the comparison, then room for every phase and class row. */
    size_t max_phases = a->n_phases + b->n_phases;
    size_t max_classes = a->n_peak_classes + b->n_peak_classes;
    struct an_compare *c = calloc(1, sizeof *c + (max_phases + max_classes) *
                                                     sizeof(struct an_cmp_row));
    if (c == NULL)
        return no_memory();
    c->phases = (struct an_cmp_row *)(void *)(c + 1);
    c->classes = c->phases + max_phases;
    c->a = a;
    c->b = b;
    add_phase_rows(c->phases, &c->n_phases, a, true);
    add_phase_rows(c->phases, &c->n_phases, b, false);

    for (int side = 0; side < 2; side++) {
        const struct an_result *r = side == 0 ? a : b;
        for (size_t i = 0; i < r->n_peak_classes; i++) {
            const struct an_class *cl = &r->peak_classes[i];
            size_t k = 0;
            while (k < c->n_classes && c->classes[k].lo != cl->lo)
                k++;
            if (k == c->n_classes) {
                c->classes[k].lo = cl->lo;
                c->classes[k].hi = cl->hi;
                c->n_classes++;
            }
            if (side == 0) {
                c->classes[k].a = cl->bytes;
                c->classes[k].in_a = true;
            } else {
                c->classes[k].b = cl->bytes;
                c->classes[k].in_b = true;
            }
        }
    }
    qsort(c->classes, c->n_classes, sizeof *c->classes, cmp_row_lo_desc);
    *out = c;
    return VRAM_OK;
}

void
an_compare_free(struct an_compare *c)
{
    free(c); /* its rows with it */
}

/* "+1.50 GiB (+12.3%)" or "0 B" into BUF. */
static const char *
fmt_change(uint64_t a, uint64_t b, char *buf, size_t len)
{
    char d[32];
    if (a == b) {
        snprintf(buf, len, "0 B");
        return buf;
    }
    an_fmt_signed((double)b - (double)a, d, sizeof d);
    if (a > 0)
        snprintf(buf, len, "%s (%+.1f%%)", d,
                 100.0 * ((double)b - (double)a) / (double)a);
    else
        snprintf(buf, len, "%s (new)", d);
    return buf;
}

static void
cmp_line(FILE *out, const char *name, const struct an_cmp_row *row)
{
    char x[32], y[32], z[64];
    fprintf(out, "  %-32s %14s %14s  %s\n", name, row->in_a ? fmt_size(row->a, x, sizeof x) : "-",
            row->in_b ? fmt_size(row->b, y, sizeof y) : "-",
            fmt_change(row->a, row->b, z, sizeof z));
}

const char *
an_cmp_class_name(const struct an_cmp_row *row, char *buf, size_t len)
{
    char lo[32], hi[32];
    fmt_size(row->lo, lo, sizeof lo);
    if (row->hi == UINT64_MAX)
        snprintf(hi, sizeof hi, "...");
    else
        fmt_size(row->hi, hi, sizeof hi);
    snprintf(buf, len, "[%s, %s)", lo, hi);
    return buf;
}

const char *
an_cmp_row_name(const struct an_cmp_row *row, char *buf, size_t len)
{
    if (row->hi != 0) /* a size class: [0, 1) is the lowest */
        return an_cmp_class_name(row, buf, len);
    return row->label != NULL ? row->label : "(before the first mark)";
}

void
an_cmp_peak_rows(const struct an_compare *c, struct an_cmp_row rows[AN_CMP_PEAK_ROWS],
                 char *name, size_t len)
{
    const struct an_result *a = c->a, *b = c->b;
    snprintf(name, len, "peak reserved (%s)", vram_strategy_name(a->strategy));
    rows[0] = (struct an_cmp_row){.label = "peak live", .a = a->peak_bytes, .b = b->peak_bytes,
                                  .in_a = true, .in_b = true};
    rows[1] = (struct an_cmp_row){.label = name, .a = a->peak_reserved, .b = b->peak_reserved,
                                  .in_a = true, .in_b = true};
    rows[2] = (struct an_cmp_row){
        .label = "least live per iteration, last",
        .a = a->n_iters > 0 ? a->iters[a->n_iters - 1].min_live : 0,
        .b = b->n_iters > 0 ? b->iters[b->n_iters - 1].min_live : 0,
        .in_a = a->n_iters > 0,
        .in_b = b->n_iters > 0};
}

/* A titled table of N phase or size-class ROWS; nothing when N is 0. */
static void
print_rows(FILE *out, const char *title, const struct an_cmp_row *rows, size_t n)
{
    char name[80];
    if (n > 0)
        fprintf(out, "\n%s:\n", title);
    for (size_t i = 0; i < n; i++)
        cmp_line(out, an_cmp_row_name(&rows[i], name, sizeof name), &rows[i]);
}

void
an_print_compare_text(FILE *out, const struct an_compare *c)
{
    if (out == NULL || c == NULL)
        return;
    const struct an_result *a = c->a, *b = c->b;
    char name[80], pa[TEXT_SAFE_LEN(1024)], pb[TEXT_SAFE_LEN(1024)];
    fprintf(out, "A  %s\nB  %s\n\n", /* anybody's file names: made safe */
            a->trace != NULL ? text_safe(a->trace->path, 1024, pa, sizeof pa) : "?",
            b->trace != NULL ? text_safe(b->trace->path, 1024, pb, sizeof pb) : "?");
    fprintf(out, "  %-32s %14s %14s  %s\n", "", "A", "B", "change (B - A)");
    struct an_cmp_row peaks[AN_CMP_PEAK_ROWS];
    an_cmp_peak_rows(c, peaks, name, sizeof name);
    for (size_t i = 0; i < AN_CMP_PEAK_ROWS; i++)
        cmp_line(out, peaks[i].label, &peaks[i]);
    fprintf(out, "  %-32s %14zu %14zu\n", "iterations", a->n_iters, b->n_iters);
    fprintf(out, "  %-32s %14s %14s\n", "leak", a->leak ? "yes" : "no", b->leak ? "yes" : "no");
    print_rows(out, "phase peaks (by mark label; the largest of each)", c->phases, c->n_phases);
    print_rows(out, "live at the peak by size class", c->classes, c->n_classes);
}

/* {"a": A, "b": B, "delta": B - A} for one quantity. */
static struct json_object *
json_pair(uint64_t a, uint64_t b)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "a", an_json_u64(a));
    json_object_object_add(o, "b", an_json_u64(b));
    json_object_object_add(o, "delta", json_object_new_int64((int64_t)(b - a)));
    return o;
}

static struct json_object *
json_rows(const struct an_cmp_row *rows, size_t n, bool classes)
{
    struct json_object *arr = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        const struct an_cmp_row *row = &rows[i];
        struct json_object *o = json_object_new_object();
        if (classes) {
            json_object_object_add(o, "lo", an_json_u64(row->lo));
            json_object_object_add(o, "hi", an_json_u64(row->hi));
        } else {
            json_object_object_add(o, "label",
                                   row->label != NULL ? json_object_new_string(row->label)
                                                      : NULL);
        }
        json_object_object_add(o, "a", row->in_a ? an_json_u64(row->a) : NULL);
        json_object_object_add(o, "b", row->in_b ? an_json_u64(row->b) : NULL);
        json_object_object_add(o, "delta",
                               json_object_new_int64((int64_t)(row->b - row->a)));
        json_object_array_add(arr, o);
    }
    return arr;
}

int
an_print_compare_json(FILE *out, const struct an_compare *c)
{
    if (out == NULL || c == NULL)
        return (int)error_set(VRAM_E_INVALID, "an_print_compare_json: NULL argument");
    struct json_object *o = json_object_new_object();
    if (o == NULL)
        return (int)no_memory();
    json_object_object_add(o, "a", an_result_json(c->a));
    json_object_object_add(o, "b", an_result_json(c->b));
    struct json_object *d = json_object_new_object();
    json_object_object_add(d, "peak_bytes",
                           json_pair(c->a->peak_bytes, c->b->peak_bytes));
    json_object_object_add(d, "peak_reserved_bytes",
                           json_pair(c->a->peak_reserved, c->b->peak_reserved));
    json_object_object_add(d, "iterations", json_pair(c->a->n_iters, c->b->n_iters));
    json_object_object_add(o, "delta", d);
    json_object_object_add(o, "phases", json_rows(c->phases, c->n_phases, false));
    json_object_object_add(o, "classes", json_rows(c->classes, c->n_classes, true));
    return an_put_json(out, o);
}
