/* SPDX-License-Identifier: MIT */
/*
** internal.h -- the structs behind the public handles, shared by the
** files of src/core. Nothing here is exported.
*/
#ifndef VRAM_CORE_INTERNAL_H
#define VRAM_CORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/expand.h"
#include "core/heap.h"
#include "vram.h"

struct trace_writer;

/*
** What a strategy does differently, as data: the allocation paths read
** these instead of testing the strategy (device.c's table, one row per
** strategy of VRAM_STRATEGY_LIST).
*/
enum region_sizing {
    SIZE_ALL,      /* one region of everything the cap allows (preallocate) */
    SIZE_DOUBLING, /* 2 MiB, each next region twice the last (TensorFlow's growth) */
    SIZE_EXACT     /* what the request needs, in whole granules (growth) */
};

struct strategy_policy {
    bool split_tf;           /* the heap splits blocks by TensorFlow's rule */
    bool virtual_range;      /* one virtual range backed granule by granule
                                (expand.c) instead of backend regions */
    enum region_sizing sizing;
    bool recycle_first;      /* give wholly free regions back before growing,
                                when together they could hold the request */
    bool keeps_regions;      /* its one region is the cap, held for the
                                process's life: free regions are never given
                                back (before an OOM or by vram_release_idle) */
};

/* The policy of strategy S (a value of VRAM_STRATEGY_LIST). */
const struct strategy_policy *strategy_policy(vram_strategy s);

/* One logical device: a cap, a strategy and a heap. */
struct vram_device {
    pthread_mutex_t lock;     /* guards everything below but the constants */
    struct vram_context *ctx; /* constant */
    int index;                /* logical index, constant */
    int physical;             /* backend ordinal, constant */
    int slot;                 /* index among its physical device's logical devices */
    vram_strategy strategy;   /* constant after initialization */
    /* The strategy's policy, constant: a copy, so that the allocation path
    ** reads a flag with one load, as it read dev->strategy before the
    ** table (a pointer to the row cost vram_alloc two instructions). */
    struct strategy_policy policy;
    uint64_t limit;           /* the cap, bytes (vram_set_limit changes it) */
    uint64_t limit_max;       /* the configured cap, bytes, constant: the
                                 cap never exceeds it */
    uint64_t granularity;     /* region sizes are multiples of this, bytes */
    struct heap heap;
    struct expand ex;       /* the expandable strategy's backing; unused otherwise */
    pthread_cond_t grown;      /* a backend call that obtains or gives back memory ended */
    uint64_t pending;       /* bytes being obtained from the backend right now (I8) */
    uint64_t releasing;     /* bytes being given back right now, still counted */
    uint64_t tf_region;     /* growth:tf-compat: size of the next region, bytes */
    uint64_t peak_in_use;   /* bytes */
    uint64_t peak_reserved; /* bytes */
    uint64_t num_allocs, num_frees, num_ooms, backend_calls;
    uint64_t peak_live_blocks;  /* blocks */
    uint64_t bytes_alloc_total; /* bytes of every block handed out */
    uint64_t bytes_freed_total; /* bytes of every block freed */
    uint64_t alloc_retries;     /* allocations that gave memory back and retried */
    char last_oom[400]; /* the last OOM line on this device */
    /* Stream ordering (streams.c; docs/ALLOCATOR.md, "Streams"): blocks
    ** freed while several streams are in use wait in PEND until the events
    ** recorded at free time on every stream that used them have completed. */
    void *first_stream;   /* the stream of the first allocation */
    bool stream_seen;     /* first_stream is set */
    bool multi_stream;    /* a second stream has been seen (or recorded) */
    bool polling;         /* a thread is querying pending events */
    struct pending *pend; /* FIFO ring of pending frees */
    uint64_t pend_cap, pend_head, pend_len;
    uint64_t held_bytes; /* bytes of blocks the user freed that the allocator
                            still holds: pending, in a graph pool's free
                            list, or deferred while a graph is captured */
    /* CUDA graph pools (streams.c): while one is open, allocations on a
    ** stream that is capturing a graph go to it, and nothing the device
    ** does may synchronize, query events or free device memory. */
    struct graph_pool *pools; /* N_POOLS entries, released ones reused */
    uint32_t n_pools, cap_pools;
    _Atomic uint32_t pools_open; /* pools between begin and end; read
                                    without the lock by vram_alloc */
    struct block *deferred;      /* non-pool blocks freed while a pool was
                                    open, linked through fnext: freed for
                                    real when the last pool closes */
};

/* A block freed on STREAM, reusable once EVENT (recorded on STREAM at
** free) and every event in MORE (recorded on the other streams that used
** it, vram_record_stream) have completed. An event handle of 0 is done. */
struct pending {
    struct block *b;
    void *stream;
    uint64_t event;
    uint64_t *more;  /* NULL when no other stream used the block */
    uint32_t n_more; /* entries of MORE */
};

/* What a few blocks need beyond struct block: the graph pool it came from
** and the streams other than its allocation stream that used it
** (vram_record_stream). Owned by the block while it is allocated. */
struct block_ext {
    uint64_t pool;       /* the graph pool's id; 0 = the device's heap */
    uint32_t n_uses, cap_uses;
    void *uses[];        /* N_USES distinct streams */
};

/* A CUDA graph's private memory pool: blocks allocated while a graph was
** captured into it, which only the pool reuses until it is released (the
** graph may replay into them at any time). */
struct graph_pool {
    uint64_t id;       /* the caller's pool id; 0 = slot unused */
    bool open;         /* between vram_pool_begin and vram_pool_end */
    uint64_t live;     /* blocks allocated from the pool and not freed */
    struct block *free_list; /* freed blocks held for reuse, through fnext */
    uint64_t free_bytes;
};

/* One physical device. */
struct physical {
    vram_physical_info info;   /* as found at vram_open */
    vram_device_config config; /* frozen once initialized */
    bool initialized;
    int n_logical;            /* set at initialization */
    struct vram_device *devs; /* n_logical devices, set at initialization */
};

struct vram_context {
    pthread_mutex_t lock;    /* guards configuration and initialization */
    struct backend *backend; /* owned */
    int n_physical;
    struct physical *phys;      /* n_physical entries */
    int64_t reserve_mb;         /* TF_DEVICE_MIN_SYS_MEMORY_IN_MB, -1 = TF's rule */
    bool oom_dump;              /* VRAM_OOM_DUMP */
    struct trace_writer *trace; /* VRAM_TRACE, or NULL */
    atomic_bool trace_failed;   /* a trace write failed (reported once) */
    _Atomic uint64_t next_trace_id;
};

/* The device lock: every function named _locked is called with it held
** and returns with it held (it may drop it around a backend call, and
** says so); a function that returns with it released ends in _unlock.
** A call that fails under it leaves with
** return error_set_unlock(&dev->lock, status, ...). */
static inline void
device_lock(struct vram_device *dev)
{
    pthread_mutex_lock(&dev->lock);
}

static inline void
device_unlock(struct vram_device *dev)
{
    pthread_mutex_unlock(&dev->lock);
}

/* The live bytes the user holds: blocks the allocator holds after their
** free (pending, pooled, deferred) are not in use. */
static inline uint64_t
device_in_use_locked(const struct vram_device *dev)
{
    return dev->heap.bytes_in_use - dev->held_bytes;
}

/* Bytes held from the backend, including regions being given back. For a
** virtual-range strategy (expandable), the physical memory held (its one
** region is address space). The caller holds dev->lock. */
static inline uint64_t
device_reserved_locked(const struct vram_device *dev)
{
    if (dev->policy.virtual_range)
        return expand_phys_bytes(&dev->ex);
    return dev->heap.bytes_regions + dev->releasing;
}

/* device.c */
vram_status device_init(struct vram_device *dev, struct vram_context *ctx, int index,
                        int physical, int slot, vram_strategy strategy, uint64_t limit,
                        uint64_t granularity);
void device_destroy(struct vram_device *dev);
void device_release_block_locked(struct vram_device *dev, struct block *b);

/* streams.c: the stream-ordered side of a device (see its header). */
void block_ext_free(struct block *b);
bool streams_capturing(struct vram_device *dev, void *stream); /* without the lock */
struct block *streams_reuse_locked(struct vram_device *dev, uint64_t size, void *stream,
                                   uint64_t *event);
void streams_poll_locked(struct vram_device *dev, uint64_t max);
struct block *pool_take_locked(struct vram_device *dev, uint64_t size, void *stream,
                               uint64_t *pool);
vram_status pool_tag_locked(struct vram_device *dev, struct block *b, uint64_t pool);
vram_status streams_free_locked(struct vram_device *dev, struct block *b, bool *held);
void streams_destroy(struct vram_device *dev);
bool streams_check_locked(struct vram_device *dev);

/* oom.c: render the one-line explanation of SIZE failing on DEV. The caller
** holds dev->lock. */
void oom_explain_locked(struct vram_device *dev, uint64_t size, char *buf, size_t len);
vram_status oom_dump_locked(struct vram_device *dev, FILE *out);

#endif
