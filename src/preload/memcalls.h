/* SPDX-License-Identifier: MIT */
/*
** memcalls.h -- every CUDA driver entry point that can make the device
** hold memory, or change how long it holds it, classified: how the quota
** accounts for it, or why it need not. A new entry point cannot be added
** to the driver's API without landing here:
**   - tests/unit/test_memcalls.c (`make test`): the names this table says
**     are hooked are exactly the names PRELOAD_HOOKS (hooks.h) asks
**     cuGetProcAddress for, each once;
**   - tests/gpu/check_memcalls.py (where the SDK's cuda.h is installed):
**     every function of cuda.h whose name is in one of the families of
**     PRELOAD_MEMORY_FAMILIES is in the table, and every versioned or
**     per-thread variant cuda.h declares of a hooked name is a row of
**     PRELOAD_HOOKS (a cuMemAlloc_v3 would fail it until it is hooked).
**
** X(name, how, why): NAME is the base name cuGetProcAddress is asked for
** (cuMemAlloc for cuMemAlloc_v2 and the v1; cuMemAllocAsync for its _ptsz
** twin). HOW:
**   MEM_HOOKED   hooked (hooks.h): WHY says what its steps count;
**   MEM_CONTEXT  not hooked: what it makes the device hold belongs to the
**                process's context and is charged through it, NVML's
**                per-process figure (docs/POLICY.md, "Contexts count");
**   MEM_OTHER    not hooked: the memory is another process's or another
**                API's, or already charged where it was made (WHY says);
**   MEM_NONE     not hooked: makes the device hold nothing (WHY says).
** Read by the preprocessor alone in the checks: nothing but the lists.
*/
#ifndef VRAM_PRELOAD_MEMCALLS_H
#define VRAM_PRELOAD_MEMCALLS_H

/* clang-format off */
#define PRELOAD_MEMORY_CALLS(X)                                                          \
    /* device pointers (hooks_ptr.c) */                                                  \
    X(cuMemAlloc, MEM_HOOKED, "rounded as the driver holds it: above 1 MiB to 2 MiB, "  \
      "below by the 2 MiB pages of its sub-allocator")                                   \
    X(cuMemAllocPitch, MEM_HOOKED, "pitch x height, rounded as cuMemAlloc")               \
    X(cuMemAllocManaged, MEM_HOOKED, "whole, as device memory, rounded as cuMemAlloc")   \
    X(cuMemFree, MEM_HOOKED, "gives back what the allocation was charged")               \
    X(cuMemFreeAsync, MEM_HOOKED, "a pointer's charge back; a pool's reserve stays")     \
    X(cuIpcGetMemHandle, MEM_HOOKED, "the allocation stays charged until the process "   \
      "ends: an importer may keep it alive")                                             \
    /* stream-ordered pools (hooks_pool.c) */                                            \
    X(cuMemAllocAsync, MEM_HOOKED, "its pool's reserve, charged ahead by the size in "   \
      "32 MiB chunks and settled from RESERVED_MEM_CURRENT")                             \
    X(cuMemAllocFromPoolAsync, MEM_HOOKED, "as cuMemAllocAsync, in the named pool")      \
    X(cuMemPoolCreate, MEM_HOOKED, "the pool is followed from its creation")             \
    X(cuMemPoolDestroy, MEM_HOOKED, "its reserve back, or kept while allocations live")  \
    X(cuMemPoolTrimTo, MEM_HOOKED, "settles the pool's reserve")                         \
    X(cuDeviceSetMemPool, MEM_HOOKED, "which pool cuMemAllocAsync charges")              \
    X(cuMemSetMemPool, MEM_HOOKED, "which pool cuMemAllocAsync charges (CUDA 13)")       \
    X(cuDeviceGetMemPool, MEM_NONE, "a query")                                           \
    X(cuDeviceGetDefaultMemPool, MEM_NONE, "a query")                                    \
    X(cuMemGetMemPool, MEM_NONE, "a query")                                              \
    X(cuMemGetDefaultMemPool, MEM_NONE, "a query")                                       \
    X(cuMemPoolGetAttribute, MEM_NONE, "a query")                                        \
    X(cuMemPoolSetAttribute, MEM_NONE, "the release threshold: the reserve is read, "    \
      "whatever keeps it")                                                               \
    X(cuMemPoolSetAccess, MEM_NONE, "access of other devices to the same memory")        \
    X(cuMemPoolGetAccess, MEM_NONE, "a query")                                           \
    X(cuMemPoolExportToShareableHandle, MEM_NONE, "exports the pool, which stays "      \
      "charged here")                                                                    \
    X(cuMemPoolExportPointer, MEM_NONE, "exports an allocation of a pool charged here")  \
    X(cuMemPoolImportFromShareableHandle, MEM_OTHER, "the exporter's pool; an imported " \
      "pool cannot allocate")                                                            \
    X(cuMemPoolImportPointer, MEM_OTHER, "the exporter's memory (NVML charges the "      \
      "exporter)")                                                                       \
    /* graphs (hooks_graph.c) */                                                         \
    X(cuGraphInstantiate, MEM_HOOKED, "the CUDA 11 ABI: the graph's allocation nodes "   \
      "walked for what a launch may map")                                                \
    X(cuGraphInstantiateWithFlags, MEM_HOOKED, "as cuGraphInstantiate; charged at once " \
      "with the upload flag")                                                            \
    X(cuGraphInstantiateWithParams, MEM_HOOKED, "as cuGraphInstantiateWithFlags")        \
    X(cuGraphLaunch, MEM_HOOKED, "the first launch charged ahead what the graph maps, "  \
      "the graph pool settled")                                                          \
    X(cuGraphUpload, MEM_HOOKED, "as cuGraphLaunch")                                     \
    X(cuGraphExecDestroy, MEM_HOOKED, "forgets the graph; its memory stays in the pool") \
    X(cuDeviceGraphMemTrim, MEM_HOOKED, "settles the graph pool")                        \
    X(cuGraphAddMemAllocNode, MEM_NONE, "a node: nothing is held until a launch")       \
    X(cuGraphAddMemFreeNode, MEM_NONE, "a node")                                         \
    X(cuGraphMemAllocNodeGetParams, MEM_NONE, "a query")                                 \
    X(cuGraphMemFreeNodeGetParams, MEM_NONE, "a query")                                  \
    X(cuGraphAddNode, MEM_NONE, "a node, an allocation node too: walked at "            \
      "instantiation")                                                                   \
    X(cuGraphNodeSetParams, MEM_NONE, "a node's parameters, walked at instantiation")    \
    X(cuGraphAddChildGraphNode, MEM_NONE, "a child graph, walked at instantiation")      \
    X(cuGraphClone, MEM_NONE, "a graph with allocation nodes cannot be cloned")          \
    X(cuGraphExecUpdate, MEM_NONE, "allocation nodes cannot be updated: the bound "      \
      "taken at instantiation stands")                                                   \
    X(cuGraphExecNodeSetParams, MEM_NONE, "as cuGraphExecUpdate")                        \
    X(cuGraphExecChildGraphNodeSetParams, MEM_NONE, "as cuGraphExecUpdate")             \
    X(cuDeviceGetGraphMemAttribute, MEM_NONE, "a query")                                 \
    X(cuDeviceSetGraphMemAttribute, MEM_NONE, "resets the high-water marks")             \
    X(cuStreamBeginCapture, MEM_NONE, "allocations captured become nodes, held at "     \
      "launch")                                                                          \
    X(cuStreamBeginCaptureToGraph, MEM_NONE, "as cuStreamBeginCapture")                  \
    X(cuStreamEndCapture, MEM_NONE, "makes a graph, walked at instantiation")            \
    /* virtual memory (hooks_vmm.c) */                                                   \
    X(cuMemCreate, MEM_HOOKED, "its size, until it is released and unmapped")            \
    X(cuMemRelease, MEM_HOOKED, "one reference fewer")                                   \
    X(cuMemRetainAllocationHandle, MEM_HOOKED, "one reference more")                     \
    X(cuMemMap, MEM_HOOKED, "a mapping keeps the handle's memory")                       \
    X(cuMemUnmap, MEM_HOOKED, "the handle's memory goes with its last mapping")          \
    X(cuMemExportToShareableHandle, MEM_HOOKED, "the handle stays charged until the "    \
      "process ends: an importer may keep it alive")                                     \
    X(cuMemImportFromShareableHandle, MEM_OTHER, "the exporter's memory (NVML charges "  \
      "the exporter, as for IPC)")                                                       \
    X(cuMemAddressReserve, MEM_NONE, "address space only")                               \
    X(cuMemAddressFree, MEM_NONE, "address space only")                                  \
    X(cuMemSetAccess, MEM_NONE, "access to memory charged at cuMemCreate")               \
    X(cuMemGetAccess, MEM_NONE, "a query")                                               \
    X(cuMemGetAllocationGranularity, MEM_NONE, "a query")                                \
    X(cuMemGetAllocationPropertiesFromHandle, MEM_NONE, "a query")                       \
    X(cuMemMapArrayAsync, MEM_NONE, "maps handles charged at cuMemCreate into sparse "   \
      "arrays")                                                                          \
    /* arrays (hooks_array.c) */                                                         \
    X(cuArrayCreate, MEM_HOOKED, "its deferred twin's requirements, rounded to 2 MiB")   \
    X(cuArray3DCreate, MEM_HOOKED, "as cuArrayCreate; sparse and deferred: nothing")     \
    X(cuArrayDestroy, MEM_HOOKED, "gives the charge back")                               \
    X(cuMipmappedArrayCreate, MEM_HOOKED, "as cuArrayCreate, every level")               \
    X(cuMipmappedArrayDestroy, MEM_HOOKED, "gives the charge back")                      \
    X(cuArrayGetDescriptor, MEM_NONE, "a query")                                         \
    X(cuArray3DGetDescriptor, MEM_NONE, "a query")                                       \
    X(cuArrayGetMemoryRequirements, MEM_NONE, "a query")                                 \
    X(cuArrayGetPlane, MEM_NONE, "a view of an array charged at its creation")           \
    X(cuArrayGetSparseProperties, MEM_NONE, "a query")                                   \
    X(cuMipmappedArrayGetLevel, MEM_NONE, "a view of a level charged at its creation")   \
    X(cuMipmappedArrayGetMemoryRequirements, MEM_NONE, "a query")                        \
    X(cuMipmappedArrayGetSparseProperties, MEM_NONE, "a query")                          \
    /* pinned host memory (hooks_host.c): shown, never a quota */                        \
    X(cuMemAllocHost, MEM_HOOKED, "host memory: counted for display")                    \
    X(cuMemHostAlloc, MEM_HOOKED, "host memory: counted for display")                    \
    X(cuMemFreeHost, MEM_HOOKED, "host memory")                                          \
    X(cuMemHostRegister, MEM_HOOKED, "host memory: counted for display")                 \
    X(cuMemHostUnregister, MEM_HOOKED, "host memory")                                    \
    X(cuMemHostGetDevicePointer, MEM_NONE, "a view of host memory")                      \
    X(cuMemHostGetFlags, MEM_NONE, "a query")                                            \
    /* reports and contexts (hooks_info.c, hooks.c) */                                   \
    X(cuInit, MEM_HOOKED, "fails in a process whose settings are malformed")             \
    X(cuMemGetInfo, MEM_HOOKED, "reports the quota")                                     \
    X(cuDeviceTotalMem, MEM_HOOKED, "reports the quota")                                 \
    X(cuCtxDestroy, MEM_HOOKED, "a context ends: the device cache forgets it")           \
    X(cuDevicePrimaryCtxRelease, MEM_HOOKED, "as cuCtxDestroy")                          \
    X(cuDevicePrimaryCtxReset, MEM_HOOKED, "as cuCtxDestroy")                            \
    X(cuDevicePrimaryCtxRetain, MEM_CONTEXT, "a primary context (518 MiB on an H100)")   \
    X(cuDevicePrimaryCtxSetFlags, MEM_NONE, "flags of a context charged as one")        \
    X(cuDevicePrimaryCtxGetState, MEM_NONE, "a query")                                   \
    X(cuCtxCreate, MEM_CONTEXT, "another context (518 MiB more on an H100)")             \
    X(cuCtxAttach, MEM_CONTEXT, "a context")                                             \
    X(cuCtxDetach, MEM_CONTEXT, "a context")                                             \
    X(cuCtxSetLimit, MEM_CONTEXT, "the malloc heap, stacks and printf FIFO of the "      \
      "context, held from the next launch")                                              \
    X(cuGreenCtxCreate, MEM_CONTEXT, "a green context")                                  \
    X(cuGreenCtxDestroy, MEM_CONTEXT, "a green context")                                 \
    X(cuGreenCtxStreamCreate, MEM_CONTEXT, "a stream of a green context")                \
    X(cuCtxFromGreenCtx, MEM_CONTEXT, "a context")                                       \
    X(cuModuleLoad, MEM_CONTEXT, "code and __device__ globals")                          \
    X(cuModuleLoadData, MEM_CONTEXT, "code and __device__ globals")                      \
    X(cuModuleLoadDataEx, MEM_CONTEXT, "code and __device__ globals")                    \
    X(cuModuleLoadFatBinary, MEM_CONTEXT, "code and __device__ globals")                 \
    X(cuModuleUnload, MEM_CONTEXT, "code and __device__ globals")                        \
    X(cuLibraryLoadData, MEM_CONTEXT, "code and __device__ globals, loaded lazily")      \
    X(cuLibraryLoadFromFile, MEM_CONTEXT, "code and __device__ globals, loaded lazily")  \
    X(cuLibraryUnload, MEM_CONTEXT, "code and __device__ globals")                       \
    /* memory of another process or API */                                               \
    X(cuIpcOpenMemHandle, MEM_OTHER, "the exporter's memory (measured on an H100: the "  \
      "importer's NVML figure does not grow)")                                           \
    X(cuIpcCloseMemHandle, MEM_OTHER, "the exporter's memory")                           \
    X(cuIpcGetEventHandle, MEM_NONE, "an event")                                         \
    X(cuIpcOpenEventHandle, MEM_NONE, "an event")                                        \
    X(cuImportExternalMemory, MEM_OTHER, "Vulkan's, Direct3D's or another process's "    \
      "memory, charged by NVML where it was made")                                       \
    X(cuExternalMemoryGetMappedBuffer, MEM_OTHER, "a view of imported memory")           \
    X(cuExternalMemoryGetMappedMipmappedArray, MEM_OTHER, "a view of imported memory")   \
    X(cuDestroyExternalMemory, MEM_OTHER, "imported memory")                             \
    X(cuGraphicsMapResources, MEM_OTHER, "OpenGL's, Vulkan's or EGL's memory")           \
    X(cuGraphicsUnmapResources, MEM_OTHER, "graphics interop")                           \
    X(cuGraphicsUnregisterResource, MEM_OTHER, "graphics interop")                       \
    X(cuGraphicsResourceGetMappedPointer, MEM_OTHER, "graphics interop")                 \
    X(cuGraphicsResourceGetMappedMipmappedArray, MEM_OTHER, "graphics interop")          \
    X(cuGraphicsResourceSetMapFlags, MEM_OTHER, "graphics interop")                      \
    X(cuGraphicsSubResourceGetMappedArray, MEM_OTHER, "graphics interop")                \
    /* the rest of the cuMem family */                                                   \
    X(cuMemAdvise, MEM_NONE, "where managed pages live, charged whole")                  \
    X(cuMemPrefetchAsync, MEM_NONE, "moves managed pages, charged whole")                \
    X(cuMemPrefetchBatchAsync, MEM_NONE, "moves managed pages, charged whole")           \
    X(cuMemDiscardBatchAsync, MEM_NONE, "drops managed pages' contents")                 \
    X(cuMemDiscardAndPrefetchBatchAsync, MEM_NONE, "moves managed pages, charged whole") \
    X(cuMemRangeGetAttribute, MEM_NONE, "a query")                                       \
    X(cuMemRangeGetAttributes, MEM_NONE, "a query")                                      \
    X(cuMemGetAddressRange, MEM_NONE, "a query")                                         \
    X(cuMemGetHandleForAddressRange, MEM_NONE, "exports a range for RDMA, charged here") \
    X(cuMemBatchDecompressAsync, MEM_NONE, "works in memory already held")

/*
** The families of names the GPU-side check holds cuda.h to (Python
** regular expressions on the base name): every match must be a row above.
*/
#define PRELOAD_MEMORY_FAMILIES(F)                                                       \
    F("^cuMem(?!cpy|set)")                                                               \
    F("^cuArray")                                                                        \
    F("^cuMipmappedArray")                                                               \
    F("^cuGraph(Instantiate|Launch|Upload|AddMem(Alloc|Free)|MemAlloc|MemFree|AddNode|"  \
      "AddChildGraphNode|NodeSetParams|Clone|ExecUpdate|ExecNodeSetParams|"              \
      "ExecChildGraphNodeSetParams|ExecDestroy)")                                        \
    F("^cuDevice\\w*(MemPool|GraphMem)")                                                 \
    F("^cuStream(BeginCapture|EndCapture)")                                              \
    F("^cuIpc")                                                                          \
    F("^cu(Import|Destroy)ExternalMemory|^cuExternalMemory")                            \
    F("^cuGraphics")                                                                     \
    F("^cuCtx(Create|Destroy|Attach|Detach|SetLimit|FromGreenCtx)")                     \
    F("^cuDevicePrimaryCtx")                                                             \
    F("^cuGreenCtx(Create|Destroy|StreamCreate)")                                        \
    F("^cu(Module|Library)(Load|Unload)")                                                \
    F("^cuInit$|^cuDeviceTotalMem$")
/* clang-format on */

#endif
