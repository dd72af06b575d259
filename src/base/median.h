/* SPDX-License-Identifier: MIT */
/*
** median.h -- the median of repeated timings, written once for `vram
** replay --repeat` and the GPU benchmarks. Inline: the benchmarks that
** link nothing of vram include it too.
*/
#ifndef VRAM_BASE_MEDIAN_H
#define VRAM_BASE_MEDIAN_H

#include <stddef.h>
#include <stdlib.h>

static inline int
median_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of the N (> 0) values V, which it sorts: the middle one, or
** the mean of the middle two. */
static inline double
median_of(double *v, size_t n)
{
    qsort(v, n, sizeof *v, median_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

#endif
