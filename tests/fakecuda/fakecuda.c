/*
** fakecuda.c -- a fake CUDA driver, built as libcuda.so.1, so that the CUDA
** backend (src/backend/cuda.c) is tested where there is no GPU (CI).
**
** It implements every entry point of VCU_ENTRY_POINTS (its prototypes are
** generated from that list, so a signature that drifts fails to compile)
** with a small in-process model that is strict where the real driver is:
**   - 2 devices (FAKECUDA_DEVICES=0..8) "Fake GPU", 1 GiB each, fixed
**     UUIDs GPU-facecda0-0001-4000-8000-00000000000N, cc 9.0, VM
**     granularity 2 MiB; everything but cuDriverGetVersion and the error
**     texts fails with CUDA_ERROR_NOT_INITIALIZED before cuInit;
**   - a context stack per thread; calls that need a context (cuMemAlloc,
**     cuMemGetInfo, events...) fail without one and act on the device of
**     the current one; popping an empty stack fails;
**   - allocations with accounting in 2 MiB granules (OOM when full);
**   - virtual memory with real bookkeeping: reservations, handles, maps that
**     must lie inside a reservation, be granule-aligned and not overlap;
**     access set only on fully mapped ranges; memory returned when a
**     released handle's last mapping goes;
**   - events that complete on their third query (two NOT_READY first);
**   - knobs: FAKECUDA_FAIL=name[,name...] makes those entry points fail
**     with CUDA_ERROR_UNKNOWN ("cuMemAlloc" or "cuMemAlloc_v2" both name
**     cuMemAlloc_v2); FAKECUDA_OOM=1 makes every allocation fail with
**     CUDA_ERROR_OUT_OF_MEMORY. Both are read at each call.
** A misuse (a call without a context, a pop of an empty stack, a release
** without a retain) also counts in fakecuda_misuses(), which tests check.
**
** Built three times (tests/CMakeLists.txt): the full driver; with
** FAKECUDA_LEGACY, an old driver without cuDeviceGetUuid_v2, the VM calls
** and the error texts; with FAKECUDA_BROKEN, one without cuMemAlloc_v2.
**
** Test code: getenv is allowed here (STYLE.md's rule covers the library).
*/
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_api.h"

#define FAKE_API __attribute__((visibility("default")))

/* The driver's entry points, declared from the one list. */
#define X(field, symbol, fallback, need, ret, params) FAKE_API ret symbol params;
VCU_ENTRY_POINTS(X, VCU_OWN_TYPE)
#undef X
FAKE_API vcu_result cuDeviceGetUuid(vcu_uuid *uuid, vcu_device dev); /* the v1 name */

/* Test helpers, found with dlsym. */
FAKE_API int fakecuda_ctx_depth(void);
FAKE_API uint64_t fakecuda_misuses(void);
FAKE_API uint64_t fakecuda_live_objects(void);
FAKE_API uint64_t fakecuda_used(int dev);
FAKE_API int fakecuda_primary_refs(int dev);

#define FAKE_MAX_DEVICES 8
#define FAKE_MEMORY (1ULL << 30)  /* per device */
#define FAKE_GRANULE (2ULL << 20) /* allocation and VM granularity */
#define FAKE_MAX_OBJECTS 1024     /* per kind */
#define FAKE_STACK 16             /* contexts per thread */
#define FAKE_ALLOC_BASE 0x200000000000ULL
#define FAKE_ALLOC_WINDOW (1ULL << 40)
#define FAKE_VA_BASE 0x600000000000ULL

struct fake_ctx {
    int device;
};

struct fake_alloc {
    bool live;
    int device;
    uint64_t addr, charged; /* bytes */
};

struct fake_range {
    bool live;
    uint64_t addr, size;
};

struct fake_phys {
    bool live;     /* created and memory still held */
    bool released; /* cuMemRelease called; freed when maps reaches 0 */
    int device;
    uint64_t handle, size;
    int maps;
};

struct fake_map {
    bool live;
    bool access; /* cuMemSetAccess done */
    uint64_t addr, size, handle;
};

struct fake_event {
    bool live;
    bool recorded;
    int device;
    int queries; /* since the last record */
};

static struct {
    pthread_mutex_t lock; /* guards everything here */
    bool initialized;
    int n_devices;
    uint64_t used[FAKE_MAX_DEVICES]; /* bytes charged */
    int primary_refs[FAKE_MAX_DEVICES];
    struct fake_ctx ctx[FAKE_MAX_DEVICES];
    uint64_t next_addr[FAKE_MAX_DEVICES];
    uint64_t next_va, next_handle;
    uint64_t misuses;
    struct fake_alloc allocs[FAKE_MAX_OBJECTS];
    struct fake_range ranges[FAKE_MAX_OBJECTS];
    struct fake_phys phys[FAKE_MAX_OBJECTS];
    struct fake_map maps[FAKE_MAX_OBJECTS];
    struct fake_event events[FAKE_MAX_OBJECTS];
} fake = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local struct fake_ctx *ctx_stack[FAKE_STACK];
static _Thread_local int ctx_depth;

static void
lock(void)
{
    pthread_mutex_lock(&fake.lock);
}

static void
unlock(void)
{
    pthread_mutex_unlock(&fake.lock);
}

/* ------------------------------------------------------------------ */
/* Knobs                                                                */
/* ------------------------------------------------------------------ */

/* Does FAKECUDA_FAIL name SYMBOL (or SYMBOL without its "_v2")? */
static bool
fail_injected(const char *symbol)
{
    const char *list = getenv("FAKECUDA_FAIL");
    if (list == NULL)
        return false;
    size_t sn = strlen(symbol);
    size_t base = sn;
    if (sn > 3 && strcmp(symbol + sn - 3, "_v2") == 0)
        base = sn - 3;
    while (*list != '\0') {
        size_t n = strcspn(list, ",");
        if ((n == sn && strncmp(list, symbol, n) == 0) ||
            (n == base && strncmp(list, symbol, n) == 0))
            return true;
        list += n;
        if (*list == ',')
            list++;
    }
    return false;
}

static bool
oom_forced(void)
{
    const char *v = getenv("FAKECUDA_OOM");
    return v != NULL && strcmp(v, "1") == 0;
}

/* The common prologue: injected failure, then initialization. */
static vcu_result
enter(const char *symbol)
{
    if (fail_injected(symbol))
        return VCU_ERROR_UNKNOWN;
    lock();
    bool init = fake.initialized;
    unlock();
    return init ? VCU_SUCCESS : VCU_ERROR_NOT_INITIALIZED;
}

static bool
valid_device(vcu_device dev)
{
    return dev >= 0 && dev < fake.n_devices;
}

/* The device of this thread's current context, or -1 (a misuse). */
static int
current_device(void)
{
    if (ctx_depth == 0) {
        lock();
        fake.misuses++;
        unlock();
        return -1;
    }
    return ctx_stack[ctx_depth - 1]->device;
}

/* Charge BYTES to DEV. Caller holds the lock. */
static vcu_result
charge_locked(int dev, uint64_t bytes)
{
    if (oom_forced() || bytes > FAKE_MEMORY - fake.used[dev])
        return VCU_ERROR_OUT_OF_MEMORY;
    fake.used[dev] += bytes;
    return VCU_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Initialization and devices                                          */
/* ------------------------------------------------------------------ */

vcu_result
cuInit(unsigned int flags)
{
    if (fail_injected("cuInit"))
        return VCU_ERROR_UNKNOWN;
    if (flags != 0)
        return VCU_ERROR_INVALID_VALUE;
    int n = 2;
    const char *v = getenv("FAKECUDA_DEVICES");
    if (v != NULL && v[0] >= '0' && v[0] <= '8' && v[1] == '\0')
        n = v[0] - '0';
    if (n == 0)
        return VCU_ERROR_NO_DEVICE;
    lock();
    if (!fake.initialized) {
        fake.n_devices = n;
        for (int i = 0; i < FAKE_MAX_DEVICES; i++) {
            fake.ctx[i].device = i;
            fake.next_addr[i] = FAKE_ALLOC_BASE + (uint64_t)i * FAKE_ALLOC_WINDOW;
        }
        fake.next_va = FAKE_VA_BASE;
        fake.initialized = true;
    }
    unlock();
    return VCU_SUCCESS;
}

vcu_result
cuDriverGetVersion(int *version)
{
    if (fail_injected("cuDriverGetVersion"))
        return VCU_ERROR_UNKNOWN;
    if (version == NULL)
        return VCU_ERROR_INVALID_VALUE;
    *version = 13000;
    return VCU_SUCCESS;
}

vcu_result
cuDeviceGetCount(int *count)
{
    vcu_result r = enter("cuDeviceGetCount");
    if (r != VCU_SUCCESS)
        return r;
    if (count == NULL)
        return VCU_ERROR_INVALID_VALUE;
    *count = fake.n_devices;
    return VCU_SUCCESS;
}

vcu_result
cuDeviceGet(vcu_device *device, int ordinal)
{
    vcu_result r = enter("cuDeviceGet");
    if (r != VCU_SUCCESS)
        return r;
    if (device == NULL)
        return VCU_ERROR_INVALID_VALUE;
    if (!valid_device(ordinal))
        return VCU_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return VCU_SUCCESS;
}

vcu_result
cuDeviceGetName(char *name, int len, vcu_device dev)
{
    vcu_result r = enter("cuDeviceGetName");
    if (r != VCU_SUCCESS)
        return r;
    if (name == NULL || len <= 0)
        return VCU_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return VCU_ERROR_INVALID_DEVICE;
    static const char n[] = "Fake GPU";
    size_t k = sizeof n < (size_t)len ? sizeof n : (size_t)len;
    memcpy(name, n, k);
    name[k - 1] = '\0';
    return VCU_SUCCESS;
}

static vcu_result
get_uuid(const char *symbol, vcu_uuid *uuid, vcu_device dev)
{
    vcu_result r = enter(symbol);
    if (r != VCU_SUCCESS)
        return r;
    if (uuid == NULL)
        return VCU_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return VCU_ERROR_INVALID_DEVICE;
    static const unsigned char base[16] = {0xfa, 0xce, 0xcd, 0xa0, 0x00, 0x01, 0x40, 0x00,
                                           0x80, 0x00, 0,    0,    0,    0,    0,    0};
    memcpy(uuid->bytes, base, 16);
    uuid->bytes[15] = (char)dev;
    return VCU_SUCCESS;
}

#ifndef FAKECUDA_LEGACY
vcu_result
cuDeviceGetUuid_v2(vcu_uuid *uuid, vcu_device dev)
{
    return get_uuid("cuDeviceGetUuid_v2", uuid, dev);
}
#endif

vcu_result
cuDeviceGetUuid(vcu_uuid *uuid, vcu_device dev)
{
    return get_uuid("cuDeviceGetUuid", uuid, dev);
}

vcu_result
cuDeviceTotalMem_v2(size_t *bytes, vcu_device dev)
{
    vcu_result r = enter("cuDeviceTotalMem_v2");
    if (r != VCU_SUCCESS)
        return r;
    if (bytes == NULL)
        return VCU_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return VCU_ERROR_INVALID_DEVICE;
    *bytes = FAKE_MEMORY;
    return VCU_SUCCESS;
}

vcu_result
cuDeviceGetAttribute(int *value, vcu_device_attribute attrib, vcu_device dev)
{
    vcu_result r = enter("cuDeviceGetAttribute");
    if (r != VCU_SUCCESS)
        return r;
    if (value == NULL)
        return VCU_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return VCU_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case VCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *value = 9;
        return VCU_SUCCESS;
    case VCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *value = 0;
        return VCU_SUCCESS;
    case VCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
#ifdef FAKECUDA_LEGACY
        *value = 0;
#else
        *value = 1;
#endif
        return VCU_SUCCESS;
    default:
        return VCU_ERROR_INVALID_VALUE;
    }
}

/* ------------------------------------------------------------------ */
/* Contexts                                                             */
/* ------------------------------------------------------------------ */

vcu_result
cuDevicePrimaryCtxRetain(vcu_context *ctx, vcu_device dev)
{
    vcu_result r = enter("cuDevicePrimaryCtxRetain");
    if (r != VCU_SUCCESS)
        return r;
    if (ctx == NULL)
        return VCU_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return VCU_ERROR_INVALID_DEVICE;
    lock();
    fake.primary_refs[dev]++;
    unlock();
    *ctx = (vcu_context)(void *)&fake.ctx[dev];
    return VCU_SUCCESS;
}

vcu_result
cuDevicePrimaryCtxRelease_v2(vcu_device dev)
{
    vcu_result r = enter("cuDevicePrimaryCtxRelease_v2");
    if (r != VCU_SUCCESS)
        return r;
    if (!valid_device(dev))
        return VCU_ERROR_INVALID_DEVICE;
    lock();
    if (fake.primary_refs[dev] == 0) {
        fake.misuses++;
        unlock();
        return VCU_ERROR_INVALID_CONTEXT;
    }
    if (--fake.primary_refs[dev] == 0) {
        /* The context is destroyed: its cuMemAlloc memory and events go
        ** with it, as on the real driver. */
        for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
            if (fake.allocs[i].live && fake.allocs[i].device == dev) {
                fake.used[dev] -= fake.allocs[i].charged;
                fake.allocs[i].live = false;
            }
            if (fake.events[i].live && fake.events[i].device == dev)
                fake.events[i].live = false;
        }
    }
    unlock();
    return VCU_SUCCESS;
}

/* CTX as one of ours with a live primary reference, or NULL. */
static struct fake_ctx *
ctx_of(vcu_context ctx)
{
    uintptr_t p = (uintptr_t)(void *)ctx, base = (uintptr_t)fake.ctx;
    if (p < base || p >= base + sizeof fake.ctx || (p - base) % sizeof fake.ctx[0] != 0)
        return NULL;
    struct fake_ctx *c = &fake.ctx[(p - base) / sizeof fake.ctx[0]];
    if (!valid_device(c->device))
        return NULL;
    lock();
    bool alive = fake.primary_refs[c->device] > 0;
    unlock();
    return alive ? c : NULL;
}

vcu_result
cuCtxPushCurrent_v2(vcu_context ctx)
{
    vcu_result r = enter("cuCtxPushCurrent_v2");
    if (r != VCU_SUCCESS)
        return r;
    struct fake_ctx *c = ctx_of(ctx);
    if (c == NULL)
        return VCU_ERROR_INVALID_CONTEXT;
    if (ctx_depth == FAKE_STACK)
        return VCU_ERROR_UNKNOWN;
    ctx_stack[ctx_depth++] = c;
    return VCU_SUCCESS;
}

vcu_result
cuCtxPopCurrent_v2(vcu_context *ctx)
{
    vcu_result r = enter("cuCtxPopCurrent_v2");
    if (r != VCU_SUCCESS)
        return r;
    if (ctx_depth == 0) {
        lock();
        fake.misuses++;
        unlock();
        return VCU_ERROR_INVALID_CONTEXT;
    }
    struct fake_ctx *c = ctx_stack[--ctx_depth];
    if (ctx != NULL)
        *ctx = (vcu_context)(void *)c;
    return VCU_SUCCESS;
}

vcu_result
cuCtxSynchronize(void)
{
    vcu_result r = enter("cuCtxSynchronize");
    if (r != VCU_SUCCESS)
        return r;
    return ctx_depth > 0 ? VCU_SUCCESS : VCU_ERROR_INVALID_CONTEXT;
}

vcu_result
cuCtxGetCurrent(vcu_context *ctx)
{
    vcu_result r = enter("cuCtxGetCurrent");
    if (r != VCU_SUCCESS)
        return r;
    if (ctx == NULL)
        return VCU_ERROR_INVALID_VALUE;
    *ctx = ctx_depth > 0 ? (vcu_context)(void *)ctx_stack[ctx_depth - 1] : NULL;
    return VCU_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* cuMemAlloc                                                           */
/* ------------------------------------------------------------------ */

vcu_result
cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    vcu_result r = enter("cuMemGetInfo_v2");
    if (r != VCU_SUCCESS)
        return r;
    int dev = current_device();
    if (dev < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    if (free_bytes == NULL || total_bytes == NULL)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    *free_bytes = FAKE_MEMORY - fake.used[dev];
    *total_bytes = FAKE_MEMORY;
    unlock();
    return VCU_SUCCESS;
}

#ifndef FAKECUDA_BROKEN /* a driver that lacks a required entry point */
vcu_result
cuMemAlloc_v2(vcu_deviceptr *dptr, size_t bytesize)
{
    vcu_result r = enter("cuMemAlloc_v2");
    if (r != VCU_SUCCESS)
        return r;
    int dev = current_device();
    if (dev < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    if (dptr == NULL || bytesize == 0)
        return VCU_ERROR_INVALID_VALUE;
    if (bytesize > FAKE_MEMORY)
        return VCU_ERROR_OUT_OF_MEMORY;
    uint64_t charged = (bytesize + FAKE_GRANULE - 1) / FAKE_GRANULE * FAKE_GRANULE;
    lock();
    int slot = -1;
    for (int i = 0; i < FAKE_MAX_OBJECTS && slot < 0; i++)
        if (!fake.allocs[i].live)
            slot = i;
    r = slot < 0 ? VCU_ERROR_OUT_OF_MEMORY : charge_locked(dev, charged);
    if (r == VCU_SUCCESS) {
        struct fake_alloc *a = &fake.allocs[slot];
        a->live = true;
        a->device = dev;
        a->addr = fake.next_addr[dev];
        a->charged = charged;
        fake.next_addr[dev] += charged; /* never reused: stale frees show */
        *dptr = a->addr;
    }
    unlock();
    return r;
}
#endif

vcu_result
cuMemFree_v2(vcu_deviceptr dptr)
{
    vcu_result r = enter("cuMemFree_v2");
    if (r != VCU_SUCCESS)
        return r;
    if (current_device() < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    lock();
    r = VCU_ERROR_INVALID_VALUE;
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        struct fake_alloc *a = &fake.allocs[i];
        if (a->live && a->addr == dptr) {
            fake.used[a->device] -= a->charged;
            a->live = false;
            r = VCU_SUCCESS;
            break;
        }
    }
    unlock();
    return r;
}

/* ------------------------------------------------------------------ */
/* Virtual memory                                                      */
/* ------------------------------------------------------------------ */

#ifndef FAKECUDA_LEGACY

static bool
granular(uint64_t n)
{
    return n != 0 && n % FAKE_GRANULE == 0;
}

static bool
valid_prop(const vcu_mem_allocation_prop *prop)
{
    return prop != NULL && prop->type == VCU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == VCU_MEM_LOCATION_TYPE_DEVICE &&
           valid_device(prop->location.id) && prop->win32HandleMetaData == NULL;
}

vcu_result
cuMemGetAllocationGranularity(size_t *granularity, const vcu_mem_allocation_prop *prop,
                              vcu_granularity_flags option)
{
    vcu_result r = enter("cuMemGetAllocationGranularity");
    if (r != VCU_SUCCESS)
        return r;
    if (granularity == NULL || !valid_prop(prop) ||
        (option != VCU_MEM_ALLOC_GRANULARITY_MINIMUM &&
         option != VCU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return VCU_ERROR_INVALID_VALUE;
    *granularity = FAKE_GRANULE;
    return VCU_SUCCESS;
}

vcu_result
cuMemAddressReserve(vcu_deviceptr *ptr, size_t size, size_t alignment, vcu_deviceptr addr,
                    unsigned long long flags)
{
    (void)addr; /* a hint only */
    vcu_result r = enter("cuMemAddressReserve");
    if (r != VCU_SUCCESS)
        return r;
    if (ptr == NULL || !granular(size) || flags != 0 ||
        (alignment != 0 && (alignment & (alignment - 1)) != 0))
        return VCU_ERROR_INVALID_VALUE;
    uint64_t align = alignment > FAKE_GRANULE ? alignment : FAKE_GRANULE;
    lock();
    r = VCU_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        struct fake_range *g = &fake.ranges[i];
        if (g->live)
            continue;
        g->live = true;
        g->addr = (fake.next_va + align - 1) / align * align;
        g->size = size;
        fake.next_va = g->addr + size + FAKE_GRANULE; /* a gap: ranges never touch */
        *ptr = g->addr;
        r = VCU_SUCCESS;
        break;
    }
    unlock();
    return r;
}

/* Does any live map intersect [addr, addr+size)? Caller holds the lock. */
static bool
any_map_in_locked(uint64_t addr, uint64_t size)
{
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        const struct fake_map *m = &fake.maps[i];
        if (m->live && m->addr < addr + size && addr < m->addr + m->size)
            return true;
    }
    return false;
}

vcu_result
cuMemAddressFree(vcu_deviceptr ptr, size_t size)
{
    vcu_result r = enter("cuMemAddressFree");
    if (r != VCU_SUCCESS)
        return r;
    lock();
    r = VCU_ERROR_INVALID_VALUE;
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        struct fake_range *g = &fake.ranges[i];
        if (g->live && g->addr == ptr && g->size == size) {
            if (!any_map_in_locked(ptr, size)) { /* strict: unmap first */
                g->live = false;
                r = VCU_SUCCESS;
            }
            break;
        }
    }
    unlock();
    return r;
}

vcu_result
cuMemCreate(vcu_mem_handle *handle, size_t size, const vcu_mem_allocation_prop *prop,
            unsigned long long flags)
{
    vcu_result r = enter("cuMemCreate");
    if (r != VCU_SUCCESS)
        return r;
    if (handle == NULL || !granular(size) || !valid_prop(prop) || flags != 0 ||
        prop->requestedHandleTypes != VCU_MEM_HANDLE_TYPE_NONE)
        return VCU_ERROR_INVALID_VALUE;
    if (size > FAKE_MEMORY)
        return VCU_ERROR_OUT_OF_MEMORY;
    lock();
    int slot = -1;
    for (int i = 0; i < FAKE_MAX_OBJECTS && slot < 0; i++)
        if (!fake.phys[i].live)
            slot = i;
    r = slot < 0 ? VCU_ERROR_OUT_OF_MEMORY : charge_locked(prop->location.id, size);
    if (r == VCU_SUCCESS) {
        struct fake_phys *p = &fake.phys[slot];
        memset(p, 0, sizeof *p);
        p->live = true;
        p->device = prop->location.id;
        p->size = size;
        p->handle = ++fake.next_handle;
        *handle = p->handle;
    }
    unlock();
    return r;
}

/* The live, unreleased handle H, or NULL. Caller holds the lock. */
static struct fake_phys *
phys_locked(vcu_mem_handle h)
{
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++)
        if (fake.phys[i].live && !fake.phys[i].released && fake.phys[i].handle == h)
            return &fake.phys[i];
    return NULL;
}

/* Drop P's memory once it is released and mapped nowhere. */
static void
phys_settle_locked(struct fake_phys *p)
{
    if (p->released && p->maps == 0) {
        fake.used[p->device] -= p->size;
        p->live = false;
    }
}

vcu_result
cuMemRelease(vcu_mem_handle handle)
{
    vcu_result r = enter("cuMemRelease");
    if (r != VCU_SUCCESS)
        return r;
    lock();
    struct fake_phys *p = phys_locked(handle);
    if (p != NULL) {
        p->released = true;
        phys_settle_locked(p);
    }
    unlock();
    return p != NULL ? VCU_SUCCESS : VCU_ERROR_INVALID_VALUE;
}

/* Is [addr, addr+size) inside one reservation? Caller holds the lock. */
static bool
reserved_locked(uint64_t addr, uint64_t size)
{
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        const struct fake_range *g = &fake.ranges[i];
        if (g->live && addr >= g->addr && addr + size <= g->addr + g->size)
            return true;
    }
    return false;
}

vcu_result
cuMemMap(vcu_deviceptr ptr, size_t size, size_t offset, vcu_mem_handle handle,
         unsigned long long flags)
{
    vcu_result r = enter("cuMemMap");
    if (r != VCU_SUCCESS)
        return r;
    if (!granular(size) || ptr % FAKE_GRANULE != 0 || offset != 0 || flags != 0)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    struct fake_phys *p = phys_locked(handle);
    int slot = -1;
    for (int i = 0; i < FAKE_MAX_OBJECTS && slot < 0; i++)
        if (!fake.maps[i].live)
            slot = i;
    if (p == NULL || size > p->size || slot < 0 || !reserved_locked(ptr, size) ||
        any_map_in_locked(ptr, size)) {
        unlock();
        return VCU_ERROR_INVALID_VALUE;
    }
    struct fake_map *m = &fake.maps[slot];
    m->live = true;
    m->access = false;
    m->addr = ptr;
    m->size = size;
    m->handle = handle;
    p->maps++;
    unlock();
    return VCU_SUCCESS;
}

/*
** Is [addr, addr+size) exactly a union of whole live maps (no holes, no
** map sticking out)? Caller holds the lock.
*/
static bool
exactly_mapped_locked(uint64_t addr, uint64_t size)
{
    uint64_t covered = 0;
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        const struct fake_map *m = &fake.maps[i];
        if (!m->live || m->addr >= addr + size || addr >= m->addr + m->size)
            continue;
        if (m->addr < addr || m->addr + m->size > addr + size)
            return false;
        covered += m->size;
    }
    return covered == size;
}

vcu_result
cuMemSetAccess(vcu_deviceptr ptr, size_t size, const vcu_mem_access_desc *desc,
               size_t count)
{
    vcu_result r = enter("cuMemSetAccess");
    if (r != VCU_SUCCESS)
        return r;
    if (desc == NULL || count == 0 || !granular(size))
        return VCU_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < count; k++)
        if (desc[k].location.type != VCU_MEM_LOCATION_TYPE_DEVICE ||
            !valid_device(desc[k].location.id) ||
            (desc[k].flags != VCU_MEM_ACCESS_FLAGS_PROT_NONE &&
             desc[k].flags != VCU_MEM_ACCESS_FLAGS_PROT_READ &&
             desc[k].flags != VCU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return VCU_ERROR_INVALID_VALUE;
    lock();
    bool ok = exactly_mapped_locked(ptr, size);
    for (int i = 0; ok && i < FAKE_MAX_OBJECTS; i++) {
        struct fake_map *m = &fake.maps[i];
        if (m->live && m->addr >= ptr && m->addr < ptr + size)
            m->access = true;
    }
    unlock();
    return ok ? VCU_SUCCESS : VCU_ERROR_INVALID_VALUE;
}

vcu_result
cuMemUnmap(vcu_deviceptr ptr, size_t size)
{
    vcu_result r = enter("cuMemUnmap");
    if (r != VCU_SUCCESS)
        return r;
    lock();
    if (!granular(size) || !exactly_mapped_locked(ptr, size)) {
        unlock();
        return VCU_ERROR_INVALID_VALUE;
    }
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        struct fake_map *m = &fake.maps[i];
        if (!m->live || m->addr < ptr || m->addr >= ptr + size)
            continue;
        m->live = false;
        for (int k = 0; k < FAKE_MAX_OBJECTS; k++) {
            struct fake_phys *p = &fake.phys[k];
            if (p->live && p->handle == m->handle) {
                p->maps--;
                phys_settle_locked(p);
            }
        }
    }
    unlock();
    return VCU_SUCCESS;
}

#endif /* !FAKECUDA_LEGACY */

/* ------------------------------------------------------------------ */
/* Events                                                               */
/* ------------------------------------------------------------------ */

/* EVENT as a live event, or NULL. Caller holds the lock. */
static struct fake_event *
event_locked(vcu_event event)
{
    uintptr_t p = (uintptr_t)(void *)event, base = (uintptr_t)fake.events;
    if (p < base || p >= base + sizeof fake.events ||
        (p - base) % sizeof fake.events[0] != 0)
        return NULL;
    struct fake_event *e = &fake.events[(p - base) / sizeof fake.events[0]];
    return e->live ? e : NULL;
}

vcu_result
cuEventCreate(vcu_event *event, unsigned int flags)
{
    vcu_result r = enter("cuEventCreate");
    if (r != VCU_SUCCESS)
        return r;
    int dev = current_device();
    if (dev < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    if (event == NULL || (flags & ~0x7u) != 0)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    r = VCU_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        struct fake_event *e = &fake.events[i];
        if (e->live)
            continue;
        e->live = true;
        e->recorded = false;
        e->device = dev;
        e->queries = 0;
        *event = (vcu_event)(void *)e;
        r = VCU_SUCCESS;
        break;
    }
    unlock();
    return r;
}

vcu_result
cuEventRecord(vcu_event event, vcu_stream stream)
{
    (void)stream; /* any stream: the fake has no work to order */
    vcu_result r = enter("cuEventRecord");
    if (r != VCU_SUCCESS)
        return r;
    if (current_device() < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    lock();
    struct fake_event *e = event_locked(event);
    if (e != NULL) {
        e->recorded = true;
        e->queries = 0;
    }
    unlock();
    return e != NULL ? VCU_SUCCESS : VCU_ERROR_INVALID_HANDLE;
}

vcu_result
cuEventQuery(vcu_event event)
{
    vcu_result r = enter("cuEventQuery");
    if (r != VCU_SUCCESS)
        return r;
    lock();
    struct fake_event *e = event_locked(event);
    if (e == NULL)
        r = VCU_ERROR_INVALID_HANDLE;
    else if (e->recorded && ++e->queries <= 2)
        r = VCU_ERROR_NOT_READY; /* the work "runs" for two queries */
    unlock();
    return r;
}

vcu_result
cuEventDestroy_v2(vcu_event event)
{
    vcu_result r = enter("cuEventDestroy_v2");
    if (r != VCU_SUCCESS)
        return r;
    lock();
    struct fake_event *e = event_locked(event);
    if (e != NULL)
        e->live = false;
    unlock();
    return e != NULL ? VCU_SUCCESS : VCU_ERROR_INVALID_HANDLE;
}

/* ------------------------------------------------------------------ */
/* Error texts                                                          */
/* ------------------------------------------------------------------ */

#ifndef FAKECUDA_LEGACY

static const struct {
    vcu_result code;
    const char *name, *text;
} fake_errors[] = {
    {VCU_SUCCESS, "CUDA_SUCCESS", "no error"},
    {VCU_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {VCU_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {VCU_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {VCU_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {VCU_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {VCU_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {VCU_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {VCU_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {VCU_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {VCU_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static vcu_result
error_text(const char *symbol, vcu_result error, const char **text, bool name)
{
    if (fail_injected(symbol))
        return VCU_ERROR_UNKNOWN;
    if (text == NULL)
        return VCU_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof fake_errors / sizeof fake_errors[0]; i++)
        if (fake_errors[i].code == error) {
            *text = name ? fake_errors[i].name : fake_errors[i].text;
            return VCU_SUCCESS;
        }
    *text = NULL;
    return VCU_ERROR_INVALID_VALUE;
}

vcu_result
cuGetErrorName(vcu_result error, const char **text)
{
    return error_text("cuGetErrorName", error, text, true);
}

vcu_result
cuGetErrorString(vcu_result error, const char **text)
{
    return error_text("cuGetErrorString", error, text, false);
}

#endif /* !FAKECUDA_LEGACY */

/* ------------------------------------------------------------------ */
/* Test helpers                                                         */
/* ------------------------------------------------------------------ */

/* Contexts pushed and not popped on the calling thread. */
int
fakecuda_ctx_depth(void)
{
    return ctx_depth;
}

/* Misuses seen so far (see the top of the file). */
uint64_t
fakecuda_misuses(void)
{
    lock();
    uint64_t n = fake.misuses;
    unlock();
    return n;
}

/* Allocations, reservations, physical handles, maps and events alive. */
uint64_t
fakecuda_live_objects(void)
{
    uint64_t n = 0;
    lock();
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++)
        n += (uint64_t)fake.allocs[i].live + fake.ranges[i].live + fake.phys[i].live +
             fake.maps[i].live + fake.events[i].live;
    unlock();
    return n;
}

/* Bytes charged to DEV (0 for a bad DEV). */
uint64_t
fakecuda_used(int dev)
{
    if (dev < 0 || dev >= FAKE_MAX_DEVICES)
        return 0;
    lock();
    uint64_t n = fake.used[dev];
    unlock();
    return n;
}

/* References held on DEV's primary context. */
int
fakecuda_primary_refs(int dev)
{
    if (dev < 0 || dev >= FAKE_MAX_DEVICES)
        return 0;
    lock();
    int n = fake.primary_refs[dev];
    unlock();
    return n;
}
