/* SPDX-License-Identifier: MIT */
/*
** vmm_costs.c -- what the CUDA driver's virtual-memory calls cost on this
** GPU: the figures behind the expandable strategy's unit size and its
** cold-start time (BENCHMARKS.md). Built only where the CUDA toolkit is
** installed; run by tests/gpu/run.sh.
**
**     vmm_costs [--json]
**
** Each figure is the median of several runs of one call, in microseconds,
** on an idle device. Also: obtaining 8 GiB of mapped memory in units of
** 2 MiB to 512 MiB (create + map + set access per unit, or one set access
** over the whole range), and one unmap over a range of several mappings.
*/
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/median.h"

#define MIB ((size_t)1 << 20)
#define REPS 64

static int failed;

static void
check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        const char *name = NULL;
        cuGetErrorName(r, &name);
        fprintf(stderr, "vmm_costs: %s: %s\n", what, name != NULL ? name : "?");
        failed = 1;
    }
}

static double
now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static CUmemAllocationProp prop;
static CUmemAccessDesc access;

/* Per-call costs of one unit of SIZE bytes, median of REPS. */
static void
unit_costs(size_t size, int json, int last)
{
    double create[REPS], map[REPS], acc[REPS], unmap[REPS], release[REPS];
    CUdeviceptr va = 0;
    check(cuMemAddressReserve(&va, size, 0, 0, 0), "cuMemAddressReserve");
    for (int i = 0; i < REPS && !failed; i++) {
        CUmemGenericAllocationHandle h;
        double t0 = now_us();
        check(cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
        double t1 = now_us();
        check(cuMemMap(va, size, 0, h, 0), "cuMemMap");
        double t2 = now_us();
        check(cuMemSetAccess(va, size, &access, 1), "cuMemSetAccess");
        double t3 = now_us();
        check(cuMemUnmap(va, size), "cuMemUnmap");
        double t4 = now_us();
        check(cuMemRelease(h), "cuMemRelease");
        double t5 = now_us();
        create[i] = t1 - t0, map[i] = t2 - t1, acc[i] = t3 - t2;
        unmap[i] = t4 - t3, release[i] = t5 - t4;
    }
    check(cuMemAddressFree(va, size), "cuMemAddressFree");
    double c = median_of(create, REPS), m = median_of(map, REPS),
           a = median_of(acc, REPS);
    double u = median_of(unmap, REPS), r = median_of(release, REPS);
    if (json)
        printf("    {\"unit_mib\": %zu, \"create_us\": %.1f, \"map_us\": %.1f, "
               "\"set_access_us\": %.1f, \"unmap_us\": %.1f, \"release_us\": %.1f}%s\n",
               size / MIB, c, m, a, u, r, last ? "" : ",");
    else
        printf("%8zu MiB  create %8.1f  map %6.1f  set access %8.1f  unmap %8.1f  "
               "release %8.1f us\n",
               size / MIB, c, m, a, u, r);
}

/* Obtain TOTAL bytes mapped in units of UNIT: create + map each unit, and
** set access per unit (batched = 0) or once over the range (batched = 1).
** Then unmap everything in one call per unit (or one call: batched).
** Returns the obtain time in milliseconds; *unmap_ms the unmap time. */
static double
obtain(size_t total, size_t unit, int batched, double *unmap_ms)
{
    size_t n = total / unit;
    CUmemGenericAllocationHandle *h = calloc(n, sizeof *h);
    CUdeviceptr va = 0;
    check(cuMemAddressReserve(&va, total, 0, 0, 0), "cuMemAddressReserve");
    double t0 = now_us();
    for (size_t i = 0; i < n && !failed; i++) {
        check(cuMemCreate(&h[i], unit, &prop, 0), "cuMemCreate");
        check(cuMemMap(va + i * unit, unit, 0, h[i], 0), "cuMemMap");
        if (!batched)
            check(cuMemSetAccess(va + i * unit, unit, &access, 1), "cuMemSetAccess");
    }
    if (batched)
        check(cuMemSetAccess(va, total, &access, 1), "cuMemSetAccess (range)");
    double t1 = now_us();
    if (batched)
        check(cuMemUnmap(va, total), "cuMemUnmap (range of several mappings)");
    else
        for (size_t i = 0; i < n && !failed; i++)
            check(cuMemUnmap(va + i * unit, unit), "cuMemUnmap");
    double t2 = now_us();
    for (size_t i = 0; i < n; i++)
        if (h[i] != 0)
            check(cuMemRelease(h[i]), "cuMemRelease");
    check(cuMemAddressFree(va, total), "cuMemAddressFree");
    free(h);
    *unmap_ms = (t2 - t1) / 1e3;
    return (t1 - t0) / 1e3;
}

int
main(int argc, char **argv)
{
    int json = argc > 1 && strcmp(argv[1], "--json") == 0;
    CUdevice dev;
    CUcontext ctx;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    if (failed)
        return 1;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    double sync[REPS], alloc[REPS];
    for (int i = 0; i < REPS; i++) {
        double t0 = now_us();
        check(cuCtxSynchronize(), "cuCtxSynchronize");
        sync[i] = now_us() - t0;
        CUdeviceptr p;
        t0 = now_us();
        check(cuMemAlloc(&p, 8 * MIB), "cuMemAlloc");
        check(cuMemFree(p), "cuMemFree");
        alloc[i] = now_us() - t0;
    }
    size_t units[] = {2 * MIB, 8 * MIB, 32 * MIB, 128 * MIB, 512 * MIB};
    int n_units = (int)(sizeof units / sizeof units[0]);
    if (json)
        printf("{\n  \"sync_idle_us\": %.1f,\n  \"mem_alloc_free_8mib_us\": %.1f,\n"
               "  \"units\": [\n",
               median_of(sync, REPS), median_of(alloc, REPS));
    else
        printf("cuCtxSynchronize (idle) %.1f us; cuMemAlloc + cuMemFree 8 MiB %.1f us\n",
               median_of(sync, REPS), median_of(alloc, REPS));
    for (int i = 0; i < n_units && !failed; i++)
        unit_costs(units[i], json, i == n_units - 1);
    if (json)
        printf("  ],\n  \"obtain_8gib\": [\n");
    for (int i = 0; i < n_units && !failed; i++)
        for (int batched = 0; batched < 2 && !failed; batched++) {
            double un = 0, ms = obtain(8192 * MIB, units[i], batched, &un);
            int last = i == n_units - 1 && batched == 1;
            if (json)
                printf("    {\"unit_mib\": %zu, \"set_access\": \"%s\", \"obtain_ms\": %.2f, "
                       "\"unmap_ms\": %.2f}%s\n",
                       units[i] / MIB, batched ? "one call" : "per unit", ms, un,
                       last ? "" : ",");
            else
                printf("8 GiB in %4zu MiB units, set access %-8s: obtain %8.2f ms, "
                       "unmap %8.2f ms%s\n",
                       units[i] / MIB, batched ? "once" : "per unit", ms, un,
                       batched ? " (one unmap call over the range)" : "");
        }
    if (json)
        printf("  ]\n}\n");
    cuDevicePrimaryCtxRelease(dev);
    return failed;
}
