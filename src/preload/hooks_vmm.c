/* SPDX-License-Identifier: MIT */
/*
** hooks_vmm.c -- the hooks of virtual memory: cuMemCreate, cuMemRelease and
** cuMemRetainAllocationHandle (preload.h).
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "driver/cuda_api.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"

/* ------------------------------------------------------------------ */
/* Hooks: virtual memory                                                */
/* ------------------------------------------------------------------ */

/* Physical memory on a device (location type DEVICE) is counted on that
** device's ordinal; host-located handles are not device memory. */
vcu_result
cuMemCreate(vcu_mem_handle *handle, size_t size, const vcu_mem_allocation_prop *prop,
            unsigned long long flags)
{
    vcu_pfn_cuMemCreate real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemCreate, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(handle, size, prop, flags);
    case ROUTE_COUNT:
        break;
    }
    if (handle == NULL || size == 0 || prop == NULL ||
        prop->location.type != VCU_MEM_LOCATION_TYPE_DEVICE)
        return real(handle, size, prop, flags);
    hook_depth++;
    int ord = prop->location.id;
    struct preload_device *d = NULL;
    r = reserve("cuMemCreate", ord, size, &d);
    if (r == VCU_SUCCESS) {
        r = real(handle, size, prop, flags);
        if (r != VCU_SUCCESS)
            unreserve(d, size);
        else
            r = track_or_undo(TRACK_HANDLE, *handle, ord, d, size);
    }
    hook_depth--;
    return trace_if_refused(r, ord, size);
}

/*
** The bytes go back at the last cuMemRelease of the handle (one per
** cuMemCreate and per cuMemRetainAllocationHandle). The driver frees the
** memory only once its last mapping is gone as well: until then the
** device holds a little more than the ledger says.
*/
vcu_result
cuMemRelease(vcu_mem_handle handle)
{
    vcu_pfn_cuMemRelease real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemRelease, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(handle);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    struct track e = {0}; /* gcc 13 cannot see that it is written before use */
    enum track_unref u = track_unref(handle, &e);
    r = real(handle);
    if (u == TRACK_LAST && r == VCU_SUCCESS)
        untrack_release(&e);
    else if (u == TRACK_LAST) /* undo: the reference is still held */
        (void)track_put(e.kind, e.key, e.dev, e.bytes, e.trace_id);
    else if (u == TRACK_STILL_HELD && r != VCU_SUCCESS)
        track_ref(handle);
    hook_depth--;
    return r;
}

/* Another reference to a handle we count: one more cuMemRelease is due
** before its bytes go back (NCCL does this). */
vcu_result
cuMemRetainAllocationHandle(vcu_mem_handle *handle, void *addr)
{
    vcu_pfn_cuMemRetainAllocationHandle real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemRetainAllocationHandle, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(handle, addr);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    r = real(handle, addr);
    if (r == VCU_SUCCESS && handle != NULL)
        track_ref(*handle);
    hook_depth--;
    return r;
}
