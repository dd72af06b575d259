/* SPDX-License-Identifier: MIT */
/*
** zmem.h -- zeroed arrays too large for calloc to be cheap: the
** expandable strategy's per-unit tables (one entry per 8 MiB of twice the
** cap: hundreds of KiB) and the simulator's per-granule map.
**
** calloc of such a size is an mmap the first time; once one is freed,
** glibc raises its mmap threshold and the next calloc comes from the heap
** and is cleared with memset -- measured: context setup went from 40 to
** 150 us in `vram replay --repeat 3`, tripling leak_mlp's ns/op. mmap'ed
** zero pages cost nothing until touched, and a table is touched only
** where memory is.
*/
#ifndef VRAM_BASE_ZMEM_H
#define VRAM_BASE_ZMEM_H

#include <stddef.h>

/* N elements of SIZE bytes, zeroed; NULL when out of memory or when N x
** SIZE overflows. */
void *zmem_alloc(size_t n, size_t size);

/* Free P from zmem_alloc(N, SIZE), with the same N and SIZE. NULL does
** nothing. */
void zmem_free(void *p, size_t n, size_t size);

#endif
