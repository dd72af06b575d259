/* SPDX-License-Identifier: MIT */
/*
** driver_sym.h -- for the preload's test programs: a driver function found
** with dlsym, or the program ends with one line naming it (PROG: NAME not
** found) and exit status 1.
*/
#ifndef VRAM_TESTS_DRIVER_SYM_H
#define VRAM_TESTS_DRIVER_SYM_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static inline void *
driver_sym(const char *prog, void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (p == NULL) {
        fprintf(stderr, "%s: %s not found\n", prog, name);
        exit(1);
    }
    return p;
}

#endif
