/* SPDX-License-Identifier: MIT */
/*
** error.c -- status texts and the per-thread last-error line.
*/
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

/* The calling thread's last-error line; "" when the last call succeeded
** or set none. 512 bytes hold every message vram writes. */
static _Thread_local char last_error[512];

const char *
vram_strerror(vram_status status)
{
    switch (status) {
#define X(name, num, msg)                                                                \
    case name:                                                                           \
        return msg;
        VRAM_STATUS_LIST(X)
#undef X
    }
    return "unknown status";
}

const char *
vram_status_name(vram_status status)
{
    switch (status) {
#define X(name, num, msg)                                                                \
    case name:                                                                           \
        return #name;
        VRAM_STATUS_LIST(X)
#undef X
    }
    return NULL;
}

const char *
vram_last_error(void)
{
    return last_error;
}

/* error_set with the arguments in AP. */
static vram_status __attribute__((format(printf, 2, 0)))
error_setv(vram_status status, const char *fmt, va_list ap)
{
    /* Format into a copy first: callers may pass vram_last_error() itself
    ** as an argument, and vsnprintf's source and destination must not
    ** overlap. */
    char line[sizeof last_error];
    vsnprintf(line, sizeof line, fmt, ap);
    memcpy(last_error, line, sizeof line);
    return status;
}

vram_status
error_set(vram_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    status = error_setv(status, fmt, ap);
    va_end(ap);
    return status;
}

vram_status
error_set_at(vram_status status, const char *path, unsigned long long line,
             const char *fmt, ...)
{
    char reason[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return error_set(status, "%s:%llu: %s", path, line, reason);
}

void
error_clear(void)
{
    last_error[0] = '\0';
}

void
error_take(char *buf, size_t len)
{
    snprintf(buf, len, "%s", last_error);
}

vram_status
error_set_unlock(pthread_mutex_t *lock, vram_status status, const char *fmt, ...)
{
    pthread_mutex_unlock(lock);
    va_list ap;
    va_start(ap, fmt);
    status = error_setv(status, fmt, ap);
    va_end(ap);
    return status;
}
