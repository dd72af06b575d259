/* SPDX-License-Identifier: MIT */
/*
** test_env.c -- the environment module (src/config/env.c), driven through
** a fake getter so that no test touches the real environment: defaults,
** every variable's accepted and rejected values, the growth/strategy
** conflicts, VRAM_MEMORY_LIMIT's forms, the one-line messages, OUT left
** alone on failure, `vram env`'s table and docs/ENVIRONMENT.md being the
** exact output of env_markdown. Also the preload library's settings
** (env_quota_load: VRAM_LIMIT, VRAM_GROUP, HAMi's variables and their
** precedence) and `vram run`'s (env_run_load), which env_load ignores.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/env.h"
#include "quota/quota.h"

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

/* ------------------------------------------------------------------ */
/* The fake environment                                                 */
/* ------------------------------------------------------------------ */

struct kv {
    const char *name;
    const char *value;
};

/* A list of name/value pairs ended by {NULL, NULL}. */
#define VARS(...) ((const struct kv[]){__VA_ARGS__, {NULL, NULL}})

static const struct kv no_vars[] = {{NULL, NULL}};

static const char *
fake_get(const char *name, void *user)
{
    for (const struct kv *p = user; p->name != NULL; p++)
        if (strcmp(p->name, name) == 0)
            return p->value;
    return NULL;
}

static vram_status
load(const struct kv *vars, struct vram_env *out)
{
    return env_load(fake_get, (void *)vars, out);
}

/* Load VARS, which must succeed; the result. */
static struct vram_env
load_ok(const struct kv *vars)
{
    struct vram_env env;
    vram_status st = load(vars, &env);
    if (st != VRAM_OK)
        fail_msg("env_load failed: %s", vram_last_error());
    return env;
}

/*
** Load VARS, which must fail with VRAM_E_CONFIG and a one-line message
** that starts with PREFIX and contains REASON; OUT must be untouched.
*/
static void
load_fails(const struct kv *vars, const char *prefix, const char *reason)
{
    static struct vram_env out, copy;
    memset(&out, 0xA5, sizeof out);
    memcpy(&copy, &out, sizeof out);
    vram_status st = load(vars, &out);
    const char *msg = vram_last_error();
    if (st != VRAM_E_CONFIG)
        fail_msg("%s...: expected VRAM_E_CONFIG, got %d (%s)", prefix, (int)st, msg);
    if (memcmp(&out, &copy, sizeof out) != 0)
        fail_msg("%s...: OUT written on failure", prefix);
    if (strncmp(msg, prefix, strlen(prefix)) != 0)
        fail_msg("message '%s' does not start with '%s'", msg, prefix);
    if (reason != NULL && strstr(msg, reason) == NULL)
        fail_msg("message '%s' lacks '%s'", msg, reason);
    if (strchr(msg, '\n') != NULL)
        fail_msg("message '%s' is not one line", msg);
}

/* One variable set to VALUE. */
static void
one_fails(const char *name, const char *value, const char *reason)
{
    char prefix[700];
    snprintf(prefix, sizeof prefix, "%s='%s': ", name, value);
    load_fails(VARS({name, value}), prefix, reason);
}

/* Every variable the module must read, in its documented order. */
static const char *const all_names[] = {
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
    "VRAM_TRACE_SITES",
    "VRAM_TRACE_HOLDERS",
};
#define N_NAMES (sizeof all_names / sizeof all_names[0])

/* The rows env_load does not read: the preload library's and vram run's,
** as `vram env` and the docs name them. */
static const char *const other_rows[] = {
    "VRAM_LIMIT",
    "VRAM_GROUP",
    "CUDA_DEVICE_MEMORY_LIMIT",
    "CUDA_DEVICE_MEMORY_LIMIT_<i>",
    "CUDA_DEVICE_MEMORY_SHARED_CACHE",
    "VRAM_CONTEXT",
    "VRAM_LIMIT_SOURCE",
    "CUDA_VISIBLE_DEVICES",
    "VRAM_PRELOAD_LIBRARY",
    "LD_PRELOAD",
    "VRAM_PYTHON",
    "VRAM_PYTHONPATH",
    "PYTHONPATH",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TF_GPU_ALLOCATOR",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
};
#define N_OTHER (sizeof other_rows / sizeof other_rows[0])

/* ------------------------------------------------------------------ */
/* Defaults and the getter                                              */
/* ------------------------------------------------------------------ */

static void
assert_defaults(const struct vram_env *e)
{
    assert_int_equal(e->backend, VRAM_BACKEND_CUDA);
    assert_int_equal(e->sim_devices, 1);
    assert_true(e->sim_memory == VRAM_SIM_DEFAULT_MEMORY);
    assert_false(e->strategy_set);
    assert_null(e->strategy_source);
    /* The one default strategy (docs/ENVIRONMENT.md, "Defaults"). */
    assert_int_equal(e->strategy, VRAM_STRATEGY_EXPANDABLE);
    assert_true(e->fraction == 0.0);
    assert_int_equal(e->limit_all.n, 0);
    for (int d = 0; d < ENV_MAX_DEVICES; d++)
        assert_int_equal(e->limit[d].n, 0);
    assert_int_equal(e->reserve_mb, -1);
    assert_int_equal(e->log_level, 0);
    assert_string_equal(e->log_file, "");
    assert_string_equal(e->trace_path, "");
    assert_false(e->oom_dump);
}

static void
test_defaults(void **state)
{
    (void)state;
    struct vram_env e = load_ok(no_vars);
    assert_defaults(&e);
}

/* An empty value is the same as an unset one, for every variable. */
static void
test_empty_is_unset(void **state)
{
    (void)state;
    struct kv vars[N_NAMES + 1];
    for (size_t i = 0; i < N_NAMES; i++)
        vars[i] = (struct kv){all_names[i], ""};
    vars[N_NAMES] = (struct kv){NULL, NULL};
    struct vram_env e = load_ok(vars);
    assert_defaults(&e);
}

struct record {
    int calls[N_NAMES];
    int others;
};

static const char *
recording_get(const char *name, void *user)
{
    struct record *r = user;
    for (size_t i = 0; i < N_NAMES; i++)
        if (strcmp(name, all_names[i]) == 0) {
            r->calls[i]++;
            return NULL;
        }
    r->others++;
    return NULL;
}

/* Exactly the documented variables are read, each once, and USER is
** passed through to the getter. */
static void
test_reads_every_variable_once(void **state)
{
    (void)state;
    struct record r = {{0}, 0};
    struct vram_env e;
    assert_int_equal(env_load(recording_get, &r, &e), VRAM_OK);
    for (size_t i = 0; i < N_NAMES; i++)
        if (r.calls[i] != 1)
            fail_msg("%s read %d times", all_names[i], r.calls[i]);
    assert_int_equal(r.others, 0);
}

static void
test_null_out(void **state)
{
    (void)state;
    assert_int_equal(env_load(fake_get, (void *)no_vars, NULL), VRAM_E_INVALID);
}

/* ------------------------------------------------------------------ */
/* Simple variables                                                     */
/* ------------------------------------------------------------------ */

static void
test_backend(void **state)
{
    (void)state;
    assert_int_equal(load_ok(VARS({"VRAM_BACKEND", "sim"})).backend, VRAM_BACKEND_SIM);
    assert_int_equal(load_ok(VARS({"VRAM_BACKEND", "cuda"})).backend, VRAM_BACKEND_CUDA);
    one_fails("VRAM_BACKEND", "gpu", "unknown backend (expected sim or cuda)");
    one_fails("VRAM_BACKEND", "sim ", "unknown backend");
    one_fails("VRAM_BACKEND", "default", "unknown backend");
}

static void
test_sim_devices(void **state)
{
    (void)state;
    assert_int_equal(load_ok(VARS({"VRAM_SIM_DEVICES", "1"})).sim_devices, 1);
    assert_int_equal(load_ok(VARS({"VRAM_SIM_DEVICES", "8"})).sim_devices, 8);
    assert_int_equal(load_ok(VARS({"VRAM_SIM_DEVICES", "64"})).sim_devices, 64);
    assert_int_equal(load_ok(VARS({"VRAM_SIM_DEVICES", "008"})).sim_devices, 8);
    one_fails("VRAM_SIM_DEVICES", "0", "out of range 1..64");
    one_fails("VRAM_SIM_DEVICES", "65", "out of range 1..64");
    one_fails("VRAM_SIM_DEVICES", "99999999999999999999999", "out of range");
    one_fails("VRAM_SIM_DEVICES", "-1", "not a whole number");
    one_fails("VRAM_SIM_DEVICES", "+2", "not a whole number");
    one_fails("VRAM_SIM_DEVICES", " 2", "not a whole number");
    one_fails("VRAM_SIM_DEVICES", "2 ", "not a whole number");
    one_fails("VRAM_SIM_DEVICES", "2.0", "not a whole number");
    one_fails("VRAM_SIM_DEVICES", "0x2", "not a whole number");
    one_fails("VRAM_SIM_DEVICES", "two", "(expected an integer from 1 to 64)");
}

static void
test_sim_memory(void **state)
{
    (void)state;
    assert_true(load_ok(VARS({"VRAM_SIM_MEMORY", "80G"})).sim_memory == 80 * GiB);
    assert_true(load_ok(VARS({"VRAM_SIM_MEMORY", "80GB"})).sim_memory == 80 * GiB);
    assert_true(load_ok(VARS({"VRAM_SIM_MEMORY", "1B"})).sim_memory == 1);
    assert_true(load_ok(VARS({"VRAM_SIM_MEMORY", "140.40 GiB"})).sim_memory ==
                150753352089ULL);
    /* A number without a unit is refused with the forms to write. */
    one_fails("VRAM_SIM_MEMORY", "80",
              "VRAM_SIM_MEMORY='80': '80': a size needs a unit: 80G (GiB), 80M (MiB) or "
              "80B (bytes)");
    assert_true(load_ok(VARS({"VRAM_SIM_MEMORY", "143771M"})).sim_memory ==
                VRAM_SIM_DEFAULT_MEMORY);
    one_fails("VRAM_SIM_MEMORY", "0", "must be more than 0");
    one_fails("VRAM_SIM_MEMORY", "0G", "must be more than 0");
    one_fails("VRAM_SIM_MEMORY", "6X", "'6X': unknown unit 'X'");
    one_fails("VRAM_SIM_MEMORY", "-6G", "must start with a digit");
    one_fails("VRAM_SIM_MEMORY", "16384P", "too large");
    one_fails("VRAM_SIM_MEMORY", "1.5", "needs a unit");
}

static void
test_fraction(void **state)
{
    (void)state;
    assert_true(load_ok(VARS({"VRAM_MEMORY_FRACTION", "0.5"})).fraction == 0.5);
    assert_true(load_ok(VARS({"VRAM_MEMORY_FRACTION", "50%"})).fraction == 0.5);
    assert_true(load_ok(VARS({"VRAM_MEMORY_FRACTION", "1"})).fraction == 1.0);
    assert_true(load_ok(VARS({"VRAM_MEMORY_FRACTION", "100%"})).fraction == 1.0);
    assert_true(load_ok(VARS({"VRAM_MEMORY_FRACTION", "0.25"})).fraction == 0.25);
    one_fails("VRAM_MEMORY_FRACTION", "0", "more than 0");
    one_fails("VRAM_MEMORY_FRACTION", "0%", "more than 0");
    one_fails("VRAM_MEMORY_FRACTION", "1.5", "more than 1");
    one_fails("VRAM_MEMORY_FRACTION", "150%", "more than 100%");
    one_fails("VRAM_MEMORY_FRACTION", "-0.5", "must start with a digit");
    one_fails("VRAM_MEMORY_FRACTION", "nan", "must start with a digit");
    one_fails("VRAM_MEMORY_FRACTION", "inf", "must start with a digit");
    one_fails("VRAM_MEMORY_FRACTION", "half",
              "(expected a fraction in (0, 1], e.g. 0.5 or 50%)");
}

static void
test_reserve_mb(void **state)
{
    (void)state;
    assert_int_equal(load_ok(VARS({"TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "0"})).reserve_mb,
                     0);
    assert_int_equal(load_ok(VARS({"TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "1024"})).reserve_mb,
                     1024);
    assert_true(
        load_ok(VARS({"TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "8796093022207"})).reserve_mb ==
        INT64_MAX >> 20);
    one_fails("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "8796093022208", "out of range");
    one_fails("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "99999999999999999999999",
              "out of range");
    one_fails("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "-1", "not a whole number");
    one_fails("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "1.5", "not a whole number");
    one_fails("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "500M", "not a whole number");
    one_fails("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "abc",
              "(expected a whole number of MiB, 0 or more)");
}

static void
test_log_level(void **state)
{
    (void)state;
    static const char *const levels[] = {"0", "1", "2", "3", "4"};
    for (int i = 0; i < 5; i++)
        assert_int_equal(load_ok(VARS({"VRAM_LOG", levels[i]})).log_level, i);
    one_fails("VRAM_LOG", "5", "out of range 0..4");
    one_fails("VRAM_LOG", "-1", "not a whole number");
    one_fails("VRAM_LOG", "debug", "(expected an integer from 0 to 4)");
}

static void
test_paths(void **state)
{
    (void)state;
    struct vram_env e = load_ok(
        VARS({"VRAM_LOG_FILE", "/tmp/vram.log"}, {"VRAM_TRACE", "run 1/t.csv.gz"}));
    assert_string_equal(e.log_file, "/tmp/vram.log");
    assert_string_equal(e.trace_path, "run 1/t.csv.gz");

    /* 511 bytes fit the 512-byte field; 512 are refused, never cut. */
    char path[600];
    memset(path, 'p', sizeof path);
    path[511] = '\0';
    e = load_ok(VARS({"VRAM_TRACE", path}));
    assert_int_equal(strlen(e.trace_path), 511);
    path[511] = 'p';
    path[512] = '\0';
    load_fails(VARS({"VRAM_TRACE", path}), "VRAM_TRACE='ppp",
               "path longer than 511 bytes");
    load_fails(VARS({"VRAM_LOG_FILE", path}), "VRAM_LOG_FILE='", "path longer than 511");
    /* The message quotes at most 64 characters of the value. */
    assert_true(strlen(vram_last_error()) < 200);
    assert_non_null(strstr(vram_last_error(), "pp...'"));
}

static void
test_bool_words(void **state)
{
    (void)state;
    static const char *const yes[] = {"true", "TRUE", "True", "1",
                                      "yes",  "YES",  "on",   "On"};
    static const char *const no[] = {"false", "FALSE", "0", "no", "No", "off", "OFF"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        assert_true(load_ok(VARS({"VRAM_OOM_DUMP", yes[i]})).oom_dump);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        assert_false(load_ok(VARS({"VRAM_OOM_DUMP", no[i]})).oom_dump);

    static const char *const bad[] = {"2", "y", "n", "t", "enable", "true ", " on", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        one_fails("VRAM_OOM_DUMP", bad[i],
                  "not a boolean (expected true or false; also 1/0, yes/no, on/off)");
        one_fails("VRAM_ALLOW_GROWTH", bad[i], "not a boolean");
        one_fails("TF_FORCE_GPU_ALLOW_GROWTH", bad[i], "not a boolean");
    }
}

/* ------------------------------------------------------------------ */
/* Strategy and the growth switches                                     */
/* ------------------------------------------------------------------ */

static void
test_strategy(void **state)
{
    (void)state;
    struct vram_env e = load_ok(VARS({"VRAM_STRATEGY", "preallocate"}));
    assert_int_equal(e.strategy, VRAM_STRATEGY_PREALLOCATE);
    assert_true(e.strategy_set);
    e = load_ok(VARS({"VRAM_STRATEGY", "growth"}));
    assert_int_equal(e.strategy, VRAM_STRATEGY_GROWTH);
    assert_true(e.strategy_set);
    e = load_ok(VARS({"VRAM_STRATEGY", "growth:tf-compat"}));
    assert_int_equal(e.strategy, VRAM_STRATEGY_GROWTH_TF);
    assert_true(e.strategy_set);
    one_fails("VRAM_STRATEGY", "grow",
              "unknown strategy (expected preallocate, growth, growth:tf-compat or expandable)");
    one_fails("VRAM_STRATEGY", "growth:", "unknown strategy");
}

/* Each growth switch alone, and both agreeing, choose the strategy. */
static void
test_growth_switches(void **state)
{
    (void)state;
    static const char *const names[] = {"VRAM_ALLOW_GROWTH", "TF_FORCE_GPU_ALLOW_GROWTH"};
    for (int i = 0; i < 2; i++) {
        struct vram_env e = load_ok(VARS({names[i], "true"}));
        assert_int_equal(e.strategy, VRAM_STRATEGY_GROWTH);
        assert_true(e.strategy_set);
        e = load_ok(VARS({names[i], "false"}));
        assert_int_equal(e.strategy, VRAM_STRATEGY_PREALLOCATE);
        assert_true(e.strategy_set);
        /* An explicit growth strategy is kept. */
        e = load_ok(VARS({names[i], "1"}, {"VRAM_STRATEGY", "growth:tf-compat"}));
        assert_int_equal(e.strategy, VRAM_STRATEGY_GROWTH_TF);
        e = load_ok(VARS({names[i], "on"}, {"VRAM_STRATEGY", "growth"}));
        assert_int_equal(e.strategy, VRAM_STRATEGY_GROWTH);
        e = load_ok(VARS({names[i], "off"}, {"VRAM_STRATEGY", "preallocate"}));
        assert_int_equal(e.strategy, VRAM_STRATEGY_PREALLOCATE);
        assert_true(e.strategy_set);
    }
    struct vram_env e = load_ok(
        VARS({"VRAM_ALLOW_GROWTH", "yes"}, {"TF_FORCE_GPU_ALLOW_GROWTH", "TRUE"}));
    assert_int_equal(e.strategy, VRAM_STRATEGY_GROWTH);
    e = load_ok(VARS({"VRAM_ALLOW_GROWTH", "no"}, {"TF_FORCE_GPU_ALLOW_GROWTH", "0"}));
    assert_int_equal(e.strategy, VRAM_STRATEGY_PREALLOCATE);
    assert_true(e.strategy_set);
    /* Empty switches are unset: nothing chose a strategy. */
    e = load_ok(VARS({"VRAM_ALLOW_GROWTH", ""}, {"TF_FORCE_GPU_ALLOW_GROWTH", ""}));
    assert_false(e.strategy_set);
    assert_int_equal(e.strategy, VRAM_STRATEGY_EXPANDABLE);
    /* What chose the strategy is named, for vram doctor. */
    e = load_ok(VARS({"TF_FORCE_GPU_ALLOW_GROWTH", "false"}));
    assert_string_equal(e.strategy_source, "TF_FORCE_GPU_ALLOW_GROWTH");
    e = load_ok(VARS({"VRAM_ALLOW_GROWTH", "true"}, {"TF_FORCE_GPU_ALLOW_GROWTH", "1"}));
    assert_string_equal(e.strategy_source, "VRAM_ALLOW_GROWTH");
    e = load_ok(VARS({"VRAM_STRATEGY", "growth"}, {"VRAM_ALLOW_GROWTH", "true"}));
    assert_string_equal(e.strategy_source, "VRAM_STRATEGY");
    /* env_defaults is the empty environment. */
    assert_int_equal(env_defaults(&e), VRAM_OK);
    assert_defaults(&e);
}

static void
test_growth_conflicts(void **state)
{
    (void)state;
    load_fails(VARS({"VRAM_STRATEGY", "preallocate"}, {"VRAM_ALLOW_GROWTH", "true"}),
               "VRAM_STRATEGY='preallocate' conflicts with VRAM_ALLOW_GROWTH='true'",
               NULL);
    load_fails(VARS({"VRAM_STRATEGY", "preallocate"}, {"TF_FORCE_GPU_ALLOW_GROWTH", "1"}),
               "VRAM_STRATEGY='preallocate' conflicts with TF_FORCE_GPU_ALLOW_GROWTH='1'",
               NULL);
    load_fails(VARS({"VRAM_STRATEGY", "preallocate"}, {"VRAM_ALLOW_GROWTH", "true"},
                    {"TF_FORCE_GPU_ALLOW_GROWTH", "on"}),
               "VRAM_STRATEGY='preallocate' conflicts with VRAM_ALLOW_GROWTH='true' and "
               "TF_FORCE_GPU_ALLOW_GROWTH='on'",
               NULL);
    load_fails(VARS({"VRAM_STRATEGY", "growth"}, {"VRAM_ALLOW_GROWTH", "false"}),
               "VRAM_STRATEGY='growth' conflicts with VRAM_ALLOW_GROWTH='false'", NULL);
    load_fails(
        VARS({"VRAM_STRATEGY", "growth:tf-compat"}, {"TF_FORCE_GPU_ALLOW_GROWTH", "no"}),
        "VRAM_STRATEGY='growth:tf-compat' conflicts with "
        "TF_FORCE_GPU_ALLOW_GROWTH='no'",
        NULL);
    load_fails(
        VARS({"VRAM_ALLOW_GROWTH", "true"}, {"TF_FORCE_GPU_ALLOW_GROWTH", "false"}),
        "VRAM_ALLOW_GROWTH='true' and TF_FORCE_GPU_ALLOW_GROWTH='false' disagree", NULL);
    load_fails(VARS({"VRAM_ALLOW_GROWTH", "off"}, {"TF_FORCE_GPU_ALLOW_GROWTH", "yes"}),
               "VRAM_ALLOW_GROWTH='off' and TF_FORCE_GPU_ALLOW_GROWTH='yes' disagree",
               NULL);
    /* A malformed switch is reported as such, before any conflict. */
    load_fails(VARS({"VRAM_STRATEGY", "preallocate"}, {"VRAM_ALLOW_GROWTH", "sure"}),
               "VRAM_ALLOW_GROWTH='sure': not a boolean", NULL);
}

/* ------------------------------------------------------------------ */
/* VRAM_MEMORY_LIMIT                                                    */
/* ------------------------------------------------------------------ */

static void
test_limit_all(void **state)
{
    (void)state;
    struct vram_env e = load_ok(VARS({"VRAM_MEMORY_LIMIT", "6G"}));
    assert_int_equal(e.limit_all.n, 1);
    assert_true(e.limit_all.bytes[0] == 6 * GiB);
    for (int d = 0; d < ENV_MAX_DEVICES; d++)
        assert_int_equal(e.limit[d].n, 0);

    e = load_ok(VARS({"VRAM_MEMORY_LIMIT", "3G+3G"}));
    assert_int_equal(e.limit_all.n, 2);
    assert_true(e.limit_all.bytes[0] == 3 * GiB && e.limit_all.bytes[1] == 3 * GiB);

    e = load_ok(VARS({"VRAM_MEMORY_LIMIT", "1.5G+512M+1024B"}));
    assert_int_equal(e.limit_all.n, 3);
    assert_true(e.limit_all.bytes[0] == GiB + GiB / 2);
    assert_true(e.limit_all.bytes[1] == 512 * MiB);
    assert_true(e.limit_all.bytes[2] == KiB);

    /* Sixteen caps are the most. */
    char text[200] = "1G";
    size_t used = 2;
    for (int i = 1; i < VRAM_MAX_LOGICAL; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "+1G");
    e = load_ok(VARS({"VRAM_MEMORY_LIMIT", text}));
    assert_int_equal(e.limit_all.n, VRAM_MAX_LOGICAL);
    snprintf(text + used, sizeof text - used, "+1G");
    load_fails(VARS({"VRAM_MEMORY_LIMIT", text}), "VRAM_MEMORY_LIMIT='1G+1G",
               "more than 16 logical devices on one device");
}

static void
test_limit_per_device(void **state)
{
    (void)state;
    struct vram_env e = load_ok(VARS({"VRAM_MEMORY_LIMIT", "0:6G,1:4G"}));
    assert_int_equal(e.limit_all.n, 0);
    assert_int_equal(e.limit[0].n, 1);
    assert_true(e.limit[0].bytes[0] == 6 * GiB);
    assert_int_equal(e.limit[1].n, 1);
    assert_true(e.limit[1].bytes[0] == 4 * GiB);
    for (int d = 2; d < ENV_MAX_DEVICES; d++)
        assert_int_equal(e.limit[d].n, 0);

    e = load_ok(VARS({"VRAM_MEMORY_LIMIT", "0:3G+3G,1:6G"}));
    assert_int_equal(e.limit[0].n, 2);
    assert_true(e.limit[0].bytes[0] == 3 * GiB && e.limit[0].bytes[1] == 3 * GiB);
    assert_int_equal(e.limit[1].n, 1);
    assert_true(e.limit[1].bytes[0] == 6 * GiB);

    /* Any order, gaps, the last ordinal, leading zeros in the ordinal. */
    e = load_ok(VARS({"VRAM_MEMORY_LIMIT", "63:1G,2:2G+512M,007:7G"}));
    assert_int_equal(e.limit[63].n, 1);
    assert_int_equal(e.limit[2].n, 2);
    assert_true(e.limit[2].bytes[1] == 512 * MiB);
    assert_int_equal(e.limit[7].n, 1);
    assert_int_equal(e.limit[0].n, 0);
    assert_int_equal(e.limit[1].n, 0);

    /* A single keyed item is a per-device list too. */
    e = load_ok(VARS({"VRAM_MEMORY_LIMIT", "1:2G"}));
    assert_int_equal(e.limit_all.n, 0);
    assert_int_equal(e.limit[1].n, 1);
    assert_int_equal(e.limit[0].n, 0);
}

static void
test_limit_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *reason;
    } cases[] = {
        {"6X", "'6X': unknown unit 'X'"},
        {"0", "'0': a cap must be more than 0"},
        {"0G", "a cap must be more than 0"},
        {"3G+0", "a cap must be more than 0"},
        {"0:0", "a cap must be more than 0"},
        {"-6G", "must start with a digit"},
        {"6G,4G", "a list needs device ordinals"},
        {"6G,", "a list needs device ordinals"},
        {",", "empty item"},
        {"0:6G,,1:4G", "empty item"},
        {"0:6G,", "empty item"},
        {",0:6G", "empty item"},
        {"0:6G,0:4G", "device 0 given twice"},
        {"1:1G,01:2G", "device 1 given twice"},
        {"64:1G", "device ordinal out of range 0..63"},
        {"99999999999999999999:1G", "out of range"},
        {"-1:6G", "device ordinal is not a whole number"},
        {"+1:6G", "device ordinal is not a whole number"},
        {" 0:6G", "device ordinal is not a whole number"},
        {"a:6G", "device ordinal is not a whole number"},
        {":6G", "missing device ordinal"},
        {"0:", "empty size"},
        {"0:6G,1:", "empty size"},
        {"6G,1:4G",
         "'6G' has no device ordinal (plain and per-device items cannot be mixed)"},
        {"1:4G,6G", "'6G' has no device ordinal"},
        {"3G++3G", "empty size"},
        {"+3G", "empty size"},
        {"3G+", "empty size"},
        {"0:3G+", "empty size"},
        {"0:1:6G", "unexpected ':'"},
        {"0:6G;1:4G", "'6G;1:4G': unexpected ';1:4G' after the unit"},
        {"6 ", "unexpected ' '"},
        /* A number without a unit: TensorFlow's memory_limit counts MiB,
        ** earlier versions of vram bytes; the message gives both forms. */
        {"1024", "'1024': a size needs a unit: 1024G (GiB), 1024M (MiB) or 1024B"},
        {"0:6G,1:4096", "'4096': a size needs a unit"},
        {"3G+1073741824", "1073741824B for bytes (= 1G), as earlier versions read"},
        {"16384P", "too large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        one_fails("VRAM_MEMORY_LIMIT", cases[i].text, cases[i].reason);
}

/* The example in env.h, word for word. */
static void
test_limit_message_shape(void **state)
{
    (void)state;
    struct vram_env e;
    assert_int_equal(load(VARS({"VRAM_MEMORY_LIMIT", "6X"}), &e), VRAM_E_CONFIG);
    assert_string_equal(vram_last_error(),
                        "VRAM_MEMORY_LIMIT='6X': '6X': unknown unit 'X' "
                        "(expected e.g. 6G, 512M, 0:6G,1:4G)");
    assert_int_equal(load(VARS({"VRAM_MEMORY_LIMIT", "0:6G,1:4X"}), &e), VRAM_E_CONFIG);
    assert_string_equal(vram_last_error(),
                        "VRAM_MEMORY_LIMIT='0:6G,1:4X': '4X': unknown unit 'X' "
                        "(expected e.g. 6G, 512M, 0:6G,1:4G)");
}

static void
test_device_limit_fallbacks(void **state)
{
    (void)state;
    struct vram_env e = load_ok(no_vars);
    for (int d = -1; d <= ENV_MAX_DEVICES; d++)
        assert_int_equal(env_device_limit(&e, d)->n, 0);
    assert_int_equal(env_device_limit(NULL, 0)->n, 0);

    e = load_ok(VARS({"VRAM_MEMORY_LIMIT", "3G+3G"}));
    for (int d = -1; d <= ENV_MAX_DEVICES; d++) {
        const struct env_device_limit *l = env_device_limit(&e, d);
        assert_ptr_equal(l, &e.limit_all);
        assert_int_equal(l->n, 2);
    }

    e = load_ok(VARS({"VRAM_MEMORY_LIMIT", "0:6G,2:1G+2G"}));
    assert_ptr_equal(env_device_limit(&e, 0), &e.limit[0]);
    assert_true(env_device_limit(&e, 0)->bytes[0] == 6 * GiB);
    assert_int_equal(env_device_limit(&e, 1)->n, 0);
    assert_ptr_equal(env_device_limit(&e, 2), &e.limit[2]);
    assert_int_equal(env_device_limit(&e, 2)->n, 2);
    assert_int_equal(env_device_limit(&e, -1)->n, 0);
    assert_int_equal(env_device_limit(&e, ENV_MAX_DEVICES)->n, 0);

    /* A device's own entry wins over the all-devices entry (a state the
    ** parser never produces, but the contract says so). */
    e.limit_all.n = 1;
    e.limit_all.bytes[0] = GiB;
    assert_ptr_equal(env_device_limit(&e, 0), &e.limit[0]);
    assert_ptr_equal(env_device_limit(&e, 1), &e.limit_all);
    assert_ptr_equal(env_device_limit(&e, 64), &e.limit_all);
}

/* A whole realistic environment at once. */
static void
test_everything_set(void **state)
{
    (void)state;
    struct vram_env e = load_ok(VARS(
        {"VRAM_BACKEND", "sim"}, {"VRAM_SIM_DEVICES", "4"}, {"VRAM_SIM_MEMORY", "80GiB"},
        {"VRAM_STRATEGY", "growth"}, {"VRAM_ALLOW_GROWTH", "true"},
        {"TF_FORCE_GPU_ALLOW_GROWTH", "true"}, {"VRAM_MEMORY_FRACTION", "90%"},
        {"VRAM_MEMORY_LIMIT", "0:3G+3G,3:10G"}, {"TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "256"},
        {"VRAM_LOG", "2"}, {"VRAM_LOG_FILE", "/tmp/l"}, {"VRAM_TRACE", "/tmp/t"},
        {"VRAM_OOM_DUMP", "1"}, {"UNRELATED", "x"}));
    assert_int_equal(e.backend, VRAM_BACKEND_SIM);
    assert_int_equal(e.sim_devices, 4);
    assert_true(e.sim_memory == 80 * GiB);
    assert_true(e.strategy_set);
    assert_int_equal(e.strategy, VRAM_STRATEGY_GROWTH);
    assert_true(e.fraction == 0.9);
    assert_int_equal(e.limit[0].n, 2);
    assert_int_equal(e.limit[3].n, 1);
    assert_int_equal(e.reserve_mb, 256);
    assert_int_equal(e.log_level, 2);
    assert_string_equal(e.log_file, "/tmp/l");
    assert_string_equal(e.trace_path, "/tmp/t");
    assert_true(e.oom_dump);
}

/* The first malformed variable in table order is the one reported, and
** a long value is cut in the message. */
static void
test_messages(void **state)
{
    (void)state;
    load_fails(VARS({"VRAM_LOG", "9"}, {"VRAM_BACKEND", "tpu"}),
               "VRAM_BACKEND='tpu': ", NULL);
    char value[300];
    memset(value, 'Z', sizeof value - 1);
    value[sizeof value - 1] = '\0';
    load_fails(VARS({"VRAM_BACKEND", value}), "VRAM_BACKEND='ZZZZ", "unknown backend");
    const char *msg = vram_last_error();
    assert_true(strlen(msg) < 160);
    assert_non_null(strstr(msg, "ZZZ...'"));
    /* Control characters in a value cannot break the line. */
    load_fails(VARS({"VRAM_BACKEND", "sim\ncuda"}), "VRAM_BACKEND='sim?cuda': ", NULL);
}

/* ------------------------------------------------------------------ */
/* env_print and env_markdown                                           */
/* ------------------------------------------------------------------ */

/* Run PRINT into a string (caller frees). */
static char *
capture_print(const struct kv *vars)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    env_print(f, fake_get, (void *)vars);
    assert_int_equal(fclose(f), 0);
    return buf;
}

/* noinline: gcc 12 at -O3 otherwise takes the memstream's buffer for a
** dangling pointer to the local (a false -Wdangling-pointer). */
__attribute__((noinline)) static char *
capture_markdown(size_t *len_out)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    env_markdown(f);
    assert_int_equal(fclose(f), 0);
    if (len_out != NULL)
        *len_out = len;
    return buf;
}

/* The line of OUT that starts with NAME followed by a space. */
static const char *
line_of(const char *out, const char *name, char *line, size_t len)
{
    size_t n = strlen(name);
    for (const char *p = out; *p != '\0';) {
        const char *eol = strchr(p, '\n');
        size_t l = eol != NULL ? (size_t)(eol - p) : strlen(p);
        if (l > n && strncmp(p, name, n) == 0 && p[n] == ' ') {
            snprintf(line, len, "%.*s", (int)l, p);
            return line;
        }
        p += l + (eol != NULL);
    }
    fail_msg("no line for %s in:\n%s", name, out);
    return NULL;
}

static void
assert_line(const char *out, const char *name, const char *piece1, const char *piece2)
{
    char line[1024];
    line_of(out, name, line, sizeof line);
    if (strstr(line, piece1) == NULL || (piece2 != NULL && strstr(line, piece2) == NULL))
        fail_msg("line '%s' lacks '%s' / '%s'", line, piece1, piece2 ? piece2 : "");
}

static void
test_print_defaults(void **state)
{
    (void)state;
    char *out = capture_print(no_vars);
    assert_true(strncmp(out, "VARIABLE ", 9) == 0);
    for (size_t i = 0; i < N_NAMES; i++)
        assert_line(out, all_names[i], " default", NULL);
    for (size_t i = 0; i < N_OTHER; i++)
        assert_line(out, other_rows[i], "unset", " default");
    assert_null(strstr(out, "environment"));
    assert_null(strstr(out, "error"));
    assert_line(out, "VRAM_BACKEND", "cuda", NULL);
    assert_line(out, "VRAM_SIM_MEMORY", "143771M", NULL);
    assert_line(out, "VRAM_STRATEGY", "expandable", "default (vram)");
    assert_line(out, "VRAM_MEMORY_LIMIT", "unset", "default (TensorFlow)");
    assert_line(out, "TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "unset", "default (TensorFlow)");
    assert_line(out, "PYTORCH_CUDA_ALLOC_CONF", "unset", "default (PyTorch)");
    assert_line(out, "XLA_PYTHON_CLIENT_PREALLOCATE", "unset", "default (JAX)");
    assert_line(out, "VRAM_LOG", "0", "default (vram)");
    /* One line per variable plus the header. */
    size_t lines = 0;
    for (const char *p = out; *p != '\0'; p++)
        lines += *p == '\n';
    assert_int_equal(lines, N_NAMES + N_OTHER + 1);
    free(out);
}

static void
test_print_values_and_errors(void **state)
{
    (void)state;
    char *out = capture_print(VARS(
        {"VRAM_BACKEND", "sim"}, {"VRAM_SIM_MEMORY", "6X"}, {"VRAM_ALLOW_GROWTH", "on"},
        {"VRAM_MEMORY_FRACTION", "50%"}, {"VRAM_MEMORY_LIMIT", "0:3G+3G,2:6G"},
        {"TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "500"}, {"VRAM_TRACE", "/tmp/t.csv"}));
    assert_line(out, "VRAM_BACKEND", "sim", "environment");
    assert_line(out, "VRAM_SIM_DEVICES", "1", "default");
    assert_line(out, "VRAM_SIM_MEMORY",
                "error: VRAM_SIM_MEMORY='6X': '6X': unknown unit 'X' (expected", NULL);
    assert_line(out, "VRAM_STRATEGY", "growth (set by VRAM_ALLOW_GROWTH)", "environment");
    assert_line(out, "VRAM_ALLOW_GROWTH", "true", "environment");
    assert_line(out, "TF_FORCE_GPU_ALLOW_GROWTH", "unset", "default");
    assert_line(out, "VRAM_MEMORY_FRACTION", "0.5", "environment");
    assert_line(out, "VRAM_MEMORY_LIMIT", "0:3G+3G,2:6G", "environment");
    assert_line(out, "TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "500", "environment");
    assert_line(out, "VRAM_TRACE", "/tmp/t.csv", "environment");
    free(out);

    out =
        capture_print(VARS({"VRAM_MEMORY_LIMIT", "3G+3G"}, {"VRAM_STRATEGY", "growth"}));
    assert_line(out, "VRAM_MEMORY_LIMIT", "3G+3G", NULL);
    assert_line(out, "VRAM_STRATEGY", "growth", "environment");
    free(out);

    /* Every value shown pastes back into its variable as the same value. */
    out = capture_print(VARS({"VRAM_MEMORY_LIMIT", "0:1.5G+3072M,3:6144m"},
                             {"VRAM_SIM_MEMORY", "140.40 GiB"},
                             {"VRAM_MEMORY_FRACTION", "12.5%"}));
    assert_line(out, "VRAM_MEMORY_LIMIT", "0:1536M+3G,3:6G", NULL);
    assert_line(out, "VRAM_SIM_MEMORY", "150753352089B", NULL);
    assert_line(out, "VRAM_MEMORY_FRACTION", "0.125", NULL);
    free(out);
    struct vram_env a = load_ok(VARS({"VRAM_MEMORY_LIMIT", "0:1536M+3G,3:6G"},
                                     {"VRAM_SIM_MEMORY", "150753352089B"},
                                     {"VRAM_MEMORY_FRACTION", "0.125"}));
    struct vram_env b = load_ok(VARS({"VRAM_MEMORY_LIMIT", "0:1.5G+3072M,3:6144m"},
                                     {"VRAM_SIM_MEMORY", "140.40 GiB"},
                                     {"VRAM_MEMORY_FRACTION", "12.5%"}));
    assert_memory_equal(&a.limit, &b.limit, sizeof a.limit);
    assert_true(a.sim_memory == b.sim_memory && a.fraction == b.fraction);

    /* A conflict is shown on the strategy row. */
    out = capture_print(
        VARS({"VRAM_STRATEGY", "preallocate"}, {"TF_FORCE_GPU_ALLOW_GROWTH", "true"}));
    assert_line(out, "VRAM_STRATEGY",
                "error: VRAM_STRATEGY='preallocate' conflicts with "
                "TF_FORCE_GPU_ALLOW_GROWTH='true'",
                NULL);
    assert_line(out, "TF_FORCE_GPU_ALLOW_GROWTH", "true", "environment");
    free(out);
}

static void
test_markdown(void **state)
{
    (void)state;
    char *md = capture_markdown(NULL);
    assert_true(strncmp(md, "# Environment variables\n", 24) == 0);
    assert_non_null(strstr(md, "vram_open"));
    assert_non_null(strstr(md, "1024-based"));
    assert_non_null(strstr(md, "fail closed"));
    assert_non_null(strstr(md, "\n| Variable | Default | Meaning |\n|---|---|---|\n"));
    for (size_t i = 0; i < N_NAMES + N_OTHER; i++) {
        const char *name = i < N_NAMES ? all_names[i] : other_rows[i - N_NAMES];
        char row[128];
        snprintf(row, sizeof row, "\n| `%s` | ", name);
        if (strstr(md, row) == NULL)
            fail_msg("no row for %s", name);
    }
    /* The three sections, in order, and the HAMi precedence. */
    const char *alloc = strstr(md, "\n## The allocator\n");
    const char *quota = strstr(md, "\n## The quota enforcer\n");
    const char *run = strstr(md, "\n## vram run\n");
    assert_true(alloc != NULL && quota != NULL && run != NULL);
    assert_true(alloc < strstr(md, "`VRAM_BACKEND`") &&
                quota > strstr(md, "`VRAM_OOM_DUMP`"));
    assert_true(quota < strstr(md, "| `VRAM_LIMIT`") &&
                run > strstr(md, "| `VRAM_GROUP`"));
    assert_true(run < strstr(md, "| `VRAM_PRELOAD_LIBRARY`"));
    assert_non_null(
        strstr(md, "read only when `VRAM_LIMIT` and\n  `VRAM_GROUP` are both unset"));
    assert_non_null(strstr(md, "| `CUDA_DEVICE_MEMORY_LIMIT_<i>` | unset (HAMi) |"));
    assert_non_null(strstr(md, "| `VRAM_BACKEND` | `cuda` |"));
    assert_non_null(strstr(md, "| `VRAM_SIM_MEMORY` | `143771M` |"));
    assert_non_null(strstr(md, "| `VRAM_MEMORY_LIMIT` | unset (TensorFlow) |"));
    assert_non_null(strstr(md, "| `VRAM_STRATEGY` | `expandable` |"));
    /* The rule of defaults, in one place. */
    const char *defaults = strstr(md, "\n## Defaults\n");
    assert_true(defaults != NULL && defaults < alloc);
    assert_non_null(strstr(defaults, "`TF_FORCE_GPU_ALLOW_GROWTH=false`"));
    /* Every table row has exactly four '|': no doc text may add one; and
    ** no other line has any. */
    int rows = 0;
    for (const char *p = md; *p != '\0';) {
        const char *eol = strchr(p, '\n');
        assert_non_null(eol);
        int bars = 0;
        for (const char *q = p; q < eol; q++)
            bars += *q == '|';
        if (bars != (*p == '|' ? 4 : 0))
            fail_msg("line with %d bars: %.*s", bars, (int)(eol - p), p);
        rows += *p == '|' && strncmp(p, "| Variable |", 12) != 0 &&
                strncmp(p, "|---", 4) != 0;
        p = eol + 1;
    }
    assert_int_equal(rows, (int)(N_NAMES + N_OTHER));
    free(md);
}

/* docs/ENVIRONMENT.md is exactly `vram env --markdown`. */
static void
test_doc_is_generated(void **state)
{
    (void)state;
    const char *data = getenv("VRAM_TEST_DATA"); /* set by ctest: <repo>/tests/data */
    if (data == NULL || data[0] == '\0') {
        print_message("VRAM_TEST_DATA unset: skipping the docs check\n");
        skip();
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/../../docs/ENVIRONMENT.md", data);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot open %s", path);
    char *doc = NULL;
    size_t doc_len = 0;
    FILE *m = open_memstream(&doc, &doc_len);
    assert_non_null(m);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        fwrite(chunk, 1, n, m);
    fclose(f);
    assert_int_equal(fclose(m), 0);

    size_t md_len;
    char *md = capture_markdown(&md_len);
    if (doc_len != md_len || memcmp(doc, md, md_len) != 0)
        fail_msg("%s is stale: regenerate it with "
                 "`build/bin/vram env --markdown > docs/ENVIRONMENT.md`",
                 path);
    free(doc);
    free(md);
}

/* ------------------------------------------------------------------ */
/* The preload library's settings: env_quota_load                       */
/* ------------------------------------------------------------------ */

static const char quota_expect[] = "(expected e.g. 6G, 50%, 0.5, 0:6G,1:4G or "
                                   "GPU-8c6f1e2a:6G)";

static struct quota_env
quota_ok(const struct kv *vars)
{
    struct quota_env q;
    memset(&q, 0x5A, sizeof q);
    vram_status st = env_quota_load(fake_get, (void *)vars, &q);
    if (st != VRAM_OK)
        fail_msg("env_quota_load failed: %s", vram_last_error());
    return q;
}

/*
** Load VARS with env_quota_load, which must fail with VRAM_E_CONFIG and a
** one-line message that starts with PREFIX and contains REASON; OUT must
** be untouched. env_load must not mind the same variables.
*/
static void
quota_fails(const struct kv *vars, const char *prefix, const char *reason)
{
    static struct quota_env out, copy;
    memset(&out, 0xA5, sizeof out);
    memcpy(&copy, &out, sizeof out);
    vram_status st = env_quota_load(fake_get, (void *)vars, &out);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", vram_last_error());
    if (st != VRAM_E_CONFIG)
        fail_msg("%s...: expected VRAM_E_CONFIG, got %d (%s)", prefix, (int)st, msg);
    if (memcmp(&out, &copy, sizeof out) != 0)
        fail_msg("%s...: OUT written on failure", prefix);
    if (strncmp(msg, prefix, strlen(prefix)) != 0)
        fail_msg("message '%s' does not start with '%s'", msg, prefix);
    if (reason != NULL && strstr(msg, reason) == NULL)
        fail_msg("message '%s' lacks '%s'", msg, reason);
    if (strchr(msg, '\n') != NULL)
        fail_msg("message '%s' is not one line", msg);
    struct vram_env e;
    if (env_load(fake_get, (void *)vars, &e) != VRAM_OK)
        fail_msg("env_load failed on a preload variable: %s", vram_last_error());
}

static void
limit_fails(const char *value, const char *reason)
{
    char prefix[700];
    snprintf(prefix, sizeof prefix, "VRAM_LIMIT='%s': ", value);
    quota_fails(VARS({"VRAM_LIMIT", value}), prefix, reason);
}

static void
assert_bytes(struct quota_value v, uint64_t bytes)
{
    assert_int_equal(v.kind, QUOTA_BYTES);
    assert_true(v.bytes == bytes);
}

static void
assert_fraction(struct quota_value v, double f)
{
    assert_int_equal(v.kind, QUOTA_FRACTION);
    assert_true(v.fraction == f);
}

static void
test_quota_unset(void **state)
{
    (void)state;
    struct quota_env q = quota_ok(no_vars);
    assert_false(q.active);
    assert_null(q.source);
    assert_int_equal(q.all.kind, QUOTA_NONE);
    assert_int_equal(q.n_entries, 0);
    assert_string_equal(q.group, "");
    /* An empty group is an unset one; an empty limit is an error (an
    ** unset shell variable must not mean "unlimited"). */
    q = quota_ok(VARS({"VRAM_GROUP", ""}));
    assert_false(q.active);
    assert_int_equal(q.n_entries, 0);
    static const char *const empties[] = {"VRAM_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT",
                                          "CUDA_DEVICE_MEMORY_LIMIT_0",
                                          "CUDA_DEVICE_MEMORY_LIMIT_15"};
    for (size_t k = 0; k < sizeof empties / sizeof empties[0]; k++) {
        struct kv one[] = {{empties[k], ""}, {NULL, NULL}};
        assert_int_equal(env_quota_load(fake_get, (void *)one, &q), VRAM_E_CONFIG);
        assert_non_null(strstr(vram_last_error(), empties[k]));
        assert_non_null(strstr(vram_last_error(), "set but empty"));
    }
    assert_int_equal(env_quota_load(fake_get, (void *)no_vars, NULL), VRAM_E_INVALID);
}

/* Every spelling of a size is 1024-based: "6GB" is never 6 bytes. */
static void
test_quota_sizes(void **state)
{
    (void)state;
    static const char *const six[] = {"6G",         "6g",         "6GB",     "6GiB",
                                      "6144m",      "6144M",      "6144MiB", "6291456K",
                                      "6.00 GiB",   "6442450944B"};
    for (size_t i = 0; i < sizeof six / sizeof six[0]; i++) {
        struct quota_env q = quota_ok(VARS({"VRAM_LIMIT", six[i]}));
        assert_true(q.active);
        assert_string_equal(q.source, "VRAM_LIMIT");
        assert_bytes(q.all, 6 * GiB);
        assert_int_equal(q.n_entries, 0);
        assert_string_equal(q.group, "");
    }
    assert_bytes(quota_ok(VARS({"VRAM_LIMIT", "1.5G"})).all, GiB + GiB / 2);
    assert_bytes(quota_ok(VARS({"VRAM_LIMIT", "512M"})).all, 512 * MiB);
    /* A whole number without a unit is refused, with the forms to write:
    ** earlier versions read it as bytes (1 byte for "1"). */
    assert_bytes(quota_ok(VARS({"VRAM_LIMIT", "1B"})).all, 1);
    quota_fails(VARS({"VRAM_LIMIT", "1"}), "VRAM_LIMIT='1': ",
                "a size needs a unit: 1G (GiB), 1M (MiB) or 1B (bytes)");
    quota_fails(VARS({"VRAM_LIMIT", "6442450944"}), "VRAM_LIMIT='6442450944': ",
                "6442450944B for bytes (= 6G), as earlier versions read a bare number");
    quota_fails(VARS({"VRAM_LIMIT", "0:80,1:4G"}), "VRAM_LIMIT='0:80,1:4G': ",
                "'80': a size needs a unit");
}

static void
test_quota_fractions(void **state)
{
    (void)state;
    assert_fraction(quota_ok(VARS({"VRAM_LIMIT", "50%"})).all, 0.5);
    assert_fraction(quota_ok(VARS({"VRAM_LIMIT", "0.5"})).all, 0.5);
    assert_fraction(quota_ok(VARS({"VRAM_LIMIT", "100%"})).all, 1.0);
    assert_fraction(quota_ok(VARS({"VRAM_LIMIT", "1.0"})).all, 1.0);
    assert_fraction(quota_ok(VARS({"VRAM_LIMIT", "12.5%"})).all, 0.125);
    assert_fraction(quota_ok(VARS({"VRAM_LIMIT", "0.001"})).all, 0.001);
    struct quota_env q = quota_ok(VARS({"VRAM_LIMIT", "25%"}));
    assert_true(q.active);
    assert_string_equal(q.source, "VRAM_LIMIT");
}

static void
test_quota_per_device(void **state)
{
    (void)state;
    struct quota_env q = quota_ok(VARS({"VRAM_LIMIT", "0:6G,1:4G"}));
    assert_true(q.active);
    assert_int_equal(q.all.kind, QUOTA_NONE);
    assert_int_equal(q.n_entries, 2);
    assert_false(q.entries[0].by_uuid);
    assert_int_equal(q.entries[0].ordinal, 0);
    assert_bytes(q.entries[0].value, 6 * GiB);
    assert_int_equal(q.entries[1].ordinal, 1);
    assert_bytes(q.entries[1].value, 4 * GiB);

    /* UUIDs: a prefix of 8 hex digits, longer prefixes, the full form, any
    ** case, mixed with ordinals, fractions as values. */
    q = quota_ok(VARS({"VRAM_LIMIT", "GPU-8c6f1e2a:6G"}));
    assert_int_equal(q.n_entries, 1);
    assert_true(q.entries[0].by_uuid);
    assert_string_equal(q.entries[0].uuid, "GPU-8c6f1e2a");
    assert_bytes(q.entries[0].value, 6 * GiB);
    q = quota_ok(VARS({"VRAM_LIMIT", "GPU-8c6f1e2a-1234-5678-9abc-DEF012345678:50%,"
                                     "gpu-00000000-:1G,GPU-11111111-22:0.25,7:3G"}));
    assert_int_equal(q.n_entries, 4);
    assert_string_equal(q.entries[0].uuid, "GPU-8c6f1e2a-1234-5678-9abc-DEF012345678");
    assert_fraction(q.entries[0].value, 0.5);
    assert_string_equal(q.entries[1].uuid, "gpu-00000000-");
    assert_bytes(q.entries[1].value, GiB);
    assert_string_equal(q.entries[2].uuid, "GPU-11111111-22");
    assert_fraction(q.entries[2].value, 0.25);
    assert_false(q.entries[3].by_uuid);
    assert_int_equal(q.entries[3].ordinal, 7);
    assert_bytes(q.entries[3].value, 3 * GiB);

    /* The last ordinal, leading zeros, a single keyed item. */
    q = quota_ok(VARS({"VRAM_LIMIT", "63:1G,007:2G"}));
    assert_int_equal(q.entries[0].ordinal, 63);
    assert_int_equal(q.entries[1].ordinal, 7);
    q = quota_ok(VARS({"VRAM_LIMIT", "1:10%"}));
    assert_int_equal(q.n_entries, 1);
    assert_int_equal(q.all.kind, QUOTA_NONE);

    /* Sixteen entries are the most. */
    char text[256] = "";
    size_t used = 0;
    for (int i = 0; i < QUOTA_MAX_ENTRIES; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%d:1G",
                                 i > 0 ? "," : "", i);
    q = quota_ok(VARS({"VRAM_LIMIT", text}));
    assert_int_equal(q.n_entries, QUOTA_MAX_ENTRIES);
    snprintf(text + used, sizeof text - used, ",16:1G");
    quota_fails(VARS({"VRAM_LIMIT", text}), "VRAM_LIMIT='0:1G,",
                "more than 16 devices in the list");
}

static void
test_quota_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *reason;
    } cases[] = {
        {"6X", "'6X': unknown unit 'X'"},
        {"6 ", "unexpected ' '"},
        {" 6G", "must start with a digit"},
        {"-6G", "must start with a digit"},
        {"0", "'0': a limit must be more than 0"},
        {"0G", "a limit must be more than 0"},
        {"0%", "must be more than 0"},
        {"0.0", "must be more than 0"},
        {"1.5", "'1.5': more than 1"},
        {"150%", "more than 100%"},
        {"50%%", "unexpected '%'"},
        {".5", "not a fraction (it must start with a digit"},
        {"1.5.5", "unexpected '.5'"},
        {"16384P", "too large"},
        {"unlimited", "not a size"},
        {"6G,4G", "a list needs device keys (e.g. 0:6G,1:4G)"},
        {"6G,", "a list needs device keys"},
        {",", "a list needs device keys"},
        {"0:6G,,1:4G", "empty item in the list"},
        {"0:6G,", "empty item in the list"},
        {",0:6G", "empty item in the list"},
        {"0:6G,0:4G", "device 0 given twice"},
        {"1:1G,01:2G", "device 1 given twice"},
        {"GPU-8c6f1e2a:1G,gpu-8C6F1E2A:2G", "can name the same device"},
        {"GPU-8c6f1e2a:1G,GPU-8c6f1e2a-12:2G",
         "'GPU-8c6f1e2a' and 'GPU-8c6f1e2a-12' can name the same device"},
        {"64:1G", "device ordinal out of range 0..63"},
        {"99999999999999999999:1G", "out of range 0..63"},
        {"-1:6G", "device key is neither an ordinal (0..63) nor a GPU UUID"},
        {"a:6G", "device key is neither an ordinal"},
        {"MIG-8c6f1e2a:6G", "device key is neither an ordinal"},
        {"8c6f1e2a:6G", "device key is neither an ordinal"},
        {" 0:6G", "device key is neither an ordinal"},
        {":6G", "missing device key before ':'"},
        {"0:", "empty limit"},
        {"0:6G,1:", "empty limit"},
        {"0:0", "a limit must be more than 0"},
        {"0:0%", "must be more than 0"},
        {"0:2.0", "more than 1"},
        {"0:6X", "'6X': unknown unit 'X'"},
        {"0:1:6G", "unexpected ':'"},
        {"0:6G;1:4G", "unexpected ';1:4G' after the unit"},
        {"6G,1:4G",
         "'6G' has no device key (plain and per-device items cannot be mixed)"},
        {"1:4G,6G", "'6G' has no device key"},
        {"GPU-:6G", "a GPU UUID prefix needs at least 8 hex digits after 'GPU-'"},
        {"GPU-8c6f1e2:6G", "needs at least 8 hex digits"},
        {"GPU-8c6f1e2g:6G", "not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"},
        {"GPU-8c6f1e2a1:6G", "not a GPU UUID"},
        {"GPU--8c6f1e2a:6G", "not a GPU UUID"},
        {"GPU-8c6f1e2a-1234-5678-9abc-def0123456789:6G", "longer than a GPU UUID"},
        {"GPU-8c6f 1e2a:6G", "not a GPU UUID"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        limit_fails(cases[i].text, cases[i].reason);
}

/* The shape the brief and env.h promise, word for word. */
static void
test_quota_message_shape(void **state)
{
    (void)state;
    struct quota_env q;
    assert_int_equal(env_quota_load(fake_get, (void *)VARS({"VRAM_LIMIT", "6X"}), &q),
                     VRAM_E_CONFIG);
    char want[256];
    snprintf(want, sizeof want, "VRAM_LIMIT='6X': '6X': unknown unit 'X' %s",
             quota_expect);
    assert_string_equal(vram_last_error(), want);
    /* A long value is cut; control characters cannot break the line. */
    char value[300];
    memset(value, '7', sizeof value - 1);
    value[sizeof value - 1] = '\0';
    quota_fails(VARS({"VRAM_LIMIT", value}), "VRAM_LIMIT='7777777777",
                "a limit of more than 127 characters");
    assert_true(strlen(vram_last_error()) < 200);
    assert_non_null(strstr(vram_last_error(), "777...'"));
    quota_fails(VARS({"VRAM_LIMIT", "6G\n"}), "VRAM_LIMIT='6G?': ", NULL);
}

static void
test_quota_group(void **state)
{
    (void)state;
    static const char *const good[] = {"exp42",   "a",   "run-1234-1700000000",
                                       "A.b_c-9", "...", "-"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct quota_env q = quota_ok(VARS({"VRAM_GROUP", good[i]}));
        assert_string_equal(q.group, good[i]);
        assert_false(q.active); /* a group alone limits nothing */
        assert_null(q.source);
    }
    char name[80];
    memset(name, 'g', 63);
    name[63] = '\0';
    assert_string_equal(quota_ok(VARS({"VRAM_GROUP", name})).group, name);
    name[63] = 'g';
    name[64] = '\0';
    quota_fails(VARS({"VRAM_GROUP", name}), "VRAM_GROUP='ggg", "more than 63 characters");

    static const struct {
        const char *text;
        const char *reason;
    } bad[] = {
        {"a b", "' ' is not allowed"},
        {"a/b", "'/' is not allowed"},
        {"../x", "'/' is not allowed"},
        {"exp$", "'$' is not allowed"},
        {"caf\xc3\xa9", "byte 0xc3 is not allowed"},
        {"tab\there", "byte 0x09 is not allowed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char prefix[128];
        char shown[80];
        snprintf(shown, sizeof shown, "%s", bad[i].text);
        for (char *p = shown; *p != '\0'; p++)
            if ((unsigned char)*p < 0x20)
                *p = '?';
        snprintf(prefix, sizeof prefix, "VRAM_GROUP='%s': ", shown);
        quota_fails(VARS({"VRAM_GROUP", bad[i].text}), prefix, bad[i].reason);
        assert_non_null(strstr(vram_last_error(),
                               "(expected 1 to 63 letters, digits, '.', '_', '-')"));
    }

    struct quota_env q = quota_ok(VARS({"VRAM_LIMIT", "4G"}, {"VRAM_GROUP", "exp42"}));
    assert_true(q.active);
    assert_bytes(q.all, 4 * GiB);
    assert_string_equal(q.group, "exp42");
    /* Both malformed: VRAM_LIMIT is reported first. */
    quota_fails(VARS({"VRAM_GROUP", "a b"}, {"VRAM_LIMIT", "6X"}),
                "VRAM_LIMIT='6X': ", NULL);
}

/* HAMi's variables: only when VRAM_LIMIT and VRAM_GROUP are both unset. */
static void
test_quota_hami(void **state)
{
    (void)state;
    struct quota_env q = quota_ok(VARS({"CUDA_DEVICE_MEMORY_LIMIT", "6144m"}));
    assert_true(q.active);
    assert_string_equal(q.source, "CUDA_DEVICE_MEMORY_LIMIT");
    assert_bytes(q.all, 6 * GiB);
    assert_int_equal(q.n_entries, 0);
    assert_string_equal(q.group, "");
    /* "6GB" is 6 GiB here too, not HAMi's 6 bytes. */
    assert_bytes(quota_ok(VARS({"CUDA_DEVICE_MEMORY_LIMIT", "6GB"})).all, 6 * GiB);

    q = quota_ok(VARS({"CUDA_DEVICE_MEMORY_LIMIT", "8g"},
                      {"CUDA_DEVICE_MEMORY_LIMIT_1", "2g"},
                      {"CUDA_DEVICE_MEMORY_LIMIT_15", "1024m"},
                      {"CUDA_DEVICE_MEMORY_LIMIT_16", "junk"}));
    assert_true(q.active);
    assert_string_equal(q.source, "CUDA_DEVICE_MEMORY_LIMIT");
    assert_bytes(q.all, 8 * GiB);
    assert_int_equal(q.n_entries, 2);
    assert_int_equal(q.entries[0].ordinal, 1);
    assert_false(q.entries[0].by_uuid);
    assert_bytes(q.entries[0].value, 2 * GiB);
    assert_int_equal(q.entries[1].ordinal, 15);
    assert_bytes(q.entries[1].value, GiB);

    /* Per-device only. */
    q = quota_ok(VARS({"CUDA_DEVICE_MEMORY_LIMIT_0", "3G"}));
    assert_true(q.active);
    assert_int_equal(q.all.kind, QUOTA_NONE);
    assert_int_equal(q.n_entries, 1);
    assert_int_equal(q.entries[0].ordinal, 0);

    /* VRAM_LIMIT wins; so does VRAM_GROUP alone (the group's quota is
    ** vram's, unlimited here); HAMi's values are then not even parsed. */
    q = quota_ok(VARS({"VRAM_LIMIT", "1G"}, {"CUDA_DEVICE_MEMORY_LIMIT", "8g"},
                      {"CUDA_DEVICE_MEMORY_LIMIT_0", "junk"}));
    assert_string_equal(q.source, "VRAM_LIMIT");
    assert_bytes(q.all, GiB);
    assert_int_equal(q.n_entries, 0);
    q = quota_ok(VARS({"VRAM_GROUP", "g"}, {"CUDA_DEVICE_MEMORY_LIMIT", "junk"},
                      {"CUDA_DEVICE_MEMORY_LIMIT_3", "4g"}));
    assert_false(q.active);
    assert_null(q.source);
    assert_int_equal(q.n_entries, 0);
    assert_string_equal(q.group, "g");

    /* Malformed, when they apply: fail closed, naming the variable. */
    quota_fails(VARS({"CUDA_DEVICE_MEMORY_LIMIT", "6X"}),
                "CUDA_DEVICE_MEMORY_LIMIT='6X': ",
                "unknown unit 'X' (expected a size above 0, e.g. 6144m (a number "
                "without a unit is bytes, as in HAMi))");
    quota_fails(VARS({"CUDA_DEVICE_MEMORY_LIMIT", "0"}),
                "CUDA_DEVICE_MEMORY_LIMIT='0': ", "must be more than 0");
    quota_fails(VARS({"CUDA_DEVICE_MEMORY_LIMIT", "50%"}),
                "CUDA_DEVICE_MEMORY_LIMIT='50%'", NULL);
    quota_fails(VARS({"CUDA_DEVICE_MEMORY_LIMIT_7", "-1"}),
                "CUDA_DEVICE_MEMORY_LIMIT_7='-1': ", "must start with a digit");
    quota_fails(
        VARS({"CUDA_DEVICE_MEMORY_LIMIT", "1G"}, {"CUDA_DEVICE_MEMORY_LIMIT_2", "0m"}),
        "CUDA_DEVICE_MEMORY_LIMIT_2='0m': ", "must be more than 0");
}

struct quota_record {
    int limit, group, hami_all, hami_dev[17], hami_cache, source, context, others;
};

static const char *
quota_recording_get(const char *name, void *user)
{
    struct quota_record *r = user;
    const char *prefix = "CUDA_DEVICE_MEMORY_LIMIT_";
    if (strcmp(name, "VRAM_LIMIT") == 0)
        r->limit++;
    else if (strcmp(name, "VRAM_GROUP") == 0)
        r->group++;
    else if (strcmp(name, "VRAM_LIMIT_SOURCE") == 0)
        r->source++;
    else if (strcmp(name, "VRAM_CONTEXT") == 0)
        r->context++;
    else if (strcmp(name, "CUDA_DEVICE_MEMORY_SHARED_CACHE") == 0)
        r->hami_cache++;
    else if (strcmp(name, "CUDA_DEVICE_MEMORY_LIMIT") == 0)
        r->hami_all++;
    else if (strncmp(name, prefix, strlen(prefix)) == 0) {
        char *end;
        long i = strtol(name + strlen(prefix), &end, 10);
        if (*end == '\0' && i >= 0 && i <= 16)
            r->hami_dev[i]++;
        else
            r->others++;
    } else
        r->others++;
    return r->group == -100 ? "x" : NULL;
}

/* env_quota_load reads its own variables once each and HAMi's 17 names
** once each (they apply: nothing else is set); env_load reads none. */
static void
test_quota_reads(void **state)
{
    (void)state;
    struct quota_record r;
    memset(&r, 0, sizeof r);
    struct quota_env q;
    assert_int_equal(env_quota_load(quota_recording_get, &r, &q), VRAM_OK);
    assert_int_equal(r.limit, 1);
    assert_int_equal(r.group, 1);
    assert_int_equal(r.hami_all, 1);
    for (int i = 0; i < 16; i++)
        assert_int_equal(r.hami_dev[i], 1);
    assert_int_equal(r.hami_dev[16], 0);
    assert_int_equal(r.source, 1);
    assert_int_equal(r.context, 1);
    assert_int_equal(r.hami_cache, 1);
    assert_int_equal(r.others, 0);

    memset(&r, 0, sizeof r);
    struct vram_env e;
    assert_int_equal(env_load(quota_recording_get, &r, &e), VRAM_OK);
    assert_int_equal(r.limit + r.group + r.hami_all + r.hami_dev[0], 0);
}

/* VRAM_LIMIT_SOURCE names who set VRAM_LIMIT; a malformed one is dropped
** (a label never stops a job), and without VRAM_LIMIT it says nothing. */
static void
test_quota_origin(void **state)
{
    (void)state;
    struct quota_env q;
    assert_int_equal(env_quota_load(fake_get,
                                    (void *)VARS({"VRAM_LIMIT", "4G"}, {"VRAM_LIMIT_SOURCE", "slurm"}),
                                    &q),
                     VRAM_OK);
    assert_string_equal(q.origin, "slurm");
    assert_int_equal(env_quota_load(fake_get,
                                    (void *)VARS({"VRAM_LIMIT", "4G"}, {"VRAM_LIMIT_SOURCE", "a b"}),
                                    &q),
                     VRAM_OK);
    assert_string_equal(q.origin, "");
    assert_true(q.active);
    assert_int_equal(
        env_quota_load(fake_get, (void *)VARS({"VRAM_LIMIT_SOURCE", "vram-run"}), &q), VRAM_OK);
    assert_string_equal(q.origin, "");
    assert_false(q.active);
}

/* HAMi's shared cache: one group per path, only where HAMi's limits apply. */
static void
test_quota_hami_cache(void **state)
{
    (void)state;
    struct quota_env a, b, c, d;
    assert_int_equal(env_quota_load(fake_get,
                                    (void *)VARS({"CUDA_DEVICE_MEMORY_LIMIT_0", "64m"},
                                                 {"CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                                  "/usr/local/vgpu/c1.cache"}),
                                    &a),
                     VRAM_OK);
    assert_int_equal(env_quota_load(fake_get,
                                    (void *)VARS({"CUDA_DEVICE_MEMORY_LIMIT", "64m"},
                                                 {"CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                                  "/usr/local/vgpu/c1.cache"}),
                                    &b),
                     VRAM_OK);
    assert_int_equal(env_quota_load(fake_get,
                                    (void *)VARS({"CUDA_DEVICE_MEMORY_LIMIT_0", "64m"},
                                                 {"CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                                  "/usr/local/vgpu/c2.cache"}),
                                    &c),
                     VRAM_OK);
    assert_true(strncmp(a.group, "hami-", 5) == 0 && strlen(a.group) == 21);
    assert_string_equal(a.group, b.group);
    assert_string_not_equal(a.group, c.group);
    /* VRAM_GROUP wins (HAMi's variables are not read then); no HAMi limit:
    ** the cache alone makes no group. */
    assert_int_equal(env_quota_load(fake_get,
                                    (void *)VARS({"VRAM_GROUP", "mine"},
                                                 {"CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                                  "/usr/local/vgpu/c1.cache"}),
                                    &d),
                     VRAM_OK);
    assert_string_equal(d.group, "mine");
    assert_int_equal(env_quota_load(fake_get,
                                    (void *)VARS({"CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                                  "/usr/local/vgpu/c1.cache"}),
                                    &d),
                     VRAM_OK);
    assert_string_equal(d.group, "");
    assert_false(d.active);
}

/* CUDA_VISIBLE_DEVICES: set, set and empty, unset. */
static void
test_visible_load(void **state)
{
    (void)state;
    char buf[64];
    bool set = false;
    assert_int_equal(env_visible_load(fake_get, (void *)VARS({"CUDA_VISIBLE_DEVICES", "2,0"}), buf,
                                      sizeof buf, &set),
                     VRAM_OK);
    assert_true(set);
    assert_string_equal(buf, "2,0");
    assert_int_equal(env_visible_load(fake_get, (void *)VARS({"CUDA_VISIBLE_DEVICES", ""}), buf,
                                      sizeof buf, &set),
                     VRAM_OK);
    assert_true(set);
    assert_string_equal(buf, "");
    assert_int_equal(env_visible_load(fake_get, (void *)VARS({"VRAM_LIMIT", "1G"}), buf, sizeof buf,
                                      &set),
                     VRAM_OK);
    assert_false(set);
    char small[4];
    assert_int_equal(env_visible_load(fake_get, (void *)VARS({"CUDA_VISIBLE_DEVICES", "0,1,2"}),
                                      small, sizeof small, &set),
                     VRAM_E_CONFIG);
}

/* env_load (vram_open) is not stopped by the preload library's or vram
** run's variables, however malformed. */
static void
test_env_load_ignores_quota(void **state)
{
    (void)state;
    char long_path[700];
    memset(long_path, 'p', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = '\0';
    struct vram_env e = load_ok(VARS(
        {"VRAM_LIMIT", "6X"}, {"VRAM_GROUP", "a b"}, {"CUDA_DEVICE_MEMORY_LIMIT", "junk"},
        {"CUDA_DEVICE_MEMORY_LIMIT_0", "junk"}, {"VRAM_PRELOAD_LIBRARY", long_path}));
    assert_defaults(&e);
}

static void
test_run_settings(void **state)
{
    (void)state;
    struct env_run r;
    assert_int_equal(env_run_load(fake_get, (void *)no_vars, &r), VRAM_OK);
    assert_string_equal(r.preload_library, "");
    assert_string_equal(r.ld_preload, "");
    assert_int_equal(
        env_run_load(fake_get,
                     (void *)VARS({"VRAM_PRELOAD_LIBRARY", "/opt/v/lib.so"},
                                  {"LD_PRELOAD", "/a.so:/b.so"}, {"VRAM_LIMIT", "6X"}),
                     &r),
        VRAM_OK);
    assert_string_equal(r.preload_library, "/opt/v/lib.so");
    assert_string_equal(r.ld_preload, "/a.so:/b.so");
    assert_string_equal(r.python, "");
    assert_int_equal(env_run_load(fake_get,
                                  (void *)VARS({"VRAM_PYTHON", "/usr/bin/python3"},
                                               {"VRAM_PYTHONPATH", "/opt/v/python"},
                                               {"PYTHONPATH", "/a:/b"}),
                                  &r),
                     VRAM_OK);
    assert_string_equal(r.python, "/usr/bin/python3");
    assert_string_equal(r.python_dir, "/opt/v/python");
    assert_string_equal(r.pythonpath, "/a:/b");
    assert_int_equal(env_run_load(fake_get, (void *)no_vars, NULL), VRAM_E_INVALID);

    /* Too long: an error, R untouched. */
    static char big[5000];
    memset(big, 'x', sizeof big - 1);
    struct env_run copy = r;
    assert_int_equal(env_run_load(fake_get, (void *)VARS({"LD_PRELOAD", big}), &r),
                     VRAM_E_CONFIG);
    assert_true(strncmp(vram_last_error(), "LD_PRELOAD='xxx", 15) == 0);
    assert_non_null(strstr(vram_last_error(), "value longer than 4095 bytes"));
    assert_true(memcmp(&copy, &r, sizeof r) == 0);
    assert_int_equal(
        env_run_load(fake_get, (void *)VARS({"VRAM_PRELOAD_LIBRARY", big}), &r),
        VRAM_E_CONFIG);
    assert_non_null(strstr(vram_last_error(), "path longer than 511 bytes"));
}

/* `vram env` shows the quota rows, flags malformed ones, and says when
** vram's own variables make the preload library ignore HAMi's. */
static void
test_print_quota(void **state)
{
    (void)state;
    char *out = capture_print(
        VARS({"VRAM_LIMIT", "GPU-8c6f1e2a:6G,1:50%"}, {"VRAM_GROUP", "exp42"},
             {"CUDA_DEVICE_MEMORY_LIMIT", "6144m"}, {"CUDA_DEVICE_MEMORY_LIMIT_3", "2g"},
             {"VRAM_PRELOAD_LIBRARY", "/x/libvram-preload.so"}, {"LD_PRELOAD", "/a.so"}));
    assert_line(out, "VRAM_LIMIT", "GPU-8c6f1e2a:6G,1:50%", "environment");
    assert_line(out, "VRAM_GROUP", "exp42", "environment");
    assert_line(out, "CUDA_DEVICE_MEMORY_LIMIT", "6G (ignored: VRAM_LIMIT is set)",
                "environment");
    assert_line(out, "CUDA_DEVICE_MEMORY_LIMIT_<i>",
                "device 3: 2G (ignored: VRAM_LIMIT is set)", "environment");
    assert_line(out, "VRAM_PRELOAD_LIBRARY", "/x/libvram-preload.so", "environment");
    assert_line(out, "LD_PRELOAD", "/a.so", "environment");
    free(out);

    out = capture_print(VARS({"VRAM_LIMIT", "75%"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}));
    assert_line(out, "VRAM_LIMIT", "75%", NULL);
    free(out);

    /* HAMi's bare numbers are bytes, and shown as VRAM_LIMIT would take them. */
    out = capture_print(VARS({"CUDA_DEVICE_MEMORY_LIMIT", "6442450944"},
                             {"CUDA_DEVICE_MEMORY_LIMIT_1", "1000"}));
    assert_line(out, "CUDA_DEVICE_MEMORY_LIMIT", "6G", "environment");
    assert_line(out, "CUDA_DEVICE_MEMORY_LIMIT_<i>", "device 1: 1000B", "environment");
    free(out);

    out = capture_print(VARS({"VRAM_GROUP", "g"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}));
    assert_line(out, "CUDA_DEVICE_MEMORY_LIMIT", "(ignored: VRAM_GROUP is set)", NULL);
    free(out);

    out = capture_print(
        VARS({"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"CUDA_DEVICE_MEMORY_LIMIT_0", "512m"}));
    assert_line(out, "CUDA_DEVICE_MEMORY_LIMIT", "1G", "environment");
    assert_null(strstr(out, "ignored"));
    assert_line(out, "CUDA_DEVICE_MEMORY_LIMIT_<i>", "device 0: 512M",
                "environment");
    free(out);

    out = capture_print(VARS({"VRAM_LIMIT", "6X"}, {"VRAM_GROUP", "a/b"},
                             {"CUDA_DEVICE_MEMORY_LIMIT_5", "xx"}));
    assert_line(out, "VRAM_LIMIT", "error: VRAM_LIMIT='6X': '6X': unknown unit 'X'",
                NULL);
    assert_line(out, "VRAM_GROUP", "error: VRAM_GROUP='a/b': '/' is not allowed", NULL);
    assert_line(out, "CUDA_DEVICE_MEMORY_LIMIT_<i>",
                "error: CUDA_DEVICE_MEMORY_LIMIT_5='xx': ", NULL);
    /* The allocator's rows are untouched by them. */
    assert_line(out, "VRAM_BACKEND", "cuda", "default");
    free(out);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_empty_is_unset),
        cmocka_unit_test(test_reads_every_variable_once),
        cmocka_unit_test(test_null_out),
        cmocka_unit_test(test_backend),
        cmocka_unit_test(test_sim_devices),
        cmocka_unit_test(test_sim_memory),
        cmocka_unit_test(test_fraction),
        cmocka_unit_test(test_reserve_mb),
        cmocka_unit_test(test_log_level),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_bool_words),
        cmocka_unit_test(test_strategy),
        cmocka_unit_test(test_growth_switches),
        cmocka_unit_test(test_growth_conflicts),
        cmocka_unit_test(test_limit_all),
        cmocka_unit_test(test_limit_per_device),
        cmocka_unit_test(test_limit_rejects),
        cmocka_unit_test(test_limit_message_shape),
        cmocka_unit_test(test_device_limit_fallbacks),
        cmocka_unit_test(test_everything_set),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_print_defaults),
        cmocka_unit_test(test_print_values_and_errors),
        cmocka_unit_test(test_markdown),
        cmocka_unit_test(test_doc_is_generated),
        cmocka_unit_test(test_quota_unset),
        cmocka_unit_test(test_quota_sizes),
        cmocka_unit_test(test_quota_fractions),
        cmocka_unit_test(test_quota_per_device),
        cmocka_unit_test(test_quota_rejects),
        cmocka_unit_test(test_quota_message_shape),
        cmocka_unit_test(test_quota_group),
        cmocka_unit_test(test_quota_hami),
        cmocka_unit_test(test_quota_reads),
        cmocka_unit_test(test_quota_origin),
        cmocka_unit_test(test_visible_load),
        cmocka_unit_test(test_quota_hami_cache),
        cmocka_unit_test(test_env_load_ignores_quota),
        cmocka_unit_test(test_run_settings),
        cmocka_unit_test(test_print_quota),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
