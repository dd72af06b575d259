/* SPDX-License-Identifier: MIT */
/*
** hooks_array.c -- the accounting of CUDA arrays and mipmapped arrays:
** cuArrayCreate_v2, cuArray3DCreate_v2, cuMipmappedArrayCreate and their
** destroys (the steps of their rows in hooks.h; preload.h).
**
** The driver lays an array out in its own way (rows and layers padded,
** block-linear tiles) and holds its memory in whole 2 MiB units (measured
** on an H100: 1000 x 1000 float4, 15.26 MiB asked, holds 16 MiB; 4097 x
** 4097 bytes, 16.0 MiB, holds 18 MiB; a 1-D array of 256 KiB holds 2 MiB),
** so a descriptor's product is not what it costs. The driver tells the
** size of the layout only for an array made without memory
** (CUDA_ARRAY3D_DEFERRED_MAPPING, CUDA 11.6+): so before an array is made,
** a twin of it is made with that flag, its requirements asked
** (cuArrayGetMemoryRequirements, cuMipmappedArrayGetMemoryRequirements)
** and the twin destroyed; the array is charged that size rounded up to
** 2 MiB (at least 2 MiB: small arrays are measured to average 64 KiB, but
** where the driver puts them is not seen, and a 1-D one took a whole 2
** MiB). Where the twin cannot be made (an old driver, flags it refuses),
** a bound from the descriptor is charged instead: rows padded to 512
** bytes, heights to 32 rows, depths of 3-D arrays to 32 slices. An
** array made sparse or with deferred mapping holds nothing: its memory is
** mapped later from virtual-memory handles, charged at cuMemCreate.
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "driver/cuda_api.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"

#define ARRAY_UNIT (2ULL << 20)
#define ARRAY_ROW_PAD 512 /* bytes: the bound's row padding */
#define ARRAY_PAD 32      /* rows, slices: the bound's padding */

/* Bytes of one channel of one element of FORMAT. Formats not named in
** cuda_api.h (packed, block-compressed, video) count 4: more than any of
** them takes per channel, so a bound never lets a quota be passed. */
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

static uint64_t
round_to(uint64_t n, uint64_t unit)
{
    uint64_t r = (n + unit - 1) / unit * unit;
    return r < n ? 0 : r;
}

/* A level's bound from its descriptor D (see the top); 0 when it
** overflows (the driver refuses such an array). */
static uint64_t
level_bound(const vcu_array3d_descriptor *d, size_t w, size_t h, size_t depth)
{
    uint64_t row = (uint64_t)w * d->NumChannels;
    if (d->NumChannels != 0 && row / d->NumChannels != w)
        return 0;
    uint64_t elem = format_bytes(d->Format);
    if (row > UINT64_MAX / elem)
        return 0;
    row = round_to(row * elem, ARRAY_ROW_PAD);
    uint64_t rows = h > 1 ? round_to(h, ARRAY_PAD) : 1;
    bool slices = (d->Flags & (VCU_ARRAY3D_LAYERED | VCU_ARRAY3D_CUBEMAP)) != 0;
    uint64_t deep = depth > 1 ? (slices ? depth : round_to(depth, ARRAY_PAD)) : 1;
    if (row == 0 || rows == 0 || deep == 0 || row > UINT64_MAX / rows ||
        row * rows > UINT64_MAX / deep)
        return 0;
    return row * rows * deep;
}

/* The bound of D's LEVELS (0: an array, not mipmapped), each level half
** the last in each dimension the array has. */
static uint64_t
descriptor_bound(const vcu_array3d_descriptor *d, unsigned levels)
{
    uint64_t total = 0;
    for (unsigned l = 0; l < (levels > 0 ? levels : 1) && l < 64; l++) {
        size_t w = d->Width >> l, h = d->Height >> l, depth = d->Depth >> l;
        bool slices = (d->Flags & (VCU_ARRAY3D_LAYERED | VCU_ARRAY3D_CUBEMAP)) != 0;
        uint64_t b = level_bound(d, w > 0 ? w : 1,
                                 d->Height == 0 ? 0
                                 : h > 0        ? h
                                                : 1,
                                 slices          ? d->Depth
                                 : d->Depth == 0 ? 0
                                 : depth > 0     ? depth
                                                 : 1);
        if (b == 0 || total + b < total)
            return 0;
        total += b;
    }
    return total;
}

/* The driver's function NAME into *FP (SIZE bytes). */
static bool
driver_sym(const char *name, void *fp, size_t size)
{
    void *p = interpose_lib_sym(HOOK_CUDA, name);
    if (p == NULL)
        return false;
    memcpy(fp, &p, size);
    return true;
}

/*
** What an array of D (LEVELS > 0: mipmapped) makes the device of the
** current context hold, in bytes (see the top): its deferred-mapping
** twin's requirements, else the descriptor's bound; rounded up to 2 MiB.
** 0 for a sparse or deferred array (nothing held), or one whose bound
** overflows (the driver refuses it).
*/
static uint64_t
array_charge(const vcu_array3d_descriptor *d, unsigned levels)
{
    if (d->Flags & (VCU_ARRAY3D_SPARSE | VCU_ARRAY3D_DEFERRED_MAPPING))
        return 0;
    int ord;
    uint64_t size = 0;
    vcu_array3d_descriptor twin = *d;
    twin.Flags |= VCU_ARRAY3D_DEFERRED_MAPPING;
    if (current_device(&ord) == VCU_SUCCESS) {
        vcu_array_memory_requirements req;
        if (levels == 0) {
            vcu_pfn_cuArray3DCreate create;
            vcu_pfn_cuArrayGetMemoryRequirements reqs;
            vcu_pfn_cuArrayDestroy destroy;
            vcu_array a = NULL;
            if (real_of(HOOK_ID_cuArray3DCreate_v2, &create, sizeof create) &&
                driver_sym("cuArrayGetMemoryRequirements", &reqs, sizeof reqs) &&
                real_of(HOOK_ID_cuArrayDestroy, &destroy, sizeof destroy) &&
                create(&a, &twin) == VCU_SUCCESS) {
                if (reqs(&req, a, ord) == VCU_SUCCESS)
                    size = req.size;
                destroy(a);
            }
        } else {
            vcu_pfn_cuMipmappedArrayCreate create;
            vcu_pfn_cuMipmappedArrayGetMemoryRequirements reqs;
            vcu_pfn_cuMipmappedArrayDestroy destroy;
            vcu_mipmapped_array m = NULL;
            if (real_of(HOOK_ID_cuMipmappedArrayCreate, &create, sizeof create) &&
                driver_sym("cuMipmappedArrayGetMemoryRequirements", &reqs, sizeof reqs) &&
                real_of(HOOK_ID_cuMipmappedArrayDestroy, &destroy, sizeof destroy) &&
                create(&m, &twin, levels) == VCU_SUCCESS) {
                if (reqs(&req, m, ord) == VCU_SUCCESS)
                    size = req.size;
                destroy(m);
            }
        }
    }
    if (size == 0)
        size = descriptor_bound(d, levels);
    if (size == 0)
        return 0;
    uint64_t charge = round_to(size, ARRAY_UNIT);
    return charge == 0 ? 0 : charge;
}

/* An array is counted on the current device; a descriptor whose bytes
** cannot be told is the driver's to refuse. */
static bool
array_reserve(struct hook_call *c, vcu_array *array, const vcu_array_descriptor *desc)
{
    if (array == NULL || desc == NULL)
        return true;
    vcu_array3d_descriptor d = {desc->Width,  desc->Height,      0,
                                desc->Format, desc->NumChannels, 0};
    return hook_reserve(c, -1, array_charge(&d, 0));
}

static bool
array3d_reserve(struct hook_call *c, vcu_array *array, const vcu_array3d_descriptor *desc)
{
    if (array == NULL || desc == NULL)
        return true;
    return hook_reserve(c, -1, array_charge(desc, 0));
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

static bool
mipmap_reserve(struct hook_call *c, vcu_mipmapped_array *pHandle,
               const vcu_array3d_descriptor *desc, unsigned int numMipmapLevels)
{
    if (pHandle == NULL || desc == NULL || numMipmapLevels == 0)
        return true;
    return hook_reserve(c, -1, array_charge(desc, numMipmapLevels));
}

static vcu_result
mipmap_granted(struct hook_call *c, vcu_mipmapped_array *pHandle, ...)
{
    return hook_granted(c, TRACK_MIPMAP, pHandle);
}

/* cuMipmappedArrayDestroy: taken_freed after it. */
static bool
mipmap_take(struct hook_call *c, vcu_mipmapped_array handle)
{
    return hook_take(c, TRACK_MIPMAP, (uint64_t)(uintptr_t)handle);
}

/* The exported hooks, written from their rows in hooks.h. */
PRELOAD_HOOKS_ARRAY(PRELOAD_HOOK_DEFINE)
