/* SPDX-License-Identifier: MIT */
/*
** outfile.c -- open a file vram writes without following a link and
** without writing over another user's file (see outfile.h).
*/
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/error.h"
#include "base/outfile.h"

/* Tries of create-or-open: a file removed between the two is tried again. */
#define OUTFILE_TRIES 4

/* Whether ST is the null device (/dev/null, character device 1:3): a
** place to throw output away, which no file could be written through. */
static bool
null_device(const struct stat *st)
{
    return S_ISCHR(st->st_mode) && major(st->st_rdev) == 1 && minor(st->st_rdev) == 3;
}

/* VRAM_OK when FD (SHOWN, not made by us) may be written; else why not. */
static vram_status
check_existing(int fd, const char *shown, bool *is_null)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return error_set(VRAM_E_IO, "%s: %s", shown, strerror(errno));
    *is_null = null_device(&st);
    if (*is_null)
        return VRAM_OK;
    if (!S_ISREG(st.st_mode))
        return error_set(VRAM_E_IO, "%s: not a regular file: not written", shown);
    if (st.st_uid != geteuid())
        return error_set(VRAM_E_IO,
                         "%s: owned by uid %ld, not by you (uid %ld): not written over",
                         shown, (long)st.st_uid, (long)geteuid());
    if (st.st_nlink > 1)
        return error_set(VRAM_E_IO,
                         "%s: has %lu hard links: not written over (another of its names "
                         "may be a file you must not change)",
                         shown, (unsigned long)st.st_nlink);
    return VRAM_OK;
}

vram_status
outfile_open(const char *path, enum outfile_how how, int *fd)
{
    if (path == NULL || fd == NULL)
        return error_set(VRAM_E_INVALID, "outfile_open: NULL argument");
    const char *shown = path;
    int append = how == OUTFILE_APPEND ? O_APPEND : 0;
    for (int attempt = 0; attempt < OUTFILE_TRIES; attempt++) {
        /* O_EXCL: a link (even a dangling one) in the way is EEXIST. */
        int f = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY | append, 0644);
        if (f >= 0) {
            *fd = f;
            return VRAM_OK;
        }
        if (errno != EEXIST)
            return error_set(VRAM_E_IO, "%s: %s", shown, strerror(errno));
        /* O_NONBLOCK: a FIFO in the way must not hold us; it is refused
        ** below (ENXIO without a reader, or by the check). */
        f = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | append);
        if (f < 0 && errno == ENOENT)
            continue; /* removed since: create it */
        if (f < 0 && errno == ELOOP)
            return error_set(VRAM_E_IO, "%s: a symbolic link: not followed (vram writes "
                                        "only a file itself; remove the link or give "
                                        "another path)",
                             shown);
        if (f < 0 && errno == ENXIO)
            return error_set(VRAM_E_IO, "%s: not a regular file: not written", shown);
        if (f < 0)
            return error_set(VRAM_E_IO, "%s: %s", shown, strerror(errno));
        bool is_null = false;
        vram_status st = check_existing(f, shown, &is_null);
        int flags = fcntl(f, F_GETFL);
        if (st == VRAM_OK && (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0))
            st = error_set(VRAM_E_IO, "%s: %s", shown, strerror(errno));
        if (st == VRAM_OK && how == OUTFILE_TRUNCATE && !is_null && ftruncate(f, 0) != 0)
            st = error_set(VRAM_E_IO, "%s: %s", shown, strerror(errno));
        if (st != VRAM_OK) {
            close(f);
            return st;
        }
        *fd = f;
        return VRAM_OK;
    }
    return error_set(VRAM_E_IO, "%s: removed and made again while being opened: not "
                                "written",
                     shown);
}
