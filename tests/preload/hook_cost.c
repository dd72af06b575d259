/* SPDX-License-Identifier: MIT */
/*
** hook_cost.c -- one run of the hook-cost measurement: nanoseconds per
** call of cuMemGetInfo_v2 (a hook that finds the calling thread's device
** and its quota, then forwards) and per cuMemAlloc_v2 + cuMemFree_v2 pair,
** reached by dlopen + dlsym as XLA reaches them. tests/preload/hook_cost.py
** runs it many times, alternately bare and under LD_PRELOAD, and puts a
** confidence interval on the difference. Works on the real driver and on
** the fake (LD_LIBRARY_PATH=build/tests/fakecuda).
**
** Each figure is the median over BATCHES batches of the per-call time of a
** batch (1,000 calls, 100 pairs): the median drops the batches a loaded
** machine interrupted. The two kinds alternate batch by batch, so drift
** hits both alike. Prints one JSON line:
**   {"meminfo_ns": 64.1, "pair_ns": 171.0, "from": "libvram-preload.so"}
**
** Usage: hook_cost [BATCHES] (default 200). Test code: exit is allowed.
*/
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/cuda_api.h"
#include "driver_sym.h"

enum { CALLS = 1000, PAIRS = 100, MAX_BATCHES = 100000 };

#define sym(lib, name) driver_sym("hook_cost", (lib), (name))

static double
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
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

int
main(int argc, char **argv)
{
    long batches = argc > 1 ? strtol(argv[1], NULL, 10) : 200;
    if (batches <= 0 || batches > MAX_BATCHES) {
        fprintf(stderr, "usage: hook_cost [BATCHES] (1..%d)\n", MAX_BATCHES);
        return 2;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "hook_cost: %s\n", dlerror());
        return 1;
    }
    vcu_pfn_cuInit init;
    vcu_pfn_cuDeviceGet device_get;
    vcu_pfn_cuDevicePrimaryCtxRetain retain;
    vcu_pfn_cuCtxPushCurrent push;
    vcu_pfn_cuMemGetInfo info;
    vcu_pfn_cuMemAlloc alloc;
    vcu_pfn_cuMemFree release;
    void *p;
    p = sym(lib, "cuInit");
    memcpy(&init, &p, sizeof p);
    p = sym(lib, "cuDeviceGet");
    memcpy(&device_get, &p, sizeof p);
    p = sym(lib, "cuDevicePrimaryCtxRetain");
    memcpy(&retain, &p, sizeof p);
    p = sym(lib, "cuCtxPushCurrent_v2");
    memcpy(&push, &p, sizeof p);
    p = sym(lib, "cuMemAlloc_v2");
    memcpy(&alloc, &p, sizeof p);
    p = sym(lib, "cuMemFree_v2");
    memcpy(&release, &p, sizeof p);
    p = sym(lib, "cuMemGetInfo_v2");
    memcpy(&info, &p, sizeof p);
    Dl_info where;
    const char *from = "?";
    if (dladdr(p, &where) != 0 && where.dli_fname != NULL) {
        const char *slash = strrchr(where.dli_fname, '/');
        from = slash != NULL ? slash + 1 : where.dli_fname;
    }

    vcu_device dev;
    vcu_context ctx;
    if (init(0) != VCU_SUCCESS || device_get(&dev, 0) != VCU_SUCCESS ||
        retain(&ctx, dev) != VCU_SUCCESS || push(ctx) != VCU_SUCCESS) {
        fprintf(stderr, "hook_cost: cannot initialize device 0\n");
        return 1;
    }
    double *mi = malloc((size_t)batches * sizeof *mi);
    double *pr = malloc((size_t)batches * sizeof *pr);
    if (mi == NULL || pr == NULL) {
        fprintf(stderr, "hook_cost: out of memory\n");
        return 1;
    }
    size_t free_b, total_b;
    vcu_deviceptr d;
    for (long b = -batches / 10 - 1; b < batches; b++) { /* the first are warm-up */
        double t0 = now_ns();
        for (int i = 0; i < CALLS; i++)
            if (info(&free_b, &total_b) != VCU_SUCCESS) {
                fprintf(stderr, "hook_cost: cuMemGetInfo_v2 failed\n");
                return 1;
            }
        double t1 = now_ns();
        for (int i = 0; i < PAIRS; i++)
            if (alloc(&d, 512) != VCU_SUCCESS || release(d) != VCU_SUCCESS) {
                fprintf(stderr, "hook_cost: cuMemAlloc_v2/cuMemFree_v2 failed\n");
                return 1;
            }
        double t2 = now_ns();
        if (b >= 0) {
            mi[b] = (t1 - t0) / CALLS;
            pr[b] = (t2 - t1) / PAIRS;
        }
    }
    printf("{\"meminfo_ns\": %.2f, \"pair_ns\": %.2f, \"batches\": %ld, \"from\": \"%s\"}\n",
           median(mi, batches), median(pr, batches), batches, from);
    free(mi);
    free(pr);
    return 0;
}
