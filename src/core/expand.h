/* SPDX-License-Identifier: MIT */
/*
** expand.h -- the expandable strategy's physical backing: one virtual
** range per logical device, mapped to physical memory unit by unit where
** live blocks are (docs/ALLOCATOR.md, "Expandable").
**
** The heap places blocks in the virtual range as usual (one region, so
** free space always merges). This module keeps two tables:
**
**   granules  units of the virtual range ("granules" here): how many live
**             blocks touch each, and which physical unit is mapped there;
**   physical  units of physical memory, in extents (one driver handle for
**             the run of new units one block needs, from EXTENT_MIN_UNITS
**             to EXTENT_UNITS; a shorter run is a handle a unit):
**             which mapping's blocks use an extent now ("owner"), if any.
**
** An extent may be mapped at several places at once (the driver allows a
** handle to be mapped more than once), but only one of them, its owner,
** has live blocks. When a block lands on a granule whose memory is idle,
** the granule's mapping takes it back without a driver call; when it lands
** on unmapped granules, an idle extent is mapped there too (an alias: map,
** no unmap, so no wait for the device) before new memory is created.
** Physical memory thus follows live bytes, and a steady loop, whose blocks
** land at the same addresses every step, makes no driver call at all once
** each of its granules holds a mapping. Only a mapping whose extent has
** meanwhile been taken by another mapping must be unmapped (after
** synchronizing the device: kernels queued before a free may still use the
** old address).
**
** Every function is called with dev->lock held; those that call the
** backend drop it around each call and retake it ("reserve, call, then
** commit or undo"). Granules in transition (MAPPING, UNMAPPING) make other
** threads wait on the condition variable.
*/
#ifndef VRAM_CORE_EXPAND_H
#define VRAM_CORE_EXPAND_H

#include <pthread.h>
#include <stdint.h>

#include "vram.h"

struct vram_device;

enum granule_state {
    G_UNMAPPED = 0,
    G_MAPPING = 1, /* a thread is mapping it; others wait */
    G_MAPPED = 2,
    G_UNMAPPING = 3, /* a thread is unmapping it; others wait */
};

/* One granule of the virtual range: 12 bytes, so that a block's granules
** are consecutive in memory and the per-operation loop stays in cache. */
struct granule {
    uint32_t phys; /* physical unit mapped here, plus 1; 0 = none */
    uint32_t live; /* live blocks touching this granule */
    uint8_t state; /* enum granule_state */
};

/* A physical unit's owner while it is being given back, and after: a hole
** in the table (expand.h, holes). */
#define PHYS_HOLE UINT32_MAX

/*
** One unit of physical memory. Units are made one driver handle each, or
** several at once as one handle (an *extent*: the new units one allocation
** needs side by side, one create and one map instead of one each: the
** driver's cost is per call, whatever the size). The driver maps a handle
** only whole, so an extent is mapped, aliased, unmapped and given back
** whole: a *mapping* is SPAN consecutive granules, unit POS at the
** mapping's first granule + POS. Its units are all idle or all owned by
** the granules of one mapping, which owns them while any of its granules
** has a live block. A unit of its own is an extent of one.
*/
struct physunit { /* 32 bytes: two to a cache line, the hot fields first */
    uint32_t owner;  /* at the extent's first unit: the first granule of the
                        mapping that owns it, plus 1; 0 = idle. Other units:
                        0. PHYS_HOLE: given back (every unit of the extent) */
    uint32_t head;   /* the extent's first unit */
    uint8_t pos;     /* its place in the extent */
    uint8_t span;    /* units in its extent (at most EXTENT_UNITS, expand.c) */
    uint32_t next;   /* the extent's next unit, plus 1; 0 = the last */
    uint32_t maps;   /* granules it is mapped at */
    uint32_t tick;   /* at the extent's first unit: ring number of its newest entry */
    uint64_t handle; /* the backend's handle (its extent's) */
};

struct expand {
    pthread_cond_t changed;    /* a granule left MAPPING/UNMAPPING, or setup ended */
    bool ready;                /* the virtual range is reserved */
    bool reserving;            /* a thread is reserving it */
    uint64_t va_base, va_size; /* the virtual range, bytes */
    uint64_t gran;             /* mapping unit ("granule" here), bytes: a multiple
                                  of the driver's granularity */
    unsigned shift;            /* log2(gran) when gran is a power of two, else 0 */
    uint64_t n;                /* granules */
    struct granule *g;         /* n granules */
    struct physunit *p;        /* physical units, n_p of cap_p (the cap in units) */
    uint64_t n_p, cap_p;
    /* Idle physical units (owner 0), least recently idle first, in a ring
    ** with lazy deletion: entry number k (counted from the first push,
    ** modulo 2^32) is current when its unit is idle and its tick is k;
    ** other entries are stale and skipped when met. The ring is compacted,
    ** in order, when it fills. */
    uint32_t *idle;                         /* ring of physical unit indices */
    uint64_t idle_cap, idle_head, idle_len; /* capacity (power of two), first, entries */
    uint32_t idle_tick;                     /* number of the entry at idle_head */
    uint64_t n_idle;                        /* idle physical units: the exact count
                                               (the ring holds extents' first units) */
    uint64_t creating;                      /* physical units being created */
    /* Slots of the physical table whose unit was given back to the driver
    ** (vram_release_idle), reused before the table grows: unit indices stay
    ** stable while other threads hold them across a backend call. */
    uint32_t *holes;
    uint64_t n_holes;
    bool releasing_idle; /* a thread is in vram_release_idle; others wait */
    uint64_t maps, unmaps;                  /* backend map / unmap calls that succeeded */
};

/* Prepare (no backend call). VRAM_E_HOST_MEMORY never: arrays come at setup. */
void expand_init(struct expand *e);

/* Reserve the virtual range (twice the cap) and add it to the heap as its
** one region, once; other threads wait. Called under dev->lock. */
vram_status expand_setup_locked(struct vram_device *dev);

/* Make every granule under [addr, addr+size) mapped, counting the block as
** live in each. On failure nothing stays counted. Called under dev->lock. */
vram_status expand_back_locked(struct vram_device *dev, uint64_t addr, uint64_t size);

/* The block [addr, addr+size) is no longer live: its granules that no
** other block touches become idle. No backend call. */
void expand_unback_locked(struct vram_device *dev, uint64_t addr, uint64_t size);

/* Physical memory held (created or being created), bytes. Inline: every
** allocation asks it for the peak reserved. */
static inline uint64_t
expand_phys_bytes(const struct expand *e)
{
    return (e->n_p - e->n_holes + e->creating) * e->gran;
}

/* Give idle physical units back to the driver: synchronize the device once
** (kernels queued before the frees may still use the addresses), unmap
** every address unit mapped to them, release them. Sets *RELEASED to the
** bytes given back. Drops the lock around the backend calls. */
vram_status expand_release_idle_locked(struct vram_device *dev, uint64_t *released);

/* Host memory of the per-granule, idle-ring and per-unit tables, bytes. */
static inline uint64_t
expand_metadata_bytes(const struct expand *e)
{
    return e->n * sizeof *e->g + e->idle_cap * sizeof *e->idle + e->cap_p * sizeof *e->p;
}

/* Give everything back (at close): unmap, release, free the range. */
void expand_destroy(struct vram_device *dev);

/* Check the module's invariants (E1-E5, docs/ALLOCATOR.md). */
bool expand_check_locked(const struct vram_device *dev);

#endif
