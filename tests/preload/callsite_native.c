/* SPDX-License-Identifier: MIT */
/*
** callsite_native.c -- a C program whose allocations come from one known
** line, for the call-site test (test_callsites.sh): it allocates N MiB
** from leak_here() (the line marked PLANTED), keeping each, through the
** driver found by dlopen, so that the recorded native frames, symbolized
** after the run with addr2line, must name this file, that line and
** leak_here. Test code: exit is allowed here.
** Usage: callsite_native [N]
*/
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/cuda_api.h"
#include "driver_sym.h"

static vcu_pfn_cuMemAlloc alloc_fn;

#define sym(lib, name) driver_sym("callsite_native", (lib), (name))

/* noinline: the frame the test looks for is this function's. */
__attribute__((noinline)) static void
leak_here(void)
{
    vcu_deviceptr d;
    if (alloc_fn(&d, 1u << 20) != VCU_SUCCESS) /* PLANTED */
        exit(1);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}

int
main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 8;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    vcu_pfn_cuInit init;
    vcu_pfn_cuDeviceGet device_get;
    vcu_pfn_cuDevicePrimaryCtxRetain retain;
    vcu_pfn_cuCtxPushCurrent push;
    vcu_device dev;
    vcu_context ctx;
    void *p;

    if (lib == NULL) {
        fprintf(stderr, "callsite_native: %s\n", dlerror());
        return 1;
    }
    p = sym(lib, "cuInit");
    memcpy(&init, &p, sizeof p);
    p = sym(lib, "cuDeviceGet");
    memcpy(&device_get, &p, sizeof p);
    p = sym(lib, "cuDevicePrimaryCtxRetain");
    memcpy(&retain, &p, sizeof p);
    p = sym(lib, "cuCtxPushCurrent_v2");
    memcpy(&push, &p, sizeof p);
    p = sym(lib, "cuMemAlloc_v2");
    memcpy(&alloc_fn, &p, sizeof p);
    if (init(0) != VCU_SUCCESS || device_get(&dev, 0) != VCU_SUCCESS ||
        retain(&ctx, dev) != VCU_SUCCESS || push(ctx) != VCU_SUCCESS)
        return 1;
    for (int i = 0; i < n; i++)
        leak_here();
    return 0;
}
