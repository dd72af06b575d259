/* SPDX-License-Identifier: MIT */
/*
** testutil.h -- helpers shared by the unit tests: open a simulated
** context that ignores the environment, and fetch a configured device.
*/
#ifndef VRAM_TESTS_TESTUTIL_H
#define VRAM_TESTS_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "vram.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

/* A simulated context of DEVICES devices of MEMORY bytes each (0 = the
** defaults), reading no environment. */
static inline vram_context *
sim_open(int devices, uint64_t memory, bool host_backed)
{
    vram_options o;
    memset(&o, 0, sizeof o);
    o.backend = VRAM_BACKEND_SIM;
    o.ignore_environment = true;
    o.sim.devices = devices;
    o.sim.memory_bytes = memory;
    o.sim.host_backed = host_backed;
    vram_context *ctx = NULL;
    assert_int_equal(vram_open(&o, &ctx), VRAM_OK);
    assert_non_null(ctx);
    return ctx;
}

/* Configure physical device 0 of CTX with one logical device and fetch it. */
static inline vram_device *
sim_device(vram_context *ctx, vram_strategy strategy, uint64_t limit)
{
    vram_device_config c;
    memset(&c, 0, sizeof c);
    c.strategy = strategy;
    c.limit_bytes[0] = limit;
    assert_int_equal(vram_configure(ctx, 0, &c), VRAM_OK);
    vram_device *dev = NULL;
    assert_int_equal(vram_device_get(ctx, 0, &dev), VRAM_OK);
    assert_non_null(dev);
    return dev;
}

static inline vram_stats
stats_of(vram_device *dev)
{
    vram_stats s;
    assert_int_equal(vram_get_stats(dev, &s), VRAM_OK);
    return s;
}

/* One training step's loss computation in units of U bytes (the pattern
** of gpt2_bf16_b16): blocks of 2U, 4U and 4U; the first two freed; two of
** 4U more, the first in their hole and the second past the third block
** (the rest of the hole is too small); all freed. 12U live at the peak,
** 14U of addresses touched. */
static inline void
loss_step(vram_device *dev, uint64_t u)
{
    void *a, *b, *c, *d, *e;
    assert_int_equal(vram_alloc(dev, 2 * u, NULL, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 4 * u, NULL, &b), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 4 * u, NULL, &c), VRAM_OK);
    assert_int_equal(vram_free(dev, b), VRAM_OK);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 4 * u, NULL, &d), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 4 * u, NULL, &e), VRAM_OK);
    assert_int_equal(vram_free(dev, d), VRAM_OK);
    assert_int_equal(vram_free(dev, c), VRAM_OK);
    assert_int_equal(vram_free(dev, e), VRAM_OK);
    assert_true(vram_check(dev));
}

#endif
