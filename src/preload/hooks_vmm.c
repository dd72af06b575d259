/* SPDX-License-Identifier: MIT */
/*
** hooks_vmm.c -- the accounting of virtual memory: cuMemCreate,
** cuMemRelease, cuMemRetainAllocationHandle, cuMemMap, cuMemUnmap and
** cuMemExportToShareableHandle (the steps of their rows in hooks.h;
** preload.h).
**
** The driver holds a handle's physical memory from cuMemCreate until the
** handle is released (once per cuMemCreate and per
** cuMemRetainAllocationHandle) *and* its last mapping is unmapped
** (measured on an H100: released right after cuMemMap, the idiom of
** NVIDIA's samples, the memory stays until cuMemUnmap). So a handle's
** entry counts its references and its mappings together (track.h), and
** its bytes go back when that count reaches 0. Each mapping is an entry
** of its own (TRACK_MAP, by its address), so that cuMemUnmap finds the
** handles of the range it unmaps.
**
** A handle exported to another process (cuMemExportToShareableHandle)
** may be kept alive there after this process lets it go: its charge
** stays until this process ends. The importer
** (cuMemImportFromShareableHandle) is not charged: the memory is the
** exporter's, as NVML counts IPC imports (an importer's figure does not
** grow, measured on an H100); whatever NVML does charge to the importer
** is counted through its context's measure (docs/POLICY.md, "Contexts
** count").
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "driver/cuda_api.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"

#define MAP_STEP                                                                         \
    (2ULL << 20) /* the smallest granularity a mapping starts on                         \
                    (cuMemGetAllocationGranularity's minimum, measured) */

/* Physical memory on a device (location type DEVICE) is counted on that
** device's ordinal; host-located handles are not device memory. The
** size must be a multiple of the granularity (the driver refuses others),
** so it is what the device holds. */
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

/* One reference fewer (cuMemRelease): the bytes go back with the count's
** last unit, once the driver has released it (taken_freed). */
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

/*
** A mapping holds the handle's memory: its count grows before the call
** (a cuMemRelease racing with the map then cannot give the bytes back
** under it), and the mapping is recorded after. A handle the table does
** not know (imported, or host memory) is not counted.
*/
static bool
map_reserve(struct hook_call *c, vcu_deviceptr ptr, size_t size, size_t offset,
            vcu_mem_handle handle, unsigned long long flags)
{
    (void)ptr;
    (void)size;
    (void)offset;
    (void)flags;
    struct track e;
    if (track_find(TRACK_HANDLE, handle, &e)) {
        track_ref(handle);
        c->unref = TRACK_STILL_HELD; /* a reference of ours to drop if the map fails */
        c->ord = e.dev;
    }
    return true;
}

static vcu_result
map_granted(struct hook_call *c, vcu_deviceptr ptr, size_t size, size_t offset,
            vcu_mem_handle handle, unsigned long long flags)
{
    (void)offset;
    (void)flags;
    if (c->unref != TRACK_STILL_HELD)
        return c->r;
    if (c->r == VCU_SUCCESS && track_put(TRACK_MAP, ptr, c->ord, size, handle))
        return c->r;
    if (c->r == VCU_SUCCESS) {
        /* The table cannot hold the mapping: undone, refused. */
        vcu_pfn_cuMemUnmap unmap;
        void *p = interpose_lib_sym(HOOK_CUDA, "cuMemUnmap");
        if (p != NULL) {
            memcpy(&unmap, &p, sizeof p);
            unmap(ptr, size);
        }
        c->r = VCU_ERROR_OUT_OF_MEMORY;
    }
    /* Our reference goes; if it was the last (a release raced with the
    ** failed map), the driver has freed the memory: its bytes go back. */
    vcu_result r = c->r;
    c->unref = track_unref(handle, &c->e);
    c->r = VCU_SUCCESS;
    (void)taken_freed(c);
    return r;
}

/*
** cuMemUnmap: the mappings of the range are taken out of the table first
** (two threads never give the same mapping back) into a list that C
** keeps (C->scratch; allocated only when the range has mappings), put
** back if the driver refuses; once it has unmapped them, each handle's
** count drops by one, and a handle whose count reaches 0 gives its bytes
** back.
*/
struct unmap_list {
    size_t n, cap;
    struct track e[];
};

/* E added to *L (grown as needed); false when host memory runs out. */
static bool
unmap_add(struct unmap_list **l, const struct track *e)
{
    if (*l == NULL || (*l)->n == (*l)->cap) {
        size_t cap = *l == NULL ? 8 : 2 * (*l)->cap;
        struct unmap_list *bigger = realloc(*l, sizeof **l + cap * sizeof(struct track));
        if (bigger == NULL)
            return false;
        if (*l == NULL)
            bigger->n = 0;
        bigger->cap = cap;
        *l = bigger;
    }
    (*l)->e[(*l)->n++] = *e;
    return true;
}

static bool
unmap_take(struct hook_call *c, vcu_deviceptr ptr, size_t size)
{
    struct unmap_list *l = NULL;
    uint64_t end = (uint64_t)ptr + size < ptr ? UINT64_MAX : (uint64_t)ptr + size;
    for (uint64_t a = ptr; a < end;) {
        struct track t;
        if (!track_take(TRACK_MAP, a, &t)) {
            a += MAP_STEP; /* a hole: mappings start on granules */
            continue;
        }
        if (!unmap_add(&l, &t)) {
            (void)track_restore(&t); /* stays counted: too strict, never too lax */
            break;
        }
        a += t.bytes > 0 ? t.bytes : MAP_STEP;
    }
    c->scratch = l;
    return true;
}

static vcu_result
unmap_done(struct hook_call *c, vcu_deviceptr ptr, size_t size)
{
    (void)ptr;
    (void)size;
    struct unmap_list *l = c->scratch;
    vcu_result r = c->r;
    for (size_t i = 0; l != NULL && i < l->n; i++) {
        if (r != VCU_SUCCESS) {
            (void)track_restore(&l->e[i]);
            continue;
        }
        c->unref = track_unref(l->e[i].trace_id, &c->e);
        (void)taken_freed(c);
    }
    free(l);
    return r;
}

/* Exported: its charge stays until this process ends (the importer may
** keep the memory). */
static vcu_result
handle_exported(struct hook_call *c, void *shareableHandle, vcu_mem_handle handle, ...)
{
    (void)shareableHandle;
    if (c->r == VCU_SUCCESS)
        (void)track_flag(TRACK_HANDLE, handle, TRACK_EXPORTED);
    return c->r;
}

/* The exported hooks, written from their rows in hooks.h. */
PRELOAD_HOOKS_VMM(PRELOAD_HOOK_DEFINE)
