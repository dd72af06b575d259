/* SPDX-License-Identifier: MIT */
/*
** size.c -- parsing and printing of byte sizes ("6G", "512MiB", "1.5G")
** and fractions ("50%", "0.5"). Every unit is 1024-based.
**
** A number without a unit means what the setting's convention says
** (enum size_bare): nothing in vram's own settings, which refuse it with
** the forms to write instead (is "80" 80 bytes, MiB as in Slurm and
** TensorFlow's memory_limit, or GiB?), bytes in HAMi's variables, MiB
** under Slurm. What size_format prints ("5.00 GiB", one space before the
** unit) reads back, so that a size shown can be pasted into a setting;
** size_format_setting prints the exact value without a space ("5G").
**
** Parsing is done by hand rather than with strtoull/strtod: those accept
** leading spaces, signs, hexadecimal, "inf" and "nan", and strtod follows
** the host process's locale (a decimal comma under LC_NUMERIC=de_DE),
** while this code runs inside someone else's training job.
*/
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"

/* Characters of the user's text quoted in an error message. */
#define EXCERPT_CHARS 64

/*
** Most digits accepted after the decimal point of a size. 50 already
** spell any exact fraction of a PiB (2^-50 has 50 decimals); more would
** only be noise, and the bound keeps the exact arithmetic below on the
** stack.
*/
#define SIZE_FRACTION_DIGITS_MAX 64

/* Most digits of a fraction: their value must fit a uint64_t exactly. */
#define FRACTION_DIGITS_MAX 18

/* ------------------------------------------------------------------ */
/* Helpers                                                              */
/* ------------------------------------------------------------------ */

/* ASCII only: ctype.h would consult the host process's locale. */
static bool
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool
is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static char
to_upper(char c)
{
    return (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
}

char *
text_excerpt(const char *text, char *buf, size_t len)
{
    if (buf == NULL || len == 0)
        return buf;
    if (text == NULL)
        text = "";
    size_t room = len - 1;
    bool cut = false;
    size_t n = strlen(text);
    if (n > EXCERPT_CHARS) {
        n = EXCERPT_CHARS;
        cut = true;
    }
    if (n > room) {
        n = room;
        cut = false; /* no room for the "..." either */
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    buf[n] = '\0';
    if (cut && room - n >= 3)
        memcpy(buf + n, "...", 4);
    return buf;
}

/*
** The binary shift of unit letter C (K = 10, ..., P = 50), or -1 if C
** names no unit.
*/
static int
unit_shift(char c)
{
    static const char letters[] = "KMGTP";
    const char *hit = strchr(letters, to_upper(c));
    if (c == '\0' || hit == NULL)
        return -1;
    return 10 * (int)(hit - letters + 1);
}

/*
** floor(0.DIGITS x 2^SHIFT), exactly: double the decimal fraction SHIFT
** times and collect the carries out of its first digit, which are the
** bits of the result. N <= SIZE_FRACTION_DIGITS_MAX, SHIFT <= 50, so the
** result is below 2^SHIFT.
*/
static uint64_t
fraction_bits(const char *digits, size_t n, int shift)
{
    unsigned char d[SIZE_FRACTION_DIGITS_MAX];
    for (size_t i = 0; i < n; i++)
        d[i] = (unsigned char)(digits[i] - '0');
    uint64_t bits = 0;
    for (int s = 0; s < shift; s++) {
        unsigned carry = 0;
        for (size_t i = n; i-- > 0;) {
            unsigned v = 2u * d[i] + carry;
            d[i] = (unsigned char)(v % 10u);
            carry = v / 10u;
        }
        bits = (bits << 1) | carry;
    }
    return bits;
}

/* Describe character C for a message: itself if printable, else hex. */
static const char *
show_char(char c, char *buf, size_t len)
{
    unsigned char u = (unsigned char)c;
    if (u >= 0x20 && u < 0x7f)
        snprintf(buf, len, "'%c'", c);
    else
        snprintf(buf, len, "byte 0x%02x", u);
    return buf;
}

/* ------------------------------------------------------------------ */
/* Sizes                                                                */
/* ------------------------------------------------------------------ */

/*
** The line for WHOLE, a number written without a unit in SHOWN, where
** that is refused: the forms that say what was meant. A number of a
** mebibyte or more reads as the bytes earlier versions took it for.
*/
static vram_status
bare_refused(const char *shown, uint64_t whole)
{
    if (whole >= (1ULL << 20)) {
        char exact[32], same[40] = "";
        size_format_setting(whole, exact, sizeof exact);
        if (exact[strlen(exact) - 1] != 'B')
            snprintf(same, sizeof same, " (= %s)", exact);
        return error_set(VRAM_E_PARSE,
                         "'%s': a size needs a unit: %sB for bytes%s, as earlier "
                         "versions read a bare number",
                         shown, shown, same);
    }
    return error_set(VRAM_E_PARSE,
                     "'%s': a size needs a unit: %sG (GiB), %sM (MiB) or %sB (bytes)",
                     shown, shown, shown, shown);
}

vram_status
size_parse(const char *text, uint64_t *out)
{
    return size_parse_as(text, SIZE_BARE_REFUSED, out);
}

vram_status
size_parse_as(const char *text, enum size_bare bare, uint64_t *out)
{
    char shown[TEXT_EXCERPT_LEN];
    char ch[16];

    if (text == NULL || text[0] == '\0')
        return error_set(VRAM_E_PARSE, "'': empty size");
    text_excerpt(text, shown, sizeof shown);

    const char *p = text;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        return error_set(VRAM_E_PARSE, "'%s': hexadecimal is not accepted", shown);
    if (!is_digit(*p))
        return error_set(
            VRAM_E_PARSE,
            "'%s': not a size (it must start with a digit, no sign or space)", shown);

    /* Whole part. Keep scanning past an overflow so that a syntax error
    ** further on is what gets reported. */
    uint64_t whole = 0;
    bool overflow = false;
    for (; is_digit(*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10u)
            overflow = true;
        else
            whole = whole * 10u + d;
    }

    const char *frac = NULL;
    size_t frac_len = 0;
    if (*p == '.') {
        frac = ++p;
        while (is_digit(*p))
            p++;
        frac_len = (size_t)(p - frac);
        if (frac_len == 0)
            return error_set(VRAM_E_PARSE, "'%s': expected digits after '.'", shown);
        if (frac_len > SIZE_FRACTION_DIGITS_MAX)
            return error_set(VRAM_E_PARSE, "'%s': more than %d digits after '.'", shown,
                             SIZE_FRACTION_DIGITS_MAX);
    }

    /* One space may come before the unit, as size_format prints it
    ** ("5.00 GiB"), never before the end. */
    if (*p == ' ' && is_alpha(p[1]))
        p++;
    /* Unit: K..P with an optional "B", "i" or "iB", or a lone "B" for bytes. */
    bool unit = *p != '\0';
    int shift = unit_shift(*p);
    if (shift > 0) {
        p++;
        if (to_upper(p[0]) == 'B')
            p++;
        else if (to_upper(p[0]) == 'I') /* "Gi" as Kubernetes writes it, or "GiB" */
            p += to_upper(p[1]) == 'B' ? 2 : 1;
    } else {
        shift = 0;
        if (to_upper(*p) == 'B')
            p++;
        else if (is_alpha(*p))
            return error_set(VRAM_E_PARSE, "'%s': unknown unit '%c'", shown, *p);
        else if (*p != '\0')
            return error_set(VRAM_E_PARSE, "'%s': unexpected %s after the number", shown,
                             show_char(*p, ch, sizeof ch));
    }
    if (*p != '\0') {
        char rest[TEXT_EXCERPT_LEN];
        return error_set(VRAM_E_PARSE, "'%s': unexpected '%s' after the unit", shown,
                         text_excerpt(p, rest, sizeof rest));
    }
    if (frac != NULL && shift == 0)
        return error_set(VRAM_E_PARSE, "'%s': a fraction needs a unit (e.g. 1.5G)",
                         shown);
    /* No unit: what the setting's convention says (0 is 0 in any unit). */
    if (!unit && bare == SIZE_BARE_MIB)
        shift = 20;
    else if (!unit && bare == SIZE_BARE_REFUSED && !overflow && whole != 0)
        return bare_refused(shown, whole);

    /* whole << shift fits exactly when whole <= UINT64_MAX >> shift, and
    ** then adding the fraction's bits (< 2^shift) cannot overflow. */
    if (overflow || whole > (UINT64_MAX >> shift))
        return error_set(VRAM_E_PARSE, "'%s': too large (the most is 16 EiB - 1 byte)",
                         shown);
    uint64_t bytes = whole << shift;
    if (frac != NULL)
        bytes += fraction_bits(frac, frac_len, shift);
    *out = bytes;
    return VRAM_OK;
}

char *
size_format(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    enum { LAST_UNIT = sizeof units / sizeof units[0] - 1 };

    if (buf == NULL || len == 0)
        return buf;
    if (bytes < 1024) {
        snprintf(buf, len, "%" PRIu64 " B", bytes);
        return buf;
    }
    int u = 0;
    while (u < LAST_UNIT && (bytes >> (10 * (u + 1))) != 0)
        u++;
    double v = (double)bytes / (double)(1ULL << (10 * u));
    /* 1023.996 KiB would print as "1024.00 KiB": say "1.00 MiB" instead. */
    if (u < LAST_UNIT && v >= 1023.995) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.2f %s", v, units[u]);
    return buf;
}

char *
size_format_setting(uint64_t bytes, char *buf, size_t len)
{
    static const char units[] = "KMGTP";
    if (buf == NULL || len == 0)
        return buf;
    int u = 0; /* the largest unit that divides BYTES exactly */
    while (u < 5 && bytes != 0 && (bytes & ((1ULL << (10 * (u + 1))) - 1)) == 0)
        u++;
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 "%s", bytes, bytes == 0 ? "" : "B");
    else
        snprintf(buf, len, "%" PRIu64 "%c", bytes >> (10 * u), units[u - 1]);
    return buf;
}

/* ------------------------------------------------------------------ */
/* Fractions                                                            */
/* ------------------------------------------------------------------ */

vram_status
fraction_parse(const char *text, double *out)
{
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,
                                   1e7,  1e8,  1e9,  1e10, 1e11, 1e12, 1e13,
                                   1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20};
    char shown[TEXT_EXCERPT_LEN];

    if (text == NULL || text[0] == '\0')
        return error_set(VRAM_E_PARSE, "'': empty fraction");
    text_excerpt(text, shown, sizeof shown);

    /* The value is DIGITS / 10^SCALE (/ 100 with '%'), DIGITS exact. */
    const char *p = text;
    if (!is_digit(*p))
        return error_set(
            VRAM_E_PARSE,
            "'%s': not a fraction (it must start with a digit, no sign or space)", shown);
    uint64_t digits = 0;
    int ndigits = 0, scale = 0;
    bool in_fraction = false;
    for (;; p++) {
        if (*p == '.' && !in_fraction) {
            in_fraction = true;
            if (!is_digit(p[1]))
                return error_set(VRAM_E_PARSE, "'%s': expected digits after '.'", shown);
            continue;
        }
        if (!is_digit(*p))
            break;
        if (++ndigits > FRACTION_DIGITS_MAX)
            return error_set(VRAM_E_PARSE, "'%s': more than %d digits", shown,
                             FRACTION_DIGITS_MAX);
        digits = digits * 10u + (uint64_t)(*p - '0');
        if (in_fraction)
            scale++;
    }
    bool percent = false;
    if (*p == '%') {
        percent = true;
        p++;
    }
    if (*p != '\0') {
        char rest[TEXT_EXCERPT_LEN];
        return error_set(VRAM_E_PARSE, "'%s': unexpected '%s'", shown,
                         text_excerpt(p, rest, sizeof rest));
    }

    /* Range checks on the exact integers, not on the rounded double. */
    uint64_t unit = 1;
    for (int i = 0; i < scale; i++)
        unit *= 10u;
    uint64_t ip = digits / unit, rem = digits % unit;
    uint64_t top = percent ? 100u : 1u;
    if (digits == 0)
        return error_set(VRAM_E_PARSE, "'%s': must be more than 0", shown);
    if (ip > top || (ip == top && rem != 0))
        return error_set(VRAM_E_PARSE, "'%s': more than %s", shown,
                         percent ? "100%" : "1");

    /* One division by an exact power of ten: correctly rounded. */
    *out = (double)digits / pow10[scale + (percent ? 2 : 0)];
    return VRAM_OK;
}
