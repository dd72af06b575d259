/* SPDX-License-Identifier: MIT */
/*
** tramp.c -- a library that overrides dlsym with the preload library's
** trampoline (src/preload/trampoline.h), for check_trampoline.sh: its
** PRE answers the name "tramp_marker" itself and lets every other name go
** to glibc's dlsym, to which the trampoline must jump (not call), so that
** RTLD_NEXT keeps meaning "after the caller".
*/
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "preload/trampoline.h"

__attribute__((visibility("hidden"))) void *tramp_glibc_dlsym;
__attribute__((visibility("hidden"))) void *tramp_pre(void **args);

static int marker;

void *
tramp_pre(void **args)
{
    if (tramp_glibc_dlsym == NULL) {
        static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.17", "GLIBC_2.2.5"};
        for (size_t i = 0; i < 3 && tramp_glibc_dlsym == NULL; i++)
            tramp_glibc_dlsym = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    }
    const char *name = args[1];
    return name != NULL && strcmp(name, "tramp_marker") == 0 ? (void *)&marker : NULL;
}

#ifndef PRELOAD_TRAMPOLINE_C
PRELOAD_TRAMPOLINE(dlsym, tramp_pre, tramp_glibc_dlsym)
#else
/* The C version, as interpose.c writes it where there is no assembly. */
__attribute__((visibility("default"))) void *
dlsym(void *handle, const char *symbol)
{
    void *args[4] = {handle, (void *)symbol, NULL, NULL};
    void *r = tramp_pre(args);
    void *(*f)(void *, const char *);
    memcpy(&f, &tramp_glibc_dlsym, sizeof f);
    if (r != NULL || f == NULL)
        return r;
    __attribute__((musttail)) return f(args[0], args[1]);
}
#endif
