/* SPDX-License-Identifier: MIT */
/*
** text.c -- text from elsewhere made safe to show (see text.h).
*/
#include <stdint.h>
#include <string.h>

#include "base/text.h"

/*
** The length of the well-formed UTF-8 sequence at P (at most N bytes), and
** its code point in *CP; 0 when P starts none (a stray continuation byte,
** a sequence cut short, an overlong form, a surrogate, past U+10FFFF).
** The ranges are those of the Unicode standard's table of well-formed
** byte sequences (chapter 3, table 3-7).
*/
static size_t
utf8_sequence(const unsigned char *p, size_t n, uint32_t *cp)
{
    unsigned char c = p[0];
    size_t len;
    uint32_t v;
    unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        v = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        v = c & 0x0f;
        lo = c == 0xe0 ? 0xa0 : 0x80; /* no overlong form */
        hi = c == 0xed ? 0x9f : 0xbf; /* no surrogate */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        v = c & 0x07;
        lo = c == 0xf0 ? 0x90 : 0x80; /* no overlong form */
        hi = c == 0xf4 ? 0x8f : 0xbf; /* nothing past U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    v = (v << 6) | (p[1] & 0x3f);
    for (size_t k = 2; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (p[k] & 0x3f);
    }
    *cp = v;
    return len;
}

/* Whether code point CP is shown escaped although well formed: a C1
** control, or a format character that reorders or breaks lines. */
static bool
escaped_code_point(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/*
** How the text at P (N bytes left) starts: *COPY bytes to copy as they
** are (0: the first byte is to be escaped). Returns the bytes it covers.
*/
static size_t
next_piece(const unsigned char *p, size_t n, size_t *copy)
{
    unsigned char c = p[0];
    if (c < 0x80) {
        *copy = c < 0x20 || c == 0x7f ? 0 : 1;
        return 1;
    }
    uint32_t cp = 0;
    size_t len = utf8_sequence(p, n, &cp);
    if (len == 0 || escaped_code_point(cp)) {
        *copy = 0;
        return 1; /* escaped byte by byte */
    }
    *copy = len;
    return len;
}

char *
text_safe(const char *text, size_t n, char *out, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    if (out == NULL || len == 0)
        return out;
    if (text == NULL)
        text = "";
    n = strnlen(text, n);
    const unsigned char *p = (const unsigned char *)text;
    size_t o = 0, i = 0;
    while (i < n) {
        size_t copy = 0, step = next_piece(p + i, n - i, &copy);
        if (copy > 0) {
            if (o + copy >= len)
                break;
            memcpy(out + o, p + i, copy);
            o += copy;
        } else {
            if (o + 4 >= len)
                break;
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[p[i] >> 4];
            out[o++] = hex[p[i] & 15];
        }
        i += step;
    }
    out[o] = '\0';
    return out;
}

bool
text_is_safe(const char *text, size_t n)
{
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        size_t copy = 0, step = next_piece(p + i, n - i, &copy);
        if (copy == 0)
            return false;
        i += step;
    }
    return true;
}

size_t
text_char_len(const char *p, size_t n)
{
    size_t copy = 0;
    if (n > 0)
        next_piece((const unsigned char *)p, n, &copy);
    return copy;
}
