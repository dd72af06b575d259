/* SPDX-License-Identifier: MIT */
/*
** test_random.c -- a long randomized run of every strategy against a
** simple reference model: the model keeps each live allocation (address,
** size, pattern) and checks after every operation that no two live blocks
** overlap, that host-backed memory still holds each block's pattern, that
** every statistic equals the model's figure, and that vram_check() finds
** every invariant intact.
*/
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#define MAX_LIVE 400

struct live {
    unsigned char *p; /* address */
    uint64_t size;    /* requested bytes */
    uint64_t block;   /* usable size reported by vram_block_info */
    unsigned char tag;
};

struct model {
    struct live live[MAX_LIVE];
    int n;
    uint64_t requested, in_use, peak, allocs, frees, ooms;
};

static uint64_t rng_state;

static uint64_t
rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Sizes spread over six orders of magnitude, like a training step's. */
static uint64_t
random_size(void)
{
    int bits = (int)(rng() % 23); /* 1 B .. 8 MiB */
    uint64_t s = (rng() & ((1ULL << bits) - 1)) + 1;
    if (rng() % 8 == 0)
        s = (s + 511) & ~511ULL; /* PyTorch-like multiples of 512 */
    return s;
}

static void
check_against_model(vram_device *dev, const struct model *m)
{
    if (!vram_check(dev))
        fail_msg("invariant broken: %s", vram_last_error());
    vram_stats st = stats_of(dev);
    assert_int_equal(st.bytes_requested, m->requested);
    assert_int_equal(st.bytes_in_use, m->in_use);
    assert_int_equal(st.peak_bytes_in_use, m->peak);
    assert_int_equal(st.live_blocks, (uint64_t)m->n);
    assert_int_equal(st.num_allocs, m->allocs);
    assert_int_equal(st.num_frees, m->frees);
    assert_int_equal(st.num_ooms, m->ooms);
    assert_true(st.bytes_reserved >= st.bytes_in_use);
    assert_true(st.bytes_reserved <= st.bytes_limit);
    assert_true(st.peak_bytes_reserved >= st.bytes_reserved);
    vram_memory_info mi;
    assert_int_equal(vram_get_memory_info(dev, &mi), VRAM_OK);
    assert_int_equal(mi.current, m->in_use);
    assert_int_equal(mi.peak, m->peak);
}

static void
check_no_overlap(const struct model *m, int k)
{
    const struct live *a = &m->live[k];
    for (int i = 0; i < m->n; i++) {
        if (i == k)
            continue;
        const struct live *b = &m->live[i];
        if (a->p < b->p + b->block && b->p < a->p + a->block)
            fail_msg("blocks %p+%llu and %p+%llu overlap", (void *)a->p,
                     (unsigned long long)a->block, (void *)b->p,
                     (unsigned long long)b->block);
    }
}

static void
check_pattern(const struct live *l)
{
    /* First, last and a middle byte: enough to catch an overlapping
    ** writer without making the test quadratic in bytes. */
    uint64_t at[3] = {0, l->size / 2, l->size - 1};
    for (int i = 0; i < 3; i++)
        if (l->p[at[i]] != l->tag)
            fail_msg("block %p byte %llu was overwritten", (void *)l->p,
                     (unsigned long long)at[i]);
}

/* Returns the number of OOMs met. */
static uint64_t
run(vram_strategy strategy, uint64_t cap, int ops, uint64_t seed)
{
    rng_state = seed;
    vram_context *ctx = sim_open(1, 512 * MiB, true);
    vram_device *dev = sim_device(ctx, strategy, cap);
    struct model m;
    memset(&m, 0, sizeof m);
    for (int op = 0; op < ops; op++) {
        bool do_alloc = m.n == 0 || (m.n < MAX_LIVE && rng() % 100 < 55);
        if (do_alloc) {
            struct live l;
            memset(&l, 0, sizeof l);
            l.size = random_size();
            l.tag = (unsigned char)(op & 0xff);
            void *stream = (void *)(uintptr_t)(rng() % 3);
            vram_stats before = stats_of(dev);
            vram_status st = vram_alloc(dev, l.size, stream, (void **)&l.p);
            if (st == VRAM_E_OOM) {
                m.ooms++;
                vram_stats after = stats_of(dev);
                assert_int_equal(after.bytes_in_use, before.bytes_in_use);
                assert_int_equal(after.live_blocks, before.live_blocks);
                assert_true(strstr(vram_last_error(), "out of memory") != NULL);
            } else {
                assert_int_equal(st, VRAM_OK);
                assert_int_equal((uintptr_t)l.p % 256, 0);
                void *s2;
                assert_int_equal(vram_block_info(dev, l.p, &l.block, &s2), VRAM_OK);
                assert_ptr_equal(s2, stream);
                assert_true(l.block >= l.size && l.block % 256 == 0);
                memset(l.p, l.tag, l.size);
                m.live[m.n] = l;
                check_no_overlap(&m, m.n);
                m.n++;
                m.allocs++;
                m.requested += l.size;
                m.in_use += l.block;
                if (m.in_use > m.peak)
                    m.peak = m.in_use;
            }
        } else {
            int k = (int)(rng() % (uint64_t)m.n);
            struct live l = m.live[k];
            check_pattern(&l);
            assert_int_equal(vram_free(dev, l.p), VRAM_OK);
            m.live[k] = m.live[--m.n];
            m.frees++;
            m.requested -= l.size;
            m.in_use -= l.block;
        }
        if (op % 2000 == 1000) {
            assert_int_equal(vram_reset_peak(dev), VRAM_OK);
            m.peak = m.in_use;
        }
        check_against_model(dev, &m);
    }
    for (int i = 0; i < m.n; i++)
        check_pattern(&m.live[i]);
    while (m.n > 0) {
        assert_int_equal(vram_free(dev, m.live[--m.n].p), VRAM_OK);
        m.frees++;
    }
    m.requested = m.in_use = 0;
    check_against_model(dev, &m);
    vram_close(ctx);
    return m.ooms;
}

static void
test_random_growth(void **state)
{
    (void)state;
    assert_int_equal(run(VRAM_STRATEGY_GROWTH, 256 * MiB, 20000, 0x9e3779b97f4a7c15ULL),
                     0);
}

static void
test_random_growth_tight_cap(void **state)
{
    (void)state;
    assert_true(run(VRAM_STRATEGY_GROWTH, 48 * MiB, 20000, 12345) > 0); /* OOMs happen */
}

static void
test_random_preallocate(void **state)
{
    (void)state;
    run(VRAM_STRATEGY_PREALLOCATE, 256 * MiB, 20000, 777);
}

static void
test_random_tf_compat(void **state)
{
    (void)state;
    run(VRAM_STRATEGY_GROWTH_TF, 96 * MiB, 20000, 4242);
}

static void
test_random_expandable(void **state)
{
    (void)state;
    assert_int_equal(run(VRAM_STRATEGY_EXPANDABLE, 256 * MiB, 20000, 99), 0);
    assert_true(run(VRAM_STRATEGY_EXPANDABLE, 48 * MiB, 20000, 2024) > 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_expandable),
        cmocka_unit_test(test_random_growth),
        cmocka_unit_test(test_random_growth_tight_cap),
        cmocka_unit_test(test_random_preallocate),
        cmocka_unit_test(test_random_tf_compat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
