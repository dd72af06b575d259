/* SPDX-License-Identifier: MIT */
/*
** torch_plugin.c -- the functions PyTorch's CUDAPluggableAllocator calls
** (vram_torch_malloc, vram_torch_free), the statistic a script reads
** back (vram_torch_peak_reserved) and the device handle behind them
** (vram_torch_device, for the Python package). See the "PyTorch plug-in"
** section of include/vram.h for the contract.
**
** PyTorch knows nothing of contexts or logical devices: it passes a CUDA
** ordinal. So the plug-in keeps one context for the whole process, opened
** lazily (pthread_once) from the environment, and a table mapping each
** physical device to the handle of its first logical device, filled on
** first use. The context is never closed: PyTorch may free tensors while
** the interpreter shuts down, and the driver reclaims everything at exit;
** only its trace is finished then (plugin_fini).
**
** The other hooks PyTorch's allocator object offers (set_record_stream_fn,
** set_memory_fraction_fn, set_base_alloc_fn and the CUDA graph pool
** hooks) have entry points here too; python/vram/torch.py installs them.
**
** Failures never terminate the process: an allocation returns NULL and a
** free does nothing, each after one "vram: ..." line on stderr.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "base/error.h"
#include "core/core.h"
#include "vram.h"

/* The process's plug-in state. */
struct torch_plugin {
    pthread_once_t once;     /* runs plugin_open exactly once */
    vram_context *ctx;       /* NULL if opening failed; constant after once */
    vram_status open_status; /* why opening failed; VRAM_OK otherwise */
    char open_error[512];    /* the last-error line of the failed open: the
                                thread that ran it is not the one that asks */
    int n_physical;          /* physical devices of ctx */
    /* Per physical device: its first logical device, NULL until fetched.
    ** Written at most once with the one value vram_device_get returns
    ** for that index, so two threads racing to fill a slot agree. */
    _Atomic(vram_device *) *devs;
};

static struct torch_plugin plugin = {.once = PTHREAD_ONCE_INIT};

/* The pthread_once routine: open the context from the environment. */
static void
plugin_open(void)
{
    vram_context *ctx = NULL;
    int n = 0;
    vram_status st = vram_open(NULL, &ctx);
    if (st == VRAM_OK)
        st = vram_physical_count(ctx, &n);
    if (st == VRAM_OK) {
        plugin.devs = calloc((size_t)n, sizeof *plugin.devs);
        if (plugin.devs == NULL)
            st = error_set(VRAM_E_HOST_MEMORY, "out of host memory");
        else
            for (int d = 0; d < n; d++)
                atomic_init(&plugin.devs[d], NULL);
    }
    if (st != VRAM_OK) {
        const char *why = vram_last_error();
        snprintf(plugin.open_error, sizeof plugin.open_error, "%s",
                 why[0] != '\0' ? why : vram_strerror(st));
        plugin.open_status = st;
        free(plugin.devs);
        plugin.devs = NULL;
        vram_close(ctx);
        return;
    }
    plugin.n_physical = n;
    plugin.ctx = ctx;
}

/*
** When the process ends (or the library is unloaded): finish the trace of
** the plug-in's context (VRAM_TRACE), so that a gzip trace is complete.
** The context itself stays open, as above; a free that PyTorch makes
** later is no longer recorded (the writer refuses it; at VRAM_LOG=1 the
** log says so once).
*/
__attribute__((destructor)) static void
plugin_fini(void)
{
    context_trace_finish(plugin.ctx);
}

/*
** The logical index of the first logical device of physical device
** PHYSICAL: logical devices are numbered across physical devices in
** order, each contributing max(1, n_logical) (vram_device_count).
*/
static vram_status
first_logical(int physical, int *out)
{
    int index = 0;
    for (int p = 0; p < physical; p++) {
        vram_device_config cfg;
        vram_status st = vram_get_config(plugin.ctx, p, &cfg);
        if (st != VRAM_OK)
            return st;
        index += cfg.n_logical > 1 ? cfg.n_logical : 1;
    }
    *out = index;
    return VRAM_OK;
}

/* The logical device serving CUDA device DEVICE, opening the context and
** initializing the device on first use. */
static vram_status
plugin_device(int device, vram_device **out)
{
    pthread_once(&plugin.once, plugin_open);
    if (plugin.ctx == NULL)
        return error_set(plugin.open_status, "%s", plugin.open_error);
    if (device < 0 || device >= plugin.n_physical)
        return error_set(VRAM_E_NO_DEVICE,
                         "PyTorch asked for CUDA device %d; vram sees %d device%s",
                         device, plugin.n_physical, plugin.n_physical == 1 ? "" : "s");

    vram_device *dev = atomic_load_explicit(&plugin.devs[device], memory_order_acquire);
    if (dev == NULL) {
        int logical = 0;
        vram_status st = first_logical(device, &logical);
        if (st == VRAM_OK)
            st = vram_device_get(plugin.ctx, logical, &dev);
        if (st != VRAM_OK)
            return st;
        atomic_store_explicit(&plugin.devs[device], dev, memory_order_release);
    }
    *out = dev;
    return VRAM_OK;
}

/* Write the calling thread's last error (or the text of ST) as one line. */
static void
report(vram_status st)
{
    const char *why = vram_last_error();
    fprintf(stderr, "vram: %s\n", why[0] != '\0' ? why : vram_strerror(st));
}

void *
vram_torch_malloc(ssize_t size, int device, void *stream)
{
    vram_device *dev = NULL;
    void *p = NULL;
    vram_status st;
    if (size < 0)
        st = error_set(VRAM_E_INVALID, "vram_torch_malloc: negative size %zd", size);
    else
        st = plugin_device(device, &dev);
    if (st == VRAM_OK)
        st = vram_alloc(dev, (size_t)size, stream, &p);
    if (st != VRAM_OK) {
        report(st);
        return NULL;
    }
    return p;
}

void
vram_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size;   /* the block knows its size */
    (void)stream; /* ... and the stream it was allocated on */
    if (ptr == NULL)
        return;
    vram_device *dev = NULL;
    vram_status st = plugin_device(device, &dev);
    if (st == VRAM_OK)
        st = vram_free(dev, ptr);
    if (st != VRAM_OK)
        report(st);
}

vram_status
vram_torch_peak_reserved(int device, uint64_t *out)
{
    if (out == NULL)
        return error_set(VRAM_E_INVALID, "vram_torch_peak_reserved: NULL out-pointer");
    vram_device *dev = NULL;
    vram_status st = plugin_device(device, &dev);
    vram_stats stats;
    if (st == VRAM_OK)
        st = vram_get_stats(dev, &stats);
    if (st != VRAM_OK)
        return st;
    *out = stats.peak_bytes_reserved;
    return VRAM_OK;
}

vram_status
vram_torch_device(int device, vram_device **out)
{
    if (out == NULL)
        return error_set(VRAM_E_INVALID, "vram_torch_device: NULL out-pointer");
    vram_device *dev = NULL;
    vram_status st = plugin_device(device, &dev);
    if (st != VRAM_OK)
        return st;
    *out = dev;
    return VRAM_OK;
}

/* ------------------------------------------------------------------ */
/* The allocator object's other hooks                                   */
/* ------------------------------------------------------------------ */

/*
** The plug-in's device holding the live allocation PTR, for the hooks
** that name no device. Only devices already opened can hold it.
*/
static vram_status
device_of(const void *ptr, const char *what, vram_device **out)
{
    pthread_once(&plugin.once, plugin_open);
    if (plugin.ctx == NULL)
        return error_set(plugin.open_status, "%s", plugin.open_error);
    for (int d = 0; d < plugin.n_physical; d++) {
        vram_device *dev = atomic_load_explicit(&plugin.devs[d], memory_order_acquire);
        if (dev != NULL && vram_block_info(dev, ptr, NULL, NULL) == VRAM_OK) {
            *out = dev;
            return VRAM_OK;
        }
    }
    return error_set(VRAM_E_BAD_POINTER, "%s(%p): not a live allocation of vram", what,
                     ptr);
}

void
vram_torch_record_stream(void *ptr, void *stream)
{
    vram_device *dev = NULL;
    vram_status st = device_of(ptr, "record_stream", &dev);
    if (st == VRAM_OK)
        st = vram_record_stream(dev, ptr, stream);
    if (st != VRAM_OK)
        report(st);
}

void
vram_torch_set_memory_fraction(double fraction, int device)
{
    vram_device *dev = NULL;
    vram_status st;
    if (!(fraction > 0.0 && fraction <= 1.0))
        st = error_set(VRAM_E_INVALID,
                       "set_per_process_memory_fraction(%g): not a fraction in (0, 1]",
                       fraction);
    else
        st = plugin_device(device, &dev);
    vram_physical_info info;
    if (st == VRAM_OK)
        st = vram_physical_info_get(plugin.ctx, device, &info);
    if (st == VRAM_OK)
        st = vram_set_limit(dev, (uint64_t)(fraction * (double)info.total_bytes));
    if (st != VRAM_OK)
        report(st);
}

void *
vram_torch_base_alloc(void *ptr, size_t *size)
{
    vram_device *dev = NULL;
    void *base = NULL;
    uint64_t bytes = 0;
    vram_status st = device_of(ptr, "base_alloc", &dev);
    if (st == VRAM_OK)
        st = vram_block_base(dev, ptr, &base, &bytes);
    if (st != VRAM_OK) {
        report(st);
        return ptr; /* what PyTorch assumes without the hook */
    }
    if (size != NULL)
        *size = (size_t)bytes;
    return base;
}

/*
** PyTorch's MempoolId_t, a pair of unsigned 64-bit numbers, as one nonzero
** pool id: CUDA graphs' private pools are {0, n}, user pools {n, 0}, both
** n from 1 up, so the two kinds map to disjoint ranges.
*/
static uint64_t
pool_id(uint64_t first, uint64_t second)
{
    return first == 0 ? second : first | (1ULL << 63);
}

/* CALL (vram_pool_begin, _end or _release) on DEVICE for PyTorch's pool
** id; a failure is reported, as PyTorch's hooks return nothing. */
static void
pool_call(int device, uint64_t pool_first, uint64_t pool_second,
          vram_status (*call)(vram_device *dev, uint64_t pool))
{
    vram_device *dev = NULL;
    vram_status st = plugin_device(device, &dev);
    if (st == VRAM_OK)
        st = call(dev, pool_id(pool_first, pool_second));
    if (st != VRAM_OK)
        report(st);
}

void
vram_torch_begin_allocate_to_pool(int device, uint64_t pool_first, uint64_t pool_second,
                                  void *filter)
{
    (void)filter; /* vram asks the driver which streams capture instead */
    pool_call(device, pool_first, pool_second, vram_pool_begin);
}

void
vram_torch_end_allocate_to_pool(int device, uint64_t pool_first, uint64_t pool_second)
{
    pool_call(device, pool_first, pool_second, vram_pool_end);
}

void
vram_torch_release_pool(int device, uint64_t pool_first, uint64_t pool_second)
{
    pool_call(device, pool_first, pool_second, vram_pool_release);
}

void
vram_torch_empty_cache(void)
{
    pthread_once(&plugin.once, plugin_open);
    if (plugin.ctx == NULL)
        return; /* nothing opened, nothing held */
    for (int d = 0; d < plugin.n_physical; d++) {
        vram_device *dev = atomic_load_explicit(&plugin.devs[d], memory_order_acquire);
        if (dev == NULL)
            continue;
        vram_status st = vram_release_idle(dev, NULL);
        if (st != VRAM_OK)
            report(st);
    }
}
