/* SPDX-License-Identifier: MIT */
/*
** test_cuda_fake.c -- the CUDA backend (src/backend/cuda.c) against the fake
** driver (tests/fakecuda), so that every path runs without a GPU: loading,
** devices, primary contexts pushed and popped around every call (the
** caller's context preserved, from any thread), cuMemAlloc accounting and
** OOM, the virtual-memory round trip, events that are not ready and then
** are, error mapping and messages, old and broken drivers, and vram_open
** end to end through dlopen("libcuda.so.1").
**
** CTest passes the fakes' paths (VRAM_FAKECUDA, _LEGACY, _BROKEN) and puts
** the fake's directory on LD_LIBRARY_PATH; without them the test skips.
** The fake stays loaded for the whole run (we hold a handle, for its
** helpers), so its state carries over: every test gives back what it took,
** and the teardown checks that (no live objects, no pushed context, no
** misuse).
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "driver/cuda_api.h"
#include "testutil.h"

/* The fake's helpers (see the end of fakecuda.c). */
static struct {
    const char *path, *legacy, *broken;
    void *lib;
    int (*ctx_depth)(void);
    uint64_t (*misuses)(void);
    uint64_t (*live_objects)(void);
    uint64_t (*used)(int dev);
    int (*primary_refs)(int dev);
} fk;

/* The loader's table over the fake, for what the tests do themselves
** (pushing a context of their own). */
static struct vcu_api api;

static void
fake_sym(const char *name, void *fp, size_t len)
{
    void *p = dlsym(fk.lib, name);
    assert_non_null(p);
    assert_int_equal(len, sizeof p);
    memcpy(fp, &p, sizeof p);
}

static int
group_setup(void **state)
{
    (void)state;
    fk.lib = dlopen(fk.path, RTLD_NOW | RTLD_LOCAL);
    if (fk.lib == NULL) {
        fprintf(stderr, "cannot load the fake driver %s: %s\n", fk.path, dlerror());
        return -1;
    }
    fake_sym("fakecuda_ctx_depth", &fk.ctx_depth, sizeof fk.ctx_depth);
    fake_sym("fakecuda_misuses", &fk.misuses, sizeof fk.misuses);
    fake_sym("fakecuda_live_objects", &fk.live_objects, sizeof fk.live_objects);
    fake_sym("fakecuda_used", &fk.used, sizeof fk.used);
    fake_sym("fakecuda_primary_refs", &fk.primary_refs, sizeof fk.primary_refs);
    if (vcu_api_load(fk.path, &api) != VRAM_OK || api.cuInit(0) != VCU_SUCCESS) {
        fprintf(stderr, "cannot load the fake through vcu_api_load: %s\n",
                vram_last_error());
        return -1;
    }
    return 0;
}

static int
group_teardown(void **state)
{
    (void)state;
    vcu_api_unload(&api);
    dlclose(fk.lib);
    return 0;
}

/* After every test: knobs off, everything given back, stacks balanced. */
static int
teardown(void **state)
{
    (void)state;
    unsetenv("FAKECUDA_FAIL");
    unsetenv("FAKECUDA_OOM");
    unsetenv("FAKECUDA_DEVICES");
    assert_int_equal(fk.live_objects(), 0);
    assert_int_equal(fk.used(0), 0);
    assert_int_equal(fk.used(1), 0);
    assert_int_equal(fk.primary_refs(0), 0);
    assert_int_equal(fk.primary_refs(1), 0);
    assert_int_equal(fk.ctx_depth(), 0);
    assert_int_equal(fk.misuses(), 0);
    return 0;
}

static struct backend *
open_fake(void)
{
    struct backend *b = NULL;
    vram_status st = backend_cuda_open(fk.path, &b);
    if (st != VRAM_OK)
        fail_msg("backend_cuda_open: %s", vram_last_error());
    assert_non_null(b);
    return b;
}

static void
assert_error_has(const char *text)
{
    if (strstr(vram_last_error(), text) == NULL)
        fail_msg("last error '%s' lacks '%s'", vram_last_error(), text);
}

/* ------------------------------------------------------------------ */

static void
test_open_and_devices(void **state)
{
    (void)state;
    struct backend *b = open_fake();
    assert_string_equal(b->ops->name, "cuda");
    int n = 0;
    assert_int_equal(b->ops->device_count(b, &n), VRAM_OK);
    assert_int_equal(n, 2);
    /* Opening retains no context: that waits for the first call needing one. */
    assert_int_equal(fk.primary_refs(0), 0);

    for (int d = 0; d < 2; d++) {
        vram_physical_info info;
        assert_int_equal(b->ops->device_info(b, d, &info), VRAM_OK);
        char uuid[48];
        snprintf(uuid, sizeof uuid, "GPU-facecda0-0001-4000-8000-%012x", d);
        assert_int_equal(info.index, d);
        assert_string_equal(info.name, "Fake GPU");
        assert_string_equal(info.uuid, uuid);
        assert_int_equal(info.total_bytes, GiB);
        assert_int_equal(info.free_bytes, GiB);
        assert_int_equal(info.cc_major, 9);
        assert_int_equal(info.cc_minor, 0);
        assert_int_equal(info.granularity, 2 * MiB);
        assert_int_equal(fk.primary_refs(d), 1); /* retained once, kept */
    }
    assert_non_null(b->ops->va_reserve);
    assert_non_null(b->ops->event_record);

    vram_physical_info info = {.index = 42};
    assert_int_equal(b->ops->device_info(b, 2, &info), VRAM_E_NO_DEVICE);
    assert_string_equal(vram_last_error(), "cuda: no device 2 (2 visible)");
    assert_int_equal(info.index, 42); /* untouched */
    uint64_t addr = 7;
    assert_int_equal(b->ops->mem_alloc(b, -1, MiB, &addr), VRAM_E_NO_DEVICE);
    assert_int_equal(addr, 7);

    uint64_t fr = 0, tot = 0;
    assert_int_equal(b->ops->mem_get_info(b, 1, &fr, &tot), VRAM_OK);
    assert_int_equal(fr, GiB);
    assert_int_equal(tot, GiB);
    b->ops->close(b);
}

static void
test_mem_alloc_accounting(void **state)
{
    (void)state;
    struct backend *b = open_fake();
    uint64_t a = 0, c = 0, fr, tot;
    assert_int_equal(b->ops->mem_alloc(b, 0, 3 * MiB, &a), VRAM_OK);
    assert_int_not_equal(a, 0);
    assert_int_equal(a % 512, 0);
    assert_int_equal(fk.used(0), 4 * MiB); /* 2 MiB granules */
    assert_int_equal(fk.used(1), 0);       /* the pushed context chose device 0 */
    assert_int_equal(b->ops->mem_alloc(b, 1, 100 * MiB, &c), VRAM_OK);
    assert_int_equal(fk.used(1), 100 * MiB);
    assert_int_equal(b->ops->mem_get_info(b, 0, &fr, &tot), VRAM_OK);
    assert_int_equal(fr, GiB - 4 * MiB);

    /* More than the device has: VRAM_E_OOM and the driver's words. */
    uint64_t x = 7;
    assert_int_equal(b->ops->mem_alloc(b, 0, 2 * GiB, &x), VRAM_E_OOM);
    assert_string_equal(vram_last_error(),
                        "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
    assert_int_equal(x, 7);
    assert_int_equal(b->ops->mem_alloc(b, 0, GiB - 2 * MiB, &x), VRAM_E_OOM);
    setenv("FAKECUDA_OOM", "1", 1);
    assert_int_equal(b->ops->mem_alloc(b, 1, 512, &x), VRAM_E_OOM);
    assert_error_has("CUDA_ERROR_OUT_OF_MEMORY");
    unsetenv("FAKECUDA_OOM");
    assert_int_equal(b->ops->mem_alloc(b, 0, 0, &x), VRAM_E_INVALID);
    assert_int_equal(x, 7);

    /* Not an allocation: the driver's refusal is a backend error. */
    assert_int_equal(b->ops->mem_free(b, 0, a + 512), VRAM_E_BACKEND);
    assert_string_equal(vram_last_error(),
                        "cuMemFree_v2: CUDA_ERROR_INVALID_VALUE (invalid argument)");
    assert_int_equal(b->ops->mem_free(b, 0, a), VRAM_OK);
    assert_int_equal(b->ops->mem_free(b, 1, c), VRAM_OK);
    assert_int_equal(fk.used(0), 0);
    assert_int_equal(fk.used(1), 0);
    b->ops->close(b);
}

/* A live allocation at close goes with the primary context (the driver's rule). */
static void
test_close_with_live_memory(void **state)
{
    (void)state;
    struct backend *b = open_fake();
    uint64_t a;
    assert_int_equal(b->ops->mem_alloc(b, 1, 10 * MiB, &a), VRAM_OK);
    assert_int_equal(fk.primary_refs(1), 1);
    b->ops->close(b);
    assert_int_equal(fk.primary_refs(1), 0);
}

static void
test_vm_round_trip(void **state)
{
    (void)state;
    struct backend *b = open_fake();
    uint64_t va = 0, h1 = 0, h2 = 0;
    assert_int_equal(b->ops->va_reserve(b, 0, 8 * MiB, &va), VRAM_OK);
    assert_int_not_equal(va, 0);
    assert_int_equal(va % (2 * MiB), 0);
    assert_int_equal(b->ops->phys_create(b, 0, 4 * MiB, &h1), VRAM_OK);
    assert_int_equal(b->ops->phys_create(b, 0, 4 * MiB, &h2), VRAM_OK);
    assert_int_not_equal(h1, 0);
    assert_int_not_equal(h1, h2);
    assert_int_equal(fk.used(0), 8 * MiB);

    assert_int_equal(b->ops->map(b, 0, va, 4 * MiB, h1), VRAM_OK);
    /* Mapped already; outside the reservation: the driver refuses. */
    assert_int_equal(b->ops->map(b, 0, va, 4 * MiB, h2), VRAM_E_BACKEND);
    assert_string_equal(vram_last_error(),
                        "cuMemMap: CUDA_ERROR_INVALID_VALUE (invalid argument)");
    assert_int_equal(b->ops->map(b, 0, va + 6 * MiB, 4 * MiB, h2), VRAM_E_BACKEND);
    assert_int_equal(b->ops->map(b, 0, va + 4 * MiB, 4 * MiB, h2), VRAM_OK);
    /* The reservation cannot go while mapped (the fake is strict here). */
    assert_int_equal(b->ops->va_release(b, 0, va, 8 * MiB), VRAM_E_BACKEND);
    assert_error_has("cuMemAddressFree: ");

    /* Memory stays until the last mapping of a released handle goes. */
    assert_int_equal(b->ops->phys_release(b, 0, h1), VRAM_OK);
    assert_int_equal(fk.used(0), 8 * MiB);
    assert_int_equal(b->ops->unmap(b, 0, va, 8 * MiB), VRAM_OK); /* both at once */
    assert_int_equal(fk.used(0), 4 * MiB);
    assert_int_equal(b->ops->phys_release(b, 0, h2), VRAM_OK);
    assert_int_equal(fk.used(0), 0);
    assert_int_equal(b->ops->unmap(b, 0, va, 4 * MiB), VRAM_E_BACKEND); /* not mapped */

    /* Sizes must be whole granules: refused before the driver. */
    uint64_t x = 7;
    assert_int_equal(b->ops->va_reserve(b, 0, 3 * MiB, &x), VRAM_E_INVALID);
    assert_error_has("granularity");
    assert_int_equal(b->ops->phys_create(b, 0, 0, &x), VRAM_E_INVALID);
    assert_int_equal(x, 7);

    /* A map whose access cannot be set is undone: the range maps again. */
    assert_int_equal(b->ops->phys_create(b, 1, 2 * MiB, &h1), VRAM_OK);
    assert_int_equal(fk.used(1), 2 * MiB);
    setenv("FAKECUDA_FAIL", "cuMemSetAccess", 1);
    assert_int_equal(b->ops->map(b, 1, va, 2 * MiB, h1), VRAM_E_BACKEND);
    assert_string_equal(vram_last_error(),
                        "cuMemSetAccess: CUDA_ERROR_UNKNOWN (unknown error)");
    unsetenv("FAKECUDA_FAIL");
    assert_int_equal(b->ops->map(b, 1, va, 2 * MiB, h1), VRAM_OK);
    assert_int_equal(b->ops->unmap(b, 1, va, 2 * MiB), VRAM_OK);
    assert_int_equal(b->ops->phys_release(b, 1, h1), VRAM_OK);

    /* Out of memory for physical memory: VRAM_E_OOM. */
    assert_int_equal(b->ops->phys_create(b, 0, 2 * GiB, &x), VRAM_E_OOM);
    assert_string_equal(vram_last_error(),
                        "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
    setenv("FAKECUDA_OOM", "1", 1);
    assert_int_equal(b->ops->phys_create(b, 0, 2 * MiB, &x), VRAM_E_OOM);
    unsetenv("FAKECUDA_OOM");
    assert_int_equal(x, 7);

    assert_int_equal(b->ops->va_release(b, 0, va, 8 * MiB), VRAM_OK);
    b->ops->close(b);
}

static void
test_events(void **state)
{
    (void)state;
    struct backend *b = open_fake();
    uint64_t ev = 0;
    bool done = true;
    assert_int_equal(b->ops->event_record(b, 0, 0, &ev), VRAM_OK);
    assert_int_not_equal(ev, 0);
    assert_int_equal(b->ops->event_query(b, 0, ev, &done), VRAM_OK);
    assert_false(done);
    assert_int_equal(b->ops->event_query(b, 0, ev, &done), VRAM_OK);
    assert_false(done);
    assert_int_equal(b->ops->event_query(b, 0, ev, &done), VRAM_OK);
    assert_true(done);
    assert_int_equal(b->ops->event_destroy(b, 0, ev), VRAM_OK);

    /* Any stream handle goes through to the driver unchanged. */
    assert_int_equal(b->ops->event_record(b, 1, 0x1234, &ev), VRAM_OK);
    setenv("FAKECUDA_FAIL", "cuEventQuery", 1);
    done = true;
    assert_int_equal(b->ops->event_query(b, 1, ev, &done), VRAM_E_BACKEND);
    assert_string_equal(vram_last_error(),
                        "cuEventQuery: CUDA_ERROR_UNKNOWN (unknown error)");
    assert_true(done); /* untouched */
    unsetenv("FAKECUDA_FAIL");
    assert_int_equal(b->ops->event_destroy(b, 1, ev), VRAM_OK);
    assert_int_equal(b->ops->event_destroy(b, 1, ev), VRAM_E_BACKEND); /* gone */
    assert_error_has("CUDA_ERROR_INVALID_HANDLE");

    /* A record that fails destroys its event: nothing is left behind. */
    setenv("FAKECUDA_FAIL", "cuEventRecord", 1);
    uint64_t x = 7;
    assert_int_equal(b->ops->event_record(b, 0, 0, &x), VRAM_E_BACKEND);
    assert_string_equal(vram_last_error(),
                        "cuEventRecord: CUDA_ERROR_UNKNOWN (unknown error)");
    assert_int_equal(x, 7);
    assert_int_equal(fk.live_objects(), 0);
    b->ops->close(b);
}

/* ------------------------------------------------------------------ */
/* Failures of the driver                                              */
/* ------------------------------------------------------------------ */

static void
test_missing_library(void **state)
{
    (void)state;
    struct backend *b = (struct backend *)0x1;
    assert_int_equal(backend_cuda_open("/nonexistent/libcuda.so.1", &b),
                     VRAM_E_NO_DRIVER);
    assert_ptr_equal(b, (struct backend *)0x1);
    const char *want = "CUDA driver not found (/nonexistent/libcuda.so.1: ";
    assert_int_equal(strncmp(vram_last_error(), want, strlen(want)), 0);
    assert_error_has("No such file");
}

static void
test_cuinit_fails(void **state)
{
    (void)state;
    struct backend *b = (struct backend *)0x1;
    setenv("FAKECUDA_FAIL", "cuInit", 1);
    assert_int_equal(backend_cuda_open(fk.path, &b), VRAM_E_NO_DRIVER);
    assert_string_equal(vram_last_error(), "cuInit: CUDA_ERROR_UNKNOWN (unknown error)");
    assert_ptr_equal(b, (struct backend *)0x1);
}

/* A driver without GPUs opens, with no devices. */
static void
test_no_devices(void **state)
{
    (void)state;
    setenv("FAKECUDA_DEVICES", "0", 1);
    struct backend *b = open_fake();
    int n = -1;
    assert_int_equal(b->ops->device_count(b, &n), VRAM_OK);
    assert_int_equal(n, 0);
    uint64_t x;
    assert_int_equal(b->ops->mem_alloc(b, 0, MiB, &x), VRAM_E_NO_DEVICE);
    b->ops->close(b);
}

/* A device that cannot be probed fails the open, naming device and call. */
static void
test_probe_fails(void **state)
{
    (void)state;
    struct backend *b = (struct backend *)0x1;
    setenv("FAKECUDA_FAIL", "cuDeviceGetName", 1);
    assert_int_equal(backend_cuda_open(fk.path, &b), VRAM_E_BACKEND);
    assert_string_equal(
        vram_last_error(),
        "cuda: device 0: cuDeviceGetName: CUDA_ERROR_UNKNOWN (unknown error)");
    setenv("FAKECUDA_FAIL", "cuDeviceGetUuid", 1);
    assert_int_equal(backend_cuda_open(fk.path, &b), VRAM_E_BACKEND);
    assert_error_has("cuDeviceGetUuid_v2: ");
    assert_ptr_equal(b, (struct backend *)0x1);
}

/* Context handling failures come back as errors and leave nothing pushed;
** a failed retain is retried by the next call. */
static void
test_context_failures(void **state)
{
    (void)state;
    struct backend *b = open_fake();
    uint64_t x = 7;
    setenv("FAKECUDA_FAIL", "cuDevicePrimaryCtxRetain", 1);
    assert_int_equal(b->ops->mem_alloc(b, 0, MiB, &x), VRAM_E_BACKEND);
    assert_string_equal(vram_last_error(),
                        "cuDevicePrimaryCtxRetain: CUDA_ERROR_UNKNOWN (unknown error)");
    setenv("FAKECUDA_FAIL", "cuCtxPushCurrent", 1);
    assert_int_equal(b->ops->mem_alloc(b, 0, MiB, &x), VRAM_E_BACKEND);
    assert_error_has("cuCtxPushCurrent_v2: CUDA_ERROR_UNKNOWN");
    assert_int_equal(fk.ctx_depth(), 0);
    setenv("FAKECUDA_FAIL", "cuMemGetInfo", 1);
    vram_physical_info info;
    assert_int_equal(b->ops->device_info(b, 0, &info), VRAM_E_BACKEND);
    assert_string_equal(vram_last_error(),
                        "cuMemGetInfo_v2: CUDA_ERROR_UNKNOWN (unknown error)");
    unsetenv("FAKECUDA_FAIL");
    assert_int_equal(x, 7);
    assert_int_equal(b->ops->mem_alloc(b, 0, MiB, &x), VRAM_OK);
    assert_int_equal(b->ops->mem_free(b, 0, x), VRAM_OK);
    assert_int_equal(fk.ctx_depth(), 0);
    b->ops->close(b);
}

/* Without the error texts, messages carry the number. */
static void
test_error_without_names(void **state)
{
    (void)state;
    struct backend *b = open_fake();
    setenv("FAKECUDA_FAIL", "cuGetErrorName", 1);
    uint64_t x;
    assert_int_equal(b->ops->mem_alloc(b, 0, 4 * GiB, &x), VRAM_E_OOM);
    assert_string_equal(vram_last_error(), "cuMemAlloc_v2: CUDA error 2");
    setenv("FAKECUDA_FAIL", "cuGetErrorString", 1);
    assert_int_equal(b->ops->mem_alloc(b, 0, 4 * GiB, &x), VRAM_E_OOM);
    assert_string_equal(vram_last_error(),
                        "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (no description)");
    b->ops->close(b);
}

/* No VM granularity from the driver: 2 MiB, and the VM calls say so. */
static void
test_no_granularity(void **state)
{
    (void)state;
    setenv("FAKECUDA_FAIL", "cuMemGetAllocationGranularity", 1);
    struct backend *b = open_fake();
    unsetenv("FAKECUDA_FAIL");
    vram_physical_info info;
    assert_int_equal(b->ops->device_info(b, 0, &info), VRAM_OK);
    assert_int_equal(info.granularity, 2 * MiB);
    uint64_t x = 7;
    assert_int_equal(b->ops->va_reserve(b, 0, 2 * MiB, &x), VRAM_E_UNSUPPORTED);
    assert_error_has("no virtual memory management");
    assert_int_equal(x, 7);
    b->ops->close(b);
}

/* An old driver: the v1 UUID call, no VM calls (the ops are NULL), no
** error texts. */
static void
test_legacy_driver(void **state)
{
    (void)state;
    struct backend *b = NULL;
    assert_int_equal(backend_cuda_open(fk.legacy, &b), VRAM_OK);
    assert_null(b->ops->va_reserve);
    assert_null(b->ops->va_release);
    assert_null(b->ops->phys_create);
    assert_null(b->ops->phys_release);
    assert_null(b->ops->map);
    assert_null(b->ops->unmap);
    assert_non_null(b->ops->event_record);
    vram_physical_info info;
    assert_int_equal(b->ops->device_info(b, 1, &info), VRAM_OK);
    assert_string_equal(info.uuid, "GPU-facecda0-0001-4000-8000-000000000001");
    assert_int_equal(info.granularity, 2 * MiB);
    uint64_t x;
    assert_int_equal(b->ops->mem_alloc(b, 0, 4 * GiB, &x), VRAM_E_OOM);
    assert_string_equal(vram_last_error(), "cuMemAlloc_v2: CUDA error 2");
    b->ops->close(b);
}

static void
test_broken_driver(void **state)
{
    (void)state;
    struct backend *b = (struct backend *)0x1;
    assert_int_equal(backend_cuda_open(fk.broken, &b), VRAM_E_NO_DRIVER);
    assert_error_has("lacks cuMemAlloc_v2");
    assert_error_has(fk.broken);
    assert_ptr_equal(b, (struct backend *)0x1);
}

/* ------------------------------------------------------------------ */
/* Contexts and threads                                                */
/* ------------------------------------------------------------------ */

static vcu_context
current_context(void)
{
    vcu_context c = (vcu_context)0x1;
    assert_int_equal(api.cuCtxGetCurrent(&c), VCU_SUCCESS);
    return c;
}

/* The caller's current context, none or its own, is the same afterwards. */
static void
test_context_preserved(void **state)
{
    (void)state;
    struct backend *b = open_fake();
    uint64_t fr, tot, a;
    assert_null(current_context());
    assert_int_equal(b->ops->mem_get_info(b, 0, &fr, &tot), VRAM_OK);
    assert_null(current_context());

    vcu_context mine = NULL;
    assert_int_equal(api.cuDevicePrimaryCtxRetain(&mine, 1), VCU_SUCCESS);
    assert_int_equal(api.cuCtxPushCurrent(mine), VCU_SUCCESS);
    assert_int_equal(b->ops->mem_alloc(b, 0, MiB, &a), VRAM_OK);
    assert_ptr_equal(current_context(), mine);
    assert_int_equal(fk.used(0), 2 * MiB); /* on device 0, not the caller's 1 */
    assert_int_equal(fk.used(1), 0);
    assert_int_equal(b->ops->mem_free(b, 0, a), VRAM_OK);
    assert_ptr_equal(current_context(), mine);
    assert_int_equal(fk.ctx_depth(), 1);
    vcu_context popped = NULL;
    assert_int_equal(api.cuCtxPopCurrent(&popped), VCU_SUCCESS);
    assert_ptr_equal(popped, mine);
    b->ops->close(b);
    assert_int_equal(fk.primary_refs(1), 1); /* ours still */
    assert_int_equal(api.cuDevicePrimaryCtxRelease(1), VCU_SUCCESS);
}

#define N_THREADS 8
#define N_ROUNDS 200

struct worker {
    struct backend *b;
    vcu_context foreign; /* pushed by the thread around its work */
    pthread_barrier_t *start;
    int id;
    int failures; /* cmocka's asserts cannot run in threads */
    char first_failure[200];
};

static void
worker_fail(struct worker *w, const char *what)
{
    if (w->failures++ == 0)
        snprintf(w->first_failure, sizeof w->first_failure, "thread %d: %s: %s", w->id,
                 what, vram_last_error());
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    struct backend *b = w->b;
    if (api.cuCtxPushCurrent(w->foreign) != VCU_SUCCESS)
        worker_fail(w, "push");
    pthread_barrier_wait(w->start); /* all at once: the first retain races */
    for (int i = 0; i < N_ROUNDS; i++) {
        int dev = (w->id + i) % 2;
        uint64_t a, ev;
        bool done = false;
        if (b->ops->mem_alloc(b, dev, MiB + (uint64_t)i * 4096, &a) != VRAM_OK)
            worker_fail(w, "mem_alloc");
        else if (b->ops->mem_free(b, dev, a) != VRAM_OK)
            worker_fail(w, "mem_free");
        if (b->ops->event_record(b, dev, 0, &ev) != VRAM_OK) {
            worker_fail(w, "event_record");
            continue;
        }
        for (int q = 0; q < 5 && !done; q++)
            if (b->ops->event_query(b, dev, ev, &done) != VRAM_OK)
                worker_fail(w, "event_query");
        if (!done)
            worker_fail(w, "event never done");
        if (b->ops->event_destroy(b, dev, ev) != VRAM_OK)
            worker_fail(w, "event_destroy");
        vcu_context cur = NULL;
        if (api.cuCtxGetCurrent(&cur) != VCU_SUCCESS || cur != w->foreign)
            worker_fail(w, "the thread's context changed");
    }
    vcu_context popped = NULL;
    if (api.cuCtxPopCurrent(&popped) != VCU_SUCCESS || popped != w->foreign)
        worker_fail(w, "pop");
    if (fk.ctx_depth() != 0)
        worker_fail(w, "unbalanced context stack");
    return NULL;
}

static void
test_threads(void **state)
{
    (void)state;
    struct backend *b = open_fake();
    vcu_context foreign = NULL;
    assert_int_equal(api.cuDevicePrimaryCtxRetain(&foreign, 1), VCU_SUCCESS);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N_THREADS);
    pthread_t tid[N_THREADS];
    struct worker w[N_THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < N_THREADS; i++) {
        w[i].b = b;
        w[i].foreign = foreign;
        w[i].start = &start;
        w[i].id = i;
        assert_int_equal(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_join(tid[i], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < N_THREADS; i++)
        if (w[i].failures != 0)
            fail_msg("%d failures, first: %s", w[i].failures, w[i].first_failure);
    /* However many threads raced to retain, the backend holds one
    ** reference per device, and the test its own. */
    assert_int_equal(fk.primary_refs(0), 1);
    assert_int_equal(fk.primary_refs(1), 2);
    b->ops->close(b);
    assert_int_equal(fk.primary_refs(0), 0);
    assert_int_equal(fk.primary_refs(1), 1);
    assert_int_equal(api.cuDevicePrimaryCtxRelease(1), VCU_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* End to end: vram_open finds "libcuda.so.1" on LD_LIBRARY_PATH        */
/* ------------------------------------------------------------------ */

static vram_context *
open_cuda_context(void)
{
    vram_options o;
    memset(&o, 0, sizeof o);
    o.backend = VRAM_BACKEND_CUDA;
    o.ignore_environment = true;
    vram_context *ctx = NULL;
    if (vram_open(&o, &ctx) != VRAM_OK)
        fail_msg("vram_open: %s", vram_last_error());
    return ctx;
}

static void
test_end_to_end_growth(void **state)
{
    (void)state;
    vram_context *ctx = open_cuda_context();
    int n = 0;
    assert_int_equal(vram_physical_count(ctx, &n), VRAM_OK);
    assert_int_equal(n, 2);
    vram_physical_info info;
    assert_int_equal(vram_physical_info_get(ctx, 1, &info), VRAM_OK);
    assert_string_equal(info.name, "Fake GPU");
    assert_string_equal(info.uuid, "GPU-facecda0-0001-4000-8000-000000000001");
    assert_int_equal(info.total_bytes, GiB);

    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, 256 * MiB);
    enum { N = 24 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        size_t size = (i % 3 == 0) ? 5 * MiB + 100 : (size_t)(1000 + i * 777);
        assert_int_equal(vram_alloc(dev, size, NULL, &p[i]), VRAM_OK);
        assert_non_null(p[i]);
    }
    vram_stats s = stats_of(dev);
    assert_true(s.bytes_reserved >= s.bytes_in_use);
    assert_int_equal(fk.used(0), s.bytes_reserved); /* regions are whole granules */
    assert_true(vram_check(dev));
    assert_int_equal(vram_physical_info_get(ctx, 0, &info), VRAM_OK);
    assert_int_equal(info.free_bytes, GiB - s.bytes_reserved);

    /* Over the cap: VRAM_E_OOM from the allocator. */
    void *q = (void *)0x1;
    assert_int_equal(vram_alloc(dev, 300 * MiB, NULL, &q), VRAM_E_OOM);
    assert_ptr_equal(q, (void *)0x1);
    for (int i = 0; i < N; i += 2)
        assert_int_equal(vram_free(dev, p[i]), VRAM_OK);
    assert_true(vram_check(dev));
    for (int i = 1; i < N; i += 2)
        assert_int_equal(vram_free(dev, p[i]), VRAM_OK);
    assert_true(vram_check(dev));
    vram_close(ctx);
    assert_int_equal(fk.used(0), 0);
}


/* vram_release_idle over the driver: the memory given back is free per
** cuMemGetInfo, and a block freed while another stream may still use it
** is not given back until its event has completed (the fake's events
** complete after two queries; each release queries once). */
static void
test_end_to_end_release_idle(void **state)
{
    (void)state;
    const uint64_t U = 8 * MiB;
    vram_context *ctx = open_cuda_context();
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 256 * MiB);
    void *s1 = (void *)0x1000, *s2 = (void *)0x2000; /* two streams */
    void *a, *b, *c;
    assert_int_equal(vram_alloc(dev, U, s1, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, U, s2, &b), VRAM_OK); /* a second stream */
    assert_int_equal(vram_alloc(dev, U, s1, &c), VRAM_OK);
    assert_int_equal(fk.used(0), 3 * U);
    vram_physical_info info;
    assert_int_equal(vram_physical_info_get(ctx, 0, &info), VRAM_OK);
    assert_int_equal(info.free_bytes, GiB - 3 * U);
    /* A's free waits for an event on s1; C's too. Both stay held. */
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    assert_int_equal(vram_free(dev, c), VRAM_OK);
    uint64_t released = 1;
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 0); /* first query: still running */
    assert_int_equal(fk.used(0), 3 * U);
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 0); /* second query: still running */
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(released, 2 * U); /* done: given back */
    assert_int_equal(fk.used(0), U);
    assert_int_equal(vram_physical_info_get(ctx, 0, &info), VRAM_OK);
    assert_int_equal(info.free_bytes, GiB - U);
    assert_int_equal(stats_of(dev).bytes_reserved, U);
    assert_true(vram_check(dev));
    /* Work goes on: new memory where needed, then everything back. */
    for (int step = 0; step < 3; step++)
        loss_step(dev, U);
    assert_int_equal(vram_free(dev, b), VRAM_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(fk.used(0), 0);
    assert_int_equal(stats_of(dev).bytes_reserved, 0);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* Extents over the driver: a 100 MiB block is two handles (8 + 5 units of
** 8 MiB) and two maps, each map set accessible over its whole range; a
** loop that moves blocks aliases and unmaps extents whole (the fake
** refuses an unmap that is not a union of whole maps, and counts a
** misuse); everything goes back at the end. */
static void
test_end_to_end_extents(void **state)
{
    (void)state;
    const uint64_t U = 8 * MiB;
    vram_context *ctx = open_cuda_context();
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 512 * MiB);
    void *a;
    assert_int_equal(vram_alloc(dev, 100 * MiB, NULL, &a), VRAM_OK);
    /* The address range, two handles, two maps. */
    assert_int_equal(fk.live_objects(), 5);
    assert_int_equal(fk.used(0), 13 * U);
    assert_true(vram_check(dev));
    for (int step = 0; step < 4; step++)
        loss_step(dev, U);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    uint64_t released = 0;
    assert_int_equal(vram_release_idle(dev, &released), VRAM_OK);
    assert_int_equal(fk.used(0), 0);
    assert_int_equal(fk.live_objects(), 1); /* the address range */
    assert_int_equal(stats_of(dev).bytes_reserved, 0);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* A cap above what the device has: the driver's OOM surfaces as VRAM_E_OOM. */
static void
test_end_to_end_device_full(void **state)
{
    (void)state;
    vram_context *ctx = open_cuda_context();
    vram_device_config c;
    memset(&c, 0, sizeof c);
    c.strategy = VRAM_STRATEGY_GROWTH;
    c.limit_bytes[0] = 4 * GiB;
    assert_int_equal(vram_configure(ctx, 1, &c), VRAM_OK);
    vram_device *dev = NULL;
    assert_int_equal(vram_device_get(ctx, 1, &dev), VRAM_OK);
    void *a = NULL, *q = (void *)0x1;
    assert_int_equal(vram_alloc(dev, 600 * MiB, NULL, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 600 * MiB, NULL, &q), VRAM_E_OOM);
    assert_ptr_equal(q, (void *)0x1);
    assert_true(vram_check(dev));
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    vram_close(ctx);
}

int
main(void)
{
    fk.path = getenv("VRAM_FAKECUDA");
    fk.legacy = getenv("VRAM_FAKECUDA_LEGACY");
    fk.broken = getenv("VRAM_FAKECUDA_BROKEN");
    if (fk.path == NULL || fk.legacy == NULL || fk.broken == NULL) {
        fprintf(stderr,
                "test_cuda_fake: VRAM_FAKECUDA* not set (run it through ctest)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_open_and_devices, teardown),
        cmocka_unit_test_teardown(test_mem_alloc_accounting, teardown),
        cmocka_unit_test_teardown(test_close_with_live_memory, teardown),
        cmocka_unit_test_teardown(test_vm_round_trip, teardown),
        cmocka_unit_test_teardown(test_events, teardown),
        cmocka_unit_test_teardown(test_missing_library, teardown),
        cmocka_unit_test_teardown(test_cuinit_fails, teardown),
        cmocka_unit_test_teardown(test_no_devices, teardown),
        cmocka_unit_test_teardown(test_probe_fails, teardown),
        cmocka_unit_test_teardown(test_context_failures, teardown),
        cmocka_unit_test_teardown(test_error_without_names, teardown),
        cmocka_unit_test_teardown(test_no_granularity, teardown),
        cmocka_unit_test_teardown(test_legacy_driver, teardown),
        cmocka_unit_test_teardown(test_broken_driver, teardown),
        cmocka_unit_test_teardown(test_context_preserved, teardown),
        cmocka_unit_test_teardown(test_threads, teardown),
        cmocka_unit_test_teardown(test_end_to_end_growth, teardown),
        cmocka_unit_test_teardown(test_end_to_end_release_idle, teardown),
        cmocka_unit_test_teardown(test_end_to_end_extents, teardown),
        cmocka_unit_test_teardown(test_end_to_end_device_full, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
