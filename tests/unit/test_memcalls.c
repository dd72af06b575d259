/* SPDX-License-Identifier: MIT */
/*
** test_memcalls.c -- the table of the driver's memory-making entry points
** (src/preload/memcalls.h) and the preload library's hook list
** (PRELOAD_HOOKS, src/preload/hooks.h) agree: the names the table says
** are hooked are exactly the names the hook rows ask cuGetProcAddress
** for; each name is classified once, with a reason; every family of the
** GPU-side check (tests/gpu/check_memcalls.py) is a non-empty expression.
*/
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#define PRELOAD_HOOKS_LIST_ONLY
#include "preload/hooks.h"
#include "preload/memcalls.h"

enum { MEM_HOOKED = 1, MEM_CONTEXT, MEM_OTHER, MEM_NONE };

static const struct {
    const char *name;
    int how;
    const char *why;
} table[] = {
#define X(name, how, why) {#name, how, why},
    PRELOAD_MEMORY_CALLS(X)
#undef X
};
#define N_TABLE (sizeof table / sizeof table[0])

/* The base names the hook rows ask for (NULL: NVML's, not the driver's). */
static const char *const asked[] = {
#define X(symbol, type, asked, since, until, stream, lib, before, after, params, args) asked,
    PRELOAD_HOOKS(X)
#undef X
};
#define N_ASKED (sizeof asked / sizeof asked[0])

static const char *const families[] = {
#define F(re) re,
    PRELOAD_MEMORY_FAMILIES(F)
#undef F
};

/* The table's row of NAME, or -1. */
static int
row_of(const char *name)
{
    for (size_t i = 0; i < N_TABLE; i++)
        if (strcmp(table[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Every hook row's name is in the table, marked hooked (cuGetProcAddress
** itself excepted: the interposer's own). */
static void
test_hooks_are_classified(void **state)
{
    (void)state;
    int bad = 0;
    for (size_t i = 0; i < N_ASKED; i++) {
        if (asked[i] == NULL || strcmp(asked[i], "cuGetProcAddress") == 0)
            continue;
        int r = row_of(asked[i]);
        if (r < 0 || table[r].how != MEM_HOOKED) {
            printf("hooked %s is %s in memcalls.h\n", asked[i],
                   r < 0 ? "not" : "not marked MEM_HOOKED");
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* Every name the table marks hooked has a hook row. */
static void
test_hooked_rows_are_hooks(void **state)
{
    (void)state;
    int bad = 0;
    for (size_t i = 0; i < N_TABLE; i++) {
        if (table[i].how != MEM_HOOKED)
            continue;
        bool found = false;
        for (size_t k = 0; k < N_ASKED && !found; k++)
            found = asked[k] != NULL && strcmp(asked[k], table[i].name) == 0;
        if (!found) {
            printf("memcalls.h marks %s hooked, and no row of PRELOAD_HOOKS asks for it\n",
                   table[i].name);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* Each name once, each with a reason, each a driver name. */
static void
test_rows_once_with_reason(void **state)
{
    (void)state;
    int bad = 0;
    for (size_t i = 0; i < N_TABLE; i++) {
        if (row_of(table[i].name) != (int)i || strncmp(table[i].name, "cu", 2) != 0 ||
            table[i].why == NULL || strlen(table[i].why) < 3) {
            printf("memcalls.h: %s given twice, not a driver name, or without a reason\n",
                   table[i].name);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        assert_true(families[i][0] == '^');
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hooks_are_classified),
        cmocka_unit_test(test_hooked_rows_are_hooks),
        cmocka_unit_test(test_rows_once_with_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
