/* SPDX-License-Identifier: MIT */
/*
** period.c -- the iterations of a trace (step 3 of analyze.c): from its
** marks when it has them; else the period of the event stream (an
** autocorrelation of hashed (op, size) tokens, O(n log n) by FFT, checked
** exactly on a few candidates) cut at the quietest point of each period;
** or, for inference requests of varying length, the points where live
** bytes come back to their floor (docs/ANALYZE.md explains both to users).
*/
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "analyze/analyze.h"
#include "analyze/analyze_internal.h"

/* Shortest period, in events, taken for an iteration: one. A Python loop
** that keeps one tensor a step and makes one temporary has steps of three
** events (recorded with cudaMallocAsync: a 30-step loop leaking 4 MiB a
** step); a floor of 8 made three steps one iteration of 12 MiB. Short lags
** that only match within a step (a run of equal allocations) lose to the
** step, which matches all of it, and a divisor of the best lag is taken
** only when it matches almost as well (PERIOD_DIVISOR_SHARE). */
#define PERIOD_MIN 1
/* Least fraction of events equal to the event one period later. */
#define PERIOD_MATCH_MIN 0.5
/* Lags of the FFT estimate checked exactly. */
#define PERIOD_CANDIDATES 16
/* Up to this many events every lag is checked exactly (no FFT). */
#define PERIOD_EXACT_MAX_EVENTS 4096
/* A divisor of the best period is preferred when it matches this well. */
#define PERIOD_DIVISOR_SHARE 0.95
/* The shape of the stream is taken over its sizes when it matches this
** much better (a share of all events). */
#define PERIOD_SHAPE_GAIN 0.1

/* The floor: live bytes within max(1 MiB, floor / 1000) of the least. */
#define FLOOR_TOL_MIN MIB
/* Floor segmentation is taken over the period when segments are at
** least this many periods long (requests, not steps). */
#define FLOOR_MIN_PERIODS 3
/* ...and segments shorter than the median over this are merged. */
#define FLOOR_SHORT_DIVISOR 8

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

/* Events further apart than this count as "far" in a shape token. */
#define SHAPE_FAR (1ULL << 24)

/*
** The shape token of each event: its op and how many events away its
** partner is (an allocation's free, a free's allocation; none: never
** freed), sizes left out. A step whose tensors change size with the batch
** (sequences of varying length, the last short batch) repeats its shape
** exactly where its sizes never repeat: on a recorded transformer-like
** loop the sizes matched 58% at the step, too little to tell the steps
** from one another, the shape 100%. Into TOK (w->n entries).
*/
static void
shape_tokens(const struct work *w, uint64_t *tok)
{
    const struct trace *t = w->t;
    for (uint64_t i = 0; i < w->n; i++)
        tok[i] = mix64((uint64_t)(unsigned char)t->events[i].op | SHAPE_FAR << 8);
    for (uint64_t i = 0; i < w->n; i++) {
        const struct trace_event *ev = &t->events[i];
        if (ev->op != TRACE_FREE || ev->slot >= t->n_slots)
            continue;
        uint64_t born = w->born_event[ev->slot]; /* the last allocation of the slot */
        if (born >= i)
            continue;
        uint64_t d = i - born < SHAPE_FAR ? i - born : SHAPE_FAR;
        tok[i] = mix64((uint64_t)(unsigned char)TRACE_FREE | d << 8);
        tok[born] = mix64((uint64_t)(unsigned char)TRACE_ALLOC | d << 8);
    }
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
** The period of the token stream TOK (N tokens): the lag in
** [PERIOD_MIN, n/3] at which the most tokens equal the token one lag
** later, preferring a divisor of it that matches almost as well.
** *PERIOD = 0 when no lag reaches PERIOD_MATCH_MIN.
*/
static vram_status
detect_period(const uint64_t *tok, uint64_t n, uint64_t *period, double *rate)
{
    *period = 0;
    *rate = 0.0;
    uint64_t max_lag = n / 3;
    if (max_lag < PERIOD_MIN)
        return VRAM_OK;
    double *est = malloc((max_lag + 1) * sizeof *est);
    if (est == NULL)
        return no_memory();

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
** The period of the steady state: detected on the whole trace and on its
** second half, whichever repeats better. A program's warm-up comes first
** and can fill a third of a short recording: a JIT compiler's autotuning
** (rounds of trial workspaces that repeat on a period of their own, four
** steps long in a recorded JAX step), cuDNN's benchmark runs, the first
** allocations of every buffer. Over the whole trace it dilutes the steps'
** match and can make a multiple of the step, or the warm-up's own period,
** win; the second half holds the steps alone.
*/
static vram_status
steady_period(const uint64_t *tok, uint64_t n, uint64_t *period, double *rate)
{
    vram_status s = detect_period(tok, n, period, rate);
    if (s != VRAM_OK)
        return s;
    uint64_t half_period = 0;
    double half_rate = 0.0;
    s = detect_period(tok + n / 2, n - n / 2, &half_period, &half_rate);
    if (s == VRAM_OK && half_period > 0 && half_rate > *rate) {
        *period = half_period;
        *rate = half_rate;
    }
    return s;
}

/*
** The steady stretch [*LO, *HI) of a stream with period P: the longest run
** of consecutive windows of P events (counted back from the end) in which
** at least PERIOD_MATCH_MIN of the events equal the event one period
** before or after, and which both allocate and free (a step makes and
** drops at least one temporary). Before it: the warm-up (a JIT compiler's
** autotuning repeats on a period of its own, not the steps), or a program
** loading its weights (allocations alone, often of one size: they repeat
** at any period); after it: a teardown, which only frees (an interpreter
** releasing the arrays a program kept, all of one size, repeats at any
** period). False when no two such windows follow each other: the period
** is no step's.
*/
static bool
steady_stretch(struct work *w, const uint64_t *tok, uint64_t p, double rate, uint64_t *lo,
               uint64_t *hi)
{
    /* A window is steady when it matches at least half as well as the
    ** whole stream does (half of all its events for a stream that repeats
    ** exactly): steps whose sizes vary match less everywhere, and a
    ** warm-up or a teardown still much less than they. */
    double need = PERIOD_MATCH_MIN * (rate < 1.0 ? rate : 1.0);
    uint64_t n = w->n, windows = n / p;
    *lo = 0;
    *hi = n;
    uint64_t run = 0, best = 0, best_end = 0; /* windows, counted from the end */
    for (uint64_t j = 0; j < windows; j++) {
        uint64_t start = n - (j + 1) * p, m = 0;
        bool allocates = false, frees = false;
        for (uint64_t i = start; i < start + p; i++) {
            m += (i + p < n && tok[i] == tok[i + p]) || (i >= p && tok[i] == tok[i - p]);
            allocates |= w->t->events[i].op == TRACE_ALLOC;
            frees |= w->t->events[i].op == TRACE_FREE;
        }
        if (allocates && frees && (double)m >= need * (double)p) {
            if (++run > best) {
                best = run;
                best_end = j + 1 - run; /* the run's last window */
            }
        } else {
            run = 0;
        }
    }
    if (best < 2)
        return false;
    *hi = n - best_end * p;
    *lo = *hi - best * p;
    /* A window can hold both the last step and the first frees of a
     * teardown: the stretch ends at its last allocation. */
    while (*hi > *lo + 1 && w->t->events[*hi - 1].op != TRACE_ALLOC)
        (*hi)--;
    return true;
}

/*
** Cuts for period P within its steady stretch [LO, HI) (steady_stretch):
** the quietest phase of the period over the stretch's windows, then one
** cut per period at the least live bytes within P/4 of where the period
** puts it, following any drift, within the stretch. What comes before it
** is the first iteration (a warm-up, however long: a compiler's), what
** comes after the last.
*/
static vram_status
cuts_by_period(struct work *w, uint64_t p, uint64_t lo, uint64_t hi, struct u64_list *cuts)
{
    uint64_t n = w->n;
    uint64_t m = (hi - lo) / p, s0 = hi - m * p;
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
    /* Backwards from the anchor to the start of the stretch... */
    uint64_t c = anchor;
    while (c >= p && c - p + q >= lo) {
        uint64_t e = c - p;
        uint64_t lo_e = e > q ? e - q : 0, hi_e = e + q < c ? e + q : c - 1;
        uint64_t at = argmin_live(w->live, lo_e, hi_e);
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
    /* ...then forwards to its end. */
    c = anchor;
    for (;;) {
        if (!list_push(cuts, c))
            return no_memory();
        uint64_t e = c + p;
        if (e >= hi)
            break;
        uint64_t lo_e = e - q > c ? e - q : c + 1, hi_e = e + q < hi ? e + q : hi - 1;
        c = argmin_live(w->live, lo_e, hi_e);
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

vram_status
an_find_iterations(struct work *w, struct an_result *r)
{
    bool done = false;
    vram_status s = an_iters_by_marks(w, r, &done);
    if (s != VRAM_OK || done)
        return s;

    uint64_t period = 0, shape_period = 0;
    double rate = 0.0, shape_rate = 0.0;
    uint64_t *tok = malloc((w->n > 0 ? w->n : 1) * sizeof *tok);
    uint64_t *shape = malloc((w->n > 0 ? w->n : 1) * sizeof *shape);
    if (tok == NULL || shape == NULL) {
        free(tok);
        free(shape);
        return no_memory();
    }
    for (uint64_t i = 0; i < w->n; i++)
        tok[i] = token_of(&w->t->events[i]);
    shape_tokens(w, shape);
    /* The sizes first; the shape where it repeats clearly better (steps of
    ** varying sizes), so only where it can. A period is a step's only when
    ** it has a steady stretch. */
    uint64_t lo = 0, hi = 0, shape_lo = 0, shape_hi = 0;
    s = steady_period(tok, w->n, &period, &rate);
    if (s == VRAM_OK && period > 0 && !steady_stretch(w, tok, period, rate, &lo, &hi))
        period = 0, rate = 0.0;
    if (s == VRAM_OK && rate + PERIOD_SHAPE_GAIN <= 1.0)
        s = steady_period(shape, w->n, &shape_period, &shape_rate);
    if (s == VRAM_OK && shape_period > 0 &&
        !steady_stretch(w, shape, shape_period, shape_rate, &shape_lo, &shape_hi))
        shape_period = 0;
    free(tok);
    free(shape);
    if (s != VRAM_OK)
        return s;
    if (shape_period > 0 && shape_rate >= rate + PERIOD_SHAPE_GAIN) {
        period = shape_period;
        rate = shape_rate;
        lo = shape_lo;
        hi = shape_hi;
        r->period_from_shape = true;
    }

    struct u64_list floor_cuts = {0}, cuts = {0};
    bool floor_ok = false;
    uint64_t floor = 0;
    uint64_t min_len = period > 0 ? period : 8;
    s = cuts_by_floor(w, min_len, &floor_cuts, &floor, &floor_ok);
    if (s == VRAM_OK && floor_ok &&
        (period == 0 ||
         median_segment(&floor_cuts, w->n) >= FLOOR_MIN_PERIODS * period)) {
        r->iters_from_floor = true;
        r->period_from_shape = false;
        r->floor_bytes = floor;
        r->period_match = rate;
        w->last_partial = w->live[w->n - 1] > floor + floor_tolerance(floor);
        s = an_iters_from_cuts(w, r, 0, floor_cuts.v, floor_cuts.n);
    } else if (s == VRAM_OK && period > 0) {
        s = cuts_by_period(w, period, lo, hi, &cuts);
        if (s == VRAM_OK) {
            r->period_events = period;
            r->period_match = rate;
            /* The last iteration is what follows the last quiet point
             * found: the recording stopped before its own. */
            w->last_partial = true;
            s = an_iters_from_cuts(w, r, 0, cuts.v, cuts.n);
        }
    } else if (s == VRAM_OK) {
        s = an_iters_from_cuts(w, r, 0, NULL, 0); /* one iteration: the whole trace */
    }
    free(floor_cuts.v);
    free(cuts.v);
    return s;
}
