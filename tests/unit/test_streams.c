/* SPDX-License-Identifier: MIT */
/*
** test_streams.c -- the stream rule (vram.h, "Streams") on the simulated
** device with events that complete after two queries: same-stream reuse
** at once, cross-stream reuse only after the free's event completed, and
** no event at all while one stream is in use. Then the streams a block is
** used on (vram_record_stream), with a spy on the backend's events that
** can hold one stream's work back; CUDA graph pools (vram_pool_begin);
** vram_set_limit and vram_block_base.
*/
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "testutil.h"

#define S1 ((void *)0x1001)
#define S2 ((void *)0x1002)
#define S3 ((void *)0x1003)
#define SC ((void *)0x10c0) /* the stream that captures a graph */

static vram_device *
open_streams(vram_context **ctx, vram_strategy strategy)
{
    vram_options o;
    memset(&o, 0, sizeof o);
    o.backend = VRAM_BACKEND_SIM;
    o.ignore_environment = true;
    o.sim.memory_bytes = 1 * GiB;
    o.sim.event_queries = 2;
    assert_int_equal(vram_open(&o, ctx), VRAM_OK);
    return sim_device(*ctx, strategy, 256 * MiB);
}

static void
run_rule(vram_strategy strategy)
{
    vram_context *ctx;
    vram_device *dev = open_streams(&ctx, strategy);
    void *a, *b, *c, *d;
    /* One stream: a free is reusable at once. */
    assert_int_equal(vram_alloc(dev, 4 * MiB, S1, &a), VRAM_OK);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 4 * MiB, S1, &b), VRAM_OK);
    assert_ptr_equal(a, b);

    /* A second stream appears. */
    assert_int_equal(vram_alloc(dev, 1 * MiB, S2, &c), VRAM_OK);
    /* Freed on S1: S1 may take it back at once. */
    assert_int_equal(vram_free(dev, b), VRAM_OK);
    assert_int_equal(stats_of(dev).bytes_in_use, 1 * MiB); /* pending is not in use */
    assert_int_equal(vram_alloc(dev, 4 * MiB, S1, &d), VRAM_OK);
    assert_ptr_equal(d, b);

    /* Freed on S1 again: S2 must not get it before the event completes. */
    assert_int_equal(vram_free(dev, d), VRAM_OK);
    assert_int_equal(vram_free(dev, d), VRAM_E_BAD_POINTER); /* pending: not live */
    void *e;
    assert_int_equal(vram_alloc(dev, 4 * MiB, S2, &e), VRAM_OK); /* query 1: not done */
    assert_ptr_not_equal(e, d);
    void *f;
    assert_int_equal(vram_alloc(dev, 16 * 1024, S2, &f), VRAM_OK); /* query 2: done */
    void *g;
    assert_int_equal(vram_alloc(dev, 4 * MiB, S2, &g), VRAM_OK); /* now S2 may reuse it */
    if (strategy == VRAM_STRATEGY_GROWTH)
        assert_ptr_equal(g, d); /* its region's only free block */
    assert_true(vram_check(dev));
    assert_int_equal(vram_free(dev, c), VRAM_OK);
    assert_int_equal(vram_free(dev, e), VRAM_OK);
    assert_int_equal(vram_free(dev, f), VRAM_OK);
    assert_int_equal(vram_free(dev, g), VRAM_OK);
    vram_close(ctx); /* pending events are destroyed (ASan: no leak) */
}

static void
test_stream_rule_growth(void **state)
{
    (void)state;
    run_rule(VRAM_STRATEGY_GROWTH);
}

static void
test_stream_rule_expandable(void **state)
{
    (void)state;
    run_rule(VRAM_STRATEGY_EXPANDABLE);
}

/* Before an OOM every pending event is queried, so memory freed on another
** stream serves the request once its work is done. */
static void
test_pending_before_oom(void **state)
{
    (void)state;
    vram_context *ctx;
    vram_device *dev = open_streams(&ctx, VRAM_STRATEGY_GROWTH);
    void *a, *b, *c;
    assert_int_equal(vram_alloc(dev, 200 * MiB, S1, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 1 * MiB, S2, &b), VRAM_OK);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    /* The cap leaves 54 MiB without a: the poll before the OOM finds a's
    ** event done (its second query) and the allocation succeeds in a's
    ** region. */
    assert_int_equal(vram_alloc(dev, 150 * MiB, S2, &c), VRAM_OK);
    assert_int_equal(stats_of(dev).regions, 2);
    assert_int_equal(stats_of(dev).num_ooms, 0);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* ------------------------------------------------------------------ */
/* A spy on the backend's events                                        */
/* ------------------------------------------------------------------ */

/* Every event recorded, with its stream; a "busy" stream's events stay
** incomplete however often they are queried. */
static struct {
    const struct backend_ops *real;
    struct backend_ops ops;
    struct {
        uint64_t event;
        void *stream;
    } rec[4096];
    int n;    /* records */
    int seen; /* records spy_streams has reported */
    void *busy;
    int busy_from; /* only BUSY's records from this one on stay incomplete */
    int lag_from;  /* every record from this one on stays incomplete (0: none) */
} spy;

static vram_status
spy_record(struct backend *b, int dev, uint64_t stream, uint64_t *event)
{
    vram_status st = spy.real->event_record(b, dev, stream, event);
    if (st == VRAM_OK && spy.n < 4096) {
        spy.rec[spy.n].event = *event;
        spy.rec[spy.n].stream = (void *)(uintptr_t)stream;
        spy.n++;
    }
    return st;
}

static vram_status
spy_query(struct backend *b, int dev, uint64_t event, bool *done)
{
    for (int i = spy.n - 1; i >= 0; i--) {
        if (spy.rec[i].event != event)
            continue; /* the newest record of a handle is the event's */
        if ((spy.busy != NULL && spy.rec[i].stream == spy.busy && i >= spy.busy_from) ||
            (spy.lag_from > 0 && i >= spy.lag_from)) {
            *done = false;
            return VRAM_OK;
        }
        break;
    }
    return spy.real->event_query(b, dev, event, done);
}

/* Streams with events recorded since the last call, as a bit set of
** S1 (1), S2 (2), S3 (4). */
static int
spy_streams(void)
{
    int set = 0;
    for (int i = spy.seen; i < spy.n; i++)
        set |= spy.rec[i].stream == S1   ? 1
                : spy.rec[i].stream == S2 ? 2
                : spy.rec[i].stream == S3 ? 4
                                          : 0; /* churn's */
    spy.seen = spy.n;
    return set;
}

/* Pending frees still waiting for a stream recorded by vram_record_stream. */
static int
held_for_other_streams(vram_device *dev)
{
    int n = 0;
    for (uint64_t k = 0; k < dev->pend_len; k++) {
        const struct pending *p = &dev->pend[(dev->pend_head + k) & (dev->pend_cap - 1)];
        n += p->b != NULL && p->n_more > 0;
    }
    return n;
}

static vram_device *
open_spied(vram_context **ctx, vram_strategy strategy)
{
    vram_device *dev = open_streams(ctx, strategy);
    memset(&spy, 0, sizeof spy);
    struct backend *be = (*ctx)->backend;
    spy.real = be->ops;
    spy.ops = *be->ops;
    spy.ops.event_record = spy_record;
    spy.ops.event_query = spy_query;
    be->ops = &spy.ops;
    return dev;
}

/* Allocations that no pending block can serve at once (a stream of their
** own each time, so none is reused on its stream: each polls the oldest
** pending frees), enough for their events to complete (the simulator's
** need two queries), then freed. */
static void
churn(vram_device *dev)
{
    static uintptr_t next = 0x2000;
    void *stream = (void *)next++;
    void *t[6];
    for (int i = 0; i < 6; i++)
        assert_int_equal(vram_alloc(dev, 4096ULL << (2 * i), stream, &t[i]), VRAM_OK);
    for (int i = 0; i < 6; i++)
        assert_int_equal(vram_free(dev, t[i]), VRAM_OK);
}

/* ------------------------------------------------------------------ */
/* vram_record_stream                                                   */
/* ------------------------------------------------------------------ */

/*
** One stream allocates, a side stream reads (record_stream), the block is
** freed on its own stream and the next allocation of its size comes on
** that same stream: it must not get the block while the side stream may
** still read it -- even on a device that has seen only one stream.
*/
static void
run_record(vram_strategy strategy)
{
    vram_context *ctx;
    vram_device *dev = open_spied(&ctx, strategy);
    void *a, *b, *c;
    assert_int_equal(vram_alloc(dev, 4 * MiB, S1, &a), VRAM_OK);
    assert_int_equal(vram_record_stream(dev, a, S2), VRAM_OK);
    assert_int_equal(vram_record_stream(dev, a, S2), VRAM_OK); /* twice: once */
    assert_int_equal(vram_record_stream(dev, a, S1), VRAM_OK); /* its own: nothing */
    spy.busy = S2; /* the side stream's work is still queued */
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(spy_streams(), 1 | 2); /* an event on each stream, once */
    assert_int_equal(stats_of(dev).bytes_in_use, 0); /* held, not in use */
    assert_int_equal(vram_alloc(dev, 4 * MiB, S1, &b), VRAM_OK);
    assert_ptr_not_equal(b, a); /* not even on its own stream */
    churn(dev);
    assert_int_equal(vram_alloc(dev, 4 * MiB, S2, &c), VRAM_OK);
    assert_ptr_not_equal(c, a);
    assert_true(vram_check(dev));
    /* The side stream finishes: the block comes back. */
    spy.busy = NULL;
    assert_int_equal(vram_free(dev, b), VRAM_OK);
    assert_int_equal(vram_free(dev, c), VRAM_OK);
    assert_int_equal(held_for_other_streams(dev), 1);
    churn(dev);
    assert_int_equal(held_for_other_streams(dev), 0); /* back in the heap */
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/*
** A training loop whose side stream reads each step's activations
** (record_stream) and runs up to two steps behind the main stream, as an
** overlapped pipeline does, while the host runs LAG steps ahead of the
** device (no synchronization in the loop): every event of the last LAG
** steps is still incomplete. Blocks freed on the main stream are reusable
** there at once (stream order), so once warm a step must reuse memory: no
** backend call (each one is a driver call of tens of microseconds).
*/
static void
run_overlap(vram_strategy strategy, int lag)
{
    vram_context *ctx;
    vram_device *dev = open_spied(&ctx, strategy);
    enum { STEPS = 40, N = 24 };
#define SIZE(i) ((size_t)(1 + ((i) * 7) % 13) * 256 * 1024)
    int start[STEPS];
    uint64_t warm_calls = 0;
    for (int step = 0; step < STEPS; step++) {
        start[step] = spy.n;
        spy.busy = S2;
        spy.busy_from = step >= 2 ? start[step - 2] : 0; /* two steps behind */
        spy.lag_from = lag > 0 && step >= lag ? start[step - lag] : lag > 0 ? 1 : 0;
        /* Forward: activations of many sizes; the side stream reads one.
        ** Backward: each gradient allocated before its activation is freed;
        ** then the gradients go. */
        void *act[N], *grad[N];
        for (int i = 0; i < N; i++)
            assert_int_equal(vram_alloc(dev, SIZE(i), S1, &act[i]), VRAM_OK);
        assert_int_equal(vram_record_stream(dev, act[3], S2), VRAM_OK);
        for (int i = N - 1; i >= 0; i--) {
            assert_int_equal(vram_alloc(dev, SIZE(i + 5), S1, &grad[i]), VRAM_OK);
            assert_int_equal(vram_free(dev, act[i]), VRAM_OK);
        }
        for (int i = 0; i < N; i++)
            assert_int_equal(vram_free(dev, grad[i]), VRAM_OK);
        if (step == STEPS / 2)
            warm_calls = stats_of(dev).backend_calls;
        assert_true(spy.n < 4000);
    }
    assert_int_equal(stats_of(dev).backend_calls, warm_calls);
    assert_true(vram_check(dev));
    spy.busy = NULL;
    spy.lag_from = 0;
    vram_close(ctx);
#undef SIZE
}

static void
test_overlap_growth(void **state)
{
    (void)state;
    run_overlap(VRAM_STRATEGY_GROWTH, 0);
    run_overlap(VRAM_STRATEGY_GROWTH, 8);
}

static void
test_overlap_expandable(void **state)
{
    (void)state;
    run_overlap(VRAM_STRATEGY_EXPANDABLE, 0);
    run_overlap(VRAM_STRATEGY_EXPANDABLE, 8);
}

static void
test_record_stream_growth(void **state)
{
    (void)state;
    run_record(VRAM_STRATEGY_GROWTH);
}

static void
test_record_stream_expandable(void **state)
{
    (void)state;
    run_record(VRAM_STRATEGY_EXPANDABLE);
}

/* Two side streams read one tensor: the block waits for both. */
static void
test_record_two_streams(void **state)
{
    (void)state;
    vram_context *ctx;
    vram_device *dev = open_spied(&ctx, VRAM_STRATEGY_GROWTH);
    void *a, *b;
    assert_int_equal(vram_alloc(dev, 8 * MiB, S1, &a), VRAM_OK);
    assert_int_equal(vram_record_stream(dev, a, S2), VRAM_OK);
    assert_int_equal(vram_record_stream(dev, a, S3), VRAM_OK);
    spy.busy = S3; /* S2 is done, S3 not */
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(spy_streams(), 1 | 2 | 4);
    churn(dev);
    assert_int_equal(vram_alloc(dev, 8 * MiB, S2, &b), VRAM_OK);
    assert_ptr_not_equal(b, a);
    assert_int_equal(vram_free(dev, b), VRAM_OK);
    assert_non_null(heap_lookup(&dev->heap, (uint64_t)(uintptr_t)a)); /* still held */
    spy.busy = NULL;
    assert_int_equal(held_for_other_streams(dev), 1);
    churn(dev);
    assert_int_equal(held_for_other_streams(dev), 0); /* back in the heap */
    assert_true(vram_check(dev));
    vram_close(ctx); /* events still pending are destroyed (ASan: no leak) */
}

static void
test_record_bad_pointer(void **state)
{
    (void)state;
    vram_context *ctx;
    vram_device *dev = open_streams(&ctx, VRAM_STRATEGY_GROWTH);
    void *a;
    assert_int_equal(vram_record_stream(NULL, NULL, S2), VRAM_E_INVALID);
    assert_int_equal(vram_record_stream(dev, (void *)0x1234, S2), VRAM_E_BAD_POINTER);
    assert_int_equal(vram_alloc(dev, MiB, S1, &a), VRAM_OK);
    assert_int_equal(vram_record_stream(dev, (char *)a + 256, S2), VRAM_E_BAD_POINTER);
    assert_int_equal(vram_record_stream(dev, a, S2), VRAM_OK);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_record_stream(dev, a, S3), VRAM_E_BAD_POINTER); /* freed */
    /* A block freed while recorded and closed before its events complete. */
    assert_int_equal(vram_alloc(dev, MiB, S1, &a), VRAM_OK);
    assert_int_equal(vram_record_stream(dev, a, S2), VRAM_OK);
    vram_close(ctx); /* live block with extras: freed at close (ASan) */
}

/* ------------------------------------------------------------------ */
/* Graph pools                                                          */
/* ------------------------------------------------------------------ */

static vram_device *
open_capture(vram_context **ctx, vram_strategy strategy)
{
    vram_options o;
    memset(&o, 0, sizeof o);
    o.backend = VRAM_BACKEND_SIM;
    o.ignore_environment = true;
    o.sim.memory_bytes = 1 * GiB;
    o.sim.event_queries = 2;
    o.sim.capture_stream = SC;
    assert_int_equal(vram_open(&o, ctx), VRAM_OK);
    return sim_device(*ctx, strategy, 512 * MiB);
}

/*
** A graph captured on SC allocates and frees intermediates; after the
** capture its memory must serve nothing else (the graph replays into it),
** while a later capture into the same pool reuses it; released, it goes
** back to everyone.
*/
static void
run_pool(vram_strategy strategy)
{
    vram_context *ctx;
    vram_device *dev = open_capture(&ctx, strategy);
    void *w, *x, *t1, *t2, *out, *y;
    assert_int_equal(vram_alloc(dev, 4 * MiB, S1, &w), VRAM_OK); /* before capture */
    assert_int_equal(vram_pool_begin(dev, 7), VRAM_OK);
    assert_int_equal(vram_pool_begin(dev, 7), VRAM_E_INVALID); /* open already */
    assert_int_equal(vram_alloc(dev, 2 * MiB, SC, &t1), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 2 * MiB, SC, &t2), VRAM_OK);
    assert_int_equal(vram_free(dev, t1), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 2 * MiB, SC, &out), VRAM_OK);
    assert_ptr_equal(out, t1); /* the pool reuses its own, in stream order */
    assert_int_equal(vram_free(dev, t2), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 2 * MiB, S1, &x), VRAM_OK); /* not capturing */
    assert_ptr_not_equal(x, t2);
    assert_true(vram_check(dev));
    assert_int_equal(vram_pool_end(dev, 7), VRAM_OK);
    assert_int_equal(vram_pool_end(dev, 7), VRAM_E_INVALID);
    /* After the capture: the graph's memory is not handed out. */
    void *z;
    assert_int_equal(vram_alloc(dev, 2 * MiB, S1, &z), VRAM_OK);
    assert_ptr_not_equal(z, t2);
    assert_ptr_not_equal(z, out);
    assert_int_equal(vram_free(dev, out), VRAM_OK); /* the graph's output, freed */
    assert_int_equal(vram_alloc(dev, 2 * MiB, S1, &y), VRAM_OK);
    assert_ptr_not_equal(y, out);
    assert_int_equal(stats_of(dev).bytes_in_use, 4 * MiB + 3 * 2 * MiB);
    assert_true(vram_check(dev));
    /* A second capture into the same pool reuses its freed blocks. */
    assert_int_equal(vram_pool_begin(dev, 7), VRAM_OK);
    void *u;
    assert_int_equal(vram_alloc(dev, 2 * MiB, SC, &u), VRAM_OK);
    assert_true(u == t2 || u == out);
    assert_int_equal(vram_pool_end(dev, 7), VRAM_OK);
    assert_int_equal(vram_pool_release(dev, 99), VRAM_E_INVALID);
    assert_int_equal(vram_pool_release(dev, 7), VRAM_OK);
    assert_true(vram_check(dev));
    /* Released: its freed block serves everyone, its live one returns when freed. */
    assert_int_equal(vram_free(dev, u), VRAM_OK);
    assert_int_equal(stats_of(dev).bytes_in_use, 4 * MiB + 3 * 2 * MiB); /* w x y z */
    assert_int_equal(dev->held_bytes, 2 * MiB); /* u: pending on SC, not pooled */
    assert_true(vram_check(dev));
    assert_int_equal(vram_free(dev, w), VRAM_OK);
    assert_int_equal(vram_free(dev, x), VRAM_OK);
    assert_int_equal(vram_free(dev, y), VRAM_OK);
    assert_int_equal(vram_free(dev, z), VRAM_OK);
    assert_int_equal(stats_of(dev).bytes_in_use, 0);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

static void
test_pool_growth(void **state)
{
    (void)state;
    run_pool(VRAM_STRATEGY_GROWTH);
}

static void
test_pool_expandable(void **state)
{
    (void)state;
    run_pool(VRAM_STRATEGY_EXPANDABLE);
}

/* While a pool is open, frees that need events wait for its end, and no
** event is recorded or queried. */
static void
test_pool_defers_events(void **state)
{
    (void)state;
    vram_context *ctx;
    vram_device *dev = open_capture(&ctx, VRAM_STRATEGY_GROWTH);
    memset(&spy, 0, sizeof spy);
    struct backend *be = ctx->backend;
    spy.real = be->ops;
    spy.ops = *be->ops;
    spy.ops.event_record = spy_record;
    spy.ops.event_query = spy_query;
    be->ops = &spy.ops;
    void *a, *b, *t;
    assert_int_equal(vram_alloc(dev, 4 * MiB, S1, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 4 * MiB, S2, &b), VRAM_OK); /* two streams */
    assert_int_equal(vram_free(dev, b), VRAM_OK); /* pending on S2 */
    assert_int_equal(spy_streams(), 2);
    assert_int_equal(vram_pool_begin(dev, 1), VRAM_OK);
    assert_int_equal(vram_free(dev, a), VRAM_OK); /* deferred: no event now */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(vram_alloc(dev, MiB, SC, &t), VRAM_OK); /* no poll */
        assert_int_equal(vram_free(dev, t), VRAM_OK);
    }
    assert_int_equal(spy_streams(), 0);
    assert_int_equal(stats_of(dev).bytes_in_use, 0);
    assert_true(vram_check(dev));
    assert_int_equal(vram_pool_end(dev, 1), VRAM_OK);
    assert_int_equal(spy_streams(), 1); /* the deferred free, now */
    assert_int_equal(vram_pool_release(dev, 1), VRAM_OK);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* ------------------------------------------------------------------ */
/* vram_set_limit, vram_block_base                                      */
/* ------------------------------------------------------------------ */

static void
test_set_limit(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 1 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, 256 * MiB);
    void *a, *b;
    assert_int_equal(vram_set_limit(dev, 64 * MiB), VRAM_OK);
    assert_int_equal(stats_of(dev).bytes_limit, 64 * MiB);
    assert_int_equal(vram_alloc(dev, 60 * MiB, NULL, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 8 * MiB, NULL, &b), VRAM_E_OOM);
    assert_int_equal(vram_set_limit(dev, 32 * MiB), VRAM_E_INVALID); /* held: 60 MiB */
    assert_int_equal(stats_of(dev).bytes_limit, 64 * MiB);
    assert_int_equal(vram_set_limit(dev, 4 * GiB), VRAM_OK); /* up to the configured cap */
    assert_int_equal(stats_of(dev).bytes_limit, 256 * MiB);
    assert_int_equal(vram_alloc(dev, 8 * MiB, NULL, &b), VRAM_OK);
    assert_true(vram_check(dev));
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_free(dev, b), VRAM_OK);
    vram_close(ctx);
}

static void
test_block_base(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 1 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, 256 * MiB);
    void *a, *b, *base;
    uint64_t size = 0;
    assert_int_equal(vram_alloc(dev, 4096, NULL, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 4096, NULL, &b), VRAM_OK); /* same region */
    assert_int_equal(vram_block_base(dev, b, &base, &size), VRAM_OK);
    assert_ptr_equal(base, a);
    assert_int_equal(size, 2 * MiB);
    assert_int_equal(vram_block_base(dev, (char *)b + 256, &base, &size),
                     VRAM_E_BAD_POINTER);
    assert_int_equal(vram_block_base(dev, b, NULL, &size), VRAM_E_INVALID);
    vram_close(ctx);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_rule_growth),
        cmocka_unit_test(test_stream_rule_expandable),
        cmocka_unit_test(test_pending_before_oom),
        cmocka_unit_test(test_record_stream_growth),
        cmocka_unit_test(test_record_stream_expandable),
        cmocka_unit_test(test_record_two_streams),
        cmocka_unit_test(test_overlap_growth),
        cmocka_unit_test(test_overlap_expandable),
        cmocka_unit_test(test_record_bad_pointer),
        cmocka_unit_test(test_pool_growth),
        cmocka_unit_test(test_pool_expandable),
        cmocka_unit_test(test_pool_defers_events),
        cmocka_unit_test(test_set_limit),
        cmocka_unit_test(test_block_base),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
