/* SPDX-License-Identifier: MIT */
/*
** json.c -- the JSON report of `vram analyze --json`: an_print_json(), one
** object on one line, printed with json-c (docs/ANALYZE.md lists its
** keys). Events are counted from 1 as in the text report; sizes are bytes.
*/
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analyze/analyze.h"
#include "analyze/analyze_internal.h"
#include "base/error.h"

static const char *
oom_cause_name(enum an_oom_cause c)
{
    switch (c) {
    case AN_OOM_OVER_CAP:
        return "over_cap";
    case AN_OOM_UNDER_CAP:
        return "under_cap";
    case AN_OOM_NEW_HIGH:
        return "new_high";
    case AN_OOM_WITHIN_RESERVED:
        return "within_reserved";
    case AN_OOM_NONE:
        break;
    }
    return "none";
}

/* The frames of site SITE of T, innermost first: [{"kind":"py","file",
** "line","function"} | {"kind":"native","module","offset","symbol"} |
** {"kind":"note","text"}]. */
static struct json_object *
json_stack(const struct trace *t, uint32_t site)
{
    struct json_object *a = json_object_new_array();
    uint32_t n;
    const uint32_t *f = trace_site_frames(t, site, &n);

    for (uint32_t i = 0; i < n; i++) {
        const struct trace_frame *fr = &t->frames[f[i]];
        struct json_object *j = json_object_new_object();
        char off[24];
        switch (fr->kind) {
        case TRACE_FRAME_PY:
            json_object_object_add(j, "kind", json_object_new_string("py"));
            json_object_object_add(j, "file", json_object_new_string(fr->file));
            json_object_object_add(j, "line", an_json_u64(fr->line));
            json_object_object_add(j, "function", json_object_new_string(fr->func));
            break;
        case TRACE_FRAME_NATIVE:
            snprintf(off, sizeof off, "0x%llx", (unsigned long long)fr->offset);
            json_object_object_add(j, "kind", json_object_new_string("native"));
            json_object_object_add(j, "module", json_object_new_string(fr->file));
            json_object_object_add(j, "offset", json_object_new_string(off));
            json_object_object_add(j, "symbol", json_object_new_string(fr->func));
            break;
        default:
            json_object_object_add(j, "kind", json_object_new_string("note"));
            json_object_object_add(j, "text", json_object_new_string(fr->func));
            break;
        }
        json_object_array_add(a, j);
    }
    return a;
}

/* Site groups S (N of them); for the leak, ITERS > 0: the iterations a
** suspect can be born in, with each group's rate over them. */
static struct json_object *
json_sites(const struct trace *t, const struct an_site *s, size_t n, size_t iters)
{
    struct json_object *a = json_object_new_array();
    char head[700];

    for (size_t i = 0; i < n; i++) {
        struct json_object *j = json_object_new_object();
        json_object_object_add(j, "headline",
                               json_object_new_string(an_site_headline(t, &s[i], head,
                                                                       sizeof head)));
        json_object_object_add(j, "site", an_json_u64(s[i].site));
        json_object_object_add(j, "count", an_json_u64(s[i].count));
        json_object_object_add(j, "bytes", an_json_u64(s[i].bytes));
        if (iters > 0) {
            json_object_object_add(
                j, "bytes_per_iteration",
                an_json_u64((uint64_t)llround((double)s[i].bytes / (double)iters)));
            json_object_object_add(j, "iterations", an_json_u64(s[i].iters));
            json_object_object_add(j, "of_iterations", an_json_u64(iters));
            json_object_object_add(j, "first_iteration",
                                   s[i].first_iter == AN_NO_ITER
                                       ? NULL
                                       : an_json_u64((uint64_t)s[i].first_iter + 1));
            json_object_object_add(j, "last_iteration",
                                   s[i].first_iter == AN_NO_ITER
                                       ? NULL
                                       : an_json_u64((uint64_t)s[i].last_iter + 1));
        }
        json_object_object_add(j, "stack", json_stack(t, s[i].site));
        json_object_array_add(a, j);
    }
    return a;
}

const char *
an_iters_source(const struct an_result *r)
{
    if (r->iters_from_marks)
        return "marks";
    if (r->iters_from_floor)
        return "floor";
    if (r->period_events > 0)
        return "period";
    return "none";
}

/* An event's number as the text report and the HTML page write it:
** counted from 1 (event 1 is the trace's first). */
static struct json_object *
json_event(uint64_t index)
{
    return json_object_new_uint64(index + 1);
}

struct json_object *
an_json_u64(uint64_t v)
{
    return json_object_new_uint64(v);
}

/* V as a JSON number printed with DIGITS decimals. */
static struct json_object *
json_num(double v, int digits)
{
    char buf[64];
    if (!isfinite(v))
        v = 0.0;
    snprintf(buf, sizeof buf, "%.*f", digits, v);
    return json_object_new_double_s(v, buf);
}

static struct json_object *
json_label(const struct trace *t, int32_t label)
{
    if (label < 0 || t == NULL || (uint32_t)label >= t->n_labels)
        return NULL;
    return json_object_new_string(t->labels[label]);
}

/* A member of a result's rows as JSON: how it reads, its key, where it is. */
enum field_kind {
    F_U64,   /* uint64_t as it is */
    F_EVENT, /* uint64_t event index, written from 1 (json_event) */
    F_ITER,  /* uint32_t iteration index, written from 1; null for AN_NO_ITER */
    F_LABEL  /* int32_t mark label, written as its text; null before the first */
};
struct json_field {
    const char *key;
    enum field_kind kind;
    size_t offset;
};
#define FIELD(key, kind, type, member) {key, kind, offsetof(type, member)}

static const struct json_field class_fields[] = {
    FIELD("lo", F_U64, struct an_class, lo),
    FIELD("hi", F_U64, struct an_class, hi),
    FIELD("count", F_U64, struct an_class, count),
    FIELD("bytes", F_U64, struct an_class, bytes),
};
static const struct json_field alloc_fields[] = {
    FIELD("id", F_U64, struct an_suspect, id),
    FIELD("size", F_U64, struct an_suspect, size),
    FIELD("born_iteration", F_ITER, struct an_suspect, born),
    FIELD("t_us", F_U64, struct an_suspect, t_us),
};
static const struct json_field origin_fields[] = {
    FIELD("label", F_LABEL, struct an_origin, label),
    FIELD("count", F_U64, struct an_origin, count),
    FIELD("bytes", F_U64, struct an_origin, bytes),
};
static const struct json_field iter_fields[] = {
    FIELD("first_event", F_EVENT, struct an_iter, first_event),
    FIELD("last_event", F_EVENT, struct an_iter, last_event),
    FIELD("t_start_us", F_U64, struct an_iter, t_start_us),
    FIELD("t_end_us", F_U64, struct an_iter, t_end_us),
    FIELD("min_live_bytes", F_U64, struct an_iter, min_live),
    FIELD("peak_live_bytes", F_U64, struct an_iter, peak_live),
    FIELD("label", F_LABEL, struct an_iter, label),
};
static const struct json_field phase_fields[] = {
    FIELD("label", F_LABEL, struct an_phase, label),
    FIELD("first_event", F_EVENT, struct an_phase, first_event),
    FIELD("last_event", F_EVENT, struct an_phase, last_event),
    FIELD("peak_bytes", F_U64, struct an_phase, peak_live),
};
#define FIELDS(table) table, sizeof table / sizeof *table

static struct json_object *
json_field_value(const struct json_field *f, const void *row, const struct trace *t)
{
    const void *at = (const char *)row + f->offset;
    switch (f->kind) {
    case F_EVENT:
        return json_event(*(const uint64_t *)at);
    case F_ITER: {
        uint32_t it = *(const uint32_t *)at;
        return it == AN_NO_ITER ? NULL : an_json_u64((uint64_t)it + 1);
    }
    case F_LABEL:
        return json_label(t, *(const int32_t *)at);
    case F_U64:
    default:
        return an_json_u64(*(const uint64_t *)at);
    }
}

/* The N rows at ROWS (SIZE bytes apart) as an array of objects with the
** members FIELDS (N_FIELDS of them), labels read in T. */
static struct json_object *
json_list(const void *rows, size_t n, size_t size, const struct json_field *fields,
          size_t n_fields, const struct trace *t)
{
    struct json_object *a = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        const char *row = (const char *)rows + i * size;
        struct json_object *o = json_object_new_object();
        for (size_t k = 0; k < n_fields; k++)
            json_object_object_add(o, fields[k].key, json_field_value(&fields[k], row, t));
        json_object_array_add(a, o);
    }
    return a;
}

/* The result as a json-c object (the caller puts it). */
struct json_object *
an_result_json(const struct an_result *r)
{
    const struct trace *t = r->trace;
    struct json_object *o = json_object_new_object();
    if (o == NULL)
        return NULL;
    if (t != NULL) {
        json_object_object_add(o, "trace", json_object_new_string(t->path));
        json_object_object_add(o, "events", an_json_u64(t->n_events));
        json_object_object_add(o, "allocations", an_json_u64(t->n_slots));
        json_object_object_add(o, "marks", an_json_u64(t->n_marks));
    }
    json_object_object_add(o, "peak_bytes", an_json_u64(r->peak_bytes));
    json_object_object_add(o, "peak_time_us", an_json_u64(r->peak_time_us));
    json_object_object_add(
        o, "peak_offset_us",
        an_json_u64(t != NULL && t->n_events > 0 && r->peak_time_us >= t->events[0].t_us
                     ? r->peak_time_us - t->events[0].t_us
                     : 0));
    json_object_object_add(o, "peak_event", json_event(r->peak_event));
    json_object_object_add(
        o, "peak_iteration",
        r->peak_iter == SIZE_MAX ? NULL : an_json_u64((uint64_t)r->peak_iter + 1));
    json_object_object_add(o, "peak_classes",
                           json_list(r->peak_classes, r->n_peak_classes,
                                     sizeof *r->peak_classes, FIELDS(class_fields), t));
    json_object_object_add(o, "peak_by_phase",
                           json_list(r->peak_origins, r->n_peak_origins,
                                     sizeof *r->peak_origins, FIELDS(origin_fields), t));

    json_object_object_add(o, "iterations", an_json_u64(r->n_iters));
    json_object_object_add(o, "iterations_from", json_object_new_string(an_iters_source(r)));
    json_object_object_add(o, "period_events", an_json_u64(r->period_events));
    json_object_object_add(o, "period_match", json_num(r->period_match, 4));
    json_object_object_add(o, "floor_bytes", an_json_u64(r->floor_bytes));
    json_object_object_add(o, "leak", json_object_new_boolean(r->leak));
    json_object_object_add(
        o, "leak_bytes_per_iteration",
        json_object_new_int64((int64_t)llround(r->leak_bytes_per_iter)));
    json_object_object_add(o, "leak_r2", json_num(r->leak_r2, 4));
    json_object_object_add(o, "leak_iterations_fitted", an_json_u64(r->leak_iters_used));
    json_object_object_add(o, "leak_capacity_bytes",
                           r->leak ? an_json_u64(r->leak_capacity) : NULL);
    json_object_object_add(o, "leak_iterations_to_full",
                           r->leak ? an_json_u64((uint64_t)llround(r->leak_iters_to_full))
                                   : NULL);
    json_object_object_add(o, "suspect_bytes", an_json_u64(r->suspect_bytes));
    json_object_object_add(o, "suspects",
                           json_list(r->suspects, r->n_suspects, sizeof *r->suspects,
                                     FIELDS(alloc_fields), t));
    json_object_object_add(o, "leak_sites",
                           json_sites(t, r->leak_sites, r->n_leak_sites,
                                      r->leak_site_iters > 0 ? r->leak_site_iters : 1));
    json_object_object_add(o, "peak_sites", json_sites(t, r->peak_sites, r->n_peak_sites, 0));

    json_object_object_add(o, "iteration_list",
                           json_list(r->iters, r->n_iters, sizeof *r->iters,
                                     FIELDS(iter_fields), t));
    json_object_object_add(o, "phases",
                           json_list(r->phases, r->n_phases, sizeof *r->phases,
                                     FIELDS(phase_fields), t));

    json_object_object_add(o, "strategy",
                           json_object_new_string(vram_strategy_name(r->strategy)));
    json_object_object_add(o, "peak_reserved_bytes", an_json_u64(r->peak_reserved));
    json_object_object_add(o, "fragmentation", json_num(r->fragmentation, 4));
    json_object_object_add(o, "replay_ooms", an_json_u64(r->replay_ooms));
    struct json_object *devs = json_object_new_array();
    for (int d = 0; d < r->n_devices; d++)
        json_object_array_add(devs, an_json_u64(r->device_peaks[d]));
    json_object_object_add(o, "device_peak_bytes", devs);

    json_object_object_add(o, "ends_in_oom", json_object_new_boolean(r->ends_in_oom));
    if (r->ends_in_oom) {
        struct json_object *j = json_object_new_object();
        json_object_object_add(j, "request_bytes", an_json_u64(r->oom_request));
        json_object_object_add(j, "live_bytes", an_json_u64(r->oom_live));
        json_object_object_add(j, "time_us", an_json_u64(r->oom_time_us));
        json_object_object_add(j, "event", json_event(r->oom_event));
        json_object_object_add(j, "device", json_object_new_int(r->oom_device));
        json_object_object_add(j, "cap_bytes",
                               r->oom_cap > 0 ? an_json_u64(r->oom_cap) : NULL);
        json_object_object_add(j, "reserved_bytes", an_json_u64(r->oom_reserved));
        json_object_object_add(j, "cause",
                               json_object_new_string(oom_cause_name(r->oom_cause)));
        json_object_object_add(j, "classes",
                               json_list(r->oom_classes, r->n_oom_classes,
                                         sizeof *r->oom_classes, FIELDS(class_fields), t));
        json_object_object_add(j, "largest",
                               json_list(r->oom_largest, r->n_oom_largest,
                                         sizeof *r->oom_largest, FIELDS(alloc_fields), t));
        json_object_object_add(o, "oom", j);
    } else {
        json_object_object_add(o, "oom", NULL);
    }

    struct json_object *tl = json_object_new_object();
    struct json_object *ts = json_object_new_array(), *lv = json_object_new_array(),
                       *rs = json_object_new_array();
    for (size_t i = 0; i < r->n_points; i++) {
        json_object_array_add(ts, an_json_u64(r->points[i].t_us));
        json_object_array_add(lv, an_json_u64(r->points[i].live));
        json_object_array_add(rs, an_json_u64(r->points[i].reserved));
    }
    json_object_object_add(tl, "t_us", ts);
    json_object_object_add(tl, "live_bytes", lv);
    json_object_object_add(tl, "reserved_bytes", rs);
    json_object_object_add(o, "timeline", tl);
    return o;
}

int
an_put_json(FILE *out, struct json_object *o)
{
    if (o == NULL)
        return (int)no_memory();
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    int rc = VRAM_OK;
    if (text == NULL)
        rc = (int)no_memory();
    else if (fputs(text, out) == EOF || fputc('\n', out) == EOF || fflush(out) != 0)
        rc = (int)error_set(VRAM_E_IO, "writing the JSON report failed");
    json_object_put(o);
    return rc;
}

int
an_print_json(FILE *out, const struct an_result *r)
{
    if (out == NULL || r == NULL)
        return (int)error_set(VRAM_E_INVALID, "an_print_json: NULL argument");
    return an_put_json(out, an_result_json(r));
}
