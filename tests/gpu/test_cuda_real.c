/* SPDX-License-Identifier: MIT */
/*
** test_cuda_real.c -- the CUDA backend on a real GPU through the real
** driver (label "gpu"). Exits 77 (skipped) where no driver loads or no
** device is visible, as on CI. The same calls as test_cuda_fake.c, with
** what only a real driver can show: the device's facts, the driver's own
** error names, events on the default stream, the caller's context left
** current, and repeated open/close of the library.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "driver/cuda_api.h"
#include "unit/testutil.h"

static struct backend *be; /* opened in main */
static int n_devices;
static struct vcu_api api; /* the same driver, for the tests' own calls */

static vcu_context
current_context(void)
{
    vcu_context c = (vcu_context)0x1;
    assert_int_equal(api.cuCtxGetCurrent(&c), VCU_SUCCESS);
    return c;
}

/* Make device 0's primary context current for the test's own driver
** calls; pop_primary() undoes it. */
static vcu_context
push_primary(void)
{
    vcu_device d0;
    vcu_context primary = NULL;
    assert_int_equal(api.cuDeviceGet(&d0, 0), VCU_SUCCESS);
    assert_int_equal(api.cuDevicePrimaryCtxRetain(&primary, d0), VCU_SUCCESS);
    assert_int_equal(api.cuCtxPushCurrent(primary), VCU_SUCCESS);
    return primary;
}

static void
pop_primary(vcu_context primary)
{
    vcu_device d0;
    vcu_context popped = NULL;
    assert_int_equal(api.cuCtxPopCurrent(&popped), VCU_SUCCESS);
    assert_ptr_equal(popped, primary);
    assert_int_equal(api.cuDeviceGet(&d0, 0), VCU_SUCCESS);
    assert_int_equal(api.cuDevicePrimaryCtxRelease(d0), VCU_SUCCESS);
}

/* A context of the CUDA backend through the public API, reading no
** environment. */
static vram_context *
cuda_open(void)
{
    vram_options o;
    memset(&o, 0, sizeof o);
    o.backend = VRAM_BACKEND_CUDA;
    o.ignore_environment = true;
    vram_context *ctx = NULL;
    assert_int_equal(vram_open(&o, &ctx), VRAM_OK);
    return ctx;
}

static void
test_device_info(void **state)
{
    (void)state;
    for (int d = 0; d < n_devices; d++) {
        vram_physical_info info;
        assert_int_equal(be->ops->device_info(be, d, &info), VRAM_OK);
        printf(
            "# device %d: %s %s, %llu MiB (%llu free), cc %d.%d, granularity %llu KiB\n",
            d, info.uuid, info.name, (unsigned long long)(info.total_bytes >> 20),
            (unsigned long long)(info.free_bytes >> 20), info.cc_major, info.cc_minor,
            (unsigned long long)(info.granularity >> 10));
        assert_int_equal(info.index, d);
        assert_true(info.name[0] != '\0');
        assert_int_equal(strncmp(info.uuid, "GPU-", 4), 0);
        assert_int_equal(strlen(info.uuid), 40);
        assert_true(info.total_bytes > 0);
        assert_true(info.free_bytes > 0 && info.free_bytes <= info.total_bytes);
        assert_true(info.cc_major >= 3);
        assert_int_equal(info.granularity, 2 * MiB);
    }
    vram_physical_info info;
    assert_int_equal(be->ops->device_info(be, n_devices, &info), VRAM_E_NO_DEVICE);
}

static void
test_alloc_free(void **state)
{
    (void)state;
    uint64_t fr0, tot, fr1, a = 0;
    assert_int_equal(be->ops->mem_get_info(be, 0, &fr0, &tot), VRAM_OK);
    assert_int_equal(be->ops->mem_alloc(be, 0, 256 * MiB, &a), VRAM_OK);
    assert_int_not_equal(a, 0);
    assert_int_equal(a % 512, 0);
    assert_int_equal(be->ops->mem_get_info(be, 0, &fr1, &tot), VRAM_OK);
    assert_true(fr1 < fr0);
    assert_int_equal(be->ops->mem_free(be, 0, a), VRAM_OK);
}

static void
test_vm_round_trip(void **state)
{
    (void)state;
    vram_physical_info info;
    assert_int_equal(be->ops->device_info(be, 0, &info), VRAM_OK);
    uint64_t g = info.granularity, va = 0, h1 = 0, h2 = 0;
    assert_non_null(be->ops->va_reserve);
    assert_int_equal(be->ops->va_reserve(be, 0, 8 * g, &va), VRAM_OK);
    assert_int_equal(va % g, 0);
    assert_int_equal(be->ops->phys_create(be, 0, 2 * g, &h1), VRAM_OK);
    assert_int_equal(be->ops->phys_create(be, 0, 2 * g, &h2), VRAM_OK);
    assert_int_equal(be->ops->map(be, 0, va, 2 * g, h1), VRAM_OK);
    assert_int_equal(be->ops->map(be, 0, va + 2 * g, 2 * g, h2), VRAM_OK);
    /* Mapped twice: the driver refuses, and says so. */
    assert_int_equal(be->ops->map(be, 0, va, 2 * g, h2), VRAM_E_BACKEND);
    printf("# double map: %s\n", vram_last_error());
    assert_non_null(strstr(vram_last_error(), "cuMemMap: CUDA_ERROR_"));
    assert_int_equal(be->ops->unmap(be, 0, va, 2 * g), VRAM_OK);
    assert_int_equal(be->ops->unmap(be, 0, va + 2 * g, 2 * g), VRAM_OK);
    assert_int_equal(be->ops->phys_release(be, 0, h1), VRAM_OK);
    assert_int_equal(be->ops->phys_release(be, 0, h2), VRAM_OK);
    assert_int_equal(be->ops->va_release(be, 0, va, 8 * g), VRAM_OK);
}

/* The expandable strategy maps one physical handle at several addresses
** (docs/ALLOCATOR.md): the driver accepts it, and both addresses reach the
** same memory. Written through one with cuMemsetD8, read through the
** other with cuMemcpyDtoH (looked up here: the library does not use them). */
static void
test_vm_alias(void **state)
{
    (void)state;
    typedef int (*memset_fn)(uint64_t, unsigned char, size_t);
    typedef int (*dtoh_fn)(void *, uint64_t, size_t);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    memset_fn memset_d8 = NULL;
    dtoh_fn dtoh = NULL;
    void *sym = dlsym(lib, "cuMemsetD8_v2"); /* copied: ISO C has no cast */
    memcpy(&memset_d8, &sym, sizeof sym);
    sym = dlsym(lib, "cuMemcpyDtoH_v2");
    memcpy(&dtoh, &sym, sizeof sym);
    assert_non_null(memset_d8);
    assert_non_null(dtoh);
    vram_physical_info info;
    assert_int_equal(be->ops->device_info(be, 0, &info), VRAM_OK);
    uint64_t g = info.granularity, va = 0, h = 0;
    assert_int_equal(be->ops->va_reserve(be, 0, 8 * g, &va), VRAM_OK);
    assert_int_equal(be->ops->phys_create(be, 0, g, &h), VRAM_OK);
    assert_int_equal(be->ops->map(be, 0, va, g, h), VRAM_OK);
    assert_int_equal(be->ops->map(be, 0, va + 5 * g, g, h), VRAM_OK);

    vcu_context primary = push_primary();
    unsigned char byte = 0;
    assert_int_equal(memset_d8(va + 4096, 0xa5, 1), 0);
    assert_int_equal(dtoh(&byte, va + 5 * g + 4096, 1), 0);
    assert_int_equal(byte, 0xa5);
    assert_int_equal(memset_d8(va + 5 * g + 77, 0x3c, 1), 0);
    assert_int_equal(dtoh(&byte, va + 77, 1), 0);
    assert_int_equal(byte, 0x3c);
    pop_primary(primary);

    /* One mapping goes; the other still reaches the memory. */
    assert_int_equal(be->ops->unmap(be, 0, va, g), VRAM_OK);
    primary = push_primary();
    assert_int_equal(dtoh(&byte, va + 5 * g + 4096, 1), 0);
    assert_int_equal(byte, 0xa5);
    pop_primary(primary);
    assert_int_equal(be->ops->unmap(be, 0, va + 5 * g, g), VRAM_OK);
    assert_int_equal(be->ops->phys_release(be, 0, h), VRAM_OK);
    assert_int_equal(be->ops->va_release(be, 0, va, 8 * g), VRAM_OK);
    dlclose(lib);
}

static void
test_events(void **state)
{
    (void)state;
    uint64_t ev = 0;
    bool done = false;
    assert_int_equal(be->ops->event_record(be, 0, 0, &ev), VRAM_OK);
    for (long i = 0; i < 10000000 && !done; i++)
        assert_int_equal(be->ops->event_query(be, 0, ev, &done), VRAM_OK);
    assert_true(done);
    assert_int_equal(be->ops->event_destroy(be, 0, ev), VRAM_OK);
}

static void
test_oom(void **state)
{
    (void)state;
    uint64_t a = 7;
    assert_int_equal(be->ops->mem_alloc(be, 0, 1ULL << 50, &a), VRAM_E_OOM); /* 1 PiB */
    printf("# 1 PiB: %s\n", vram_last_error());
    assert_string_equal(vram_last_error(),
                        "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
    assert_int_equal(a, 7);
    assert_int_equal(be->ops->mem_alloc(be, n_devices, MiB, &a), VRAM_E_NO_DEVICE);
}

/* Whatever is current before a call (nothing, or a context of the caller)
** is current after it. */
static void
test_context_preserved(void **state)
{
    (void)state;
    vcu_context before = current_context();
    uint64_t fr, tot, a;
    assert_int_equal(be->ops->mem_get_info(be, 0, &fr, &tot), VRAM_OK);
    assert_ptr_equal(current_context(), before);

    vcu_context primary = push_primary();
    assert_int_equal(be->ops->mem_alloc(be, n_devices - 1, MiB, &a), VRAM_OK);
    assert_ptr_equal(current_context(), primary);
    assert_int_equal(be->ops->mem_free(be, n_devices - 1, a), VRAM_OK);
    assert_ptr_equal(current_context(), primary);
    pop_primary(primary);
    assert_ptr_equal(current_context(), before);
}

static void *
worker(void *arg)
{
    int *failures = arg;
    for (int i = 0; i < 100; i++) {
        uint64_t a;
        if (be->ops->mem_alloc(be, i % n_devices, 2 * MiB, &a) != VRAM_OK ||
            be->ops->mem_free(be, i % n_devices, a) != VRAM_OK)
            (*failures)++;
    }
    vcu_context c = (vcu_context)0x1;
    if (api.cuCtxGetCurrent(&c) != VCU_SUCCESS || c != NULL)
        (*failures)++; /* a fresh thread has no context, before and after */
    return NULL;
}

static void
test_threads(void **state)
{
    (void)state;
    enum { N = 4 };
    pthread_t t[N];
    int failures[N] = {0};
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, &failures[i]), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(failures[i], 0);
    }
}

/* The library can be opened and closed again (dlclose included). */
static void
test_reopen(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        struct backend *b = NULL;
        assert_int_equal(backend_cuda_open(NULL, &b), VRAM_OK);
        uint64_t a;
        assert_int_equal(b->ops->mem_alloc(b, 0, MiB, &a), VRAM_OK);
        assert_int_equal(b->ops->mem_free(b, 0, a), VRAM_OK);
        b->ops->close(b);
    }
}

/* vram_open on the CUDA backend, growth, through the public API. */
static void
test_end_to_end(void **state)
{
    (void)state;
    vram_context *ctx = cuda_open();
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_GROWTH, GiB);
    void *p[16];
    for (int i = 0; i < 16; i++)
        assert_int_equal(vram_alloc(dev, (size_t)(i + 1) * 3 * MiB + 17, NULL, &p[i]),
                         VRAM_OK);
    assert_true(vram_check(dev));
    void *q = (void *)0x1;
    assert_int_equal(vram_alloc(dev, 2 * GiB, NULL, &q), VRAM_E_OOM);
    for (int i = 0; i < 16; i++)
        assert_int_equal(vram_free(dev, p[i]), VRAM_OK);
    assert_true(vram_check(dev));
    vram_close(ctx);
}

/* Expandable on the real driver: holes' memory mapped under a larger
** block (aliases), a unit whose memory was taken remapped, a steady loop
** without driver calls, everything given back at close. */
static void
test_expandable_end_to_end(void **state)
{
    (void)state;
    vram_context *ctx = cuda_open();
    vram_device *dev = sim_device(ctx, VRAM_STRATEGY_EXPANDABLE, 256 * MiB);
    const size_t U = 8 * MiB;
    uint64_t calls = 0;
    for (int step = 0; step < 4; step++) {
        loss_step(dev, U);
        if (step == 1)
            calls = stats_of(dev).backend_calls;
    }
    vram_stats st = stats_of(dev);
    /* 14 units: the second step's memory is made in extents (one handle
    ** per run of new units), which a later block's mapping takes whole, as
    ** in test_expandable_steady_loop (tests/unit/test_expandable.c). */
    assert_int_equal(st.peak_bytes_reserved, 14 * U);
    assert_int_equal(st.backend_calls, calls);
    vram_close(ctx);
}

int
main(void)
{
    vram_status st = backend_cuda_open(NULL, &be);
    if (st == VRAM_E_NO_DRIVER) {
        printf("skipped: %s\n", vram_last_error());
        return 77;
    }
    if (st != VRAM_OK) {
        fprintf(stderr, "backend_cuda_open: %s\n", vram_last_error());
        return 1;
    }
    if (be->ops->device_count(be, &n_devices) != VRAM_OK || n_devices == 0) {
        printf("skipped: no CUDA device\n");
        be->ops->close(be);
        return 77;
    }
    if (vcu_api_load(NULL, &api) != VRAM_OK) {
        fprintf(stderr, "vcu_api_load: %s\n", vram_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_info),   cmocka_unit_test(test_alloc_free),
        cmocka_unit_test(test_vm_round_trip), cmocka_unit_test(test_events),
        cmocka_unit_test(test_oom),           cmocka_unit_test(test_context_preserved),
        cmocka_unit_test(test_threads),       cmocka_unit_test(test_reopen),
        cmocka_unit_test(test_end_to_end),    cmocka_unit_test(test_vm_alias),
        cmocka_unit_test(test_expandable_end_to_end),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be->ops->close(be);
    vcu_api_unload(&api);
    return rc;
}
