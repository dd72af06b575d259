/* SPDX-License-Identifier: MIT */
/*
** hooks_host.c -- the hooks of page-locked ("pinned") host memory:
** cuMemAllocHost_v2, cuMemHostAlloc and cuMemHostRegister_v2, and their
** frees cuMemFreeHost and cuMemHostUnregister (preload.h). The runtime's
** cudaMallocHost, cudaHostAlloc and cudaHostRegister end in these.
**
** Pinned memory is host memory the kernel cannot page out, often the
** second thing a training job runs short of (data loaders' pinned
** batches). It is counted in the process's ledger entries for the
** monitoring commands, beside its GPU use, and never refused: no quota
** applies to it, and a call the driver grants is never failed here.
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/cuda_api.h"
#include "ledger/ledger.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"

/* Count BYTES of pinned memory more in every account of the process. A
** ledger that cannot take the entry (full) shows less: display only. */
static void
host_count(uint64_t bytes)
{
    for (int a = 0; a < ACCT_COUNT; a++)
        if (P.acct[a].ledger != NULL)
            (void)ledger_host_add(P.acct[a].ledger, bytes);
}

static void
host_uncount(uint64_t bytes)
{
    for (int a = 0; a < ACCT_COUNT; a++)
        if (P.acct[a].ledger != NULL)
            ledger_host_sub(P.acct[a].ledger, bytes);
}

/* After a granted call of KIND: remember ADDR's BYTES and count them. A
** table out of host memory leaves them uncounted (they are no quota's). */
static void
host_granted(int kind, const void *addr, size_t bytes)
{
    if (addr != NULL && bytes > 0 && track_put(kind, (uint64_t)(uintptr_t)addr, -1, bytes, 0))
        host_count(bytes);
}

vcu_result
cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    vcu_pfn_cuMemAllocHost real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemAllocHost_v2, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(pp, bytesize);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    r = real(pp, bytesize);
    if (r == VCU_SUCCESS && pp != NULL)
        host_granted(TRACK_HOST, *pp, bytesize);
    hook_depth--;
    return r;
}

vcu_result
cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    vcu_pfn_cuMemHostAlloc real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemHostAlloc, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(pp, bytesize, Flags);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    r = real(pp, bytesize, Flags);
    if (r == VCU_SUCCESS && pp != NULL)
        host_granted(TRACK_HOST, *pp, bytesize);
    hook_depth--;
    return r;
}

vcu_result
cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    vcu_pfn_cuMemHostRegister real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemHostRegister_v2, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(p, bytesize, Flags);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    r = real(p, bytesize, Flags);
    if (r == VCU_SUCCESS)
        host_granted(TRACK_HOST_REGISTERED, p, bytesize);
    hook_depth--;
    return r;
}

/*
** The frees: the entry is taken out first (two threads never uncount the
** same bytes), put back if the driver refuses. An address we did not
** count (pinned before the library was active) just forwards.
*/
static vcu_result
host_free(enum hook_id id, int kind, void *p)
{
    vcu_pfn_cuMemFreeHost real; /* cuMemHostUnregister has the same type */
    vcu_result r;
    switch (route(id, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(p);
    case ROUTE_COUNT:
        break;
    }
    struct track e = {0};
    bool known = track_take(kind, (uint64_t)(uintptr_t)p, &e);
    hook_depth++;
    r = real(p);
    if (known) {
        if (r == VCU_SUCCESS)
            host_uncount(e.bytes);
        else
            (void)track_put(e.kind, e.key, e.dev, e.bytes, e.trace_id); /* still pinned */
    }
    hook_depth--;
    return r;
}

_Static_assert(__builtin_types_compatible_p(vcu_pfn_cuMemFreeHost, vcu_pfn_cuMemHostUnregister),
               "host_free calls both through one type");

vcu_result
cuMemFreeHost(void *p)
{
    return host_free(HOOK_ID_cuMemFreeHost, TRACK_HOST, p);
}

vcu_result
cuMemHostUnregister(void *p)
{
    return host_free(HOOK_ID_cuMemHostUnregister, TRACK_HOST_REGISTERED, p);
}
