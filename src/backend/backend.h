/* SPDX-License-Identifier: MIT */
/*
** backend.h -- the contract between the allocator and a source of device
** memory: the CUDA driver (cuda.c) or the simulated device (sim.c).
**
** A backend is a struct whose first member is `struct backend`; the ops
** table holds its functions. Every function returns a vram_status and
** writes its out-parameters only on success; on failure it sets the
** thread's last error (error_set) to a one-line reason that names the
** underlying call. VRAM_E_OOM means "the device has no memory for this";
** any other failure is VRAM_E_BACKEND (or VRAM_E_NO_DEVICE /
** VRAM_E_INVALID for bad arguments). Every function is thread-safe: the
** allocator calls them without holding its own locks.
**
** Devices are the backend's ordinals 0..count-1. Addresses and handles
** are opaque 64-bit values; 0 is never a valid address or handle.
*/
#ifndef VRAM_BACKEND_BACKEND_H
#define VRAM_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "vram.h"

struct backend;

struct backend_ops {
    const char *name; /* "sim", "cuda", "fault(sim)" */

    /* Release the backend and whatever it still holds. */
    void (*close)(struct backend *b);

    /* Number of physical devices. */
    vram_status (*device_count)(struct backend *b, int *out);

    /* Name, UUID, total/free memory, compute capability, granularity. */
    vram_status (*device_info)(struct backend *b, int dev, vram_physical_info *out);

    /* Free and total memory of DEV now (cuMemGetInfo). */
    vram_status (*mem_get_info)(struct backend *b, int dev, uint64_t *free_bytes,
                                uint64_t *total_bytes);

    /* Obtain SIZE bytes of device memory in one piece (cuMemAlloc); the
    ** address is aligned to at least 512 bytes. VRAM_E_OOM if the device
    ** cannot supply it. */
    vram_status (*mem_alloc)(struct backend *b, int dev, uint64_t size, uint64_t *addr);

    /* Give back memory obtained by mem_alloc (cuMemFree). */
    vram_status (*mem_free)(struct backend *b, int dev, uint64_t addr);

    /*
    ** Virtual memory, for the expandable strategy; NULL where the backend
    ** has none. va_reserve reserves address space only (no memory);
    ** phys_create obtains SIZE bytes of physical memory (a multiple of the
    ** granularity) as a handle; map backs [addr, addr+size) with a handle
    ** and makes it accessible from DEV; unmap undoes a map.
    */
    vram_status (*va_reserve)(struct backend *b, int dev, uint64_t size, uint64_t *addr);
    vram_status (*va_release)(struct backend *b, int dev, uint64_t addr, uint64_t size);
    vram_status (*phys_create)(struct backend *b, int dev, uint64_t size,
                               uint64_t *handle);
    vram_status (*phys_release)(struct backend *b, int dev, uint64_t handle);
    vram_status (*map)(struct backend *b, int dev, uint64_t addr, uint64_t size,
                       uint64_t handle);
    vram_status (*unmap)(struct backend *b, int dev, uint64_t addr, uint64_t size);

    /*
    ** Stream ordering, for cross-stream reuse of freed blocks; NULL where
    ** the backend has no streams (the simulator: its work completes at
    ** once). event_record creates an event, records it on STREAM (an opaque
    ** cudaStream_t/CUstream; 0 = the default stream) and returns its
    ** handle; event_query sets *done when all work captured by the event
    ** has completed; event_destroy releases it.
    */
    vram_status (*event_record)(struct backend *b, int dev, uint64_t stream,
                                uint64_t *event);
    vram_status (*event_query)(struct backend *b, int dev, uint64_t event, bool *done);
    vram_status (*event_destroy)(struct backend *b, int dev, uint64_t event);

    /* Wait until all work queued on DEV by this process has completed
    ** (cuCtxSynchronize). Needed before memory that kernels may still use
    ** is unmapped and moved. NULL: work completes at once (simulator). */
    vram_status (*synchronize)(struct backend *b, int dev);

    /* Set *active when STREAM is capturing a CUDA graph now
    ** (cuStreamIsCapturing). While one is, vram records and queries no
    ** event, frees no device memory and never synchronizes: the capture
    ** forbids it. NULL: no stream ever captures (the simulator, unless a
    ** test names a capturing stream). */
    vram_status (*stream_capturing)(struct backend *b, int dev, uint64_t stream,
                                    bool *active);

    /* The simulator with a driver cost model (vram_sim_options.driver_costs):
    ** ns the real driver would have spent in DEV's calls so far. NULL
    ** otherwise. */
    uint64_t (*modelled_ns)(struct backend *b, int dev);
};

struct backend {
    const struct backend_ops *ops;
};

/* The simulated device (sim.c). OPTIONS is copied; zero fields take the
** defaults documented in vram.h. */
vram_status backend_sim_open(const vram_sim_options *options, struct backend **out);

/*
** Wrap INNER so that its FAIL_CALL-th call (1-based, counting every
** function but close) fails with STATUS without reaching INNER. The
** wrapper owns INNER and closes it. Used by tests and by
** vram_sim_options.fail_call.
*/
vram_status backend_fault_open(struct backend *inner, uint64_t fail_call,
                               vram_status status, struct backend **out);

/*
** The CUDA driver, loaded with dlopen at run time (cuda.c). LIBRARY is the
** file to load (NULL: "libcuda.so.1"). VRAM_E_NO_DRIVER when it cannot be
** loaded or cuInit fails (the last error says which and why).
*/
vram_status backend_cuda_open(const char *library, struct backend **out);

/*
** The UUIDs of the devices the CUDA driver LIBRARY (NULL: libcuda.so.1)
** shows this process, in CUDA ordinal order (after CUDA_VISIBLE_DEVICES),
** into UUIDS (MAX of them at most), and how many devices there are into *N.
** No context is created: no device memory is used. Errors as
** backend_cuda_open.
*/
vram_status backend_cuda_uuids(const char *library, char (*uuids)[48], int max, int *n);

/* Calls made so far through a fault wrapper (tests use it to know when
** every call has been failed once). */
uint64_t backend_fault_calls(const struct backend *b);

#endif
