/* SPDX-License-Identifier: MIT */
/*
** hooks_ptr.c -- the accounting of device pointers: cuMemAlloc_v2,
** cuMemAllocManaged, cuMemAllocPitch_v2, the stream-ordered allocations
** and their frees (the steps of their rows in hooks.h; preload.h).
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/cuda_api.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"

#define PITCH_ALIGN 512 /* the pitch cuMemAllocPitch is assumed to round to */

/*
** cuMemAlloc_v2, cuMemAllocManaged, cuMemAllocAsync and
** cuMemAllocFromPoolAsync (each stream-ordered one with its _ptsz twin):
** BYTESIZE reserved on the current device, the pointer tracked. Managed
** memory is counted whole on the current device, though the driver may
** keep pages of it on the host. An invalid call is not counted: the
** driver gives its own error.
*/
static bool
ptr_reserve(struct hook_call *c, vcu_deviceptr *dptr, size_t bytesize, ...)
{
    return hook_reserve(c, -1, dptr == NULL ? 0 : bytesize);
}

static vcu_result
ptr_granted(struct hook_call *c, vcu_deviceptr *dptr, ...)
{
    return hook_granted(c, TRACK_PTR, dptr);
}

/*
** The pitch is only known after the call: reserve the width rounded up
** to PITCH_ALIGN first, then reserve the difference (or give back the
** excess) once the driver has said. If the difference is refused, the
** allocation is freed again and refused.
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
    return hook_reserve(c, -1, row * height);
}

static vcu_result
pitch_granted(struct hook_call *c, vcu_deviceptr *dptr, size_t *pitch,
              size_t widthInBytes, size_t height, unsigned int elementSizeBytes)
{
    (void)widthInBytes;
    (void)elementSizeBytes;
    if (c->d == NULL || c->r != VCU_SUCCESS)
        return hook_granted(c, TRACK_PTR, dptr);
    uint64_t guess = c->bytes;
    uint64_t actual = (uint64_t)*pitch * height;
    struct preload_device *d2 = NULL;
    if (actual > guess &&
        reserve(c->id, c->ord, actual - guess, &d2) != VCU_SUCCESS) {
        vcu_pfn_cuMemFree free_ptr;
        if (real_of(HOOK_ID_cuMemFree_v2, &free_ptr, sizeof free_ptr))
            free_ptr(*dptr);
        c->r = VCU_ERROR_OUT_OF_MEMORY; /* the guess is given back */
    } else {
        if (actual < guess)
            unreserve(c->d, guess - actual);
        c->bytes = actual;
    }
    return hook_granted(c, TRACK_PTR, dptr);
}

/*
** The frees (cuMemFree_v2, cuMemFreeAsync and its twin; taken_freed after
** them): the bytes go back only once the driver has freed them -- so the
** device never holds more than the ledger says. A pointer we did not
** count (allocated before the library was active, or not device memory)
** just forwards. cuMemFreeAsync gives back at the call, not when the
** stream reaches the free: for a moment the device may hold a little more
** than the ledger says.
*/
static bool
ptr_take(struct hook_call *c, vcu_deviceptr dptr, ...)
{
    return hook_take(c, TRACK_PTR, dptr);
}

/* The exported hooks, written from their rows in hooks.h. */
PRELOAD_HOOKS_PTR(PRELOAD_HOOK_DEFINE)
