/* SPDX-License-Identifier: MIT */
/*
** hook_cost.c -- what libvram-preload.so adds to a hooked driver call,
** measured inside one process: the hooked and the bare driver function are
** called alternately, batch by batch, so both sides share the process, its
** memory, the driver's state and the machine's moment, and each batch gives
** one paired difference. tests/preload/hook_cost.py runs it under
** LD_PRELOAD with a quota and puts a confidence interval on the differences.
** Works on the real driver and on the fake (LD_LIBRARY_PATH=build/tests/fakecuda).
**
** The two functions of each name:
**   hooked  dlsym(libcuda, NAME), as XLA finds them: the preload's dlsym
**           override answers with its hook;
**   bare    the driver's own function of that name, read from the
**           driver's dynamic symbol table (elf_symbol: the preload
**           overrides dlsym and dlvsym, so no lookup through glibc
**           reaches it around the hook).
** dladdr names the library of each, and the program refuses to measure
** when the two are the same function (not preloaded, or passive) unless
** --same asks for exactly that: both sides bare, an A/A run that must show
** no cost. --plant-ns NS spins NS ns before every hooked call (a known cost
** the measurement must find).
**
** Per batch and kind, KIND's calls run on one side then on the other (the
** order alternates batch by batch): cuMemGetInfo_v2, 50 calls (one hooked
** call: the device, its quota, the forward); cuMemAlloc_v2 of 2 MiB +
** cuMemFree_v2, 10 pairs (two hooked calls and the ledger: a block of 1
** MiB or less is charged by the pages of the driver's sub-allocator, which
** a pair that frees its block keeps charged, so it would measure no ledger
** call); cuMemAllocAsync of 512 bytes + cuMemFreeAsync on the default
** stream, 10 pairs: a pool's charge ahead, its settle every fourth
** allocation and the release, over a driver call that comes from the
** device's memory pool, so microseconds
** cheaper and steadier than cuMemAlloc_v2's, whose run-to-run noise a
** paired interval of a few hundred nanoseconds cannot get under on a
** real GPU in a minute. Also, bare:
** ns per cuCtxGetCurrent and per cuCtxGetDevice (medians over the batches),
** what the hooks' device lookup can cost on this driver. Prints one JSON
** line: per kind, the per-call ns of each batch on each side.
**
** --self: the preload is the measurement build (libvram-preload-timing.so,
** which times each hook outside the real driver call); also print, per
** hook, the median of those self times with its 95 % interval (sign test),
** and what the timing itself adds.
**
** --members N: first start N other processes of the same quota group
** (fork children that each make one counted allocation, then wait), as
** on a shared server: each cuMemGetInfo then looks for dead members among
** them.
**
** Usage: hook_cost [--batches N] [--seconds S] [--plant-ns NS] [--same] [--self]
** [--members N] (defaults 4000 batches, at most 60 s). Test code: exit is
** allowed.
*/
#include <dlfcn.h>
#include <link.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/elfsym.h"
#include "driver/cuda_api.h"

enum { INFO_CALLS = 50, PAIRS = 10, CTX_CALLS = 100, MAX_BATCHES = 1000000 };

static double
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void
fail(const char *what)
{
    fprintf(stderr, "hook_cost: %s\n", what);
    exit(1);
}

/* Busy-wait NS nanoseconds: the planted cost. */
static void
spin(double ns)
{
    double end = now_ns() + ns;
    while (now_ns() < end) {
    }
}

/* The driver's own function NAME on LIB's handle, from its symbol table. */
static void *
bare_of(void *lib, const char *name)
{
    struct link_map *lm = NULL;
    if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL)
        return NULL;
    return elf_symbol(lm, name);
}

static const char *
library_of(void *p)
{
    Dl_info where;
    if (dladdr(p, &where) == 0 || where.dli_fname == NULL)
        return "?";
    const char *slash = strrchr(where.dli_fname, '/');
    return slash != NULL ? slash + 1 : where.dli_fname;
}

/* One name's two functions. */
struct both {
    void *hooked, *bare;
};

static struct both
lookup(void *lib, const char *name, int same)
{
    struct both b = {dlsym(lib, name), bare_of(lib, name)};
    if (b.hooked == NULL || b.bare == NULL) {
        fprintf(stderr, "hook_cost: %s not found\n", name);
        exit(1);
    }
    if (same)
        b.hooked = b.bare;
    else if (b.hooked == b.bare) {
        fprintf(stderr,
                "hook_cost: %s is not hooked (%s): run under LD_PRELOAD with a quota, or "
                "--same\n",
                name, library_of(b.bare));
        exit(1);
    }
    return b;
}

#define AS(type, p) (*(type *)memcpy(&(type){0}, &(p), sizeof(type)))

/* ns per call of N cuMemGetInfo_v2 through FN, each after PLANT ns. */
static double
run_info(void *fn, double plant)
{
    vcu_pfn_cuMemGetInfo info = AS(vcu_pfn_cuMemGetInfo, fn);
    size_t free_b, total_b;
    double t0 = now_ns();
    for (int i = 0; i < INFO_CALLS; i++) {
        if (plant > 0)
            spin(plant);
        if (info(&free_b, &total_b) != VCU_SUCCESS)
            fail("cuMemGetInfo_v2 failed");
    }
    return (now_ns() - t0) / INFO_CALLS;
}

#define PAIR_BYTES (2 << 20) /* cuMemAlloc_v2's: above the sub-allocator's blocks */

/* ns per allocation + free pair, each call after PLANT ns: cuMemAlloc_v2 +
** cuMemFree_v2, or (ASYNC) cuMemAllocAsync + cuMemFreeAsync on the default
** stream. Both sides of a kind run this same code. */
static double
run_pairs(void *alloc_fn, void *free_fn, bool async, double plant)
{
    vcu_pfn_cuMemAlloc alloc = AS(vcu_pfn_cuMemAlloc, alloc_fn);
    vcu_pfn_cuMemFree release = AS(vcu_pfn_cuMemFree, free_fn);
    vcu_pfn_cuMemAllocAsync alloc_async = AS(vcu_pfn_cuMemAllocAsync, alloc_fn);
    vcu_pfn_cuMemFreeAsync free_async = AS(vcu_pfn_cuMemFreeAsync, free_fn);
    vcu_deviceptr d;
    double t0 = now_ns();
    for (int i = 0; i < PAIRS; i++) {
        if (plant > 0)
            spin(plant);
        if ((async ? alloc_async(&d, 512, NULL) : alloc(&d, PAIR_BYTES)) != VCU_SUCCESS)
            fail(async ? "cuMemAllocAsync failed" : "cuMemAlloc_v2 failed");
        if (plant > 0)
            spin(plant);
        if ((async ? free_async(d, NULL) : release(d)) != VCU_SUCCESS)
            fail(async ? "cuMemFreeAsync failed" : "cuMemFree_v2 failed");
    }
    return (now_ns() - t0) / PAIRS;
}

static int
cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* The 95 % interval of the median of N sorted values: the order
** statistics k and n-1-k of the sign test. */
static void
median_ci(const double *sorted, long n, double *lo, double *hi)
{
    long k = (long)((n - 1.96 * sqrt((double)n)) / 2.0);
    if (k < 0)
        k = 0;
    *lo = sorted[k];
    *hi = sorted[n - 1 - k];
}

/* The measurement build's self times of the three hooks, as a JSON member. */
static void
print_self(void)
{
    typedef long (*timing_fn)(const char *, double *, long);
    typedef double (*overhead_fn)(void);
    void *p = dlsym(RTLD_DEFAULT, "vram_hook_timing");
    void *q = dlsym(RTLD_DEFAULT, "vram_hook_timing_overhead");
    if (p == NULL || q == NULL)
        fail("--self: the preload is not the measurement build (no vram_hook_timing)");
    timing_fn timing = AS(timing_fn, p);
    enum { MAX = 1 << 16 };
    double *v = malloc(MAX * sizeof *v);
    if (v == NULL)
        fail("out of memory");
    static const char *const names[] = {"cuMemGetInfo_v2", "cuMemAlloc_v2", "cuMemFree_v2",
                                        "cuMemAllocAsync", "cuMemFreeAsync"};
    printf(", \"self_overhead_ns\": %.2f, \"self\": {", AS(overhead_fn, q)());
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        long n = timing(names[i], v, MAX);
        if (n < 2)
            fail("--self: too few timed calls");
        qsort(v, (size_t)n, sizeof *v, cmp);
        double lo, hi;
        median_ci(v, n, &lo, &hi);
        printf("%s\"%s\": {\"n\": %ld, \"median_ns\": %.2f, \"ci95\": [%.2f, %.2f], "
               "\"p10_ns\": %.2f, \"p90_ns\": %.2f}",
               i ? ", " : "", names[i], n, median(v, n), lo, hi, v[n / 10], v[n - 1 - n / 10]);
    }
    printf("}");
    free(v);
}

static void
print_list(const char *name, const double *v, long n)
{
    printf("\"%s\": [", name);
    for (long i = 0; i < n; i++)
        printf(i ? ", %.2f" : "%.2f", v[i]);
    printf("]");
}

/* Fork N members before this process initializes CUDA (a fork child
** cannot use its parent's CUDA): each initializes it, allocates once
** through the hooks of LIB (joining the ledger) and waits to be killed;
** their pids into KIDS. Returns when all have allocated. */
static void
start_members(long n, void *lib, pid_t *kids)
{
    int p[2];
    if (pipe(p) != 0)
        fail("pipe failed");
    for (long i = 0; i < n; i++) {
        fflush(NULL);
        kids[i] = fork();
        if (kids[i] < 0)
            fail("fork failed");
        if (kids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            void *f[5] = {dlsym(lib, "cuInit"), dlsym(lib, "cuDeviceGet"),
                          dlsym(lib, "cuDevicePrimaryCtxRetain"),
                          dlsym(lib, "cuCtxPushCurrent_v2"), dlsym(lib, "cuMemAlloc_v2")};
            vcu_device dev;
            vcu_context ctx;
            vcu_deviceptr d;
            char ok = 'x';
            if (f[0] != NULL && f[1] != NULL && f[2] != NULL && f[3] != NULL &&
                f[4] != NULL && AS(vcu_pfn_cuInit, f[0])(0) == VCU_SUCCESS &&
                AS(vcu_pfn_cuDeviceGet, f[1])(&dev, 0) == VCU_SUCCESS &&
                AS(vcu_pfn_cuDevicePrimaryCtxRetain, f[2])(&ctx, dev) == VCU_SUCCESS &&
                AS(vcu_pfn_cuCtxPushCurrent, f[3])(ctx) == VCU_SUCCESS &&
                AS(vcu_pfn_cuMemAlloc, f[4])(&d, 1 << 20) == VCU_SUCCESS)
                ok = 'r';
            if (write(p[1], &ok, 1) != 1)
                _exit(1);
            for (;;)
                pause();
        }
    }
    for (long i = 0; i < n; i++) {
        char c = 0;
        if (read(p[0], &c, 1) != 1 || c != 'r')
            fail("a member could not allocate");
    }
    close(p[0]);
    close(p[1]);
}

int
main(int argc, char **argv)
{
    long batches = 4000, members = 0;
    double seconds = 60, plant = 0;
    int same = 0, self = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--same") == 0)
            same = 1;
        else if (strcmp(argv[i], "--self") == 0)
            self = 1;
        else if (i + 1 < argc && strcmp(argv[i], "--batches") == 0)
            batches = strtol(argv[++i], NULL, 10);
        else if (i + 1 < argc && strcmp(argv[i], "--seconds") == 0)
            seconds = strtod(argv[++i], NULL);
        else if (i + 1 < argc && strcmp(argv[i], "--plant-ns") == 0)
            plant = strtod(argv[++i], NULL);
        else if (i + 1 < argc && strcmp(argv[i], "--members") == 0)
            members = strtol(argv[++i], NULL, 10);
        else
            batches = -1;
    }
    if (batches < 2 || batches > MAX_BATCHES || !(seconds > 0) || !(plant >= 0) ||
        members < 0 || members > 256) {
        fprintf(stderr, "usage: hook_cost [--batches 2..%d] [--seconds S] [--plant-ns NS] "
                        "[--same] [--self] [--members 0..256]\n",
                MAX_BATCHES);
        return 2;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        fail(dlerror());
    pid_t kids[256];
    start_members(members, lib, kids);
    /* Set-up through the hooks, as a program under the preload does it. */
    void *p;
    vcu_device dev;
    vcu_context ctx;
    p = dlsym(lib, "cuInit");
    if (p == NULL || AS(vcu_pfn_cuInit, p)(0) != VCU_SUCCESS)
        fail("cuInit failed");
    p = dlsym(lib, "cuDeviceGet");
    if (p == NULL || AS(vcu_pfn_cuDeviceGet, p)(&dev, 0) != VCU_SUCCESS)
        fail("cuDeviceGet failed");
    p = dlsym(lib, "cuDevicePrimaryCtxRetain");
    if (p == NULL || AS(vcu_pfn_cuDevicePrimaryCtxRetain, p)(&ctx, dev) != VCU_SUCCESS)
        fail("cuDevicePrimaryCtxRetain failed");
    p = dlsym(lib, "cuCtxPushCurrent_v2");
    if (p == NULL || AS(vcu_pfn_cuCtxPushCurrent, p)(ctx) != VCU_SUCCESS)
        fail("cuCtxPushCurrent_v2 failed");

    struct both info = lookup(lib, "cuMemGetInfo_v2", same);
    struct both alloc = lookup(lib, "cuMemAlloc_v2", same);
    struct both release = lookup(lib, "cuMemFree_v2", same);
    struct both alloc_async = lookup(lib, "cuMemAllocAsync", same);
    struct both free_async = lookup(lib, "cuMemFreeAsync", same);
    vcu_pfn_cuCtxGetCurrent get_current =
        AS(vcu_pfn_cuCtxGetCurrent, (void *){bare_of(lib, "cuCtxGetCurrent")});
    vcu_pfn_cuCtxGetDevice get_device =
        AS(vcu_pfn_cuCtxGetDevice, (void *){bare_of(lib, "cuCtxGetDevice")});
    if (get_current == NULL || get_device == NULL)
        fail("cuCtxGetCurrent or cuCtxGetDevice not found");

    double *v = malloc((size_t)batches * 8 * sizeof *v);
    if (v == NULL)
        fail("out of memory");
    double *ih = v, *ib = v + batches, *ph = v + 2 * batches, *pb = v + 3 * batches;
    double *ah = v + 4 * batches, *ab = v + 5 * batches;
    double *cur = v + 6 * batches, *getdev = v + 7 * batches;
    double start = now_ns();
    long n = 0;
    for (long b = -batches / 20 - 2; b < batches; b++) { /* the first are warm-up */
        double hi, bi, hp, bp, ha, ba;
        if (b & 1) {
            hi = run_info(info.hooked, plant);
            bi = run_info(info.bare, 0);
            hp = run_pairs(alloc.hooked, release.hooked, false, plant);
            bp = run_pairs(alloc.bare, release.bare, false, 0);
            ha = run_pairs(alloc_async.hooked, free_async.hooked, true, plant);
            ba = run_pairs(alloc_async.bare, free_async.bare, true, 0);
        } else {
            bi = run_info(info.bare, 0);
            hi = run_info(info.hooked, plant);
            bp = run_pairs(alloc.bare, release.bare, false, 0);
            hp = run_pairs(alloc.hooked, release.hooked, false, plant);
            ba = run_pairs(alloc_async.bare, free_async.bare, true, 0);
            ha = run_pairs(alloc_async.hooked, free_async.hooked, true, plant);
        }
        vcu_context c;
        vcu_device d;
        double t0 = now_ns();
        for (int i = 0; i < CTX_CALLS; i++)
            (void)get_current(&c);
        double t1 = now_ns();
        for (int i = 0; i < CTX_CALLS; i++)
            (void)get_device(&d);
        double t2 = now_ns();
        if (b < 0)
            continue;
        ih[n] = hi;
        ib[n] = bi;
        ph[n] = hp;
        pb[n] = bp;
        ah[n] = ha;
        ab[n] = ba;
        cur[n] = (t1 - t0) / CTX_CALLS;
        getdev[n] = (t2 - t1) / CTX_CALLS;
        n++;
        if (n >= 2 && now_ns() - start > seconds * 1e9)
            break;
    }
    for (long i = 0; i < members; i++) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
    }
    printf("{\"batches\": %ld, \"info_calls\": %d, \"pairs\": %d, \"plant_ns\": %.1f, "
           "\"same\": %s, \"members\": %ld, \"hooked_from\": \"%s\", \"bare_from\": \"%s\", ",
           n, INFO_CALLS, PAIRS, plant, same ? "true" : "false", members,
           library_of(info.hooked), library_of(info.bare));
    print_list("info_hooked", ih, n);
    printf(", ");
    print_list("info_bare", ib, n);
    printf(", ");
    print_list("pair_hooked", ph, n);
    printf(", ");
    print_list("pair_bare", pb, n);
    printf(", ");
    print_list("async_hooked", ah, n);
    printf(", ");
    print_list("async_bare", ab, n);
    printf(", \"ctx_get_current_ns\": %.2f, \"ctx_get_device_ns\": %.2f", median(cur, n),
           median(getdev, n));
    if (self)
        print_self();
    printf("}\n");
    free(v);
    return 0;
}
