/* SPDX-License-Identifier: MIT */
/*
** analyze.c -- what a trace says about a program's memory: analyze_trace()
** and an_result_free() (src/analyze/analyze.h is the contract,
** docs/ANALYZE.md explains every rule to users).
**
** The steps, each a section below:
**   1. one pass over the events: live bytes after every event, the peak,
**      per-device peaks, the final OOM;
**   2. phases from marks;
**   3. iterations: from marks here; else, in period.c, the period of the
**      event stream or the points where live bytes come back to their
**      floor;
**   4. the leak verdict: least squares over the per-iteration minima;
**   5. what was live at the peak and at the final OOM;
**   6. a replay on the simulated device under the strategy, for reserved
**      bytes over time and fragmentation.
**
** The reports are text.c, json.c and html.c; compare.c puts two results
** side by side. Not part of libvram: the reports print JSON with json-c,
** which the library does not link (CMake target vram_analyze, used by the
** vram tool and tests).
*/
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze.h"
#include "analyze/analyze_internal.h"
#include "base/error.h"
#include "base/size.h"
#include "trace/trace_replay.h"

/* Size classes: [0, 1) and [2^k, 2^(k+1)) for k = 0..63. */
#define N_CLASSES 65

/* ------------------------------------------------------------------ */
/* Small helpers                                                        */
/* ------------------------------------------------------------------ */

static inline bool
is_alloc(const struct trace_event *ev)
{
    return ev->op == TRACE_ALLOC;
}

static inline bool
is_free(const struct trace_event *ev)
{
    return ev->op == TRACE_FREE;
}

/* The class index of SIZE and its bounds. */
static unsigned
class_of(uint64_t size)
{
    return size == 0 ? 0 : 64u - (unsigned)__builtin_clzll(size);
}

static void
class_bounds(unsigned c, uint64_t *lo, uint64_t *hi)
{
    if (c == 0) {
        *lo = 0;
        *hi = 1;
        return;
    }
    *lo = 1ULL << (c - 1);
    *hi = c == 64 ? UINT64_MAX : 1ULL << c;
}

/* Largest bytes first, then the larger class. */
static int
cmp_class_bytes(const void *a, const void *b)
{
    const struct an_class *x = a, *y = b;
    return order_u64_2(y->bytes, x->bytes, y->lo, x->lo);
}

/* Largest size first, then the older id. */
static int
cmp_suspect(const void *a, const void *b)
{
    const struct an_suspect *x = a, *y = b;
    return order_u64_2(y->size, x->size, x->id, y->id);
}

/* Largest bytes first, then the earlier label. */
static int
cmp_origin(const void *a, const void *b)
{
    const struct an_origin *x = a, *y = b;
    int c = order_u64(y->bytes, x->bytes);
    return c != 0 ? c : (x->label > y->label) - (x->label < y->label);
}

/* ------------------------------------------------------------------ */
/* 1. Live bytes, the peak, the final OOM                               */
/* ------------------------------------------------------------------ */

static vram_status
live_pass(struct work *w, struct an_result *r)
{
    const struct trace *t = w->t;
    int n_dev = t->n_devices > 0 ? t->n_devices : 1;
    uint64_t *dev_cur = calloc((size_t)n_dev, sizeof *dev_cur);
    r->device_peaks = calloc((size_t)n_dev, sizeof *r->device_peaks);
    if (dev_cur == NULL || r->device_peaks == NULL) {
        free(dev_cur);
        return no_memory();
    }
    r->n_devices = n_dev;

    uint64_t cur = 0, last_alloc = UINT64_MAX;
    for (uint64_t i = 0; i < w->n; i++) {
        const struct trace_event *ev = &t->events[i];
        int d = ev->device >= 0 && ev->device < n_dev ? ev->device : 0;
        if (is_alloc(ev)) {
            cur += ev->size;
            dev_cur[d] += ev->size;
            if (dev_cur[d] > r->device_peaks[d])
                r->device_peaks[d] = dev_cur[d];
            if (ev->slot < t->n_slots)
                w->born_event[ev->slot] = i;
            last_alloc = i;
        } else if (is_free(ev)) {
            cur -= ev->size;
            dev_cur[d] -= ev->size;
        } else if (ev->op == TRACE_OOM) {
            last_alloc = i;
            r->oom_live = dev_cur[d]; /* kept if this OOM is the last */
        }
        w->live[i] = cur;
        if (cur > r->peak_bytes) {
            r->peak_bytes = cur;
            r->peak_event = i;
            r->peak_time_us = ev->t_us;
        }
    }
    if (r->peak_bytes == 0 && w->n > 0)
        r->peak_time_us = t->events[0].t_us;
    if (last_alloc != UINT64_MAX && t->events[last_alloc].op == TRACE_OOM) {
        r->ends_in_oom = true;
        r->oom_event = last_alloc;
        r->oom_time_us = t->events[last_alloc].t_us;
        r->oom_request = t->events[last_alloc].size;
        r->oom_device = t->events[last_alloc].device;
    } else {
        r->oom_live = 0;
    }
    free(dev_cur);
    return VRAM_OK;
}

/* ------------------------------------------------------------------ */
/* 2. Phases from marks                                                 */
/* ------------------------------------------------------------------ */

/* The phases grouped by label once, in one pass (label -1 at index 0 of
** the map), for the text and HTML reports. */
static vram_status
group_phases(const struct trace *t, struct an_result *r)
{
    size_t *slot = malloc(((size_t)t->n_labels + 1) * sizeof *slot);
    r->phase_groups = calloc(r->n_phases > 0 ? r->n_phases : 1, sizeof *r->phase_groups);
    if (slot == NULL || r->phase_groups == NULL) {
        free(slot);
        return no_memory();
    }
    for (size_t i = 0; i <= t->n_labels; i++)
        slot[i] = SIZE_MAX;
    size_t n = 0;
    for (size_t i = 0; i < r->n_phases; i++) {
        const struct an_phase *ph = &r->phases[i];
        size_t *at = &slot[ph->label + 1];
        if (*at == SIZE_MAX) {
            *at = n++;
            r->phase_groups[*at].label = ph->label;
        }
        struct an_phase_group *g = &r->phase_groups[*at];
        g->count++;
        if (ph->peak_live > g->peak_live)
            g->peak_live = ph->peak_live;
    }
    r->n_phase_groups = n;
    free(slot);
    return VRAM_OK;
}

static vram_status
phases_from_marks(struct work *w, struct an_result *r)
{
    const struct trace *t = w->t;
    size_t n_marks = 0;
    for (uint64_t i = 0; i < w->n; i++)
        n_marks += t->events[i].op == TRACE_MARK;
    if (n_marks == 0)
        return VRAM_OK;
    bool prologue = t->events[0].op != TRACE_MARK;
    r->phases = calloc(n_marks + 1, sizeof *r->phases);
    if (r->phases == NULL)
        return no_memory();
    size_t k = 0;
    if (prologue)
        r->phases[k++] = (struct an_phase){.label = -1, .first_event = 0};
    for (uint64_t i = 0; i < w->n; i++) {
        const struct trace_event *ev = &t->events[i];
        if (ev->op != TRACE_MARK)
            continue;
        if (k > 0)
            r->phases[k - 1].last_event = i - 1;
        int32_t label = ev->label < t->n_labels ? (int32_t)ev->label : -1;
        r->phases[k++] = (struct an_phase){.label = label, .first_event = i};
    }
    r->phases[k - 1].last_event = w->n - 1;
    r->n_phases = k;
    for (size_t p = 0; p < k; p++) {
        uint64_t peak = 0;
        for (uint64_t i = r->phases[p].first_event; i <= r->phases[p].last_event; i++)
            if (w->live[i] > peak)
                peak = w->live[i];
        r->phases[p].peak_live = peak;
    }
    return group_phases(t, r);
}

/* ------------------------------------------------------------------ */
/* 3. Iterations (from marks; without them, period.c)                   */
/* ------------------------------------------------------------------ */

/*
** Build r->iters from CUTS: the index of the last event of every
** iteration but the last, ascending. The last iteration runs to the end.
** START is the first event of the first iteration (marks: the first
** mark; otherwise 0).
*/
vram_status
an_iters_from_cuts(struct work *w, struct an_result *r, uint64_t start,
                   const uint64_t *cuts, size_t n_cuts)
{
    if (w->n == 0 || start >= w->n)
        return VRAM_OK;
    r->iters = calloc(n_cuts + 1, sizeof *r->iters);
    if (r->iters == NULL)
        return no_memory();
    uint64_t first = start;
    size_t k = 0;
    for (size_t c = 0; c <= n_cuts; c++) {
        uint64_t last = c < n_cuts ? cuts[c] : w->n - 1;
        if (last < first)
            continue;
        struct an_iter *it = &r->iters[k++];
        it->first_event = first;
        it->last_event = last;
        it->t_start_us = w->t->events[first].t_us;
        it->t_end_us = w->t->events[last].t_us;
        it->label = -1;
        it->min_live = UINT64_MAX;
        for (uint64_t i = first; i <= last; i++) {
            if (w->live[i] < it->min_live)
                it->min_live = w->live[i];
            if (w->live[i] > it->peak_live)
                it->peak_live = w->live[i];
        }
        first = last + 1;
    }
    r->n_iters = k;
    return VRAM_OK;
}

/*
** Marks: each mark starts an iteration, unless the first mark's label
** comes back, in which case only marks with that label do (so that marks
** "forward", "backward", "optimizer" repeated every step give steps).
** Needs two starts; returns false (and changes nothing) otherwise.
*/
vram_status
an_iters_by_marks(struct work *w, struct an_result *r, bool *done)
{
    const struct trace *t = w->t;
    uint64_t first_mark = UINT64_MAX, same = 0, all = 0;
    uint32_t first_label = TRACE_NO_LABEL;
    for (uint64_t i = 0; i < w->n; i++) {
        const struct trace_event *ev = &t->events[i];
        if (ev->op != TRACE_MARK)
            continue;
        if (first_mark == UINT64_MAX) {
            first_mark = i;
            first_label = ev->label;
        }
        all++;
        same += ev->label == first_label;
    }
    *done = false;
    if (all < 2)
        return VRAM_OK;
    bool by_label = same >= 2;
    struct u64_list cuts = {0};
    for (uint64_t i = first_mark + 1; i < w->n; i++) {
        const struct trace_event *ev = &t->events[i];
        if (ev->op == TRACE_MARK && (!by_label || ev->label == first_label) &&
            !list_push(&cuts, i - 1)) {
            free(cuts.v);
            return no_memory();
        }
    }
    vram_status s = an_iters_from_cuts(w, r, first_mark, cuts.v, cuts.n);
    free(cuts.v);
    if (s != VRAM_OK)
        return s;
    for (size_t k = 0; k < r->n_iters; k++) {
        const struct trace_event *ev = &t->events[r->iters[k].first_event];
        if (ev->op == TRACE_MARK && ev->label < t->n_labels)
            r->iters[k].label = (int32_t)ev->label;
    }
    r->iters_from_marks = true;
    *done = true;
    return VRAM_OK;
}

/* The last of the N spans at BASE (STRIDE bytes apart, in event order)
** whose first event, the uint64_t at OFFSET in each, is I or before it:
** the one holding event I (binary search); SIZE_MAX before the first. */
static size_t
span_of(const void *base, size_t n, size_t stride, size_t offset, uint64_t i)
{
    const char *first = (const char *)base + offset;
#define FIRST_EVENT(k) (*(const uint64_t *)(const void *)(first + (k) * stride))
    if (n == 0 || i < FIRST_EVENT(0))
        return SIZE_MAX;
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (FIRST_EVENT(mid) <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
#undef FIRST_EVENT
}

/* The iteration holding event I; AN_NO_ITER before the first. */
static uint32_t
iter_of(const struct an_result *r, uint64_t i)
{
    size_t k = span_of(r->iters, r->n_iters, sizeof *r->iters,
                       offsetof(struct an_iter, first_event), i);
    return k == SIZE_MAX ? AN_NO_ITER : (uint32_t)k;
}

/* The label of the phase holding event I; -1 before the first mark. */
static int32_t
phase_label_of(const struct an_result *r, uint64_t i)
{
    size_t k = span_of(r->phases, r->n_phases, sizeof *r->phases,
                       offsetof(struct an_phase, first_event), i);
    return k == SIZE_MAX ? -1 : r->phases[k].label;
}

/* ------------------------------------------------------------------ */
/* 4. The leak verdict                                                  */
/* ------------------------------------------------------------------ */

/* Points the robust slope is taken over at most: beyond, every n-th
** iteration (the pairs grow as the square). */
#define ROBUST_POINTS 512

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
median_of_doubles(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/*
** The line through the minima of iterations FIRST .. FIRST+K-1, robust to
** a few iterations off it: the slope is the median of the slopes of every
** pair of points (Theil and Sen), the intercept the median of what is
** left; R^2 is the least-squares fit's over the points within three
** scaled median absolute deviations of that line (its inliers), and 0
** when fewer than three quarters are. A one-time jump (the optimizer's
** state made at the first step, a workspace made on another thread) and a
** teardown at the end are each one point off a steady rise; least squares
** over every point let them decide the slope. False: out of host memory.
*/
static bool
robust_line(const struct an_result *r, size_t first, size_t k, double *slope, double *r2)
{
    size_t step = k > ROBUST_POINTS ? (k + ROBUST_POINTS - 1) / ROBUST_POINTS : 1;
    size_t n = (k + step - 1) / step;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    double *pairs = malloc((n * (n - 1) / 2 + n) * sizeof *pairs);
    if (x == NULL || y == NULL || pairs == NULL) {
        free(x);
        free(y);
        free(pairs);
        return false;
    }
    for (size_t j = 0; j < n; j++) {
        x[j] = (double)(first + j * step);
        y[j] = (double)r->iters[first + j * step].min_live;
    }
    size_t m = 0;
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++)
            pairs[m++] = (y[b] - y[a]) / (x[b] - x[a]);
    double s = m > 0 ? median_of_doubles(pairs, m) : 0.0;
    for (size_t j = 0; j < n; j++)
        pairs[j] = y[j] - s * x[j];
    double c = median_of_doubles(pairs, n);
    for (size_t j = 0; j < n; j++)
        pairs[j] = fabs(y[j] - (c + s * x[j]));
    double tol = 3.0 * 1.4826 * median_of_doubles(pairs, n);
    double mx = 0, my = 0;
    size_t in = 0;
    for (size_t j = 0; j < n; j++) {
        if (fabs(y[j] - (c + s * x[j])) > tol)
            continue;
        mx += x[j];
        my += y[j];
        in++;
    }
    double sxx = 0, sxy = 0, syy = 0;
    if (in > 0) {
        mx /= (double)in;
        my /= (double)in;
    }
    for (size_t j = 0; j < n; j++) {
        if (fabs(y[j] - (c + s * x[j])) > tol)
            continue;
        sxx += (x[j] - mx) * (x[j] - mx);
        sxy += (x[j] - mx) * (y[j] - my);
        syy += (y[j] - my) * (y[j] - my);
    }
    *slope = s;
    *r2 = 4 * in >= 3 * n && sxx > 0 && syy > 0 ? (sxy * sxy) / (sxx * syy) : 0.0;
    free(x);
    free(y);
    free(pairs);
    return true;
}

/*
** The leak rule, all in this function (docs/ANALYZE.md, "The leak rule").
** A robust line (robust_line) over the per-iteration minima, leaving out the first
** iteration (a warm-up: weights, optimizer state, workspaces) and a last
** one the recording cut off: detected iterations know (w->last_partial);
** from marks, a last one shorter than half the median is taken as cut.
** The fit covers iterations 1 .. leak_iters_used (indexes).
**
** A leak is a sustained rise, whatever its rate: the line fits (R^2), the
** whole rise is at least LEAK_RISE_MIN, and the rise lasts: the fitted
** minima, cut into LEAK_SEGMENTS consecutive segments, have medians that
** climb from each segment to the next by at least LEAK_SEGMENT_SHARE of
** what the slope predicts. A bounded cache filling up and then flat, and a
** one-time jump (optimizer state, a loss scaler), leave at least one pair
** of neighbouring segments level; batches of varying length move single
** minima, which medians and R^2 ignore. There is no floor on the rate
** itself: over K fitted iterations the least rate found is
** LEAK_RISE_MIN / (K - 1).
*/
static void
leak_fit(const struct work *w, struct an_result *r)
{
    r->leak = false;
    r->leak_bytes_per_iter = 0.0;
    r->leak_r2 = 0.0;
    r->leak_iters_used = 0;
    r->leak_iters_to_full = 0.0;
    r->leak_capacity = 0;
    if (r->n_iters < 3)
        return;
    size_t first = 1, last = r->n_iters - 1;
    uint64_t *len = r->iters_from_marks ? malloc(r->n_iters * sizeof *len) : NULL;
    if (w->last_partial)
        last--;
    if (len != NULL) {
        size_t k = 0;
        for (size_t i = first; i <= last; i++)
            len[k++] = r->iters[i].last_event - r->iters[i].first_event + 1;
        qsort(len, k, sizeof *len, cmp_u64);
        uint64_t median = len[k / 2];
        uint64_t last_len = r->iters[last].last_event - r->iters[last].first_event + 1;
        if (last > first && 2 * last_len < median)
            last--;
        free(len);
    }
    /* A program's teardown inside its last marked iteration (an
    ** interpreter freeing what the program kept, after the last mark)
    ** takes it below any quiet point the steps had: not a step's. */
    if (r->iters_from_marks && last == r->n_iters - 1 && last > first &&
        r->iters[last].min_live < r->iters[last - 1].min_live)
        last--;
    size_t k = last - first + 1;
    if (k < 2)
        return;
    double slope = 0.0, r2 = 0.0;
    if (!robust_line(r, first, k, &slope, &r2))
        return; /* no verdict without the memory to make it */
    r->leak_bytes_per_iter = slope;
    r->leak_r2 = r2;
    r->leak_iters_used = k;
    if (k < LEAK_ITERS_MIN || slope <= 0 || r2 <= LEAK_R2_MIN ||
        slope * (double)(k - 1) < (double)LEAK_RISE_MIN)
        return;

    /* The rise lasts: segment medians climb from each segment to the
     * next. Quarters, thirds below 2 x 4 iterations (at least one
     * iteration a segment). */
    size_t segs = k >= 2 * LEAK_SEGMENTS ? LEAK_SEGMENTS : 3;
    uint64_t buf[64];
    uint64_t *vals = k <= 64 ? buf : malloc(k * sizeof *vals);
    if (vals == NULL)
        return; /* no verdict without the memory to check it */
    double prev_median = 0, prev_center = 0;
    bool lasts = true;
    for (size_t s = 0; s < segs && lasts; s++) {
        size_t lo = first + s * k / segs, hi = first + (s + 1) * k / segs; /* [lo, hi) */
        size_t m = hi - lo;
        for (size_t i = lo; i < hi; i++)
            vals[i - lo] = r->iters[i].min_live;
        qsort(vals, m, sizeof *vals, cmp_u64);
        double median = m % 2 ? (double)vals[m / 2]
                              : 0.5 * ((double)vals[m / 2 - 1] + (double)vals[m / 2]);
        double center = 0.5 * (double)(lo + hi - 1);
        double predicted = slope * (center - prev_center);
        if (s > 0 && median - prev_median < LEAK_SEGMENT_SHARE * predicted)
            lasts = false;
        prev_median = median;
        prev_center = center;
    }
    if (vals != buf)
        free(vals);
    r->leak = lasts;
    if (!r->leak)
        return;

    /* The projection: iterations until the peak, growing at the slope,
     * reaches the cap, else the device (given, else the simulated one). */
    r->leak_capacity = r->oom_cap > 0 ? r->oom_cap : w->device_memory;
    r->leak_capacity_is_cap = r->oom_cap > 0;
    if (r->leak_capacity > r->peak_bytes)
        r->leak_iters_to_full = (double)(r->leak_capacity - r->peak_bytes) / slope;
}

/* A suspect with the number and bytes of all suspects of its size. */
struct grouped_suspect {
    struct an_suspect s;
    uint64_t group_count, group_bytes;
};

static int
cmp_grouped_suspect(const void *a, const void *b)
{
    const struct grouped_suspect *x = a, *y = b;
    int c = order_u64_2(y->group_count, x->group_count, y->group_bytes, x->group_bytes);
    return c != 0 ? c : cmp_suspect(&x->s, &y->s);
}

/*
** Suspects' order: by how many suspects share their size, most first
** (then those bytes, then the size, larger first, then the id), so that
** the leak's own tensor leads, the one kept every iteration, and not a
** larger allocation kept once: on the H200, PyTorch's 64 MiB cuBLAS
** workspace, made once on the backward thread, held more bytes than 37
** kept 250 KB logits. Left by size alone without the memory to group them.
*/
static void
order_suspects(struct an_suspect *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_suspect); /* by size: a size's suspects together */
    struct grouped_suspect *g = malloc((n > 0 ? n : 1) * sizeof *g);
    if (g == NULL)
        return;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        uint64_t bytes = 0;
        while (j < n && v[j].size == v[i].size)
            bytes += v[j++].size;
        uint64_t count = j - i;
        for (; i < j; i++)
            g[i] = (struct grouped_suspect){.s = v[i], .group_count = count, .group_bytes = bytes};
    }
    qsort(g, n, sizeof *g, cmp_grouped_suspect);
    for (size_t i = 0; i < n; i++)
        v[i] = g[i].s;
    free(g);
}

/* w->alive := the slots live after event UPTO. */
static void
live_set_at(struct work *w, uint64_t upto)
{
    const struct trace *t = w->t;
    memset(w->alive, 0, (t->n_slots > 0 ? t->n_slots : 1) * sizeof *w->alive);
    for (uint64_t i = 0; i <= upto && i < w->n; i++) {
        const struct trace_event *ev = &t->events[i];
        if (ev->slot >= t->n_slots)
            continue;
        if (is_alloc(ev))
            w->alive[ev->slot] = true;
        else if (is_free(ev))
            w->alive[ev->slot] = false;
    }
}

/* The iteration slot S was born in when that makes it a suspect (below):
** it is live in w->alive and was born in a fitted iteration before
** LAST_FIT. AN_NO_ITER otherwise. */
static uint32_t
suspect_iter(const struct work *w, const struct an_result *r, uint32_t s, size_t last_fit)
{
    if (!w->alive[s])
        return AN_NO_ITER;
    uint32_t born = iter_of(r, w->born_event[s]);
    return born != AN_NO_ITER && born >= 1 && born < last_fit ? born : AN_NO_ITER;
}

/*
** Suspects: allocations still live at the end of the last fitted
** iteration, born in a fitted iteration before it (so that each outlived
** the iteration that made it, and every later one the fit saw). Not "never
** freed": a program that keeps a tensor every step frees them all at its
** end (an interpreter's teardown), after the steps the fit covers.
*/
static vram_status
find_suspects(struct work *w, struct an_result *r)
{
    const struct trace *t = w->t;
    if (!r->leak || r->n_iters < 3 || r->leak_iters_used < 2)
        return VRAM_OK;
    size_t last_fit = r->leak_iters_used; /* the fit covers 1 .. leak_iters_used */
    if (last_fit >= r->n_iters)
        last_fit = r->n_iters - 1;
    live_set_at(w, r->iters[last_fit].last_event);
    size_t count = 0;
    for (uint32_t s = 0; s < t->n_slots; s++)
        if (suspect_iter(w, r, s, last_fit) != AN_NO_ITER)
            count++;
    if (count == 0)
        return VRAM_OK;
    r->suspects = calloc(count, sizeof *r->suspects);
    if (r->suspects == NULL)
        return no_memory();
    size_t k = 0;
    for (uint32_t s = 0; s < t->n_slots; s++) {
        uint32_t born = suspect_iter(w, r, s, last_fit);
        if (born == AN_NO_ITER)
            continue;
        const struct trace_event *ev = &t->events[w->born_event[s]];
        r->suspects[k++] = (struct an_suspect){
            .id = ev->id, .size = ev->size, .born = born, .t_us = ev->t_us, .site = ev->site};
        r->suspect_bytes += ev->size;
    }
    r->n_suspects = k;
    order_suspects(r->suspects, k);
    if (t->n_sites == 0)
        return VRAM_OK;
    /* Every allocation of the suspects' iterations, kept or not: what
    ** names the line that keeps the memory. */
    size_t n_born = 0;
    for (uint32_t s = 0; s < t->n_slots; s++) {
        uint32_t b = iter_of(r, w->born_event[s]);
        n_born += b != AN_NO_ITER && b >= 1 && b < last_fit;
    }
    struct an_born *born = calloc(n_born > 0 ? n_born : 1, sizeof *born);
    if (born == NULL)
        return no_memory();
    k = 0;
    for (uint32_t s = 0; s < t->n_slots; s++) {
        uint32_t b = iter_of(r, w->born_event[s]);
        if (b == AN_NO_ITER || b < 1 || b >= last_fit)
            continue;
        born[k++] = (struct an_born){t->events[w->born_event[s]].site, w->alive[s]};
    }
    vram_status st = an_leak_sites(r, born, k);
    free(born);
    return st;
}

/* ------------------------------------------------------------------ */
/* 5. What was live at an event                                         */
/* ------------------------------------------------------------------ */

/* The non-empty size classes of w->alive, largest bytes first. */
static vram_status
classes_of_alive(struct work *w, struct an_class **out, size_t *n_out)
{
    struct an_class cls[N_CLASSES];
    memset(cls, 0, sizeof cls);
    const struct trace *t = w->t;
    for (uint32_t s = 0; s < t->n_slots; s++) {
        if (!w->alive[s])
            continue;
        uint64_t size = t->events[w->born_event[s]].size;
        unsigned c = class_of(size);
        cls[c].count++;
        cls[c].bytes += size;
    }
    size_t k = 0;
    for (unsigned c = 0; c < N_CLASSES; c++) {
        if (cls[c].count == 0)
            continue;
        class_bounds(c, &cls[c].lo, &cls[c].hi);
        cls[k++] = cls[c];
    }
    *n_out = 0;
    *out = NULL;
    if (k == 0)
        return VRAM_OK;
    *out = calloc(k, sizeof **out);
    if (*out == NULL)
        return no_memory();
    memcpy(*out, cls, k * sizeof *cls);
    qsort(*out, k, sizeof **out, cmp_class_bytes);
    *n_out = k;
    return VRAM_OK;
}

static vram_status
peak_breakdown(struct work *w, struct an_result *r)
{
    if (w->n == 0)
        return VRAM_OK;
    r->peak_iter = r->n_iters > 0 ? iter_of(r, r->peak_event) : SIZE_MAX;
    if (r->peak_iter == AN_NO_ITER)
        r->peak_iter = SIZE_MAX;
    live_set_at(w, r->peak_event);
    vram_status s = classes_of_alive(w, &r->peak_classes, &r->n_peak_classes);
    if (s == VRAM_OK)
        s = an_alive_sites(w->t, w->alive, w->born_event, &r->peak_sites, &r->n_peak_sites);
    if (s != VRAM_OK || r->n_phases == 0)
        return s;

    /* By the phase of birth: labels are few (distinct), plus "before". */
    const struct trace *t = w->t;
    size_t n_groups = (size_t)t->n_labels + 1;
    struct an_origin *g = calloc(n_groups, sizeof *g);
    if (g == NULL)
        return no_memory();
    for (size_t i = 0; i < n_groups; i++)
        g[i].label = (int32_t)i - 1;
    for (uint32_t sl = 0; sl < t->n_slots; sl++) {
        if (!w->alive[sl])
            continue;
        int32_t label = phase_label_of(r, w->born_event[sl]);
        struct an_origin *o = &g[label + 1];
        o->count++;
        o->bytes += t->events[w->born_event[sl]].size;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_groups; i++)
        if (g[i].count > 0)
            g[k++] = g[i];
    qsort(g, k, sizeof *g, cmp_origin);
    r->peak_origins = g;
    r->n_peak_origins = k;
    return VRAM_OK;
}

static vram_status
oom_breakdown(struct work *w, struct an_result *r)
{
    if (!r->ends_in_oom)
        return VRAM_OK;
    live_set_at(w, r->oom_event);
    /* Only the device that refused counts. */
    for (uint32_t sl = 0; sl < w->t->n_slots; sl++)
        if (w->alive[sl] && w->t->events[w->born_event[sl]].device != r->oom_device)
            w->alive[sl] = false;
    vram_status s = classes_of_alive(w, &r->oom_classes, &r->n_oom_classes);
    if (s != VRAM_OK)
        return s;
    const struct trace *t = w->t;
    size_t count = 0;
    for (uint32_t sl = 0; sl < t->n_slots; sl++)
        count += w->alive[sl];
    if (count == 0)
        return VRAM_OK;
    struct an_suspect *all = calloc(count, sizeof *all);
    if (all == NULL)
        return no_memory();
    size_t k = 0;
    for (uint32_t sl = 0; sl < t->n_slots; sl++) {
        if (!w->alive[sl])
            continue;
        uint64_t e = w->born_event[sl];
        const struct trace_event *ev = &t->events[e];
        all[k++] = (struct an_suspect){
            .id = ev->id, .size = ev->size, .born = iter_of(r, e), .t_us = ev->t_us};
    }
    qsort(all, k, sizeof *all, cmp_suspect);
    r->n_oom_largest = k < AN_OOM_TOP ? k : AN_OOM_TOP;
    /* Shrinking cannot really fail; if it does, the larger block serves. */
    struct an_suspect *shrunk = realloc(all, r->n_oom_largest * sizeof *all);
    r->oom_largest = shrunk != NULL ? shrunk : all;
    return VRAM_OK;
}

/* The cap the trace's metadata names ("limit=6G"); 0 if none. */
static uint64_t
meta_limit(const struct trace *t)
{
    const char *m = t->meta;
    if (m == NULL)
        return 0;
    for (const char *p = m; (p = strstr(p, "limit=")) != NULL; p += 6) {
        if (p != m && p[-1] != ' ')
            continue;
        char buf[64];
        size_t len = strcspn(p + 6, " \t");
        if (len == 0 || len >= sizeof buf)
            return 0;
        memcpy(buf, p + 6, len);
        buf[len] = '\0';
        uint64_t v;
        /* The writers put bytes there, without a unit. */
        if (size_parse_as(buf, SIZE_BARE_BYTES, &v) == VRAM_OK)
            return v;
        error_clear();
        return 0;
    }
    return 0;
}

static void
oom_cause(struct an_result *r)
{
    if (!r->ends_in_oom) {
        r->oom_cause = AN_OOM_NONE;
        return;
    }
    uint64_t need = r->oom_live + r->oom_request;
    if (need < r->oom_live) /* overflow: surely too big */
        need = UINT64_MAX;
    if (r->oom_cap > 0)
        r->oom_cause = need > r->oom_cap ? AN_OOM_OVER_CAP : AN_OOM_UNDER_CAP;
    else
        r->oom_cause = need > r->oom_reserved ? AN_OOM_NEW_HIGH : AN_OOM_WITHIN_RESERVED;
}

/* ------------------------------------------------------------------ */
/* 6. The replay                                                        */
/* ------------------------------------------------------------------ */

/* The libvram side of the replay (trace_replay.h's hooks). */
struct an_replay {
    vram_device **devs;
    vram_status status; /* why a hook failed */
};

static int
an_alloc(void *ctx, const struct trace_event *ev, uint64_t index, void **ptr)
{
    struct an_replay *ar = ctx;
    vram_status a =
        vram_alloc(ar->devs[ev->device], (size_t)ev->size, (void *)(uintptr_t)ev->stream, ptr);
    if (a == VRAM_OK)
        return TRACE_REPLAY_OK;
    if (a == VRAM_E_OOM)
        return TRACE_REPLAY_REFUSED;
    ar->status = error_set(a, "analyze: replay event %llu: allocating %llu bytes: %s",
                           (unsigned long long)(index + 1), (unsigned long long)ev->size,
                           vram_last_error());
    return TRACE_REPLAY_FAILED;
}

static int
an_free(void *ctx, const struct trace_event *ev, uint64_t index, void *ptr, uint64_t size)
{
    struct an_replay *ar = ctx;
    (void)size;
    vram_status f = vram_free(ar->devs[ev->device], ptr);
    if (f == VRAM_OK)
        return TRACE_REPLAY_OK;
    ar->status = error_set(f, "analyze: replay event %llu: free: %s",
                           (unsigned long long)(index + 1), vram_last_error());
    return TRACE_REPLAY_FAILED;
}

static const struct trace_replay_hooks an_hooks = {an_alloc, an_free};

/*
** Replay the trace on a simulated device under the strategy, with the loop
** of `vram replay` (trace_replay.h) but without timing: the timeline
** keeps, per bucket of events, the most live bytes and the most reserved
** bytes (each device's peak since the last bucket, read and reset at the
** bucket's end, summed over devices).
*/
static vram_status
replay(struct work *w, const struct an_options *o, struct an_result *r)
{
    const struct trace *t = w->t;
    int n_dev = t->n_devices > 0 ? t->n_devices : 1;
    if (n_dev > VRAM_SIM_MAX_DEVICES)
        return error_set(VRAM_E_INVALID,
                         "analyze: the trace names device %d; the simulated backend has "
                         "devices 0 to %d",
                         n_dev - 1, VRAM_SIM_MAX_DEVICES - 1);
    vram_options opts;
    memset(&opts, 0, sizeof opts);
    opts.backend = VRAM_BACKEND_SIM;
    opts.sim.devices = n_dev;
    opts.sim.memory_bytes = o->device_memory;
    opts.ignore_environment = true;

    vram_context *ctx = NULL;
    vram_status s = vram_open(&opts, &ctx);
    if (s != VRAM_OK)
        return error_set(s, "analyze: cannot open the simulated device: %s",
                         vram_last_error());
    vram_device **devs = calloc((size_t)n_dev, sizeof *devs);
    uint64_t *dev_peak = calloc((size_t)n_dev, sizeof *dev_peak);
    struct trace_replay tr;
    bool tr_ok = trace_replay_init(&tr, t);
    uint64_t bucket = (w->n + AN_MAX_POINTS - 1) / AN_MAX_POINTS;
    size_t n_points = bucket > 0 ? (size_t)((w->n + bucket - 1) / bucket) : 0;
    r->points = calloc(n_points > 0 ? n_points : 1, sizeof *r->points);
    if (devs == NULL || dev_peak == NULL || !tr_ok || r->points == NULL) {
        s = no_memory();
        goto out;
    }
    for (int d = 0; d < n_dev && s == VRAM_OK; d++) {
        vram_device_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.strategy = o->strategy;
        cfg.limit_bytes[0] = o->limit;
        s = vram_configure(ctx, d, &cfg);
        if (s == VRAM_OK)
            s = vram_device_get(ctx, d, &devs[d]);
        if (s != VRAM_OK)
            s = error_set(s, "analyze: replay device %d: %s", d, vram_last_error());
    }

    struct an_replay ar = {.devs = devs, .status = VRAM_OK};
    size_t p = 0;
    for (uint64_t b0 = 0; b0 < w->n && s == VRAM_OK; b0 += bucket) {
        uint64_t b1 = b0 + bucket < w->n ? b0 + bucket : w->n;
        struct an_point pt = {.t_us = t->events[b0].t_us, .live = 0, .reserved = 0};
        for (uint64_t i = b0; i < b1; i++) {
            if (w->live[i] > pt.live || i == b0) {
                pt.live = w->live[i];
                pt.t_us = t->events[i].t_us;
            }
        }
        if (trace_replay_run(&tr, b0, b1, &an_hooks, &ar) != TRACE_REPLAY_OK) {
            s = ar.status;
            break;
        }
        for (int d = 0; d < n_dev && s == VRAM_OK; d++) {
            vram_stats st;
            s = vram_get_stats(devs[d], &st);
            if (s == VRAM_OK)
                s = vram_reset_peak(devs[d]);
            if (s != VRAM_OK)
                break;
            pt.reserved += st.peak_bytes_reserved;
            if (st.peak_bytes_reserved > dev_peak[d])
                dev_peak[d] = st.peak_bytes_reserved;
        }
        r->points[p++] = pt;
    }
    r->n_points = p;
    r->replay_ooms = tr.refused;
    for (int d = 0; d < n_dev; d++)
        r->peak_reserved += dev_peak[d];
    if (r->ends_in_oom && r->oom_device >= 0 && r->oom_device < n_dev)
        r->oom_reserved = dev_peak[r->oom_device];
    r->fragmentation =
        r->peak_bytes > 0 ? (double)r->peak_reserved / (double)r->peak_bytes : 0.0;
out:
    trace_replay_fini(tr_ok ? &tr : NULL);
    free(dev_peak);
    free(devs);
    vram_close(ctx);
    return s;
}

/* ------------------------------------------------------------------ */
/* The whole analysis                                                   */
/* ------------------------------------------------------------------ */

vram_status
analyze_trace(const struct trace *t, const struct an_options *options,
              struct an_result **out)
{
    if (t == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "analyze_trace: NULL argument");
    struct an_options o = {
        .strategy = VRAM_STRATEGY_GROWTH, .device_memory = 0, .limit = 0};
    if (options != NULL)
        o = *options;
    if (vram_strategy_name(o.strategy) == NULL)
        return error_set(VRAM_E_INVALID, "analyze_trace: unknown strategy %d",
                         (int)o.strategy);

    struct an_result *r = calloc(1, sizeof *r);
    struct work w = {.t = t,
                     .n = t->n_events,
                     .device_memory = o.device_memory > 0 ? o.device_memory
                                                          : VRAM_SIM_DEFAULT_MEMORY};
    size_t n_slots = t->n_slots > 0 ? t->n_slots : 1;
    w.live = malloc((w.n > 0 ? w.n : 1) * sizeof *w.live);
    w.born_event = calloc(n_slots, sizeof *w.born_event);
    w.alive = calloc(n_slots, sizeof *w.alive);
    if (r == NULL || w.live == NULL || w.born_event == NULL || w.alive == NULL) {
        free(r);
        free(w.live);
        free(w.born_event);
        free(w.alive);
        return no_memory();
    }
    r->trace = t;
    r->strategy = o.strategy;
    r->peak_iter = SIZE_MAX;
    /* The job's cap: given, else named by the trace; the replay runs
     * under it and a final OOM is judged against it. */
    r->oom_cap = o.limit > 0 ? o.limit : meta_limit(t);
    o.limit = r->oom_cap;

    vram_status s = live_pass(&w, r);
    if (s == VRAM_OK)
        s = phases_from_marks(&w, r);
    if (s == VRAM_OK)
        s = an_find_iterations(&w, r);
    if (s == VRAM_OK) {
        leak_fit(&w, r);
        s = find_suspects(&w, r);
    }
    if (s == VRAM_OK)
        s = peak_breakdown(&w, r);
    if (s == VRAM_OK)
        s = oom_breakdown(&w, r);
    if (s == VRAM_OK)
        s = replay(&w, &o, r);
    if (s == VRAM_OK)
        oom_cause(r);

    free(w.live);
    free(w.born_event);
    free(w.alive);
    if (s != VRAM_OK) {
        an_result_free(r);
        return s;
    }
    *out = r;
    return VRAM_OK;
}

void
an_result_free(struct an_result *r)
{
    if (r == NULL)
        return;
    void *owned[] = {r->peak_classes, r->phases,       r->phase_groups, r->iters,
                     r->suspects,     r->points,       r->peak_origins, r->device_peaks,
                     r->oom_classes,  r->oom_largest,  r->leak_sites,   r->peak_sites};
    for (size_t k = 0; k < sizeof owned / sizeof *owned; k++)
        free(owned[k]);
    free(r);
}
