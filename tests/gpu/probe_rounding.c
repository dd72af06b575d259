/* SPDX-License-Identifier: MIT */
/*
** probe_rounding.c -- what the CUDA driver really holds for each way a
** program can get device memory, measured, not assumed.
**
** For every allocation path and size pattern (tiny, odd, 2 MiB +/- 1,
** huge; pitch, arrays, mipmapped arrays, managed memory, the stream-ordered
** pools with their release threshold, the virtual-memory API with release
** after map, CUDA graph memory nodes) it makes N allocations and reads two
** judges before and after: NVML's per-process used memory (nvidia-smi's
** figure) and the device's used memory (total - free of cuMemGetInfo).
** Each case prints one JSON line: the bytes asked per allocation, the bytes
** held per allocation by each judge, and what is still held after the
** frees; and an exported VMM handle imported by another process (case
** vmm_import): which process NVML charges. Built with the CUDA SDK:
**   cc -O2 -I/usr/local/cuda/include tests/gpu/probe_rounding.c \
**      -L/usr/local/cuda/lib64/stubs -lcuda -lnvidia-ml -o probe_rounding
** it is a measurement, never part of `make test`.
**
** Usage: probe_rounding [CASE-SUBSTRING]
*/
#include <cuda.h>
#include <nvml.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

static CUdevice dev;
static CUcontext ctx;
static nvmlDevice_t nv;
static CUstream stream;

#define CK(call)                                                                         \
    do {                                                                                 \
        CUresult r_ = (call);                                                            \
        if (r_ != CUDA_SUCCESS) {                                                        \
            const char *s_ = NULL;                                                       \
            cuGetErrorName(r_, &s_);                                                     \
            fprintf(stderr, "probe: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,         \
                    s_ ? s_ : "?");                                                      \
            return -1;                                                                   \
        }                                                                                \
    } while (0)

struct sample {
    long long proc; /* NVML's per-process used memory, bytes; -1 unknown */
    long long used; /* the device's total - free, bytes */
};

static void
nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static struct sample
take(void)
{
    struct sample s = {-1, -1};
    cuCtxSynchronize();
    nap_ms(30);
    size_t fr = 0, tot = 0;
    if (cuMemGetInfo(&fr, &tot) == CUDA_SUCCESS)
        s.used = (long long)(tot - fr);
    unsigned n = 64;
    nvmlProcessInfo_t infos[64];
    if (nvmlDeviceGetComputeRunningProcesses(nv, &n, infos) == NVML_SUCCESS)
        for (unsigned i = 0; i < n; i++)
            if (infos[i].pid == (unsigned)getpid())
                s.proc = (long long)infos[i].usedGpuMemory;
    return s;
}

static void
report(const char *api, const char *what, unsigned long long asked, int n, struct sample b,
       struct sample a, struct sample f, const char *extra)
{
    double proc = b.proc >= 0 && a.proc >= 0 ? (double)(a.proc - b.proc) / n : -1;
    double used = (double)(a.used - b.used) / n;
    printf("{\"api\":\"%s\",\"case\":\"%s\",\"asked\":%llu,\"n\":%d,"
           "\"held_per_alloc_nvml\":%.0f,\"held_per_alloc_used\":%.0f,"
           "\"nvml_before\":%lld,\"nvml_after\":%lld,\"nvml_after_free\":%lld,"
           "\"used_after_free_delta\":%lld%s%s}\n",
           api, what, asked, n, proc, used, b.proc, a.proc, f.proc, f.used - b.used,
           extra ? "," : "", extra ? extra : "");
    fflush(stdout);
}

static const char *only;
static int
wanted(const char *name)
{
    return only == NULL || strstr(name, only) != NULL;
}

static int
n_for(unsigned long long size, unsigned long long budget, int most)
{
    unsigned long long n = budget / (size ? size : 1);
    if (n > (unsigned long long)most)
        n = (unsigned long long)most;
    return n < 2 ? 2 : (int)n;
}

static CUdeviceptr ptrs[8192];

static int
case_alloc(unsigned long long size)
{
    int n = size <= 4096 ? 8192 : n_for(size < 2 * MiB ? 2 * MiB : size, 2 * GiB, 4096);
    struct sample b = take();
    for (int i = 0; i < n; i++)
        CK(cuMemAlloc(&ptrs[i], size));
    struct sample a = take();
    for (int i = 0; i < n; i++)
        CK(cuMemFree(ptrs[i]));
    struct sample f = take();
    char what[64];
    snprintf(what, sizeof what, "%llu", size);
    report("cuMemAlloc", what, size, n, b, a, f, NULL);
    return 0;
}

static int
case_pitch(size_t width, size_t height, unsigned elem)
{
    int n = 64;
    size_t pitch = 0;
    struct sample b = take();
    for (int i = 0; i < n; i++)
        CK(cuMemAllocPitch(&ptrs[i], &pitch, width, height, elem));
    struct sample a = take();
    for (int i = 0; i < n; i++)
        CK(cuMemFree(ptrs[i]));
    struct sample f = take();
    char what[96], extra[64];
    snprintf(what, sizeof what, "w%zu_h%zu_e%u", width, height, elem);
    snprintf(extra, sizeof extra, "\"pitch\":%zu", pitch);
    report("cuMemAllocPitch", what, (unsigned long long)width * height, n, b, a, f, extra);
    return 0;
}

static int
case_array2d(size_t w, size_t h, CUarray_format fmt, unsigned ch, unsigned bytes_per)
{
    static CUarray arr[256];
    int n = 32;
    CUDA_ARRAY_DESCRIPTOR d = {0};
    d.Width = w;
    d.Height = h;
    d.Format = fmt;
    d.NumChannels = ch;
    struct sample b = take();
    for (int i = 0; i < n; i++)
        CK(cuArrayCreate(&arr[i], &d));
    struct sample a = take();
    for (int i = 0; i < n; i++)
        CK(cuArrayDestroy(arr[i]));
    struct sample f = take();
    char what[96];
    snprintf(what, sizeof what, "2d_%zux%zu_ch%u_b%u", w, h, ch, bytes_per);
    report("cuArrayCreate", what, (unsigned long long)w * (h ? h : 1) * ch * bytes_per, n, b,
           a, f, NULL);
    return 0;
}

static int
case_array3d(size_t w, size_t h, size_t dpt, unsigned flags, const char *tag)
{
    static CUarray arr[64];
    int n = 16;
    CUDA_ARRAY3D_DESCRIPTOR d = {0};
    d.Width = w;
    d.Height = h;
    d.Depth = dpt;
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 1;
    d.Flags = flags;
    struct sample b = take();
    for (int i = 0; i < n; i++)
        CK(cuArray3DCreate(&arr[i], &d));
    struct sample a = take();
    for (int i = 0; i < n; i++)
        CK(cuArrayDestroy(arr[i]));
    struct sample f = take();
    char what[96];
    snprintf(what, sizeof what, "3d_%s_%zux%zux%zu", tag, w, h, dpt);
    report("cuArray3DCreate", what,
           (unsigned long long)w * (h ? h : 1) * (dpt ? dpt : 1) * 4, n, b, a, f, NULL);
    return 0;
}

static int
case_mipmap(size_t w, size_t h, unsigned levels)
{
    static CUmipmappedArray arr[64];
    int n = 16;
    CUDA_ARRAY3D_DESCRIPTOR d = {0};
    d.Width = w;
    d.Height = h;
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 4;
    struct sample b = take();
    for (int i = 0; i < n; i++)
        CK(cuMipmappedArrayCreate(&arr[i], &d, levels));
    struct sample a = take();
    for (int i = 0; i < n; i++)
        CK(cuMipmappedArrayDestroy(arr[i]));
    struct sample f = take();
    unsigned long long asked = 0;
    for (unsigned l = 0; l < levels; l++) {
        size_t lw = w >> l ? w >> l : 1, lh = h >> l ? h >> l : 1;
        asked += (unsigned long long)lw * lh * 16;
    }
    char what[96];
    snprintf(what, sizeof what, "%zux%zu_float4_levels%u", w, h, levels);
    report("cuMipmappedArrayCreate", what, asked, n, b, a, f, NULL);
    return 0;
}

static int
case_managed(unsigned long long size, int touch)
{
    int n = 4;
    struct sample b = take();
    for (int i = 0; i < n; i++) {
        CK(cuMemAllocManaged(&ptrs[i], size, CU_MEM_ATTACH_GLOBAL));
        if (touch)
            CK(cuMemsetD8(ptrs[i], 1, size));
    }
    struct sample a = take();
    for (int i = 0; i < n; i++)
        CK(cuMemFree(ptrs[i]));
    struct sample f = take();
    report("cuMemAllocManaged", touch ? "touched_on_device" : "untouched", size, n, b, a, f,
           NULL);
    return 0;
}

static int
case_async(CUmemoryPool pool, const char *tag, unsigned long long size, unsigned long long thr)
{
    int n = n_for(size < 2 * MiB ? 2 * MiB : size, 1 * GiB, 2048);
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    CK(cuMemPoolTrimTo(pool, 0));
    struct sample b = take();
    for (int i = 0; i < n; i++)
        CK(cuMemAllocFromPoolAsync(&ptrs[i], size, pool, stream));
    CK(cuStreamSynchronize(stream));
    struct sample a = take();
    cuuint64_t res_alloc = 0, used_alloc = 0;
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res_alloc);
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used_alloc);
    for (int i = 0; i < n; i++)
        CK(cuMemFreeAsync(ptrs[i], stream));
    CK(cuStreamSynchronize(stream));
    struct sample f = take();
    cuuint64_t res_free = 0;
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res_free);
    CK(cuMemPoolTrimTo(pool, 0));
    struct sample t = take();
    cuuint64_t res_trim = 0;
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res_trim);
    char what[96], extra[256];
    snprintf(what, sizeof what, "%s_thr%s_%llu", tag, thr ? "max" : "0", size);
    snprintf(extra, sizeof extra,
             "\"pool_reserved_alloc\":%llu,\"pool_used_alloc\":%llu,"
             "\"pool_reserved_after_free\":%llu,\"pool_reserved_after_trim\":%llu,"
             "\"nvml_after_trim\":%lld",
             (unsigned long long)res_alloc, (unsigned long long)used_alloc,
             (unsigned long long)res_free, (unsigned long long)res_trim, t.proc);
    report("cuMemAllocFromPoolAsync", what, size, n, b, a, f, extra);
    return 0;
}

static int
case_vmm(unsigned long long size, int release_first)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gmin = 0, grec = 0;
    CK(cuMemGetAllocationGranularity(&gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CK(cuMemGetAllocationGranularity(&grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    unsigned long long rounded = (size + gmin - 1) / gmin * gmin;
    int n = 4;
    CUmemGenericAllocationHandle h[4];
    CUdeviceptr va[4];
    struct sample b = take();
    for (int i = 0; i < n; i++) {
        CK(cuMemCreate(&h[i], rounded, &prop, 0));
        CK(cuMemAddressReserve(&va[i], rounded, 0, 0, 0));
        CK(cuMemMap(va[i], rounded, 0, h[i], 0));
        CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev},
                               CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CK(cuMemSetAccess(va[i], rounded, &acc, 1));
        if (release_first)
            CK(cuMemRelease(h[i]));
    }
    struct sample a = take();
    for (int i = 0; i < n; i++) {
        CK(cuMemUnmap(va[i], rounded));
        if (!release_first)
            CK(cuMemRelease(h[i]));
        CK(cuMemAddressFree(va[i], rounded));
    }
    struct sample f = take();
    char what[96], extra[128];
    snprintf(what, sizeof what, "%s_%llu", release_first ? "release_after_map" : "map_unmap",
             rounded);
    snprintf(extra, sizeof extra, "\"granularity_min\":%zu,\"granularity_recommended\":%zu",
             gmin, grec);
    report("cuMemCreate", what, rounded, n, b, a, f, extra);
    return 0;
}

static int
case_vmm_unaligned(void)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemGenericAllocationHandle h;
    CUresult r = cuMemCreate(&h, 2 * MiB + 1, &prop, 0);
    const char *s = NULL;
    cuGetErrorName(r, &s);
    printf("{\"api\":\"cuMemCreate\",\"case\":\"unaligned_2MiB+1\",\"result\":\"%s\"}\n",
           s ? s : "?");
    if (r == CUDA_SUCCESS)
        cuMemRelease(h);
    return 0;
}

static int
case_graph(unsigned long long size, int with_free)
{
    CUgraph g;
    CK(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = dev;
    p.bytesize = size;
    CUgraphNode an, fn;
    CK(cuGraphAddMemAllocNode(&an, g, NULL, 0, &p));
    if (with_free)
        CK(cuGraphAddMemFreeNode(&fn, g, &an, 1, p.dptr));
    CUgraphExec ex;
    struct sample b = take();
    CK(cuGraphInstantiateWithFlags(&ex, g, 0));
    struct sample i0 = take();
    CK(cuGraphLaunch(ex, stream));
    CK(cuStreamSynchronize(stream));
    struct sample a = take();
    cuuint64_t res = 0, used = 0;
    cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &res);
    cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used);
    if (!with_free) {
        CK(cuMemFreeAsync(p.dptr, stream));
        CK(cuStreamSynchronize(stream));
    }
    CK(cuGraphExecDestroy(ex));
    CK(cuGraphDestroy(g));
    struct sample f = take();
    CK(cuDeviceGraphMemTrim(dev));
    struct sample t = take();
    char what[96], extra[256];
    snprintf(what, sizeof what, "%s_%llu", with_free ? "alloc_free_nodes" : "alloc_node_only",
             size);
    snprintf(extra, sizeof extra,
             "\"nvml_after_instantiate\":%lld,\"graph_reserved\":%llu,\"graph_used\":%llu,"
             "\"nvml_after_trim\":%lld",
             i0.proc, (unsigned long long)res, (unsigned long long)used, t.proc);
    report("cuGraphAddMemAllocNode", what, size, 1, b, a, f, extra);
    return 0;
}


/* One allocation alone: what the first small allocation makes the process
** hold (a whole page of the driver's sub-allocator?). */
static int
case_alloc_single(unsigned long long size)
{
    struct sample b = take();
    CK(cuMemAlloc(&ptrs[0], size));
    struct sample a = take();
    CK(cuMemFree(ptrs[0]));
    struct sample f = take();
    char what[64];
    snprintf(what, sizeof what, "single_%llu", size);
    report("cuMemAlloc", what, size, 1, b, a, f, NULL);
    return 0;
}

/* The pool's reserve after each of a run of allocations: how it grows. */
static int
case_pool_growth(CUmemoryPool pool, unsigned long long size, int n)
{
    unsigned long long zero = 0;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero));
    CK(cuMemPoolTrimTo(pool, 0));
    printf("{\"api\":\"pool_growth\",\"asked\":%llu,\"reserved_after_each\":[", size);
    for (int i = 0; i < n; i++) {
        CK(cuMemAllocFromPoolAsync(&ptrs[i], size, pool, stream));
        cuuint64_t r = 0;
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r);
        printf("%s%llu", i ? "," : "", (unsigned long long)r);
    }
    CK(cuStreamSynchronize(stream));
    struct sample a = take();
    for (int i = 0; i < n; i++)
        CK(cuMemFreeAsync(ptrs[i], stream));
    /* Before the stream reaches the frees: what the reserve says. */
    cuuint64_t r1 = 0;
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r1);
    CK(cuStreamSynchronize(stream));
    cuuint64_t r2 = 0;
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r2);
    printf("],\"nvml_with_all\":%lld,\"reserved_after_free_calls\":%llu,"
           "\"reserved_after_sync\":%llu}\n",
           a.proc, (unsigned long long)r1, (unsigned long long)r2);
    fflush(stdout);
    return 0;
}

/* A second context on the device, and a module: what each adds. */
static int
case_contexts(void)
{
    struct sample b = take();
    CUcontext c2;
#if CUDA_VERSION >= 13000
    CK(cuCtxCreate(&c2, NULL, 0, dev));
#else
    CK(cuCtxCreate(&c2, 0, dev));
#endif
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 1));
    CK(cuMemFree(p));
    struct sample a = take();
    CK(cuCtxDestroy(c2));
    CK(cuCtxSetCurrent(ctx));
    struct sample f = take();
    report("cuCtxCreate", "second_context", 0, 1, b, a, f, NULL);
    return 0;
}

/* IPC: a child process opens the parent's allocation; what does NVML
** charge to the child? The child prints its own line. */
static int
case_ipc(const char *self)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 256 * MiB));
    CUipcMemHandle h;
    CK(cuIpcGetMemHandle(&h, p));
    char hex[2 * sizeof h + 1];
    for (size_t i = 0; i < sizeof h; i++)
        sprintf(hex + 2 * i, "%02x", (unsigned char)h.reserved[i]);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --ipc-child %s", self, hex);
    fflush(stdout);
    int rc = system(cmd);
    CK(cuMemFree(p));
    return rc == 0 ? 0 : -1;
}

static int
ipc_child(const char *hex)
{
    CUipcMemHandle h;
    for (size_t i = 0; i < sizeof h; i++) {
        unsigned v = 0;
        sscanf(hex + 2 * i, "%2x", &v);
        h.reserved[i] = (char)v;
    }
    if (nvmlInit() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex(0, &nv) != NVML_SUCCESS)
        return 1;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUdeviceptr p0;
    CK(cuMemAlloc(&p0, 1));
    CK(cuMemFree(p0));
    struct sample b = take();
    CUdeviceptr p;
    CK(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    struct sample a = take();
    CK(cuIpcCloseMemHandle(p));
    struct sample f = take();
    report("cuIpcOpenMemHandle", "child_opens_256MiB", 256 * MiB, 1, b, a, f, NULL);
    return 0;
}

/*
** VMM export and import: the parent creates 256 MiB with a POSIX file
** descriptor handle type and exports it; a child process (exec'ed, handed
** the descriptor over a socket) imports it and maps it. Each says what
** NVML charges it, then the parent releases its handle (it never mapped
** it) and the child says again: is an importer charged, and is the memory
** it keeps alive charged to it once the exporter let go?
*/
static int
sock_send_fd(int sock, int fd)
{
    char byte = 'f';
    struct iovec io = {&byte, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {0};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = u.buf;
    m.msg_controllen = sizeof u.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int
sock_recv_fd(int sock)
{
    char byte;
    struct iovec io = {&byte, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m = {0};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = u.buf;
    m.msg_controllen = sizeof u.buf;
    if (recvmsg(sock, &m, 0) != 1)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    int fd = -1;
    if (c != NULL && c->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static int
case_vmm_import(const char *self)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return -1;
    struct sample b = take();
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, 256 * MiB, &prop, 0));
    int fd = -1;
    CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    struct sample created = take();
    char arg[16];
    snprintf(arg, sizeof arg, "%d", sv[1]);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        close(sv[0]);
        execl(self, self, "--vmm-import-child", arg, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    char byte = 0;
    if (child < 0 || sock_send_fd(sv[0], fd) != 0 || read(sv[0], &byte, 1) != 1)
        return -1;
    struct sample mapped = take(); /* the child holds it mapped */
    CK(cuMemRelease(h));
    close(fd);
    struct sample released = take();
    byte = 'r';
    if (write(sv[0], &byte, 1) != 1)
        return -1;
    int status = 0;
    waitpid(child, &status, 0);
    close(sv[0]);
    struct sample f = take();
    char extra[256];
    snprintf(extra, sizeof extra,
             "\"nvml_after_child_mapped\":%lld,\"nvml_after_release\":%lld,"
             "\"used_after_release_delta\":%lld",
             mapped.proc, released.proc, released.used - b.used);
    report("cuMemExportToShareableHandle", "exporter_256MiB", 256 * MiB, 1, b, created, f,
           extra);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static int
vmm_import_child(const char *sockarg)
{
    int sock = atoi(sockarg);
    int fd = sock_recv_fd(sock);
    if (fd < 0 || nvmlInit() != NVML_SUCCESS ||
        nvmlDeviceGetHandleByIndex(0, &nv) != NVML_SUCCESS)
        return 1;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUdeviceptr p0;
    CK(cuMemAlloc(&p0, 1));
    CK(cuMemFree(p0));
    struct sample b = take();
    CUmemGenericAllocationHandle h;
    CK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, 256 * MiB, 0, 0, 0));
    CK(cuMemMap(va, 256 * MiB, 0, h, 0));
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev},
                           CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(va, 256 * MiB, &acc, 1));
    struct sample a = take();
    char byte = 'm';
    if (write(sock, &byte, 1) != 1 || read(sock, &byte, 1) != 1)
        return 1;
    struct sample alone = take(); /* the exporter let go: only this mapping holds it */
    CK(cuMemUnmap(va, 256 * MiB));
    CK(cuMemRelease(h));
    CK(cuMemAddressFree(va, 256 * MiB));
    struct sample f = take();
    char extra[128];
    snprintf(extra, sizeof extra, "\"nvml_after_exporter_released\":%lld,"
                                  "\"used_after_exporter_released_delta\":%lld",
             alone.proc, alone.used - b.used);
    report("cuMemImportFromShareableHandle", "importer_maps_256MiB", 256 * MiB, 1, b, a, f,
           extra);
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--ipc-child") == 0)
        return ipc_child(argv[2]);
    if (argc > 2 && strcmp(argv[1], "--vmm-import-child") == 0)
        return vmm_import_child(argv[2]);
    only = argc > 1 ? argv[1] : NULL;
    if (nvmlInit() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex(0, &nv) != NVML_SUCCESS) {
        fprintf(stderr, "probe: NVML did not start\n");
        return 1;
    }
    struct sample none = take(); /* before CUDA: no context, no process row */
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "probe: CUDA did not start\n");
        return 1;
    }
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    struct sample c = take();
    int drv = 0;
    cuDriverGetVersion(&drv);
    char name[128] = "";
    cuDeviceGetName(name, sizeof name, dev);
    printf("{\"api\":\"context\",\"case\":\"primary_context\",\"device\":\"%s\",\"driver\":%d,"
           "\"nvml_proc\":%lld,\"used\":%lld,\"used_before_cuda\":%lld}\n",
           name, drv, c.proc, c.used, none.used);
    CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    /* The stream's and the first kernel's own bytes, outside any case. */
    CK(cuMemAlloc(&ptrs[0], 1));
    CK(cuMemsetD8(ptrs[0], 0, 1));
    CK(cuMemFree(ptrs[0]));
    struct sample w = take();
    printf("{\"api\":\"context\",\"case\":\"after_first_use\",\"nvml_proc\":%lld,"
           "\"used\":%lld}\n",
           w.proc, w.used);

    static const unsigned long long sizes[] = {
        1,           256,         512,         513,           1024,           1025,
        2048,        2049,        3000,        4096,          4097,           6000,
        8193,        65536,       100000,      300000,        512 * 1024,     700000,
        MiB - 1,     MiB,         MiB + 1,     2 * MiB - 1,   2 * MiB,        2 * MiB + 1,
        3 * MiB,     4 * MiB + 1, 10 * MiB + 1, 32 * MiB + 1, 64 * MiB + 1,  256 * MiB + 1,
        GiB + 1,
    };
    int rc = 0;
    if (wanted("single")) {
        rc |= case_alloc_single(1);
        rc |= case_alloc_single(4096);
        rc |= case_alloc_single(MiB);
        rc |= case_alloc_single(MiB + 1);
    }
    if (wanted("alloc"))
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            rc |= case_alloc(sizes[i]);
    if (wanted("pitch")) {
        rc |= case_pitch(1, 1, 4);
        rc |= case_pitch(100, 1000, 4);
        rc |= case_pitch(513, 1000, 4);
        rc |= case_pitch(1000, 1000, 16);
        rc |= case_pitch(4097, 4097, 4);
    }
    if (wanted("array")) {
        rc |= case_array2d(1, 1, CU_AD_FORMAT_FLOAT, 1, 4);
        rc |= case_array2d(1000, 1000, CU_AD_FORMAT_FLOAT, 4, 4);
        rc |= case_array2d(4097, 4097, CU_AD_FORMAT_UNSIGNED_INT8, 1, 1);
        rc |= case_array2d(65536, 0, CU_AD_FORMAT_FLOAT, 1, 4);
        rc |= case_array3d(64, 64, 64, 0, "plain");
        rc |= case_array3d(1000, 1000, 8, CUDA_ARRAY3D_LAYERED, "layered");
        rc |= case_array3d(256, 256, 6, CUDA_ARRAY3D_CUBEMAP, "cubemap");
    }
    if (wanted("mipmap")) {
        rc |= case_mipmap(1024, 1024, 11);
        rc |= case_mipmap(4096, 4096, 4);
    }
    if (wanted("managed")) {
        rc |= case_managed(64 * MiB + 1, 0);
        rc |= case_managed(64 * MiB + 1, 1);
    }
    if (wanted("pool")) {
        CUmemoryPool def;
        CK(cuDeviceGetDefaultMemPool(&def, dev));
        CUmemPoolProps pp;
        memset(&pp, 0, sizeof pp);
        pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        pp.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        pp.location.id = dev;
        CUmemoryPool own;
        CK(cuMemPoolCreate(&own, &pp));
        static const unsigned long long ps[] = {1, 4096, MiB + 1, 2 * MiB + 1, 32 * MiB + 1,
                                                 256 * MiB + 1};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
            rc |= case_async(def, "default", ps[i], 0);
            rc |= case_async(def, "default", ps[i], UINT64_MAX);
            rc |= case_async(own, "created", ps[i], 0);
        }
        rc |= case_pool_growth(def, 1, 8);
        rc |= case_pool_growth(def, 20 * MiB, 6);
        rc |= case_pool_growth(def, 100 * MiB + 1, 4);
        rc |= case_pool_growth(own, 40 * MiB, 4);
        cuMemPoolDestroy(own);
    }
    if (wanted("vmm")) {
        rc |= case_vmm(2 * MiB, 0);
        rc |= case_vmm(256 * MiB, 0);
        rc |= case_vmm(256 * MiB, 1);
        rc |= case_vmm_unaligned();
    }
    if (wanted("graph")) {
        rc |= case_graph(64 * MiB + 1, 1);
        rc |= case_graph(64 * MiB + 1, 0);
        rc |= case_graph(1, 1);
    }
    if (wanted("context"))
        rc |= case_contexts();
    if (wanted("ipc"))
        rc |= case_ipc(argv[0]);
    if (wanted("vmm_import"))
        rc |= case_vmm_import(argv[0]);
    return rc ? 1 : 0;
}
