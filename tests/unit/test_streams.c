/*
** test_streams.c -- the stream rule (vram.h, "Streams") on the simulated
** device with events that complete after two queries: same-stream reuse
** at once, cross-stream reuse only after the free's event completed, and
** no event at all while one stream is in use.
*/
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#define S1 ((void *)0x1001)
#define S2 ((void *)0x1002)

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

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_rule_growth),
        cmocka_unit_test(test_stream_rule_expandable),
        cmocka_unit_test(test_pending_before_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
