/* SPDX-License-Identifier: MIT */
/*
** test_quota.c -- quota_for_device (src/quota/quota.c): which setting
** applies to a device (UUID entry, then ordinal entry, then all), UUID
** prefixes in any case, fractions of the total, min(limit, total), 0 for
** devices that are not limited, and the unknown-total rule. The settings
** come from env_quota_load through a fake getter, as in the library.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "config/env.h"
#include "quota/quota.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

/* An H200's total memory as the driver reports it, bytes. */
#define H200 (143771ULL * MiB)

static const char UUID0[] = "GPU-8c6f1e2a-1234-5678-9abc-def012345678";
static const char UUID1[] = "GPU-00112233-4455-6677-8899-aabbccddeeff";

struct kv {
    const char *name;
    const char *value;
};

static const char *
fake_get(const char *name, void *user)
{
    for (const struct kv *p = user; p->name != NULL; p++)
        if (strcmp(p->name, name) == 0)
            return p->value;
    return NULL;
}

/* The quota that VRAM_LIMIT=TEXT gives. */
static struct quota_env
limit(const char *text)
{
    const struct kv vars[] = {{"VRAM_LIMIT", text}, {NULL, NULL}};
    struct quota_env q;
    if (env_quota_load(fake_get, (void *)vars, &q) != VRAM_OK)
        fail_msg("VRAM_LIMIT=%s: %s", text, vram_last_error());
    return q;
}

static void
test_not_limited(void **state)
{
    (void)state;
    assert_true(quota_for_device(NULL, 0, UUID0, H200) == 0);
    const struct kv none[] = {{NULL, NULL}};
    struct quota_env q;
    assert_int_equal(env_quota_load(fake_get, (void *)none, &q), VRAM_OK);
    assert_false(q.active);
    assert_true(quota_for_device(&q, 0, UUID0, H200) == 0);
    /* A group without a limit limits nothing. */
    const struct kv group[] = {{"VRAM_GROUP", "g"}, {NULL, NULL}};
    assert_int_equal(env_quota_load(fake_get, (void *)group, &q), VRAM_OK);
    assert_true(quota_for_device(&q, 0, UUID0, H200) == 0);
    /* An inactive quota is not limited whatever it holds. */
    q = limit("6G");
    q.active = false;
    assert_true(quota_for_device(&q, 0, UUID0, H200) == 0);
}

static void
test_all_devices(void **state)
{
    (void)state;
    struct quota_env q = limit("6G");
    for (int d = 0; d < 8; d++)
        assert_true(quota_for_device(&q, d, d % 2 ? UUID1 : UUID0, H200) == 6 * GiB);
    assert_true(quota_for_device(&q, 0, NULL, H200) == 6 * GiB);
    assert_true(quota_for_device(&q, 0, "", H200) == 6 * GiB);
    /* min(limit, total). */
    assert_true(quota_for_device(&q, 0, UUID0, 4 * GiB) == 4 * GiB);
    q = limit("1T");
    assert_true(quota_for_device(&q, 0, UUID0, H200) == H200);
}

static void
test_fractions(void **state)
{
    (void)state;
    struct quota_env q = limit("50%");
    assert_true(quota_for_device(&q, 0, UUID0, 80 * GiB) == 40 * GiB);
    assert_true(quota_for_device(&q, 3, UUID1, H200) == H200 / 2);
    q = limit("0.25");
    assert_true(quota_for_device(&q, 0, UUID0, 80 * GiB) == 20 * GiB);
    q = limit("100%");
    assert_true(quota_for_device(&q, 0, UUID0, H200) == H200);
    q = limit("1.0");
    assert_true(quota_for_device(&q, 0, UUID0, UINT64_MAX) == UINT64_MAX);
    /* Rounded down: a third of 10 bytes is 3. */
    q = limit("0.33333333333333333");
    assert_true(quota_for_device(&q, 0, UUID0, 10) == 3);
    /* Never rounded to 0 ("not limited"). */
    q = limit("0.000000001");
    assert_true(quota_for_device(&q, 0, UUID0, 100) == 1);
}

/* TOTAL 0 (the driver did not say): sizes apply as given; a fraction
** refuses everything instead of meaning "not limited". */
static void
test_unknown_total(void **state)
{
    (void)state;
    struct quota_env q = limit("6G");
    assert_true(quota_for_device(&q, 0, UUID0, 0) == 6 * GiB);
    q = limit("50%");
    assert_true(quota_for_device(&q, 0, UUID0, 0) == 1);
}

static void
test_ordinals(void **state)
{
    (void)state;
    struct quota_env q = limit("0:6G,1:4G,63:50%");
    assert_true(quota_for_device(&q, 0, UUID0, H200) == 6 * GiB);
    assert_true(quota_for_device(&q, 1, UUID1, H200) == 4 * GiB);
    assert_true(quota_for_device(&q, 63, NULL, 80 * GiB) == 40 * GiB);
    /* Devices not listed are not limited. */
    assert_true(quota_for_device(&q, 2, UUID0, H200) == 0);
    assert_true(quota_for_device(&q, -1, UUID0, H200) == 0);
    assert_true(quota_for_device(&q, 64, UUID0, H200) == 0);
    /* The ordinal is the CUDA one: the UUID of the device plays no part. */
    assert_true(quota_for_device(&q, 1, UUID0, H200) == 4 * GiB);
    assert_true(quota_for_device(&q, 1, UUID1, 2 * GiB) == 2 * GiB); /* min */
}

static void
test_uuids(void **state)
{
    (void)state;
    /* The full UUID, a prefix of 8 hex digits, a longer prefix. */
    struct quota_env q = limit("GPU-8c6f1e2a-1234-5678-9abc-def012345678:6G");
    assert_true(quota_for_device(&q, 5, UUID0, H200) == 6 * GiB);
    assert_true(quota_for_device(&q, 5, UUID1, H200) == 0);
    assert_true(quota_for_device(&q, 5, NULL, H200) == 0);
    q = limit("GPU-8c6f1e2a:6G");
    assert_true(quota_for_device(&q, 0, UUID0, H200) == 6 * GiB);
    assert_true(quota_for_device(&q, 0, UUID1, H200) == 0);
    q = limit("GPU-00112233-44:3G");
    assert_true(quota_for_device(&q, 7, UUID1, H200) == 3 * GiB);
    assert_true(quota_for_device(&q, 7, UUID0, H200) == 0);

    /* Case-insensitive both ways, and "GPU-" optional on the device's side. */
    q = limit("gpu-8C6F1E2A:6G");
    assert_true(quota_for_device(&q, 0, UUID0, H200) == 6 * GiB);
    assert_true(quota_for_device(&q, 0, "GPU-8C6F1E2A-1234-5678-9ABC-DEF012345678",
                                 H200) == 6 * GiB);
    assert_true(quota_for_device(&q, 0, "8c6f1e2a-1234-5678-9abc-def012345678", H200) ==
                6 * GiB);
    /* A device UUID shorter than the key does not match. */
    q = limit("GPU-8c6f1e2a-1234:6G");
    assert_true(quota_for_device(&q, 0, "GPU-8c6f1e2a", H200) == 0);
}

/* A UUID entry wins over an ordinal entry, which wins over "all". */
static void
test_precedence(void **state)
{
    (void)state;
    struct quota_env q = limit("0:4G,GPU-8c6f1e2a:6G");
    assert_true(quota_for_device(&q, 0, UUID0, H200) == 6 * GiB);
    assert_true(quota_for_device(&q, 0, UUID1, H200) == 4 * GiB);
    assert_true(quota_for_device(&q, 1, UUID0, H200) == 6 * GiB);
    assert_true(quota_for_device(&q, 1, UUID1, H200) == 0);
    q = limit("GPU-8c6f1e2a:6G,0:4G"); /* the order does not matter */
    assert_true(quota_for_device(&q, 0, UUID0, H200) == 6 * GiB);

    /* HAMi: a device's own value over the all-devices one. */
    const struct kv hami[] = {{"CUDA_DEVICE_MEMORY_LIMIT", "8g"},
                              {"CUDA_DEVICE_MEMORY_LIMIT_1", "2048m"},
                              {NULL, NULL}};
    assert_int_equal(env_quota_load(fake_get, (void *)hami, &q), VRAM_OK);
    assert_true(quota_for_device(&q, 0, UUID0, H200) == 8 * GiB);
    assert_true(quota_for_device(&q, 1, UUID1, H200) == 2 * GiB);
    assert_true(quota_for_device(&q, 2, UUID1, H200) == 8 * GiB);
    assert_true(quota_for_device(&q, 40, NULL, H200) == 8 * GiB);

    /* An entry wins over "all" also in a hand-built quota (env.c never
    ** makes one from VRAM_LIMIT, but the contract says so). */
    q = limit("0:50%");
    q.all.kind = QUOTA_BYTES;
    q.all.bytes = 10 * GiB;
    assert_true(quota_for_device(&q, 0, UUID0, 80 * GiB) == 40 * GiB);
    assert_true(quota_for_device(&q, 1, UUID0, 80 * GiB) == 10 * GiB);
    assert_true(quota_for_device(&q, 1, UUID0, 8 * GiB) == 8 * GiB);
}

/* Per-device entries that name no GPU are found and said. */
static void
test_unmatched(void **state)
{
    (void)state;
    struct quota_gpus g;
    memset(&g, 0, sizeof g);
    strcpy(g.uuid[0], UUID0);
    strcpy(g.uuid[1], UUID1);
    g.n = g.n_ordinals = 2;
    struct quota_env q = limit("6G");
    assert_int_equal(quota_unmatched(&q, &g), -1); /* no entries */
    q = limit("0:6G,1:4G");
    assert_int_equal(quota_unmatched(&q, &g), -1);
    g.n_ordinals = 1;
    assert_int_equal(quota_unmatched(&q, &g), 1); /* ordinal 1 where only 0 is */
    g.n_ordinals = 2;
    q = limit("gpu-8C6F1E2A:6G,GPU-00112233:50%"); /* prefixes, any case */
    assert_int_equal(quota_unmatched(&q, &g), -1);
    g.n = 1; /* a UUID key needs its GPU in the UUID list, whatever the ordinals */
    assert_int_equal(quota_unmatched(&q, &g), 1);
    g.n = 2;
    q = limit("0:6G,GPU-deadbeef:6G");
    assert_int_equal(quota_unmatched(&q, &g), 1);
    char line[512];
    quota_unmatched_line(&q, 1, &g, line, sizeof line);
    assert_string_equal(line, "VRAM_LIMIT entry 'GPU-deadbeef' names no GPU "
                              "(0: GPU-8c6f1e2a-1234-5678-9abc-def012345678, 1: "
                              "GPU-00112233-4455-6677-8899-aabbccddeeff): it would limit "
                              "nothing");
    /* Cut to fit, never past the buffer. */
    quota_unmatched_line(&q, 1, &g, line, 40);
    assert_int_equal(strlen(line), 39);
    /* No GPU at all: nothing can be allocated, so nothing is said. */
    struct quota_gpus none;
    memset(&none, 0, sizeof none);
    assert_int_equal(quota_unmatched(&q, &none), -1);
    quota_gpus_format(&none, line, sizeof line);
    assert_string_equal(line, "none");
    /* HAMi's per-device variables are named as such. */
    const struct kv hami[] = {{"CUDA_DEVICE_MEMORY_LIMIT_3", "1g"}, {NULL, NULL}};
    assert_int_equal(env_quota_load(fake_get, (void *)hami, &q), VRAM_OK);
    assert_int_equal(quota_unmatched(&q, &g), 0);
    g.n = g.n_ordinals = 1;
    quota_unmatched_line(&q, 0, &g, line, sizeof line);
    assert_string_equal(line, "CUDA_DEVICE_MEMORY_LIMIT_3 names no GPU (0: "
                              "GPU-8c6f1e2a-1234-5678-9abc-def012345678): it would limit "
                              "nothing");
    char key[QUOTA_UUID_LEN];
    quota_key_text(&q.entries[0], key, sizeof key);
    assert_string_equal(key, "3");
}

/* HAMi's variables that a VRAM_GROUP without VRAM_LIMIT turns off. */
static void
test_hami_ignored(void **state)
{
    (void)state;
    char names[256];
    const struct kv off[] = {{"VRAM_GROUP", "g"},
                             {"CUDA_DEVICE_MEMORY_LIMIT_15", "1g"},
                             {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/c"},
                             {NULL, NULL}};
    assert_true(env_hami_ignored(fake_get, (void *)off, names, sizeof names));
    assert_string_equal(names, "CUDA_DEVICE_MEMORY_LIMIT_15, CUDA_DEVICE_MEMORY_SHARED_CACHE");
    const struct kv with_limit[] = {{"VRAM_GROUP", "g"},
                                    {"VRAM_LIMIT", "1G"},
                                    {"CUDA_DEVICE_MEMORY_LIMIT", "1g"},
                                    {NULL, NULL}};
    assert_false(env_hami_ignored(fake_get, (void *)with_limit, names, sizeof names));
    assert_string_equal(names, "");
    const struct kv hami_only[] = {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {NULL, NULL}};
    assert_false(env_hami_ignored(fake_get, (void *)hami_only, names, sizeof names));
    const struct kv group_only[] = {{"VRAM_GROUP", "g"}, {NULL, NULL}};
    assert_false(env_hami_ignored(fake_get, (void *)group_only, names, sizeof names));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_limited), cmocka_unit_test(test_all_devices),
        cmocka_unit_test(test_fractions),   cmocka_unit_test(test_unknown_total),
        cmocka_unit_test(test_ordinals),    cmocka_unit_test(test_uuids),
        cmocka_unit_test(test_precedence),  cmocka_unit_test(test_unmatched),
        cmocka_unit_test(test_hami_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
