/* SPDX-License-Identifier: MIT */
/*
** heap.c -- best fit with coalescing over a two-level bitmap of size
** classes (see heap.h). No locks and no backend calls here: the device
** holds its lock around every function. Invariants are numbered in
** docs/ALLOCATOR.md and cited where they are kept.
*/
#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/heap.h"

/* How many blocks a search inspects in one class before moving on: keeps
** allocation O(1) while finding the best fit in all but long lists. */
#define HEAP_SCAN 16

/* TensorFlow's split rule: a chunk is split when it is at least twice the
** request or the waste would be at least 128 MiB. */
#define TF_MAX_INTERNAL_FRAGMENTATION (128ULL << 20)

#define POOL_SLAB_BLOCKS 512
#define MAP_MIN_CAPACITY 1024

/* ================================================================== */
/* Size classes                                                        */
/* ================================================================== */

uint32_t
heap_class_of(uint64_t size)
{
    uint64_t u = size >> 8; /* 256-byte units */
    if (u < 64)
        return (uint32_t)u;
    int fl = 63 - __builtin_clzll(u); /* >= 6 */
    uint32_t sl = (uint32_t)((u >> (fl - 6)) & 63);
    return 64 + (uint32_t)(fl - 6) * 64 + sl;
}

uint64_t
heap_class_min(uint32_t c)
{
    if (c < 64)
        return (uint64_t)c << 8;
    uint32_t fl = (c - 64) / 64 + 6, sl = (c - 64) % 64;
    return ((64ULL + sl) << (fl - 6)) << 8;
}

static void
list_insert(struct heap *h, struct block *b)
{
    uint32_t c = heap_class_of(b->size);
    b->cls = c;
    b->fprev = NULL;
    b->fnext = h->lists[c];
    if (b->fnext != NULL)
        b->fnext->fprev = b;
    h->lists[c] = b;
    h->groups[c >> 6] |= 1ULL << (c & 63); /* I3: bit set iff list non-empty */
    h->top |= 1ULL << (c >> 6);
    h->free_blocks++;
    h->bytes_free += b->size;
}

static void
list_remove(struct heap *h, struct block *b)
{
    uint32_t c = b->cls;
    if (b->fprev != NULL)
        b->fprev->fnext = b->fnext;
    else
        h->lists[c] = b->fnext;
    if (b->fnext != NULL)
        b->fnext->fprev = b->fprev;
    if (h->lists[c] == NULL) {
        h->groups[c >> 6] &= ~(1ULL << (c & 63));
        if (h->groups[c >> 6] == 0)
            h->top &= ~(1ULL << (c >> 6));
    }
    b->fprev = b->fnext = NULL;
    h->free_blocks--;
    h->bytes_free -= b->size;
}

/* The first non-empty class >= C, or HEAP_CLASSES if none. */
static uint32_t
next_nonempty(const struct heap *h, uint32_t c)
{
    if (c >= HEAP_CLASSES)
        return HEAP_CLASSES;
    uint32_t g = c >> 6;
    uint64_t bits = h->groups[g] & (~0ULL << (c & 63));
    if (bits != 0)
        return (g << 6) + (uint32_t)__builtin_ctzll(bits);
    if (g + 1 >= HEAP_GROUPS)
        return HEAP_CLASSES;
    uint64_t t = h->top & (~0ULL << (g + 1));
    if (t == 0)
        return HEAP_CLASSES;
    g = (uint32_t)__builtin_ctzll(t);
    return (g << 6) + (uint32_t)__builtin_ctzll(h->groups[g]);
}

/* The smallest block of at least SIZE among the first HEAP_SCAN of list C,
** lower address on ties (keeps the heap compact), or NULL. */
static struct block *
scan_class(const struct heap *h, uint32_t c, uint64_t size)
{
    struct block *best = NULL;
    int n = 0;
    for (struct block *b = h->lists[c]; b != NULL && n < HEAP_SCAN; b = b->fnext, n++) {
        if (b->size < size)
            continue;
        if (best == NULL || b->size < best->size ||
            (b->size == best->size && b->addr < best->addr))
            best = b;
        if (best->size == size)
            break;
    }
    return best;
}

static struct block *
find_fit(const struct heap *h, uint64_t size)
{
    uint32_t c = heap_class_of(size);
    if (c < 64) {
        if (h->lists[c] != NULL)
            return h->lists[c]; /* exact classes: every block fits exactly */
    } else if (h->lists[c] != NULL) {
        struct block *b = scan_class(h, c, size);
        if (b != NULL)
            return b;
    }
    uint32_t n = next_nonempty(h, c + 1);
    if (n >= HEAP_CLASSES)
        return NULL;
    return scan_class(h, n, size); /* every block of class n fits */
}

/* ================================================================== */
/* Block pool                                                          */
/* ================================================================== */

static struct block *
pool_get(struct block_pool *p)
{
    if (p->unused == NULL) {
        if (p->n_slabs == p->cap_slabs) {
            size_t ncap = p->cap_slabs ? 2 * p->cap_slabs : 16;
            void **ns = realloc(p->slabs, ncap * sizeof *ns);
            if (ns == NULL)
                return NULL;
            p->slabs = ns;
            p->cap_slabs = ncap;
        }
        struct block *slab = malloc(POOL_SLAB_BLOCKS * sizeof *slab);
        if (slab == NULL)
            return NULL;
        p->slabs[p->n_slabs++] = slab;
        for (int i = POOL_SLAB_BLOCKS - 1; i >= 0; i--) {
            slab[i].fnext = p->unused;
            p->unused = &slab[i];
        }
    }
    struct block *b = p->unused;
    p->unused = b->fnext;
    memset(b, 0, sizeof *b);
    return b;
}

static void
pool_put(struct block_pool *p, struct block *b)
{
    b->fnext = p->unused;
    p->unused = b;
}

/* ================================================================== */
/* Address map                                                         */
/* ================================================================== */

static inline uint64_t
map_slot(const struct addr_map *m, uint64_t key)
{
    return ((key >> 8) * 0x9E3779B97F4A7C15ULL) >> m->shift;
}

static int
map_alloc(struct addr_map *m, uint64_t cap)
{
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = calloc(cap, sizeof *m->vals);
    if (m->keys == NULL || m->vals == NULL) {
        free(m->keys);
        free(m->vals);
        return -1;
    }
    m->mask = cap - 1;
    m->shift = 64 - __builtin_ctzll(cap);
    m->count = 0;
    return 0;
}

static void
map_put_nogrow(struct addr_map *m, uint64_t key, struct block *val)
{
    uint64_t i = map_slot(m, key);
    while (m->keys[i] != 0)
        i = (i + 1) & m->mask;
    m->keys[i] = key;
    m->vals[i] = val;
    m->count++;
}

/* Make room for one more entry: capacity stays at least twice the count
** so probe sequences stay short. -1 when out of host memory. */
static int
map_reserve(struct addr_map *m)
{
    if ((m->count + 1) * 2 <= m->mask + 1)
        return 0;
    struct addr_map old = *m;
    if (map_alloc(m, (old.mask + 1) * 2) != 0) {
        *m = old;
        return -1;
    }
    for (uint64_t i = 0; i <= old.mask; i++)
        if (old.keys[i] != 0)
            map_put_nogrow(m, old.keys[i], old.vals[i]);
    free(old.keys);
    free(old.vals);
    return 0;
}

static struct block *
map_get(const struct addr_map *m, uint64_t key)
{
    uint64_t i = map_slot(m, key);
    while (m->keys[i] != 0) {
        if (m->keys[i] == key)
            return m->vals[i];
        i = (i + 1) & m->mask;
    }
    return NULL;
}

/* Remove KEY (present) with backward-shift deletion: no tombstones, so
** lookups never slow down over a long run. */
static void
map_del(struct addr_map *m, uint64_t key)
{
    uint64_t i = map_slot(m, key);
    while (m->keys[i] != key)
        i = (i + 1) & m->mask;
    uint64_t j = i;
    for (;;) {
        m->keys[i] = 0;
        for (;;) {
            j = (j + 1) & m->mask;
            if (m->keys[j] == 0) {
                m->count--;
                return;
            }
            uint64_t k = map_slot(m, m->keys[j]);
            /* Entry j may move to the hole at i unless its home slot k lies
            ** cyclically in (i, j]. */
            bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays)
                break;
        }
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        i = j;
    }
}

/* ================================================================== */
/* Heap                                                                */
/* ================================================================== */

vram_status
heap_init(struct heap *h, bool split_tf)
{
    memset(h, 0, sizeof *h);
    h->split_tf = split_tf;
    if (map_alloc(&h->map, MAP_MIN_CAPACITY) != 0)
        return error_set(VRAM_E_HOST_MEMORY, "out of host memory for the allocator");
    return VRAM_OK;
}

void
heap_destroy(struct heap *h)
{
    struct region *r = h->regions;
    while (r != NULL) {
        struct region *next = r->next;
        free(r);
        r = next;
    }
    for (size_t i = 0; i < h->pool.n_slabs; i++)
        free(h->pool.slabs[i]);
    free(h->pool.slabs);
    free(h->map.keys);
    free(h->map.vals);
    memset(h, 0, sizeof *h);
}

vram_status
heap_add_region(struct heap *h, uint64_t base, uint64_t size, uint64_t handle,
                struct region **out)
{
    assert(size % HEAP_ALIGN == 0 && base % HEAP_ALIGN == 0 && size > 0);
    struct region *r = calloc(1, sizeof *r);
    struct block *b = r ? pool_get(&h->pool) : NULL;
    if (b == NULL) {
        free(r);
        return error_set(VRAM_E_HOST_MEMORY, "out of host memory for the allocator");
    }
    r->base = base;
    r->size = size;
    r->handle = handle;
    r->first = b;
    r->next = h->regions;
    if (h->regions != NULL)
        h->regions->prev = r;
    h->regions = r;
    h->n_regions++;
    h->bytes_regions += size;
    b->addr = base;
    b->size = size;
    b->region = r;
    b->free = true;
    list_insert(h, b);
    if (out != NULL)
        *out = r;
    return VRAM_OK;
}

void
heap_remove_region(struct heap *h, struct region *r)
{
    assert(heap_region_free(r) && r->first->free && r->first->next == NULL);
    list_remove(h, r->first);
    pool_put(&h->pool, r->first);
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        h->regions = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    h->n_regions--;
    h->bytes_regions -= r->size;
    free(r);
}

static bool
should_split(const struct heap *h, uint64_t have, uint64_t want)
{
    if (h->split_tf)
        return have >= 2 * want || have - want >= TF_MAX_INTERNAL_FRAGMENTATION;
    return have - want >= HEAP_ALIGN;
}

struct block *
heap_take(struct heap *h, uint64_t size, uint64_t requested, void *stream, bool *host_oom)
{
    assert(size % HEAP_ALIGN == 0 && size > 0);
    *host_oom = false;
    struct block *b = find_fit(h, size);
    if (b == NULL)
        return NULL;
    if (map_reserve(&h->map) != 0) {
        *host_oom = true;
        return NULL;
    }
    list_remove(h, b);
    if (should_split(h, b->size, size)) {
        /* Without a spare block the whole block is handed out: correct,
        ** only less tight. */
        struct block *rest = pool_get(&h->pool);
        if (rest != NULL) {
            rest->addr = b->addr + size;
            rest->size = b->size - size;
            rest->region = b->region;
            rest->prev = b;
            rest->next = b->next;
            if (b->next != NULL)
                b->next->prev = rest;
            b->next = rest;
            b->size = size;
            rest->free = true;
            list_insert(h, rest); /* I2 holds: b is about to be allocated */
        }
    }
    b->free = false;
    b->requested = requested;
    b->stream = stream;
    b->ext = NULL;
    b->region->live++;                   /* I6 */
    map_put_nogrow(&h->map, b->addr, b); /* I4 */
    h->bytes_in_use += b->size;          /* I5 */
    h->bytes_requested += requested;
    h->live_blocks++;
    return b;
}

struct block *
heap_lookup(const struct heap *h, uint64_t addr)
{
    if (addr == 0)
        return NULL;
    return map_get(&h->map, addr);
}

void
heap_release(struct heap *h, struct block *b)
{
    assert(!b->free && h->bytes_in_use >= b->size);
    map_del(&h->map, b->addr);
    h->bytes_in_use -= b->size;
    h->bytes_requested -= b->requested;
    h->live_blocks--;
    b->region->live--;
    b->free = true;
    b->stream = NULL;
    struct block *p = b->prev, *n = b->next;
    if (p != NULL && p->free) { /* I2: merge left, the left block survives */
        list_remove(h, p);
        p->size += b->size;
        p->next = n;
        if (n != NULL)
            n->prev = p;
        pool_put(&h->pool, b);
        b = p;
    }
    if (n != NULL && n->free) { /* I2: merge right */
        list_remove(h, n);
        b->size += n->size;
        b->next = n->next;
        if (n->next != NULL)
            n->next->prev = b;
        pool_put(&h->pool, n);
    }
    list_insert(h, b);
}

uint64_t
heap_largest_free(const struct heap *h)
{
    if (h->top == 0)
        return 0;
    uint32_t g = 63 - (uint32_t)__builtin_clzll(h->top);
    uint32_t c = (g << 6) + 63 - (uint32_t)__builtin_clzll(h->groups[g]);
    uint64_t best = 0;
    for (const struct block *b = h->lists[c]; b != NULL; b = b->fnext)
        if (b->size > best)
            best = b->size;
    return best;
}

uint64_t
heap_metadata_bytes(const struct heap *h)
{
    return sizeof *h + h->pool.n_slabs * POOL_SLAB_BLOCKS * sizeof(struct block) +
           h->pool.cap_slabs * sizeof(void *) +
           (h->map.mask + 1) * (sizeof *h->map.keys + sizeof *h->map.vals) +
           h->n_regions * sizeof(struct region);
}

/* ================================================================== */
/* Invariant checker                                                   */
/* ================================================================== */

/* Record a broken invariant as the thread's last error; returns false so
** that checks read: if (!cond) return broken("...", ...); */
static bool broken(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static bool
broken(const char *fmt, ...)
{
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    error_set(VRAM_E_INVALID, "%s", line);
    return false;
}

bool
heap_check(const struct heap *h)
{
    uint64_t in_use = 0, requested = 0, free_bytes = 0, regions_bytes = 0;
    uint64_t live = 0, n_free = 0, n_regions = 0;
    for (const struct region *r = h->regions; r != NULL; r = r->next) {
        n_regions++;
        regions_bytes += r->size;
        if (!(r->next == NULL || r->next->prev == r))
            return broken("region list broken at 0x%" PRIx64, r->base);
        if (!(r->first != NULL && r->first->addr == r->base && r->first->prev == NULL))
            return broken("I1: region 0x%" PRIx64 " does not start with its first block",
                          r->base);
        uint64_t end = r->base, region_live = 0;
        for (const struct block *b = r->first; b != NULL; b = b->next) {
            if (!(b->region == r))
                return broken("I1: block 0x%" PRIx64 " names another region", b->addr);
            if (!(b->addr == end))
                return broken("I1: gap or overlap at 0x%" PRIx64, b->addr);
            if (!(b->size > 0 && b->size % HEAP_ALIGN == 0 && b->addr % HEAP_ALIGN == 0))
                return broken("I7: block 0x%" PRIx64 " size %" PRIu64 " not aligned",
                              b->addr, b->size);
            if (!(b->next == NULL || b->next->prev == b))
                return broken("I1: neighbour links broken at 0x%" PRIx64, b->addr);
            end = b->addr + b->size;
            if (b->free) {
                if (!(b->next == NULL || !b->next->free))
                    return broken("I2: adjacent free blocks at 0x%" PRIx64, b->addr);
                if (!(b->cls == heap_class_of(b->size)))
                    return broken("I3: free block 0x%" PRIx64 " in the wrong class",
                                  b->addr);
                if (!(heap_lookup(h, b->addr) == NULL))
                    return broken("I4: free block 0x%" PRIx64 " in the address map",
                                  b->addr);
                n_free++;
                free_bytes += b->size;
            } else {
                if (!(heap_lookup(h, b->addr) == b))
                    return broken("I4: allocated block 0x%" PRIx64
                                  " missing from the address map",
                                  b->addr);
                if (!(b->requested <= b->size))
                    return broken("I5: block 0x%" PRIx64 " smaller than asked", b->addr);
                region_live++;
                live++;
                in_use += b->size;
                requested += b->requested;
            }
        }
        if (!(end == r->base + r->size))
            return broken("I1: region 0x%" PRIx64 " not tiled to its end", r->base);
        if (!(region_live == r->live))
            return broken("I6: region 0x%" PRIx64 " counts %" PRIu64
                          " live blocks, has %" PRIu64,
                          r->base, r->live, region_live);
    }
    if (!(n_regions == h->n_regions && regions_bytes == h->bytes_regions))
        return broken("I5: region totals off");
    if (!(in_use == h->bytes_in_use))
        return broken("I5: bytes_in_use %" PRIu64 " but blocks hold %" PRIu64,
                      h->bytes_in_use, in_use);
    if (!(requested == h->bytes_requested))
        return broken("I5: bytes_requested off");
    if (!(live == h->live_blocks && live == h->map.count))
        return broken("I4: %" PRIu64 " live blocks, map holds %" PRIu64, live,
                      h->map.count);
    if (!(free_bytes == h->bytes_free && n_free == h->free_blocks))
        return broken("I5: free totals off");
    if (!(in_use + free_bytes == regions_bytes))
        return broken("I5: blocks do not add up to the regions");

    uint64_t listed = 0;
    for (uint32_t c = 0; c < HEAP_CLASSES; c++) {
        bool bit = (h->groups[c >> 6] >> (c & 63)) & 1;
        if (!(bit == (h->lists[c] != NULL)))
            return broken("I3: bitmap bit of class %u wrong", c);
        const struct block *prev = NULL;
        for (const struct block *b = h->lists[c]; b != NULL; b = b->fnext) {
            if (!(b->free && b->cls == c && b->fprev == prev))
                return broken("I3: free list %u corrupt", c);
            if (!(listed < n_free))
                return broken("I3: free lists longer than the free blocks");
            prev = b;
            listed++;
        }
    }
    for (uint32_t g = 0; g < HEAP_GROUPS; g++)
        if (!(((h->top >> g) & 1) == (h->groups[g] != 0)))
            return broken("I3: top bitmap bit %u wrong", g);
    if (!(listed == n_free))
        return broken("I3: %" PRIu64 " free blocks but %" PRIu64 " listed", n_free,
                      listed);
    return true;
}
