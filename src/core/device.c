/* SPDX-License-Identifier: MIT */
/*
** device.c -- a logical device: its cap, its strategy's growth policy and
** the allocate/free paths around the heap.
**
** What differs by strategy is data: the policy table below, read through
** dev->policy, instead of tests of the strategy in the allocation paths.
**
** Lock rule (docs/STYLE.md, habit 11): dev->lock guards the heap and the
** counters; it is never held across a backend call. Growing is "reserve,
** call, then commit or undo": the bytes being obtained are counted in
** dev->pending while the lock is dropped, so concurrent growers never pass
** the cap together (invariant I8 in docs/ALLOCATOR.md).
*/
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/size.h"
#include "core/internal.h"
#include "trace/trace.h"

/* Requests below this share a region of one granule (2 MiB on CUDA):
** small tensors are many and short-lived, and one backend call per
** granule keeps their calls few. */
#define SMALL_REQUEST (1ULL << 20)

static inline uint64_t
round_up(uint64_t x, uint64_t to)
{
    return (x + to - 1) / to * to;
}

/* ================================================================== */
/* Strategies                                                          */
/* ================================================================== */

static const struct strategy_policy policies[] = {
    [VRAM_STRATEGY_PREALLOCATE] = {.split_tf = true, .sizing = SIZE_ALL, .keeps_regions = true},
    [VRAM_STRATEGY_GROWTH] = {.sizing = SIZE_EXACT, .recycle_first = true},
    [VRAM_STRATEGY_GROWTH_TF] = {.split_tf = true, .sizing = SIZE_DOUBLING},
    [VRAM_STRATEGY_EXPANDABLE] = {.virtual_range = true},
};

#define COUNT_STRATEGY(name, num, str) +1
_Static_assert(sizeof policies / sizeof policies[0] == 0 VRAM_STRATEGY_LIST(COUNT_STRATEGY),
               "one policy per strategy");
#undef COUNT_STRATEGY

const struct strategy_policy *
strategy_policy(vram_strategy s)
{
    return &policies[s];
}

/* Bytes the cap still allows the device to obtain (I8). */
static inline uint64_t
headroom_locked(const struct vram_device *dev)
{
    uint64_t held = device_reserved_locked(dev) + dev->pending;
    return held >= dev->limit ? 0 : dev->limit - held;
}

vram_status
device_init(struct vram_device *dev, struct vram_context *ctx, int index, int physical,
            int slot, vram_strategy strategy, uint64_t limit, uint64_t granularity)
{
    memset(dev, 0, sizeof *dev);
    const struct strategy_policy *policy = strategy_policy(strategy);
    vram_status st = heap_init(&dev->heap, policy->split_tf);
    if (st != VRAM_OK)
        return st;
    pthread_mutex_init(&dev->lock, NULL);
    pthread_cond_init(&dev->grown, NULL);
    expand_init(&dev->ex);
    dev->ctx = ctx;
    dev->index = index;
    dev->physical = physical;
    dev->slot = slot;
    dev->strategy = strategy;
    dev->policy = *policy;
    dev->limit = limit;
    dev->limit_max = limit;
    dev->granularity = granularity ? granularity : (2ULL << 20);
    /* TensorFlow: the first region is 2 MiB (or the cap if smaller). */
    dev->tf_region =
        limit < (2ULL << 20) ? round_up(limit ? limit : 1, HEAP_ALIGN) : (2ULL << 20);
    return VRAM_OK;
}

void
device_destroy(struct vram_device *dev)
{
    struct backend *be = dev->ctx->backend;
    streams_destroy(dev);
    /* Blocks still allocated at close: their extras (the memory itself
    ** goes with the regions). */
    for (struct region *r = dev->heap.regions; r != NULL; r = r->next)
        for (struct block *b = r->first; b != NULL; b = b->next)
            if (!b->free)
                block_ext_free(b);
    /* Expandable's one region is address space, given back by
    ** expand_destroy; the others' regions are backend allocations. */
    bool expandable = dev->policy.virtual_range;
    expand_destroy(dev);
    for (struct region *r = dev->heap.regions; r != NULL && !expandable; r = r->next) {
        if (be->ops->mem_free(be, dev->physical, r->handle) != VRAM_OK)
            log_write(LOG_CONFIG, "GPU:%d: giving a region back at close failed: %s",
                      dev->index, vram_last_error());
    }
    heap_destroy(&dev->heap);
    pthread_cond_destroy(&dev->grown);
    pthread_mutex_destroy(&dev->lock);
}

/* ================================================================== */
/* Growth policy                                                       */
/* ================================================================== */

/*
** The size of the next region for a request of SIZE bytes (a multiple of
** HEAP_ALIGN), or 0 when the cap leaves no room for it. *forced tells
** the tf-compat policy whether the request itself forced the size up.
*/
static uint64_t
region_size_locked(const struct vram_device *dev, uint64_t size, bool *forced)
{
    uint64_t room = headroom_locked(dev) / HEAP_ALIGN * HEAP_ALIGN;
    *forced = false;
    if (size > room)
        return 0;
    uint64_t want;
    switch (dev->policy.sizing) {
    case SIZE_ALL:
        return room; /* everything the cap allows, in one piece */
    case SIZE_DOUBLING:
        want = dev->tf_region;
        while (want < size) {
            want *= 2;
            *forced = true;
        }
        break;
    case SIZE_EXACT:
    default:
        /* Exactly what is needed, in whole granules: a region's unused
        ** tail is less than one granule, and small requests share one. */
        want = size < SMALL_REQUEST ? dev->granularity : round_up(size, dev->granularity);
        break;
    }
    if (want > room)
        want = room / dev->granularity * dev->granularity >= size
                   ? room / dev->granularity * dev->granularity
                   : size;
    return want;
}

/*
** Obtain a region of WANT bytes (at least SIZE) from the backend and add
** it to the heap. On refusal for lack of memory, retry with 0.9x the size,
** as TensorFlow does, while it still holds SIZE. Drops and retakes the
** lock around each backend call.
*/
static vram_status
grow_locked(struct vram_device *dev, uint64_t want, uint64_t size, bool forced)
{
    struct backend *be = dev->ctx->backend;
    for (;;) {
        uint64_t addr = 0;
        dev->pending += want; /* I8: reserved before the call */
        device_unlock(dev);
        vram_status st = be->ops->mem_alloc(be, dev->physical, want, &addr);
        device_lock(dev);
        dev->pending -= want;
        dev->backend_calls++;
        pthread_cond_broadcast(&dev->grown); /* waiters retry (see vram_alloc) */
        if (st == VRAM_OK) {
            st = heap_add_region(&dev->heap, addr, want, addr, NULL);
            if (st != VRAM_OK) {
                device_unlock(dev);
                be->ops->mem_free(be, dev->physical, addr);
                device_lock(dev);
                dev->backend_calls++;
                return error_set(VRAM_E_HOST_MEMORY,
                                 "out of host memory for the allocator");
            }
            uint64_t reserved = device_reserved_locked(dev);
            if (reserved > dev->peak_reserved)
                dev->peak_reserved = reserved;
            if (dev->policy.sizing == SIZE_DOUBLING)
                dev->tf_region = forced ? want : 2 * want;
            if (log_enabled(LOG_REGION)) {
                char a[32], b[32];
                log_write(LOG_REGION,
                          "GPU:%d: new region of %s at 0x%" PRIx64 " (reserved %s)",
                          dev->index, size_format(want, a, sizeof a), addr,
                          size_format(reserved, b, sizeof b));
            }
            return VRAM_OK;
        }
        if (st != VRAM_E_OOM)
            return st;
        uint64_t next = round_up((uint64_t)((double)want * 0.9), HEAP_ALIGN);
        if (next < size || next >= want)
            return VRAM_E_OOM;
        want = next;
    }
}

/*
** Give every wholly free region back to the backend, so that its memory
** can be obtained again in the shape the current request needs. Returns
** the number of regions given back, and adds their bytes to *BYTES when
** not NULL. Drops and retakes the lock.
*/
static uint64_t
release_free_regions_bytes_locked(struct vram_device *dev, uint64_t *bytes)
{
    uint64_t n = 0;
    for (struct region *r = dev->heap.regions; r != NULL; r = r->next)
        n += heap_region_free(r);
    if (n == 0)
        return 0;
    struct {
        uint64_t handle, size;
    } *list = malloc(n * sizeof *list);
    if (list == NULL)
        return 0;
    uint64_t k = 0;
    struct region *r = dev->heap.regions;
    while (r != NULL) {
        struct region *next = r->next;
        if (heap_region_free(r)) {
            list[k].handle = r->handle;
            list[k].size = r->size;
            k++;
            dev->releasing += r->size; /* still counted until the backend has it */
            heap_remove_region(&dev->heap, r);
        }
        r = next;
    }
    struct backend *be = dev->ctx->backend;
    device_unlock(dev);
    vram_status *res = calloc(n, sizeof *res);
    for (k = 0; k < n; k++)
        if (res != NULL)
            res[k] = be->ops->mem_free(be, dev->physical, list[k].handle);
    device_lock(dev);
    pthread_cond_broadcast(&dev->grown);
    uint64_t released = 0;
    for (k = 0; k < n; k++) {
        dev->backend_calls++;
        dev->releasing -= list[k].size;
        if (res != NULL && res[k] == VRAM_OK) {
            released++;
            if (bytes != NULL)
                *bytes += list[k].size;
            continue;
        }
        /* The backend kept it: the region is still ours and still usable. */
        if (heap_add_region(&dev->heap, list[k].handle, list[k].size, list[k].handle,
                            NULL) != VRAM_OK)
            log_write(LOG_CONFIG, "GPU:%d: lost track of a region of %" PRIu64 " bytes",
                      dev->index, list[k].size);
    }
    if (log_enabled(LOG_REGION))
        log_write(LOG_REGION, "GPU:%d: gave %" PRIu64 " free regions back", dev->index,
                  released);
    free(res);
    free(list);
    return released;
}

static uint64_t
release_free_regions_locked(struct vram_device *dev)
{
    return release_free_regions_bytes_locked(dev, NULL);
}

/* Bytes in wholly free regions. O(regions): only on the growth path. */
static uint64_t
free_region_bytes_locked(const struct vram_device *dev)
{
    uint64_t n = 0;
    for (const struct region *r = dev->heap.regions; r != NULL; r = r->next)
        if (heap_region_free(r))
            n += r->size;
    return n;
}

/* ================================================================== */
/* Allocate and free                                                   */
/* ================================================================== */

static void
trace_event(struct vram_device *dev, char op, uint64_t id, uint64_t size, void *stream)
{
    struct trace_event ev = {.t_us = now_wall_us(),
                             .id = id,
                             .size = size,
                             .stream = (uint64_t)(uintptr_t)stream,
                             .device = dev->index,
                             .op = op};
    /* The writer's errors are sticky: say so once, not once per event. */
    if (trace_writer_event(dev->ctx->trace, &ev) != VRAM_OK &&
        !atomic_exchange(&dev->ctx->trace_failed, true))
        log_write(LOG_CONFIG, "trace: %s; no further events are recorded",
                  vram_last_error());
}

/*
** Refuse an allocation of SIZE bytes: count it, explain it, unlock, and
** record an 'o' event in the trace (outside the lock, like every trace
** event). The explanation is copied before unlocking, so that the
** thread's last error is this refusal's line even if another thread
** refuses meanwhile or the trace write fails.
*/
static vram_status
oom_unlock(struct vram_device *dev, uint64_t size)
{
    char line[sizeof dev->last_oom];
    dev->num_ooms++;
    oom_explain_locked(dev, size, dev->last_oom, sizeof dev->last_oom);
    log_write(LOG_CONFIG, "%s", dev->last_oom);
    if (dev->ctx->oom_dump)
        oom_dump_locked(dev, log_stream());
    memcpy(line, dev->last_oom, sizeof line);
    device_unlock(dev);
    if (dev->ctx->trace != NULL)
        trace_event(dev, TRACE_OOM, 0, size, NULL);
    return error_set(VRAM_E_OOM, "%s", line);
}


/* ================================================================== */
/* Streams                                                             */
/* ================================================================== */

/* Give block B back to the heap (and its memory to expandable's idle
** units): the user freed it and no stream can still be using it. */
void
device_release_block_locked(struct vram_device *dev, struct block *b)
{
    if (b->ext != NULL)
        block_ext_free(b);
    if (dev->policy.virtual_range)
        expand_unback_locked(dev, b->addr, b->size);
    heap_release(&dev->heap, b);
}

/*
** Account for block B handed out for SIZE bytes (taken from the heap, or
** from the pool POOL when not 0, which then owns it), release the lock,
** then trace and log.
*/
static vram_status
alloc_finish_unlock(struct vram_device *dev, struct block *b, size_t size, void *stream,
                    uint64_t pool, void **out)
{
    if (pool != 0 && pool_tag_locked(dev, b, pool) != VRAM_OK) {
        device_release_block_locked(dev, b);
        return error_set_unlock(&dev->lock, VRAM_E_HOST_MEMORY,
                                "out of host memory for the allocator");
    }
    dev->num_allocs++;
    dev->bytes_alloc_total += b->size;
    if (dev->heap.live_blocks > dev->peak_live_blocks)
        dev->peak_live_blocks = dev->heap.live_blocks;
    if (device_in_use_locked(dev) > dev->peak_in_use)
        dev->peak_in_use = device_in_use_locked(dev);
    uint64_t reserved = device_reserved_locked(dev);
    if (reserved > dev->peak_reserved)
        dev->peak_reserved = reserved;
    struct vram_context *ctx = dev->ctx;
    uint64_t id = 0;
    if (ctx->trace != NULL) {
        id = atomic_fetch_add(&ctx->next_trace_id, 1);
        b->trace_id = id;
    }
    uint64_t addr = b->addr;
    device_unlock(dev);
    if (ctx->trace != NULL)
        trace_event(dev, TRACE_ALLOC, id, size, stream);
    if (log_enabled(LOG_LARGE) && (size >= SMALL_REQUEST || log_enabled(LOG_ALL)))
        log_write(LOG_LARGE, "GPU:%d: alloc %zu bytes at 0x%" PRIx64 " stream %p",
                  dev->index, size, addr, stream);
    *out = (void *)(uintptr_t)addr;
    return VRAM_OK;
}

/* Hand out again a held block B (pending, or in a graph pool's free list),
** whose owner the caller has settled, for SIZE bytes on STREAM. */
static vram_status
reuse_finish_unlock(struct vram_device *dev, struct block *b, size_t size, void *stream,
                    void **out)
{
    dev->heap.bytes_requested += size - b->requested;
    b->requested = size;
    b->stream = stream;
    return alloc_finish_unlock(dev, b, size, stream, 0, out);
}

/*
** The expandable path: place the block in the one virtual range, then make
** sure physical memory is mapped under it (expand.c). Called with the lock
** held; returns with it released.
*/
static vram_status
alloc_expandable_unlock(struct vram_device *dev, size_t size, uint64_t rounded,
                        void *stream, uint64_t pool, void **out)
{
    vram_status st = VRAM_OK;
    if (!dev->ex.ready || dev->ex.reserving) /* after the first: one load */
        st = expand_setup_locked(dev);
    if (st != VRAM_OK) {
        device_unlock(dev);
        return st;
    }
    for (bool polled = false;; polled = true) {
        bool host_oom;
        struct block *b = heap_take(&dev->heap, rounded, size, stream, &host_oom);
        if (b == NULL && host_oom)
            return error_set_unlock(&dev->lock, VRAM_E_HOST_MEMORY,
                                    "out of host memory for the allocator");
        if (b != NULL) {
            st = expand_back_locked(dev, b->addr, b->size);
            if (st == VRAM_OK)
                return alloc_finish_unlock(dev, b, size, stream, pool, out);
            heap_release(&dev->heap, b);
            if (st != VRAM_E_OOM) {
                device_unlock(dev);
                return st;
            }
        }
        /* Before refusing: pending frees whose work is done come back. */
        uint64_t before = dev->pend_len;
        if (!polled && before > 0) {
            streams_poll_locked(dev, UINT64_MAX);
            if (dev->pend_len < before)
                continue;
        }
        return oom_unlock(dev, size);
    }
}

vram_status
vram_alloc(vram_device *dev, size_t size, void *stream, void **out)
{
    if (dev == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "vram_alloc: NULL device or out-pointer");
    if (size == 0) {
        *out = NULL;
        return VRAM_OK;
    }
    /* Outside the lock: a driver query, made only while a graph pool is
    ** open (a CUDA graph is being captured). */
    bool capturing = atomic_load_explicit(&dev->pools_open, memory_order_acquire) > 0 &&
                     streams_capturing(dev, stream);
    device_lock(dev);
    if (size > HEAP_MAX_SIZE)
        return oom_unlock(dev, size);
    uint64_t rounded = round_up(size, HEAP_ALIGN);
    bool released = false;
    struct block *b;
    if (!dev->stream_seen) {
        dev->stream_seen = true;
        dev->first_stream = stream;
    } else if (stream != dev->first_stream) {
        dev->multi_stream = true;
    }
    uint64_t pool = 0;
    if (capturing) {
        b = pool_take_locked(dev, rounded, stream, &pool);
        if (b != NULL)
            return reuse_finish_unlock(dev, b, size, stream, out);
    }
    if (dev->pend_len > 0 && dev->pools_open == 0) {
        uint64_t event = 0;
        b = streams_reuse_locked(dev, rounded, stream, &event);
        if (b != NULL) {
            vram_status st = reuse_finish_unlock(dev, b, size, stream, out);
            if (event != 0)
                dev->ctx->backend->ops->event_destroy(dev->ctx->backend, dev->physical,
                                                      event);
            return st;
        }
        streams_poll_locked(dev, 4);
    }
    if (dev->policy.virtual_range)
        return alloc_expandable_unlock(dev, size, rounded, stream, pool, out);
    for (;;) {
        bool host_oom;
        b = heap_take(&dev->heap, rounded, size, stream, &host_oom);
        if (b != NULL)
            break;
        if (host_oom)
            return error_set_unlock(&dev->lock, VRAM_E_HOST_MEMORY,
                                    "out of host memory for the allocator");
        /* Giving memory back frees device memory, which a CUDA graph
        ** capture forbids (cuMemFree synchronizes). */
        bool may_release = !released && dev->pools_open == 0;
        /* growth recycles before it grows: wholly free regions that
        ** together could hold the request go back to the backend first, so
        ** that the new region can take their place in the shape needed
        ** (docs/ALLOCATOR.md, "Region sizing"). */
        if (may_release && dev->policy.recycle_first &&
            free_region_bytes_locked(dev) >= rounded &&
            release_free_regions_locked(dev) > 0) {
            released = true;
            continue;
        }
        bool forced;
        uint64_t want = region_size_locked(dev, rounded, &forced);
        vram_status st = want ? grow_locked(dev, want, rounded, forced) : VRAM_E_OOM;
        if (st == VRAM_OK)
            continue;
        if (st != VRAM_E_OOM) {
            device_unlock(dev);
            return st; /* the backend's message is the thread's last error */
        }
        /* Another thread is obtaining or giving back memory under the cap:
        ** its region may serve this request. Wait for it, then look again. */
        if (want == 0 && (dev->pending > 0 || dev->releasing > 0)) {
            pthread_cond_wait(&dev->grown, &dev->lock);
            continue;
        }
        /* Before refusing: free regions may be merged by giving them back
        ** and obtaining one of the needed shape. */
        if (may_release && !dev->policy.keeps_regions &&
            release_free_regions_locked(dev) > 0) {
            released = true;
            dev->alloc_retries++;
            continue;
        }
        if (dev->pend_len > 0 && dev->pools_open == 0) {
            uint64_t before = dev->pend_len;
            streams_poll_locked(dev, UINT64_MAX);
            if (dev->pend_len < before)
                continue;
        }
        return oom_unlock(dev, size);
    }
    return alloc_finish_unlock(dev, b, size, stream, pool, out);
}

/* Take DEV's lock and return the live block at PTR, the lock held. When
** PTR is not a live allocation of DEV: NULL, the lock released, and the
** last error "WHAT(PTR): not a live allocation of GPU:N". Inline: it is
** vram_free's first step (callgrind, gpt2_bf16_b16 under growth: 277
** instructions a vram_free as a call of its own, 266 inline). */
static inline struct block *
device_live_block_lock(struct vram_device *dev, const void *ptr, const char *what)
{
    device_lock(dev);
    struct block *b = heap_lookup(&dev->heap, (uint64_t)(uintptr_t)ptr);
    if (b != NULL && !b->pending)
        return b;
    device_unlock(dev);
    (void)error_set(VRAM_E_BAD_POINTER, "%s(%p): not a live allocation of GPU:%d", what, ptr,
                    dev->index);
    return NULL;
}

/* After a free: trace and log outside the lock. */
static vram_status
free_done(struct vram_device *dev, void *ptr, uint64_t id, uint64_t requested,
          void *stream)
{
    if (dev->ctx->trace != NULL)
        trace_event(dev, TRACE_FREE, id, requested, stream);
    if (log_enabled(LOG_LARGE) && (requested >= SMALL_REQUEST || log_enabled(LOG_ALL)))
        log_write(LOG_LARGE, "GPU:%d: free %" PRIu64 " bytes at %p", dev->index,
                  requested, ptr);
    return VRAM_OK;
}

vram_status
vram_free(vram_device *dev, void *ptr)
{
    if (ptr == NULL)
        return VRAM_OK;
    if (dev == NULL)
        return error_set(VRAM_E_INVALID, "vram_free: NULL device");
    struct block *b = device_live_block_lock(dev, ptr, "vram_free");
    if (b == NULL)
        return VRAM_E_BAD_POINTER;
    uint64_t id = b->trace_id, requested = b->requested;
    void *stream = b->stream;
    dev->bytes_freed_total += b->size;
    /* With one stream seen and no extras (a graph pool, recorded streams),
    ** the common case, the block goes back to the heap now; otherwise
    ** streams.c decides whether it is held: pending its streams' events,
    ** kept by its graph pool, or deferred while a pool is open. */
    bool held = false;
    if (b->ext != NULL || dev->multi_stream) {
        vram_status st = streams_free_locked(dev, b, &held);
        if (st != VRAM_OK) {
            device_unlock(dev); /* B stays allocated; the status says why */
            return st;
        }
    }
    if (!held)
        device_release_block_locked(dev, b);
    dev->num_frees++;
    device_unlock(dev);
    return free_done(dev, ptr, id, requested, stream);
}

vram_status
vram_release_idle(vram_device *dev, uint64_t *released)
{
    if (dev == NULL)
        return error_set(VRAM_E_INVALID, "vram_release_idle: NULL device");
    uint64_t bytes = 0;
    vram_status st = VRAM_OK;
    device_lock(dev);
    if (dev->pools_open > 0)
        return error_set_unlock(
            &dev->lock, VRAM_E_UNSUPPORTED,
            "GPU:%d: idle memory cannot be given back while a CUDA graph is "
            "captured (capture forbids freeing device memory); call it "
            "after the capture",
            dev->index);
    /* Blocks freed with work still queued on other streams stay allocated
    ** until their events complete: only those done come back (and become
    ** idle) here; the others keep their memory. */
    streams_poll_locked(dev, UINT64_MAX);
    if (dev->policy.virtual_range)
        st = expand_release_idle_locked(dev, &bytes);
    else if (!dev->policy.keeps_regions)
        (void)release_free_regions_bytes_locked(dev, &bytes);
    device_unlock(dev);
    if (bytes > 0 && log_enabled(LOG_REGION)) {
        char a[32];
        log_write(LOG_REGION, "GPU:%d: gave %s of idle memory back", dev->index,
                  size_format(bytes, a, sizeof a));
    }
    if (released != NULL)
        *released = bytes;
    return st;
}

vram_status
vram_block_info(vram_device *dev, const void *ptr, uint64_t *size, void **stream)
{
    if (dev == NULL)
        return error_set(VRAM_E_INVALID, "vram_block_info: NULL device");
    struct block *b = device_live_block_lock(dev, ptr, "vram_block_info");
    if (b == NULL)
        return VRAM_E_BAD_POINTER;
    if (size != NULL)
        *size = b->size;
    if (stream != NULL)
        *stream = b->stream;
    device_unlock(dev);
    return VRAM_OK;
}

vram_status
vram_block_base(vram_device *dev, const void *ptr, void **base, uint64_t *size)
{
    if (dev == NULL || base == NULL || size == NULL)
        return error_set(VRAM_E_INVALID, "vram_block_base: NULL argument");
    struct block *b = device_live_block_lock(dev, ptr, "vram_block_base");
    if (b == NULL)
        return VRAM_E_BAD_POINTER;
    bool whole = !dev->policy.virtual_range;
    *base = (void *)(uintptr_t)(whole ? b->region->base : b->addr);
    *size = whole ? b->region->size : b->size;
    device_unlock(dev);
    return VRAM_OK;
}

vram_status
vram_set_limit(vram_device *dev, uint64_t bytes)
{
    if (dev == NULL)
        return error_set(VRAM_E_INVALID, "vram_set_limit: NULL device");
    device_lock(dev);
    if (bytes > dev->limit_max)
        bytes = dev->limit_max;
    uint64_t held = device_reserved_locked(dev) + dev->pending;
    if (held > bytes) {
        char a[32], b[32];
        return error_set_unlock(
            &dev->lock, VRAM_E_INVALID,
            "GPU:%d: cannot lower the cap to %s: %s is held from the device "
            "now (free memory first, then set the cap)",
            dev->index, size_format(bytes, a, sizeof a), size_format(held, b, sizeof b));
    }
    dev->limit = bytes;
    device_unlock(dev);
    return VRAM_OK;
}

/* ================================================================== */
/* Statistics                                                          */
/* ================================================================== */

vram_status
vram_get_memory_info(vram_device *dev, vram_memory_info *out)
{
    if (dev == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "vram_get_memory_info: NULL argument");
    device_lock(dev);
    out->current = device_in_use_locked(dev);
    out->peak = dev->peak_in_use;
    device_unlock(dev);
    return VRAM_OK;
}

vram_status
vram_get_stats(vram_device *dev, vram_stats *out)
{
    if (dev == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "vram_get_stats: NULL argument");
    vram_stats s;
    memset(&s, 0, sizeof s);
    device_lock(dev);
    s.bytes_in_use = device_in_use_locked(dev);
    s.peak_bytes_in_use = dev->peak_in_use;
    s.bytes_requested = dev->heap.bytes_requested;
    s.bytes_reserved = device_reserved_locked(dev);
    s.peak_bytes_reserved = dev->peak_reserved;
    s.bytes_limit = dev->limit;
    s.largest_free_block = heap_largest_free(&dev->heap);
    s.live_blocks = dev->heap.live_blocks;
    s.regions = dev->heap.n_regions;
    s.num_allocs = dev->num_allocs;
    s.num_frees = dev->num_frees;
    s.num_ooms = dev->num_ooms;
    s.backend_calls = dev->backend_calls;
    s.metadata_bytes = heap_metadata_bytes(&dev->heap) + expand_metadata_bytes(&dev->ex);
    s.maps = dev->ex.maps;
    s.unmaps = dev->ex.unmaps;
    s.peak_live_blocks = dev->peak_live_blocks;
    s.bytes_allocated_total = dev->bytes_alloc_total;
    s.bytes_freed_total = dev->bytes_freed_total;
    s.alloc_retries = dev->alloc_retries;
    s.bytes_pending = dev->held_bytes;
    device_unlock(dev);
    struct backend *be = dev->ctx->backend;
    if (be->ops->modelled_ns != NULL)
        s.modelled_driver_ns = be->ops->modelled_ns(be, dev->physical);
    s.fragmentation = s.peak_bytes_in_use
                          ? (double)s.peak_bytes_reserved / (double)s.peak_bytes_in_use
                          : 0.0;
    *out = s;
    return VRAM_OK;
}

size_t
vram_stats_size(void)
{
    return sizeof(vram_stats);
}

vram_status
vram_reset_peak(vram_device *dev)
{
    if (dev == NULL)
        return error_set(VRAM_E_INVALID, "vram_reset_peak: NULL device");
    device_lock(dev);
    dev->peak_in_use = device_in_use_locked(dev);
    dev->peak_reserved = device_reserved_locked(dev);
    dev->peak_live_blocks = dev->heap.live_blocks;
    device_unlock(dev);
    return VRAM_OK;
}

bool
vram_check(vram_device *dev)
{
    if (dev == NULL) {
        error_set(VRAM_E_INVALID, "vram_check: NULL device");
        return false;
    }
    device_lock(dev);
    bool ok = heap_check(&dev->heap) && expand_check_locked(dev) &&
              streams_check_locked(dev);
    if (ok && device_reserved_locked(dev) + dev->pending > dev->limit) {
        error_set(VRAM_E_INVALID,
                  "I8: %" PRIu64 " bytes held or pending above the cap %" PRIu64,
                  device_reserved_locked(dev) + dev->pending, dev->limit);
        ok = false;
    }
    if (ok && dev->peak_in_use < device_in_use_locked(dev)) {
        error_set(VRAM_E_INVALID, "I5: peak in use below in use");
        ok = false;
    }
    device_unlock(dev);
    return ok;
}

vram_status
vram_explain_oom(vram_device *dev, uint64_t size, char *buf, size_t len)
{
    if (dev == NULL || buf == NULL || len == 0)
        return error_set(VRAM_E_INVALID, "vram_explain_oom: NULL device or empty buffer");
    device_lock(dev);
    oom_explain_locked(dev, size, buf, len);
    device_unlock(dev);
    return VRAM_OK;
}

vram_status
vram_dump(vram_device *dev, FILE *out)
{
    if (dev == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "vram_dump: NULL argument");
    device_lock(dev);
    vram_status st = oom_dump_locked(dev, out);
    device_unlock(dev);
    if (st != VRAM_OK)
        return error_set(st, "vram_dump: writing the dump failed");
    return VRAM_OK;
}
