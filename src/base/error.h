/* SPDX-License-Identifier: MIT */
/*
** error.h -- the thread's last-error line behind vram_last_error().
*/
#ifndef VRAM_BASE_ERROR_H
#define VRAM_BASE_ERROR_H

#include <pthread.h>
#include <stddef.h>

#include "vram.h"

/* Set the calling thread's last-error line (printf-style) and return
** STATUS, so that callers can write: return error_set(VRAM_E_PARSE, ...); */
vram_status error_set(vram_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Release LOCK, then error_set: the way out of a call that found something
** wrong while holding LOCK (the name says that it returns unlocked):
** return error_set_unlock(&s->lock, VRAM_E_INVALID, ...); */
vram_status error_set_unlock(pthread_mutex_t *lock, vram_status status, const char *fmt,
                             ...) __attribute__((format(printf, 3, 4)));

/* error_set for a parser: the line is "PATH:LINE: " and then FMT's text:
** return error_set_at(VRAM_E_PARSE, path, line, "bad field '%s'", f); */
vram_status error_set_at(vram_status status, const char *path, unsigned long long line,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Clear the calling thread's last-error line (at the start of a public
** call). */
void error_clear(void);

/* Copy the calling thread's last-error line into BUF (LEN bytes), e.g. a
** parser's reason before anything overwrites it. */
void error_take(char *buf, size_t len);

#endif
