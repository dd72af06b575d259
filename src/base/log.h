/* SPDX-License-Identifier: MIT */
/*
** log.h -- allocation logging behind VRAM_LOG=1..4 (to stderr or
** VRAM_LOG_FILE). Levels, each including the ones below:
**   1  configuration, OOMs and backend errors
**   2  region events: memory obtained from or given back to the backend
**   3  allocations and frees of 1 MiB or more
**   4  every allocation and free
*/
#ifndef VRAM_BASE_LOG_H
#define VRAM_BASE_LOG_H

#include <stdio.h>

enum log_level {
    LOG_OFF = 0,
    LOG_CONFIG = 1,
    LOG_REGION = 2,
    LOG_LARGE = 3,
    LOG_ALL = 4
};

/* The current level; cheap enough for the hot path. */
extern int log_level_current;

static inline int
log_enabled(int level)
{
    return level <= log_level_current;
}

/* Set the level and destination (PATH NULL or "" = stderr; a file is
** appended to, opened by outfile_open: never through a link, never
** another user's). Returns 0, or -1 if PATH cannot or must not be opened
** (then stderr is used, and the last error says why). Called by
** vram_open. */
int log_configure(int level, const char *path);

/* Write one line "vram[pid]: ..." when LEVEL is enabled. Thread-safe. */
void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The stream log lines go to (for dumps). */
FILE *log_stream(void);

#endif
