/* SPDX-License-Identifier: MIT */
/*
** test_ldpreload.c -- the LD_PRELOAD builder that `vram run` and the Slurm
** plug-in share (src/base/ldpreload.c): the library first and once, the
** user's other entries after it in their order, colons and spaces read as
** ld.so reads them, and a result that does not fit refused.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/ldpreload.h"

#define LIB "/opt/vram/lib/libvram-preload.so"

static void
test_cases(void **state)
{
    (void)state;
    static const struct {
        const char *current; /* the user's LD_PRELOAD (NULL: unset) */
        const char *want;
    } cases[] = {
        /* Nothing there. */
        {NULL, LIB},
        {"", LIB},
        {":", LIB},
        {"  : :", LIB},
        /* The user's libraries follow ours, in their order. */
        {"/x.so", LIB ":/x.so"},
        {"/x.so:/y.so", LIB ":/x.so:/y.so"},
        /* Already present: first, last, in the middle, twice. */
        {LIB, LIB},
        {LIB ":/x.so", LIB ":/x.so"},
        {"/x.so:" LIB, LIB ":/x.so"},
        {"/x.so:" LIB ":/y.so", LIB ":/x.so:/y.so"},
        {LIB ":/x.so:" LIB, LIB ":/x.so"},
        /* Another copy of the preload library (a step inside a job that
        ** another install preloaded, or a bare name): ours only. */
        {"libvram-preload.so:/x.so", LIB ":/x.so"},
        {"/x.so:/usr/lib/libvram-preload.so", LIB ":/x.so"},
        /* A name that merely contains ours is another library. */
        {"/opt/libvram-preload.so.1", LIB ":/opt/libvram-preload.so.1"},
        {"/opt/my-libvram-preload.so", LIB ":/opt/my-libvram-preload.so"},
        /* The user's own duplicates are theirs to keep. */
        {"/x.so:/x.so", LIB ":/x.so:/x.so"},
        /* ld.so splits at spaces as at colons; empty entries are nothing. */
        {"/x.so /y.so", LIB ":/x.so:/y.so"},
        {" /x.so  " LIB " :/y.so: ", LIB ":/x.so:/y.so"},
        {"::/x.so::", LIB ":/x.so"},
        /* A tab is not a separator for ld.so: part of a file name. */
        {"/x\t.so", LIB ":/x\t.so"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[512];
        memset(out, 'Z', sizeof out);
        bool ok = ldpreload_build(LIB, cases[i].current, out, sizeof out);
        if (!ok || strcmp(out, cases[i].want) != 0)
            fail_msg("case %zu: '%s' gave %s '%s', expected '%s'", i,
                     cases[i].current ? cases[i].current : "(unset)", ok ? "true" : "false",
                     out, cases[i].want);
        /* The documented bound holds. */
        size_t bound = strlen(LIB) + 1 + (cases[i].current ? strlen(cases[i].current) : 0);
        assert_true(strlen(out) <= bound);
    }
}

static void
test_refusals(void **state)
{
    (void)state;
    char out[64];
    /* A library that cannot be one entry. */
    assert_false(ldpreload_build("", "/x.so", out, sizeof out));
    assert_false(ldpreload_build(NULL, "/x.so", out, sizeof out));
    assert_false(ldpreload_build("/a b/lib.so", "", out, sizeof out));
    assert_false(ldpreload_build("/a:b/lib.so", "", out, sizeof out));
    assert_string_equal(out, "");
    /* Too long for OUT: refused, OUT left empty rather than cut. */
    assert_false(ldpreload_build("/lib.so", "/a-rather-long-library-name.so", out, 20));
    assert_string_equal(out, "");
    assert_false(ldpreload_build("/a-library-longer-than-out.so", "", out, 8));
    /* Exactly fitting: "/l.so:/x.so" is 11 bytes + NUL. */
    assert_true(ldpreload_build("/l.so", "/x.so", out, 12));
    assert_string_equal(out, "/l.so:/x.so");
    assert_false(ldpreload_build("/l.so", "/x.so", out, 11));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
