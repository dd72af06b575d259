/* SPDX-License-Identifier: MIT */
/*
** hooks.h -- the one list of every entry point that libvram-preload.so
** interposes, and the contract between its two halves:
**   interpose.c  how callers reach the hooks (the dlsym override and
**                cuGetProcAddress), and where the real functions are;
**   hooks.c      what the hooks do (quota, ledger, reports).
**
** From PRELOAD_HOOKS come: the hook declarations below (so that every
** definition is checked against the driver's type from cuda_api.h, which
** tests/gpu/test_cuda_decls.c checks against cuda.h), the dlsym table and
** the cuGetProcAddress table (interpose.c), and the linker's export list
** (exports.map.in, preprocessed by CMake), so the three cannot disagree.
**
** The list is also read with PRELOAD_HOOKS_LIST_ONLY defined, by the
** preprocessor alone, to write the export list: nothing but the list may
** then be expanded, hence the guard around the declarations.
*/
#ifndef VRAM_PRELOAD_HOOKS_H
#define VRAM_PRELOAD_HOOKS_H

/*
** X(symbol, type, asked, since, until, stream, lib, before, after, params,
** args), one row per exported symbol (each _ptsz twin is a row of its own):
**   symbol  the exported name, also the hook's name (an identifier);
**   type    its function-pointer type;
**   asked   the base name that cuGetProcAddress is asked for, or NULL
**           where cuGetProcAddress cannot return it (NVML);
**   since, until
**           the cudaVersion range [since, until) for which the driver's
**           cuGetProcAddress(asked) returns this variant (until 0: no end);
**           cudaTypedefs.h spells each variant PFN_<asked>_v<since>;
**   stream  HOOK_ANY: the function takes no stream; HOOK_LEGACY or
**           HOOK_PTSZ: the variant returned without or with the flag
**           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
**   lib     HOOK_CUDA (libcuda.so.1) or HOOK_NVML (libnvidia-ml.so.1):
**           where the real function lives.
** From the last four, each family file (hooks_info.c, hooks_ptr.c, ...)
** has the preprocessor write the exported functions of its own list
** (PRELOAD_HOOK_DEFINE in preload.h, "The accounting of a counted call");
** the rows of PRELOAD_HOOKS_OWN leave them empty:
**   before  called with the call's state and the hook's arguments before
**           the real function: what the call reserves or takes out; false
**           when it is refused (the real function is then not called);
**   after   called after it: what the call's result changes; returns the
**           hook's result;
**   params  the parameter list, as the driver declares it;
**   args    the same names, as the call passes them on.
** The steps are static functions of the family file. Rows of one shape
** share their two steps (the stream-ordered twins, the pointer
** allocations): a step reads the leading arguments it needs and is
** declared with `...` for the rest. A new hooked call is a row in its
** family's list and, unless it has the shape of one there, two steps.
** A driver that adds a new variant of one of these (a cuMemAlloc_v3, say)
** needs a row here before it can be counted; until then requests with
** the new cudaVersion would get our hook for the old ABI, so `until`
** must be set on the old row when the new one is added.
*/
/* clang-format off */
#define PRELOAD_HOOKS(X)                                                                 \
    PRELOAD_HOOKS_OWN(X) PRELOAD_HOOKS_INFO(X) PRELOAD_HOOKS_CTX(X)                      \
    PRELOAD_HOOKS_PTR(X) PRELOAD_HOOKS_POOL(X) PRELOAD_HOOKS_GRAPH(X)                    \
    PRELOAD_HOOKS_VMM(X) PRELOAD_HOOKS_ARRAY(X) PRELOAD_HOOKS_HOST(X)

/* Written out in interpose.c: they hand out hooks rather than count. */
#define PRELOAD_HOOKS_OWN(X)                                                             \
    X(cuGetProcAddress, vcu_pfn_cuGetProcAddress_v1, "cuGetProcAddress", 11030, 12000,   \
      HOOK_ANY, HOOK_CUDA, , , , )                                                       \
    X(cuGetProcAddress_v2, vcu_pfn_cuGetProcAddress, "cuGetProcAddress", 12000, 0,       \
      HOOK_ANY, HOOK_CUDA, , , , )

/* hooks_info.c: memory as the quota shows it (cuInit checks the keys) */
#define PRELOAD_HOOKS_INFO(X)                                                            \
    X(cuInit, vcu_pfn_cuInit, "cuInit", 2000, 0, HOOK_ANY, HOOK_CUDA,                    \
      call_only, init_checked, (unsigned int flags), (flags))                            \
    X(cuDeviceTotalMem_v2, vcu_pfn_cuDeviceTotalMem, "cuDeviceTotalMem", 3020, 0,        \
      HOOK_ANY, HOOK_CUDA, call_only, total_mem_view, (size_t *bytes, vcu_device dev),   \
      (bytes, dev))                                                                      \
    X(cuMemGetInfo_v2, vcu_pfn_cuMemGetInfo, "cuMemGetInfo", 3020, 0, HOOK_ANY,          \
      HOOK_CUDA, call_only, mem_info_view, (size_t *free_bytes, size_t *total_bytes),    \
      (free_bytes, total_bytes))                                                         \
    X(nvmlDeviceGetMemoryInfo, vnvml_pfn_memory_info, NULL, 0, 0, HOOK_ANY, HOOK_NVML,   \
      call_only, nvml_view, (vnvml_device device, struct vnvml_memory *m), (device, m))  \
    X(nvmlDeviceGetMemoryInfo_v2, vnvml_pfn_memory_info_v2, NULL, 0, 0, HOOK_ANY,        \
      HOOK_NVML, call_only, nvml_view_v2,                                                \
      (vnvml_device device, struct vnvml_memory_v2 *m),                                  \
      (device, m))

/* hooks.c: the ends of contexts, after which a context's handle may name
** another device's context (the per-thread device cache forgets them) */
#define PRELOAD_HOOKS_CTX(X)                                                             \
    X(cuCtxDestroy_v2, vcu_pfn_cuCtxDestroy, "cuCtxDestroy", 4000, 0, HOOK_ANY,          \
      HOOK_CUDA, ctx_ending, ctx_ended, (vcu_context ctx), (ctx))                        \
    X(cuDevicePrimaryCtxRelease_v2, vcu_pfn_cuDevicePrimaryCtxRelease,                  \
      "cuDevicePrimaryCtxRelease", 11000, 0, HOOK_ANY, HOOK_CUDA, ctx_ending, ctx_ended,  \
      (vcu_device dev), (dev))                                                           \
    X(cuDevicePrimaryCtxReset_v2, vcu_pfn_cuDevicePrimaryCtxReset,                      \
      "cuDevicePrimaryCtxReset", 11000, 0, HOOK_ANY, HOOK_CUDA, ctx_ending, ctx_ended,   \
      (vcu_device dev), (dev))

/* hooks_ptr.c: device pointers */
#define PRELOAD_HOOKS_PTR(X)                                                             \
    X(cuMemAlloc_v2, vcu_pfn_cuMemAlloc, "cuMemAlloc", 3020, 0, HOOK_ANY, HOOK_CUDA,     \
      ptr_reserve, ptr_granted, (vcu_deviceptr *dptr, size_t bytesize),                  \
      (dptr, bytesize))                                                                  \
    X(cuMemAllocPitch_v2, vcu_pfn_cuMemAllocPitch, "cuMemAllocPitch", 3020, 0,           \
      HOOK_ANY, HOOK_CUDA, pitch_reserve, pitch_granted,                                 \
      (vcu_deviceptr *dptr, size_t *pitch, size_t widthInBytes, size_t height,           \
       unsigned int elementSizeBytes),                                                   \
      (dptr, pitch, widthInBytes, height, elementSizeBytes))                             \
    X(cuMemFree_v2, vcu_pfn_cuMemFree, "cuMemFree", 3020, 0, HOOK_ANY, HOOK_CUDA,        \
      ptr_take, taken_freed, (vcu_deviceptr dptr), (dptr))                               \
    X(cuMemAllocManaged, vcu_pfn_cuMemAllocManaged, "cuMemAllocManaged", 6000, 0,        \
      HOOK_ANY, HOOK_CUDA, ptr_reserve, ptr_granted,                                     \
      (vcu_deviceptr *dptr, size_t bytesize, unsigned int flags),                        \
      (dptr, bytesize, flags))                                                           \
    X(cuMemFreeAsync, vcu_pfn_cuMemFreeAsync, "cuMemFreeAsync", 11020, 0, HOOK_LEGACY,   \
      HOOK_CUDA, ptr_take, taken_freed, (vcu_deviceptr dptr, vcu_stream stream),         \
      (dptr, stream))                                                                    \
    X(cuMemFreeAsync_ptsz, vcu_pfn_cuMemFreeAsync, "cuMemFreeAsync", 11020, 0,           \
      HOOK_PTSZ, HOOK_CUDA, ptr_take, taken_freed,                                       \
      (vcu_deviceptr dptr, vcu_stream stream), (dptr, stream))                           \
    X(cuIpcGetMemHandle, vcu_pfn_cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, 0,        \
      HOOK_ANY, HOOK_CUDA, call_only, ptr_exported,                                      \
      (vcu_ipc_mem_handle *pHandle, vcu_deviceptr dptr), (pHandle, dptr))

/* hooks_pool.c: stream-ordered allocation and its pools */
#define PRELOAD_HOOKS_POOL(X)                                                            \
    X(cuMemAllocAsync, vcu_pfn_cuMemAllocAsync, "cuMemAllocAsync", 11020, 0,             \
      HOOK_LEGACY, HOOK_CUDA, async_reserve, pooled_granted,                             \
      (vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream),                         \
      (dptr, bytesize, stream))                                                          \
    X(cuMemAllocAsync_ptsz, vcu_pfn_cuMemAllocAsync, "cuMemAllocAsync", 11020, 0,        \
      HOOK_PTSZ, HOOK_CUDA, async_reserve, pooled_granted,                               \
      (vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream),                         \
      (dptr, bytesize, stream))                                                          \
    X(cuMemAllocFromPoolAsync, vcu_pfn_cuMemAllocFromPoolAsync,                          \
      "cuMemAllocFromPoolAsync", 11020, 0, HOOK_LEGACY, HOOK_CUDA, from_pool_reserve,    \
      pooled_granted,                                                                    \
      (vcu_deviceptr *dptr, size_t bytesize, vcu_mem_pool pool, vcu_stream stream),      \
      (dptr, bytesize, pool, stream))                                                    \
    X(cuMemAllocFromPoolAsync_ptsz, vcu_pfn_cuMemAllocFromPoolAsync,                     \
      "cuMemAllocFromPoolAsync", 11020, 0, HOOK_PTSZ, HOOK_CUDA, from_pool_reserve,      \
      pooled_granted,                                                                    \
      (vcu_deviceptr *dptr, size_t bytesize, vcu_mem_pool pool, vcu_stream stream),      \
      (dptr, bytesize, pool, stream))                                                    \
    X(cuMemPoolCreate, vcu_pfn_cuMemPoolCreate, "cuMemPoolCreate", 11020, 0, HOOK_ANY,   \
      HOOK_CUDA, call_only, pool_created,                                                \
      (vcu_mem_pool *pool, const vcu_mem_pool_props *poolProps), (pool, poolProps))      \
    X(cuMemPoolDestroy, vcu_pfn_cuMemPoolDestroy, "cuMemPoolDestroy", 11020, 0,          \
      HOOK_ANY, HOOK_CUDA, pool_destroying, pool_destroyed, (vcu_mem_pool pool), (pool)) \
    X(cuMemPoolTrimTo, vcu_pfn_cuMemPoolTrimTo, "cuMemPoolTrimTo", 11020, 0, HOOK_ANY,   \
      HOOK_CUDA, call_only, pool_trimmed, (vcu_mem_pool pool, size_t minBytesToKeep),    \
      (pool, minBytesToKeep))                                                            \
    X(cuDeviceSetMemPool, vcu_pfn_cuDeviceSetMemPool, "cuDeviceSetMemPool", 11020, 0,    \
      HOOK_ANY, HOOK_CUDA, call_only, device_pool_set,                                   \
      (vcu_device dev, vcu_mem_pool pool), (dev, pool))                                  \
    X(cuMemSetMemPool, vcu_pfn_cuMemSetMemPool, "cuMemSetMemPool", 13000, 0, HOOK_ANY,   \
      HOOK_CUDA, call_only, location_pool_set,                                           \
      (vcu_mem_location *location, vcu_mem_allocation_type type, vcu_mem_pool pool),     \
      (location, type, pool))

/* hooks_graph.c: the memory of graphs' allocation nodes */
#define PRELOAD_HOOKS_GRAPH(X)                                                           \
    X(cuGraphInstantiate_v2, vcu_pfn_cuGraphInstantiate_v2, "cuGraphInstantiate", 11000, \
      12000, HOOK_ANY, HOOK_CUDA, instantiate_v2_reserve, instantiate_granted,           \
      (vcu_graph_exec *phGraphExec, vcu_graph hGraph, vcu_graph_node *phErrorNode,       \
       char *logBuffer, size_t bufferSize),                                              \
      (phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize))                         \
    X(cuGraphInstantiateWithFlags, vcu_pfn_cuGraphInstantiateWithFlags,                  \
      "cuGraphInstantiateWithFlags", 11040, 0, HOOK_ANY, HOOK_CUDA,                      \
      instantiate_flags_reserve, instantiate_granted,                                    \
      (vcu_graph_exec *phGraphExec, vcu_graph hGraph, unsigned long long flags),         \
      (phGraphExec, hGraph, flags))                                                      \
    X(cuGraphInstantiateWithParams, vcu_pfn_cuGraphInstantiateWithParams,                \
      "cuGraphInstantiateWithParams", 12000, 0, HOOK_LEGACY, HOOK_CUDA,                  \
      instantiate_params_reserve, instantiate_granted,                                   \
      (vcu_graph_exec *phGraphExec, vcu_graph hGraph,                                    \
       vcu_graph_instantiate_params *instantiateParams),                                 \
      (phGraphExec, hGraph, instantiateParams))                                          \
    X(cuGraphInstantiateWithParams_ptsz, vcu_pfn_cuGraphInstantiateWithParams,           \
      "cuGraphInstantiateWithParams", 12000, 0, HOOK_PTSZ, HOOK_CUDA,                    \
      instantiate_params_reserve, instantiate_granted,                                   \
      (vcu_graph_exec *phGraphExec, vcu_graph hGraph,                                    \
       vcu_graph_instantiate_params *instantiateParams),                                 \
      (phGraphExec, hGraph, instantiateParams))                                          \
    X(cuGraphLaunch, vcu_pfn_cuGraphLaunch, "cuGraphLaunch", 10000, 0, HOOK_LEGACY,      \
      HOOK_CUDA, launch_reserve, launch_granted,                                         \
      (vcu_graph_exec hGraphExec, vcu_stream hStream), (hGraphExec, hStream))            \
    X(cuGraphLaunch_ptsz, vcu_pfn_cuGraphLaunch, "cuGraphLaunch", 10000, 0, HOOK_PTSZ,   \
      HOOK_CUDA, launch_reserve, launch_granted,                                         \
      (vcu_graph_exec hGraphExec, vcu_stream hStream), (hGraphExec, hStream))            \
    X(cuGraphUpload, vcu_pfn_cuGraphUpload, "cuGraphUpload", 11010, 0, HOOK_LEGACY,      \
      HOOK_CUDA, launch_reserve, launch_granted,                                         \
      (vcu_graph_exec hGraphExec, vcu_stream hStream), (hGraphExec, hStream))            \
    X(cuGraphUpload_ptsz, vcu_pfn_cuGraphUpload, "cuGraphUpload", 11010, 0, HOOK_PTSZ,   \
      HOOK_CUDA, launch_reserve, launch_granted,                                         \
      (vcu_graph_exec hGraphExec, vcu_stream hStream), (hGraphExec, hStream))            \
    X(cuGraphExecDestroy, vcu_pfn_cuGraphExecDestroy, "cuGraphExecDestroy", 10000, 0,    \
      HOOK_ANY, HOOK_CUDA, exec_take, exec_destroyed, (vcu_graph_exec hGraphExec),       \
      (hGraphExec))                                                                      \
    X(cuDeviceGraphMemTrim, vcu_pfn_cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 11040, \
      0, HOOK_ANY, HOOK_CUDA, graph_trimming, graph_trimmed, (vcu_device device),        \
      (device))

/* hooks_vmm.c: virtual memory */
#define PRELOAD_HOOKS_VMM(X)                                                             \
    X(cuMemCreate, vcu_pfn_cuMemCreate, "cuMemCreate", 10020, 0, HOOK_ANY, HOOK_CUDA,    \
      handle_reserve, handle_granted,                                                    \
      (vcu_mem_handle *handle, size_t size, const vcu_mem_allocation_prop *prop,         \
       unsigned long long flags),                                                        \
      (handle, size, prop, flags))                                                       \
    X(cuMemRelease, vcu_pfn_cuMemRelease, "cuMemRelease", 10020, 0, HOOK_ANY, HOOK_CUDA, \
      handle_unref, handle_released, (vcu_mem_handle handle), (handle))                  \
    X(cuMemRetainAllocationHandle, vcu_pfn_cuMemRetainAllocationHandle,                  \
      "cuMemRetainAllocationHandle", 11000, 0, HOOK_ANY, HOOK_CUDA, call_only,           \
      handle_retained, (vcu_mem_handle *handle, void *addr), (handle, addr))             \
    X(cuMemMap, vcu_pfn_cuMemMap, "cuMemMap", 10020, 0, HOOK_ANY, HOOK_CUDA, map_reserve, \
      map_granted,                                                                       \
      (vcu_deviceptr ptr, size_t size, size_t offset, vcu_mem_handle handle,             \
       unsigned long long flags),                                                        \
      (ptr, size, offset, handle, flags))                                                \
    X(cuMemUnmap, vcu_pfn_cuMemUnmap, "cuMemUnmap", 10020, 0, HOOK_ANY, HOOK_CUDA,       \
      unmap_take, unmap_done, (vcu_deviceptr ptr, size_t size), (ptr, size))             \
    X(cuMemExportToShareableHandle, vcu_pfn_cuMemExportToShareableHandle,                \
      "cuMemExportToShareableHandle", 10020, 0, HOOK_ANY, HOOK_CUDA, call_only,          \
      handle_exported,                                                                   \
      (void *shareableHandle, vcu_mem_handle handle, vcu_mem_handle_type handleType,     \
       unsigned long long flags),                                                        \
      (shareableHandle, handle, handleType, flags))

/* hooks_array.c: arrays */
#define PRELOAD_HOOKS_ARRAY(X)                                                           \
    X(cuArrayCreate_v2, vcu_pfn_cuArrayCreate, "cuArrayCreate", 3020, 0, HOOK_ANY,       \
      HOOK_CUDA, array_reserve, array_granted,                                           \
      (vcu_array *array, const vcu_array_descriptor *desc), (array, desc))               \
    X(cuArray3DCreate_v2, vcu_pfn_cuArray3DCreate, "cuArray3DCreate", 3020, 0,           \
      HOOK_ANY, HOOK_CUDA, array3d_reserve, array_granted,                               \
      (vcu_array *array, const vcu_array3d_descriptor *desc), (array, desc))             \
    X(cuArrayDestroy, vcu_pfn_cuArrayDestroy, "cuArrayDestroy", 2000, 0, HOOK_ANY,       \
      HOOK_CUDA, array_take, taken_freed, (vcu_array array), (array))                    \
    X(cuMipmappedArrayCreate, vcu_pfn_cuMipmappedArrayCreate, "cuMipmappedArrayCreate",  \
      5000, 0, HOOK_ANY, HOOK_CUDA, mipmap_reserve, mipmap_granted,                      \
      (vcu_mipmapped_array *pHandle, const vcu_array3d_descriptor *pMipmappedArrayDesc,  \
       unsigned int numMipmapLevels),                                                    \
      (pHandle, pMipmappedArrayDesc, numMipmapLevels))                                   \
    X(cuMipmappedArrayDestroy, vcu_pfn_cuMipmappedArrayDestroy,                          \
      "cuMipmappedArrayDestroy", 5000, 0, HOOK_ANY, HOOK_CUDA, mipmap_take, taken_freed, \
      (vcu_mipmapped_array hMipmappedArray), (hMipmappedArray))

/* hooks_host.c: pinned host memory */
#define PRELOAD_HOOKS_HOST(X)                                                            \
    X(cuMemAllocHost_v2, vcu_pfn_cuMemAllocHost, "cuMemAllocHost", 3020, 0, HOOK_ANY,    \
      HOOK_CUDA, call_only, host_allocated, (void **pp, size_t bytesize),                \
      (pp, bytesize))                                                                    \
    X(cuMemHostAlloc, vcu_pfn_cuMemHostAlloc, "cuMemHostAlloc", 2020, 0, HOOK_ANY,       \
      HOOK_CUDA, call_only, host_allocated,                                              \
      (void **pp, size_t bytesize, unsigned int Flags), (pp, bytesize, Flags))           \
    X(cuMemFreeHost, vcu_pfn_cuMemFreeHost, "cuMemFreeHost", 2000, 0, HOOK_ANY,          \
      HOOK_CUDA, host_take, taken_freed, (void *p), (p))                                 \
    X(cuMemHostRegister_v2, vcu_pfn_cuMemHostRegister, "cuMemHostRegister", 6050, 0,     \
      HOOK_ANY, HOOK_CUDA, call_only, host_registered,                                   \
      (void *p, size_t bytesize, unsigned int Flags), (p, bytesize, Flags))              \
    X(cuMemHostUnregister, vcu_pfn_cuMemHostUnregister, "cuMemHostUnregister", 4000, 0,  \
      HOOK_ANY, HOOK_CUDA, host_take, taken_freed, (void *p), (p))
/* clang-format on */

#ifndef PRELOAD_HOOKS_LIST_ONLY

#include <stdint.h>

#include "driver/cuda_api.h"
#include "driver/nvml_api.h"

enum hook_stream { HOOK_ANY, HOOK_LEGACY, HOOK_PTSZ };
enum hook_lib { HOOK_CUDA, HOOK_NVML };

/* HOOK_ID_cuMemAlloc_v2, ...: each row's index. */
enum hook_id {
#define X(symbol, type, asked, since, until, stream, lib, before, after, params, args)   \
    HOOK_ID_##symbol,
    PRELOAD_HOOKS(X)
#undef X
        HOOK_COUNT
};

/* The hooks, each declared with its row's type: a definition that drifts
** from the driver's signature does not compile. */
#define PRELOAD_EXPORT __attribute__((visibility("default")))
#define X(symbol, type, asked, since, until, stream, lib, before, after, params, args)   \
    PRELOAD_EXPORT extern __typeof__(*(type)0) symbol;
PRELOAD_HOOKS(X)
#undef X

/* ------------------------------------------------------------------ */
/* hooks.c                                                              */
/* ------------------------------------------------------------------ */

/*
** What the library does in this process, decided once, at the first call
** that needs to know (preload_mode runs the initialization):
**   PASSIVE   no quota and no group: dlsym and cuGetProcAddress hand out
**             the real functions, exported hooks forward at once;
**   ACTIVE    every allocation is counted in the group's ledger and
**             refused past the quota;
**   DISABLED  a setting is malformed or the ledger cannot be opened: every
**             hook fails with CUDA_ERROR_NOT_INITIALIZED, so CUDA never
**             starts (fail closed), and one line said why.
*/
enum preload_mode { PRELOAD_PASSIVE = 1, PRELOAD_ACTIVE = 2, PRELOAD_DISABLED = 3 };

/* The mode, initializing the library on the first call (thread-safe; does
** not call the driver). */
enum preload_mode preload_mode(void);

/* ------------------------------------------------------------------ */
/* interpose.c                                                          */
/* ------------------------------------------------------------------ */

/*
** The real function behind hook ID: the one the driver's own
** cuGetProcAddress or dlsym last returned for it, else the library's
** export (looked up after ours, then in an already loaded libcuda.so.1 /
** libnvidia-ml.so.1). NULL when there is none; never our own hook.
*/
void *interpose_real(enum hook_id id);

/* The exported name of hook ID, e.g. "cuMemAlloc_v2" (static). */
const char *hook_name(enum hook_id id);

/* A real function of the driver (LIB HOOK_CUDA) or of NVML that is not
** hooked, e.g. "cuCtxGetDevice", found the same way. NULL if missing. */
void *interpose_lib_sym(enum hook_lib lib, const char *name);

#endif /* PRELOAD_HOOKS_LIST_ONLY */

#endif
