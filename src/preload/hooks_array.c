/* SPDX-License-Identifier: MIT */
/*
** hooks_array.c -- the accounting of CUDA arrays: cuArrayCreate_v2,
** cuArray3DCreate_v2 and cuArrayDestroy (the steps of their rows in
** hooks.h; preload.h).
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* An array is counted on the current device; a descriptor whose bytes
** cannot be told is the driver's to refuse. */
static bool
array_reserve(struct hook_call *c, vcu_array *array, const vcu_array_descriptor *desc)
{
    if (array == NULL || desc == NULL)
        return true;
    return hook_reserve(
        c, -1,
        array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels));
}

static bool
array3d_reserve(struct hook_call *c, vcu_array *array, const vcu_array3d_descriptor *desc)
{
    if (array == NULL || desc == NULL)
        return true;
    return hook_reserve(c, -1,
                        array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format,
                                    desc->NumChannels));
}

static vcu_result
array_granted(struct hook_call *c, vcu_array *array, ...)
{
    return hook_granted(c, TRACK_ARRAY, array);
}

/* cuArrayDestroy: taken_freed after it. */
static bool
array_take(struct hook_call *c, vcu_array array)
{
    return hook_take(c, TRACK_ARRAY, (uint64_t)(uintptr_t)array);
}

/* The exported hooks, written from their rows in hooks.h. */
PRELOAD_HOOKS_ARRAY(PRELOAD_HOOK_DEFINE)
