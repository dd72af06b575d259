/* SPDX-License-Identifier: MIT */
/*
** test_torch_streams.c -- the PyTorch plug-in's hooks beyond malloc and
** free, as PyTorch calls them, on the CUDA backend over the fake driver
** (tests/fakecuda: events that complete on their third query, and graph
** capture that fails and counts as a misuse every call it forbids):
** record_stream, CUDA graph pools, the memory fraction and base_alloc.
** tests/CMakeLists.txt runs it twice, with VRAM_STRATEGY=growth and
** =expandable, VRAM_BACKEND=cuda and the fake as libcuda.so.1.
*/
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#define MAIN ((void *)0x5001) /* PyTorch's current stream */
#define SIDE ((void *)0x5002) /* a side stream that reads the tensor */
#define CAPT ((void *)0x5003) /* the stream torch.cuda.graph captures on */

static struct {
    uint64_t (*misuses)(void);
    void (*capture)(void *stream);
} fake;

static bool
expandable(void)
{
    const char *s = getenv("VRAM_STRATEGY");
    return s != NULL && strcmp(s, "expandable") == 0;
}

static int
setup(void **state)
{
    (void)state;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    *(void **)&fake.misuses = dlsym(lib, "fakecuda_misuses");
    *(void **)&fake.capture = dlsym(lib, "fakecuda_capture");
    assert_non_null(fake.misuses);
    assert_non_null(fake.capture);
    return 0;
}

/* Allocations of sizes nothing freed can serve at once, so that each one
** polls the pending frees; enough of them for the fake's events (three
** queries) to complete; then freed. */
static void
poll_pending(void)
{
    static uintptr_t next = 0x7000;
    void *stream = (void *)next++;
    void *t[6];
    for (int i = 0; i < 6; i++) {
        t[i] = vram_torch_malloc((ssize_t)(4096 << (2 * i)) + 512, 0, stream);
        assert_non_null(t[i]);
    }
    for (int i = 0; i < 6; i++)
        vram_torch_free(t[i], 0, 0, stream);
}

/*
** The pattern that silently corrupted results without the hook: a tensor
** made on the main stream, read by a side stream (record_stream), freed
** on the main stream, and the next tensor of its size allocated there
** while the side stream may still be reading.
*/
static void
test_record_stream(void **state)
{
    (void)state;
    uint64_t before = fake.misuses();
    void *x = vram_torch_malloc(8 << 20, 0, MAIN);
    assert_non_null(x);
    vram_torch_record_stream(x, SIDE);
    vram_torch_free(x, 8 << 20, 0, MAIN);
    void *y = vram_torch_malloc(8 << 20, 0, MAIN);
    assert_non_null(y);
    assert_ptr_not_equal(y, x);
    vram_torch_free(y, 8 << 20, 0, MAIN);
    /* Once both streams' events have completed, x's memory is reused. */
    for (int i = 0; i < 3; i++)
        poll_pending();
    vram_device *dev = NULL;
    assert_int_equal(vram_torch_device(0, &dev), VRAM_OK);
    assert_true(vram_check(dev));
    assert_int_equal(fake.misuses(), before);
}

/*
** torch.cuda.graph: begin_allocate_to_pool, capture (the fake forbids
** synchronizing, event queries, frees of device memory, and memory calls
** outside the relaxed mode), end, replays; the graph's memory serves
** nothing else until release_pool.
*/
static void
test_graph_pool(void **state)
{
    (void)state;
    uint64_t before = fake.misuses();
    vram_device *dev = NULL;
    assert_int_equal(vram_torch_device(0, &dev), VRAM_OK);
    void *static_in = vram_torch_malloc(1 << 20, 0, MAIN);
    void *other = vram_torch_malloc(1 << 20, 0, SIDE); /* a second stream: events */
    assert_non_null(static_in);
    assert_non_null(other);

    vram_torch_begin_allocate_to_pool(0, 0, 1, NULL); /* graph pool {0, 1} */
    fake.capture(CAPT);
    void *t[8];
    /* Intermediates of growing sizes: new device memory during capture. */
    for (int i = 0; i < 8; i++) {
        t[i] = vram_torch_malloc((ssize_t)(3 << 20) * (i + 1), 0, CAPT);
        assert_non_null(t[i]);
        if (i % 2 == 1)
            vram_torch_free(t[i - 1], 0, 0, CAPT);
    }
    vram_torch_free(other, 0, 0, SIDE); /* needs an event: deferred */
    fake.capture(NULL);
    vram_torch_end_allocate_to_pool(0, 0, 1);
    assert_int_equal(fake.misuses(), before); /* nothing the capture forbids */
    assert_true(vram_check(dev));

    /* Between replays, ordinary allocations never land in the graph's
    ** memory, whose freed blocks the graph may still write. */
    void *u[8];
    for (int i = 0; i < 8; i++) {
        u[i] = vram_torch_malloc((ssize_t)(3 << 20) * (i + 1), 0, MAIN);
        assert_non_null(u[i]);
        for (int k = 0; k < 8; k++)
            assert_ptr_not_equal(u[i], t[k]);
    }
    for (int i = 0; i < 8; i++)
        vram_torch_free(u[i], 0, 0, MAIN);
    for (int i = 1; i < 8; i += 2)
        vram_torch_free(t[i], 0, 0, MAIN); /* the graph's outputs, freed */
    vram_torch_release_pool(0, 0, 1);
    vram_torch_free(static_in, 0, 0, MAIN);
    assert_true(vram_check(dev));
    assert_int_equal(fake.misuses(), before);
}

/* The one refusal vram must make during capture: expandable memory
** mapped at another address cannot be moved without a synchronize. */
static void
test_capture_refuses_to_move(void **state)
{
    (void)state;
    if (!expandable())
        skip();
    uint64_t before = fake.misuses();
    /* Memory becomes idle at one address and is mapped again at another
    ** (an alias), so that the first address is then in conflict. */
    void *a = vram_torch_malloc(64 << 20, 0, MAIN);
    vram_torch_free(a, 0, 0, MAIN);
    void *filler = vram_torch_malloc(32 << 20, 0, MAIN);
    void *b = vram_torch_malloc(64 << 20, 0, MAIN);
    assert_non_null(b);
    vram_torch_free(filler, 0, 0, MAIN);
    vram_torch_begin_allocate_to_pool(0, 0, 2, NULL);
    fake.capture(CAPT);
    void *c = vram_torch_malloc(64 << 20, 0, CAPT); /* lands on a's address */
    fake.capture(NULL);
    vram_torch_end_allocate_to_pool(0, 0, 2);
    assert_int_equal(fake.misuses(), before);
    if (c != NULL)
        vram_torch_free(c, 0, 0, MAIN);
    vram_torch_release_pool(0, 0, 2);
    vram_torch_free(b, 0, 0, MAIN);
}

static void
test_memory_fraction(void **state)
{
    (void)state;
    vram_device *dev = NULL;
    assert_int_equal(vram_torch_device(0, &dev), VRAM_OK);
    vram_stats s;
    assert_int_equal(vram_get_stats(dev, &s), VRAM_OK);
    uint64_t configured = s.bytes_limit;
    vram_torch_set_memory_fraction(0.5, 0); /* half of the fake's 1 GiB */
    assert_int_equal(vram_get_stats(dev, &s), VRAM_OK);
    assert_true(s.bytes_limit <= 512ULL << 20);
    void *p = vram_torch_malloc(600 << 20, 0, MAIN);
    assert_null(p);
    vram_torch_set_memory_fraction(1.0, 0);
    assert_int_equal(vram_get_stats(dev, &s), VRAM_OK);
    assert_int_equal(s.bytes_limit, configured);
    vram_torch_set_memory_fraction(1.5, 0); /* refused with a line: unchanged */
    assert_int_equal(vram_get_stats(dev, &s), VRAM_OK);
    assert_int_equal(s.bytes_limit, configured);
}

static void
test_base_alloc(void **state)
{
    (void)state;
    void *a = vram_torch_malloc(4096, 0, MAIN);
    void *b = vram_torch_malloc(4096, 0, MAIN);
    size_t size = 0;
    void *base = vram_torch_base_alloc(b, &size);
    if (expandable()) {
        assert_ptr_equal(base, b);
    } else {
        assert_true((char *)base <= (char *)b && (char *)b < (char *)base + size);
        assert_true(size >= 2 << 20);
    }
    void *bad = vram_torch_base_alloc((char *)b + 256, &size);
    assert_ptr_equal(bad, (char *)b + 256); /* a line on stderr, PTR back */
    vram_torch_free(a, 0, 0, MAIN);
    vram_torch_free(b, 0, 0, MAIN);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_stream),
        cmocka_unit_test(test_graph_pool),
        cmocka_unit_test(test_capture_refuses_to_move),
        cmocka_unit_test(test_memory_fraction),
        cmocka_unit_test(test_base_alloc),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
