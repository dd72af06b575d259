/* SPDX-License-Identifier: MIT */
/*
** clock.h -- the clocks vram reads, written once: monotonic time for
** intervals and timeouts, wall-clock microseconds for the trace's t_us
** column (docs/TRACE_FORMAT.md). Inline: the allocator reads the wall clock
** on every traced allocation.
*/
#ifndef VRAM_BASE_CLOCK_H
#define VRAM_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t
now_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC_COARSE in nanoseconds: the time of the last tick (a few
** milliseconds old at most), read without the TSC, for intervals of tens
** of milliseconds on a hot path. */
static inline uint64_t
now_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in seconds. */
static inline double
now_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CLOCK_REALTIME in microseconds since the epoch: a trace event's t_us. */
static inline uint64_t
now_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

#endif
