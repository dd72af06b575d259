/* SPDX-License-Identifier: MIT */
/*
** main.c -- check_trampoline.sh's program: the trampoline's own answer
** comes back, glibc's answers come back, and a wrapper's RTLD_NEXT still
** finds libc's function.
*/
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

extern int wrap_calls;

int
main(void)
{
    if (dlsym(RTLD_DEFAULT, "tramp_marker") == NULL) {
        puts("FAIL the trampoline's own answer did not come back");
        return 1;
    }
    if (dlsym(RTLD_DEFAULT, "printf") == NULL) {
        puts("FAIL glibc's answer did not come back");
        return 1;
    }
    if (getpid() <= 0 || wrap_calls != 1) {
        printf("FAIL the wrapper ran %d times\n", wrap_calls);
        return 1;
    }
    puts("ok");
    return 0;
}
