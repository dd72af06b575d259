/* SPDX-License-Identifier: MIT */
/*
** hooks_pool.c -- the accounting of stream-ordered allocation: what a
** pool of the driver holds is charged, not the allocations made from it
** (the steps of the rows of PRELOAD_HOOKS_POOL in hooks.h; preload.h).
**
** Measured on an H100 (driver 580; tests/gpu/probe_rounding.c): NVML's
** per-process figure is the pool's CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
** exactly. The reserve grows at the allocating call (not later, on the
** stream) in chunks of 32 MiB, by at most the allocation rounded up to a
** chunk; it does not shrink at cuMemFreeAsync, and at a synchronization
** it gives back only what is above the pool's release threshold (with
** the threshold at UINT64_MAX it keeps everything until
** cuMemPoolTrimTo). So each allocation is charged ahead its bytes rounded
** up to POOL_CHUNK in its pool's charged_pool (preload.h), and the pool is
** settled -- its reserve read and charged exactly -- once POOL_SETTLE_BYTES
** of such charges have completed, at cuMemPoolTrimTo, at cuMemGetInfo
** (which shows what the pools hold, not what was charged ahead) and
** before any refusal on its device (reclaim_stale). An allocation
** made while its stream captures a graph reserves nothing (it becomes an
** allocation node, charged when the graph is launched: hooks_graph.c);
** when its charge ahead would be refused, the stream is asked, and a
** capturing one goes on uncharged.
**
** The pools are registered as they are met: cuMemPoolCreate's with the
** device of their location (a pool of host memory is not charged), a
** device's current pool (cuDeviceGetMemPool, changed only through
** cuDeviceSetMemPool and cuMemSetMemPool, both hooked), and any other
** pool an allocation names (on the device whose default or current pool
** it is, else the current device). A pool destroyed while allocations
** from it live keeps its memory until they are freed, which the library
** does not follow: its charge then stays until the process ends.
** Pools imported from another process (cuMemPoolImportFromShareableHandle)
** cannot allocate, and the memory of a pointer imported from one is its
** exporter's (as IPC's): neither is charged here.
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "driver/cuda_api.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"

#define POOL_CHUNK (32ULL << 20)           /* the reserve's growth unit, measured */
#define POOL_SETTLE_BYTES (4 * POOL_CHUNK) /* completed charges ahead between settles */
#define POOL_MAX 256                       /* pools followed per process */

/* ------------------------------------------------------------------ */
/* A pool the driver reports the reserve of (preload.h)                 */
/* ------------------------------------------------------------------ */

static void
cp_lock(struct charged_pool *cp)
{
    while (__atomic_exchange_n(&cp->lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&cp->lock, __ATOMIC_RELAXED))
            ;
}

static void
cp_unlock(struct charged_pool *cp)
{
    __atomic_store_n(&cp->lock, 0, __ATOMIC_RELEASE);
}

bool
cpool_ahead(struct hook_call *c, struct charged_pool *cp, uint64_t bytes,
            bool (*excuse)(void *arg), void *arg)
{
    struct preload_device *d = NULL;
    c->r = reserve_excused(c->id, cp->ord, bytes, c->asked, &d, excuse, arg);
    if (c->r != VCU_SUCCESS) {
        (void)trace_if_refused(c->r, cp->ord, c->asked);
        return false;
    }
    if (d == NULL)
        return true; /* excused: nothing charged, nothing to settle */
    cp_lock(cp);
    cp->inflight += bytes;
    cp_unlock(cp);
    c->d = d;
    c->ord = cp->ord;
    c->bytes = bytes;
    c->pool = cp;
    return true;
}

void
cpool_done(struct charged_pool *cp, struct preload_device *d, uint64_t bytes, bool done)
{
    cp_lock(cp);
    cp->inflight -= bytes;
    if (done) {
        cp->unsettled += bytes;
        cp->gen++;
    }
    cp_unlock(cp);
    if (!done)
        unreserve(d, bytes);
}

bool
cpool_settle(struct charged_pool *cp, bool (*read)(const void *what, uint64_t *reserve),
             const void *what)
{
    if (cp->ord < 0)
        return false;
    struct preload_device *d = NULL;
    if (device_get(cp->ord, &d) != VCU_SUCCESS)
        return false;
    cp_lock(cp);
    uint64_t gen = cp->gen;
    cp_unlock(cp);
    uint64_t now;
    if (!read(what, &now))
        return false;
    cp_lock(cp);
    if (cp->gen != gen) { /* a call completed meanwhile: the next settle decides */
        cp_unlock(cp);
        return false;
    }
    uint64_t had = cp->settled + cp->unsettled;
    cp->settled = now;
    cp->unsettled = 0;
    cp_unlock(cp);
    if (now > had)
        force_charge(d, now - had); /* held already: more than charged ahead */
    else if (now < had)
        unreserve(d, had - now);
    return now < had;
}

/* Does CP charge anything but calls in flight (a synchronization may
** have shrunk the reserve since it was read)? */
static bool
cpool_holds(struct charged_pool *cp)
{
    cp_lock(cp);
    bool holds = cp->unsettled > 0 || cp->settled > 0;
    cp_unlock(cp);
    return holds;
}

/* ------------------------------------------------------------------ */
/* The stream-ordered pools                                             */
/* ------------------------------------------------------------------ */

struct pool_slot {
    vcu_mem_pool pool; /* NULL: a free slot (atomic) */
    bool kept;         /* destroyed with allocations alive: charged until the end */
    struct charged_pool cp;
};

static struct {
    int lock;                                  /* registration: a spin word */
    int n;                                     /* slots ever used (atomic) */
    vcu_mem_pool current[PRELOAD_MAX_DEVICES]; /* each ordinal's current pool (atomic);
                                                  NULL: not asked yet */
    struct pool_slot slot[POOL_MAX];
} pools;

static void
pools_lock(void)
{
    while (__atomic_exchange_n(&pools.lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&pools.lock, __ATOMIC_RELAXED))
            ;
}

static void
pools_unlock(void)
{
    __atomic_store_n(&pools.lock, 0, __ATOMIC_RELEASE);
}

/* The slot of POOL (not one kept after its destruction), or NULL. */
static struct pool_slot *
pool_find(vcu_mem_pool pool)
{
    int n = __atomic_load_n(&pools.n, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        struct pool_slot *s = &pools.slot[i];
        if (__atomic_load_n(&s->pool, __ATOMIC_ACQUIRE) == pool && !s->kept)
            return s;
    }
    return NULL;
}

/* The driver's reserve of the pool WHAT (a struct pool_slot). */
static bool
pool_read(const void *what, uint64_t *reserve)
{
    static void *fn; /* cuMemPoolGetAttribute (atomic) */
    void *p = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);
    if (p == NULL) {
        p = interpose_lib_sym(HOOK_CUDA, "cuMemPoolGetAttribute");
        if (p == NULL)
            return false;
        __atomic_store_n(&fn, p, __ATOMIC_RELEASE);
    }
    vcu_pfn_cuMemPoolGetAttribute get;
    memcpy(&get, &p, sizeof p);
    const struct pool_slot *s = what;
    vcu_uint64 v = 0;
    if (get(s->pool, VCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) != VCU_SUCCESS)
        return false;
    *reserve = v;
    return true;
}

/*
** POOL's slot, made for it on ORD (-1: not device memory) if it has none;
** its reserve then is charged (a pool met for the first time may already
** hold memory). NULL when POOL_MAX pools are followed.
*/
static struct pool_slot *
pool_register(vcu_mem_pool pool, int ord)
{
    struct pool_slot *s = pool_find(pool);
    if (s != NULL)
        return s;
    pools_lock();
    s = pool_find(pool);
    if (s == NULL) {
        int n = __atomic_load_n(&pools.n, __ATOMIC_RELAXED);
        for (int i = 0; i < n && s == NULL; i++)
            if (__atomic_load_n(&pools.slot[i].pool, __ATOMIC_RELAXED) == NULL)
                s = &pools.slot[i];
        if (s == NULL && n < POOL_MAX) {
            s = &pools.slot[n];
            __atomic_store_n(&pools.n, n + 1, __ATOMIC_RELEASE);
        }
        if (s != NULL) {
            memset(&s->cp, 0, sizeof s->cp);
            s->cp.ord = ord;
            s->kept = false;
            __atomic_store_n(&s->pool, pool, __ATOMIC_RELEASE);
        }
    }
    pools_unlock();
    if (s != NULL)
        (void)cpool_settle(&s->cp, pool_read, s);
    return s;
}

/* The driver's function NAME (a vcu_pfn_ type of SIZE bytes) into *FP. */
static bool
driver_sym(const char *name, void *fp, size_t size)
{
    void *p = interpose_lib_sym(HOOK_CUDA, name);
    if (p == NULL)
        return false;
    memcpy(fp, &p, size);
    return true;
}

/* ORD's current pool, asked once (cuDeviceGetMemPool). */
static vcu_mem_pool
current_pool(int ord)
{
    vcu_mem_pool pool = __atomic_load_n(&pools.current[ord], __ATOMIC_ACQUIRE);
    if (pool != NULL)
        return pool;
    vcu_pfn_cuDeviceGetMemPool get;
    if (!driver_sym("cuDeviceGetMemPool", &get, sizeof get) ||
        get(&pool, ord) != VCU_SUCCESS)
        return NULL;
    vcu_mem_pool none = NULL;
    __atomic_compare_exchange_n(&pools.current[ord], &none, pool, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    return __atomic_load_n(&pools.current[ord], __ATOMIC_ACQUIRE);
}

/* The ordinal POOL, met in an allocation, belongs to: the device whose
** default or current pool it is, else the current device. */
static int
pool_device(vcu_mem_pool pool)
{
    vcu_pfn_cuDeviceGetCount count;
    vcu_pfn_cuDeviceGetDefaultMemPool get_default;
    int n = 0, ord = -1;
    if (driver_sym("cuDeviceGetCount", &count, sizeof count) &&
        count(&n) == VCU_SUCCESS &&
        driver_sym("cuDeviceGetDefaultMemPool", &get_default, sizeof get_default))
        for (int i = 0; i < n && i < PRELOAD_MAX_DEVICES; i++) {
            vcu_mem_pool p = NULL;
            if ((get_default(&p, i) == VCU_SUCCESS && p == pool) ||
                current_pool(i) == pool)
                return i;
        }
    return current_device(&ord) == VCU_SUCCESS ? ord : -1;
}

/* Is STREAM (a vcu_stream) capturing a graph? Then an allocation on it
** reserves nothing now. */
static bool
capturing(void *stream)
{
    vcu_pfn_cuStreamIsCapturing is_capturing;
    vcu_stream_capture_status st = VCU_STREAM_CAPTURE_STATUS_NONE;
    return driver_sym("cuStreamIsCapturing", &is_capturing, sizeof is_capturing) &&
           is_capturing((vcu_stream)stream, &st) == VCU_SUCCESS &&
           st == VCU_STREAM_CAPTURE_STATUS_ACTIVE;
}

/* BYTES from the pool of slot S on STREAM, charged ahead (a pool of host
** memory, or one the library cannot follow, goes uncharged). */
static bool
pooled_ahead(struct hook_call *c, struct pool_slot *s, size_t bytes, vcu_stream stream)
{
    c->asked = bytes;
    if (s == NULL || s->cp.ord < 0)
        return true;
    uint64_t ahead = (bytes + POOL_CHUNK - 1) / POOL_CHUNK * POOL_CHUNK;
    if (ahead < bytes)
        return true; /* the driver refuses such a size */
    return cpool_ahead(c, &s->cp, ahead, capturing, (void *)stream);
}

/* cuMemAllocAsync and its twin: the current device's current pool. */
static bool
async_reserve(struct hook_call *c, vcu_deviceptr *dptr, size_t bytesize,
              vcu_stream stream)
{
    int ord;
    if (dptr == NULL || bytesize == 0 || current_device(&ord) != VCU_SUCCESS ||
        ord >= PRELOAD_MAX_DEVICES)
        return true; /* the driver's error */
    vcu_mem_pool pool = current_pool(ord);
    return pooled_ahead(c, pool != NULL ? pool_register(pool, ord) : NULL, bytesize,
                        stream);
}

/* cuMemAllocFromPoolAsync and its twin. */
static bool
from_pool_reserve(struct hook_call *c, vcu_deviceptr *dptr, size_t bytesize,
                  vcu_mem_pool pool, vcu_stream stream)
{
    if (dptr == NULL || bytesize == 0 || pool == NULL)
        return true;
    struct pool_slot *s = pool_find(pool);
    if (s == NULL)
        s = pool_register(pool, pool_device(pool));
    return pooled_ahead(c, s, bytesize, stream);
}

static vcu_result
pooled_granted(struct hook_call *c, vcu_deviceptr *dptr, ...)
{
    struct charged_pool *cp = c->pool;
    bool ok = c->r == VCU_SUCCESS;
    if (cp != NULL) {
        cpool_done(cp, c->d, c->bytes, ok);
        bool settle;
        struct pool_slot *s =
            (struct pool_slot *)(void *)((char *)cp - offsetof(struct pool_slot, cp));
        cp_lock(cp);
        settle = cp->unsettled >= POOL_SETTLE_BYTES;
        cp_unlock(cp);
        if (settle)
            (void)cpool_settle(cp, pool_read, s);
    }
    if (ok && c->asked > 0) {
        int ord = -1;
        if (c->d != NULL)
            ord = c->ord;
        else if (current_device(&ord) != VCU_SUCCESS)
            ord = -1;
        if (ord >= 0)
            trace_pooled(ord, *dptr, c->asked);
    }
    if (!ok)
        return trace_if_refused((vcu_result)c->r, c->ord, c->asked);
    return (vcu_result)c->r;
}

/* ------------------------------------------------------------------ */
/* The pools' own calls                                                 */
/* ------------------------------------------------------------------ */

static vcu_result
pool_created(struct hook_call *c, vcu_mem_pool *pool, const vcu_mem_pool_props *props)
{
    if (c->r != VCU_SUCCESS || pool == NULL || props == NULL)
        return c->r;
    int ord = props->location.type == VCU_MEM_LOCATION_TYPE_DEVICE &&
                      props->location.id >= 0 && props->location.id < PRELOAD_MAX_DEVICES
                  ? props->location.id
                  : -1;
    if (pool_register(*pool, ord) != NULL)
        return c->r;
    vcu_pfn_cuMemPoolDestroy destroy;
    if (driver_sym("cuMemPoolDestroy", &destroy, sizeof destroy))
        destroy(*pool);
    char line[160];
    snprintf(
        line, sizeof line,
        "vram: cuMemPoolCreate refused: this process already has %d memory pools, the "
        "most the quota follows",
        POOL_MAX);
    say(line);
    return VCU_ERROR_OUT_OF_MEMORY;
}

/* Before the destruction: are allocations from it alive (its memory then
** stays)? Kept in C->mask. */
static bool
pool_destroying(struct hook_call *c, vcu_mem_pool pool)
{
    vcu_pfn_cuMemPoolGetAttribute get;
    vcu_uint64 used = 1; /* not known: as if alive */
    if (pool_find(pool) != NULL && driver_sym("cuMemPoolGetAttribute", &get, sizeof get))
        (void)get(pool, VCU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
    c->mask = used > 0;
    return true;
}

static vcu_result
pool_destroyed(struct hook_call *c, vcu_mem_pool pool)
{
    struct pool_slot *s = pool_find(pool);
    if (c->r != VCU_SUCCESS || s == NULL)
        return c->r;
    struct preload_device *d = NULL;
    if (c->mask || s->cp.ord < 0 || device_get(s->cp.ord, &d) != VCU_SUCCESS) {
        s->kept = true; /* charged until the process ends */
        return c->r;
    }
    cp_lock(&s->cp);
    uint64_t had = s->cp.settled + s->cp.unsettled;
    s->cp.settled = s->cp.unsettled = 0;
    cp_unlock(&s->cp);
    unreserve(d, had);
    __atomic_store_n(&s->pool, NULL, __ATOMIC_RELEASE);
    return c->r;
}

static vcu_result
pool_trimmed(struct hook_call *c, vcu_mem_pool pool, ...)
{
    struct pool_slot *s = pool_find(pool);
    if (c->r == VCU_SUCCESS && s != NULL)
        (void)cpool_settle(&s->cp, pool_read, s);
    return c->r;
}

static vcu_result
device_pool_set(struct hook_call *c, vcu_device dev, vcu_mem_pool pool)
{
    if (c->r == VCU_SUCCESS && dev >= 0 && dev < PRELOAD_MAX_DEVICES) {
        __atomic_store_n(&pools.current[dev], pool, __ATOMIC_RELEASE);
        (void)pool_register(pool, dev);
    }
    return c->r;
}

static vcu_result
location_pool_set(struct hook_call *c, vcu_mem_location *location,
                  vcu_mem_allocation_type type, vcu_mem_pool pool)
{
    if (location != NULL && location->type == VCU_MEM_LOCATION_TYPE_DEVICE &&
        type == VCU_MEM_ALLOCATION_TYPE_PINNED)
        return device_pool_set(c, location->id, pool);
    return c->r;
}

/* ------------------------------------------------------------------ */
/* What the library charged ahead and no longer needs                   */
/* ------------------------------------------------------------------ */

bool
reclaim_stale(int ord)
{
    bool gave = false;
    int n = __atomic_load_n(&pools.n, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        struct pool_slot *s = &pools.slot[i];
        if (__atomic_load_n(&s->pool, __ATOMIC_ACQUIRE) != NULL && !s->kept &&
            s->cp.ord == ord)
            gave |= cpool_settle(&s->cp, pool_read, s);
    }
    gave |= graph_pool_settle(ord);
    if (ord >= 0 && ord < PRELOAD_MAX_DEVICES &&
        __atomic_load_n(&P.dev[ord].ready, __ATOMIC_ACQUIRE))
        gave |= spare_reclaim(&P.dev[ord]);
    return gave;
}

void
pools_refresh(int ord)
{
    int n = __atomic_load_n(&pools.n, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        struct pool_slot *s = &pools.slot[i];
        if (__atomic_load_n(&s->pool, __ATOMIC_ACQUIRE) != NULL && !s->kept &&
            s->cp.ord == ord && cpool_holds(&s->cp))
            (void)cpool_settle(&s->cp, pool_read, s);
    }
    if (ord >= 0 && ord < PRELOAD_MAX_DEVICES && cpool_holds(&P.dev[ord].graph))
        (void)graph_pool_settle(ord);
}

void
pools_fork_child(void)
{
    memset(&pools, 0, sizeof pools); /* the child holds no memory of its own yet */
}

/* The exported hooks, written from their rows in hooks.h. */
PRELOAD_HOOKS_POOL(PRELOAD_HOOK_DEFINE)
