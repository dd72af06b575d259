/* SPDX-License-Identifier: MIT */
/*
** test_cuda_decls.c -- proof, at compile time, that src/driver/cuda_api.h
** (and, where nvml.h is installed, src/driver/nvml_api.h) declares the
** CUDA driver API exactly as the SDK's cuda.h does: every
** error code and enum value, every struct's size and field offsets, and
** the signature of every entry point of VCU_ENTRY_POINTS and
** VCU_EXTRA_ENTRY_POINTS (generated from the lists themselves, with the
** SDK's types substituted through their T argument). Built only where
** cuda.h is found; running it just returns 0.
*/
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stddef.h>

#include "driver/cuda_api.h"

#define SAME_VALUE(ours, sdk) _Static_assert((long long)(ours) == (long long)(sdk), #ours)
#define SAME_LAYOUT(ours, sdk)                                                           \
    _Static_assert(sizeof(ours) == sizeof(sdk), "sizeof " #ours);                        \
    _Static_assert(_Alignof(ours) == _Alignof(sdk), "alignof " #ours)
#define SAME_FIELD(ours, sdk, field)                                                     \
    _Static_assert(offsetof(ours, field) == offsetof(sdk, field), #ours "." #field);     \
    _Static_assert(sizeof(((ours *)0)->field) == sizeof(((sdk *)0)->field),              \
                   "sizeof " #ours "." #field)
#define SAME_TYPE(ours, sdk)                                                             \
    _Static_assert(__builtin_types_compatible_p(ours, sdk), #ours " is " #sdk)

/* ---- values ---- */
SAME_VALUE(VCU_SUCCESS, CUDA_SUCCESS);
SAME_VALUE(VCU_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME_VALUE(VCU_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME_VALUE(VCU_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
SAME_VALUE(VCU_ERROR_DEINITIALIZED, CUDA_ERROR_DEINITIALIZED);
SAME_VALUE(VCU_ERROR_STUB_LIBRARY, CUDA_ERROR_STUB_LIBRARY);
SAME_VALUE(VCU_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME_VALUE(VCU_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE);
SAME_VALUE(VCU_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT);
SAME_VALUE(VCU_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_HANDLE);
SAME_VALUE(VCU_ERROR_NOT_FOUND, CUDA_ERROR_NOT_FOUND);
SAME_VALUE(VCU_ERROR_NOT_READY, CUDA_ERROR_NOT_READY);
SAME_VALUE(VCU_ERROR_NOT_PERMITTED, CUDA_ERROR_NOT_PERMITTED);
SAME_VALUE(VCU_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED);
SAME_VALUE(VCU_ERROR_UNKNOWN, CUDA_ERROR_UNKNOWN);
SAME_VALUE(VCU_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
SAME_VALUE(VCU_STREAM_CAPTURE_STATUS_NONE, CU_STREAM_CAPTURE_STATUS_NONE);
SAME_VALUE(VCU_STREAM_CAPTURE_STATUS_ACTIVE, CU_STREAM_CAPTURE_STATUS_ACTIVE);
SAME_VALUE(VCU_STREAM_CAPTURE_STATUS_INVALIDATED, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
SAME_VALUE(VCU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_GLOBAL);
SAME_VALUE(VCU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
SAME_VALUE(VCU_STREAM_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_MODE_RELAXED);
SAME_VALUE(VCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
           CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
SAME_VALUE(VCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
           CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
SAME_VALUE(VCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
           CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
SAME_VALUE(VCU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);
SAME_VALUE(VCU_MEM_ALLOCATION_TYPE_INVALID, CU_MEM_ALLOCATION_TYPE_INVALID);
SAME_VALUE(VCU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_ALLOCATION_TYPE_PINNED);
SAME_VALUE(VCU_MEM_ALLOCATION_TYPE_MAX, CU_MEM_ALLOCATION_TYPE_MAX);
SAME_VALUE(VCU_MEM_LOCATION_TYPE_INVALID, CU_MEM_LOCATION_TYPE_INVALID);
SAME_VALUE(VCU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_DEVICE);
SAME_VALUE(VCU_MEM_LOCATION_TYPE_MAX, CU_MEM_LOCATION_TYPE_MAX);
SAME_VALUE(VCU_MEM_HANDLE_TYPE_NONE, CU_MEM_HANDLE_TYPE_NONE);
SAME_VALUE(VCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
SAME_VALUE(VCU_MEM_HANDLE_TYPE_MAX, CU_MEM_HANDLE_TYPE_MAX);
SAME_VALUE(VCU_MEM_ACCESS_FLAGS_PROT_NONE, CU_MEM_ACCESS_FLAGS_PROT_NONE);
SAME_VALUE(VCU_MEM_ACCESS_FLAGS_PROT_READ, CU_MEM_ACCESS_FLAGS_PROT_READ);
SAME_VALUE(VCU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
SAME_VALUE(VCU_MEM_ACCESS_FLAGS_PROT_MAX, CU_MEM_ACCESS_FLAGS_PROT_MAX);
SAME_VALUE(VCU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
SAME_VALUE(VCU_MEM_ALLOC_GRANULARITY_RECOMMENDED, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);

SAME_VALUE(VCU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_GLOBAL);
SAME_VALUE(VCU_AD_FORMAT_UNSIGNED_INT8, CU_AD_FORMAT_UNSIGNED_INT8);
SAME_VALUE(VCU_AD_FORMAT_UNSIGNED_INT16, CU_AD_FORMAT_UNSIGNED_INT16);
SAME_VALUE(VCU_AD_FORMAT_UNSIGNED_INT32, CU_AD_FORMAT_UNSIGNED_INT32);
SAME_VALUE(VCU_AD_FORMAT_SIGNED_INT8, CU_AD_FORMAT_SIGNED_INT8);
SAME_VALUE(VCU_AD_FORMAT_SIGNED_INT16, CU_AD_FORMAT_SIGNED_INT16);
SAME_VALUE(VCU_AD_FORMAT_SIGNED_INT32, CU_AD_FORMAT_SIGNED_INT32);
SAME_VALUE(VCU_AD_FORMAT_HALF, CU_AD_FORMAT_HALF);
SAME_VALUE(VCU_AD_FORMAT_FLOAT, CU_AD_FORMAT_FLOAT);
SAME_VALUE(VCU_AD_FORMAT_MAX, CU_AD_FORMAT_MAX);
SAME_VALUE(VCU_MEMPOOL_ATTR_RELEASE_THRESHOLD, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD);
SAME_VALUE(VCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
SAME_VALUE(VCU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH);
SAME_VALUE(VCU_MEMPOOL_ATTR_USED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
SAME_VALUE(VCU_MEMPOOL_ATTR_USED_MEM_HIGH, CU_MEMPOOL_ATTR_USED_MEM_HIGH);
SAME_VALUE(VCU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
SAME_VALUE(VCU_GRAPH_MEM_ATTR_USED_MEM_HIGH, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH);
SAME_VALUE(VCU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
SAME_VALUE(VCU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH);
SAME_VALUE(VCU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_KERNEL);
SAME_VALUE(VCU_GRAPH_NODE_TYPE_GRAPH, CU_GRAPH_NODE_TYPE_GRAPH);
SAME_VALUE(VCU_GRAPH_NODE_TYPE_EMPTY, CU_GRAPH_NODE_TYPE_EMPTY);
SAME_VALUE(VCU_GRAPH_NODE_TYPE_MEM_ALLOC, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
SAME_VALUE(VCU_GRAPH_NODE_TYPE_MEM_FREE, CU_GRAPH_NODE_TYPE_MEM_FREE);
SAME_VALUE(VCU_GRAPH_NODE_TYPE_CONDITIONAL, CU_GRAPH_NODE_TYPE_CONDITIONAL);
SAME_VALUE(VCU_GRAPH_INSTANTIATE_SUCCESS, CUDA_GRAPH_INSTANTIATE_SUCCESS);
SAME_VALUE(VCU_GRAPH_INSTANTIATE_ERROR, CUDA_GRAPH_INSTANTIATE_ERROR);
SAME_VALUE(VCU_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
           CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
SAME_VALUE(VCU_GRAPH_INSTANTIATE_FLAG_UPLOAD, CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
SAME_VALUE(VCU_ARRAY3D_LAYERED, CUDA_ARRAY3D_LAYERED);
SAME_VALUE(VCU_ARRAY3D_CUBEMAP, CUDA_ARRAY3D_CUBEMAP);
SAME_VALUE(VCU_ARRAY3D_SPARSE, CUDA_ARRAY3D_SPARSE);
SAME_VALUE(VCU_ARRAY3D_DEFERRED_MAPPING, CUDA_ARRAY3D_DEFERRED_MAPPING);
SAME_VALUE(VCU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
SAME_VALUE(VCU_GET_PROC_ADDRESS_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS);
SAME_VALUE(VCU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
SAME_VALUE(VCU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
           CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
SAME_VALUE(VCU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_DEFAULT);
SAME_VALUE(VCU_GET_PROC_ADDRESS_LEGACY_STREAM, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
SAME_VALUE(VCU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);

/* ---- types and layouts ---- */
SAME_LAYOUT(vcu_result, CUresult);
SAME_TYPE(vcu_device, CUdevice);
SAME_TYPE(vcu_deviceptr, CUdeviceptr);
SAME_TYPE(vcu_mem_handle, CUmemGenericAllocationHandle);
SAME_LAYOUT(vcu_context, CUcontext);
SAME_LAYOUT(vcu_stream, CUstream);
SAME_LAYOUT(vcu_event, CUevent);
SAME_LAYOUT(vcu_device_attribute, CUdevice_attribute);
SAME_LAYOUT(vcu_stream_capture_status, CUstreamCaptureStatus);
SAME_LAYOUT(vcu_stream_capture_mode, CUstreamCaptureMode);
SAME_LAYOUT(vcu_granularity_flags, CUmemAllocationGranularity_flags);
SAME_LAYOUT(vcu_mem_allocation_type, CUmemAllocationType);
SAME_LAYOUT(vcu_mem_location_type, CUmemLocationType);
SAME_LAYOUT(vcu_mem_handle_type, CUmemAllocationHandleType);
SAME_LAYOUT(vcu_mem_access_flags, CUmemAccess_flags);

SAME_LAYOUT(vcu_uuid, CUuuid);
SAME_FIELD(vcu_uuid, CUuuid, bytes);

SAME_LAYOUT(vcu_mem_location, CUmemLocation);
SAME_FIELD(vcu_mem_location, CUmemLocation, type);
SAME_FIELD(vcu_mem_location, CUmemLocation, id);

SAME_LAYOUT(vcu_mem_allocation_prop, CUmemAllocationProp);
SAME_FIELD(vcu_mem_allocation_prop, CUmemAllocationProp, type);
SAME_FIELD(vcu_mem_allocation_prop, CUmemAllocationProp, requestedHandleTypes);
SAME_FIELD(vcu_mem_allocation_prop, CUmemAllocationProp, location);
SAME_FIELD(vcu_mem_allocation_prop, CUmemAllocationProp, win32HandleMetaData);
SAME_FIELD(vcu_mem_allocation_prop, CUmemAllocationProp, allocFlags);
SAME_FIELD(vcu_mem_allocation_prop, CUmemAllocationProp, allocFlags.compressionType);
SAME_FIELD(vcu_mem_allocation_prop, CUmemAllocationProp, allocFlags.gpuDirectRDMACapable);
SAME_FIELD(vcu_mem_allocation_prop, CUmemAllocationProp, allocFlags.usage);
SAME_FIELD(vcu_mem_allocation_prop, CUmemAllocationProp, allocFlags.reserved);

SAME_LAYOUT(vcu_mem_access_desc, CUmemAccessDesc);
SAME_FIELD(vcu_mem_access_desc, CUmemAccessDesc, location);
SAME_FIELD(vcu_mem_access_desc, CUmemAccessDesc, flags);

SAME_LAYOUT(vcu_mempool_attribute, CUmemPool_attribute);
SAME_LAYOUT(vcu_graph_mem_attribute, CUgraphMem_attribute);
SAME_LAYOUT(vcu_graph_node_type, CUgraphNodeType);
SAME_LAYOUT(vcu_graph_instantiate_result, CUgraphInstantiateResult);
SAME_LAYOUT(vcu_mipmapped_array, CUmipmappedArray);
SAME_LAYOUT(vcu_graph, CUgraph);
SAME_LAYOUT(vcu_graph_exec, CUgraphExec);
SAME_LAYOUT(vcu_graph_node, CUgraphNode);

SAME_LAYOUT(vcu_mem_pool_props, CUmemPoolProps);
SAME_FIELD(vcu_mem_pool_props, CUmemPoolProps, allocType);
SAME_FIELD(vcu_mem_pool_props, CUmemPoolProps, handleTypes);
SAME_FIELD(vcu_mem_pool_props, CUmemPoolProps, location);
SAME_FIELD(vcu_mem_pool_props, CUmemPoolProps, win32SecurityAttributes);
SAME_FIELD(vcu_mem_pool_props, CUmemPoolProps, maxSize);
SAME_FIELD(vcu_mem_pool_props, CUmemPoolProps, usage);
SAME_FIELD(vcu_mem_pool_props, CUmemPoolProps, reserved);

SAME_LAYOUT(vcu_mem_alloc_node_params, CUDA_MEM_ALLOC_NODE_PARAMS);
SAME_FIELD(vcu_mem_alloc_node_params, CUDA_MEM_ALLOC_NODE_PARAMS, poolProps);
SAME_FIELD(vcu_mem_alloc_node_params, CUDA_MEM_ALLOC_NODE_PARAMS, accessDescs);
SAME_FIELD(vcu_mem_alloc_node_params, CUDA_MEM_ALLOC_NODE_PARAMS, accessDescCount);
SAME_FIELD(vcu_mem_alloc_node_params, CUDA_MEM_ALLOC_NODE_PARAMS, bytesize);
SAME_FIELD(vcu_mem_alloc_node_params, CUDA_MEM_ALLOC_NODE_PARAMS, dptr);

SAME_LAYOUT(vcu_graph_instantiate_params, CUDA_GRAPH_INSTANTIATE_PARAMS);
SAME_FIELD(vcu_graph_instantiate_params, CUDA_GRAPH_INSTANTIATE_PARAMS, flags);
SAME_FIELD(vcu_graph_instantiate_params, CUDA_GRAPH_INSTANTIATE_PARAMS, hUploadStream);
SAME_FIELD(vcu_graph_instantiate_params, CUDA_GRAPH_INSTANTIATE_PARAMS, hErrNode_out);
SAME_FIELD(vcu_graph_instantiate_params, CUDA_GRAPH_INSTANTIATE_PARAMS, result_out);

SAME_LAYOUT(vcu_array_memory_requirements, CUDA_ARRAY_MEMORY_REQUIREMENTS);
SAME_FIELD(vcu_array_memory_requirements, CUDA_ARRAY_MEMORY_REQUIREMENTS, size);
SAME_FIELD(vcu_array_memory_requirements, CUDA_ARRAY_MEMORY_REQUIREMENTS, alignment);
SAME_FIELD(vcu_array_memory_requirements, CUDA_ARRAY_MEMORY_REQUIREMENTS, reserved);

SAME_LAYOUT(vcu_ipc_mem_handle, CUipcMemHandle);
SAME_FIELD(vcu_ipc_mem_handle, CUipcMemHandle, reserved);

SAME_TYPE(vcu_uint64, cuuint64_t);
SAME_LAYOUT(vcu_array, CUarray);
SAME_LAYOUT(vcu_mem_pool, CUmemoryPool);
SAME_LAYOUT(vcu_array_format, CUarray_format);
SAME_LAYOUT(vcu_proc_address_result, CUdriverProcAddressQueryResult);

SAME_LAYOUT(vcu_array_descriptor, CUDA_ARRAY_DESCRIPTOR);
SAME_FIELD(vcu_array_descriptor, CUDA_ARRAY_DESCRIPTOR, Width);
SAME_FIELD(vcu_array_descriptor, CUDA_ARRAY_DESCRIPTOR, Height);
SAME_FIELD(vcu_array_descriptor, CUDA_ARRAY_DESCRIPTOR, Format);
SAME_FIELD(vcu_array_descriptor, CUDA_ARRAY_DESCRIPTOR, NumChannels);

SAME_LAYOUT(vcu_array3d_descriptor, CUDA_ARRAY3D_DESCRIPTOR);
SAME_FIELD(vcu_array3d_descriptor, CUDA_ARRAY3D_DESCRIPTOR, Width);
SAME_FIELD(vcu_array3d_descriptor, CUDA_ARRAY3D_DESCRIPTOR, Height);
SAME_FIELD(vcu_array3d_descriptor, CUDA_ARRAY3D_DESCRIPTOR, Depth);
SAME_FIELD(vcu_array3d_descriptor, CUDA_ARRAY3D_DESCRIPTOR, Format);
SAME_FIELD(vcu_array3d_descriptor, CUDA_ARRAY3D_DESCRIPTOR, NumChannels);
SAME_FIELD(vcu_array3d_descriptor, CUDA_ARRAY3D_DESCRIPTOR, Flags);

/* ---- entry points ---- */
/*
** The list's type names mapped to the SDK's: with these, each entry's
** parameter list spells the SDK's prototype, which must then be the type
** of the SDK's function of that symbol (count, order and type of every
** parameter, and the return type).
*/
#define SDK_result CUresult
#define SDK_device CUdevice
#define SDK_deviceptr CUdeviceptr
#define SDK_context CUcontext
#define SDK_stream CUstream
#define SDK_event CUevent
#define SDK_mem_handle CUmemGenericAllocationHandle
#define SDK_uuid CUuuid
#define SDK_device_attribute CUdevice_attribute
#define SDK_mem_allocation_prop CUmemAllocationProp
#define SDK_mem_access_desc CUmemAccessDesc
#define SDK_granularity_flags CUmemAllocationGranularity_flags
#define SDK_uint64 cuuint64_t
#define SDK_proc_address_result CUdriverProcAddressQueryResult
#define SDK_mem_pool CUmemoryPool
#define SDK_array CUarray
#define SDK_array_descriptor CUDA_ARRAY_DESCRIPTOR
#define SDK_array3d_descriptor CUDA_ARRAY3D_DESCRIPTOR
#define SDK_stream_capture_status CUstreamCaptureStatus
#define SDK_stream_capture_mode CUstreamCaptureMode
#define SDK_mem_handle_type CUmemAllocationHandleType
#define SDK_mem_location CUmemLocation
#define SDK_mem_allocation_type CUmemAllocationType
#define SDK_ipc_mem_handle CUipcMemHandle
#define SDK_mem_pool_props CUmemPoolProps
#define SDK_mempool_attribute CUmemPool_attribute
#define SDK_array_memory_requirements CUDA_ARRAY_MEMORY_REQUIREMENTS
#define SDK_mipmapped_array CUmipmappedArray
#define SDK_graph CUgraph
#define SDK_graph_exec CUgraphExec
#define SDK_graph_node CUgraphNode
#define SDK_graph_node_type CUgraphNodeType
#define SDK_mem_alloc_node_params CUDA_MEM_ALLOC_NODE_PARAMS
#define SDK_graph_instantiate_params CUDA_GRAPH_INSTANTIATE_PARAMS
#define SDK_graph_mem_attribute CUgraphMem_attribute
#define SDK_TYPE(t) SDK_##t

#define CHECK_ENTRY(field, symbol, fallback, need, ret, params)                          \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&symbol), ret(*) params),     \
                   #symbol " has the SDK's signature");
VCU_ENTRY_POINTS(CHECK_ENTRY, SDK_TYPE)
VCU_EXTRA_ENTRY_POINTS(CHECK_ENTRY, SDK_TYPE)
#if CUDA_VERSION >= 13000
VCU_CUDA13_ENTRY_POINTS(CHECK_ENTRY, SDK_TYPE)
#endif

/*
** cuda.h declares the v1 cuGetProcAddress only inside the driver's own
** build, and the _ptsz twins only under CUDA_API_PER_THREAD_DEFAULT_STREAM:
** their types are cudaTypedefs.h's PFN_..., to which the list's SDK-typed
** signatures must be identical (the twins share their base's type).
*/
#define SDK_PFN(field, symbol, fallback, need, ret, params)                              \
    typedef ret(*sdk_pfn_##field) params;
VCU_EXTRA_ENTRY_POINTS(SDK_PFN, SDK_TYPE)
VCU_GET_PROC_ADDRESS_V1(SDK_PFN, SDK_TYPE)
VCU_GRAPH_INSTANTIATE_V2(SDK_PFN, SDK_TYPE)
SAME_TYPE(sdk_pfn_cuGetProcAddress_v1, PFN_cuGetProcAddress_v11030);
/* cudaTypedefs.h declares PFN_cuGraphInstantiate_v11000 only inside the
** driver's own build (with types it defines there alone); its text is
** "(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
** char *logBuffer, size_t bufferSize)", spelled here. */
typedef CUresult(CUDAAPI *sdk_graph_instantiate_v11000)(CUgraphExec *, CUgraph, CUgraphNode *,
                                                        char *, size_t);
SAME_TYPE(sdk_pfn_cuGraphInstantiate_v2, sdk_graph_instantiate_v11000);
SAME_TYPE(sdk_pfn_cuMemAllocAsync, PFN_cuMemAllocAsync_v11020_ptsz);
SAME_TYPE(sdk_pfn_cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020_ptsz);
SAME_TYPE(sdk_pfn_cuMemFreeAsync, PFN_cuMemFreeAsync_v11020_ptsz);
SAME_TYPE(sdk_pfn_cuGraphLaunch, PFN_cuGraphLaunch_v10000_ptsz);
SAME_TYPE(sdk_pfn_cuGraphUpload, PFN_cuGraphUpload_v11010_ptsz);
SAME_TYPE(sdk_pfn_cuGraphInstantiateWithParams, PFN_cuGraphInstantiateWithParams_v12000_ptsz);

/* And our own types give the same pointer sizes and scalar types: */
#define CHECK_OWN(field, symbol, fallback, need, ret, params)                            \
    _Static_assert(sizeof(vcu_pfn_##field) == sizeof(&symbol), #symbol);
VCU_ENTRY_POINTS(CHECK_OWN, VCU_OWN_TYPE)
VCU_EXTRA_ENTRY_POINTS(CHECK_OWN, VCU_OWN_TYPE)
_Static_assert(sizeof(vcu_pfn_cuGetProcAddress_v1) == sizeof(PFN_cuGetProcAddress_v11030),
               "cuGetProcAddress v1");

/*
** nvml_api.h against nvml.h, where the SDK ships it (the NVML development
** headers): values, struct sizes and field offsets. The entry points'
** signatures differ from nvml.h's only in the handle's pointee type and in
** nvmlReturn_t being an enum of int's size, checked here.
*/
#if __has_include(<nvml.h>)
#include <nvml.h>

#include "driver/nvml_api.h"

#define SAME_FIELD_AS(ours, of, sdk, sf)                                                 \
    _Static_assert(offsetof(ours, of) == offsetof(sdk, sf), #ours "." #of);              \
    _Static_assert(sizeof(((ours *)0)->of) == sizeof(((sdk *)0)->sf), "sizeof " #ours "." #of)

SAME_VALUE(VNVML_SUCCESS, NVML_SUCCESS);
SAME_VALUE(VNVML_ERROR_UNINITIALIZED, NVML_ERROR_UNINITIALIZED);
SAME_VALUE(VNVML_MEMORY_V2_VERSION, nvmlMemory_v2);
_Static_assert(sizeof(vnvml_return) == sizeof(nvmlReturn_t), "nvmlReturn_t");
_Static_assert(sizeof(vnvml_device) == sizeof(nvmlDevice_t), "nvmlDevice_t");
SAME_LAYOUT(struct vnvml_memory, nvmlMemory_t);
SAME_FIELD(struct vnvml_memory, nvmlMemory_t, total);
SAME_FIELD(struct vnvml_memory, nvmlMemory_t, free);
SAME_FIELD(struct vnvml_memory, nvmlMemory_t, used);
SAME_LAYOUT(struct vnvml_memory_v2, nvmlMemory_v2_t);
SAME_FIELD(struct vnvml_memory_v2, nvmlMemory_v2_t, version);
SAME_FIELD(struct vnvml_memory_v2, nvmlMemory_v2_t, total);
SAME_FIELD(struct vnvml_memory_v2, nvmlMemory_v2_t, reserved);
SAME_FIELD(struct vnvml_memory_v2, nvmlMemory_v2_t, free);
SAME_FIELD(struct vnvml_memory_v2, nvmlMemory_v2_t, used);
SAME_LAYOUT(struct vnvml_process_v1, nvmlProcessInfo_v1_t);
SAME_FIELD(struct vnvml_process_v1, nvmlProcessInfo_v1_t, pid);
SAME_FIELD_AS(struct vnvml_process_v1, used, nvmlProcessInfo_v1_t, usedGpuMemory);
SAME_LAYOUT(struct vnvml_process_v2, nvmlProcessInfo_v2_t);
SAME_FIELD(struct vnvml_process_v2, nvmlProcessInfo_v2_t, pid);
SAME_FIELD_AS(struct vnvml_process_v2, used, nvmlProcessInfo_v2_t, usedGpuMemory);
SAME_FIELD_AS(struct vnvml_process_v2, gpu_instance, nvmlProcessInfo_v2_t, gpuInstanceId);
SAME_FIELD_AS(struct vnvml_process_v2, compute_instance, nvmlProcessInfo_v2_t,
              computeInstanceId);
#endif

int
main(void)
{
    return 0;
}
