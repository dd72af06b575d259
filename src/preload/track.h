/* SPDX-License-Identifier: MIT */
/*
** track.h -- the preload library's table of this process's live
** allocations: what each counted pointer, handle or array holds in the
** ledger, so that its free gives exactly that back. One table per
** process, guarded by its own lock, which is never held across a driver
** or ledger call; every function here takes and drops it itself.
*/
#ifndef VRAM_PRELOAD_TRACK_H
#define VRAM_PRELOAD_TRACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a tracked key is: the namespaces may share numbers. The host
** kinds (page-locked memory from the driver, freed by cuMemFreeHost, or
** the caller's registered with it, by cuMemHostUnregister) are on no
** device (dev -1) and counted in no quota. */
enum track_kind {
    TRACK_PTR = 1,
    TRACK_HANDLE = 2,
    TRACK_ARRAY = 3,
    TRACK_HOST = 4,
    TRACK_HOST_REGISTERED = 5
};

/* One live allocation of this process: 32 bytes, so that the table keeps
** two to a cache line and no entry straddles two (track.c). */
struct track {
    uint64_t key;      /* device pointer, cuMemCreate handle, CUarray or host address */
    uint64_t bytes;    /* counted in the ledger for it */
    uint64_t trace_id; /* its id in the trace (when one is recorded) */
    uint32_t refs;     /* handles: cuMemRelease calls still due */
    int16_t dev;     /* CUDA ordinal it is counted on (< PRELOAD_MAX_DEVICES), -1: host */
    uint8_t kind;    /* enum track_kind; 0 in the table: an empty slot */
    uint8_t spilled; /* the table's, of the slot's line, not the entry's (track.c) */
};

/* Add (KIND, KEY) with one reference. False: the table is full and out
** of host memory to grow (or DEV or KIND out of struct track's range). */
bool track_put(int kind, uint64_t key, int dev, uint64_t bytes, uint64_t trace_id);

/* Remove (KIND, KEY) into *OUT. False if it is not there. */
bool track_take(int kind, uint64_t key, struct track *out);

/* The live entries of KIND: at most MAX copied into OUT, and how many
** there are returned (call again with more room when that is above MAX).
** O(table): for the recording's holders, not for a hooked call. */
size_t track_list(int kind, struct track *out, size_t max);

/* What dropping one reference to a handle did (track_unref). */
enum track_unref {
    TRACK_UNKNOWN,    /* not a handle of the table */
    TRACK_STILL_HELD, /* one reference fewer; others remain */
    TRACK_LAST        /* the last one: removed into *OUT */
};

/* Drop one reference to HANDLE (a cuMemRelease about to be made). */
enum track_unref track_unref(uint64_t handle, struct track *out);

/* One more reference to HANDLE, if the table has it
** (cuMemRetainAllocationHandle, or a cuMemRelease that failed). */
void track_ref(uint64_t handle);

/* pthread_atfork's three: the child starts with an empty table (its
** parent's allocations stay the parent's) and a fresh lock. */
void track_fork_prepare(void);
void track_fork_parent(void);
void track_fork_child(void);

#endif
