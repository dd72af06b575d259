/* SPDX-License-Identifier: MIT */
/*
** ldpreload.c -- the LD_PRELOAD with one library first (see ldpreload.h).
*/
#include <string.h>

#include "base/ldpreload.h"

/* The file name of PATH (after its last '/'), N bytes long. */
static const char *
base_name(const char *path, size_t n, size_t *base_len)
{
    const char *base = path;
    for (size_t i = 0; i < n; i++)
        if (path[i] == '/')
            base = path + i + 1;
    *base_len = n - (size_t)(base - path);
    return base;
}

/* Is the entry P (N bytes) LIB itself or a copy of it by another path? */
static bool
same_library(const char *p, size_t n, const char *lib, size_t lib_len)
{
    if (n == lib_len && memcmp(p, lib, n) == 0)
        return true;
    size_t bn, bl;
    const char *b = base_name(p, n, &bn);
    const char *l = base_name(lib, lib_len, &bl);
    return bn == bl && memcmp(b, l, bn) == 0;
}

bool
ldpreload_build(const char *lib, const char *current, char *out, size_t len)
{
    if (out == NULL || len == 0)
        return false;
    out[0] = '\0';
    size_t lib_len = lib != NULL ? strlen(lib) : 0;
    if (lib_len == 0 || strpbrk(lib, LDPRELOAD_SEPARATORS) != NULL || lib_len + 1 > len)
        return false;
    memcpy(out, lib, lib_len + 1);
    size_t used = lib_len;
    for (const char *p = current != NULL ? current : ""; *p != '\0';) {
        p += strspn(p, LDPRELOAD_SEPARATORS);
        size_t n = strcspn(p, LDPRELOAD_SEPARATORS);
        if (n == 0)
            break;
        if (!same_library(p, n, lib, lib_len)) {
            if (used + 1 + n + 1 > len) {
                out[0] = '\0';
                return false;
            }
            out[used++] = ':';
            memcpy(out + used, p, n);
            used += n;
            out[used] = '\0';
        }
        p += n;
    }
    return true;
}
