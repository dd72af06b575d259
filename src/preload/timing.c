/* SPDX-License-Identifier: MIT */
/*
** timing.c -- the measurement build of the preload library
** (libvram-preload-timing.so, built with VRAM_HOOK_TIMING): each counted
** hook records the time it spends outside the real driver call, from its
** entry to the call and from the call's return to its exit, and a program
** that loaded the library reads the samples back (vram_hook_timing). The
** driver's own time, and its noise, are not in the figure: on a real
** driver, whose allocation calls vary by microseconds, it resolves what
** the hook adds to within nanoseconds. What it leaves out is any slowing
** of the driver's own code by the lines the hook brought into the caches;
** the paired measurement of tests/preload/hook_cost.py includes that.
** Never part of libvram-preload.so.
*/
#include <stdint.h>
#include <string.h>

#include "base/clock.h"
#include "preload/preload.h"

/* The last SAMPLES samples of each hook, in ticks. */
enum { SAMPLES = 1 << 16 };
static uint32_t samples[HOOK_COUNT][SAMPLES];
static uint64_t n_samples[HOOK_COUNT]; /* ever recorded (atomic) */

void
hook_timing_record(enum hook_id id, uint64_t ticks)
{
    uint64_t k = __atomic_fetch_add(&n_samples[id], 1, __ATOMIC_RELAXED);
    samples[id][k % SAMPLES] = ticks > UINT32_MAX ? UINT32_MAX : (uint32_t)ticks;
}

/* Nanoseconds per tick, measured against CLOCK_MONOTONIC over 20 ms. */
static double
ns_per_tick(void)
{
    uint64_t t0 = now_mono_ns();
    uint64_t k0 = hook_ticks();
    while (now_mono_ns() - t0 < UINT64_C(20000000)) {
    }
    return (double)(now_mono_ns() - t0) / (double)(hook_ticks() - k0);
}

/* The samples of SYMBOL, newest last (preload.h). */
long
vram_hook_timing(const char *symbol, double *ns, long max)
{
    int id = -1;
    for (int i = 0; i < HOOK_COUNT && symbol != NULL; i++)
        if (strcmp(hook_name((enum hook_id)i), symbol) == 0)
            id = i;
    if (id < 0 || ns == NULL || max <= 0)
        return 0;
    uint64_t n = __atomic_load_n(&n_samples[id], __ATOMIC_RELAXED);
    long have = n < SAMPLES ? (long)n : SAMPLES;
    long k = have < max ? have : max;
    double scale = ns_per_tick();
    for (long i = 0; i < k; i++)
        ns[i] = scale * samples[id][(n - (uint64_t)k + (uint64_t)i) % SAMPLES];
    return k;
}

/* What the measurement adds to a sample: the median of 1,001 samples
** taken around no work at all (preload.h). */
double
vram_hook_timing_overhead(void)
{
    enum { N = 1001 };
    uint64_t v[N];
    for (int i = 0; i < N; i++) {
        uint64_t t0 = hook_ticks(), t1 = hook_ticks(), t2 = hook_ticks();
        v[i] = (t1 - t0) + (hook_ticks() - t2);
    }
    /* Insertion sort: N is small and this runs once. */
    for (int i = 1; i < N; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            uint64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return ns_per_tick() * (double)v[N / 2];
}
