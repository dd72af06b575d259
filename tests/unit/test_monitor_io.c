/* SPDX-License-Identifier: MIT */
/*
** test_monitor_io.c -- what a monitor sampling often (`vram top` at
** 10 Hz) costs the machine at a sample where nothing changed: no path
** under /proc opened for processes it already judged (their /proc/PID/statm
** stays open), and no listing of the ledger directory when it did not
** change. And that what does change still shows at once: a member killed
** is gone at its next judgment, a new group's ledger at the next sample, a
** removed one too.
**
** The library's open() and openat() calls resolve to the counting
** versions below (the test's own definitions come first at link time).
** Needs root for a private /dev/shm (unshare -m), so that the ledgers of
** other tests running meanwhile do not change the directory: exit 77
** (skipped) otherwise.
*/
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ledger/ledger.h"
#include "monitor/monitor.h"
#include "testutil.h"

#define UUID "GPU-00000000-1111-2222-3333-444444444444"
#define MIB (UINT64_C(1) << 20)

static atomic_int proc_opens; /* paths under /proc, or a /proc/PID directory's files */
static atomic_int dir_lists;  /* the ledger directory opened to be listed */

static void
count(int dir, const char *path, int flags)
{
    if (strncmp(path, "/proc/", 6) == 0 ||
        (dir != AT_FDCWD && (strcmp(path, "stat") == 0 || strcmp(path, "statm") == 0)))
        atomic_fetch_add(&proc_opens, 1);
    if (strncmp(path, "/dev/shm/vram-", 14) == 0 && (flags & O_DIRECTORY) != 0)
        atomic_fetch_add(&dir_lists, 1);
}

/* openat(2) of PATH in DIR, counted; AP holds the mode when FLAGS ask
** for one. */
static int
counted_open(int dir, const char *path, int flags, va_list ap)
{
    mode_t mode = 0;
    if ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE)
        mode = va_arg(ap, mode_t);
    count(dir, path, flags);
    return (int)syscall(SYS_openat, dir, path, flags, mode);
}

int
open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int fd = counted_open(AT_FDCWD, path, flags, ap);
    va_end(ap);
    return fd;
}

int
openat(int dir, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int fd = counted_open(dir, path, flags, ap);
    va_end(ap);
    return fd;
}

static void
sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The members alive, killed by the teardown whatever the test's outcome. */
#define MAX_MEMBERS 8
static pid_t members[MAX_MEMBERS];

/* A member of GROUP holding MIBS MiB until killed (or this process
** dies): its pid. */
static pid_t
member(const char *group, unsigned mibs)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        close(ready[0]);
        struct ledger *l = NULL;
        char ok = ledger_open(group, &l) == VRAM_OK &&
                  ledger_reserve(l, UUID, mibs * MIB, 0, NULL) == VRAM_OK;
        if (write(ready[1], &ok, 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    for (int i = 0; i < MAX_MEMBERS; i++)
        if (members[i] == 0) {
            members[i] = pid;
            break;
        }
    close(ready[1]);
    char ok = 0;
    assert_int_equal(read(ready[0], &ok, 1), 1);
    close(ready[0]);
    assert_true(ok);
    return pid;
}

static void
stop(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    for (int i = 0; i < MAX_MEMBERS; i++)
        if (members[i] == pid)
            members[i] = 0;
}

static int
stop_all(void **state)
{
    (void)state;
    for (int i = 0; i < MAX_MEMBERS; i++)
        if (members[i] != 0)
            stop(members[i]);
    return 0;
}

/* Take a sample of M: *VIEW; the opens it made into *PROC and *LISTS. */
static void
sample(struct monitor *m, const struct mon_view **view, int *proc, int *lists)
{
    atomic_store(&proc_opens, 0);
    atomic_store(&dir_lists, 0);
    assert_int_equal(monitor_sample(m, view), VRAM_OK);
    *proc = atomic_load(&proc_opens);
    *lists = atomic_load(&dir_lists);
}

static int
rows_of(const struct mon_view *v, pid_t pid)
{
    int n = 0;
    for (int i = 0; i < v->n_procs; i++)
        n += v->procs[i].pid == pid;
    return n;
}

static void
test_steady_state(void **state)
{
    (void)state;
    pid_t a1 = member("io-a", 1), a2 = member("io-a", 2), b1 = member("io-b", 3);
    struct monitor *m = NULL;
    const struct mon_view *v = NULL;
    int proc = 0, lists = 0;
    assert_int_equal(monitor_open(false, &m), VRAM_OK);

    /* The first sample judges each member in full. */
    sample(m, &v, &proc, &lists);
    assert_int_equal(v->n_procs, 3);
    assert_true(proc >= 3);
    assert_true(lists >= 1);

    /* A second later every judgment is due again: read through the
    ** descriptors kept, no /proc path opened; each resident set read. */
    sleep_ms(1200);
    sample(m, &v, &proc, &lists);
    assert_int_equal(v->n_procs, 3);
    assert_int_equal(proc, 0);
    for (int i = 0; i < v->n_procs; i++)
        assert_true(v->procs[i].rss_bytes > 0);

    /* Nothing changed since: the directory is not listed again. */
    sample(m, &v, &proc, &lists);
    assert_int_equal(v->n_procs, 3);
    assert_int_equal(proc, 0);
    assert_int_equal(lists, 0);

    /* A member killed (and reaped) is gone at its next judgment. */
    stop(a2);
    sleep_ms(1200);
    sample(m, &v, &proc, &lists);
    assert_int_equal(rows_of(v, a2), 0);
    assert_int_equal(rows_of(v, a1), 1);
    assert_int_equal(v->n_procs, 2);

    /* A new group shows at the very next sample. */
    sample(m, &v, &proc, &lists);
    pid_t c1 = member("io-c", 4);
    sample(m, &v, &proc, &lists);
    assert_int_equal(rows_of(v, c1), 1);
    assert_int_equal(v->n_procs, 3);

    /* And a group whose ledger is removed is gone at the next one. */
    sleep_ms(200);
    sample(m, &v, &proc, &lists);
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/vram-%u/io-b", (unsigned)geteuid());
    assert_int_equal(unlink(path), 0);
    sample(m, &v, &proc, &lists);
    assert_int_equal(rows_of(v, b1), 0);
    assert_int_equal(v->n_procs, 2);

    monitor_close(m);
}

int
main(void)
{
    if (geteuid() != 0 || unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) {
        printf("skipped: needs root for a private /dev/shm (unshare -m)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_steady_state, stop_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
