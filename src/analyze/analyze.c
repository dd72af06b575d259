/* SPDX-License-Identifier: MIT */
/*
** analyze.c -- what a trace says about a program's memory: analyze_trace()
** and the text and JSON reports of `vram analyze` (src/analyze/analyze.h
** is the contract, docs/ANALYZE.md explains every rule to users).
**
** The steps, each a section below:
**   1. one pass over the events: live bytes after every event, the peak,
**      per-device peaks, the final OOM;
**   2. phases from marks;
**   3. iterations: from marks; else the period of the event stream (an
**      autocorrelation of hashed (op, size) tokens, O(n log n) by FFT,
**      checked exactly on a few candidates) cut at the quietest point of
**      each period; or, for inference requests of varying length, the
**      points where live bytes come back to their floor;
**   4. the leak verdict: least squares over the per-iteration minima;
**   5. what was live at the peak and at the final OOM;
**   6. a replay on the simulated device under the strategy, for reserved
**      bytes over time and fragmentation.
**
** Not part of libvram: it prints JSON with json-c, which the library does
** not link (CMake target vram_analyze, used by the vram tool and tests).
*/
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze.h"
#include "base/error.h"
#include "base/size.h"
#include "trace/trace_replay.h"

#define MIB (1ULL << 20)

/* Shortest period, in events, taken for an iteration. */
#define PERIOD_MIN 8
/* Least fraction of events equal to the event one period later. */
#define PERIOD_MATCH_MIN 0.5
/* Lags of the FFT estimate checked exactly. */
#define PERIOD_CANDIDATES 16
/* Up to this many events every lag is checked exactly (no FFT). */
#define PERIOD_EXACT_MAX_EVENTS 4096
/* A divisor of the best period is preferred when it matches this well. */
#define PERIOD_DIVISOR_SHARE 0.95

/* The floor: live bytes within max(1 MiB, floor / 1000) of the least. */
#define FLOOR_TOL_MIN MIB
/* Floor segmentation is taken over the period when segments are at
** least this many periods long (requests, not steps). */
#define FLOOR_MIN_PERIODS 3
/* ...and segments shorter than the median over this are merged. */
#define FLOOR_SHORT_DIVISOR 8

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

static int
cmp_class_bytes(const void *a, const void *b)
{
    const struct an_class *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return (x->lo < y->lo) - (x->lo > y->lo);
}

static int
cmp_suspect(const void *a, const void *b)
{
    const struct an_suspect *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

static int
cmp_origin(const void *a, const void *b)
{
    const struct an_origin *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return (x->label > y->label) - (x->label < y->label);
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static vram_status
no_memory(void)
{
    return error_set(VRAM_E_HOST_MEMORY, "analyze: out of host memory");
}

/* A growing array of uint64_t. */
struct u64_list {
    uint64_t *v;
    size_t n, cap;
};

static bool
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
static const char *
label_text(const struct trace *t, int32_t label)
{
    if (label < 0 || t == NULL || (uint32_t)label >= t->n_labels || t->labels == NULL)
        return "(before the first mark)";
    return t->labels[label];
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
/* 3. Iterations                                                        */
/* ------------------------------------------------------------------ */

/*
** Build r->iters from CUTS: the index of the last event of every
** iteration but the last, ascending. The last iteration runs to the end.
** START is the first event of the first iteration (marks: the first
** mark; otherwise 0).
*/
static vram_status
iters_from_cuts(struct work *w, struct an_result *r, uint64_t start, const uint64_t *cuts,
                size_t n_cuts)
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
static vram_status
iters_by_marks(struct work *w, struct an_result *r, bool *done)
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
    vram_status s = iters_from_cuts(w, r, first_mark, cuts.v, cuts.n);
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

/* A 64-bit mix (splitmix64's finalizer). */
static inline uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* The token of an event: what repeats from one iteration to the next. */
static inline uint64_t
token_of(const struct trace_event *ev)
{
    return mix64(ev->size * 8 + (uint64_t)(unsigned char)ev->op);
}

/* Fraction of i in [0, n - lag) with tok[i] == tok[i + lag]. */
static double
match_rate(const uint64_t *tok, uint64_t n, uint64_t lag)
{
    if (lag == 0 || lag >= n)
        return 0.0;
    uint64_t m = 0;
    for (uint64_t i = 0; i + lag < n; i++)
        m += tok[i] == tok[i + lag];
    return (double)m / (double)(n - lag);
}

/*
** In-place radix-2 FFT of (RE, IM), N a power of two; COS/SIN hold
** cos/sin(2 pi k / N) for k < N/2. The inverse is not scaled.
*/
static void
fft(double *re, double *im, size_t n, const double *cosv, const double *sinv,
    bool inverse)
{
    for (size_t i = 1, j = 0; i < n; i++) {
        size_t bit = n >> 1;
        for (; j & bit; bit >>= 1)
            j ^= bit;
        j ^= bit;
        if (i < j) {
            double tr = re[i], ti = im[i];
            re[i] = re[j];
            im[i] = im[j];
            re[j] = tr;
            im[j] = ti;
        }
    }
    for (size_t len = 2; len <= n; len <<= 1) {
        size_t half = len / 2, step = n / len;
        for (size_t i = 0; i < n; i += len) {
            for (size_t k = 0; k < half; k++) {
                double wr = cosv[k * step];
                double wi = inverse ? sinv[k * step] : -sinv[k * step];
                size_t a = i + k, b = a + half;
                double xr = re[b] * wr - im[b] * wi;
                double xi = re[b] * wi + im[b] * wr;
                re[b] = re[a] - xr;
                im[b] = im[a] - xi;
                re[a] += xr;
                im[a] += xi;
            }
        }
    }
}

/*
** Estimated match rate of every lag 0..max_lag into EST, by FFT: each
** token becomes a + ib with a, b = +-1 from two bits of its hash, so that
** Re(sum x[i+L] conj(x[i])) is twice the number of matches at lag L plus
** zero-mean noise of order sqrt(n). O(n log n).
*/
static vram_status
estimate_rates(const uint64_t *tok, uint64_t n, uint64_t max_lag, double *est)
{
    size_t size = 1;
    while (size < n + max_lag + 1)
        size <<= 1;
    double *re = calloc(size, sizeof *re), *im = calloc(size, sizeof *im);
    double *cosv = malloc((size / 2 + 1) * sizeof *cosv);
    double *sinv = malloc((size / 2 + 1) * sizeof *sinv);
    if (re == NULL || im == NULL || cosv == NULL || sinv == NULL) {
        free(re);
        free(im);
        free(cosv);
        free(sinv);
        return no_memory();
    }
    const double two_pi = 6.283185307179586476925286766559;
    for (size_t k = 0; k <= size / 2; k++) {
        cosv[k] = cos(two_pi * (double)k / (double)size);
        sinv[k] = sin(two_pi * (double)k / (double)size);
    }
    for (uint64_t i = 0; i < n; i++) {
        re[i] = (tok[i] & 1) ? 1.0 : -1.0;
        im[i] = (tok[i] & 2) ? 1.0 : -1.0;
    }
    fft(re, im, size, cosv, sinv, false);
    for (size_t i = 0; i < size; i++) {
        re[i] = re[i] * re[i] + im[i] * im[i];
        im[i] = 0.0;
    }
    fft(re, im, size, cosv, sinv, true);
    for (uint64_t lag = 0; lag <= max_lag; lag++)
        est[lag] = re[lag] / (double)size / 2.0 / (double)(n - lag);
    free(re);
    free(im);
    free(cosv);
    free(sinv);
    return VRAM_OK;
}

/*
** The period of the event stream: the lag in [PERIOD_MIN, n/3] at which
** the most events equal the event one lag later, preferring a divisor of
** it that matches almost as well. *PERIOD = 0 when no lag reaches
** PERIOD_MATCH_MIN.
*/
static vram_status
detect_period(struct work *w, uint64_t *period, double *rate)
{
    *period = 0;
    *rate = 0.0;
    uint64_t n = w->n, max_lag = n / 3;
    if (max_lag < PERIOD_MIN)
        return VRAM_OK;
    uint64_t *tok = malloc(n * sizeof *tok);
    double *est = malloc((max_lag + 1) * sizeof *est);
    if (tok == NULL || est == NULL) {
        free(tok);
        free(est);
        return no_memory();
    }
    for (uint64_t i = 0; i < n; i++)
        tok[i] = token_of(&w->t->events[i]);

    uint64_t best = 0;
    double best_rate = 0.0;
    if (n <= PERIOD_EXACT_MAX_EVENTS) {
        for (uint64_t lag = PERIOD_MIN; lag <= max_lag; lag++) {
            est[lag] = match_rate(tok, n, lag);
            if (est[lag] > best_rate) {
                best_rate = est[lag];
                best = lag;
            }
        }
    } else {
        vram_status s = estimate_rates(tok, n, max_lag, est);
        if (s != VRAM_OK) {
            free(tok);
            free(est);
            return s;
        }
        /* The highest local maxima of the estimate, checked exactly. */
        uint64_t cand[PERIOD_CANDIDATES];
        double cand_est[PERIOD_CANDIDATES];
        size_t n_cand = 0;
        for (uint64_t lag = PERIOD_MIN; lag <= max_lag; lag++) {
            double e = est[lag];
            if ((lag > PERIOD_MIN && est[lag - 1] > e) ||
                (lag < max_lag && est[lag + 1] >= e))
                continue;
            size_t pos = n_cand;
            while (pos > 0 && cand_est[pos - 1] < e)
                pos--;
            if (pos >= PERIOD_CANDIDATES)
                continue;
            size_t last = n_cand < PERIOD_CANDIDATES ? n_cand : PERIOD_CANDIDATES - 1;
            for (size_t j = last; j > pos; j--) {
                cand[j] = cand[j - 1];
                cand_est[j] = cand_est[j - 1];
            }
            cand[pos] = lag;
            cand_est[pos] = e;
            if (n_cand < PERIOD_CANDIDATES)
                n_cand++;
        }
        for (size_t j = 0; j < n_cand; j++) {
            double m = match_rate(tok, n, cand[j]);
            if (m > best_rate) {
                best_rate = m;
                best = cand[j];
            }
        }
    }
    /* A divisor of the best lag that matches almost as well is the
     * period (the best is then one of its multiples): the smallest such,
     * looking within one event of best / k. */
    for (uint64_t k = 16; best > 0 && k >= 2; k--) {
        uint64_t base = (best + k / 2) / k, lag_k = 0;
        double rate_k = 0.0;
        for (uint64_t lag = base > 1 ? base - 1 : 1; lag <= base + 1; lag++) {
            if (lag < PERIOD_MIN || lag >= best)
                continue;
            double m = match_rate(tok, n, lag);
            if (m > rate_k) {
                rate_k = m;
                lag_k = lag;
            }
        }
        if (lag_k > 0 && rate_k >= PERIOD_DIVISOR_SHARE * best_rate) {
            best = lag_k;
            best_rate = rate_k;
            break;
        }
    }
    free(tok);
    free(est);
    if (best_rate >= PERIOD_MATCH_MIN) {
        *period = best;
        *rate = best_rate;
    }
    return VRAM_OK;
}

/* Index of the least of live[lo..hi] (the first one). */
static uint64_t
argmin_live(const uint64_t *live, uint64_t lo, uint64_t hi)
{
    uint64_t at = lo;
    for (uint64_t i = lo + 1; i <= hi; i++)
        if (live[i] < live[at])
            at = i;
    return at;
}

/*
** Drop cuts so that no iteration is shorter than MIN_LEN events: a short
** one is merged into the next, a short last one into the one before.
** Returns the number of cuts kept.
*/
static size_t
prune_cuts(uint64_t *cuts, size_t n_cuts, uint64_t n, uint64_t min_len)
{
    size_t k = 0;
    uint64_t start = 0;
    for (size_t i = 0; i < n_cuts; i++) {
        if (cuts[i] >= n - 1 || cuts[i] + 1 < start)
            continue;
        if (cuts[i] + 1 - start >= min_len) {
            cuts[k++] = cuts[i];
            start = cuts[i] + 1;
        }
    }
    if (k > 0 && n - start < min_len)
        k--;
    return k;
}

/*
** Cuts for period P: the quietest phase of the period over the steady
** windows (the last n/P - 1 of them; the first iteration is often a
** warm-up of another length), then one cut per period at the least live
** bytes within P/4 of where the period puts it, following any drift.
*/
static vram_status
cuts_by_period(struct work *w, uint64_t p, struct u64_list *cuts)
{
    uint64_t n = w->n, m = n / p - 1, s0 = n - m * p;
    double *sum = calloc(p, sizeof *sum);
    if (sum == NULL)
        return no_memory();
    for (uint64_t j = 0; j < m; j++)
        for (uint64_t r = 0; r < p; r++)
            sum[r] += (double)w->live[s0 + j * p + r];
    uint64_t phase = 0;
    for (uint64_t r = 1; r < p; r++)
        if (sum[r] < sum[phase])
            phase = r;
    free(sum);

    uint64_t anchor = s0 + phase, q = p / 4;
    struct u64_list back = {0};
    /* Backwards from the anchor... */
    uint64_t c = anchor;
    while (c >= p) {
        uint64_t e = c - p;
        uint64_t lo = e > q ? e - q : 0, hi = e + q < c ? e + q : c - 1;
        uint64_t at = argmin_live(w->live, lo, hi);
        if (!list_push(&back, at)) {
            free(back.v);
            return no_memory();
        }
        c = at;
    }
    for (size_t i = back.n; i > 0; i--)
        if (!list_push(cuts, back.v[i - 1])) {
            free(back.v);
            return no_memory();
        }
    free(back.v);
    /* ...then forwards. */
    c = anchor;
    for (;;) {
        if (!list_push(cuts, c))
            return no_memory();
        uint64_t e = c + p;
        if (e >= n)
            break;
        uint64_t lo = e - q > c ? e - q : c + 1, hi = e + q < n ? e + q : n - 1;
        c = argmin_live(w->live, lo, hi);
    }
    cuts->n = prune_cuts(cuts->v, cuts->n, n, p / 2 > 0 ? p / 2 : 1);
    return VRAM_OK;
}

/* Live bytes within this much of the floor count as at the floor. */
static uint64_t
floor_tolerance(uint64_t floor)
{
    return floor / 1000 > FLOOR_TOL_MIN ? floor / 1000 : FLOOR_TOL_MIN;
}

static uint64_t median_segment(const struct u64_list *cuts, uint64_t n);

/*
** Cuts where live bytes come back to their floor: the least live bytes
** after the first tenth of the trace, within max(1 MiB, floor / 1000).
** Each stretch at the floor ends an iteration where it begins. Iterations
** shorter than MIN_LEN events, or than an eighth of the median, are
** merged. *VALID when this yields three
** iterations or more, none longer than half the trace.
*/
static vram_status
cuts_by_floor(struct work *w, uint64_t min_len, struct u64_list *cuts,
              uint64_t *floor_out, bool *valid)
{
    uint64_t n = w->n;
    *valid = false;
    if (n < 16)
        return VRAM_OK;
    uint64_t floor = UINT64_MAX;
    for (uint64_t i = n / 10; i < n; i++)
        if (w->live[i] < floor)
            floor = w->live[i];
    uint64_t tol = floor_tolerance(floor);
    bool at_floor = true; /* the start counts as a floor: nothing is live */
    for (uint64_t i = 0; i < n; i++) {
        bool low = w->live[i] <= floor + tol;
        if (low && !at_floor && !list_push(cuts, i))
            return no_memory();
        at_floor = low;
    }
    /* Twice: blips at the floor between requests first, then whatever is
     * far shorter than a typical request (loading the model before the
     * first request joins that request, as a warm-up). */
    cuts->n = prune_cuts(cuts->v, cuts->n, n, min_len > 0 ? min_len : 1);
    uint64_t typical = median_segment(cuts, n) / FLOOR_SHORT_DIVISOR;
    if (typical > min_len)
        cuts->n = prune_cuts(cuts->v, cuts->n, n, typical);
    uint64_t start = 0, longest = 0;
    for (size_t k = 0; k <= cuts->n; k++) {
        uint64_t end = k < cuts->n ? cuts->v[k] + 1 : n;
        if (end - start > longest)
            longest = end - start;
        start = end;
    }
    *floor_out = floor;
    *valid = cuts->n + 1 >= 3 && longest <= n / 2;
    return VRAM_OK;
}

/* The median length in events of cut segments. */
static uint64_t
median_segment(const struct u64_list *cuts, uint64_t n)
{
    size_t k = cuts->n + 1;
    uint64_t *len = malloc(k * sizeof *len);
    if (len == NULL)
        return 0;
    uint64_t start = 0;
    for (size_t i = 0; i < k; i++) {
        uint64_t end = i < cuts->n ? cuts->v[i] + 1 : n;
        len[i] = end - start;
        start = end;
    }
    qsort(len, k, sizeof *len, cmp_u64);
    uint64_t m = len[k / 2];
    free(len);
    return m;
}

static vram_status
find_iterations(struct work *w, struct an_result *r)
{
    bool done = false;
    vram_status s = iters_by_marks(w, r, &done);
    if (s != VRAM_OK || done)
        return s;

    uint64_t period = 0;
    double rate = 0.0;
    if ((s = detect_period(w, &period, &rate)) != VRAM_OK)
        return s;

    struct u64_list floor_cuts = {0}, cuts = {0};
    bool floor_ok = false;
    uint64_t floor = 0;
    uint64_t min_len = period > 0 ? period : 8;
    s = cuts_by_floor(w, min_len, &floor_cuts, &floor, &floor_ok);
    if (s == VRAM_OK && floor_ok &&
        (period == 0 ||
         median_segment(&floor_cuts, w->n) >= FLOOR_MIN_PERIODS * period)) {
        r->iters_from_floor = true;
        r->floor_bytes = floor;
        r->period_match = rate;
        w->last_partial = w->live[w->n - 1] > floor + floor_tolerance(floor);
        s = iters_from_cuts(w, r, 0, floor_cuts.v, floor_cuts.n);
    } else if (s == VRAM_OK && period > 0) {
        s = cuts_by_period(w, period, &cuts);
        if (s == VRAM_OK) {
            r->period_events = period;
            r->period_match = rate;
            /* The last iteration is what follows the last quiet point
             * found: the recording stopped before its own. */
            w->last_partial = true;
            s = iters_from_cuts(w, r, 0, cuts.v, cuts.n);
        }
    } else if (s == VRAM_OK) {
        s = iters_from_cuts(w, r, 0, NULL, 0); /* one iteration: the whole trace */
    }
    free(floor_cuts.v);
    free(cuts.v);
    return s;
}

/* The iteration holding event I (binary search); AN_NO_ITER before the first. */
static uint32_t
iter_of(const struct an_result *r, uint64_t i)
{
    if (r->n_iters == 0 || i < r->iters[0].first_event)
        return AN_NO_ITER;
    size_t lo = 0, hi = r->n_iters - 1;
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (r->iters[mid].first_event <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return (uint32_t)lo;
}

/* The label of the phase holding event I; -1 before the first mark. */
static int32_t
phase_label_of(const struct an_result *r, uint64_t i)
{
    if (r->n_phases == 0 || i < r->phases[0].first_event)
        return -1;
    size_t lo = 0, hi = r->n_phases - 1;
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (r->phases[mid].first_event <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return r->phases[lo].label;
}

/* ------------------------------------------------------------------ */
/* 4. The leak verdict                                                  */
/* ------------------------------------------------------------------ */

/*
** The leak rule, all in this function (docs/ANALYZE.md, "The leak rule").
** Least squares over the per-iteration minima, leaving out the first
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
    size_t k = last - first + 1;
    if (k < 2)
        return;
    double mx = 0, my = 0;
    for (size_t i = first; i <= last; i++) {
        mx += (double)i;
        my += (double)r->iters[i].min_live;
    }
    mx /= (double)k;
    my /= (double)k;
    double sxx = 0, sxy = 0, syy = 0;
    for (size_t i = first; i <= last; i++) {
        double dx = (double)i - mx, dy = (double)r->iters[i].min_live - my;
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    double slope = sxx > 0 ? sxy / sxx : 0.0;
    double r2 = syy > 0 && sxx > 0 ? (sxy * sxy) / (sxx * syy) : 0.0;
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

/*
** Suspects: allocations never freed, born after the first iteration and
** before the last (so that each outlived the iteration that made it).
*/
static vram_status
find_suspects(struct work *w, struct an_result *r)
{
    const struct trace *t = w->t;
    if (!r->leak || r->n_iters < 3)
        return VRAM_OK;
    memset(w->alive, 0, (t->n_slots > 0 ? t->n_slots : 1) * sizeof *w->alive);
    for (uint64_t i = 0; i < w->n; i++) {
        const struct trace_event *ev = &t->events[i];
        if (ev->slot >= t->n_slots)
            continue;
        if (is_alloc(ev))
            w->alive[ev->slot] = true;
        else if (is_free(ev))
            w->alive[ev->slot] = false;
    }
    size_t count = 0;
    for (uint32_t s = 0; s < t->n_slots; s++) {
        if (!w->alive[s])
            continue;
        uint32_t born = iter_of(r, w->born_event[s]);
        if (born != AN_NO_ITER && born >= 1 && born + 1 < r->n_iters)
            count++;
    }
    if (count == 0)
        return VRAM_OK;
    r->suspects = calloc(count, sizeof *r->suspects);
    if (r->suspects == NULL)
        return no_memory();
    size_t k = 0;
    for (uint32_t s = 0; s < t->n_slots; s++) {
        if (!w->alive[s])
            continue;
        uint64_t e = w->born_event[s];
        uint32_t born = iter_of(r, e);
        if (born == AN_NO_ITER || born < 1 || born + 1 >= r->n_iters)
            continue;
        const struct trace_event *ev = &t->events[e];
        r->suspects[k++] = (struct an_suspect){
            .id = ev->id, .size = ev->size, .born = born, .t_us = ev->t_us};
        r->suspect_bytes += ev->size;
    }
    r->n_suspects = k;
    qsort(r->suspects, k, sizeof *r->suspects, cmp_suspect);
    return VRAM_OK;
}

/* ------------------------------------------------------------------ */
/* 5. What was live at an event                                         */
/* ------------------------------------------------------------------ */

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
        if (size_parse(buf, &v) == VRAM_OK)
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
        s = find_iterations(&w, r);
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
    free(r->peak_classes);
    free(r->phases);
    free(r->phase_groups);
    free(r->iters);
    free(r->suspects);
    free(r->points);
    free(r->peak_origins);
    free(r->device_peaks);
    free(r->oom_classes);
    free(r->oom_largest);
    free(r);
}

/* ------------------------------------------------------------------ */
/* Text                                                                 */
/* ------------------------------------------------------------------ */

/* Rows printed of long lists; the rest are summed up in one line. */
#define TEXT_ROWS 8

static const char *
fmt_size(uint64_t bytes, char *buf, size_t len)
{
    return size_format(bytes, buf, len);
}

static const char *
fmt_signed(double bytes, char *buf, size_t len)
{
    char tmp[24]; /* "1023.99 EiB" at most */
    size_format((uint64_t)llround(fabs(bytes)), tmp, sizeof tmp);
    buf[0] = bytes < 0 ? '-' : '+';
    snprintf(buf + 1, len - 1, "%s", tmp);
    return buf;
}

/* Seconds from the first event of R's trace to T_US. */
static double
rel_s(const struct an_result *r, uint64_t t_us)
{
    uint64_t t0 =
        r->trace != NULL && r->trace->n_events > 0 ? r->trace->events[0].t_us : 0;
    return t_us >= t0 ? (double)(t_us - t0) / 1e6 : -(double)(t0 - t_us) / 1e6;
}

static void
print_classes(FILE *out, const struct an_class *c, size_t n)
{
    for (size_t i = 0; i < n && i < TEXT_ROWS; i++) {
        char lo[32], hi[32], b[32], range[80];
        fmt_size(c[i].lo, lo, sizeof lo);
        if (c[i].hi == UINT64_MAX)
            snprintf(hi, sizeof hi, "...");
        else
            fmt_size(c[i].hi, hi, sizeof hi);
        snprintf(range, sizeof range, "[%s, %s)", lo, hi);
        fprintf(out, "    %-28s %6llu allocation%s %12s\n", range,
                (unsigned long long)c[i].count, c[i].count == 1 ? " " : "s",
                fmt_size(c[i].bytes, b, sizeof b));
    }
    if (n > TEXT_ROWS) {
        uint64_t count = 0, bytes = 0;
        for (size_t i = TEXT_ROWS; i < n; i++) {
            count += c[i].count;
            bytes += c[i].bytes;
        }
        char b[32];
        fprintf(out, "    and %zu smaller classes: %llu allocations, %s\n", n - TEXT_ROWS,
                (unsigned long long)count, fmt_size(bytes, b, sizeof b));
    }
}

/* Phases grouped by label: the largest peak of each, in order of first
** appearance. */
static void
print_phases(FILE *out, const struct an_result *r)
{
    const struct trace *t = r->trace;
    size_t shown = 0;
    for (size_t i = 0; i < r->n_phase_groups && shown < TEXT_ROWS; i++, shown++) {
        const struct an_phase_group *g = &r->phase_groups[i];
        char b[32];
        fprintf(out, "    %-32s peak %s%s", label_text(t, g->label),
                fmt_size(g->peak_live, b, sizeof b), g->count > 1 ? "" : "\n");
        if (g->count > 1)
            fprintf(out, " (largest of %llu)\n", (unsigned long long)g->count);
    }
    if (r->n_phase_groups > shown)
        fprintf(out, "    and %zu more labels\n", r->n_phase_groups - shown);
}

/* "at this rate the 80.00 GiB device is full after about 310,000 more
** iterations": two significant digits, with thousands separators. */
static void
print_leak_projection(FILE *out, const struct an_result *r)
{
    char a[32];
    fmt_size(r->leak_capacity, a, sizeof a);
    const char *what = r->leak_capacity_is_cap ? "cap" : "device";
    if (r->leak_iters_to_full < 1.0) {
        fprintf(out, "  at this rate the %s %s is full within the next iteration\n", a, what);
        return;
    }
    double n = r->leak_iters_to_full;
    double mag = pow(10.0, floor(log10(n)) - 1.0);
    if (mag < 1.0)
        mag = 1.0;
    double rounded = floor(n / mag + 0.5) * mag;
    char digits[32], grouped[48];
    snprintf(digits, sizeof digits, "%.0f", rounded);
    size_t len = strlen(digits), j = 0;
    for (size_t i = 0; i < len && j + 2 < sizeof grouped; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            grouped[j++] = ',';
        grouped[j++] = digits[i];
    }
    grouped[j] = '\0';
    bool simulated = !r->leak_capacity_is_cap && r->leak_capacity == VRAM_SIM_DEFAULT_MEMORY;
    fprintf(out, "  at this rate the %s %s%s is full after about %s more iterations\n", a,
            what, simulated ? " (a simulated H200; --device-memory or --limit for yours)" : "",
            grouped);
}

static void
print_leak(FILE *out, const struct an_result *r)
{
    char a[32], b[32];
    if (r->n_iters < 3 || r->leak_iters_used < LEAK_ITERS_MIN) {
        fprintf(out,
                "leak       no verdict: %zu iteration%s (a leak shows across %d or more "
                "after the first)\n",
                r->n_iters, r->n_iters == 1 ? "" : "s", LEAK_ITERS_MIN);
        return;
    }
    if (!r->leak) {
        fprintf(out,
                "leak       no: the least live bytes per iteration change by %s per "
                "iteration (R^2 %.2f over %zu iterations)\n",
                fmt_signed(r->leak_bytes_per_iter, a, sizeof a), r->leak_r2,
                r->leak_iters_used);
        return;
    }
    fprintf(out,
            "leak       YES: memory grew %s per iteration (R^2 %.2f over %zu "
            "iterations, %s in all)\n",
            fmt_size((uint64_t)llround(r->leak_bytes_per_iter), a, sizeof a), r->leak_r2,
            r->leak_iters_used,
            fmt_size((uint64_t)llround(r->leak_bytes_per_iter *
                                       (double)(r->leak_iters_used - 1)),
                     b, sizeof b));
    print_leak_projection(out, r);
    if (r->n_suspects == 0) {
        fprintf(out, "  no allocation outlived its iteration to the end of the trace\n");
        return;
    }
    fprintf(out,
            "  suspects: %zu allocations (%s) born after the first iteration are still "
            "alive at the end:\n",
            r->n_suspects, fmt_size(r->suspect_bytes, a, sizeof a));
    /* Grouped by size (the list is sorted by size): count, birth range. */
    size_t groups = 0;
    for (size_t i = 0; i < r->n_suspects;) {
        size_t j = i;
        uint32_t lo = UINT32_MAX, hi = 0;
        while (j < r->n_suspects && r->suspects[j].size == r->suspects[i].size) {
            if (r->suspects[j].born < lo)
                lo = r->suspects[j].born;
            if (r->suspects[j].born > hi)
                hi = r->suspects[j].born;
            j++;
        }
        if (groups < TEXT_ROWS) {
            fprintf(out, "    %6zu x %-12s born in iteration%s %u", j - i,
                    fmt_size(r->suspects[i].size, a, sizeof a), lo == hi ? "" : "s",
                    lo + 1);
            if (hi != lo)
                fprintf(out, "..%u", hi + 1);
            fprintf(out, " (first id %llu)\n", (unsigned long long)r->suspects[i].id);
        }
        groups++;
        i = j;
    }
    if (groups > TEXT_ROWS)
        fprintf(out, "    and %zu more sizes\n", groups - TEXT_ROWS);
}

static void
print_oom(FILE *out, const struct an_result *r)
{
    char a[32], b[32], c[32];
    if (!r->ends_in_oom) {
        fprintf(out, "oom        none: the trace does not end in a refused allocation\n");
        return;
    }
    fprintf(out,
            "oom        the last allocation failed at %.3f s: %s asked with %s live\n",
            rel_s(r, r->oom_time_us), fmt_size(r->oom_request, a, sizeof a),
            fmt_size(r->oom_live, b, sizeof b));
    uint64_t need = r->oom_live + r->oom_request;
    switch (r->oom_cause) {
    case AN_OOM_OVER_CAP:
        fprintf(out,
                "  why: live + request = %s exceeds the cap of %s: the job is too big "
                "for it (see `vram plan`)\n",
                fmt_size(need, a, sizeof a), fmt_size(r->oom_cap, b, sizeof b));
        break;
    case AN_OOM_UNDER_CAP:
        fprintf(out,
                "  why: live + request = %s fits under the cap of %s: the free memory "
                "was in pieces or held outside the live set (fragmentation); try "
                "VRAM_STRATEGY=expandable\n",
                fmt_size(need, a, sizeof a), fmt_size(r->oom_cap, b, sizeof b));
        break;
    case AN_OOM_NEW_HIGH:
        fprintf(out,
                "  why: live + request = %s is more than %s ever reserved in the replay "
                "(%s): the job outgrew its memory; give the cap with --limit for a "
                "firmer answer\n",
                fmt_size(need, a, sizeof a), vram_strategy_name(r->strategy),
                fmt_size(r->oom_reserved, b, sizeof b));
        break;
    case AN_OOM_WITHIN_RESERVED:
        fprintf(out,
                "  why: live + request = %s is within what %s reserved before in the "
                "replay (%s): the memory existed, likely in pieces (fragmentation); try "
                "VRAM_STRATEGY=expandable, or give the cap with --limit\n",
                fmt_size(need, a, sizeof a), vram_strategy_name(r->strategy),
                fmt_size(r->oom_reserved, b, sizeof b));
        break;
    case AN_OOM_NONE:
        break;
    }
    if (r->n_oom_classes > 0) {
        fprintf(out, "  live then, by size class:\n");
        print_classes(out, r->oom_classes, r->n_oom_classes);
    }
    if (r->n_oom_largest > 0) {
        fprintf(out, "  largest live allocations then:\n");
        for (size_t i = 0; i < r->n_oom_largest && i < 5; i++) {
            const struct an_suspect *s = &r->oom_largest[i];
            if (s->born == AN_NO_ITER)
                snprintf(c, sizeof c, "before the first iteration");
            else
                snprintf(c, sizeof c, "in iteration %u", s->born + 1);
            fprintf(out, "    id %-10llu %12s  born %s\n", (unsigned long long)s->id,
                    fmt_size(s->size, a, sizeof a), c);
        }
    }
}

void
an_print_text(FILE *out, const struct an_result *r)
{
    if (out == NULL || r == NULL)
        return;
    const struct trace *t = r->trace;
    char a[32], b[32], c[32];
    if (t != NULL)
        fprintf(out, "trace      %s: %llu events, %u allocations, %d device%s\n", t->path,
                (unsigned long long)t->n_events, t->n_slots, t->n_devices,
                t->n_devices == 1 ? "" : "s");
    fprintf(out, "peak       %s live at %.3f s (event %llu",
            fmt_size(r->peak_bytes, a, sizeof a), rel_s(r, r->peak_time_us),
            (unsigned long long)(r->peak_event + 1));
    if (r->peak_iter != SIZE_MAX)
        fprintf(out, ", iteration %zu", r->peak_iter + 1);
    fprintf(out, ")\n");
    if (r->n_peak_classes > 0) {
        fprintf(out, "  live then, by size class:\n");
        print_classes(out, r->peak_classes, r->n_peak_classes);
    }
    if (r->n_peak_origins > 0) {
        fprintf(out, "  live then, by the phase that allocated it:\n");
        for (size_t i = 0; i < r->n_peak_origins && i < TEXT_ROWS; i++)
            fprintf(out, "    %-32s %6llu allocation%s %s\n",
                    label_text(t, r->peak_origins[i].label),
                    (unsigned long long)r->peak_origins[i].count,
                    r->peak_origins[i].count == 1 ? " " : "s",
                    fmt_size(r->peak_origins[i].bytes, a, sizeof a));
    }
    if (r->n_phases > 0) {
        fprintf(out, "phases     %zu, from %llu marks:\n", r->n_phases,
                (unsigned long long)(t != NULL ? t->n_marks : 0));
        print_phases(out, r);
    }
    if (r->iters_from_marks)
        fprintf(out, "iterations %zu, from the marks\n", r->n_iters);
    else if (r->iters_from_floor)
        fprintf(out,
                "iterations %zu, detected where live bytes come back to their floor of "
                "%s (requests)\n",
                r->n_iters, fmt_size(r->floor_bytes, a, sizeof a));
    else if (r->period_events > 0)
        fprintf(out,
                "iterations %zu, detected: the events repeat every %llu events (%.0f%% "
                "match)\n",
                r->n_iters, (unsigned long long)r->period_events,
                100.0 * r->period_match);
    else
        fprintf(out, "iterations %zu: no marks and no repeating pattern\n", r->n_iters);
    if (r->leak_iters_used >= 2) {
        /* Over the iterations of the leak fit: 1 .. leak_iters_used. */
        size_t first = 1, last = r->leak_iters_used, lo = first, hi = first;
        for (size_t i = first; i <= last; i++) {
            if (r->iters[i].min_live < r->iters[lo].min_live)
                lo = i;
            if (r->iters[i].min_live > r->iters[hi].min_live)
                hi = i;
        }
        if (r->iters[lo].min_live == r->iters[hi].min_live)
            fprintf(out, "  quietest point of iterations %zu..%zu: %s in every one\n",
                    first + 1, last + 1, fmt_size(r->iters[lo].min_live, a, sizeof a));
        else
            fprintf(
                out,
                "  quietest point of iterations %zu..%zu: from %s (iteration %zu) to %s "
                "(iteration %zu)\n",
                first + 1, last + 1, fmt_size(r->iters[lo].min_live, a, sizeof a), lo + 1,
                fmt_size(r->iters[hi].min_live, b, sizeof b), hi + 1);
    }
    print_leak(out, r);
    fprintf(out, "replay     %s: peak reserved %s for %s live: fragmentation %.3f",
            vram_strategy_name(r->strategy), fmt_size(r->peak_reserved, a, sizeof a),
            fmt_size(r->peak_bytes, b, sizeof b), r->fragmentation);
    if (r->replay_ooms > 0)
        fprintf(out, ", %llu allocations refused", (unsigned long long)r->replay_ooms);
    fprintf(out, "\n");
    /* Over time: the most reserved beyond what was live, per point. */
    size_t worst = SIZE_MAX;
    for (size_t i = 0; i < r->n_points; i++) {
        const struct an_point *pt = &r->points[i];
        if (pt->reserved > pt->live &&
            (worst == SIZE_MAX ||
             pt->reserved - pt->live > r->points[worst].reserved - r->points[worst].live))
            worst = i;
    }
    if (worst != SIZE_MAX)
        fprintf(out,
                "  over time: at most %s reserved beyond live, at %.3f s (%s reserved, "
                "%s live)\n",
                fmt_size(r->points[worst].reserved - r->points[worst].live, a, sizeof a),
                rel_s(r, r->points[worst].t_us),
                fmt_size(r->points[worst].reserved, b, sizeof b),
                fmt_size(r->points[worst].live, c, sizeof c));
    if (r->n_devices > 1) {
        fprintf(out, "devices    peak live per device:");
        for (int d = 0; d < r->n_devices; d++)
            fprintf(out, " %d: %s%s", d, fmt_size(r->device_peaks[d], a, sizeof a),
                    d + 1 < r->n_devices ? "," : "\n");
    }
    print_oom(out, r);
}

/* ------------------------------------------------------------------ */
/* JSON                                                                 */
/* ------------------------------------------------------------------ */

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

static const char *
iter_source(const struct an_result *r)
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

static struct json_object *
json_u64(uint64_t v)
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
        json_object_object_add(o, "lo", json_u64(c[i].lo));
        json_object_object_add(o, "hi", json_u64(c[i].hi));
        json_object_object_add(o, "count", json_u64(c[i].count));
        json_object_object_add(o, "bytes", json_u64(c[i].bytes));
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
        json_object_object_add(o, "id", json_u64(s[i].id));
        json_object_object_add(o, "size", json_u64(s[i].size));
        json_object_object_add(
            o, "born_iteration",
            s[i].born == AN_NO_ITER ? NULL : json_u64((uint64_t)s[i].born + 1));
        json_object_object_add(o, "t_us", json_u64(s[i].t_us));
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
static struct json_object *
result_json(const struct an_result *r)
{
    const struct trace *t = r->trace;
    struct json_object *o = json_object_new_object();
    if (o == NULL)
        return NULL;
    if (t != NULL) {
        json_object_object_add(o, "trace", json_object_new_string(t->path));
        json_object_object_add(o, "events", json_u64(t->n_events));
        json_object_object_add(o, "allocations", json_u64(t->n_slots));
        json_object_object_add(o, "marks", json_u64(t->n_marks));
    }
    json_object_object_add(o, "peak_bytes", json_u64(r->peak_bytes));
    json_object_object_add(o, "peak_time_us", json_u64(r->peak_time_us));
    json_object_object_add(
        o, "peak_offset_us",
        json_u64(t != NULL && t->n_events > 0 && r->peak_time_us >= t->events[0].t_us
                     ? r->peak_time_us - t->events[0].t_us
                     : 0));
    json_object_object_add(o, "peak_event", json_event(r->peak_event));
    json_object_object_add(
        o, "peak_iteration",
        r->peak_iter == SIZE_MAX ? NULL : json_u64((uint64_t)r->peak_iter + 1));
    json_object_object_add(o, "peak_classes",
                           json_classes(r->peak_classes, r->n_peak_classes));
    struct json_object *origins = json_object_new_array();
    for (size_t i = 0; i < r->n_peak_origins; i++) {
        struct json_object *g = json_object_new_object();
        json_object_object_add(g, "label", json_label(t, r->peak_origins[i].label));
        json_object_object_add(g, "count", json_u64(r->peak_origins[i].count));
        json_object_object_add(g, "bytes", json_u64(r->peak_origins[i].bytes));
        json_object_array_add(origins, g);
    }
    json_object_object_add(o, "peak_by_phase", origins);

    json_object_object_add(o, "iterations", json_u64(r->n_iters));
    json_object_object_add(o, "iterations_from", json_object_new_string(iter_source(r)));
    json_object_object_add(o, "period_events", json_u64(r->period_events));
    json_object_object_add(o, "period_match", json_num(r->period_match, 4));
    json_object_object_add(o, "floor_bytes", json_u64(r->floor_bytes));
    json_object_object_add(o, "leak", json_object_new_boolean(r->leak));
    json_object_object_add(
        o, "leak_bytes_per_iteration",
        json_object_new_int64((int64_t)llround(r->leak_bytes_per_iter)));
    json_object_object_add(o, "leak_r2", json_num(r->leak_r2, 4));
    json_object_object_add(o, "leak_iterations_fitted", json_u64(r->leak_iters_used));
    json_object_object_add(o, "leak_capacity_bytes",
                           r->leak ? json_u64(r->leak_capacity) : NULL);
    json_object_object_add(o, "leak_iterations_to_full",
                           r->leak ? json_u64((uint64_t)llround(r->leak_iters_to_full))
                                   : NULL);
    json_object_object_add(o, "suspect_bytes", json_u64(r->suspect_bytes));
    json_object_object_add(o, "suspects", json_allocs(r->suspects, r->n_suspects));

    struct json_object *iters = json_object_new_array();
    for (size_t i = 0; i < r->n_iters; i++) {
        const struct an_iter *it = &r->iters[i];
        struct json_object *j = json_object_new_object();
        json_object_object_add(j, "first_event", json_event(it->first_event));
        json_object_object_add(j, "last_event", json_event(it->last_event));
        json_object_object_add(j, "t_start_us", json_u64(it->t_start_us));
        json_object_object_add(j, "t_end_us", json_u64(it->t_end_us));
        json_object_object_add(j, "min_live_bytes", json_u64(it->min_live));
        json_object_object_add(j, "peak_live_bytes", json_u64(it->peak_live));
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
        json_object_object_add(j, "peak_bytes", json_u64(p->peak_live));
        json_object_array_add(phases, j);
    }
    json_object_object_add(o, "phases", phases);

    json_object_object_add(o, "strategy",
                           json_object_new_string(vram_strategy_name(r->strategy)));
    json_object_object_add(o, "peak_reserved_bytes", json_u64(r->peak_reserved));
    json_object_object_add(o, "fragmentation", json_num(r->fragmentation, 4));
    json_object_object_add(o, "replay_ooms", json_u64(r->replay_ooms));
    struct json_object *devs = json_object_new_array();
    for (int d = 0; d < r->n_devices; d++)
        json_object_array_add(devs, json_u64(r->device_peaks[d]));
    json_object_object_add(o, "device_peak_bytes", devs);

    json_object_object_add(o, "ends_in_oom", json_object_new_boolean(r->ends_in_oom));
    if (r->ends_in_oom) {
        struct json_object *j = json_object_new_object();
        json_object_object_add(j, "request_bytes", json_u64(r->oom_request));
        json_object_object_add(j, "live_bytes", json_u64(r->oom_live));
        json_object_object_add(j, "time_us", json_u64(r->oom_time_us));
        json_object_object_add(j, "event", json_event(r->oom_event));
        json_object_object_add(j, "device", json_object_new_int(r->oom_device));
        json_object_object_add(j, "cap_bytes",
                               r->oom_cap > 0 ? json_u64(r->oom_cap) : NULL);
        json_object_object_add(j, "reserved_bytes", json_u64(r->oom_reserved));
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
        json_object_array_add(ts, json_u64(r->points[i].t_us));
        json_object_array_add(lv, json_u64(r->points[i].live));
        json_object_array_add(rs, json_u64(r->points[i].reserved));
    }
    json_object_object_add(tl, "t_us", ts);
    json_object_object_add(tl, "live_bytes", lv);
    json_object_object_add(tl, "reserved_bytes", rs);
    json_object_object_add(o, "timeline", tl);
    return o;
}

static int
put_json(FILE *out, struct json_object *o)
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
    return put_json(out, result_json(r));
}

/* ------------------------------------------------------------------ */
/* Comparing two runs                                                   */
/* ------------------------------------------------------------------ */

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
    struct an_compare *c = calloc(1, sizeof *c);
    size_t max_phases = a->n_phases + b->n_phases;
    size_t max_classes = a->n_peak_classes + b->n_peak_classes;
    if (c != NULL) {
        c->phases = calloc(max_phases > 0 ? max_phases : 1, sizeof *c->phases);
        c->classes = calloc(max_classes > 0 ? max_classes : 1, sizeof *c->classes);
    }
    if (c == NULL || c->phases == NULL || c->classes == NULL) {
        an_compare_free(c);
        return no_memory();
    }
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
    if (c == NULL)
        return;
    free(c->phases);
    free(c->classes);
    free(c);
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
    fmt_signed((double)b - (double)a, d, sizeof d);
    if (a > 0)
        snprintf(buf, len, "%s (%+.1f%%)", d,
                 100.0 * ((double)b - (double)a) / (double)a);
    else
        snprintf(buf, len, "%s (new)", d);
    return buf;
}

static void
cmp_line(FILE *out, const char *name, uint64_t a, uint64_t b, bool in_a, bool in_b)
{
    char x[32], y[32], z[64];
    fprintf(out, "  %-32s %14s %14s  %s\n", name, in_a ? fmt_size(a, x, sizeof x) : "-",
            in_b ? fmt_size(b, y, sizeof y) : "-", fmt_change(a, b, z, sizeof z));
}

void
an_print_compare_text(FILE *out, const struct an_compare *c)
{
    if (out == NULL || c == NULL)
        return;
    const struct an_result *a = c->a, *b = c->b;
    char name[80];
    fprintf(out, "A  %s\nB  %s\n\n", a->trace != NULL ? a->trace->path : "?",
            b->trace != NULL ? b->trace->path : "?");
    fprintf(out, "  %-32s %14s %14s  %s\n", "", "A", "B", "change (B - A)");
    cmp_line(out, "peak live", a->peak_bytes, b->peak_bytes, true, true);
    snprintf(name, sizeof name, "peak reserved (%s)", vram_strategy_name(a->strategy));
    cmp_line(out, name, a->peak_reserved, b->peak_reserved, true, true);
    cmp_line(out, "least live per iteration, last",
             a->n_iters > 0 ? a->iters[a->n_iters - 1].min_live : 0,
             b->n_iters > 0 ? b->iters[b->n_iters - 1].min_live : 0, a->n_iters > 0,
             b->n_iters > 0);
    fprintf(out, "  %-32s %14zu %14zu\n", "iterations", a->n_iters, b->n_iters);
    char la[32], lb[32];
    snprintf(la, sizeof la, "%s", a->leak ? "yes" : "no");
    snprintf(lb, sizeof lb, "%s", b->leak ? "yes" : "no");
    fprintf(out, "  %-32s %14s %14s\n", "leak", la, lb);
    if (c->n_phases > 0) {
        fprintf(out, "\nphase peaks (by mark label; the largest of each):\n");
        for (size_t i = 0; i < c->n_phases; i++) {
            const struct an_cmp_row *row = &c->phases[i];
            cmp_line(out, row->label != NULL ? row->label : "(before the first mark)",
                     row->a, row->b, row->in_a, row->in_b);
        }
    }
    if (c->n_classes > 0) {
        fprintf(out, "\nlive at the peak by size class:\n");
        for (size_t i = 0; i < c->n_classes; i++) {
            const struct an_cmp_row *row = &c->classes[i];
            char lo[32], hi[32];
            fmt_size(row->lo, lo, sizeof lo);
            if (row->hi == UINT64_MAX)
                snprintf(hi, sizeof hi, "...");
            else
                fmt_size(row->hi, hi, sizeof hi);
            snprintf(name, sizeof name, "[%s, %s)", lo, hi);
            cmp_line(out, name, row->a, row->b, row->in_a, row->in_b);
        }
    }
}

/* {"a": A, "b": B, "delta": B - A} for one quantity. */
static struct json_object *
json_pair(uint64_t a, uint64_t b)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "a", json_u64(a));
    json_object_object_add(o, "b", json_u64(b));
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
            json_object_object_add(o, "lo", json_u64(row->lo));
            json_object_object_add(o, "hi", json_u64(row->hi));
        } else {
            json_object_object_add(o, "label",
                                   row->label != NULL ? json_object_new_string(row->label)
                                                      : NULL);
        }
        json_object_object_add(o, "a", row->in_a ? json_u64(row->a) : NULL);
        json_object_object_add(o, "b", row->in_b ? json_u64(row->b) : NULL);
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
    json_object_object_add(o, "a", result_json(c->a));
    json_object_object_add(o, "b", result_json(c->b));
    struct json_object *d = json_object_new_object();
    json_object_object_add(d, "peak_bytes",
                           json_pair(c->a->peak_bytes, c->b->peak_bytes));
    json_object_object_add(d, "peak_reserved_bytes",
                           json_pair(c->a->peak_reserved, c->b->peak_reserved));
    json_object_object_add(d, "iterations", json_pair(c->a->n_iters, c->b->n_iters));
    json_object_object_add(o, "delta", d);
    json_object_object_add(o, "phases", json_rows(c->phases, c->n_phases, false));
    json_object_object_add(o, "classes", json_rows(c->classes, c->n_classes, true));
    return put_json(out, o);
}
