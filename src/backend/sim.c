/*
** sim.c -- the simulated device backend: GPUs that exist only in host
** bookkeeping, so that every allocator path runs and is tested without a
** GPU, and so that `vram replay` predicts what a real device would do.
**
** Addresses are deterministic: each device hands out addresses from its
** own window, bumped in 2 MiB steps like the real driver's granularity,
** never reused, so a replay prints the same addresses every time. With
** host_backed, each allocation is instead real host memory (mmap with
** MAP_NORESERVE), so tests can write patterns through the addresses.
** Memory is accounted in granules, as the driver does.
*/
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend/backend.h"
#include "core/error.h"

#define SIM_GRANULARITY (2ULL << 20)
#define SIM_WINDOW (1ULL << 44) /* address window per device: 16 TiB */
#define SIM_BASE (1ULL << 45)   /* first device's window starts here */
#define SIM_MAX_DEVICES 64

/* One piece of memory handed out by mem_alloc. */
struct sim_alloc {
    uint64_t addr;    /* address given out */
    uint64_t charged; /* bytes counted against the device: size rounded up to granules */
    uint64_t mapped;  /* host_backed: bytes mmap'ed at addr; else 0 */
};

struct sim_device {
    uint64_t total;           /* bytes */
    uint64_t used;            /* bytes charged by our allocations */
    uint64_t next_addr;       /* bump pointer of the address window */
    struct sim_alloc *allocs; /* live allocations, unordered */
    size_t n_allocs, cap_allocs;
};

struct sim_backend {
    struct backend base;
    pthread_mutex_t lock; /* guards every device's bookkeeping */
    vram_sim_options opt; /* with defaults filled in */
    struct sim_device dev[SIM_MAX_DEVICES];
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
sim_device_info(struct backend *b, int dev, vram_physical_info *out)
{
    struct sim_backend *s = sim_of(b);
    vram_status st = sim_check_dev(s, dev);
    if (st != VRAM_OK)
        return st;
    vram_physical_info info;
    memset(&info, 0, sizeof info);
    info.index = dev;
    snprintf(info.name, sizeof info.name, "Simulated GPU (%" PRIu64 " MiB)",
             s->opt.memory_bytes >> 20);
    /* A fixed, recognisable UUID per ordinal: stable across runs. */
    snprintf(info.uuid, sizeof info.uuid, "GPU-5a5a5a5a-0000-4000-8000-%012x", dev);
    pthread_mutex_lock(&s->lock);
    info.total_bytes = s->dev[dev].total;
    info.free_bytes = sim_free_locked(s, dev);
    pthread_mutex_unlock(&s->lock);
    info.cc_major = s->opt.cc_major;
    info.cc_minor = s->opt.cc_minor;
    info.granularity = SIM_GRANULARITY;
    *out = info;
    return VRAM_OK;
}

static vram_status
sim_mem_get_info(struct backend *b, int dev, uint64_t *free_bytes, uint64_t *total_bytes)
{
    struct sim_backend *s = sim_of(b);
    vram_status st = sim_check_dev(s, dev);
    if (st != VRAM_OK)
        return st;
    pthread_mutex_lock(&s->lock);
    *free_bytes = sim_free_locked(s, dev);
    *total_bytes = s->dev[dev].total;
    pthread_mutex_unlock(&s->lock);
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
    if (charged > sim_free_locked(s, dev)) {
        uint64_t avail = sim_free_locked(s, dev);
        pthread_mutex_unlock(&s->lock);
        return error_set(VRAM_E_OOM,
                         "sim: mem_alloc(%" PRIu64 " bytes) on device %d: out of memory "
                         "(%" PRIu64 " bytes free)",
                         size, dev, avail);
    }
    if (d->n_allocs == d->cap_allocs) {
        size_t ncap = d->cap_allocs ? 2 * d->cap_allocs : 64;
        struct sim_alloc *na = realloc(d->allocs, ncap * sizeof *na);
        if (na == NULL) {
            pthread_mutex_unlock(&s->lock);
            return error_set(VRAM_E_HOST_MEMORY, "sim: out of host memory");
        }
        d->allocs = na;
        d->cap_allocs = ncap;
    }
    struct sim_alloc a = {0, charged, 0};
    if (s->opt.host_backed) {
        void *p = mmap(NULL, charged, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            pthread_mutex_unlock(&s->lock);
            return error_set(
                VRAM_E_OOM, "sim: host-backed mem_alloc(%" PRIu64 "): mmap failed", size);
        }
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
    vram_status st = sim_check_dev(s, dev);
    if (st != VRAM_OK)
        return st;
    pthread_mutex_lock(&s->lock);
    struct sim_device *d = &s->dev[dev];
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
    pthread_mutex_unlock(&s->lock);
    return error_set(VRAM_E_INVALID, "sim: mem_free(0x%" PRIx64 "): not an allocation",
                     addr);
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
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static const struct backend_ops sim_ops = {
    .name = "sim",
    .close = sim_close,
    .device_count = sim_device_count,
    .device_info = sim_device_info,
    .mem_get_info = sim_mem_get_info,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
};

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
    s->base.ops = &sim_ops;
    pthread_mutex_init(&s->lock, NULL);
    s->opt = o;
    for (int i = 0; i < o.devices; i++) {
        s->dev[i].total = o.memory_bytes;
        s->dev[i].next_addr = SIM_BASE + (uint64_t)i * SIM_WINDOW;
    }
    if (o.fail_call == 0) {
        *out = &s->base;
        return VRAM_OK;
    }
    return backend_fault_open(&s->base, o.fail_call, o.fail_status, out);
}
