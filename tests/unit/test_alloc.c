/* SPDX-License-Identifier: MIT */
/*
** test_alloc.c -- unit tests of every public function of the allocator on
** the simulated device: statuses, strategies, contexts, devices,
** allocation, statistics, OOM reporting and the dump.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

/* ---- statuses and strategies ---- */

static void
test_status_texts(void **state)
{
    (void)state;
    assert_string_equal(vram_strerror(VRAM_OK), "success");
    assert_string_equal(vram_strerror(VRAM_E_OOM), "out of memory");
    assert_string_equal(vram_strerror(VRAM_E_INITIALIZED),
                        "physical devices cannot be modified after being initialized");
    assert_string_equal(vram_strerror((vram_status)999), "unknown status");
    assert_string_equal(vram_status_name(VRAM_E_BAD_POINTER), "VRAM_E_BAD_POINTER");
    assert_null(vram_status_name((vram_status)-1));
    /* Numbers are part of the ABI. */
    assert_int_equal(VRAM_E_OOM, 1);
    assert_int_equal(VRAM_E_BAD_POINTER, 12);
}

static void
test_strategy_names(void **state)
{
    (void)state;
    vram_strategy s = VRAM_STRATEGY_PREALLOCATE;
    assert_int_equal(vram_strategy_parse("growth", &s), VRAM_OK);
    assert_int_equal(s, VRAM_STRATEGY_GROWTH);
    assert_int_equal(vram_strategy_parse("growth:tf-compat", &s), VRAM_OK);
    assert_int_equal(s, VRAM_STRATEGY_GROWTH_TF);
    assert_int_equal(vram_strategy_parse("preallocate", &s), VRAM_OK);
    assert_int_equal(s, VRAM_STRATEGY_PREALLOCATE);
    s = VRAM_STRATEGY_GROWTH;
    assert_int_equal(vram_strategy_parse("Growth", &s), VRAM_E_INVALID);
    assert_int_equal(s, VRAM_STRATEGY_GROWTH); /* untouched on failure */
    assert_non_null(strstr(vram_last_error(), "unknown strategy"));
    assert_string_equal(vram_strategy_name(VRAM_STRATEGY_GROWTH), "growth");
    assert_null(vram_strategy_name((vram_strategy)42));
}

/* ---- contexts and physical devices ---- */

static void
test_open_defaults(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(0, 0, false);
    int n = 0;
    assert_int_equal(vram_physical_count(ctx, &n), VRAM_OK);
    assert_int_equal(n, 1);
    vram_physical_info info;
    assert_int_equal(vram_physical_info_get(ctx, 0, &info), VRAM_OK);
    assert_int_equal(info.total_bytes, VRAM_SIM_DEFAULT_MEMORY);
    assert_int_equal(info.total_bytes, 143771ULL * MiB);
    assert_int_equal(info.free_bytes, info.total_bytes);
    assert_int_equal(info.granularity, 2 * MiB);
    assert_int_equal(info.cc_major, 9);
    assert_memory_equal(info.uuid, "GPU-", 4);
    assert_int_equal(vram_physical_info_get(ctx, 1, &info), VRAM_E_NO_DEVICE);
    assert_int_equal(vram_physical_info_get(ctx, -1, &info), VRAM_E_NO_DEVICE);
    vram_close(ctx);
    vram_close(NULL); /* no-op */
}

static void
test_open_errors(void **state)
{
    (void)state;
    vram_context *ctx = (vram_context *)0x1;
    assert_int_equal(vram_open(NULL, NULL), VRAM_E_INVALID);
    vram_options o;
    memset(&o, 0, sizeof o);
    o.backend = (vram_backend_kind)99;
    o.ignore_environment = true;
    assert_int_equal(vram_open(&o, &ctx), VRAM_E_INVALID);
    assert_ptr_equal(ctx, (vram_context *)0x1); /* untouched */
    o.backend = VRAM_BACKEND_SIM;
    o.sim.devices = 65;
    assert_int_equal(vram_open(&o, &ctx), VRAM_E_INVALID);
}

/* The default cap is free memory minus TensorFlow's reserve. */
static void
test_default_cap_reserve(void **state)
{
    (void)state;
    struct {
        int cc;
        uint64_t memory, reserve;
    } cases[] = {
        {9, 143771 * MiB, 1536 * MiB}, {8, 80 * GiB, 1536 * MiB},
        {7, 16 * GiB, 1050 * MiB},     {6, 8 * GiB, 500 * MiB},
        {9, 1 * GiB, 225 * MiB},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vram_options o;
        memset(&o, 0, sizeof o);
        o.backend = VRAM_BACKEND_SIM;
        o.ignore_environment = true;
        o.sim.memory_bytes = cases[i].memory;
        o.sim.cc_major = cases[i].cc;
        vram_context *ctx = NULL;
        assert_int_equal(vram_open(&o, &ctx), VRAM_OK);
        vram_device *dev = NULL;
        assert_int_equal(vram_device_get(ctx, 0, &dev), VRAM_OK);
        vram_device_info di;
        assert_int_equal(vram_device_info_get(dev, &di), VRAM_OK);
        assert_int_equal(di.limit_bytes, cases[i].memory - cases[i].reserve);
        assert_int_equal(di.strategy, VRAM_STRATEGY_EXPANDABLE);
        vram_close(ctx);
    }
}

static void
test_fraction_and_limit(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 10 * GiB, false);
    vram_device_config c;
    memset(&c, 0, sizeof c);
    c.strategy = VRAM_STRATEGY_GROWTH;
    c.fraction = 0.5;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_OK);
    vram_device_config back;
    assert_int_equal(vram_get_config(ctx, 0, &back), VRAM_OK);
    assert_true(back.fraction == 0.5);
    vram_device *dev;
    assert_int_equal(vram_device_get(ctx, 0, &dev), VRAM_OK);
    vram_device_info di;
    assert_int_equal(vram_device_info_get(dev, &di), VRAM_OK);
    assert_int_equal(di.limit_bytes, 5 * GiB);
    assert_int_equal(di.strategy, VRAM_STRATEGY_GROWTH);
    vram_close(ctx);

    ctx = sim_open(1, 10 * GiB, false);
    c.limit_bytes[0] = 3 * GiB; /* an explicit limit wins over the fraction */
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_OK);
    assert_int_equal(vram_device_get(ctx, 0, &dev), VRAM_OK);
    assert_int_equal(vram_device_info_get(dev, &di), VRAM_OK);
    assert_int_equal(di.limit_bytes, 3 * GiB);
    vram_close(ctx);
}

static void
test_configure_after_init_fails(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 4 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, GiB);
    void *p;
    assert_int_equal(vram_alloc(dev, 1000, NULL, &p), VRAM_OK);
    vram_device_config c;
    memset(&c, 0, sizeof c);
    c.strategy = VRAM_STRATEGY_PREALLOCATE;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_E_INITIALIZED);
    assert_non_null(
        strstr(vram_last_error(),
               "physical devices cannot be modified after being initialized"));
    vram_device_config back;
    assert_int_equal(vram_get_config(ctx, 0, &back), VRAM_OK);
    assert_int_equal(back.strategy, VRAM_STRATEGY_GROWTH); /* unchanged */
    vram_close(ctx);
}

static void
test_configure_invalid(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 4 * GiB, false);
    vram_device_config c;
    memset(&c, 0, sizeof c);
    c.fraction = 1.5;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_E_INVALID);
    c.fraction = -0.1;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_E_INVALID);
    c.fraction = NAN;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_E_INVALID);
    c.fraction = 0;
    c.n_logical = VRAM_MAX_LOGICAL + 1;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_E_INVALID);
    c.n_logical = 2;
    c.limit_bytes[0] = GiB; /* the second has none */
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_E_INVALID);
    assert_non_null(strstr(vram_last_error(), "no memory limit"));
    c.n_logical = 1;
    c.strategy = (vram_strategy)77;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_E_INVALID);
    c.strategy = VRAM_STRATEGY_GROWTH;
    assert_int_equal(vram_configure(ctx, 1, &c), VRAM_E_NO_DEVICE);
    assert_int_equal(vram_configure(ctx, 0, NULL), VRAM_E_INVALID);
    vram_close(ctx);
}

/* Several logical devices on one GPU, each with its own cap and heap. */
static void
test_logical_devices(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(2, 8 * GiB, false);
    vram_device_config c;
    memset(&c, 0, sizeof c);
    c.strategy = VRAM_STRATEGY_GROWTH;
    c.n_logical = 2;
    c.limit_bytes[0] = 1 * GiB;
    c.limit_bytes[1] = 2 * GiB;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_OK);
    int n = 0;
    assert_int_equal(vram_device_count(ctx, &n), VRAM_OK);
    assert_int_equal(n, 3);
    vram_device *d[3];
    vram_device_info di;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(vram_device_get(ctx, i, &d[i]), VRAM_OK);
        assert_int_equal(vram_device_info_get(d[i], &di), VRAM_OK);
        assert_int_equal(di.index, i);
        assert_int_equal(di.physical, i < 2 ? 0 : 1);
    }
    assert_int_equal(vram_device_get(ctx, 3, &d[0]), VRAM_E_NO_DEVICE);
    assert_int_equal(vram_device_info_get(d[1], &di), VRAM_OK);
    assert_int_equal(di.limit_bytes, 2 * GiB);

    void *p0, *p1;
    assert_int_equal(vram_alloc(d[0], 512 * MiB, NULL, &p0), VRAM_OK);
    assert_int_equal(vram_alloc(d[1], 1536 * MiB, NULL, &p1), VRAM_OK);
    assert_int_equal(stats_of(d[0]).bytes_in_use, 512 * MiB);
    assert_int_equal(stats_of(d[1]).bytes_in_use, 1536 * MiB);
    /* Caps are separate: device 0 cannot take 1 GiB more, device 1 can't
    ** take 1 GiB more either, device 2 (another GPU) can. */
    void *q;
    assert_int_equal(vram_alloc(d[0], 768 * MiB, NULL, &q), VRAM_E_OOM);
    assert_int_equal(vram_free(d[1], p0), VRAM_E_BAD_POINTER); /* not its block */
    assert_int_equal(vram_free(d[0], p0), VRAM_OK);
    assert_int_equal(vram_free(d[1], p1), VRAM_OK);
    assert_true(vram_check(d[0]) && vram_check(d[1]));
    vram_close(ctx);
}

/* ---- allocation ---- */

static void
test_alloc_basics(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 4 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, GiB);
    void *p = (void *)0x1;
    assert_int_equal(vram_alloc(dev, 0, NULL, &p), VRAM_OK);
    assert_null(p);
    assert_int_equal(vram_free(dev, NULL), VRAM_OK);

    void *stream = (void *)0xabc;
    assert_int_equal(vram_alloc(dev, 300, stream, &p), VRAM_OK);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 256, 0);
    uint64_t size = 0;
    void *s = NULL;
    assert_int_equal(vram_block_info(dev, p, &size, &s), VRAM_OK);
    assert_int_equal(size, 512);
    assert_ptr_equal(s, stream);
    assert_int_equal(vram_block_info(dev, p, NULL, NULL), VRAM_OK);
    assert_int_equal(vram_block_info(dev, (char *)p + 256, &size, NULL),
                     VRAM_E_BAD_POINTER);

    vram_stats st = stats_of(dev);
    assert_int_equal(st.bytes_in_use, 512);
    assert_int_equal(st.bytes_requested, 300);
    assert_int_equal(st.bytes_reserved, 2 * MiB); /* one granule for small requests */
    assert_int_equal(st.live_blocks, 1);
    assert_int_equal(st.num_allocs, 1);
    assert_int_equal(st.regions, 1);
    assert_int_equal(st.backend_calls, 1);
    assert_int_equal(st.bytes_limit, GiB);
    assert_int_equal(st.largest_free_block, 2 * MiB - 512);
    assert_true(st.metadata_bytes > 0);

    assert_int_equal(vram_free(dev, (char *)p + 256), VRAM_E_BAD_POINTER);
    assert_int_equal(vram_free(dev, p), VRAM_OK);
    assert_int_equal(vram_free(dev, p), VRAM_E_BAD_POINTER); /* double free */
    assert_non_null(strstr(vram_last_error(), "not a live allocation"));
    st = stats_of(dev);
    assert_int_equal(st.bytes_in_use, 0);
    assert_int_equal(st.num_frees, 1);
    assert_int_equal(st.largest_free_block, 2 * MiB); /* coalesced */
    assert_true(vram_check(dev));
    assert_int_equal(vram_alloc(NULL, 1, NULL, &p), VRAM_E_INVALID);
    assert_int_equal(vram_alloc(dev, 1, NULL, NULL), VRAM_E_INVALID);
    vram_close(ctx);
}

/* Host-backed blocks can be written: every byte of every live block gets
** its block's pattern, and no block overwrites another. */
static void
test_host_backed_no_overlap(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 256 * MiB, true);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, 200 * MiB);
    enum { N = 200 };
    unsigned char *p[N];
    size_t sz[N];
    srand(7);
    for (int i = 0; i < N; i++) {
        sz[i] = 1 + (size_t)rand() % (256 * 1024);
        assert_int_equal(vram_alloc(dev, sz[i], NULL, (void **)&p[i]), VRAM_OK);
        memset(p[i], i & 0xff, sz[i]);
    }
    for (int i = 0; i < N; i += 2)
        assert_int_equal(vram_free(dev, p[i]), VRAM_OK);
    for (int i = 0; i < N; i += 2) {
        assert_int_equal(vram_alloc(dev, sz[i], NULL, (void **)&p[i]), VRAM_OK);
        memset(p[i], i & 0xff, sz[i]);
    }
    for (int i = 0; i < N; i++)
        for (size_t k = 0; k < sz[i]; k++)
            if (p[i][k] != (unsigned char)(i & 0xff))
                fail_msg("block %d byte %zu overwritten", i, k);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

static void
test_memory_info_and_peak(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 4 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, GiB);
    void *a, *b;
    assert_int_equal(vram_alloc(dev, 10 * MiB, NULL, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 20 * MiB, NULL, &b), VRAM_OK);
    assert_int_equal(vram_free(dev, b), VRAM_OK);
    vram_memory_info mi;
    assert_int_equal(vram_get_memory_info(dev, &mi), VRAM_OK);
    assert_int_equal(mi.current, 10 * MiB);
    assert_int_equal(mi.peak, 30 * MiB);
    assert_int_equal(vram_reset_peak(dev), VRAM_OK);
    assert_int_equal(vram_get_memory_info(dev, &mi), VRAM_OK);
    assert_int_equal(mi.peak, 10 * MiB);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.peak_bytes_reserved, st.bytes_reserved);
    assert_int_equal(vram_get_memory_info(NULL, &mi), VRAM_E_INVALID);
    assert_int_equal(vram_reset_peak(NULL), VRAM_E_INVALID);
    vram_close(ctx);
}

/* ---- strategies ---- */

static void
test_preallocate_one_region(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 4 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_PREALLOCATE, GiB);
    void *p[10];
    for (int i = 0; i < 10; i++)
        assert_int_equal(vram_alloc(dev, (size_t)(i + 1) * MiB, NULL, &p[i]), VRAM_OK);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.regions, 1);
    assert_int_equal(st.bytes_reserved, GiB);
    assert_int_equal(st.backend_calls, 1);
    vram_physical_info info;
    assert_int_equal(vram_physical_info_get(ctx, 0, &info), VRAM_OK);
    assert_int_equal(info.free_bytes, 3 * GiB); /* the device sees the whole cap taken */
    vram_close(ctx);
}

/* TensorFlow backs off by 0.9x when the device refuses a region. */
static void
test_preallocate_backs_off(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 1 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_PREALLOCATE, 2 * GiB);
    void *p;
    assert_int_equal(vram_alloc(dev, MiB, NULL, &p), VRAM_OK);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.regions, 1);
    assert_true(st.bytes_reserved <= GiB && st.bytes_reserved > GiB * 8 / 10);
    assert_true(st.backend_calls > 1);
    vram_close(ctx);
}

static void
test_tf_compat_doubles(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 4 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH_TF, 2 * GiB);
    void *p;
    /* Each 1.5 MiB request needs a new region once the last is full:
    ** regions of 2, 4, 8 MiB. */
    for (int i = 0; i < 7; i++)
        assert_int_equal(vram_alloc(dev, 1536 * 1024, NULL, &p), VRAM_OK);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.regions, 3);
    assert_int_equal(st.bytes_reserved, 14 * MiB);
    /* A request above the current region size doubles until it fits. */
    assert_int_equal(vram_alloc(dev, 100 * MiB, NULL, &p), VRAM_OK);
    st = stats_of(dev);
    assert_int_equal(st.bytes_reserved, 14 * MiB + 128 * MiB);
    vram_close(ctx);
}

static void
test_growth_tracks_demand(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 8 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, 4 * GiB);
    void *p;
    assert_int_equal(vram_alloc(dev, 100 * MiB + 1, NULL, &p), VRAM_OK);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.bytes_reserved, 102 * MiB); /* whole granules */
    assert_int_equal(vram_free(dev, p), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 50 * MiB, NULL, &p), VRAM_OK);
    st = stats_of(dev);
    assert_int_equal(st.regions, 1); /* reused, split */
    vram_close(ctx);
}

/* Wholly free regions go back to the backend before an OOM is declared. */
static void
test_release_free_regions_before_oom(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 4 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, 10 * MiB);
    void *a, *b, *c;
    assert_int_equal(vram_alloc(dev, 4 * MiB, NULL, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 4 * MiB, NULL, &b), VRAM_OK);
    assert_int_equal(stats_of(dev).regions, 2);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_free(dev, b), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 8 * MiB, NULL, &c), VRAM_OK);
    vram_stats st = stats_of(dev);
    assert_int_equal(st.regions, 1);
    assert_int_equal(st.bytes_reserved, 8 * MiB);
    assert_int_equal(st.num_ooms, 0);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* ---- out of memory ---- */

static void
test_oom_line(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 16 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, GiB);
    void *p, *q = (void *)0x1;
    assert_int_equal(vram_alloc(dev, 700 * MiB, NULL, &p), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 500 * MiB, NULL, &q), VRAM_E_OOM);
    assert_ptr_equal(q, (void *)0x1);
    const char *line = vram_last_error();
    assert_non_null(strstr(line, "out of memory on GPU:0 (growth)"));
    assert_non_null(strstr(line, "tried to allocate 500.00 MiB"));
    assert_non_null(strstr(line, "700.00 MiB in use"));
    assert_non_null(strstr(line, "cap 1.00 GiB"));
    /* The setting to try, as it can be pasted into a shell: no space. */
    const char *hint = strstr(line, "try VRAM_MEMORY_LIMIT=");
    assert_non_null(hint);
    char value[32];
    size_t n = strcspn(hint + 22, " ;");
    assert_true(n > 0 && n < sizeof value);
    memcpy(value, hint + 22, n);
    value[n] = '\0';
    assert_string_equal(value, "2G");
    assert_true(hint[22 + n] == '\0'); /* the end of the line */
    assert_null(strchr(line, '\n'));
    assert_int_equal(stats_of(dev).num_ooms, 1);

    char buf[400];
    assert_int_equal(vram_explain_oom(dev, 100 * MiB, buf, sizeof buf), VRAM_OK);
    assert_non_null(strstr(buf, "fragmented")); /* fits under the cap, not in one piece */
    assert_non_null(strstr(buf, "VRAM_STRATEGY=expandable"));
    assert_int_equal(vram_explain_oom(dev, 1, buf, 0), VRAM_E_INVALID);

    /* A job bigger than the GPU: no cap to raise. */
    assert_int_equal(vram_explain_oom(dev, 20 * GiB, buf, sizeof buf), VRAM_OK);
    assert_non_null(strstr(buf, "more than the GPU has"));
    /* Huge requests are an OOM, not an overflow. */
    assert_int_equal(vram_alloc(dev, SIZE_MAX, NULL, &q), VRAM_E_OOM);
    vram_close(ctx);
}

/* Under expandable, the headroom to leave, as a pasteable setting. */
static void
test_oom_headroom_setting(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 16 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 3 * GiB);
    void *p;
    assert_int_equal(vram_alloc(dev, 2 * GiB, NULL, &p), VRAM_OK);
    char buf[400];
    assert_int_equal(vram_explain_oom(dev, 512 * MiB, buf, sizeof buf), VRAM_OK);
    /* 2.5 GiB needed, 1/8 more, rounded up to whole GiB. */
    assert_non_null(strstr(buf, "leave headroom with VRAM_MEMORY_LIMIT=3G"));
    assert_null(strstr(buf, "VRAM_MEMORY_LIMIT=3.00"));
    assert_int_equal(vram_free(dev, p), VRAM_OK);
    vram_close(ctx);
}

static void
test_oom_suggests_expandable_for_preallocate(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 16 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_PREALLOCATE, 100 * MiB);
    void *a, *b, *c;
    assert_int_equal(vram_alloc(dev, 40 * MiB, NULL, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 20 * MiB, NULL, &b), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 40 * MiB, NULL, &c), VRAM_OK);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_free(dev, c), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 60 * MiB, NULL, &a), VRAM_E_OOM);
    assert_non_null(strstr(vram_last_error(), "fragmented: try VRAM_STRATEGY=expandable"));
    vram_close(ctx);
}

static void
test_dump(void **state)
{
    (void)state;
    vram_context *ctx = sim_open(1, 4 * GiB, false);
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, GiB);
    void *p, *q;
    assert_int_equal(vram_alloc(dev, 3 * MiB, NULL, &p), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 3 * MiB, NULL, &q), VRAM_OK);
    assert_int_equal(vram_free(dev, p), VRAM_OK);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(vram_dump(dev, f), VRAM_OK);
    fclose(f);
    assert_non_null(strstr(text, "InUse:"));
    assert_non_null(strstr(text, "Limit:"));
    assert_non_null(strstr(text, "LargestFreeBlock:"));
    assert_non_null(strstr(text, "class"));
    assert_non_null(strstr(text, "Region 0x"));
    assert_non_null(strstr(text, "InUse at 0x"));
    assert_non_null(strstr(text, "[***")); /* occupancy map of the live region */
    assert_non_null(strstr(text, "[...")); /* and of the free one */
    free(text);
    assert_int_equal(vram_dump(dev, NULL), VRAM_E_INVALID);
    vram_close(ctx);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_texts),
        cmocka_unit_test(test_strategy_names),
        cmocka_unit_test(test_open_defaults),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_default_cap_reserve),
        cmocka_unit_test(test_fraction_and_limit),
        cmocka_unit_test(test_configure_after_init_fails),
        cmocka_unit_test(test_configure_invalid),
        cmocka_unit_test(test_logical_devices),
        cmocka_unit_test(test_alloc_basics),
        cmocka_unit_test(test_host_backed_no_overlap),
        cmocka_unit_test(test_memory_info_and_peak),
        cmocka_unit_test(test_preallocate_one_region),
        cmocka_unit_test(test_preallocate_backs_off),
        cmocka_unit_test(test_tf_compat_doubles),
        cmocka_unit_test(test_growth_tracks_demand),
        cmocka_unit_test(test_release_free_regions_before_oom),
        cmocka_unit_test(test_oom_line),
        cmocka_unit_test(test_oom_headroom_setting),
        cmocka_unit_test(test_oom_suggests_expandable_for_preallocate),
        cmocka_unit_test(test_dump),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
