/* SPDX-License-Identifier: MIT */
/*
** cuda_api.h -- the small part of the CUDA driver API that vram uses,
** declared by us so that vram builds without the CUDA SDK and loads the
** driver (libcuda.so.1) with dlopen at run time.
**
** Every name carries a vcu_ / VCU_ prefix, so that this header and the
** SDK's cuda.h can live in one translation unit: tests/gpu/test_cuda_decls.c
** includes both and proves, at compile time, that every value, struct
** layout and entry-point signature below is the SDK's.
**
** The entry points are one list, VCU_ENTRY_POINTS, from which the
** function-pointer types, the loader's table (cuda.c) and the fake
** driver's prototypes (tests/fakecuda) are generated. Its T argument maps
** the list's type names to real types: VCU_OWN_TYPE gives ours, and the
** declaration test passes a mapping to the SDK's types.
*/
#ifndef VRAM_DRIVER_CUDA_API_H
#define VRAM_DRIVER_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#include "vram.h"

/* ------------------------------------------------------------------ */
/* Types (CUresult, CUdevice, ...) with the SDK's sizes and layouts     */
/* ------------------------------------------------------------------ */

/* CUresult: only the codes vram names; the driver may return others. */
typedef enum vcu_result {
    VCU_SUCCESS = 0,
    VCU_ERROR_INVALID_VALUE = 1,
    VCU_ERROR_OUT_OF_MEMORY = 2,
    VCU_ERROR_NOT_INITIALIZED = 3,
    VCU_ERROR_DEINITIALIZED = 4,
    VCU_ERROR_STUB_LIBRARY = 34,
    VCU_ERROR_NO_DEVICE = 100,
    VCU_ERROR_INVALID_DEVICE = 101,
    VCU_ERROR_INVALID_CONTEXT = 201,
    VCU_ERROR_INVALID_HANDLE = 400,
    VCU_ERROR_NOT_FOUND = 500,
    VCU_ERROR_NOT_READY = 600,
    VCU_ERROR_NOT_PERMITTED = 800,
    VCU_ERROR_NOT_SUPPORTED = 801,
    VCU_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    VCU_ERROR_UNKNOWN = 999
} vcu_result;

typedef int vcu_device;                    /* CUdevice: an ordinal */
typedef unsigned long long vcu_deviceptr;  /* CUdeviceptr (64-bit builds) */
typedef struct vcu_ctx_st *vcu_context;    /* CUcontext */
typedef struct vcu_stream_st *vcu_stream;  /* CUstream; NULL = default stream */
typedef struct vcu_event_st *vcu_event;    /* CUevent */
typedef unsigned long long vcu_mem_handle; /* CUmemGenericAllocationHandle */

/* CUuuid: 16 raw bytes. */
typedef struct vcu_uuid {
    char bytes[16];
} vcu_uuid;

/* CUdevice_attribute: the values vram asks for. */
typedef enum vcu_device_attribute {
    VCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    VCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    VCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
    VCU_DEVICE_ATTRIBUTE_MAX_ = 0x7FFFFFFF /* keeps the enum 32 bits wide */
} vcu_device_attribute;

/* CUstreamCaptureStatus and CUstreamCaptureMode: whether a stream is
** capturing a CUDA graph, and a thread's capture mode (cuda.c makes its
** memory calls in the relaxed mode, which capture allows). */
typedef enum vcu_stream_capture_status {
    VCU_STREAM_CAPTURE_STATUS_NONE = 0,
    VCU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    VCU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} vcu_stream_capture_status;

typedef enum vcu_stream_capture_mode {
    VCU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    VCU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    VCU_STREAM_CAPTURE_MODE_RELAXED = 2
} vcu_stream_capture_mode;

/* CUevent_flags */
#define VCU_EVENT_DISABLE_TIMING 0x2u

/* CUmemAllocationType */
typedef enum vcu_mem_allocation_type {
    VCU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
    VCU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
    VCU_MEM_ALLOCATION_TYPE_MAX = 0x7FFFFFFF
} vcu_mem_allocation_type;

/* CUmemLocationType */
typedef enum vcu_mem_location_type {
    VCU_MEM_LOCATION_TYPE_INVALID = 0x0,
    VCU_MEM_LOCATION_TYPE_DEVICE = 0x1,
    VCU_MEM_LOCATION_TYPE_MAX = 0x7FFFFFFF
} vcu_mem_location_type;

/* CUmemAllocationHandleType */
typedef enum vcu_mem_handle_type {
    VCU_MEM_HANDLE_TYPE_NONE = 0x0,
    VCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
    VCU_MEM_HANDLE_TYPE_MAX = 0x7FFFFFFF
} vcu_mem_handle_type;

/* CUmemAccess_flags */
typedef enum vcu_mem_access_flags {
    VCU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0,
    VCU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
    VCU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
    VCU_MEM_ACCESS_FLAGS_PROT_MAX = 0x7FFFFFFF
} vcu_mem_access_flags;

/* CUmemAllocationGranularity_flags */
typedef enum vcu_granularity_flags {
    VCU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
    VCU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1
} vcu_granularity_flags;

/*
** CUmemLocation, CUmemAllocationProp, CUmemAccessDesc. The field names are
** the SDK's, so that its documentation reads directly onto them.
*/
typedef struct vcu_mem_location {
    vcu_mem_location_type type;
    int id; /* the device ordinal for VCU_MEM_LOCATION_TYPE_DEVICE */
} vcu_mem_location;

typedef struct vcu_mem_allocation_prop {
    vcu_mem_allocation_type type;
    vcu_mem_handle_type requestedHandleTypes;
    vcu_mem_location location;
    void *win32HandleMetaData; /* must be NULL on Linux */
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags; /* all zero: no compression, no RDMA, plain usage */
} vcu_mem_allocation_prop;

typedef struct vcu_mem_access_desc {
    vcu_mem_location location;
    vcu_mem_access_flags flags;
} vcu_mem_access_desc;

/* CUmemAttach_flags: cuMemAllocManaged's flags. */
#define VCU_MEM_ATTACH_GLOBAL 0x1u

/* cuuint64_t (cuGetProcAddress's flags, attribute values). */
typedef uint64_t vcu_uint64;

/* CUarray, CUmipmappedArray, CUmemoryPool, CUgraph, CUgraphExec,
** CUgraphNode: opaque handles. */
typedef struct vcu_array_st *vcu_array;
typedef struct vcu_mipmapped_array_st *vcu_mipmapped_array;
typedef struct vcu_mem_pool_st *vcu_mem_pool;
typedef struct vcu_graph_st *vcu_graph;
typedef struct vcu_graph_exec_st *vcu_graph_exec;
typedef struct vcu_graph_node_st *vcu_graph_node;

/* CUmemPoolProps: what a stream-ordered pool is made of (cuMemPoolCreate;
** the pool of a graph's allocation node). */
typedef struct vcu_mem_pool_props {
    vcu_mem_allocation_type allocType;
    vcu_mem_handle_type handleTypes;
    vcu_mem_location location;
    void *win32SecurityAttributes;
    size_t maxSize; /* bytes; 0: the driver's default */
    unsigned short usage;
    unsigned char reserved[54];
} vcu_mem_pool_props;

/* CUmemPool_attribute: the values vram reads or sets (each a cuuint64_t). */
typedef enum vcu_mempool_attribute {
    VCU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
    VCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
    VCU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
    VCU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
    VCU_MEMPOOL_ATTR_USED_MEM_HIGH = 8,
    VCU_MEMPOOL_ATTR_MAX_ = 0x7FFFFFFF
} vcu_mempool_attribute;

/* CUgraphMem_attribute: the device's pool of graph allocations (each a
** cuuint64_t). */
typedef enum vcu_graph_mem_attribute {
    VCU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
    VCU_GRAPH_MEM_ATTR_USED_MEM_HIGH = 1,
    VCU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
    VCU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH = 3,
    VCU_GRAPH_MEM_ATTR_MAX_ = 0x7FFFFFFF
} vcu_graph_mem_attribute;

/* CUgraphNodeType: the kinds of node vram looks for in a graph. */
typedef enum vcu_graph_node_type {
    VCU_GRAPH_NODE_TYPE_KERNEL = 0,
    VCU_GRAPH_NODE_TYPE_GRAPH = 4,
    VCU_GRAPH_NODE_TYPE_EMPTY = 5,
    VCU_GRAPH_NODE_TYPE_MEM_ALLOC = 10,
    VCU_GRAPH_NODE_TYPE_MEM_FREE = 11,
    VCU_GRAPH_NODE_TYPE_CONDITIONAL = 13,
    VCU_GRAPH_NODE_TYPE_MAX_ = 0x7FFFFFFF
} vcu_graph_node_type;

/* CUDA_MEM_ALLOC_NODE_PARAMS (v1): a graph's allocation node. */
typedef struct vcu_mem_alloc_node_params {
    vcu_mem_pool_props poolProps;
    const vcu_mem_access_desc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;    /* bytes asked */
    vcu_deviceptr dptr; /* out: the allocation's address */
} vcu_mem_alloc_node_params;

/* CUgraphInstantiateResult and CUDA_GRAPH_INSTANTIATE_PARAMS
** (cuGraphInstantiateWithParams); the flag UPLOAD uploads the graph,
** and so maps its allocations' memory, at instantiation. */
typedef enum vcu_graph_instantiate_result {
    VCU_GRAPH_INSTANTIATE_SUCCESS = 0,
    VCU_GRAPH_INSTANTIATE_ERROR = 1,
    VCU_GRAPH_INSTANTIATE_RESULT_MAX_ = 0x7FFFFFFF
} vcu_graph_instantiate_result;
typedef struct vcu_graph_instantiate_params {
    vcu_uint64 flags;
    vcu_stream hUploadStream;
    vcu_graph_node hErrNode_out;
    vcu_graph_instantiate_result result_out;
} vcu_graph_instantiate_params;
#define VCU_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH 1u
#define VCU_GRAPH_INSTANTIATE_FLAG_UPLOAD 2u

/* CUDA_ARRAY_MEMORY_REQUIREMENTS: what the driver holds for an array. */
typedef struct vcu_array_memory_requirements {
    size_t size;      /* bytes */
    size_t alignment; /* bytes */
    unsigned int reserved[4];
} vcu_array_memory_requirements;

/* CUipcMemHandle: an allocation exported to another process. */
typedef struct vcu_ipc_mem_handle {
    char reserved[64];
} vcu_ipc_mem_handle;
#define VCU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1u

/* CUarray_format: the formats whose element size the preload library
** knows (src/preload/hooks.c counts an array's bytes from them). */
typedef enum vcu_array_format {
    VCU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
    VCU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
    VCU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
    VCU_AD_FORMAT_SIGNED_INT8 = 0x08,
    VCU_AD_FORMAT_SIGNED_INT16 = 0x09,
    VCU_AD_FORMAT_SIGNED_INT32 = 0x0a,
    VCU_AD_FORMAT_HALF = 0x10,
    VCU_AD_FORMAT_FLOAT = 0x20,
    VCU_AD_FORMAT_MAX = 0x7FFFFFFF
} vcu_array_format;

/* CUDA_ARRAY_DESCRIPTOR and CUDA_ARRAY3D_DESCRIPTOR (the _v2 layouts,
** with size_t extents: elements, not bytes). */
typedef struct vcu_array_descriptor {
    size_t Width;
    size_t Height;
    vcu_array_format Format;
    unsigned int NumChannels;
} vcu_array_descriptor;

typedef struct vcu_array3d_descriptor {
    size_t Width;
    size_t Height;
    size_t Depth;
    vcu_array_format Format;
    unsigned int NumChannels;
    unsigned int Flags;
} vcu_array3d_descriptor;
/* CUDA_ARRAY3D_* flags: a sparse array, or one created without memory
** (mapped later through the virtual-memory API). */
#define VCU_ARRAY3D_LAYERED 0x01u
#define VCU_ARRAY3D_CUBEMAP 0x04u
#define VCU_ARRAY3D_SPARSE 0x40u
#define VCU_ARRAY3D_DEFERRED_MAPPING 0x80u

/* CUdriverProcAddressQueryResult, and cuGetProcAddress's flags
** (CUdriverProcAddress_flags): PER_THREAD_DEFAULT_STREAM asks for the
** _ptsz variant of functions that take a stream. */
typedef enum vcu_proc_address_result {
    VCU_GET_PROC_ADDRESS_SUCCESS = 0,
    VCU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    VCU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} vcu_proc_address_result;
#define VCU_GET_PROC_ADDRESS_DEFAULT 0u
#define VCU_GET_PROC_ADDRESS_LEGACY_STREAM 1u
#define VCU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2u


/* The T mapping that gives our own types: T(deviceptr) is vcu_deviceptr. */
#define VCU_OWN_TYPE(t) vcu_##t

/* ------------------------------------------------------------------ */
/* Entry points                                                         */
/* ------------------------------------------------------------------ */

/* Whether an entry point must be there (see vcu_api_load). */
enum vcu_need {
    VCU_REQUIRED, /* missing: the driver is refused (VRAM_E_NO_DRIVER) */
    VCU_VMM,      /* virtual memory (CUDA 10.2+): missing, vram uses cuMemAlloc only */
    VCU_OPTIONAL  /* missing: errors print the number (error texts), graph
                     capture is not detected (capture calls) */
};

/*
** X(field, symbol, fallback, need, return type, (parameters)):
**   field     the member of struct vcu_api, the driver's unversioned name;
**   symbol    the versioned symbol looked up with dlsym (an identifier, so
**             that the fake driver and the declaration test can name it);
**   fallback  a second symbol tried when the first is missing, or NULL.
** Every entry returns CUresult. Append new entries anywhere: nothing
** depends on the order. (Not clang-formatted: it would write
** "T(device) * device".)
*/
/* clang-format off */
#define VCU_ENTRY_POINTS(X, T)                                                           \
    X(cuInit, cuInit, NULL, VCU_REQUIRED, T(result), (unsigned int flags))               \
    X(cuDriverGetVersion, cuDriverGetVersion, NULL, VCU_REQUIRED, T(result),             \
      (int *version))                                                                    \
    X(cuDeviceGetCount, cuDeviceGetCount, NULL, VCU_REQUIRED, T(result), (int *count))   \
    X(cuDeviceGet, cuDeviceGet, NULL, VCU_REQUIRED, T(result),                           \
      (T(device) *device, int ordinal))                                                  \
    X(cuDeviceGetName, cuDeviceGetName, NULL, VCU_REQUIRED, T(result),                   \
      (char *name, int len, T(device) dev))                                              \
    X(cuDeviceGetUuid, cuDeviceGetUuid_v2, "cuDeviceGetUuid", VCU_REQUIRED, T(result),   \
      (T(uuid) *uuid, T(device) dev))                                                    \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v2, NULL, VCU_REQUIRED, T(result),              \
      (size_t *bytes, T(device) dev))                                                    \
    X(cuDeviceGetAttribute, cuDeviceGetAttribute, NULL, VCU_REQUIRED, T(result),         \
      (int *value, T(device_attribute) attrib, T(device) dev))                           \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, NULL, VCU_REQUIRED, T(result), \
      (T(context) *ctx, T(device) dev))                                                  \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, NULL, VCU_REQUIRED,       \
      T(result), (T(device) dev))                                                        \
    X(cuCtxPushCurrent, cuCtxPushCurrent_v2, NULL, VCU_REQUIRED, T(result),              \
      (T(context) ctx))                                                                  \
    X(cuCtxPopCurrent, cuCtxPopCurrent_v2, NULL, VCU_REQUIRED, T(result),                \
      (T(context) *ctx))                                                                 \
    X(cuCtxGetCurrent, cuCtxGetCurrent, NULL, VCU_REQUIRED, T(result),                   \
      (T(context) *ctx))                                                                 \
    X(cuCtxSynchronize, cuCtxSynchronize, NULL, VCU_REQUIRED, T(result), (void))         \
    X(cuMemGetInfo, cuMemGetInfo_v2, NULL, VCU_REQUIRED, T(result),                      \
      (size_t *free_bytes, size_t *total_bytes))                                         \
    X(cuMemAlloc, cuMemAlloc_v2, NULL, VCU_REQUIRED, T(result),                          \
      (T(deviceptr) *dptr, size_t bytesize))                                             \
    X(cuMemFree, cuMemFree_v2, NULL, VCU_REQUIRED, T(result), (T(deviceptr) dptr))       \
    X(cuMemAddressReserve, cuMemAddressReserve, NULL, VCU_VMM, T(result),                \
      (T(deviceptr) *ptr, size_t size, size_t alignment, T(deviceptr) addr,              \
       unsigned long long flags))                                                        \
    X(cuMemAddressFree, cuMemAddressFree, NULL, VCU_VMM, T(result),                      \
      (T(deviceptr) ptr, size_t size))                                                   \
    X(cuMemCreate, cuMemCreate, NULL, VCU_VMM, T(result),                                \
      (T(mem_handle) *handle, size_t size, const T(mem_allocation_prop) *prop,           \
       unsigned long long flags))                                                        \
    X(cuMemRelease, cuMemRelease, NULL, VCU_VMM, T(result), (T(mem_handle) handle))      \
    X(cuMemMap, cuMemMap, NULL, VCU_VMM, T(result),                                      \
      (T(deviceptr) ptr, size_t size, size_t offset, T(mem_handle) handle,               \
       unsigned long long flags))                                                        \
    X(cuMemUnmap, cuMemUnmap, NULL, VCU_VMM, T(result), (T(deviceptr) ptr, size_t size)) \
    X(cuMemSetAccess, cuMemSetAccess, NULL, VCU_VMM, T(result),                          \
      (T(deviceptr) ptr, size_t size, const T(mem_access_desc) *desc, size_t count))     \
    X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, NULL, VCU_VMM,       \
      T(result),                                                                         \
      (size_t *granularity, const T(mem_allocation_prop) *prop,                          \
       T(granularity_flags) option))                                                     \
    X(cuEventCreate, cuEventCreate, NULL, VCU_REQUIRED, T(result),                       \
      (T(event) *event, unsigned int flags))                                             \
    X(cuEventRecord, cuEventRecord, NULL, VCU_REQUIRED, T(result),                       \
      (T(event) event, T(stream) stream))                                                \
    X(cuEventQuery, cuEventQuery, NULL, VCU_REQUIRED, T(result), (T(event) event))       \
    X(cuEventDestroy, cuEventDestroy_v2, NULL, VCU_REQUIRED, T(result),                  \
      (T(event) event))                                                                  \
    X(cuGetErrorName, cuGetErrorName, NULL, VCU_OPTIONAL, T(result),                     \
      (T(result) error, const char **text))                                              \
    X(cuGetErrorString, cuGetErrorString, NULL, VCU_OPTIONAL, T(result),                 \
      (T(result) error, const char **text))                                              \
    X(cuStreamIsCapturing, cuStreamIsCapturing, NULL, VCU_OPTIONAL, T(result),           \
      (T(stream) hStream, T(stream_capture_status) *captureStatus))                      \
    X(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, NULL,        \
      VCU_OPTIONAL, T(result), (T(stream_capture_mode) *mode))
/* clang-format on */

/*
** Entry points that only the preload library (src/preload) and the fake
** driver (tests/fakecuda) use: the other ways of taking device memory,
** page-locked host memory (counted for display, never a quota),
** cuGetProcAddress, and what the hooks ask the driver. Same shape as
** VCU_ENTRY_POINTS, but vcu_api_load never loads them (the backend has no
** use for them, and an old driver may lack them). The _ptsz twins of the
** stream-ordered calls have the same types and are not listed; neither is
** the v1 cuGetProcAddress (VCU_GET_PROC_ADDRESS_V1 below).
*/
/* clang-format off */
#define VCU_EXTRA_ENTRY_POINTS(X, T)                                                     \
    X(cuGetProcAddress, cuGetProcAddress_v2, NULL, VCU_OPTIONAL, T(result),              \
      (const char *symbol, void **pfn, int cudaVersion, T(uint64) flags,                 \
       T(proc_address_result) *symbolStatus))                                            \
    X(cuCtxGetDevice, cuCtxGetDevice, NULL, VCU_OPTIONAL, T(result), (T(device) *device)) \
    X(cuCtxDestroy, cuCtxDestroy_v2, NULL, VCU_OPTIONAL, T(result), (T(context) ctx))    \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, NULL, VCU_OPTIONAL,           \
      T(result), (T(device) dev))                                                        \
    X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, NULL, VCU_OPTIONAL,          \
      T(result), (T(mem_pool) *pool, T(device) dev))                                     \
    X(cuMemAllocPitch, cuMemAllocPitch_v2, NULL, VCU_OPTIONAL, T(result),                \
      (T(deviceptr) *dptr, size_t *pitch, size_t widthInBytes, size_t height,            \
       unsigned int elementSizeBytes))                                                   \
    X(cuMemAllocManaged, cuMemAllocManaged, NULL, VCU_OPTIONAL, T(result),               \
      (T(deviceptr) *dptr, size_t bytesize, unsigned int flags))                         \
    X(cuMemAllocAsync, cuMemAllocAsync, NULL, VCU_OPTIONAL, T(result),                   \
      (T(deviceptr) *dptr, size_t bytesize, T(stream) stream))                           \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, NULL, VCU_OPTIONAL, T(result),   \
      (T(deviceptr) *dptr, size_t bytesize, T(mem_pool) pool, T(stream) stream))         \
    X(cuMemFreeAsync, cuMemFreeAsync, NULL, VCU_OPTIONAL, T(result),                     \
      (T(deviceptr) dptr, T(stream) stream))                                             \
    X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, NULL, VCU_OPTIONAL,      \
      T(result), (T(mem_handle) *handle, void *addr))                                    \
    X(cuArrayCreate, cuArrayCreate_v2, NULL, VCU_OPTIONAL, T(result),                    \
      (T(array) *array, const T(array_descriptor) *desc))                                \
    X(cuArray3DCreate, cuArray3DCreate_v2, NULL, VCU_OPTIONAL, T(result),                \
      (T(array) *array, const T(array3d_descriptor) *desc))                              \
    X(cuArrayDestroy, cuArrayDestroy, NULL, VCU_OPTIONAL, T(result), (T(array) array))   \
    X(cuMemAllocHost, cuMemAllocHost_v2, NULL, VCU_OPTIONAL, T(result),                  \
      (void **pp, size_t bytesize))                                                      \
    X(cuMemHostAlloc, cuMemHostAlloc, NULL, VCU_OPTIONAL, T(result),                     \
      (void **pp, size_t bytesize, unsigned int Flags))                                  \
    X(cuMemFreeHost, cuMemFreeHost, NULL, VCU_OPTIONAL, T(result), (void *p))            \
    X(cuMemHostRegister, cuMemHostRegister_v2, NULL, VCU_OPTIONAL, T(result),            \
      (void *p, size_t bytesize, unsigned int Flags))                                    \
    X(cuMemHostUnregister, cuMemHostUnregister, NULL, VCU_OPTIONAL, T(result), (void *p)) \
    X(cuMemExportToShareableHandle, cuMemExportToShareableHandle, NULL, VCU_OPTIONAL,    \
      T(result),                                                                         \
      (void *shareableHandle, T(mem_handle) handle, T(mem_handle_type) handleType,       \
       unsigned long long flags))                                                        \
    X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, NULL, VCU_OPTIONAL,\
      T(result),                                                                         \
      (T(mem_handle) *handle, void *osHandle, T(mem_handle_type) shHandleType))          \
    X(cuIpcGetMemHandle, cuIpcGetMemHandle, NULL, VCU_OPTIONAL, T(result),               \
      (T(ipc_mem_handle) *pHandle, T(deviceptr) dptr))                                   \
    X(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, NULL, VCU_OPTIONAL, T(result),          \
      (T(deviceptr) *pdptr, T(ipc_mem_handle) handle, unsigned int Flags))               \
    X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, NULL, VCU_OPTIONAL, T(result),           \
      (T(deviceptr) dptr))                                                               \
    X(cuDeviceGetMemPool, cuDeviceGetMemPool, NULL, VCU_OPTIONAL, T(result),             \
      (T(mem_pool) *pool, T(device) dev))                                                \
    X(cuDeviceSetMemPool, cuDeviceSetMemPool, NULL, VCU_OPTIONAL, T(result),             \
      (T(device) dev, T(mem_pool) pool))                                                 \
    X(cuMemPoolCreate, cuMemPoolCreate, NULL, VCU_OPTIONAL, T(result),                   \
      (T(mem_pool) *pool, const T(mem_pool_props) *poolProps))                           \
    X(cuMemPoolDestroy, cuMemPoolDestroy, NULL, VCU_OPTIONAL, T(result),                 \
      (T(mem_pool) pool))                                                                \
    X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, NULL, VCU_OPTIONAL, T(result),       \
      (T(mem_pool) pool, T(mempool_attribute) attr, void *value))                        \
    X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, NULL, VCU_OPTIONAL, T(result),       \
      (T(mem_pool) pool, T(mempool_attribute) attr, void *value))                        \
    X(cuMemPoolTrimTo, cuMemPoolTrimTo, NULL, VCU_OPTIONAL, T(result),                   \
      (T(mem_pool) pool, size_t minBytesToKeep))                                         \
    X(cuArrayGetMemoryRequirements, cuArrayGetMemoryRequirements, NULL, VCU_OPTIONAL,    \
      T(result),                                                                         \
      (T(array_memory_requirements) *memoryRequirements, T(array) array,                 \
       T(device) device))                                                                \
    X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, NULL, VCU_OPTIONAL, T(result),     \
      (T(mipmapped_array) *pHandle, const T(array3d_descriptor) *pMipmappedArrayDesc,    \
       unsigned int numMipmapLevels))                                                    \
    X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, NULL, VCU_OPTIONAL, T(result),   \
      (T(mipmapped_array) hMipmappedArray))                                              \
    X(cuMipmappedArrayGetMemoryRequirements, cuMipmappedArrayGetMemoryRequirements,      \
      NULL, VCU_OPTIONAL, T(result),                                                     \
      (T(array_memory_requirements) *memoryRequirements, T(mipmapped_array) mipmap,      \
       T(device) device))                                                                \
    X(cuGraphCreate, cuGraphCreate, NULL, VCU_OPTIONAL, T(result),                       \
      (T(graph) *phGraph, unsigned int flags))                                           \
    X(cuGraphDestroy, cuGraphDestroy, NULL, VCU_OPTIONAL, T(result), (T(graph) hGraph))  \
    X(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, NULL, VCU_OPTIONAL, T(result),     \
      (T(graph_node) *phGraphNode, T(graph) hGraph, const T(graph_node) *dependencies,   \
       size_t numDependencies, T(mem_alloc_node_params) *nodeParams))                    \
    X(cuGraphAddMemFreeNode, cuGraphAddMemFreeNode, NULL, VCU_OPTIONAL, T(result),       \
      (T(graph_node) *phGraphNode, T(graph) hGraph, const T(graph_node) *dependencies,   \
       size_t numDependencies, T(deviceptr) dptr))                                       \
    X(cuGraphGetNodes, cuGraphGetNodes, NULL, VCU_OPTIONAL, T(result),                   \
      (T(graph) hGraph, T(graph_node) *nodes, size_t *numNodes))                         \
    X(cuGraphNodeGetType, cuGraphNodeGetType, NULL, VCU_OPTIONAL, T(result),             \
      (T(graph_node) hNode, T(graph_node_type) *type))                                   \
    X(cuGraphMemAllocNodeGetParams, cuGraphMemAllocNodeGetParams, NULL, VCU_OPTIONAL,    \
      T(result), (T(graph_node) hNode, T(mem_alloc_node_params) *params_out))            \
    X(cuGraphChildGraphNodeGetGraph, cuGraphChildGraphNodeGetGraph, NULL, VCU_OPTIONAL,  \
      T(result), (T(graph_node) hNode, T(graph) *phGraph))                               \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, NULL, VCU_OPTIONAL,      \
      T(result), (T(graph_exec) *phGraphExec, T(graph) hGraph, unsigned long long flags))\
    X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, NULL, VCU_OPTIONAL,    \
      T(result),                                                                         \
      (T(graph_exec) *phGraphExec, T(graph) hGraph,                                      \
       T(graph_instantiate_params) *instantiateParams))                                  \
    X(cuGraphUpload, cuGraphUpload, NULL, VCU_OPTIONAL, T(result),                       \
      (T(graph_exec) hGraphExec, T(stream) hStream))                                     \
    X(cuGraphLaunch, cuGraphLaunch, NULL, VCU_OPTIONAL, T(result),                       \
      (T(graph_exec) hGraphExec, T(stream) hStream))                                     \
    X(cuGraphExecDestroy, cuGraphExecDestroy, NULL, VCU_OPTIONAL, T(result),             \
      (T(graph_exec) hGraphExec))                                                        \
    X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, NULL, VCU_OPTIONAL, T(result),         \
      (T(device) device))                                                                \
    X(cuDeviceGetGraphMemAttribute, cuDeviceGetGraphMemAttribute, NULL, VCU_OPTIONAL,    \
      T(result), (T(device) device, T(graph_mem_attribute) attr, void *value))
/* clang-format on */

/*
** Entry points newer than the oldest SDK the declaration test is built
** with (tests/gpu/test_cuda_decls.c checks them only against a cuda.h of
** their version): CUDA 13's location-keyed current pool.
*/
/* clang-format off */
#define VCU_CUDA13_ENTRY_POINTS(X, T)                                                    \
    X(cuMemSetMemPool, cuMemSetMemPool, NULL, VCU_OPTIONAL, T(result),                   \
      (T(mem_location) *location, T(mem_allocation_type) type, T(mem_pool) pool))
/* clang-format on */

/*
** The CUDA 11 runtimes' cuGraphInstantiate (cudaTypedefs.h's
** PFN_cuGraphInstantiate_v11000, returned for cudaVersion 11000 to
** 11999), which cuda.h no longer declares: a list of its own, as the v1
** cuGetProcAddress below.
*/
/* clang-format off */
#define VCU_GRAPH_INSTANTIATE_V2(X, T)                                                   \
    X(cuGraphInstantiate_v2, cuGraphInstantiate_v2, NULL, VCU_OPTIONAL, T(result),       \
      (T(graph_exec) *phGraphExec, T(graph) hGraph, T(graph_node) *phErrorNode,          \
       char *logBuffer, size_t bufferSize))
/* clang-format on */

/* vcu_pfn_cuMemAlloc, ...: the type of each entry point. */
#define VCU_X_(field, symbol, fallback, need, ret, params)                               \
    typedef ret(*vcu_pfn_##field) params;
VCU_ENTRY_POINTS(VCU_X_, VCU_OWN_TYPE)
VCU_EXTRA_ENTRY_POINTS(VCU_X_, VCU_OWN_TYPE)
VCU_CUDA13_ENTRY_POINTS(VCU_X_, VCU_OWN_TYPE)
VCU_GRAPH_INSTANTIATE_V2(VCU_X_, VCU_OWN_TYPE)
#undef VCU_X_

/*
** The v1 cuGetProcAddress (the CUDA 11.3 to 11.8 runtimes ask for it), the
** same shape again in a list of its own: it is exported as
** "cuGetProcAddress", a name that cuda.h redefines to the v2.
*/
#define VCU_GET_PROC_ADDRESS_V1(X, T)                                                    \
    X(cuGetProcAddress_v1, cuGetProcAddress, NULL, VCU_OPTIONAL, T(result),              \
      (const char *symbol, void **pfn, int cudaVersion, T(uint64) flags))
#define VCU_X_(field, symbol, fallback, need, ret, params)                               \
    typedef ret(*vcu_pfn_##field) params;
VCU_GET_PROC_ADDRESS_V1(VCU_X_, VCU_OWN_TYPE)
#undef VCU_X_

/* VCU_ENTRY_cuMemAlloc, ...: each entry point's index. */
enum vcu_entry {
#define VCU_X_(field, symbol, fallback, need, ret, params) VCU_ENTRY_##field,
    VCU_ENTRY_POINTS(VCU_X_, VCU_OWN_TYPE)
#undef VCU_X_
        VCU_N_ENTRIES
};

/*
** A loaded driver: the library handle and one pointer per entry point
** (NULL for a missing optional one).
*/
struct vcu_api {
    void *library;                     /* dlopen handle, owned */
    const char *symbol[VCU_N_ENTRIES]; /* the name each entry was found under
                                          (static strings), NULL if missing */
    bool vmm;                          /* every VCU_VMM entry point is there */
#define VCU_X_(field, symbol, fallback, need, ret, params) vcu_pfn_##field field;
    VCU_ENTRY_POINTS(VCU_X_, VCU_OWN_TYPE)
#undef VCU_X_
};

/*
** Load LIBRARY (NULL: "libcuda.so.1", found the way the dynamic linker
** finds it, so LD_LIBRARY_PATH applies) and look up every entry point into
** *OUT. Does not call cuInit. VRAM_E_NO_DRIVER when the library does not
** load or lacks a required entry point; the last error says which. On
** success the caller owns OUT->library and gives it back with
** vcu_api_unload. Implemented in cuda.c; tests use it to reach the driver
** (the fake's, or the real one) through the same table as the backend.
*/
vram_status vcu_api_load(const char *library, struct vcu_api *out);

/* Unload a driver loaded by vcu_api_load and clear API. */
void vcu_api_unload(struct vcu_api *api);

#endif
