/* SPDX-License-Identifier: MIT */
/*
** test_threads.c -- threads hammering one device and several logical
** devices at once, and racing to initialize a device. Run under TSan by
** `make test` (label "threads"); here it checks that every statistic adds
** up afterwards and that the heap's invariants hold.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#define THREADS 4
#define OPS 20000
#define KEEP 64

struct worker {
    vram_device *dev;
    unsigned seed;
    int keep;        /* blocks each thread holds at most (<= KEEP) */
    size_t big;      /* a quarter of the sizes are up to this many bytes */
    uint64_t allocs, frees, ooms;
};

static void *
work(void *arg)
{
    struct worker *w = arg;
    void *live[KEEP] = {0};
    unsigned char tag = (unsigned char)(w->seed & 0xff);
    for (int i = 0; i < OPS; i++) {
        int k = (int)(rand_r(&w->seed) % (unsigned)w->keep);
        if (live[k] != NULL) {
            if (*(unsigned char *)live[k] != tag) /* another thread wrote here */
                return (void *)1;
            if (vram_free(w->dev, live[k]) != VRAM_OK)
                return (void *)2;
            live[k] = NULL;
            w->frees++;
            continue;
        }
        size_t size =
            1 + (size_t)rand_r(&w->seed) % (rand_r(&w->seed) % 4 ? 65536 : w->big);
        vram_status st =
            vram_alloc(w->dev, size, (void *)(uintptr_t)(w->seed % 2), &live[k]);
        if (st == VRAM_E_OOM) {
            w->ooms++;
            continue;
        }
        if (st != VRAM_OK)
            return (void *)3;
        *(unsigned char *)live[k] = tag;
        w->allocs++;
    }
    for (int k = 0; k < w->keep; k++)
        if (live[k] != NULL) {
            if (vram_free(w->dev, live[k]) != VRAM_OK)
                return (void *)2;
            w->frees++;
        }
    return NULL;
}

static void
run_workers_sized(vram_device **devs, int n_devs, int keep, size_t big)
{
    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].dev = devs[i % n_devs];
        w[i].keep = keep;
        w[i].big = big;
        w[i].seed = 1000u + (unsigned)i * 7919u;
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    uint64_t allocs = 0, frees = 0, ooms = 0;
    for (int i = 0; i < THREADS; i++) {
        void *rc;
        assert_int_equal(pthread_join(t[i], &rc), 0);
        if (rc != NULL)
            fail_msg("worker %d failed: %s", i,
                     rc == (void *)1   ? "another thread's block overlaps its own"
                     : rc == (void *)2 ? "vram_free failed"
                                       : vram_last_error());
        allocs += w[i].allocs;
        frees += w[i].frees;
        ooms += w[i].ooms;
    }
    uint64_t s_allocs = 0, s_frees = 0, s_ooms = 0;
    for (int d = 0; d < n_devs; d++) {
        vram_stats s = stats_of(devs[d]);
        assert_int_equal(s.bytes_in_use, 0);
        assert_int_equal(s.live_blocks, 0);
        assert_true(s.bytes_reserved <= s.bytes_limit);
        s_allocs += s.num_allocs;
        s_frees += s.num_frees;
        s_ooms += s.num_ooms;
        if (!vram_check(devs[d]))
            fail_msg("%s", vram_last_error());
    }
    assert_int_equal(s_allocs, allocs);
    assert_int_equal(s_frees, frees);
    assert_int_equal(s_ooms, ooms);
}

static void
run_workers(vram_device **devs, int n_devs)
{
    run_workers_sized(devs, n_devs, KEEP, 4 << 20);
}

static void
test_threads_one_device(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, 96 * MiB);
    run_workers(&dev, 1);
    vram_close(ctx);
}

static void
test_threads_logical_devices(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device_config c;
    memset(&c, 0, sizeof c);
    c.strategy = VRAM_STRATEGY_GROWTH_TF;
    c.n_logical = 2;
    c.limit_bytes[0] = c.limit_bytes[1] = 128 * MiB;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_OK);
    vram_device *d[2];
    assert_int_equal(vram_device_get(ctx, 0, &d[0]), VRAM_OK);
    assert_int_equal(vram_device_get(ctx, 1, &d[1]), VRAM_OK);
    run_workers(d, 2);
    vram_close(ctx);
}

/* Expandable: threads meet units being mapped or unmapped by others. With
** blocks up to 24 MiB in a 96 MiB cap, idle memory is mapped at other
** addresses (aliases) and taken back (conflicts) all the time. The
** simulated memory is shared between a handle's mappings, so two live
** blocks on one physical unit would overwrite each other's tags. */
static void
test_threads_expandable(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 1 * GiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 96 * MiB);
    run_workers(&dev, 1);
    vram_close(ctx);
    /* Aliases and conflicts need the threads to overlap; on a loaded
    ** machine one round may run them one after another (then 12 maps, 0
    ** unmaps: each unit mapped once). Up to 5 rounds, each checked. */
    vram_stats s;
    for (int round = 0; round < 5; round++) {
        ctx = sim_open(1, 1 * GiB, true);
        dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 96 * MiB);
        run_workers_sized(&dev, 1, 3, 24 << 20);
        s = stats_of(dev);
        vram_close(ctx);
        printf("# expandable under threads: %llu maps, %llu unmaps\n",
               (unsigned long long)s.maps, (unsigned long long)s.unmaps);
        if (s.maps > s.bytes_limit / (8 * MiB) && s.unmaps > 0)
            break;
    }
    assert_true(s.maps > s.bytes_limit / (8 * MiB)); /* aliases were made */
    assert_true(s.unmaps > 0);                       /* and taken back */
}

struct racer {
    vram_context *ctx;
    vram_device *got;
};

static void *
race_get(void *arg)
{
    struct racer *r = arg;
    if (vram_device_get(r->ctx, 0, &r->got) != VRAM_OK)
        return (void *)1;
    void *p;
    if (vram_alloc(r->got, 1000, NULL, &p) != VRAM_OK || vram_free(r->got, p) != VRAM_OK)
        return (void *)2;
    return NULL;
}

/* Threads racing to initialize one device all get the same handle. */
static void
test_threads_init_race(void **state)
{
    (void)state;
    for (int round = 0; round < 20; round++) {
        vram_context *ctx = sim_open(1, 1 * GiB, false);
        pthread_t t[THREADS];
        struct racer r[THREADS];
        for (int i = 0; i < THREADS; i++) {
            r[i].ctx = ctx;
            r[i].got = NULL;
            assert_int_equal(pthread_create(&t[i], NULL, race_get, &r[i]), 0);
        }
        for (int i = 0; i < THREADS; i++) {
            void *rc;
            assert_int_equal(pthread_join(t[i], &rc), 0);
            assert_null(rc);
            assert_ptr_equal(r[i].got, r[0].got);
        }
        vram_close(ctx);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_one_device),
        cmocka_unit_test(test_threads_logical_devices),
        cmocka_unit_test(test_threads_init_race),
        cmocka_unit_test(test_threads_expandable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
