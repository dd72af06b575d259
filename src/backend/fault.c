/* SPDX-License-Identifier: MIT */
/*
** fault.c -- a backend wrapper that fails one chosen call, for torture
** tests in the manner of SQLite's and curl's: run a scenario with call N
** failing, for N = 1, 2, ... until the scenario makes fewer than N calls,
** and check each time that the failure is reported and nothing leaks.
*/
#include <stdatomic.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "base/error.h"

struct fault_backend {
    struct backend base;
    struct backend *inner;  /* owned */
    uint64_t fail_call;     /* 1-based call number to fail */
    vram_status status;     /* what the failed call returns */
    _Atomic uint64_t calls; /* calls made so far, failed one included */
    struct backend_ops ops; /* this wrapper's table (see backend_fault_open) */
};

static inline struct fault_backend *
fault_of(struct backend *b)
{
    return (struct fault_backend *)b;
}

/* Count this call; true if it is the one to fail (and set the error). */
static bool
fault_hit(struct fault_backend *f, const char *what)
{
    uint64_t n = atomic_fetch_add(&f->calls, 1) + 1;
    if (n != f->fail_call)
        return false;
    error_set(f->status, "fault injection: backend call %llu (%s) failed",
              (unsigned long long)n, what);
    return true;
}

static vram_status
fault_device_count(struct backend *b, int *out)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "device_count"))
        return f->status;
    return f->inner->ops->device_count(f->inner, out);
}

static vram_status
fault_device_info(struct backend *b, int dev, vram_physical_info *out)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "device_info"))
        return f->status;
    return f->inner->ops->device_info(f->inner, dev, out);
}

static vram_status
fault_mem_get_info(struct backend *b, int dev, uint64_t *free_bytes,
                   uint64_t *total_bytes)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "mem_get_info"))
        return f->status;
    return f->inner->ops->mem_get_info(f->inner, dev, free_bytes, total_bytes);
}

static vram_status
fault_mem_alloc(struct backend *b, int dev, uint64_t size, uint64_t *addr)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "mem_alloc"))
        return f->status;
    return f->inner->ops->mem_alloc(f->inner, dev, size, addr);
}

static vram_status
fault_mem_free(struct backend *b, int dev, uint64_t addr)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "mem_free"))
        return f->status;
    return f->inner->ops->mem_free(f->inner, dev, addr);
}

static vram_status
fault_va_reserve(struct backend *b, int dev, uint64_t size, uint64_t *addr)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "va_reserve"))
        return f->status;
    return f->inner->ops->va_reserve(f->inner, dev, size, addr);
}

static vram_status
fault_va_release(struct backend *b, int dev, uint64_t addr, uint64_t size)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "va_release"))
        return f->status;
    return f->inner->ops->va_release(f->inner, dev, addr, size);
}

static vram_status
fault_phys_create(struct backend *b, int dev, uint64_t size, uint64_t *handle)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "phys_create"))
        return f->status;
    return f->inner->ops->phys_create(f->inner, dev, size, handle);
}

static vram_status
fault_phys_release(struct backend *b, int dev, uint64_t handle)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "phys_release"))
        return f->status;
    return f->inner->ops->phys_release(f->inner, dev, handle);
}

static vram_status
fault_map(struct backend *b, int dev, uint64_t addr, uint64_t size, uint64_t handle)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "map"))
        return f->status;
    return f->inner->ops->map(f->inner, dev, addr, size, handle);
}

static vram_status
fault_unmap(struct backend *b, int dev, uint64_t addr, uint64_t size)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "unmap"))
        return f->status;
    return f->inner->ops->unmap(f->inner, dev, addr, size);
}

static vram_status
fault_event_record(struct backend *b, int dev, uint64_t stream, uint64_t *event)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "event_record"))
        return f->status;
    return f->inner->ops->event_record(f->inner, dev, stream, event);
}

static vram_status
fault_event_query(struct backend *b, int dev, uint64_t event, bool *done)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "event_query"))
        return f->status;
    return f->inner->ops->event_query(f->inner, dev, event, done);
}

static vram_status
fault_event_destroy(struct backend *b, int dev, uint64_t event)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "event_destroy"))
        return f->status;
    return f->inner->ops->event_destroy(f->inner, dev, event);
}

static vram_status
fault_synchronize(struct backend *b, int dev)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "synchronize"))
        return f->status;
    return f->inner->ops->synchronize(f->inner, dev);
}

static vram_status
fault_stream_capturing(struct backend *b, int dev, uint64_t stream, bool *active)
{
    struct fault_backend *f = fault_of(b);
    if (fault_hit(f, "stream_capturing"))
        return f->status;
    return f->inner->ops->stream_capturing(f->inner, dev, stream, active);
}

static void
fault_close(struct backend *b)
{
    struct fault_backend *f = fault_of(b);
    f->inner->ops->close(f->inner);
    free(f);
}

uint64_t
backend_fault_calls(const struct backend *b)
{
    const struct fault_backend *f = (const struct fault_backend *)b;
    return atomic_load(&((struct fault_backend *)f)->calls);
}

vram_status
backend_fault_open(struct backend *inner, uint64_t fail_call, vram_status status,
                   struct backend **out)
{
    struct fault_backend *f = calloc(1, sizeof *f);
    if (f == NULL) {
        inner->ops->close(inner);
        return error_set(VRAM_E_HOST_MEMORY, "fault: out of host memory");
    }
    /* The ops table mirrors INNER's: a function INNER lacks stays NULL, so
    ** callers see the same capabilities through the wrapper. */
    struct backend_ops *ops = &f->ops;
    const struct backend_ops *in = inner->ops;
    ops->name = "fault";
    ops->close = fault_close;
    ops->device_count = fault_device_count;
    ops->device_info = fault_device_info;
    ops->mem_get_info = fault_mem_get_info;
    ops->mem_alloc = fault_mem_alloc;
    ops->mem_free = fault_mem_free;
    ops->va_reserve = in->va_reserve ? fault_va_reserve : NULL;
    ops->va_release = in->va_release ? fault_va_release : NULL;
    ops->phys_create = in->phys_create ? fault_phys_create : NULL;
    ops->phys_release = in->phys_release ? fault_phys_release : NULL;
    ops->map = in->map ? fault_map : NULL;
    ops->unmap = in->unmap ? fault_unmap : NULL;
    ops->event_record = in->event_record ? fault_event_record : NULL;
    ops->event_query = in->event_query ? fault_event_query : NULL;
    ops->event_destroy = in->event_destroy ? fault_event_destroy : NULL;
    ops->synchronize = in->synchronize ? fault_synchronize : NULL;
    ops->stream_capturing = in->stream_capturing ? fault_stream_capturing : NULL;
    f->base.ops = ops;
    f->inner = inner;
    f->fail_call = fail_call;
    f->status = status;
    *out = &f->base;
    return VRAM_OK;
}
