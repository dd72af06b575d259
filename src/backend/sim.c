/* SPDX-License-Identifier: MIT */
/*
** sim.c -- the simulated device backend: GPUs that exist only in host
** bookkeeping, so that every allocator path runs and is tested without a
** GPU, and so that `vram replay` predicts what a real device would do.
**
** Addresses are deterministic: each device hands out addresses from its
** own window, bumped in 2 MiB steps like the real driver's granularity,
** never reused, so a replay prints the same addresses every time. With
** host_backed, each allocation is instead real host memory (mmap with
** MAP_NORESERVE), so tests can write patterns through the addresses, and
** each physical allocation (phys_create) is a piece of one memory file per
** device, mapped shared: a handle mapped at two addresses shows the same
** bytes at both, and its contents outlive an unmap, as on a GPU.
** Memory is accounted in granules, as the driver does.
*/
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/error.h"
#include "base/zmem.h"

#define SIM_GRANULARITY (2ULL << 20)
#define SIM_WINDOW (1ULL << 44) /* address window per device: 16 TiB */
#define SIM_BASE (1ULL << 45)   /* first device's window starts here */
#define SIM_MAX_DEVICES VRAM_SIM_MAX_DEVICES

/* One piece of memory handed out by mem_alloc. */
struct sim_alloc {
    uint64_t addr;    /* address given out */
    uint64_t charged; /* bytes counted against the device: size rounded up to granules */
    uint64_t mapped;  /* host_backed: bytes mmap'ed at addr; else 0 */
};

/* A reserved virtual range (va_reserve). */
struct sim_range {
    uint64_t addr, size; /* bytes */
    uint64_t *mapped;    /* per granule: handle mapped there, 0 = none */
    bool host;           /* host_backed: an mmap'ed PROT_NONE range */
};

/* Physical memory made by phys_create; handle = index + 1. */
struct sim_phys {
    uint64_t size;   /* bytes, 0 = slot unused */
    uint64_t maps;   /* granules it is mapped at */
    uint64_t offset; /* host_backed: where its bytes are in the memory file */
};

struct sim_device {
    uint64_t total;           /* bytes */
    uint64_t used;            /* bytes charged by our allocations */
    uint64_t next_addr;       /* bump pointer of the address window */
    struct sim_alloc *allocs; /* live allocations, unordered */
    size_t n_allocs;
    uint64_t cap_allocs;
    struct sim_range *ranges; /* reserved virtual ranges, unordered */
    size_t n_ranges;
    uint64_t cap_ranges;
    struct sim_phys *phys; /* physical allocations by handle - 1 */
    uint64_t n_phys, cap_phys;
    uint64_t free_phys; /* no unused phys slot below this index */
    int memfd;          /* host_backed: the physical allocations' bytes; -1 = none yet */
    uint64_t memfd_size;
};

struct sim_backend {
    struct backend base;
    struct backend_ops ops; /* sim_ops, plus events and capture if asked */
    int *events; /* queries left per event, by handle - 1; -1 = unused */
    uint64_t n_events, cap_events;
    pthread_mutex_t lock; /* guards every device's bookkeeping */
    vram_sim_options opt; /* with defaults filled in */
    struct sim_device dev[SIM_MAX_DEVICES];
    const struct driver_costs *costs; /* NULL: calls cost nothing more */
    _Atomic uint64_t dev_ns[SIM_MAX_DEVICES]; /* modelled driver time, per device */
};

static inline struct sim_backend *
sim_of(struct backend *b)
{
    return (struct sim_backend *)b;
}

static vram_status
sim_check_dev(struct sim_backend *s, int dev)
{
    if (dev < 0 || dev >= s->opt.devices)
        return error_set(VRAM_E_NO_DEVICE, "sim: no device %d (%d simulated)", dev,
                         s->opt.devices);
    return VRAM_OK;
}

/* Check DEV, take the simulator's lock and point *D at the device: the
** opening of every call on one device. On success the caller unlocks. */
static vram_status
sim_lock_dev(struct sim_backend *s, int dev, struct sim_device **d)
{
    vram_status st = sim_check_dev(s, dev);
    if (st != VRAM_OK)
        return st;
    pthread_mutex_lock(&s->lock);
    *d = &s->dev[dev];
    return VRAM_OK;
}

/* Check DEV, and that SIZE, the size of CALL, is a whole number of
** granules: the opening of the calls that make virtual or physical
** memory. */
static vram_status
sim_check_granules(struct sim_backend *s, int dev, const char *call, uint64_t size)
{
    vram_status st = sim_check_dev(s, dev);
    if (st != VRAM_OK)
        return st;
    if (size == 0 || size % SIM_GRANULARITY != 0)
        return error_set(VRAM_E_INVALID, "sim: %s(%" PRIu64 "): not a multiple of 2 MiB",
                         call, size);
    return VRAM_OK;
}

static vram_status
sim_device_count(struct backend *b, int *out)
{
    *out = sim_of(b)->opt.devices;
    return VRAM_OK;
}

static uint64_t
sim_free_locked(const struct sim_backend *s, int dev)
{
    const struct sim_device *d = &s->dev[dev];
    uint64_t taken = d->used + s->opt.others_bytes;
    return taken >= d->total ? 0 : d->total - taken;
}

static vram_status
sim_mem_get_info(struct backend *b, int dev, uint64_t *free_bytes, uint64_t *total_bytes)
{
    struct sim_backend *s = sim_of(b);
    struct sim_device *d;
    vram_status st = sim_lock_dev(s, dev, &d);
    if (st != VRAM_OK)
        return st;
    *free_bytes = sim_free_locked(s, dev);
    *total_bytes = d->total;
    pthread_mutex_unlock(&s->lock);
    return VRAM_OK;
}

static vram_status
sim_device_info(struct backend *b, int dev, vram_physical_info *out)
{
    struct sim_backend *s = sim_of(b);
    uint64_t free_bytes, total;
    vram_status st = sim_mem_get_info(b, dev, &free_bytes, &total);
    if (st != VRAM_OK)
        return st;
    vram_physical_info info;
    memset(&info, 0, sizeof info);
    info.index = dev;
    snprintf(info.name, sizeof info.name, "Simulated GPU (%" PRIu64 " MiB)",
             s->opt.memory_bytes >> 20);
    /* A fixed, recognisable UUID per ordinal: stable across runs. */
    snprintf(info.uuid, sizeof info.uuid, "GPU-5a5a5a5a-0000-4000-8000-%012x", dev);
    info.total_bytes = total;
    info.free_bytes = free_bytes;
    info.cc_major = s->opt.cc_major;
    info.cc_minor = s->opt.cc_minor;
    info.granularity = SIM_GRANULARITY;
    *out = info;
    return VRAM_OK;
}

/* VRAM_OK if device DEV has CHARGED bytes free for CALL (of SIZE bytes);
** else VRAM_E_OOM, the lock released. Called with s->lock held. */
static vram_status
sim_room_locked(struct sim_backend *s, int dev, const char *call, uint64_t size,
                uint64_t charged)
{
    uint64_t avail = sim_free_locked(s, dev);
    if (charged <= avail)
        return VRAM_OK;
    return error_set_unlock(&s->lock, VRAM_E_OOM,
                            "sim: %s(%" PRIu64 " bytes) on device %d: out of memory "
                            "(%" PRIu64 " bytes free)",
                            call, size, dev, avail);
}

/* Make room in *ARR (elements of ELEM bytes, *CAP of them) for NEED;
** new room is zeroed. False when out of host memory (nothing changed). */
static bool
grow_array(void **arr, size_t elem, uint64_t *cap, uint64_t need)
{
    if (need <= *cap)
        return true;
    uint64_t ncap = *cap ? *cap : 16;
    while (ncap < need)
        ncap *= 2;
    void *na = realloc(*arr, ncap * elem);
    if (na == NULL)
        return false;
    memset((char *)na + *cap * elem, 0, (ncap - *cap) * elem);
    *arr = na;
    *cap = ncap;
    return true;
}

/* SLOT (a free one, or *N for a new one at the end) of the table *ARR
** (*N used of *CAP, ELEM bytes each) made usable; VRAM_E_HOST_MEMORY, the
** lock released, when the table cannot grow. Called with s->lock held. */
static vram_status
sim_slot_locked(struct sim_backend *s, void **arr, size_t elem, uint64_t *n,
                uint64_t *cap, uint64_t slot)
{
    if (slot < *n)
        return VRAM_OK;
    if (!grow_array(arr, elem, cap, *n + 1))
        return error_set_unlock(&s->lock, VRAM_E_HOST_MEMORY, "sim: out of host memory");
    (*n)++;
    return VRAM_OK;
}

static vram_status
sim_mem_alloc(struct backend *b, int dev, uint64_t size, uint64_t *addr)
{
    struct sim_backend *s = sim_of(b);
    vram_status st = sim_check_dev(s, dev);
    if (st != VRAM_OK)
        return st;
    if (size == 0)
        return error_set(VRAM_E_INVALID, "sim: mem_alloc of 0 bytes");
    if (size > UINT64_MAX - SIM_GRANULARITY)
        return error_set(VRAM_E_OOM, "sim: mem_alloc(%" PRIu64 "): out of memory", size);
    uint64_t charged = (size + SIM_GRANULARITY - 1) & ~(SIM_GRANULARITY - 1);

    pthread_mutex_lock(&s->lock);
    struct sim_device *d = &s->dev[dev];
    st = sim_room_locked(s, dev, "mem_alloc", size, charged);
    if (st != VRAM_OK)
        return st;
    if (!grow_array((void **)&d->allocs, sizeof *d->allocs, &d->cap_allocs,
                    d->n_allocs + 1))
        return error_set_unlock(&s->lock, VRAM_E_HOST_MEMORY, "sim: out of host memory");
    struct sim_alloc a = {0, charged, 0};
    if (s->opt.host_backed) {
        void *p = mmap(NULL, charged, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return error_set_unlock(
                &s->lock, VRAM_E_OOM,
                "sim: host-backed mem_alloc(%" PRIu64 "): mmap failed", size);
        a.addr = (uint64_t)(uintptr_t)p;
        a.mapped = charged;
    } else {
        a.addr = d->next_addr;
        d->next_addr += charged;
    }
    d->allocs[d->n_allocs++] = a;
    d->used += charged;
    pthread_mutex_unlock(&s->lock);
    *addr = a.addr;
    return VRAM_OK;
}

static vram_status
sim_mem_free(struct backend *b, int dev, uint64_t addr)
{
    struct sim_backend *s = sim_of(b);
    struct sim_device *d;
    vram_status st = sim_lock_dev(s, dev, &d);
    if (st != VRAM_OK)
        return st;
    /* Linear: the allocator holds few regions, and this is never on the
    ** hot path. */
    for (size_t i = 0; i < d->n_allocs; i++) {
        if (d->allocs[i].addr != addr)
            continue;
        struct sim_alloc a = d->allocs[i];
        d->allocs[i] = d->allocs[--d->n_allocs];
        d->used -= a.charged;
        pthread_mutex_unlock(&s->lock);
        if (a.mapped != 0)
            munmap((void *)(uintptr_t)a.addr, a.mapped);
        return VRAM_OK;
    }
    return error_set_unlock(&s->lock, VRAM_E_INVALID,
                            "sim: mem_free(0x%" PRIx64 "): not an allocation", addr);
}

/* ---- virtual memory: the calls of the expandable strategy ---- */

/* Give the range R (its size and granule table set) an address on device
** DEV and add it to the device's ranges. Called with s->lock held. */
static vram_status
sim_add_range_locked(struct sim_backend *s, int dev, struct sim_range *r)
{
    struct sim_device *d = &s->dev[dev];
    if (!grow_array((void **)&d->ranges, sizeof *d->ranges, &d->cap_ranges,
                    d->n_ranges + 1))
        return error_set(VRAM_E_HOST_MEMORY, "sim: out of host memory");
    if (s->opt.host_backed) {
        /* Inaccessible until mapped: a write to an unmapped granule faults,
        ** as it does on a GPU. */
        void *p = mmap(NULL, r->size, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return error_set(VRAM_E_OOM, "sim: va_reserve(%" PRIu64 "): mmap failed",
                             r->size);
        r->addr = (uint64_t)(uintptr_t)p;
        r->host = true;
    } else {
        if (d->next_addr + r->size > SIM_BASE + (uint64_t)(dev + 1) * SIM_WINDOW)
            return error_set(VRAM_E_OOM, "sim: address space of device %d exhausted",
                             dev);
        r->addr = d->next_addr;
        d->next_addr += r->size;
    }
    d->ranges[d->n_ranges++] = *r;
    return VRAM_OK;
}

static vram_status
sim_va_reserve(struct backend *b, int dev, uint64_t size, uint64_t *addr)
{
    struct sim_backend *s = sim_of(b);
    vram_status st = sim_check_granules(s, dev, "va_reserve", size);
    if (st != VRAM_OK)
        return st;
    struct sim_range r = {0, size, zmem_alloc(size / SIM_GRANULARITY, sizeof(uint64_t)),
                          false};
    if (r.mapped == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "sim: out of host memory");
    pthread_mutex_lock(&s->lock);
    st = sim_add_range_locked(s, dev, &r);
    pthread_mutex_unlock(&s->lock);
    if (st != VRAM_OK) {
        zmem_free(r.mapped, size / SIM_GRANULARITY, sizeof(uint64_t));
        return st;
    }
    *addr = r.addr;
    return VRAM_OK;
}

/* The range holding [addr, addr+size), or NULL. Caller holds s->lock. */
static struct sim_range *
find_range_locked(struct sim_device *d, uint64_t addr, uint64_t size)
{
    for (size_t i = 0; i < d->n_ranges; i++) {
        struct sim_range *r = &d->ranges[i];
        if (addr >= r->addr && addr - r->addr <= r->size &&
            size <= r->size - (addr - r->addr))
            return r;
    }
    return NULL;
}

static vram_status
sim_va_release(struct backend *b, int dev, uint64_t addr, uint64_t size)
{
    struct sim_backend *s = sim_of(b);
    struct sim_device *d;
    vram_status st = sim_lock_dev(s, dev, &d);
    if (st != VRAM_OK)
        return st;
    for (size_t i = 0; i < d->n_ranges; i++) {
        struct sim_range *r = &d->ranges[i];
        if (r->addr != addr || r->size != size)
            continue;
        for (uint64_t g = 0; g < size / SIM_GRANULARITY; g++)
            if (r->mapped[g] != 0)
                return error_set_unlock(&s->lock, VRAM_E_INVALID,
                                        "sim: va_release(0x%" PRIx64 "): granule %" PRIu64
                                        " still mapped",
                                        addr, g);
        if (r->host)
            munmap((void *)(uintptr_t)r->addr, r->size);
        zmem_free(r->mapped, r->size / SIM_GRANULARITY, sizeof(uint64_t));
        d->ranges[i] = d->ranges[--d->n_ranges];
        pthread_mutex_unlock(&s->lock);
        return VRAM_OK;
    }
    return error_set_unlock(&s->lock, VRAM_E_INVALID,
                            "sim: va_release(0x%" PRIx64 "): not a reserved range", addr);
}

static vram_status
sim_phys_create(struct backend *b, int dev, uint64_t size, uint64_t *handle)
{
    struct sim_backend *s = sim_of(b);
    vram_status st = sim_check_granules(s, dev, "phys_create", size);
    if (st != VRAM_OK)
        return st;
    pthread_mutex_lock(&s->lock);
    struct sim_device *d = &s->dev[dev];
    st = sim_room_locked(s, dev, "phys_create", size, size);
    if (st != VRAM_OK)
        return st;
    uint64_t offset = 0;
    if (s->opt.host_backed) {
        /* Bytes of a sparse memory file, never reused after a release
        ** (whose pages are punched out). */
        if (d->memfd < 0)
            d->memfd = memfd_create("vram-sim-physical", MFD_CLOEXEC);
        if (d->memfd < 0 || ftruncate(d->memfd, (off_t)(d->memfd_size + size)) != 0)
            return error_set_unlock(&s->lock, VRAM_E_HOST_MEMORY,
                                    "sim: no memory file for physical allocations");
        offset = d->memfd_size;
        d->memfd_size += size;
    }
    uint64_t slot = d->free_phys;
    while (slot < d->n_phys && d->phys[slot].size != 0)
        slot++;
    st = sim_slot_locked(s, (void **)&d->phys, sizeof *d->phys, &d->n_phys, &d->cap_phys,
                         slot);
    if (st != VRAM_OK)
        return st;
    d->phys[slot].size = size;
    d->phys[slot].maps = 0;
    d->phys[slot].offset = offset;
    d->free_phys = slot + 1;
    d->used += size;
    pthread_mutex_unlock(&s->lock);
    *handle = slot + 1;
    return VRAM_OK;
}

static vram_status
sim_phys_release(struct backend *b, int dev, uint64_t handle)
{
    struct sim_backend *s = sim_of(b);
    struct sim_device *d;
    vram_status st = sim_lock_dev(s, dev, &d);
    if (st != VRAM_OK)
        return st;
    if (handle == 0 || handle > d->n_phys || d->phys[handle - 1].size == 0)
        return error_set_unlock(&s->lock, VRAM_E_INVALID,
                                "sim: phys_release(%" PRIu64 "): no such handle", handle);
    if (d->phys[handle - 1].maps != 0)
        return error_set_unlock(&s->lock, VRAM_E_INVALID,
                                "sim: phys_release(%" PRIu64 "): still mapped", handle);
    d->used -= d->phys[handle - 1].size;
    if (s->opt.host_backed)
        (void)fallocate(d->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        (off_t)d->phys[handle - 1].offset, (off_t)d->phys[handle - 1].size);
    d->phys[handle - 1].size = 0;
    if (handle - 1 < d->free_phys)
        d->free_phys = handle - 1;
    pthread_mutex_unlock(&s->lock);
    return VRAM_OK;
}

/* The reserved range of D that holds [addr, addr+size) on granule
** boundaries, and the granules [*g0, *g1) of it that the span covers; NULL
** when no range holds it so. Caller holds s->lock. */
static struct sim_range *
granules_locked(struct sim_device *d, uint64_t addr, uint64_t size, uint64_t *g0,
                uint64_t *g1)
{
    struct sim_range *r = find_range_locked(d, addr, size);
    if (r == NULL || size == 0 || (addr - r->addr) % SIM_GRANULARITY != 0 ||
        size % SIM_GRANULARITY != 0)
        return NULL;
    *g0 = (addr - r->addr) / SIM_GRANULARITY;
    *g1 = (addr - r->addr + size) / SIM_GRANULARITY;
    return r;
}

static vram_status
sim_map(struct backend *b, int dev, uint64_t addr, uint64_t size, uint64_t handle)
{
    struct sim_backend *s = sim_of(b);
    struct sim_device *d;
    vram_status st = sim_lock_dev(s, dev, &d);
    if (st != VRAM_OK)
        return st;
    uint64_t g0 = 0, g1 = 0;
    struct sim_range *r = granules_locked(d, addr, size, &g0, &g1);
    const char *why = NULL;
    if (r == NULL)
        why = "not granule-aligned inside a reserved range";
    else if (handle == 0 || handle > d->n_phys || d->phys[handle - 1].size != size)
        why = "no physical allocation of that size";
    for (uint64_t g = g0; why == NULL && g < g1; g++)
        if (r->mapped[g] != 0)
            why = "already mapped";
    if (why != NULL)
        return error_set_unlock(&s->lock, VRAM_E_INVALID,
                                "sim: map(0x%" PRIx64 ", %" PRIu64 "): %s", addr, size,
                                why);
    for (uint64_t g = g0; g < g1; g++)
        r->mapped[g] = handle;
    if (r->host &&
        mmap((void *)(uintptr_t)addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             d->memfd, (off_t)d->phys[handle - 1].offset) == MAP_FAILED) {
        for (uint64_t g = g0; g < g1; g++)
            r->mapped[g] = 0;
        return error_set_unlock(&s->lock, VRAM_E_HOST_MEMORY,
                                "sim: map(0x%" PRIx64 "): mmap failed", addr);
    }
    d->phys[handle - 1].maps += g1 - g0;
    pthread_mutex_unlock(&s->lock);
    return VRAM_OK;
}

static vram_status
sim_unmap(struct backend *b, int dev, uint64_t addr, uint64_t size)
{
    struct sim_backend *s = sim_of(b);
    struct sim_device *d;
    vram_status st = sim_lock_dev(s, dev, &d);
    if (st != VRAM_OK)
        return st;
    uint64_t g0 = 0, g1 = 0;
    struct sim_range *r = granules_locked(d, addr, size, &g0, &g1);
    bool ok = r != NULL;
    for (uint64_t g = g0; ok && g < g1; g++)
        ok = r->mapped[g] != 0;
    if (!ok)
        return error_set_unlock(&s->lock, VRAM_E_INVALID,
                                "sim: unmap(0x%" PRIx64 ", %" PRIu64 "): not mapped",
                                addr, size);
    for (uint64_t g = g0; g < g1; g++) {
        d->phys[r->mapped[g] - 1].maps--;
        r->mapped[g] = 0;
    }
    if (r->host) /* inaccessible again; the bytes stay with the handle */
        (void)mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    pthread_mutex_unlock(&s->lock);
    return VRAM_OK;
}

/* ---- events: only with event_queries > 0 (tests of the stream rule) ---- */

static vram_status
sim_event_record(struct backend *b, int dev, uint64_t stream, uint64_t *event)
{
    struct sim_backend *s = sim_of(b);
    (void)stream;
    vram_status st = sim_check_dev(s, dev);
    if (st != VRAM_OK)
        return st;
    pthread_mutex_lock(&s->lock);
    uint64_t slot = 0;
    while (slot < s->n_events && s->events[slot] >= 0)
        slot++;
    st = sim_slot_locked(s, (void **)&s->events, sizeof *s->events, &s->n_events,
                         &s->cap_events, slot);
    if (st != VRAM_OK)
        return st;
    s->events[slot] = s->opt.event_queries;
    pthread_mutex_unlock(&s->lock);
    *event = slot + 1;
    return VRAM_OK;
}

/* Take the simulator's lock and point *LEFT at the queries left of EVENT,
** for CALL; else VRAM_E_INVALID, the lock released. On success the caller
** unlocks. */
static vram_status
sim_lock_event(struct sim_backend *s, const char *call, uint64_t event, int **left)
{
    pthread_mutex_lock(&s->lock);
    if (event == 0 || event > s->n_events || s->events[event - 1] < 0)
        return error_set_unlock(&s->lock, VRAM_E_INVALID,
                                "sim: %s(%" PRIu64 "): no such event", call, event);
    *left = &s->events[event - 1];
    return VRAM_OK;
}

static vram_status
sim_event_query(struct backend *b, int dev, uint64_t event, bool *done)
{
    struct sim_backend *s = sim_of(b);
    (void)dev;
    int *left = NULL;
    vram_status st = sim_lock_event(s, "event_query", event, &left);
    if (st != VRAM_OK)
        return st;
    if (*left > 0)
        (*left)--;
    *done = *left == 0;
    pthread_mutex_unlock(&s->lock);
    return VRAM_OK;
}

static vram_status
sim_event_destroy(struct backend *b, int dev, uint64_t event)
{
    struct sim_backend *s = sim_of(b);
    (void)dev;
    int *left = NULL;
    vram_status st = sim_lock_event(s, "event_destroy", event, &left);
    if (st != VRAM_OK)
        return st;
    *left = -1;
    pthread_mutex_unlock(&s->lock);
    return VRAM_OK;
}

static void
sim_close(struct backend *b)
{
    struct sim_backend *s = sim_of(b);
    for (int i = 0; i < s->opt.devices; i++) {
        struct sim_device *d = &s->dev[i];
        for (size_t k = 0; k < d->n_allocs; k++)
            if (d->allocs[k].mapped != 0)
                munmap((void *)(uintptr_t)d->allocs[k].addr, d->allocs[k].mapped);
        free(d->allocs);
        for (size_t k = 0; k < d->n_ranges; k++) {
            if (d->ranges[k].host)
                munmap((void *)(uintptr_t)d->ranges[k].addr, d->ranges[k].size);
            zmem_free(d->ranges[k].mapped, d->ranges[k].size / SIM_GRANULARITY,
                      sizeof(uint64_t));
        }
        free(d->ranges);
        free(d->phys);
        if (d->memfd >= 0)
            close(d->memfd);
    }
    free(s->events);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* ---- the driver cost model (vram_sim_options.driver_costs) ---- */

/*
** What each call costs on the real driver, in ns: a constant plus a part
** per MiB of the call's size. "h200": one NVIDIA H200, driver 580, CUDA 13,
** measured by `vram_vmm_costs` in the run that also mapped 8 GiB in units of
** 2 to 512 MiB (BENCHMARKS.md, "On the GPU", run A): create 12.0 us, map
** 1.0, set access 27.7 (the sim's map is cuMemMap + cuMemSetAccess), unmap
** 18.3, release 18.5 for 8 MiB, idle cuCtxSynchronize 1.0; mapping 8 GiB
** took 45.7 ms in 8 MiB units and 1.5 ms in 512 MiB ones, i.e. 44.6 and
** 94 us per mapping: 0.098 us more per MiB, split here between create and
** set access. cuMemAlloc + cuMemFree: 40.7 us a pair (facts measured the
** same day), split evenly. Reserving address space: not measured; taken as
** a create.
*/
struct driver_costs {
    const char *name;
    uint64_t alloc, free_, reserve, create, release, map, unmap, sync; /* ns */
    uint64_t create_per_mib, map_per_mib;                                 /* ns */
};

static const struct driver_costs cost_models[] = {
    {"h200", 20350, 20350, 12000, 12000, 18500, 28700, 18300, 1000, 49, 49},
};

static const struct driver_costs *
sim_costs(struct backend *b)
{
    return sim_of(b)->costs;
}

/* The driver of device DEV would have spent NS more: counted, not waited
** (a busy-wait on a loaded machine overshoots by whole time slices). */
static void
charge(struct backend *b, int dev, uint64_t ns)
{
    struct sim_backend *s = sim_of(b);
    if (dev >= 0 && dev < s->opt.devices)
        atomic_fetch_add_explicit(&s->dev_ns[dev], ns, memory_order_relaxed);
}

static uint64_t
sim_modelled_ns(struct backend *b, int dev)
{
    struct sim_backend *s = sim_of(b);
    if (dev < 0 || dev >= s->opt.devices)
        return 0;
    return atomic_load_explicit(&s->dev_ns[dev], memory_order_relaxed);
}

/*
** Every call the model prices: its name, what it costs in ns (an
** expression of the model C and, where the call has one, its SIZE), its
** parameters after the backend, and the arguments passed on. Each becomes
** costed_NAME, which charges the cost and calls sim_NAME.
*/
#define SIM_COSTED_CALLS(X)                                                              \
    X(mem_alloc, c->alloc, (int dev, uint64_t size, uint64_t *addr), (dev, size, addr))  \
    X(mem_free, c->free_, (int dev, uint64_t addr), (dev, addr))                         \
    X(va_reserve, c->reserve, (int dev, uint64_t size, uint64_t *addr),                  \
      (dev, size, addr))                                                                 \
    X(phys_create, c->create + c->create_per_mib * (size >> 20),                         \
      (int dev, uint64_t size, uint64_t *handle), (dev, size, handle))                   \
    X(phys_release, c->release, (int dev, uint64_t handle), (dev, handle))               \
    X(map, c->map + c->map_per_mib * (size >> 20),                                       \
      (int dev, uint64_t addr, uint64_t size, uint64_t handle),                          \
      (dev, addr, size, handle))                                                         \
    X(unmap, c->unmap, (int dev, uint64_t addr, uint64_t size), (dev, addr, size))

#define SIM_UNPAREN(...) __VA_ARGS__

#define X(name, cost, params, args)                                                      \
    static vram_status costed_##name(struct backend *b, SIM_UNPAREN params)              \
    {                                                                                    \
        const struct driver_costs *c = sim_costs(b);                                     \
        charge(b, dev, cost);                                                            \
        return sim_##name(b, SIM_UNPAREN args);                                          \
    }
SIM_COSTED_CALLS(X)
#undef X

/* The simulator's work completes at once: a synchronize costs the idle
** call. */
static vram_status
costed_synchronize(struct backend *b, int dev)
{
    vram_status st = sim_check_dev(sim_of(b), dev);
    if (st == VRAM_OK)
        charge(b, dev, sim_costs(b)->sync);
    return st;
}

static const struct backend_ops sim_ops = {
    .name = "sim",
    .close = sim_close,
    .device_count = sim_device_count,
    .device_info = sim_device_info,
    .mem_get_info = sim_mem_get_info,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .va_reserve = sim_va_reserve,
    .va_release = sim_va_release,
    .phys_create = sim_phys_create,
    .phys_release = sim_phys_release,
    .map = sim_map,
    .unmap = sim_unmap,
};

/* With capture_stream set: that stream is capturing a CUDA graph, always
** (vram asks only while a graph pool is open). */
static vram_status
sim_stream_capturing(struct backend *b, int dev, uint64_t stream, bool *active)
{
    struct sim_backend *s = sim_of(b);
    vram_status st = sim_check_dev(s, dev);
    if (st != VRAM_OK)
        return st;
    *active = stream == (uint64_t)(uintptr_t)s->opt.capture_stream;
    return VRAM_OK;
}

vram_status
backend_sim_open(const vram_sim_options *options, struct backend **out)
{
    vram_sim_options o;
    if (options != NULL)
        o = *options;
    else
        memset(&o, 0, sizeof o);
    if (o.devices == 0)
        o.devices = 1;
    if (o.devices < 0 || o.devices > SIM_MAX_DEVICES)
        return error_set(VRAM_E_INVALID, "sim: %d devices (1 to %d)", o.devices,
                         SIM_MAX_DEVICES);
    if (o.memory_bytes == 0)
        o.memory_bytes = VRAM_SIM_DEFAULT_MEMORY;
    if (o.memory_bytes > SIM_WINDOW)
        return error_set(VRAM_E_INVALID, "sim: device memory above 16 TiB");
    if (o.cc_major == 0) {
        o.cc_major = 9;
        o.cc_minor = 0;
    }
    if (o.fail_status == VRAM_OK)
        o.fail_status = VRAM_E_BACKEND;

    struct sim_backend *s = calloc(1, sizeof *s);
    if (s == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "sim: out of host memory");
    s->ops = sim_ops;
    if (o.event_queries > 0) {
        s->ops.event_record = sim_event_record;
        s->ops.event_query = sim_event_query;
        s->ops.event_destroy = sim_event_destroy;
    }
    if (o.capture_stream != NULL)
        s->ops.stream_capturing = sim_stream_capturing;
    if (o.driver_costs != NULL && o.driver_costs[0] != '\0') {
        for (size_t i = 0; i < sizeof cost_models / sizeof cost_models[0]; i++)
            if (strcmp(o.driver_costs, cost_models[i].name) == 0)
                s->costs = &cost_models[i];
        if (s->costs == NULL) {
            free(s);
            return error_set(VRAM_E_INVALID,
                             "sim: unknown driver cost model '%s' (known: h200)",
                             o.driver_costs);
        }
#define X(name, cost, params, args) s->ops.name = costed_##name;
        SIM_COSTED_CALLS(X)
#undef X
        s->ops.synchronize = costed_synchronize;
        s->ops.modelled_ns = sim_modelled_ns;
        o.driver_costs = NULL; /* the caller's string need not outlive the open */
    }
    s->base.ops = &s->ops;
    pthread_mutex_init(&s->lock, NULL);
    s->opt = o;
    for (int i = 0; i < o.devices; i++) {
        s->dev[i].total = o.memory_bytes;
        s->dev[i].memfd = -1;
        s->dev[i].next_addr = SIM_BASE + (uint64_t)i * SIM_WINDOW;
    }
    if (o.fail_call == 0) {
        *out = &s->base;
        return VRAM_OK;
    }
    return backend_fault_open(&s->base, o.fail_call, o.fail_status, out);
}
