/*
** test_cuda_decls.c -- proof, at compile time, that src/backend/cuda_api.h
** declares the CUDA driver API exactly as the SDK's cuda.h does: every
** error code and enum value, every struct's size and field offsets, and
** the signature of every entry point of VCU_ENTRY_POINTS (generated from
** the list itself, with the SDK's types substituted through its T
** argument). Built only where cuda.h is found; running it just returns 0.
*/
#include <cuda.h>
#include <stddef.h>

#include "backend/cuda_api.h"

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
SAME_VALUE(VCU_MEM_HANDLE_TYPE_MAX, CU_MEM_HANDLE_TYPE_MAX);
SAME_VALUE(VCU_MEM_ACCESS_FLAGS_PROT_NONE, CU_MEM_ACCESS_FLAGS_PROT_NONE);
SAME_VALUE(VCU_MEM_ACCESS_FLAGS_PROT_READ, CU_MEM_ACCESS_FLAGS_PROT_READ);
SAME_VALUE(VCU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
SAME_VALUE(VCU_MEM_ACCESS_FLAGS_PROT_MAX, CU_MEM_ACCESS_FLAGS_PROT_MAX);
SAME_VALUE(VCU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
SAME_VALUE(VCU_MEM_ALLOC_GRANULARITY_RECOMMENDED, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);

/* ---- types and layouts ---- */
SAME_LAYOUT(vcu_result, CUresult);
SAME_TYPE(vcu_device, CUdevice);
SAME_TYPE(vcu_deviceptr, CUdeviceptr);
SAME_TYPE(vcu_mem_handle, CUmemGenericAllocationHandle);
SAME_LAYOUT(vcu_context, CUcontext);
SAME_LAYOUT(vcu_stream, CUstream);
SAME_LAYOUT(vcu_event, CUevent);
SAME_LAYOUT(vcu_device_attribute, CUdevice_attribute);
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
#define SDK_TYPE(t) SDK_##t

#define CHECK_ENTRY(field, symbol, fallback, need, ret, params)                          \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&symbol), ret(*) params),     \
                   #symbol " has the SDK's signature");
VCU_ENTRY_POINTS(CHECK_ENTRY, SDK_TYPE)

/* And our own types give the same pointer sizes and scalar types: */
#define CHECK_OWN(field, symbol, fallback, need, ret, params)                            \
    _Static_assert(sizeof(vcu_pfn_##field) == sizeof(&symbol), #symbol);
VCU_ENTRY_POINTS(CHECK_OWN, VCU_OWN_TYPE)

int
main(void)
{
    return 0;
}
