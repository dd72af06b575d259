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

/*
** What a tracked key is: the namespaces may share numbers.
**   PTR     a device pointer (cuMemAlloc_v2, pitched, managed; a
**           stream-ordered one only while a trace is written): BYTES is
**           its charge, or (at most TRACK_SMALL_MAX) the block of the
**           driver's sub-allocator it took, whose pages are FRAMEs;
**   HANDLE  a cuMemCreate handle: REFS counts its references and its
**           mappings together (the memory goes when both are gone);
**   ARRAY, MIPMAP   an array's or a mipmapped array's handle;
**   FRAME   a 2 MiB page of device addresses (key: address >> 21) holding
**           sub-allocated blocks: REFS counts them;
**   MAP     a mapping of a handle (key: its address): BYTES its size,
**           TRACE_ID the handle (a mapping is never traced);
**   EXEC    an executable graph: BYTES what its allocation nodes may map,
**           TRACE_ID the mask of the ordinals they are on, REFS the graph
**           pools' trim count + 1 when it mapped them (0: not yet);
**   HOST, HOST_REGISTERED   page-locked memory from the driver (freed by
**           cuMemFreeHost) or the caller's registered with it (by
**           cuMemHostUnregister): on no device (dev -1), in no quota.
*/
enum track_kind {
    TRACK_PTR = 1,
    TRACK_HANDLE = 2,
    TRACK_ARRAY = 3,
    TRACK_HOST = 4,
    TRACK_HOST_REGISTERED = 5,
    TRACK_MIPMAP = 6,
    TRACK_FRAME = 7,
    TRACK_MAP = 8,
    TRACK_EXEC = 9
};

/* A PTR entry of at most this many BYTES is a sub-allocated block. */
#define TRACK_SMALL_MAX (1ULL << 20)
/* The bytes of a FRAME and the shift from an address to its key. */
#define TRACK_FRAME_SHIFT 21

/* Flags in REFS of PTR and HANDLE entries (a handle's count is below):
**   EXPORTED  shared with another process (cuIpcGetMemHandle,
**             cuMemExportToShareableHandle): its charge stays until this
**             process ends, since the importer may keep the memory;
**   POOLED    a stream-ordered allocation, tracked for the trace only:
**             its pool's reserve is what is charged. */
#define TRACK_EXPORTED (1u << 31)
#define TRACK_POOLED (1u << 30)
#define TRACK_COUNT_MASK (TRACK_POOLED - 1u)

/* One live allocation of this process: 32 bytes, so that the table keeps
** two to a cache line and no entry straddles two (track.c). */
struct track {
    uint64_t key;      /* device pointer, cuMemCreate handle, CUarray or host address */
    uint64_t bytes;    /* counted in the ledger for it */
    uint64_t trace_id; /* its id in the trace (when one is recorded) */
    uint32_t refs;     /* HANDLE: references and mappings; FRAME: blocks;
                          PTR, HANDLE: the flags above */
    int16_t dev;     /* CUDA ordinal it is counted on (< PRELOAD_MAX_DEVICES), -1: host */
    uint8_t kind;    /* enum track_kind; 0 in the table: an empty slot */
    uint8_t spilled; /* the table's, of the slot's line, not the entry's (track.c) */
};

/* Add (KIND, KEY) with one reference. False: the table is full and out
** of host memory to grow (or DEV or KIND out of struct track's range). */
bool track_put(int kind, uint64_t key, int dev, uint64_t bytes, uint64_t trace_id);

/* Remove (KIND, KEY) into *OUT. False if it is not there. */
bool track_take(int kind, uint64_t key, struct track *out);

/* A copy of (KIND, KEY) into *OUT, left in the table. False if it is not
** there. */
bool track_find(int kind, uint64_t key, struct track *out);

/* Set FLAGS in the REFS of (KIND, KEY). False if it is not there. */
bool track_flag(int kind, uint64_t key, uint32_t flags);

/* Set the REFS of (KIND, KEY) to REFS. False if it is not there. */
bool track_set_refs(int kind, uint64_t key, uint32_t refs);

/* Put the entry *E (flags included) back. False: the table cannot grow. */
bool track_restore(const struct track *e);

/*
** A sub-allocated block: the PTR entry (KEY, DEV, BYTES asked, TRACE_ID)
** and one more block in each FRAME of [KEY, KEY + BLOCK), all under one
** hold of the table's lock; *NEW_FRAMES: how many of those frames it
** created (pages the driver now holds for this process). False, with
** nothing added, when the table cannot grow.
*/
bool track_put_block(uint64_t key, int dev, uint64_t bytes, uint64_t block, uint64_t trace_id,
                     int *new_frames);

/* One block fewer in each FRAME of [ADDR, ADDR + BLOCK): how many frames
** that emptied (and removed). */
int track_frames_unref(uint64_t addr, uint64_t block);

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
