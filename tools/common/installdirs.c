/* SPDX-License-Identifier: MIT */
/*
** installdirs.c -- files installed beside the vram binary (see installdirs.h).
*/
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "installdirs.h"

bool
installed_path(const char *rel, char *buf, size_t len)
{
    char exe[PATH_MAX];
    buf[0] = '\0';
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/'); /* .../bin/vram -> .../bin */
    if (slash == NULL)
        return false;
    *slash = '\0';
    int w = snprintf(buf, len, "%s/%s", exe, rel);
    if (w < 0 || (size_t)w >= len) {
        buf[0] = '\0';
        return false;
    }
    if (access(buf, F_OK) != 0)
        return false;
    /* /usr/bin/../lib/x -> /usr/lib/x: the path users will read in messages. */
    char real[PATH_MAX];
    if (realpath(buf, real) != NULL && strlen(real) < len)
        memcpy(buf, real, strlen(real) + 1);
    return true;
}
