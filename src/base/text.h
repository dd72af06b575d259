/* SPDX-License-Identifier: MIT */
/*
** text.h -- text from elsewhere made safe to show: what a terminal, a
** table or a text file receives from vram when the text came from another
** process or a file (a command name, a group name, a path, a ledger's
** bytes, a trace's labels). Such text may hold escape sequences that clear
** a screen, set a window's title or move the cursor, line ends that forge
** a line of output, bidirectional overrides that show a name reversed, or
** bytes that are not UTF-8 at all.
**
** text_safe writes it as valid UTF-8 in which each of those bytes stands
** as the four characters \xNN (its hexadecimal value): control characters
** (C0, DEL), the C1 controls U+0080..U+009F (in UTF-8, \xc2\x80..\xc2\x9f:
** terminals take U+009B as CSI), the bidirectional and line-separating
** format characters (U+061C, U+200E, U+200F, U+2028..U+202E,
** U+2066..U+2069) and every byte that is not part of a well-formed UTF-8
** sequence (overlong forms, surrogates and values past U+10FFFF
** included). Everything else is copied, a backslash too: the text of a
** safe string comes out unchanged, so making it safe twice changes
** nothing. Each output kind has its own rules on top (Prometheus's label
** escapes, HTML's entities, JSON's): they start from this.
*/
#ifndef VRAM_BASE_TEXT_H
#define VRAM_BASE_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes text_safe may write for N bytes of input, with the NUL. */
#define TEXT_SAFE_LEN(n) (4 * (n) + 1)

/*
** TEXT (at most N bytes; a NUL ends it sooner; NULL reads as "") made
** safe as above into OUT (LEN bytes; always ends in NUL when LEN > 0).
** When OUT is too small the text is cut before the first character (or
** \xNN) that does not fit whole. Returns OUT.
*/
char *text_safe(const char *text, size_t n, char *out, size_t len);

/* Whether the N bytes at TEXT are already as text_safe writes them. */
bool text_is_safe(const char *text, size_t n);

/*
** The bytes of the character at P (N > 0 bytes left) when text_safe
** copies it as it is (1 to 4); 0 when text_safe escapes its first byte.
** For the writers of other formats (trace text, HTML) that replace what
** is not safe by a character of their own.
*/
size_t text_char_len(const char *p, size_t n);

#endif
