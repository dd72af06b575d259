/* SPDX-License-Identifier: MIT */
/*
** nvml_api.h -- the little of NVML (libnvidia-ml.so.1) that vram uses,
** declared by us as cuda_api.h declares the driver: nvml.h is not
** installed everywhere, and NVML is reached only through dlopen/dlsym.
** The preload library hooks two of these calls; the monitor (vram stat,
** top, exporter) reads devices and processes through the rest.
**
** Every name carries a vnvml_ / VNVML_ prefix, so that this header and the
** SDK's nvml.h can live in one translation unit: tests/gpu/test_cuda_decls.c
** includes both where nvml.h is installed and proves, at compile time,
** that every value and struct layout below is nvml.h's.
** Every NVML function returns nvmlReturn_t, 0 on success.
*/
#ifndef VRAM_DRIVER_NVML_API_H
#define VRAM_DRIVER_NVML_API_H

typedef int vnvml_return;                     /* nvmlReturn_t */
typedef struct vnvml_device_st *vnvml_device; /* nvmlDevice_t */

#define VNVML_SUCCESS 0
#define VNVML_ERROR_UNINITIALIZED 1

/* nvmlMemory_t */
struct vnvml_memory {
    unsigned long long total; /* bytes, each */
    unsigned long long free;
    unsigned long long used;
};

/* nvmlMemory_v2_t: VERSION must be VNVML_MEMORY_V2_VERSION, set by the caller. */
struct vnvml_memory_v2 {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved; /* for the driver and firmware */
    unsigned long long free;
    unsigned long long used;
};
/* nvml.h's nvmlMemory_v2: NVML_STRUCT_VERSION(Memory, 2). */
#define VNVML_MEMORY_V2_VERSION                                                          \
    ((unsigned int)(sizeof(struct vnvml_memory_v2) | 2u << 24))

/* nvmlProcessInfo_v1_t: what nvmlDeviceGetComputeRunningProcesses fills. */
struct vnvml_process_v1 {
    unsigned int pid;
    unsigned long long used; /* usedGpuMemory */
};

/* nvmlProcessInfo_v2_t (nvmlProcessInfo_t): the _v2 and _v3 calls. */
struct vnvml_process_v2 {
    unsigned int pid;
    unsigned long long used; /* usedGpuMemory */
    unsigned int gpu_instance;
    unsigned int compute_instance;
};

/* The entry points, by the name that dlsym finds them under. */
typedef vnvml_return (*vnvml_pfn_init)(void); /* nvmlInit_v2, nvmlShutdown */
typedef vnvml_return (*vnvml_pfn_count)(unsigned int *count); /* nvmlDeviceGetCount_v2 */
typedef vnvml_return (*vnvml_pfn_handle)(unsigned int index,
                                         vnvml_device *device); /* ..._ByIndex_v2 */
typedef vnvml_return (*vnvml_pfn_get_uuid)(vnvml_device device, char *uuid,
                                           unsigned int length); /* nvmlDeviceGetUUID */
typedef vnvml_return (*vnvml_pfn_get_name)(vnvml_device device, char *name,
                                           unsigned int length); /* nvmlDeviceGetName */
/* nvml.h's NVML_DEVICE_NAME_V2_BUFFER_SIZE: room for any name. */
#define VNVML_DEVICE_NAME_LEN 96
typedef vnvml_return (*vnvml_pfn_memory_info)(vnvml_device device,
                                              struct vnvml_memory *m);
typedef vnvml_return (*vnvml_pfn_memory_info_v2)(vnvml_device device,
                                                 struct vnvml_memory_v2 *m);
/* nvmlDeviceGetComputeRunningProcesses_v3 and _v2 */
typedef vnvml_return (*vnvml_pfn_processes)(vnvml_device device, unsigned int *count,
                                            struct vnvml_process_v2 *infos);
/* nvmlDeviceGetComputeRunningProcesses */
typedef vnvml_return (*vnvml_pfn_processes_v1)(vnvml_device device, unsigned int *count,
                                               struct vnvml_process_v1 *infos);

#endif
