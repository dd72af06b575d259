/* SPDX-License-Identifier: MIT */
/*
** ledger_proc.c -- the group ledger's view of processes, from /proc: who
** this process is (pid, start time, pid namespace, program image) and
** whether a member is dead. Nothing here touches the shared file.
*/
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "ledger/ledger_internal.h"

/*
** This process's pid, without a system call at each use (glibc no longer
** caches getpid): set at the first use and again in every fork child by an
** atfork handler. A child made by raw clone() without fork handlers is
** noticed at its next ledger_after_fork(). Reservations do not read it:
** a handle keeps its process's identity (ledger.c, "fork").
*/
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;
static struct {
    pid_t pid;
    bool ready; /* the fork handler is in place: pid is kept right */
} cached __attribute__((aligned(8)));

static void
pid_refresh(void)
{
    __atomic_store_n(&cached.pid, getpid(), __ATOMIC_RELAXED);
}

static void
pid_init(void)
{
    pid_refresh();
    pthread_atfork(NULL, NULL, pid_refresh);
    __atomic_store_n(&cached.ready, true, __ATOMIC_RELEASE);
}

pid_t
ledger_my_pid(void)
{
    /* Once the fork handler is in place the once word is not read again:
    ** one cache line less on the hooks' path. */
    if (!__atomic_load_n(&cached.ready, __ATOMIC_ACQUIRE))
        pthread_once(&pid_once, pid_init);
    return __atomic_load_n(&cached.pid, __ATOMIC_RELAXED);
}

/* Decimal digits in [P, END) into *OUT; false if empty, not digits, or
** over 64 bits. */
static bool
parse_u64(const char *p, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    if (p >= end)
        return false;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        unsigned digit = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return false;
        v = v * 10 + digit;
    }
    *out = v;
    return true;
}

/* "/proc/PID/LEAF" into BUF (CAP >= 48), by hand rather than snprintf:
** ledger_after_fork runs in a fork child, where only async-signal-safe
** functions are allowed. */
static void
proc_path(char *buf, size_t cap, pid_t pid, const char *leaf)
{
    char digits[24];
    size_t nd = 0, at = 0;
    unsigned long v = pid > 0 ? (unsigned long)pid : 0;
    do {
        digits[nd++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0 && nd < sizeof digits);
    const char *head = "/proc/";
    for (; *head != '\0' && at + 1 < cap; head++)
        buf[at++] = *head;
    while (nd > 0 && at + 1 < cap)
        buf[at++] = digits[--nd];
    if (at + 1 < cap)
        buf[at++] = '/';
    for (; *leaf != '\0' && at + 1 < cap; leaf++)
        buf[at++] = *leaf;
    buf[at] = '\0';
}

/* Read at most CAP-1 bytes of PATH into BUF, NUL-terminated; *N = bytes.
** 0 or an errno value. No heap: this runs under the mutex. */
static int
read_small_file(const char *path, char *buf, size_t cap, size_t *n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    size_t got = 0;
    while (got + 1 < cap) {
        ssize_t r = read(fd, buf + got, cap - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            close(fd);
            return err;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *n = got;
    return 0;
}

struct proc_stat {
    char state;          /* field 3: R, S, D, Z, X... */
    uint64_t start_time; /* field 22, clock ticks after boot */
    uint64_t rss_pages;  /* field 24, resident pages; valid if have_rss */
    bool have_rss;
    char comm[LEDGER_COMM_LEN];
};

/* Bytes of /proc/PID/stat read: field 24 ends within ~600 bytes even
** with a 64-byte comm and every number at its widest. */
#define STAT_BYTES 1024

/*
** Parse the N bytes of /proc/PID/stat in BUF into *OUT. Returns 0 or
** EINVAL (a line we cannot parse). The command name (field 2) may hold
** spaces and ')' itself, so the fields are counted from the LAST ')'.
*/
static int
proc_stat_parse(const char *buf, size_t n, struct proc_stat *out)
{
    const char *lp = memchr(buf, '(', n);
    const char *rp = NULL;
    for (size_t i = n; i > 0; i--)
        if (buf[i - 1] == ')') {
            rp = buf + i - 1;
            break;
        }
    if (lp == NULL || rp == NULL || rp < lp)
        return EINVAL;

    struct proc_stat ps;
    memset(&ps, 0, sizeof ps);
    size_t clen = (size_t)(rp - lp - 1);
    if (clen >= LEDGER_COMM_LEN)
        clen = LEDGER_COMM_LEN - 1;
    memcpy(ps.comm, lp + 1, clen);

    const char *p = rp + 1, *end = buf + n;
    bool have_start = false;
    for (int field = 2; field < 24;) {
        while (p < end && *p == ' ')
            p++;
        if (p >= end || *p == '\n')
            break;
        const char *tok = p;
        while (p < end && *p != ' ' && *p != '\n')
            p++;
        field++;
        if (field == 3)
            ps.state = *tok;
        if (field == 22)
            have_start = parse_u64(tok, p, &ps.start_time);
        if (field == 24)
            ps.have_rss = parse_u64(tok, p, &ps.rss_pages);
    }
    if (!have_start)
        return EINVAL;
    *out = ps;
    return 0;
}

/*
** Read /proc/PID/stat into *OUT: "stat" in the /proc/PID directory open
** at DIR, or by its path when DIR is -1 (async-signal-safe: ledger_after_fork
** runs this in a fork child). One read at offset 0: the kernel renders the
** line whole at each read from the start, and only its first STAT_BYTES
** matter. Returns 0 or an errno value (ENOENT or ESRCH: the process is
** gone; EINVAL: a line we cannot parse).
*/
static int
proc_stat_at(int dir, pid_t pid, struct proc_stat *out)
{
    char buf[STAT_BYTES];
    int fd;
    if (dir >= 0) {
        fd = openat(dir, "stat", O_RDONLY | O_CLOEXEC);
    } else {
        char path[48];
        proc_path(path, sizeof path, pid, "stat");
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0)
        return errno;
    ssize_t r;
    do
        r = pread(fd, buf, sizeof buf, 0);
    while (r < 0 && errno == EINTR);
    int err = r < 0 ? errno : proc_stat_parse(buf, (size_t)r, out);
    close(fd);
    return err;
}

static int
proc_stat_read(pid_t pid, struct proc_stat *out)
{
    return proc_stat_at(-1, pid, out);
}

/*
** The total and resident pages of the process behind FD, its
** /proc/PID/statm kept open, into *SIZE and *RESIDENT (the resident set
** is what field 24 of stat says: file, anonymous and shared memory
** pages). Returns 0 or an errno value (ESRCH: it is gone, reaped).
*/
static int
proc_statm(int fd, uint64_t *size, uint64_t *resident)
{
    char buf[128];
    ssize_t r;
    do
        r = pread(fd, buf, sizeof buf - 1, 0);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return errno;
    const char *p = buf, *end = buf + r;
    const char *q = memchr(p, ' ', (size_t)(end - p));
    if (q == NULL || !parse_u64(p, q, size))
        return EINVAL;
    p = q + 1;
    q = memchr(p, ' ', (size_t)(end - p));
    if (q == NULL || !parse_u64(p, q, resident))
        return EINVAL;
    return 0;
}

/* The number of live threads of PID ("Threads:" of /proc/PID/status); -1
** if unknown. A zombie shows 1; a process whose main thread alone has
** exited also shows state Z, but more threads. */
static long
proc_threads(pid_t pid)
{
    char path[48];
    char buf[4096];
    size_t n = 0;
    proc_path(path, sizeof path, pid, "status");
    if (read_small_file(path, buf, sizeof buf, &n) != 0)
        return -1;
    const char *p = strstr(buf, "\nThreads:");
    if (p == NULL)
        return -1;
    p += strlen("\nThreads:");
    while (*p == ' ' || *p == '\t')
        p++;
    const char *q = p;
    while (*q >= '0' && *q <= '9')
        q++;
    uint64_t v = 0;
    if (!parse_u64(p, q, &v) || v > 1000000000)
        return -1;
    return (long)v;
}

/* The page size, bytes (glibc reads it from the auxiliary vector: no call). */
static uint64_t
page_bytes(void)
{
    long page = sysconf(_SC_PAGESIZE);
    return (uint64_t)(page > 0 ? page : 4096);
}

/* Fill *OUT with this process's identity. */
vram_status
ledger_self_read(struct self *out)
{
    struct self me;
    struct proc_stat ps;
    memset(&me, 0, sizeof me);
    pid_refresh(); /* self_read runs at open and after fork */
    me.pid = ledger_my_pid();
    me.uid = getuid();
    int err = proc_stat_read(me.pid, &ps);
    if (err != 0)
        return error_set(VRAM_E_IO, "ledger: cannot read /proc/%d/stat: %s", (int)me.pid,
                         strerror(err));
    me.start_time = ps.start_time;
    memcpy(me.comm, ps.comm, sizeof me.comm);
    struct stat sb;
    if (stat("/proc/self/ns/pid", &sb) == 0)
        me.pidns = (uint64_t)sb.st_ino;
    /* AT_RANDOM: 16 bytes the kernel draws at every execve; the same in
    ** every thread and fork child of one program image. */
    const void *rnd = (const void *)getauxval(AT_RANDOM);
    if (rnd != NULL)
        memcpy(&me.image, rnd, sizeof me.image);
    *out = me;
    return VRAM_OK;
}

/*
** Whether a member is dead: its pid no longer exists (kill says
** ESRCH), or names another process (the start time differs: a recycled
** pid), or a zombie. In doubt -- a pid namespace we cannot see into, a
** /proc we may not read -- it is alive: wrongly freeing a live member's
** share would let the group pass its limit.
*/
bool
ledger_proc_dead(int32_t pid, uint64_t start_time, uint64_t pidns, uint64_t my_pidns)
{
    uint64_t rss;
    return ledger_proc_judge(pid, start_time, pidns, my_pidns, &rss);
}

/*
** One read of /proc/PID/stat: gone (ENOENT, ESRCH), or another process
** (start time), or a zombie, is dead; a /proc we may not read falls back
** on kill(pid, 0), and only ESRCH is dead there.
*/
bool
ledger_proc_judge(int32_t pid, uint64_t start_time, uint64_t pidns, uint64_t my_pidns,
                  uint64_t *rss)
{
    int fd = -1;
    return ledger_proc_judge_fd(pid, start_time, pidns, my_pidns, &fd, false, rss);
}

/* Only in the tests' build (ledger_testing.h): judgments made. */
#ifdef VRAM_LEDGER_FAULTS
static _Atomic uint64_t proc_reads;

uint64_t
ledger_test_proc_reads(void)
{
    return atomic_load(&proc_reads);
}
#define count_proc_read() atomic_fetch_add(&proc_reads, 1)
#else
#define count_proc_read() ((void)0)
#endif

bool
ledger_proc_judge_fd(int32_t pid, uint64_t start_time, uint64_t pidns, uint64_t my_pidns,
                     int *fd, bool keep, uint64_t *rss)
{
    *rss = 0;
    if (pid <= 0)
        return true; /* garbage; and kill(-pid) would mean a process group */
    if (pidns != 0 && my_pidns != 0 && pidns != my_pidns)
        return false; /* its pid means another process here */
    count_proc_read();
    if (*fd >= 0) {
        /* The process judged alive before: statm says it still is (and its
        ** resident set) without the cost of stat, as long as it has memory;
        ** a zombie has none, and is judged in full below. */
        uint64_t size = 0, resident = 0;
        int err = proc_statm(*fd, &size, &resident);
        if (err == 0 && size != 0) {
            *rss = resident * page_bytes();
            return false;
        }
        close(*fd);
        *fd = -1;
        if (err == ESRCH || err == ENOENT)
            return true;
    }
    /* Kept: stat and statm are read through one /proc/PID directory, so
    ** that both name the process whose start time stat shows. */
    int dir = -1;
    if (keep && start_time != 0) {
        char path[48];
        proc_path(path, sizeof path, pid, "");
        dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    struct proc_stat ps;
    int err = proc_stat_at(dir, pid, &ps);
    bool dead;
    if (err == ENOENT || err == ESRCH)
        dead = true;
    else if (err != 0)
        dead = kill(pid, 0) != 0 && errno == ESRCH;
    else if (start_time == 0)
        dead = false; /* a member still writing its entry: only a gone pid is dead */
    else if (ps.start_time != start_time)
        dead = true;
    else if ((ps.state == 'Z' || ps.state == 'X') && proc_threads(pid) <= 1)
        dead = true; /* unreaped; its GPU memory is gone */
    else
        dead = false;
    if (err == 0 && !dead && ps.have_rss)
        *rss = ps.rss_pages * page_bytes();
    if (dir >= 0) {
        if (err == 0 && !dead && ps.state != 'Z' && ps.state != 'X')
            *fd = openat(dir, "statm", O_RDONLY | O_CLOEXEC); /* -1: not kept */
        close(dir);
    }
    return dead;
}

bool
ledger_proc_resident(pid_t pid, uint64_t start_time, uint64_t *bytes)
{
    struct proc_stat ps;
    if (pid <= 0 || proc_stat_read(pid, &ps) != 0 || !ps.have_rss ||
        (start_time != 0 && ps.start_time != start_time))
        return false;
    *bytes = ps.rss_pages * page_bytes();
    return true;
}
