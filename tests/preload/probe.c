/* SPDX-License-Identifier: MIT */
/*
** probe.c -- a CUDA program for the preload tests (run_preload_tests.sh):
** it reaches the (fake) driver the way real programs do, and checks what
** libvram-preload.so, preloaded into it, makes of each call.
**
**   --via direct     calls the driver's exported functions (only in
**                    preload_probe_linked, linked against the fake);
**   --via dlsym      dlopen("libcuda.so.1") + dlsym, as XLA and Triton;
**   --via gpa11030   as the CUDA runtime: dlsym "cuGetProcAddress_v2",
**   --via gpa12000   ask it for "cuGetProcAddress" with that version, and
**                    resolve everything through what it returns;
**   --ptsz           the per-thread-default-stream variants of the
**                    stream-ordered calls (the _ptsz symbols, or flag
**                    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM).
** Then one scenario (see usage()). Sizes are MiB. Exit 0 when every check
** held, 1 when one failed (each failure is one "FAIL ..." line on stdout),
** 2 for bad usage. The quota itself comes from the environment the test
** script sets.
**
** Test code: getenv and exit are allowed here (docs/STYLE.md's habits 6
** and 7 cover the library).
*/
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "driver/cuda_api.h"

#define MIB ((size_t)1 << 20)

/* ------------------------------------------------------------------ */
/* The functions the probe uses, one list                              */
/* ------------------------------------------------------------------ */

/*
** X(field, symbol, asked, hooked, twin): the struct field (and its
** vcu_pfn_ type), the exported symbol, the name cuGetProcAddress is asked
** for, whether libvram-preload.so hooks it, and whether it has a _ptsz
** twin. Every version asked is the caller's own (11030 or 12000): all of
** these exist by then.
*/
/* clang-format off */
#define PROBE_FNS(X)                                                                     \
    X(cuInit, cuInit, "cuInit", 1, 0)                                                    \
    X(cuDeviceGet, cuDeviceGet, "cuDeviceGet", 0, 0)                                     \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0, \
      0)                                                                                 \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2,                           \
      "cuDevicePrimaryCtxRelease", 1, 0)                                                 \
    X(cuCtxPushCurrent, cuCtxPushCurrent_v2, "cuCtxPushCurrent", 0, 0)                   \
    X(cuCtxPopCurrent, cuCtxPopCurrent_v2, "cuCtxPopCurrent", 0, 0)                      \
    X(cuCtxGetDevice, cuCtxGetDevice, "cuCtxGetDevice", 0, 0)                            \
    X(cuCtxSynchronize, cuCtxSynchronize, "cuCtxSynchronize", 0, 0)                      \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v2, "cuDeviceTotalMem", 1, 0)                   \
    X(cuMemGetInfo, cuMemGetInfo_v2, "cuMemGetInfo", 1, 0)                               \
    X(cuMemAlloc, cuMemAlloc_v2, "cuMemAlloc", 1, 0)                                     \
    X(cuMemFree, cuMemFree_v2, "cuMemFree", 1, 0)                                        \
    X(cuMemAllocPitch, cuMemAllocPitch_v2, "cuMemAllocPitch", 1, 0)                      \
    X(cuMemAllocManaged, cuMemAllocManaged, "cuMemAllocManaged", 1, 0)                   \
    X(cuMemAllocAsync, cuMemAllocAsync, "cuMemAllocAsync", 1, 1)                         \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 1, 1) \
    X(cuMemFreeAsync, cuMemFreeAsync, "cuMemFreeAsync", 1, 1)                            \
    X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", \
      0, 0)                                                                              \
    X(cuMemCreate, cuMemCreate, "cuMemCreate", 1, 0)                                     \
    X(cuMemRelease, cuMemRelease, "cuMemRelease", 1, 0)                                  \
    X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle,                          \
      "cuMemRetainAllocationHandle", 1, 0)                                               \
    X(cuMemAddressReserve, cuMemAddressReserve, "cuMemAddressReserve", 0, 0)             \
    X(cuMemAddressFree, cuMemAddressFree, "cuMemAddressFree", 0, 0)                      \
    X(cuMemMap, cuMemMap, "cuMemMap", 1, 0)                                              \
    X(cuMemUnmap, cuMemUnmap, "cuMemUnmap", 1, 0)                                        \
    X(cuArrayCreate, cuArrayCreate_v2, "cuArrayCreate", 1, 0)                            \
    X(cuArray3DCreate, cuArray3DCreate_v2, "cuArray3DCreate", 1, 0)                      \
    X(cuArrayDestroy, cuArrayDestroy, "cuArrayDestroy", 1, 0)                            \
    X(cuMemAllocHost, cuMemAllocHost_v2, "cuMemAllocHost", 1, 0)                         \
    X(cuMemHostAlloc, cuMemHostAlloc, "cuMemHostAlloc", 1, 0)                            \
    X(cuMemFreeHost, cuMemFreeHost, "cuMemFreeHost", 1, 0)                               \
    X(cuMemHostRegister, cuMemHostRegister_v2, "cuMemHostRegister", 1, 0)                \
    X(cuMemHostUnregister, cuMemHostUnregister, "cuMemHostUnregister", 1, 0)             \
    X(cuDeviceGetMemPool, cuDeviceGetMemPool, "cuDeviceGetMemPool", 0, 0)                \
    X(cuDeviceSetMemPool, cuDeviceSetMemPool, "cuDeviceSetMemPool", 1, 0)                \
    X(cuMemPoolCreate, cuMemPoolCreate, "cuMemPoolCreate", 1, 0)                         \
    X(cuMemPoolDestroy, cuMemPoolDestroy, "cuMemPoolDestroy", 1, 0)                      \
    X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 0, 0)       \
    X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 0, 0)       \
    X(cuMemPoolTrimTo, cuMemPoolTrimTo, "cuMemPoolTrimTo", 1, 0)                         \
    X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 1, 0)    \
    X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 1, 0) \
    X(cuGraphCreate, cuGraphCreate, "cuGraphCreate", 0, 0)                               \
    X(cuGraphDestroy, cuGraphDestroy, "cuGraphDestroy", 0, 0)                            \
    X(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", 0, 0)    \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags,                          \
      "cuGraphInstantiateWithFlags", 1, 0)                                               \
    X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams,                        \
      "cuGraphInstantiateWithParams", 1, 1)                                              \
    X(cuGraphLaunch, cuGraphLaunch, "cuGraphLaunch", 1, 1)                               \
    X(cuGraphUpload, cuGraphUpload, "cuGraphUpload", 1, 1)                               \
    X(cuGraphExecDestroy, cuGraphExecDestroy, "cuGraphExecDestroy", 1, 0)                \
    X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 1, 0)          \
    X(cuMemExportToShareableHandle, cuMemExportToShareableHandle,                        \
      "cuMemExportToShareableHandle", 1, 0)                                              \
    X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle,                    \
      "cuMemImportFromShareableHandle", 0, 0)                                            \
    X(cuIpcGetMemHandle, cuIpcGetMemHandle, "cuIpcGetMemHandle", 1, 0)                   \
    X(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 0, 0)             \
    X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 0, 0)
/* clang-format on */

static struct {
#define X(field, symbol, asked, hooked, twin) vcu_pfn_##field field;
    PROBE_FNS(X)
#undef X
    const char *via;
    bool ptsz;
    void *lib; /* the driver's handle (dlsym, gpa) */
    uint64_t (*fake_used)(int dev);
    uint64_t (*fake_peak)(int dev);
} api;

#ifdef PROBE_LINKED
/* The fake's exports, as a program linked against libcuda declares them. */
#define X(field, symbol, fallback, need, ret, params) ret symbol params;
VCU_ENTRY_POINTS(X, VCU_OWN_TYPE)
VCU_EXTRA_ENTRY_POINTS(X, VCU_OWN_TYPE)
#undef X
vcu_result cuMemAllocAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream);
vcu_result cuMemAllocFromPoolAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize,
                                        vcu_mem_pool pool, vcu_stream stream);
vcu_result cuMemFreeAsync_ptsz(vcu_deviceptr dptr, vcu_stream stream);
vcu_result cuGraphLaunch_ptsz(vcu_graph_exec exec, vcu_stream stream);
vcu_result cuGraphUpload_ptsz(vcu_graph_exec exec, vcu_stream stream);
vcu_result cuGraphInstantiateWithParams_ptsz(vcu_graph_exec *exec, vcu_graph graph,
                                             vcu_graph_instantiate_params *params);
#endif

static int failures;

/* A decimal argument (the probe's own; bad text reads as 0). */
static long
num(const char *text)
{
    return strtol(text, NULL, 10);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    failures++;
}

#define CHECK_RC(call, want)                                                             \
    do {                                                                                 \
        int rc_ = (int)(call);                                                           \
        if (rc_ != (int)(want))                                                          \
            fail("%s:%d: %s returned %d, expected %d", __FILE__, __LINE__, #call, rc_,   \
                 (int)(want));                                                           \
    } while (0)

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond))                                                                     \
            fail(__VA_ARGS__);                                                           \
    } while (0)

static void
die(const char *what)
{
    printf("FAIL %s\n", what);
    exit(1);
}

/* ------------------------------------------------------------------ */
/* Reaching the driver                                                  */
/* ------------------------------------------------------------------ */

static void
sym_into(void *fp, void *p, const char *name)
{
    if (p == NULL) {
        printf("FAIL cannot resolve %s via %s\n", name, api.via);
        exit(1);
    }
    memcpy(fp, &p, sizeof p);
}

static void
load_dlsym(void)
{
#define X(field, symbol, asked, hooked, twin)                                            \
    sym_into(&api.field, dlsym(api.lib, (twin && api.ptsz) ? #symbol "_ptsz" : #symbol), \
             #symbol);
    PROBE_FNS(X)
#undef X
}

/* As the CUDA runtime: cuGetProcAddress_v2 by dlsym, then "cuGetProcAddress"
** itself through it, then everything through what that returned. */
static void
load_gpa(int version)
{
    vcu_pfn_cuGetProcAddress gpa2;
    sym_into(&gpa2, dlsym(api.lib, "cuGetProcAddress_v2"), "cuGetProcAddress_v2");
    void *p = NULL;
    vcu_proc_address_result st = VCU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (gpa2("cuGetProcAddress", &p, version, 0, &st) != VCU_SUCCESS || p == NULL ||
        st != VCU_GET_PROC_ADDRESS_SUCCESS)
        die("cuGetProcAddress(\"cuGetProcAddress\") failed");
    vcu_uint64 flags = api.ptsz ? VCU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
    if (version >= 12000) {
        vcu_pfn_cuGetProcAddress g;
        memcpy(&g, &p, sizeof p);
#define X(field, symbol, asked, hooked, twin)                                            \
    p = NULL;                                                                            \
    if (g(asked, &p, version, flags, &st) != VCU_SUCCESS)                                \
        die("cuGetProcAddress(" asked ") failed");                                       \
    if (p != NULL || st != VCU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)                  \
        sym_into(&api.field, p, asked);
        PROBE_FNS(X)
#undef X
    } else {
        vcu_pfn_cuGetProcAddress_v1 g;
        memcpy(&g, &p, sizeof p);
    /* The v1 cannot tell a name unknown from one newer than VERSION: the
    ** functions newer than 11030 (graph allocation nodes, instantiation
    ** with parameters) stay NULL, and the scenarios run here skip them. */
#define X(field, symbol, asked, hooked, twin)                                            \
    p = NULL;                                                                            \
    if (g(asked, &p, version, flags) != VCU_SUCCESS)                                     \
        die("cuGetProcAddress(" asked ") failed");                                       \
    if (p != NULL || (strcmp(asked, "cuGraphAddMemAllocNode") != 0 &&                    \
                      strcmp(asked, "cuGraphInstantiateWithParams") != 0 &&              \
                      strcmp(asked, "cuGraphInstantiateWithFlags") != 0 &&               \
                      strcmp(asked, "cuDeviceGraphMemTrim") != 0))                       \
        sym_into(&api.field, p, asked);
        PROBE_FNS(X)
#undef X
    }
}

static void
load(void)
{
    api.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (api.lib == NULL)
        die("dlopen libcuda.so.1");
    sym_into(&api.fake_used, dlsym(api.lib, "fakecuda_used"), "fakecuda_used");
    sym_into(&api.fake_peak, dlsym(api.lib, "fakecuda_peak"), "fakecuda_peak");
    if (strcmp(api.via, "direct") == 0) {
#ifdef PROBE_LINKED
#define X(field, symbol, asked, hooked, twin) api.field = symbol;
        PROBE_FNS(X)
#undef X
        if (api.ptsz) {
            api.cuMemAllocAsync = cuMemAllocAsync_ptsz;
            api.cuMemAllocFromPoolAsync = cuMemAllocFromPoolAsync_ptsz;
            api.cuMemFreeAsync = cuMemFreeAsync_ptsz;
            api.cuGraphLaunch = cuGraphLaunch_ptsz;
            api.cuGraphUpload = cuGraphUpload_ptsz;
            api.cuGraphInstantiateWithParams = cuGraphInstantiateWithParams_ptsz;
        }
#else
        die("--via direct needs preload_probe_linked");
#endif
    } else if (strcmp(api.via, "dlsym") == 0) {
        load_dlsym();
    } else if (strcmp(api.via, "gpa11030") == 0) {
        load_gpa(11030);
    } else if (strcmp(api.via, "gpa12000") == 0) {
        load_gpa(12000);
    } else {
        die("unknown --via");
    }
}

/* The file name (without directories) of the library holding P, and the
** symbol P is, into *SYM. */
static const char *
origin(const void *p, const char **sym)
{
    Dl_info info;
    if (dladdr(p, &info) == 0 || info.dli_fname == NULL) {
        *sym = "?";
        return "?";
    }
    *sym = info.dli_sname != NULL ? info.dli_sname : "?";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash != NULL ? slash + 1 : info.dli_fname;
}

/* Make device DEV's primary context current on this thread. */
static void
ctx_push(int dev)
{
    vcu_device d;
    vcu_context c;
    if (api.cuDeviceGet(&d, dev) != VCU_SUCCESS ||
        api.cuDevicePrimaryCtxRetain(&c, d) != VCU_SUCCESS ||
        api.cuCtxPushCurrent(c) != VCU_SUCCESS)
        die("cannot make a context current");
}

static void
ctx_pop(int dev)
{
    vcu_context c;
    api.cuCtxPopCurrent(&c);
    api.cuDevicePrimaryCtxRelease(dev);
}

static void
init_or_die(void)
{
    int rc = api.cuInit(0);
    if (rc != VCU_SUCCESS) {
        printf("FAIL cuInit returned %d\n", rc);
        exit(1);
    }
}

/* ------------------------------------------------------------------ */
/* One allocation on every path                                         */
/* ------------------------------------------------------------------ */

enum path {
    P_ALLOC,
    P_PITCH,
    P_MANAGED,
    P_ASYNC,
    P_POOL,
    P_CREATE,
    P_ARRAY,
    P_ARRAY3D,
    P_COUNT
};
static const char *const path_name[P_COUNT] = {
    "cuMemAlloc",      "cuMemAllocPitch",         "cuMemAllocManaged",
    "cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemCreate",
    "cuArrayCreate",   "cuArray3DCreate"};

/* What one allocation returned, to free it by the matching path. */
struct block {
    enum path path;
    uint64_t key; /* pointer, handle or array */
};

/* Allocate MIB mebibytes on the current device (DEV) by PATH. */
static int
alloc_by(enum path path, uint64_t mib, int dev, struct block *b)
{
    b->path = path;
    b->key = 0;
    vcu_deviceptr p = 0;
    int rc;
    switch (path) {
    case P_ALLOC:
        rc = api.cuMemAlloc(&p, mib * MIB);
        break;
    case P_PITCH: {
        size_t pitch = 0;
        rc = api.cuMemAllocPitch(&p, &pitch, 4096, mib * MIB / 4096, 16);
        if (rc == VCU_SUCCESS && pitch != 4096)
            fail("pitch %zu, expected 4096", pitch);
        break;
    }
    case P_MANAGED:
        rc = api.cuMemAllocManaged(&p, mib * MIB, VCU_MEM_ATTACH_GLOBAL);
        break;
    case P_ASYNC:
        rc = api.cuMemAllocAsync(&p, mib * MIB, NULL);
        break;
    case P_POOL: {
        vcu_mem_pool pool;
        CHECK_RC(api.cuDeviceGetDefaultMemPool(&pool, dev), VCU_SUCCESS);
        rc = api.cuMemAllocFromPoolAsync(&p, mib * MIB, pool, NULL);
        break;
    }
    case P_CREATE: {
        vcu_mem_allocation_prop prop;
        memset(&prop, 0, sizeof prop);
        prop.type = VCU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = VCU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        vcu_mem_handle h = 0;
        rc = api.cuMemCreate(&h, mib * MIB, &prop, 0);
        p = h;
        break;
    }
    case P_ARRAY: { /* float4 texels, 2048 wide: 32 KiB a row */
        vcu_array_descriptor d = {2048, mib * MIB / 32768, VCU_AD_FORMAT_FLOAT, 4};
        vcu_array a = NULL;
        rc = api.cuArrayCreate(&a, &d);
        p = (uint64_t)(uintptr_t)a;
        break;
    }
    case P_ARRAY3D: { /* 256 x 256 float4 texels: 1 MiB a slice */
        vcu_array3d_descriptor d = {256, 256, mib, VCU_AD_FORMAT_FLOAT, 4, 0};
        vcu_array a = NULL;
        rc = api.cuArray3DCreate(&a, &d);
        p = (uint64_t)(uintptr_t)a;
        break;
    }
    default:
        rc = -1;
    }
    b->key = p;
    return rc;
}

/* The fake's bytes in use on physical device 0. */
static uint64_t
fake_used_mib(int phys)
{
    return api.fake_used(phys) / MIB;
}

/* Free B by its path; a stream-ordered block is then synchronized, so
** that its pool gives the memory back (its release threshold is 0). */
static int
free_by(const struct block *b)
{
    int rc;
    switch (b->path) {
    case P_CREATE:
        return api.cuMemRelease(b->key);
    case P_ARRAY:
    case P_ARRAY3D:
        return api.cuArrayDestroy((vcu_array)(uintptr_t)b->key);
    case P_ASYNC:
    case P_POOL:
        rc = api.cuMemFreeAsync(b->key, NULL);
        if (rc == VCU_SUCCESS)
            rc = api.cuCtxSynchronize();
        return rc;
    default:
        return api.cuMemFree(b->key);
    }
}

/* The quota's view of device 0 (MiB): what the group uses, its
** cuMemGetInfo's total less free. */
static uint64_t
charged_mib(void)
{
    size_t f = 0, t = 0;
    CHECK_RC(api.cuMemGetInfo(&f, &t), VCU_SUCCESS);
    return (t - f) / MIB;
}

/* The one rule: the device never holds more than the ledger says. */
static void
check_within(const char *what)
{
    uint64_t held = fake_used_mib(0), charged = charged_mib();
    CHECK(held <= charged, "%s: the fake holds %llu MiB, the quota counts %llu", what,
          (unsigned long long)held, (unsigned long long)charged);
}


/*
** Quota 64 MiB (set by the script). On every path: 48 MiB granted, 32 more
** refused with CUDA_ERROR_OUT_OF_MEMORY (the fake would have room: the
** quota refused), the 48 given back, then 32 granted; 16 MiB blocks up to
** the quota (four; three from a stream-ordered pool, whose 32 MiB chunks
** are charged ahead), then 2 MiB more refused. The fake never holds more
** than the quota counts, and holds nothing between paths.
*/
static void
scenario_paths(void)
{
    init_or_die();
    ctx_push(0);
    for (int k = 0; k < P_COUNT; k++) {
        enum path p = (enum path)k;
        struct block a, b;
        CHECK(fake_used_mib(0) == 0, "%s: the fake holds %llu MiB before", path_name[p],
              (unsigned long long)fake_used_mib(0));
        int rc = alloc_by(p, 48, 0, &a);
        CHECK(rc == VCU_SUCCESS, "%s: 48 MiB under a 64 MiB quota: %d", path_name[p], rc);
        check_within(path_name[p]);
        rc = alloc_by(p, 32, 0, &b);
        CHECK(rc == VCU_ERROR_OUT_OF_MEMORY,
              "%s: 32 more MiB past the quota: %d, expected 2", path_name[p], rc);
        if (rc == VCU_SUCCESS)
            free_by(&b);
        CHECK(fake_used_mib(0) >= 48 && fake_used_mib(0) <= 64,
              "%s: the fake holds %llu MiB, expected 48 to 64", path_name[p],
              (unsigned long long)fake_used_mib(0));
        check_within(path_name[p]);
        CHECK_RC(free_by(&a), VCU_SUCCESS);
        rc = alloc_by(p, 32, 0, &b);
        CHECK(rc == VCU_SUCCESS, "%s: 32 MiB after the free: %d", path_name[p], rc);
        check_within(path_name[p]);
        if (rc == VCU_SUCCESS)
            CHECK_RC(free_by(&b), VCU_SUCCESS);
        CHECK(fake_used_mib(0) == 0, "%s: the fake holds %llu MiB after", path_name[p],
              (unsigned long long)fake_used_mib(0));
        /* Mixed sizes: the quota counts bytes, not calls. */
        struct block c[4];
        int n = p == P_ASYNC || p == P_POOL ? 3 : 4;
        for (int i = 0; i < n; i++) {
            CHECK_RC(alloc_by(p, 16, 0, &c[i]), VCU_SUCCESS);
            check_within(path_name[p]);
        }
        CHECK_RC(alloc_by(p, n == 3 ? 16 : 2, 0, &b), VCU_ERROR_OUT_OF_MEMORY);
        check_within(path_name[p]);
        for (int i = 0; i < n; i++)
            CHECK_RC(free_by(&c[i]), VCU_SUCCESS);
        CHECK(charged_mib() == 0, "%s: the quota still counts %llu MiB after the frees",
              path_name[p], (unsigned long long)charged_mib());
    }
    /* A free the library never saw (a bad pointer) is the driver's to refuse. */
    CHECK_RC(api.cuMemFree(0x1234), VCU_ERROR_INVALID_VALUE);
    /* Frees across paths: an async allocation freed by cuMemFree. */
    struct block a;
    CHECK_RC(alloc_by(P_ASYNC, 64, 0, &a), VCU_SUCCESS);
    CHECK_RC(api.cuMemFree(a.key), VCU_SUCCESS);
    /* The pool keeps the memory until a synchronization gives it back. */
    CHECK_RC(alloc_by(P_ALLOC, 64, 0, &a), VCU_ERROR_OUT_OF_MEMORY);
    CHECK_RC(api.cuCtxSynchronize(), VCU_SUCCESS);
    CHECK_RC(alloc_by(P_ALLOC, 64, 0, &a), VCU_SUCCESS);
    CHECK_RC(api.cuMemFreeAsync(a.key, NULL), VCU_SUCCESS);
    ctx_pop(0);
}

/*
** The virtual-memory path in full: a handle counted from cuMemCreate to its
** last cuMemRelease, including a second reference taken with
** cuMemRetainAllocationHandle (NCCL does this).
*/
static void
scenario_vmm(void)
{
    init_or_die();
    ctx_push(0);
    struct block h;
    CHECK_RC(alloc_by(P_CREATE, 48, 0, &h), VCU_SUCCESS);
    vcu_deviceptr va = 0;
    CHECK_RC(api.cuMemAddressReserve(&va, 48 * MIB, 0, 0, 0), VCU_SUCCESS);
    CHECK_RC(api.cuMemMap(va, 48 * MIB, 0, h.key, 0), VCU_SUCCESS);
    vcu_mem_handle again = 0;
    CHECK_RC(api.cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va), VCU_SUCCESS);
    CHECK(again == h.key, "retained handle %llu, expected %llu", again,
          (unsigned long long)h.key);
    CHECK_RC(api.cuMemRelease(h.key), VCU_SUCCESS);
    struct block b;
    /* One reference is left: still counted. */
    CHECK_RC(alloc_by(P_ALLOC, 32, 0, &b), VCU_ERROR_OUT_OF_MEMORY);
    CHECK_RC(api.cuMemUnmap(va, 48 * MIB), VCU_SUCCESS);
    CHECK_RC(api.cuMemRelease(again), VCU_SUCCESS);
    CHECK_RC(api.cuMemAddressFree(va, 48 * MIB), VCU_SUCCESS);
    CHECK_RC(alloc_by(P_ALLOC, 64, 0, &b), VCU_SUCCESS);
    CHECK_RC(free_by(&b), VCU_SUCCESS);
    /* Host-located memory is not device memory: not counted (the fake
    ** refuses it, which is the driver's answer to give). */
    vcu_mem_allocation_prop prop;
    memset(&prop, 0, sizeof prop);
    prop.type = VCU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = (vcu_mem_location_type)2; /* CU_MEM_LOCATION_TYPE_HOST */
    vcu_mem_handle hh;
    CHECK_RC(api.cuMemCreate(&hh, 128 * MIB, &prop, 0), VCU_ERROR_INVALID_VALUE);
    CHECK(fake_used_mib(0) == 0, "the fake holds %llu MiB",
          (unsigned long long)fake_used_mib(0));
    ctx_pop(0);
}

/* ------------------------------------------------------------------ */
/* What the device holds beyond the allocations: pools, graphs, exports */
/* ------------------------------------------------------------------ */

/* A graph with one allocation node of MIB on device 0, instantiated
** (uploaded at once with UPLOAD) into *EXEC: the result. */
static int
graph_of(uint64_t mib, bool upload, vcu_graph_exec *exec)
{
    vcu_graph g = NULL;
    CHECK_RC(api.cuGraphCreate(&g, 0), VCU_SUCCESS);
    vcu_mem_alloc_node_params p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = VCU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = VCU_MEM_LOCATION_TYPE_DEVICE;
    p.bytesize = mib * MIB;
    vcu_graph_node n;
    CHECK_RC(api.cuGraphAddMemAllocNode(&n, g, NULL, 0, &p), VCU_SUCCESS);
    vcu_graph_instantiate_params ip;
    memset(&ip, 0, sizeof ip);
    ip.flags = upload ? VCU_GRAPH_INSTANTIATE_FLAG_UPLOAD : 0;
    int rc = api.cuGraphInstantiateWithParams(exec, g, &ip);
    CHECK_RC(api.cuGraphDestroy(g), VCU_SUCCESS);
    return rc;
}

/*
** Quota 64 MiB (set by the script), one case per run (what one case keeps
** charged, an exported allocation, stays charged until the process ends):
**   capture      an allocation on a capturing stream reserves nothing:
**                128 MiB of it is granted, uncharged;
**   pool_trim    a pool whose release threshold keeps its memory after the
**                frees keeps it charged, until cuMemPoolTrimTo;
**   pool_destroy a pool destroyed with an allocation alive keeps its
**                memory, charged;
**   graph_upload a graph instantiated with the upload flag maps its
**                memory at instantiation, charged then; a graph larger
**                than the quota is refused at launch; cuDeviceGraphMemTrim
**                after the graph is gone gives the memory back;
**   export       a handle exported and imported lives on after its
**                cuMemRelease: its charge stays;
**   ipc          an allocation whose IPC handle is opened lives on after
**                its cuMemFree: its charge stays;
**   getinfo      cuMemGetInfo shows what a pool holds after a
**                synchronization, not what was charged ahead.
** In each, the fake never holds more than the quota counts.
*/
static void
scenario_memory(const char *what)
{
    init_or_die();
    ctx_push(0);
    struct block a, b;
    vcu_mem_pool pool;
    CHECK_RC(api.cuDeviceGetDefaultMemPool(&pool, 0), VCU_SUCCESS);
    void (*capture)(void *);
    sym_into(&capture, dlsym(api.lib, "fakecuda_capture"), "fakecuda_capture");
    if (strcmp(what, "capture") == 0) {
        vcu_stream s = (vcu_stream)(uintptr_t)0x5eed;
        vcu_deviceptr p = 0;
        capture(s);
        CHECK_RC(api.cuMemAllocAsync(&p, 128 * MIB, s), VCU_SUCCESS);
        check_within("capture");
        CHECK(charged_mib() == 0, "a captured allocation is charged %llu MiB",
              (unsigned long long)charged_mib());
        capture(NULL);
        CHECK_RC(api.cuMemFreeAsync(p, NULL), VCU_SUCCESS);
        CHECK_RC(alloc_by(P_ALLOC, 64, 0, &a), VCU_SUCCESS);
        CHECK_RC(free_by(&a), VCU_SUCCESS);
    } else if (strcmp(what, "pool_trim") == 0) {
        uint64_t most = UINT64_MAX;
        CHECK_RC(api.cuMemPoolSetAttribute(pool, VCU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &most),
                 VCU_SUCCESS);
        CHECK_RC(alloc_by(P_ASYNC, 48, 0, &a), VCU_SUCCESS);
        CHECK_RC(free_by(&a), VCU_SUCCESS); /* freed and synchronized: kept */
        check_within("pool_trim");
        CHECK_RC(alloc_by(P_ALLOC, 16, 0, &b), VCU_ERROR_OUT_OF_MEMORY);
        check_within("pool_trim");
        CHECK_RC(api.cuMemPoolTrimTo(pool, 0), VCU_SUCCESS);
        CHECK_RC(alloc_by(P_ALLOC, 16, 0, &b), VCU_SUCCESS);
        check_within("pool_trim");
        CHECK_RC(free_by(&b), VCU_SUCCESS);
    } else if (strcmp(what, "pool_destroy") == 0) {
        vcu_mem_pool_props pp;
        memset(&pp, 0, sizeof pp);
        pp.allocType = VCU_MEM_ALLOCATION_TYPE_PINNED;
        pp.location.type = VCU_MEM_LOCATION_TYPE_DEVICE;
        vcu_mem_pool own = NULL;
        vcu_deviceptr p = 0;
        CHECK_RC(api.cuMemPoolCreate(&own, &pp), VCU_SUCCESS);
        CHECK_RC(api.cuMemAllocFromPoolAsync(&p, 40 * MIB, own, NULL), VCU_SUCCESS);
        CHECK_RC(api.cuMemPoolDestroy(own), VCU_SUCCESS);
        check_within("pool_destroy");
        CHECK_RC(alloc_by(P_ALLOC, 16, 0, &b), VCU_ERROR_OUT_OF_MEMORY);
        check_within("pool_destroy");
        CHECK_RC(api.cuMemFreeAsync(p, NULL), VCU_SUCCESS);
    } else if (strcmp(what, "graph_upload") == 0) {
        vcu_graph_exec e = NULL, big = NULL;
        CHECK_RC(graph_of(40, true, &e), VCU_SUCCESS);
        check_within("graph_upload");
        CHECK_RC(alloc_by(P_ALLOC, 16, 0, &b), VCU_ERROR_OUT_OF_MEMORY);
        CHECK_RC(api.cuGraphLaunch(e, NULL), VCU_SUCCESS);
        check_within("graph_upload");
        CHECK_RC(graph_of(80, false, &big), VCU_SUCCESS);
        CHECK_RC(api.cuGraphLaunch(big, NULL), VCU_ERROR_OUT_OF_MEMORY);
        check_within("graph_upload");
        CHECK_RC(api.cuGraphExecDestroy(big), VCU_SUCCESS);
        CHECK_RC(api.cuGraphExecDestroy(e), VCU_SUCCESS);
        CHECK_RC(alloc_by(P_ALLOC, 16, 0, &b), VCU_ERROR_OUT_OF_MEMORY); /* still mapped */
        CHECK_RC(api.cuDeviceGraphMemTrim(0), VCU_SUCCESS);
        CHECK_RC(alloc_by(P_ALLOC, 48, 0, &b), VCU_SUCCESS);
        check_within("graph_upload");
        CHECK_RC(free_by(&b), VCU_SUCCESS);
    } else if (strcmp(what, "export") == 0) {
        vcu_mem_allocation_prop prop;
        memset(&prop, 0, sizeof prop);
        prop.type = VCU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = VCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = VCU_MEM_LOCATION_TYPE_DEVICE;
        vcu_mem_handle h = 0, imported = 0;
        int fd = -1;
        CHECK_RC(api.cuMemCreate(&h, 32 * MIB, &prop, 0), VCU_SUCCESS);
        CHECK_RC(api.cuMemExportToShareableHandle(&fd, h, VCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                  0),
                 VCU_SUCCESS);
        CHECK_RC(api.cuMemImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
                                                    VCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                 VCU_SUCCESS);
        CHECK_RC(api.cuMemRelease(h), VCU_SUCCESS);
        check_within("export");
        CHECK_RC(alloc_by(P_ALLOC, 48, 0, &b), VCU_ERROR_OUT_OF_MEMORY);
        check_within("export");
        CHECK_RC(api.cuMemRelease(imported), VCU_SUCCESS);
    } else if (strcmp(what, "ipc") == 0) {
        vcu_ipc_mem_handle ih;
        vcu_deviceptr opened = 0;
        CHECK_RC(alloc_by(P_ALLOC, 32, 0, &a), VCU_SUCCESS);
        CHECK_RC(api.cuIpcGetMemHandle(&ih, a.key), VCU_SUCCESS);
        CHECK_RC(api.cuIpcOpenMemHandle(&opened, ih, VCU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                 VCU_SUCCESS);
        CHECK_RC(free_by(&a), VCU_SUCCESS);
        check_within("ipc");
        CHECK_RC(alloc_by(P_ALLOC, 48, 0, &b), VCU_ERROR_OUT_OF_MEMORY);
        check_within("ipc");
        CHECK_RC(api.cuIpcCloseMemHandle(opened), VCU_SUCCESS);
    } else if (strcmp(what, "getinfo") == 0) {
        CHECK_RC(alloc_by(P_ASYNC, 48, 0, &a), VCU_SUCCESS);
        CHECK_RC(api.cuMemFreeAsync(a.key, NULL), VCU_SUCCESS);
        CHECK_RC(api.cuCtxSynchronize(), VCU_SUCCESS);
        CHECK(charged_mib() == 0, "after the pool gave its memory back: %llu MiB charged",
              (unsigned long long)charged_mib());
    } else {
        die("unknown memory case");
    }
    CHECK(api.fake_peak(0) <= 64 * MIB, "the fake's peak %llu MiB passed the quota",
          (unsigned long long)(api.fake_peak(0) / MIB));
    ctx_pop(0);
}

/* ------------------------------------------------------------------ */
/* Routes around the interposer                                         */
/* ------------------------------------------------------------------ */

static bool is_preload(const char *lib);

/* Is P a function of libvram-preload.so (by any of its names)? */
static bool
ours(const void *p)
{
    const char *sym;
    return p != NULL && is_preload(origin(p, &sym));
}

/* Does the last dlerror() hold TEXT? */
static bool
dlerror_says(const char *text)
{
    const char *e = dlerror();
    return e != NULL && strstr(e, text) != NULL;
}

/*
** Quota 64 MiB (set by the script). The routes to the driver that pass
** around the library's exported functions are closed in a process under
** a quota:
**   - glibc's own dlsym fetched with dlvsym (the two-line attack) or found
**     on libc's handle is the library's; a hooked name asked through it
**     is the hook;
**   - glibc's private lookups (older glibcs) are withheld, dlerror says so;
**   - a library linked to the driver, loaded with RTLD_DEEPBIND, is loaded
**     without it: its direct cuMemAlloc_v2 is counted (HELPER: its path);
**   - dlmopen into a new namespace is refused, dlerror says why.
*/
static void
scenario_bypass(const char *helper)
{
    init_or_die();
    ctx_push(0);
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    void *d = NULL;
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && d == NULL; i++)
        d = dlvsym(RTLD_DEFAULT, "dlsym", versions[i]);
    CHECK(ours(d), "dlvsym(RTLD_DEFAULT, \"dlsym\", GLIBC_x) gave glibc's own dlsym");
    if (d != NULL) {
        void *(*lookup)(void *, const char *);
        memcpy(&lookup, &d, sizeof d);
        CHECK(ours(lookup(api.lib, "cuMemAlloc_v2")),
              "cuMemAlloc_v2 through the dlsym dlvsym gave is the driver's, not the hook");
    }
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    CHECK(libc != NULL && ours(dlsym(libc, "dlsym")), "dlsym on libc's handle gave glibc's");
    CHECK(libc != NULL && ours(dlsym(libc, "dlvsym")), "dlvsym on libc's handle gave glibc's");
    CHECK(dlsym(RTLD_DEFAULT, "__libc_dlsym") == NULL && dlerror_says("withheld by vram"),
          "__libc_dlsym is not withheld with a reason");
    /* RTLD_DEEPBIND: the helper's own cuMemAlloc_v2 must be the hook's. */
    void *h = dlopen(helper, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    CHECK(h != NULL, "dlopen %s with RTLD_DEEPBIND failed: %s", helper, dlerror());
    if (h != NULL) {
        int (*alloc)(unsigned long long, unsigned long long *);
        int (*release)(unsigned long long);
        sym_into(&alloc, dlsym(h, "helper_alloc"), "helper_alloc");
        sym_into(&release, dlsym(h, "helper_free"), "helper_free");
        unsigned long long p = 0, q = 0;
        CHECK_RC(alloc(48 * MIB, &p), VCU_SUCCESS);
        CHECK_RC(alloc(32 * MIB, &q), VCU_ERROR_OUT_OF_MEMORY);
        CHECK(api.fake_used(0) <= 64 * MIB, "the deep-bound helper passed the quota");
        if (q != 0)
            release(q);
        CHECK_RC(release(p), VCU_SUCCESS);
    }
    void *other = dlmopen(LM_ID_NEWLM, helper, RTLD_NOW);
    CHECK(other == NULL && dlerror_says("refused in a process under a GPU quota"),
          "dlmopen into a new namespace was not refused");
    ctx_pop(0);
}

/* ------------------------------------------------------------------ */
/* Reports                                                              */
/* ------------------------------------------------------------------ */

/* cuMemGetInfo_v2 on DEV is (FREE, TOTAL) MiB and cuDeviceTotalMem_v2 is
** TOTAL. */
static void
check_info(int dev, uint64_t total, uint64_t free_mib)
{
    ctx_push(dev);
    size_t f = 0, t = 0, tm = 0;
    CHECK_RC(api.cuMemGetInfo(&f, &t), VCU_SUCCESS);
    CHECK_RC(api.cuDeviceTotalMem(&tm, dev), VCU_SUCCESS);
    CHECK(t == total * MIB, "device %d: cuMemGetInfo total %zu MiB, expected %llu", dev,
          t / MIB, (unsigned long long)total);
    CHECK(f == free_mib * MIB, "device %d: cuMemGetInfo free %zu MiB, expected %llu", dev,
          f / MIB, (unsigned long long)free_mib);
    CHECK(tm == total * MIB, "device %d: cuDeviceTotalMem %zu MiB, expected %llu", dev,
          tm / MIB, (unsigned long long)total);
    CHECK(f <= t, "device %d: free %zu above total %zu", dev, f, t);
    ctx_pop(dev);
}

/* The hooks stop asking the driver for the current context's device after
** its first answer: with one visible device at all, with several while the
** context is one they have seen. cuCtxGetDevice then fails (FAKECUDA_FAIL)
** and cuMemGetInfo_v2 still shows the quota, TOTAL MiB. */
static void
scenario_ctxdevice(uint64_t total)
{
    init_or_die();
    ctx_push(0);
    size_t f = 0, t = 0;
    CHECK_RC(api.cuMemGetInfo(&f, &t), VCU_SUCCESS);
    setenv("FAKECUDA_FAIL", "cuCtxGetDevice", 1);
    CHECK_RC(api.cuMemGetInfo(&f, &t), VCU_SUCCESS);
    unsetenv("FAKECUDA_FAIL");
    CHECK(t == total * MIB, "cuMemGetInfo total %zu MiB with cuCtxGetDevice failing, "
          "expected %llu", t / MIB, (unsigned long long)total);
    ctx_pop(0);
}

/* cuMemGetInfo_v2's free MiB in context C. */
static uint64_t
free_in(vcu_context c)
{
    size_t f = 0, t = 0;
    CHECK_RC(api.cuCtxPushCurrent(c), VCU_SUCCESS);
    CHECK_RC(api.cuMemGetInfo(&f, &t), VCU_SUCCESS);
    vcu_context popped;
    CHECK_RC(api.cuCtxPopCurrent(&popped), VCU_SUCCESS);
    return f / MIB;
}

/*
** Two visible devices and a quota of QUOTA MiB on each; one thread
** switches between their primary contexts (push and pop, as the runtime's
** cudaSetDevice does): each allocation is charged to its own context's
** device, in the fake and in the quota. Once each context has been seen,
** the hooks stop asking cuCtxGetDevice (the fake counts the calls); after
** a primary context's release (hooked: its handle may name another context
** next) they ask again, once.
*/
static void
scenario_ctxswitch(uint64_t quota)
{
    init_or_die();
    uint64_t (*calls)(void);
    sym_into(&calls, dlsym(api.lib, "fakecuda_ctx_get_device_calls"),
             "fakecuda_ctx_get_device_calls");
    vcu_context c[2];
    for (int dev = 0; dev < 2; dev++)
        CHECK_RC(api.cuDevicePrimaryCtxRetain(&c[dev], dev), VCU_SUCCESS);
    vcu_deviceptr p0 = 0, p1 = 0;
    vcu_context popped;
    CHECK_RC(api.cuCtxPushCurrent(c[0]), VCU_SUCCESS);
    CHECK_RC(api.cuMemAlloc(&p0, 4 * MIB), VCU_SUCCESS);
    CHECK_RC(api.cuCtxPushCurrent(c[1]), VCU_SUCCESS);
    CHECK_RC(api.cuMemAlloc(&p1, 8 * MIB), VCU_SUCCESS);
    CHECK_RC(api.cuCtxPopCurrent(&popped), VCU_SUCCESS);
    CHECK(fake_used_mib(0) == 4 && fake_used_mib(1) == 8,
          "the fake holds %llu and %llu MiB, expected 4 and 8",
          (unsigned long long)fake_used_mib(0), (unsigned long long)fake_used_mib(1));
    CHECK(free_in(c[0]) == quota - 4 && free_in(c[1]) == quota - 8,
          "the quota's free %llu and %llu MiB, expected %llu and %llu",
          (unsigned long long)free_in(c[0]), (unsigned long long)free_in(c[1]),
          (unsigned long long)(quota - 4), (unsigned long long)(quota - 8));
    /* The steady state: both contexts seen, 200 switches, 400 hooked calls. */
    uint64_t before = calls();
    for (int i = 0; i < 200; i++) {
        int dev = i % 2;
        vcu_deviceptr q = 0;
        CHECK_RC(api.cuCtxPushCurrent(c[dev]), VCU_SUCCESS);
        CHECK_RC(api.cuMemAlloc(&q, (uint64_t)(dev + 1) * MIB), VCU_SUCCESS);
        /* device 0: 4 MiB + a 1 MiB block, in a 2 MiB page of the driver's;
        ** the quota counts the page and up to 2 pages charged ahead. */
        uint64_t f0 = i == 100 ? free_in(c[0]) : 0;
        if (i == 100)
            CHECK(fake_used_mib(0) == 6 && f0 <= quota - 6 && f0 >= quota - 10,
                  "device 0: the fake holds %llu MiB and the quota shows %llu free, "
                  "expected 6 and %llu to %llu", (unsigned long long)fake_used_mib(0),
                  (unsigned long long)f0, (unsigned long long)(quota - 10),
                  (unsigned long long)(quota - 6));
        if (i == 101) /* device 1: 8 + 2 MiB */
            CHECK(fake_used_mib(1) == 10 && free_in(c[1]) == quota - 10,
                  "device 1: the fake holds %llu MiB and the quota shows %llu free, "
                  "expected 10 and %llu", (unsigned long long)fake_used_mib(1),
                  (unsigned long long)free_in(c[1]), (unsigned long long)(quota - 10));
        CHECK_RC(api.cuMemFree(q), VCU_SUCCESS);
        CHECK_RC(api.cuCtxPopCurrent(&popped), VCU_SUCCESS);
    }
    uint64_t steady = calls() - before;
    printf("cuCtxGetDevice calls in 200 switches: %llu\n", (unsigned long long)steady);
    CHECK(steady == 0, "%llu cuCtxGetDevice calls in the steady state, expected 0",
          (unsigned long long)steady);
    /* A release (another reference stays: the context lives on) makes the
    ** next hooked call ask again. */
    vcu_context again;
    CHECK_RC(api.cuDevicePrimaryCtxRetain(&again, 1), VCU_SUCCESS);
    CHECK_RC(api.cuDevicePrimaryCtxRelease(1), VCU_SUCCESS);
    before = calls();
    CHECK(free_in(c[1]) == quota - 8, "after a release: free %llu MiB, expected %llu",
          (unsigned long long)free_in(c[1]), (unsigned long long)(quota - 8));
    CHECK(calls() - before == 1, "after a release: %llu cuCtxGetDevice calls, expected 1",
          (unsigned long long)(calls() - before));
    CHECK_RC(api.cuMemFree(p0), VCU_SUCCESS);
    CHECK_RC(api.cuMemFree(p1), VCU_SUCCESS);
    CHECK(fake_used_mib(0) == 0 && fake_used_mib(1) == 0, "the fake still holds memory");
    CHECK_RC(api.cuCtxPopCurrent(&popped), VCU_SUCCESS);
    for (int dev = 0; dev < 2; dev++)
        CHECK_RC(api.cuDevicePrimaryCtxRelease(dev), VCU_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* The race                                                             */
/* ------------------------------------------------------------------ */

struct racer {
    pthread_t thread;
    int iterations;
    unsigned seed;
    long granted, refused, errors;
};

static void *
racer_main(void *arg)
{
    struct racer *r = arg;
    ctx_push(0);
    struct block held[4];
    int n_held = 0;
    for (int i = 0; i < r->iterations; i++) {
        unsigned x = (unsigned)rand_r(&r->seed);
        if (n_held == 4 || (n_held > 0 && x % 3 == 0)) {
            if (free_by(&held[--n_held]) != VCU_SUCCESS)
                r->errors++;
            continue;
        }
        /* 2..16 MiB, whole granules, on a path chosen at random. */
        static const enum path paths[] = {P_ALLOC, P_ASYNC, P_POOL, P_MANAGED, P_CREATE};
        enum path p = paths[(x / 7) % 5];
        int rc = alloc_by(p, 2 * (1 + (x / 64) % 8), 0, &held[n_held]);
        if (rc == VCU_SUCCESS)
            n_held++, r->granted++;
        else if (rc == VCU_ERROR_OUT_OF_MEMORY)
            r->refused++;
        else
            r->errors++;
    }
    while (n_held > 0)
        if (free_by(&held[--n_held]) != VCU_SUCCESS)
            r->errors++;
    ctx_pop(0);
    return NULL;
}

static void
scenario_race(int threads, int iterations)
{
    init_or_die();
    struct racer r[64];
    if (threads > 64)
        threads = 64;
    for (int i = 0; i < threads; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].iterations = iterations;
        r[i].seed = (unsigned)(getpid() * 131 + i);
        pthread_create(&r[i].thread, NULL, racer_main, &r[i]);
    }
    long granted = 0, refused = 0, errors = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(r[i].thread, NULL);
        granted += r[i].granted;
        refused += r[i].refused;
        errors += r[i].errors;
    }
    printf("race: %ld granted, %ld refused, %ld errors\n", granted, refused, errors);
    CHECK(errors == 0, "race: %ld calls failed otherwise than by the quota", errors);
    CHECK(granted > 0 && refused > 0, "race: no contention (%ld granted, %ld refused)",
          granted, refused);
}

/* ------------------------------------------------------------------ */
/* Other scenarios                                                      */
/* ------------------------------------------------------------------ */

/* Allocate MIB on DEV and hold it until STOPFILE exists (or 60 s). */
static void
scenario_hold(uint64_t mib, int dev, const char *stopfile)
{
    init_or_die();
    ctx_push(dev);
    vcu_deviceptr p;
    int rc = api.cuMemAlloc(&p, mib * MIB);
    printf(rc == VCU_SUCCESS ? "held\n" : "refused %d\n", rc);
    fflush(stdout);
    for (int i = 0; i < 600 && access(stopfile, F_OK) != 0; i++)
        usleep(100 * 1000);
    if (rc == VCU_SUCCESS)
        api.cuMemFree(p);
    ctx_pop(dev);
}

/*
** A short program, as `vram run --report` must see it: COUNT allocations
** of MIB on device 0, all kept (each must be granted), then EXTRA more of
** EXTRA_MIB, which the quota must refuse; all freed, and the process
** exits at once.
*/
static void
scenario_burst(uint64_t mib, int count, int extra, uint64_t extra_mib)
{
    init_or_die();
    ctx_push(0);
    vcu_deviceptr p[64];
    int n = 0;
    for (; n < count && n < 64; n++)
        CHECK_RC(api.cuMemAlloc(&p[n], mib * MIB), VCU_SUCCESS);
    for (int k = 0; k < extra; k++) {
        vcu_deviceptr q;
        CHECK_RC(api.cuMemAlloc(&q, extra_mib * MIB), VCU_ERROR_OUT_OF_MEMORY);
    }
    for (int k = 0; k < n; k++)
        api.cuMemFree(p[k]);
    ctx_pop(0);
}

/* Wait until PATH exists (or 60 s). */
static void
wait_for(const char *path)
{
    for (int i = 0; i < 600 && access(path, F_OK) != 0; i++)
        usleep(100 * 1000);
}

/*
** Pinned host memory, as a data loader takes it: 8 MiB on the device,
** then 3 MiB by cuMemAllocHost, 5 MiB by cuMemHostAlloc and 7 MiB of the
** process's own memory registered (15 MiB pinned); "pinned", then wait for
** STOP1; free them all (plus a free of an address never pinned, which the
** driver refuses); "freed", wait for STOP2.
*/
static void
scenario_pinned(const char *stop1, const char *stop2)
{
    init_or_die();
    ctx_push(0);
    vcu_deviceptr d;
    CHECK_RC(api.cuMemAlloc(&d, 8 * MIB), VCU_SUCCESS);
    void *a = NULL, *b = NULL;
    char *c = malloc(7 * MIB);
    if (c == NULL)
        die("malloc");
    CHECK_RC(api.cuMemAllocHost(&a, 3 * MIB), VCU_SUCCESS);
    CHECK_RC(api.cuMemHostAlloc(&b, 5 * MIB, 0), VCU_SUCCESS);
    CHECK_RC(api.cuMemHostRegister(c, 7 * MIB, 0), VCU_SUCCESS);
    CHECK_RC(api.cuMemHostRegister(c, 7 * MIB, 0), VCU_ERROR_INVALID_VALUE); /* twice */
    printf("pinned\n");
    fflush(stdout);
    wait_for(stop1);
    CHECK_RC(api.cuMemFreeHost(c), VCU_ERROR_INVALID_VALUE); /* registered, not allocated */
    CHECK_RC(api.cuMemFreeHost(a), VCU_SUCCESS);
    CHECK_RC(api.cuMemFreeHost(b), VCU_SUCCESS);
    CHECK_RC(api.cuMemHostUnregister(c), VCU_SUCCESS);
    free(c);
    printf("freed\n");
    fflush(stdout);
    wait_for(stop2);
    CHECK_RC(api.cuMemFree(d), VCU_SUCCESS);
    ctx_pop(0);
}

static double
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Allocate MIB on DEV and expect WANT; with WITHIN_MS > 0, retry until it
** is granted or that long has passed. */
static void
scenario_alloc(uint64_t mib, int dev, int want, int within_ms)
{
    init_or_die();
    ctx_push(dev);
    double t0 = now_ms();
    vcu_deviceptr p;
    int rc;
    for (;;) {
        rc = api.cuMemAlloc(&p, mib * MIB);
        if (rc == want || within_ms <= 0 || now_ms() - t0 > within_ms)
            break;
        usleep(10 * 1000);
    }
    printf("alloc %llu MiB on %d: %d after %.1f ms\n", (unsigned long long)mib, dev, rc,
           now_ms() - t0);
    CHECK(rc == want, "alloc %llu MiB on device %d: %d, expected %d",
          (unsigned long long)mib, dev, rc, want);
    if (rc == VCU_SUCCESS)
        api.cuMemFree(p);
    ctx_pop(dev);
}

/*
** A training loop for `vram record`, allocating as PyTorch's cudaMallocAsync
** backend does (every tensor a stream-ordered allocation and free): 64 MiB
** of weights, then STEPS steps of four 8 MiB activations made and freed,
** each step keeping LEAK_KIB KiB more (0: none) -- a metric's logits kept.
** STEPS 0: steps without end, 2 ms apart, for `vram tune` to stop.
*/
static void
scenario_train(int steps, uint64_t leak_kib)
{
    init_or_die();
    ctx_push(0);
    vcu_deviceptr weights;
    CHECK_RC(api.cuMemAlloc(&weights, 64 * MIB), VCU_SUCCESS);
    for (int step = 0; steps == 0 || step < steps; step++) {
        if (steps == 0)
            usleep(2000);
        vcu_deviceptr acts[4];
        for (int k = 0; k < 4; k++)
            CHECK_RC(api.cuMemAllocAsync(&acts[k], 8 * MIB, NULL), VCU_SUCCESS);
        for (int k = 0; k < 4; k++)
            CHECK_RC(api.cuMemFreeAsync(acts[k], NULL), VCU_SUCCESS);
        vcu_deviceptr kept;
        if (leak_kib > 0)
            CHECK_RC(api.cuMemAllocAsync(&kept, leak_kib * 1024, NULL), VCU_SUCCESS);
    }
    ctx_pop(0);
}

/*
** Fork: the child's allocations are its own. The parent holds 16 MiB; the
** child sees the group's (here: the process tree's) use, allocates 32 MiB,
** frees a pointer it inherited (the driver's business: the parent's share
** stays counted), and exits without freeing its own -- which the ledger
** reclaims. Quota 64 MiB.
*/
static void
scenario_fork(void)
{
    init_or_die();
    ctx_push(0);
    vcu_deviceptr parent_p;
    CHECK_RC(api.cuMemAlloc(&parent_p, 16 * MIB), VCU_SUCCESS);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        size_t f, t;
        CHECK_RC(api.cuMemGetInfo(&f, &t), VCU_SUCCESS);
        CHECK(f == 48 * MIB, "child: free %zu MiB, expected 48", f / MIB);
        vcu_deviceptr p;
        CHECK_RC(api.cuMemAlloc(&p, 32 * MIB), VCU_SUCCESS);
        CHECK_RC(api.cuMemAlloc(&p, 32 * MIB), VCU_ERROR_OUT_OF_MEMORY);
        CHECK_RC(api.cuMemFree(parent_p), VCU_SUCCESS); /* the fake's copy */
        CHECK_RC(api.cuMemGetInfo(&f, &t), VCU_SUCCESS);
        CHECK(f == 16 * MIB,
              "child: free %zu MiB after freeing the parent's pointer, "
              "expected 16 (the parent's share stays)",
              f / MIB);
        fflush(stdout);
        _exit(failures == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed");
    size_t f, t;
    CHECK_RC(api.cuMemGetInfo(&f, &t), VCU_SUCCESS);
    CHECK(f == 48 * MIB, "parent: free %zu MiB after the child exited, expected 48",
          f / MIB);
    CHECK_RC(api.cuMemFree(parent_p), VCU_SUCCESS);
    CHECK_RC(api.cuMemGetInfo(&f, &t), VCU_SUCCESS);
    CHECK(f == 64 * MIB, "parent: free %zu MiB at the end, expected 64", f / MIB);
    ctx_pop(0);
}

/* A malformed setting: cuInit and every hooked call fail with
** CUDA_ERROR_NOT_INITIALIZED, the process goes on. */
static void
scenario_malformed(void)
{
    CHECK_RC(api.cuInit(0), VCU_ERROR_NOT_INITIALIZED);
    CHECK_RC(api.cuInit(0), VCU_ERROR_NOT_INITIALIZED);
    vcu_deviceptr p;
    CHECK_RC(api.cuMemAlloc(&p, MIB), VCU_ERROR_NOT_INITIALIZED);
    size_t f, t;
    CHECK_RC(api.cuMemGetInfo(&f, &t), VCU_ERROR_NOT_INITIALIZED);
    printf("still running\n");
}

/* Whether LIB (a module's file name) is the preload library, by any of its
** names (libvram-preload.so in the build, libvram-preload.so.0, its SONAME). */
static bool
is_preload(const char *lib)
{
    return strncmp(lib, "libvram-preload.so", 18) == 0 &&
           (lib[18] == '\0' || lib[18] == '.');
}

/* Which library each function came from: ours for every hooked one
** (the _ptsz twins with --ptsz) unless WANT_REAL, the driver's otherwise. */
static void
scenario_routes(bool want_real)
{
#define X(field, symbol, asked, hooked, twin)                                            \
    if (api.field != NULL) {                                                             \
        const char *sym, *lib;                                                           \
        void *p;                                                                         \
        memcpy(&p, &api.field, sizeof p);                                                \
        lib = origin(p, &sym);                                                           \
        bool ours = is_preload(lib);                                                     \
        const char *want_sym = (twin && api.ptsz) ? #symbol "_ptsz" : #symbol;           \
        if (ours != (hooked && !want_real))                                              \
            fail("%s resolved to %s in %s", asked, sym, lib);                            \
        else if (strcmp(sym, want_sym) != 0)                                             \
            fail("%s resolved to %s, expected %s", asked, sym, want_sym);                \
    }
    PROBE_FNS(X)
#undef X
    /* RTLD_NEXT is relative to the caller (here: this program), so the
    ** next dlsym after it is the preload library's own. A dlsym override
    ** that called glibc's instead of jumping to it would answer glibc's. */
    const char *sym, *lib;
    lib = origin(dlsym(RTLD_NEXT, "dlsym"), &sym);
    if (!is_preload(lib))
        fail("dlsym(RTLD_NEXT, \"dlsym\") from the program gave %s in %s", sym, lib);
}

/*
** cuGetProcAddress details: the old ABI of cuMemAlloc (asked with 3000)
** passes through; "cuGetProcAddress" asked again gives v1 or v2 by
** version; unknown names are a success with NULL, untouched.
*/
static void
scenario_versions(bool want_real)
{
    vcu_pfn_cuGetProcAddress gpa2;
    sym_into(&gpa2, dlsym(api.lib, "cuGetProcAddress_v2"), "cuGetProcAddress_v2");
    const char *sym, *lib;
    void *gp;
    memcpy(&gp, &gpa2, sizeof gp);
    lib = origin(gp, &sym);
    CHECK((is_preload(lib)) != want_real,
          "dlsym cuGetProcAddress_v2 came from %s", lib);
    void *p = NULL;
    vcu_proc_address_result st;
    CHECK_RC(gpa2("cuMemAlloc", &p, 3000, 0, &st), VCU_SUCCESS);
    lib = origin(p, &sym);
    CHECK(strcmp(lib, "libcuda.so.1") == 0 && strcmp(sym, "cuMemAlloc") == 0,
          "cuMemAlloc at 3000 gave %s in %s, expected the driver's v1", sym, lib);
    CHECK_RC(gpa2("cuGetProcAddress", &p, 11030, 0, &st), VCU_SUCCESS);
    lib = origin(p, &sym);
    CHECK(strcmp(sym, "cuGetProcAddress") == 0, "cuGetProcAddress at 11030 gave %s", sym);
    CHECK((is_preload(lib)) != want_real,
          "cuGetProcAddress at 11030 came from %s", lib);
    CHECK_RC(gpa2("cuGetProcAddress", &p, 12000, 0, &st), VCU_SUCCESS);
    lib = origin(p, &sym);
    CHECK(strcmp(sym, "cuGetProcAddress_v2") == 0, "cuGetProcAddress at 12000 gave %s",
          sym);
    p = &p;
    CHECK_RC(gpa2("cuNoSuchFunction", &p, 12000, 0, &st), VCU_SUCCESS);
    CHECK(p == NULL && st == VCU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
          "an unknown name gave %p, status %d", p, (int)st);
    /* The legacy variant without the flag, the _ptsz one with it. */
    CHECK_RC(gpa2("cuMemFreeAsync", &p, 12000, 0, &st), VCU_SUCCESS);
    origin(p, &sym);
    CHECK(strcmp(sym, "cuMemFreeAsync") == 0, "cuMemFreeAsync, flags 0: %s", sym);
    CHECK_RC(gpa2("cuMemFreeAsync", &p, 12000,
                  VCU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
             VCU_SUCCESS);
    origin(p, &sym);
    CHECK(strcmp(sym, "cuMemFreeAsync_ptsz") == 0, "cuMemFreeAsync, flags 2: %s", sym);
    /* "cuGraphInstantiate" is the CUDA 11 ABI below 12000, then cuda.h's
    ** #define of cuGraphInstantiateWithFlags: each hooked as the function
    ** the driver gave. */
    CHECK_RC(gpa2("cuGraphInstantiate", &p, 11000, 0, &st), VCU_SUCCESS);
    lib = origin(p, &sym);
    CHECK(strcmp(sym, "cuGraphInstantiate_v2") == 0 &&
              is_preload(lib) != want_real,
          "cuGraphInstantiate at 11000 gave %s in %s", sym, lib);
    CHECK_RC(gpa2("cuGraphInstantiate", &p, 12000, 0, &st), VCU_SUCCESS);
    lib = origin(p, &sym);
    CHECK(strcmp(sym, "cuGraphInstantiateWithFlags") == 0 &&
              is_preload(lib) != want_real,
          "cuGraphInstantiate at 12000 gave %s in %s", sym, lib);
}

/* Is there a ledger file of this process's private group in /dev/shm? */
static bool
private_ledger_exists(void)
{
    char prefix[64], dir[64];
    snprintf(prefix, sizeof prefix, "pid-%ld-", (long)getpid());
    snprintf(dir, sizeof dir, "/dev/shm/vram-%u", (unsigned)geteuid());
    DIR *d = opendir(dir);
    if (d == NULL)
        return false;
    bool found = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            found = true;
    closedir(d);
    return found;
}

/* PASSIVE (nothing set) or ACTIVE with a private group: the ledger file
** exists exactly when active; the physical figures pass through when
** passive. */
static void
scenario_ledger_file(bool active)
{
    init_or_die();
    ctx_push(0);
    vcu_deviceptr p;
    CHECK_RC(api.cuMemAlloc(&p, 512 * MIB),
             active ? VCU_ERROR_OUT_OF_MEMORY : VCU_SUCCESS);
    if (!active)
        CHECK_RC(api.cuMemFree(p), VCU_SUCCESS);
    CHECK(private_ledger_exists() == active, "a private ledger file %s",
          active ? "is missing" : "was created");
    ctx_pop(0);
}

/* ------------------------------------------------------------------ */
/* NVML                                                                 */
/* ------------------------------------------------------------------ */

struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_memory_v2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};

/* NVML, loaded as pynvml does, after 16 MiB were taken through CUDA on
** device 0: quota 64 MiB on device 0 (by UUID), none on device 1. */
static void
scenario_nvml(void)
{
    init_or_die();
    ctx_push(0);
    vcu_deviceptr p;
    CHECK_RC(api.cuMemAlloc(&p, 16 * MIB), VCU_SUCCESS);
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        die("dlopen libnvidia-ml.so.1");
    int (*init)(void);
    int (*by_index)(unsigned, void **);
    int (*info)(void *, struct nvml_memory *);
    int (*info2)(void *, struct nvml_memory_v2 *);
    sym_into(&init, dlsym(h, "nvmlInit_v2"), "nvmlInit_v2");
    sym_into(&by_index, dlsym(h, "nvmlDeviceGetHandleByIndex_v2"),
             "nvmlDeviceGetHandleByIndex_v2");
    sym_into(&info, dlsym(h, "nvmlDeviceGetMemoryInfo"), "nvmlDeviceGetMemoryInfo");
    sym_into(&info2, dlsym(h, "nvmlDeviceGetMemoryInfo_v2"),
             "nvmlDeviceGetMemoryInfo_v2");
    CHECK_RC(init(), 0);
    void *d0, *d1;
    CHECK_RC(by_index(0, &d0), 0);
    CHECK_RC(by_index(1, &d1), 0);
    struct nvml_memory m;
    CHECK_RC(info(d0, &m), 0);
    CHECK(m.total == 64 * MIB && m.used == 16 * MIB && m.free == 48 * MIB,
          "nvml v1 device 0: total %llu used %llu free %llu MiB", m.total / MIB,
          m.used / MIB, m.free / MIB);
    struct nvml_memory_v2 m2 = {.version = (unsigned)sizeof m2 | 2u << 24};
    CHECK_RC(info2(d0, &m2), 0);
    CHECK(m2.total == 64 * MIB && m2.used == 16 * MIB && m2.reserved == 4 * MIB &&
              m2.free == 44 * MIB,
          "nvml v2 device 0: total %llu used %llu reserved %llu free %llu MiB",
          m2.total / MIB, m2.used / MIB, m2.reserved / MIB, m2.free / MIB);
    CHECK_RC(info(d1, &m), 0);
    CHECK(m.total == 1024 * MIB, "nvml device 1 (not limited): total %llu MiB",
          m.total / MIB);
    CHECK_RC(api.cuMemFree(p), VCU_SUCCESS);
    ctx_pop(0);
}

/* ------------------------------------------------------------------ */

static void
usage(void)
{
    fprintf(
        stderr,
        "usage: probe [--via direct|dlsym|gpa11030|gpa12000] [--ptsz] SCENARIO...\n"
        "  paths | vmm | memory CASE | bypass HELPER.so | routes [real] | versions [real]\n"
        "  malformed | fork\n"
        "  nvml\n"
        "  info DEV TOTAL FREE | alloc MIB DEV WANT [WITHIN_MS] | hold MIB DEV STOPFILE\n"
        "  burst MIB COUNT EXTRA EXTRA_MIB\n"
        "  race THREADS ITERATIONS | peak MAX_MIB | ledger-file active|passive\n"
        "  ctxdevice TOTAL | ctxswitch QUOTA | train STEPS LEAK_KIB | pinned STOP1 STOP2\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    api.via = "dlsym";
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--via") == 0 && i + 1 < argc)
            api.via = argv[++i];
        else if (strcmp(argv[i], "--ptsz") == 0)
            api.ptsz = true;
        else
            usage();
    }
    if (i >= argc)
        usage();
    const char *s = argv[i];
    int n = argc - i - 1;
    char **a = argv + i + 1;
    load();
    if (strcmp(s, "paths") == 0)
        scenario_paths();
    else if (strcmp(s, "vmm") == 0)
        scenario_vmm();
    else if (strcmp(s, "memory") == 0 && n == 1)
        scenario_memory(a[0]);
    else if (strcmp(s, "bypass") == 0 && n == 1)
        scenario_bypass(a[0]);
    else if (strcmp(s, "routes") == 0)
        scenario_routes(n > 0 && strcmp(a[0], "real") == 0);
    else if (strcmp(s, "versions") == 0)
        scenario_versions(n > 0 && strcmp(a[0], "real") == 0);
    else if (strcmp(s, "malformed") == 0)
        scenario_malformed();
    else if (strcmp(s, "train") == 0 && n == 2)
        scenario_train(num(a[0]), (uint64_t)num(a[1]));
    else if (strcmp(s, "fork") == 0)
        scenario_fork();
    else if (strcmp(s, "nvml") == 0)
        scenario_nvml();
    else if (strcmp(s, "ctxdevice") == 0 && n == 1)
        scenario_ctxdevice((uint64_t)num(a[0]));
    else if (strcmp(s, "ctxswitch") == 0 && n == 1)
        scenario_ctxswitch((uint64_t)num(a[0]));
    else if (strcmp(s, "info") == 0 && n == 3) {
        init_or_die();
        check_info((int)num(a[0]), (uint64_t)num(a[1]), (uint64_t)num(a[2]));
    } else if (strcmp(s, "alloc") == 0 && (n == 3 || n == 4))
        scenario_alloc((uint64_t)num(a[0]), (int)num(a[1]), (int)num(a[2]),
                       n == 4 ? (int)num(a[3]) : 0);
    else if (strcmp(s, "pinned") == 0 && n == 2)
        scenario_pinned(a[0], a[1]);
    else if (strcmp(s, "burst") == 0 && n == 4)
        scenario_burst((uint64_t)num(a[0]), (int)num(a[1]), (int)num(a[2]),
                       (uint64_t)num(a[3]));
    else if (strcmp(s, "hold") == 0 && n == 3)
        scenario_hold((uint64_t)num(a[0]), (int)num(a[1]), a[2]);
    else if (strcmp(s, "race") == 0 && n == 2)
        scenario_race((int)num(a[0]), (int)num(a[1]));
    else if (strcmp(s, "peak") == 0 && n == 1) {
        uint64_t peak = api.fake_peak(0) / MIB, used = api.fake_used(0);
        printf("peak %llu MiB\n", (unsigned long long)peak);
        CHECK(peak <= (uint64_t)num(a[0]), "the fake's peak %llu MiB passed the quota",
              (unsigned long long)peak);
        CHECK(peak > 0, "the fake's peak is 0: nothing ran");
        CHECK(used == 0, "the fake still holds %llu bytes", (unsigned long long)used);
    } else if (strcmp(s, "ledger-file") == 0 && n == 1)
        scenario_ledger_file(strcmp(a[0], "active") == 0);
    else
        usage();
    return failures == 0 ? 0 : 1;
}
