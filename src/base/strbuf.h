/* SPDX-License-Identifier: MIT */
/*
** strbuf.h -- appending to a fixed, NUL-terminated buffer.
*/
#ifndef VRAM_BASE_STRBUF_H
#define VRAM_BASE_STRBUF_H

#include <stddef.h>

/* Append to BUF (LEN bytes, holding a string) as snprintf would; once
** full, the tail is cut, which only shortens a printed value. */
void strbuf_append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
