/*
** test_expandable.c -- the expandable strategy on the simulated device:
** one address range, physical memory mapped granule by granule where live
** blocks are, idle granules' memory moved before new memory is created,
** the cap on physical memory, and host-backed writes through mapped
** memory (a write to an unmapped granule would fault).
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
** one region, and idle memory moves to where the block lands. */
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
    ** the holes' memory moves under one 32 MiB block. */
    void *big;
    assert_int_equal(vram_alloc(dev, 32 * MiB, NULL, &big), VRAM_OK);
    memset(big, 0x77, 32 * MiB);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.bytes_reserved, 64 * MiB);
    assert_int_equal(st.unmaps, 4);
    for (int i = 1; i < 8; i += 2)
        assert_int_equal(((unsigned char *)p[i])[8 * MiB - 1], i);
    /* Now the cap is full of live blocks: one more unit is an OOM. */
    void *q;
    assert_int_equal(vram_alloc(dev, 3 * MiB, NULL, &q), VRAM_E_OOM);
    assert_non_null(strstr(vram_last_error(), "(expandable)"));
    assert_true(vram_check(dev));
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

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expandable_follows_live_bytes),
        cmocka_unit_test(test_expandable_no_fragmentation_oom),
        cmocka_unit_test(test_expandable_device_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
