/* SPDX-License-Identifier: MIT */
/*
** fakecuda.c -- a fake CUDA driver, built as libcuda.so.1, so that the CUDA
** backend (src/backend/cuda.c) is tested where there is no GPU (CI).
**
** It implements every entry point of VCU_ENTRY_POINTS and
** VCU_EXTRA_ENTRY_POINTS (its prototypes are generated from those lists, so
** a signature that drifts fails to compile) with a small in-process model
** that is strict where the real driver is:
**   - 2 devices (FAKECUDA_DEVICES=0..8) "Fake GPU", 1 GiB each
**     (FAKECUDA_MEMORY=8G etc.), fixed UUIDs
**     GPU-facecda0-0001-4000-8000-00000000000N (N the physical index),
**     cc 9.0, VM granularity 2 MiB; everything but cuDriverGetVersion,
**     cuGetProcAddress and the error texts fails with
**     CUDA_ERROR_NOT_INITIALIZED before cuInit;
**   - CUDA_VISIBLE_DEVICES as the real driver reads it: a comma list of
**     indices or UUIDs (a unique prefix will do) that picks and orders the
**     devices; the first entry that names no device (or one already
**     listed) ends the list;
**   - cuGetProcAddress (v1 and v2) resolving the fake's own entry points by
**     base name and cudaVersion ("cuMemAlloc" from 3020 is cuMemAlloc_v2;
**     before, the v1 cuMemAlloc, which only says CUDA_ERROR_NOT_SUPPORTED),
**     the _ptsz variant for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
**     and itself for "cuGetProcAddress" (v2 from 12000). Its table holds
**     its own addresses: the library is linked -Bsymbolic, so an
**     interposer's exports never leak into its answers, as with the real
**     driver;
**   - a context stack per thread; calls that need a context (cuMemAlloc,
**     cuMemGetInfo, events...) fail without one and act on the device of
**     the current one; popping an empty stack fails; primary contexts
**     only (cuCtxDestroy refuses them, a misuse); cuCtxGetDevice calls are
**     counted (fakecuda_ctx_get_device_calls);
**   - allocations (cuMemAlloc_v2, Pitch, Managed, Async and FromPoolAsync
**     with their _ptsz twins, arrays, cuMemCreate) with accounting in 2 MiB
**     granules, charged to the physical device (OOM when full). The
**     counts -- bytes in use and the high-water mark per physical device --
**     live in the MAP_SHARED file FAKECUDA_SHARED names, so that several
**     processes share one device (else in the process); fakecuda_used and
**     fakecuda_peak read them;
**   - virtual memory with real bookkeeping: reservations, handles, maps that
**     must lie inside a reservation, be granule-aligned and not overlap;
**     access set only on fully mapped ranges; memory returned when a
**     handle's last reference (cuMemCreate, cuMemRetainAllocationHandle)
**     is released and its last mapping goes;
**   - page-locked host memory (cuMemAllocHost_v2, cuMemHostAlloc,
**     cuMemHostRegister_v2 and their frees), real memory of the process,
**     never charged to a device;
**   - events that complete on their third query (two NOT_READY first);
**   - graph capture: fakecuda_capture(stream) starts a global-mode capture
**     on STREAM; the calls it forbids fail and count as misuses (see
**     "Graph capture" below);
**   - knobs: FAKECUDA_FAIL=name[,name...] makes those entry points fail
**     with CUDA_ERROR_UNKNOWN ("cuMemAlloc" or "cuMemAlloc_v2" both name
**     cuMemAlloc_v2); FAKECUDA_OOM=1 makes every allocation fail with
**     CUDA_ERROR_OUT_OF_MEMORY; FAKECUDA_NESTED=1 makes cuMemAllocManaged
**     allocate by calling cuMemAlloc_v2 through the global symbol, as a
**     driver whose entry points call each other would (an interposer sees
**     the inner call); FAKECUDA_EVICT=BYTES makes every cuMem* entry point
**     write one byte in each cache line of a BYTES buffer, as the real
**     driver's calls leave the caller's cache lines cold (a model of what
**     the hooks' own memory accesses cost after a driver call: the
**     hooks' cost per call on the H200 is of the order of BYTES 1000000).
**     All are read at each call.
** A misuse (a call without a context, a pop of an empty stack, a release
** without a retain) also counts in fakecuda_misuses(), which tests check.
**
** Built three times (tests/CMakeLists.txt): the full driver; with
** FAKECUDA_LEGACY, an old driver without cuDeviceGetUuid_v2, the VM calls
** and the error texts; with FAKECUDA_BROKEN, one without cuMemAlloc_v2.
**
** Test code: getenv is allowed here (docs/STYLE.md's habit 6 covers the library).
*/
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/cuda_api.h"

#define FAKE_API __attribute__((visibility("default")))

/* The driver's entry points, declared from the lists. */
#define X(field, symbol, fallback, need, ret, params) FAKE_API ret symbol params;
VCU_ENTRY_POINTS(X, VCU_OWN_TYPE)
VCU_EXTRA_ENTRY_POINTS(X, VCU_OWN_TYPE)
VCU_GET_PROC_ADDRESS_V1(X, VCU_OWN_TYPE)
#undef X
FAKE_API vcu_result cuDeviceGetUuid(vcu_uuid *uuid, vcu_device dev); /* the v1 name */
/* For the fake NVML (tests/preload/fakenvml.c): this process's use of
** physical device P, bytes, as NVML's per-process figure would show it. */
FAKE_API unsigned long long fakecuda_process_used(unsigned int p);
/* The v1 cuMemAlloc (32-bit CUdeviceptr and size, before CUDA 3.2). */
FAKE_API vcu_result cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
/* The per-thread-default-stream twins: the same types as their base. */
FAKE_API vcu_result cuMemAllocAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize,
                                         vcu_stream stream);
FAKE_API vcu_result cuMemAllocFromPoolAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize,
                                                 vcu_mem_pool pool, vcu_stream stream);
FAKE_API vcu_result cuMemFreeAsync_ptsz(vcu_deviceptr dptr, vcu_stream stream);

/* Test helpers, found with dlsym. */
FAKE_API int fakecuda_ctx_depth(void);
FAKE_API uint64_t fakecuda_ctx_get_device_calls(void);
FAKE_API uint64_t fakecuda_misuses(void);
FAKE_API uint64_t fakecuda_live_objects(void);
FAKE_API uint64_t fakecuda_used(int dev);
FAKE_API uint64_t fakecuda_peak(int dev);
FAKE_API int fakecuda_primary_refs(int dev);
FAKE_API void fakecuda_capture(void *stream);

#define FAKE_MAX_DEVICES 8
#define FAKE_MEMORY (1ULL << 30)  /* per device, unless FAKECUDA_MEMORY says */
#define FAKE_VERSION 13000        /* what cuDriverGetVersion says */
#define FAKE_PITCH 512            /* cuMemAllocPitch's row alignment */
#define FAKE_GRANULE (2ULL << 20) /* allocation and VM granularity */
#define FAKE_MAX_OBJECTS 1024     /* per kind */
#define FAKE_STACK 16             /* contexts per thread */
#define FAKE_ALLOC_BASE 0x200000000000ULL
#define FAKE_ALLOC_WINDOW (1ULL << 40)
#define FAKE_VA_BASE 0x600000000000ULL

struct fake_ctx {
    int device;
};

/* The kinds of fake_alloc: device memory, or an array (its handle). */
enum { FAKE_MEM = 0, FAKE_ARRAY = 1 };

struct fake_alloc {
    bool live;
    int kind;               /* FAKE_MEM or FAKE_ARRAY */
    int device;             /* visible ordinal */
    uint64_t addr, charged; /* bytes */
};

struct fake_range {
    bool live;
    uint64_t addr, size;
};

struct fake_phys {
    bool live;  /* created and memory still held */
    int refs;   /* cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease;
                   freed when this and maps reach 0 */
    int device; /* visible ordinal */
    uint64_t handle, size;
    int maps;
};

struct fake_map {
    bool live;
    bool access; /* cuMemSetAccess done */
    uint64_t addr, size, handle;
};

/* Page-locked host memory: allocated here (cuMemAllocHost_v2,
** cuMemHostAlloc) or the caller's, registered (cuMemHostRegister_v2). */
struct fake_host {
    bool live;
    bool registered; /* the caller's memory: cuMemHostUnregister frees it */
    char *addr;
    size_t size;
};

struct fake_event {
    bool live;
    bool recorded;
    int device;
    int queries; /* since the last record */
};

/* The counts, in the process or in FAKECUDA_SHARED's file: changed with
** atomics only, since other processes change them too. */
struct fake_counts {
    uint64_t used[FAKE_MAX_DEVICES]; /* bytes charged, by physical index */
    uint64_t peak[FAKE_MAX_DEVICES]; /* the most USED ever was */
};

static struct fake_counts fake_local_counts;

/* The stream-ordered pools, one per visible device (opaque handles). */
struct fake_pool {
    int device;
};

static struct {
    pthread_mutex_t lock; /* guards everything here but *counts */
    bool initialized;
    int n_devices;                 /* visible */
    int phys_of[FAKE_MAX_DEVICES]; /* visible ordinal -> physical index */
    uint64_t memory;               /* bytes per device */
    struct fake_counts *counts;    /* &fake_local_counts or the shared file */
    struct fake_pool pools[FAKE_MAX_DEVICES];
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
    struct fake_host hosts[FAKE_MAX_OBJECTS];
} fake = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .memory = FAKE_MEMORY,
          .counts = &fake_local_counts};

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

/*
** Graph capture (fakecuda_capture names the capturing stream): calls the
** real driver forbids during a global-mode capture fail with
** CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and count as misuses (they would
** invalidate the capture): synchronizing, querying events and freeing
** memory always; obtaining or mapping memory unless the calling thread
** is in the relaxed mode (cuThreadExchangeStreamCaptureMode).
*/
static void *capture_stream; /* guarded by fake.lock; NULL: no capture */
static _Thread_local vcu_stream_capture_mode capture_mode; /* GLOBAL (0) first */

static bool
named_in(const char *symbol, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strcmp(symbol, *list) == 0)
            return true;
    return false;
}

static bool
capture_forbids_locked(const char *symbol)
{
    static const char *const never[] = {"cuCtxSynchronize", "cuEventQuery",
                                        "cuMemFree_v2",     "cuMemUnmap",
                                        "cuMemRelease",     "cuMemAddressFree",
                                        NULL};
    static const char *const unless_relaxed[] = {"cuMemAlloc_v2", "cuMemCreate", "cuMemMap",
                                                 "cuMemSetAccess", "cuMemAddressReserve",
                                                 NULL};
    if (capture_stream == NULL)
        return false;
    return named_in(symbol, never) || (capture_mode != VCU_STREAM_CAPTURE_MODE_RELAXED &&
                                       named_in(symbol, unless_relaxed));
}

/* The common prologue: injected failure, initialization, capture rules. */
/* FAKECUDA_EVICT=BYTES: every entry point writes one byte in each 64-byte
** line of a BYTES buffer, as a real driver's call walks its own state and
** leaves the caller's cache lines and TLB entries cold. */
static void
evict_caches(void)
{
    static char *buf;
    static size_t have;
    const char *v = getenv("FAKECUDA_EVICT");
    size_t n = v != NULL ? strtoull(v, NULL, 10) : 0;
    if (n == 0)
        return;
    if (have < n) {
        buf = realloc(buf, n);
        have = buf != NULL ? n : 0;
    }
    for (size_t i = 0; i < have; i += 64)
        ((volatile char *)buf)[i]++;
}

static vcu_result
enter(const char *symbol)
{
    if (strncmp(symbol, "cuMem", 5) == 0)
        evict_caches();
    if (fail_injected(symbol))
        return VCU_ERROR_UNKNOWN;
    lock();
    bool init = fake.initialized;
    bool forbidden = init && capture_forbids_locked(symbol);
    if (forbidden)
        fake.misuses++;
    unlock();
    if (forbidden)
        return VCU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
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

/* ------------------------------------------------------------------ */
/* The counts                                                           */
/* ------------------------------------------------------------------ */

static pthread_once_t counts_once = PTHREAD_ONCE_INIT;

/* Map FAKECUDA_SHARED's file as the counts, once. A file that cannot be
** used leaves the counts in the process, with a line on stderr (the tests
** that share a device then fail visibly). */
static void
counts_map(void)
{
    const char *path = getenv("FAKECUDA_SHARED");
    if (path == NULL || *path == '\0')
        return;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    void *m = MAP_FAILED;
    if (fd >= 0 && fstat(fd, &st) == 0 &&
        ((size_t)st.st_size >= sizeof(struct fake_counts) ||
         ftruncate(fd, sizeof(struct fake_counts)) == 0))
        m = mmap(NULL, sizeof(struct fake_counts), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                 0);
    if (fd >= 0)
        close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "fakecuda: cannot map FAKECUDA_SHARED=%s\n", path);
        return;
    }
    __atomic_store_n(&fake.counts, (struct fake_counts *)m, __ATOMIC_RELEASE);
}

static struct fake_counts *
counts(void)
{
    pthread_once(&counts_once, counts_map);
    return __atomic_load_n(&fake.counts, __ATOMIC_ACQUIRE);
}

/* The physical index of visible ordinal DEV. */
static int
phys(int dev)
{
    return fake.phys_of[dev];
}

/* Charge BYTES to visible device DEV, atomically with the check, since
** other processes may charge the same counts. */
static vcu_result
charge(int dev, uint64_t bytes)
{
    if (oom_forced())
        return VCU_ERROR_OUT_OF_MEMORY;
    struct fake_counts *c = counts();
    int p = phys(dev);
    uint64_t cur = __atomic_load_n(&c->used[p], __ATOMIC_RELAXED);
    do {
        if (bytes > fake.memory || cur > fake.memory - bytes)
            return VCU_ERROR_OUT_OF_MEMORY;
    } while (!__atomic_compare_exchange_n(&c->used[p], &cur, cur + bytes, true,
                                          __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    uint64_t now = cur + bytes, peak = __atomic_load_n(&c->peak[p], __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&c->peak[p], &peak, now, true,
                                                      __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        ;
    return VCU_SUCCESS;
}

static void
uncharge(int dev, uint64_t bytes)
{
    __atomic_fetch_sub(&counts()->used[phys(dev)], bytes, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------------ */
/* Initialization and devices                                          */
/* ------------------------------------------------------------------ */

/* Physical device P's UUID as nvidia-smi prints it. */
static void
uuid_text(int p, char *out, size_t len)
{
    snprintf(out, len, "GPU-facecda0-0001-4000-8000-0000000000%02x", (unsigned)p);
}

/*
** CUDA_VISIBLE_DEVICES among N_PHYS devices into MAP (visible ordinal ->
** physical index); returns how many are visible. Unset: all of them.
** Entries are indices or UUIDs ("GPU-" and a unique prefix); the first
** that names no device, or one already listed, ends the list, as with the
** real driver.
*/
static int
visible_devices(int n_phys, int *map)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (v == NULL) {
        for (int i = 0; i < n_phys; i++)
            map[i] = i;
        return n_phys;
    }
    int n = 0;
    while (*v != '\0' && n < n_phys) {
        size_t len = strcspn(v, ",");
        char tok[64];
        size_t k = len < sizeof tok - 1 ? len : sizeof tok - 1;
        memcpy(tok, v, k);
        tok[k] = '\0';
        int p = -1;
        if (k > 0 && strspn(tok, "0123456789") == k) {
            long i = strtol(tok, NULL, 10);
            if (i < n_phys)
                p = (int)i;
        } else if (strncmp(tok, "GPU-", 4) == 0 && k > 4) {
            for (int i = 0; i < n_phys; i++) {
                char u[64];
                uuid_text(i, u, sizeof u);
                if (strncmp(u, tok, k) == 0) {
                    if (p >= 0) { /* ambiguous prefix */
                        p = -1;
                        break;
                    }
                    p = i;
                }
            }
        }
        for (int i = 0; i < n && p >= 0; i++)
            if (map[i] == p)
                p = -1;
        if (p < 0)
            break;
        map[n++] = p;
        v += len;
        if (*v == ',')
            v++;
    }
    return n;
}

/* FAKECUDA_MEMORY: bytes with an optional K, M, G or T (1024-based), e.g.
** 8G; FAKE_MEMORY if unset; 0 if malformed. */
static uint64_t
memory_setting(void)
{
    const char *v = getenv("FAKECUDA_MEMORY");
    if (v == NULL || *v == '\0')
        return FAKE_MEMORY;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    int shift = 0;
    switch (*end) {
    case 'K':
    case 'k':
        shift = 10;
        end++;
        break;
    case 'M':
    case 'm':
        shift = 20;
        end++;
        break;
    case 'G':
    case 'g':
        shift = 30;
        end++;
        break;
    case 'T':
    case 't':
        shift = 40;
        end++;
        break;
    default:
        break;
    }
    if (end == v || *end != '\0' || n == 0 || n > (UINT64_MAX >> shift))
        return 0;
    return (uint64_t)n << shift;
}

vcu_result
cuInit(unsigned int flags)
{
    if (fail_injected("cuInit"))
        return VCU_ERROR_UNKNOWN;
    if (flags != 0)
        return VCU_ERROR_INVALID_VALUE;
    int n_phys = 2;
    const char *v = getenv("FAKECUDA_DEVICES");
    if (v != NULL && v[0] >= '0' && v[0] <= '8' && v[1] == '\0')
        n_phys = v[0] - '0';
    int map[FAKE_MAX_DEVICES];
    int n = visible_devices(n_phys, map);
    if (n == 0)
        return VCU_ERROR_NO_DEVICE;
    uint64_t memory = memory_setting();
    if (memory == 0)
        return VCU_ERROR_INVALID_VALUE; /* a malformed FAKECUDA_MEMORY */
    counts();
    lock();
    if (!fake.initialized) {
        fake.n_devices = n;
        fake.memory = memory;
        for (int i = 0; i < FAKE_MAX_DEVICES; i++) {
            fake.ctx[i].device = i;
            fake.pools[i].device = i;
            fake.phys_of[i] = i < n ? map[i] : i;
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
    uuid->bytes[15] = (char)phys(dev); /* the UUID is the physical device's */
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
    *bytes = fake.memory;
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

/*
** FAKECUDA_CONTEXT_BYTES: what a process's context holds on a device,
** outside any allocation (the real driver's is about 500 MiB on an H200):
** charged to the device when the primary context is first retained,
** given back when it is destroyed. Bytes with an optional K, M, G (as
** FAKECUDA_MEMORY); unset or malformed: 0.
*/
static uint64_t
context_bytes(void)
{
    const char *v = getenv("FAKECUDA_CONTEXT_BYTES");
    if (v == NULL || *v == '\0')
        return 0;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    switch (*end) {
    case 'K': case 'k': n <<= 10; end++; break;
    case 'M': case 'm': n <<= 20; end++; break;
    case 'G': case 'g': n <<= 30; end++; break;
    default: break;
    }
    return *end == '\0' ? n : 0;
}

unsigned long long
fakecuda_process_used(unsigned int p)
{
    unsigned long long used = 0;
    lock();
    for (int dev = 0; dev < fake.n_devices; dev++) {
        if (phys(dev) != (int)p)
            continue;
        if (fake.primary_refs[dev] > 0)
            used += context_bytes();
        for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
            if (fake.allocs[i].live && fake.allocs[i].device == dev)
                used += fake.allocs[i].charged;
            if (fake.phys[i].live && fake.phys[i].device == dev)
                used += fake.phys[i].size;
        }
    }
    unlock();
    return used;
}

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
    if (fake.primary_refs[dev] == 0 && context_bytes() > 0 &&
        charge(dev, context_bytes()) != VCU_SUCCESS) {
        unlock();
        return VCU_ERROR_OUT_OF_MEMORY; /* no room for the context itself */
    }
    fake.primary_refs[dev]++;
    unlock();
    *ctx = (vcu_context)(void *)&fake.ctx[dev];
    return VCU_SUCCESS;
}

/* The context of DEV is destroyed: its cuMemAlloc memory and events go
** with it, as on the real driver. */
static void
ctx_contents_drop_locked(int dev)
{
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        if (fake.allocs[i].live && fake.allocs[i].device == dev) {
            uncharge(dev, fake.allocs[i].charged);
            fake.allocs[i].live = false;
        }
        if (fake.events[i].live && fake.events[i].device == dev)
            fake.events[i].live = false;
    }
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
        if (context_bytes() > 0)
            uncharge(dev, context_bytes());
        ctx_contents_drop_locked(dev);
    }
    unlock();
    return VCU_SUCCESS;
}

/* The primary context of DEV starts afresh: its memory and events go, its
** references stay (the context is current wherever it was). */
vcu_result
cuDevicePrimaryCtxReset_v2(vcu_device dev)
{
    vcu_result r = enter("cuDevicePrimaryCtxReset_v2");
    if (r != VCU_SUCCESS)
        return r;
    if (!valid_device(dev))
        return VCU_ERROR_INVALID_DEVICE;
    lock();
    ctx_contents_drop_locked(dev);
    unlock();
    return VCU_SUCCESS;
}

/* The fake has primary contexts only, which cuCtxDestroy may not destroy. */
vcu_result
cuCtxDestroy_v2(vcu_context ctx)
{
    (void)ctx;
    vcu_result r = enter("cuCtxDestroy_v2");
    if (r != VCU_SUCCESS)
        return r;
    lock();
    fake.misuses++;
    unlock();
    return VCU_ERROR_INVALID_CONTEXT;
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
    uint64_t used = __atomic_load_n(&counts()->used[phys(dev)], __ATOMIC_SEQ_CST);
    *free_bytes = used < fake.memory ? fake.memory - used : 0;
    *total_bytes = fake.memory;
    return VCU_SUCCESS;
}

/*
** Allocate BYTES (charged in whole granules) of KIND on visible device DEV:
** the address (or array handle) into *ADDR. Addresses are never reused,
** so that stale frees show.
*/
static vcu_result
alloc_on(int dev, uint64_t bytes, int kind, vcu_deviceptr *addr)
{
    if (bytes > fake.memory)
        return VCU_ERROR_OUT_OF_MEMORY;
    uint64_t charged = (bytes + FAKE_GRANULE - 1) / FAKE_GRANULE * FAKE_GRANULE;
    lock();
    int slot = -1;
    for (int i = 0; i < FAKE_MAX_OBJECTS && slot < 0; i++)
        if (!fake.allocs[i].live)
            slot = i;
    vcu_result r = slot < 0 ? VCU_ERROR_OUT_OF_MEMORY : charge(dev, charged);
    if (r == VCU_SUCCESS) {
        struct fake_alloc *a = &fake.allocs[slot];
        a->live = true;
        a->kind = kind;
        a->device = dev;
        a->addr = fake.next_addr[dev];
        a->charged = charged;
        fake.next_addr[dev] += charged;
        *addr = a->addr;
    }
    unlock();
    return r;
}

/* Free the live allocation of KIND at ADDR. */
static vcu_result
free_at(uint64_t addr, int kind)
{
    lock();
    vcu_result r =
        kind == FAKE_ARRAY ? VCU_ERROR_INVALID_HANDLE : VCU_ERROR_INVALID_VALUE;
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        struct fake_alloc *a = &fake.allocs[i];
        if (a->live && a->kind == kind && a->addr == addr) {
            uncharge(a->device, a->charged);
            a->live = false;
            r = VCU_SUCCESS;
            break;
        }
    }
    unlock();
    return r;
}

/* The prologue of the calls that allocate on the current device. */
static vcu_result
alloc_enter(const char *symbol, vcu_deviceptr *dptr, size_t bytes, int *dev)
{
    vcu_result r = enter(symbol);
    if (r != VCU_SUCCESS)
        return r;
    *dev = current_device();
    if (*dev < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    if (dptr == NULL || bytes == 0)
        return VCU_ERROR_INVALID_VALUE;
    return VCU_SUCCESS;
}

#ifndef FAKECUDA_BROKEN /* a driver that lacks a required entry point */
vcu_result
cuMemAlloc_v2(vcu_deviceptr *dptr, size_t bytesize)
{
    int dev;
    vcu_result r = alloc_enter("cuMemAlloc_v2", dptr, bytesize, &dev);
    return r != VCU_SUCCESS ? r : alloc_on(dev, bytesize, FAKE_MEM, dptr);
}
#endif

/* The v1 ABI (32-bit pointers): only there for cuGetProcAddress to return
** for old versions; a test that calls it learns it was not a hook. */
vcu_result
cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
    (void)dptr;
    (void)bytesize;
    return VCU_ERROR_NOT_SUPPORTED;
}

vcu_result
cuMemFree_v2(vcu_deviceptr dptr)
{
    vcu_result r = enter("cuMemFree_v2");
    if (r != VCU_SUCCESS)
        return r;
    if (current_device() < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    return free_at(dptr, FAKE_MEM);
}

/* Rows of FAKE_PITCH bytes' multiples; the element size must be one the
** real driver takes. */
vcu_result
cuMemAllocPitch_v2(vcu_deviceptr *dptr, size_t *pitch, size_t widthInBytes, size_t height,
                   unsigned int elementSizeBytes)
{
    int dev;
    vcu_result r = alloc_enter("cuMemAllocPitch_v2", dptr, widthInBytes, &dev);
    if (r != VCU_SUCCESS)
        return r;
    if (pitch == NULL || height == 0 ||
        (elementSizeBytes != 4 && elementSizeBytes != 8 && elementSizeBytes != 16))
        return VCU_ERROR_INVALID_VALUE;
    uint64_t row = (widthInBytes + FAKE_PITCH - 1) / FAKE_PITCH * FAKE_PITCH;
    if (row > fake.memory / height)
        return VCU_ERROR_OUT_OF_MEMORY;
    r = alloc_on(dev, row * height, FAKE_MEM, dptr);
    if (r == VCU_SUCCESS)
        *pitch = row;
    return r;
}

vcu_result
cuMemAllocManaged(vcu_deviceptr *dptr, size_t bytesize, unsigned int flags)
{
    int dev;
    vcu_result r = alloc_enter("cuMemAllocManaged", dptr, bytesize, &dev);
    if (r != VCU_SUCCESS)
        return r;
    if (flags != VCU_MEM_ATTACH_GLOBAL && flags != 0x2u /* CU_MEM_ATTACH_HOST */)
        return VCU_ERROR_INVALID_VALUE;
    const char *nested = getenv("FAKECUDA_NESTED");
    if (nested != NULL && strcmp(nested, "1") == 0) {
        vcu_pfn_cuMemAlloc inner;
        void *p = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
        if (p == NULL)
            return VCU_ERROR_UNKNOWN;
        memcpy(&inner, &p, sizeof p);
        return inner(dptr, bytesize);
    }
    return alloc_on(dev, bytesize, FAKE_MEM, dptr);
}

/* The stream-ordered calls: the fake has no work to order, so they act at
** once (on the current device; the stream is not looked at). */
static vcu_result
alloc_async(const char *symbol, vcu_deviceptr *dptr, size_t bytesize)
{
    int dev;
    vcu_result r = alloc_enter(symbol, dptr, bytesize, &dev);
    return r != VCU_SUCCESS ? r : alloc_on(dev, bytesize, FAKE_MEM, dptr);
}

vcu_result
cuMemAllocAsync(vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream)
{
    (void)stream;
    return alloc_async("cuMemAllocAsync", dptr, bytesize);
}

vcu_result
cuMemAllocAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream)
{
    (void)stream;
    return alloc_async("cuMemAllocAsync_ptsz", dptr, bytesize);
}

vcu_result
cuDeviceGetDefaultMemPool(vcu_mem_pool *pool, vcu_device dev)
{
    vcu_result r = enter("cuDeviceGetDefaultMemPool");
    if (r != VCU_SUCCESS)
        return r;
    if (pool == NULL)
        return VCU_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return VCU_ERROR_INVALID_DEVICE;
    *pool = (vcu_mem_pool)(void *)&fake.pools[dev];
    return VCU_SUCCESS;
}

/* From a default pool: that pool's device; from any other non-NULL pool
** (the fake has no cuMemPoolCreate): the current device. */
static vcu_result
alloc_from_pool(const char *symbol, vcu_deviceptr *dptr, size_t bytesize,
                vcu_mem_pool pool)
{
    int dev;
    vcu_result r = alloc_enter(symbol, dptr, bytesize, &dev);
    if (r != VCU_SUCCESS)
        return r;
    if (pool == NULL)
        return VCU_ERROR_INVALID_VALUE;
    uintptr_t p = (uintptr_t)(void *)pool, base = (uintptr_t)fake.pools;
    if (p >= base && p < base + sizeof fake.pools &&
        (p - base) % sizeof fake.pools[0] == 0) {
        dev = fake.pools[(p - base) / sizeof fake.pools[0]].device;
        if (!valid_device(dev))
            return VCU_ERROR_INVALID_VALUE;
    }
    return alloc_on(dev, bytesize, FAKE_MEM, dptr);
}

vcu_result
cuMemAllocFromPoolAsync(vcu_deviceptr *dptr, size_t bytesize, vcu_mem_pool pool,
                        vcu_stream stream)
{
    (void)stream;
    return alloc_from_pool("cuMemAllocFromPoolAsync", dptr, bytesize, pool);
}

vcu_result
cuMemAllocFromPoolAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize, vcu_mem_pool pool,
                             vcu_stream stream)
{
    (void)stream;
    return alloc_from_pool("cuMemAllocFromPoolAsync_ptsz", dptr, bytesize, pool);
}

static vcu_result
free_async(const char *symbol, vcu_deviceptr dptr)
{
    vcu_result r = enter(symbol);
    if (r != VCU_SUCCESS)
        return r;
    if (current_device() < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    return free_at(dptr, FAKE_MEM);
}

vcu_result
cuMemFreeAsync(vcu_deviceptr dptr, vcu_stream stream)
{
    (void)stream;
    return free_async("cuMemFreeAsync", dptr);
}

vcu_result
cuMemFreeAsync_ptsz(vcu_deviceptr dptr, vcu_stream stream)
{
    (void)stream;
    return free_async("cuMemFreeAsync_ptsz", dptr);
}

/* cuCtxGetDevice calls so far (fakecuda_ctx_get_device_calls). */
static uint64_t ctx_get_device_calls;

vcu_result
cuCtxGetDevice(vcu_device *device)
{
    __atomic_fetch_add(&ctx_get_device_calls, 1, __ATOMIC_RELAXED);
    vcu_result r = enter("cuCtxGetDevice");
    if (r != VCU_SUCCESS)
        return r;
    if (device == NULL)
        return VCU_ERROR_INVALID_VALUE;
    int dev = current_device();
    if (dev < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    *device = dev;
    return VCU_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Arrays                                                               */
/* ------------------------------------------------------------------ */

/* Bytes per channel of the formats cuda_api.h names (others: invalid). */
static uint64_t
format_size(vcu_array_format f)
{
    switch (f) {
    case VCU_AD_FORMAT_UNSIGNED_INT8:
    case VCU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case VCU_AD_FORMAT_UNSIGNED_INT16:
    case VCU_AD_FORMAT_SIGNED_INT16:
    case VCU_AD_FORMAT_HALF:
        return 2;
    case VCU_AD_FORMAT_UNSIGNED_INT32:
    case VCU_AD_FORMAT_SIGNED_INT32:
    case VCU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 0;
    }
}

/* An array of W x H x D elements (H, D: 0 means 1) of CHANNELS x F. */
static vcu_result
array_create(const char *symbol, vcu_array *array, size_t w, size_t h, size_t d,
             vcu_array_format f, unsigned channels)
{
    vcu_result r = enter(symbol);
    if (r != VCU_SUCCESS)
        return r;
    int dev = current_device();
    if (dev < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    uint64_t size = format_size(f);
    if (array == NULL || w == 0 || size == 0 ||
        (channels != 1 && channels != 2 && channels != 4))
        return VCU_ERROR_INVALID_VALUE;
    uint64_t hh = h > 0 ? h : 1, dd = d > 0 ? d : 1;
    if (w > fake.memory / hh / dd / channels / size)
        return VCU_ERROR_OUT_OF_MEMORY;
    vcu_deviceptr handle;
    r = alloc_on(dev, w * hh * dd * channels * size, FAKE_ARRAY, &handle);
    if (r == VCU_SUCCESS)
        *array = (vcu_array)(uintptr_t)handle;
    return r;
}

vcu_result
cuArrayCreate_v2(vcu_array *array, const vcu_array_descriptor *desc)
{
    if (desc == NULL)
        return VCU_ERROR_INVALID_VALUE;
    return array_create("cuArrayCreate_v2", array, desc->Width, desc->Height, 0,
                        desc->Format, desc->NumChannels);
}

vcu_result
cuArray3DCreate_v2(vcu_array *array, const vcu_array3d_descriptor *desc)
{
    if (desc == NULL)
        return VCU_ERROR_INVALID_VALUE;
    return array_create("cuArray3DCreate_v2", array, desc->Width, desc->Height,
                        desc->Depth, desc->Format, desc->NumChannels);
}

vcu_result
cuArrayDestroy(vcu_array array)
{
    vcu_result r = enter("cuArrayDestroy");
    if (r != VCU_SUCCESS)
        return r;
    return free_at((uint64_t)(uintptr_t)array, FAKE_ARRAY);
}

/* ------------------------------------------------------------------ */
/* Page-locked host memory                                             */
/* ------------------------------------------------------------------ */

/*
** As the real driver: a context must be current; the memory is the
** process's own (malloc here, never charged to a device); registering a
** range that overlaps one already pinned, or freeing or unregistering an
** address that is not the start of one of the right kind, fails.
*/
static vcu_result
host_enter(const char *symbol)
{
    vcu_result r = enter(symbol);
    if (r == VCU_SUCCESS && current_device() < 0)
        r = VCU_ERROR_INVALID_CONTEXT;
    return r;
}

/* Record [ADDR, ADDR+SIZE) as pinned; INVALID_VALUE if it overlaps one. */
static vcu_result
host_add(char *addr, size_t size, bool registered)
{
    vcu_result r = VCU_ERROR_OUT_OF_MEMORY;
    lock();
    struct fake_host *free_slot = NULL;
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        struct fake_host *h = &fake.hosts[i];
        if (!h->live) {
            if (free_slot == NULL)
                free_slot = h;
        } else if (addr < h->addr + h->size && h->addr < addr + size) {
            free_slot = NULL;
            r = VCU_ERROR_INVALID_VALUE;
            break;
        }
    }
    if (free_slot != NULL) {
        *free_slot = (struct fake_host){true, registered, addr, size};
        r = VCU_SUCCESS;
    }
    unlock();
    return r;
}

/* Forget the pinned range starting at ADDR of the kind REGISTERED. */
static vcu_result
host_remove(void *addr, bool registered)
{
    vcu_result r = VCU_ERROR_INVALID_VALUE;
    lock();
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++) {
        struct fake_host *h = &fake.hosts[i];
        if (h->live && h->addr == addr && h->registered == registered) {
            h->live = false;
            r = VCU_SUCCESS;
            break;
        }
    }
    unlock();
    return r;
}

static vcu_result
host_alloc(const char *symbol, void **pp, size_t bytesize)
{
    vcu_result r = host_enter(symbol);
    if (r != VCU_SUCCESS)
        return r;
    if (pp == NULL || bytesize == 0)
        return VCU_ERROR_INVALID_VALUE;
    if (oom_forced())
        return VCU_ERROR_OUT_OF_MEMORY;
    char *p = malloc(bytesize);
    if (p == NULL)
        return VCU_ERROR_OUT_OF_MEMORY;
    r = host_add(p, bytesize, false);
    if (r != VCU_SUCCESS)
        free(p);
    else
        *pp = p;
    return r;
}

vcu_result
cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc("cuMemAllocHost_v2", pp, bytesize);
}

vcu_result
cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    (void)Flags; /* portable, mapped, write-combined: all the same memory here */
    return host_alloc("cuMemHostAlloc", pp, bytesize);
}

vcu_result
cuMemFreeHost(void *p)
{
    vcu_result r = host_enter("cuMemFreeHost");
    if (r == VCU_SUCCESS)
        r = host_remove(p, false);
    if (r == VCU_SUCCESS)
        free(p);
    return r;
}

vcu_result
cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    vcu_result r = host_enter("cuMemHostRegister_v2");
    if (r != VCU_SUCCESS)
        return r;
    if (p == NULL || bytesize == 0)
        return VCU_ERROR_INVALID_VALUE;
    return host_add(p, bytesize, true);
}

vcu_result
cuMemHostUnregister(void *p)
{
    vcu_result r = host_enter("cuMemHostUnregister");
    return r != VCU_SUCCESS ? r : host_remove(p, true);
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
    if (size > fake.memory)
        return VCU_ERROR_OUT_OF_MEMORY;
    lock();
    int slot = -1;
    for (int i = 0; i < FAKE_MAX_OBJECTS && slot < 0; i++)
        if (!fake.phys[i].live)
            slot = i;
    r = slot < 0 ? VCU_ERROR_OUT_OF_MEMORY : charge(prop->location.id, size);
    if (r == VCU_SUCCESS) {
        struct fake_phys *p = &fake.phys[slot];
        memset(p, 0, sizeof *p);
        p->live = true;
        p->refs = 1;
        p->device = prop->location.id;
        p->size = size;
        p->handle = ++fake.next_handle;
        *handle = p->handle;
    }
    unlock();
    return r;
}

/* The live handle H with references left, or NULL. Caller holds the
** lock. */
static struct fake_phys *
phys_locked(vcu_mem_handle h)
{
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++)
        if (fake.phys[i].live && fake.phys[i].refs > 0 && fake.phys[i].handle == h)
            return &fake.phys[i];
    return NULL;
}

/* Drop P's memory once every reference is released and it is mapped
** nowhere. */
static void
phys_settle_locked(struct fake_phys *p)
{
    if (p->refs == 0 && p->maps == 0) {
        uncharge(p->device, p->size);
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
        p->refs--;
        phys_settle_locked(p);
    }
    unlock();
    return p != NULL ? VCU_SUCCESS : VCU_ERROR_INVALID_VALUE;
}

/* The handle mapped at ADDR, with one more reference to release. */
vcu_result
cuMemRetainAllocationHandle(vcu_mem_handle *handle, void *addr)
{
    vcu_result r = enter("cuMemRetainAllocationHandle");
    if (r != VCU_SUCCESS)
        return r;
    if (handle == NULL)
        return VCU_ERROR_INVALID_VALUE;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    lock();
    r = VCU_ERROR_INVALID_VALUE;
    for (int i = 0; i < FAKE_MAX_OBJECTS && r != VCU_SUCCESS; i++) {
        const struct fake_map *m = &fake.maps[i];
        if (!m->live || a < m->addr || a >= m->addr + m->size)
            continue;
        struct fake_phys *p = phys_locked(m->handle);
        if (p == NULL)
            continue; /* released, still mapped: the real driver refuses too */
        p->refs++;
        *handle = p->handle;
        r = VCU_SUCCESS;
    }
    unlock();
    return r;
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
    vcu_result r = enter("cuEventRecord");
    if (r != VCU_SUCCESS)
        return r;
    if (current_device() < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    lock();
    if (capture_stream != NULL && (void *)stream == capture_stream) {
        /* Recorded into the graph, not now: an allocator must not rely on it. */
        fake.misuses++;
        unlock();
        return VCU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
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
/* Graph capture                                                        */
/* ------------------------------------------------------------------ */

vcu_result
cuStreamIsCapturing(vcu_stream hStream, vcu_stream_capture_status *captureStatus)
{
    vcu_result r = enter("cuStreamIsCapturing");
    if (r != VCU_SUCCESS)
        return r;
    if (captureStatus == NULL)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    bool active = capture_stream != NULL && (void *)hStream == capture_stream;
    unlock();
    *captureStatus =
        active ? VCU_STREAM_CAPTURE_STATUS_ACTIVE : VCU_STREAM_CAPTURE_STATUS_NONE;
    return VCU_SUCCESS;
}

vcu_result
cuThreadExchangeStreamCaptureMode(vcu_stream_capture_mode *mode)
{
    vcu_result r = enter("cuThreadExchangeStreamCaptureMode");
    if (r != VCU_SUCCESS)
        return r;
    if (mode == NULL || (unsigned)*mode > VCU_STREAM_CAPTURE_MODE_RELAXED)
        return VCU_ERROR_INVALID_VALUE;
    vcu_stream_capture_mode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return VCU_SUCCESS;
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
/* cuGetProcAddress                                                     */
/* ------------------------------------------------------------------ */

/* Any function, as ISO C lets function pointers be converted among
** themselves (void (*)(void) matches every type for -Wcast-function-type). */
typedef void (*fake_fn)(void);

/*
** One variant of a driver function: the base name asked for, the
** cudaVersion it appeared in (cudaTypedefs.h's PFN_<name>_v<since>), and
** its legacy-stream and per-thread (or NULL) entry points. A name with
** several rows returns the newest whose SINCE is at most the version asked.
*/
static const struct fake_proc {
    const char *name;
    int since;
    fake_fn fn, ptsz;
} fake_procs[] = {
    {"cuInit", 2000, (fake_fn)cuInit, NULL},
    {"cuDriverGetVersion", 2020, (fake_fn)cuDriverGetVersion, NULL},
    {"cuDeviceGetCount", 2000, (fake_fn)cuDeviceGetCount, NULL},
    {"cuDeviceGet", 2000, (fake_fn)cuDeviceGet, NULL},
    {"cuDeviceGetName", 2000, (fake_fn)cuDeviceGetName, NULL},
    {"cuDeviceGetUuid", 9020, (fake_fn)cuDeviceGetUuid, NULL},
#ifndef FAKECUDA_LEGACY
    {"cuDeviceGetUuid", 11040, (fake_fn)cuDeviceGetUuid_v2, NULL},
#endif
    {"cuDeviceTotalMem", 3020, (fake_fn)cuDeviceTotalMem_v2, NULL},
    {"cuDeviceGetAttribute", 2000, (fake_fn)cuDeviceGetAttribute, NULL},
    {"cuDeviceGetDefaultMemPool", 11020, (fake_fn)cuDeviceGetDefaultMemPool, NULL},
    {"cuDevicePrimaryCtxRetain", 7000, (fake_fn)cuDevicePrimaryCtxRetain, NULL},
    {"cuDevicePrimaryCtxRelease", 11000, (fake_fn)cuDevicePrimaryCtxRelease_v2, NULL},
    {"cuDevicePrimaryCtxReset", 11000, (fake_fn)cuDevicePrimaryCtxReset_v2, NULL},
    {"cuCtxDestroy", 4000, (fake_fn)cuCtxDestroy_v2, NULL},
    {"cuCtxPushCurrent", 4000, (fake_fn)cuCtxPushCurrent_v2, NULL},
    {"cuCtxPopCurrent", 4000, (fake_fn)cuCtxPopCurrent_v2, NULL},
    {"cuCtxGetCurrent", 4000, (fake_fn)cuCtxGetCurrent, NULL},
    {"cuCtxGetDevice", 2000, (fake_fn)cuCtxGetDevice, NULL},
    {"cuCtxSynchronize", 2000, (fake_fn)cuCtxSynchronize, NULL},
    {"cuMemGetInfo", 3020, (fake_fn)cuMemGetInfo_v2, NULL},
    {"cuMemAlloc", 2000, (fake_fn)cuMemAlloc, NULL},
#ifndef FAKECUDA_BROKEN
    {"cuMemAlloc", 3020, (fake_fn)cuMemAlloc_v2, NULL},
#endif
    {"cuMemAllocPitch", 3020, (fake_fn)cuMemAllocPitch_v2, NULL},
    {"cuMemFree", 3020, (fake_fn)cuMemFree_v2, NULL},
    {"cuMemAllocManaged", 6000, (fake_fn)cuMemAllocManaged, NULL},
    {"cuMemAllocAsync", 11020, (fake_fn)cuMemAllocAsync, (fake_fn)cuMemAllocAsync_ptsz},
    {"cuMemAllocFromPoolAsync", 11020, (fake_fn)cuMemAllocFromPoolAsync,
     (fake_fn)cuMemAllocFromPoolAsync_ptsz},
    {"cuMemFreeAsync", 11020, (fake_fn)cuMemFreeAsync, (fake_fn)cuMemFreeAsync_ptsz},
    {"cuArrayCreate", 3020, (fake_fn)cuArrayCreate_v2, NULL},
    {"cuArray3DCreate", 3020, (fake_fn)cuArray3DCreate_v2, NULL},
    {"cuArrayDestroy", 2000, (fake_fn)cuArrayDestroy, NULL},
    {"cuMemAllocHost", 3020, (fake_fn)cuMemAllocHost_v2, NULL},
    {"cuMemHostAlloc", 2020, (fake_fn)cuMemHostAlloc, NULL},
    {"cuMemFreeHost", 2000, (fake_fn)cuMemFreeHost, NULL},
    {"cuMemHostRegister", 6050, (fake_fn)cuMemHostRegister_v2, NULL},
    {"cuMemHostUnregister", 4000, (fake_fn)cuMemHostUnregister, NULL},
#ifndef FAKECUDA_LEGACY
    {"cuMemAddressReserve", 10020, (fake_fn)cuMemAddressReserve, NULL},
    {"cuMemAddressFree", 10020, (fake_fn)cuMemAddressFree, NULL},
    {"cuMemCreate", 10020, (fake_fn)cuMemCreate, NULL},
    {"cuMemRelease", 10020, (fake_fn)cuMemRelease, NULL},
    {"cuMemMap", 10020, (fake_fn)cuMemMap, NULL},
    {"cuMemUnmap", 10020, (fake_fn)cuMemUnmap, NULL},
    {"cuMemSetAccess", 10020, (fake_fn)cuMemSetAccess, NULL},
    {"cuMemGetAllocationGranularity", 10020, (fake_fn)cuMemGetAllocationGranularity,
     NULL},
    {"cuMemRetainAllocationHandle", 11000, (fake_fn)cuMemRetainAllocationHandle, NULL},
    {"cuGetErrorName", 6000, (fake_fn)cuGetErrorName, NULL},
    {"cuGetErrorString", 6000, (fake_fn)cuGetErrorString, NULL},
#endif
    {"cuEventCreate", 2000, (fake_fn)cuEventCreate, NULL},
    {"cuEventRecord", 2000, (fake_fn)cuEventRecord, NULL},
    {"cuEventQuery", 2000, (fake_fn)cuEventQuery, NULL},
    {"cuEventDestroy", 4000, (fake_fn)cuEventDestroy_v2, NULL},
    {"cuStreamIsCapturing", 10000, (fake_fn)cuStreamIsCapturing, NULL},
    {"cuThreadExchangeStreamCaptureMode", 10010, (fake_fn)cuThreadExchangeStreamCaptureMode,
     NULL},
    {"cuGetProcAddress", 11030, (fake_fn)cuGetProcAddress, NULL},
    {"cuGetProcAddress", 12000, (fake_fn)cuGetProcAddress_v2, NULL},
};

/* The lookup both versions share; works before cuInit, as the real one. */
static vcu_result
get_proc(const char *symbol, void **pfn, int version, vcu_uint64 flags,
         vcu_proc_address_result *status)
{
    if (symbol == NULL || pfn == NULL || version > FAKE_VERSION)
        return VCU_ERROR_INVALID_VALUE;
    const struct fake_proc *best = NULL;
    bool named = false;
    for (size_t i = 0; i < sizeof fake_procs / sizeof fake_procs[0]; i++) {
        const struct fake_proc *e = &fake_procs[i];
        if (strcmp(e->name, symbol) != 0)
            continue;
        named = true;
        if (e->since <= version && (best == NULL || e->since > best->since))
            best = e;
    }
    fake_fn fn = NULL;
    if (best != NULL)
        fn =
            (flags & VCU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->ptsz != NULL
                ? best->ptsz
                : best->fn;
    /* Not found is a success with a NULL pointer, as documented. */
    memcpy(pfn, &fn, sizeof fn);
    if (status != NULL)
        *status = fn != NULL ? VCU_GET_PROC_ADDRESS_SUCCESS
                  : named    ? VCU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                             : VCU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return VCU_SUCCESS;
}

_Static_assert(sizeof(fake_fn) == sizeof(void *), "function pointers fit void *");

vcu_result
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, vcu_uint64 flags,
                    vcu_proc_address_result *symbolStatus)
{
    if (fail_injected("cuGetProcAddress_v2"))
        return VCU_ERROR_UNKNOWN;
    return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

vcu_result
cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, vcu_uint64 flags)
{
    if (fail_injected("cuGetProcAddress"))
        return VCU_ERROR_UNKNOWN;
    return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}

/* ------------------------------------------------------------------ */
/* Test helpers                                                         */
/* ------------------------------------------------------------------ */

/* cuCtxGetDevice calls in the process so far. */
uint64_t
fakecuda_ctx_get_device_calls(void)
{
    return __atomic_load_n(&ctx_get_device_calls, __ATOMIC_RELAXED);
}

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
             fake.maps[i].live + fake.events[i].live + fake.hosts[i].live;
    unlock();
    return n;
}

/* Bytes charged to physical device DEV now (0 for a bad DEV), in every
** process that shares the counts. */
uint64_t
fakecuda_used(int dev)
{
    if (dev < 0 || dev >= FAKE_MAX_DEVICES)
        return 0;
    return __atomic_load_n(&counts()->used[dev], __ATOMIC_SEQ_CST);
}

/* The most bytes ever charged to physical device DEV at once. */
uint64_t
fakecuda_peak(int dev)
{
    if (dev < 0 || dev >= FAKE_MAX_DEVICES)
        return 0;
    return __atomic_load_n(&counts()->peak[dev], __ATOMIC_SEQ_CST);
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

/* From now on STREAM is capturing a CUDA graph in the global mode (NULL:
** the capture ended). See "Graph capture" above. */
void
fakecuda_capture(void *stream)
{
    lock();
    capture_stream = stream;
    unlock();
}
