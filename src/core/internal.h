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

/* One logical device: a cap, a strategy and a heap. */
struct vram_device {
    pthread_mutex_t lock;     /* guards everything below but the constants */
    struct vram_context *ctx; /* constant */
    int index;                /* logical index, constant */
    int physical;             /* backend ordinal, constant */
    int slot;                 /* index among its physical device's logical devices */
    vram_strategy strategy;   /* constant after initialization */
    uint64_t limit;           /* the cap, bytes, constant */
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
    char last_oom[400]; /* the last OOM line on this device */
    /* Stream ordering (docs/ALLOCATOR.md, "Streams"): blocks freed while
    ** several streams are in use wait here until an event recorded on
    ** their stream at free time has completed. */
    void *first_stream;   /* the stream of the first allocation */
    bool stream_seen;     /* first_stream is set */
    bool multi_stream;    /* a second stream has been seen */
    bool polling;         /* a thread is querying pending events */
    struct pending *pend; /* FIFO ring of pending frees */
    uint64_t pend_cap, pend_head, pend_len;
    uint64_t pend_bytes; /* bytes of pending blocks */
};

/* A block freed on STREAM, reusable by other streams once EVENT is done. */
struct pending {
    struct block *b;
    void *stream;
    uint64_t event;
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

/* Bytes held from the backend, including regions being given back. For
** expandable, the physical memory held (its one region is address space).
** The caller holds dev->lock. */
static inline uint64_t
device_reserved_locked(const struct vram_device *dev)
{
    if (dev->strategy == VRAM_STRATEGY_EXPANDABLE)
        return expand_phys_bytes(&dev->ex);
    return dev->heap.bytes_regions + dev->releasing;
}

/* device.c */
vram_status device_init(struct vram_device *dev, struct vram_context *ctx, int index,
                        int physical, int slot, vram_strategy strategy, uint64_t limit,
                        uint64_t granularity);
void device_destroy(struct vram_device *dev);

/* oom.c: render the one-line explanation of SIZE failing on DEV. The caller
** holds dev->lock. */
void oom_explain_locked(struct vram_device *dev, uint64_t size, char *buf, size_t len);
vram_status oom_dump_locked(struct vram_device *dev, FILE *out);

#endif
