/* SPDX-License-Identifier: MIT */
/*
** log.c -- allocation logging (see log.h for the levels).
*/
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "base/log.h"
#include "base/outfile.h"

int log_level_current = LOG_OFF;

static struct {
    pthread_mutex_t lock; /* serializes lines and reconfiguration */
    FILE *file;           /* VRAM_LOG_FILE, or NULL for stderr */
} logger = {PTHREAD_MUTEX_INITIALIZER, NULL};

int
log_configure(int level, const char *path)
{
    int rc = 0;
    pthread_mutex_lock(&logger.lock);
    if (logger.file != NULL) {
        fclose(logger.file);
        logger.file = NULL;
    }
    if (path != NULL && path[0] != '\0') {
        /* Appended to, never through a link or into another user's file
        ** (outfile.h): the path comes from the environment of whatever
        ** program loads libvram. */
        int fd = -1;
        if (outfile_open(path, OUTFILE_APPEND, &fd) == VRAM_OK)
            logger.file = fdopen(fd, "a");
        if (logger.file == NULL) {
            if (fd >= 0)
                close(fd);
            rc = -1;
        } else {
            setvbuf(logger.file, NULL, _IOLBF, 0);
        }
    }
    log_level_current = level;
    pthread_mutex_unlock(&logger.lock);
    return rc;
}

FILE *
log_stream(void)
{
    return logger.file != NULL ? logger.file : stderr;
}

void
log_write(int level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    va_list ap;
    pthread_mutex_lock(&logger.lock);
    FILE *out = log_stream();
    fprintf(out, "vram[%ld]: ", (long)getpid());
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    pthread_mutex_unlock(&logger.lock);
}
