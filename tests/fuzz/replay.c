/* SPDX-License-Identifier: MIT */
/*
** replay.c -- the main() of a fuzz target built without libFuzzer: it
** feeds every file of the directories (or files) given to
** LLVMFuzzerTestOneInput once, in name order, and says how many. CTest runs
** the checked-in corpora this way in every build (the ASan+UBSan one
** catches memory errors), so that an input that once crashed a target
** stays a regression test where clang's libFuzzer is not installed.
**
** Usage: fuzz_NAME_replay DIR_OR_FILE...
*/
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Run the target on the file at PATH; false if it cannot be read. */
static int
replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 0;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    size_t n;
    while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *more = realloc(buf, cap * 2);
            if (more == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = more;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf == NULL) {
        fprintf(stderr, "%s: out of memory\n", path);
        return 0;
    }
    /* A copy of exactly LEN bytes: ASan then sees a read past the input. */
    uint8_t *exact = malloc(len ? len : 1);
    if (exact == NULL) {
        free(buf);
        return 0;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 1;
}

int
main(int argc, char **argv)
{
    long done = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 2;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= !replay_file(argv[i]);
            done++;
            continue;
        }
        struct dirent **names = NULL;
        int n = scandir(argv[i], &names, NULL, alphasort);
        if (n < 0) {
            perror(argv[i]);
            return 2;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
            if (names[k]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                bad |= !replay_file(path);
                done++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("%s: %ld inputs replayed\n", argv[0], done);
    return bad ? 1 : 0;
}
