/* SPDX-License-Identifier: MIT */
/*
** hooks_ptr.c -- the hooks of device pointers: cuMemAlloc_v2, cuMemAllocManaged,
** cuMemAllocPitch_v2, the stream-ordered allocations and their frees
** (preload.h).
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "driver/cuda_api.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"

#define PITCH_ALIGN 512 /* the pitch cuMemAllocPitch is assumed to round to */

/* ------------------------------------------------------------------ */
/* Hooks: device pointers                                               */
/* ------------------------------------------------------------------ */

/*
** The common shape of cuMemAlloc_v2, cuMemAllocManaged, cuMemAllocAsync
** and cuMemAllocFromPoolAsync: reserve on the current device, call, track
** the pointer or give the reservation back. CALL runs the real function
** with the hook's own arguments (it has them; this file does not).
*/
struct ptr_call {
    enum hook_id id;
    vcu_deviceptr *dptr;
    size_t bytes;
    unsigned int flags; /* cuMemAllocManaged */
    vcu_mem_pool pool;  /* cuMemAllocFromPoolAsync */
    vcu_stream stream;  /* the async ones */
};

static vcu_result
ptr_call_real(const struct ptr_call *c, void *fp)
{
    switch (c->id) {
    case HOOK_ID_cuMemAlloc_v2: {
        vcu_pfn_cuMemAlloc f;
        memcpy(&f, &fp, sizeof f);
        return f(c->dptr, c->bytes);
    }
    case HOOK_ID_cuMemAllocManaged: {
        vcu_pfn_cuMemAllocManaged f;
        memcpy(&f, &fp, sizeof f);
        return f(c->dptr, c->bytes, c->flags);
    }
    case HOOK_ID_cuMemAllocAsync:
    case HOOK_ID_cuMemAllocAsync_ptsz: {
        vcu_pfn_cuMemAllocAsync f;
        memcpy(&f, &fp, sizeof f);
        return f(c->dptr, c->bytes, c->stream);
    }
    case HOOK_ID_cuMemAllocFromPoolAsync:
    case HOOK_ID_cuMemAllocFromPoolAsync_ptsz: {
        vcu_pfn_cuMemAllocFromPoolAsync f;
        memcpy(&f, &fp, sizeof f);
        return f(c->dptr, c->bytes, c->pool, c->stream);
    }
    default:
        return VCU_ERROR_NOT_SUPPORTED; /* not a pointer allocation: a bug here */
    }
}

static vcu_result
ptr_alloc(const struct ptr_call *c)
{
    void *fp = interpose_real(c->id);
    vcu_result r;
    enum preload_mode m = preload_mode();
    if (m == PRELOAD_DISABLED || fp == NULL)
        return VCU_ERROR_NOT_INITIALIZED;
    if (m == PRELOAD_PASSIVE || hook_depth > 0 || c->dptr == NULL || c->bytes == 0)
        return ptr_call_real(c, fp); /* invalid calls: the driver's error */
    hook_depth++;
    int ord = -1;
    struct preload_device *d = NULL;
    r = current_device(&ord);
    if (r == VCU_SUCCESS)
        r = reserve(hook_name(c->id), ord, c->bytes, &d);
    if (r == VCU_SUCCESS) {
        r = ptr_call_real(c, fp);
        if (r != VCU_SUCCESS)
            unreserve(d, c->bytes);
        else
            r = track_or_undo(TRACK_PTR, *c->dptr, ord, d, c->bytes);
    }
    hook_depth--;
    return trace_if_refused(r, ord, c->bytes);
}

vcu_result
cuMemAlloc_v2(vcu_deviceptr *dptr, size_t bytesize)
{
    struct ptr_call c = {.id = HOOK_ID_cuMemAlloc_v2, .dptr = dptr, .bytes = bytesize};
    return ptr_alloc(&c);
}

/* Managed memory is counted whole on the current device, though the
** driver may keep pages of it on the host. */
vcu_result
cuMemAllocManaged(vcu_deviceptr *dptr, size_t bytesize, unsigned int flags)
{
    struct ptr_call c = {
        .id = HOOK_ID_cuMemAllocManaged, .dptr = dptr, .bytes = bytesize, .flags = flags};
    return ptr_alloc(&c);
}

vcu_result
cuMemAllocAsync(vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream)
{
    struct ptr_call c = {
        .id = HOOK_ID_cuMemAllocAsync, .dptr = dptr, .bytes = bytesize, .stream = stream};
    return ptr_alloc(&c);
}

vcu_result
cuMemAllocAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream)
{
    struct ptr_call c = {.id = HOOK_ID_cuMemAllocAsync_ptsz,
                         .dptr = dptr,
                         .bytes = bytesize,
                         .stream = stream};
    return ptr_alloc(&c);
}

vcu_result
cuMemAllocFromPoolAsync(vcu_deviceptr *dptr, size_t bytesize, vcu_mem_pool pool,
                        vcu_stream stream)
{
    struct ptr_call c = {.id = HOOK_ID_cuMemAllocFromPoolAsync,
                         .dptr = dptr,
                         .bytes = bytesize,
                         .pool = pool,
                         .stream = stream};
    return ptr_alloc(&c);
}

vcu_result
cuMemAllocFromPoolAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize, vcu_mem_pool pool,
                             vcu_stream stream)
{
    struct ptr_call c = {.id = HOOK_ID_cuMemAllocFromPoolAsync_ptsz,
                         .dptr = dptr,
                         .bytes = bytesize,
                         .pool = pool,
                         .stream = stream};
    return ptr_alloc(&c);
}

/*
** The pitch is only known after the call: reserve the width rounded up
** to PITCH_ALIGN first, then reserve the difference (or give back the
** excess) once the driver has said. If the difference is refused, the
** allocation is freed again and refused.
*/
vcu_result
cuMemAllocPitch_v2(vcu_deviceptr *dptr, size_t *pitch, size_t widthInBytes, size_t height,
                   unsigned int elementSizeBytes)
{
    vcu_pfn_cuMemAllocPitch real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemAllocPitch_v2, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(dptr, pitch, widthInBytes, height, elementSizeBytes);
    case ROUTE_COUNT:
        break;
    }
    uint64_t row = ((uint64_t)widthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    if (dptr == NULL || pitch == NULL || widthInBytes == 0 || height == 0 ||
        row < widthInBytes || row > UINT64_MAX / height)
        return real(dptr, pitch, widthInBytes, height, elementSizeBytes);
    uint64_t guess = row * height;
    hook_depth++;
    int ord = -1;
    struct preload_device *d = NULL;
    r = current_device(&ord);
    if (r == VCU_SUCCESS)
        r = reserve("cuMemAllocPitch_v2", ord, guess, &d);
    if (r == VCU_SUCCESS) {
        r = real(dptr, pitch, widthInBytes, height, elementSizeBytes);
        if (r != VCU_SUCCESS) {
            unreserve(d, guess);
        } else {
            uint64_t actual = (uint64_t)*pitch * height;
            struct preload_device *d2 = NULL;
            if (actual > guess &&
                reserve("cuMemAllocPitch_v2", ord, actual - guess, &d2) != VCU_SUCCESS) {
                vcu_pfn_cuMemFree free_ptr;
                if (real_of(HOOK_ID_cuMemFree_v2, &free_ptr, sizeof free_ptr))
                    free_ptr(*dptr);
                unreserve(d, guess);
                r = VCU_ERROR_OUT_OF_MEMORY;
            } else {
                if (actual < guess)
                    unreserve(d, guess - actual);
                r = track_or_undo(TRACK_PTR, *dptr, ord, d, actual);
            }
        }
    }
    hook_depth--;
    return trace_if_refused(r, ord, guess);
}

/*
** The frees: take the entry out first (so that two threads never give the
** same bytes back), free, then give the bytes back only once the driver
** has freed them -- so the device never holds more than the ledger says.
** A pointer we did not count (allocated before the library was active,
** or not device memory) just forwards.
*/
static vcu_result
ptr_free(enum hook_id id, vcu_deviceptr dptr, vcu_stream stream)
{
    void *fp = interpose_real(id);
    enum preload_mode m = preload_mode();
    if (m == PRELOAD_DISABLED || fp == NULL)
        return VCU_ERROR_NOT_INITIALIZED;
    bool count = m == PRELOAD_ACTIVE && hook_depth == 0;
    struct track e = {0}; /* gcc 13 cannot see that it is written before use */
    bool known = count && track_take(TRACK_PTR, dptr, &e);
    hook_depth++;
    vcu_result r;
    if (id == HOOK_ID_cuMemFree_v2) {
        vcu_pfn_cuMemFree f;
        memcpy(&f, &fp, sizeof f);
        r = f(dptr);
    } else {
        vcu_pfn_cuMemFreeAsync f;
        memcpy(&f, &fp, sizeof f);
        r = f(dptr, stream);
    }
    if (known) {
        if (r == VCU_SUCCESS)
            untrack_release(&e);
        else
            (void)track_put(e.kind, e.key, e.dev, e.bytes, e.trace_id); /* still live */
    }
    hook_depth--;
    return r;
}

vcu_result
cuMemFree_v2(vcu_deviceptr dptr)
{
    return ptr_free(HOOK_ID_cuMemFree_v2, dptr, NULL);
}

/* Given back at the call, not when the stream reaches the free: for a
** moment the device may hold a little more than the ledger says. */
vcu_result
cuMemFreeAsync(vcu_deviceptr dptr, vcu_stream stream)
{
    return ptr_free(HOOK_ID_cuMemFreeAsync, dptr, stream);
}

vcu_result
cuMemFreeAsync_ptsz(vcu_deviceptr dptr, vcu_stream stream)
{
    return ptr_free(HOOK_ID_cuMemFreeAsync_ptsz, dptr, stream);
}
