/* SPDX-License-Identifier: MIT */
/*
** test_config.c -- the environment as a user sets it, seen through
** vram_open: strategies, caps, per-device lists, TensorFlow's own
** variables, malformed values (which fail, never mean "unlimited"), and
** the trace (with vram_mark's marks and the OOM events), log and dump
** that the environment turns on.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "trace/trace.h"

static const char *const vars[] = {
    "VRAM_BACKEND",
    "VRAM_SIM_DEVICES",
    "VRAM_SIM_MEMORY",
    "VRAM_STRATEGY",
    "VRAM_ALLOW_GROWTH",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "VRAM_MEMORY_FRACTION",
    "VRAM_MEMORY_LIMIT",
    "TF_DEVICE_MIN_SYS_MEMORY_IN_MB",
    "VRAM_LOG",
    "VRAM_LOG_FILE",
    "VRAM_TRACE",
    "VRAM_OOM_DUMP",
};

static int
clean_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    setenv("VRAM_BACKEND", "sim", 1);
    setenv("VRAM_SIM_MEMORY", "16G", 1);
    return 0;
}

static vram_context *
open_env(void)
{
    vram_context *ctx = NULL;
    vram_status st = vram_open(NULL, &ctx);
    if (st != VRAM_OK)
        fail_msg("vram_open: %s", vram_last_error());
    return ctx;
}

static vram_device_info
info_of(vram_context *ctx, int logical)
{
    vram_device *dev;
    assert_int_equal(vram_device_get(ctx, logical, &dev), VRAM_OK);
    vram_device_info di;
    assert_int_equal(vram_device_info_get(dev, &di), VRAM_OK);
    return di;
}

static void
test_env_defaults(void **state)
{
    (void)state;
    vram_context *ctx = open_env();
    vram_device_info di = info_of(ctx, 0);
    /* Nothing named a strategy: expandable, vram's default for every way
    ** in; the cap is TensorFlow's rule (docs/ENVIRONMENT.md, "Defaults"). */
    assert_int_equal(di.strategy, VRAM_STRATEGY_EXPANDABLE);
    assert_int_equal(di.limit_bytes, 16 * GiB - 1536 * MiB);
    /* The first allocation maps what it needs, not the whole cap. */
    vram_device *dev = NULL;
    void *p = NULL;
    assert_int_equal(vram_device_get(ctx, 0, &dev), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 1 * MiB, NULL, &p), VRAM_OK);
    vram_stats s;
    assert_int_equal(vram_get_stats(dev, &s), VRAM_OK);
    assert_true(s.bytes_reserved < 64 * MiB);
    assert_int_equal(vram_free(dev, p), VRAM_OK);
    vram_close(ctx);
    /* A context that reads no environment starts from the same default. */
    vram_options o;
    memset(&o, 0, sizeof o);
    o.backend = VRAM_BACKEND_SIM;
    o.ignore_environment = true;
    assert_int_equal(vram_open(&o, &ctx), VRAM_OK);
    assert_int_equal(info_of(ctx, 0).strategy, VRAM_STRATEGY_EXPANDABLE);
    vram_close(ctx);
    /* TensorFlow's switch set to false is TensorFlow's default. */
    setenv("TF_FORCE_GPU_ALLOW_GROWTH", "false", 1);
    ctx = open_env();
    assert_int_equal(info_of(ctx, 0).strategy, VRAM_STRATEGY_PREALLOCATE);
    vram_close(ctx);
    unsetenv("TF_FORCE_GPU_ALLOW_GROWTH");
}

static void
test_env_strategy_and_growth(void **state)
{
    (void)state;
    setenv("VRAM_STRATEGY", "growth:tf-compat", 1);
    vram_context *ctx = open_env();
    assert_int_equal(info_of(ctx, 0).strategy, VRAM_STRATEGY_GROWTH_TF);
    vram_close(ctx);
    unsetenv("VRAM_STRATEGY");
    setenv("TF_FORCE_GPU_ALLOW_GROWTH", "true", 1);
    ctx = open_env();
    assert_int_equal(info_of(ctx, 0).strategy, VRAM_STRATEGY_GROWTH);
    vram_close(ctx);
    unsetenv("TF_FORCE_GPU_ALLOW_GROWTH");
    setenv("VRAM_ALLOW_GROWTH", "1", 1);
    ctx = open_env();
    assert_int_equal(info_of(ctx, 0).strategy, VRAM_STRATEGY_GROWTH);
    vram_close(ctx);
}

static void
test_env_fraction_limit_reserve(void **state)
{
    (void)state;
    setenv("VRAM_MEMORY_FRACTION", "25%", 1);
    vram_context *ctx = open_env();
    assert_int_equal(info_of(ctx, 0).limit_bytes, 4 * GiB);
    vram_close(ctx);
    unsetenv("VRAM_MEMORY_FRACTION");
    setenv("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "100", 1);
    ctx = open_env();
    assert_int_equal(info_of(ctx, 0).limit_bytes, 16 * GiB - 100 * MiB);
    vram_close(ctx);
    setenv("VRAM_MEMORY_LIMIT", "6GiB", 1);
    ctx = open_env();
    assert_int_equal(info_of(ctx, 0).limit_bytes, 6 * GiB);
    vram_close(ctx);
}

static void
test_env_per_device_lists(void **state)
{
    (void)state;
    setenv("VRAM_SIM_DEVICES", "2", 1);
    setenv("VRAM_MEMORY_LIMIT", "0:3G+2G,1:4G", 1);
    vram_context *ctx = open_env();
    int n = 0;
    assert_int_equal(vram_device_count(ctx, &n), VRAM_OK);
    assert_int_equal(n, 3);
    assert_int_equal(info_of(ctx, 0).limit_bytes, 3 * GiB);
    assert_int_equal(info_of(ctx, 1).limit_bytes, 2 * GiB);
    assert_int_equal(info_of(ctx, 1).physical, 0);
    assert_int_equal(info_of(ctx, 2).limit_bytes, 4 * GiB);
    assert_int_equal(info_of(ctx, 2).physical, 1);
    vram_close(ctx);
}

/* Limits fail closed: a bad or impossible value stops vram_open. */
static void
test_env_malformed_fails_closed(void **state)
{
    (void)state;
    struct {
        const char *name, *value, *expect;
    } bad[] = {
        {"VRAM_MEMORY_LIMIT", "6X", "VRAM_MEMORY_LIMIT"},
        {"VRAM_MEMORY_LIMIT", "-1G", "VRAM_MEMORY_LIMIT"},
        {"VRAM_MEMORY_LIMIT", "0", "VRAM_MEMORY_LIMIT"},
        {"VRAM_MEMORY_LIMIT", "3:4G", "device 3"}, /* only one device */
        {"VRAM_MEMORY_FRACTION", "150%", "VRAM_MEMORY_FRACTION"},
        {"VRAM_STRATEGY", "grow", "VRAM_STRATEGY"},
        {"TF_FORCE_GPU_ALLOW_GROWTH", "maybe", "TF_FORCE_GPU_ALLOW_GROWTH"},
        {"VRAM_LOG", "9", "VRAM_LOG"},
        {"VRAM_BACKEND", "tpu", "VRAM_BACKEND"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        clean_env(NULL);
        setenv(bad[i].name, bad[i].value, 1);
        vram_context *ctx = (vram_context *)0x1;
        assert_int_equal(vram_open(NULL, &ctx), VRAM_E_CONFIG);
        assert_ptr_equal(ctx, (vram_context *)0x1);
        if (strstr(vram_last_error(), bad[i].expect) == NULL)
            fail_msg("%s=%s: message '%s' lacks '%s'", bad[i].name, bad[i].value,
                     vram_last_error(), bad[i].expect);
        assert_null(strchr(vram_last_error(), '\n'));
    }
}

/* ignore_environment: the same bad value is not even read. */
static void
test_env_ignored_on_request(void **state)
{
    (void)state;
    setenv("VRAM_MEMORY_LIMIT", "garbage", 1);
    vram_context *ctx = sim_open(1, 4 * GiB, false);
    vram_close(ctx);
}

/* VRAM_TRACE records every allocation and free in the shared format, and
** the trace reads back with the same events. */
static void
test_env_trace_round_trip(void **state)
{
    (void)state;
    char path[] = "/tmp/vram-test-trace-XXXXXX.csv.gz";
    int fd = mkstemps(path, 7);
    assert_true(fd >= 0);
    close(fd);
    setenv("VRAM_TRACE", path, 1);
    setenv("VRAM_STRATEGY", "growth", 1);
    vram_context *ctx = open_env();
    vram_device *dev;
    assert_int_equal(vram_device_get(ctx, 0, &dev), VRAM_OK);
    void *a, *b;
    assert_int_equal(vram_alloc(dev, 1000, (void *)0x10, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 5 * MiB, NULL, &b), VRAM_OK);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    vram_close(ctx);

    struct trace *t = NULL;
    if (trace_load(path, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());
    assert_int_equal(t->n_events, 3);
    assert_int_equal(t->events[0].op, TRACE_ALLOC);
    assert_int_equal(t->events[0].size, 1000);
    assert_int_equal(t->events[0].stream, 0x10);
    assert_int_equal(t->events[1].size, 5 * MiB);
    assert_int_equal(t->events[2].op, TRACE_FREE);
    assert_int_equal(t->events[2].id, t->events[0].id);
    assert_int_equal(t->peak_live_bytes, 1000 + 5 * MiB);
    assert_non_null(strstr(t->meta, "workload=vram"));
    trace_free(t);
    unlink(path);

    setenv("VRAM_TRACE", "/nonexistent-dir/trace.csv", 1);
    vram_context *bad = NULL;
    assert_int_equal(vram_open(NULL, &bad), VRAM_E_CONFIG);
    assert_non_null(strstr(vram_last_error(), "VRAM_TRACE"));
}

/* A fresh temporary trace path ending in SUFFIX (".csv" or ".csv.gz"). */
static void
temp_trace(char *path, int suffix_len)
{
    int fd = mkstemps(path, suffix_len);
    assert_true(fd >= 0);
    close(fd);
}

/* vram_mark writes to the trace of every open context that records one;
** an OOM writes an 'o' event with the size asked for; both read back. */
static void
test_env_trace_marks_and_oom(void **state)
{
    (void)state;
    char path[] = "/tmp/vram-test-marks-XXXXXX.csv";
    char path2[] = "/tmp/vram-test-marks-XXXXXX.csv.gz";
    temp_trace(path, 4);
    temp_trace(path2, 7);

    /* No context records a trace: a mark is a no-op; bad labels fail. */
    assert_int_equal(vram_mark("nothing open"), VRAM_OK);
    assert_int_equal(vram_mark(NULL), VRAM_E_INVALID);
    assert_int_equal(vram_mark(""), VRAM_E_INVALID);
    assert_non_null(strstr(vram_last_error(), "vram_mark"));

    setenv("VRAM_STRATEGY", "growth", 1);
    setenv("VRAM_MEMORY_LIMIT", "64M", 1);
    vram_context *untraced = open_env(); /* no VRAM_TRACE: not reached */
    setenv("VRAM_TRACE", path, 1);
    vram_context *ctx = open_env();
    setenv("VRAM_TRACE", path2, 1);
    vram_context *ctx2 = open_env();

    vram_device *dev;
    assert_int_equal(vram_device_get(ctx, 0, &dev), VRAM_OK);
    assert_int_equal(vram_mark("epoch 1"), VRAM_OK);
    void *a, *b = (void *)0x1;
    assert_int_equal(vram_alloc(dev, 1000, NULL, &a), VRAM_OK);
    assert_int_equal(vram_mark("step, \"2\"\n"), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 100 * MiB, NULL, &b), VRAM_E_OOM);
    assert_ptr_equal(b, (void *)0x1);
    /* The thread's last error is still the OOM line, not the trace's. */
    assert_non_null(strstr(vram_last_error(), "out of memory on GPU:0"));
    vram_close(ctx2); /* leaves the list: later marks do not reach it */
    assert_int_equal(vram_mark("epoch 2"), VRAM_OK);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    vram_close(ctx);
    assert_int_equal(vram_mark("after close"), VRAM_OK);
    vram_close(untraced);

    struct trace *t = NULL;
    if (trace_load(path, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());
    assert_int_equal(t->n_events, 6);
    assert_int_equal(t->n_marks, 3);
    assert_int_equal(t->n_ooms, 1);
    assert_int_equal(t->events[0].op, TRACE_MARK);
    assert_string_equal(t->labels[t->events[0].label], "epoch 1");
    assert_int_equal(t->events[1].op, TRACE_ALLOC);
    assert_int_equal(t->events[2].op, TRACE_MARK);
    assert_string_equal(t->labels[t->events[2].label], "step   2  ");
    assert_int_equal(t->events[3].op, TRACE_OOM);
    assert_int_equal(t->events[3].size, 100 * MiB);
    assert_int_equal(t->events[3].device, 0);
    assert_int_equal(t->events[4].op, TRACE_MARK);
    assert_string_equal(t->labels[t->events[4].label], "epoch 2");
    assert_int_equal(t->events[5].op, TRACE_FREE);
    assert_int_equal(t->peak_live_bytes, 1000);
    assert_true(t->events[0].t_us <= t->events[5].t_us);
    trace_free(t);

    /* The second context saw the marks made while it was open; its
     * device was never used, so marks are all it has. */
    if (trace_load(path2, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());
    assert_int_equal(t->n_events, 2);
    assert_int_equal(t->n_marks, 2);
    assert_int_equal(t->n_labels, 2);
    assert_string_equal(t->labels[0], "epoch 1");
    trace_free(t);
    unlink(path);
    unlink(path2);
}

/* Marks from several threads while contexts open and close. */
struct mark_thread {
    int n;
    int failures;
};

static void *
mark_thread_main(void *arg)
{
    struct mark_thread *m = arg;
    for (int i = 0; i < m->n; i++) {
        char label[32];
        snprintf(label, sizeof label, "step %d", i);
        if (vram_mark(label) != VRAM_OK)
            m->failures++;
    }
    return NULL;
}

static void
test_env_marks_threads(void **state)
{
    (void)state;
    char path[] = "/tmp/vram-test-marks-XXXXXX.csv";
    temp_trace(path, 4);
    setenv("VRAM_TRACE", path, 1);
    vram_context *ctx = open_env();
    enum { THREADS = 4, MARKS = 500 };
    pthread_t th[THREADS];
    struct mark_thread m[THREADS];
    for (int i = 0; i < THREADS; i++) {
        m[i] = (struct mark_thread){MARKS, 0};
        assert_int_equal(pthread_create(&th[i], NULL, mark_thread_main, &m[i]), 0);
    }
    /* Contexts opening and closing meanwhile (without a trace, then with
     * one that goes to /dev/null) do not disturb the marks. */
    for (int k = 0; k < 20; k++) {
        setenv("VRAM_TRACE", k % 2 ? "/dev/null" : "", 1);
        vram_close(open_env());
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(m[i].failures, 0);
    }
    vram_close(ctx);
    struct trace *t = NULL;
    if (trace_load(path, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());
    assert_int_equal(t->n_marks, THREADS * MARKS);
    assert_int_equal(t->n_labels, MARKS);
    trace_free(t);
    unlink(path);
}

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* VRAM_LOG=4 logs every allocation; VRAM_OOM_DUMP=1 adds the dump. */
static void
test_env_log_and_dump(void **state)
{
    (void)state;
    char path[] = "/tmp/vram-test-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    setenv("VRAM_LOG", "4", 1);
    setenv("VRAM_LOG_FILE", path, 1);
    setenv("VRAM_OOM_DUMP", "1", 1);
    setenv("VRAM_STRATEGY", "growth", 1);
    setenv("VRAM_MEMORY_LIMIT", "64M", 1);
    vram_context *ctx = open_env();
    vram_device *dev;
    assert_int_equal(vram_device_get(ctx, 0, &dev), VRAM_OK);
    void *a, *b;
    assert_int_equal(vram_alloc(dev, 4096, NULL, &a), VRAM_OK);
    assert_int_equal(vram_alloc(dev, 100 * MiB, NULL, &b), VRAM_E_OOM);
    assert_int_equal(vram_free(dev, a), VRAM_OK);
    vram_close(ctx);
    unsetenv("VRAM_LOG");
    unsetenv("VRAM_LOG_FILE");
    vram_close(open_env()); /* back to no logging */
    const char *log = slurp(path);
    assert_non_null(strstr(log, "alloc 4096 bytes"));
    assert_non_null(strstr(log, "new region of 2.00 MiB"));
    assert_non_null(strstr(log, "out of memory on GPU:0"));
    assert_non_null(strstr(log, "==== vram dump: GPU:0"));
    assert_non_null(strstr(log, "free 4096 bytes"));
    unlink(path);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_env_defaults, clean_env),
        cmocka_unit_test_setup(test_env_strategy_and_growth, clean_env),
        cmocka_unit_test_setup(test_env_fraction_limit_reserve, clean_env),
        cmocka_unit_test_setup(test_env_per_device_lists, clean_env),
        cmocka_unit_test_setup(test_env_malformed_fails_closed, clean_env),
        cmocka_unit_test_setup(test_env_ignored_on_request, clean_env),
        cmocka_unit_test_setup(test_env_trace_round_trip, clean_env),
        cmocka_unit_test_setup(test_env_trace_marks_and_oom, clean_env),
        cmocka_unit_test_setup(test_env_marks_threads, clean_env),
        cmocka_unit_test_setup(test_env_log_and_dump, clean_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
