/* SPDX-License-Identifier: MIT */
/*
** test_track.c -- the preload library's table of live allocations
** (src/preload/track.c), compiled into this test with its asserts on (the
** lock's owner checked) and its array allocation replaceable, so that
** growth can be made to fail. Keys collide on purpose: device pointers
** 2 MiB apart, keys chosen to share a home line, the same number in two
** kinds. After every step the table's invariant is checked: every entry
** lies at the end of an unbroken run of entries from its home slot (what
** linear probing's lookups rely on), every line such a run crosses is
** marked spilled, and the count is the entries'.
*/
#undef NDEBUG
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

/* The array's allocation, failing while fail_alloc is set. */
static bool fail_alloc;
static int n_alloc;

static void *
test_aligned_alloc(size_t align, size_t size)
{
    if (fail_alloc)
        return NULL;
    n_alloc++;
    return aligned_alloc(align, size);
}

#define aligned_alloc test_aligned_alloc
#include "preload/track.c"
#undef aligned_alloc

#define MiB (1ULL << 20)
#define BASE 0x7f0000000000ULL /* device pointers as the driver hands them out */

/* The invariant, under the lock: each entry is reachable from its home
** without passing an empty slot, and T.n counts the entries. */
static void
check_table(void)
{
    table_lock();
    if (T.slot == NULL) {
        assert_int_equal(T.n, 0);
        table_unlock();
        return;
    }
    assert_int_equal((uintptr_t)T.slot % TRACK_LINE, 0);
    uint32_t n = 0;
    for (uint32_t i = 0; i <= T.mask; i++) {
        if (T.slot[i].kind == 0)
            continue;
        n++;
        uint32_t home = track_home(T.slot[i].kind, T.slot[i].key, T.mask);
        for (uint32_t j = home; j != i; j = (j + 1) & T.mask) {
            assert_int_not_equal(T.slot[j].kind, 0);
            if (j & 1) /* the run crosses J's line: marked */
                assert_int_equal(T.slot[j - 1].spilled, 1);
        }
    }
    assert_int_equal(n, T.n);
    table_unlock();
}

/* Each test starts with an empty table that has no array, as a child after
** fork does. */
static int
reset(void **state)
{
    (void)state;
    fail_alloc = false;
    track_fork_child();
    return 0;
}

static void
put_ok(int kind, uint64_t key, int dev, uint64_t bytes, uint64_t id)
{
    assert_true(track_put(kind, key, dev, bytes, id));
}

static void
take_ok(int kind, uint64_t key, int dev, uint64_t bytes, uint64_t id)
{
    struct track e;
    memset(&e, 0xa5, sizeof e);
    assert_true(track_take(kind, key, &e));
    assert_int_equal(e.kind, kind);
    assert_int_equal(e.key, key);
    assert_int_equal(e.dev, dev);
    assert_int_equal(e.bytes, bytes);
    assert_int_equal(e.trace_id, id);
    assert_int_equal(e.refs, 1);
}

/* N keys of KIND whose home slot is HOME under the current mask: a probe
** run built on purpose. */
static void
keys_at_home(int kind, uint32_t home, uint64_t *keys, int n)
{
    uint64_t k = BASE;
    for (int i = 0; i < n; k += 2 * MiB)
        if (track_home((unsigned)kind, k, T.mask) == home)
            keys[i++] = k;
}

/* The first put makes the array; a program that never allocates has none. */
static void
test_first_put_allocates(void **state)
{
    (void)state;
    struct track e;
    assert_null(T.slot);
    assert_false(track_take(TRACK_PTR, BASE, &e));
    assert_int_equal(track_unref(BASE, &e), TRACK_UNKNOWN);
    track_ref(BASE);
    assert_null(T.slot);
    int before = n_alloc;
    put_ok(TRACK_PTR, BASE, 0, 512, 1);
    assert_int_equal(n_alloc, before + 1);
    assert_int_equal(T.mask + 1, TRACK_FIRST_SLOTS);
    take_ok(TRACK_PTR, BASE, 0, 512, 1);
    assert_false(track_take(TRACK_PTR, BASE, &e));
    check_table();
}

/* Pointers 2 MiB apart (their low 21 bits alike), the same numbers as
** handles and host addresses; taken back in another order. */
static void
test_many_collide(void **state)
{
    (void)state;
    enum { N = 3000 };
    static const int kinds[] = {TRACK_PTR, TRACK_HANDLE, TRACK_HOST};
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 3; k++)
            put_ok(kinds[k], BASE + (uint64_t)i * 2 * MiB,
                   kinds[k] == TRACK_HOST ? -1 : i % 8, (uint64_t)i * 512 + (uint64_t)k,
                   (uint64_t)(i * 3 + k));
    check_table();
    assert_int_equal(T.n, 3 * N);
    assert_true(T.n <= (T.mask + 1) / 2);
    /* Every seventh first (holes in the middle of runs), then the rest. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < N; i++) {
            if ((i % 7 == 0) != (pass == 0))
                continue;
            for (int k = 0; k < 3; k++)
                take_ok(kinds[k], BASE + (uint64_t)i * 2 * MiB,
                        kinds[k] == TRACK_HOST ? -1 : i % 8,
                        (uint64_t)i * 512 + (uint64_t)k, (uint64_t)(i * 3 + k));
            if (i % 97 == 0)
                check_table();
        }
    }
    assert_int_equal(T.n, 0);
    check_table();
}

/* A run of five keys on one home line: the second taken out, the later
** ones are still found (the hole filled, not left); so is an entry whose
** run wraps past the array's end. */
static void
test_delete_mid_run(void **state)
{
    (void)state;
    put_ok(TRACK_ARRAY, 1, 0, 1, 1); /* makes the array, so the mask is known */
    take_ok(TRACK_ARRAY, 1, 0, 1, 1);
    for (int wrap = 0; wrap < 2; wrap++) {
        uint64_t k[5];
        uint32_t home = wrap ? T.mask - 1 : 10;
        keys_at_home(TRACK_PTR, home, k, 5);
        for (int i = 0; i < 5; i++)
            put_ok(TRACK_PTR, k[i], 0, 100 + (uint64_t)i, (uint64_t)i);
        for (int i = 0; i < 5; i++) {
            table_lock();
            struct track *e = table_find_locked(TRACK_PTR, k[i]);
            assert_non_null(e);
            assert_int_equal(e - T.slot, (home + (uint32_t)i) & T.mask);
            table_unlock();
        }
        /* The two full lines the run crosses are marked, the last not. */
        assert_int_equal(T.slot[home].spilled, 1);
        assert_int_equal(T.slot[(home + 2) & T.mask].spilled, 1);
        assert_int_equal(T.slot[(home + 4) & T.mask].spilled, 0);
        take_ok(TRACK_PTR, k[1], 0, 101, 1);
        check_table();
        for (int i = 2; i < 5; i++) {
            table_lock();
            struct track *e = table_find_locked(TRACK_PTR, k[i]);
            assert_non_null(e);
            assert_int_equal(e - T.slot, (home + (uint32_t)i - 1) & T.mask);
            table_unlock();
        }
        for (int i = 4; i >= 0; i--)
            if (i != 1)
                take_ok(TRACK_PTR, k[i], 0, 100 + (uint64_t)i, (uint64_t)i);
        check_table();
        /* A line left with an empty slot is unmarked: no run crosses it. */
        assert_int_equal(T.slot[home].spilled, 0);
        assert_int_equal(T.slot[(home + 2) & T.mask].spilled, 0);
    }
    assert_int_equal(T.n, 0);
}

/* Growth with entries live: each doubling keeps every entry. */
static void
test_growth_keeps(void **state)
{
    (void)state;
    enum { N = 20000 };
    uint32_t slots = 0;
    int grown = 0;
    for (int i = 0; i < N; i++) {
        put_ok(TRACK_PTR, BASE + (uint64_t)i * 512, 1, (uint64_t)i, (uint64_t)i);
        if (T.mask + 1 != slots) {
            slots = T.mask + 1;
            grown++;
            check_table();
            for (int j = 0; j <= i; j += 1 + j / 64) {
                table_lock();
                struct track *e = table_find_locked(TRACK_PTR, BASE + (uint64_t)j * 512);
                assert_non_null(e);
                assert_int_equal(e->bytes, (uint64_t)j);
                table_unlock();
            }
        }
        assert_true(T.n <= (T.mask + 1) / 2);
    }
    assert_true(grown >= 8); /* 256 slots to 65536 */
    for (int i = N - 1; i >= 0; i--)
        take_ok(TRACK_PTR, BASE + (uint64_t)i * 512, 1, (uint64_t)i, (uint64_t)i);
    check_table();
}

/* Handle references: retains and failed releases add one, each release
** drops one, the last takes the entry out; a pointer of the same number
** is another entry. */
static void
test_handle_refs(void **state)
{
    (void)state;
    struct track e;
    put_ok(TRACK_HANDLE, 42, 3, 2 * MiB, 7);
    put_ok(TRACK_PTR, 42, 3, 512, 8);
    track_ref(42);
    track_ref(42);
    track_ref(43); /* not in the table: nothing */
    assert_int_equal(track_unref(42, &e), TRACK_STILL_HELD);
    assert_int_equal(track_unref(42, &e), TRACK_STILL_HELD);
    memset(&e, 0, sizeof e);
    assert_int_equal(track_unref(42, &e), TRACK_LAST);
    assert_int_equal(e.kind, TRACK_HANDLE);
    assert_int_equal(e.key, 42);
    assert_int_equal(e.dev, 3);
    assert_int_equal(e.bytes, 2 * MiB);
    assert_int_equal(e.trace_id, 7);
    assert_int_equal(track_unref(42, &e), TRACK_UNKNOWN);
    assert_int_equal(track_unref(43, &e), TRACK_UNKNOWN);
    take_ok(TRACK_PTR, 42, 3, 512, 8);
    check_table();
}

/* Out of host memory: no array, no put; a table that cannot grow takes
** puts while it has a free slot and refuses only when full, losing
** nothing; lookups of absent keys end even then; growth resumes. */
static void
test_out_of_memory(void **state)
{
    (void)state;
    struct track e;
    fail_alloc = true;
    assert_false(track_put(TRACK_PTR, BASE, 0, 1, 1));
    assert_null(T.slot);
    fail_alloc = false;
    put_ok(TRACK_PTR, BASE, 0, 1, 1);
    fail_alloc = true;
    uint32_t slots = T.mask + 1;
    for (uint32_t i = 1; i < slots; i++)
        put_ok(TRACK_PTR, BASE + (uint64_t)i * 2 * MiB, 0, 1 + i, 1 + i);
    assert_int_equal(T.mask + 1, slots);
    assert_int_equal(T.n, slots);
    assert_false(track_put(TRACK_PTR, BASE + (uint64_t)slots * 2 * MiB, 0, 1, 1));
    assert_false(track_take(TRACK_PTR, BASE + (uint64_t)slots * 2 * MiB, &e));
    assert_int_equal(track_unref(BASE, &e), TRACK_UNKNOWN);
    check_table();
    /* One out, one in: a full table's deletion still ends. */
    take_ok(TRACK_PTR, BASE + 5 * 2 * MiB, 0, 6, 6);
    check_table();
    put_ok(TRACK_PTR, BASE + 5 * 2 * MiB, 0, 6, 6);
    fail_alloc = false;
    put_ok(TRACK_PTR, BASE + (uint64_t)slots * 2 * MiB, 0, 1 + slots, 1 + slots);
    assert_int_equal(T.mask + 1, 2 * slots);
    check_table();
    for (uint32_t i = 0; i <= slots; i++)
        take_ok(TRACK_PTR, BASE + (uint64_t)i * 2 * MiB, 0, 1 + i, 1 + i);
    assert_int_equal(T.n, 0);
}

/* Puts and takes at random against a plain list, with a key pool small
** enough that most puts and takes land in runs. */
static void
test_random_against_list(void **state)
{
    (void)state;
    enum { POOL = 4096, STEPS = 200000 };
    static bool live[POOL];
    memset(live, 0, sizeof live);
    uint64_t x = 88172645463325252ULL; /* xorshift64 */
    int n = 0;
    for (int s = 0; s < STEPS; s++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int i = (int)(x % POOL);
        int kind = i % 2 ? TRACK_PTR : TRACK_HANDLE;
        uint64_t key = BASE + (uint64_t)(i / 2) * 2 * MiB;
        struct track e;
        if (live[i]) {
            take_ok(kind, key, i % 64, (uint64_t)i, (uint64_t)i);
            live[i] = false;
            n--;
        } else {
            assert_false(track_take(kind, key, &e));
            put_ok(kind, key, i % 64, (uint64_t)i, (uint64_t)i);
            live[i] = true;
            n++;
        }
        assert_int_equal(T.n, n);
        if (s % 10007 == 0)
            check_table();
    }
    check_table();
}

/* After fork the child's table is empty, its lock fresh; it works. */
static void
test_fork_child(void **state)
{
    (void)state;
    struct track e;
    for (int i = 0; i < 100; i++)
        put_ok(TRACK_PTR, BASE + (uint64_t)i * 2 * MiB, 0, 1, 1);
    track_fork_prepare(); /* the parent holds the lock across fork */
    track_fork_child();
    assert_null(T.slot);
    assert_int_equal(T.n, 0);
    assert_false(track_take(TRACK_PTR, BASE, &e));
    put_ok(TRACK_PTR, BASE, 0, 2, 2);
    take_ok(TRACK_PTR, BASE, 0, 2, 2);
    track_fork_prepare();
    track_fork_parent();
    put_ok(TRACK_PTR, BASE, 0, 3, 3);
    check_table();
}

/* What does not fit struct track is refused, not cut short. */
static void
test_out_of_range(void **state)
{
    (void)state;
    assert_false(track_put(TRACK_PTR, BASE, 40000, 1, 1));
    assert_false(track_put(0, BASE, 0, 1, 1));
    put_ok(TRACK_HOST, BASE, -1, 1, 1);
    take_ok(TRACK_HOST, BASE, -1, 1, 1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_first_put_allocates, reset),
        cmocka_unit_test_setup(test_many_collide, reset),
        cmocka_unit_test_setup(test_delete_mid_run, reset),
        cmocka_unit_test_setup(test_growth_keeps, reset),
        cmocka_unit_test_setup(test_handle_refs, reset),
        cmocka_unit_test_setup(test_out_of_memory, reset),
        cmocka_unit_test_setup(test_random_against_list, reset),
        cmocka_unit_test_setup(test_fork_child, reset),
        cmocka_unit_test_setup(test_out_of_range, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
