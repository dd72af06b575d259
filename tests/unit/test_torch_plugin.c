/* SPDX-License-Identifier: MIT */
/*
** test_torch_plugin.c -- the PyTorch plug-in (vram_torch_malloc/free) as
** PyTorch drives it: no context in sight, settings from the environment.
** tests/CMakeLists.txt runs this with VRAM_BACKEND=sim, VRAM_STRATEGY=growth
** and VRAM_MEMORY_LIMIT=64M. The thread test runs first, so that the
** plug-in's one-time opening is raced by every thread at once.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "testutil.h"

#define CAP (64 * MiB)

/* ------------------------------------------------------------------ */
/* Capturing stderr                                                     */
/* ------------------------------------------------------------------ */

/* stderr redirected into a temporary file while a call runs. */
struct capture {
    FILE *file; /* the temporary file */
    int saved;  /* the original stderr descriptor */
};

static void
capture_begin(struct capture *c)
{
    fflush(stderr);
    /* Opened to collect what the plug-in writes to stderr; removed at close. */
    c->file = tmpfile();
    assert_non_null(c->file);
    c->saved = dup(STDERR_FILENO);
    assert_true(c->saved >= 0);
    assert_true(dup2(fileno(c->file), STDERR_FILENO) >= 0);
}

/* Restore stderr and return what was written (at most LEN-1 bytes) in BUF. */
static const char *
capture_end(struct capture *c, char *buf, size_t len)
{
    fflush(stderr);
    assert_true(dup2(c->saved, STDERR_FILENO) >= 0);
    close(c->saved);
    rewind(c->file);
    size_t n = fread(buf, 1, len - 1, c->file);
    buf[n] = '\0';
    fclose(c->file);
    return buf;
}

/* TEXT is exactly one line starting with "vram: " and saying something. */
static void
assert_one_vram_line(const char *text)
{
    size_t n = strlen(text);
    assert_true(n > strlen("vram: ") + 1);
    assert_memory_equal(text, "vram: ", strlen("vram: "));
    assert_int_equal(text[n - 1], '\n');
    assert_ptr_equal(strchr(text, '\n'), text + n - 1);
}

static uint64_t
peak_reserved(void)
{
    uint64_t peak = 0;
    assert_int_equal(vram_torch_peak_reserved(0, &peak), VRAM_OK);
    return peak;
}

/* ------------------------------------------------------------------ */
/* Threads                                                              */
/* ------------------------------------------------------------------ */

#define THREADS 8
#define OPS 5000
#define KEEP 16

static pthread_barrier_t start_line;

static void *
worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *live[KEEP] = {0};
    void *stream = (void *)(uintptr_t)(seed % 2);
    intptr_t bad = 0;
    /* Everyone's first call at once: the context must open exactly once. */
    pthread_barrier_wait(&start_line);
    for (int i = 0; i < OPS && bad == 0; i++) {
        int k = (int)(rand_r(&seed) % KEEP);
        if (live[k] != NULL) {
            vram_torch_free(live[k], 0, 0, stream);
            live[k] = NULL;
            continue;
        }
        /* At most 16 live blocks of at most 256 KiB per thread: 32 MiB in
        ** all, under the 64 MiB cap, so every allocation must succeed. */
        ssize_t size = 1 + (ssize_t)(rand_r(&seed) % (256 * 1024));
        live[k] = vram_torch_malloc(size, 0, stream);
        if (live[k] == NULL)
            bad = 1;
    }
    for (int k = 0; k < KEEP; k++)
        vram_torch_free(live[k], 0, 0, stream);
    return (void *)bad;
}

static void
test_concurrent_threads(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    assert_int_equal(pthread_barrier_init(&start_line, NULL, THREADS), 0);
    for (uintptr_t i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)(i + 1)), 0);
    for (int i = 0; i < THREADS; i++) {
        void *rc = NULL;
        assert_int_equal(pthread_join(t[i], &rc), 0);
        assert_null(rc);
    }
    pthread_barrier_destroy(&start_line);
    uint64_t peak = peak_reserved();
    assert_true(peak > 0);
    assert_true(peak <= CAP);
}

/* ------------------------------------------------------------------ */
/* One thread                                                           */
/* ------------------------------------------------------------------ */

static void
test_round_trip(void **state)
{
    (void)state;
    void *a = vram_torch_malloc(1 << 20, 0, NULL);
    void *b = vram_torch_malloc(3000, 0, NULL);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    assert_int_equal((uintptr_t)a % 256, 0);
    /* VRAM_STRATEGY=growth came through: preallocate would hold the cap. */
    uint64_t peak = peak_reserved();
    assert_true(peak >= (1 << 20) + 3000);
    assert_true(peak < CAP);
    vram_torch_free(a, 1 << 20, 0, NULL);
    vram_torch_free(b, 3000, 0, NULL);
    /* The freed space is handed out again. */
    void *c = vram_torch_malloc(1 << 20, 0, NULL);
    assert_non_null(c);
    vram_torch_free(c, 1 << 20, 0, NULL);
}

static void
test_size_zero_and_null(void **state)
{
    (void)state;
    struct capture cap;
    char out[512];
    capture_begin(&cap);
    void *p = vram_torch_malloc(0, 0, NULL);
    vram_torch_free(NULL, 0, 0, NULL);
    vram_torch_free(NULL, 0, 7, NULL); /* even on a device that does not exist */
    capture_end(&cap, out, sizeof out);
    assert_null(p);
    assert_string_equal(out, "");
}

static void
test_oom_returns_null_with_one_line(void **state)
{
    (void)state;
    struct capture cap;
    char out[1024];
    capture_begin(&cap);
    void *p = vram_torch_malloc((ssize_t)(CAP + MiB), 0, NULL);
    capture_end(&cap, out, sizeof out);
    assert_null(p);
    assert_one_vram_line(out);
    /* The line is the thread's last error, as the header promises. */
    const char *why = vram_last_error();
    assert_int_equal(strlen(why), strlen(out) - strlen("vram: ") - 1);
    assert_memory_equal(out + strlen("vram: "), why, strlen(why));
    /* Nothing was left behind: a small allocation still succeeds. */
    void *q = vram_torch_malloc(4096, 0, NULL);
    assert_non_null(q);
    vram_torch_free(q, 4096, 0, NULL);
}

static void
test_bad_arguments(void **state)
{
    (void)state;
    struct capture cap;
    char out[1024];

    /* A negative size and a device that does not exist: NULL, one line. */
    capture_begin(&cap);
    void *p = vram_torch_malloc(-1, 0, NULL);
    capture_end(&cap, out, sizeof out);
    assert_null(p);
    assert_one_vram_line(out);

    capture_begin(&cap);
    p = vram_torch_malloc(4096, 3, NULL);
    capture_end(&cap, out, sizeof out);
    assert_null(p);
    assert_one_vram_line(out);
    assert_non_null(strstr(out, "device 3"));

    capture_begin(&cap);
    p = vram_torch_malloc(4096, -1, NULL);
    capture_end(&cap, out, sizeof out);
    assert_null(p);
    assert_one_vram_line(out);

    /* No statistic for a device that does not exist, nor into NULL. */
    uint64_t peak = 0;
    assert_int_equal(vram_torch_peak_reserved(3, &peak), VRAM_E_NO_DEVICE);
    assert_int_equal(vram_torch_peak_reserved(0, NULL), VRAM_E_INVALID);
}

static void
test_bad_pointer_changes_nothing(void **state)
{
    (void)state;
    struct capture cap;
    char out[1024];
    void *a = vram_torch_malloc(8192, 0, NULL);
    assert_non_null(a);

    /* An address inside a live block, one never handed out, a freed one,
    ** and a live one named with the wrong device. */
    void *wrong[] = {(char *)a + 256, (void *)(uintptr_t)0x1000, NULL};
    void *freed = vram_torch_malloc(512, 0, NULL);
    assert_non_null(freed);
    vram_torch_free(freed, 512, 0, NULL);
    wrong[2] = freed;
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        if (wrong[i] == a) /* the freed block may be a's neighbour, never a */
            continue;
        capture_begin(&cap);
        vram_torch_free(wrong[i], 0, 0, NULL);
        capture_end(&cap, out, sizeof out);
        assert_one_vram_line(out);
    }
    capture_begin(&cap);
    vram_torch_free(a, 8192, 1, NULL);
    capture_end(&cap, out, sizeof out);
    assert_one_vram_line(out);

    /* A is still live: freeing it properly is silent and succeeds once. */
    capture_begin(&cap);
    vram_torch_free(a, 8192, 0, NULL);
    capture_end(&cap, out, sizeof out);
    assert_string_equal(out, "");
    capture_begin(&cap);
    vram_torch_free(a, 8192, 0, NULL);
    capture_end(&cap, out, sizeof out);
    assert_one_vram_line(out);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_threads),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_size_zero_and_null),
        cmocka_unit_test(test_oom_returns_null_with_one_line),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_bad_pointer_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
