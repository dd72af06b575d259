/* SPDX-License-Identifier: MIT */
/*
** hooks_ptr.c -- the accounting of device pointers: cuMemAlloc_v2,
** cuMemAllocManaged, cuMemAllocPitch_v2, the frees (cuMemFree_v2 and the
** stream-ordered cuMemFreeAsync, with its _ptsz twin) and
** cuIpcGetMemHandle (the steps of their rows in hooks.h; preload.h). The
** stream-ordered allocations are hooks_pool.c's: their pools' reserves
** are what the device holds.
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/cuda_api.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"

#define PITCH_ALIGN                                                                      \
    512 /* the pitch cuMemAllocPitch is assumed to round to                              \
           (measured on an H100: 512 for widths up to 512,                               \
           then multiples of 512) */

/*
** BYTES on the current device, charged as the driver holds them (hooks.c,
** "What the driver holds for an allocation"): above 1 MiB its size
** rounded up to 2 MiB, else the pages of the driver's sub-allocator it
** may take. An invalid call is not counted: the driver gives its own
** error.
*/
static bool
charge_ahead(struct hook_call *c, uint64_t bytes)
{
    c->asked = bytes;
    if (bytes > TRACK_SMALL_MAX)
        return hook_reserve(c, -1, ptr_charge(bytes));
    return hook_reserve_block(c);
}

/*
** cuMemAlloc_v2 and cuMemAllocManaged. Managed memory is counted whole on
** the current device, as device memory: NVML never shows it per process,
** but the device holds every page the program touches there.
*/
static bool
ptr_reserve(struct hook_call *c, vcu_deviceptr *dptr, size_t bytesize, ...)
{
    if (dptr == NULL || bytesize == 0)
        return true;
    return charge_ahead(c, bytesize);
}

static vcu_result
ptr_granted(struct hook_call *c, vcu_deviceptr *dptr, ...)
{
    return hook_granted(c, TRACK_PTR, dptr);
}

/*
** The pitch is only known after the call: the width rounded up to
** PITCH_ALIGN x height is charged ahead, then what pitch x height takes
** (hooks.c's rule) once the driver has said: more is reserved (if that is
** refused, the allocation is freed again and refused), less given back.
*/
static bool
pitch_reserve(struct hook_call *c, vcu_deviceptr *dptr, size_t *pitch,
              size_t widthInBytes, size_t height, unsigned int elementSizeBytes)
{
    (void)elementSizeBytes;
    uint64_t row = ((uint64_t)widthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    if (dptr == NULL || pitch == NULL || widthInBytes == 0 || height == 0 ||
        row < widthInBytes || row > UINT64_MAX / height)
        return true; /* the driver's error, uncounted */
    return charge_ahead(c, row * height);
}

static vcu_result
pitch_granted(struct hook_call *c, vcu_deviceptr *dptr, size_t *pitch,
              size_t widthInBytes, size_t height, unsigned int elementSizeBytes)
{
    (void)widthInBytes;
    (void)elementSizeBytes;
    if (c->d == NULL || c->r != VCU_SUCCESS || (uint64_t)*pitch > UINT64_MAX / height)
        return hook_granted(c, TRACK_PTR, dptr);
    uint64_t actual = (uint64_t)*pitch * height;
    c->asked = actual;
    if (actual <= TRACK_SMALL_MAX) {
        if (c->pages > 0)
            return hook_granted(c, TRACK_PTR, dptr); /* a block, as charged ahead */
        /* Charged as a larger one, a block after all: its pages are
        ** charged as it is counted, the larger charge given back. */
        uint64_t had = c->bytes;
        struct preload_device *d = c->d;
        c->bytes = 0;
        vcu_result r = hook_granted(c, TRACK_PTR, dptr);
        unreserve(d, had);
        return r;
    }
    if (c->pages > 0) { /* charged as a block, larger after all */
        spare_give(c->d, c->pages);
        c->pages = 0;
        c->bytes = 0;
    }
    uint64_t had = c->bytes, need = ptr_charge(actual);
    if (need > had) {
        struct preload_device *d2 = NULL;
        if (reserve(c->id, c->ord, need - had, &d2) != VCU_SUCCESS) {
            vcu_pfn_cuMemFree free_ptr;
            if (real_of(HOOK_ID_cuMemFree_v2, &free_ptr, sizeof free_ptr))
                free_ptr(*dptr);
            c->r = VCU_ERROR_OUT_OF_MEMORY; /* what was charged is given back */
            return hook_granted(c, TRACK_PTR, dptr);
        }
    } else if (need < had) {
        unreserve(c->d, had - need);
    }
    c->bytes = need;
    return hook_granted(c, TRACK_PTR, dptr);
}

/*
** The frees (cuMemFree_v2, cuMemFreeAsync and its twin; taken_freed after
** them): the bytes go back only once the driver has freed them -- so the
** device never holds more than the ledger says. A pointer we did not
** count (allocated before the library was active, or not device memory,
** or a stream-ordered allocation, whose pool's reserve is charged) just
** forwards.
*/
static bool
ptr_take(struct hook_call *c, vcu_deviceptr dptr, ...)
{
    return hook_take(c, TRACK_PTR, dptr);
}

/*
** An allocation handed to another process (cuIpcGetMemHandle): the
** importer's mapping may keep the memory after this process frees it,
** and NVML charges it to this process, not the importer's (measured on
** an H100: an importer's figure does not grow). Its charge therefore
** stays until this process ends.
*/
static vcu_result
ptr_exported(struct hook_call *c, vcu_ipc_mem_handle *pHandle, vcu_deviceptr dptr)
{
    (void)pHandle;
    if (c->r == VCU_SUCCESS)
        (void)track_flag(TRACK_PTR, dptr, TRACK_EXPORTED);
    return c->r;
}

/* The exported hooks, written from their rows in hooks.h. */
PRELOAD_HOOKS_PTR(PRELOAD_HOOK_DEFINE)
