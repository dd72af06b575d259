/* SPDX-License-Identifier: MIT */
/*
** analyze_internal.h -- what the parts of the trace analysis share: the
** working state of one analysis, a growing array, the leak rule's
** constants and the few helpers more than one part calls. Not for use
** outside src/analyze/ (analyze.h is the contract).
**
** The parts: analyze.c (analyze_trace: the live pass, phases, iterations
** from marks, the leak verdict, what was live at the peak and the OOM, the
** replay), period.c (iterations without marks: the period of the event
** stream, or the floor of live bytes), text.c and json.c (the reports),
** compare.c (two results side by side), sites.c (the leak and the peak by
** call site).
*/
#ifndef VRAM_ANALYZE_ANALYZE_INTERNAL_H
#define VRAM_ANALYZE_ANALYZE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "analyze/analyze.h"
#include "base/error.h"
#include "base/size.h"

#define MIB (1ULL << 20)

/* The leak rule (docs/ANALYZE.md). */
/* Least rise of the minima over the fitted iterations: below it, what the
** quietest point holds moves by a few small tensors from one iteration to
** the next in real training (a scalar, an RNG state: 512-byte blocks), and
** a whole run's rise that small is no leak to act upon. */
#define LEAK_RISE_MIN MIB
/* A line, not a step or a sawtooth. */
#define LEAK_R2_MIN 0.8
#define LEAK_ITERS_MIN 3
/* The rise lasts: medians of quarters of the fit, each above the last by at
** least half of what the slope predicts. */
#define LEAK_SEGMENTS 4
#define LEAK_SEGMENT_SHARE 0.5

/* ------------------------------------------------------------------ */
/* Small helpers                                                        */
/* ------------------------------------------------------------------ */

/* -1, 0 or 1 as X is below, equal to or above Y: the step of every qsort
** comparator here (negate it for "largest first"). */
static inline int
order_u64(uint64_t x, uint64_t y)
{
    return (x > y) - (x < y);
}

/* order_u64 of X1 against Y1, or where they are equal, of X2 against Y2. */
static inline int
order_u64_2(uint64_t x1, uint64_t y1, uint64_t x2, uint64_t y2)
{
    int c = order_u64(x1, y1);
    return c != 0 ? c : order_u64(x2, y2);
}

static inline int
cmp_u64(const void *a, const void *b)
{
    return order_u64(*(const uint64_t *)a, *(const uint64_t *)b);
}

static inline vram_status
no_memory(void)
{
    return error_set(VRAM_E_HOST_MEMORY, "analyze: out of host memory");
}

/* A growing array of uint64_t. */
struct u64_list {
    uint64_t *v;
    size_t n, cap;
};

static inline bool
list_push(struct u64_list *l, uint64_t x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        uint64_t *v = realloc(l->v, cap * sizeof *v);
        if (v == NULL)
            return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}

/* The text of mark LABEL of T; "(before the first mark)" for -1. */
static inline const char *
label_text(const struct trace *t, int32_t label)
{
    if (label < 0 || t == NULL || (uint32_t)label >= t->n_labels || t->labels == NULL)
        return "(before the first mark)";
    return t->labels[label];
}

static inline const char *
fmt_size(uint64_t bytes, char *buf, size_t len)
{
    return size_format(bytes, buf, len);
}

/* ------------------------------------------------------------------ */
/* The analysis state                                                   */
/* ------------------------------------------------------------------ */

struct work {
    const struct trace *t;
    uint64_t n;           /* events */
    uint64_t *live;       /* live bytes after each event (n entries) */
    uint64_t *born_event; /* event index of each slot's allocation */
    bool *alive;          /* per slot, reused by the live-set passes */
    bool last_partial;    /* the last iteration was cut off by the end of
                             the recording (its quiet point not reached) */
    uint64_t device_memory; /* the device's bytes (the simulated one's when
                               not given), for the leak's projection */
};

/* ------------------------------------------------------------------ */
/* Between the parts                                                    */
/* ------------------------------------------------------------------ */

/* analyze.c: r->iters from CUTS (the last event of every iteration but the
** last, ascending), the first starting at START; and iterations from marks
** (*DONE false, nothing changed, without two starts). */
vram_status an_iters_from_cuts(struct work *w, struct an_result *r, uint64_t start,
                               const uint64_t *cuts, size_t n_cuts);
vram_status an_iters_by_marks(struct work *w, struct an_result *r, bool *done);

/* An allocation born in the iterations a suspect can be born in: its call
** site, and whether it outlived the fit (a suspect). */
struct an_born {
    uint32_t site;
    bool kept;
};

/* sites.c: r->leak_sites from r->suspects, each group under the frame that
** keeps the memory, judged by BORN (N_BORN allocations of the suspects'
** iterations); the live set ALIVE (per slot; BORN_EVENT: each slot's
** allocation) by call site into OUT. Nothing for a trace without call
** sites. */
vram_status an_leak_sites(struct an_result *r, const struct an_born *born, size_t n_born);
vram_status an_alive_sites(const struct trace *t, const bool *alive,
                           const uint64_t *born_event, struct an_site **out,
                           size_t *n_out);

/* period.c: r->iters from the marks, else the floor of live bytes, else the
** period of the event stream, else one iteration: the whole trace. */
vram_status an_find_iterations(struct work *w, struct an_result *r);

/* text.c: "+1.50 GiB" or "-512 B": BYTES with its sign, into BUF. */
const char *an_fmt_signed(double bytes, char *buf, size_t len);

/* json.c: V as a JSON number; R as a json-c object (the caller puts it);
** O printed on one line to OUT and put (a vram_status). */
struct json_object;
struct json_object *an_json_u64(uint64_t v);
struct json_object *an_result_json(const struct an_result *r);
int an_put_json(FILE *out, struct json_object *o);

#endif
