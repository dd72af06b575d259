/* SPDX-License-Identifier: MIT */
/*
** hooks_vmm.c -- the accounting of virtual memory: cuMemCreate,
** cuMemRelease and cuMemRetainAllocationHandle (the steps of their rows
** in hooks.h; preload.h).
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/cuda_api.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"

/* Physical memory on a device (location type DEVICE) is counted on that
** device's ordinal; host-located handles are not device memory. */
static bool
handle_reserve(struct hook_call *c, vcu_mem_handle *handle, size_t size,
               const vcu_mem_allocation_prop *prop, unsigned long long flags)
{
    (void)flags;
    if (handle == NULL || prop == NULL ||
        prop->location.type != VCU_MEM_LOCATION_TYPE_DEVICE)
        return true; /* not counted */
    return hook_reserve(c, prop->location.id, size);
}

static vcu_result
handle_granted(struct hook_call *c, vcu_mem_handle *handle, ...)
{
    return hook_granted(c, TRACK_HANDLE, handle);
}

/*
** The bytes go back at the last cuMemRelease of the handle (one per
** cuMemCreate and per cuMemRetainAllocationHandle). The driver frees the
** memory only once its last mapping is gone as well: until then the
** device holds a little more than the ledger says.
*/
static bool
handle_unref(struct hook_call *c, vcu_mem_handle handle)
{
    c->unref = track_unref(handle, &c->e);
    return true;
}

static vcu_result
handle_released(struct hook_call *c, vcu_mem_handle handle)
{
    if (c->unref == TRACK_STILL_HELD && c->r != VCU_SUCCESS)
        track_ref(handle); /* undo: the reference is still held */
    return taken_freed(c);
}

/* Another reference to a handle we count: one more cuMemRelease is due
** before its bytes go back (NCCL does this). */
static vcu_result
handle_retained(struct hook_call *c, vcu_mem_handle *handle, void *addr)
{
    (void)addr;
    if (c->r == VCU_SUCCESS && handle != NULL)
        track_ref(*handle);
    return c->r;
}

/* The exported hooks, written from their rows in hooks.h. */
PRELOAD_HOOKS_VMM(PRELOAD_HOOK_DEFINE)
