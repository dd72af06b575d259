/* SPDX-License-Identifier: MIT */
/*
** track.c -- the table of live allocations of the preload library
** (track.h), laid out for the cache lines a hooked call touches.
**
** A put runs just after an allocating driver call and a take just before
** or after a freeing one; the driver call walks the CPU caches, so each
** distinct line the table touches then is a miss, and misses, not
** instructions, are what the table costs. So the lock and the table's
** header share one 64-byte line, and the entries lie inline in one array
** (open addressing, linear probing), 32 bytes each, two to a line, the
** array aligned to a line. A key's probe starts at the first slot of its
** home line, so a put or a take usually touches two lines: the lock's and
** the entry's (callgrind of tests/preload/hook_cost with the fake driver
** evicting 1 MB a call: a put misses on 2 lines, where the chained table,
** its buckets and entries malloc'ed, missed on 8). The lock is a word of
** that line taken by an atomic exchange, not a pthread mutex: locking a
** mutex also reads the thread's id from its descriptor and calls through
** two GOT entries of the C library, lines a driver call left cold as well
** (a put missed on 5 lines with a mutex).
**
** Deletion shifts the later entries of the probe run back into the hole,
** so no tombstones pile up and a lookup ends at the first empty slot. A
** line is marked spilled when a put probes past it full; a line that is
** not marked is crossed by no probe run, so a deletion or a failed lookup
** that reaches its end stops there instead of reading the next line (a
** take among 500 live entries freed at random: 1.1 entry lines, 1.7
** without the mark). A deletion that leaves a slot of its line empty
** unmarks the line: no run crosses an empty slot.
**
** The array doubles when a put would fill it past half: at most half full,
** a put or a take among thousands of live entries touches 1.0-1.2 entry
** lines on average, at three quarters 1.3-3.9 (a simulation of 2 MiB- and
** 512-byte-aligned sequential device pointers). If the doubled array
** cannot be allocated, puts go on into the old one until it is full.
** Every function named _locked is called with the table's lock held and
** returns with it held.
*/
#include <assert.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/hot.h"
#include "preload/track.h"

/* Slots of the first array (8 KiB): allocated by the first put, so a
** program that never allocates on the GPU never pays for it. */
#define TRACK_FIRST_SLOTS 256u
/* Slots at most: the mask and count are 32-bit, to fit the header line. */
#define TRACK_MAX_SLOTS (1u << 31)
#define TRACK_LINE 64

_Static_assert(sizeof(struct track) == 32, "two entries to a cache line");

/* The lock and the header, in one line. The owner, for asserts, only in
** builds with asserts: it needs pthread_self and a store on every lock. */
static _Alignas(TRACK_LINE) struct track_table {
    atomic_int locked;  /* 1 while a thread holds the table: guards the rest */
    uint32_t mask;
    struct track *slot; /* mask + 1 slots (a power of two), or NULL */
    uint32_t n;         /* live entries */
#ifndef NDEBUG
    pthread_t owner; /* holder of lock */
#endif
} T;

_Static_assert(offsetof(struct track_table, n) + sizeof T.n <= TRACK_LINE,
               "the lock and the header in one cache line");

#define ASSERT_LOCKED() assert(pthread_equal(T.owner, pthread_self()))

/* Spins before a waiting thread yields its CPU: a holder keeps the lock
** for a put or a take, tens of nanoseconds, never across a driver call;
** one preempted while holding it gets its CPU back from the yields. */
#define TRACK_SPINS 64

VRAM_HOT static void
table_lock(void)
{
    while (atomic_exchange_explicit(&T.locked, 1, memory_order_acquire)) {
        for (int i = 0; atomic_load_explicit(&T.locked, memory_order_relaxed); i++) {
            if (i >= TRACK_SPINS)
                sched_yield();
#if defined(__x86_64__) || defined(__i386__)
            else
                __builtin_ia32_pause();
#endif
        }
    }
#ifndef NDEBUG
    T.owner = pthread_self();
#endif
}

VRAM_HOT static void
table_unlock(void)
{
    atomic_store_explicit(&T.locked, 0, memory_order_release);
}

/* The first slot of (KIND, KEY)'s home line under MASK. Fibonacci
** hashing: device pointers are multiples of 512 bytes or 2 MiB, often in
** sequence, and the product's high bits spread them evenly. */
VRAM_HOT static uint32_t
track_home(unsigned kind, uint64_t key, uint32_t mask)
{
    uint64_t h = (key ^ kind) * 0x9e3779b97f4a7c15ULL;
    return (uint32_t)(h >> 32) & mask & ~1u;
}

/* The mark of slot I's line: set when a put probed past the line full
** (struct track's field, in the line's first slot). */
VRAM_HOT static uint8_t *
line_spilled(struct track *slot, uint32_t i)
{
    return &slot[i & ~1u].spilled;
}

/* The free slot that (KIND, KEY)'s probe reaches first (there is one);
** the full lines it passes are marked spilled. */
VRAM_HOT static struct track *
slot_free(struct track *slot, uint32_t mask, unsigned kind, uint64_t key)
{
    uint32_t i = track_home(kind, key, mask);
    while (slot[i].kind != 0) {
        if (i & 1) /* leaving a line whose two slots are taken */
            *line_spilled(slot, i) = 1;
        i = (i + 1) & mask;
    }
    return &slot[i];
}

/* Copy the entry *FROM into slot TO, whose line's mark stays. */
VRAM_HOT static void
slot_set(struct track *to, const struct track *from)
{
    uint8_t spilled = to->spilled;
    *to = *from;
    to->spilled = spilled;
}

/* Move the entries into an array of twice the slots (or make the first).
** False: out of host memory, or at TRACK_MAX_SLOTS; the table stays as it
** was. Caller holds the lock. */
static bool
table_grow_locked(void)
{
    ASSERT_LOCKED();
    uint32_t n_old = T.slot == NULL ? 0 : T.mask + 1;
    if (n_old >= TRACK_MAX_SLOTS)
        return false;
    uint32_t n = n_old == 0 ? TRACK_FIRST_SLOTS : n_old * 2;
    struct track *s = aligned_alloc(TRACK_LINE, (size_t)n * sizeof *s);
    if (s == NULL)
        return false;
    memset(s, 0, (size_t)n * sizeof *s);
    for (uint32_t i = 0; i < n_old; i++)
        if (T.slot[i].kind != 0)
            slot_set(slot_free(s, n - 1, T.slot[i].kind, T.slot[i].key), &T.slot[i]);
    free(T.slot);
    __atomic_store_n(&T.slot, s, __ATOMIC_RELAXED); /* also read without the lock: track_put */
    __atomic_store_n(&T.mask, n - 1, __ATOMIC_RELAXED);
    return true;
}

/* The slot of (KIND, KEY), or NULL. Caller holds the lock. */
VRAM_HOT static struct track *
table_find_locked(unsigned kind, uint64_t key)
{
    ASSERT_LOCKED();
    if (T.slot == NULL)
        return NULL;
    uint32_t i = track_home(kind, key, T.mask);
    for (uint32_t d = 0; d <= T.mask && T.slot[i].kind != 0; d++, i = (i + 1) & T.mask) {
        if (T.slot[i].key == key && T.slot[i].kind == kind)
            return &T.slot[i];
        if ((i & 1) && !*line_spilled(T.slot, i))
            break; /* no run goes on past this line */
    }
    return NULL;
}

/* A free slot for (KIND, KEY), counted in; the caller fills it in. NULL:
** the table is full and cannot grow. Caller holds the lock. */
VRAM_HOT static struct track *
table_put_locked(unsigned kind, uint64_t key)
{
    ASSERT_LOCKED();
    /* Grow past half full; failing that, any free slot will do. */
    if ((T.slot == NULL || T.n >= (T.mask + 1) / 2) && !table_grow_locked() &&
        (T.slot == NULL || T.n > T.mask))
        return NULL;
    T.n++;
    return slot_free(T.slot, T.mask, kind, key);
}

/* Empty the slot E of the table: the later entries of its probe run that
** may sit earlier move back, so that no lookup stops short of them.
** Caller holds the lock. */
VRAM_HOT static void
table_remove_locked(struct track *e)
{
    ASSERT_LOCKED();
    uint32_t mask = T.mask;
    uint32_t hole = (uint32_t)(e - T.slot);
    e->kind = 0; /* the run ends at the hole at the latest, even when full */
    for (uint32_t j = (hole + 1) & mask;; j = (j + 1) & mask) {
        if (!(j & 1) && !*line_spilled(T.slot, (j - 1) & mask))
            break; /* no run crosses into J's line: it is not read */
        if (T.slot[j].kind == 0)
            break;
        uint32_t home = track_home(T.slot[j].kind, T.slot[j].key, mask);
        /* J's entry may fill the hole when the hole lies on its probe
        ** path: from its home up to (not including) J. */
        if (((hole - home) & mask) < ((j - home) & mask)) {
            slot_set(&T.slot[hole], &T.slot[j]);
            T.slot[j].kind = 0;
            hole = j;
        }
    }
    *line_spilled(T.slot, hole) = 0; /* no run crosses an empty slot */
    T.n--;
}

VRAM_HOT bool
track_put(int kind, uint64_t key, int dev, uint64_t bytes, uint64_t trace_id)
{
    if (dev != (int16_t)dev || kind <= 0 || kind > UINT8_MAX)
        return false; /* no ordinal or kind is so large */
    /* Start fetching the key's home line before the lock: the lock's
    ** exchange holds every later load until the lock's line is here, and
    ** both lines are cold after the driver's call. Read without the lock,
    ** the array may be a moment stale: a prefetch of a wrong line costs
    ** nothing but itself. */
    struct track *slot = __atomic_load_n(&T.slot, __ATOMIC_RELAXED);
    if (slot != NULL)
        __builtin_prefetch(&slot[track_home((unsigned)kind, key,
                                            __atomic_load_n(&T.mask, __ATOMIC_RELAXED))],
                           1);
    table_lock();
    struct track *e = table_put_locked((unsigned)kind, key);
    if (e != NULL) /* field by field: no copy on the stack to miss on */
        *e = (struct track){.key = key,
                            .bytes = bytes,
                            .trace_id = trace_id,
                            .refs = 1,
                            .dev = (int16_t)dev,
                            .kind = (uint8_t)kind,
                            .spilled = e->spilled};
    table_unlock();
    return e != NULL;
}

bool
track_restore(const struct track *e)
{
    table_lock();
    struct track *slot = table_put_locked(e->kind, e->key);
    if (slot != NULL) {
        uint8_t spilled = slot->spilled;
        *slot = *e;
        slot->spilled = spilled;
    }
    table_unlock();
    return slot != NULL;
}

VRAM_HOT bool
track_take(int kind, uint64_t key, struct track *out)
{
    table_lock();
    struct track *e = table_find_locked((unsigned)kind, key);
    if (e != NULL) {
        *out = *e;
        table_remove_locked(e);
    }
    table_unlock();
    return e != NULL;
}

bool
track_find(int kind, uint64_t key, struct track *out)
{
    table_lock();
    struct track *e = table_find_locked((unsigned)kind, key);
    if (e != NULL)
        *out = *e;
    table_unlock();
    return e != NULL;
}

bool
track_flag(int kind, uint64_t key, uint32_t flags)
{
    table_lock();
    struct track *e = table_find_locked((unsigned)kind, key);
    if (e != NULL)
        e->refs |= flags;
    table_unlock();
    return e != NULL;
}

bool
track_set_refs(int kind, uint64_t key, uint32_t refs)
{
    table_lock();
    struct track *e = table_find_locked((unsigned)kind, key);
    if (e != NULL)
        e->refs = refs;
    table_unlock();
    return e != NULL;
}

/* One more block in FRAME (DEV's), made with one block if it is not
** there: true if it was made. False in *OK when the table cannot grow.
** Caller holds the lock. */
static bool
frame_ref_locked(uint64_t frame, int dev, bool *ok)
{
    struct track *e = table_find_locked(TRACK_FRAME, frame);
    if (e != NULL) {
        e->refs++;
        return false;
    }
    e = table_put_locked(TRACK_FRAME, frame);
    if (e == NULL) {
        *ok = false;
        return false;
    }
    *e = (struct track){.key = frame,
                        .refs = 1,
                        .dev = (int16_t)dev,
                        .kind = TRACK_FRAME,
                        .spilled = e->spilled};
    return true;
}

/* One block fewer in FRAME: true if that emptied it (it is removed).
** Caller holds the lock. */
static bool
frame_unref_locked(uint64_t frame)
{
    struct track *e = table_find_locked(TRACK_FRAME, frame);
    if (e == NULL)
        return false;
    if (--e->refs > 0)
        return false;
    table_remove_locked(e);
    return true;
}

bool
track_put_block(uint64_t key, int dev, uint64_t bytes, uint64_t block, uint64_t trace_id,
                int *new_frames)
{
    if (dev != (int16_t)dev || block == 0)
        return false;
    uint64_t first = key >> TRACK_FRAME_SHIFT, last = (key + block - 1) >> TRACK_FRAME_SHIFT;
    bool ok = true;
    int made = 0;
    table_lock();
    uint64_t f = first;
    for (; f <= last && ok; f++)
        made += frame_ref_locked(f, dev, &ok);
    struct track *e = ok ? table_put_locked(TRACK_PTR, key) : NULL;
    if (e != NULL) {
        *e = (struct track){.key = key,
                            .bytes = bytes,
                            .trace_id = trace_id,
                            .dev = (int16_t)dev,
                            .kind = TRACK_PTR,
                            .spilled = e->spilled};
    } else {
        /* Undo the frames counted so far (the one that failed was not). */
        uint64_t end = ok ? f : f - 1;
        for (uint64_t g = first; g < end; g++)
            (void)frame_unref_locked(g);
    }
    table_unlock();
    *new_frames = e != NULL ? made : 0;
    return e != NULL;
}

int
track_frames_unref(uint64_t addr, uint64_t block)
{
    if (block == 0)
        return 0;
    uint64_t first = addr >> TRACK_FRAME_SHIFT, last = (addr + block - 1) >> TRACK_FRAME_SHIFT;
    int emptied = 0;
    table_lock();
    for (uint64_t f = first; f <= last; f++)
        emptied += frame_unref_locked(f);
    table_unlock();
    return emptied;
}

size_t
track_list(int kind, struct track *out, size_t max)
{
    size_t n = 0;
    table_lock();
    for (uint32_t i = 0; T.slot != NULL && i <= T.mask; i++) {
        if (T.slot[i].kind != (unsigned)kind)
            continue;
        if (n < max)
            out[n] = T.slot[i];
        n++;
    }
    table_unlock();
    return n;
}

VRAM_HOT enum track_unref
track_unref(uint64_t handle, struct track *out)
{
    enum track_unref u = TRACK_UNKNOWN;
    table_lock();
    struct track *e = table_find_locked(TRACK_HANDLE, handle);
    if (e != NULL && (e->refs & TRACK_COUNT_MASK) > 1) {
        e->refs--;
        u = TRACK_STILL_HELD;
    } else if (e != NULL) {
        *out = *e;
        table_remove_locked(e);
        u = TRACK_LAST;
    }
    table_unlock();
    return u;
}

void
track_ref(uint64_t handle)
{
    table_lock();
    struct track *e = table_find_locked(TRACK_HANDLE, handle);
    if (e != NULL)
        e->refs++;
    table_unlock();
}

void
track_fork_prepare(void)
{
    table_lock();
}

void
track_fork_parent(void)
{
    table_unlock();
}

/* The child's table starts empty (the parent's entries are the parent's)
** with a fresh lock; its array is the child's memory, given back here,
** and the child's first put makes a new one. */
void
track_fork_child(void)
{
    atomic_store(&T.locked, 0);
    table_lock();
    free(T.slot);
    __atomic_store_n(&T.slot, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&T.mask, 0, __ATOMIC_RELAXED);
    T.n = 0;
    table_unlock();
}
