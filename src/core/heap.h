/* SPDX-License-Identifier: MIT */
/*
** heap.h -- the best-fit-with-coalescing heap of one logical device.
**
** The heap knows regions (address ranges obtained from a backend) and
** blocks that tile them. It never calls a backend and takes no lock: the
** device (device.c) holds its lock around every heap call and decides when
** regions come and go. Invariants I1-I8 are in docs/ALLOCATOR.md.
**
** Free blocks live in size classes searched through a two-level bitmap:
** below 16 KiB one class per 256-byte size, above it 64 classes per power
** of two (each class spans 1/64 of its power of two). A search looks at a
** bounded number of blocks, so allocation and free are O(1).
*/
#ifndef VRAM_CORE_HEAP_H
#define VRAM_CORE_HEAP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "vram.h"

#define HEAP_ALIGN 256ULL /* every size and address is a multiple */
#define HEAP_GROUPS 64    /* second-level bitmaps */
#define HEAP_CLASSES (HEAP_GROUPS * 64)
#define HEAP_MAX_SIZE (1ULL << 56) /* larger requests are refused as OOM */

struct region;
struct block_ext;

struct block {
    uint64_t addr; /* device address */
    uint64_t size; /* bytes, multiple of HEAP_ALIGN */
    struct block *prev,
        *next; /* address neighbours in the same region, NULL at its edges */
    struct block *fprev, *fnext; /* free-list links while free; pool link while unused */
    struct region *region;
    uint64_t requested; /* bytes asked for, while allocated */
    void *stream;       /* stream it was allocated on, while allocated */
    uint64_t trace_id;  /* allocation number in the trace, while allocated */
    struct block_ext *ext; /* while allocated: the device's rarely used
                              extras (graph pool, other streams), owned by
                              the device (streams.c); NULL when none */
    uint32_t cls;       /* size class, while free */
    bool free;
    bool pending;       /* freed by the user, held until its stream's work is done */
};

struct region {
    uint64_t base, size;        /* bytes */
    uint64_t handle;            /* the backend's handle (the address for mem_alloc) */
    uint64_t live;              /* allocated blocks in this region */
    struct block *first;        /* lowest block */
    struct region *prev, *next; /* the heap's region list */
};

/* Open-addressing map from the address of an allocated block to it. */
struct addr_map {
    uint64_t *keys; /* 0 = empty slot */
    struct block **vals;
    uint64_t mask; /* capacity - 1; capacity is a power of two */
    uint64_t count;
    int shift; /* 64 - log2(capacity) */
};

/* Blocks come from slabs so that a split costs no malloc. */
struct block_pool {
    struct block *unused; /* linked through fnext */
    void **slabs;         /* every slab, for destruction */
    size_t n_slabs, cap_slabs;
};

struct heap {
    uint64_t top;                      /* bit g: groups[g] != 0 */
    uint64_t groups[HEAP_GROUPS];      /* bit c%64 of groups[c/64]: lists[c] != NULL */
    struct block *lists[HEAP_CLASSES]; /* free blocks per class */
    struct addr_map map;
    struct block_pool pool;
    struct region *regions; /* every region */
    uint64_t n_regions;
    uint64_t bytes_in_use;    /* sum of allocated block sizes */
    uint64_t bytes_requested; /* sum of their requested sizes */
    uint64_t bytes_free;      /* sum of free block sizes */
    uint64_t bytes_regions;   /* sum of region sizes */
    uint64_t live_blocks;     /* allocated blocks */
    uint64_t free_blocks;
    bool split_tf; /* TensorFlow's split rule, else split whenever
                      the remainder is at least HEAP_ALIGN */
};

/* Prepare an empty heap. VRAM_E_HOST_MEMORY. */
vram_status heap_init(struct heap *h, bool split_tf);

/* Release the heap's bookkeeping (not the regions' memory). */
void heap_destroy(struct heap *h);

/* Add [base, base+size) as a region holding one free block. SIZE is a
** multiple of HEAP_ALIGN. VRAM_E_HOST_MEMORY (nothing added then). */
vram_status heap_add_region(struct heap *h, uint64_t base, uint64_t size, uint64_t handle,
                            struct region **out);

/* Detach region R, which must be wholly free, from the heap and free its
** bookkeeping; the caller gives its memory back. */
void heap_remove_region(struct heap *h, struct region *r);

/* True when R holds no allocated block (it is then one free block). */
static inline bool
heap_region_free(const struct region *r)
{
    return r->live == 0;
}

/*
** Hand out a block of at least SIZE bytes (a multiple of HEAP_ALIGN), the
** best fit the bounded search finds, split by the heap's rule. NULL when
** no free block fits, or when out of host memory for bookkeeping (then
** *host_oom is set).
*/
struct block *heap_take(struct heap *h, uint64_t size, uint64_t requested, void *stream,
                        bool *host_oom);

/* The allocated block at ADDR, or NULL. */
struct block *heap_lookup(const struct heap *h, uint64_t addr);

/* Give block B back and merge it with free neighbours (I2). */
void heap_release(struct heap *h, struct block *b);

/* The largest free block's size (0 if none). O(blocks of the top class). */
uint64_t heap_largest_free(const struct heap *h);

/* Host bytes held by the bookkeeping. */
uint64_t heap_metadata_bytes(const struct heap *h);

/* Check I1-I7; on failure set the thread's last error and return false. */
bool heap_check(const struct heap *h);

/* Size class of a free block of SIZE bytes, and the smallest size in class C. */
uint32_t heap_class_of(uint64_t size);
uint64_t heap_class_min(uint32_t c);

#endif
