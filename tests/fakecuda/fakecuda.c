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
**   - what the device holds as the real driver holds it (measured on an
**     H100, driver 580), charged to the physical device (OOM when full):
**     cuMemAlloc_v2, Pitch and Managed above 1 MiB in whole 2 MiB
**     granules, at or below 1 MiB as a power-of-two block (512 B at
**     least) of a 2 MiB page shared with blocks of its size, the page held
**     while one of its blocks lives; the stream-ordered calls (and their
**     _ptsz twins) from pools (the default pool of each device, or
**     cuMemPoolCreate's; cuDeviceSetMemPool, cuMemSetMemPool) whose
**     reserve grows in 32 MiB chunks, stays after the frees, and is given
**     back above the release threshold at cuCtxSynchronize or by
**     cuMemPoolTrimTo; nothing reserved for an allocation while its
**     stream captures (fakecuda_capture); arrays and mipmapped arrays
**     with rows padded to 512 bytes and heights to 8, held in whole
**     granules, none with CUDA_ARRAY3D_DEFERRED_MAPPING (whose
**     requirements cuArrayGetMemoryRequirements gives); graphs with
**     allocation nodes, whose memory the device's graph pool maps at the
**     first upload or launch and keeps until cuDeviceGraphMemTrim; IPC
**     handles opened in the same process keep an allocation alive after
**     its owner frees it. The counts -- bytes in use and the high-water
**     mark per physical device -- live in the MAP_SHARED file
**     FAKECUDA_SHARED names, so that several processes share one device
**     (else in the process); fakecuda_used and fakecuda_peak read them,
**     and fakecuda_process_used what this process holds (NVML's figure);
**   - virtual memory with real bookkeeping: reservations, handles, maps that
**     must lie inside a reservation, be granule-aligned and not overlap;
**     access set only on fully mapped ranges; memory returned when a
**     handle's last reference (cuMemCreate, cuMemRetainAllocationHandle,
**     an import of its exported descriptor) is released and its last
**     mapping goes;
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
VCU_CUDA13_ENTRY_POINTS(X, VCU_OWN_TYPE)
VCU_GRAPH_INSTANTIATE_V2(X, VCU_OWN_TYPE)
VCU_GET_PROC_ADDRESS_V1(X, VCU_OWN_TYPE)
#undef X
FAKE_API vcu_result cuDeviceGetUuid(vcu_uuid *uuid, vcu_device dev); /* the v1 name */
/* For the fake NVML (tests/preload/fakenvml.c): this process's use of
** physical device P, bytes, as NVML's per-process figure would show it. */
FAKE_API unsigned long long fakecuda_process_used(unsigned int p);
/* Whether NVML lists this process on physical device P: it holds a
** context there, or memory. */
FAKE_API int fakecuda_process_listed(unsigned int p);
/* The v1 cuMemAlloc (32-bit CUdeviceptr and size, before CUDA 3.2). */
FAKE_API vcu_result cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
/* The per-thread-default-stream twins: the same types as their base. */
FAKE_API vcu_result cuMemAllocAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize,
                                         vcu_stream stream);
FAKE_API vcu_result cuMemAllocFromPoolAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize,
                                                 vcu_mem_pool pool, vcu_stream stream);
FAKE_API vcu_result cuMemFreeAsync_ptsz(vcu_deviceptr dptr, vcu_stream stream);
FAKE_API vcu_result cuGraphLaunch_ptsz(vcu_graph_exec exec, vcu_stream stream);
FAKE_API vcu_result cuGraphUpload_ptsz(vcu_graph_exec exec, vcu_stream stream);
FAKE_API vcu_result cuGraphInstantiateWithParams_ptsz(vcu_graph_exec *exec, vcu_graph graph,
                                                      vcu_graph_instantiate_params *params);

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
#define FAKE_MAX_OBJECTS 4096     /* per kind, but allocations */
#define FAKE_MAX_ALLOCS (1 << 17) /* allocations and arrays */
/* cuMemAlloc's sub-allocator, as measured on an H100 (driver 580): an
** allocation of at most FAKE_SUBALLOC_MAX bytes takes a block of the next
** power of two (at least FAKE_MIN_BLOCK) in a page of FAKE_GRANULE bytes
** shared with blocks of its size; the page is held while one of its
** blocks lives. Above FAKE_SUBALLOC_MAX: whole granules. */
#define FAKE_SUBALLOC_MAX (1ULL << 20)
#define FAKE_MIN_BLOCK 512u
#define FAKE_MAX_PAGES 1024
/* Stream-ordered pools reserve in chunks of FAKE_POOL_CHUNK (32 MiB, as
** measured), and so does the graph pool. */
#define FAKE_POOL_CHUNK (32ULL << 20)
#define FAKE_MAX_POOLS (FAKE_MAX_DEVICES + 32)
#define FAKE_MAX_GRAPHS 64
#define FAKE_GRAPH_NODES 16
/* Arrays: rows padded to FAKE_PITCH bytes, heights (above 1) to a
** multiple of FAKE_ARRAY_ROWS, then held in whole granules. */
#define FAKE_ARRAY_ROWS 8u
#define FAKE_STACK 16             /* contexts per thread */
#define FAKE_ALLOC_BASE 0x200000000000ULL
#define FAKE_ALLOC_WINDOW (1ULL << 40)
#define FAKE_VA_BASE 0x600000000000ULL

struct fake_ctx {
    int device;
};

/* The kinds of fake_alloc: device memory (its own granules, a block of a
** shared page, a block of a stream-ordered pool, or an address handed out
** while its stream captures a graph, which holds nothing), an array or a
** mipmapped array (their handles). */
enum {
    FAKE_MEM = 0,
    FAKE_ARRAY = 1,
    FAKE_BLOCK = 2,
    FAKE_POOLED = 3,
    FAKE_CAPTURED = 4,
    FAKE_MIPMAP = 5
};

struct fake_alloc {
    bool live;
    int kind;         /* see above */
    int device;       /* visible ordinal */
    uint64_t addr;    /* device address, or the array's handle */
    uint64_t charged; /* bytes charged for it alone (0: in a page or a pool) */
    uint64_t size;    /* BLOCK, POOLED: the block's bytes; arrays: their layout */
    int owner;        /* BLOCK: its page; POOLED: its pool */
    int ipc_opens;    /* cuIpcOpenMemHandle opens not closed yet */
    bool freed;       /* freed while opened: goes at the last close */
};

/* A page of cuMemAlloc's sub-allocator: FAKE_GRANULE bytes at ADDR
** (granule-aligned), blocks of BLOCK bytes, a bit per block in use. */
struct fake_page {
    bool live;
    int device;
    uint32_t block, n_live;
    uint64_t addr;
    uint64_t bits[FAKE_GRANULE / FAKE_MIN_BLOCK / 64];
};

struct fake_range {
    bool live;
    uint64_t addr, size;
};

struct fake_phys {
    bool live;  /* created and memory still held */
    int refs;   /* cuMemCreate + cuMemRetainAllocationHandle + imports -
                   cuMemRelease; freed when this and maps reach 0 */
    int device; /* visible ordinal */
    uint64_t handle, size;
    int maps;
    bool exportable; /* created with a POSIX file descriptor handle type */
};

/* A second handle of a physical allocation (cuMemImportFromShareableHandle
** of its exported descriptor): one more reference to PHYS. */
struct fake_alias {
    bool live;
    uint64_t handle;
    int phys;
};

struct fake_map {
    bool live;
    bool access; /* cuMemSetAccess done */
    uint64_t addr, size, handle;
    int phys; /* the allocation mapped, an index of fake.phys */
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

/*
** The stream-ordered pools (opaque handles): the default pool of each
** visible device (the first FAKE_MAX_DEVICES), then cuMemPoolCreate's. A
** pool reserves RESERVE bytes in chunks of FAKE_POOL_CHUNK, charged to its
** device; USED of them are in blocks. A free keeps the memory in the
** pool; cuCtxSynchronize gives back what is above the release threshold,
** cuMemPoolTrimTo what is above its argument. A pool destroyed while
** blocks live keeps its memory until the last one is freed.
*/
struct fake_pool {
    bool live;
    bool destroyed;
    int device;
    uint64_t reserve, used, threshold; /* bytes */
    uint64_t reserve_high, used_high;  /* bytes */
};

/* A graph: its allocation nodes (each freed in the graph or not). */
struct fake_gnode {
    bool alloc;  /* an allocation node, else a free node */
    int device;
    uint64_t size, dptr;
};
struct fake_graph {
    bool live;
    int n;
    struct fake_gnode nodes[FAKE_GRAPH_NODES];
};
/* An executable graph: what its allocations need on each device (the
** sum of their granules, rounded up to a chunk), mapped into the
** device's graph pool at its first upload or launch. */
struct fake_exec {
    bool live;
    bool uploaded;
    uint64_t footprint[FAKE_MAX_DEVICES];
};

static struct {
    pthread_mutex_t lock; /* guards everything here but *counts */
    bool initialized;
    int n_devices;                 /* visible */
    int phys_of[FAKE_MAX_DEVICES]; /* visible ordinal -> physical index */
    uint64_t memory;               /* bytes per device */
    struct fake_counts *counts;    /* &fake_local_counts or the shared file */
    struct fake_pool pools[FAKE_MAX_POOLS];
    int current_pool[FAKE_MAX_DEVICES]; /* cuDeviceSetMemPool's, an index */
    uint64_t graph_reserve[FAKE_MAX_DEVICES]; /* the graph pool, bytes */
    struct fake_graph graphs[FAKE_MAX_GRAPHS];
    struct fake_exec execs[FAKE_MAX_GRAPHS];
    struct fake_page pages[FAKE_MAX_PAGES];
    struct fake_alias aliases[FAKE_MAX_OBJECTS];
    int primary_refs[FAKE_MAX_DEVICES];
    struct fake_ctx ctx[FAKE_MAX_DEVICES];
    uint64_t next_addr[FAKE_MAX_DEVICES];
    uint64_t next_va, next_handle;
    uint64_t misuses;
    struct fake_alloc allocs[FAKE_MAX_ALLOCS];
    int alloc_free[FAKE_MAX_ALLOCS]; /* the free entries of allocs, a stack */
    int n_alloc_free;
    bool allocs_ready;               /* alloc_free filled */
    int alloc_hash[2 * FAKE_MAX_ALLOCS]; /* live entries by address: index + 1, 0 empty */
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

/* What this process holds on each physical device: NVML's per-process
** figure (fakecuda_process_used). Atomic. A fork child starts from 0 (its
** parent's memory is not the child's): PROCESS_PID says whose they are. */
static uint64_t process_used[FAKE_MAX_DEVICES];
static pid_t process_pid;

/* PROCESS_USED, as this process's (a fork child's start at 0). */
static uint64_t *
process_counts(void)
{
    pid_t me = getpid();
    if (__atomic_load_n(&process_pid, __ATOMIC_ACQUIRE) != me) {
        for (int i = 0; i < FAKE_MAX_DEVICES; i++)
            __atomic_store_n(&process_used[i], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&process_pid, me, __ATOMIC_RELEASE);
    }
    return process_used;
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
    __atomic_fetch_add(&process_counts()[p], bytes, __ATOMIC_SEQ_CST);
    return VCU_SUCCESS;
}

static void
uncharge(int dev, uint64_t bytes)
{
    __atomic_fetch_sub(&counts()->used[phys(dev)], bytes, __ATOMIC_SEQ_CST);
    /* A child may free its parent's memory: never below 0. */
    uint64_t *mine = &process_counts()[phys(dev)];
    uint64_t cur = __atomic_load_n(mine, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(mine, &cur, cur > bytes ? cur - bytes : 0, true,
                                        __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        ;
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
            fake.pools[i].live = i < n;
            fake.pools[i].device = i;
            fake.current_pool[i] = i;
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

/* Everything this process holds on physical device P: its context, its
** allocations' granules and pages, its pools' and graphs' reserves, its
** physical handles -- what NVML shows per process (fakenvml.c). */
unsigned long long
fakecuda_process_used(unsigned int p)
{
    if (p >= FAKE_MAX_DEVICES)
        return 0;
    return __atomic_load_n(&process_counts()[p], __ATOMIC_SEQ_CST);
}

int
fakecuda_process_listed(unsigned int p)
{
    if (fakecuda_process_used(p) > 0)
        return 1;
    int listed = 0;
    lock();
    for (int dev = 0; dev < fake.n_devices; dev++)
        if (phys(dev) == (int)p && fake.primary_refs[dev] > 0)
            listed = 1;
    unlock();
    return listed;
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

/* The context of DEV is destroyed: its allocations, arrays, pools'
** and graphs' memory and events go with it, as on the real driver. */
static void alloc_release_locked(struct fake_alloc *a);
static void pool_trim_locked(int i, uint64_t keep);
static void
ctx_contents_drop_locked(int dev)
{
    for (int i = 0; i < FAKE_MAX_ALLOCS; i++)
        if (fake.allocs[i].live && fake.allocs[i].device == dev)
            alloc_release_locked(&fake.allocs[i]);
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++)
        if (fake.events[i].live && fake.events[i].device == dev)
            fake.events[i].live = false;
    for (int i = 0; i < FAKE_MAX_POOLS; i++)
        if (fake.pools[i].live && fake.pools[i].device == dev)
            pool_trim_locked(i, 0);
    uncharge(dev, fake.graph_reserve[dev]);
    fake.graph_reserve[dev] = 0;
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

/* The work is done: each pool of the context's device gives back what it
** holds above its release threshold. */
vcu_result
cuCtxSynchronize(void)
{
    vcu_result r = enter("cuCtxSynchronize");
    if (r != VCU_SUCCESS)
        return r;
    if (ctx_depth == 0)
        return VCU_ERROR_INVALID_CONTEXT;
    int dev = ctx_stack[ctx_depth - 1]->device;
    lock();
    for (int i = 0; i < FAKE_MAX_POOLS; i++)
        if (fake.pools[i].live && fake.pools[i].device == dev)
            pool_trim_locked(i, fake.pools[i].threshold);
    unlock();
    return VCU_SUCCESS;
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

static uint64_t
round_up(uint64_t n, uint64_t unit)
{
    return (n + unit - 1) / unit * unit;
}

/* A free entry of fake.allocs, cleared, or NULL. Caller holds the lock;
** the entry becomes findable by its address with alloc_commit_locked. */
static struct fake_alloc *
alloc_slot_locked(void)
{
    if (!fake.allocs_ready) {
        for (int i = 0; i < FAKE_MAX_ALLOCS; i++)
            fake.alloc_free[i] = FAKE_MAX_ALLOCS - 1 - i;
        fake.n_alloc_free = FAKE_MAX_ALLOCS;
        fake.allocs_ready = true;
    }
    if (fake.n_alloc_free == 0)
        return NULL;
    struct fake_alloc *a = &fake.allocs[fake.alloc_free[--fake.n_alloc_free]];
    memset(a, 0, sizeof *a);
    return a;
}

/* Give back entry A, taken by alloc_slot_locked but not made live. */
static void
alloc_unslot_locked(struct fake_alloc *a)
{
    if (a != NULL)
        fake.alloc_free[fake.n_alloc_free++] = (int)(a - fake.allocs);
}

/* The home slot of ADDR in fake.alloc_hash. */
static uint32_t
alloc_home(uint64_t addr)
{
    return (uint32_t)((addr * 0x9e3779b97f4a7c15ULL) >> 40) & (2 * FAKE_MAX_ALLOCS - 1);
}

/* Entry A, live with its address set, goes into the index. Caller holds
** the lock. */
static void
alloc_commit_locked(struct fake_alloc *a)
{
    uint32_t mask = 2 * FAKE_MAX_ALLOCS - 1, i = alloc_home(a->addr);
    while (fake.alloc_hash[i] != 0)
        i = (i + 1) & mask;
    fake.alloc_hash[i] = (int)(a - fake.allocs) + 1;
}

/* Entry A leaves the index (shifting the later ones of its run back) and
** the table. Caller holds the lock. */
static void
alloc_drop_locked(struct fake_alloc *a)
{
    uint32_t mask = 2 * FAKE_MAX_ALLOCS - 1, i = alloc_home(a->addr);
    int me = (int)(a - fake.allocs) + 1;
    while (fake.alloc_hash[i] != me) {
        if (fake.alloc_hash[i] == 0)
            return; /* not indexed: never committed */
        i = (i + 1) & mask;
    }
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & mask; fake.alloc_hash[j] != 0; j = (j + 1) & mask) {
        uint32_t home = alloc_home(fake.allocs[fake.alloc_hash[j] - 1].addr);
        if (((hole - home) & mask) < ((j - home) & mask)) {
            fake.alloc_hash[hole] = fake.alloc_hash[j];
            hole = j;
        }
    }
    fake.alloc_hash[hole] = 0;
    a->live = false;
    fake.alloc_free[fake.n_alloc_free++] = me - 1;
}

/* Is KIND one of the device pointers cuMemFree and cuMemFreeAsync free? */
static bool
pointer_kind(int kind)
{
    return kind == FAKE_MEM || kind == FAKE_BLOCK || kind == FAKE_POOLED ||
           kind == FAKE_CAPTURED;
}

/* The live entry at ADDR of KIND (FAKE_MEM: any device pointer), freed
** by its owner too if FREED, or NULL. Caller holds the lock. */
static struct fake_alloc *
alloc_lookup_locked(uint64_t addr, int kind, bool freed)
{
    uint32_t mask = 2 * FAKE_MAX_ALLOCS - 1;
    for (uint32_t i = alloc_home(addr); fake.alloc_hash[i] != 0; i = (i + 1) & mask) {
        struct fake_alloc *a = &fake.allocs[fake.alloc_hash[i] - 1];
        if (a->live && (freed || !a->freed) && a->addr == addr &&
            (kind == FAKE_MEM ? pointer_kind(a->kind) : a->kind == kind))
            return a;
    }
    return NULL;
}

/* The live entry at ADDR of KIND that its owner has not freed. */
static struct fake_alloc *
alloc_find_locked(uint64_t addr, int kind)
{
    return alloc_lookup_locked(addr, kind, false);
}

/* Pool I of fake.pools: give back what its reserve holds above KEEP bytes
** (never below its blocks), in whole chunks. Caller holds the lock. */
static void
pool_trim_locked(int i, uint64_t keep)
{
    struct fake_pool *p = &fake.pools[i];
    uint64_t target = round_up(keep > p->used ? keep : p->used, FAKE_POOL_CHUNK);
    if (keep > UINT64_MAX - FAKE_POOL_CHUNK)
        target = p->reserve; /* a threshold of "everything" keeps it all */
    if (target < p->reserve) {
        uncharge(p->device, p->reserve - target);
        p->reserve = target;
    }
}

/* Give back what entry A holds, and end it. Caller holds the lock. */
static void
alloc_release_locked(struct fake_alloc *a)
{
    if (a->kind == FAKE_BLOCK) {
        struct fake_page *pg = &fake.pages[a->owner];
        uint64_t k = (a->addr - pg->addr) / pg->block;
        pg->bits[k / 64] &= ~(1ULL << (k % 64));
        if (--pg->n_live == 0) {
            uncharge(pg->device, FAKE_GRANULE);
            pg->live = false;
        }
    } else if (a->kind == FAKE_POOLED) {
        struct fake_pool *p = &fake.pools[a->owner];
        p->used -= a->size;
        if (p->destroyed && p->used == 0) {
            uncharge(p->device, p->reserve);
            memset(p, 0, sizeof *p);
        }
    } else if (a->charged > 0) {
        uncharge(a->device, a->charged);
    }
    alloc_drop_locked(a);
}

/* The block size of a sub-allocated BYTES: the next power of two, at
** least FAKE_MIN_BLOCK. */
static uint64_t
block_of(uint64_t bytes)
{
    uint64_t b = FAKE_MIN_BLOCK;
    while (b < bytes)
        b <<= 1;
    return b;
}

/* A block of BLOCK bytes on DEV in a page of its size, a new page charged
** if none has room: its entry A is filled. Caller holds the lock. */
static vcu_result
block_take_locked(int dev, uint64_t block, struct fake_alloc *a)
{
    uint32_t per_page = (uint32_t)(FAKE_GRANULE / block);
    int pi = -1, free_pi = -1;
    for (int i = 0; i < FAKE_MAX_PAGES && pi < 0; i++) {
        const struct fake_page *pg = &fake.pages[i];
        if (pg->live && pg->device == dev && pg->block == block && pg->n_live < per_page)
            pi = i;
        else if (!pg->live && free_pi < 0)
            free_pi = i;
    }
    if (pi < 0) {
        if (free_pi < 0 || charge(dev, FAKE_GRANULE) != VCU_SUCCESS)
            return VCU_ERROR_OUT_OF_MEMORY;
        pi = free_pi;
        struct fake_page *pg = &fake.pages[pi];
        memset(pg, 0, sizeof *pg);
        pg->live = true;
        pg->device = dev;
        pg->block = (uint32_t)block;
        pg->addr = fake.next_addr[dev];
        fake.next_addr[dev] += FAKE_GRANULE;
    }
    struct fake_page *pg = &fake.pages[pi];
    uint32_t k = 0;
    while (pg->bits[k / 64] & (1ULL << (k % 64)))
        k++;
    pg->bits[k / 64] |= 1ULL << (k % 64);
    pg->n_live++;
    a->kind = FAKE_BLOCK;
    a->addr = pg->addr + (uint64_t)k * block;
    a->size = block;
    a->owner = pi;
    return VCU_SUCCESS;
}

/*
** cuMemAlloc's memory of BYTES on visible device DEV (also pitched and
** managed memory): above FAKE_SUBALLOC_MAX whole granules of its own,
** else a block of a shared page. The address into *ADDR; addresses are
** never reused, so that stale frees show.
*/
static vcu_result
mem_alloc(int dev, uint64_t bytes, vcu_deviceptr *addr)
{
    if (bytes > fake.memory)
        return VCU_ERROR_OUT_OF_MEMORY;
    if (oom_forced())
        return VCU_ERROR_OUT_OF_MEMORY;
    lock();
    struct fake_alloc *a = alloc_slot_locked();
    vcu_result r = VCU_ERROR_OUT_OF_MEMORY;
    if (a != NULL && bytes > FAKE_SUBALLOC_MAX) {
        uint64_t charged = round_up(bytes, FAKE_GRANULE);
        r = charge(dev, charged);
        if (r == VCU_SUCCESS) {
            a->kind = FAKE_MEM;
            a->addr = fake.next_addr[dev];
            a->charged = charged;
            a->size = bytes;
            fake.next_addr[dev] += charged;
        }
    } else if (a != NULL) {
        r = block_take_locked(dev, block_of(bytes), a);
    }
    if (r == VCU_SUCCESS) {
        a->live = true;
        a->device = dev;
        alloc_commit_locked(a);
        *addr = a->addr;
    } else {
        alloc_unslot_locked(a);
    }
    unlock();
    return r;
}

/* Free the live allocation of KIND (FAKE_MEM: any device pointer) at
** ADDR. One still opened through IPC keeps its memory until the last
** cuIpcCloseMemHandle. */
static vcu_result
free_at(uint64_t addr, int kind)
{
    lock();
    struct fake_alloc *a = alloc_find_locked(addr, kind);
    vcu_result r = a != NULL                                    ? VCU_SUCCESS
                   : kind == FAKE_ARRAY || kind == FAKE_MIPMAP ? VCU_ERROR_INVALID_HANDLE
                                                                : VCU_ERROR_INVALID_VALUE;
    if (a != NULL && a->ipc_opens > 0)
        a->freed = true;
    else if (a != NULL)
        alloc_release_locked(a);
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
    return r != VCU_SUCCESS ? r : mem_alloc(dev, bytesize, dptr);
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
    r = mem_alloc(dev, row * height, dptr);
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
    return mem_alloc(dev, bytesize, dptr);
}

/* ------------------------------------------------------------------ */
/* Stream-ordered pools                                                 */
/* ------------------------------------------------------------------ */

/* POOL as an index of fake.pools (a live pool not destroyed), or -1. */
static int
pool_index(vcu_mem_pool pool)
{
    uintptr_t p = (uintptr_t)(void *)pool, base = (uintptr_t)fake.pools;
    if (p < base || p >= base + sizeof fake.pools || (p - base) % sizeof fake.pools[0] != 0)
        return -1;
    int i = (int)((p - base) / sizeof fake.pools[0]);
    lock();
    bool ok = fake.pools[i].live && !fake.pools[i].destroyed;
    unlock();
    return ok ? i : -1;
}

static vcu_mem_pool
pool_handle(int i)
{
    return (vcu_mem_pool)(void *)&fake.pools[i];
}

/*
** A block of BYTES (rounded up to 512) from pool I, into *ADDR: from the
** reserve, which grows by whole chunks when the block does not fit. While
** STREAM captures a graph (fakecuda_capture), nothing is reserved: the
** address is the graph's, and holds nothing.
*/
static vcu_result
pool_alloc(int i, uint64_t bytes, vcu_stream stream, vcu_deviceptr *addr)
{
    if (oom_forced())
        return VCU_ERROR_OUT_OF_MEMORY;
    uint64_t block = round_up(bytes, 512);
    if (block > fake.memory)
        return VCU_ERROR_OUT_OF_MEMORY;
    lock();
    struct fake_pool *p = &fake.pools[i];
    struct fake_alloc *a = alloc_slot_locked();
    vcu_result r = a != NULL ? VCU_SUCCESS : VCU_ERROR_OUT_OF_MEMORY;
    bool captured = capture_stream != NULL && (void *)stream == capture_stream;
    if (r == VCU_SUCCESS && !captured && p->used + block > p->reserve) {
        uint64_t grow = round_up(p->used + block - p->reserve, FAKE_POOL_CHUNK);
        r = charge(p->device, grow);
        if (r == VCU_SUCCESS) {
            p->reserve += grow;
            if (p->reserve > p->reserve_high)
                p->reserve_high = p->reserve;
        }
    }
    if (r == VCU_SUCCESS) {
        a->live = true;
        a->kind = captured ? FAKE_CAPTURED : FAKE_POOLED;
        a->device = p->device;
        a->addr = fake.next_addr[p->device];
        a->size = block;
        a->owner = i;
        fake.next_addr[p->device] += round_up(block, FAKE_GRANULE);
        if (!captured) {
            p->used += block;
            if (p->used > p->used_high)
                p->used_high = p->used;
        }
        alloc_commit_locked(a);
        *addr = a->addr;
    } else {
        alloc_unslot_locked(a);
    }
    unlock();
    return r;
}

/* The stream-ordered calls act at once (the fake has no work to order),
** on the current device's current pool. */
static vcu_result
alloc_async(const char *symbol, vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream)
{
    int dev;
    vcu_result r = alloc_enter(symbol, dptr, bytesize, &dev);
    if (r != VCU_SUCCESS)
        return r;
    lock();
    int i = fake.current_pool[dev];
    unlock();
    return pool_alloc(i, bytesize, stream, dptr);
}

vcu_result
cuMemAllocAsync(vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream)
{
    return alloc_async("cuMemAllocAsync", dptr, bytesize, stream);
}

vcu_result
cuMemAllocAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream)
{
    return alloc_async("cuMemAllocAsync_ptsz", dptr, bytesize, stream);
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
    *pool = pool_handle(dev);
    return VCU_SUCCESS;
}

vcu_result
cuDeviceGetMemPool(vcu_mem_pool *pool, vcu_device dev)
{
    vcu_result r = enter("cuDeviceGetMemPool");
    if (r != VCU_SUCCESS)
        return r;
    if (pool == NULL)
        return VCU_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return VCU_ERROR_INVALID_DEVICE;
    lock();
    *pool = pool_handle(fake.current_pool[dev]);
    unlock();
    return VCU_SUCCESS;
}

/* POOL becomes DEV's current pool (cuMemAllocAsync's). */
static vcu_result
set_current_pool(const char *symbol, vcu_device dev, vcu_mem_pool pool)
{
    vcu_result r = enter(symbol);
    if (r != VCU_SUCCESS)
        return r;
    if (!valid_device(dev))
        return VCU_ERROR_INVALID_DEVICE;
    int i = pool_index(pool);
    if (i < 0)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    r = fake.pools[i].device == dev ? VCU_SUCCESS : VCU_ERROR_INVALID_DEVICE;
    if (r == VCU_SUCCESS)
        fake.current_pool[dev] = i;
    unlock();
    return r;
}

vcu_result
cuDeviceSetMemPool(vcu_device dev, vcu_mem_pool pool)
{
    return set_current_pool("cuDeviceSetMemPool", dev, pool);
}

vcu_result
cuMemSetMemPool(vcu_mem_location *location, vcu_mem_allocation_type type, vcu_mem_pool pool)
{
    if (location == NULL || location->type != VCU_MEM_LOCATION_TYPE_DEVICE ||
        type != VCU_MEM_ALLOCATION_TYPE_PINNED)
        return VCU_ERROR_INVALID_VALUE;
    return set_current_pool("cuMemSetMemPool", location->id, pool);
}

vcu_result
cuMemPoolCreate(vcu_mem_pool *pool, const vcu_mem_pool_props *props)
{
    vcu_result r = enter("cuMemPoolCreate");
    if (r != VCU_SUCCESS)
        return r;
    if (pool == NULL || props == NULL || props->allocType != VCU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != VCU_MEM_LOCATION_TYPE_DEVICE ||
        !valid_device(props->location.id))
        return VCU_ERROR_INVALID_VALUE;
    lock();
    r = VCU_ERROR_OUT_OF_MEMORY;
    for (int i = FAKE_MAX_DEVICES; i < FAKE_MAX_POOLS; i++) {
        struct fake_pool *p = &fake.pools[i];
        if (p->live)
            continue;
        memset(p, 0, sizeof *p);
        p->live = true;
        p->device = props->location.id;
        *pool = pool_handle(i);
        r = VCU_SUCCESS;
        break;
    }
    unlock();
    return r;
}

/* A default pool cannot be destroyed; a pool that is a device's current
** one stops being it. With blocks alive, its memory stays until the last
** is freed. */
vcu_result
cuMemPoolDestroy(vcu_mem_pool pool)
{
    vcu_result r = enter("cuMemPoolDestroy");
    if (r != VCU_SUCCESS)
        return r;
    int i = pool_index(pool);
    if (i < FAKE_MAX_DEVICES)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    struct fake_pool *p = &fake.pools[i];
    if (fake.current_pool[p->device] == i)
        fake.current_pool[p->device] = p->device;
    if (p->used > 0) {
        p->destroyed = true;
    } else {
        uncharge(p->device, p->reserve);
        memset(p, 0, sizeof *p);
    }
    unlock();
    return VCU_SUCCESS;
}

vcu_result
cuMemPoolGetAttribute(vcu_mem_pool pool, vcu_mempool_attribute attr, void *value)
{
    vcu_result r = enter("cuMemPoolGetAttribute");
    if (r != VCU_SUCCESS)
        return r;
    int i = pool_index(pool);
    if (i < 0 || value == NULL)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    const struct fake_pool *p = &fake.pools[i];
    uint64_t v = 0;
    r = VCU_SUCCESS;
    switch (attr) {
    case VCU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = p->threshold; break;
    case VCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = p->reserve; break;
    case VCU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = p->reserve_high; break;
    case VCU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = p->used; break;
    case VCU_MEMPOOL_ATTR_USED_MEM_HIGH: v = p->used_high; break;
    default: r = VCU_ERROR_INVALID_VALUE; break;
    }
    unlock();
    if (r == VCU_SUCCESS)
        memcpy(value, &v, sizeof v);
    return r;
}

/* The release threshold; the high marks may only be reset to 0. */
vcu_result
cuMemPoolSetAttribute(vcu_mem_pool pool, vcu_mempool_attribute attr, void *value)
{
    vcu_result r = enter("cuMemPoolSetAttribute");
    if (r != VCU_SUCCESS)
        return r;
    int i = pool_index(pool);
    if (i < 0 || value == NULL)
        return VCU_ERROR_INVALID_VALUE;
    uint64_t v;
    memcpy(&v, value, sizeof v);
    lock();
    struct fake_pool *p = &fake.pools[i];
    if (attr == VCU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        p->threshold = v;
    else if (attr == VCU_MEMPOOL_ATTR_RESERVED_MEM_HIGH && v == 0)
        p->reserve_high = p->reserve;
    else if (attr == VCU_MEMPOOL_ATTR_USED_MEM_HIGH && v == 0)
        p->used_high = p->used;
    else
        r = VCU_ERROR_INVALID_VALUE;
    unlock();
    return r;
}

vcu_result
cuMemPoolTrimTo(vcu_mem_pool pool, size_t minBytesToKeep)
{
    vcu_result r = enter("cuMemPoolTrimTo");
    if (r != VCU_SUCCESS)
        return r;
    int i = pool_index(pool);
    if (i < 0)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    pool_trim_locked(i, minBytesToKeep);
    unlock();
    return VCU_SUCCESS;
}

/* From any live pool: that pool's device. */
static vcu_result
alloc_from_pool(const char *symbol, vcu_deviceptr *dptr, size_t bytesize,
                vcu_mem_pool pool, vcu_stream stream)
{
    int dev;
    vcu_result r = alloc_enter(symbol, dptr, bytesize, &dev);
    if (r != VCU_SUCCESS)
        return r;
    int i = pool_index(pool);
    if (i < 0)
        return VCU_ERROR_INVALID_VALUE;
    return pool_alloc(i, bytesize, stream, dptr);
}

vcu_result
cuMemAllocFromPoolAsync(vcu_deviceptr *dptr, size_t bytesize, vcu_mem_pool pool,
                        vcu_stream stream)
{
    return alloc_from_pool("cuMemAllocFromPoolAsync", dptr, bytesize, pool, stream);
}

vcu_result
cuMemAllocFromPoolAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize, vcu_mem_pool pool,
                             vcu_stream stream)
{
    return alloc_from_pool("cuMemAllocFromPoolAsync_ptsz", dptr, bytesize, pool, stream);
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

/*
** The layout of an array level of W x H x D elements (H, D: 0 means 1)
** of CHANNELS x F: rows padded to FAKE_PITCH bytes, heights above 1 to a
** multiple of FAKE_ARRAY_ROWS; 0 when it is invalid or larger than the
** device.
*/
static uint64_t
array_layout(size_t w, size_t h, size_t d, vcu_array_format f, unsigned channels)
{
    uint64_t size = format_size(f);
    if (w == 0 || size == 0 || (channels != 1 && channels != 2 && channels != 4))
        return 0;
    uint64_t hh = h > 1 ? round_up(h, FAKE_ARRAY_ROWS) : 1, dd = d > 0 ? d : 1;
    if (w > fake.memory / channels / size)
        return 0;
    uint64_t row = round_up(w * channels * size, FAKE_PITCH);
    if (row > fake.memory / hh / dd)
        return 0;
    return row * hh * dd;
}

/*
** A new array handle of KIND (FAKE_ARRAY or FAKE_MIPMAP) with a LAYOUT of
** bytes, on the current device: held in whole granules of its own, or
** nothing with CUDA_ARRAY3D_DEFERRED_MAPPING or SPARSE in FLAGS (the
** memory is mapped later through the virtual-memory API).
*/
static vcu_result
array_new(const char *symbol, int kind, uint64_t layout, unsigned flags, uint64_t *handle)
{
    vcu_result r = enter(symbol);
    if (r != VCU_SUCCESS)
        return r;
    int dev = current_device();
    if (dev < 0)
        return VCU_ERROR_INVALID_CONTEXT;
    if (layout == 0)
        return VCU_ERROR_INVALID_VALUE;
    if (oom_forced())
        return VCU_ERROR_OUT_OF_MEMORY;
    bool backed = (flags & (VCU_ARRAY3D_DEFERRED_MAPPING | VCU_ARRAY3D_SPARSE)) == 0;
    uint64_t charged = backed ? round_up(layout, FAKE_GRANULE) : 0;
    lock();
    struct fake_alloc *a = alloc_slot_locked();
    r = a == NULL ? VCU_ERROR_OUT_OF_MEMORY : charged > 0 ? charge(dev, charged) : VCU_SUCCESS;
    if (r == VCU_SUCCESS) {
        a->live = true;
        a->kind = kind;
        a->device = dev;
        a->addr = fake.next_addr[dev];
        a->charged = charged;
        a->size = layout;
        a->owner = backed ? 0 : 1; /* 1: deferred, its requirements may be asked */
        fake.next_addr[dev] += FAKE_GRANULE;
        alloc_commit_locked(a);
        *handle = a->addr;
    } else {
        alloc_unslot_locked(a);
    }
    unlock();
    return r;
}

vcu_result
cuArrayCreate_v2(vcu_array *array, const vcu_array_descriptor *desc)
{
    if (desc == NULL || array == NULL)
        return VCU_ERROR_INVALID_VALUE;
    uint64_t h;
    vcu_result r = array_new(
        "cuArrayCreate_v2", FAKE_ARRAY,
        array_layout(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels), 0, &h);
    if (r == VCU_SUCCESS)
        *array = (vcu_array)(uintptr_t)h;
    return r;
}

vcu_result
cuArray3DCreate_v2(vcu_array *array, const vcu_array3d_descriptor *desc)
{
    if (desc == NULL || array == NULL)
        return VCU_ERROR_INVALID_VALUE;
    uint64_t h;
    vcu_result r = array_new("cuArray3DCreate_v2", FAKE_ARRAY,
                             array_layout(desc->Width, desc->Height, desc->Depth,
                                          desc->Format, desc->NumChannels),
                             desc->Flags, &h);
    if (r == VCU_SUCCESS)
        *array = (vcu_array)(uintptr_t)h;
    return r;
}

vcu_result
cuArrayDestroy(vcu_array array)
{
    vcu_result r = enter("cuArrayDestroy");
    if (r != VCU_SUCCESS)
        return r;
    return free_at((uint64_t)(uintptr_t)array, FAKE_ARRAY);
}

/* Levels 0..LEVELS-1, each half the last in every dimension (at least 1). */
vcu_result
cuMipmappedArrayCreate(vcu_mipmapped_array *pHandle, const vcu_array3d_descriptor *desc,
                       unsigned int numMipmapLevels)
{
    if (desc == NULL || pHandle == NULL || numMipmapLevels == 0 || numMipmapLevels > 32)
        return VCU_ERROR_INVALID_VALUE;
    uint64_t total = 0;
    for (unsigned l = 0; l < numMipmapLevels; l++) {
        size_t w = desc->Width >> l, h = desc->Height >> l, d = desc->Depth >> l;
        uint64_t level = array_layout(w > 0 ? w : 1, desc->Height == 0 ? 0 : h > 0 ? h : 1,
                                      desc->Depth == 0 ? 0 : d > 0 ? d : 1, desc->Format,
                                      desc->NumChannels);
        if (level == 0 || total > UINT64_MAX - level)
            return VCU_ERROR_INVALID_VALUE;
        total += level;
    }
    uint64_t h;
    vcu_result r =
        array_new("cuMipmappedArrayCreate", FAKE_MIPMAP, total, desc->Flags, &h);
    if (r == VCU_SUCCESS)
        *pHandle = (vcu_mipmapped_array)(uintptr_t)h;
    return r;
}

vcu_result
cuMipmappedArrayDestroy(vcu_mipmapped_array hMipmappedArray)
{
    vcu_result r = enter("cuMipmappedArrayDestroy");
    if (r != VCU_SUCCESS)
        return r;
    return free_at((uint64_t)(uintptr_t)hMipmappedArray, FAKE_MIPMAP);
}

/* As the real driver: only for an array made with
** CUDA_ARRAY3D_DEFERRED_MAPPING; the size is its layout in 64 KiB units. */
static vcu_result
requirements(const char *symbol, vcu_array_memory_requirements *req, uint64_t handle,
             int kind, vcu_device device)
{
    vcu_result r = enter(symbol);
    if (r != VCU_SUCCESS)
        return r;
    if (req == NULL || !valid_device(device))
        return VCU_ERROR_INVALID_VALUE;
    lock();
    const struct fake_alloc *a = alloc_find_locked(handle, kind);
    r = a != NULL && a->owner == 1 ? VCU_SUCCESS : VCU_ERROR_INVALID_VALUE;
    if (r == VCU_SUCCESS) {
        memset(req, 0, sizeof *req);
        req->size = round_up(a->size, 64 << 10);
        req->alignment = 64 << 10;
    }
    unlock();
    return r;
}

vcu_result
cuArrayGetMemoryRequirements(vcu_array_memory_requirements *memoryRequirements,
                             vcu_array array, vcu_device device)
{
    return requirements("cuArrayGetMemoryRequirements", memoryRequirements,
                        (uint64_t)(uintptr_t)array, FAKE_ARRAY, device);
}

vcu_result
cuMipmappedArrayGetMemoryRequirements(vcu_array_memory_requirements *memoryRequirements,
                                      vcu_mipmapped_array mipmap, vcu_device device)
{
    return requirements("cuMipmappedArrayGetMemoryRequirements", memoryRequirements,
                        (uint64_t)(uintptr_t)mipmap, FAKE_MIPMAP, device);
}

/* ------------------------------------------------------------------ */
/* IPC                                                                  */
/* ------------------------------------------------------------------ */

/*
** The handle carries the allocation's address. The fake has one process's
** state, so the "other process" that opens it is this one: opening gives
** the same address and keeps the memory alive until it is closed, even
** after its owner frees it (what the driver does for an importer).
*/
vcu_result
cuIpcGetMemHandle(vcu_ipc_mem_handle *pHandle, vcu_deviceptr dptr)
{
    vcu_result r = enter("cuIpcGetMemHandle");
    if (r != VCU_SUCCESS)
        return r;
    if (pHandle == NULL)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    const struct fake_alloc *a = alloc_find_locked(dptr, FAKE_MEM);
    r = a != NULL && (a->kind == FAKE_MEM || a->kind == FAKE_BLOCK) ? VCU_SUCCESS
                                                                      : VCU_ERROR_INVALID_VALUE;
    unlock();
    if (r == VCU_SUCCESS) {
        memset(pHandle, 0, sizeof *pHandle);
        memcpy(pHandle->reserved, &dptr, sizeof dptr);
    }
    return r;
}

vcu_result
cuIpcOpenMemHandle_v2(vcu_deviceptr *pdptr, vcu_ipc_mem_handle handle, unsigned int Flags)
{
    (void)Flags;
    vcu_result r = enter("cuIpcOpenMemHandle_v2");
    if (r != VCU_SUCCESS)
        return r;
    if (pdptr == NULL)
        return VCU_ERROR_INVALID_VALUE;
    vcu_deviceptr p;
    memcpy(&p, handle.reserved, sizeof p);
    lock();
    struct fake_alloc *a = alloc_find_locked(p, FAKE_MEM);
    if (a != NULL)
        a->ipc_opens++;
    unlock();
    if (a == NULL)
        return VCU_ERROR_INVALID_VALUE;
    *pdptr = p;
    return VCU_SUCCESS;
}

vcu_result
cuIpcCloseMemHandle(vcu_deviceptr dptr)
{
    vcu_result r = enter("cuIpcCloseMemHandle");
    if (r != VCU_SUCCESS)
        return r;
    lock();
    struct fake_alloc *a = alloc_lookup_locked(dptr, FAKE_MEM, true);
    r = a != NULL && a->ipc_opens > 0 ? VCU_SUCCESS : VCU_ERROR_INVALID_VALUE;
    if (r == VCU_SUCCESS && --a->ipc_opens == 0 && a->freed)
        alloc_release_locked(a);
    unlock();
    return r;
}

/* ------------------------------------------------------------------ */
/* Graphs and their memory                                              */
/* ------------------------------------------------------------------ */

/* GRAPH as an index of fake.graphs, or -1. */
static int
graph_index(vcu_graph graph)
{
    uintptr_t p = (uintptr_t)(void *)graph, base = (uintptr_t)fake.graphs;
    if (p < base || p >= base + sizeof fake.graphs || (p - base) % sizeof fake.graphs[0] != 0)
        return -1;
    int i = (int)((p - base) / sizeof fake.graphs[0]);
    lock();
    bool live = fake.graphs[i].live;
    unlock();
    return live ? i : -1;
}

/* NODE as (graph, node) indexes; false if it is none of ours. */
static bool
node_index(vcu_graph_node node, int *g, int *k)
{
    uintptr_t p = (uintptr_t)(void *)node, base = (uintptr_t)fake.graphs;
    if (p < base || p >= base + sizeof fake.graphs)
        return false;
    size_t off = (size_t)(p - base);
    *g = (int)(off / sizeof fake.graphs[0]);
    size_t in = off % sizeof fake.graphs[0];
    size_t first = offsetof(struct fake_graph, nodes);
    if (in < first || (in - first) % sizeof(struct fake_gnode) != 0)
        return false;
    *k = (int)((in - first) / sizeof(struct fake_gnode));
    lock();
    bool ok = fake.graphs[*g].live && *k < fake.graphs[*g].n;
    unlock();
    return ok;
}

vcu_result
cuGraphCreate(vcu_graph *phGraph, unsigned int flags)
{
    vcu_result r = enter("cuGraphCreate");
    if (r != VCU_SUCCESS)
        return r;
    if (phGraph == NULL || flags != 0)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    r = VCU_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < FAKE_MAX_GRAPHS; i++) {
        if (fake.graphs[i].live)
            continue;
        memset(&fake.graphs[i], 0, sizeof fake.graphs[i]);
        fake.graphs[i].live = true;
        *phGraph = (vcu_graph)(void *)&fake.graphs[i];
        r = VCU_SUCCESS;
        break;
    }
    unlock();
    return r;
}

vcu_result
cuGraphDestroy(vcu_graph hGraph)
{
    vcu_result r = enter("cuGraphDestroy");
    if (r != VCU_SUCCESS)
        return r;
    int g = graph_index(hGraph);
    if (g < 0)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    fake.graphs[g].live = false;
    unlock();
    return VCU_SUCCESS;
}

/* Dependencies are not modelled: the fake runs nothing. */
vcu_result
cuGraphAddMemAllocNode(vcu_graph_node *phGraphNode, vcu_graph hGraph,
                       const vcu_graph_node *dependencies, size_t numDependencies,
                       vcu_mem_alloc_node_params *nodeParams)
{
    (void)dependencies;
    (void)numDependencies;
    vcu_result r = enter("cuGraphAddMemAllocNode");
    if (r != VCU_SUCCESS)
        return r;
    int g = graph_index(hGraph);
    if (g < 0 || phGraphNode == NULL || nodeParams == NULL || nodeParams->bytesize == 0 ||
        nodeParams->poolProps.location.type != VCU_MEM_LOCATION_TYPE_DEVICE ||
        !valid_device(nodeParams->poolProps.location.id))
        return VCU_ERROR_INVALID_VALUE;
    lock();
    struct fake_graph *gr = &fake.graphs[g];
    r = gr->n < FAKE_GRAPH_NODES ? VCU_SUCCESS : VCU_ERROR_OUT_OF_MEMORY;
    if (r == VCU_SUCCESS) {
        int dev = nodeParams->poolProps.location.id;
        struct fake_gnode *n = &gr->nodes[gr->n];
        n->alloc = true;
        n->device = dev;
        n->size = nodeParams->bytesize;
        n->dptr = fake.next_addr[dev];
        fake.next_addr[dev] += round_up(n->size, FAKE_GRANULE);
        nodeParams->dptr = n->dptr;
        *phGraphNode = (vcu_graph_node)(void *)n;
        gr->n++;
    }
    unlock();
    return r;
}

vcu_result
cuGraphAddMemFreeNode(vcu_graph_node *phGraphNode, vcu_graph hGraph,
                      const vcu_graph_node *dependencies, size_t numDependencies,
                      vcu_deviceptr dptr)
{
    (void)dependencies;
    (void)numDependencies;
    vcu_result r = enter("cuGraphAddMemFreeNode");
    if (r != VCU_SUCCESS)
        return r;
    int g = graph_index(hGraph);
    if (g < 0 || phGraphNode == NULL)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    struct fake_graph *gr = &fake.graphs[g];
    r = gr->n < FAKE_GRAPH_NODES ? VCU_SUCCESS : VCU_ERROR_OUT_OF_MEMORY;
    if (r == VCU_SUCCESS) {
        struct fake_gnode *n = &gr->nodes[gr->n];
        memset(n, 0, sizeof *n);
        n->dptr = dptr;
        *phGraphNode = (vcu_graph_node)(void *)n;
        gr->n++;
    }
    unlock();
    return r;
}

vcu_result
cuGraphGetNodes(vcu_graph hGraph, vcu_graph_node *nodes, size_t *numNodes)
{
    vcu_result r = enter("cuGraphGetNodes");
    if (r != VCU_SUCCESS)
        return r;
    int g = graph_index(hGraph);
    if (g < 0 || numNodes == NULL)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    struct fake_graph *gr = &fake.graphs[g];
    if (nodes != NULL) {
        size_t n = *numNodes < (size_t)gr->n ? *numNodes : (size_t)gr->n;
        for (size_t k = 0; k < n; k++)
            nodes[k] = (vcu_graph_node)(void *)&gr->nodes[k];
        *numNodes = n;
    } else {
        *numNodes = (size_t)gr->n;
    }
    unlock();
    return VCU_SUCCESS;
}

vcu_result
cuGraphNodeGetType(vcu_graph_node hNode, vcu_graph_node_type *type)
{
    vcu_result r = enter("cuGraphNodeGetType");
    if (r != VCU_SUCCESS)
        return r;
    int g, k;
    if (type == NULL || !node_index(hNode, &g, &k))
        return VCU_ERROR_INVALID_VALUE;
    lock();
    *type = fake.graphs[g].nodes[k].alloc ? VCU_GRAPH_NODE_TYPE_MEM_ALLOC
                                          : VCU_GRAPH_NODE_TYPE_MEM_FREE;
    unlock();
    return VCU_SUCCESS;
}

vcu_result
cuGraphMemAllocNodeGetParams(vcu_graph_node hNode, vcu_mem_alloc_node_params *params_out)
{
    vcu_result r = enter("cuGraphMemAllocNodeGetParams");
    if (r != VCU_SUCCESS)
        return r;
    int g, k;
    if (params_out == NULL || !node_index(hNode, &g, &k))
        return VCU_ERROR_INVALID_VALUE;
    lock();
    const struct fake_gnode *n = &fake.graphs[g].nodes[k];
    r = n->alloc ? VCU_SUCCESS : VCU_ERROR_INVALID_VALUE;
    if (r == VCU_SUCCESS) {
        memset(params_out, 0, sizeof *params_out);
        params_out->poolProps.allocType = VCU_MEM_ALLOCATION_TYPE_PINNED;
        params_out->poolProps.location.type = VCU_MEM_LOCATION_TYPE_DEVICE;
        params_out->poolProps.location.id = n->device;
        params_out->bytesize = n->size;
        params_out->dptr = n->dptr;
    }
    unlock();
    return r;
}

/* The fake's graphs have no child graph nodes. */
vcu_result
cuGraphChildGraphNodeGetGraph(vcu_graph_node hNode, vcu_graph *phGraph)
{
    (void)hNode;
    (void)phGraph;
    vcu_result r = enter("cuGraphChildGraphNodeGetGraph");
    return r != VCU_SUCCESS ? r : VCU_ERROR_INVALID_VALUE;
}

/* An executable graph of GRAPH, uploaded at once with UPLOAD. */
static vcu_result exec_upload(const char *symbol, vcu_graph_exec exec);
static vcu_result
instantiate(const char *symbol, vcu_graph_exec *phGraphExec, vcu_graph hGraph, bool upload)
{
    vcu_result r = enter(symbol);
    if (r != VCU_SUCCESS)
        return r;
    int g = graph_index(hGraph);
    if (g < 0 || phGraphExec == NULL)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    r = VCU_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < FAKE_MAX_GRAPHS; i++) {
        struct fake_exec *e = &fake.execs[i];
        if (e->live)
            continue;
        memset(e, 0, sizeof *e);
        e->live = true;
        const struct fake_graph *gr = &fake.graphs[g];
        for (int k = 0; k < gr->n; k++)
            if (gr->nodes[k].alloc)
                e->footprint[gr->nodes[k].device] += round_up(gr->nodes[k].size, FAKE_GRANULE);
        for (int d = 0; d < FAKE_MAX_DEVICES; d++)
            e->footprint[d] = round_up(e->footprint[d], FAKE_POOL_CHUNK);
        *phGraphExec = (vcu_graph_exec)(void *)e;
        r = VCU_SUCCESS;
        break;
    }
    unlock();
    if (r == VCU_SUCCESS && upload) {
        r = exec_upload(symbol, *phGraphExec);
        if (r != VCU_SUCCESS) {
            lock();
            ((struct fake_exec *)(void *)*phGraphExec)->live = false;
            unlock();
        }
    }
    return r;
}

vcu_result
cuGraphInstantiateWithFlags(vcu_graph_exec *phGraphExec, vcu_graph hGraph,
                            unsigned long long flags)
{
    return instantiate("cuGraphInstantiateWithFlags", phGraphExec, hGraph,
                       (flags & VCU_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0);
}

static vcu_result
instantiate_params(const char *symbol, vcu_graph_exec *phGraphExec, vcu_graph hGraph,
                   vcu_graph_instantiate_params *params)
{
    if (params == NULL)
        return VCU_ERROR_INVALID_VALUE;
    vcu_result r = instantiate(symbol, phGraphExec, hGraph,
                               (params->flags & VCU_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0);
    params->result_out =
        r == VCU_SUCCESS ? VCU_GRAPH_INSTANTIATE_SUCCESS : VCU_GRAPH_INSTANTIATE_ERROR;
    return r;
}

vcu_result
cuGraphInstantiateWithParams(vcu_graph_exec *phGraphExec, vcu_graph hGraph,
                             vcu_graph_instantiate_params *instantiateParams)
{
    return instantiate_params("cuGraphInstantiateWithParams", phGraphExec, hGraph,
                              instantiateParams);
}

vcu_result
cuGraphInstantiateWithParams_ptsz(vcu_graph_exec *phGraphExec, vcu_graph hGraph,
                                  vcu_graph_instantiate_params *instantiateParams)
{
    return instantiate_params("cuGraphInstantiateWithParams_ptsz", phGraphExec, hGraph,
                              instantiateParams);
}

vcu_result
cuGraphInstantiate_v2(vcu_graph_exec *phGraphExec, vcu_graph hGraph,
                      vcu_graph_node *phErrorNode, char *logBuffer, size_t bufferSize)
{
    (void)phErrorNode;
    if (logBuffer != NULL && bufferSize > 0)
        logBuffer[0] = '\0';
    return instantiate("cuGraphInstantiate_v2", phGraphExec, hGraph, false);
}

/* EXEC as one of ours, live, or NULL. Caller holds the lock. */
static struct fake_exec *
exec_locked(vcu_graph_exec exec)
{
    uintptr_t p = (uintptr_t)(void *)exec, base = (uintptr_t)fake.execs;
    if (p < base || p >= base + sizeof fake.execs || (p - base) % sizeof fake.execs[0] != 0)
        return NULL;
    struct fake_exec *e = &fake.execs[(p - base) / sizeof fake.execs[0]];
    return e->live ? e : NULL;
}

/* The first upload or launch maps the graph's allocations into each
** device's graph pool, which keeps them until cuDeviceGraphMemTrim. */
static vcu_result
exec_upload(const char *symbol, vcu_graph_exec exec)
{
    vcu_result r = enter(symbol);
    if (r != VCU_SUCCESS)
        return r;
    lock();
    struct fake_exec *e = exec_locked(exec);
    r = e != NULL ? VCU_SUCCESS : VCU_ERROR_INVALID_VALUE;
    for (int d = 0; r == VCU_SUCCESS && !e->uploaded && d < fake.n_devices; d++) {
        if (e->footprint[d] == 0)
            continue;
        r = charge(d, e->footprint[d]);
        if (r == VCU_SUCCESS) {
            fake.graph_reserve[d] += e->footprint[d];
        } else {
            for (int k = 0; k < d; k++) {
                uncharge(k, e->footprint[k]);
                fake.graph_reserve[k] -= e->footprint[k];
            }
        }
    }
    if (r == VCU_SUCCESS)
        e->uploaded = true;
    unlock();
    return r;
}

vcu_result
cuGraphUpload(vcu_graph_exec hGraphExec, vcu_stream hStream)
{
    (void)hStream;
    return exec_upload("cuGraphUpload", hGraphExec);
}

vcu_result
cuGraphUpload_ptsz(vcu_graph_exec hGraphExec, vcu_stream hStream)
{
    (void)hStream;
    return exec_upload("cuGraphUpload_ptsz", hGraphExec);
}

vcu_result
cuGraphLaunch(vcu_graph_exec hGraphExec, vcu_stream hStream)
{
    (void)hStream;
    return exec_upload("cuGraphLaunch", hGraphExec);
}

vcu_result
cuGraphLaunch_ptsz(vcu_graph_exec hGraphExec, vcu_stream hStream)
{
    (void)hStream;
    return exec_upload("cuGraphLaunch_ptsz", hGraphExec);
}

/* The memory stays in the graph pool (until cuDeviceGraphMemTrim). */
vcu_result
cuGraphExecDestroy(vcu_graph_exec hGraphExec)
{
    vcu_result r = enter("cuGraphExecDestroy");
    if (r != VCU_SUCCESS)
        return r;
    lock();
    struct fake_exec *e = exec_locked(hGraphExec);
    if (e != NULL)
        e->live = false;
    unlock();
    return e != NULL ? VCU_SUCCESS : VCU_ERROR_INVALID_VALUE;
}

/* The graph pool keeps only what live uploaded graphs use. */
static uint64_t
graph_used_locked(int dev)
{
    uint64_t used = 0;
    for (int i = 0; i < FAKE_MAX_GRAPHS; i++)
        if (fake.execs[i].live && fake.execs[i].uploaded)
            used += fake.execs[i].footprint[dev];
    return used;
}

vcu_result
cuDeviceGraphMemTrim(vcu_device device)
{
    vcu_result r = enter("cuDeviceGraphMemTrim");
    if (r != VCU_SUCCESS)
        return r;
    if (!valid_device(device))
        return VCU_ERROR_INVALID_DEVICE;
    lock();
    uint64_t keep = graph_used_locked(device);
    if (fake.graph_reserve[device] > keep) {
        uncharge(device, fake.graph_reserve[device] - keep);
        fake.graph_reserve[device] = keep;
    }
    unlock();
    return VCU_SUCCESS;
}

vcu_result
cuDeviceGetGraphMemAttribute(vcu_device device, vcu_graph_mem_attribute attr, void *value)
{
    vcu_result r = enter("cuDeviceGetGraphMemAttribute");
    if (r != VCU_SUCCESS)
        return r;
    if (!valid_device(device) || value == NULL)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    uint64_t v = attr == VCU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT ||
                         attr == VCU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH
                     ? fake.graph_reserve[device]
                     : graph_used_locked(device);
    unlock();
    memcpy(value, &v, sizeof v);
    return VCU_SUCCESS;
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
        (prop->requestedHandleTypes != VCU_MEM_HANDLE_TYPE_NONE &&
         prop->requestedHandleTypes != VCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
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
        p->exportable =
            prop->requestedHandleTypes == VCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        *handle = p->handle;
    }
    unlock();
    return r;
}

/* The live handle H with references left, or NULL (an imported handle
** gives the allocation it names; *ALIAS, when not NULL, its entry, else
** NULL). Caller holds the lock. */
static struct fake_phys *
phys_alias_locked(vcu_mem_handle h, struct fake_alias **alias)
{
    if (alias != NULL)
        *alias = NULL;
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++)
        if (fake.phys[i].live && fake.phys[i].refs > 0 && fake.phys[i].handle == h)
            return &fake.phys[i];
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++)
        if (fake.aliases[i].live && fake.aliases[i].handle == h) {
            if (alias != NULL)
                *alias = &fake.aliases[i];
            return &fake.phys[fake.aliases[i].phys];
        }
    return NULL;
}

static struct fake_phys *
phys_locked(vcu_mem_handle h)
{
    return phys_alias_locked(h, NULL);
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
    struct fake_alias *alias;
    struct fake_phys *p = phys_alias_locked(handle, &alias);
    if (p != NULL) {
        if (alias != NULL)
            alias->live = false;
        p->refs--;
        phys_settle_locked(p);
    }
    unlock();
    return p != NULL ? VCU_SUCCESS : VCU_ERROR_INVALID_VALUE;
}

/* The "descriptor" is the handle's number: this process's state is the
** only one, so the importer is this process (what matters is that an
** imported handle is another reference to the same memory). */
vcu_result
cuMemExportToShareableHandle(void *shareableHandle, vcu_mem_handle handle,
                             vcu_mem_handle_type handleType, unsigned long long flags)
{
    vcu_result r = enter("cuMemExportToShareableHandle");
    if (r != VCU_SUCCESS)
        return r;
    if (shareableHandle == NULL || flags != 0 ||
        handleType != VCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return VCU_ERROR_INVALID_VALUE;
    lock();
    struct fake_alias *alias;
    const struct fake_phys *p = phys_alias_locked(handle, &alias);
    r = p != NULL && alias == NULL && p->exportable ? VCU_SUCCESS : VCU_ERROR_INVALID_VALUE;
    if (r == VCU_SUCCESS) {
        int fd = (int)p->handle;
        memcpy(shareableHandle, &fd, sizeof fd);
    }
    unlock();
    return r;
}

vcu_result
cuMemImportFromShareableHandle(vcu_mem_handle *handle, void *osHandle,
                               vcu_mem_handle_type shHandleType)
{
    vcu_result r = enter("cuMemImportFromShareableHandle");
    if (r != VCU_SUCCESS)
        return r;
    if (handle == NULL || shHandleType != VCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return VCU_ERROR_INVALID_VALUE;
    uint64_t fd = (uint64_t)(uintptr_t)osHandle;
    lock();
    r = VCU_ERROR_INVALID_VALUE;
    for (int i = 0; i < FAKE_MAX_OBJECTS && r != VCU_SUCCESS; i++) {
        struct fake_phys *p = &fake.phys[i];
        if (!p->live || p->handle != fd || !p->exportable)
            continue;
        for (int k = 0; k < FAKE_MAX_OBJECTS; k++) {
            struct fake_alias *a = &fake.aliases[k];
            if (a->live)
                continue;
            a->live = true;
            a->handle = ++fake.next_handle;
            a->phys = i;
            p->refs++;
            *handle = a->handle;
            r = VCU_SUCCESS;
            break;
        }
        if (r != VCU_SUCCESS)
            r = VCU_ERROR_OUT_OF_MEMORY;
        break;
    }
    unlock();
    return r;
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
    m->phys = (int)(p - fake.phys);
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
        struct fake_phys *p = &fake.phys[m->phys];
        if (p->live) {
            p->maps--;
            phys_settle_locked(p);
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
    {"cuArrayGetMemoryRequirements", 11060, (fake_fn)cuArrayGetMemoryRequirements, NULL},
    {"cuMipmappedArrayCreate", 5000, (fake_fn)cuMipmappedArrayCreate, NULL},
    {"cuMipmappedArrayDestroy", 5000, (fake_fn)cuMipmappedArrayDestroy, NULL},
    {"cuMipmappedArrayGetMemoryRequirements", 11060,
     (fake_fn)cuMipmappedArrayGetMemoryRequirements, NULL},
    {"cuIpcGetMemHandle", 4010, (fake_fn)cuIpcGetMemHandle, NULL},
    {"cuIpcOpenMemHandle", 11000, (fake_fn)cuIpcOpenMemHandle_v2, NULL},
    {"cuIpcCloseMemHandle", 4010, (fake_fn)cuIpcCloseMemHandle, NULL},
    {"cuDeviceGetMemPool", 11020, (fake_fn)cuDeviceGetMemPool, NULL},
    {"cuDeviceSetMemPool", 11020, (fake_fn)cuDeviceSetMemPool, NULL},
    {"cuMemSetMemPool", 13000, (fake_fn)cuMemSetMemPool, NULL},
    {"cuMemPoolCreate", 11020, (fake_fn)cuMemPoolCreate, NULL},
    {"cuMemPoolDestroy", 11020, (fake_fn)cuMemPoolDestroy, NULL},
    {"cuMemPoolGetAttribute", 11020, (fake_fn)cuMemPoolGetAttribute, NULL},
    {"cuMemPoolSetAttribute", 11020, (fake_fn)cuMemPoolSetAttribute, NULL},
    {"cuMemPoolTrimTo", 11020, (fake_fn)cuMemPoolTrimTo, NULL},
    {"cuGraphCreate", 10000, (fake_fn)cuGraphCreate, NULL},
    {"cuGraphDestroy", 10000, (fake_fn)cuGraphDestroy, NULL},
    {"cuGraphAddMemAllocNode", 11040, (fake_fn)cuGraphAddMemAllocNode, NULL},
    {"cuGraphAddMemFreeNode", 11040, (fake_fn)cuGraphAddMemFreeNode, NULL},
    {"cuGraphGetNodes", 10000, (fake_fn)cuGraphGetNodes, NULL},
    {"cuGraphNodeGetType", 10000, (fake_fn)cuGraphNodeGetType, NULL},
    {"cuGraphMemAllocNodeGetParams", 11040, (fake_fn)cuGraphMemAllocNodeGetParams, NULL},
    {"cuGraphChildGraphNodeGetGraph", 10000, (fake_fn)cuGraphChildGraphNodeGetGraph, NULL},
    /* "cuGraphInstantiate" is the CUDA 11 ABI until 12000, then an alias of
    ** cuGraphInstantiateWithFlags (cuda.h 12's #define). */
    {"cuGraphInstantiate", 11000, (fake_fn)cuGraphInstantiate_v2, NULL},
    {"cuGraphInstantiate", 12000, (fake_fn)cuGraphInstantiateWithFlags, NULL},
    {"cuGraphInstantiateWithFlags", 11040, (fake_fn)cuGraphInstantiateWithFlags, NULL},
    {"cuGraphInstantiateWithParams", 12000, (fake_fn)cuGraphInstantiateWithParams,
     (fake_fn)cuGraphInstantiateWithParams_ptsz},
    {"cuGraphUpload", 11010, (fake_fn)cuGraphUpload, (fake_fn)cuGraphUpload_ptsz},
    {"cuGraphLaunch", 10000, (fake_fn)cuGraphLaunch, (fake_fn)cuGraphLaunch_ptsz},
    {"cuGraphExecDestroy", 10000, (fake_fn)cuGraphExecDestroy, NULL},
    {"cuDeviceGraphMemTrim", 11040, (fake_fn)cuDeviceGraphMemTrim, NULL},
    {"cuDeviceGetGraphMemAttribute", 11040, (fake_fn)cuDeviceGetGraphMemAttribute, NULL},
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
    {"cuMemExportToShareableHandle", 10020, (fake_fn)cuMemExportToShareableHandle, NULL},
    {"cuMemImportFromShareableHandle", 10020, (fake_fn)cuMemImportFromShareableHandle,
     NULL},
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
    for (int i = 0; i < FAKE_MAX_ALLOCS; i++)
        n += (uint64_t)fake.allocs[i].live;
    for (int i = 0; i < FAKE_MAX_OBJECTS; i++)
        n += (uint64_t)fake.ranges[i].live + fake.phys[i].live +
             fake.maps[i].live + fake.events[i].live + fake.hosts[i].live +
             fake.aliases[i].live;
    for (int i = FAKE_MAX_DEVICES; i < FAKE_MAX_POOLS; i++)
        n += (uint64_t)fake.pools[i].live;
    for (int i = 0; i < FAKE_MAX_GRAPHS; i++)
        n += (uint64_t)fake.graphs[i].live + fake.execs[i].live;
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
