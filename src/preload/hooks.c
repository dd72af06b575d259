/*
** hooks.c -- what libvram-preload.so does when a program takes or gives
** back GPU memory: every hook of PRELOAD_HOOKS (hooks.h) but the two
** cuGetProcAddress, which interpose.c owns.
**
** Settings come once, at the first hooked call, from env_quota_load
** (VRAM_LIMIT, VRAM_GROUP, HAMi's CUDA_DEVICE_MEMORY_LIMIT[_<i>]):
**   - none: PASSIVE, every hook forwards at once;
**   - malformed (or the group's ledger cannot be opened): DISABLED, one
**     line "vram: <why>; CUDA is disabled in this process" on stderr, and
**     every hook returns CUDA_ERROR_NOT_INITIALIZED from then on -- the
**     code the driver gives before a successful cuInit, so frameworks
**     report that CUDA failed to initialize (a limit must never silently
**     mean "unlimited", and the host process must never be exited);
**   - else ACTIVE: each allocation is reserved in the group's ledger
**     (ledger.h) before the driver is called and given back if the driver
**     fails or when it is freed. Past the quota the hook returns
**     CUDA_ERROR_OUT_OF_MEMORY, as the driver does when memory runs out,
**     and prints one line (at most one a second).
**
** Devices are keyed by UUID, never by ordinal: the ordinal depends on each
** process's CUDA_VISIBLE_DEVICES, the UUID does not.
**
** Trace: when ACTIVE and VRAM_TRACE names a file (env_trace_load), every
** allocation counted is written to it as an 'a' event, its free as 'f',
** and every allocation refused for lack of memory (by the quota or by the
** driver) as 'o' (docs/TRACE_FORMAT.md): ids from one counter of the
** process, the CUDA ordinal as the device, stream 0. Events are written
** outside the locks. A trace that cannot be opened or written costs one
** line on stderr and nothing else: a trace limits nothing.
**
** Locks: P.dev_lock publishes device facts, P.table_lock guards the table
** of live allocations; neither is held across a driver call or a ledger
** call (reserve, call the driver, then track or give back).
**
** Re-entrancy: a hook entered while another hook runs on the same thread
** (the driver or a profiler calling back into an exported symbol) forwards
** directly. Fork: the child gets its own ledger entry and an empty table.
*/
#include <assert.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/env.h"
#include "preload/hooks.h"
#include "ledger/ledger.h"
#include "quota/quota.h"
#include "trace/trace.h"
#include "base/size.h"
#include "vram.h"

#define PRELOAD_MAX_DEVICES 64 /* CUDA ordinals we keep facts for */
#define PITCH_ALIGN 512        /* the pitch cuMemAllocPitch is assumed to round to */
#define LINE_INTERVAL_NS 1000000000LL /* at most one refusal line a second */

/* ------------------------------------------------------------------ */
/* State                                                                */
/* ------------------------------------------------------------------ */

/* What we know of one CUDA ordinal, immutable once READY is set. */
struct preload_device {
    int ready;                  /* 1: the fields below are set (atomic) */
    char uuid[LEDGER_UUID_LEN]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    uint64_t total;             /* bytes, the driver's cuDeviceTotalMem */
    uint64_t limit;             /* bytes, the quota; 0 = not limited */
};

/* What a tracked key is: the three namespaces may share numbers. */
enum track_kind { TRACK_PTR = 1, TRACK_HANDLE = 2, TRACK_ARRAY = 3 };

/* One live allocation of this process. */
struct track {
    uint64_t key;      /* device pointer, cuMemCreate handle or CUarray */
    uint64_t bytes;    /* counted in the ledger for it */
    int kind;          /* enum track_kind */
    int dev;           /* CUDA ordinal it is counted on */
    unsigned refs;     /* handles: cuMemRelease calls still due */
    uint64_t trace_id; /* its id in the trace (when one is recorded) */
    struct track *next;
};

/* Live allocations by key: chained buckets, doubled when N passes
** N_BUCKET, so that a free never scans. */
struct track_table {
    struct track **bucket; /* N_BUCKET chains (a power of two), or NULL */
    size_t n_bucket;
    size_t n;
};

static struct preload {
    int mode;                     /* enum preload_mode, atomic; 0 until initialized */
    struct quota_env quota;       /* the settings, read once */
    struct ledger *ledger;        /* the group's ledger (ACTIVE only) */
    char group[LEDGER_GROUP_LEN]; /* its name */
    bool private_group;           /* "pid-<pid>-<start>": removed at exit */
    pid_t creator;                /* the process that created a private group */
    pthread_mutex_t dev_lock;     /* publishes dev[] */
    struct preload_device dev[PRELOAD_MAX_DEVICES];
    pthread_mutex_t table_lock; /* guards table and table_owner */
    pthread_t table_owner;      /* holder of table_lock, for asserts */
    struct track_table table;
    long long last_line_ns;     /* CLOCK_MONOTONIC of the last refusal line (atomic) */
    void *ctx_get_device;       /* the real cuCtxGetDevice (atomic), or NULL */
    struct trace_writer *trace; /* VRAM_TRACE, or NULL; set before ACTIVE is
                                   published, dropped in a forked child */
    uint64_t next_trace_id;     /* the next allocation's trace id (atomic) */
    int trace_failed;           /* a trace write failed; said once (atomic) */
} P = {
    .dev_lock = PTHREAD_MUTEX_INITIALIZER,
    .table_lock = PTHREAD_MUTEX_INITIALIZER,
    .last_line_ns = -LINE_INTERVAL_NS,
};

static pthread_once_t preload_once = PTHREAD_ONCE_INIT;

/* Hooks running on this thread (initial-exec: no allocation on access). */
static _Thread_local int hook_depth __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------ */
/* Lines on stderr                                                      */
/* ------------------------------------------------------------------ */

/* Write LINE (without its newline) to stderr in one write, so that lines
** of several processes never interleave. Never fails loudly. */
static void
say(const char *line)
{
    char buf[1024];
    size_t n = strlen(line);
    if (n > sizeof buf - 2)
        n = sizeof buf - 2;
    memcpy(buf, line, n);
    buf[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, n);
    (void)w; /* nothing to do if stderr is gone */
}

static long long
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* May a refusal line be printed now? (At most one a second: frameworks
** retry smaller sizes after an OOM, and each retry must not print.) */
static bool
line_allowed(void)
{
    long long now = now_ns();
    long long last = __atomic_load_n(&P.last_line_ns, __ATOMIC_RELAXED);
    if (now - last < LINE_INTERVAL_NS)
        return false;
    return __atomic_compare_exchange_n(&P.last_line_ns, &last, now, false,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ */
/* Initialization                                                       */
/* ------------------------------------------------------------------ */

/* Fail closed: remember that CUDA is off here and say why, once. */
static void
disable(const char *why)
{
    char line[768];
    snprintf(line, sizeof line, "vram: %s; CUDA is disabled in this process", why);
    say(line);
    __atomic_store_n(&P.mode, PRELOAD_DISABLED, __ATOMIC_RELEASE);
}

/* This process's start time (clock ticks after boot, /proc/self/stat
** field 22), so that a private group's name is never reused by a later
** process with a recycled pid. 0 if unreadable. */
static unsigned long long
start_time(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and ')': fields 3.. start
    ** after the last ')'. Field 22 is the 20th of them. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    p++;
    for (int field = 3; field < 22 && p != NULL; field++) {
        p = strchr(p + 1, ' ');
    }
    return p != NULL ? strtoull(p + 1, NULL, 10) : 0;
}

static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

/* ------------------------------------------------------------------ */
/* The trace                                                            */
/* ------------------------------------------------------------------ */

/* Open VRAM_TRACE, if set, into P.trace. Run by preload_init only. */
static void
trace_open(void)
{
    char path[512], meta[160], line[768];
    if (env_trace_load(NULL, NULL, path, sizeof path) != VRAM_OK) {
        snprintf(line, sizeof line, "vram: %s; no trace is recorded", vram_last_error());
        say(line);
        return;
    }
    if (path[0] == '\0')
        return;
    snprintf(meta, sizeof meta, "workload=vram-preload pid=%ld group=%s version=%s",
             (long)getpid(), P.group, VRAM_VERSION);
    if (trace_writer_open(path, meta, &P.trace) != VRAM_OK) {
        snprintf(line, sizeof line, "vram: VRAM_TRACE: %s; no trace is recorded",
                 vram_last_error());
        say(line);
        P.trace = NULL;
    }
}

/* Write event OP (no lock held). A failed write is said once; the
** writer then refuses every later event by itself. */
static void
trace_write(char op, uint64_t id, uint64_t bytes, int ord)
{
    struct trace_writer *w = P.trace;
    if (w == NULL || ord < 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct trace_event ev = {
        .t_us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u,
        .id = id,
        .size = bytes,
        .device = ord,
        .op = op,
    };
    if (trace_writer_event(w, &ev) != VRAM_OK &&
        !__atomic_exchange_n(&P.trace_failed, 1, __ATOMIC_RELAXED)) {
        char line[768];
        snprintf(line, sizeof line, "vram: trace: %s; no further events are recorded",
                 vram_last_error());
        say(line);
    }
}

/* An id for a new allocation (0 when no trace is recorded). */
static uint64_t
trace_next_id(void)
{
    if (P.trace == NULL)
        return 0;
    return __atomic_fetch_add(&P.next_trace_id, 1, __ATOMIC_RELAXED);
}

/* After an allocation hook: an 'o' event when R says memory ran out. */
static vcu_result
trace_if_refused(vcu_result r, int ord, uint64_t bytes)
{
    if (r == VCU_ERROR_OUT_OF_MEMORY && bytes > 0)
        trace_write(TRACE_OOM, 0, bytes, ord);
    return r;
}

static void
preload_init(void)
{
    struct quota_env q;
    memset(&q, 0, sizeof q);
    if (env_quota_load(NULL, NULL, &q) != VRAM_OK) {
        disable(vram_last_error());
        return;
    }
    if (!q.active && q.group[0] == '\0') {
        __atomic_store_n(&P.mode, PRELOAD_PASSIVE, __ATOMIC_RELEASE);
        return;
    }
    P.quota = q;
    if (q.group[0] != '\0') {
        snprintf(P.group, sizeof P.group, "%s", q.group);
    } else {
        P.private_group = true;
        P.creator = getpid();
        snprintf(P.group, sizeof P.group, "pid-%ld-%llu", (long)P.creator, start_time());
    }
    if (ledger_open(P.group, &P.ledger) != VRAM_OK) {
        char why[640];
        snprintf(why, sizeof why, "cannot open the ledger of group %s: %s", P.group,
                 vram_last_error());
        disable(why);
        return;
    }
    trace_open();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    __atomic_store_n(&P.mode, PRELOAD_ACTIVE, __ATOMIC_RELEASE);
}

enum preload_mode
preload_mode(void)
{
    int m = __atomic_load_n(&P.mode, __ATOMIC_ACQUIRE);
    if (m != 0)
        return (enum preload_mode)m;
    pthread_once(&preload_once, preload_init);
    return (enum preload_mode)__atomic_load_n(&P.mode, __ATOMIC_ACQUIRE);
}

/*
** At a normal exit this process leaves its group, and the last member to
** leave removes the group's file (ledger_remove_if_unused is safe against
** a member joining at the same moment), so /dev/shm does not fill with
** the ledgers of finished jobs. Members killed by a signal are reclaimed
** by the next member or monitoring command instead.
*/
__attribute__((destructor)) static void
preload_fini(void)
{
    if (__atomic_load_n(&P.mode, __ATOMIC_ACQUIRE) != PRELOAD_ACTIVE)
        return;
    /* Finished, not freed: another thread may still be in a hook. */
    if (P.trace != NULL && trace_writer_finish(P.trace) != VRAM_OK &&
        !__atomic_exchange_n(&P.trace_failed, 1, __ATOMIC_RELAXED)) {
        char line[768];
        snprintf(line, sizeof line, "vram: trace: %s", vram_last_error());
        say(line);
    }
    if (P.ledger == NULL)
        return;
    ledger_leave(P.ledger);
    ledger_remove_if_unused(P.ledger);
}

/* ------------------------------------------------------------------ */
/* The table of live allocations                                        */
/* ------------------------------------------------------------------ */

static void
table_lock(void)
{
    pthread_mutex_lock(&P.table_lock);
    P.table_owner = pthread_self();
}

static void
table_unlock(void)
{
    pthread_mutex_unlock(&P.table_lock);
}

static size_t
track_hash(int kind, uint64_t key, size_t n_bucket)
{
    uint64_t h = (key ^ ((uint64_t)kind << 61)) * 0x9e3779b97f4a7c15ULL; /* Fibonacci */
    return (size_t)(h >> 32) & (n_bucket - 1);
}

/* Double the buckets (or make the first 1024). False: out of host memory,
** the table stays as it was. Caller holds table_lock. */
static bool
table_grow_locked(struct track_table *t)
{
    assert(pthread_equal(P.table_owner, pthread_self()));
    size_t n = t->n_bucket == 0 ? 1024 : t->n_bucket * 2;
    struct track **b = calloc(n, sizeof *b);
    if (b == NULL)
        return false;
    for (size_t i = 0; i < t->n_bucket; i++) {
        struct track *e = t->bucket[i];
        while (e != NULL) {
            struct track *next = e->next;
            size_t k = track_hash(e->kind, e->key, n);
            e->next = b[k];
            b[k] = e;
            e = next;
        }
    }
    free(t->bucket);
    t->bucket = b;
    t->n_bucket = n;
    return true;
}

/* The entry of (KIND, KEY), or NULL. Caller holds table_lock. */
static struct track *
table_find_locked(struct track_table *t, int kind, uint64_t key)
{
    assert(pthread_equal(P.table_owner, pthread_self()));
    if (t->n_bucket == 0)
        return NULL;
    for (struct track *e = t->bucket[track_hash(kind, key, t->n_bucket)]; e != NULL;
         e = e->next)
        if (e->key == key && e->kind == kind)
            return e;
    return NULL;
}

/* Add a copy of *E. False: out of host memory. Caller holds table_lock. */
static bool
table_put_locked(struct track_table *t, const struct track *e)
{
    assert(pthread_equal(P.table_owner, pthread_self()));
    if (t->n >= t->n_bucket && !table_grow_locked(t) && t->n_bucket == 0)
        return false; /* a longer chain is fine; no chain at all is not */
    struct track *c = malloc(sizeof *c);
    if (c == NULL)
        return false;
    *c = *e;
    size_t k = track_hash(e->kind, e->key, t->n_bucket);
    c->next = t->bucket[k];
    t->bucket[k] = c;
    t->n++;
    return true;
}

/* Remove (KIND, KEY) into *OUT. False if it is not there. Caller holds
** table_lock. */
static bool
table_take_locked(struct track_table *t, int kind, uint64_t key, struct track *out)
{
    assert(pthread_equal(P.table_owner, pthread_self()));
    if (t->n_bucket == 0)
        return false;
    struct track **pp = &t->bucket[track_hash(kind, key, t->n_bucket)];
    for (; *pp != NULL; pp = &(*pp)->next) {
        struct track *e = *pp;
        if (e->key == key && e->kind == kind) {
            *pp = e->next;
            *out = *e;
            out->next = NULL;
            free(e);
            t->n--;
            return true;
        }
    }
    return false;
}

/* Forget every entry (a forked child's table holds its parent's). Caller
** holds table_lock. */
static void
table_clear_locked(struct track_table *t)
{
    assert(pthread_equal(P.table_owner, pthread_self()));
    for (size_t i = 0; i < t->n_bucket; i++) {
        struct track *e = t->bucket[i];
        while (e != NULL) {
            struct track *next = e->next;
            free(e);
            e = next;
        }
        t->bucket[i] = NULL;
    }
    t->n = 0;
}

static bool
track_put(int kind, uint64_t key, int dev, uint64_t bytes, uint64_t trace_id)
{
    struct track e = {.key = key,
                      .bytes = bytes,
                      .kind = kind,
                      .dev = dev,
                      .refs = 1,
                      .trace_id = trace_id};
    table_lock();
    bool ok = table_put_locked(&P.table, &e);
    table_unlock();
    return ok;
}

static bool
track_take(int kind, uint64_t key, struct track *out)
{
    table_lock();
    bool ok = table_take_locked(&P.table, kind, key, out);
    table_unlock();
    return ok;
}

/* ------------------------------------------------------------------ */
/* Fork                                                                 */
/* ------------------------------------------------------------------ */

/* Take the locks so that the child's copies are consistent and free. */
static void
fork_prepare(void)
{
    pthread_mutex_lock(&P.dev_lock);
    table_lock();
    trace_writer_fork_prepare(P.trace);
}

static void
fork_parent(void)
{
    trace_writer_fork_parent(P.trace);
    table_unlock();
    pthread_mutex_unlock(&P.dev_lock);
}

/* The child: fresh locks, no allocations of its own yet (its parent's
** stay the parent's), and a ledger entry of its own. */
static void
fork_child(void)
{
    /* The trace is the parent's: the child never writes to it, nor closes
    ** it (its copy of the writer holds no buffered line, and its lock). */
    P.trace = NULL;
    pthread_mutex_init(&P.dev_lock, NULL);
    pthread_mutex_init(&P.table_lock, NULL);
    table_lock();
    table_clear_locked(&P.table);
    table_unlock();
    if (ledger_after_fork(P.ledger) != VRAM_OK) {
        char why[640];
        snprintf(why, sizeof why, "cannot join the ledger of group %s after fork: %s",
                 P.group, vram_last_error());
        disable(why);
    }
}

/* ------------------------------------------------------------------ */
/* Devices                                                              */
/* ------------------------------------------------------------------ */

static void
uuid_format(const vcu_uuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
             b[12], b[13], b[14], b[15]);
}

/* The facts of CUDA ordinal ORD, asked from the driver the first time
** (UUID and total memory: neither allocates). */
static vcu_result
device_get(int ord, struct preload_device **out)
{
    if (ord < 0 || ord >= PRELOAD_MAX_DEVICES)
        return VCU_ERROR_INVALID_DEVICE;
    struct preload_device *d = &P.dev[ord];
    if (__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) {
        *out = d;
        return VCU_SUCCESS;
    }
    void *p = interpose_lib_sym(HOOK_CUDA, "cuDeviceGetUuid_v2");
    if (p == NULL)
        p = interpose_lib_sym(HOOK_CUDA, "cuDeviceGetUuid");
    void *q = interpose_real(HOOK_ID_cuDeviceTotalMem_v2);
    if (p == NULL || q == NULL)
        return VCU_ERROR_NOT_INITIALIZED;
    vcu_pfn_cuDeviceGetUuid get_uuid;
    vcu_pfn_cuDeviceTotalMem total_mem;
    memcpy(&get_uuid, &p, sizeof p);
    memcpy(&total_mem, &q, sizeof q);
    vcu_uuid u;
    size_t total = 0;
    vcu_result r = get_uuid(&u, ord);
    if (r == VCU_SUCCESS)
        r = total_mem(&total, ord);
    if (r != VCU_SUCCESS)
        return r;
    struct preload_device f;
    memset(&f, 0, sizeof f);
    uuid_format(&u, f.uuid, sizeof f.uuid);
    f.total = total;
    f.limit = quota_for_device(&P.quota, ord, f.uuid, total);
    pthread_mutex_lock(&P.dev_lock);
    if (!__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) {
        memcpy(d->uuid, f.uuid, sizeof d->uuid);
        d->total = f.total;
        d->limit = f.limit;
        __atomic_store_n(&d->ready, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&P.dev_lock);
    *out = d;
    return VCU_SUCCESS;
}

/* The CUDA ordinal of the calling thread's current context. */
static vcu_result
current_device(int *ord)
{
    void *p = __atomic_load_n(&P.ctx_get_device, __ATOMIC_ACQUIRE);
    if (p == NULL) {
        p = interpose_lib_sym(HOOK_CUDA, "cuCtxGetDevice");
        if (p == NULL)
            return VCU_ERROR_NOT_INITIALIZED;
        __atomic_store_n(&P.ctx_get_device, p, __ATOMIC_RELEASE);
    }
    vcu_pfn_cuCtxGetDevice get;
    memcpy(&get, &p, sizeof p);
    vcu_device dev = -1;
    vcu_result r = get(&dev);
    if (r == VCU_SUCCESS)
        *ord = dev;
    return r;
}

/* The device of UUID among those this process has seen, or -1. */
static int
device_by_uuid(const char *uuid)
{
    for (int i = 0; i < PRELOAD_MAX_DEVICES; i++)
        if (__atomic_load_n(&P.dev[i].ready, __ATOMIC_ACQUIRE) &&
            strcmp(P.dev[i].uuid, uuid) == 0)
            return i;
    return -1;
}

/* ------------------------------------------------------------------ */
/* Reserve, refuse, give back                                           */
/* ------------------------------------------------------------------ */

/* Append ", pid 123 python 2.00 GiB" for the biggest users of UUID to
** BUF (LEN bytes, holding a string). Best effort: nothing if the
** snapshot cannot be taken. */
static void
biggest_users(const char *uuid, char *buf, size_t len)
{
    struct ledger_snapshot *s = malloc(sizeof *s);
    if (s == NULL)
        return;
    if (ledger_snapshot(P.ledger, s) != VRAM_OK) {
        free(s);
        return;
    }
    int j = -1;
    for (int i = 0; i < s->n_devices && i < LEDGER_MAX_DEVICES; i++)
        if (strcmp(s->uuid[i], uuid) == 0)
            j = i;
    if (j < 0) {
        free(s);
        return;
    }
    enum { TOP = 3 };
    int top[TOP] = {-1, -1, -1};
    for (int p = 0; p < s->n_procs && p < LEDGER_MAX_PROCS; p++) {
        uint64_t u = s->procs[p].dev[j].used;
        if (u == 0)
            continue;
        for (int k = 0; k < TOP; k++) {
            if (top[k] < 0 || u > s->procs[top[k]].dev[j].used) {
                memmove(&top[k + 1], &top[k], (size_t)(TOP - 1 - k) * sizeof top[0]);
                top[k] = p;
                break;
            }
        }
    }
    size_t n = strlen(buf);
    for (int k = 0; k < TOP && top[k] >= 0 && n < len; k++) {
        const struct ledger_proc *pr = &s->procs[top[k]];
        char sz[32];
        size_format(pr->dev[j].used, sz, sizeof sz);
        int w = snprintf(buf + n, len - n, "%spid %ld %.*s %s", k == 0 ? " (" : ", ",
                         (long)pr->pid, LEDGER_COMM_LEN, pr->comm, sz);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    if (top[0] >= 0 && n < len)
        snprintf(buf + n, len - n, ")");
    free(s);
}

/* The refusal line (see the top of the file for its form). */
static void
refusal_line(const char *what, const struct preload_device *d, uint64_t bytes,
             uint64_t group_used)
{
    if (!line_allowed())
        return;
    char req[32], quota[32], used[32], line[1024];
    size_format(bytes, req, sizeof req);
    size_format(d->limit, quota, sizeof quota);
    size_format(group_used, used, sizeof used);
    snprintf(line, sizeof line,
             "vram: out of GPU memory quota on %s: %s of %s refused; quota %s, group %s "
             "uses %s",
             d->uuid, what, req, quota, P.group, used);
    biggest_users(d->uuid, line, sizeof line);
    say(line);
}

/*
** Reserve BYTES on CUDA ordinal ORD (-1: the current context's device)
** for the call WHAT. On success *OUT is the device, to give back to. On
** refusal CUDA_ERROR_OUT_OF_MEMORY and a line; the driver's own error when
** it cannot say which device (no context: the call would fail anyway).
*/
static vcu_result
reserve(const char *what, int ord, uint64_t bytes, struct preload_device **out)
{
    vcu_result r = VCU_SUCCESS;
    if (ord < 0)
        r = current_device(&ord);
    struct preload_device *d = NULL;
    if (r == VCU_SUCCESS)
        r = device_get(ord, &d);
    if (r != VCU_SUCCESS)
        return r;
    uint64_t group_used = 0;
    vram_status st = ledger_reserve(P.ledger, d->uuid, bytes, d->limit, &group_used);
    if (st == VRAM_E_OOM) {
        refusal_line(what, d, bytes, group_used);
        return VCU_ERROR_OUT_OF_MEMORY;
    }
    if (st != VRAM_OK) {
        /* The ledger is unusable: refuse rather than let memory go uncounted. */
        if (line_allowed()) {
            char line[768];
            snprintf(line, sizeof line, "vram: %s refused: %s", what, vram_last_error());
            say(line);
        }
        return VCU_ERROR_OUT_OF_MEMORY;
    }
    *out = d;
    return VCU_SUCCESS;
}

static void
unreserve(const struct preload_device *d, uint64_t bytes)
{
    if (bytes > 0)
        ledger_release(P.ledger, d->uuid, bytes);
}

/* Give back the entry E of an allocation that the driver freed. */
static void
untrack_release(const struct track *e)
{
    struct preload_device *d = NULL;
    if (device_get(e->dev, &d) == VCU_SUCCESS)
        unreserve(d, e->bytes);
    trace_write(TRACE_FREE, e->trace_id, e->bytes, e->dev);
}

/* The real function of hook ID into *FP (a function pointer of SIZE bytes). */
static bool
real_of(enum hook_id id, void *fp, size_t size)
{
    void *p = interpose_real(id);
    if (p == NULL)
        return false;
    memcpy(fp, &p, size);
    return true;
}

/*
** Record a new allocation (KIND, KEY) of BYTES on D's ordinal ORD, or undo
** it when the table cannot hold it (out of host memory): an untracked
** allocation could never be given back. Returns the hook's result.
*/
static vcu_result
track_or_undo(int kind, uint64_t key, int ord, const struct preload_device *d,
              uint64_t bytes)
{
    uint64_t id = trace_next_id();
    if (track_put(kind, key, ord, bytes, id)) {
        trace_write(TRACE_ALLOC, id, bytes, ord);
        return VCU_SUCCESS;
    }
    vcu_pfn_cuMemFree free_ptr;
    vcu_pfn_cuMemRelease release;
    vcu_pfn_cuArrayDestroy destroy;
    if (kind == TRACK_PTR && real_of(HOOK_ID_cuMemFree_v2, &free_ptr, sizeof free_ptr))
        free_ptr((vcu_deviceptr)key);
    else if (kind == TRACK_HANDLE &&
             real_of(HOOK_ID_cuMemRelease, &release, sizeof release))
        release((vcu_mem_handle)key);
    else if (kind == TRACK_ARRAY &&
             real_of(HOOK_ID_cuArrayDestroy, &destroy, sizeof destroy))
        destroy((vcu_array)(uintptr_t)key);
    unreserve(d, bytes);
    return VCU_ERROR_OUT_OF_MEMORY;
}

/* ------------------------------------------------------------------ */
/* The route every hook takes first                                     */
/* ------------------------------------------------------------------ */

enum route {
    ROUTE_FAIL,    /* return *fail */
    ROUTE_FORWARD, /* call the real function and return its result */
    ROUTE_COUNT    /* do the hook's work */
};

/*
** Where a call of hook ID goes; the real function is written to *FP (SIZE
** bytes) unless ROUTE_FAIL. DISABLED mode, or no real function:
** CUDA_ERROR_NOT_INITIALIZED. PASSIVE mode, or a call nested in another
** hook on this thread: forward.
*/
static enum route
route(enum hook_id id, void *fp, size_t size, vcu_result *fail)
{
    enum preload_mode m = preload_mode();
    if (m == PRELOAD_DISABLED || !real_of(id, fp, size)) {
        *fail = VCU_ERROR_NOT_INITIALIZED;
        return ROUTE_FAIL;
    }
    if (m == PRELOAD_PASSIVE || hook_depth > 0)
        return ROUTE_FORWARD;
    return ROUTE_COUNT;
}

/* ------------------------------------------------------------------ */
/* Hooks: initialization and reports                                    */
/* ------------------------------------------------------------------ */

vcu_result
cuInit(unsigned int flags)
{
    vcu_pfn_cuInit real;
    vcu_result r;
    if (route(HOOK_ID_cuInit, &real, sizeof real, &r) == ROUTE_FAIL)
        return r;
    return real(flags);
}

static uint64_t
min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/*
** Free and total memory as the quota sees them: total = min(quota,
** physical), free = min(physical free, quota - group use), never negative.
** Errors are only ever the driver's own.
*/
vcu_result
cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    vcu_pfn_cuMemGetInfo real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemGetInfo_v2, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(free_bytes, total_bytes);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    r = real(free_bytes, total_bytes);
    int ord;
    struct preload_device *d;
    if (r == VCU_SUCCESS && free_bytes != NULL && total_bytes != NULL &&
        current_device(&ord) == VCU_SUCCESS && device_get(ord, &d) == VCU_SUCCESS &&
        d->limit != 0) {
        uint64_t used = ledger_group_used(P.ledger, d->uuid);
        uint64_t total = min_u64(d->limit, *total_bytes);
        uint64_t room = d->limit > used ? d->limit - used : 0;
        *total_bytes = (size_t)total;
        *free_bytes = (size_t)min_u64(min_u64(*free_bytes, room), total);
    }
    hook_depth--;
    return r;
}

vcu_result
cuDeviceTotalMem_v2(size_t *bytes, vcu_device dev)
{
    vcu_pfn_cuDeviceTotalMem real;
    vcu_result r;
    switch (route(HOOK_ID_cuDeviceTotalMem_v2, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(bytes, dev);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    r = real(bytes, dev);
    struct preload_device *d;
    if (r == VCU_SUCCESS && bytes != NULL && device_get(dev, &d) == VCU_SUCCESS &&
        d->limit != 0)
        *bytes = (size_t)min_u64(d->limit, *bytes);
    hook_depth--;
    return r;
}

/* ------------------------------------------------------------------ */
/* Hooks: device pointers                                               */
/* ------------------------------------------------------------------ */

/*
** The common shape of cuMemAlloc_v2, cuMemAllocManaged, cuMemAllocAsync
** and cuMemAllocFromPoolAsync: reserve on the current device, call, track
** the pointer or give the reservation back. CALL runs the real function
** with the hook's own arguments (it has them; this file does not).
*/
struct ptr_call {
    enum hook_id id;
    vcu_deviceptr *dptr;
    size_t bytes;
    unsigned int flags; /* cuMemAllocManaged */
    vcu_mem_pool pool;  /* cuMemAllocFromPoolAsync */
    vcu_stream stream;  /* the async ones */
};

static vcu_result
ptr_call_real(const struct ptr_call *c, void *fp)
{
    switch (c->id) {
    case HOOK_ID_cuMemAlloc_v2: {
        vcu_pfn_cuMemAlloc f;
        memcpy(&f, &fp, sizeof f);
        return f(c->dptr, c->bytes);
    }
    case HOOK_ID_cuMemAllocManaged: {
        vcu_pfn_cuMemAllocManaged f;
        memcpy(&f, &fp, sizeof f);
        return f(c->dptr, c->bytes, c->flags);
    }
    case HOOK_ID_cuMemAllocAsync:
    case HOOK_ID_cuMemAllocAsync_ptsz: {
        vcu_pfn_cuMemAllocAsync f;
        memcpy(&f, &fp, sizeof f);
        return f(c->dptr, c->bytes, c->stream);
    }
    case HOOK_ID_cuMemAllocFromPoolAsync:
    case HOOK_ID_cuMemAllocFromPoolAsync_ptsz: {
        vcu_pfn_cuMemAllocFromPoolAsync f;
        memcpy(&f, &fp, sizeof f);
        return f(c->dptr, c->bytes, c->pool, c->stream);
    }
    default:
        return VCU_ERROR_NOT_SUPPORTED; /* not a pointer allocation: a bug here */
    }
}

static vcu_result
ptr_alloc(const struct ptr_call *c)
{
    void *fp = interpose_real(c->id);
    vcu_result r;
    enum preload_mode m = preload_mode();
    if (m == PRELOAD_DISABLED || fp == NULL)
        return VCU_ERROR_NOT_INITIALIZED;
    if (m == PRELOAD_PASSIVE || hook_depth > 0 || c->dptr == NULL || c->bytes == 0)
        return ptr_call_real(c, fp); /* invalid calls: the driver's error */
    hook_depth++;
    int ord = -1;
    struct preload_device *d = NULL;
    r = current_device(&ord);
    if (r == VCU_SUCCESS)
        r = reserve(hook_name(c->id), ord, c->bytes, &d);
    if (r == VCU_SUCCESS) {
        r = ptr_call_real(c, fp);
        if (r != VCU_SUCCESS)
            unreserve(d, c->bytes);
        else
            r = track_or_undo(TRACK_PTR, *c->dptr, ord, d, c->bytes);
    }
    hook_depth--;
    return trace_if_refused(r, ord, c->bytes);
}

vcu_result
cuMemAlloc_v2(vcu_deviceptr *dptr, size_t bytesize)
{
    struct ptr_call c = {.id = HOOK_ID_cuMemAlloc_v2, .dptr = dptr, .bytes = bytesize};
    return ptr_alloc(&c);
}

/* Managed memory is counted whole on the current device, though the
** driver may keep pages of it on the host. */
vcu_result
cuMemAllocManaged(vcu_deviceptr *dptr, size_t bytesize, unsigned int flags)
{
    struct ptr_call c = {
        .id = HOOK_ID_cuMemAllocManaged, .dptr = dptr, .bytes = bytesize, .flags = flags};
    return ptr_alloc(&c);
}

vcu_result
cuMemAllocAsync(vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream)
{
    struct ptr_call c = {
        .id = HOOK_ID_cuMemAllocAsync, .dptr = dptr, .bytes = bytesize, .stream = stream};
    return ptr_alloc(&c);
}

vcu_result
cuMemAllocAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize, vcu_stream stream)
{
    struct ptr_call c = {.id = HOOK_ID_cuMemAllocAsync_ptsz,
                         .dptr = dptr,
                         .bytes = bytesize,
                         .stream = stream};
    return ptr_alloc(&c);
}

vcu_result
cuMemAllocFromPoolAsync(vcu_deviceptr *dptr, size_t bytesize, vcu_mem_pool pool,
                        vcu_stream stream)
{
    struct ptr_call c = {.id = HOOK_ID_cuMemAllocFromPoolAsync,
                         .dptr = dptr,
                         .bytes = bytesize,
                         .pool = pool,
                         .stream = stream};
    return ptr_alloc(&c);
}

vcu_result
cuMemAllocFromPoolAsync_ptsz(vcu_deviceptr *dptr, size_t bytesize, vcu_mem_pool pool,
                             vcu_stream stream)
{
    struct ptr_call c = {.id = HOOK_ID_cuMemAllocFromPoolAsync_ptsz,
                         .dptr = dptr,
                         .bytes = bytesize,
                         .pool = pool,
                         .stream = stream};
    return ptr_alloc(&c);
}

/*
** The pitch is only known after the call: reserve the width rounded up
** to PITCH_ALIGN first, then reserve the difference (or give back the
** excess) once the driver has said. If the difference is refused, the
** allocation is freed again and refused.
*/
vcu_result
cuMemAllocPitch_v2(vcu_deviceptr *dptr, size_t *pitch, size_t widthInBytes, size_t height,
                   unsigned int elementSizeBytes)
{
    vcu_pfn_cuMemAllocPitch real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemAllocPitch_v2, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(dptr, pitch, widthInBytes, height, elementSizeBytes);
    case ROUTE_COUNT:
        break;
    }
    uint64_t row = ((uint64_t)widthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    if (dptr == NULL || pitch == NULL || widthInBytes == 0 || height == 0 ||
        row < widthInBytes || row > UINT64_MAX / height)
        return real(dptr, pitch, widthInBytes, height, elementSizeBytes);
    uint64_t guess = row * height;
    hook_depth++;
    int ord = -1;
    struct preload_device *d = NULL;
    r = current_device(&ord);
    if (r == VCU_SUCCESS)
        r = reserve("cuMemAllocPitch_v2", ord, guess, &d);
    if (r == VCU_SUCCESS) {
        r = real(dptr, pitch, widthInBytes, height, elementSizeBytes);
        if (r != VCU_SUCCESS) {
            unreserve(d, guess);
        } else {
            uint64_t actual = (uint64_t)*pitch * height;
            struct preload_device *d2 = NULL;
            if (actual > guess &&
                reserve("cuMemAllocPitch_v2", ord, actual - guess, &d2) != VCU_SUCCESS) {
                vcu_pfn_cuMemFree free_ptr;
                if (real_of(HOOK_ID_cuMemFree_v2, &free_ptr, sizeof free_ptr))
                    free_ptr(*dptr);
                unreserve(d, guess);
                r = VCU_ERROR_OUT_OF_MEMORY;
            } else {
                if (actual < guess)
                    unreserve(d, guess - actual);
                r = track_or_undo(TRACK_PTR, *dptr, ord, d, actual);
            }
        }
    }
    hook_depth--;
    return trace_if_refused(r, ord, guess);
}

/*
** The frees: take the entry out first (so that two threads never give the
** same bytes back), free, then give the bytes back only once the driver
** has freed them -- so the device never holds more than the ledger says.
** A pointer we did not count (allocated before the library was active,
** or not device memory) just forwards.
*/
static vcu_result
ptr_free(enum hook_id id, vcu_deviceptr dptr, vcu_stream stream)
{
    void *fp = interpose_real(id);
    enum preload_mode m = preload_mode();
    if (m == PRELOAD_DISABLED || fp == NULL)
        return VCU_ERROR_NOT_INITIALIZED;
    bool count = m == PRELOAD_ACTIVE && hook_depth == 0;
    struct track e = {0}; /* gcc 13 cannot see that it is written before use */
    bool known = count && track_take(TRACK_PTR, dptr, &e);
    hook_depth++;
    vcu_result r;
    if (id == HOOK_ID_cuMemFree_v2) {
        vcu_pfn_cuMemFree f;
        memcpy(&f, &fp, sizeof f);
        r = f(dptr);
    } else {
        vcu_pfn_cuMemFreeAsync f;
        memcpy(&f, &fp, sizeof f);
        r = f(dptr, stream);
    }
    if (known) {
        if (r == VCU_SUCCESS)
            untrack_release(&e);
        else
            (void)track_put(e.kind, e.key, e.dev, e.bytes, e.trace_id); /* still live */
    }
    hook_depth--;
    return r;
}

vcu_result
cuMemFree_v2(vcu_deviceptr dptr)
{
    return ptr_free(HOOK_ID_cuMemFree_v2, dptr, NULL);
}

/* Given back at the call, not when the stream reaches the free: for a
** moment the device may hold a little more than the ledger says. */
vcu_result
cuMemFreeAsync(vcu_deviceptr dptr, vcu_stream stream)
{
    return ptr_free(HOOK_ID_cuMemFreeAsync, dptr, stream);
}

vcu_result
cuMemFreeAsync_ptsz(vcu_deviceptr dptr, vcu_stream stream)
{
    return ptr_free(HOOK_ID_cuMemFreeAsync_ptsz, dptr, stream);
}

/* ------------------------------------------------------------------ */
/* Hooks: virtual memory                                                */
/* ------------------------------------------------------------------ */

/* Physical memory on a device (location type DEVICE) is counted on that
** device's ordinal; host-located handles are not device memory. */
vcu_result
cuMemCreate(vcu_mem_handle *handle, size_t size, const vcu_mem_allocation_prop *prop,
            unsigned long long flags)
{
    vcu_pfn_cuMemCreate real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemCreate, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(handle, size, prop, flags);
    case ROUTE_COUNT:
        break;
    }
    if (handle == NULL || size == 0 || prop == NULL ||
        prop->location.type != VCU_MEM_LOCATION_TYPE_DEVICE)
        return real(handle, size, prop, flags);
    hook_depth++;
    int ord = prop->location.id;
    struct preload_device *d = NULL;
    r = reserve("cuMemCreate", ord, size, &d);
    if (r == VCU_SUCCESS) {
        r = real(handle, size, prop, flags);
        if (r != VCU_SUCCESS)
            unreserve(d, size);
        else
            r = track_or_undo(TRACK_HANDLE, *handle, ord, d, size);
    }
    hook_depth--;
    return trace_if_refused(r, ord, size);
}

/*
** The bytes go back at the last cuMemRelease of the handle (one per
** cuMemCreate and per cuMemRetainAllocationHandle). The driver frees the
** memory only once its last mapping is gone as well: until then the
** device holds a little more than the ledger says.
*/
vcu_result
cuMemRelease(vcu_mem_handle handle)
{
    vcu_pfn_cuMemRelease real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemRelease, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(handle);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    struct track e = {0}; /* gcc 13 cannot see that it is written before use */
    bool last = false, known = false;
    table_lock();
    struct track *t = table_find_locked(&P.table, TRACK_HANDLE, handle);
    if (t != NULL) {
        known = true;
        if (t->refs > 1)
            t->refs--;
        else
            last = table_take_locked(&P.table, TRACK_HANDLE, handle, &e);
    }
    table_unlock();
    r = real(handle);
    if (known && r == VCU_SUCCESS && last) {
        untrack_release(&e);
    } else if (known && r != VCU_SUCCESS) {
        /* Undo: the reference is still held. */
        if (last) {
            (void)track_put(e.kind, e.key, e.dev, e.bytes, e.trace_id);
        } else {
            table_lock();
            t = table_find_locked(&P.table, TRACK_HANDLE, handle);
            if (t != NULL)
                t->refs++;
            table_unlock();
        }
    }
    hook_depth--;
    return r;
}

/* Another reference to a handle we count: one more cuMemRelease is due
** before its bytes go back (NCCL does this). */
vcu_result
cuMemRetainAllocationHandle(vcu_mem_handle *handle, void *addr)
{
    vcu_pfn_cuMemRetainAllocationHandle real;
    vcu_result r;
    switch (route(HOOK_ID_cuMemRetainAllocationHandle, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(handle, addr);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    r = real(handle, addr);
    if (r == VCU_SUCCESS && handle != NULL) {
        table_lock();
        struct track *t = table_find_locked(&P.table, TRACK_HANDLE, *handle);
        if (t != NULL)
            t->refs++;
        table_unlock();
    }
    hook_depth--;
    return r;
}

/* ------------------------------------------------------------------ */
/* Hooks: arrays                                                        */
/* ------------------------------------------------------------------ */

/* Bytes of one channel of one element of FORMAT. Formats not named in
** cuda_api.h (packed, block-compressed, video) count 4: more than any of
** them takes per channel, so an estimate never lets a quota be passed. */
static uint64_t
format_bytes(vcu_array_format format)
{
    switch (format) {
    case VCU_AD_FORMAT_UNSIGNED_INT8:
    case VCU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case VCU_AD_FORMAT_UNSIGNED_INT16:
    case VCU_AD_FORMAT_SIGNED_INT16:
    case VCU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4;
    }
}

/* An array's bytes from its descriptor: width x height x depth x channels
** x channel size (the driver may pad rows; that is not seen). 0 when it
** overflows (the driver refuses such an array). */
static uint64_t
array_bytes(size_t w, size_t h, size_t depth, vcu_array_format f, unsigned channels)
{
    uint64_t dims[5] = {w, h > 0 ? h : 1, depth > 0 ? depth : 1, channels,
                        format_bytes(f)};
    uint64_t n = 1;
    for (int i = 0; i < 5; i++) {
        if (dims[i] != 0 && n > UINT64_MAX / dims[i])
            return 0;
        n *= dims[i];
    }
    return n;
}

/* cuArrayCreate_v2 and cuArray3DCreate_v2 once their bytes are known. */
static vcu_result
array_create(const char *what, uint64_t bytes, vcu_array *array,
             vcu_result (*call)(const void *desc, vcu_array *array, void *fp),
             const void *desc, void *fp)
{
    hook_depth++;
    int ord = -1;
    struct preload_device *d = NULL;
    vcu_result r = current_device(&ord);
    if (r == VCU_SUCCESS)
        r = reserve(what, ord, bytes, &d);
    if (r == VCU_SUCCESS) {
        r = call(desc, array, fp);
        if (r != VCU_SUCCESS)
            unreserve(d, bytes);
        else
            r = track_or_undo(TRACK_ARRAY, (uint64_t)(uintptr_t)*array, ord, d, bytes);
    }
    hook_depth--;
    return trace_if_refused(r, ord, bytes);
}

static vcu_result
call_array_2d(const void *desc, vcu_array *array, void *fp)
{
    vcu_pfn_cuArrayCreate f;
    memcpy(&f, &fp, sizeof f);
    return f(array, desc);
}

static vcu_result
call_array_3d(const void *desc, vcu_array *array, void *fp)
{
    vcu_pfn_cuArray3DCreate f;
    memcpy(&f, &fp, sizeof f);
    return f(array, desc);
}

vcu_result
cuArrayCreate_v2(vcu_array *array, const vcu_array_descriptor *desc)
{
    vcu_pfn_cuArrayCreate real;
    vcu_result r;
    switch (route(HOOK_ID_cuArrayCreate_v2, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(array, desc);
    case ROUTE_COUNT:
        break;
    }
    uint64_t bytes = desc == NULL ? 0
                                  : array_bytes(desc->Width, desc->Height, 1,
                                                desc->Format, desc->NumChannels);
    if (array == NULL || bytes == 0)
        return real(array, desc);
    void *fp;
    memcpy(&fp, &real, sizeof fp);
    return array_create("cuArrayCreate_v2", bytes, array, call_array_2d, desc, fp);
}

vcu_result
cuArray3DCreate_v2(vcu_array *array, const vcu_array3d_descriptor *desc)
{
    vcu_pfn_cuArray3DCreate real;
    vcu_result r;
    switch (route(HOOK_ID_cuArray3DCreate_v2, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(array, desc);
    case ROUTE_COUNT:
        break;
    }
    uint64_t bytes = desc == NULL ? 0
                                  : array_bytes(desc->Width, desc->Height, desc->Depth,
                                                desc->Format, desc->NumChannels);
    if (array == NULL || bytes == 0)
        return real(array, desc);
    void *fp;
    memcpy(&fp, &real, sizeof fp);
    return array_create("cuArray3DCreate_v2", bytes, array, call_array_3d, desc, fp);
}

vcu_result
cuArrayDestroy(vcu_array array)
{
    vcu_pfn_cuArrayDestroy real;
    vcu_result r;
    switch (route(HOOK_ID_cuArrayDestroy, &real, sizeof real, &r)) {
    case ROUTE_FAIL:
        return r;
    case ROUTE_FORWARD:
        return real(array);
    case ROUTE_COUNT:
        break;
    }
    hook_depth++;
    struct track e = {0}; /* gcc 13 cannot see that it is written before use */
    bool known = track_take(TRACK_ARRAY, (uint64_t)(uintptr_t)array, &e);
    r = real(array);
    if (known) {
        if (r == VCU_SUCCESS)
            untrack_release(&e);
        else
            (void)track_put(e.kind, e.key, e.dev, e.bytes, e.trace_id);
    }
    hook_depth--;
    return r;
}

/* ------------------------------------------------------------------ */
/* Hooks: NVML                                                          */
/* ------------------------------------------------------------------ */

/*
** NVML's view of a device under the quota: its total is min(quota,
** total), its "used" the group's use, its free what is left. NVML names
** devices by handle: the UUID (NVML's own nvmlDeviceGetUUID) finds the
** quota, with the CUDA ordinal when this process's CUDA has seen the
** device (else only UUID and all-device limits apply). NVML calls are not
** refused in DISABLED mode: they only report.
*/
static bool
nvml_limit(vnvml_device device, uint64_t total, char *uuid, size_t len, uint64_t *limit)
{
    void *p = interpose_lib_sym(HOOK_NVML, "nvmlDeviceGetUUID");
    if (p == NULL)
        return false;
    vnvml_pfn_get_uuid get_uuid;
    memcpy(&get_uuid, &p, sizeof p);
    if (get_uuid(device, uuid, (unsigned)len) != VNVML_SUCCESS)
        return false;
    uuid[len - 1] = '\0';
    *limit = quota_for_device(&P.quota, device_by_uuid(uuid), uuid, total);
    return *limit != 0;
}

vnvml_return
nvmlDeviceGetMemoryInfo(vnvml_device device, struct vnvml_memory *m)
{
    vnvml_pfn_memory_info real;
    if (!real_of(HOOK_ID_nvmlDeviceGetMemoryInfo, &real, sizeof real))
        return VNVML_ERROR_UNINITIALIZED;
    if (preload_mode() != PRELOAD_ACTIVE || hook_depth > 0)
        return real(device, m);
    hook_depth++;
    vnvml_return r = real(device, m);
    char uuid[LEDGER_UUID_LEN];
    uint64_t limit;
    if (r == VNVML_SUCCESS && m != NULL &&
        nvml_limit(device, m->total, uuid, sizeof uuid, &limit)) {
        uint64_t used = ledger_group_used(P.ledger, uuid);
        m->total = min_u64(limit, m->total);
        m->used = min_u64(used, m->total);
        m->free = m->total - m->used;
    }
    hook_depth--;
    return r;
}

vnvml_return
nvmlDeviceGetMemoryInfo_v2(vnvml_device device, struct vnvml_memory_v2 *m)
{
    vnvml_pfn_memory_info_v2 real;
    if (!real_of(HOOK_ID_nvmlDeviceGetMemoryInfo_v2, &real, sizeof real))
        return VNVML_ERROR_UNINITIALIZED;
    if (preload_mode() != PRELOAD_ACTIVE || hook_depth > 0)
        return real(device, m);
    hook_depth++;
    vnvml_return r = real(device, m);
    char uuid[LEDGER_UUID_LEN];
    uint64_t limit;
    if (r == VNVML_SUCCESS && m != NULL &&
        nvml_limit(device, m->total, uuid, sizeof uuid, &limit)) {
        uint64_t used = ledger_group_used(P.ledger, uuid);
        m->total = min_u64(limit, m->total);
        m->used = min_u64(used, m->total);
        /* total = reserved + used + free, as NVML keeps it. */
        uint64_t taken = min_u64(m->total, m->used + m->reserved);
        m->free = m->total - taken;
    }
    hook_depth--;
    return r;
}
