/* SPDX-License-Identifier: MIT */
/*
** artifacts.c -- where a libFuzzer target built here keeps what it finds,
** when it is run by hand without -artifact_prefix: the build directory's
** artifacts/ (VRAM_FUZZ_ARTIFACTS, set by tests/fuzz.cmake), never the
** directory it was started from, which is often the source tree. Linked
** into every libFuzzer target; libFuzzer calls LLVMFuzzerInitialize before
** it reads its flags.
*/
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char flag[] = "-artifact_prefix=";
    for (int i = 1; i < *argc; i++)
        if (strncmp((*argv)[i], flag, sizeof flag - 1) == 0)
            return 0;
    (void)mkdir(VRAM_FUZZ_ARTIFACTS, 0755);
    /* A new argv, kept for the life of the process as libFuzzer needs it. */
    char **args = calloc((size_t)*argc + 2, sizeof *args);
    if (args == NULL)
        return 0;
    memcpy(args, *argv, (size_t)*argc * sizeof *args);
    args[*argc] = (char *)"-artifact_prefix=" VRAM_FUZZ_ARTIFACTS "/";
    *argv = args;
    (*argc)++;
    return 0;
}
