/* SPDX-License-Identifier: MIT */
/*
** json.c -- the JSON report of `vram analyze --json`: an_print_json(), one
** object on one line, printed with json-c (docs/ANALYZE.md lists its
** keys). Events are counted from 1 as in the text report; sizes are bytes.
*/
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "analyze/analyze.h"
#include "analyze/analyze_internal.h"
#include "base/error.h"
#include "base/text.h"

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
        if (iters > 0) {
            json_object_object_add(j, "held_by", s[i].held_by != NULL
                                                     ? json_object_new_string(s[i].held_by)
                                                     : NULL);
            json_object_object_add(j, "held_count", an_json_u64(s[i].held_count));
        }
        if (iters > 0)
            json_object_object_add(
                j, "allocated_in",
                s[i].made_at != UINT32_MAX
                    ? json_object_new_string(an_frame_text(t, s[i].made_at, false, head,
                                                           sizeof head))
                    : NULL);
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
json_classes(const struct an_class *c, size_t n)
{
    struct json_object *a = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "lo", an_json_u64(c[i].lo));
        json_object_object_add(o, "hi", an_json_u64(c[i].hi));
        json_object_object_add(o, "count", an_json_u64(c[i].count));
        json_object_object_add(o, "bytes", an_json_u64(c[i].bytes));
        json_object_array_add(a, o);
    }
    return a;
}

static struct json_object *
json_allocs(const struct an_suspect *s, size_t n)
{
    struct json_object *a = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "id", an_json_u64(s[i].id));
        json_object_object_add(o, "size", an_json_u64(s[i].size));
        json_object_object_add(
            o, "born_iteration",
            s[i].born == AN_NO_ITER ? NULL : an_json_u64((uint64_t)s[i].born + 1));
        json_object_object_add(o, "t_us", an_json_u64(s[i].t_us));
        json_object_array_add(a, o);
    }
    return a;
}

static struct json_object *
json_label(const struct trace *t, int32_t label)
{
    if (label < 0 || t == NULL || (uint32_t)label >= t->n_labels)
        return NULL;
    return json_object_new_string(t->labels[label]);
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
        char path[TEXT_SAFE_LEN(1024)]; /* valid UTF-8, as JSON must be */
        json_object_object_add(o, "trace",
                               json_object_new_string(text_safe(t->path, 1024, path,
                                                                sizeof path)));
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
                           json_classes(r->peak_classes, r->n_peak_classes));
    struct json_object *origins = json_object_new_array();
    for (size_t i = 0; i < r->n_peak_origins; i++) {
        struct json_object *g = json_object_new_object();
        json_object_object_add(g, "label", json_label(t, r->peak_origins[i].label));
        json_object_object_add(g, "count", an_json_u64(r->peak_origins[i].count));
        json_object_object_add(g, "bytes", an_json_u64(r->peak_origins[i].bytes));
        json_object_array_add(origins, g);
    }
    json_object_object_add(o, "peak_by_phase", origins);

    json_object_object_add(o, "iterations", an_json_u64(r->n_iters));
    json_object_object_add(o, "iterations_from", json_object_new_string(an_iters_source(r)));
    json_object_object_add(o, "period_events", an_json_u64(r->period_events));
    json_object_object_add(o, "period_match", json_num(r->period_match, 4));
    json_object_object_add(o, "period_from_shape",
                           json_object_new_boolean(r->period_from_shape));
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
    json_object_object_add(o, "suspects", json_allocs(r->suspects, r->n_suspects));
    json_object_object_add(o, "leak_sites",
                           json_sites(t, r->leak_sites, r->n_leak_sites,
                                      r->leak_site_iters > 0 ? r->leak_site_iters : 1));
    json_object_object_add(o, "peak_sites", json_sites(t, r->peak_sites, r->n_peak_sites, 0));

    struct json_object *iters = json_object_new_array();
    for (size_t i = 0; i < r->n_iters; i++) {
        const struct an_iter *it = &r->iters[i];
        struct json_object *j = json_object_new_object();
        json_object_object_add(j, "first_event", json_event(it->first_event));
        json_object_object_add(j, "last_event", json_event(it->last_event));
        json_object_object_add(j, "t_start_us", an_json_u64(it->t_start_us));
        json_object_object_add(j, "t_end_us", an_json_u64(it->t_end_us));
        json_object_object_add(j, "min_live_bytes", an_json_u64(it->min_live));
        json_object_object_add(j, "peak_live_bytes", an_json_u64(it->peak_live));
        json_object_object_add(j, "label", json_label(t, it->label));
        json_object_array_add(iters, j);
    }
    json_object_object_add(o, "iteration_list", iters);

    struct json_object *phases = json_object_new_array();
    for (size_t i = 0; i < r->n_phases; i++) {
        const struct an_phase *p = &r->phases[i];
        struct json_object *j = json_object_new_object();
        json_object_object_add(j, "label", json_label(t, p->label));
        json_object_object_add(j, "first_event", json_event(p->first_event));
        json_object_object_add(j, "last_event", json_event(p->last_event));
        json_object_object_add(j, "peak_bytes", an_json_u64(p->peak_live));
        json_object_array_add(phases, j);
    }
    json_object_object_add(o, "phases", phases);

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
                               json_classes(r->oom_classes, r->n_oom_classes));
        json_object_object_add(j, "largest",
                               json_allocs(r->oom_largest, r->n_oom_largest));
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
