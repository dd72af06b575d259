/* SPDX-License-Identifier: MIT */
/*
** test_ledger.c -- the group ledger (src/ledger/ledger.h): quota
** arithmetic, devices by UUID and by index, processes and threads racing for one
** limit, members killed with or without the lock, recycled pids, fork and
** exec, file permissions and races at creation, a full ledger, pinned
** host memory and a monitor's handle.
**
** Children report through their exit status (never through cmocka, whose
** state is the parent's); each arms alarm() and PR_SET_PDEATHSIG so that
** none outlives a failed test, and the parent arms alarm() so that a hang
** fails instead of stalling ctest. Every group name holds the test's pid
** and every file is unlinked at the end.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ledger/ledger.h"
#include "ledger/ledger_testing.h"
#include "testutil.h"

#define UUID0 "GPU-00000000-1111-2222-3333-444444444444"
#define UUID1 "GPU-99999999-8888-7777-6666-555555555555"

/* Seconds before a hung test is killed (SIGALRM). */
#define WATCHDOG_S 120

/* ==== helpers ==== */

static uint64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void
sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A group name unique to this test process: "t<pid>-TAG". */
static void
group_name(char *out, size_t cap, const char *tag)
{
    snprintf(out, cap, "t%d-%s", (int)getpid(), tag);
}

static void
path_of(char *out, size_t cap, const char *group)
{
    snprintf(out, cap, "/dev/shm/vram-%u/%s", (unsigned)geteuid(), group);
}

static void
unlink_group(const char *group)
{
    char path[128];
    path_of(path, sizeof path, group);
    unlink(path);
}

/* Create GROUP's file by hand (the directory too): an fd, or -1. */
static int
create_file(const char *group)
{
    char dir[64], path[128];
    snprintf(dir, sizeof dir, "/dev/shm/vram-%u", (unsigned)geteuid());
    mkdir(dir, 0700);
    path_of(path, sizeof path, group);
    return open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
}

static struct ledger *
must_open(const char *group)
{
    struct ledger *l = NULL;
    vram_status st = ledger_open(group, &l);
    if (st != VRAM_OK)
        print_error("ledger_open(%s): %s\n", group, vram_last_error());
    assert_int_equal(st, VRAM_OK);
    assert_non_null(l);
    return l;
}

static struct ledger_snapshot *
snap(struct ledger *l)
{
    struct ledger_snapshot *s = malloc(sizeof *s);
    assert_non_null(s);
    assert_int_equal(ledger_snapshot(l, s), VRAM_OK);
    return s;
}

static const struct ledger_proc *
find_proc(const struct ledger_snapshot *s, pid_t pid)
{
    for (int i = 0; i < s->n_procs; i++)
        if (s->procs[i].pid == pid)
            return &s->procs[i];
    return NULL;
}

static int
find_device(const struct ledger_snapshot *s, const char *uuid)
{
    for (int d = 0; d < s->n_devices; d++)
        if (strcmp(s->uuid[d], uuid) == 0)
            return d;
    return -1;
}

/* fork(), with stdio flushed so that no buffered line is printed twice.
** In the child: die with the parent, and within 60 s at most. */
static pid_t
fork_child(void)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(60);
    }
    return pid;
}

/* The exit status of child PID; 128+N if killed by signal N. */
static int
wait_child(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

/* The state letter of PID in /proc/PID/stat; 0 if unreadable. */
static char
proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    return rp != NULL && rp[1] == ' ' ? rp[2] : 0;
}

/* Wait until PID is stopped (state T); false if it ended instead. No
** bound of time: a loaded machine may take long, and the test's watchdog
** (WATCHDOG_S) ends a wait that never ends. */
static bool
wait_stopped(pid_t pid)
{
    for (;;) {
        char st = proc_state(pid);
        if (st == 'T')
            return true;
        if (st == 0 || st == 'Z' || st == 'X')
            return false;
        sleep_ms(1);
    }
}

/* The number of threads /proc shows for PID (0: gone or unreadable). */
static int
proc_threads(pid_t pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *t = strstr(buf, "\nThreads:");
    return t != NULL ? atoi(t + 9) : 0;
}

/* Wait until the kernel shows PID dead (a zombie whose threads are all
** gone, or reaped), as /proc will tell the ledger; no bound of time (the
** watchdog's). A member's share must come back at the first look after. */
static void
wait_dead(pid_t pid)
{
    for (;;) {
        char st = proc_state(pid);
        if (st == 0 || ((st == 'Z' || st == 'X') && proc_threads(pid) <= 1))
            return;
        sleep_ms(1);
    }
}

/* In a child: a byte on FD says "ready"; then wait to be killed. */
static void
child_ready_and_wait(int fd)
{
    if (write(fd, "r", 1) != 1)
        _exit(90);
    for (;;)
        pause();
}

static void
read_ready(int fd)
{
    char b;
    assert_int_equal(read(fd, &b, 1), 1);
}

/* ==== arithmetic ==== */

static void
test_bad_group(void **state)
{
    (void)state;
    struct ledger *l = NULL;
    char too_long[LEDGER_GROUP_LEN + 8];
    memset(too_long, 'a', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = '\0'; /* 71 characters */
    char just_too_long[LEDGER_GROUP_LEN + 1];
    memset(just_too_long, 'b', LEDGER_GROUP_LEN);
    just_too_long[LEDGER_GROUP_LEN] = '\0'; /* 64 characters */
    const char *bad[] = {"../x", "", "a b", "a/b", "x\n", too_long, just_too_long};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ledger_open(bad[i], &l), VRAM_E_CONFIG);
        assert_null(l);
        assert_true(strstr(vram_last_error(), "group") != NULL);
        assert_int_equal(ledger_attach_existing(bad[i], &l), VRAM_E_CONFIG);
        assert_null(l);
    }
    assert_int_equal(ledger_open(NULL, &l), VRAM_E_INVALID);
    assert_int_equal(ledger_open("x", NULL), VRAM_E_INVALID);

    /* 63 characters, all the allowed kinds: fine. */
    char longest[LEDGER_GROUP_LEN];
    int n = snprintf(longest, sizeof longest, "t%d-Az09._-", (int)getpid());
    memset(longest + n, 'z', (size_t)(LEDGER_GROUP_LEN - 1 - n));
    longest[LEDGER_GROUP_LEN - 1] = '\0';
    l = must_open(longest);
    ledger_close(l);
    unlink_group(longest);
    ledger_close(NULL); /* no-op */
}

static void
test_reserve_limit(void **state)
{
    (void)state;
    char g[64];
    group_name(g, sizeof g, "limit");
    struct ledger *l = must_open(g);
    uint64_t gu = 7;

    assert_int_equal(ledger_reserve(l, UUID0, 60, 100, &gu), VRAM_OK);
    assert_int_equal(gu, 7); /* written on refusal only */
    assert_int_equal(ledger_reserve(l, UUID0, 50, 100, &gu), VRAM_E_OOM);
    assert_int_equal(gu, 60);
    assert_true(strstr(vram_last_error(), g) != NULL);
    assert_int_equal(ledger_reserve(l, UUID0, 40, 100, NULL),
                     VRAM_OK); /* exactly the limit */
    assert_int_equal(ledger_group_used(l, UUID0), 100);
    assert_int_equal(ledger_reserve(l, UUID0, 1, 100, &gu), VRAM_E_OOM);
    assert_int_equal(gu, 100);
    ledger_release(l, UUID0, 40);
    assert_int_equal(ledger_group_used(l, UUID0), 60);
    assert_int_equal(ledger_reserve(l, UUID0, 40, 100, NULL), VRAM_OK);
    /* No overflow: a huge request is refused, not wrapped. */
    assert_int_equal(ledger_reserve(l, UUID0, UINT64_MAX, 100, &gu), VRAM_E_OOM);
    assert_int_equal(ledger_reserve(l, UUID0, UINT64_MAX - 50, 100, &gu), VRAM_E_OOM);
    /* A limit lowered below the use refuses without underflow. */
    assert_int_equal(ledger_reserve(l, UUID0, 1, 50, &gu), VRAM_E_OOM);
    assert_int_equal(gu, 100);

    /* Releasing more than held stops at zero. */
    ledger_release(l, UUID0, 100);
    assert_int_equal(ledger_group_used(l, UUID0), 0);
    ledger_release(l, UUID0, 5);
    assert_int_equal(ledger_group_used(l, UUID0), 0);
    assert_int_equal(ledger_reserve(l, UUID0, 100, 100, NULL), VRAM_OK);
    ledger_release(l, UUID0, 100);

    /* Limit 0: no limit, still counted. */
    assert_int_equal(ledger_reserve(l, UUID1, 1ULL << 40, 0, NULL), VRAM_OK);
    assert_int_equal(ledger_reserve(l, UUID1, 1ULL << 40, 0, NULL), VRAM_OK);
    assert_int_equal(ledger_group_used(l, UUID1), 2ULL << 40);
    ledger_release(l, UUID1, 1ULL << 40);
    assert_int_equal(ledger_group_used(l, UUID1), 1ULL << 40);

    /* Peaks: this process's highest use per device; limits as last set. */
    struct ledger_snapshot *s = snap(l);
    const struct ledger_proc *me = find_proc(s, getpid());
    assert_non_null(me);
    int d0 = find_device(s, UUID0), d1 = find_device(s, UUID1);
    assert_true(d0 >= 0 && d1 >= 0);
    assert_int_equal(me->dev[d0].used, 0);
    assert_int_equal(me->dev[d0].peak, 100);
    assert_int_equal(me->dev[d1].used, 1ULL << 40);
    assert_int_equal(me->dev[d1].peak, 2ULL << 40);
    assert_int_equal(s->limit[d0], 100);
    assert_int_equal(s->limit[d1], 0);
    assert_int_equal(s->refusals[d0], 5);
    assert_int_equal(s->refusals[d1], 0);
    free(s);

    /* Bad arguments. */
    assert_int_equal(ledger_reserve(NULL, UUID0, 1, 0, NULL), VRAM_E_INVALID);
    assert_int_equal(ledger_reserve(l, NULL, 1, 0, NULL), VRAM_E_INVALID);
    ledger_release(NULL, UUID0, 1);
    ledger_release(l, NULL, 1);
    assert_int_equal(ledger_group_used(NULL, UUID0), 0);
    ledger_close(l);
    unlink_group(g);
}

static void
test_devices_by_uuid(void **state)
{
    (void)state;
    char g[64];
    group_name(g, sizeof g, "devs");
    struct ledger *l = must_open(g);

    /* Each device has its own limit and sum; found by UUID, not order. */
    assert_int_equal(ledger_reserve(l, UUID1, 80, 100, NULL), VRAM_OK);
    assert_int_equal(ledger_reserve(l, UUID0, 80, 100, NULL), VRAM_OK);
    assert_int_equal(ledger_reserve(l, UUID1, 30, 100, NULL), VRAM_E_OOM);
    assert_int_equal(ledger_group_used(l, UUID0), 80);
    assert_int_equal(ledger_group_used(l, UUID1), 80);
    ledger_release(l, UUID1, 80);
    assert_int_equal(ledger_group_used(l, UUID0), 80);
    assert_int_equal(ledger_group_used(l, UUID1), 0);
    assert_int_equal(ledger_group_used(l, "GPU-never-seen"), 0);
    ledger_release(l, "GPU-never-seen", 10); /* nothing to give back */

    /* UUIDs: non-empty, shorter than LEDGER_UUID_LEN. */
    char long_uuid[LEDGER_UUID_LEN + 1];
    memset(long_uuid, 'u', LEDGER_UUID_LEN);
    long_uuid[LEDGER_UUID_LEN] = '\0';
    assert_int_equal(ledger_reserve(l, "", 1, 0, NULL), VRAM_E_INVALID);
    assert_int_equal(ledger_reserve(l, long_uuid, 1, 0, NULL), VRAM_E_INVALID);

    /* Up to LEDGER_MAX_DEVICES devices; the next is a clear error. */
    for (int i = 2; i < LEDGER_MAX_DEVICES; i++) {
        char uuid[LEDGER_UUID_LEN];
        snprintf(uuid, sizeof uuid, "GPU-extra-%d", i);
        assert_int_equal(ledger_reserve(l, uuid, 1, 0, NULL), VRAM_OK);
    }
    long_uuid[LEDGER_UUID_LEN - 1] = '\0'; /* 47 characters: valid */
    assert_int_equal(ledger_reserve(l, long_uuid, 1, 0, NULL), VRAM_E_NO_DEVICE);
    assert_true(strstr(vram_last_error(), long_uuid) != NULL);
    assert_true(strstr(vram_last_error(), "16 devices") != NULL);
    /* Known devices still work. */
    assert_int_equal(ledger_reserve(l, UUID1, 1, 0, NULL), VRAM_OK);

    struct ledger_snapshot *s = snap(l);
    assert_int_equal(s->n_devices, LEDGER_MAX_DEVICES);
    assert_string_equal(s->uuid[0], UUID1);
    assert_string_equal(s->uuid[1], UUID0);
    assert_int_equal(s->used[0], 1);
    assert_int_equal(s->used[1], 80);
    free(s);
    ledger_close(l);
    unlink_group(g);
}

/* The hot path's calls: a device found once by UUID, then reserved,
** released and summed by its index, with the same arithmetic and errors. */
static void
test_devices_by_index(void **state)
{
    (void)state;
    char g[64];
    group_name(g, sizeof g, "index");
    struct ledger *l = must_open(g);

    int d1 = -1, d0 = -1, again = -1;
    assert_int_equal(ledger_device(l, UUID1, &d1), VRAM_OK);
    assert_int_equal(ledger_device(l, UUID0, &d0), VRAM_OK);
    assert_int_equal(ledger_device(l, UUID1, &again), VRAM_OK);
    assert_int_equal(d1, again);
    assert_int_not_equal(d0, d1);
    assert_int_equal(ledger_device(l, UUID0, NULL), VRAM_E_INVALID);
    assert_int_equal(ledger_device(l, "", &again), VRAM_E_INVALID);

    assert_int_equal(ledger_reserve_at(l, d1, 80, 100, NULL), VRAM_OK);
    uint64_t used = 0;
    assert_int_equal(ledger_reserve_at(l, d1, 30, 100, &used), VRAM_E_OOM);
    assert_int_equal(used, 80);
    assert_true(strstr(vram_last_error(), UUID1) != NULL);
    assert_int_equal(ledger_reserve_at(l, d0, 100, 100, NULL), VRAM_OK);
    assert_int_equal(ledger_group_used_at(l, d1), 80);
    assert_int_equal(ledger_group_used(l, UUID1), 80);
    assert_int_equal(ledger_group_used_at(l, d0), 100);
    /* The UUID calls and the index calls name the same counters. */
    ledger_release(l, UUID1, 30);
    ledger_release_at(l, d1, 20);
    assert_int_equal(ledger_group_used_at(l, d1), 30);
    ledger_release_at(l, d1, 1000); /* never below zero */
    assert_int_equal(ledger_group_used(l, UUID1), 0);
    assert_int_equal(ledger_group_used_at(l, d0), 100);

    /* An index out of range: refused, nothing counted anywhere. */
    assert_int_equal(ledger_reserve_at(l, -1, 1, 0, NULL), VRAM_E_INVALID);
    assert_int_equal(ledger_reserve_at(l, LEDGER_MAX_DEVICES, 1, 0, NULL), VRAM_E_INVALID);
    assert_true(strstr(vram_last_error(), "device index 16") != NULL);
    ledger_release_at(l, LEDGER_MAX_DEVICES, 1);
    ledger_release_at(l, -1, 1);
    assert_int_equal(ledger_group_used_at(l, LEDGER_MAX_DEVICES), 0);

    /* The limit is recorded by ledger_limit_set, not by each reservation
    ** by index (the UUID call records it); a change is recorded. */
    struct ledger_snapshot *s = snap(l);
    assert_int_equal(s->limit[d1], 0);
    free(s);
    ledger_limit_set(l, d1, 100);
    assert_int_equal(ledger_reserve(l, UUID0, 0, 250, NULL), VRAM_OK);
    s = snap(l);
    assert_int_equal(s->limit[d1], 100);
    assert_int_equal(s->limit[d0], 250);
    free(s);
    ledger_limit_set(l, d1, 300);
    ledger_limit_set(l, LEDGER_MAX_DEVICES, 300); /* out of range: nothing */
    assert_int_equal(ledger_reserve_at(l, d1, 1, 300, NULL), VRAM_OK);
    s = snap(l);
    assert_int_equal(s->limit[d1], 300);
    assert_int_equal(s->limit[d0], 250);
    assert_int_equal(s->used[d1], 1);
    assert_int_equal(s->procs[0].dev[d1].peak, 80);
    free(s);

    /* A monitoring handle finds no index to reserve with. */
    struct ledger *m = NULL;
    assert_int_equal(ledger_attach_existing(g, &m), VRAM_OK);
    assert_int_equal(ledger_device(m, UUID1, &again), VRAM_E_INVALID);
    assert_int_equal(ledger_reserve_at(m, d1, 1, 0, NULL), VRAM_E_INVALID);
    ledger_close(m);
    ledger_close(l);
    unlink_group(g);
}

/* ==== processes and threads against one limit ==== */

#define ST_PROCS 16
#define ST_THREADS 8
#define ST_LIMIT (64 * MiB)
#define ST_MS 500
#define ST_KEEP 8

/* In a MAP_SHARED page: what every reserver of every process sees. */
struct stress_shared {
    _Atomic uint64_t in_use; /* bytes granted and not yet given back */
    _Atomic uint64_t grants, refusals;
    _Atomic int violations;
};

struct stress_thread {
    struct ledger *l;
    struct stress_shared *sh;
    unsigned seed;
    int errors;
};

static void *
stress_main(void *arg)
{
    struct stress_thread *t = arg;
    struct stress_shared *sh = t->sh;
    uint64_t held[ST_KEEP];
    int n = 0;
    uint64_t t0 = now_ms();
    while (now_ms() - t0 < ST_MS) {
        if (n < ST_KEEP && rand_r(&t->seed) % 2 == 0) {
            uint64_t size = 1 + (uint64_t)rand_r(&t->seed) % (ST_LIMIT / 4);
            uint64_t gu = 0;
            vram_status st = ledger_reserve(t->l, UUID0, size, ST_LIMIT, &gu);
            if (st == VRAM_OK) {
                /* Counted after the grant, uncounted before the release:
                ** never more than the ledger's own sum. */
                uint64_t now = atomic_fetch_add(&sh->in_use, size) + size;
                if (now > ST_LIMIT)
                    atomic_fetch_add(&sh->violations, 1);
                atomic_fetch_add(&sh->grants, 1);
                held[n++] = size;
            } else if (st == VRAM_E_OOM) {
                atomic_fetch_add(&sh->refusals, 1);
                if (gu + size <= ST_LIMIT) /* refused though it fitted */
                    atomic_fetch_add(&sh->violations, 1);
            } else {
                t->errors++;
            }
        } else if (n > 0) {
            int k = (int)((unsigned)rand_r(&t->seed) % (unsigned)n);
            uint64_t size = held[k];
            held[k] = held[--n];
            atomic_fetch_sub(&sh->in_use, size);
            ledger_release(t->l, UUID0, size);
        }
    }
    while (n > 0) {
        atomic_fetch_sub(&sh->in_use, held[--n]);
        ledger_release(t->l, UUID0, held[n]);
    }
    return NULL;
}

/* A stress child: 0 = fine, 1 = a violation, 2 = errors, 3 = setup. */
static int
stress_child(struct ledger *inherited, const char *group, int index,
             struct stress_shared *sh)
{
    struct ledger *l = inherited, *opened = NULL;
    /* Half the children go on with the parent's handle, half open anew. */
    if (index % 2 == 0) {
        if (ledger_after_fork(inherited) != VRAM_OK)
            return 3;
    } else {
        if (ledger_open(group, &opened) != VRAM_OK)
            return 3;
        l = opened;
    }
    pthread_t th[ST_THREADS];
    struct stress_thread t[ST_THREADS];
    for (int i = 0; i < ST_THREADS; i++) {
        t[i] = (struct stress_thread){l, sh, (unsigned)(getpid() * 31 + i), 0};
        if (pthread_create(&th[i], NULL, stress_main, &t[i]) != 0)
            return 3;
    }
    int errors = 0;
    for (int i = 0; i < ST_THREADS; i++) {
        pthread_join(th[i], NULL);
        errors += t[i].errors;
    }
    ledger_close(opened);
    return atomic_load(&sh->violations) > 0 ? 1 : errors > 0 ? 2 : 0;
}

static void
test_processes_and_threads(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "stress");
    struct ledger *l = must_open(g);
    struct stress_shared *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);

    pid_t kids[ST_PROCS];
    for (int i = 0; i < ST_PROCS; i++) {
        kids[i] = fork_child();
        if (kids[i] == 0)
            exit(stress_child(l, g, i, sh)); /* exit: sanitizers report at exit */
    }
    for (int i = 0; i < ST_PROCS; i++)
        assert_int_equal(wait_child(kids[i]), 0);

    assert_int_equal(atomic_load(&sh->violations), 0);
    assert_int_equal(atomic_load(&sh->in_use), 0);
    assert_true(atomic_load(&sh->grants) > 100);
    assert_true(atomic_load(&sh->refusals) > 0); /* the limit was reached */
    assert_int_equal(ledger_group_used(l, UUID0), 0);
    struct ledger_snapshot *s = snap(l);
    int d = find_device(s, UUID0);
    assert_true(d >= 0);
    assert_int_equal(s->refusals[d], atomic_load(&sh->refusals)); /* one count each */
    assert_int_equal(s->n_procs, 1); /* the children's entries went with them */
    free(s);
    munmap(sh, sizeof *sh);
    ledger_close(l);
    unlink_group(g);
    alarm(0);
}

/* ==== dead and stopped members ==== */

/*
** "Does not wait for another process" is proven without a clock: the other
** process is stopped (SIGSTOP, at a fault point of its own path) for as
** long as the calls take, so a call that waited for it would never return
** and the test's watchdog (WATCHDOG_S) would end the test. The calls' times
** are printed, never judged: a loaded machine makes any call slow.
*/

/* Milliseconds since T0, as a double. */
static double
since_ms(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The slowest of: a reserve and release, the group's use, a snapshot and
** a new member joining; in ms (for the record only). False if a call
** failed. */
static bool
timed_calls(struct ledger *l, const char *g, struct ledger_snapshot *s, uint64_t bytes,
            uint64_t limit, double *worst)
{
    struct timespec t0;
    bool ok = true;
    *worst = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    vram_status st = ledger_reserve(l, UUID0, bytes, limit, NULL);
    ok = ok && (st == VRAM_OK || st == VRAM_E_OOM);
    if (st == VRAM_OK)
        ledger_release(l, UUID0, bytes);
    double t = since_ms(&t0);
    *worst = t > *worst ? t : *worst;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    (void)ledger_group_used(l, UUID0);
    ok = ok && ledger_snapshot(l, s) == VRAM_OK;
    t = since_ms(&t0);
    *worst = t > *worst ? t : *worst;
    if (g != NULL) {
        struct ledger *nl = NULL;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ok = ok && ledger_open(g, &nl) == VRAM_OK;
        t = since_ms(&t0);
        *worst = t > *worst ? t : *worst;
        ledger_close(nl);
    }
    return ok;
}

/*
** A member stopped (SIGSTOP) exactly inside each critical step of the
** ledger: others reserve, release, join, read the group's use and take
** snapshots without waiting, the quota holds with the stopped member's
** share counted, and once it is killed its share comes back within a
** second.
*/
static void
test_stopped_member(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    static const struct {
        enum ledger_fault_point point;
        const char *name;
    } points[] = {
        {LEDGER_FAULT_CLAIMED, "claimed"},   {LEDGER_FAULT_GRANTED, "granted"},
        {LEDGER_FAULT_RELEASE, "release"},   {LEDGER_FAULT_SLOT, "slot"},
        {LEDGER_FAULT_DEVICE, "device"},     {LEDGER_FAULT_RECLAIM, "reclaim"},
        {LEDGER_FAULT_REMOVING, "removing"},
    };
    struct ledger_snapshot *s = malloc(sizeof *s);
    assert_non_null(s);
    for (size_t k = 0; k < sizeof points / sizeof points[0]; k++) {
        char g[64];
        group_name(g, sizeof g, points[k].name);
        struct ledger *l = must_open(g);
        assert_int_equal(ledger_reserve(l, UUID1, 1, 0, NULL), VRAM_OK);
        pid_t kid = fork_child();
        if (kid == 0) {
            struct ledger *cl = NULL;
            enum ledger_fault_point pt = points[k].point;
            if (pt == LEDGER_FAULT_SLOT)
                ledger_test_stop_at(pt);
            if (ledger_open(g, &cl) != VRAM_OK)
                _exit(2);
            if (pt == LEDGER_FAULT_REMOVING) {
                ledger_leave(cl);
                ledger_test_stop_at(pt);
                ledger_remove_if_unused(cl); /* the parent's entry keeps it */
                _exit(0);
            }
            if (ledger_reserve(cl, UUID0, 30 * MiB, 0, NULL) != VRAM_OK)
                _exit(3);
            ledger_test_stop_at(pt);
            if (pt == LEDGER_FAULT_RELEASE)
                ledger_release(cl, UUID0, 10 * MiB);
            else if (pt == LEDGER_FAULT_DEVICE)
                ledger_reserve(cl, "GPU-stopped-device", 1, 0, NULL);
            else if (pt == LEDGER_FAULT_RECLAIM)
                ledger_group_used(cl, UUID0);
            else
                ledger_reserve(cl, UUID0, 20 * MiB, 0, NULL);
            _exit(4);
        }
        if (points[k].point == LEDGER_FAULT_REMOVING)
            ledger_leave(l); /* so that the child's removal gets to its check */
        if (!wait_stopped(kid))
            fail_msg("%s: the child did not stop", points[k].name);
        /* What the stopped child holds now: shown as in use, and counted
        ** against the limit (a claim being checked counts and does not
        ** show; one stopped between its two last steps counts twice). */
        uint64_t shown = 30 * MiB, held = 30 * MiB;
        if (points[k].point == LEDGER_FAULT_CLAIMED)
            held = 50 * MiB;
        if (points[k].point == LEDGER_FAULT_GRANTED)
            shown = 50 * MiB, held = 70 * MiB;
        if (points[k].point == LEDGER_FAULT_SLOT || points[k].point == LEDGER_FAULT_REMOVING)
            shown = held = 0;
        /* Every call returns while the member stays stopped. */
        double worst = 0;
        for (int rep = 0; rep < 20; rep++) {
            double w = 0;
            assert_true(timed_calls(l, g, s, 10 * MiB, 100 * MiB, &w));
            worst = w > worst ? w : worst;
        }
        print_message("%s: 20 rounds of calls beside a stopped member, the slowest %.2f ms\n",
                      points[k].name, worst);
        /* The quota holds with the stopped share counted. */
        assert_int_equal(ledger_group_used(l, UUID0), shown);
        if (held > 0) {
            assert_int_equal(ledger_reserve(l, UUID0, 100 * MiB - held + 1, 100 * MiB, NULL),
                             VRAM_E_OOM);
        }
        assert_int_equal(ledger_reserve(l, UUID0, 100 * MiB - held, 100 * MiB, NULL), VRAM_OK);
        ledger_release(l, UUID0, 100 * MiB - held);
        /* A removal stopped halfway is vetoed by whoever joins. */
        if (points[k].point == LEDGER_FAULT_REMOVING) {
            struct ledger *j = must_open(g);
            ledger_close(j);
            char path[128];
            path_of(path, sizeof path, g);
            assert_int_equal(access(path, F_OK), 0);
        }
        /* Killed: its share comes back at the first reservation once the
        ** kernel shows it dead (unreaped: a zombie). */
        assert_int_equal(kill(kid, SIGKILL), 0);
        wait_dead(kid);
        if (ledger_reserve(l, UUID0, 100 * MiB, 100 * MiB, NULL) != VRAM_OK)
            fail_msg("%s: the killed member's share did not come back: %s", points[k].name,
                     vram_last_error());
        ledger_release(l, UUID0, 100 * MiB);
        assert_int_equal(wait_child(kid), 128 + SIGKILL);
        assert_int_equal(ledger_snapshot(l, s), VRAM_OK);
        assert_null(find_proc(s, kid));
        ledger_close(l);
        unlink_group(g);
    }
    free(s);
    alarm(0);
}

/*
** A grant that moves its bytes from pending to in use while another
** member's sum is reading that very entry: the sum still counts them.
** W reserves 40 of 64 MiB and is stopped once it is found within the
** limit; R reserves 40 MiB and is stopped inside its sum, between the two
** words of W's entry; W finishes its grant; then R's sum goes on. A sum
** that read W's use before W moved its bytes and W's pending bytes after
** would miss them and grant R: 80 MiB on a 64 MiB quota.
*/
static void
test_sum_during_grant(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "sumgrant");
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t w = fork_child();
    if (w == 0) {
        struct ledger *wl = NULL;
        if (ledger_open(g, &wl) != VRAM_OK) /* entry 0: the first one R's sum reads */
            _exit(2);
        ledger_test_stop_at(LEDGER_FAULT_CHECKED);
        if (ledger_reserve(wl, UUID0, 40 * MiB, 64 * MiB, NULL) != VRAM_OK)
            _exit(3);
        child_ready_and_wait(ready[1]);
    }
    if (!wait_stopped(w))
        fail_msg("W did not stop after its check");
    pid_t r = fork_child();
    if (r == 0) {
        struct ledger *rl = NULL;
        if (ledger_open(g, &rl) != VRAM_OK)
            _exit(2);
        ledger_test_stop_at(LEDGER_FAULT_SUMMING);
        vram_status st = ledger_reserve(rl, UUID0, 40 * MiB, 64 * MiB, NULL);
        _exit(st == VRAM_E_OOM ? 0 : st == VRAM_OK ? 1 : 4);
    }
    if (!wait_stopped(r))
        fail_msg("R did not stop inside its sum");
    assert_int_equal(kill(w, SIGCONT), 0);
    read_ready(ready[0]); /* W's grant is complete: its 40 MiB in use */
    assert_int_equal(kill(r, SIGCONT), 0);
    int rc = wait_child(r);
    if (rc == 1)
        fail_msg("R was granted 40 MiB beside W's 40 MiB on a 64 MiB quota");
    assert_int_equal(rc, 0);
    assert_int_equal(kill(w, SIGKILL), 0);
    assert_int_equal(wait_child(w), 128 + SIGKILL);
    close(ready[0]);
    close(ready[1]);
    unlink_group(g);
    alarm(0);
}

#define RS_STOPS 1000
#define RS_LIMIT (64 * MiB)

/* Shared by the allocators of test_random_stops. */
struct rs_shared {
    _Atomic uint64_t in_use;
    _Atomic int violations, errors, stop;
    _Atomic uint64_t worst_us; /* the slowest call of an allocator, us */
};

/* An allocator: reserve and release at random until told to stop; every
** call timed. The victim (VICTIM) does the same but is stopped at random. */
static int
rs_allocator(const char *g, struct rs_shared *sh, bool victim)
{
    struct ledger *l = NULL;
    if (ledger_open(g, &l) != VRAM_OK) {
        fprintf(stderr, "allocator %d: %s\n", (int)getpid(), vram_last_error());
        return 2;
    }
    unsigned seed = (unsigned)getpid();
    uint64_t held[4];
    int n = 0;
    while (!atomic_load(&sh->stop)) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (n < 4 && rand_r(&seed) % 2 == 0) {
            uint64_t size = 1 + (uint64_t)rand_r(&seed) % (RS_LIMIT / 4);
            vram_status st = ledger_reserve(l, UUID0, size, RS_LIMIT, NULL);
            if (st == VRAM_OK) {
                if (!victim &&
                    atomic_fetch_add(&sh->in_use, size) + size > RS_LIMIT) {
                    fprintf(stderr, "allocator %d: over the limit\n", (int)getpid());
                    atomic_fetch_add(&sh->violations, 1);
                }
                held[n++] = size;
            } else if (st != VRAM_E_OOM) {
                fprintf(stderr, "allocator %d: %s\n", (int)getpid(), vram_last_error());
                atomic_fetch_add(&sh->errors, 1);
            }
        } else if (n > 0) {
            n--;
            if (!victim)
                atomic_fetch_sub(&sh->in_use, held[n]);
            ledger_release(l, UUID0, held[n]);
        }
        if (!victim) {
            uint64_t us = (uint64_t)(since_ms(&t0) * 1000);
            uint64_t w = atomic_load(&sh->worst_us);
            while (us > w && !atomic_compare_exchange_weak(&sh->worst_us, &w, us))
                ;
        }
    }
    while (n > 0) {
        n--;
        if (!victim)
            atomic_fetch_sub(&sh->in_use, held[n]);
        ledger_release(l, UUID0, held[n]);
    }
    return 0;
}

/*
** A member stopped 1,000 times at random points of its allocation path
** while two others allocate and snapshots are taken: every call returns
** while it is stopped (the times are printed, not judged), the quota holds
** (the victim's share included: the others' grants plus the victim's never
** pass the limit, checked by the ledger's own sum), and after SIGKILL of
** the stopped member its share comes back.
*/
static void
test_random_stops(void **state)
{
    (void)state;
    alarm(60); /* a member stopped holding a lock would hang the calls */
    char g[64];
    group_name(g, sizeof g, "randstop");
    struct ledger *l = must_open(g);
    struct rs_shared *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        kids[i] = fork_child();
        if (kids[i] == 0)
            exit(rs_allocator(g, sh, i == 0));
    }
    struct ledger_snapshot *s = malloc(sizeof *s);
    assert_non_null(s);
    unsigned seed = 12345;
    double worst = 0;
    int stale = 0;
    for (int k = 0; k < RS_STOPS; k++) {
        struct timespec nap = {0, (long)(rand_r(&seed) % 300) * 1000L};
        nanosleep(&nap, NULL);
        assert_int_equal(kill(kids[0], SIGSTOP), 0);
        int status = 0;
        assert_int_equal(waitpid(kids[0], &status, WUNTRACED), kids[0]);
        assert_true(WIFSTOPPED(status));
        double w = 0;
        assert_true(timed_calls(l, k % 50 == 0 ? g : NULL, s, 1 * MiB, RS_LIMIT, &w));
        worst = w > worst ? w : worst;
        stale += s->stale;
        /* The ledger's own sum never passes the limit. */
        int d = find_device(s, UUID0);
        if (d >= 0 && s->used[d] > RS_LIMIT) {
            fprintf(stderr, "snapshot: %" PRIu64 " bytes in use, over the limit\n", s->used[d]);
            atomic_fetch_add(&sh->violations, 1);
        }
        if (k + 1 < RS_STOPS)
            assert_int_equal(kill(kids[0], SIGCONT), 0);
    }
    /* The victim is stopped: kill it; its share comes back. */
    atomic_store(&sh->stop, 1);
    assert_int_equal(kill(kids[0], SIGKILL), 0);
    assert_int_equal(wait_child(kids[0]), 128 + SIGKILL);
    for (int i = 1; i < 3; i++)
        assert_int_equal(wait_child(kids[i]), 0);
    assert_int_equal(ledger_group_used(l, UUID0), 0);
    assert_int_equal(ledger_reserve(l, UUID0, RS_LIMIT, RS_LIMIT, NULL), VRAM_OK);
    ledger_release(l, UUID0, RS_LIMIT);
    print_message("random stops: %d, slowest call %.2f ms here, %.2f ms in the allocators, "
                  "%d stale snapshots\n",
                  RS_STOPS, worst, (double)atomic_load(&sh->worst_us) / 1000, stale);
    assert_int_equal(atomic_load(&sh->violations), 0);
    assert_int_equal(atomic_load(&sh->errors), 0);
    free(s);
    munmap(sh, sizeof *sh);
    ledger_close(l);
    unlink_group(g);
    alarm(0);
}

/* A child that holds 80 MiB of GROUP and waits to be killed. */
static pid_t
spawn_holder(const char *group, uint64_t bytes)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t kid = fork_child();
    if (kid == 0) {
        struct ledger *cl = NULL;
        if (ledger_open(group, &cl) != VRAM_OK ||
            ledger_reserve(cl, UUID0, bytes, 0, NULL))
            _exit(2);
        child_ready_and_wait(p[1]);
    }
    read_ready(p[0]);
    close(p[0]);
    close(p[1]);
    return kid;
}

static void
test_kill_usage_holder(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "usedead");
    struct ledger *l = must_open(g);
    uint64_t gu = 0;

    /* Reaped: gone at the next reserve. */
    pid_t kid = spawn_holder(g, 80 * MiB);
    assert_int_equal(ledger_reserve(l, UUID0, 50 * MiB, 100 * MiB, &gu), VRAM_E_OOM);
    assert_int_equal(gu, 80 * MiB);
    assert_int_equal(kill(kid, SIGKILL), 0);
    assert_int_equal(wait_child(kid), 128 + SIGKILL);
    assert_int_equal(ledger_reserve(l, UUID0, 50 * MiB, 100 * MiB, NULL), VRAM_OK);
    assert_int_equal(ledger_group_used(l, UUID0), 50 * MiB);

    /* Not reaped (a zombie): gone at the first reservation once the kernel
    ** shows it dead, all the same. */
    kid = spawn_holder(g, 50 * MiB);
    assert_int_equal(ledger_group_used(l, UUID0), 100 * MiB);
    assert_int_equal(kill(kid, SIGKILL), 0);
    wait_dead(kid);
    assert_int_equal(ledger_reserve(l, UUID0, 50 * MiB, 100 * MiB, NULL), VRAM_OK);
    assert_int_equal(proc_state(kid), 'Z');
    assert_int_equal(ledger_group_used(l, UUID0), 100 * MiB);
    assert_int_equal(wait_child(kid), 128 + SIGKILL);

    struct ledger_snapshot *s = snap(l);
    assert_int_equal(s->n_procs, 1);
    free(s);
    ledger_close(l);
    unlink_group(g);
    alarm(0);
}

static void
test_recycled_pid(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "recycled");
    struct ledger *l = must_open(g);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t kid = fork_child();
    if (kid == 0) {
        struct ledger *cl = NULL;
        if (ledger_open(g, &cl) != VRAM_OK ||
            ledger_reserve(cl, UUID0, 70 * MiB, 0, NULL))
            _exit(2);
        /* As if this pid now belonged to another process than the entry's. */
        ledger_test_set_start_time(cl, 12345);
        child_ready_and_wait(p[1]);
    }
    read_ready(p[0]);
    /* The child is alive, but its entry names a process that is gone. */
    assert_int_equal(kill(kid, 0), 0);
    assert_int_equal(ledger_group_used(l, UUID0), 0);
    struct ledger_snapshot *s = snap(l);
    assert_null(find_proc(s, kid));
    assert_int_equal(s->n_procs, 1);
    free(s);
    kill(kid, SIGKILL);
    assert_int_equal(wait_child(kid), 128 + SIGKILL);
    close(p[0]);
    close(p[1]);
    ledger_close(l);
    unlink_group(g);
    alarm(0);
}

/* Descriptors this process has open. */
static int
open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

/* A thread of test_watched_members: looks, and counts wrong sums. */
struct looker {
    struct ledger *l;
    uint64_t want;
    int wrong;
};

static void *
looker_main(void *arg)
{
    struct looker *k = arg;
    for (int i = 0; i < 300; i++)
        if (ledger_group_used(k->l, UUID0) != k->want)
            k->wrong++;
    return NULL;
}

/*
** A look for the dead with other members alive judges each through /proc
** once: after that their pidfds are polled, one system call whatever
** their number, and only a member whose process ended is judged again.
** (Before, every forced look -- each cuMemGetInfo in the preload library
** -- read /proc once per other member.)
*/
static void
test_watched_members(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "watched");
    int fds0 = open_fds();
    struct ledger *l = must_open(g);
    assert_int_equal(ledger_reserve(l, UUID0, 1 * MiB, 0, NULL), VRAM_OK);
    enum { KIDS = 6 };
    pid_t kid[KIDS];
    for (int k = 0; k < KIDS; k++)
        kid[k] = spawn_holder(g, 10 * MiB);
    assert_int_equal(ledger_group_used(l, UUID0), 61 * MiB); /* each judged once */

    uint64_t r0 = ledger_test_proc_reads();
    for (int i = 0; i < 100; i++)
        assert_int_equal(ledger_group_used(l, UUID0), 61 * MiB);
    assert_int_equal(ledger_test_proc_reads() - r0, 0);

    /* Threads looking at once share the watch; one that finds it in use
    ** judges through /proc: every sum right either way. */
    struct looker lk[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        lk[i] = (struct looker){.l = l, .want = 61 * MiB};
        assert_int_equal(pthread_create(&th[i], NULL, looker_main, &lk[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(lk[i].wrong, 0);
    }

    /* Reaped: gone at the next look, judged once more. */
    assert_int_equal(kill(kid[0], SIGKILL), 0);
    assert_int_equal(wait_child(kid[0]), 128 + SIGKILL);
    r0 = ledger_test_proc_reads();
    assert_int_equal(ledger_group_used(l, UUID0), 51 * MiB);
    assert_int_equal(ledger_test_proc_reads() - r0, 1);

    /* Not reaped (a zombie): its pidfd reports the end all the same. */
    assert_int_equal(kill(kid[1], SIGKILL), 0);
    /* The leader shows Z while the kernel still tears other threads down
    ** (a sanitizer's own, here): the pidfd reports the end once they are
    ** all gone. */
    wait_dead(kid[1]);
    assert_int_equal(proc_state(kid[1]), 'Z');
    assert_int_equal(ledger_group_used(l, UUID0), 41 * MiB);
    assert_int_equal(wait_child(kid[1]), 128 + SIGKILL);

    /* A fork child judges the others afresh (the parent's pidfds are not
    ** its own), then watches them as the parent does. */
    pid_t c = fork_child();
    if (c == 0) {
        if (ledger_after_fork(l) != VRAM_OK)
            _exit(2);
        if (ledger_group_used(l, UUID0) != 41 * MiB)
            _exit(3);
        uint64_t r = ledger_test_proc_reads();
        for (int i = 0; i < 20; i++)
            if (ledger_group_used(l, UUID0) != 41 * MiB)
                _exit(4);
        _exit(ledger_test_proc_reads() == r ? 0 : 5);
    }
    assert_int_equal(wait_child(c), 0);
    assert_int_equal(ledger_group_used(l, UUID0), 41 * MiB);

    /* A second handle watches the four alive with pidfds of its own, and
    ** closing it closes them. */
    int fds1 = open_fds();
    struct ledger *l2 = must_open(g);
    assert_int_equal(ledger_group_used(l2, UUID0), 41 * MiB);
    assert_true(open_fds() >= fds1 + 4);
    ledger_close(l2);
    assert_int_equal(open_fds(), fds1);

    /* A member that leaves and lives on: its pidfd is closed at the next
    ** look, even with no other member left before its entry. */
    int go[2], left[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(left), 0);
    pid_t stay = fork_child();
    if (stay == 0) {
        struct ledger *cl = NULL;
        char b;
        if (ledger_open(g, &cl) != VRAM_OK || ledger_reserve(cl, UUID0, 10 * MiB, 0, NULL))
            _exit(2);
        if (write(left[1], "r", 1) != 1 || read(go[0], &b, 1) != 1)
            _exit(3);
        ledger_leave(cl);
        child_ready_and_wait(left[1]);
    }
    read_ready(left[0]);
    assert_int_equal(ledger_group_used(l, UUID0), 51 * MiB);
    int fds2 = open_fds();
    assert_int_equal(write(go[1], "g", 1), 1);
    read_ready(left[0]);
    assert_int_equal(ledger_group_used(l, UUID0), 41 * MiB);
    assert_int_equal(open_fds(), fds2 - 1);
    kill(stay, SIGKILL);
    assert_int_equal(wait_child(stay), 128 + SIGKILL);
    for (int i = 0; i < 2; i++) {
        close(go[i]);
        close(left[i]);
    }

    for (int k = 2; k < KIDS; k++) {
        kill(kid[k], SIGKILL);
        assert_int_equal(wait_child(kid[k]), 128 + SIGKILL);
    }
    assert_int_equal(ledger_group_used(l, UUID0), 1 * MiB);
    ledger_close(l);
    assert_int_equal(open_fds(), fds0); /* every pidfd closed */
    unlink_group(g);
    alarm(0);
}

/* Replace every pidfd this process holds with a copy of FD (as a host
** program that closed them and reused the numbers would); how many. */
static int
replace_pidfds(int fd)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char target[64];
        ssize_t k = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
        if (k <= 0)
            continue;
        target[k] = '\0';
        if (strcmp(target, "anon_inode:[pidfd]") == 0) {
            assert_true(dup2(fd, atoi(e->d_name)) >= 0);
            n++;
        }
    }
    closedir(d);
    return n;
}

/*
** A pidfd is a hint: if the host program closed the watch's descriptors
** and reused their numbers for ones that never report, a death goes
** unseen by the watch, but a reservation that would be refused judges
** every member through /proc first: a dead member never causes a refusal.
*/
static void
test_watch_fooled(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "fooled");
    struct ledger *l = must_open(g);
    assert_int_equal(ledger_reserve(l, UUID0, 1 * MiB, 0, NULL), VRAM_OK);
    pid_t kid[2] = {spawn_holder(g, 10 * MiB), spawn_holder(g, 10 * MiB)};
    assert_int_equal(ledger_group_used(l, UUID0), 21 * MiB); /* both watched now */
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(replace_pidfds(p[0]), 2); /* an empty pipe: never readable */

    assert_int_equal(kill(kid[0], SIGKILL), 0);
    assert_int_equal(wait_child(kid[0]), 128 + SIGKILL);
    /* 11 + 20 fits the 35 MiB limit only without the dead member's 10. */
    assert_int_equal(ledger_reserve(l, UUID0, 20 * MiB, 35 * MiB, NULL), VRAM_OK);
    assert_int_equal(ledger_group_used(l, UUID0), 31 * MiB);

    kill(kid[1], SIGKILL);
    assert_int_equal(wait_child(kid[1]), 128 + SIGKILL);
    ledger_close(l);
    close(p[0]);
    close(p[1]);
    unlink_group(g);
    alarm(0);
}

/* ==== fork, exec, leave ==== */

/* The child of test_fork: 0 = its entry is its own and the parent's stays. */
static int
fork_child_checks(struct ledger *l, pid_t parent)
{
    if (ledger_after_fork(l) != VRAM_OK)
        return 2;
    struct ledger_snapshot *s = malloc(sizeof *s);
    if (s == NULL || ledger_snapshot(l, s) != VRAM_OK)
        return 3;
    if (find_proc(s, getpid()) != NULL) /* no entry before its first reservation */
        return 4;
    if (ledger_reserve(l, UUID0, 5 * MiB, 0, NULL) != VRAM_OK)
        return 5;
    if (ledger_snapshot(l, s) != VRAM_OK)
        return 6;
    const struct ledger_proc *me = find_proc(s, getpid()), *dad = find_proc(s, parent);
    int d = find_device(s, UUID0);
    if (me == NULL || dad == NULL || d < 0 || s->n_procs != 2)
        return 7;
    if (me->dev[d].used != 5 * MiB || dad->dev[d].used != 20 * MiB ||
        s->used[d] != 25 * MiB)
        return 8;
    /* The child gives back only its own; more than that stops at zero. */
    ledger_release(l, UUID0, 100 * MiB);
    if (ledger_group_used(l, UUID0) != 20 * MiB)
        return 9;
    if (ledger_reserve(l, UUID0, 7 * MiB, 0, NULL) != VRAM_OK)
        return 10;
    free(s);
    return 0;
}

static void
test_fork(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "fork");
    struct ledger *l = must_open(g);
    assert_int_equal(ledger_reserve(l, UUID0, 20 * MiB, 0, NULL), VRAM_OK);
    pid_t parent = getpid();
    pid_t kid = fork_child();
    if (kid == 0)
        exit(fork_child_checks(l, parent));
    assert_int_equal(wait_child(kid), 0);
    /* The child held 7 MiB when it exited: gone with it. */
    assert_int_equal(ledger_group_used(l, UUID0), 20 * MiB);

    /* A child that skips ledger_after_fork is noticed by its pid. */
    kid = fork_child();
    if (kid == 0) {
        if (ledger_reserve(l, UUID0, 3 * MiB, 0, NULL) != VRAM_OK)
            _exit(2);
        struct ledger_snapshot *s = malloc(sizeof *s);
        if (s == NULL || ledger_snapshot(l, s) != VRAM_OK || s->n_procs != 2)
            _exit(3);
        const struct ledger_proc *me = find_proc(s, getpid());
        _exit(me != NULL && me->dev[0].used == 3 * MiB ? 0 : 4);
    }
    assert_int_equal(wait_child(kid), 0);
    assert_int_equal(ledger_group_used(l, UUID0), 20 * MiB);

    struct ledger_snapshot *s = snap(l);
    const struct ledger_proc *me = find_proc(s, getpid());
    assert_non_null(me);
    assert_int_equal(me->dev[0].used, 20 * MiB);
    assert_int_equal(s->n_procs, 1);
    free(s);
    assert_int_equal(ledger_after_fork(NULL), VRAM_E_INVALID);
    ledger_close(l);
    unlink_group(g);
    alarm(0);
}

/* Run by test_exec after execve (argv: --exec-open GROUP): the entry this
** pid left before the exec must be taken over empty. */
static int
exec_helper(const char *group)
{
    struct ledger *l = NULL;
    if (ledger_open(group, &l) != VRAM_OK)
        return 2;
    if (ledger_group_used(l, UUID0) != 0)
        return 3;
    struct ledger_snapshot *s = malloc(sizeof *s);
    if (s == NULL || ledger_snapshot(l, s) != VRAM_OK)
        return 4;
    int mine = 0;
    for (int i = 0; i < s->n_procs; i++)
        mine += s->procs[i].pid == getpid();
    free(s);
    ledger_close(l);
    return mine == 1 ? 0 : 5;
}

static void
test_exec(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "exec");
    struct ledger *l = must_open(g);
    pid_t kid = fork_child();
    if (kid == 0) {
        struct ledger *cl = NULL;
        if (ledger_open(g, &cl) != VRAM_OK || ledger_reserve(cl, UUID0, 9 * MiB, 0, NULL))
            _exit(20);
        execl("/proc/self/exe", "test_ledger", "--exec-open", g, (char *)NULL);
        _exit(21);
    }
    assert_int_equal(wait_child(kid), 0);
    assert_int_equal(ledger_group_used(l, UUID0), 0);
    ledger_close(l);
    unlink_group(g);
    alarm(0);
}

static void
test_leave_and_second_handle(void **state)
{
    (void)state;
    char g[64];
    group_name(g, sizeof g, "leave");
    struct ledger *l = must_open(g);
    assert_int_equal(ledger_reserve(l, UUID0, 10, 0, NULL), VRAM_OK);

    /* A second handle in the same program shares the entry and its use. */
    struct ledger *l2 = must_open(g);
    assert_int_equal(ledger_group_used(l2, UUID0), 10);
    assert_int_equal(ledger_reserve(l2, UUID0, 5, 0, NULL), VRAM_OK);
    ledger_close(l2);
    assert_int_equal(ledger_group_used(l, UUID0), 15);
    struct ledger_snapshot *s = snap(l);
    assert_int_equal(s->n_procs, 1);
    free(s);

    /* Leave: the use goes back; a later reserve makes a new entry. */
    ledger_leave(l);
    assert_int_equal(ledger_group_used(l, UUID0), 0);
    s = snap(l);
    assert_int_equal(s->n_procs, 0);
    free(s);
    ledger_release(l, UUID0, 10); /* nothing held: no effect */
    assert_int_equal(ledger_reserve(l, UUID0, 4, 0, NULL), VRAM_OK);
    assert_int_equal(ledger_group_used(l, UUID0), 4);
    ledger_leave(NULL);
    ledger_close(l);
    unlink_group(g);
}

/* An unused ledger is removed; one with a live member is not; a handle
** to a removed ledger cannot revive it, and the next open makes a new one. */
static void
test_remove_if_unused(void **state)
{
    (void)state;
    char g[64], path[128];
    group_name(g, sizeof g, "remove");
    path_of(path, sizeof path, g);
    struct ledger *l = must_open(g);
    assert_int_equal(ledger_reserve(l, UUID0, 10, 0, NULL), VRAM_OK);
    assert_false(ledger_remove_if_unused(l)); /* we are a member */
    assert_int_equal(access(path, F_OK), 0);
    ledger_leave(l);
    assert_true(ledger_remove_if_unused(l));
    assert_int_equal(access(path, F_OK), -1);
    assert_true(ledger_remove_if_unused(l)); /* already gone: still true */
    struct ledger *mon = NULL;
    assert_int_equal(ledger_attach_existing(g, &mon), VRAM_E_NO_DEVICE);
    struct ledger *l2 = must_open(g); /* a new file */
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(ledger_group_used(l2, UUID0), 0);
    ledger_close(l2);
    ledger_close(l);
    unlink_group(g);
}

/* Pinned host memory in the entry (never below zero, no entry needed
** first, refused to a monitoring handle); a monitor's snapshot reads each
** process's resident set, keeps a killed member at most about a second
** (its remembered judgment), and ledger_current says when the name no
** longer names the file it mapped. */
static void
test_host_memory_and_monitor(void **state)
{
    (void)state;
    char g[64];
    group_name(g, sizeof g, "host");
    struct ledger *l = must_open(g);
    assert_int_equal(ledger_host_add(l, 3 << 20), VRAM_OK); /* makes the entry */
    assert_int_equal(ledger_reserve(l, UUID0, 10, 0, NULL), VRAM_OK);
    struct ledger *mon = NULL;
    assert_int_equal(ledger_attach_existing(g, &mon), VRAM_OK);
    assert_int_equal(ledger_host_add(mon, 1), VRAM_E_INVALID);
    struct ledger_snapshot *s = snap(mon);
    const struct ledger_proc *p = find_proc(s, getpid());
    assert_non_null(p);
    assert_int_equal(p->pinned, 3 << 20);
    assert_true(p->rss > 0);
    assert_int_equal(p->dev[0].used, 10);
    assert_int_equal(s->used[0], 10); /* pinned memory is no device's */
    free(s);
    ledger_host_sub(l, 1 << 20);
    s = snap(mon);
    assert_int_equal(find_proc(s, getpid())->pinned, 2 << 20);
    free(s);
    ledger_host_sub(l, 100 << 20);
    s = snap(mon);
    assert_int_equal(find_proc(s, getpid())->pinned, 0);
    free(s);

    /* A member killed: gone from the monitor's snapshots within 3 s (its
    ** judgment is remembered 1 s; the machine may be loaded). */
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(WATCHDOG_S);
        struct ledger *c = NULL;
        char ok = ledger_open(g, &c) == VRAM_OK &&
                  ledger_reserve(c, UUID0, 5, 0, NULL) == VRAM_OK;
        if (write(ready[1], &ok, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char ok = 0;
    assert_int_equal(read(ready[0], &ok, 1), 1);
    assert_true(ok);
    s = snap(mon);
    assert_non_null(find_proc(s, child));
    free(s);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    /* Reaped: a later snapshot of the monitor leaves it out (a monitor
    ** trusts its judgment of a live entry for a while; no bound of time
    ** here but the watchdog's). */
    for (bool gone = false; !gone; sleep_ms(50)) {
        s = snap(mon);
        gone = find_proc(s, child) == NULL;
        free(s);
    }
    close(ready[0]);
    close(ready[1]);

    /* The name made anew is another file: the handle is no longer current. */
    assert_true(ledger_current(mon));
    ledger_leave(l);
    ledger_close(l);
    unlink_group(g);
    assert_false(ledger_current(mon));
    l = must_open(g);
    assert_false(ledger_current(mon));
    struct ledger *mon2 = NULL;
    assert_int_equal(ledger_attach_existing(g, &mon2), VRAM_OK);
    assert_true(ledger_current(mon2));
    ledger_close(mon2);
    ledger_close(mon);
    ledger_close(l);
    unlink_group(g);
}

/* ==== the group's use at once and its peak (L5) ==== */

static pid_t member_child(const char *group, uint64_t bytes, int ready_fd);

static struct ledger *peak_l;

static void *
peak_thread(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg * 2654435761u + 1;
    for (int i = 0; i < 2000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t b = 1 + x % 4;
        if (ledger_reserve(peak_l, UUID0, b, 0, NULL) == VRAM_OK)
            ledger_release(peak_l, UUID0, b);
    }
    return NULL;
}

/*
** The ledger keeps the most the group held at once on each device, and
** the members that used it, whatever became of them: members that left,
** were killed, or lived shorter than any sampling. What a member leaves
** (by leaving or dying) leaves the group's use at once, so a later peak
** is not inflated by it; threads racing leave it exact.
*/
static void
test_group_peak(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "peak");
    struct ledger *l = must_open(g);
    assert_int_equal(ledger_reserve(l, UUID0, 30, 0, NULL), VRAM_OK);
    struct ledger_snapshot *s = snap(l);
    assert_int_equal(s->peak[0], 30);
    assert_int_equal(s->users[0], 1);
    free(s);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t kid = member_child(g, 50, ready[1]);
    read_ready(ready[0]);
    ledger_release(l, UUID0, 30);
    assert_int_equal(ledger_reserve(l, UUID0, 20, 0, NULL), VRAM_OK);
    s = snap(l);
    assert_int_equal(s->peak[0], 80); /* 30 + 50 at once; 70 now */
    assert_int_equal(s->used[0], 70);
    assert_int_equal(s->users[0], 2);
    free(s);
    /* The member killed: its 50 leave the use at once when it is
    ** reclaimed, so 70 more make 90 at once, not 140. */
    kill(kid, SIGKILL);
    assert_int_equal(wait_child(kid), 128 + SIGKILL);
    assert_int_equal(ledger_group_used(l, UUID0), 20);
    assert_int_equal(ledger_reserve(l, UUID0, 70, 0, NULL), VRAM_OK);
    s = snap(l);
    assert_int_equal(s->peak[0], 90);
    free(s);
    /* A second member that lives a moment: still counted, and its
    ** refusal too. */
    pid_t brief = fork_child();
    if (brief == 0) {
        struct ledger *cl = NULL;
        if (ledger_open(g, &cl) != VRAM_OK || ledger_reserve(cl, UUID0, 400, 0, NULL) ||
            ledger_reserve(cl, UUID0, 1000, 1000, NULL) != VRAM_E_OOM)
            _exit(2);
        ledger_leave(cl);
        _exit(0);
    }
    assert_int_equal(wait_child(brief), 0);
    s = snap(l);
    assert_int_equal(s->peak[0], 490); /* 90 + 400 at once */
    assert_int_equal(s->users[0], 3);
    assert_int_equal(s->refusals[0], 1);
    assert_int_equal(s->used[0], 90);
    free(s);
    /* This process leaves: what it held leaves the use at once too. */
    ledger_leave(l);
    assert_int_equal(ledger_reserve(l, UUID0, 500, 0, NULL), VRAM_OK);
    s = snap(l);
    assert_int_equal(s->peak[0], 500);
    free(s);
    ledger_release(l, UUID0, 500);

    /* Threads racing: when all is given back, nothing is left in use at
    ** once (a reservation of 600 then makes the peak 600 exactly). */
    peak_l = l;
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, peak_thread, (void *)(uintptr_t)i), 0);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    s = snap(l);
    assert_true(s->peak[0] == 500); /* 8 threads x at most 4 never made more */
    free(s);
    assert_int_equal(ledger_reserve(l, UUID0, 600, 0, NULL), VRAM_OK);
    s = snap(l);
    assert_int_equal(s->peak[0], 600);
    free(s);
    ledger_close(l);
    close(ready[0]);
    close(ready[1]);
    unlink_group(g);
    alarm(0);
}

/* ==== readers against a file its owner controls ==== */

/* A member of GROUP in a child holding BYTES on UUID0, never touching its
** mapping again (the parent cuts the file under it): its pid. */
static pid_t
member_child(const char *group, uint64_t bytes, int ready_fd)
{
    pid_t kid = fork_child();
    if (kid == 0) {
        struct ledger *cl = NULL;
        if (ledger_open(group, &cl) != VRAM_OK || ledger_reserve(cl, UUID0, bytes, 0, NULL))
            _exit(2);
        child_ready_and_wait(ready_fd);
    }
    return kid;
}

/* Rewrite the file at PATH in place: SIZE bytes of FILL_BYTE, or of
** pseudo-random bytes when FILL_BYTE < 0, keeping a valid header when
** HEAD (the first 16 bytes of HEAD_FROM). */
static void
rewrite(const char *path, size_t size, int fill_byte, const void *head_from)
{
    unsigned char *buf = malloc(size);
    assert_non_null(buf);
    uint64_t x = 88172645463325252ULL;
    for (size_t i = 0; i < size; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = fill_byte >= 0 ? (unsigned char)fill_byte : (unsigned char)x;
    }
    if (head_from != NULL)
        memcpy(buf, head_from, 16);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, buf, size, 0), (ssize_t)size);
    close(fd);
    free(buf);
}

/*
** A reader (the monitors' handle) survives whatever the owner does to the
** file at any moment: cut to nothing or to a page (a mapping would fault
** with SIGBUS), grown, filled with zeros or garbage, replaced by another
** file or a FIFO, and all of it racing its snapshots. Each time it gets a
** status with one line naming the file, or a snapshot; never a signal or
** a hang; and its handle is no longer current when the name no longer
** names the file it read.
*/
static void
test_reader_hostile_file(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64], path[128];
    group_name(g, sizeof g, "hostile");
    path_of(path, sizeof path, g);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t kid = member_child(g, 7, ready[1]);
    read_ready(ready[0]);
    struct ledger *r = NULL;
    assert_int_equal(ledger_attach_existing(g, &r), VRAM_OK);
    struct ledger_snapshot *s = snap(r);
    assert_non_null(find_proc(s, kid));
    free(s);
    s = malloc(sizeof *s);
    assert_non_null(s);
    unsigned char head[16];
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, head, sizeof head, 0), (ssize_t)sizeof head);
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    size_t size = (size_t)sb.st_size;
    unsigned char *good = malloc(size);
    assert_non_null(good);
    assert_int_equal(pread(fd, good, size, 0), (ssize_t)size);
    close(fd);

    /* Cut to nothing: one line with the size, the handle no longer current. */
    assert_int_equal(truncate(path, 0), 0);
    assert_int_equal(ledger_snapshot(r, s), VRAM_E_IO);
    assert_non_null(strstr(vram_last_error(), "has 0 bytes"));
    assert_non_null(strstr(vram_last_error(), g));
    assert_false(ledger_current(r));
    assert_int_equal(ledger_group_used(r, UUID0), 0);
    /* Cut just past the header: its first device record is cut. */
    assert_int_equal(truncate(path, 100), 0);
    fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, good, 100, 0), 100);
    close(fd);
    assert_int_equal(ledger_snapshot(r, s), VRAM_E_IO);
    assert_non_null(strstr(vram_last_error(), "has 100 bytes"));
    /* Its size again, all zeros: not a ledger's header. */
    assert_int_equal(truncate(path, (off_t)size), 0);
    rewrite(path, size, 0, NULL);
    assert_int_equal(ledger_snapshot(r, s), VRAM_E_IO);
    assert_non_null(strstr(vram_last_error(), "does not start as a vram ledger does"));
    /* Garbage behind a valid header: read, whatever it says. */
    rewrite(path, size, -1, head);
    vram_status st = ledger_snapshot(r, s);
    assert_true(st == VRAM_OK || st == VRAM_E_IO);
    assert_true(s->n_procs >= 0 && s->n_procs <= LEDGER_MAX_PROCS);
    /* Every byte 0xff: n_slots and every count at their widest. */
    rewrite(path, size, 0xff, head);
    st = ledger_snapshot(r, s);
    assert_true(st == VRAM_OK || st == VRAM_E_IO);
    /* Grown: the first part is read; the name now names a file of another
    ** size, so the handle is not current; a new handle is refused. */
    fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, good, size, 0), (ssize_t)size);
    close(fd);
    assert_int_equal(ledger_snapshot(r, s), VRAM_OK);
    assert_non_null(find_proc(s, kid));
    assert_int_equal(truncate(path, (off_t)size * 2), 0);
    assert_int_equal(ledger_snapshot(r, s), VRAM_OK);
    assert_false(ledger_current(r));
    struct ledger *r2 = NULL;
    assert_int_equal(ledger_attach_existing(g, &r2), VRAM_E_IO);
    assert_non_null(strstr(vram_last_error(), "bytes, not the"));
    assert_int_equal(truncate(path, (off_t)size), 0);

    /* Cut, grown and rewritten over and over while a child process opens
    ** and reads it: the child must end by itself, never by a signal. */
    pid_t reader = fork_child();
    if (reader == 0) {
        struct ledger_snapshot *cs = malloc(sizeof *cs);
        for (int i = 0; cs != NULL && i < 3000; i++) {
            struct ledger *h = NULL;
            if (ledger_attach_existing(g, &h) == VRAM_OK) {
                (void)ledger_snapshot(h, cs);
                (void)ledger_group_used(h, UUID0);
                (void)ledger_current(h);
                ledger_close(h);
            }
            (void)ledger_snapshot(r, cs);
        }
        _exit(cs != NULL ? 0 : 3);
    }
    for (int i = 0; i < 3000 && waitpid(reader, NULL, WNOHANG) == 0; i++) {
        switch (i % 5) {
        case 0:
            (void)truncate(path, 0);
            break;
        case 1:
            (void)truncate(path, (off_t)size / 2);
            break;
        case 2:
            (void)truncate(path, (off_t)size * 3);
            break;
        default:
            fd = open(path, O_WRONLY);
            if (fd >= 0) {
                (void)ftruncate(fd, (off_t)size);
                (void)pwrite(fd, good, size, 0);
                close(fd);
            }
        }
    }
    assert_int_equal(wait_child(reader), 0);

    /* Replaced by another file: the reader keeps reading the one it
    ** opened, and knows that the name names another. */
    struct ledger *r3 = NULL;
    fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    assert_int_equal(pwrite(fd, good, size, 0), (ssize_t)size);
    close(fd);
    assert_int_equal(ledger_attach_existing(g, &r3), VRAM_OK);
    char other[160];
    snprintf(other, sizeof other, "%s.new", path);
    fd = open(other, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, good, size, 0), (ssize_t)size);
    close(fd);
    assert_int_equal(rename(other, path), 0);
    assert_int_equal(ledger_snapshot(r3, s), VRAM_OK);
    assert_false(ledger_current(r3));
    ledger_close(r3);

    /* A FIFO in its place: refused at once, not waited on. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    uint64_t t0 = now_ms();
    assert_int_equal(ledger_attach_existing(g, &r3), VRAM_E_IO);
    assert_true(now_ms() - t0 < 5000);
    assert_int_equal(unlink(path), 0);

    kill(kid, SIGKILL);
    assert_int_equal(wait_child(kid), 128 + SIGKILL);
    ledger_close(r);
    ledger_close(r2);
    free(good);
    free(s);
    close(ready[0]);
    close(ready[1]);
    unlink_group(g);
    alarm(0);
}

/*
** A reader removes a group whose members are all gone (in a child
** process, which maps the file for the removal's steps), never one with a
** live member, and a joiner racing it ends in the one file that stays.
*/
static void
test_reader_removes(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64], path[128];
    group_name(g, sizeof g, "readrm");
    path_of(path, sizeof path, g);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t kid = member_child(g, 5, ready[1]);
    read_ready(ready[0]);
    struct ledger *r = NULL;
    assert_int_equal(ledger_attach_existing(g, &r), VRAM_OK);
    assert_false(ledger_remove_if_unused(r)); /* a live member */
    assert_int_equal(access(path, F_OK), 0);
    kill(kid, SIGKILL);
    assert_int_equal(wait_child(kid), 128 + SIGKILL);
    struct ledger_snapshot *s = snap(r);
    assert_int_equal(s->n_procs, 0); /* left out, not reclaimed: a reader writes nothing */
    free(s);
    assert_true(ledger_remove_if_unused(r));
    assert_int_equal(access(path, F_OK), -1);
    ledger_close(r);

    /* Removals racing joiners: every joiner ends in a file that is there. */
    for (int round = 0; round < 20; round++) {
        struct ledger *j = must_open(g);
        ledger_leave(j); /* made, then empty: removable */
        assert_int_equal(ledger_attach_existing(g, &r), VRAM_OK);
        pid_t joiner = fork_child();
        if (joiner == 0) {
            struct ledger *cl = NULL;
            if (ledger_open(g, &cl) != VRAM_OK || ledger_reserve(cl, UUID0, 1, 0, NULL))
                _exit(2);
            child_ready_and_wait(ready[1]);
        }
        (void)ledger_remove_if_unused(r);
        read_ready(ready[0]);
        struct ledger *check = NULL;
        assert_int_equal(ledger_attach_existing(g, &check), VRAM_OK);
        s = snap(check);
        assert_non_null(find_proc(s, joiner));
        free(s);
        ledger_close(check);
        kill(joiner, SIGKILL);
        assert_int_equal(wait_child(joiner), 128 + SIGKILL);
        ledger_close(r);
        ledger_close(j);
        unlink_group(g);
    }
    close(ready[0]);
    close(ready[1]);
    alarm(0);
}

/* ==== the file ==== */

static void
test_permissions(void **state)
{
    (void)state;
    char g[64], path[128];
    group_name(g, sizeof g, "perm");
    path_of(path, sizeof path, g);
    struct ledger *l = must_open(g), *l2 = NULL;
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0600);
    assert_int_equal(sb.st_uid, geteuid());

    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(ledger_open(g, &l2), VRAM_E_IO);
    assert_null(l2);
    assert_true(strstr(vram_last_error(), "0644") != NULL);
    assert_int_equal(ledger_attach_existing(g, &l2), VRAM_E_IO);
    assert_int_equal(chmod(path, 0600), 0);
    l2 = must_open(g);
    ledger_close(l2);
    l2 = NULL;

    /* Another user's file of our name (only root can make one here). */
    if (geteuid() == 0) {
        assert_int_equal(chown(path, 4242, (gid_t)-1), 0);
        assert_int_equal(ledger_open(g, &l2), VRAM_E_IO);
        assert_true(strstr(vram_last_error(), "4242") != NULL);
        assert_int_equal(chown(path, 0, (gid_t)-1), 0);
    }
    ledger_close(l);
    unlink_group(g);

    /* A file of another layout (size) is refused, not reinterpreted. */
    group_name(g, sizeof g, "size");
    int fd = create_file(g);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    close(fd);
    assert_int_equal(ledger_open(g, &l2), VRAM_E_IO);
    assert_true(strstr(vram_last_error(), "4096") != NULL);
    unlink_group(g);
}

static void
test_takeover(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    struct ledger *l = NULL;

    /* A creator that died before sizing the file: taken over at once. */
    group_name(g, sizeof g, "orphan");
    int fd = create_file(g);
    assert_true(fd >= 0);
    close(fd);
    l = must_open(g);
    assert_int_equal(ledger_reserve(l, UUID0, 1, 2, NULL), VRAM_OK);
    ledger_close(l);
    unlink_group(g);

    /* A creator stopped while writing the header: nobody waits for it (the
    ** next opener writes the same header); killed, nothing is left. */
    group_name(g, sizeof g, "stuck");
    pid_t kid = fork_child();
    if (kid == 0) {
        struct ledger *cl = NULL;
        ledger_test_stop_at(LEDGER_FAULT_HEADER);
        _exit(ledger_open(g, &cl) == VRAM_OK ? 0 : 2);
    }
    assert_true(wait_stopped(kid));
    l = must_open(g); /* returns while the creator stays stopped */
    assert_int_equal(ledger_reserve(l, UUID0, 1, 2, NULL), VRAM_OK);
    kill(kid, SIGKILL);
    assert_int_equal(wait_child(kid), 128 + SIGKILL);
    assert_int_equal(ledger_reserve(l, UUID0, 1, 2, NULL), VRAM_OK);
    assert_int_equal(ledger_group_used(l, UUID0), 2);
    ledger_close(l);
    unlink_group(g);
    alarm(0);
}

#define RACERS 8

static void
test_concurrent_creators(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "race");
    int go[2], ready[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(ready), 0);
    pid_t kids[RACERS];
    for (int i = 0; i < RACERS; i++) {
        kids[i] = fork_child();
        if (kids[i] == 0) {
            char b;
            close(go[1]);
            if (read(go[0], &b, 1) != 0) /* EOF: all start at once */
                _exit(2);
            struct ledger *cl = NULL;
            if (ledger_open(g, &cl) != VRAM_OK || ledger_reserve(cl, UUID0, 1, 0, NULL))
                _exit(3);
            child_ready_and_wait(ready[1]);
        }
    }
    close(go[1]);
    for (int i = 0; i < RACERS; i++)
        read_ready(ready[0]);
    /* One file: every racer's entry is in it. */
    struct ledger *l = NULL;
    assert_int_equal(ledger_attach_existing(g, &l), VRAM_OK);
    assert_int_equal(ledger_group_used(l, UUID0), RACERS);
    struct ledger_snapshot *s = snap(l);
    assert_int_equal(s->n_procs, RACERS);
    free(s);
    for (int i = 0; i < RACERS; i++) {
        kill(kids[i], SIGKILL);
        assert_int_equal(wait_child(kids[i]), 128 + SIGKILL);
    }
    assert_int_equal(ledger_group_used(l, UUID0), 0);
    ledger_close(l);
    close(go[0]);
    close(ready[0]);
    close(ready[1]);
    unlink_group(g);
    alarm(0);
}

static void
test_snapshot_list_attach(void **state)
{
    (void)state;
    char g[64], g2[64];
    group_name(g, sizeof g, "snap");
    group_name(g2, sizeof g2, "snap2");
    struct ledger *l = must_open(g), *l2 = must_open(g2), *m = NULL;
    assert_int_equal(ledger_reserve(l, UUID0, 30, 50, NULL), VRAM_OK);
    assert_int_equal(ledger_reserve(l, UUID0, 30, 50, NULL), VRAM_E_OOM);
    assert_int_equal(ledger_reserve(l, UUID0, 30, 50, NULL), VRAM_E_OOM);

    struct ledger_snapshot *s = snap(l);
    assert_string_equal(s->group, g);
    assert_int_equal(s->n_devices, 1);
    assert_string_equal(s->uuid[0], UUID0);
    assert_int_equal(s->limit[0], 50);
    assert_int_equal(s->used[0], 30);
    assert_int_equal(s->refusals[0], 2);
    assert_int_equal(s->n_procs, 1);
    assert_int_equal(s->procs[0].pid, getpid());
    assert_int_equal(s->procs[0].uid, getuid());
    assert_true(s->procs[0].start_time > 0);
    assert_string_equal(s->procs[0].comm, "test_ledger");
    assert_int_equal(s->procs[0].dev[0].used, 30);
    assert_int_equal(s->procs[0].dev[0].peak, 30);
    free(s);

    /* The monitoring view: no entry of its own, cannot reserve. */
    assert_int_equal(ledger_attach_existing(g, &m), VRAM_OK);
    s = snap(m);
    assert_int_equal(s->n_procs, 1);
    assert_int_equal(s->used[0], 30);
    free(s);
    assert_int_equal(ledger_reserve(m, UUID0, 1, 0, NULL), VRAM_E_INVALID);
    ledger_close(m);
    assert_int_equal(ledger_snapshot(l, NULL), VRAM_E_INVALID);

    /* Listing finds both, sorted; MAX bounds it. */
    char(*groups)[LEDGER_GROUP_LEN] = calloc(1024, sizeof *groups);
    assert_non_null(groups);
    int n = -1;
    assert_int_equal(ledger_list(groups, 1024, &n), VRAM_OK);
    int at = -1, at2 = -1;
    for (int i = 0; i < n; i++) {
        if (strcmp(groups[i], g) == 0)
            at = i;
        if (strcmp(groups[i], g2) == 0)
            at2 = i;
        if (i > 0)
            assert_true(strcmp(groups[i - 1], groups[i]) < 0);
    }
    assert_true(at >= 0 && at2 == at + 1);
    assert_int_equal(ledger_list(groups, 1, &n), VRAM_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ledger_list(NULL, 0, &n), VRAM_OK);
    assert_int_equal(n, 0);
    assert_int_equal(ledger_list(groups, 4, NULL), VRAM_E_INVALID);
    free(groups);

    /* A group nobody made. */
    char none[64];
    group_name(none, sizeof none, "nobody");
    struct ledger *const untouched = (struct ledger *)(uintptr_t)0x10;
    m = untouched; /* out-parameters are written only on success */
    assert_int_equal(ledger_attach_existing(none, &m), VRAM_E_NO_DEVICE);
    assert_ptr_equal(m, untouched);
    ledger_close(l);
    ledger_close(l2);
    unlink_group(g);
    unlink_group(g2);
}

/* ==== a full ledger ==== */

static void
test_full(void **state)
{
    (void)state;
    alarm(WATCHDOG_S);
    char g[64];
    group_name(g, sizeof g, "full");
    struct ledger *l = must_open(g);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    enum { KIDS = LEDGER_MAX_PROCS - 1 };
    pid_t *kids = calloc(KIDS + 1, sizeof *kids);
    assert_non_null(kids);
    for (int i = 0; i < KIDS; i++) {
        kids[i] = fork_child();
        if (kids[i] == 0) {
            struct ledger *cl = NULL;
            if (ledger_open(g, &cl) != VRAM_OK)
                _exit(2);
            child_ready_and_wait(ready[1]);
        }
    }
    for (int i = 0; i < KIDS; i++)
        read_ready(ready[0]);

    /* Full: one more process is refused with a status, not a crash. */
    pid_t extra = fork_child();
    if (extra == 0) {
        struct ledger *cl = NULL;
        vram_status st = ledger_open(g, &cl);
        _exit(st == VRAM_E_IO && strstr(vram_last_error(), "full") != NULL ? 0 : 1);
    }
    assert_int_equal(wait_child(extra), 0);
    /* So is this process once it has left and wants to reserve again. */
    ledger_leave(l);
    kids[KIDS] = fork_child();
    if (kids[KIDS] == 0) {
        struct ledger *cl = NULL;
        if (ledger_open(g, &cl) != VRAM_OK)
            _exit(2);
        child_ready_and_wait(ready[1]);
    }
    read_ready(ready[0]);
    assert_int_equal(ledger_reserve(l, UUID0, 1, 0, NULL), VRAM_E_IO);
    assert_true(strstr(vram_last_error(), "full") != NULL);

    /* One member dies: its entry is reclaimed and taken. */
    kill(kids[0], SIGKILL);
    assert_int_equal(wait_child(kids[0]), 128 + SIGKILL);
    assert_int_equal(ledger_reserve(l, UUID0, 1, 0, NULL), VRAM_OK);

    for (int i = 1; i <= KIDS; i++)
        kill(kids[i], SIGKILL);
    for (int i = 1; i <= KIDS; i++)
        assert_int_equal(wait_child(kids[i]), 128 + SIGKILL);
    struct ledger_snapshot *s = snap(l);
    assert_int_equal(s->n_procs, 1);
    free(s);
    free(kids);
    close(ready[0]);
    close(ready[1]);
    ledger_close(l);
    unlink_group(g);
    alarm(0);
}

/* After all tests: remove every group of this run, also those a failed
** test left behind. */
static int
remove_groups(void **state)
{
    (void)state;
    char prefix[64], dirpath[64];
    int n = snprintf(prefix, sizeof prefix, "t%d-", (int)getpid());
    snprintf(dirpath, sizeof dirpath, "/dev/shm/vram-%u", (unsigned)geteuid());
    DIR *dir = opendir(dirpath);
    if (dir == NULL)
        return 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (strncmp(e->d_name, prefix, (size_t)n) == 0)
            unlinkat(dirfd(dir), e->d_name, 0);
    closedir(dir);
    rmdir(dirpath); /* fails while another run's ledgers are in it */
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--exec-open") == 0)
        return exec_helper(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_group),
        cmocka_unit_test(test_reserve_limit),
        cmocka_unit_test(test_devices_by_uuid),
        cmocka_unit_test(test_devices_by_index),
        cmocka_unit_test(test_processes_and_threads),
        cmocka_unit_test(test_stopped_member),
        cmocka_unit_test(test_sum_during_grant),
        cmocka_unit_test(test_random_stops),
        cmocka_unit_test(test_kill_usage_holder),
        cmocka_unit_test(test_recycled_pid),
        cmocka_unit_test(test_watched_members),
        cmocka_unit_test(test_watch_fooled),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_exec),
        cmocka_unit_test(test_leave_and_second_handle),
        cmocka_unit_test(test_remove_if_unused),
        cmocka_unit_test(test_host_memory_and_monitor),
        cmocka_unit_test(test_group_peak),
        cmocka_unit_test(test_reader_hostile_file),
        cmocka_unit_test(test_reader_removes),
        cmocka_unit_test(test_permissions),
        cmocka_unit_test(test_takeover),
        cmocka_unit_test(test_concurrent_creators),
        cmocka_unit_test(test_snapshot_list_attach),
        cmocka_unit_test(test_full),
    };
    return cmocka_run_group_tests(tests, NULL, remove_groups);
}
