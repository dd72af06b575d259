/* SPDX-License-Identifier: MIT */
/*
** hooks_host.c -- the accounting of page-locked ("pinned") host memory:
** cuMemAllocHost_v2, cuMemHostAlloc and cuMemHostRegister_v2, and their
** frees cuMemFreeHost and cuMemHostUnregister (the steps of their rows in
** hooks.h; preload.h). The runtime's
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
        if (P.ledger[a] != NULL)
            (void)ledger_host_add(P.ledger[a], bytes);
}

void
host_uncount(uint64_t bytes)
{
    for (int a = 0; a < ACCT_COUNT; a++)
        if (P.ledger[a] != NULL)
            ledger_host_sub(P.ledger[a], bytes);
}

/* After a granted call of KIND: remember ADDR's BYTES and count them. A
** table out of host memory leaves them uncounted (they are no quota's). */
static void
host_granted(int kind, const void *addr, size_t bytes)
{
    if (addr != NULL && bytes > 0 && track_put(kind, (uint64_t)(uintptr_t)addr, -1, bytes, 0))
        host_count(bytes);
}

/* cuMemAllocHost_v2 and cuMemHostAlloc. */
static vcu_result
host_allocated(struct hook_call *c, void **pp, size_t bytesize, ...)
{
    if (c->r == VCU_SUCCESS && pp != NULL)
        host_granted(TRACK_HOST, *pp, bytesize);
    return c->r;
}

static vcu_result
host_registered(struct hook_call *c, void *p, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    if (c->r == VCU_SUCCESS)
        host_granted(TRACK_HOST_REGISTERED, p, bytesize);
    return c->r;
}

/*
** The frees (taken_freed after them): the entry is taken out first (two
** threads never uncount the same bytes), put back if the driver refuses.
** An address we did not count (pinned before the library was active)
** just forwards.
*/
static bool
host_take(struct hook_call *c, void *p)
{
    int kind = c->id == HOOK_ID_cuMemFreeHost ? TRACK_HOST : TRACK_HOST_REGISTERED;
    return hook_take(c, kind, (uint64_t)(uintptr_t)p);
}

/* The exported hooks, written from their rows in hooks.h. */
PRELOAD_HOOKS_HOST(PRELOAD_HOOK_DEFINE)
