/* SPDX-License-Identifier: MIT */
/*
** test_expandable.c -- the expandable strategy on the simulated device:
** one address range, physical memory mapped unit by unit where live
** blocks are, idle memory mapped again where it is needed (aliases) before
** new memory is created, a unit whose memory was taken unmapped and mapped
** anew, a steady loop making no driver call, the cap on physical memory,
** and host-backed writes through mapped memory (a write to an unmapped
** unit would fault); vram_release_idle giving idle units back, aliases
** included, for every strategy.
*/
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

static void
test_expandable_follows_live_bytes(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 256 * MiB);
    void *a, *b, *c;
    assert_int_equal(vram_alloc(dev, 10 * MiB, NULL, &a), VRAM_OK);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.bytes_reserved, 16 * MiB); /* two 8 MiB units */
    assert_int_equal(st.maps, 2);
    assert_int_equal(st.regions, 1);
    memset(a, 1, 10 * MiB);
    assert_int_equal(vram_alloc(dev, 1000, NULL, &b), VRAM_OK);
    assert_int_equal(stats_of(dev).bytes_reserved, 16 * MiB); /* fits the second unit */
    memset(b, 2, 1000);
    /* Freeing keeps the memory mapped (idle): no driver call. */
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    st = stats_of(dev);
    assert_int_equal(st.bytes_reserved, 16 * MiB);
    assert_int_equal(st.unmaps, 0);
    /* A block at the same place reuses the mapped granules. */
    assert_int_equal(vram_alloc(dev, 10 * MiB, NULL, &c), VRAM_OK);
    assert_ptr_equal(c, a);
    st = stats_of(dev);
    assert_int_equal(st.maps, 2);
    assert_int_equal(st.bytes_reserved, 16 * MiB);
    memset(c, 3, 10 * MiB);
    assert_int_equal(((unsigned char *)b)[999], 2);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* Fragmented free space still serves a large block: the free pieces are
** one region, and the holes' idle memory is mapped where the block lands
** as well (no unmap, so no wait for the device). */
static void
test_expandable_no_fragmentation_oom(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 64 * MiB);
    void *p[16];
    for (int i = 0; i < 8; i++) {
        assert_int_equal(vram_alloc(dev, 8 * MiB, NULL, &p[i]), VRAM_OK);
        memset(p[i], i, 8 * MiB);
    }
    assert_int_equal(stats_of(dev).bytes_reserved, 64 * MiB); /* the cap */
    for (int i = 0; i < 8; i += 2)
        assert_int_equal(vram_free(dev, p[i]), VRAM_OK);
    /* 32 MiB free in 8 MiB holes: growth would need a new region; here
    ** the holes' memory is mapped under one 32 MiB block too. */
    void *big;
    assert_int_equal(vram_alloc(dev, 32 * MiB, NULL, &big), VRAM_OK);
    memset(big, 0x77, 32 * MiB);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.bytes_reserved, 64 * MiB);
    assert_int_equal(st.unmaps, 0);
    assert_int_equal(st.maps, 8 + 4);
    for (int i = 1; i < 8; i += 2)
        assert_int_equal(((unsigned char *)p[i])[8 * MiB - 1], i);
    /* Now the cap is full of live blocks: one more unit is an OOM. */
    void *q;
    assert_int_equal(vram_alloc(dev, 3 * MiB, NULL, &q), VRAM_E_OOM);
    assert_non_null(strstr(vram_last_error(), "(expandable)"));
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* A block lands on a unit whose memory another live block now uses: that
** unit is unmapped and mapped to idle memory. */
static void
test_expandable_taken_unit_remapped(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 24 * MiB);
    void *a, *b, *x, *y;
    assert_int_equal(vram_alloc(dev, 8 * MiB, NULL, &a), VRAM_OK); /* unit 0, memory m0 */
    assert_int_equal(vram_alloc(dev, 8 * MiB, NULL, &b), VRAM_OK); /* unit 1, m1 */
    assert_int_equal(vram_free(dev, a), VRAM_OK);                   /* m0 idle */
    /* 16 MiB do not fit the 8 MiB hole: units 2-3 get m0 (an alias) and new m2. */
    assert_int_equal(vram_alloc(dev, 16 * MiB, NULL, &x), VRAM_OK);
    assert_ptr_equal(x, (char *)b + 8 * MiB);
    memset(x, 0x55, 16 * MiB);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.bytes_reserved, 24 * MiB);
    assert_int_equal(st.maps, 4);
    assert_int_equal(st.unmaps, 0);
    assert_int_equal(vram_free(dev, b), VRAM_OK); /* m1 idle */
    /* Unit 0 is still mapped to m0, which x uses: unmapped, then mapped to m1. */
    assert_int_equal(vram_alloc(dev, 8 * MiB, NULL, &y), VRAM_OK);
    assert_ptr_equal(y, a);
    memset(y, 0x66, 8 * MiB);
    st = stats_of(dev);
    assert_int_equal(st.unmaps, 1);
    assert_int_equal(st.maps, 5);
    assert_int_equal(st.bytes_reserved, 24 * MiB);
    assert_int_equal(((unsigned char *)x)[16 * MiB - 1], 0x55);
    assert_true(vram_check(dev));
    assert_int_equal(vram_free(dev, x), VRAM_OK);
    assert_int_equal(vram_free(dev, y), VRAM_OK);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* A training step's loss computation (the pattern of gpt2_bf16_b16): the
** blocks freed before the peak leave a hole the later blocks do not fit,
** so over a step the loop touches more addresses than it has live bytes.
** Physical memory stays at the peak of live bytes, and from the second
** step on no driver call is made. */
static void
test_expandable_steady_loop(void **state)
{
    (void)state;
    const uint64_t U = 8 * MiB;
    vram_context *ctx = sim_open(1, 1 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 512 * MiB);
    uint64_t calls_after_second = 0;
    for (int step = 0; step < 6; step++) {
        loss_step(dev, U);
        if (step == 1)
            calls_after_second = stats_of(dev).backend_calls;
    }
    vram_stats st = stats_of(dev);
    assert_int_equal(st.peak_bytes_in_use, 12 * U);
    /* 14 units are touched, and 14 held: b's memory is one extent of 4
    ** units, which d's mapping takes whole (d covers 2 of them), so e gets
    ** new memory for its 4. With one handle per unit, 12 (the extents'
    ** cost; on the shared traces fragmentation stays <= 1.013). */
    assert_int_equal(st.peak_bytes_reserved, 14 * U);
    assert_int_equal(st.backend_calls, calls_after_second);
    assert_int_equal(st.unmaps, 0);
    vram_close(ctx);
}

/* The device refuses physical memory: the failure is an OOM and nothing
** stays counted. */
static void
test_expandable_device_full(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 24 * MiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 64 * MiB);
    void *a, *b;
    assert_int_equal(vram_alloc(dev, 16 * MiB, NULL, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 16 * MiB, NULL, &b), VRAM_E_OOM);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.bytes_in_use, 16 * MiB);
    assert_true(vram_check(dev));
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 16 * MiB, NULL, &b), VRAM_OK);
    assert_true(vram_check(dev));
    vram_close(ctx);
}


/* Free bytes of the simulated device now (its cuMemGetInfo). */
static uint64_t
device_free(vram_context *ctx)
{
    vram_physical_info info;
    assert_int_equal(vram_physical_info_get(ctx, 0, &info), VRAM_OK);
    return info.free_bytes;
}

/* Idle units are unmapped and released: the device's free memory comes
** back, live blocks keep theirs (and their contents), and the next
** allocations map memory again (host-backed: a write to an unmapped unit
** would fault). */
static void
test_release_idle_expandable(void **state)
{
    (void)state;
    const uint64_t U = 8 * MiB;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 256 * MiB);
    uint64_t free0 = device_free(ctx);
    void *p[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(vram_alloc(dev, U, NULL, &p[i]), VRAM_OK);
        memset(p[i], 0x10 + i, U);
    }
    assert_int_equal(device_free(ctx), free0 - 4 * U);
    assert_int_equal(vram_free(dev, p[0]), VRAM_OK);
    assert_int_equal(vram_free(dev, p[2]), VRAM_OK);
    uint64_t released = 0;
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 2 * U);
    assert_int_equal(device_free(ctx), free0 - 2 * U);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.bytes_reserved, 2 * U);
    assert_int_equal(st.peak_bytes_reserved, 4 * U);
    assert_true(vram_check(dev));
    assert_int_equal(((unsigned char *)p[1])[U - 1], 0x11);
    assert_int_equal(((unsigned char *)p[3])[0], 0x13);
    /* Nothing idle: nothing to do. */
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 0);
    /* The released slots are reused; memory comes back where needed. */
    void *q[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(vram_alloc(dev, U, NULL, &q[i]), VRAM_OK);
        memset(q[i], 0x20 + i, U);
    }
    assert_int_equal(stats_of(dev).bytes_reserved, 5 * U);
    assert_int_equal(device_free(ctx), free0 - 5 * U);
    assert_true(vram_check(dev));
    for (int i = 0; i < 3; i++)
        assert_int_equal(vram_free(dev, q[i]), VRAM_OK);
    assert_int_equal(vram_free(dev, p[1]), VRAM_OK);
    assert_int_equal(vram_free(dev, p[3]), VRAM_OK);
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 5 * U);
    assert_int_equal(device_free(ctx), free0);
    assert_int_equal(stats_of(dev).bytes_reserved, 0);
    assert_true(vram_check(dev));
    /* A training loop afterwards: as before, and steady again. */
    for (int step = 0; step < 4; step++)
        loss_step(dev, U);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* An idle unit mapped at two addresses (an alias) is unmapped at both
** before it is released. */
static void
test_release_idle_aliases(void **state)
{
    (void)state;
    const uint64_t U = 8 * MiB;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 64 * MiB);
    uint64_t free0 = device_free(ctx);
    void *p[8], *big;
    for (int i = 0; i < 8; i++)
        assert_int_equal(vram_alloc(dev, U, NULL, &p[i]), VRAM_OK);
    for (int i = 0; i < 8; i += 2)
        assert_int_equal(vram_free(dev, p[i]), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 4 * U, NULL, &big), VRAM_OK); /* aliases */
    assert_int_equal(stats_of(dev).maps, 12);
    assert_int_equal(vram_free(dev, big), VRAM_OK);
    uint64_t released = 0;
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 4 * U);
    assert_int_equal(device_free(ctx), free0 - 4 * U);
    assert_true(vram_check(dev));
    assert_int_equal(vram_alloc(dev, 4 * U, NULL, &big), VRAM_OK);
    memset(big, 0x5a, 4 * U);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* The new memory a block needs is one driver handle per run of up to 8
** units (64 MiB), mapped in one call: a 100 MiB block (13 units) costs
** two creates and two maps, not thirteen of each. Its bytes are all there
** (host-backed: a write to an unmapped unit would fault). */
static void
test_expandable_one_mapping_per_run(void **state)
{
    (void)state;
    const uint64_t U = 8 * MiB;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 512 * MiB);
    uint64_t free0 = device_free(ctx);
    void *a, *b;
    assert_int_equal(vram_alloc(dev, 100 * MiB, NULL, &a), VRAM_OK);
    memset(a, 0x31, 100 * MiB);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.backend_calls, 1 + 2 * 2); /* the range, then 8 + 5 units */
    assert_int_equal(st.maps, 13);                  /* units mapped */
    assert_int_equal(st.bytes_reserved, 13 * U);
    assert_int_equal(device_free(ctx), free0 - 13 * U);
    /* A block of 3 units after it: one handle, one map. */
    assert_int_equal(vram_alloc(dev, 3 * U, NULL, &b), VRAM_OK);
    memset(b, 0x32, 3 * U);
    assert_int_equal(stats_of(dev).backend_calls, 5 + 2);
    assert_true(vram_check(dev));
    /* Freed and allocated again at the same place: no call. */
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 100 * MiB, NULL, &a), VRAM_OK);
    assert_int_equal(stats_of(dev).backend_calls, 7);
    assert_int_equal(((unsigned char *)b)[3 * U - 1], 0x32);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* A run of one or two new units is made a unit a handle (an extent under
** a small block that stays live would hold its other units): a 2-unit
** block costs two creates and two maps, and its units go back one by one
** while a live block sits on the other. */
static void
test_short_run_unit_a_handle(void **state)
{
    (void)state;
    const uint64_t U = 8 * MiB;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 256 * MiB);
    uint64_t free0 = device_free(ctx);
    void *a, *d;
    assert_int_equal(vram_alloc(dev, 2 * U, NULL, &a), VRAM_OK);
    memset(a, 0x51, 2 * U);
    assert_int_equal(stats_of(dev).backend_calls, 1 + 2 * 2); /* the range, 2 x (create, map) */
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, U / 2, NULL, &d), VRAM_OK); /* on the first unit */
    assert_ptr_equal(d, a);
    uint64_t released = 0;
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, U);
    assert_int_equal(device_free(ctx), free0 - U);
    assert_int_equal(vram_free(dev, d), VRAM_OK);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* Idle memory of an extent goes back whole: one unmap and one release for
** its 3 units. An extent one of whose units is under a live block keeps
** all its memory (the driver gives a handle back only whole); the idle
** extents beside it go back. */
static void
test_release_idle_extents(void **state)
{
    (void)state;
    const uint64_t U = 8 * MiB;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 256 * MiB);
    uint64_t free0 = device_free(ctx);
    void *a, *b, *c, *d;
    assert_int_equal(vram_alloc(dev, 3 * U, NULL, &a), VRAM_OK); /* units 0-2 */
    assert_int_equal(vram_alloc(dev, 3 * U, NULL, &b), VRAM_OK); /* units 3-5 */
    assert_int_equal(vram_alloc(dev, 3 * U, NULL, &c), VRAM_OK); /* units 6-8 */
    memset(b, 0x41, 3 * U);
    /* c's first unit under a live block d: c's extent is kept whole. */
    assert_int_equal(vram_free(dev, c), VRAM_OK);
    assert_int_equal(vram_alloc(dev, U / 2, NULL, &d), VRAM_OK);
    assert_ptr_equal(d, c);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    uint64_t calls = stats_of(dev).backend_calls, released = 0;
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 3 * U);
    /* The simulator has no synchronize: one unmap, one release. */
    assert_int_equal(stats_of(dev).backend_calls, calls + 2);
    assert_int_equal(device_free(ctx), free0 - 6 * U);
    assert_int_equal(stats_of(dev).bytes_reserved, 6 * U);
    assert_int_equal(((unsigned char *)b)[3 * U - 1], 0x41);
    assert_true(vram_check(dev));
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 0);
    assert_int_equal(vram_free(dev, b), VRAM_OK);
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 3 * U);
    assert_int_equal(device_free(ctx), free0 - 3 * U);
    assert_true(vram_check(dev));
    assert_int_equal(vram_free(dev, d), VRAM_OK);
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 3 * U);
    assert_int_equal(device_free(ctx), free0);
    /* Memory comes back on demand, in extents again. */
    assert_int_equal(vram_alloc(dev, 6 * U, NULL, &a), VRAM_OK);
    memset(a, 0x42, 6 * U);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* growth gives wholly free regions back; preallocate keeps its one region. */
static void
test_release_idle_other_strategies(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 1 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, 256 * MiB);
    uint64_t free0 = device_free(ctx);
    void *a, *b;
    assert_int_equal(vram_alloc(dev, 10 * MiB, NULL, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 20 * MiB, NULL, &b), VRAM_OK);
    assert_int_equal(vram_free(dev, b), VRAM_OK);
    uint64_t released = 0;
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 20 * MiB);
    assert_int_equal(device_free(ctx), free0 - 10 * MiB);
    assert_int_equal(stats_of(dev).bytes_reserved, 10 * MiB);
    assert_true(vram_check(dev));
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    vram_close(ctx);

    ctx = sim_open(1, 1 * GiB, false);
    dev = sim_device(ctx, VRAM_STRATEGY_PREALLOCATE, 256 * MiB);
    assert_int_equal(vram_alloc(dev, 10 * MiB, NULL, &a), VRAM_OK);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 0);
    assert_int_equal(stats_of(dev).bytes_reserved, 256 * MiB);
    assert_int_equal(vram_release_idle(NULL, &released), VRAM_E_INVALID);
    vram_close(ctx);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expandable_follows_live_bytes),
        cmocka_unit_test(test_expandable_no_fragmentation_oom),
        cmocka_unit_test(test_expandable_taken_unit_remapped),
        cmocka_unit_test(test_expandable_steady_loop),
        cmocka_unit_test(test_expandable_device_full),
        cmocka_unit_test(test_release_idle_expandable),
        cmocka_unit_test(test_release_idle_aliases),
        cmocka_unit_test(test_release_idle_other_strategies),
        cmocka_unit_test(test_expandable_one_mapping_per_run),
        cmocka_unit_test(test_short_run_unit_a_handle),
        cmocka_unit_test(test_release_idle_extents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
