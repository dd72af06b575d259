/* SPDX-License-Identifier: MIT */
/*
** vram.h -- the whole public API of libvram, a GPU memory allocator with
** TensorFlow's strategies for every framework.
**
** This header is the specification. Every function says what it does, who
** owns what, whether it is thread-safe and which statuses it returns.
**
** Vocabulary
**   context          One open backend (the CUDA driver or the simulated
**                    device) with its physical devices.
**   physical device  One GPU, as the backend sees it.
**   logical device   A slice of a physical device with its own cap and
**                    its own heap (TensorFlow's "logical/virtual device").
**                    Logical devices are numbered 0.. across all physical
**                    devices, in physical order.
**   region           Memory obtained from the backend in one call.
**   block            A piece of a region: handed out (allocated) or free.
**
** Conventions
**   - Every fallible function returns vram_status. VRAM_OK is 0.
**   - Out-parameters are written only when VRAM_OK is returned.
**   - After a failure, vram_last_error() gives a one-line explanation for
**     the calling thread (the OOM line, the bad environment value, ...).
**   - Sizes are bytes (uint64_t). Device addresses are void pointers; on
**     the simulated backend without host memory they cannot be
**     dereferenced.
**   - vram_close(NULL) does nothing.
**
** Thread safety: all functions may be called from any thread at any time,
** except that a context must not be used during or after vram_close().
*/
#ifndef VRAM_H
#define VRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h> /* ssize_t, for the PyTorch plug-in */

#ifdef __cplusplus
extern "C" {
#endif

/* VRAM_VERSION ("0.1.0"), VRAM_VERSION_MAJOR, _MINOR, _PATCH: from the build. */
#include "vram_version.h"

#if defined(__GNUC__)
#define VRAM_API __attribute__((visibility("default")))
#else
#define VRAM_API
#endif

/* ------------------------------------------------------------------ */
/* Statuses                                                             */
/* ------------------------------------------------------------------ */

/*
** X(name, number, message). Numbers are append-only: never reuse or
** renumber one, bindings and logs depend on them.
*/
#define VRAM_STATUS_LIST(X)                                                              \
    X(VRAM_OK, 0, "success")                                                             \
    X(VRAM_E_OOM, 1, "out of memory")                                                    \
    X(VRAM_E_INVALID, 2, "invalid argument")                                             \
    X(VRAM_E_INITIALIZED, 3,                                                             \
      "physical devices cannot be modified after being initialized")                     \
    X(VRAM_E_BACKEND, 4, "device backend call failed")                                   \
    X(VRAM_E_NO_DEVICE, 5, "no such device")                                             \
    X(VRAM_E_CONFIG, 6, "bad configuration value")                                       \
    X(VRAM_E_PARSE, 7, "malformed input")                                                \
    X(VRAM_E_IO, 8, "input/output error")                                                \
    X(VRAM_E_HOST_MEMORY, 9, "out of host memory")                                       \
    X(VRAM_E_UNSUPPORTED, 10, "not supported by this backend")                           \
    X(VRAM_E_NO_DRIVER, 11, "CUDA driver not available")                                 \
    X(VRAM_E_BAD_POINTER, 12, "pointer is not a live allocation of this device")

typedef enum vram_status {
#define VRAM_X_(name, num, msg) name = num,
    VRAM_STATUS_LIST(VRAM_X_)
#undef VRAM_X_
} vram_status;

/* A static string describing STATUS; "unknown status" for other values. */
VRAM_API const char *vram_strerror(vram_status status);

/* The symbolic name of STATUS, e.g. "VRAM_E_OOM"; NULL if unknown. */
VRAM_API const char *vram_status_name(vram_status status);

/*
** A one-line explanation of the last failure of a vram_ call on this
** thread, or "" if there is none. The string belongs to the library and
** stays valid until the thread's next vram_ call.
*/
VRAM_API const char *vram_last_error(void);

/* ------------------------------------------------------------------ */
/* Strategies                                                           */
/* ------------------------------------------------------------------ */

/*
** How a logical device obtains memory from its physical device.
**   PREALLOCATE  the whole cap in one region at the first allocation
**                (TensorFlow's default).
**   GROWTH       start empty; add regions sized to the demand so that
**                reserved bytes stay close to live bytes (vram's policy,
**                see docs/ALLOCATOR.md).
**   GROWTH_TF    TensorFlow's allow_growth: regions of 2 MiB, each new
**                one twice the last (kept for comparison).
**   EXPANDABLE   one virtual address range twice the cap, backed with
**                physical memory granule by granule (2 MiB on CUDA) only
**                where live blocks are. Free space never splits into
**                regions that cannot merge; physical memory follows live
**                bytes. Needs a backend with virtual-memory calls (the
**                simulator and CUDA both have them).
** Names accepted by vram_strategy_parse and VRAM_STRATEGY: "preallocate",
** "growth", "growth:tf-compat", "expandable".
*/
#define VRAM_STRATEGY_LIST(X)                                                            \
    X(VRAM_STRATEGY_PREALLOCATE, 0, "preallocate")                                       \
    X(VRAM_STRATEGY_GROWTH, 1, "growth")                                                 \
    X(VRAM_STRATEGY_GROWTH_TF, 2, "growth:tf-compat")                                    \
    X(VRAM_STRATEGY_EXPANDABLE, 3, "expandable")

typedef enum vram_strategy {
#define VRAM_X_(name, num, str) name = num,
    VRAM_STRATEGY_LIST(VRAM_X_)
#undef VRAM_X_
} vram_strategy;

/* The name of S ("growth", ...), or NULL if S is not a strategy. */
VRAM_API const char *vram_strategy_name(vram_strategy s);

/* Parse a strategy name. VRAM_E_INVALID if TEXT names none. */
VRAM_API vram_status vram_strategy_parse(const char *text, vram_strategy *out);

/* ------------------------------------------------------------------ */
/* Contexts                                                             */
/* ------------------------------------------------------------------ */

typedef enum vram_backend_kind {
    VRAM_BACKEND_DEFAULT = 0, /* VRAM_BACKEND from the environment, else cuda */
    VRAM_BACKEND_SIM = 1,     /* the simulated device */
    VRAM_BACKEND_CUDA = 2     /* the CUDA driver, loaded at run time */
} vram_backend_kind;

/* An NVIDIA H200's memory as the driver reports it: 143,771 MiB. */
#define VRAM_SIM_DEFAULT_MEMORY (143771ULL << 20)

/* Settings of the simulated backend. Zero means "the default". */
/* The simulated backend's most devices (ordinals 0 to VRAM_SIM_MAX_DEVICES-1). */
#define VRAM_SIM_MAX_DEVICES 64

typedef struct vram_sim_options {
    int devices;             /* physical devices; default 1 */
    uint64_t memory_bytes;   /* total memory per device; default H200 */
    uint64_t others_bytes;   /* memory held by "other processes": reduces
                                free memory as seen at start; default 0 */
    int cc_major, cc_minor;  /* compute capability; default 9.0 (H200) */
    bool host_backed;        /* back every region with host memory so that
                                tests can write through the addresses */
    uint64_t fail_call;      /* fail the Nth backend call (1-based) with
                                fail_status; 0 = never */
    vram_status fail_status; /* default VRAM_E_BACKEND */
    int event_queries;       /* > 0: give streams events that complete after
                                this many queries (to test the stream rule);
                                0: no events, work completes at once */
    void *capture_stream;    /* non-NULL: this stream is capturing a CUDA
                                graph (to test graph pools, vram_pool_begin) */
    const char *driver_costs; /* "h200": count for each call what the CUDA
                                 driver's costs on an H200, as measured
                                 (docs/ALLOCATOR.md, "Driver cost model"),
                                 device synchronizes included, in the
                                 statistic modelled_driver_ns; NULL or "":
                                 no model */
} vram_sim_options;

typedef struct vram_options {
    vram_backend_kind backend;
    vram_sim_options sim;    /* used when the backend is the simulator */
    bool ignore_environment; /* true: read no VRAM_* / TF_* variables;
                                every setting comes from the API, and a
                                device not configured with vram_configure
                                has the defaults of docs/ENVIRONMENT.md
                                (strategy expandable) */
} vram_options;

typedef struct vram_context vram_context;

/*
** Open a context. OPTIONS may be NULL (all defaults); it is copied.
** Unless options->ignore_environment, the environment variables listed
** in docs/ENVIRONMENT.md are read here, once: they choose the backend,
** configure the simulator and give every physical device its initial
** configuration (strategy, fraction, per-device limits), which
** vram_configure() may still change before the device is initialized.
** Returns VRAM_E_CONFIG for a malformed variable (vram_last_error names
** it), VRAM_E_NO_DRIVER when the CUDA backend is asked for and no driver
** loads, VRAM_E_HOST_MEMORY.
*/
VRAM_API vram_status vram_open(const vram_options *options, vram_context **out);

/*
** Close CTX: every region goes back to the backend, every vram_device
** handle of CTX becomes invalid, an open trace file is flushed and closed.
** Live allocations are released with their regions. NULL does nothing.
*/
VRAM_API void vram_close(vram_context *ctx);

/* ------------------------------------------------------------------ */
/* Physical devices and their configuration                            */
/* ------------------------------------------------------------------ */

typedef struct vram_physical_info {
    int index;              /* ordinal in this context */
    char name[96];          /* e.g. "NVIDIA H200" */
    char uuid[48];          /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    uint64_t total_bytes;   /* total memory */
    uint64_t free_bytes;    /* free memory now, as the backend says */
    int cc_major, cc_minor; /* compute capability */
    uint64_t granularity;   /* virtual-memory granularity, bytes */
} vram_physical_info;

/* Number of physical devices of CTX. */
VRAM_API vram_status vram_physical_count(vram_context *ctx, int *out);

/* Facts about physical device INDEX. VRAM_E_NO_DEVICE if out of range. */
VRAM_API vram_status vram_physical_info_get(vram_context *ctx, int index,
                                            vram_physical_info *out);

#define VRAM_MAX_LOGICAL 16

/*
** The configuration of one physical device, with TensorFlow's meaning:
**   strategy      how memory is obtained (above). A device nobody
**                 configures has the environment's (VRAM_STRATEGY), else
**                 expandable; a zeroed struct names PREALLOCATE (0).
**   fraction      per_process_gpu_memory_fraction: the cap of each
**                 logical device without an explicit limit is
**                 fraction x total memory; 0 = unset.
**   n_logical     how many logical devices the GPU is split into
**                 (0 or 1: one). With more than one, each needs a limit.
**   limit_bytes   memory_limit of each logical device; 0 = unset.
** With neither fraction nor limit, the cap is the free memory at
** initialization minus TensorFlow's reserve: 225 MiB if less than 2 GiB is
** free, else 500 / 1050 / 1536 MiB for compute capability <= 6 / 7 /
** higher (TF_DEVICE_MIN_SYS_MEMORY_IN_MB overrides the reserve).
*/
typedef struct vram_device_config {
    vram_strategy strategy;
    double fraction;
    int n_logical;
    uint64_t limit_bytes[VRAM_MAX_LOGICAL];
} vram_device_config;

/*
** Set the configuration of physical device INDEX; CONFIG is copied.
** Fails with VRAM_E_INITIALIZED once the device is initialized (a logical
** device of it was fetched with vram_device_get), VRAM_E_INVALID for a
** fraction outside (0, 1], an unknown strategy, n_logical outside
** 0..VRAM_MAX_LOGICAL or several logical devices without limits,
** VRAM_E_NO_DEVICE.
*/
VRAM_API vram_status vram_configure(vram_context *ctx, int index,
                                    const vram_device_config *config);

/* The configuration physical device INDEX has now. */
VRAM_API vram_status vram_get_config(vram_context *ctx, int index,
                                     vram_device_config *out);

/* ------------------------------------------------------------------ */
/* Logical devices                                                      */
/* ------------------------------------------------------------------ */

typedef struct vram_device vram_device;

/*
** Number of logical devices of CTX under the current configuration
** (each physical device contributes max(1, n_logical)).
*/
VRAM_API vram_status vram_device_count(vram_context *ctx, int *out);

/*
** Fetch logical device INDEX. This initializes its physical device: the
** caps are computed and the configuration is frozen (TensorFlow's
** list_logical_devices). The handle belongs to CTX and lives until
** vram_close(ctx). VRAM_E_NO_DEVICE if INDEX is out of range.
*/
VRAM_API vram_status vram_device_get(vram_context *ctx, int index, vram_device **out);

typedef struct vram_device_info {
    int index;              /* logical index */
    int physical;           /* physical device index */
    vram_strategy strategy; /* how it obtains memory */
    uint64_t limit_bytes;   /* the cap of this logical device, bytes */
} vram_device_info;

VRAM_API vram_status vram_device_info_get(vram_device *dev, vram_device_info *out);

/* ------------------------------------------------------------------ */
/* Allocation                                                           */
/* ------------------------------------------------------------------ */

/*
** Allocate SIZE bytes on DEV for use on STREAM (an opaque handle such as a
** cudaStream_t; NULL is the default stream, remembered with the block).
** The size is rounded up to 256 bytes and the address is 256-byte
** aligned. SIZE 0 succeeds with *out = NULL.
** Returns VRAM_E_OOM when the cap or the device is exhausted (after
** giving wholly free regions back to the backend and retrying);
** vram_last_error() then holds a one-line explanation, and
** VRAM_OOM_DUMP=1 writes the full dump (vram_dump) to the log.
** VRAM_E_BACKEND when the backend fails otherwise. Thread-safe; no lock
** is held while the backend is called.
*/
VRAM_API vram_status vram_alloc(vram_device *dev, size_t size, void *stream, void **out);

/*
** Streams. Every block remembers the stream it was allocated on. While a
** device has seen only one stream, a freed block is reusable at once. Once
** allocations arrive on a second stream (or vram_record_stream names one),
** the rule is:
**   - a block freed on stream S that no other stream used may be reused at
**     once by an allocation on S (work on one stream runs in order);
**   - any other reuse waits until the work queued at the time of the free
**     has completed on S and on every stream vram_record_stream recorded
**     for the block: vram_free records an event on each, and the block
**     returns to the heap only when a later allocation finds all of them
**     complete (the device is never synchronized; before an OOM every
**     pending event is queried).
** Pending blocks do not count as in use. The simulated backend has no
** streams: its work completes at once.
**
** Give back the block at PTR, allocated from DEV. NULL does nothing.
** VRAM_E_BAD_POINTER if PTR is not a live allocation of DEV (nothing is
** changed then). When the events cannot be recorded (VRAM_E_BACKEND,
** VRAM_E_HOST_MEMORY) the block stays allocated: it is never reused
** unproven. Thread-safe.
*/
VRAM_API vram_status vram_free(vram_device *dev, void *ptr);

/*
** Record that the live block at PTR is used by work queued on STREAM, a
** stream other than the one it was allocated on (PyTorch's
** Tensor.record_stream): when the block is freed, it is not reused until
** the work queued on STREAM by then has completed too (see "Streams"
** above). Recording the allocation stream, or a stream twice, does
** nothing. VRAM_E_BAD_POINTER if PTR is not a live allocation of DEV;
** VRAM_E_HOST_MEMORY. Thread-safe.
*/
VRAM_API vram_status vram_record_stream(vram_device *dev, const void *ptr, void *stream);

/*
** CUDA graph pools. While a CUDA graph is captured, the addresses its
** kernels use are baked into the graph, which may replay at any later
** time; memory it allocated must therefore not serve anything else until
** the graph is gone. Between vram_pool_begin(dev, POOL) and
** vram_pool_end(dev, POOL), every allocation on a stream that is
** capturing a graph (the backend asks the driver: cuStreamIsCapturing)
** comes from pool POOL: a block freed afterwards stays reserved for
** POOL, which reuses it for later allocations of the same stream (also in
** a later capture into the same pool), until vram_pool_release(dev, POOL)
** gives the pool's freed blocks back to the device (after one
** synchronize: a replay may still run); blocks of POOL still allocated
** then go back when freed.
**
** While any pool is open vram records and queries no event, frees no
** device memory and never synchronizes, as capture requires: frees of
** other blocks that need events (several streams in use) are deferred to
** the close of the last open pool, and the driver calls that obtain memory
** are made in the relaxed capture mode.
** The expandable strategy cannot then move memory mapped at another
** address (that needs a synchronize): such an allocation fails with
** VRAM_E_UNSUPPORTED and a line saying so; warming up before capture
** avoids it.
**
** POOL is any nonzero number chosen by the caller. vram_pool_begin:
** VRAM_E_INVALID if POOL is 0 or already open; VRAM_E_HOST_MEMORY.
** vram_pool_end: VRAM_E_INVALID if POOL is not open. vram_pool_release:
** VRAM_E_INVALID if POOL is unknown or still open; VRAM_E_BACKEND if the
** synchronize fails (the pool then keeps its blocks). Thread-safe.
*/
VRAM_API vram_status vram_pool_begin(vram_device *dev, uint64_t pool);
VRAM_API vram_status vram_pool_end(vram_device *dev, uint64_t pool);
VRAM_API vram_status vram_pool_release(vram_device *dev, uint64_t pool);

/*
** The usable size of the live block at PTR (the request rounded up, or
** more when the block was not split) and the stream it was allocated on.
** Either out-pointer may be NULL. VRAM_E_BAD_POINTER as for vram_free.
*/
VRAM_API vram_status vram_block_info(vram_device *dev, const void *ptr, uint64_t *size,
                                     void **stream);

/*
** Into *BASE and *SIZE, the backend allocation that holds the live block
** at PTR. For growth, limit, fraction and preallocate, the region
** (cuMemAlloc) the block was cut from, which CUDA IPC needs: a
** cudaIpcMemHandle names a whole cuMemAlloc allocation, and the receiver
** adds PTR - BASE. For expandable, the block itself (virtual memory has no
** legacy IPC handle). VRAM_E_BAD_POINTER as for vram_free; VRAM_E_INVALID
** for a NULL out-pointer.
*/
VRAM_API vram_status vram_block_base(vram_device *dev, const void *ptr, void **base,
                                     uint64_t *size);

/*
** Change the cap of DEV while it is in use (what PyTorch's
** set_per_process_memory_fraction does): from now on the device obtains no
** memory that would take what it holds past BYTES. The cap DEV was
** configured with is the upper bound: a larger BYTES is lowered to it (the
** expandable strategy's address range is sized to it). VRAM_E_INVALID when
** DEV holds more than BYTES from the device now: give memory back first
** (free it; vram_release_idle); the cap is then unchanged. Thread-safe.
*/
VRAM_API vram_status vram_set_limit(vram_device *dev, uint64_t bytes);

/*
** Give DEV's idle memory back to the driver (what torch.cuda.empty_cache()
** does for PyTorch's own allocator), so that other processes, or other
** allocators of this one, can use it:
**
**   expandable   physical memory no live block uses is unmapped from every
**                address it is mapped at and released (cuMemUnmap,
**                cuMemRelease), after one device synchronize: kernels
**                queued before the frees may still use those addresses.
**                Memory is given back in the pieces it was obtained in
**                (the run of units one allocation needed, up to 64 MiB):
**                a piece part of which a live block uses is kept whole;
**   growth,      wholly free regions are given back (cuMemFree);
**   growth:tf-compat
**   preallocate  nothing: its one region is the cap, held until close.
**
** Blocks freed while work on another stream may still use them (see
** vram_record_stream) are given back only once that work has completed:
** their events are queried first, and those not done keep their memory.
** Live blocks are never touched, and the cap is unchanged: memory given
** back is obtained again on demand. *RELEASED (if not NULL) receives the
** bytes given back; bytes_reserved in vram_get_stats drops by as much.
** VRAM_E_UNSUPPORTED while a CUDA graph is captured (vram_pool_begin):
** capture forbids freeing memory. VRAM_E_BACKEND when the driver refused
** some calls: what it refused stays held and usable. Thread-safe.
*/
VRAM_API vram_status vram_release_idle(vram_device *dev, uint64_t *released);

/* ------------------------------------------------------------------ */
/* Statistics                                                           */
/* ------------------------------------------------------------------ */

/* TensorFlow's get_memory_info: bytes in use now and their peak. */
typedef struct vram_memory_info {
    uint64_t current;
    uint64_t peak;
} vram_memory_info;

VRAM_API vram_status vram_get_memory_info(vram_device *dev, vram_memory_info *out);

/*
** X(type, name, unit, doc): every statistic, in one list from which the
** struct, the CLI and later the exporter are generated.
*/
#define VRAM_STATS_LIST(X)                                                               \
    X(uint64_t, bytes_in_use, "bytes",                                                   \
      "bytes in blocks handed out (requests rounded up to 256)")                         \
    X(uint64_t, peak_bytes_in_use, "bytes", "peak of bytes_in_use")                      \
    X(uint64_t, bytes_requested, "bytes",                                                \
      "bytes asked for by the live allocations (before rounding)")                       \
    X(uint64_t, bytes_reserved, "bytes", "bytes held from the backend")                  \
    X(uint64_t, peak_bytes_reserved, "bytes", "peak of bytes_reserved")                  \
    X(uint64_t, bytes_limit, "bytes", "the cap of this logical device")                  \
    X(uint64_t, largest_free_block, "bytes",                                             \
      "largest block that can be handed out without growing")                            \
    X(uint64_t, live_blocks, "blocks", "allocations alive now")                          \
    X(uint64_t, regions, "regions", "regions held from the backend")                     \
    X(uint64_t, num_allocs, "calls", "successful allocations")                           \
    X(uint64_t, num_frees, "calls", "frees")                                             \
    X(uint64_t, num_ooms, "calls", "allocations refused for lack of memory")             \
    X(uint64_t, backend_calls, "calls",                                                  \
      "calls to the backend that obtain or release memory")                              \
    X(uint64_t, metadata_bytes, "bytes",                                                 \
      "host memory used by the allocator's bookkeeping")                                 \
    X(double, fragmentation, "ratio",                                                    \
      "peak_bytes_reserved / peak_bytes_in_use (1.0 is ideal; 0 if unused)")             \
    X(uint64_t, maps, "calls", "expandable: units of address space mapped to memory")    \
    X(uint64_t, unmaps, "calls",                                                         \
      "expandable: units unmapped because another unit had taken their memory")         \
    X(uint64_t, modelled_driver_ns, "ns",                                                \
      "simulated device with a driver cost model: time the real driver would have "      \
      "spent in this physical device's calls so far; 0 otherwise")                       \
    X(uint64_t, peak_live_blocks, "blocks", "peak of live_blocks")                       \
    X(uint64_t, bytes_allocated_total, "bytes",                                          \
      "bytes of every block handed out so far (rounded as bytes_in_use)")                \
    X(uint64_t, bytes_freed_total, "bytes", "bytes of every block freed so far")         \
    X(uint64_t, alloc_retries, "calls",                                                  \
      "allocations that found no room, gave idle memory back to the backend and "        \
      "tried again")                                                                     \
    X(uint64_t, bytes_pending, "bytes",                                                  \
      "bytes freed but not yet reusable: work queued on another stream may still use "   \
      "them (docs/ALLOCATOR.md, \"Streams\")")

typedef struct vram_stats {
#define VRAM_X_(type, name, unit, doc) type name;
    VRAM_STATS_LIST(VRAM_X_)
#undef VRAM_X_
} vram_stats;

/* A consistent snapshot of DEV's statistics. Thread-safe. */
VRAM_API vram_status vram_get_stats(vram_device *dev, vram_stats *out);

/*
** sizeof(vram_stats) in this library, for bindings that declare the
** struct themselves (the Python package, through ctypes) and check that
** their declaration matches the library they loaded. Cannot fail.
*/
VRAM_API size_t vram_stats_size(void);

/* Set the peaks (in use, reserved, live blocks) of DEV to their current
** values. */
VRAM_API vram_status vram_reset_peak(vram_device *dev);

/* ------------------------------------------------------------------ */
/* Out of memory and diagnostics                                        */
/* ------------------------------------------------------------------ */

/*
** Write into BUF (LEN bytes, always NUL-terminated when LEN > 0) the
** one-line explanation of an allocation of SIZE bytes failing on DEV now:
** requested, in use, reserved, cap, largest free block, and the one
** setting worth trying (never one already in force). Returns
** VRAM_E_INVALID if BUF is NULL or LEN is 0.
*/
VRAM_API vram_status vram_explain_oom(vram_device *dev, uint64_t size, char *buf,
                                      size_t len);

/*
** Write DEV's full state to OUT for people used to TensorFlow's OOM dump:
** statistics, free blocks per size bin, regions, the block map and a
** 100-character occupancy map per region. VRAM_E_IO if writing fails.
*/
VRAM_API vram_status vram_dump(vram_device *dev, FILE *out);

/*
** Walk every region and block of DEV and verify the allocator's
** invariants (docs/ALLOCATOR.md). Returns true when all hold; otherwise
** false, and vram_last_error() names the first broken one. For tests and
** debugging: O(blocks).
*/
VRAM_API bool vram_check(vram_device *dev);

/* ------------------------------------------------------------------ */
/* PyTorch plug-in                                                      */
/* ------------------------------------------------------------------ */

/*
** Entry points for PyTorch's torch.cuda.memory.CUDAPluggableAllocator,
** which the Python package plugs in with every hook below:
**
**   import vram.torch
**   vram.torch.use()    # before the first CUDA tensor (docs/PYTHON.md)
**
** PyTorch declares the stream parameters as cudaStream_t; vram takes them
** as void * (a cudaStream_t is a pointer), so this header needs no CUDA
** header. Sizes are ssize_t as PyTorch passes them.
**
** All three functions share one context of the process, opened on first
** use with vram_open(NULL, ...): the backend (VRAM_BACKEND, default cuda),
** the strategy (VRAM_STRATEGY; unset: expandable, see docs/ENVIRONMENT.md),
** the caps (VRAM_MEMORY_LIMIT, VRAM_MEMORY_FRACTION) and logging come from
** the environment, read once. The context lives until the process ends
** (PyTorch may free tensors during interpreter shutdown).
**
** DEVICE is PyTorch's CUDA ordinal, which is the physical device index of
** vram's CUDA backend (both count the devices CUDA_VISIBLE_DEVICES leaves
** visible, in the same order). Allocations on it go to the first logical
** device of that physical device: with one logical device per GPU (the
** usual case) logical index == physical index; when VRAM_MEMORY_LIMIT
** splits GPUs (e.g. 0:3G+3G) the first slice of each GPU is used.
**
** Thread-safe; the first call from several threads at once opens the
** context exactly once. Nothing here ever terminates the process.
*/

/*
** Allocate SIZE bytes on CUDA device DEVICE for use on STREAM (a
** cudaStream_t). Returns the device address, or NULL when SIZE is 0 (the
** usual answer for a zero-size tensor) and on any failure: a negative
** SIZE, the context cannot be opened, no such device, out of memory. On
** failure one line "vram: <vram_last_error()>" is written to stderr (for
** OOM the one-line explanation: requested, in use, reserved, cap, what to
** try), and vram_last_error() keeps that line for the calling thread.
** PyTorch 2.11 does not check the NULL (no OutOfMemoryError; the tensor's
** pointer is 0): see the README's PyTorch section.
*/
VRAM_API void *vram_torch_malloc(ssize_t size, int device, void *stream);

/*
** Give back PTR, allocated by vram_torch_malloc on DEVICE. SIZE and STREAM
** are what PyTorch passes and are not needed (the block remembers its own
** size and stream). NULL does nothing. A PTR that is not a live
** allocation of DEVICE (or a bad DEVICE) writes one line "vram: ..." to
** stderr and changes nothing.
*/
VRAM_API void vram_torch_free(void *ptr, ssize_t size, int device, void *stream);

/*
** Into *OUT, the peak bytes reserved from the device (peak_bytes_reserved
** of vram_get_stats) by the plug-in's logical device for CUDA device
** DEVICE: PyTorch's own statistics are empty under a pluggable allocator,
** so this is how a script reads them (e.g. through ctypes). Opens the
** context if no allocation did yet. Returns VRAM_OK, VRAM_E_INVALID for a
** NULL OUT, VRAM_E_NO_DEVICE, or the status that opening the context
** failed with (VRAM_E_CONFIG, VRAM_E_NO_DRIVER, ...); vram_last_error()
** says why.
*/
VRAM_API vram_status vram_torch_peak_reserved(int device, uint64_t *out);

/*
** Into *OUT, the plug-in's logical device for CUDA device DEVICE: the one
** vram_torch_malloc allocates from, so that a script (the Python package
** vram, through ctypes) reports what PyTorch allocated through vram with
** vram_get_memory_info, vram_get_stats or vram_reset_peak. The handle
** lives as long as the process. Opens the context if no allocation did
** yet. Returns VRAM_OK, VRAM_E_INVALID for a NULL OUT, VRAM_E_NO_DEVICE,
** or the status that opening the context failed with; vram_last_error()
** says why. Thread-safe.
*/
VRAM_API vram_status vram_torch_device(int device, vram_device **out);

/*
** The hooks of PyTorch's allocator object (the object that
** CUDAPluggableAllocator(...).allocator() returns), each installed with
** its setter and the function's address (python/vram/torch.py does it all):
**
**   set_record_stream_fn(vram_torch_record_stream)
**       Tensor.record_stream(s): the block is not reused before the work
**       queued on S by the time of its free has completed
**       (vram_record_stream).
**   set_memory_fraction_fn(vram_torch_set_memory_fraction)
**       torch.cuda.set_per_process_memory_fraction(f, device): the cap of
**       the device becomes f times its total memory, never more than the
**       cap vram was configured with (vram_set_limit).
**   set_base_alloc_fn(vram_torch_base_alloc)
**       for CUDA IPC (sharing a CUDA tensor with another process): the
**       cuMemAlloc region holding PTR and its size (vram_block_base).
**   set_begin_allocate_to_pool(vram_torch_begin_allocate_to_pool),
**   set_end_allocate_to_pool_fn(vram_torch_end_allocate_to_pool),
**   set_release_pool(vram_torch_release_pool)
**       CUDA graph capture: allocations on a capturing stream come from
**       the graph's private pool until it is released (vram_pool_begin).
**       PyTorch passes the pool id as a pair of 64-bit numbers (its
**       MempoolId_t, passed by value in two registers) and a C++ filter
**       (passed by reference), which vram does not call: it asks the
**       driver which streams capture.
**
** None of them returns an error: a failure writes one "vram: ..." line to
** stderr and changes nothing (base_alloc then returns PTR).
*/
VRAM_API void vram_torch_record_stream(void *ptr, void *stream);
VRAM_API void vram_torch_set_memory_fraction(double fraction, int device);
VRAM_API void *vram_torch_base_alloc(void *ptr, size_t *size);
VRAM_API void vram_torch_begin_allocate_to_pool(int device, uint64_t pool_first,
                                                uint64_t pool_second, void *filter);
VRAM_API void vram_torch_end_allocate_to_pool(int device, uint64_t pool_first,
                                              uint64_t pool_second);
VRAM_API void vram_torch_release_pool(int device, uint64_t pool_first,
                                      uint64_t pool_second);

/*
** torch.cuda.empty_cache() with vram plugged in (PyTorch's allocator
** object: set_reset_fn(vram_torch_empty_cache)): vram_release_idle on every
** device the plug-in has opened. Failures write one "vram: ..." line.
*/
VRAM_API void vram_torch_empty_cache(void);

/* ------------------------------------------------------------------ */
/* Phase marks                                                          */
/* ------------------------------------------------------------------ */

/*
** Mark a phase of the program ("epoch 3", "step 120") in the allocation
** trace of every open context that records one (VRAM_TRACE), so that
** `vram analyze` can cut the trace into iterations and attribute the
** peak. LABEL is copied; commas, quotes and control characters in it are
** replaced by spaces, and it is cut at 128 bytes. Cheap when no trace is
** recorded. VRAM_E_INVALID if LABEL is NULL or empty; VRAM_E_IO if writing
** the trace fails. Thread-safe.
*/
VRAM_API vram_status vram_mark(const char *label);

#ifdef __cplusplus
}
#endif

#endif /* VRAM_H */
