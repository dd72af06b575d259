/* SPDX-License-Identifier: MIT */
/*
** test_text.c -- the two guards of what vram shows and writes
** (src/base): text_safe, which makes another process's text safe for a
** terminal (escape sequences, line ends, C1 controls, reordering marks,
** bytes that are not UTF-8 become \xNN; good UTF-8 stays; twice is once),
** and outfile_open, which opens a file to write without following a link
** and without writing over a file that is not the caller's (a planted
** link, hard link or FIFO is refused and left as it was; the caller's own
** file is emptied or appended to).
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/outfile.h"
#include "base/text.h"

static const char *
safe(const char *in)
{
    static char out[TEXT_SAFE_LEN(256)];
    return text_safe(in, strlen(in), out, sizeof out);
}

static void
test_safe_escapes(void **state)
{
    (void)state;
    assert_string_equal(safe("python3"), "python3");
    assert_string_equal(safe("a\\b"), "a\\b"); /* a backslash stays */
    assert_string_equal(safe("\033[2J"), "\\x1b[2J");
    assert_string_equal(safe("\033]0;title\007"), "\\x1b]0;title\\x07");
    assert_string_equal(safe("a\nb\rc\td"), "a\\x0ab\\x0dc\\x09d");
    assert_string_equal(safe("\177"), "\\x7f");
    /* UTF-8 stays; C1 controls (U+009B is CSI) and bidi overrides do not. */
    assert_string_equal(safe("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"),
                        "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
    assert_string_equal(safe("\xc2\x9b" "2J"), "\\xc2\\x9b2J");
    assert_string_equal(safe("a\xe2\x80\xae" "b"), "a\\xe2\\x80\\xaeb");
    assert_string_equal(safe("\xe2\x81\xa6"), "\\xe2\\x81\\xa6"); /* U+2066 */
    /* Not UTF-8: stray bytes, a cut sequence, overlong, surrogate, past U+10FFFF. */
    assert_string_equal(safe("\xff\xfe"), "\\xff\\xfe");
    assert_string_equal(safe("\x80"), "\\x80");
    assert_string_equal(safe("\xe6\x97"), "\\xe6\\x97");
    assert_string_equal(safe("\xc0\xaf"), "\\xc0\\xaf");
    assert_string_equal(safe("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");
    assert_string_equal(safe("\xed\xa0\x80"), "\\xed\\xa0\\x80");
    assert_string_equal(safe("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
}

static void
test_safe_bounds(void **state)
{
    char out[8];
    (void)state;
    /* Cut before what does not fit whole: no half escape, no half character. */
    assert_string_equal(text_safe("abcdefghij", 10, out, sizeof out), "abcdefg");
    assert_string_equal(text_safe("abcd\033x", 6, out, sizeof out), "abcd");
    assert_string_equal(text_safe("abcdef\xc3\xa9", 8, out, sizeof out), "abcdef");
    assert_string_equal(text_safe("ab\0cd", 5, out, sizeof out), "ab"); /* a NUL ends it */
    assert_string_equal(text_safe(NULL, 3, out, sizeof out), "");
    assert_string_equal(text_safe("abc", 2, out, sizeof out), "ab");
    /* Twice is once: a safe text comes out as it went in. */
    char once[TEXT_SAFE_LEN(32)], twice[TEXT_SAFE_LEN(sizeof once)];
    const char *nasty = "x\033[2J\n\xff\xc2\x9b\\x1b";
    text_safe(nasty, strlen(nasty), once, sizeof once);
    assert_true(text_is_safe(once, strlen(once)));
    assert_false(text_is_safe(nasty, strlen(nasty)));
    assert_string_equal(text_safe(once, strlen(once), twice, sizeof twice), once);
}

/* ---- outfile_open ---- */

static char dir[] = "/tmp/vram_test_outfile_XXXXXX";

/* NAME in the test's directory: one buffer per name, kept for the test. */
static char *
in_dir(const char *name)
{
    static char path[16][256];
    static int k;
    for (int i = 0; i < k; i++)
        if (strcmp(strrchr(path[i], '/') + 1, name) == 0)
            return path[i];
    assert_true(k < 16);
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k++];
}

static void
put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static const char *
get(const char *path)
{
    static char buf[256];
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void
write_text(int fd, const char *text)
{
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(close(fd), 0);
}

static void
test_outfile(void **state)
{
    int fd = -1;
    (void)state;
    assert_non_null(mkdtemp(dir));

    /* New, then the caller's own: emptied, or appended to. */
    char *mine = in_dir("mine.csv");
    assert_int_equal(outfile_open(mine, OUTFILE_TRUNCATE, &fd), VRAM_OK);
    write_text(fd, "first\n");
    assert_int_equal(outfile_open(mine, OUTFILE_TRUNCATE, &fd), VRAM_OK);
    write_text(fd, "second\n");
    assert_string_equal(get(mine), "second\n");
    assert_int_equal(outfile_open(mine, OUTFILE_APPEND, &fd), VRAM_OK);
    write_text(fd, "third\n");
    assert_string_equal(get(mine), "second\nthird\n");

    /* A planted link, to a file or to nowhere: refused, nothing changed. */
    char *target = in_dir("target"), *slink = in_dir("link.csv");
    put(target, "precious\n");
    assert_int_equal(symlink(target, slink), 0);
    fd = -7;
    assert_int_equal(outfile_open(slink, OUTFILE_TRUNCATE, &fd), VRAM_E_IO);
    assert_int_equal(fd, -7);
    assert_non_null(strstr(vram_last_error(), "link.csv: a symbolic link: not followed"));
    assert_int_equal(outfile_open(slink, OUTFILE_APPEND, &fd), VRAM_E_IO);
    assert_string_equal(get(target), "precious\n");
    char *dangling = in_dir("dangling.csv");
    assert_int_equal(symlink(in_dir("nothing-there"), dangling), 0);
    assert_int_equal(outfile_open(dangling, OUTFILE_TRUNCATE, &fd), VRAM_E_IO);
    assert_int_equal(access(in_dir("nothing-there"), F_OK), -1); /* not created */

    /* A second name of another file: refused. */
    char *hard = in_dir("hard.csv");
    assert_int_equal(link(target, hard), 0);
    assert_int_equal(outfile_open(hard, OUTFILE_TRUNCATE, &fd), VRAM_E_IO);
    assert_non_null(strstr(vram_last_error(), "has 2 hard links: not written over"));
    assert_string_equal(get(target), "precious\n");

    /* Not a regular file: a FIFO (no reader: nothing waits) and a directory. */
    char *fifo = in_dir("fifo.csv");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(outfile_open(fifo, OUTFILE_TRUNCATE, &fd), VRAM_E_IO);
    assert_non_null(strstr(vram_last_error(), "fifo.csv: not a regular file"));
    assert_int_equal(outfile_open(dir, OUTFILE_TRUNCATE, &fd), VRAM_E_IO);
    if (access("/dev/full", W_OK) == 0) {
        assert_int_equal(outfile_open("/dev/full", OUTFILE_TRUNCATE, &fd), VRAM_E_IO);
        assert_string_equal(vram_last_error(), "/dev/full: not a regular file: not written");
    }
    /* But the null device: output thrown away, as asked. */
    assert_int_equal(outfile_open("/dev/null", OUTFILE_TRUNCATE, &fd), VRAM_OK);
    write_text(fd, "gone\n");

    /* Another user's file (root can make one here; the CLI tests use a
    ** real user). */
    if (geteuid() == 0) {
        char *theirs = in_dir("theirs.csv");
        put(theirs, "theirs\n");
        assert_int_equal(chown(theirs, 65534, 65534), 0);
        assert_int_equal(chmod(theirs, 0666), 0);
        assert_int_equal(outfile_open(theirs, OUTFILE_TRUNCATE, &fd), VRAM_E_IO);
        assert_non_null(strstr(vram_last_error(), "owned by uid 65534, not by you (uid 0): "
                                                  "not written over"));
        assert_string_equal(get(theirs), "theirs\n");
        unlink(theirs);
    }
    assert_int_equal(outfile_open(in_dir("no/such/dir.csv"), OUTFILE_TRUNCATE, &fd), VRAM_E_IO);
    assert_non_null(strstr(vram_last_error(), "No such file or directory"));

    const char *names[] = {"mine.csv", "target", "link.csv", "dangling.csv", "hard.csv",
                           "fifo.csv"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(in_dir(names[i]));
    assert_int_equal(rmdir(dir), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safe_escapes),
        cmocka_unit_test(test_safe_bounds),
        cmocka_unit_test(test_outfile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
