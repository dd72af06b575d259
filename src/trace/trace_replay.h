/* SPDX-License-Identifier: MIT */
/*
** trace_replay.h -- the one loop that replays a trace's allocations and
** frees, for `vram replay` (through libvram), `vram analyze` (its
** fragmentation replay) and the GPU peers benchmark (cudaMallocAsync,
** cudaMalloc). What allocates is the caller's: two hooks. The loop keeps
** what every replay needs: per slot (trace.h) the address and size of the
** live allocation, whether it is live (a refused one is not, so its free is
** skipped), the bytes and blocks live and their peaks, and the refusals.
** Marks and OOM events have no slot and are skipped.
**
** The loop calls nothing but the hooks, so the trace layer, which the
** preload library links, stays free of the allocator. It is inline: with
** hooks known at the call site the compiler calls them directly, and the
** host time `vram replay` measures is the allocator's, not an indirection.
*/
#ifndef VRAM_TRACE_TRACE_REPLAY_H
#define VRAM_TRACE_TRACE_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "trace/trace.h"

/* What a hook returns. */
enum trace_replay_result {
    TRACE_REPLAY_OK = 0,      /* granted (alloc) or done (free) */
    TRACE_REPLAY_REFUSED = 1, /* alloc only: out of memory; the replay goes on */
    TRACE_REPLAY_FAILED = -1  /* anything else: the replay stops (the hook said why) */
};

struct trace_replay_hooks {
    /* Allocate EV->size bytes for EV (event number INDEX, from 0) into *PTR,
    ** which is the slot's own: what it holds after a refusal or a failure
    ** is never read. */
    int (*alloc)(void *ctx, const struct trace_event *ev, uint64_t index, void **ptr);
    /* Free PTR, the allocation of EV's slot, SIZE bytes. */
    int (*free)(void *ctx, const struct trace_event *ev, uint64_t index, void *ptr,
                uint64_t size);
};

struct trace_replay {
    const struct trace *t;
    void **ptr;     /* per slot: the live allocation's address */
    uint64_t *size; /* per slot: its size; valid while live */
    bool *live;     /* per slot: allocated and not yet freed */
    uint64_t in_use, peak_in_use;           /* bytes live (trace sizes), and most */
    uint64_t live_blocks, peak_live_blocks; /* allocations live, and most */
    uint64_t refused;                       /* allocations the hook refused */
    uint64_t failed_event;                  /* the event a hook failed at */
};

/* Room for T's slots, none live, counters 0. False when out of host memory
** (nothing is held then). */
bool trace_replay_init(struct trace_replay *r, const struct trace *t);

/* Every slot not live and every counter 0, without freeing anything (the
** allocator was closed, or release emptied it). */
void trace_replay_reset(struct trace_replay *r);

/* Release what init obtained. NULL-safe. */
void trace_replay_fini(struct trace_replay *r);

/* Free, through H, the live allocation of EV's slot (EV is event INDEX)
** and take it off the counts; on failure r->failed_event = INDEX. */
static inline int
trace_replay_free_slot(struct trace_replay *r, const struct trace_replay_hooks *h,
                       void *ctx, const struct trace_event *ev, uint64_t index)
{
    uint32_t k = ev->slot;
    if (h->free(ctx, ev, index, r->ptr[k], r->size[k]) != TRACE_REPLAY_OK) {
        r->failed_event = index;
        return TRACE_REPLAY_FAILED;
    }
    r->live[k] = false;
    r->in_use -= r->size[k];
    r->live_blocks--;
    return TRACE_REPLAY_OK;
}

/* Replay events FIRST..END-1 of the trace through H with CTX. The state
** carries over from one call to the next (replaying in stretches).
** TRACE_REPLAY_OK, or TRACE_REPLAY_FAILED with r->failed_event set.
** The counters live in locals during the loop and are stored once at the
** end: fields of *R would be reloaded and stored around every hook call
** (the hook might see R). */
static inline int
trace_replay_run(struct trace_replay *r, uint64_t first, uint64_t end,
                 const struct trace_replay_hooks *h, void *ctx)
{
    const struct trace *t = r->t;
    const struct trace_event *events = t->events;
    const uint64_t n_slots = t->n_slots;
    void **ptr = r->ptr;
    uint64_t *size = r->size;
    bool *live = r->live;
    uint64_t in_use = r->in_use, peak_in_use = r->peak_in_use;
    uint64_t live_blocks = r->live_blocks, peak_live_blocks = r->peak_live_blocks;
    uint64_t refused = r->refused;
    int rc = TRACE_REPLAY_OK;
    for (uint64_t i = first; i < end; i++) {
        const struct trace_event *ev = &events[i];
        uint32_t k = ev->slot;
        if (k >= n_slots)
            continue; /* a mark or an OOM: nothing to replay */
        if (ev->op == TRACE_ALLOC) {
            /* Straight into the slot: it is read only while live. */
            int got = h->alloc(ctx, ev, i, &ptr[k]);
            if (got == TRACE_REPLAY_REFUSED) {
                refused++;
                continue;
            }
            if (got != TRACE_REPLAY_OK) {
                r->failed_event = i;
                rc = TRACE_REPLAY_FAILED;
                break;
            }
            size[k] = ev->size;
            live[k] = true;
            in_use += ev->size;
            if (in_use > peak_in_use)
                peak_in_use = in_use;
            if (++live_blocks > peak_live_blocks)
                peak_live_blocks = live_blocks;
        } else if (ev->op == TRACE_FREE && live[k]) { /* not live: refused */
            if (h->free(ctx, ev, i, ptr[k], size[k]) != TRACE_REPLAY_OK) {
                r->failed_event = i;
                rc = TRACE_REPLAY_FAILED;
                break;
            }
            live[k] = false;
            in_use -= size[k];
            live_blocks--;
        }
    }
    r->in_use = in_use;
    r->peak_in_use = peak_in_use;
    r->live_blocks = live_blocks;
    r->peak_live_blocks = peak_live_blocks;
    r->refused = refused;
    return rc;
}

/* Free, through H, every allocation still live (in event order), so that
** the allocator is empty again; the peaks and refusals stay. */
static inline int
trace_replay_release(struct trace_replay *r, const struct trace_replay_hooks *h, void *ctx)
{
    const struct trace *t = r->t;
    for (uint64_t i = 0; i < t->n_events; i++) {
        const struct trace_event *ev = &t->events[i];
        uint32_t k = ev->slot;
        if (ev->op != TRACE_ALLOC || k >= t->n_slots || !r->live[k])
            continue;
        if (trace_replay_free_slot(r, h, ctx, ev, i) != TRACE_REPLAY_OK)
            return TRACE_REPLAY_FAILED;
    }
    return TRACE_REPLAY_OK;
}

#endif
