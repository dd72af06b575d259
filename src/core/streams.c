/* SPDX-License-Identifier: MIT */
/*
** streams.c -- the stream-ordered side of a logical device: when a block
** the user freed may be handed out again (docs/ALLOCATOR.md, "Streams").
**
** Three kinds of freed block are held here instead of going back to the
** heap at once; all three stay allocated in the heap's terms (and, for
** expandable, keep their memory mapped) and count in dev->held_bytes, not
** as in use:
**
**   pending   freed while several streams are in use: an event was recorded
**             on its allocation stream and on every other stream that used
**             it (vram_record_stream); it returns to the heap once all of
**             them have completed. A FIFO ring, polled a few entries at a
**             time by allocations and wholly before an OOM.
**   pooled    allocated while a CUDA graph was captured into a graph pool:
**             the graph may replay into it at any time, so only the pool
**             reuses it, until the pool is released (vram_pool_release).
**   deferred  freed while a graph pool is open (a capture may be under
**             way) and several streams are in use, when no event may be
**             recorded or queried: freed for real when the last open pool
**             closes.
**
** Every function named _locked is called with dev->lock held and returns
** with it held; those that drop it around a backend call say so.
*/
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/internal.h"

/* ================================================================== */
/* Block extras                                                        */
/* ================================================================== */

/* B's extras, created on first need. NULL when out of host memory. */
static struct block_ext *
ext_of(struct block *b)
{
    if (b->ext == NULL)
        b->ext = calloc(1, sizeof *b->ext);
    return b->ext;
}

void
block_ext_free(struct block *b)
{
    free(b->ext);
    b->ext = NULL;
}

static inline uint64_t
pool_of(const struct block *b)
{
    return b->ext != NULL ? b->ext->pool : 0;
}

static inline bool
used_elsewhere(const struct block *b)
{
    return b->ext != NULL && b->ext->n_uses > 0;
}

vram_status
vram_record_stream(vram_device *dev, const void *ptr, void *stream)
{
    if (dev == NULL)
        return error_set(VRAM_E_INVALID, "vram_record_stream: NULL device");
    device_lock(dev);
    struct block *b = heap_lookup(&dev->heap, (uint64_t)(uintptr_t)ptr);
    if (b == NULL || b->pending)
        return error_set_unlock(&dev->lock, VRAM_E_BAD_POINTER,
                                "vram_record_stream(%p): not a live allocation of GPU:%d",
                                ptr, dev->index);
    if (stream == b->stream) { /* its own stream orders it already */
        device_unlock(dev);
        return VRAM_OK;
    }
    struct block_ext *x = ext_of(b);
    if (x == NULL)
        return error_set_unlock(&dev->lock, VRAM_E_HOST_MEMORY, "out of host memory");
    for (uint32_t i = 0; i < x->n_uses; i++) {
        if (x->uses[i] == stream) {
            device_unlock(dev);
            return VRAM_OK;
        }
    }
    if (x->n_uses == x->cap_uses) {
        uint32_t cap = x->cap_uses ? 2 * x->cap_uses : 2;
        struct block_ext *nx = realloc(x, sizeof *x + cap * sizeof x->uses[0]);
        if (nx == NULL)
            return error_set_unlock(&dev->lock, VRAM_E_HOST_MEMORY, "out of host memory");
        nx->cap_uses = cap;
        b->ext = x = nx;
    }
    x->uses[x->n_uses++] = stream;
    /* A second stream is in use: from now on frees are ordered by events. */
    dev->multi_stream = true;
    device_unlock(dev);
    return VRAM_OK;
}

/* ================================================================== */
/* The pending ring                                                    */
/* ================================================================== */

static inline struct pending *
pend_at(struct vram_device *dev, uint64_t k)
{
    return &dev->pend[(dev->pend_head + k) & (dev->pend_cap - 1)];
}

static bool
pend_push(struct vram_device *dev, const struct pending *entry)
{
    if (dev->pend_len == dev->pend_cap) {
        uint64_t ncap = dev->pend_cap ? 2 * dev->pend_cap : 64;
        struct pending *np = malloc(ncap * sizeof *np);
        if (np == NULL)
            return false;
        for (uint64_t k = 0; k < dev->pend_len; k++)
            np[k] = *pend_at(dev, k);
        free(dev->pend);
        dev->pend = np;
        dev->pend_cap = ncap;
        dev->pend_head = 0;
    }
    *pend_at(dev, dev->pend_len++) = *entry;
    dev->held_bytes += entry->b->size;
    entry->b->pending = true;
    return true;
}

/* Drop emptied entries at the front of the ring. */
static void
pend_trim(struct vram_device *dev)
{
    while (dev->pend_len > 0 && pend_at(dev, 0)->b == NULL) {
        dev->pend_head = (dev->pend_head + 1) & (dev->pend_cap - 1);
        dev->pend_len--;
    }
}

/* Hand pending block P back to the heap: every stream's work is done. */
static void
pend_release_locked(struct vram_device *dev, struct pending *p)
{
    struct block *b = p->b;
    dev->held_bytes -= b->size;
    b->pending = false;
    free(p->more);
    p->more = NULL;
    p->n_more = 0;
    device_release_block_locked(dev, b);
    p->b = NULL;
}

/*
** How many of the newest pending frees an allocation looks at for a block
** freed on its own stream. When the host runs ahead of the device (no
** synchronization in a training loop), every free of the last steps is
** pending, and an allocation finds its block among the previous step's
** frees or not at all: 64 covers a step of 30 allocations twice over,
** for at most ~130 ns of scanning on an allocation that found nothing in
** the heap (and less on the usual exact match, which ends the scan).
*/
#define REUSE_WINDOW 64

struct block *
streams_reuse_locked(struct vram_device *dev, uint64_t size, void *stream, uint64_t *event)
{
    uint64_t n = dev->pend_len < REUSE_WINDOW ? dev->pend_len : REUSE_WINDOW;
    struct pending *best = NULL;
    for (uint64_t i = 0; i < n; i++) {
        struct pending *p = pend_at(dev, dev->pend_len - 1 - i);
        /* Only blocks no other stream used: work on one stream runs in
        ** order, but another stream's reads of it may still be queued.
        ** Best fit, at most twice the size (the rest is not split off). */
        if (p->b == NULL || p->stream != stream || p->n_more > 0 ||
            p->b->size < size || p->b->size > 2 * size)
            continue;
        if (best == NULL || p->b->size < best->b->size)
            best = p;
        if (p->b->size == size)
            break;
    }
    if (best != NULL) {
        struct pending *p = best;
        struct block *b = p->b;
        *event = p->event;
        dev->held_bytes -= b->size;
        b->pending = false;
        p->b = NULL;
        pend_trim(dev);
        return b;
    }
    return NULL;
}

/*
** Query every outstanding event of entry Q (outside the lock) and destroy
** those that completed, zeroing them in MORE. Returns whether the primary
** EVENT completed; *all_done whether nothing is left outstanding. MORE is
** safe to touch unlocked: only the one polling thread (dev->polling)
** changes or frees the MORE of an entry that has one (same-stream reuse
** skips such entries).
*/
static bool
query_events(struct vram_device *dev, uint64_t event, uint64_t *more, uint32_t n_more,
             bool *all_done)
{
    struct backend *be = dev->ctx->backend;
    bool primary = event == 0;
    if (!primary) {
        bool done = false;
        if (be->ops->event_query(be, dev->physical, event, &done) != VRAM_OK)
            done = false; /* keep it: reuse only once the work is known done */
        if (done)
            be->ops->event_destroy(be, dev->physical, event);
        primary = done;
    }
    bool all = primary;
    for (uint32_t i = 0; i < n_more; i++) {
        if (more[i] == 0)
            continue;
        bool done = false;
        if (be->ops->event_query(be, dev->physical, more[i], &done) != VRAM_OK)
            done = false;
        if (done) {
            be->ops->event_destroy(be, dev->physical, more[i]);
            more[i] = 0;
        } else {
            all = false;
        }
    }
    *all_done = all;
    return primary;
}

/*
** Query the events of up to MAX oldest pending frees (outside the lock)
** and give the blocks whose work is done on every stream back to the heap.
** One thread polls at a time; the others go on without waiting. Nothing is
** queried while a graph pool is open (a capture is under way). Drops the
** lock around the queries.
*/
void
streams_poll_locked(struct vram_device *dev, uint64_t max)
{
    if (dev->polling || dev->pend_len == 0 || dev->pools_open > 0)
        return;
    enum { BATCH = 16 };
    struct {
        uint64_t k, event;
        uint64_t *more;
        uint32_t n_more;
        struct block *b;
        bool primary_done, all_done;
    } q[BATCH];
    dev->polling = true;
    while (max > 0) {
        uint64_t n = 0;
        for (uint64_t k = 0; k < dev->pend_len && n < BATCH && n < max; k++) {
            struct pending *p = pend_at(dev, k);
            if (p->b != NULL) {
                q[n].k = k;
                q[n].event = p->event;
                q[n].more = p->more;
                q[n].n_more = p->n_more;
                q[n].b = p->b;
                n++;
            }
        }
        if (n == 0)
            break;
        device_unlock(dev);
        for (uint64_t i = 0; i < n; i++)
            q[i].primary_done =
                query_events(dev, q[i].event, q[i].more, q[i].n_more, &q[i].all_done);
        device_lock(dev);
        /* Entries only leave the front (here) or are emptied by same-stream
        ** reuse; new ones are appended: positions still hold. */
        uint64_t released = 0;
        for (uint64_t i = 0; i < n; i++) {
            struct pending *p = pend_at(dev, q[i].k);
            if (p->b != q[i].b || p->event != q[i].event)
                continue; /* reused on its own stream meanwhile */
            if (q[i].primary_done)
                p->event = 0; /* destroyed */
            if (q[i].all_done) {
                pend_release_locked(dev, p);
                released++;
            }
        }
        pend_trim(dev);
        if (released < n)
            break; /* the oldest not done: later ones are unlikely to be */
        max -= n;
    }
    dev->polling = false;
}

/*
** Record an event on B's allocation stream and on every other stream that
** used it, then queue B as pending. Drops the lock around the records;
** on failure every event recorded is destroyed, B stays allocated and the
** status says why.
*/
static vram_status
pend_free_locked(struct vram_device *dev, struct block *b)
{
    struct backend *be = dev->ctx->backend;
    uint32_t n_more = b->ext != NULL ? b->ext->n_uses : 0;
    struct pending entry = {.b = b, .stream = b->stream};
    if (n_more > 0) {
        entry.more = calloc(n_more, sizeof *entry.more);
        if (entry.more == NULL)
            return error_set(VRAM_E_HOST_MEMORY, "out of host memory");
        entry.n_more = n_more;
    }
    /* Claim the block (no other thread may free or record it meanwhile:
    ** pending blocks are not live) and record without the lock. */
    b->pending = true;
    dev->held_bytes += b->size;
    device_unlock(dev);
    vram_status st = be->ops->event_record(be, dev->physical,
                                           (uint64_t)(uintptr_t)b->stream, &entry.event);
    for (uint32_t i = 0; i < n_more && st == VRAM_OK; i++)
        st = be->ops->event_record(be, dev->physical,
                                   (uint64_t)(uintptr_t)b->ext->uses[i], &entry.more[i]);
    device_lock(dev);
    dev->held_bytes -= b->size;
    b->pending = false;
    if (st == VRAM_OK && pend_push(dev, &entry)) {
        block_ext_free(b); /* the streams are in the entry now */
        return VRAM_OK;
    }
    /* Without every event the block cannot be proven idle on all its
    ** streams: it stays allocated, and the caller reports the failure. */
    device_unlock(dev);
    if (entry.event != 0)
        be->ops->event_destroy(be, dev->physical, entry.event);
    for (uint32_t i = 0; i < n_more; i++)
        if (entry.more[i] != 0)
            be->ops->event_destroy(be, dev->physical, entry.more[i]);
    device_lock(dev);
    free(entry.more);
    return st == VRAM_OK ? error_set(VRAM_E_HOST_MEMORY, "out of host memory") : st;
}

/* ================================================================== */
/* Graph pools                                                         */
/* ================================================================== */

static struct graph_pool *
pool_find_locked(struct vram_device *dev, uint64_t id)
{
    for (uint32_t i = 0; i < dev->n_pools; i++)
        if (dev->pools[i].id == id)
            return &dev->pools[i];
    return NULL;
}

bool
streams_capturing(struct vram_device *dev, void *stream)
{
    if (atomic_load_explicit(&dev->pools_open, memory_order_acquire) == 0)
        return false;
    struct backend *be = dev->ctx->backend;
    bool active = false;
    if (be->ops->stream_capturing == NULL ||
        be->ops->stream_capturing(be, dev->physical, (uint64_t)(uintptr_t)stream,
                                  &active) != VRAM_OK)
        return false;
    return active;
}

/* The most recently opened pool that is open, or NULL. */
static struct graph_pool *
open_pool_locked(struct vram_device *dev)
{
    for (uint32_t i = dev->n_pools; i-- > 0;)
        if (dev->pools[i].id != 0 && dev->pools[i].open)
            return &dev->pools[i];
    return NULL;
}

struct block *
pool_take_locked(struct vram_device *dev, uint64_t size, void *stream, uint64_t *pool)
{
    struct graph_pool *gp = open_pool_locked(dev);
    *pool = 0;
    if (gp == NULL)
        return NULL;
    *pool = gp->id;
    /* Best fit among the pool's freed blocks of the same stream that no
    ** other stream used (the graph orders only its own stream's work). */
    struct block **best = NULL;
    for (struct block **link = &gp->free_list; *link != NULL; link = &(*link)->fnext) {
        struct block *b = *link;
        if (b->stream != stream || used_elsewhere(b) || b->size < size || b->size > 2 * size)
            continue;
        if (best == NULL || b->size < (*best)->size)
            best = link;
    }
    if (best == NULL)
        return NULL;
    struct block *b = *best;
    *best = b->fnext;
    b->fnext = NULL;
    b->pending = false;
    gp->free_bytes -= b->size;
    dev->held_bytes -= b->size;
    gp->live++;
    return b;
}

vram_status
pool_tag_locked(struct vram_device *dev, struct block *b, uint64_t pool)
{
    struct graph_pool *gp = pool_find_locked(dev, pool);
    struct block_ext *x = ext_of(b);
    if (x == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "out of host memory");
    x->pool = pool;
    assert(gp != NULL);
    gp->live++;
    return VRAM_OK;
}

/* A slot for the new pool ID: a free slot, or a new one if none is free;
** NULL when out of host memory. */
static struct graph_pool *
pool_new_locked(struct vram_device *dev, uint64_t id)
{
    struct graph_pool *gp = pool_find_locked(dev, 0);
    if (gp == NULL) {
        if (dev->n_pools == dev->cap_pools) {
            uint32_t cap = dev->cap_pools ? 2 * dev->cap_pools : 4;
            struct graph_pool *np = realloc(dev->pools, cap * sizeof *np);
            if (np == NULL)
                return NULL;
            dev->pools = np;
            dev->cap_pools = cap;
        }
        gp = &dev->pools[dev->n_pools++];
    }
    memset(gp, 0, sizeof *gp);
    gp->id = id;
    return gp;
}

/* Check DEV and POOL for CALL, take DEV's lock and point *GP at POOL's
** slot: made if MAKE and there is none, else NULL when there is none. On
** success the caller unlocks. */
static vram_status
pool_lock(struct vram_device *dev, uint64_t pool, const char *call, bool make,
          struct graph_pool **gp)
{
    if (dev == NULL || pool == 0)
        return error_set(VRAM_E_INVALID, "%s: NULL device or pool 0", call);
    device_lock(dev);
    *gp = pool_find_locked(dev, pool);
    if (*gp == NULL && make)
        *gp = pool_new_locked(dev, pool);
    if (*gp == NULL && make)
        return error_set_unlock(&dev->lock, VRAM_E_HOST_MEMORY, "out of host memory");
    return VRAM_OK;
}

/* Open or close GP, with dev->pools_open (read without the lock on the
** allocation path) in step. */
static void
pool_set_open_locked(struct vram_device *dev, struct graph_pool *gp, bool open)
{
    gp->open = open;
    if (open)
        atomic_fetch_add_explicit(&dev->pools_open, 1, memory_order_release);
    else
        atomic_fetch_sub_explicit(&dev->pools_open, 1, memory_order_release);
}

/* Leave DEV's lock, failing CALL because POOL is in the wrong state: it
** is WHY ("open already"). */
static vram_status
pool_fail_unlock(struct vram_device *dev, const char *call, uint64_t pool,
                 const char *why)
{
    return error_set_unlock(&dev->lock, VRAM_E_INVALID,
                            "%s: pool %" PRIu64 " of GPU:%d is %s", call, pool,
                            dev->index, why);
}

vram_status
vram_pool_begin(vram_device *dev, uint64_t pool)
{
    struct graph_pool *gp = NULL;
    vram_status st = pool_lock(dev, pool, "vram_pool_begin", true, &gp);
    if (st == VRAM_OK && gp->open)
        st = pool_fail_unlock(dev, "vram_pool_begin", pool, "open already");
    if (st != VRAM_OK)
        return st;
    pool_set_open_locked(dev, gp, true);
    device_unlock(dev);
    return VRAM_OK;
}

/* Free every deferred block for real (no pool is open any more). May drop
** the lock (events). */
static void
flush_deferred_locked(struct vram_device *dev)
{
    while (dev->deferred != NULL && dev->pools_open == 0) {
        struct block *b = dev->deferred;
        dev->deferred = b->fnext;
        b->fnext = NULL;
        b->pending = false;
        dev->held_bytes -= b->size;
        bool held = false;
        if (streams_free_locked(dev, b, &held) != VRAM_OK) {
            /* No event could be recorded: keep it deferred until the next
            ** close of a pool rather than reuse it unproven. */
            b->pending = true;
            dev->held_bytes += b->size;
            b->fnext = dev->deferred;
            dev->deferred = b;
            return;
        }
        if (!held)
            device_release_block_locked(dev, b);
    }
}

vram_status
vram_pool_end(vram_device *dev, uint64_t pool)
{
    struct graph_pool *gp = NULL;
    vram_status st = pool_lock(dev, pool, "vram_pool_end", false, &gp);
    if (st == VRAM_OK && (gp == NULL || !gp->open))
        st = pool_fail_unlock(dev, "vram_pool_end", pool, "not open");
    if (st != VRAM_OK)
        return st;
    pool_set_open_locked(dev, gp, false);
    flush_deferred_locked(dev);
    device_unlock(dev);
    return VRAM_OK;
}

vram_status
vram_pool_release(vram_device *dev, uint64_t pool)
{
    struct graph_pool *gp = NULL;
    vram_status st = pool_lock(dev, pool, "vram_pool_release", false, &gp);
    if (st == VRAM_OK && gp == NULL)
        st = error_set_unlock(&dev->lock, VRAM_E_INVALID,
                              "vram_pool_release: GPU:%d has no pool %" PRIu64,
                              dev->index, pool);
    else if (st == VRAM_OK && gp->open)
        st = pool_fail_unlock(dev, "vram_pool_release", pool,
                              "still open (capture not ended)");
    if (st != VRAM_OK)
        return st;
    /* A replay of the graph may still run on any stream: wait for the
    ** device once, then the pool's freed blocks are idle. */
    struct block *list = gp->free_list;
    gp->free_list = NULL;
    uint64_t bytes = gp->free_bytes;
    gp->free_bytes = 0;
    struct backend *be = dev->ctx->backend;
    if (list != NULL && be->ops->synchronize != NULL) {
        device_unlock(dev);
        st = be->ops->synchronize(be, dev->physical);
        device_lock(dev);
        gp = pool_find_locked(dev, pool); /* the array may have moved */
        if (st != VRAM_OK) {
            /* Not proven idle: keep the blocks in the pool. */
            struct block **end = &gp->free_list;
            while (*end != NULL)
                end = &(*end)->fnext;
            *end = list;
            gp->free_bytes += bytes;
            device_unlock(dev);
            return st;
        }
    }
    dev->held_bytes -= bytes;
    while (list != NULL) {
        struct block *b = list;
        list = b->fnext;
        b->fnext = NULL;
        b->pending = false;
        device_release_block_locked(dev, b);
    }
    /* Blocks still live go back to the heap when freed (their pool id no
    ** longer names a pool); the slot is free for the next pool. */
    gp->id = 0;
    device_unlock(dev);
    return VRAM_OK;
}

/* ================================================================== */
/* The free path                                                       */
/* ================================================================== */

vram_status
streams_free_locked(struct vram_device *dev, struct block *b, bool *held)
{
    *held = true;
    uint64_t pool = pool_of(b);
    struct graph_pool *gp = pool != 0 ? pool_find_locked(dev, pool) : NULL;
    if (gp != NULL) {
        /* Graph memory: kept for the pool's own reuse until its release. */
        gp->live--;
        b->pending = true;
        b->fnext = gp->free_list;
        gp->free_list = b;
        gp->free_bytes += b->size;
        dev->held_bytes += b->size;
        return VRAM_OK;
    }
    struct backend *be = dev->ctx->backend;
    if (!dev->multi_stream || be->ops->event_record == NULL) {
        *held = false; /* one stream: reusable at once */
        return VRAM_OK;
    }
    if (dev->pools_open > 0) {
        /* A capture may be under way: no event may be recorded now. */
        b->pending = true;
        b->fnext = dev->deferred;
        dev->deferred = b;
        dev->held_bytes += b->size;
        return VRAM_OK;
    }
    return pend_free_locked(dev, b);
}

/* ================================================================== */
/* Close and check                                                     */
/* ================================================================== */

void
streams_destroy(struct vram_device *dev)
{
    struct backend *be = dev->ctx->backend;
    for (uint64_t k = 0; k < dev->pend_len; k++) {
        struct pending *p = pend_at(dev, k);
        if (p->b == NULL)
            continue;
        if (p->event != 0)
            be->ops->event_destroy(be, dev->physical, p->event);
        for (uint32_t i = 0; i < p->n_more; i++)
            if (p->more[i] != 0)
                be->ops->event_destroy(be, dev->physical, p->more[i]);
        free(p->more);
    }
    free(dev->pend);
    dev->pend = NULL;
    free(dev->pools);
    dev->pools = NULL;
}

bool
streams_check_locked(struct vram_device *dev)
{
    uint64_t held = 0;
    for (uint64_t k = 0; k < dev->pend_len; k++) {
        struct pending *p = pend_at(dev, k);
        if (p->b == NULL)
            continue;
        if (!p->b->pending || p->b->free)
            return error_set(VRAM_E_INVALID, "S1: a pending entry's block is not pending"),
                   false;
        held += p->b->size;
    }
    for (struct block *b = dev->deferred; b != NULL; b = b->fnext)
        held += b->size;
    uint32_t open = 0;
    for (uint32_t i = 0; i < dev->n_pools; i++) {
        const struct graph_pool *gp = &dev->pools[i];
        if (gp->id == 0)
            continue;
        open += gp->open;
        uint64_t bytes = 0;
        for (const struct block *b = gp->free_list; b != NULL; b = b->fnext) {
            if (!b->pending || pool_of(b) != gp->id)
                return error_set(VRAM_E_INVALID,
                                 "S2: a block in pool %" PRIu64 "'s free list is not "
                                 "held for it",
                                 gp->id),
                       false;
            bytes += b->size;
        }
        if (bytes != gp->free_bytes)
            return error_set(VRAM_E_INVALID, "S2: pool %" PRIu64 "'s free bytes off",
                             gp->id),
                   false;
        held += bytes;
    }
    if (open != dev->pools_open)
        return error_set(VRAM_E_INVALID, "S3: %u pools open, counted %u", open,
                         (unsigned)dev->pools_open),
               false;
    if (held != dev->held_bytes)
        return error_set(VRAM_E_INVALID,
                         "S1: held bytes %" PRIu64 " but the held blocks sum to %" PRIu64,
                         dev->held_bytes, held),
               false;
    return true;
}
