/*
** expand.c -- physical backing for the expandable strategy (see expand.h
** for the design, docs/ALLOCATOR.md for invariants E1-E4).
*/
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/internal.h"
#include "util/log.h"
#include "util/size.h"

/*
** Physical memory may exceed the peak of bytes in use by this fraction
** (1/100) before idle granules' memory is moved instead of new memory
** created. Measured with `vram replay` on the shared traces: without slack
** every granule past the peak is a move (gpt2_bf16_b16: 84,873 backend
** calls, 202 ns/op); with 1/100, resnet50 and gpt2m make no call after the
** first step and fragmentation stays <= 1.010 (docs/ALLOCATOR.md).
*/
#define SLACK_DIVISOR 100

/*
** Physical memory is mapped in units of this many driver granules (8 MiB
** on CUDA's 2 MiB). Every unit costs three driver calls (create, map, set
** access), each tens of microseconds on an H200; measured with `vram
** replay`, 8 MiB units cut the calls 4x against 2 MiB with fragmentation
** still <= 1.013 on the shared traces, where 20 MiB units reached 1.036.
*/
#define GRANULES_PER_UNIT 4

/* The learned slack stays below 1/10 of the peak in use. */
#define MAX_THRASH_DIVISOR 10

static inline void
relock(struct vram_device *dev)
{
    pthread_mutex_lock(&dev->lock);
}

static inline void
drop(struct vram_device *dev)
{
    pthread_mutex_unlock(&dev->lock);
}

void
expand_init(struct expand *e)
{
    memset(e, 0, sizeof *e);
    pthread_cond_init(&e->changed, NULL);
}

/* The unit holding ADDR. Units are a power of two in practice (4 x 2 MiB):
** a shift, not a division, on the hot path. */
static inline uint64_t
unit_of(const struct expand *e, uint64_t addr)
{
    uint64_t off = addr - e->va_base;
    return e->shift != 0 ? off >> e->shift : off / e->gran;
}

/* ---- the idle ring (E3) ---- */

static inline bool
is_idle(const struct expand *e, uint64_t g)
{
    return e->g[g].state == G_MAPPED && e->g[g].live == 0;
}

/* Rebuild the ring from the granules, dropping stale entries. O(n), run
** when stale entries outnumber live ones, so O(1) amortized per push. */
static void
idle_compact(struct expand *e)
{
    uint64_t k = 0;
    for (uint64_t g = 0; g < e->n && k < e->idle_cap; g++)
        if (is_idle(e, g))
            e->idle[k++] = (uint32_t)g;
    e->idle_head = 0;
    e->idle_len = k;
}

static void
idle_push(struct expand *e, uint64_t g)
{
    e->n_idle++;
    if (e->idle_len == e->idle_cap)
        idle_compact(e); /* every granule is idle at most once after this */
    e->idle[(e->idle_head + e->idle_len++) & (e->idle_cap - 1)] = (uint32_t)g;
}

/* The oldest idle granule, taken off the ring; -1 if none. */
static int64_t
idle_pop(struct expand *e)
{
    while (e->idle_len > 0) {
        uint32_t g = e->idle[e->idle_head];
        e->idle_head = (e->idle_head + 1) & (e->idle_cap - 1);
        e->idle_len--;
        if (is_idle(e, g))
            return g;
    }
    return -1;
}

/* ---- setup ---- */

static void
free_arrays(struct expand *e)
{
    free(e->g);
    free(e->idle);
    free(e->pool);
    e->g = NULL;
    e->idle = NULL;
    e->pool = NULL;
}

vram_status
expand_setup_locked(struct vram_device *dev)
{
    struct expand *e = &dev->ex;
    while (e->reserving)
        pthread_cond_wait(&e->changed, &dev->lock);
    if (e->ready)
        return VRAM_OK;
    struct backend *be = dev->ctx->backend;
    if (be->ops->va_reserve == NULL)
        return error_set(
            VRAM_E_UNSUPPORTED,
            "the expandable strategy needs virtual-memory calls, which the %s "
            "backend lacks",
            be->ops->name);
    uint64_t gran = dev->granularity * GRANULES_PER_UNIT;
    uint64_t cap = (dev->limit + gran - 1) / gran * gran;
    if (cap == 0)
        cap = gran;
    /* Twice the cap: holes in the address space then never cause an OOM
    ** while physical memory is left (address space costs nothing). */
    uint64_t size = 2 * cap, n = size / gran;
    if (n > UINT32_MAX)
        return error_set(VRAM_E_INVALID,
                         "expandable: a cap of %" PRIu64 " granules is too large", n / 2);
    uint64_t ring = 64;
    while (ring < n)
        ring *= 2;
    e->g = calloc(n, sizeof *e->g);
    e->idle = malloc(ring * sizeof *e->idle);
    if (e->g == NULL || e->idle == NULL) {
        free_arrays(e);
        return error_set(VRAM_E_HOST_MEMORY,
                         "out of host memory for %" PRIu64 " granules", n);
    }
    e->idle_cap = ring;
    e->epoch = 1;
    e->idle_head = e->idle_len = e->n_idle = 0;

    e->reserving = true;
    drop(dev);
    uint64_t base = 0;
    vram_status st = be->ops->va_reserve(be, dev->physical, size, &base);
    relock(dev);
    e->reserving = false;
    dev->backend_calls++;
    if (st == VRAM_OK) {
        st = heap_add_region(&dev->heap, base, size, base, NULL);
        if (st != VRAM_OK) {
            drop(dev);
            be->ops->va_release(be, dev->physical, base, size);
            relock(dev);
        }
    }
    if (st != VRAM_OK) {
        free_arrays(e);
        pthread_cond_broadcast(&e->changed);
        return st;
    }
    e->va_base = base;
    e->va_size = size;
    e->gran = gran;
    e->shift = (gran & (gran - 1)) == 0 ? (unsigned)__builtin_ctzll(gran) : 0;
    e->n = n;
    e->ready = true;
    pthread_cond_broadcast(&e->changed);
    char a[32];
    log_write(LOG_REGION, "GPU:%d: reserved %s of address space at 0x%" PRIx64,
              dev->index, size_format(size, a, sizeof a), base);
    return VRAM_OK;
}

/* ---- backing ---- */

static void
unref_range(struct expand *e, uint64_t g0, uint64_t g1)
{
    for (uint64_t g = g0; g <= g1; g++) {
        struct granule *gr = &e->g[g];
        assert(gr->live > 0);
        if (--gr->live == 0 && gr->state == G_MAPPED)
            idle_push(e, g);
    }
}

static bool
pool_push(struct expand *e, uint64_t h)
{
    if (e->n_pool == e->cap_pool) {
        uint64_t ncap = e->cap_pool ? 2 * e->cap_pool : 64;
        uint64_t *np = realloc(e->pool, ncap * sizeof *np);
        if (np == NULL)
            return false;
        e->pool = np;
        e->cap_pool = ncap;
    }
    e->pool[e->n_pool++] = h;
    return true;
}

/* Move the memory of idle granule V away: unmap it and return its handle. */
static vram_status
steal_locked(struct vram_device *dev, int64_t v, uint64_t *out)
{
    struct expand *e = &dev->ex;
    struct backend *be = dev->ctx->backend;
    struct granule *gv = &e->g[v];
    e->n_idle--;
    gv->state = G_UNMAPPING;
    uint64_t h = gv->handle;
    drop(dev);
    /* Kernels queued before the free may still read or write the idle
    ** memory: wait for the device before moving it (PyTorch's expandable
    ** segments synchronize likewise). Only moves pay this, never a plain
    ** allocation or free. */
    vram_status st = VRAM_OK;
    bool synced = be->ops->synchronize != NULL && !e->synced;
    if (synced)
        st = be->ops->synchronize(be, dev->physical);
    e->synced = e->synced || (synced && st == VRAM_OK); /* once per allocation */
    if (st == VRAM_OK)
        st = be->ops->unmap(be, dev->physical, e->va_base + (uint64_t)v * e->gran, e->gran);
    relock(dev);
    dev->backend_calls += 1 + synced;
    if (st != VRAM_OK) {
        gv->state = G_MAPPED;
        if (gv->live == 0)
            idle_push(e, (uint64_t)v);
        pthread_cond_broadcast(&e->changed);
        return st;
    }
    e->unmaps++;
    gv->handle = 0;
    gv->state = G_UNMAPPED;
    gv->moved = e->epoch;
    pthread_cond_broadcast(&e->changed);
    *out = h;
    return VRAM_OK;
}

/*
** Find physical memory for a granule: a pooled handle; else new memory
** while physical memory stays within the slack over the peak in use; else
** the memory of the oldest idle granule; else new memory up to the cap.
** Drops the lock around backend calls.
*/
static vram_status
obtain_handle_locked(struct vram_device *dev, uint64_t *out)
{
    struct expand *e = &dev->ex;
    struct backend *be = dev->ctx->backend;
    if (e->n_pool > 0) {
        *out = e->pool[--e->n_pool];
        return VRAM_OK;
    }
    uint64_t peak = dev->peak_in_use > dev->heap.bytes_in_use ? dev->peak_in_use
                                                              : dev->heap.bytes_in_use;
    bool under_cap = e->phys_bytes + e->gran <= dev->limit;
    uint64_t slack = peak / SLACK_DIVISOR + e->thrash_bytes;
    bool within_slack = e->phys_bytes + e->gran <= peak + slack;
    if (!(under_cap && within_slack) && e->n_idle > 0) {
        int64_t v = idle_pop(e);
        assert(v >= 0);
        return steal_locked(dev, v, out);
    }
    if (!under_cap)
        return VRAM_E_OOM;    /* the cap: the caller explains */
    e->phys_bytes += e->gran; /* I8: counted before the call */
    drop(dev);
    uint64_t h = 0;
    vram_status st = be->ops->phys_create(be, dev->physical, e->gran, &h);
    relock(dev);
    dev->backend_calls++;
    if (st != VRAM_OK) {
        e->phys_bytes -= e->gran;
        /* The device is full (other processes, other logical devices):
        ** moving idle memory still works. */
        if (st == VRAM_E_OOM && e->n_idle > 0) {
            int64_t v = idle_pop(e);
            assert(v >= 0);
            return steal_locked(dev, v, out);
        }
        return st;
    }
    *out = h;
    return VRAM_OK;
}

vram_status
expand_back_locked(struct vram_device *dev, uint64_t addr, uint64_t size)
{
    struct expand *e = &dev->ex;
    struct backend *be = dev->ctx->backend;
    uint64_t g0 = unit_of(e, addr);
    uint64_t g1 = unit_of(e, addr + size - 1);
    /* A new epoch when the peak grows by more than a unit: a peak creeping
    ** up by a few bytes per step (measured with PyTorch on GPT-2) must not
    ** stop the learning of a steady loop. */
    if (dev->peak_in_use > e->epoch_peak + e->gran) {
        e->epoch_peak = dev->peak_in_use;
        e->epoch++;
    }
    bool all_mapped = true;
    e->synced = false; /* the next move in this allocation synchronizes */
    /* Count the block first, so that no other thread moves these
    ** granules' memory away while we work (E2). */
    for (uint64_t g = g0; g <= g1; g++) {
        struct granule *gr = &e->g[g];
        if (gr->state != G_MAPPED)
            all_mapped = false;
        else if (gr->live == 0)
            e->n_idle--; /* its ring entry is now stale */
        gr->live++;
    }
    if (all_mapped)
        return VRAM_OK; /* the steady state: no backend call */
    for (uint64_t g = g0; g <= g1; g++) {
        while (e->g[g].state == G_MAPPING || e->g[g].state == G_UNMAPPING)
            pthread_cond_wait(&e->changed, &dev->lock);
        if (e->g[g].state == G_MAPPED)
            continue;
        /* Memory moved away from here is needed again while the peak has
        ** not grown: a steady loop cycles over more memory than the slack
        ** allows. Learn one more unit of slack (up to 1/MAX_THRASH_DIVISOR
        ** of the peak), so that a training loop stops moving memory every
        ** step. A growing workload (a leak, the first step) learns nothing. */
        if (e->g[g].moved == e->epoch &&
            e->thrash_bytes + e->gran <= dev->peak_in_use / MAX_THRASH_DIVISOR)
            e->thrash_bytes += e->gran;
        e->g[g].state = G_MAPPING;
        uint64_t h = 0;
        vram_status st = obtain_handle_locked(dev, &h);
        if (st == VRAM_OK) {
            drop(dev);
            st = be->ops->map(be, dev->physical, e->va_base + g * e->gran, e->gran, h);
            relock(dev);
            dev->backend_calls++;
            if (st != VRAM_OK && !pool_push(e, h)) {
                /* Nowhere to keep it: give it back rather than lose it. */
                drop(dev);
                be->ops->phys_release(be, dev->physical, h);
                relock(dev);
                dev->backend_calls++;
                e->phys_bytes -= e->gran;
            }
        }
        if (st != VRAM_OK) {
            e->g[g].state = G_UNMAPPED;
            pthread_cond_broadcast(&e->changed);
            unref_range(e, g0, g1);
            return st;
        }
        e->g[g].handle = h;
        e->g[g].state = G_MAPPED;
        e->maps++;
        pthread_cond_broadcast(&e->changed);
    }
    return VRAM_OK;
}

void
expand_unback_locked(struct vram_device *dev, uint64_t addr, uint64_t size)
{
    struct expand *e = &dev->ex;
    unref_range(e, unit_of(e, addr), unit_of(e, addr + size - 1));
}

void
expand_destroy(struct vram_device *dev)
{
    struct expand *e = &dev->ex;
    struct backend *be = dev->ctx->backend;
    if (e->ready) {
        for (uint64_t g = 0; g < e->n; g++) {
            if (e->g[g].state != G_MAPPED)
                continue;
            if (be->ops->unmap(be, dev->physical, e->va_base + g * e->gran, e->gran) !=
                VRAM_OK) {
                log_write(LOG_CONFIG, "GPU:%d: unmap at close failed: %s", dev->index,
                          vram_last_error());
                continue;
            }
            if (!pool_push(e, e->g[g].handle))
                be->ops->phys_release(be, dev->physical, e->g[g].handle);
        }
        for (uint64_t i = 0; i < e->n_pool; i++)
            if (be->ops->phys_release(be, dev->physical, e->pool[i]) != VRAM_OK)
                log_write(LOG_CONFIG, "GPU:%d: release at close failed: %s", dev->index,
                          vram_last_error());
        if (be->ops->va_release(be, dev->physical, e->va_base, e->va_size) != VRAM_OK)
            log_write(LOG_CONFIG, "GPU:%d: freeing the address range failed: %s",
                      dev->index, vram_last_error());
    }
    free_arrays(e);
    pthread_cond_destroy(&e->changed);
}

static bool
broken(const char *what, uint64_t g)
{
    error_set(VRAM_E_INVALID, "%s (granule %" PRIu64 ")", what, g);
    return false;
}

bool
expand_check_locked(const struct vram_device *dev)
{
    const struct expand *e = &dev->ex;
    if (!e->ready)
        return true;
    /* E1: a granule's live count is the number of allocated blocks over it. */
    uint32_t *count = calloc(e->n, sizeof *count);
    if (count == NULL)
        return true; /* cannot check without memory; not a broken invariant */
    for (const struct region *r = dev->heap.regions; r != NULL; r = r->next)
        for (const struct block *b = r->first; b != NULL; b = b->next) {
            if (b->free)
                continue;
            uint64_t g0 = unit_of(e, b->addr);
            uint64_t g1 = unit_of(e, b->addr + b->size - 1);
            for (uint64_t g = g0; g <= g1; g++)
                count[g]++;
        }
    uint64_t mapped = 0, idle = 0;
    for (uint64_t g = 0; g < e->n; g++) {
        const struct granule *gr = &e->g[g];
        if (count[g] != gr->live) {
            free(count);
            return broken("E1: live count differs from the blocks over the granule", g);
        }
        /* E2: under a live block memory is mapped (outside transitions),
        ** and a granule has a handle exactly when mapped. */
        if (gr->live > 0 && gr->state == G_UNMAPPED) {
            free(count);
            return broken("E2: a live block lies on an unmapped granule", g);
        }
        if ((gr->state == G_MAPPED) != (gr->handle != 0)) {
            free(count);
            return broken("E2: mapped state and handle disagree", g);
        }
        mapped += gr->state == G_MAPPED;
        idle += is_idle(e, g);
    }
    free(count);
    /* E3: the idle count is exact, and the ring holds every idle granule. */
    if (idle != e->n_idle)
        return broken("E3: idle count off", idle);
    uint64_t in_ring = 0;
    for (uint64_t k = 0; k < e->idle_len; k++)
        in_ring += is_idle(e, e->idle[(e->idle_head + k) & (e->idle_cap - 1)]);
    if (in_ring < idle)
        return broken("E3: an idle granule is missing from the ring", in_ring);
    /* E4: physical memory held is what is mapped plus the pool. */
    if (e->phys_bytes != (mapped + e->n_pool) * e->gran)
        return broken("E4: physical bytes differ from mapped + pooled granules", mapped);
    if (e->phys_bytes > dev->limit)
        return broken("I8: physical bytes above the cap", e->phys_bytes / e->gran);
    return true;
}
