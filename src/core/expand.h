/*
** expand.h -- the expandable strategy's physical backing: one virtual
** range per logical device, mapped to physical memory granule by granule
** where live blocks are (docs/ALLOCATOR.md, "Expandable").
**
** The heap places blocks in the virtual range as usual (one region, so
** free space always merges). This module keeps, per granule, how many live
** blocks touch it and whether physical memory is mapped there. A granule
** whose last block is freed stays mapped but "idle"; when another granule
** needs memory, an idle one's physical handle is unmapped and moved there
** before any new physical memory is created, so physical memory follows
** live bytes and driver calls happen only when the layout changes.
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
    G_UNMAPPING = 3, /* a thread is moving its memory away; others wait */
};

/* One granule of the virtual range: 16 bytes, so that a block's granules
** are consecutive in memory and the per-operation loop stays in cache. */
struct granule {
    uint64_t handle; /* physical handle mapped here, or 0 */
    uint32_t live;   /* live blocks touching this granule */
    uint8_t state;   /* enum granule_state */
    uint32_t moved;  /* the peak epoch in which its memory was moved away;
                        0 = never */
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
    /* Idle granules (mapped, live == 0), oldest first, in a ring with lazy
    ** deletion: an entry is stale when its granule is no longer idle and
    ** is skipped when met; the ring is rebuilt when stale entries pile up. */
    uint32_t *idle;                         /* ring of granule indices */
    uint64_t idle_cap, idle_head, idle_len; /* capacity (power of two), first, entries */
    uint64_t n_idle;                        /* idle granules: the exact count */
    uint64_t *pool;                         /* physical handles not mapped anywhere */
    uint64_t n_pool, cap_pool;
    uint64_t phys_bytes;   /* physical memory held: mapped + pooled + being created */
    uint64_t maps, unmaps; /* backend map / unmap calls that succeeded */
    bool synced;               /* the device was synchronized in this allocation */
    uint32_t epoch;            /* peak epoch: grows whenever the peak in use does */
    uint64_t epoch_peak;       /* the peak in use when the epoch began, bytes */
    uint64_t thrash_bytes;     /* extra slack learned from memory moved away and
                                  needed again (see obtain_handle_locked) */
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

/* Give everything back (at close): unmap, release, free the range. */
void expand_destroy(struct vram_device *dev);

/* Check the module's invariants (E1-E4, docs/ALLOCATOR.md). */
bool expand_check_locked(const struct vram_device *dev);

#endif
