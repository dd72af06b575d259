/* SPDX-License-Identifier: MIT */
/*
** slots.h -- per-allocation state of a trace replay, indexed by the dense
** slot the trace loader gives every id (trace.h). Shared by `vram replay`
** and the GPU peers' replay (bench/gpu/replay_peers.c).
*/
#ifndef VRAM_TOOLS_SLOTS_H
#define VRAM_TOOLS_SLOTS_H

#include <stdbool.h>
#include <stdint.h>

struct replay_slots {
    void **ptr;     /* address of the live allocation of each slot */
    uint64_t *size; /* its size in the trace; valid while live */
    bool *live;     /* allocated and not yet freed (a refused one is not) */
};

/* Room for N slots (at least one), all not live. False when out of host
** memory (nothing is held then). */
bool slots_alloc(struct replay_slots *sl, uint32_t n);

/* Release what slots_alloc obtained. */
void slots_free(struct replay_slots *sl);

#endif
