/* SPDX-License-Identifier: MIT */
/*
** zmem.c -- zeroed arrays: mmap'ed from 64 KiB on, calloc below.
*/
#include "base/zmem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define ZMEM_MMAP_FROM (64 * 1024)

void *
zmem_alloc(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    size_t bytes = n * size;
    if (bytes < ZMEM_MMAP_FROM)
        return calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void
zmem_free(void *p, size_t n, size_t size)
{
    if (p == NULL)
        return;
    size_t bytes = n * size;
    if (bytes < ZMEM_MMAP_FROM)
        free(p);
    else
        munmap(p, bytes);
}
