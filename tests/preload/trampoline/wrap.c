/* SPDX-License-Identifier: MIT */
/*
** wrap.c -- a library that wraps a function of libc's the common way,
** dlsym(RTLD_NEXT, ...), for check_trampoline.sh: if a dlsym override
** made RTLD_NEXT relative to itself, the lookup would find this very
** function and it would call itself forever (here: exit 3 instead).
*/
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((visibility("default"))) int wrap_calls;

pid_t
getpid(void)
{
    pid_t (*next)(void);
    void *p = dlsym(RTLD_NEXT, "getpid");
    pid_t (*self)(void) = getpid;
    void *me;
    memcpy(&me, &self, sizeof me);
    if (p == NULL || p == me)
        _Exit(3); /* RTLD_NEXT found the wrapper itself */
    memcpy(&next, &p, sizeof next);
    wrap_calls++;
    return next();
}
