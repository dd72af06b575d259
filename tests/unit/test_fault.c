/* SPDX-License-Identifier: MIT */
/*
** test_fault.c -- torture: run scenarios with backend call N failing, for
** N = 1, 2, ... until a run meets no failure. Every failure must come back
** as a status with a message, the device must stay consistent
** (vram_check), no memory may leak (ASan build of `make test`), and the
** work that did not fail must be intact.
*/
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "testutil.h"

static vram_status
open_failing(uint64_t fail_call, vram_status how, vram_context **ctx)
{
    vram_options o;
    memset(&o, 0, sizeof o);
    o.backend = VRAM_BACKEND_SIM;
    o.ignore_environment = true;
    o.sim.memory_bytes = 256 * MiB;
    o.sim.host_backed = true;
    o.sim.fail_call = fail_call;
    o.sim.fail_status = how;
    return vram_open(&o, ctx);
}

/*
** The scenario: configure, fetch, allocate a mix of sizes that needs
** several regions, free half, allocate more (region reuse and, under a
** tight cap, the give-back of free regions), close with blocks still
** live. Returns the number of backend calls the run made (close
** included), so the caller knows when call N was never reached.
*/
static uint64_t
scenario(vram_strategy strategy, uint64_t fail_call, vram_status how)
{
    vram_context *ctx = NULL;
    vram_status st = open_failing(fail_call, how, &ctx);
    if (st != VRAM_OK) {
        assert_true(vram_last_error()[0] != '\0');
        assert_null(ctx);
        return fail_call; /* failed at or before call N */
    }
    vram_device_config c;
    memset(&c, 0, sizeof c);
    c.strategy = strategy;
    c.limit_bytes[0] = 24 * MiB;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_OK);
    vram_device *dev = NULL;
    st = vram_device_get(ctx, 0, &dev);
    if (st != VRAM_OK) {
        assert_int_equal(st, how);
        vram_close(ctx);
        return fail_call;
    }
    enum { N = 12 };
    void *p[N] = {0};
    uint64_t sizes[N] = {4 * MiB, 300, 6 * MiB, 1 * MiB, 4 * MiB, 70000,
                         3 * MiB, 512, 2 * MiB, 5 * MiB, 1000,    8 * MiB};
    for (int round = 0; round < 2; round++) {
        for (int i = round; i < N; i += 1 + round) {
            if (p[i] != NULL)
                continue;
            st = vram_alloc(dev, sizes[i], NULL, &p[i]);
            if (st != VRAM_OK) {
                /* A refused region is an OOM to the caller; any other
                ** backend failure passes through as it was. */
                assert_true(st == VRAM_E_OOM || st == how);
                assert_true(vram_last_error()[0] != '\0');
                assert_null(p[i]);
            } else {
                memset(p[i], 0x5a, sizes[i]);
            }
            if (!vram_check(dev))
                fail_msg("after alloc %d, call %llu failing: %s", i,
                         (unsigned long long)fail_call, vram_last_error());
        }
        for (int i = 0; i < N; i += 2) {
            if (p[i] == NULL)
                continue;
            assert_int_equal(((unsigned char *)p[i])[sizes[i] - 1], 0x5a);
            assert_int_equal(vram_free(dev, p[i]), VRAM_OK);
            p[i] = NULL;
        }
    }
    vram_stats s = stats_of(dev);
    assert_true(s.bytes_reserved <= s.bytes_limit);
    /* Leave some blocks live: vram_close must give back their regions,
    ** one backend call each. */
    uint64_t calls = backend_fault_calls(ctx->backend) + s.regions;
    vram_close(ctx);
    return calls;
}

static void
torture(vram_strategy strategy, vram_status how)
{
    uint64_t n;
    for (n = 1; n < 10000; n++)
        if (scenario(strategy, n, how) < n)
            break;          /* call N was never made: every call has failed once */
    assert_true(n > 3);     /* the scenario did make backend calls */
    assert_true(n < 10000); /* and a run without failure was reached */
}

static void
test_fault_growth_backend_error(void **state)
{
    (void)state;
    torture(VRAM_STRATEGY_GROWTH, VRAM_E_BACKEND);
}

static void
test_fault_growth_device_full(void **state)
{
    (void)state;
    torture(VRAM_STRATEGY_GROWTH, VRAM_E_OOM);
}

static void
test_fault_preallocate(void **state)
{
    (void)state;
    torture(VRAM_STRATEGY_PREALLOCATE, VRAM_E_BACKEND);
    torture(VRAM_STRATEGY_PREALLOCATE, VRAM_E_OOM);
}

static void
test_fault_expandable(void **state)
{
    (void)state;
    torture(VRAM_STRATEGY_EXPANDABLE, VRAM_E_BACKEND);
    torture(VRAM_STRATEGY_EXPANDABLE, VRAM_E_OOM);
}

static void
test_fault_tf_compat(void **state)
{
    (void)state;
    torture(VRAM_STRATEGY_GROWTH_TF, VRAM_E_BACKEND);
    torture(VRAM_STRATEGY_GROWTH_TF, VRAM_E_OOM);
}

/* A give-back that the backend refuses leaves the region in the heap,
** still usable. */
static void
test_failed_release_keeps_region(void **state)
{
    (void)state;
    for (uint64_t n = 1; n < 40; n++) {
        vram_context *ctx = NULL;
        if (open_failing(n, VRAM_E_BACKEND, &ctx) != VRAM_OK)
            continue;
        vram_device_config c;
        memset(&c, 0, sizeof c);
        c.strategy = VRAM_STRATEGY_GROWTH;
        c.limit_bytes[0] = 10 * MiB;
        assert_int_equal(vram_configure(ctx, 0, &c), VRAM_OK);
        vram_device *dev;
        if (vram_device_get(ctx, 0, &dev) != VRAM_OK) {
            vram_close(ctx);
            continue;
        }
        void *a = NULL, *b = NULL, *d = NULL;
        vram_status sa = vram_alloc(dev, 4 * MiB, NULL, &a);
        vram_status sb = vram_alloc(dev, 4 * MiB, NULL, &b);
        if (sa == VRAM_OK)
            assert_int_equal(vram_free(dev, a), VRAM_OK);
        if (sb == VRAM_OK)
            assert_int_equal(vram_free(dev, b), VRAM_OK);
        vram_status sd = vram_alloc(dev, 8 * MiB, NULL, &d);
        assert_true(sd == VRAM_OK || sd == VRAM_E_OOM || sd == VRAM_E_BACKEND);
        assert_true(vram_check(dev));
        vram_stats s = stats_of(dev);
        assert_true(s.bytes_reserved <= 10 * MiB);
        if (sd == VRAM_OK)
            assert_int_equal(vram_free(dev, d), VRAM_OK);
        vram_close(ctx);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fault_growth_backend_error),
        cmocka_unit_test(test_fault_growth_device_full),
        cmocka_unit_test(test_fault_preallocate),
        cmocka_unit_test(test_fault_tf_compat),
        cmocka_unit_test(test_fault_expandable),
        cmocka_unit_test(test_failed_release_keeps_region),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
