/* SPDX-License-Identifier: MIT */
/*
** test_size.c -- sizes, fractions and their messages (src/base/size.c):
** every accepted spelling gives the exact byte count, every rejected one
** fails with VRAM_E_PARSE, a one-line message that quotes the text, and
** leaves the out-parameter alone.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/size.h"

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define GiB (1ULL << 30)
#define TiB (1ULL << 40)
#define PiB (1ULL << 50)

/* Written to out-parameters first, so that a write on failure shows. */
#define SENTINEL_U64 0xDEADBEEFCAFEF00DULL
#define SENTINEL_DBL -42.25

/* ------------------------------------------------------------------ */
/* size_parse                                                           */
/* ------------------------------------------------------------------ */

static void
test_size_accepts(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t bytes;
    } cases[] = {
        {"0", 0}, /* 0 needs no unit */
        {"000", 0},
        {"1B", 1},
        {"1073741824B", GiB},
        {"18446744073709551615B", UINT64_MAX},
        {"00012B", 12},
        {"512B", 512},
        {"512b", 512},
        {"6k", 6 * KiB},
        {"6K", 6 * KiB},
        {"6KB", 6 * KiB},
        {"6KiB", 6 * KiB},
        {"512M", 512 * MiB},
        {"512m", 512 * MiB},
        {"6144m", 6144 * MiB},
        {"6G", 6 * GiB},
        {"6g", 6 * GiB},
        {"6GB", 6 * GiB},
        {"6Gb", 6 * GiB},
        {"6gb", 6 * GiB},
        {"6GiB", 6 * GiB},
        {"6gib", 6 * GiB},
        {"6GIB", 6 * GiB},
        /* "Gi" alone, as Kubernetes and Slurm users write it. */
        {"6Gi", 6 * GiB},
        {"6gi", 6 * GiB},
        {"512Mi", 512 * MiB},
        {"1.5Gi", GiB + GiB / 2},
        {"2Ti", 2 * TiB},
        {"2T", 2 * TiB},
        {"2TiB", 2 * TiB},
        {"3P", 3 * PiB},
        {"3PB", 3 * PiB},
        {"0G", 0},
        {"1.5G", GiB + GiB / 2},
        {"1.5GiB", GiB + GiB / 2},
        {"0.5K", 512},
        {"1.25M", MiB + MiB / 4},
        {"143771M", 143771 * MiB},
        /* Fractions round down to whole bytes, exactly. */
        {"0.1K", 102},                  /* 102.4 */
        {"0.001K", 1},                  /* 1.024 */
        {"0.0009765625K", 1},           /* exactly 1/1024 of a KiB */
        {"0.0009765624K", 0},           /* a hair below */
        {"0.00000000000000000001P", 0}, /* 0.011 bytes */
        {"1.0G", GiB},
        {"16383P", 16383 * PiB},
        /* One space before the unit, as size_format prints sizes. */
        {"5.00 GiB", 5 * GiB},
        {"6 G", 6 * GiB},
        {"512 B", 512},
        {"1.50 MiB", MiB + MiB / 2},
        {"140.40 GiB", 150753352089ULL}, /* floor(140.40 x 2^30) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t v = SENTINEL_U64;
        vram_status st = size_parse(cases[i].text, &v);
        if (st != VRAM_OK || v != cases[i].bytes)
            fail_msg("'%s': status %d, %llu bytes, expected %llu (%s)", cases[i].text,
                     (int)st, (unsigned long long)v, (unsigned long long)cases[i].bytes,
                     vram_last_error());
    }
}

/* The largest sizes: the arithmetic is exact up to UINT64_MAX. */
static void
test_size_limits(void **state)
{
    (void)state;
    uint64_t v = 0;
    /* 16383 PiB + floor(0.999...9 (30 nines) x 2^50) = 2^64 - 1. */
    assert_int_equal(size_parse("16383.999999999999999999999999999999P", &v), VRAM_OK);
    assert_true(v == UINT64_MAX);
    assert_int_equal(size_parse("16383.5P", &v), VRAM_OK);
    assert_true(v == 16383 * PiB + PiB / 2);
    assert_int_equal(size_parse("16777215T", &v), VRAM_OK);
    assert_true(v == 16777215 * TiB);
    /* 64 fraction digits are accepted, 65 are not. */
    char text[80];
    snprintf(text, sizeof text, "1.%064dG", 5);
    assert_int_equal(size_parse(text, &v), VRAM_OK);
    assert_true(v == GiB);
    snprintf(text, sizeof text, "1.%065dG", 5);
    assert_int_equal(size_parse(text, &v), VRAM_E_PARSE);
}

static void
test_size_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *reason; /* a piece of the message */
    } cases[] = {
        {"", "empty"},
        {" 6G", "must start with a digit"},
        {"6G ", "after the unit"},
        {"6 ", "unexpected ' '"},
        {"6  G", "unexpected ' '"},
        {"6\tG", "unexpected byte 0x09"},
        {"6 .5G", "unexpected ' '"},
        {"\t6G", "must start with a digit"},
        {"+6G", "must start with a digit"},
        {"-6G", "must start with a digit"},
        {"-1", "must start with a digit"},
        {"0x10", "hexadecimal"},
        {"0X10", "hexadecimal"},
        {"inf", "must start with a digit"},
        {"nan", "must start with a digit"},
        {"NaN", "must start with a digit"},
        {"infinity", "must start with a digit"},
        {"G", "must start with a digit"},
        {".5G", "must start with a digit"},
        {"1.", "digits after '.'"},
        {"1.G", "digits after '.'"},
        {"1..5G", "digits after '.'"},
        {"1.5.5G", "unexpected '.'"},
        {"1.5", "needs a unit"},
        {"1.5B", "needs a unit"},
        {"6X", "unknown unit 'X'"},
        {"6E", "unknown unit 'E'"},
        {"16E", "unknown unit 'E'"},
        {"6iB", "unknown unit 'i'"},
        {"6GG", "unexpected 'G' after the unit"},
        {"6Gb?", "unexpected '?' after the unit"},
        {"6Gii", "after the unit"},
        {"6GiiB", "after the unit"},
        {"6GiBs", "after the unit"},
        {"6BB", "after the unit"},
        {"6,5G", "unexpected ','"},
        {"6_000", "unexpected '_'"},
        {"1e9", "unknown unit 'e'"},
        {"6G\n", "after the unit"},
        {"18446744073709551616B", "too large"},
        {"18446744073709551616", "too large"},
        {"99999999999999999999", "too large"},
        {"99999999999999999999999999999999999999", "too large"},
        /* A number without a unit: the forms that say what was meant. */
        {"80", "'80': a size needs a unit: 80G (GiB), 80M (MiB) or 80B (bytes)"},
        {"1", "1G (GiB), 1M (MiB) or 1B (bytes)"},
        {"00012", "00012G"},
        {"1048575", "1048575B (bytes)"},
        {"8589934592", "'8589934592': a size needs a unit: 8589934592B for bytes (= 8G), "
                       "as earlier versions read a bare number"},
        {"1073741825", "'1073741825': a size needs a unit: 1073741825B for bytes, as"},
        {"16384P", "too large"},
        {"16777216T", "too large"},
        {"17179869184G", "too large"},
        {"18014398509481984K", "too large"},
        {"99999999999999999999X", "unknown unit"}, /* syntax is reported first */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t v = SENTINEL_U64;
        vram_status st = size_parse(cases[i].text, &v);
        const char *msg = vram_last_error();
        if (st != VRAM_E_PARSE)
            fail_msg("'%s' was accepted (%llu)", cases[i].text, (unsigned long long)v);
        if (v != SENTINEL_U64)
            fail_msg("'%s': out-parameter written on failure", cases[i].text);
        if (strstr(msg, cases[i].reason) == NULL)
            fail_msg("'%s': message '%s' lacks '%s'", cases[i].text, msg,
                     cases[i].reason);
        if (msg[0] != '\'' || strchr(msg, '\n') != NULL)
            fail_msg("'%s': message '%s' is not one quoted line", cases[i].text, msg);
    }
    uint64_t v = SENTINEL_U64;
    assert_int_equal(size_parse(NULL, &v), VRAM_E_PARSE);
    assert_true(v == SENTINEL_U64);
}

/* The messages have the shape the environment module builds on. */
static void
test_size_messages(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(size_parse("6X", &v), VRAM_E_PARSE);
    assert_string_equal(vram_last_error(), "'6X': unknown unit 'X'");
    assert_int_equal(size_parse("", &v), VRAM_E_PARSE);
    assert_string_equal(vram_last_error(), "'': empty size");

    /* A very long text is cut to 64 characters plus "...". */
    char longtext[300];
    memset(longtext, '7', sizeof longtext - 2);
    longtext[sizeof longtext - 2] = 'Z';
    longtext[sizeof longtext - 1] = '\0';
    assert_int_equal(size_parse(longtext, &v), VRAM_E_PARSE);
    const char *msg = vram_last_error();
    assert_true(strlen(msg) < 64 + 60);
    assert_non_null(strstr(msg, "7777..."));
    assert_null(strstr(msg,
                       "7777777777777777777777777777777777777777777777777777777777777777"
                       "7"));

    /* Control characters cannot break the line. */
    assert_int_equal(size_parse("6\nG", &v), VRAM_E_PARSE);
    assert_null(strchr(vram_last_error(), '\n'));
}

static void
test_text_excerpt(void **state)
{
    (void)state;
    char buf[TEXT_EXCERPT_LEN];
    assert_string_equal(text_excerpt("6G", buf, sizeof buf), "6G");
    assert_string_equal(text_excerpt(NULL, buf, sizeof buf), "");
    assert_string_equal(text_excerpt("a\tb\x7f", buf, sizeof buf), "a?b?");
    char text[100];
    memset(text, 'x', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    text_excerpt(text, buf, sizeof buf);
    assert_int_equal(strlen(buf), 64 + 3);
    assert_string_equal(buf + 64, "...");
    /* A small buffer is filled and terminated, never overrun. */
    char small[5];
    assert_string_equal(text_excerpt(text, small, sizeof small), "xxxx");
    assert_null(text_excerpt("x", NULL, 0));
}

/* ------------------------------------------------------------------ */
/* fraction_parse                                                       */
/* ------------------------------------------------------------------ */

static void
test_fraction_accepts(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        double value;
    } cases[] = {
        {"50%", 0.5},
        {"0.5", 0.5},
        {"1", 1.0},
        {"1.0", 1.0},
        {"100%", 1.0},
        {"100.0%", 1.0},
        {"0.75", 0.75},
        {"75%", 0.75},
        {"12.5%", 0.125},
        {"0.125", 0.125},
        {"1%", 0.01},
        {"0.01", 0.01},
        {"0.1", 0.1},
        {"0.001%", 0.00001},
        {"00.5", 0.5},
        {"0.333", 0.333},
        {"0.00000000000000001", 1e-17},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double f = SENTINEL_DBL;
        vram_status st = fraction_parse(cases[i].text, &f);
        if (st != VRAM_OK || f != cases[i].value)
            fail_msg("'%s': status %d, %.17g, expected %.17g (%s)", cases[i].text,
                     (int)st, f, cases[i].value, vram_last_error());
    }
}

static void
test_fraction_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *reason;
    } cases[] = {
        {"", "empty"},
        {"0", "more than 0"},
        {"0%", "more than 0"},
        {"0.0", "more than 0"},
        {"0.000%", "more than 0"},
        {"1.5", "more than 1"},
        {"1.0000001", "more than 1"},
        {"2", "more than 1"},
        {"101%", "more than 100%"},
        {"100.01%", "more than 100%"},
        {"-0.5", "must start with a digit"},
        {"-50%", "must start with a digit"},
        {"+0.5", "must start with a digit"},
        {" 0.5", "must start with a digit"},
        {"0.5 ", "unexpected ' '"},
        {".5", "must start with a digit"},
        {"0.", "digits after '.'"},
        {"0.5.", "unexpected '.'"},
        {"nan", "must start with a digit"},
        {"NAN", "must start with a digit"},
        {"inf", "must start with a digit"},
        {"0x1", "unexpected 'x1'"},
        {"1e-1", "unexpected 'e-1'"},
        {"50%%", "unexpected '%'"},
        {"50 %", "unexpected ' %'"},
        {"half", "must start with a digit"},
        {"0,5", "unexpected ',5'"},
        {"0.1234567890123456789", "more than 18 digits"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double f = SENTINEL_DBL;
        vram_status st = fraction_parse(cases[i].text, &f);
        const char *msg = vram_last_error();
        if (st != VRAM_E_PARSE)
            fail_msg("'%s' was accepted (%g)", cases[i].text, f);
        if (f != SENTINEL_DBL)
            fail_msg("'%s': out-parameter written on failure", cases[i].text);
        if (strstr(msg, cases[i].reason) == NULL)
            fail_msg("'%s': message '%s' lacks '%s'", cases[i].text, msg,
                     cases[i].reason);
    }
    double f = SENTINEL_DBL;
    assert_int_equal(fraction_parse(NULL, &f), VRAM_E_PARSE);
    assert_true(f == SENTINEL_DBL);
}

/* ------------------------------------------------------------------ */
/* size_format                                                          */
/* ------------------------------------------------------------------ */

static void
test_size_format(void **state)
{
    (void)state;
    static const struct {
        uint64_t bytes;
        const char *text;
    } cases[] = {
        {0, "0 B"},
        {1, "1 B"},
        {512, "512 B"},
        {1023, "1023 B"},
        {1024, "1.00 KiB"},
        {1536, "1.50 KiB"},
        {MiB, "1.00 MiB"},
        {MiB - 1, "1.00 MiB"}, /* not "1024.00 KiB" */
        {512 * MiB, "512.00 MiB"},
        {GiB + GiB / 2, "1.50 GiB"},
        {6 * GiB, "6.00 GiB"},
        {143771 * MiB, "140.40 GiB"},
        {TiB, "1.00 TiB"},
        {PiB, "1.00 PiB"},
        {1ULL << 60, "1.00 EiB"},
        {UINT64_MAX, "16.00 EiB"},
    };
    char buf[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *r = size_format(cases[i].bytes, buf, sizeof buf);
        assert_ptr_equal(r, buf);
        if (strcmp(buf, cases[i].text) != 0)
            fail_msg("%llu bytes: '%s', expected '%s'",
                     (unsigned long long)cases[i].bytes, buf, cases[i].text);
    }
    /* A short buffer is cut and terminated; none at all is left alone. */
    char small[4];
    assert_string_equal(size_format(GiB + GiB / 2, small, sizeof small), "1.5");
    assert_null(size_format(1, NULL, 0));
    char one = 'x';
    assert_ptr_equal(size_format(1, &one, 0), &one);
    assert_int_equal(one, 'x');
}

/* What size_format prints, size_parse reads back as it stands ("6.00
** GiB", with its space), to the printed precision. */
static void
test_size_round_trip(void **state)
{
    (void)state;
    static const uint64_t sizes[] = {0, 1, 1023, 6 * GiB, 512 * MiB, 3 * TiB, 7 * PiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char buf[32];
        size_format(sizes[i], buf, sizeof buf);
        uint64_t v;
        if (size_parse(buf, &v) != VRAM_OK || v != sizes[i])
            fail_msg("'%s' does not read back as %llu (%s)", buf,
                     (unsigned long long)sizes[i], vram_last_error());
    }
    /* Rounded: within half a unit of the last digit printed. */
    char buf[32];
    uint64_t v;
    size_format(143771 * MiB, buf, sizeof buf);
    assert_int_equal(size_parse(buf, &v), VRAM_OK);
    assert_true(v <= 143771 * MiB + GiB / 200 && v + GiB / 200 >= 143771 * MiB);
}

/* A number without a unit means what the setting's convention says. */
static void
test_size_bare(void **state)
{
    (void)state;
    uint64_t v = SENTINEL_U64;
    assert_int_equal(size_parse_as("80", SIZE_BARE_REFUSED, &v), VRAM_E_PARSE);
    assert_true(v == SENTINEL_U64);
    assert_int_equal(size_parse_as("80", SIZE_BARE_BYTES, &v), VRAM_OK);
    assert_true(v == 80);
    assert_int_equal(size_parse_as("6144", SIZE_BARE_MIB, &v), VRAM_OK);
    assert_true(v == 6 * GiB);
    assert_int_equal(size_parse_as("18446744073709551615", SIZE_BARE_BYTES, &v), VRAM_OK);
    assert_true(v == UINT64_MAX);
    /* MiB past 2^64 bytes is too large, not wrapped. */
    v = SENTINEL_U64;
    assert_int_equal(size_parse_as("17592186044416", SIZE_BARE_MIB, &v), VRAM_E_PARSE);
    assert_non_null(strstr(vram_last_error(), "too large"));
    assert_true(v == SENTINEL_U64);
    /* A unit means the same under every convention. */
    static const enum size_bare all[] = {SIZE_BARE_REFUSED, SIZE_BARE_BYTES,
                                         SIZE_BARE_MIB};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        assert_int_equal(size_parse_as("6G", all[i], &v), VRAM_OK);
        assert_true(v == 6 * GiB);
        assert_int_equal(size_parse_as("512B", all[i], &v), VRAM_OK);
        assert_true(v == 512);
        assert_int_equal(size_parse_as("0", all[i], &v), VRAM_OK);
        assert_true(v == 0);
        assert_int_equal(size_parse_as("1.5", all[i], &v), VRAM_E_PARSE);
    }
}

/* The form offered for a setting: exact, no space, the largest unit. */
static void
test_size_format_setting(void **state)
{
    (void)state;
    static const struct {
        uint64_t bytes;
        const char *text;
    } cases[] = {
        {0, "0"},
        {1, "1B"},
        {1000, "1000B"},
        {1024, "1K"},
        {1536, "1536B"}, /* never a fraction: 1.5K */
        {MiB + MiB / 2, "1536K"},
        {5 * GiB, "5G"},
        {GiB + GiB / 2, "1536M"},
        {143771 * MiB, "143771M"},
        {GiB + 1, "1073741825B"},
        {TiB, "1T"},
        {3 * PiB, "3P"},
        {1ULL << 60, "1024P"},
        {UINT64_MAX, "18446744073709551615B"},
    };
    char buf[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_ptr_equal(size_format_setting(cases[i].bytes, buf, sizeof buf), buf);
        if (strcmp(buf, cases[i].text) != 0)
            fail_msg("%llu bytes: '%s', expected '%s'",
                     (unsigned long long)cases[i].bytes, buf, cases[i].text);
        uint64_t v;
        if (size_parse(buf, &v) != VRAM_OK || v != cases[i].bytes)
            fail_msg("'%s' does not read back exactly", buf);
    }
    assert_null(size_format_setting(1, NULL, 0));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_accepts),     cmocka_unit_test(test_size_limits),
        cmocka_unit_test(test_size_rejects),     cmocka_unit_test(test_size_messages),
        cmocka_unit_test(test_text_excerpt),     cmocka_unit_test(test_fraction_accepts),
        cmocka_unit_test(test_fraction_rejects), cmocka_unit_test(test_size_format),
        cmocka_unit_test(test_size_round_trip), cmocka_unit_test(test_size_bare),
        cmocka_unit_test(test_size_format_setting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
