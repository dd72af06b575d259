/* SPDX-License-Identifier: MIT */
/*
** expand.c -- physical backing for the expandable strategy (see expand.h
** for the design, docs/ALLOCATOR.md for invariants E1-E4).
*/
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "base/size.h"
#include "base/zmem.h"
#include "core/internal.h"

/*
** Physical memory is mapped in units of this many driver granules (8 MiB
** on CUDA's 2 MiB). A unit costs three driver calls when created (create,
** map, set access) and two for every further mapping, each tens of
** microseconds on an H200 (`vram_vmm_costs`: the cost is per mapping,
** whatever its size). Measured with `vram replay`, 8 MiB units cut the
** calls 4x against 2 MiB with fragmentation still <= 1.013 on the shared
** traces; 16 / 32 / 128 MiB units reached 1.019 / 1.033 / 1.087 (leak_mlp).
*/
#define GRANULES_PER_UNIT 4

/* After a conflict, new physical memory may exceed the peak in use by this
** fraction (1/50) rather than bring an idle unit's other mappings along
** (see obtain_unit_locked). Measured with `vram replay`: fragmentation is
** the same with 1/100, 1/67 and 1/50 on every shared trace (the conflicts
** come while memory is below its peak), and only 1/50 leaves a second pass
** of leak_mlp without a driver call (1/100: 10 calls, 1/67: 4). */
#define SLACK_DIVISOR 50

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

/* ---- the idle ring of physical units (E3) ---- */

static inline bool
is_idle(const struct expand *e, uint64_t p)
{
    return e->p[p].owner == 0;
}

/* Entry K of the ring (0 = the head) is current: its unit is idle and this
** is its newest entry. */
static inline bool
ring_current(const struct expand *e, uint64_t k)
{
    uint32_t p = e->idle[(e->idle_head + k) & (e->idle_cap - 1)];
    return is_idle(e, p) && e->p[p].tick == (uint32_t)(e->idle_tick + k);
}

/* Drop the stale entries, keeping the order of the current ones (the least
** recently idle unit is reused first). O(ring), run when the ring is full,
** which then holds more entries than there are units: O(1) amortized per
** push. */
static void
idle_compact(struct expand *e)
{
    uint64_t mask = e->idle_cap - 1, k = 0;
    for (uint64_t i = 0; i < e->idle_len; i++) {
        if (!ring_current(e, i))
            continue;
        uint32_t p = e->idle[(e->idle_head + i) & mask];
        e->idle[(e->idle_head + k) & mask] = p;
        e->p[p].tick = (uint32_t)(e->idle_tick + k);
        k++;
    }
    e->idle_len = k;
}

/* Physical unit P has become idle. */
static void
idle_push(struct expand *e, uint64_t p)
{
    e->p[p].owner = 0;
    e->n_idle++;
    if (e->idle_len == e->idle_cap)
        idle_compact(e); /* at most one current entry per unit: room now */
    e->p[p].tick = (uint32_t)(e->idle_tick + e->idle_len);
    e->idle[(e->idle_head + e->idle_len++) & (e->idle_cap - 1)] = (uint32_t)p;
}

/* The least recently idle physical unit, taken off the ring; -1 if none. */
static int64_t
idle_pop(struct expand *e)
{
    while (e->idle_len > 0) {
        bool current = ring_current(e, 0);
        uint32_t p = e->idle[e->idle_head];
        e->idle_head = (e->idle_head + 1) & (e->idle_cap - 1);
        e->idle_tick++;
        e->idle_len--;
        if (current)
            return p;
    }
    return -1;
}

/* Physical unit P now serves granule G's blocks. */
static inline void
claim(struct expand *e, uint64_t p, uint64_t g)
{
    if (e->p[p].owner == 0)
        e->n_idle--; /* its ring entry is now stale */
    e->p[p].owner = (uint32_t)(g + 1);
}

/* ---- setup ---- */

static void
free_arrays(struct expand *e)
{
    zmem_free(e->g, e->n, sizeof *e->g);
    zmem_free(e->p, e->cap_p, sizeof *e->p);
    zmem_free(e->idle, e->idle_cap, sizeof *e->idle);
    zmem_free(e->holes, e->cap_p, sizeof *e->holes);
    e->g = NULL;
    e->p = NULL;
    e->idle = NULL;
    e->holes = NULL;
    e->n = e->cap_p = e->idle_cap = 0;
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
    uint64_t cap = (dev->limit_max + gran - 1) / gran * gran; /* vram_set_limit: <= */
    if (cap == 0)
        cap = gran;
    /* Twice the cap: holes in the address space then never cause an OOM
    ** while physical memory is left (address space costs nothing). */
    uint64_t size = 2 * cap, n = size / gran;
    if (n > UINT32_MAX - 1)
        return error_set(VRAM_E_INVALID,
                         "expandable: a cap of %" PRIu64 " granules is too large", n / 2);
    uint64_t cap_p = n / 2, ring = 64;
    while (ring < cap_p)
        ring *= 2;
    /* Zero pages until touched: a table is touched only where memory is. */
    e->n = n;
    e->cap_p = cap_p;
    e->idle_cap = ring;
    e->g = zmem_alloc(n, sizeof *e->g);
    e->p = zmem_alloc(cap_p, sizeof *e->p);
    e->idle = zmem_alloc(ring, sizeof *e->idle);
    e->holes = zmem_alloc(cap_p, sizeof *e->holes);
    if (e->g == NULL || e->p == NULL || e->idle == NULL || e->holes == NULL) {
        free_arrays(e);
        return error_set(VRAM_E_HOST_MEMORY,
                         "out of host memory for %" PRIu64 " granules", n);
    }
    e->n_p = e->creating = e->n_holes = 0;
    e->idle_head = e->idle_len = e->n_idle = 0;
    e->idle_tick = 0;

    e->reserving = true;
    device_unlock(dev);
    uint64_t base = 0;
    vram_status st = be->ops->va_reserve(be, dev->physical, size, &base);
    device_lock(dev);
    e->reserving = false;
    dev->backend_calls++;
    if (st == VRAM_OK) {
        st = heap_add_region(&dev->heap, base, size, base, NULL);
        if (st != VRAM_OK) {
            device_unlock(dev);
            be->ops->va_release(be, dev->physical, base, size);
            device_lock(dev);
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
    e->ready = true;
    pthread_cond_broadcast(&e->changed);
    char a[32];
    log_write(LOG_REGION, "GPU:%d: reserved %s of address space at 0x%" PRIx64,
              dev->index, size_format(size, a, sizeof a), base);
    return VRAM_OK;
}

/* ---- backing ---- */

static inline uint64_t
addr_of(const struct expand *e, uint64_t g)
{
    return e->va_base + g * e->gran;
}

/* Granules G0..G1 lose one live block each; the physical units of those
** left without one become idle. */
static void
unref_range(struct expand *e, uint64_t g0, uint64_t g1)
{
    for (uint64_t g = g0; g <= g1; g++) {
        struct granule *gr = &e->g[g];
        assert(gr->live > 0);
        if (--gr->live == 0 && gr->state == G_MAPPED && e->p[gr->phys - 1].owner == g + 1)
            idle_push(e, gr->phys - 1);
    }
}

/*
** Granule G is mapped to a physical unit that another granule's blocks use
** now: unmap G. Kernels queued before the frees at G may still use its
** address, so the device is synchronized first, once per allocation
** (PyTorch's expandable segments synchronize likewise before unmapping).
** *SYNCED_BEFORE: this allocation has synchronized already (the caller's, not
** shared: threads allocate at once).
*/
static vram_status
unmap_taken_locked(struct vram_device *dev, uint64_t g, bool *synced_before)
{
    struct expand *e = &dev->ex;
    struct backend *be = dev->ctx->backend;
    if (dev->pools_open > 0)
        return error_set(VRAM_E_UNSUPPORTED,
                         "GPU:%d: while a CUDA graph is captured, this allocation needs "
                         "memory that is mapped at another address, and moving it needs "
                         "a device synchronize, which capture forbids; run the captured "
                         "code once before capturing it (a warm-up), or use the growth "
                         "strategy",
                         dev->index);
    e->g[g].state = G_UNMAPPING;
    device_unlock(dev);
    vram_status st = VRAM_OK;
    bool synced = be->ops->synchronize != NULL && !*synced_before;
    if (synced)
        st = be->ops->synchronize(be, dev->physical);
    *synced_before = *synced_before || (synced && st == VRAM_OK);
    if (st == VRAM_OK)
        st = be->ops->unmap(be, dev->physical, addr_of(e, g), e->gran);
    device_lock(dev);
    dev->backend_calls += 1 + synced;
    if (st != VRAM_OK) {
        e->g[g].state = G_MAPPED;
        pthread_cond_broadcast(&e->changed);
        return st;
    }
    e->unmaps++;
    e->p[e->g[g].phys - 1].maps--;
    e->g[g].phys = 0;
    e->g[g].state = G_UNMAPPED;
    pthread_cond_broadcast(&e->changed);
    return VRAM_OK;
}

/*
** A physical unit for granule G, claimed for it: the least recently idle
** one (mapped elsewhere or nowhere: it is mapped here as well, so nothing
** waits for the device), else new memory up to the cap.
**
** After a conflict (G's memory had been taken), new memory comes first
** while physical memory stays within SLACK_DIVISOR of the peak in use: an
** idle unit mapped here would bring its other granules along, and in a
** loop one of them tends to be needed while G is live -- the next
** conflict. Measured on the shared traces (8 MiB units): conflicts that
** chain like this kept resnet50_fp32 synchronizing ~7 times a step for its
** first 15 steps (+2-2.6 % step time in ResNet-50 training on the H200);
** with the slack they stop within 4 steps, for no more peak memory.
** Drops the lock around the backend call.
*/
static vram_status
obtain_unit_locked(struct vram_device *dev, uint64_t g, bool conflict, uint64_t *out)
{
    struct expand *e = &dev->ex;
    struct backend *be = dev->ctx->backend;
    uint64_t next = expand_phys_bytes(e) + e->gran;
    uint64_t peak = dev->peak_in_use > dev->heap.bytes_in_use ? dev->peak_in_use
                                                              : dev->heap.bytes_in_use;
    bool fresh = conflict && next <= peak + peak / SLACK_DIVISOR && next <= dev->limit;
    int64_t p = fresh ? -1 : idle_pop(e);
    if (p >= 0) {
        claim(e, (uint64_t)p, g);
        *out = (uint64_t)p;
        return VRAM_OK;
    }
    if (next > dev->limit)
        return VRAM_E_OOM; /* the cap: the caller explains */
    e->creating++;         /* I8: counted before the call */
    device_unlock(dev);
    uint64_t h = 0;
    vram_status st = be->ops->phys_create(be, dev->physical, e->gran, &h);
    device_lock(dev);
    dev->backend_calls++;
    e->creating--;
    if (st != VRAM_OK)
        return st; /* the device is full (other processes, other logical devices) */
    /* A slot given back by vram_release_idle first: the table never grows
    ** past the cap in units (E4). */
    uint64_t slot = e->n_holes > 0 ? e->holes[--e->n_holes] : e->n_p++;
    assert(slot < e->cap_p);
    struct physunit *u = &e->p[slot];
    u->handle = h;
    u->owner = (uint32_t)(g + 1);
    u->maps = 0;
    *out = slot;
    return VRAM_OK;
}

/* Map granule G, unmapped and in state G_MAPPING, to a physical unit;
** CONFLICT: its memory had been taken (see obtain_unit_locked). */
static vram_status
map_granule_locked(struct vram_device *dev, uint64_t g, bool conflict)
{
    struct expand *e = &dev->ex;
    struct backend *be = dev->ctx->backend;
    uint64_t p = 0;
    vram_status st = obtain_unit_locked(dev, g, conflict, &p);
    if (st != VRAM_OK)
        return st;
    uint64_t h = e->p[p].handle;
    device_unlock(dev);
    st = be->ops->map(be, dev->physical, addr_of(e, g), e->gran, h);
    device_lock(dev);
    dev->backend_calls++;
    if (st != VRAM_OK) {
        idle_push(e, p); /* kept for the next granule that needs memory */
        return st;
    }
    e->p[p].maps++;
    e->g[g].phys = (uint32_t)(p + 1);
    e->maps++;
    return VRAM_OK;
}

vram_status
expand_back_locked(struct vram_device *dev, uint64_t addr, uint64_t size)
{
    struct expand *e = &dev->ex;
    uint64_t g0 = unit_of(e, addr);
    uint64_t g1 = unit_of(e, addr + size - 1);
    bool done = true;
    bool synced = false; /* the first unmap in this allocation synchronizes */
    /* Count the block first, and claim idle memory mapped here, so that no
    ** other thread takes these granules' memory while we work (E2). */
    for (uint64_t g = g0; g <= g1; g++) {
        struct granule *gr = &e->g[g];
        gr->live++;
        /* Mapped is not enough: a unit another thread has just counted may
        ** still be mapped to memory a third unit owns (a conflict that
        ** thread has yet to resolve). */
        if (gr->state == G_MAPPED && e->p[gr->phys - 1].owner == g + 1)
            continue;
        if (gr->state == G_MAPPED && e->p[gr->phys - 1].owner == 0)
            claim(e, gr->phys - 1, g);
        else
            done = false;
    }
    if (done)
        return VRAM_OK; /* the steady state: no backend call */
    for (uint64_t g = g0; g <= g1; g++) {
        while (e->g[g].state == G_MAPPING || e->g[g].state == G_UNMAPPING)
            pthread_cond_wait(&e->changed, &dev->lock);
        vram_status st = VRAM_OK;
        bool conflict = false;
        if (e->g[g].state == G_MAPPED) {
            struct physunit *u = &e->p[e->g[g].phys - 1];
            if (u->owner == g + 1)
                continue;
            if (u->owner == 0) { /* became idle while we waited */
                claim(e, e->g[g].phys - 1, g);
                continue;
            }
            st = unmap_taken_locked(dev, g, &synced);
            conflict = true;
        }
        if (st == VRAM_OK) {
            e->g[g].state = G_MAPPING;
            st = map_granule_locked(dev, g, conflict);
            e->g[g].state = st == VRAM_OK ? G_MAPPED : G_UNMAPPED;
            pthread_cond_broadcast(&e->changed);
        }
        if (st != VRAM_OK) {
            unref_range(e, g0, g1);
            return st;
        }
    }
    return VRAM_OK;
}

void
expand_unback_locked(struct vram_device *dev, uint64_t addr, uint64_t size)
{
    struct expand *e = &dev->ex;
    unref_range(e, unit_of(e, addr), unit_of(e, addr + size - 1));
}

uint64_t
expand_phys_bytes(const struct expand *e)
{
    return (e->n_p - e->n_holes + e->creating) * e->gran;
}

/* ---- giving idle memory back (vram_release_idle) ---- */

/* An address unit a release unmaps. */
struct release_unmap {
    uint64_t gran;  /* the address unit */
    uint32_t unit;  /* the physical unit mapped there */
    vram_status st; /* the unmap's result */
};

/* A physical unit a release gives back. */
struct release_unit {
    uint64_t handle; /* its backend handle */
    uint32_t unit;   /* its index */
    vram_status st;  /* the release's result; VRAM_E_BACKEND when not tried */
};

/* The backend calls of one release, made without the lock. */
struct release_job {
    struct release_unmap *g; /* n_g of them */
    struct release_unit *u;  /* n_u of them */
    bool *bad;               /* per physical unit: one of its unmaps failed */
    uint64_t n_g, n_u;
};

static void
release_job_free(struct release_job *j)
{
    free(j->g);
    free(j->u);
    free(j->bad);
}

/* Unmap, then release the units none of whose mappings failed. Without
** the lock. Returns the backend calls made. */
static uint64_t
release_job_run(struct vram_device *dev, struct release_job *j)
{
    struct expand *e = &dev->ex;
    struct backend *be = dev->ctx->backend;
    uint64_t calls = 0;
    vram_status st = VRAM_OK;
    /* Kernels queued before the frees may still use these addresses: one
    ** synchronize for the whole release (as before a conflict's unmap). */
    if (be->ops->synchronize != NULL) {
        st = be->ops->synchronize(be, dev->physical);
        calls++;
    }
    for (uint64_t k = 0; k < j->n_g; k++) {
        struct release_unmap *m = &j->g[k];
        m->st = st != VRAM_OK
                    ? st
                    : be->ops->unmap(be, dev->physical, addr_of(e, m->gran), e->gran);
        calls += st == VRAM_OK;
        if (m->st != VRAM_OK)
            j->bad[m->unit] = true;
    }
    for (uint64_t k = 0; k < j->n_u; k++) {
        struct release_unit *u = &j->u[k];
        u->st = VRAM_E_BACKEND;
        if (st == VRAM_OK && !j->bad[u->unit]) {
            u->st = be->ops->phys_release(be, dev->physical, u->handle);
            calls++;
        }
    }
    return calls;
}

vram_status
expand_release_idle_locked(struct vram_device *dev, uint64_t *released)
{
    struct expand *e = &dev->ex;
    *released = 0;
    while (e->releasing_idle)
        pthread_cond_wait(&e->changed, &dev->lock);
    if (!e->ready || e->n_idle == 0)
        return VRAM_OK;
    /* Take every idle unit out of use (their ring entries turn stale), and
    ** mark the address units mapped to them: other threads wait for those. */
    struct release_job j = {0};
    uint64_t n_g = 0;
    for (uint64_t g = 0; g < e->n; g++)
        n_g += e->g[g].state == G_MAPPED && e->p[e->g[g].phys - 1].owner == 0;
    j.u = malloc(e->n_idle * sizeof *j.u);
    j.g = malloc((n_g + 1) * sizeof *j.g);
    j.bad = calloc(e->n_p, sizeof *j.bad);
    if (j.u == NULL || j.g == NULL || j.bad == NULL) {
        release_job_free(&j);
        return error_set(VRAM_E_HOST_MEMORY, "out of host memory for the release");
    }
    for (uint64_t g = 0; g < e->n; g++)
        if (e->g[g].state == G_MAPPED && e->p[e->g[g].phys - 1].owner == 0) {
            e->g[g].state = G_UNMAPPING;
            j.g[j.n_g].unit = e->g[g].phys - 1;
            j.g[j.n_g++].gran = g;
        }
    for (uint64_t p = 0; p < e->n_p; p++)
        if (e->p[p].owner == 0) {
            e->p[p].owner = PHYS_HOLE; /* still held: counted until released */
            e->n_idle--;
            j.u[j.n_u].unit = (uint32_t)p;
            j.u[j.n_u++].handle = e->p[p].handle;
        }
    e->releasing_idle = true;
    device_unlock(dev);
    uint64_t calls = release_job_run(dev, &j);
    device_lock(dev);
    dev->backend_calls += calls;
    for (uint64_t k = 0; k < j.n_g; k++) {
        struct granule *gr = &e->g[j.g[k].gran];
        if (j.g[k].st == VRAM_OK) {
            e->p[gr->phys - 1].maps--;
            gr->phys = 0;
            gr->state = G_UNMAPPED;
        } else {
            gr->state = G_MAPPED;
        }
    }
    vram_status st = VRAM_OK;
    for (uint64_t k = 0; k < j.n_u; k++) {
        uint32_t p = j.u[k].unit;
        if (j.u[k].st == VRAM_OK) {
            assert(e->p[p].maps == 0);
            e->p[p].handle = 0;
            e->holes[e->n_holes++] = p;
            *released += e->gran;
        } else {
            st = VRAM_E_BACKEND; /* kept, idle again: still usable */
            idle_push(e, p);
        }
    }
    e->releasing_idle = false;
    pthread_cond_broadcast(&e->changed);
    release_job_free(&j);
    if (st != VRAM_OK)
        return error_set(st, "GPU:%d: giving idle memory back failed for some units "
                             "(they stay held and usable): %s",
                         dev->index, vram_last_error());
    return VRAM_OK;
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
            if (be->ops->unmap(be, dev->physical, addr_of(e, g), e->gran) != VRAM_OK) {
                log_write(LOG_CONFIG, "GPU:%d: unmap at close failed: %s", dev->index,
                          vram_last_error());
                continue;
            }
            e->p[e->g[g].phys - 1].maps--;
        }
        for (uint64_t p = 0; p < e->n_p; p++) {
            if (e->p[p].maps != 0 || e->p[p].owner == PHYS_HOLE)
                continue; /* still mapped: releasing it would fail; or given back */
            if (be->ops->phys_release(be, dev->physical, e->p[p].handle) != VRAM_OK)
                log_write(LOG_CONFIG, "GPU:%d: release at close failed: %s", dev->index,
                          vram_last_error());
        }
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
    error_set(VRAM_E_INVALID, "%s (unit %" PRIu64 ")", what, g);
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
    uint32_t *maps = calloc(e->cap_p, sizeof *maps);
    if (count == NULL || maps == NULL) {
        free(count);
        free(maps);
        return true; /* cannot check without memory; not a broken invariant */
    }
    for (const struct region *r = dev->heap.regions; r != NULL; r = r->next)
        for (const struct block *b = r->first; b != NULL; b = b->next) {
            if (b->free)
                continue;
            uint64_t g0 = unit_of(e, b->addr);
            uint64_t g1 = unit_of(e, b->addr + b->size - 1);
            for (uint64_t g = g0; g <= g1; g++)
                count[g]++;
        }
    const char *why = NULL;
    uint64_t where = 0;
    for (uint64_t g = 0; g < e->n && why == NULL; g++) {
        const struct granule *gr = &e->g[g];
        where = g;
        if (count[g] != gr->live)
            why = "E1: live count differs from the blocks over the granule";
        /* E2: a granule has a physical unit exactly when mapped; under a
        ** live block (outside transitions) it is mapped to a unit it owns. */
        else if ((gr->state == G_MAPPED) != (gr->phys != 0))
            why = "E2: mapped state and physical unit disagree";
        else if (gr->phys > e->n_p)
            why = "E2: physical unit out of range";
        else if (gr->live > 0 && gr->state == G_UNMAPPED)
            why = "E2: a live block lies on an unmapped granule";
        else if (gr->live > 0 && gr->state == G_MAPPED && e->p[gr->phys - 1].owner != g + 1)
            why = "E2: a live granule's physical unit belongs to another";
        if (why == NULL && gr->phys != 0)
            maps[gr->phys - 1]++;
    }
    /* E3: an owned unit's owner is live and mapped to it; each unit's map
    ** count is exact; the idle units are exactly the ring's current
    ** entries and the idle count. */
    uint64_t idle = 0;
    for (uint64_t p = 0; p < e->n_p && why == NULL; p++) {
        const struct physunit *u = &e->p[p];
        where = p;
        if (u->maps != maps[p])
            why = "E3: map count differs from the granules mapped to the unit";
        else if (u->owner == PHYS_HOLE)
            ; /* given back, or being given back (vram_release_idle) */
        else if (u->owner > e->n)
            why = "E3: owner out of range";
        else if (u->owner != 0 && (e->g[u->owner - 1].phys != p + 1 ||
                                   e->g[u->owner - 1].live == 0) &&
                 e->g[u->owner - 1].state == G_MAPPED)
            why = "E3: the owner of a unit is not a live granule mapped to it";
        idle += u->owner == 0;
    }
    free(count);
    free(maps);
    if (why != NULL)
        return broken(why, where);
    if (idle != e->n_idle)
        return broken("E3: idle count off", idle);
    uint64_t in_ring = 0;
    for (uint64_t k = 0; k < e->idle_len; k++)
        in_ring += ring_current(e, k);
    if (in_ring != idle)
        return broken("E3: the ring's current entries are not the idle units", in_ring);
    for (uint64_t k = 0; k < e->n_holes; k++)
        if (e->holes[k] >= e->n_p || e->p[e->holes[k]].owner != PHYS_HOLE ||
            e->p[e->holes[k]].maps != 0)
            return broken("E3: a hole of the unit table is a unit in use", e->holes[k]);
    /* E4: physical bytes held never exceed the cap (I8). */
    if (expand_phys_bytes(e) > dev->limit)
        return broken("I8: physical bytes above the cap", e->n_p);
    return true;
}
