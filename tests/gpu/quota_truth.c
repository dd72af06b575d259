/* SPDX-License-Identifier: MIT */
/*
** quota_truth.c -- one way of getting device memory, pushed against the
** quota until the driver call fails, with NVML's per-process used memory
** (nvidia-smi's figure) as the judge of what the device really holds.
**
** Run under the quota enforcer (`vram run --limit 1G`, or a host policy
** through /etc/ld.so.preload); bench/gpu/quota_truth.py runs every case
** both ways on the GPU (tests/gpu/run.sh, section quota_truth), and the
** preload tests run it over the fake driver and fake NVML. It reaches the
** driver as the CUDA runtime does: dlopen("libcuda.so.1"), dlsym of
** cuGetProcAddress_v2, every function through that (cudaVersion 12000);
** the case "dlvsym" takes the route around the dlsym override instead
** (glibc's own dlsym, fetched with dlvsym). Built from vram's own
** declarations (src/driver), so it needs no CUDA SDK.
**
** Cases (UNIT: the bytes of one allocation):
**   tiny, odd, mib_plus1, 2mib_minus1, 2mib_plus1, huge   cuMemAlloc_v2 of
**       1 B, 100,000 B, 1 MiB + 1, 2 MiB - 1, 2 MiB + 1, quota/3 + 1
**   fragment   512 KiB blocks until refused, then all but one block of
**              each 2 MiB page freed, then 512 KiB blocks again
**   pitch      cuMemAllocPitch_v2, 4097 x 1000 bytes, 4-byte elements
**   array, array_tiny, array3d, mipmap   cuArrayCreate_v2 1000 x 1000
**              float4, 1 x 1 float, cuArray3DCreate_v2 64^3 float,
**              cuMipmappedArrayCreate 1024 x 1024 float4 with 11 levels
**   vmm        cuMemCreate of quota/16 (64 MiB under 1 GiB), reserved,
**              mapped, made accessible
**   release_after_map   the same, cuMemRelease right after the map (the
**              idiom of NVIDIA's samples)
**   pool       cuMemAllocAsync of quota/32 + 1 from the default pool
**   pool_threshold   the default pool's release threshold at its most:
**              quota/32 blocks until refused, all freed and synchronized
**              (the pool keeps them), then cuMemAlloc_v2 of as much
**   pool_created     cuMemPoolCreate's pool, cuMemAllocFromPoolAsync
**   graph      a graph of one allocation node of quota/16 + 1 (never
**              freed), instantiated and launched, again and again
**   dlvsym     cuMemAlloc_v2 of quota/16, reached around the dlsym override
**
** Usage: quota_truth CASE [--quota BYTES] [--device N]
** Prints one JSON line: the case, the quota, NVML's figure before the
** first allocation (the context), its peak while allocating (sampled
** after every allocation that took UNIT or more since the last sample,
** and at every 256th), its figure at the refusal (after 200 ms), the
** bytes granted, the allocations made and the refusal's code; the
** verdicts: within (the peak never above the quota), at_quota (the
** refusal is CUDA_ERROR_OUT_OF_MEMORY with NVML's figure within NEAR of
** the quota: not refused far below it) and pass (both). With
** QUOTA_TRUTH_HOLD_MS set, it then prints "holding" and keeps the memory
** that long before freeing it (an outside sampler reads nvidia-smi
** meanwhile). Exit 0 when pass, 1 when not, 2 for bad usage or when the
** driver cannot start.
**
** Test code: getenv and exit are allowed here.
*/

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver/cuda_api.h"
#include "driver/nvml_api.h"

#define MIB (1ULL << 20)
#define GIB (1ULL << 30)
/* Refused within this much of the quota is "at the quota": one chunk of a
** stream-ordered pool (32 MiB) and the context's growth between two of
** its measurements leave the allocation refused that much below it. */
#define NEAR (96 * MIB)
#define MAX_BLOCKS (1u << 22) /* allocations one case keeps at most */

/* ------------------------------------------------------------------ */
/* The driver and NVML                                                  */
/* ------------------------------------------------------------------ */

/* X(field, asked): the functions used, resolved through cuGetProcAddress. */
#define TRUTH_FNS(X)                                                                     \
    X(cuInit, "cuInit")                                                                  \
    X(cuDeviceGet, "cuDeviceGet")                                                        \
    X(cuDeviceGetUuid, "cuDeviceGetUuid")                                                \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                              \
    X(cuCtxPushCurrent, "cuCtxPushCurrent")                                              \
    X(cuCtxSynchronize, "cuCtxSynchronize")                                              \
    X(cuMemAlloc, "cuMemAlloc")                                                          \
    X(cuMemFree, "cuMemFree")                                                            \
    X(cuMemAllocPitch, "cuMemAllocPitch")                                                \
    X(cuMemAllocAsync, "cuMemAllocAsync")                                                \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync")                                \
    X(cuMemFreeAsync, "cuMemFreeAsync")                                                  \
    X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool")                            \
    X(cuMemPoolCreate, "cuMemPoolCreate")                                                \
    X(cuMemPoolDestroy, "cuMemPoolDestroy")                                              \
    X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute")                                    \
    X(cuMemPoolTrimTo, "cuMemPoolTrimTo")                                                \
    X(cuMemCreate, "cuMemCreate")                                                        \
    X(cuMemRelease, "cuMemRelease")                                                      \
    X(cuMemAddressReserve, "cuMemAddressReserve")                                        \
    X(cuMemAddressFree, "cuMemAddressFree")                                              \
    X(cuMemMap, "cuMemMap")                                                              \
    X(cuMemUnmap, "cuMemUnmap")                                                          \
    X(cuMemSetAccess, "cuMemSetAccess")                                                  \
    X(cuArrayCreate, "cuArrayCreate")                                                    \
    X(cuArray3DCreate, "cuArray3DCreate")                                                \
    X(cuArrayDestroy, "cuArrayDestroy")                                                  \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate")                                  \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy")                                \
    X(cuGraphCreate, "cuGraphCreate")                                                    \
    X(cuGraphDestroy, "cuGraphDestroy")                                                  \
    X(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode")                                  \
    X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")                        \
    X(cuGraphLaunch, "cuGraphLaunch")                                                    \
    X(cuGraphExecDestroy, "cuGraphExecDestroy")                                          \
    X(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim")

static struct {
#define X(field, asked) vcu_pfn_##field field;
    TRUTH_FNS(X)
#undef X
    vnvml_pfn_processes procs;
    vnvml_device nvml_dev;
    vcu_device dev;
} api;

static void
die(const char *what)
{
    fprintf(stderr, "quota_truth: %s\n", what);
    exit(2);
}

typedef void *(*dlsym_fn)(void *, const char *);

/* Glibc's own dlsym, fetched around any dlsym override (the route of the
** "dlvsym" case), by the version names of the architectures vram runs on. */
static dlsym_fn
glibc_dlsym(void)
{
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        void *p = dlvsym(RTLD_DEFAULT, "dlsym", versions[i]);
        if (p != NULL) {
            dlsym_fn f;
            memcpy(&f, &p, sizeof f);
            return f;
        }
    }
    return NULL;
}

/* Every function of TRUTH_FNS, through cuGetProcAddress_v2 found by LOOKUP
** on the driver's handle. */
static void
load(bool around)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        die("cannot load libcuda.so.1");
    dlsym_fn lookup = around ? glibc_dlsym() : dlsym;
    if (lookup == NULL)
        die("glibc's dlsym is not found by dlvsym");
    void *p = lookup(lib, "cuGetProcAddress_v2");
    if (p == NULL)
        die("no cuGetProcAddress_v2");
    vcu_pfn_cuGetProcAddress gpa;
    memcpy(&gpa, &p, sizeof p);
    vcu_proc_address_result st;
#define X(field, asked)                                                                  \
    p = NULL;                                                                            \
    if (gpa(asked, &p, 12000, 0, &st) != VCU_SUCCESS || p == NULL)                       \
        die("cuGetProcAddress(" asked ") failed");                                       \
    memcpy(&api.field, &p, sizeof p);
    TRUTH_FNS(X)
#undef X
}

/* NVML's per-process figure of this process on the device, bytes; -1 when
** NVML cannot say. */
static long long
nvml_used(void)
{
    if (api.procs == NULL)
        return -1;
    struct vnvml_process_v2 info[256];
    unsigned int n = 256;
    if (api.procs(api.nvml_dev, &n, info) != VNVML_SUCCESS)
        return -1;
    for (unsigned int i = 0; i < n && i < 256; i++)
        if (info[i].pid == (unsigned int)getpid())
            return (long long)info[i].used;
    return 0;
}

static void
nvml_open(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return;
    void *init = dlsym(h, "nvmlInit_v2"),
         *by_uuid = dlsym(h, "nvmlDeviceGetHandleByUUID");
    void *procs = dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (procs == NULL)
        procs = dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v2");
    if (init == NULL || by_uuid == NULL || procs == NULL)
        return;
    vnvml_pfn_init f_init;
    vnvml_return (*f_uuid)(const char *, vnvml_device *);
    memcpy(&f_init, &init, sizeof init);
    memcpy(&f_uuid, &by_uuid, sizeof by_uuid);
    vcu_uuid u;
    char text[64];
    if (f_init() != VNVML_SUCCESS || api.cuDeviceGetUuid(&u, api.dev) != VCU_SUCCESS)
        return;
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(text, sizeof text,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
             b[12], b[13], b[14], b[15]);
    if (f_uuid(text, &api.nvml_dev) == VNVML_SUCCESS)
        memcpy(&api.procs, &procs, sizeof procs);
}

static void
nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------ */
/* The run: allocate until refused, sampling the judge                 */
/* ------------------------------------------------------------------ */

/* What one allocation returned, to free it by the matching call. */
struct block {
    uint64_t key;  /* pointer, handle, array, graph exec */
    uint64_t va;   /* vmm: the reserved range */
    uint64_t size; /* vmm: its bytes */
};

static struct {
    const char *name;
    uint64_t quota, unit;
    struct block *blocks;
    unsigned n;
    uint64_t granted;
    long long before, peak, since;
    int refusal; /* the failing call's result; -1: none yet */
    vcu_mem_pool pool;
} run;

static void
sample(bool force)
{
    if (!force && run.granted - (uint64_t)run.since < run.unit && run.n % 256 != 0)
        return;
    long long u = nvml_used();
    if (u > run.peak)
        run.peak = u;
    run.since = (long long)run.granted;
}

/* One allocation of the case's kind into *B: the driver's result. */
typedef int (*alloc_step)(struct block *b);

static int
step_alloc(struct block *b)
{
    vcu_deviceptr p = 0;
    int r = api.cuMemAlloc(&p, run.unit);
    b->key = p;
    return r;
}

static int
step_pitch(struct block *b)
{
    vcu_deviceptr p = 0;
    size_t pitch = 0;
    int r = api.cuMemAllocPitch(&p, &pitch, 4097, 1000, 4);
    b->key = p;
    return r;
}

static int
step_array(struct block *b)
{
    vcu_array a = NULL;
    int r;
    if (strcmp(run.name, "array3d") == 0) {
        vcu_array3d_descriptor d = {64, 64, 64, VCU_AD_FORMAT_FLOAT, 1, 0};
        r = api.cuArray3DCreate(&a, &d);
    } else if (strcmp(run.name, "array_tiny") == 0) {
        vcu_array_descriptor d = {1, 1, VCU_AD_FORMAT_FLOAT, 1};
        r = api.cuArrayCreate(&a, &d);
    } else {
        vcu_array_descriptor d = {1000, 1000, VCU_AD_FORMAT_FLOAT, 4};
        r = api.cuArrayCreate(&a, &d);
    }
    b->key = (uint64_t)(uintptr_t)a;
    return r;
}

static int
step_mipmap(struct block *b)
{
    vcu_array3d_descriptor d = {1024, 1024, 0, VCU_AD_FORMAT_FLOAT, 4, 0};
    vcu_mipmapped_array m = NULL;
    int r = api.cuMipmappedArrayCreate(&m, &d, 11);
    b->key = (uint64_t)(uintptr_t)m;
    return r;
}

static int
step_vmm(struct block *b)
{
    vcu_mem_allocation_prop prop;
    memset(&prop, 0, sizeof prop);
    prop.type = VCU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = VCU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = api.dev;
    vcu_mem_handle h = 0;
    int r = api.cuMemCreate(&h, run.unit, &prop, 0);
    if (r != VCU_SUCCESS)
        return r;
    vcu_deviceptr va = 0;
    if (api.cuMemAddressReserve(&va, run.unit, 0, 0, 0) != VCU_SUCCESS ||
        api.cuMemMap(va, run.unit, 0, h, 0) != VCU_SUCCESS)
        die("cuMemAddressReserve or cuMemMap failed");
    vcu_mem_access_desc acc = {{VCU_MEM_LOCATION_TYPE_DEVICE, api.dev},
                               VCU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (api.cuMemSetAccess(va, run.unit, &acc, 1) != VCU_SUCCESS)
        die("cuMemSetAccess failed");
    b->key = h;
    b->va = va;
    b->size = run.unit;
    if (strcmp(run.name, "release_after_map") == 0) {
        if (api.cuMemRelease(h) != VCU_SUCCESS)
            die("cuMemRelease failed");
        b->key = 0;
    }
    return VCU_SUCCESS;
}

static int
step_async(struct block *b)
{
    vcu_deviceptr p = 0;
    int r = run.pool != NULL ? api.cuMemAllocFromPoolAsync(&p, run.unit, run.pool, NULL)
                             : api.cuMemAllocAsync(&p, run.unit, NULL);
    b->key = p;
    return r;
}

static int
step_graph(struct block *b)
{
    vcu_graph g = NULL;
    if (api.cuGraphCreate(&g, 0) != VCU_SUCCESS)
        die("cuGraphCreate failed");
    vcu_mem_alloc_node_params p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = VCU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = VCU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = api.dev;
    p.bytesize = run.unit;
    vcu_graph_node n;
    vcu_graph_exec e = NULL;
    if (api.cuGraphAddMemAllocNode(&n, g, NULL, 0, &p) != VCU_SUCCESS ||
        api.cuGraphInstantiateWithFlags(&e, g, 0) != VCU_SUCCESS)
        die("a graph with an allocation node could not be made");
    api.cuGraphDestroy(g);
    int r = api.cuGraphLaunch(e, NULL);
    if (r == VCU_SUCCESS)
        r = api.cuCtxSynchronize();
    if (r != VCU_SUCCESS)
        api.cuGraphExecDestroy(e);
    b->key = (uint64_t)(uintptr_t)e;
    b->va = p.dptr; /* the allocation, never freed in the graph */
    return r;
}

/* Allocate with STEP until a call fails (or MAX_BLOCKS, or four quotas
** granted: the quota is not enforced). */
static void
fill(alloc_step step)
{
    while (run.n < MAX_BLOCKS && run.granted <= 4 * run.quota) {
        struct block b = {0, 0, 0};
        int r = step(&b);
        if (r != VCU_SUCCESS) {
            run.refusal = r;
            return;
        }
        run.blocks[run.n++] = b;
        run.granted += run.unit;
        sample(false);
    }
}

static void
free_block(const struct block *b)
{
    const char *c = run.name;
    if (strncmp(c, "array", 5) == 0)
        api.cuArrayDestroy((vcu_array)(uintptr_t)b->key);
    else if (strcmp(c, "mipmap") == 0)
        api.cuMipmappedArrayDestroy((vcu_mipmapped_array)(uintptr_t)b->key);
    else if (strcmp(c, "vmm") == 0 || strcmp(c, "release_after_map") == 0) {
        api.cuMemUnmap(b->va, b->size);
        if (b->key != 0)
            api.cuMemRelease(b->key);
        api.cuMemAddressFree(b->va, b->size);
    } else if (strcmp(c, "graph") == 0) {
        api.cuMemFreeAsync(b->va, NULL);
        api.cuGraphExecDestroy((vcu_graph_exec)(uintptr_t)b->key);
    } else if (strncmp(c, "pool", 4) == 0) {
        api.cuMemFreeAsync(b->key, NULL);
    } else if (b->key != 0) {
        api.cuMemFree(b->key);
    }
}

/* fragment: all but the first block of each 2 MiB page freed. */
static void
thin_pages(void)
{
    unsigned kept = 0;
    uint64_t last_page = UINT64_MAX;
    for (unsigned i = 0; i < run.n; i++) {
        uint64_t page = run.blocks[i].key >> 21;
        if (page != last_page) {
            run.blocks[kept++] = run.blocks[i];
            last_page = page;
        } else {
            api.cuMemFree(run.blocks[i].key);
            run.granted -= run.unit;
        }
    }
    run.n = kept;
}

/* pool_threshold: everything freed and the stream synchronized; the pool
** keeps it (its threshold is UINT64_MAX). */
static void
free_all_async(void)
{
    for (unsigned i = 0; i < run.n; i++)
        api.cuMemFreeAsync(run.blocks[i].key, NULL);
    api.cuCtxSynchronize();
    run.n = 0;
    run.granted = 0;
}

/* ------------------------------------------------------------------ */

static uint64_t
unit_of(const char *c, uint64_t quota)
{
    static const struct {
        const char *name;
        uint64_t unit;
    } units[] = {
        {"tiny", 1},
        {"odd", 100000},
        {"mib_plus1", MIB + 1},
        {"2mib_minus1", 2 * MIB - 1},
        {"2mib_plus1", 2 * MIB + 1},
        {"fragment", 512 << 10},
        {"pitch", 4608ULL * 1000},
        {"array", 16 * MIB},
        {"array_tiny", 4},
        {"array3d", 1 * MIB},
        {"mipmap", 22 * MIB},
    };
    /* The cases whose unit is a share of the quota (1/16 or 1/32 of it,
    ** in 2 MiB units where the driver wants them): 64 MiB and 32 MiB under
    ** a 1 GiB quota, scaled for the fake driver's smaller ones. */
    uint64_t sixteenth = quota / 16 / (2 * MIB) * (2 * MIB);
    if (sixteenth == 0)
        sixteenth = 2 * MIB;
    if (strcmp(c, "huge") == 0)
        return quota / 3 + 1;
    if (strcmp(c, "vmm") == 0 || strcmp(c, "release_after_map") == 0 ||
        strcmp(c, "dlvsym") == 0)
        return sixteenth;
    if (strcmp(c, "graph") == 0)
        return sixteenth + 1;
    if (strcmp(c, "pool") == 0)
        return sixteenth / 2 + 1;
    if (strcmp(c, "pool_threshold") == 0 || strcmp(c, "pool_created") == 0)
        return sixteenth / 2;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(c, units[i].name) == 0)
            return units[i].unit;
    return 0;
}

static const char *
result_name(int r)
{
    switch (r) {
    case -1:
        return "none";
    case VCU_SUCCESS:
        return "CUDA_SUCCESS";
    case VCU_ERROR_INVALID_VALUE:
        return "CUDA_ERROR_INVALID_VALUE";
    case VCU_ERROR_OUT_OF_MEMORY:
        return "CUDA_ERROR_OUT_OF_MEMORY";
    case VCU_ERROR_NOT_INITIALIZED:
        return "CUDA_ERROR_NOT_INITIALIZED";
    default:
        return "other";
    }
}

int
main(int argc, char **argv)
{
    if (argc < 2)
        die("usage: quota_truth CASE [--quota BYTES] [--device N]");
    run.name = argv[1];
    run.quota = GIB;
    int ordinal = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--quota") == 0)
            run.quota = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--device") == 0)
            ordinal = atoi(argv[i + 1]);
        else
            die("unknown option");
    }
    run.unit = unit_of(run.name, run.quota);
    if (run.unit == 0 || run.quota == 0)
        die("unknown case or quota");
    run.blocks = calloc(MAX_BLOCKS, sizeof *run.blocks);
    if (run.blocks == NULL)
        die("out of host memory");
    run.refusal = -1;
    load(strcmp(run.name, "dlvsym") == 0);
    vcu_context ctx;
    if (api.cuInit(0) != VCU_SUCCESS ||
        api.cuDeviceGet(&api.dev, ordinal) != VCU_SUCCESS ||
        api.cuDevicePrimaryCtxRetain(&ctx, api.dev) != VCU_SUCCESS ||
        api.cuCtxPushCurrent(ctx) != VCU_SUCCESS)
        die("CUDA did not start");
    nvml_open();
    run.before = nvml_used();
    run.peak = run.before;

    const char *c = run.name;
    if (strcmp(c, "pitch") == 0) {
        fill(step_pitch);
    } else if (strncmp(c, "array", 5) == 0) {
        fill(step_array);
    } else if (strcmp(c, "mipmap") == 0) {
        fill(step_mipmap);
    } else if (strcmp(c, "vmm") == 0 || strcmp(c, "release_after_map") == 0) {
        fill(step_vmm);
    } else if (strcmp(c, "graph") == 0) {
        fill(step_graph);
    } else if (strcmp(c, "pool") == 0) {
        fill(step_async);
    } else if (strcmp(c, "pool_created") == 0) {
        vcu_mem_pool_props pp;
        memset(&pp, 0, sizeof pp);
        pp.allocType = VCU_MEM_ALLOCATION_TYPE_PINNED;
        pp.location.type = VCU_MEM_LOCATION_TYPE_DEVICE;
        pp.location.id = api.dev;
        if (api.cuMemPoolCreate(&run.pool, &pp) != VCU_SUCCESS)
            die("cuMemPoolCreate failed");
        fill(step_async);
    } else if (strcmp(c, "pool_threshold") == 0) {
        vcu_mem_pool pool;
        uint64_t most = UINT64_MAX;
        if (api.cuDeviceGetDefaultMemPool(&pool, api.dev) != VCU_SUCCESS ||
            api.cuMemPoolSetAttribute(pool, VCU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &most) !=
                VCU_SUCCESS)
            die("the default pool's release threshold cannot be set");
        fill(step_async);
        free_all_async();
        sample(true);
        fill(step_alloc);
    } else if (strcmp(c, "fragment") == 0) {
        fill(step_alloc);
        thin_pages();
        sample(true);
        fill(step_alloc);
    } else {
        fill(step_alloc);
    }
    sample(true);
    nap_ms(200);
    long long at = nvml_used();
    if (at > run.peak)
        run.peak = at;
    bool within = run.peak >= 0 && (uint64_t)run.peak <= run.quota;
    bool at_quota = run.refusal == VCU_ERROR_OUT_OF_MEMORY && at >= 0 &&
                    (uint64_t)at + NEAR >= run.quota;
    printf("{\"case\": \"%s\", \"quota\": %llu, \"unit\": %llu, \"nvml_before\": %lld, "
           "\"nvml_peak\": %lld, \"nvml_at_refusal\": %lld, \"granted\": %llu, "
           "\"allocations\": %u, \"refusal\": \"%s\", \"within\": %s, \"at_quota\": %s, "
           "\"pass\": %s}\n",
           c, (unsigned long long)run.quota, (unsigned long long)run.unit, run.before,
           run.peak, at, (unsigned long long)run.granted, run.n, result_name(run.refusal),
           within ? "true" : "false", at_quota ? "true" : "false",
           within && at_quota ? "true" : "false");
    fflush(stdout);
    const char *hold = getenv("QUOTA_TRUTH_HOLD_MS");
    if (hold != NULL) {
        printf("holding\n");
        fflush(stdout);
        nap_ms(atoi(hold));
    }
    if (strcmp(c, "pool_threshold") == 0) {
        for (unsigned i = 0; i < run.n; i++)
            api.cuMemFree(run.blocks[i].key);
    } else {
        for (unsigned i = 0; i < run.n; i++)
            free_block(&run.blocks[i]);
    }
    if (run.pool != NULL)
        api.cuMemPoolDestroy(run.pool);
    api.cuCtxSynchronize();
    api.cuDeviceGraphMemTrim(api.dev);
    return within && at_quota ? 0 : 1;
}
