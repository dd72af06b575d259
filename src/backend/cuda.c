/* SPDX-License-Identifier: MIT */
/*
** cuda.c -- the CUDA driver backend: device memory from libcuda.so.1,
** loaded with dlopen at run time, so that vram builds and runs (on the
** simulated backend) where no CUDA SDK or driver is installed.
**
** Devices are the driver's ordinals. The driver already applies
** CUDA_VISIBLE_DEVICES (ordinals, UUIDs or MIG names) before we see
** anything, so ordinal 0 is the first *visible* GPU, whatever its index in
** nvidia-smi. Ordinals therefore differ between processes of one machine;
** the UUID ("GPU-..." as nvidia-smi prints it) does not, and it is what
** names a device in every message, log line and cross-process key.
**
** Contexts: each device's primary context (the one the CUDA runtime, and so
** PyTorch, JAX and TensorFlow, share) is retained on the first call that
** needs it and released at close. Every such call pushes it, calls, and
** pops it again, so that it works from any thread and leaves the caller's
** current context exactly as it found it.
**
** Locks: none. The only mutable state is each device's primary context,
** published with a compare-and-swap (see cuda_primary), so no lock is ever
** held across a driver call.
**
** Errors: a failing driver call becomes "SYMBOL: NAME (TEXT)", e.g.
** "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", with status
** VRAM_E_OOM for CUDA_ERROR_OUT_OF_MEMORY, VRAM_E_NO_DEVICE for
** CUDA_ERROR_NO_DEVICE / CUDA_ERROR_INVALID_DEVICE and VRAM_E_BACKEND for
** everything else (cuda_fail).
*/
#include <dlfcn.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "base/uuid.h"
#include "driver/cuda_api.h"

_Static_assert(SIZE_MAX >= UINT64_MAX, "the CUDA backend needs a 64-bit size_t");
_Static_assert(sizeof(vcu_deviceptr) == sizeof(uint64_t), "CUdeviceptr is 64 bits");
_Static_assert(sizeof(void *) == sizeof(vcu_pfn_cuInit),
               "dlsym's result must fit a function pointer");

#define CUDA_DEFAULT_LIBRARY "libcuda.so.1"
#define CUDA_FALLBACK_GRANULARITY (2ULL << 20) /* without the VM API: 2 MiB */

/* ================================================================== */
/* Loader                                                              */
/* ================================================================== */

/* One row per entry point, generated from VCU_ENTRY_POINTS. */
static const struct vcu_entry_desc {
    const char *symbol;   /* looked up first */
    const char *fallback; /* looked up if SYMBOL is missing; may be NULL */
    enum vcu_need need;
    size_t offset; /* of the function pointer in struct vcu_api */
} vcu_entries[VCU_N_ENTRIES] = {
#define X(field, symbol, fallback, need, ret, params)                                    \
    {#symbol, fallback, need, offsetof(struct vcu_api, field)},
    VCU_ENTRY_POINTS(X, VCU_OWN_TYPE)
#undef X
};

/* dlerror() for LIBRARY without its leading "LIBRARY: ", which our own
** message already names. */
static const char *
dl_reason(const char *library)
{
    const char *why = dlerror();
    if (why == NULL)
        return "unknown reason";
    size_t n = strlen(library);
    if (strncmp(why, library, n) == 0 && strncmp(why + n, ": ", 2) == 0)
        return why + n + 2;
    return why;
}

vram_status
vcu_api_load(const char *library, struct vcu_api *out)
{
    const char *path = library != NULL ? library : CUDA_DEFAULT_LIBRARY;
    /* RTLD_LOCAL: the driver's symbols must not satisfy anyone else's
    ** lookups (an interposer may be preloaded). */
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return error_set(VRAM_E_NO_DRIVER, "CUDA driver not found (%s: %s)", path,
                         dl_reason(path));

    struct vcu_api api;
    memset(&api, 0, sizeof api);
    api.library = lib;
    api.vmm = true;
    for (int i = 0; i < VCU_N_ENTRIES; i++) {
        const struct vcu_entry_desc *e = &vcu_entries[i];
        const char *found = e->symbol;
        void *sym = dlsym(lib, found);
        if (sym == NULL && e->fallback != NULL) {
            found = e->fallback;
            sym = dlsym(lib, found);
        }
        if (sym == NULL) {
            if (e->need == VCU_REQUIRED) {
                dlclose(lib);
                return error_set(VRAM_E_NO_DRIVER,
                                 "CUDA driver %s lacks %s: the driver is too old or "
                                 "not NVIDIA's",
                                 path, e->symbol);
            }
            if (e->need == VCU_VMM)
                api.vmm = false;
            continue;
        }
        /* ISO C has no conversion from void * to a function pointer; POSIX
        ** guarantees the representation, so copy the bits. */
        memcpy((char *)&api + e->offset, &sym, sizeof sym);
        api.symbol[i] = found;
    }
    *out = api;
    return VRAM_OK;
}

void
vcu_api_unload(struct vcu_api *api)
{
    if (api->library != NULL)
        dlclose(api->library);
    memset(api, 0, sizeof *api);
}

/* ================================================================== */
/* The backend's state                                                 */
/* ================================================================== */

/* Facts read once at open (they never change), and the primary context. */
struct cuda_device {
    vcu_device handle;            /* cuDeviceGet(ordinal) */
    char name[96];                /* "NVIDIA H200" */
    char uuid[48];                /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    uint64_t total;               /* bytes */
    int cc_major, cc_minor;       /* compute capability */
    bool vmm;                     /* the virtual-memory calls work on it */
    uint64_t granularity;         /* VM granularity, bytes; 2 MiB without VM */
    _Atomic(vcu_context) primary; /* retained primary context; NULL until first use */
};

struct cuda_backend {
    struct backend base;
    struct backend_ops ops; /* this instance's table: VM ops only with the VM API */
    struct vcu_api api;     /* owns the library */
    int driver_version;     /* cuDriverGetVersion: 13000 = 13.0 */
    int n_devices;
    struct cuda_device *dev; /* n_devices entries */
};

static inline struct cuda_backend *
cuda_of(struct backend *b)
{
    return (struct cuda_backend *)b;
}

/* ================================================================== */
/* Errors                                                              */
/* ================================================================== */

static vram_status
status_of(vcu_result r)
{
    switch (r) {
    case VCU_ERROR_OUT_OF_MEMORY:
        return VRAM_E_OOM;
    case VCU_ERROR_NO_DEVICE:
    case VCU_ERROR_INVALID_DEVICE:
        return VRAM_E_NO_DEVICE;
    default:
        return VRAM_E_BACKEND;
    }
}

/*
** Record the failure R of entry point E as the thread's last error,
** "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", and return
** its status (see status_of), or STATUS if that is not VRAM_OK.
*/
static vram_status
api_fail(const struct vcu_api *api, enum vcu_entry e, vcu_result r, vram_status status)
{
    const char *symbol = api->symbol[e] != NULL ? api->symbol[e] : vcu_entries[e].symbol;
    const char *name = NULL, *text = NULL;
    if (api->cuGetErrorName == NULL || api->cuGetErrorName(r, &name) != VCU_SUCCESS)
        name = NULL;
    if (api->cuGetErrorString == NULL || api->cuGetErrorString(r, &text) != VCU_SUCCESS)
        text = NULL;
    if (status == VRAM_OK)
        status = status_of(r);
    if (name == NULL)
        return error_set(status, "%s: CUDA error %d", symbol, (int)r);
    return error_set(status, "%s: %s (%s)", symbol, name,
                     text != NULL ? text : "no description");
}

/* VRAM_OK if R is CUDA_SUCCESS, else the failure of E (api_fail). */
static inline vram_status
cuda_check(const struct cuda_backend *c, enum vcu_entry e, vcu_result r)
{
    return r == VCU_SUCCESS ? VRAM_OK : api_fail(&c->api, e, r, VRAM_OK);
}

static vram_status
cuda_check_dev(const struct cuda_backend *c, int dev)
{
    if (dev < 0 || dev >= c->n_devices)
        return error_set(VRAM_E_NO_DEVICE, "cuda: no device %d (%d visible)", dev,
                         c->n_devices);
    return VRAM_OK;
}

/* ================================================================== */
/* Primary contexts                                                    */
/* ================================================================== */

/*
** Device D's primary context, retained on first use. Two threads may both
** retain it; the one that loses the compare-and-swap gives its reference
** back (the driver counts them), so exactly one reference is ours until
** cuda_close. No lock is held across the driver calls.
*/
static vram_status
cuda_primary(struct cuda_backend *c, struct cuda_device *d, vcu_context *out)
{
    vcu_context ctx = atomic_load_explicit(&d->primary, memory_order_acquire);
    if (ctx != NULL) {
        *out = ctx;
        return VRAM_OK;
    }
    vcu_context mine = NULL;
    vram_status st = cuda_check(c, VCU_ENTRY_cuDevicePrimaryCtxRetain,
                                c->api.cuDevicePrimaryCtxRetain(&mine, d->handle));
    if (st != VRAM_OK)
        return st;
    vcu_context expected = NULL;
    if (atomic_compare_exchange_strong_explicit(
            &d->primary, &expected, mine, memory_order_acq_rel, memory_order_acquire)) {
        log_write(LOG_CONFIG, "cuda: retained the primary context of %s (%s)", d->uuid,
                  d->name);
        *out = mine;
        return VRAM_OK;
    }
    /* Another thread published first: the same context, one reference too
    ** many. */
    (void)c->api.cuDevicePrimaryCtxRelease(d->handle);
    *out = expected;
    return VRAM_OK;
}

/* Make device DEV's primary context current on this thread (on top of
** whatever is current). On VRAM_OK the caller must call cuda_leave. */
static vram_status
cuda_enter(struct cuda_backend *c, int dev)
{
    vram_status st = cuda_check_dev(c, dev);
    if (st != VRAM_OK)
        return st;
    vcu_context ctx;
    st = cuda_primary(c, &c->dev[dev], &ctx);
    if (st != VRAM_OK)
        return st;
    return cuda_check(c, VCU_ENTRY_cuCtxPushCurrent, c->api.cuCtxPushCurrent(ctx));
}

/*
** Pop what cuda_enter pushed, restoring the caller's current context, and
** return ST -- or the pop's failure when ST is VRAM_OK. (A pop that fails
** after a successful allocation leaks it; that needs a broken driver.)
*/
static vram_status
cuda_leave(struct cuda_backend *c, vram_status st)
{
    vcu_context popped = NULL;
    vcu_result r = c->api.cuCtxPopCurrent(&popped);
    if (r != VCU_SUCCESS && st == VRAM_OK)
        return api_fail(&c->api, VCU_ENTRY_cuCtxPopCurrent, r, VRAM_OK);
    return st;
}

/* The driver call of entry point E, made after cuda_enter, returned R:
** leave (cuda_leave) with its status. */
static vram_status
cuda_leave_after(struct cuda_backend *c, enum vcu_entry e, vcu_result r)
{
    return cuda_leave(c, cuda_check(c, e, r));
}

/* ================================================================== */
/* Devices                                                             */
/* ================================================================== */

static vram_status
cuda_device_count(struct backend *b, int *out)
{
    *out = cuda_of(b)->n_devices;
    return VRAM_OK;
}

static vram_status
cuda_mem_get_info(struct backend *b, int dev, uint64_t *free_bytes, uint64_t *total_bytes)
{
    struct cuda_backend *c = cuda_of(b);
    vram_status st = cuda_enter(c, dev);
    if (st != VRAM_OK)
        return st;
    size_t fr = 0, tot = 0;
    st = cuda_leave_after(c, VCU_ENTRY_cuMemGetInfo, c->api.cuMemGetInfo(&fr, &tot));
    if (st != VRAM_OK)
        return st;
    *free_bytes = fr;
    *total_bytes = tot;
    return VRAM_OK;
}

static vram_status
cuda_device_info(struct backend *b, int dev, vram_physical_info *out)
{
    struct cuda_backend *c = cuda_of(b);
    vram_status st = cuda_check_dev(c, dev);
    if (st != VRAM_OK)
        return st;
    uint64_t free_bytes, total;
    st = cuda_mem_get_info(b, dev, &free_bytes, &total);
    if (st != VRAM_OK)
        return st;
    const struct cuda_device *d = &c->dev[dev];
    vram_physical_info info;
    memset(&info, 0, sizeof info);
    info.index = dev;
    _Static_assert(sizeof info.name == sizeof d->name, "name sizes");
    _Static_assert(sizeof info.uuid == sizeof d->uuid, "uuid sizes");
    memcpy(info.name, d->name, sizeof info.name);
    memcpy(info.uuid, d->uuid, sizeof info.uuid);
    info.total_bytes = d->total;
    info.free_bytes = free_bytes;
    info.cc_major = d->cc_major;
    info.cc_minor = d->cc_minor;
    info.granularity = d->granularity;
    *out = info;
    return VRAM_OK;
}

/* The properties of the physical memory vram makes on device H: pinned
** device memory, no shareable handle. The granularity is asked for with
** the same properties that phys_create uses. */
static vcu_mem_allocation_prop
pinned_prop(vcu_device h)
{
    /* Members not named are zero: no Win32 metadata, no allocation flags. */
    vcu_mem_allocation_prop prop = {
        .type = VCU_MEM_ALLOCATION_TYPE_PINNED,
        .requestedHandleTypes = VCU_MEM_HANDLE_TYPE_NONE,
        .location = {.type = VCU_MEM_LOCATION_TYPE_DEVICE, .id = h},
    };
    return prop;
}

/*
** The VM granularity of D, and whether the VM calls work on it: only with
** the entry points, the device attribute, and a granularity the driver
** gives. Otherwise 2 MiB, the granularity cuMemAlloc rounds large
** allocations to.
*/
static void
probe_vmm(struct cuda_backend *c, int ordinal, struct cuda_device *d)
{
    d->vmm = false;
    d->granularity = CUDA_FALLBACK_GRANULARITY;
    if (!c->api.vmm)
        return;
    int supported = 0;
    if (c->api.cuDeviceGetAttribute(
            &supported, VCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            d->handle) != VCU_SUCCESS ||
        !supported)
        return;
    vcu_mem_allocation_prop prop = pinned_prop(d->handle);
    size_t g = 0;
    vcu_result r = c->api.cuMemGetAllocationGranularity(
        &g, &prop, VCU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != VCU_SUCCESS || g == 0 || (g & (g - 1)) != 0) {
        log_write(LOG_CONFIG,
                  "cuda: device %d (%s): no usable VM granularity (error %d); using "
                  "cuMemAlloc only",
                  ordinal, d->uuid, (int)r);
        return;
    }
    d->vmm = true;
    d->granularity = g;
}

/* Read the facts of device ORDINAL into D. No context is needed. */
static vram_status
probe_device(struct cuda_backend *c, int ordinal, struct cuda_device *d)
{
    vram_status st =
        cuda_check(c, VCU_ENTRY_cuDeviceGet, c->api.cuDeviceGet(&d->handle, ordinal));
    if (st == VRAM_OK)
        st = cuda_check(c, VCU_ENTRY_cuDeviceGetName,
                        c->api.cuDeviceGetName(d->name, (int)sizeof d->name, d->handle));
    d->name[sizeof d->name - 1] = '\0';
    vcu_uuid u;
    if (st == VRAM_OK)
        st = cuda_check(c, VCU_ENTRY_cuDeviceGetUuid,
                        c->api.cuDeviceGetUuid(&u, d->handle));
    if (st == VRAM_OK)
        uuid_format((const unsigned char *)u.bytes, d->uuid, sizeof d->uuid);
    size_t total = 0;
    if (st == VRAM_OK)
        st = cuda_check(c, VCU_ENTRY_cuDeviceTotalMem,
                        c->api.cuDeviceTotalMem(&total, d->handle));
    if (st == VRAM_OK)
        st = cuda_check(
            c, VCU_ENTRY_cuDeviceGetAttribute,
            c->api.cuDeviceGetAttribute(
                &d->cc_major, VCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->handle));
    if (st == VRAM_OK)
        st = cuda_check(
            c, VCU_ENTRY_cuDeviceGetAttribute,
            c->api.cuDeviceGetAttribute(
                &d->cc_minor, VCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->handle));
    if (st != VRAM_OK) {
        char why[400]; /* error_set must not read the buffer it writes */
        snprintf(why, sizeof why, "%s", vram_last_error());
        return error_set(st, "cuda: device %d: %s", ordinal, why);
    }
    d->total = total;
    probe_vmm(c, ordinal, d);
    atomic_init(&d->primary, NULL);
    return VRAM_OK;
}

/* ================================================================== */
/* Memory                                                              */
/* ================================================================== */

/*
** While any thread captures a CUDA graph in the global mode (PyTorch's
** default), a call that may synchronize implicitly, such as cuMemAlloc,
** fails and invalidates the capture unless the calling thread is in the
** relaxed mode. Obtaining memory is legal during capture (it is not
** stream-ordered), so the calls that obtain or map memory run in the
** relaxed mode, as PyTorch's own allocator does for cudaMalloc. Returns
** the mode to restore with capture_restore.
*/
static vcu_stream_capture_mode
capture_relax(struct cuda_backend *c)
{
    vcu_stream_capture_mode mode = VCU_STREAM_CAPTURE_MODE_RELAXED;
    if (c->api.cuThreadExchangeStreamCaptureMode == NULL ||
        c->api.cuThreadExchangeStreamCaptureMode(&mode) != VCU_SUCCESS)
        return VCU_STREAM_CAPTURE_MODE_RELAXED; /* nothing to restore */
    return mode;
}

static void
capture_restore(struct cuda_backend *c, vcu_stream_capture_mode mode)
{
    if (mode != VCU_STREAM_CAPTURE_MODE_RELAXED)
        (void)c->api.cuThreadExchangeStreamCaptureMode(&mode);
}

/* After a call that obtained VALUE (an address, a handle, an event) with
** status ST: leave the device (cuda_leave), and write *OUT on success. */
static vram_status
leave_with_value(struct cuda_backend *c, vram_status st, uint64_t value, uint64_t *out)
{
    st = cuda_leave(c, st);
    if (st == VRAM_OK)
        *out = value;
    return st;
}

/* leave_with_value for a call made under the relaxed capture MODE: the
** mode is restored first. */
static vram_status
leave_with_result(struct cuda_backend *c, vcu_stream_capture_mode mode, vram_status st,
                  uint64_t value, uint64_t *out)
{
    capture_restore(c, mode);
    return leave_with_value(c, st, value, out);
}

static vram_status
cuda_mem_alloc(struct backend *b, int dev, uint64_t size, uint64_t *addr)
{
    struct cuda_backend *c = cuda_of(b);
    if (size == 0)
        return error_set(VRAM_E_INVALID, "cuda: mem_alloc of 0 bytes");
    vram_status st = cuda_enter(c, dev);
    if (st != VRAM_OK)
        return st;
    vcu_deviceptr p = 0;
    vcu_stream_capture_mode mode = capture_relax(c);
    st = cuda_check(c, VCU_ENTRY_cuMemAlloc, c->api.cuMemAlloc(&p, (size_t)size));
    return leave_with_result(c, mode, st, p, addr);
}

/* ================================================================== */
/* Virtual memory                                                      */
/* ================================================================== */

/* Enter DEV for a VM call on [.., +SIZE): the device must support it and
** SIZE must be a whole number of granules (the driver's rule). */
static vram_status
cuda_enter_vm(struct cuda_backend *c, int dev, uint64_t size, const char *what)
{
    vram_status st = cuda_check_dev(c, dev);
    if (st != VRAM_OK)
        return st;
    const struct cuda_device *d = &c->dev[dev];
    if (!d->vmm)
        return error_set(VRAM_E_UNSUPPORTED,
                         "cuda: %s: device %d (%s) has no virtual memory management, "
                         "which the expandable strategy needs (VRAM_STRATEGY=growth "
                         "works without it)",
                         what, dev, d->uuid);
    if (size == 0 || size % d->granularity != 0)
        return error_set(VRAM_E_INVALID,
                         "cuda: %s of %" PRIu64 " bytes: not a multiple of the %" PRIu64
                         "-byte granularity",
                         what, size, d->granularity);
    return cuda_enter(c, dev);
}

static vram_status
cuda_va_reserve(struct backend *b, int dev, uint64_t size, uint64_t *addr)
{
    struct cuda_backend *c = cuda_of(b);
    vram_status st = cuda_enter_vm(c, dev, size, "va_reserve");
    if (st != VRAM_OK)
        return st;
    vcu_deviceptr p = 0;
    vcu_stream_capture_mode mode = capture_relax(c);
    st = cuda_check(c, VCU_ENTRY_cuMemAddressReserve,
                    c->api.cuMemAddressReserve(&p, (size_t)size,
                                               (size_t)c->dev[dev].granularity, 0, 0));
    return leave_with_result(c, mode, st, p, addr);
}

static vram_status
cuda_phys_create(struct backend *b, int dev, uint64_t size, uint64_t *handle)
{
    struct cuda_backend *c = cuda_of(b);
    vram_status st = cuda_enter_vm(c, dev, size, "phys_create");
    if (st != VRAM_OK)
        return st;
    vcu_mem_allocation_prop prop = pinned_prop(c->dev[dev].handle);
    vcu_mem_handle h = 0;
    vcu_stream_capture_mode mode = capture_relax(c);
    st = cuda_check(c, VCU_ENTRY_cuMemCreate,
                    c->api.cuMemCreate(&h, (size_t)size, &prop, 0));
    return leave_with_result(c, mode, st, h, handle);
}

/* Map HANDLE at [addr, addr+size) and make it readable and writable from
** DEV; a map whose access cannot be set is undone. */
static vram_status
cuda_map(struct backend *b, int dev, uint64_t addr, uint64_t size, uint64_t handle)
{
    struct cuda_backend *c = cuda_of(b);
    vram_status st = cuda_enter_vm(c, dev, size, "map");
    if (st != VRAM_OK)
        return st;
    vcu_stream_capture_mode mode = capture_relax(c);
    st = cuda_check(
        c, VCU_ENTRY_cuMemMap,
        c->api.cuMemMap((vcu_deviceptr)addr, (size_t)size, 0, (vcu_mem_handle)handle, 0));
    if (st == VRAM_OK) {
        vcu_mem_access_desc access;
        memset(&access, 0, sizeof access);
        access.location.type = VCU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = c->dev[dev].handle;
        access.flags = VCU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        st = cuda_check(
            c, VCU_ENTRY_cuMemSetAccess,
            c->api.cuMemSetAccess((vcu_deviceptr)addr, (size_t)size, &access, 1));
        if (st != VRAM_OK) /* the error stays cuMemSetAccess's */
            (void)c->api.cuMemUnmap((vcu_deviceptr)addr, (size_t)size);
    }
    capture_restore(c, mode);
    return cuda_leave(c, st);
}

/* ================================================================== */
/* Events                                                              */
/* ================================================================== */

/* An event without timing (cheaper to record and query), recorded on
** STREAM; destroyed again if the record fails. */
static vram_status
cuda_event_record(struct backend *b, int dev, uint64_t stream, uint64_t *event)
{
    struct cuda_backend *c = cuda_of(b);
    vram_status st = cuda_enter(c, dev);
    if (st != VRAM_OK)
        return st;
    vcu_event ev = NULL;
    st = cuda_check(c, VCU_ENTRY_cuEventCreate,
                    c->api.cuEventCreate(&ev, VCU_EVENT_DISABLE_TIMING));
    if (st == VRAM_OK) {
        st = cuda_check(c, VCU_ENTRY_cuEventRecord,
                        c->api.cuEventRecord(ev, (vcu_stream)(uintptr_t)stream));
        if (st != VRAM_OK) /* the error stays cuEventRecord's */
            (void)c->api.cuEventDestroy(ev);
    }
    return leave_with_value(c, st, (uint64_t)(uintptr_t)ev, event);
}

static vram_status
cuda_event_query(struct backend *b, int dev, uint64_t event, bool *done)
{
    struct cuda_backend *c = cuda_of(b);
    vram_status st = cuda_enter(c, dev);
    if (st != VRAM_OK)
        return st;
    vcu_result r = c->api.cuEventQuery((vcu_event)(uintptr_t)event);
    bool finished = r == VCU_SUCCESS;
    if (r != VCU_SUCCESS && r != VCU_ERROR_NOT_READY)
        st = api_fail(&c->api, VCU_ENTRY_cuEventQuery, r, VRAM_OK);
    st = cuda_leave(c, st);
    if (st == VRAM_OK)
        *done = finished;
    return st;
}

/* The legacy default stream (0) never captures, and asking about it while
** another thread captures in the global mode is itself prohibited. */
static vram_status
cuda_stream_capturing(struct backend *b, int dev, uint64_t stream, bool *active)
{
    struct cuda_backend *c = cuda_of(b);
    if (stream == 0) {
        *active = false;
        return VRAM_OK;
    }
    vram_status st = cuda_enter(c, dev);
    if (st != VRAM_OK)
        return st;
    vcu_stream_capture_status status = VCU_STREAM_CAPTURE_STATUS_NONE;
    st = cuda_leave_after(
        c, VCU_ENTRY_cuStreamIsCapturing,
        c->api.cuStreamIsCapturing((vcu_stream)(uintptr_t)stream, &status));
    if (st == VRAM_OK)
        *active = status != VCU_STREAM_CAPTURE_STATUS_NONE;
    return st;
}

/* ================================================================== */
/* Calls that are one driver call                                      */
/* ================================================================== */

/*
** The calls that are one driver call in DEV's primary context: the
** backend function NAME, its parameters after the backend, how it enters
** the device (a VM call through cuda_enter_vm, which checks its size), and
** the entry point with its arguments. Each becomes cuda_NAME, which enters,
** calls, and leaves with the call's status.
*/
#define CUDA_ONE_CALL(X)                                                                 \
    X(mem_free, (int dev, uint64_t addr), cuda_enter(c, dev), cuMemFree,                 \
      ((vcu_deviceptr)addr))                                                             \
    X(va_release, (int dev, uint64_t addr, uint64_t size),                               \
      cuda_enter_vm(c, dev, size, "va_release"), cuMemAddressFree,                       \
      ((vcu_deviceptr)addr, (size_t)size))                                               \
    X(phys_release, (int dev, uint64_t handle), cuda_enter(c, dev), cuMemRelease,        \
      ((vcu_mem_handle)handle))                                                          \
    X(unmap, (int dev, uint64_t addr, uint64_t size),                                    \
      cuda_enter_vm(c, dev, size, "unmap"), cuMemUnmap,                                  \
      ((vcu_deviceptr)addr, (size_t)size))                                               \
    X(event_destroy, (int dev, uint64_t event), cuda_enter(c, dev), cuEventDestroy,      \
      ((vcu_event)(uintptr_t)event))                                                     \
    X(synchronize, (int dev), cuda_enter(c, dev), cuCtxSynchronize, ())

#define CUDA_UNPAREN(...) __VA_ARGS__

#define X(name, params, enter, entry, args)                                              \
    static vram_status cuda_##name(struct backend *b, CUDA_UNPAREN params)               \
    {                                                                                    \
        struct cuda_backend *c = cuda_of(b);                                             \
        vram_status st = enter;                                                          \
        if (st != VRAM_OK)                                                               \
            return st;                                                                   \
        return cuda_leave_after(c, VCU_ENTRY_##entry, c->api.entry args);                \
    }
CUDA_ONE_CALL(X)
#undef X

/* ================================================================== */
/* Open and close                                                      */
/* ================================================================== */

/* Give back every primary context we retained, and the library. */
static void
cuda_close(struct backend *b)
{
    struct cuda_backend *c = cuda_of(b);
    for (int i = 0; c->dev != NULL && i < c->n_devices; i++) {
        struct cuda_device *d = &c->dev[i];
        if (atomic_load_explicit(&d->primary, memory_order_acquire) != NULL)
            (void)c->api.cuDevicePrimaryCtxRelease(d->handle);
    }
    free(c->dev);
    vcu_api_unload(&c->api);
    free(c);
}

static const struct backend_ops cuda_ops = {
    .name = "cuda",
    .close = cuda_close,
    .device_count = cuda_device_count,
    .device_info = cuda_device_info,
    .mem_get_info = cuda_mem_get_info,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .va_reserve = cuda_va_reserve,
    .va_release = cuda_va_release,
    .phys_create = cuda_phys_create,
    .phys_release = cuda_phys_release,
    .map = cuda_map,
    .unmap = cuda_unmap,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .synchronize = cuda_synchronize,
    .event_destroy = cuda_event_destroy,
    .stream_capturing = cuda_stream_capturing,
};

vram_status
backend_cuda_open(const char *library, struct backend **out)
{
    if (out == NULL)
        return error_set(VRAM_E_INVALID, "backend_cuda_open: NULL out-pointer");
    struct cuda_backend *c = calloc(1, sizeof *c);
    if (c == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "out of host memory");
    vram_status st = vcu_api_load(library, &c->api);
    if (st != VRAM_OK) {
        free(c);
        return st;
    }
    c->base.ops = &c->ops;
    c->ops = cuda_ops;
    if (!c->api.vmm) {
        /* An old driver: the allocator sees no VM calls and uses mem_alloc. */
        c->ops.va_reserve = NULL;
        c->ops.va_release = NULL;
        c->ops.phys_create = NULL;
        c->ops.phys_release = NULL;
        c->ops.map = NULL;
        c->ops.unmap = NULL;
    }
    if (c->api.cuStreamIsCapturing == NULL)
        c->ops.stream_capturing = NULL; /* a driver without graph capture */

    vcu_result r = c->api.cuInit(0);
    if (r == VCU_ERROR_NO_DEVICE) {
        /* A driver but no GPU (or CUDA_VISIBLE_DEVICES hides them all): an
        ** empty backend, so that the caller can say "no devices". */
        c->n_devices = 0;
    } else if (r != VCU_SUCCESS) {
        api_fail(&c->api, VCU_ENTRY_cuInit, r, VRAM_E_NO_DRIVER);
        cuda_close(&c->base);
        return VRAM_E_NO_DRIVER;
    } else {
        st = cuda_check(c, VCU_ENTRY_cuDriverGetVersion,
                        c->api.cuDriverGetVersion(&c->driver_version));
        if (st == VRAM_OK)
            st = cuda_check(c, VCU_ENTRY_cuDeviceGetCount,
                            c->api.cuDeviceGetCount(&c->n_devices));
        if (st == VRAM_OK && c->n_devices < 0)
            st = error_set(VRAM_E_BACKEND, "cuDeviceGetCount: %d devices", c->n_devices);
        if (st == VRAM_OK && c->n_devices > 0) {
            c->dev = calloc((size_t)c->n_devices, sizeof *c->dev);
            if (c->dev == NULL)
                st = error_set(VRAM_E_HOST_MEMORY, "out of host memory");
        }
        for (int i = 0; st == VRAM_OK && i < c->n_devices; i++)
            st = probe_device(c, i, &c->dev[i]);
        if (st != VRAM_OK) {
            cuda_close(&c->base); /* nothing retained yet */
            return st;
        }
    }
    log_write(LOG_CONFIG, "cuda: driver %d.%d (%s), %d visible device(s), VM API %s",
              c->driver_version / 1000, c->driver_version % 1000 / 10,
              library != NULL ? library : CUDA_DEFAULT_LIBRARY, c->n_devices,
              c->api.vmm ? "present" : "absent");
    for (int i = 0; i < c->n_devices; i++)
        log_write(LOG_CONFIG,
                  "cuda: device %d: %s, %s, %" PRIu64
                  " MiB, cc %d.%d, granularity %" PRIu64 " KiB%s",
                  i, c->dev[i].uuid, c->dev[i].name, c->dev[i].total >> 20,
                  c->dev[i].cc_major, c->dev[i].cc_minor, c->dev[i].granularity >> 10,
                  c->dev[i].vmm ? "" : " (no VM)");
    *out = &c->base;
    return VRAM_OK;
}

vram_status
backend_cuda_uuids(const char *library, char (*uuids)[48], int max, int *n)
{
    struct backend *b = NULL;
    vram_status st = backend_cuda_open(library, &b);
    if (st != VRAM_OK)
        return st;
    /* Opening probed every device (UUID, name, total): no context yet. */
    const struct cuda_backend *c = cuda_of(b);
    for (int i = 0; i < c->n_devices && i < max; i++)
        memcpy(uuids[i], c->dev[i].uuid, 48);
    *n = c->n_devices;
    cuda_close(b);
    return VRAM_OK;
}
