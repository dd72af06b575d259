/* SPDX-License-Identifier: MIT */
/*
** expand.c -- physical backing for the expandable strategy (see expand.h
** for the design, docs/ALLOCATOR.md for invariants E1-E5).
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
** Physical memory is accounted in units of this many driver granules (8 MiB
** on CUDA's 2 MiB): a unit is the smallest piece an alias, a conflict or a
** release moves. Measured with `vram replay`, 16 / 32 / 128 MiB units
** reached fragmentation 1.019 / 1.033 / 1.087 on leak_mlp (8 MiB: 1.013).
*/
#define GRANULES_PER_UNIT 4

/*
** New memory for a run of units one allocation needs side by side is made
** as one extent (one driver handle) of up to this many units (64 MiB). The
** driver's cost is per call, whatever the size (`vram_vmm_costs` on an
** H200: create 12 us, map + set access 28.7 us, + 0.049 us per MiB), so a
** 100 MiB block costs 4 calls instead of 26. An extent is owned, aliased
** and given back only whole, so larger extents hold more idle memory where
** a small block stays live. Measured with `vram replay --driver-costs h200`
** (cold driver ns per event, fragmentation): up to 8 units, gpt2_bf16_b16
** 683 (1.012), resnet50_fp32 504 (1.010); up to 16, 467 (1.020) and 348
** (1.010), with driver calls left in gpt2_bf16_b16's second pass; up to
** 32, 350 (1.020); unbounded, 285 (1.070).
*/
#define EXTENT_UNITS 8

/*
** A run shorter than this is made a unit a handle, as before extents: a
** block that needs one or two new units is usually a small one that stays
** live (a kept output), and an extent under it would hold its other units.
** Measured with `vram replay --driver-costs h200` (cold driver ns per
** event, fragmentation), leak_mlp: extents from 2 units 1,310 (1.019),
** from 3 units 1,599 (1.013, as without extents; PyTorch's caching
** allocator reaches 1.014 there), from 4 units 1,599 (1.013);
** resnet50_fp32 504 / 510 / 584 (1.010), gpt2_bf16_b16 683 / 699 / 838
** (1.012 / 1.011 / 1.011), gpt2m_generate 2.9 / 4.3 / 4.3 (1.003).
*/
#define EXTENT_MIN_UNITS 3
_Static_assert(EXTENT_UNITS <= UINT8_MAX, "a unit's place and span are bytes");

/* After a conflict, new physical memory may exceed the peak in use by this
** fraction (1/50) rather than bring an idle extent's other mappings along
** (see back_run_locked). Measured with `vram replay` (8 MiB units, no
** extents): fragmentation is the same with 1/100, 1/67 and 1/50 on every
** shared trace (the conflicts come while memory is below its peak), and
** only 1/50 leaves a second pass of leak_mlp without a driver call (1/100:
** 10 calls, 1/67: 4). */
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

/* Unit P is the first of an idle extent. (Other units of an extent have
** no owner of their own: a stale ring entry naming a slot given back and
** made again as such a unit must not look current.) */
static inline bool
is_idle(const struct expand *e, uint64_t p)
{
    return e->p[p].owner == 0 && e->p[p].head == p;
}

/* Entry K of the ring (0 = the head) is current: its extent is idle and
** this is its newest entry. */
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

/* Extent H (its first unit), idle, goes to the back of the ring. */
static void
ring_push(struct expand *e, uint64_t h)
{
    if (e->idle_len == e->idle_cap)
        idle_compact(e); /* at most one current entry per unit: room now */
    e->p[h].tick = (uint32_t)(e->idle_tick + e->idle_len);
    e->idle[(e->idle_head + e->idle_len++) & (e->idle_cap - 1)] = (uint32_t)h;
}

/* Extent H's owning mapping has no live block left: all its units idle. */
static void
make_idle(struct expand *e, uint64_t h)
{
    e->p[h].owner = 0;
    e->n_idle += e->p[h].span;
    ring_push(e, h);
}

/* The least recently idle extent (its first unit), taken off the ring; -1
** if none. */
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

/* Extent H, idle, now serves the mapping whose first granule is BASE (its
** granules from BASE on, mapped to it or about to be). */
static void
claim_extent(struct expand *e, uint64_t h, uint64_t base)
{
    e->p[h].owner = (uint32_t)(base + 1);
    e->n_idle -= e->p[h].span; /* its ring entry is now stale */
}

/* Granule G is mapped to idle memory: its mapping takes the extent. */
static inline void
claim(struct expand *e, uint64_t g)
{
    const struct physunit *u = &e->p[e->g[g].phys - 1];
    claim_extent(e, u->head, g - u->pos);
}

/* Whether granule G, mapped, owns its memory (its mapping owns the
** extent): 1; idle: 0; owned by another mapping: -1. */
static inline int
ownership(const struct expand *e, uint64_t g)
{
    const struct physunit *u = &e->p[e->g[g].phys - 1];
    uint32_t owner = e->p[u->head].owner;
    return owner == g - u->pos + 1 ? 1 : owner == 0 ? 0 : -1;
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

/* Whether a granule of the mapping of SPAN granules from BASE, other than
** G, has a live block. At most EXTENT_UNITS - 1 loads, in order: a free
** going up a block finds the next granule live at once, and only its last
** granule in the mapping looks back. */
static inline bool
mapping_live(const struct expand *e, uint64_t base, uint64_t span, uint64_t g)
{
    for (uint64_t i = g + 1; i < base + span; i++)
        if (e->g[i].live > 0)
            return true;
    for (uint64_t i = base; i < g; i++)
        if (e->g[i].live > 0)
            return true;
    return false;
}

/* Granules G0..G1 lose one live block each; the extents whose owning
** mapping is left without one become idle. */
static void
unref_range(struct expand *e, uint64_t g0, uint64_t g1)
{
    for (uint64_t g = g0; g <= g1; g++) {
        struct granule *gr = &e->g[g];
        assert(gr->live > 0);
        if (--gr->live != 0 || gr->state != G_MAPPED)
            continue;
        const struct physunit *u = &e->p[gr->phys - 1];
        uint64_t base = g - u->pos, span = u->span, h = u->head;
        if (g < g1 && g + 1 < base + span)
            continue; /* the next granule, live until this loop reaches it, decides */
        if (e->p[h].owner == base + 1 && (span == 1 || !mapping_live(e, base, span, g)))
            make_idle(e, h);
    }
}

/*
** Granule G is mapped to memory that another mapping's blocks use now:
** unmap G's mapping (the extent's SPAN granules: the driver unmaps a
** mapping only whole; none of them owns the memory). Kernels queued before
** the frees there may still use the addresses, so the device is
** synchronized first, once per allocation (PyTorch's expandable segments
** synchronize likewise before unmapping). *SYNCED_BEFORE: this allocation
** has synchronized already (the caller's, not shared: threads allocate at
** once).
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
    const struct physunit *u = &e->p[e->g[g].phys - 1];
    uint64_t base = g - u->pos, span = u->span;
    for (uint64_t i = 0; i < span; i++)
        e->g[base + i].state = G_UNMAPPING;
    device_unlock(dev);
    vram_status st = VRAM_OK;
    bool synced = be->ops->synchronize != NULL && !*synced_before;
    if (synced)
        st = be->ops->synchronize(be, dev->physical);
    *synced_before = *synced_before || (synced && st == VRAM_OK);
    if (st == VRAM_OK)
        st = be->ops->unmap(be, dev->physical, addr_of(e, base), span * e->gran);
    device_lock(dev);
    dev->backend_calls += 1 + synced;
    for (uint64_t i = 0; i < span; i++) {
        struct granule *gr = &e->g[base + i];
        if (st == VRAM_OK) {
            e->p[gr->phys - 1].maps--;
            gr->phys = 0;
        }
        gr->state = st == VRAM_OK ? G_UNMAPPED : G_MAPPED;
    }
    pthread_cond_broadcast(&e->changed);
    if (st != VRAM_OK)
        return st;
    e->unmaps += span;
    return VRAM_OK;
}

/* Whether SPAN granules from G on are all unmapped (an extent fits there). */
static bool
fits(const struct expand *e, uint64_t g, uint64_t span)
{
    if (g + span > e->n)
        return false;
    for (uint64_t i = 0; i < span; i++)
        if (e->g[g + i].state != G_UNMAPPED)
            return false;
    return true;
}

/* Map idle extent H, taken off the ring, at the granules from G on (an
** alias: map, no unmap, so no wait for the device). Drops the lock around
** the backend call. */
static vram_status
alias_locked(struct vram_device *dev, uint64_t g, uint64_t h)
{
    struct expand *e = &dev->ex;
    struct backend *be = dev->ctx->backend;
    uint64_t span = e->p[h].span;
    claim_extent(e, h, g); /* no other thread takes it meanwhile */
    for (uint64_t i = 0; i < span; i++)
        e->g[g + i].state = G_MAPPING;
    device_unlock(dev);
    vram_status st =
        be->ops->map(be, dev->physical, addr_of(e, g), span * e->gran, e->p[h].handle);
    device_lock(dev);
    dev->backend_calls++;
    for (uint64_t q = h + 1; q != 0; q = e->p[q - 1].next) {
        struct physunit *u = &e->p[q - 1];
        struct granule *gr = &e->g[g + u->pos];
        gr->state = st == VRAM_OK ? G_MAPPED : G_UNMAPPED;
        if (st == VRAM_OK) {
            gr->phys = (uint32_t)q;
            u->maps++;
        }
    }
    if (st != VRAM_OK)
        make_idle(e, h); /* kept for the next granules that need memory */
    else
        e->maps += span;
    pthread_cond_broadcast(&e->changed);
    return st;
}

/*
** New memory for the K unmapped granules from G on: one handle of K units,
** one map. Up to the cap: fewer units there, VRAM_E_OOM with none left.
** Drops the lock around the backend calls.
*/
static vram_status
create_locked(struct vram_device *dev, uint64_t g, uint64_t k)
{
    struct expand *e = &dev->ex;
    struct backend *be = dev->ctx->backend;
    uint64_t held = expand_phys_bytes(e);
    uint64_t room = dev->limit > held ? (dev->limit - held) / e->gran : 0;
    if (room == 0)
        return VRAM_E_OOM; /* the cap: the caller explains */
    if (k > room)
        k = room;
    for (uint64_t i = 0; i < k; i++)
        e->g[g + i].state = G_MAPPING;
    e->creating += k; /* I8: counted before the call */
    device_unlock(dev);
    uint64_t h = 0, bytes = k * e->gran, calls = 1;
    vram_status st = be->ops->phys_create(be, dev->physical, bytes, &h);
    if (st == VRAM_OK) {
        calls++;
        st = be->ops->map(be, dev->physical, addr_of(e, g), bytes, h);
        if (st != VRAM_OK) {
            calls++;
            (void)be->ops->phys_release(be, dev->physical, h); /* the error stays map's */
        }
    }
    device_lock(dev);
    dev->backend_calls += calls;
    e->creating -= k;
    uint32_t head = 0;
    struct physunit *prev = NULL;
    for (uint64_t i = 0; i < k; i++) {
        struct granule *gr = &e->g[g + i];
        gr->state = st == VRAM_OK ? G_MAPPED : G_UNMAPPED;
        if (st != VRAM_OK)
            continue;
        /* A slot given back by vram_release_idle first: the table never
        ** grows past the cap in units (E4). */
        uint64_t slot = e->n_holes > 0 ? e->holes[--e->n_holes] : e->n_p++;
        assert(slot < e->cap_p);
        if (i == 0)
            head = (uint32_t)slot;
        else
            prev->next = (uint32_t)(slot + 1);
        prev = &e->p[slot];
        *prev = (struct physunit){.handle = h,
                                  .owner = i == 0 ? (uint32_t)(g + 1) : 0,
                                  .maps = 1,
                                  .span = (uint8_t)k,
                                  .head = head,
                                  .pos = (uint8_t)i};
        gr->phys = (uint32_t)(slot + 1);
    }
    pthread_cond_broadcast(&e->changed);
    if (st != VRAM_OK)
        return st;
    e->maps += k;
    return VRAM_OK;
}

/* Idle extents looked at for one alias before new memory is made: a
** bound, so that a ring of extents too large for the place costs O(1). */
#define ALIAS_TRIES 8

/*
** Granule G, under the caller's block, is unmapped: map memory there, and
** at the unmapped granules after it up to G1 (the run). First the least
** recently idle extent that fits in the run (an alias: its memory was
** idle), else new memory for the whole run in one handle, up to the cap.
**
** After a conflict (G's memory had been taken), new memory comes first
** while physical memory stays within SLACK_DIVISOR of the peak in use: an
** idle extent mapped here would bring its other mappings along, and in a
** loop one of them tends to be needed while G is live -- the next
** conflict. Measured on the shared traces (8 MiB units): conflicts that
** chain like this kept resnet50_fp32 synchronizing ~7 times a step for its
** first 15 steps (+2-2.6 % step time in ResNet-50 training on the H200);
** with the slack they stop within 4 steps, for no more peak memory. The
** same bound decides whether an extent larger than the run may be mapped
** past it (over unmapped granules) rather than new memory made.
*/
static vram_status
back_run_locked(struct vram_device *dev, uint64_t g, uint64_t g1, bool conflict)
{
    struct expand *e = &dev->ex;
    uint64_t k = 1;
    while (g + k <= g1 && e->g[g + k].state == G_UNMAPPED && k < EXTENT_UNITS)
        k++;
    if (k < EXTENT_MIN_UNITS)
        k = 1; /* a short run: a unit a handle */
    uint64_t peak = dev->peak_in_use > dev->heap.bytes_in_use ? dev->peak_in_use
                                                              : dev->heap.bytes_in_use;
    uint64_t held = expand_phys_bytes(e), slack = peak + peak / SLACK_DIVISOR;
    if (slack > dev->limit)
        slack = dev->limit;
    uint64_t fit = slack > held ? (slack - held) / e->gran : 0; /* units */
    if (conflict && fit > 0)
        return create_locked(dev, g, k < fit ? k : fit);
    {
        uint32_t skipped[ALIAS_TRIES];
        unsigned n_skipped = 0;
        int64_t h = -1;
        while (n_skipped < ALIAS_TRIES && (h = idle_pop(e)) >= 0) {
            uint64_t span = e->p[h].span;
            if ((span <= k || fit < k) && fits(e, g, span))
                break;
            skipped[n_skipped++] = (uint32_t)h;
            h = -1;
        }
        for (unsigned i = 0; i < n_skipped; i++)
            ring_push(e, skipped[i]); /* idle still: to the back */
        if (h >= 0)
            return alias_locked(dev, g, (uint64_t)h);
    }
    return create_locked(dev, g, k);
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
    uint64_t owned_end = 0; /* granules before this one are in a mapping owned here */
    for (uint64_t g = g0; g <= g1; g++) {
        struct granule *gr = &e->g[g];
        gr->live++;
        if (g < owned_end)
            continue; /* the rest of a mapping owned here: one look a mapping */
        /* Mapped is not enough: a unit another thread has just counted may
        ** still be mapped to memory a third unit owns (a conflict that
        ** thread has yet to resolve). */
        if (gr->state == G_MAPPED) {
            int own = ownership(e, g);
            if (own == 0)
                claim(e, g);
            if (own >= 0) {
                const struct physunit *u = &e->p[gr->phys - 1];
                owned_end = g - u->pos + u->span;
                continue;
            }
        }
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
            int own = ownership(e, g);
            if (own == 1)
                continue;
            if (own == 0) { /* became idle while we waited */
                claim(e, g);
                continue;
            }
            st = unmap_taken_locked(dev, g, &synced);
            conflict = true;
        }
        if (st == VRAM_OK)
            st = back_run_locked(dev, g, g1, conflict);
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

/* ---- giving idle memory back (vram_release_idle) ---- */

/* A mapping a release unmaps: one granule of a unit of its own, or an
** extent's granules, all at once (the driver unmaps a mapping only whole). */
struct release_unmap {
    uint64_t gran;  /* its first address unit */
    uint64_t n;     /* address units */
    uint32_t unit;  /* the physical unit (extent: its first) mapped there */
    vram_status st; /* the unmap's result */
};

/* A handle a release gives back: a unit of its own, or a whole extent. */
struct release_unit {
    uint64_t handle; /* its backend handle */
    uint32_t unit;   /* its index (extent: its first unit's) */
    vram_status st;  /* the release's result; VRAM_E_BACKEND when not tried */
};

/* The backend calls of one release, made without the lock. */
struct release_job {
    struct release_unmap *g; /* n_g of them */
    struct release_unit *u;  /* n_u of them */
    bool *bad;               /* per physical unit (extent: its first): an unmap failed */
    bool *mine;              /* per physical unit: given back by this release */
    vram_status *result;     /* per physical unit: its handle's release result */
    uint64_t n_g, n_u;
};

static void
release_job_free(struct release_job *j)
{
    free(j->g);
    free(j->u);
    free(j->bad);
    free(j->mine);
    free(j->result);
}

/* Unmap, then release the handles none of whose mappings failed. Without
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
        m->st = st != VRAM_OK ? st
                              : be->ops->unmap(be, dev->physical, addr_of(e, m->gran),
                                               m->n * e->gran);
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
        j->result[u->unit] = u->st;
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
    /* Every idle extent goes back whole (a handle is given back whole; an
    ** extent with a live block keeps all its units). Its mappings are
    ** unmapped first: counted, then marked so that other threads wait. */
    struct release_job j = {0};
    uint64_t n_g = 0;
    for (uint64_t g = 0; g < e->n; g++)
        n_g += e->g[g].state == G_MAPPED && ownership(e, g) == 0 &&
               e->p[e->g[g].phys - 1].pos == 0;
    j.u = malloc(e->n_idle * sizeof *j.u);
    j.g = malloc((n_g + 1) * sizeof *j.g);
    j.bad = calloc(e->n_p, sizeof *j.bad);
    j.mine = calloc(e->n_p, sizeof *j.mine);
    j.result = calloc(e->n_p, sizeof *j.result);
    if (j.u == NULL || j.g == NULL || j.bad == NULL || j.mine == NULL || j.result == NULL) {
        release_job_free(&j);
        return error_set(VRAM_E_HOST_MEMORY, "out of host memory for the release");
    }
    for (uint64_t g = 0; g < e->n; g++) {
        struct granule *gr = &e->g[g];
        if (gr->state != G_MAPPED || ownership(e, g) != 0)
            continue;
        const struct physunit *u = &e->p[gr->phys - 1];
        gr->state = G_UNMAPPING;
        if (u->pos == 0)
            j.g[j.n_g++] = (struct release_unmap){.gran = g, .n = u->span, .unit = u->head};
    }
    /* Take the units out of use (their ring entries turn stale). */
    for (uint64_t p = 0; p < e->n_p; p++)
        j.mine[p] = e->p[p].owner != PHYS_HOLE && e->p[e->p[p].head].owner == 0;
    for (uint64_t p = 0; p < e->n_p; p++) {
        if (!j.mine[p])
            continue;
        e->n_idle--;
        if (e->p[p].head == p)
            j.u[j.n_u++] = (struct release_unit){.unit = (uint32_t)p,
                                                 .handle = e->p[p].handle};
        /* still held: counted until released */
        e->p[p].owner = PHYS_HOLE;
    }
    e->releasing_idle = true;
    device_unlock(dev);
    uint64_t calls = release_job_run(dev, &j);
    device_lock(dev);
    dev->backend_calls += calls;
    for (uint64_t k = 0; k < j.n_g; k++)
        for (uint64_t i = 0; i < j.g[k].n; i++) {
            struct granule *gr = &e->g[j.g[k].gran + i];
            if (j.g[k].st == VRAM_OK) {
                e->p[gr->phys - 1].maps--;
                gr->phys = 0;
                gr->state = G_UNMAPPED;
            } else {
                gr->state = G_MAPPED;
            }
        }
    vram_status st = VRAM_OK;
    for (uint64_t p = 0; p < e->n_p; p++) {
        struct physunit *u = &e->p[p];
        if (!j.mine[p])
            continue;
        if (j.result[u->head] == VRAM_OK) {
            assert(u->maps == 0);
            u->handle = 0;
            e->holes[e->n_holes++] = (uint32_t)p;
            *released += e->gran;
        } else {
            st = VRAM_E_BACKEND; /* kept, idle again: still usable */
            u->owner = 0;
            if (u->head == p) {
                e->n_idle += u->span;
                ring_push(e, p);
            }
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
            /* A mapping is unmapped whole, from its first granule. */
            const struct physunit *u = &e->p[e->g[g].phys - 1];
            if (u->pos != 0)
                continue;
            if (be->ops->unmap(be, dev->physical, addr_of(e, g), u->span * e->gran) !=
                VRAM_OK) {
                log_write(LOG_CONFIG, "GPU:%d: unmap at close failed: %s", dev->index,
                          vram_last_error());
                continue;
            }
            for (uint64_t i = 0; i < u->span; i++)
                e->p[e->g[g + i].phys - 1].maps--;
            /* the granules' records go with the arrays */
        }
        for (uint64_t p = 0; p < e->n_p; p++) {
            if (e->p[p].maps != 0 || e->p[p].owner == PHYS_HOLE || e->p[p].head != p)
                continue; /* still mapped: releasing it would fail; or given back;
                             or an extent's, released with its first unit */
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

/* Granules BASE.. are extent H's SPAN units in order. */
static bool
mapping_whole(const struct expand *e, uint64_t base, uint64_t h, uint64_t span)
{
    uint64_t i = 0;
    for (uint64_t q = h + 1; q != 0; q = e->p[q - 1].next, i++)
        if (i >= span || e->g[base + i].state != G_MAPPED || e->g[base + i].phys != q ||
            e->p[q - 1].pos != i || e->p[q - 1].head != h)
            return false;
    return i == span;
}

/* Extent H's owning mapping has a granule with a live block (else the
** extent would be idle). Outside transitions only. */
static bool
owner_live(const struct expand *e, uint64_t h)
{
    uint64_t base = e->p[h].owner - 1;
    for (uint64_t i = 0; i < e->p[h].span; i++)
        if (e->g[base + i].state != G_MAPPED || e->g[base + i].live > 0)
            return true;
    return false;
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
        else if (gr->live > 0 && gr->state == G_MAPPED && ownership(e, g) != 1)
            why = "E2: a live granule's physical unit belongs to another";
        /* E5: a mapping is an extent's units in order, from POS 0. */
        else if (gr->state == G_MAPPED) {
            const struct physunit *u = &e->p[gr->phys - 1];
            uint64_t base = g - u->pos;
            if (u->pos > g || e->g[base].state != G_MAPPED || e->g[base].phys != u->head + 1)
                why = "E5: a granule's mapping does not start at its extent's first unit";
            else if (u->pos == 0 && (base + u->span > e->n ||
                                     !mapping_whole(e, base, u->head, u->span)))
                why = "E5: a mapping is not its extent's units in order";
        }
        if (why == NULL && gr->phys != 0)
            maps[gr->phys - 1]++;
    }
    /* E3: an owned unit's owner is live and mapped to it; each unit's map
    ** count is exact; the idle units are exactly the ring's current
    ** entries and the idle count. */
    uint64_t idle = 0, ring_idle = 0;
    for (uint64_t p = 0; p < e->n_p && why == NULL; p++) {
        const struct physunit *u = &e->p[p];
        where = p;
        if (u->maps != maps[p])
            why = "E3: map count differs from the granules mapped to the unit";
        else if (u->owner == PHYS_HOLE)
            ; /* given back, or being given back (vram_release_idle) */
        else if (u->head >= e->n_p || e->p[u->head].span != u->span ||
                 (u->head != p && u->owner != 0))
            why = "E5: an extent's units do not name their first one, or own";
        else if (u->head != p)
            ; /* owned with its extent */
        else if (u->owner > e->n)
            why = "E3: owner out of range";
        else if (u->owner != 0 && u->owner - 1 + u->span <= e->n &&
                 e->g[u->owner - 1].state == G_MAPPED &&
                 !mapping_whole(e, u->owner - 1, p, u->span))
            why = "E3: the owner of an extent is not a mapping of it";
        else if (u->owner != 0 && !owner_live(e, p))
            why = "E5: an extent is owned by a mapping without a live block";
        if (u->owner != PHYS_HOLE && e->p[u->head].owner == 0) {
            idle++;
            ring_idle += u->head == p;
        }
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
    if (in_ring != ring_idle)
        return broken("E3: the ring's current entries are not the idle units of their own",
                      in_ring);
    for (uint64_t k = 0; k < e->n_holes; k++)
        if (e->holes[k] >= e->n_p || e->p[e->holes[k]].owner != PHYS_HOLE ||
            e->p[e->holes[k]].maps != 0)
            return broken("E3: a hole of the unit table is a unit in use", e->holes[k]);
    /* E4: physical bytes held never exceed the cap (I8). */
    if (expand_phys_bytes(e) > dev->limit)
        return broken("I8: physical bytes above the cap", e->n_p);
    return true;
}
