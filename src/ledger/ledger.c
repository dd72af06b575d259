/*
** ledger.c -- the group ledger of ledger.h: one shared file per (user,
** group) in /dev/shm holding a robust process-shared mutex, the devices
** seen (by UUID) and one entry per member process, plus the rule that
** gives a dead member's memory back. docs/LEDGER.md explains the design.
**
** Invariants, true whenever the mutex is free:
**   L1  map->used[d] is the sum of slots[i].dev[d].used over the entries
**       in use (a member that dies mid-update breaks it; recount_locked
**       restores it after EOWNERDEAD and at every reclaim).
**   L2  an entry is in use iff its pid is not 0; only its own process
**       changes its use; others clear it only when that process is dead.
**   L3  entries at index >= map->n_slots are free, so scans stop there.
**   L4  devices 0..n_devices-1 have distinct, non-empty UUIDs and are never
**       removed; a UUID is written before n_devices counts it.
**
** Nothing here calls the CUDA driver, exits, prints or (on the reserve and
** release paths) allocates: the interposer calls in from driver hooks.
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
#include <string.h>
#include <sys/auxv.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "ledger/ledger.h"

/* "VRAMLDG1": stored last, with release order, once the file is ready. */
#define LEDGER_MAGIC UINT64_C(0x5652414d4c444731)
#define LEDGER_VERSION 2

/* How long an opener waits for a live process that is initializing the
** file (it holds the file's flock), in 1 ms naps. */
#define INIT_WAIT_MS 2000

/* Grants look for dead members at most this often (ns): a check costs a
** /proc read per member (about 7 us), and a grant cannot be wrong for
** skipping it -- reclaiming only ever lowers the group's use. */
#define RECLAIM_INTERVAL_NS UINT64_C(100000000)

/* Attempts at create-or-open while the file keeps vanishing in between. */
#define OPEN_ATTEMPTS 8

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "the magic word must be lock-free across processes");

/* One member process. */
struct slot {
    int32_t pid;         /* 0 = free (L2) */
    uint32_t uid;        /* real uid, for display */
    uint64_t start_time; /* clock ticks after boot, /proc/PID/stat field 22 */
    uint64_t pidns;      /* inode of its pid namespace; 0 = unknown */
    uint64_t image;      /* AT_RANDOM of its program image: new at every execve */
    char comm[LEDGER_COMM_LEN];
    struct ledger_use dev[LEDGER_MAX_DEVICES]; /* bytes, indexed like uuid[] */
};

/* The whole file. Another build whose layout differs has another size and
** is refused (the version also says so). */
struct layout {
    _Atomic uint64_t magic; /* LEDGER_MAGIC once ready */
    uint32_t version;
    uint32_t size;         /* sizeof(struct layout), bytes */
    pthread_mutex_t mutex; /* robust, process-shared: guards all below */
    /* The process holding the mutex (pid 0: none or unknown), written
    ** after locking and cleared before unlocking, pid last: after
    ** EOWNERDEAD it names the member that died holding it, which /proc
    ** may still show alive for a moment while it exits. */
    int32_t holder_pid;
    uint32_t removed; /* 1: the file was unlinked (ledger_remove_if_unused);
                         whoever still maps it must open the group anew */
    uint64_t holder_start; /* its start time, clock ticks; 0 = unknown */
    uint64_t holder_pidns;
    uint64_t reclaim_ns; /* CLOCK_MONOTONIC of the last full reclaim, ns */
    int32_t n_devices;   /* L4 */
    int32_t n_slots;     /* L3 */
    char group[LEDGER_GROUP_LEN];
    char uuid[LEDGER_MAX_DEVICES][LEDGER_UUID_LEN];
    uint64_t limit[LEDGER_MAX_DEVICES];    /* bytes; 0 = none */
    uint64_t used[LEDGER_MAX_DEVICES];     /* bytes (L1) */
    uint64_t refusals[LEDGER_MAX_DEVICES]; /* count, ever */
    struct slot slots[LEDGER_MAX_PROCS];
};

_Static_assert(sizeof(struct layout) < UINT32_MAX, "layout size fits its field");

/* What identifies a process in the ledger. */
struct self {
    pid_t pid;
    uid_t uid;
    uint64_t start_time; /* clock ticks after boot */
    uint64_t pidns;      /* 0 = unknown */
    uint64_t image;      /* 0 = unknown */
    char comm[LEDGER_COMM_LEN];
};

/*
** A handle. MAP and GROUP never change after open. SLOT and ME change
** only under map->mutex, or in ledger_after_fork, which runs in a child
** that has one thread.
*/
struct ledger {
    struct layout *map;
    bool member; /* false for ledger_attach_existing: no entry, no reserve */
    int slot;    /* index of this process's entry; -1 = none yet */
    struct self me;
    char group[LEDGER_GROUP_LEN];
};

/* ==== small helpers ==== */

/*
** This process's pid, without a system call on every reservation (glibc
** no longer caches getpid): set at the first use and again in every fork
** child by an atfork handler. A child made by raw clone() without fork
** handlers is noticed at its next ledger_after_fork().
*/
static pid_t cached_pid;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void
pid_refresh(void)
{
    __atomic_store_n(&cached_pid, getpid(), __ATOMIC_RELAXED);
}

static void
pid_init(void)
{
    pid_refresh();
    pthread_atfork(NULL, NULL, pid_refresh);
}

static pid_t
my_pid(void)
{
    pthread_once(&pid_once, pid_init);
    return __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);
}

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

static void
nap_1ms(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

static uint64_t
add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
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

/* GROUP: 1..LEDGER_GROUP_LEN-1 of [A-Za-z0-9._-]; so it can never leave
** /dev/shm nor hide a space from the monitoring commands. */
static bool
group_valid(const char *group)
{
    size_t n = 0;
    for (; group[n] != '\0'; n++) {
        char c = group[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        if (!ok || n + 1 >= LEDGER_GROUP_LEN)
            return false;
    }
    return n > 0;
}

static vram_status
check_group(const char *group)
{
    if (group == NULL)
        return error_set(VRAM_E_INVALID, "ledger: NULL group");
    if (!group_valid(group))
        return error_set(
            VRAM_E_CONFIG,
            "ledger: bad group name \"%.80s\": use 1..%d letters, digits, '.', "
            "'_' or '-'",
            group, LEDGER_GROUP_LEN - 1);
    return VRAM_OK;
}

static vram_status
check_uuid(const char *uuid)
{
    if (uuid == NULL)
        return error_set(VRAM_E_INVALID, "ledger: NULL device UUID");
    size_t n = strnlen(uuid, LEDGER_UUID_LEN);
    if (n == 0 || n >= LEDGER_UUID_LEN)
        return error_set(VRAM_E_INVALID,
                         "ledger: device UUID \"%.60s\" is empty or longer than %d", uuid,
                         LEDGER_UUID_LEN - 1);
    return VRAM_OK;
}

/* The shm_open name of GROUP for the effective user (the owner the file
** gets, and the one checked). */
static void
shm_name(char *out, size_t cap, const char *group)
{
    snprintf(out, cap, "/vram-%u-%s", (unsigned)geteuid(), group);
}

/* ==== /proc ==== */

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
    char comm[LEDGER_COMM_LEN];
};

/*
** Parse /proc/PID/stat into *OUT. Returns 0 or an errno value (ENOENT or
** ESRCH: the process is gone; EINVAL: a line we cannot parse). The command
** name (field 2) may hold spaces and ')' itself, so the fields are counted
** from the LAST ')'.
*/
static int
proc_stat_read(pid_t pid, struct proc_stat *out)
{
    char path[48];
    char buf[1024]; /* field 22 ends within ~500 bytes even with a 64-byte comm */
    size_t n = 0;
    proc_path(path, sizeof path, pid, "stat");
    int err = read_small_file(path, buf, sizeof buf, &n);
    if (err != 0)
        return err;

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
    for (int field = 2; field < 22;) {
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
    }
    if (!have_start)
        return EINVAL;
    *out = ps;
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

/* Fill *OUT with this process's identity. */
static vram_status
self_read(struct self *out)
{
    struct self me;
    struct proc_stat ps;
    memset(&me, 0, sizeof me);
    pid_refresh(); /* self_read runs at open and after fork */
    me.pid = my_pid();
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

/* ==== dead members ==== */

/*
** Whether the member in S is dead: its pid no longer exists (kill says
** ESRCH), or names another process (the start time differs: a recycled
** pid), or a zombie. In doubt -- a pid namespace we cannot see into, a
** /proc we may not read -- it is alive: wrongly freeing a live member's
** share would let the group pass its limit.
*/
static bool
slot_dead(const struct slot *s, uint64_t my_pidns)
{
    if (s->pid <= 0)
        return true; /* garbage; and kill(-pid) would mean a process group */
    if (s->pidns != 0 && my_pidns != 0 && s->pidns != my_pidns)
        return false; /* its pid means another process here */
    if (kill(s->pid, 0) != 0 && errno == ESRCH)
        return true;
    struct proc_stat ps;
    int err = proc_stat_read(s->pid, &ps);
    if (err == ENOENT || err == ESRCH)
        return true; /* died since kill() */
    if (err != 0)
        return false;
    if (ps.start_time != s->start_time)
        return true;
    if (ps.state == 'Z' || ps.state == 'X')
        return proc_threads(s->pid) <= 1; /* unreaped; its GPU memory is gone */
    return false;
}

static int
n_slots_locked(const struct layout *m)
{
    /* Clamped: the file is shared and we never index out of it. */
    return m->n_slots < 0                  ? 0
           : m->n_slots > LEDGER_MAX_PROCS ? LEDGER_MAX_PROCS
                                           : m->n_slots;
}

static int
n_devices_locked(const struct layout *m)
{
    return m->n_devices < 0                    ? 0
           : m->n_devices > LEDGER_MAX_DEVICES ? LEDGER_MAX_DEVICES
                                               : m->n_devices;
}

/* Restore L1 from the entries. */
static void
recount_locked(struct layout *m)
{
    uint64_t sum[LEDGER_MAX_DEVICES] = {0};
    int top = n_slots_locked(m);
    for (int i = 0; i < top; i++) {
        const struct slot *s = &m->slots[i];
        if (s->pid == 0)
            continue;
        for (int d = 0; d < LEDGER_MAX_DEVICES; d++)
            sum[d] = add_sat(sum[d], s->dev[d].used);
    }
    memcpy(m->used, sum, sizeof sum);
}

static bool
is_own_slot(const struct ledger *l, const struct slot *s, pid_t pid)
{
    return s->pid == pid && l->me.pid == pid && s->start_time == l->me.start_time;
}

/*
** Free the entries of dead members and recount (L1, L3). Unless FORCE, at
** most every RECLAIM_INTERVAL_NS across the group. The caller holds the
** mutex. Cost: a kill() per member, a /proc read per live one.
*/
static void
reclaim_locked(struct ledger *l, bool force)
{
    struct layout *m = l->map;
    uint64_t now = now_ns();
    /* now < reclaim_ns: another time namespace wrote it; just reclaim. */
    if (!force && now >= m->reclaim_ns && now - m->reclaim_ns < RECLAIM_INTERVAL_NS)
        return;
    m->reclaim_ns = now;

    pid_t pid = my_pid();
    int n = n_slots_locked(m), top = 0;
    for (int i = 0; i < n; i++) {
        struct slot *s = &m->slots[i];
        if (s->pid == 0)
            continue;
        if (!is_own_slot(l, s, pid) && slot_dead(s, l->me.pidns)) {
            memset(s, 0, sizeof *s);
            continue;
        }
        top = i + 1;
    }
    m->n_slots = top;
    recount_locked(m);
}

/* ==== locking ==== */

/* Free the entry of the member that died holding the mutex (see
** holder_pid): its thread died in here, which only a dying process (or an
** execve, whose memory the driver frees as well) does. */
static void
free_dead_holder_locked(struct layout *m)
{
    int32_t pid = m->holder_pid;
    if (pid == 0)
        return; /* it died before saying who it was: reclaim finds it */
    int n = n_slots_locked(m);
    for (int i = 0; i < n; i++) {
        struct slot *s = &m->slots[i];
        if (s->pid == pid && s->pidns == m->holder_pidns &&
            (m->holder_start == 0 || s->start_time == m->holder_start))
            memset(s, 0, sizeof *s);
    }
}

/*
** Take the ledger's mutex; *CANCEL_STATE keeps the thread's cancel state,
** for unlock_ledger. Cancellation is off while it is held: open() and
** read() of /proc are cancellation points, and a thread cancelled in here
** would leave EOWNERDEAD behind in a live process.
**
** If the holder died (EOWNERDEAD), perhaps halfway through changing its
** own entry or a sum, mark the mutex consistent, free the holder's entry,
** and reclaim the other dead: the recount restores L1. Fails only if the
** mutex is unusable, or this thread already holds it (a signal handler
** calling in: the mutex is errorcheck, so that fails instead of hanging).
*/
static vram_status
lock_ledger(struct ledger *l, int *cancel_state)
{
    struct layout *m = l->map;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, cancel_state);
    int rc = pthread_mutex_lock(&m->mutex);
    if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(&m->mutex);
        free_dead_holder_locked(m);
        reclaim_locked(l, true);
    } else if (rc != 0) {
        pthread_setcancelstate(*cancel_state, NULL);
        return error_set(VRAM_E_IO, "ledger of group %s: cannot take its lock: %s",
                         l->group, strerror(rc));
    }
    pid_t pid = my_pid();
    m->holder_start = l->me.pid == pid ? l->me.start_time : 0;
    m->holder_pidns = l->me.pidns;
    m->holder_pid = (int32_t)pid;
    return VRAM_OK;
}

static void
unlock_ledger(struct ledger *l, int cancel_state)
{
    l->map->holder_pid = 0;
    pthread_mutex_unlock(&l->map->mutex);
    pthread_setcancelstate(cancel_state, NULL);
}

/* ==== entries and devices ==== */

/* Fill entry S for process ME, with zero use; pid last, so that a member
** dying halfway leaves a free entry or one with a wrong start time (L2). */
static void
slot_fill(struct slot *s, const struct self *me)
{
    s->pid = 0;
    s->uid = (uint32_t)me->uid;
    s->start_time = me->start_time;
    s->pidns = me->pidns;
    s->image = me->image;
    memcpy(s->comm, me->comm, sizeof s->comm);
    memset(s->dev, 0, sizeof s->dev);
    s->pid = (int32_t)me->pid;
}

/*
** Find or make this process's entry; set l->slot. An entry of this same
** process (pid, start time, namespace) is shared when it comes from this
** program image (another handle), and emptied when it was left by the
** image before an execve(), whose device memory the driver freed.
*/
static vram_status
claim_slot_locked(struct ledger *l)
{
    struct layout *m = l->map;
    for (int pass = 0; pass < 2; pass++) {
        int n = n_slots_locked(m), free_at = -1;
        for (int i = 0; i < n; i++) {
            struct slot *s = &m->slots[i];
            if (s->pid == 0) {
                if (free_at < 0)
                    free_at = i;
                continue;
            }
            if (s->pid == l->me.pid && s->start_time == l->me.start_time &&
                s->pidns == l->me.pidns) {
                if (s->image != l->me.image) {
                    slot_fill(s, &l->me);
                    recount_locked(m);
                }
                l->slot = i;
                return VRAM_OK;
            }
        }
        if (free_at < 0 && n < LEDGER_MAX_PROCS)
            free_at = n;
        if (free_at >= 0) {
            if (free_at >= n)
                m->n_slots = free_at + 1;
            slot_fill(&m->slots[free_at], &l->me);
            l->slot = free_at;
            return VRAM_OK;
        }
        reclaim_locked(l, true); /* full: perhaps of the dead */
    }
    return error_set(VRAM_E_IO, "ledger of group %s is full: %d live processes", l->group,
                     LEDGER_MAX_PROCS);
}

/* This process's entry, made if needed (after fork, leave, or being
** judged dead); *OUT = its index. */
static vram_status
own_slot_locked(struct ledger *l, int *out)
{
    pid_t pid = my_pid();
    if (l->me.pid != pid) {
        /* A fork child that did not call ledger_after_fork. */
        vram_status st = self_read(&l->me);
        if (st != VRAM_OK)
            return st;
        l->slot = -1;
    }
    if (l->slot >= 0 && l->slot < LEDGER_MAX_PROCS &&
        is_own_slot(l, &l->map->slots[l->slot], pid)) {
        *out = l->slot;
        return VRAM_OK;
    }
    vram_status st = claim_slot_locked(l);
    if (st == VRAM_OK)
        *out = l->slot;
    return st;
}

/* This process's entry if it has one; else NULL (nothing reserved). */
static struct slot *
own_slot_if_any_locked(struct ledger *l)
{
    if (l->slot < 0 || l->slot >= LEDGER_MAX_PROCS)
        return NULL;
    struct slot *s = &l->map->slots[l->slot];
    return is_own_slot(l, s, my_pid()) ? s : NULL;
}

/* The index of device UUID; added if ADD (L4). -1 with no error set if
** absent and !ADD. */
static vram_status
device_locked(struct ledger *l, const char *uuid, bool add, int *out)
{
    struct layout *m = l->map;
    int n = n_devices_locked(m);
    for (int d = 0; d < n; d++)
        if (strncmp(m->uuid[d], uuid, LEDGER_UUID_LEN) == 0) {
            *out = d;
            return VRAM_OK;
        }
    if (!add) {
        *out = -1;
        return VRAM_OK;
    }
    if (n >= LEDGER_MAX_DEVICES)
        return error_set(VRAM_E_NO_DEVICE,
                         "ledger of group %s already tracks %d devices; cannot add %s",
                         l->group, LEDGER_MAX_DEVICES, uuid);
    memset(m->uuid[n], 0, LEDGER_UUID_LEN);
    memcpy(m->uuid[n], uuid, strlen(uuid)); /* < LEDGER_UUID_LEN: check_uuid */
    m->limit[n] = 0;
    m->refusals[n] = 0;
    m->n_devices = n + 1; /* only now does the UUID count */
    *out = n;
    return VRAM_OK;
}

/* ==== the file ==== */

/* The file behind FD must be a regular file of this user, mode 0600. */
static vram_status
check_file(int fd, const char *name)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return error_set(VRAM_E_IO, "ledger /dev/shm%s: %s", name, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return error_set(VRAM_E_IO, "ledger /dev/shm%s is not a regular file", name);
    if (sb.st_uid != geteuid())
        return error_set(
            VRAM_E_IO,
            "ledger /dev/shm%s belongs to uid %u, not %u: another user's ledger is "
            "never used",
            name, (unsigned)sb.st_uid, (unsigned)geteuid());
    if ((sb.st_mode & 07777) != 0600)
        return error_set(
            VRAM_E_IO,
            "ledger /dev/shm%s has mode %04o, not 0600: others could read or change "
            "it, so it is not used",
            name, (unsigned)(sb.st_mode & 07777));
    return VRAM_OK;
}

static vram_status
size_mismatch(const char *name, long long size)
{
    return error_set(
        VRAM_E_IO,
        "ledger /dev/shm%s has %lld bytes, this vram expects %zu (another vram "
        "version?); remove it once no process of the group runs",
        name, size, sizeof(struct layout));
}

/* Map the file if it is initialized: *OUT = the map, or NULL if it is not
** ready yet. Errors for a file of another layout. */
static vram_status
map_if_ready(int fd, const char *name, struct layout **out)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return error_set(VRAM_E_IO, "ledger /dev/shm%s: %s", name, strerror(errno));
    *out = NULL;
    if (sb.st_size == 0)
        return VRAM_OK; /* created, not sized yet */
    if ((uint64_t)sb.st_size != sizeof(struct layout))
        return size_mismatch(name, (long long)sb.st_size);
    struct layout *m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return error_set(VRAM_E_IO, "ledger /dev/shm%s: mmap: %s", name, strerror(errno));
    if (atomic_load_explicit(&m->magic, memory_order_acquire) != LEDGER_MAGIC) {
        munmap(m, sizeof *m);
        return VRAM_OK;
    }
    if (m->version != LEDGER_VERSION || m->size != sizeof(struct layout)) {
        unsigned version = m->version;
        munmap(m, sizeof *m);
        return error_set(
            VRAM_E_IO,
            "ledger /dev/shm%s has version %u, this vram writes %u; remove it once "
            "no process of the group runs",
            name, version, LEDGER_VERSION);
    }
    *out = m;
    return VRAM_OK;
}

/*
** Initialize the file, holding its flock. Whoever holds the flock with the
** magic unset initializes -- the creator normally, or, if the creator died
** before publishing, the next opener, in place (the flock died with it).
** Re-checked here: another may have finished just before we got the flock.
*/
static vram_status
initialize_flocked(int fd, const char *name, const char *group, struct layout **out)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return error_set(VRAM_E_IO, "ledger /dev/shm%s: %s", name, strerror(errno));
    if (sb.st_size == 0 && ftruncate(fd, (off_t)sizeof(struct layout)) != 0)
        return error_set(VRAM_E_IO, "ledger /dev/shm%s: cannot size it: %s", name,
                         strerror(errno));
    if (sb.st_size != 0 && (uint64_t)sb.st_size != sizeof(struct layout))
        return size_mismatch(name, (long long)sb.st_size);
    struct layout *m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return error_set(VRAM_E_IO, "ledger /dev/shm%s: mmap: %s", name, strerror(errno));
    if (atomic_load_explicit(&m->magic, memory_order_acquire) == LEDGER_MAGIC) {
        munmap(m, sizeof *m);
        struct layout *ready = NULL;
        vram_status st = map_if_ready(fd, name, &ready); /* checks the version */
        if (st == VRAM_OK)
            *out = ready;
        return st;
    }

    /* Nobody uses a file before the magic is set: writing it all is safe. */
    memset(m, 0, sizeof *m);
    pthread_mutexattr_t attr;
    int rc = pthread_mutexattr_init(&attr);
    if (rc == 0)
        rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    if (rc == 0)
        rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    if (rc == 0) /* a re-entrant call (signal handler) fails instead of hanging */
        rc = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
    if (rc == 0)
        rc = pthread_mutex_init(&m->mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0) {
        munmap(m, sizeof *m);
        return error_set(VRAM_E_IO, "ledger /dev/shm%s: cannot make its mutex: %s", name,
                         strerror(rc));
    }
    m->version = LEDGER_VERSION;
    m->size = (uint32_t)sizeof(struct layout);
    memcpy(m->group, group, strlen(group) + 1);
    atomic_store_explicit(&m->magic, LEDGER_MAGIC, memory_order_release);
    *out = m;
    return VRAM_OK;
}

/* Map the file behind FD once initialized, initializing it if nobody
** else is (see initialize_flocked). Waits at most INIT_WAIT_MS for a live
** initializer. */
static vram_status
map_ledger(int fd, const char *name, const char *group, struct layout **out)
{
    for (int waited = 0;; waited++) {
        struct layout *m = NULL;
        vram_status st = map_if_ready(fd, name, &m);
        if (st != VRAM_OK)
            return st;
        if (m != NULL) {
            *out = m;
            return VRAM_OK;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            st = initialize_flocked(fd, name, group, &m);
            flock(fd, LOCK_UN);
            if (st == VRAM_OK)
                *out = m;
            return st;
        }
        if (errno != EWOULDBLOCK && errno != EINTR)
            return error_set(VRAM_E_IO, "ledger /dev/shm%s: flock: %s", name,
                             strerror(errno));
        if (waited >= INIT_WAIT_MS)
            return error_set(
                VRAM_E_IO,
                "ledger /dev/shm%s: a process has been initializing it for %d ms "
                "(stopped?)",
                name, INIT_WAIT_MS);
        nap_1ms();
    }
}

/* Open (creating if CREATE) and map GROUP's file. */
static vram_status
open_file(const char *group, bool create, struct layout **out)
{
    char name[96];
    shm_name(name, sizeof name, group);
    for (int attempt = 0; attempt < OPEN_ATTEMPTS; attempt++) {
        int fd = -1;
        if (create) {
            fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
            if (fd < 0 && errno != EEXIST)
                return error_set(VRAM_E_IO, "ledger /dev/shm%s: cannot create it: %s",
                                 name, strerror(errno));
            if (fd >= 0 && fchmod(fd, 0600) != 0) { /* whatever the umask */
                int err = errno;
                close(fd);
                return error_set(VRAM_E_IO, "ledger /dev/shm%s: chmod: %s", name,
                                 strerror(err));
            }
        }
        if (fd < 0) {
            fd = shm_open(name, O_RDWR, 0);
            if (fd < 0 && errno == ENOENT) {
                if (!create)
                    return error_set(VRAM_E_NO_DEVICE,
                                     "no ledger for group %s (/dev/shm%s)", group, name);
                continue; /* removed since our O_EXCL failed: create it anew */
            }
            if (fd < 0 && errno == EACCES)
                return error_set(
                    VRAM_E_IO,
                    "ledger /dev/shm%s: permission denied (a file of another user "
                    "has this name?)",
                    name);
            if (fd < 0)
                return error_set(VRAM_E_IO, "ledger /dev/shm%s: %s", name,
                                 strerror(errno));
        }
        vram_status st = check_file(fd, name);
        if (st == VRAM_OK)
            st = map_ledger(fd, name, group, out);
        close(fd); /* the mapping stays */
        return st;
    }
    return error_set(VRAM_E_IO, "ledger /dev/shm%s keeps vanishing while being opened",
                     name);
}

static vram_status
open_handle(const char *group, bool member, struct ledger **out)
{
    if (out == NULL)
        return error_set(VRAM_E_INVALID, "ledger: NULL argument");
    vram_status st = check_group(group);
    if (st != VRAM_OK)
        return st;
    struct ledger *l = calloc(1, sizeof *l);
    if (l == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "ledger: out of host memory");
    l->member = member;
    l->slot = -1;
    memcpy(l->group, group, strlen(group) + 1);
    st = self_read(&l->me);
    /* A file removed as unused between our open and our entry: it is
    ** marked under its lock before being unlinked, so we see the mark once
    ** we hold the lock, and open the group anew (the next one is new). */
    for (int attempt = 0; st == VRAM_OK; attempt++) {
        st = open_file(group, member, &l->map);
        if (st != VRAM_OK)
            break;
        int cs;
        st = lock_ledger(l, &cs);
        if (st != VRAM_OK)
            break;
        bool removed = l->map->removed != 0;
        if (!removed && member) {
            reclaim_locked(l, false);
            st = claim_slot_locked(l);
        }
        unlock_ledger(l, cs);
        if (!removed)
            break;
        munmap(l->map, sizeof *l->map);
        l->map = NULL;
        if (!member)
            st = error_set(VRAM_E_NO_DEVICE, "no ledger for group %s (just removed)", group);
        else if (attempt + 1 >= OPEN_ATTEMPTS)
            st = error_set(VRAM_E_IO, "ledger of group %s keeps being removed while opened",
                           group);
    }
    if (st != VRAM_OK) {
        ledger_close(l);
        return st;
    }
    *out = l;
    return VRAM_OK;
}

/* ==== the contract ==== */

vram_status
ledger_open(const char *group, struct ledger **out)
{
    return open_handle(group, true, out);
}

vram_status
ledger_attach_existing(const char *group, struct ledger **out)
{
    return open_handle(group, false, out);
}

void
ledger_close(struct ledger *l)
{
    if (l == NULL)
        return;
    if (l->map != NULL)
        munmap(l->map, sizeof *l->map);
    free(l);
}

void
ledger_leave(struct ledger *l)
{
    int cs;
    if (l == NULL || !l->member || lock_ledger(l, &cs) != VRAM_OK)
        return;
    struct slot *s = own_slot_if_any_locked(l);
    if (s != NULL) {
        memset(s, 0, sizeof *s);
        recount_locked(l->map);
    }
    l->slot = -1;
    unlock_ledger(l, cs);
}

bool
ledger_remove_if_unused(struct ledger *l)
{
    int cs;
    if (l == NULL || l->map == NULL || lock_ledger(l, &cs) != VRAM_OK)
        return false;
    struct layout *m = l->map;
    reclaim_locked(l, true);
    bool empty = true;
    for (int i = 0; i < n_slots_locked(m) && empty; i++)
        empty = m->slots[i].pid == 0;
    bool removed = m->removed != 0;
    if (empty && !removed) {
        char name[96];
        shm_name(name, sizeof name, l->group);
        /* Marked before the unlink, under the lock: an opener that mapped
        ** this file sees the mark when it locks and opens anew. */
        m->removed = 1;
        if (shm_unlink(name) != 0 && errno != ENOENT)
            m->removed = 0;
        removed = m->removed != 0;
    }
    unlock_ledger(l, cs);
    return removed;
}

vram_status
ledger_after_fork(struct ledger *l)
{
    if (l == NULL)
        return error_set(VRAM_E_INVALID, "ledger_after_fork: NULL handle");
    struct self me;
    vram_status st = self_read(&me);
    if (st != VRAM_OK)
        return st;
    /* Alone in the child: no other thread reads these. The entry is made
    ** at the first reservation (own_slot_locked). */
    l->me = me;
    l->slot = -1;
    return VRAM_OK;
}

/* Whether USED + BYTES would pass LIMIT (0 = none), without overflow. */
static bool
over_limit(uint64_t used, uint64_t bytes, uint64_t limit)
{
    return limit != 0 && (bytes > limit || used > limit - bytes);
}

vram_status
ledger_reserve(struct ledger *l, const char *uuid, uint64_t bytes, uint64_t limit,
               uint64_t *group_used)
{
    if (l == NULL)
        return error_set(VRAM_E_INVALID, "ledger_reserve: NULL handle");
    if (!l->member)
        return error_set(VRAM_E_INVALID,
                         "ledger of group %s: a monitoring handle cannot reserve",
                         l->group);
    vram_status st = check_uuid(uuid);
    if (st != VRAM_OK)
        return st;
    int cs;
    st = lock_ledger(l, &cs);
    if (st != VRAM_OK)
        return st;

    struct layout *m = l->map;
    int slot = -1, d = -1;
    reclaim_locked(l, false);
    st = own_slot_locked(l, &slot);
    if (st == VRAM_OK)
        st = device_locked(l, uuid, true, &d);
    if (st != VRAM_OK) {
        unlock_ledger(l, cs);
        return st;
    }
    m->limit[d] = limit;
    if (over_limit(m->used[d], bytes, limit)) {
        /* Never refuse because of the dead: look now, whatever the time. */
        reclaim_locked(l, true);
        if (over_limit(m->used[d], bytes, limit)) {
            uint64_t used = m->used[d];
            m->refusals[d]++;
            unlock_ledger(l, cs);
            if (group_used != NULL)
                *group_used = used;
            return error_set(VRAM_E_OOM,
                             "group %s: %" PRIu64
                             " more bytes on %s would pass its limit of "
                             "%" PRIu64 " (%" PRIu64 " in use)",
                             l->group, bytes, uuid, limit, used);
        }
    }
    struct ledger_use *u = &m->slots[slot].dev[d];
    u->used = add_sat(u->used, bytes);
    if (u->used > u->peak)
        u->peak = u->used;
    m->used[d] = add_sat(m->used[d], bytes);
    unlock_ledger(l, cs);
    return VRAM_OK;
}

void
ledger_release(struct ledger *l, const char *uuid, uint64_t bytes)
{
    int cs;
    if (l == NULL || !l->member || check_uuid(uuid) != VRAM_OK ||
        lock_ledger(l, &cs) != VRAM_OK)
        return;
    struct layout *m = l->map;
    struct slot *s = own_slot_if_any_locked(l);
    int d = -1;
    device_locked(l, uuid, false, &d);
    if (s != NULL && d >= 0) {
        /* Never below zero: a release of more than was reserved (a caller
        ** bug, or an entry emptied by ledger_leave) must not wrap. */
        uint64_t give = bytes < s->dev[d].used ? bytes : s->dev[d].used;
        s->dev[d].used -= give;
        m->used[d] -= give < m->used[d] ? give : m->used[d];
    }
    unlock_ledger(l, cs);
}

uint64_t
ledger_group_used(struct ledger *l, const char *uuid)
{
    int cs;
    if (l == NULL || check_uuid(uuid) != VRAM_OK || lock_ledger(l, &cs) != VRAM_OK)
        return 0;
    reclaim_locked(l, true);
    int d = -1;
    device_locked(l, uuid, false, &d);
    uint64_t used = d >= 0 ? l->map->used[d] : 0;
    unlock_ledger(l, cs);
    return used;
}

vram_status
ledger_snapshot(struct ledger *l, struct ledger_snapshot *out)
{
    if (l == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "ledger_snapshot: NULL argument");
    int cs;
    vram_status st = lock_ledger(l, &cs);
    if (st != VRAM_OK)
        return st;
    struct layout *m = l->map;
    reclaim_locked(l, true);

    memset(out, 0, sizeof *out);
    memcpy(out->group, l->group, sizeof out->group);
    out->n_devices = n_devices_locked(m);
    for (int d = 0; d < out->n_devices; d++) {
        memcpy(out->uuid[d], m->uuid[d], LEDGER_UUID_LEN);
        out->uuid[d][LEDGER_UUID_LEN - 1] = '\0';
        out->limit[d] = m->limit[d];
        out->used[d] = m->used[d];
        out->refusals[d] = m->refusals[d];
    }
    int n = n_slots_locked(m);
    for (int i = 0; i < n; i++) {
        const struct slot *s = &m->slots[i];
        if (s->pid == 0)
            continue;
        struct ledger_proc *p = &out->procs[out->n_procs++];
        p->pid = (pid_t)s->pid;
        p->start_time = s->start_time;
        p->uid = (uid_t)s->uid;
        memcpy(p->comm, s->comm, sizeof p->comm);
        p->comm[LEDGER_COMM_LEN - 1] = '\0';
        memcpy(p->dev, s->dev, sizeof p->dev);
    }
    unlock_ledger(l, cs);
    return VRAM_OK;
}

static int
compare_groups(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

vram_status
ledger_list(char (*groups)[LEDGER_GROUP_LEN], int max, int *n)
{
    if (n == NULL || max < 0 || (max > 0 && groups == NULL))
        return error_set(VRAM_E_INVALID, "ledger_list: bad argument");
    char prefix[32];
    snprintf(prefix, sizeof prefix, "vram-%u-", (unsigned)geteuid());
    size_t plen = strlen(prefix);

    DIR *dir = opendir("/dev/shm");
    if (dir == NULL && errno == ENOENT) {
        *n = 0;
        return VRAM_OK;
    }
    if (dir == NULL)
        return error_set(VRAM_E_IO, "ledger: cannot list /dev/shm: %s", strerror(errno));
    int count = 0;
    struct dirent *e;
    while (count < max && (e = readdir(dir)) != NULL) {
        const char *group = e->d_name + plen;
        if (strncmp(e->d_name, prefix, plen) != 0 || !group_valid(group))
            continue;
        /* Another user may create any name in /dev/shm: list ours only. */
        struct stat sb;
        if (fstatat(dirfd(dir), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(sb.st_mode) || sb.st_uid != geteuid())
            continue;
        memcpy(groups[count], group, strlen(group) + 1);
        count++;
    }
    closedir(dir);
    if (count > 1)
        qsort(groups, (size_t)count, sizeof groups[0], compare_groups);
    *n = count;
    return VRAM_OK;
}

/* ==== for tests only ==== */

void
ledger_test_lock_and_hang(struct ledger *l)
{
    int cs;
    if (l == NULL || lock_ledger(l, &cs) != VRAM_OK)
        return;
    for (;;)
        pause();
}

void
ledger_test_set_start_time(struct ledger *l, uint64_t t)
{
    int cs;
    if (l == NULL || !l->member || lock_ledger(l, &cs) != VRAM_OK)
        return;
    struct slot *s = own_slot_if_any_locked(l);
    if (s != NULL)
        s->start_time = t;
    unlock_ledger(l, cs);
}
