/* SPDX-License-Identifier: MIT */
/*
** hooks_array.c -- the hooks of CUDA arrays: cuArrayCreate_v2, cuArray3DCreate_v2
** and cuArrayDestroy (preload.h).
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
/* Hooks: arrays                                                        */
/* ------------------------------------------------------------------ */

/* Bytes of one channel of one element of FORMAT. Formats not named in
** cuda_api.h (packed, block-compressed, video) count 4: more than any of
** them takes per channel, so an estimate never lets a quota be passed. */
static uint64_t
format_bytes(vcu_array_format format)
{
    switch (format) {
    case VCU_AD_FORMAT_UNSIGNED_INT8:
    case VCU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case VCU_AD_FORMAT_UNSIGNED_INT16:
    case VCU_AD_FORMAT_SIGNED_INT16:
    case VCU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4;
    }
}

/* An array's bytes from its descriptor: width x height x depth x channels
** x channel size (the driver may pad rows; that is not seen). 0 when it
** overflows (the driver refuses such an array). */
static uint64_t
array_bytes(size_t w, size_t h, size_t depth, vcu_array_format f, unsigned channels)
{
    uint64_t dims[5] = {w, h > 0 ? h : 1, depth > 0 ? depth : 1, channels,
                        format_bytes(f)};
    uint64_t n = 1;
    for (int i = 0; i < 5; i++) {
        if (dims[i] != 0 && n > UINT64_MAX / dims[i])
            return 0;
        n *= dims[i];
    }
    return n;
}

/* cuArrayCreate_v2 and cuArray3DCreate_v2 once their bytes are known. */
static vcu_result
array_create(const char *what, uint64_t bytes, vcu_array *array,
             vcu_result (*call)(const void *desc, vcu_array *array, void *fp),
             const void *desc, void *fp)
{
    hook_depth++;
    int ord = -1;
    struct preload_device *d = NULL;
    vcu_result r = current_device(&ord);
    if (r == VCU_SUCCESS)
        r = reserve(what, ord, bytes, &d);
    if (r == VCU_SUCCESS) {
        r = call(desc, array, fp);
        if (r != VCU_SUCCESS)
            unreserve(d, bytes);
        else
            r = track_or_undo(TRACK_ARRAY, (uint64_t)(uintptr_t)*array, ord, d, bytes);
    }
    hook_depth--;
    return trace_if_refused(r, ord, bytes);
}

static vcu_result
call_array_2d(const void *desc, vcu_array *array, void *fp)
{
    vcu_pfn_cuArrayCreate f;
    memcpy(&f, &fp, sizeof f);
    return f(array, desc);
}

static vcu_result
call_array_3d(const void *desc, vcu_array *array, void *fp)
{
    vcu_pfn_cuArray3DCreate f;
    memcpy(&f, &fp, sizeof f);
    return f(array, desc);
}

vcu_result
cuArrayCreate_v2(vcu_array *array, const vcu_array_descriptor *desc)
{
    vcu_pfn_cuArrayCreate real;
    vcu_result r;
    switch (route(HOOK_ID_cuArrayCreate_v2, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(array, desc);
    case ROUTE_COUNT:
        break;
    }
    uint64_t bytes = desc == NULL ? 0
                                  : array_bytes(desc->Width, desc->Height, 1,
                                                desc->Format, desc->NumChannels);
    if (array == NULL || bytes == 0)
        return real(array, desc);
    void *fp;
    memcpy(&fp, &real, sizeof fp);
    return array_create("cuArrayCreate_v2", bytes, array, call_array_2d, desc, fp);
}

vcu_result
cuArray3DCreate_v2(vcu_array *array, const vcu_array3d_descriptor *desc)
{
    vcu_pfn_cuArray3DCreate real;
    vcu_result r;
    switch (route(HOOK_ID_cuArray3DCreate_v2, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(array, desc);
    case ROUTE_COUNT:
        break;
    }
    uint64_t bytes = desc == NULL ? 0
                                  : array_bytes(desc->Width, desc->Height, desc->Depth,
                                                desc->Format, desc->NumChannels);
    if (array == NULL || bytes == 0)
        return real(array, desc);
    void *fp;
    memcpy(&fp, &real, sizeof fp);
    return array_create("cuArray3DCreate_v2", bytes, array, call_array_3d, desc, fp);
}

vcu_result
cuArrayDestroy(vcu_array array)
{
    vcu_pfn_cuArrayDestroy real;
    vcu_result r;
    switch (route(HOOK_ID_cuArrayDestroy, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(array);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    struct track e = {0}; /* gcc 13 cannot see that it is written before use */
    bool known = track_take(TRACK_ARRAY, (uint64_t)(uintptr_t)array, &e);
    r = real(array);
    if (known) {
        if (r == VCU_SUCCESS)
            untrack_release(&e);
        else
            (void)track_put(e.kind, e.key, e.dev, e.bytes, e.trace_id);
    }
    hook_depth--;
    return r;
}
