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
** X(symbol, type, asked, since, until, stream, lib), one row per exported
** symbol (each _ptsz twin is a row of its own):
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
** A driver that adds a new variant of one of these (a cuMemAlloc_v3, say)
** needs a row here before it can be counted; until then requests with
** the new cudaVersion would get our hook for the old ABI, so `until`
** must be set on the old row when the new one is added.
*/
/* clang-format off */
#define PRELOAD_HOOKS(X)                                                                  \
    X(cuInit, vcu_pfn_cuInit, "cuInit", 2000, 0, HOOK_ANY, HOOK_CUDA)                    \
    X(cuGetProcAddress, vcu_pfn_cuGetProcAddress_v1, "cuGetProcAddress", 11030, 12000,   \
      HOOK_ANY, HOOK_CUDA)                                                               \
    X(cuGetProcAddress_v2, vcu_pfn_cuGetProcAddress, "cuGetProcAddress", 12000, 0,       \
      HOOK_ANY, HOOK_CUDA)                                                               \
    X(cuDeviceTotalMem_v2, vcu_pfn_cuDeviceTotalMem, "cuDeviceTotalMem", 3020, 0,        \
      HOOK_ANY, HOOK_CUDA)                                                               \
    X(cuMemGetInfo_v2, vcu_pfn_cuMemGetInfo, "cuMemGetInfo", 3020, 0, HOOK_ANY,          \
      HOOK_CUDA)                                                                         \
    X(cuMemAlloc_v2, vcu_pfn_cuMemAlloc, "cuMemAlloc", 3020, 0, HOOK_ANY, HOOK_CUDA)     \
    X(cuMemAllocPitch_v2, vcu_pfn_cuMemAllocPitch, "cuMemAllocPitch", 3020, 0,           \
      HOOK_ANY, HOOK_CUDA)                                                               \
    X(cuMemFree_v2, vcu_pfn_cuMemFree, "cuMemFree", 3020, 0, HOOK_ANY, HOOK_CUDA)        \
    X(cuMemAllocManaged, vcu_pfn_cuMemAllocManaged, "cuMemAllocManaged", 6000, 0,        \
      HOOK_ANY, HOOK_CUDA)                                                               \
    X(cuMemAllocAsync, vcu_pfn_cuMemAllocAsync, "cuMemAllocAsync", 11020, 0,             \
      HOOK_LEGACY, HOOK_CUDA)                                                            \
    X(cuMemAllocAsync_ptsz, vcu_pfn_cuMemAllocAsync, "cuMemAllocAsync", 11020, 0,        \
      HOOK_PTSZ, HOOK_CUDA)                                                              \
    X(cuMemAllocFromPoolAsync, vcu_pfn_cuMemAllocFromPoolAsync,                          \
      "cuMemAllocFromPoolAsync", 11020, 0, HOOK_LEGACY, HOOK_CUDA)                       \
    X(cuMemAllocFromPoolAsync_ptsz, vcu_pfn_cuMemAllocFromPoolAsync,                     \
      "cuMemAllocFromPoolAsync", 11020, 0, HOOK_PTSZ, HOOK_CUDA)                         \
    X(cuMemFreeAsync, vcu_pfn_cuMemFreeAsync, "cuMemFreeAsync", 11020, 0, HOOK_LEGACY,   \
      HOOK_CUDA)                                                                         \
    X(cuMemFreeAsync_ptsz, vcu_pfn_cuMemFreeAsync, "cuMemFreeAsync", 11020, 0,           \
      HOOK_PTSZ, HOOK_CUDA)                                                              \
    X(cuMemCreate, vcu_pfn_cuMemCreate, "cuMemCreate", 10020, 0, HOOK_ANY, HOOK_CUDA)    \
    X(cuMemRelease, vcu_pfn_cuMemRelease, "cuMemRelease", 10020, 0, HOOK_ANY, HOOK_CUDA) \
    X(cuMemRetainAllocationHandle, vcu_pfn_cuMemRetainAllocationHandle,                  \
      "cuMemRetainAllocationHandle", 11000, 0, HOOK_ANY, HOOK_CUDA)                      \
    X(cuArrayCreate_v2, vcu_pfn_cuArrayCreate, "cuArrayCreate", 3020, 0, HOOK_ANY,       \
      HOOK_CUDA)                                                                         \
    X(cuArray3DCreate_v2, vcu_pfn_cuArray3DCreate, "cuArray3DCreate", 3020, 0,           \
      HOOK_ANY, HOOK_CUDA)                                                               \
    X(cuArrayDestroy, vcu_pfn_cuArrayDestroy, "cuArrayDestroy", 2000, 0, HOOK_ANY,       \
      HOOK_CUDA)                                                                         \
    X(cuMemAllocHost_v2, vcu_pfn_cuMemAllocHost, "cuMemAllocHost", 3020, 0, HOOK_ANY,    \
      HOOK_CUDA)                                                                         \
    X(cuMemHostAlloc, vcu_pfn_cuMemHostAlloc, "cuMemHostAlloc", 2020, 0, HOOK_ANY,       \
      HOOK_CUDA)                                                                         \
    X(cuMemFreeHost, vcu_pfn_cuMemFreeHost, "cuMemFreeHost", 2000, 0, HOOK_ANY,          \
      HOOK_CUDA)                                                                         \
    X(cuMemHostRegister_v2, vcu_pfn_cuMemHostRegister, "cuMemHostRegister", 6050, 0,     \
      HOOK_ANY, HOOK_CUDA)                                                               \
    X(cuMemHostUnregister, vcu_pfn_cuMemHostUnregister, "cuMemHostUnregister", 4000, 0,  \
      HOOK_ANY, HOOK_CUDA)                                                               \
    X(nvmlDeviceGetMemoryInfo, vnvml_pfn_memory_info, NULL, 0, 0, HOOK_ANY, HOOK_NVML)   \
    X(nvmlDeviceGetMemoryInfo_v2, vnvml_pfn_memory_info_v2, NULL, 0, 0, HOOK_ANY,        \
      HOOK_NVML)
/* clang-format on */

#ifndef PRELOAD_HOOKS_LIST_ONLY

#include <stdint.h>

#include "driver/cuda_api.h"
#include "driver/nvml_api.h"

enum hook_stream { HOOK_ANY, HOOK_LEGACY, HOOK_PTSZ };
enum hook_lib { HOOK_CUDA, HOOK_NVML };

/* HOOK_ID_cuMemAlloc_v2, ...: each row's index. */
enum hook_id {
#define X(symbol, type, asked, since, until, stream, lib) HOOK_ID_##symbol,
    PRELOAD_HOOKS(X)
#undef X
        HOOK_COUNT
};

/* The hooks, each declared with its row's type: a definition that drifts
** from the driver's signature does not compile. */
#define PRELOAD_EXPORT __attribute__((visibility("default")))
#define X(symbol, type, asked, since, until, stream, lib)                                \
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
