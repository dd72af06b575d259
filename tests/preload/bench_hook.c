/* SPDX-License-Identifier: MIT */
/*
** bench_hook.c -- what libvram-preload.so costs a program: nanoseconds per
** cuMemAlloc_v2 + cuMemFree_v2 pair, reached by dlopen + dlsym as XLA
** reaches them. Not a test: run it bare, then with LD_PRELOAD (passive:
** nothing set; active: e.g. VRAM_LIMIT=1T) against the fake driver
** (LD_LIBRARY_PATH=build/tests/fakecuda) or the real one, and compare.
** Prints one line, e.g.
**   bench_hook: 2097152-byte cuMemAlloc_v2+cuMemFree_v2: 412.3 ns per pair
**   (100000 pairs; cuMemAlloc_v2 from libvram-preload.so)
**
** Usage: bench_hook [PAIRS [BYTES]] (defaults 100000 pairs of 2 MiB).
** Test code: exit is allowed here.
*/
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/cuda_api.h"
#include "driver_sym.h"

#define sym(lib, name) driver_sym("bench_hook", (lib), (name))

static double
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int
main(int argc, char **argv)
{
    long pairs = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    size_t bytes = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : (size_t)2 << 20;
    if (pairs <= 0 || bytes == 0) {
        fprintf(stderr, "usage: bench_hook [PAIRS [BYTES]]\n");
        return 2;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "bench_hook: %s\n", dlerror());
        return 1;
    }
    vcu_pfn_cuInit init;
    vcu_pfn_cuDeviceGet device_get;
    vcu_pfn_cuDevicePrimaryCtxRetain retain;
    vcu_pfn_cuCtxPushCurrent push;
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
    Dl_info info;
    const char *from = "?";
    if (dladdr(p, &info) != 0 && info.dli_fname != NULL) {
        const char *slash = strrchr(info.dli_fname, '/');
        from = slash != NULL ? slash + 1 : info.dli_fname;
    }
    p = sym(lib, "cuMemFree_v2");
    memcpy(&release, &p, sizeof p);

    vcu_device dev;
    vcu_context ctx;
    if (init(0) != VCU_SUCCESS || device_get(&dev, 0) != VCU_SUCCESS ||
        retain(&ctx, dev) != VCU_SUCCESS || push(ctx) != VCU_SUCCESS) {
        fprintf(stderr, "bench_hook: cannot initialize device 0\n");
        return 1;
    }
    vcu_deviceptr d;
    long warm = pairs / 10 > 0 ? pairs / 10 : 1;
    for (long i = 0; i < warm; i++)
        if (alloc(&d, bytes) != VCU_SUCCESS || release(d) != VCU_SUCCESS) {
            fprintf(stderr, "bench_hook: cuMemAlloc_v2/cuMemFree_v2 failed\n");
            return 1;
        }
    double t0 = now_ns();
    for (long i = 0; i < pairs; i++) {
        alloc(&d, bytes);
        release(d);
    }
    double per = (now_ns() - t0) / (double)pairs;
    printf("bench_hook: %zu-byte cuMemAlloc_v2+cuMemFree_v2: %.1f ns per pair "
           "(%ld pairs; cuMemAlloc_v2 from %s)\n",
           bytes, per, pairs, from);
    return 0;
}
