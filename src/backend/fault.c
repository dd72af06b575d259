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

/*
** Every backend call but close: its name, its parameters after the
** backend, and the arguments passed on to the inner backend. Each becomes
** fault_NAME, which counts the call and fails it or passes it on.
*/
#define FAULT_CALLS(X)                                                                   \
    X(device_count, (int *out), (out))                                                   \
    X(device_info, (int dev, vram_physical_info *out), (dev, out))                       \
    X(mem_get_info, (int dev, uint64_t *free_bytes, uint64_t *total_bytes),              \
      (dev, free_bytes, total_bytes))                                                    \
    X(mem_alloc, (int dev, uint64_t size, uint64_t *addr), (dev, size, addr))            \
    X(mem_free, (int dev, uint64_t addr), (dev, addr))                                   \
    X(va_reserve, (int dev, uint64_t size, uint64_t *addr), (dev, size, addr))           \
    X(va_release, (int dev, uint64_t addr, uint64_t size), (dev, addr, size))            \
    X(phys_create, (int dev, uint64_t size, uint64_t *handle), (dev, size, handle))      \
    X(phys_release, (int dev, uint64_t handle), (dev, handle))                           \
    X(map, (int dev, uint64_t addr, uint64_t size, uint64_t handle),                     \
      (dev, addr, size, handle))                                                         \
    X(unmap, (int dev, uint64_t addr, uint64_t size), (dev, addr, size))                 \
    X(event_record, (int dev, uint64_t stream, uint64_t *event), (dev, stream, event))   \
    X(event_query, (int dev, uint64_t event, bool *done), (dev, event, done))            \
    X(event_destroy, (int dev, uint64_t event), (dev, event))                            \
    X(synchronize, (int dev), (dev))                                                     \
    X(stream_capturing, (int dev, uint64_t stream, bool *active), (dev, stream, active))

#define FAULT_UNPAREN(...) __VA_ARGS__

#define X(name, params, args)                                                            \
    static vram_status fault_##name(struct backend *b, FAULT_UNPAREN params)             \
    {                                                                                    \
        struct fault_backend *f = fault_of(b);                                           \
        if (fault_hit(f, #name))                                                         \
            return f->status;                                                            \
        return f->inner->ops->name(f->inner, FAULT_UNPAREN args);                        \
    }
FAULT_CALLS(X)
#undef X

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
    ** callers see the same capabilities through the wrapper (the inner
    ** backends always have the calls through mem_free). */
    struct backend_ops *ops = &f->ops;
    const struct backend_ops *in = inner->ops;
    ops->name = "fault";
    ops->close = fault_close;
#define X(name, params, args) ops->name = in->name != NULL ? fault_##name : NULL;
    FAULT_CALLS(X)
#undef X
    f->base.ops = ops;
    f->inner = inner;
    f->fail_call = fail_call;
    f->status = status;
    *out = &f->base;
    return VRAM_OK;
}
