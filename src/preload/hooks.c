/* SPDX-License-Identifier: MIT */
/*
** hooks.c -- what libvram-preload.so does when a program takes or gives
** back GPU memory: the state, the settings, the trace, the devices and the
** steps that hooks of several families share (preload.h). The hooks of
** PRELOAD_HOOKS (hooks.h) are written from their rows in the hook family
** files hooks_*.c, with each row's own steps, but the two
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
** line on stderr and nothing else: a trace limits nothing. With
** VRAM_TRACE_SITES the trace is format 2 and each 'a' and 'o' names its
** call site (callsite.c).
**
** Locks: P.dev_lock publishes device facts, the table of live
** allocations (track.c) has its own; neither is held across a driver call
** or a ledger call (reserve, call the driver, then track or give back).
**
** Re-entrancy: a hook entered while another hook runs on the same thread
** (the driver or a profiler calling back into an exported symbol) forwards
** directly. Fork: the child gets its own ledger entry and an empty table.
*/
#include <assert.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/hot.h"
#include "base/size.h"
#include "base/text.h"
#include "base/uuid.h"
#include "config/env.h"
#include "driver/nvml_api.h"
#include "ledger/ledger.h"
#include "policy/policy.h"
#include "preload/callsite.h"
#include "preload/pyrecord.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"
#include "quota/quota.h"
#include "trace/trace.h"
#include "vram.h"

#define LINE_INTERVAL_NS 1000000000LL /* at most one refusal line a second */

/* ------------------------------------------------------------------ */
/* State                                                                */
/* ------------------------------------------------------------------ */

struct preload P = {
    .dev_lock = PTHREAD_MUTEX_INITIALIZER,
    .last_line_ns = -LINE_INTERVAL_NS,
};

static pthread_once_t preload_once = PTHREAD_ONCE_INIT;

_Thread_local int hook_depth __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------ */
/* Lines on stderr                                                      */
/* ------------------------------------------------------------------ */

/* Write LINE (without its newline) to stderr in one write, so that lines
** of several processes never interleave, made safe for a terminal first
** (base/text.h: a line may name another process's command or a path).
** Never fails loudly. */
void
say(const char *line)
{
    char buf[1024];
    text_safe(line, strlen(line), buf, sizeof buf - 1);
    size_t n = strlen(buf);
    buf[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, n);
    (void)w; /* nothing to do if stderr is gone */
}

/* May a refusal line be printed now? (At most one a second: frameworks
** retry smaller sizes after an OOM, and each retry must not print.) */
static bool
line_allowed(void)
{
    long long now = (long long)now_mono_ns();
    long long last = __atomic_load_n(&P.last_line_ns, __ATOMIC_RELAXED);
    if (now - last < LINE_INTERVAL_NS)
        return false;
    return __atomic_compare_exchange_n(&P.last_line_ns, &last, now, false,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ */
/* Initialization                                                       */
/* ------------------------------------------------------------------ */

/* Why P.no_ledger is set (written before ACTIVE is published). */
static char no_ledger_why[640];

/* Fail closed: remember that CUDA is off here and say why, once. */
void
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

/* The group that names this process in traces and lines: the job's,
** else the user's. */
static const char *
main_group(void)
{
    return P.ledger[ACCT_JOB] != NULL ? P.group[ACCT_JOB] : P.group[ACCT_USER];
}

/* Open VRAM_TRACE, if GET (the environment's reader) has it, into
** P.trace. Run by preload_init only. */
static void
trace_open(env_getter get)
{
    static struct env_trace tr; /* 1 KiB: not on the stack of a hooked call */
    char meta[200], line[768];
    if (env_trace_load(get, NULL, &tr) != VRAM_OK) {
        snprintf(line, sizeof line, "vram: %s; no trace is recorded", vram_last_error());
        say(line);
        return;
    }
    const char *path = tr.path;
    bool sites = tr.sites;
    if (path[0] == '\0')
        return;
    int n = snprintf(meta, sizeof meta, "workload=vram-preload pid=%ld group=%s version=%s",
                     (long)getpid(), main_group(), VRAM_VERSION);
    /* The quota, so that `vram analyze` judges an OOM against it: written
    ** when it is one size in bytes for every device (a fraction becomes
    ** bytes only once a device's total is known, after this line). */
    uint64_t limit = P.quota.all.kind == QUOTA_BYTES ? P.quota.all.bytes : 0;
    for (int i = 0; i < P.quota.n_entries && limit != 0; i++)
        if (P.quota.entries[i].value.kind != QUOTA_BYTES ||
            P.quota.entries[i].value.bytes != limit)
            limit = 0;
    if (P.quota.active && limit != 0 && n > 0 && (size_t)n < sizeof meta)
        snprintf(meta + n, sizeof meta - (size_t)n, " limit=%llu", (unsigned long long)limit);
    vram_status st = sites ? trace_writer_open_sites(path, meta, &P.trace)
                           : trace_writer_open(path, meta, &P.trace);
    if (st != VRAM_OK) {
        snprintf(line, sizeof line, "vram: VRAM_TRACE: %s; no trace is recorded",
                 vram_last_error());
        say(line);
        P.trace = NULL;
        return;
    }
    if (sites) {
        callsite_init(P.trace, tr.holders);
        P.trace_sites = true;
    }
}

/*
** The call site of the allocation being made, when the trace has sites.
** Outside the hook's depth: reading Python frames can run the garbage
** collector, whose finalizers may free GPU memory on this thread, and that
** free must be counted like any other, not forwarded as a driver's nested
** call would be (its allocation would stay counted for good).
*/
VRAM_HOT static uint32_t
trace_site(void)
{
    if (P.trace == NULL || !P.trace_sites)
        return TRACE_NO_SITE;
    int depth = hook_depth;
    hook_depth = 0;
    uint32_t site = callsite_capture(P.trace);
    hook_depth = depth;
    return site;
}

/* Write event OP (no lock held). A failed write is said once; the
** writer then refuses every later event by itself. */
VRAM_HOT static void
trace_write(char op, uint64_t id, uint64_t bytes, int ord, uint32_t site)
{
    struct trace_writer *w = P.trace;
    if (w == NULL || ord < 0)
        return;
    struct trace_event ev = {
        .t_us = now_wall_us(),
        .id = id,
        .size = bytes,
        .device = ord,
        .site = site,
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

/* A stream-ordered allocation at KEY of BYTES on ORD, kept in the table
** only for its trace events (its pool's reserve is what is charged). */
void
trace_pooled(int ord, uint64_t key, uint64_t bytes)
{
    if (P.trace == NULL)
        return;
    uint64_t id = __atomic_fetch_add(&P.next_trace_id, 1, __ATOMIC_RELAXED);
    if (track_put(TRACK_PTR, key, ord, bytes, id) && track_flag(TRACK_PTR, key, TRACK_POOLED))
        trace_write(TRACE_ALLOC, id, bytes, ord, trace_site());
}

/* An id for a new allocation (0 when no trace is recorded). */
VRAM_HOT static uint64_t
trace_next_id(void)
{
    if (P.trace == NULL)
        return 0;
    return __atomic_fetch_add(&P.next_trace_id, 1, __ATOMIC_RELAXED);
}

/* After an allocation hook: an 'o' event when R says memory ran out. */
VRAM_HOT vcu_result
trace_if_refused(vcu_result r, int ord, uint64_t bytes)
{
    if (r == VCU_ERROR_OUT_OF_MEMORY && bytes > 0)
        trace_write(TRACE_OOM, 0, bytes, ord, ord >= 0 ? trace_site() : TRACE_NO_SITE);
    return r;
}

/*
** The host's policy: which account of the user's this process joins, if
** any. False when the process must fail closed (the line is said).
*/
static bool
policy_init(void)
{
    bool present = false;
    if (policy_load(policy_path(), &P.policy, &present) != VRAM_OK) {
        disable(vram_last_error());
        return false;
    }
    if (!present)
        return true;
    struct policy_who w;
    if (policy_who_current(&w) != VRAM_OK) {
        char why[640];
        snprintf(why, sizeof why, "%s: %s", policy_path(), vram_last_error());
        disable(why);
        return false;
    }
    policy_resolve(&P.policy, &w, &P.verdict);
    if (P.verdict.exempt)
        return true;
    if (w.user[0] != '\0')
        snprintf(P.user, sizeof P.user, "%s", w.user);
    else
        snprintf(P.user, sizeof P.user, "%lu", (unsigned long)w.uid);
    snprintf(P.group[ACCT_USER], sizeof P.group[ACCT_USER], "user-%lu",
             (unsigned long)w.uid);
    return true;
}

/* HAMi's variables that VRAM_GROUP turns off limit nothing: said once. */
static void
report_hami_ignored(env_getter get)
{
    char names[512], line[1024];
    if (!env_hami_ignored(get, NULL, names, sizeof names))
        return;
    snprintf(line, sizeof line,
             "vram: %s ignored: VRAM_GROUP is set and VRAM_LIMIT is not, and HAMi's "
             "variables count only when both are unset; give the limit as VRAM_LIMIT",
             names);
    say(line);
}

/*
** A process running with raised privileges (AT_SECURE: a setuid or setgid
** program, file capabilities; the preload library is there through
** /etc/ld.so.preload) ignores the settings of whoever started it: no job
** limit or group, no trace file opened with its privileges, no
** VRAM_CONTEXT=off; the host's policy alone applies. Said once when any
** is set. The getter of its settings.
*/
static env_getter
settings_reader(void)
{
    if (getauxval(AT_SECURE) == 0)
        return NULL; /* getenv */
    char names[512], line[768];
    if (env_preload_set(names, sizeof names)) {
        snprintf(line, sizeof line,
                 "vram: %s ignored: this process runs with raised privileges (setuid, setgid "
                 "or file capabilities); only the host's policy applies to it",
                 names);
        say(line);
    }
    return env_secure_get;
}

static void
preload_init(void)
{
    struct quota_env q;
    memset(&q, 0, sizeof q);
    env_getter get = settings_reader();
    if (env_quota_load(get, NULL, &q) != VRAM_OK) {
        disable(vram_last_error());
        return;
    }
    report_hami_ignored(get);
    if (env_visible_load(get, NULL, P.visible, sizeof P.visible, &P.visible_set) !=
        VRAM_OK) {
        /* A list this long names GPUs that no host ordinal maps. */
        P.visible_set = true;
        snprintf(P.visible, sizeof P.visible, "?");
    }
    if (!policy_init())
        return;
    char *user = P.group[ACCT_USER], *job = P.group[ACCT_JOB];
    if (!q.active && q.group[0] == '\0' && user[0] == '\0') {
        __atomic_store_n(&P.mode, PRELOAD_PASSIVE, __ATOMIC_RELEASE);
        return;
    }
    P.quota = q;
    /* Contexts count in every account unless it says otherwise: the
    ** policy's own for the user's account, VRAM_CONTEXT=off for the job's
    ** (never for the user's: a user cannot use it to pass the policy).
    ** Stricter is always allowed: VRAM_CONTEXT=on counts it in the user's
    ** account where the policy does not. */
    P.context_in[ACCT_USER] = user[0] != '\0' && (P.policy.context || q.context == 1);
    P.context_in[ACCT_JOB] = q.context != 0;
    P.count_context = P.context_in[ACCT_USER] || P.context_in[ACCT_JOB];
    if (q.group[0] != '\0') {
        snprintf(job, LEDGER_GROUP_LEN, "%s", q.group);
    } else if (q.active) {
        snprintf(job, LEDGER_GROUP_LEN, "pid-%ld-%llu", (long)getpid(),
                 start_time());
    }
    if (job[0] != '\0' && strcmp(job, user) == 0) {
        char why[640];
        snprintf(why, sizeof why,
                 "VRAM_GROUP=%s: that name is the user's account under %s, not a job's",
                 job, policy_path());
        disable(why);
        return;
    }
    for (int a = 0; a < ACCT_COUNT; a++) {
        if (P.group[a][0] == '\0')
            continue;
        vram_status st = ledger_open(P.group[a], &P.ledger[a]);
        if (st == VRAM_E_HOST_MEMORY) {
            /* /dev/shm is full: CUDA starts, and each allocation gets the
            ** driver's own out-of-memory error with this line. */
            snprintf(no_ledger_why, sizeof no_ledger_why,
                     "cannot create the ledger of group %s: %s", P.group[a],
                     vram_last_error());
            P.no_ledger = true;
            continue;
        }
        if (st != VRAM_OK) {
            char why[640];
            snprintf(why, sizeof why, "cannot open the ledger of group %s: %s",
                     P.group[a], vram_last_error());
            disable(why);
            return;
        }
    }
    trace_open(get);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    __atomic_store_n(&P.mode, PRELOAD_ACTIVE, __ATOMIC_RELEASE);
}

VRAM_HOT enum preload_mode
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
    for (int a = 0; a < ACCT_COUNT; a++) {
        if (P.ledger[a] == NULL)
            continue;
        ledger_leave(P.ledger[a]);
        ledger_remove_if_unused(P.ledger[a]);
    }
}

/* ------------------------------------------------------------------ */
/* Fork                                                                 */
/* ------------------------------------------------------------------ */

/* Take the locks so that the child's copies are consistent and free. */
static void
fork_prepare(void)
{
    pthread_mutex_lock(&P.dev_lock);
    track_fork_prepare();
    trace_writer_fork_prepare(P.trace);
}

static void
fork_parent(void)
{
    trace_writer_fork_parent(P.trace);
    track_fork_parent();
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
    callsite_fork_child();
    pyrecord_fork_child();
    pthread_mutex_init(&P.dev_lock, NULL);
    track_fork_child();
    /* The child has no CUDA context of its own yet, and nothing counted:
    ** no context, no pages or pools charged ahead. */
    for (int i = 0; i < PRELOAD_MAX_DEVICES; i++) {
        memset(&P.dev[i].use, 0, sizeof P.dev[i].use);
        P.dev[i].spare = 0;
        memset(&P.dev[i].graph, 0, sizeof P.dev[i].graph);
        P.dev[i].graph.ord = i;
    }
    pools_fork_child();
    /* The ledgers' handles were made the child's by the ledger's own fork
    ** handler, which ran before this one. */
}

/* ------------------------------------------------------------------ */
/* Devices                                                              */
/* ------------------------------------------------------------------ */

/*
** Each account's limit of the GPU UUID of TOTAL bytes, CUDA ordinal ORD
** (-1: not known), into LIMIT; *RULE: the policy rule behind the user's.
*/
void
device_limits(int ord, const char *uuid, uint64_t total, uint64_t limit[ACCT_COUNT],
              const struct policy_rule **rule)
{
    limit[ACCT_JOB] = quota_for_device(&P.quota, ord, uuid, total);
    limit[ACCT_USER] = 0;
    *rule = NULL;
    if (P.ledger[ACCT_USER] != NULL) {
        int host = policy_host_ordinal(P.visible_set ? P.visible : NULL, ord);
        limit[ACCT_USER] = policy_limit(&P.verdict, host, uuid, total, rule);
    }
}

/* The smallest of LIMIT's non-zero entries: what the process may hold at
** most; 0 when no account limits the GPU. */
uint64_t
effective_limit(const uint64_t limit[ACCT_COUNT])
{
    uint64_t e = 0;
    for (int a = 0; a < ACCT_COUNT; a++)
        if (limit[a] != 0 && (e == 0 || limit[a] < e))
            e = limit[a];
    return e;
}

/* How much more the process may take on UUID under LIMIT: the least room
** left in any limited account (UINT64_MAX when none limits it). D: the
** device, if known, whose ledger indexes save the lookups of UUID. */
uint64_t
room_left(const struct preload_device *d, const char *uuid, const uint64_t limit[ACCT_COUNT])
{
    uint64_t room = UINT64_MAX;
    for (int a = 0; a < ACCT_COUNT; a++) {
        if (P.ledger[a] == NULL || limit[a] == 0)
            continue;
        int i = d != NULL ? __atomic_load_n(&d->index[a], __ATOMIC_ACQUIRE) : -1;
        uint64_t used = i >= 0 ? ledger_group_used_at(P.ledger[a], i)
                               : ledger_group_used(P.ledger[a], uuid);
        uint64_t r = limit[a] > used ? limit[a] - used : 0;
        if (r < room)
            room = r;
    }
    return room;
}

/* The facts of CUDA ordinal ORD, asked from the driver the first time
** (UUID and total memory: neither allocates). */
VRAM_HOT vcu_result
device_get(int ord, struct preload_device **out)
{
    if (ord < 0 || ord >= PRELOAD_MAX_DEVICES)
        return VCU_ERROR_INVALID_DEVICE;
    struct preload_device *d = &P.dev[ord];
    if (__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) {
        *out = d;
        return VCU_SUCCESS;
    }
    /* No device's facts before every per-GPU key is known to name a GPU
    ** (keys.c): one that names none disables CUDA here. */
    if (!keys_check())
        return VCU_ERROR_NOT_INITIALIZED;
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
    uuid_format((const unsigned char *)u.bytes, f.uuid, sizeof f.uuid);
    f.total = total;
    device_limits(ord, f.uuid, total, f.limit, &f.rule);
    pthread_mutex_lock(&P.dev_lock);
    if (!__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) {
        memcpy(d->uuid, f.uuid, sizeof d->uuid);
        d->total = f.total;
        memcpy(d->limit, f.limit, sizeof d->limit);
        d->rule = f.rule;
        d->graph.ord = ord;
        for (int a = 0; a < ACCT_COUNT; a++)
            __atomic_store_n(&d->index[a], -1, __ATOMIC_RELAXED);
        __atomic_store_n(&d->ready, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&P.dev_lock);
    *out = d;
    return VCU_SUCCESS;
}

/* The real driver function NAME, kept in *SLOT once found (atomic). */
static void *
driver_fn(void **slot, const char *name)
{
    void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (p == NULL) {
        p = interpose_lib_sym(HOOK_CUDA, name);
        if (p != NULL)
            __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    }
    return p;
}

/* The driver's answer: the ordinal of the current context (cuCtxGetDevice). */
static vcu_result
ask_device(int *ord)
{
    void *p = driver_fn(&P.ctx_get_device, "cuCtxGetDevice");
    if (p == NULL)
        return VCU_ERROR_NOT_INITIALIZED;
    vcu_pfn_cuCtxGetDevice get;
    memcpy(&get, &p, sizeof p);
    vcu_device dev = -1;
    vcu_result r = get(&dev);
    if (r == VCU_SUCCESS)
        *ord = dev;
    return r;
}

/*
** The calling thread's contexts and their ordinals, as the driver last
** answered them: a context stays on its device for its whole life, so the
** answer holds while the handle names the same context. A handle may name
** another context once its context has ended (cuCtxDestroy, the primary
** context's last release or a reset): those calls are hooked and advance
** P.ctx_epoch, and a thread whose EPOCH differs forgets everything. Eight
** entries: a thread that uses more contexts asks again, round robin.
** Initial-exec, as hook_depth: no allocation on access.
*/
enum { CTX_MEMO = 8 };
static _Thread_local struct {
    vcu_context ctx[CTX_MEMO];
    int ord[CTX_MEMO];
    unsigned epoch;
    unsigned next; /* the entry the next miss replaces */
} ctx_memo __attribute__((tls_model("initial-exec")));

/*
** The CUDA ordinal of the calling thread's current context.
**
** With one visible device every context is on ordinal 0, so once the
** driver has answered once (a context exists, so cuInit ran) and counted
** one device, the driver is not asked again: the count cannot change in a
** process (CUDA_VISIBLE_DEVICES is read at cuInit).
**
** With several, the current context is asked (cuCtxGetCurrent, a read of
** the driver's per-thread state) and its ordinal looked up in the thread's
** cache (ctx_memo), so that cuCtxGetDevice is asked once per context
** rather than on every hooked call. The current context itself is asked
** every time, not tracked through the calls that change it: the CUDA
** runtime may change it through entry points the library does not see (its
** private ones), and a stale answer would charge the wrong device. Without
** a current context (or without cuCtxGetCurrent) cuCtxGetDevice answers,
** and a call without a context then reaches the driver, which refuses it;
** the hooks give back what they reserved for it.
*/
VRAM_HOT vcu_result
current_device(int *ord)
{
    int n = __atomic_load_n(&P.n_visible, __ATOMIC_ACQUIRE);
    if (n == 1) {
        *ord = 0;
        return VCU_SUCCESS;
    }
    vcu_context ctx = NULL;
    void *p = driver_fn(&P.ctx_get_current, "cuCtxGetCurrent");
    if (p != NULL) {
        vcu_pfn_cuCtxGetCurrent get_current;
        memcpy(&get_current, &p, sizeof p);
        if (get_current(&ctx) != VCU_SUCCESS)
            ctx = NULL;
    }
    if (ctx != NULL) {
        unsigned epoch = __atomic_load_n(&P.ctx_epoch, __ATOMIC_ACQUIRE);
        if (ctx_memo.epoch != epoch) {
            memset(ctx_memo.ctx, 0, sizeof ctx_memo.ctx);
            ctx_memo.epoch = epoch;
        }
        for (int i = 0; i < CTX_MEMO; i++)
            if (ctx_memo.ctx[i] == ctx) {
                *ord = ctx_memo.ord[i];
                return VCU_SUCCESS;
            }
    }
    vcu_result r = ask_device(ord);
    if (r != VCU_SUCCESS)
        return r;
    if (ctx != NULL) {
        unsigned i = ctx_memo.next++ % CTX_MEMO;
        ctx_memo.ctx[i] = ctx;
        ctx_memo.ord[i] = *ord;
    }
    if (n == 0) {
        /* First success: count the devices once (-1: unknown, keep asking). */
        void *c = interpose_lib_sym(HOOK_CUDA, "cuDeviceGetCount");
        int count = -1;
        vcu_pfn_cuDeviceGetCount get_count;
        memcpy(&get_count, &c, sizeof c);
        if (c == NULL || get_count(&count) != VCU_SUCCESS)
            count = -1;
        __atomic_store_n(&P.n_visible, count == 1 ? 1 : -1, __ATOMIC_RELEASE);
    }
    return VCU_SUCCESS;
}

/*
** The steps of the hooks that end a context (PRELOAD_HOOKS_CTX): the
** epoch advances before the call, so that no thread keeps using an answer
** about the ending context, and after it, so that none keeps one it took
** while the call ran.
*/
static bool
ctx_ending(struct hook_call *c, ...)
{
    (void)c;
    __atomic_fetch_add(&P.ctx_epoch, 1, __ATOMIC_ACQ_REL);
    return true;
}

static vcu_result
ctx_ended(struct hook_call *c, ...)
{
    __atomic_fetch_add(&P.ctx_epoch, 1, __ATOMIC_ACQ_REL);
    return c->r;
}

PRELOAD_HOOKS_CTX(PRELOAD_HOOK_DEFINE)

/* The device of UUID among those this process has seen, or -1. */
int
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
biggest_users(struct ledger *l, const char *uuid, char *buf, size_t len)
{
    struct ledger_snapshot *s = malloc(sizeof *s);
    if (s == NULL)
        return;
    if (ledger_snapshot(l, s) != VRAM_OK) {
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

/* ------------------------------------------------------------------ */
/* Contexts: what the device holds for the process beyond its allocations */
/* ------------------------------------------------------------------ */

/*
** A process's CUDA context, the modules it loads and the driver's own
** reservations take device memory that no allocation call returns (about
** 518 MiB per PyTorch process on an H200: nvidia-smi showed 4,614 MiB for
** 4,096 MiB of tensors). With context accounting on, the quota counts it
** as the device sees it: NVML's used memory of this process on the GPU
** (what nvidia-smi shows per process) minus what the process has counted
** for its allocations. It is measured at the process's first reservation
** on the GPU, then at most every CONTEXT_INTERVAL_NS, and charged or given
** back together with the reservation at hand (so a context that does not
** fit refuses the allocation that would pass the quota with it).
**
** NVML is loaded for this (libnvidia-ml.so.1, RTLD_LOCAL) in processes
** that allocate under context accounting and have not loaded it. Where it
** is missing, or lists no entry for this pid (another pid namespace), a
** device that an account charging contexts limits gets CONTEXT_GUESS
** charged for the context instead, and a line says so once: charging
** nothing would let every process pass its quota by a context's size.
*/
#define CONTEXT_INTERVAL_NS 100000000LL /* 100 ms, as the ledger's reclaim */
#define CONTEXT_MAX_PROCS 128           /* NVML entries looked at per GPU */
/* NVML's figure of a primary context alone (no allocation, no kernel
** launched): 543,162,368 bytes on an H100 with driver 580 and CUDA 13, as
** on an H200; a process's context only grows from there. */
#define CONTEXT_GUESS (518ULL << 20)

/* NVML's two functions, loading and initializing NVML once. */
static bool
nvml_ready(void)
{
    int st = __atomic_load_n(&P.nvml_state, __ATOMIC_ACQUIRE);
    if (st != 0)
        return st == 1;
    /* Loaded by the program already? Else load it, privately. */
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h == NULL)
        h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    void *init = h != NULL ? interpose_lib_sym(HOOK_NVML, "nvmlInit_v2") : NULL;
    void *procs = h != NULL ? interpose_lib_sym(HOOK_NVML,
                                                "nvmlDeviceGetComputeRunningProcesses_v3")
                            : NULL;
    if (procs == NULL && h != NULL)
        procs = interpose_lib_sym(HOOK_NVML, "nvmlDeviceGetComputeRunningProcesses_v2");
    void *by_uuid = h != NULL ? interpose_lib_sym(HOOK_NVML, "nvmlDeviceGetHandleByUUID")
                              : NULL;
    bool ok = init != NULL && procs != NULL && by_uuid != NULL;
    if (ok) {
        vnvml_pfn_init f;
        memcpy(&f, &init, sizeof f);
        ok = f() == VNVML_SUCCESS;
    }
    if (ok) {
        __atomic_store_n(&P.nvml_processes, procs, __ATOMIC_RELEASE);
        __atomic_store_n(&P.nvml_by_uuid, by_uuid, __ATOMIC_RELEASE);
    }
    int expected = 0;
    __atomic_compare_exchange_n(&P.nvml_state, &expected, ok ? 1 : 2, false,
                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return __atomic_load_n(&P.nvml_state, __ATOMIC_ACQUIRE) == 1;
}

/* What NVML says of this process on a GPU. */
enum nvml_seen {
    NVML_SEEN,   /* its used memory there */
    NVML_ABSENT, /* NVML cannot be loaded or started */
    NVML_NO_ROW  /* NVML does not list this pid on the GPU */
};

/* This process's used memory on the GPU UUID as NVML sees it, into *OUT. */
static enum nvml_seen
nvml_process_used(const char *uuid, uint64_t *out)
{
    if (!nvml_ready())
        return NVML_ABSENT;
    typedef vnvml_return (*by_uuid_fn)(const char *uuid, vnvml_device *device);
    void *p = __atomic_load_n(&P.nvml_by_uuid, __ATOMIC_ACQUIRE);
    void *q = __atomic_load_n(&P.nvml_processes, __ATOMIC_ACQUIRE);
    by_uuid_fn by_uuid;
    vnvml_pfn_processes procs;
    memcpy(&by_uuid, &p, sizeof p);
    memcpy(&procs, &q, sizeof q);
    vnvml_device dev;
    if (by_uuid(uuid, &dev) != VNVML_SUCCESS)
        return NVML_ABSENT;
    struct vnvml_process_v2 info[CONTEXT_MAX_PROCS]; /* 3 KiB of stack */
    unsigned int n = CONTEXT_MAX_PROCS;
    if (procs(dev, &n, info) != VNVML_SUCCESS)
        return NVML_NO_ROW;
    unsigned int me = (unsigned int)getpid();
    for (unsigned int i = 0; i < n && i < CONTEXT_MAX_PROCS; i++) {
        if (info[i].pid == me) {
            *out = info[i].used;
            return NVML_SEEN;
        }
    }
    return NVML_NO_ROW;
}

/* Does an account that charges contexts limit D? */
static bool
context_limited(const struct preload_device *d)
{
    for (int a = 0; a < ACCT_COUNT; a++)
        if (P.context_in[a] && P.ledger[a] != NULL && d->limit[a] != 0)
            return true;
    return false;
}

/* The context charge of D when NVML does not show it: CONTEXT_GUESS where
** a limit needs it (said once), else nothing. */
static uint64_t
context_guess(const struct preload_device *d, enum nvml_seen why)
{
    if (!context_limited(d))
        return 0;
    if (!__atomic_exchange_n(&P.context_guessed, 1, __ATOMIC_RELAXED)) {
        char line[512], guess[32];
        size_format(CONTEXT_GUESS, guess, sizeof guess);
        if (why == NVML_ABSENT)
            snprintf(line, sizeof line,
                     "vram: context accounting: NVML (libnvidia-ml.so.1) is not available "
                     "here; each limited GPU is charged %s for this process's context",
                     guess);
        else
            snprintf(line, sizeof line,
                     "vram: context accounting: NVML does not list this process on %s "
                     "(another pid namespace?); it is charged %s for its context",
                     d->uuid, guess);
        say(line);
    }
    return CONTEXT_GUESS;
}

/*
** The change of D's context charge to make with the next reservation:
** claimed here (so that two threads never charge the same bytes twice),
** into *GROW (bytes to reserve more) or *SHRINK (bytes to give back).
** Nothing when accounting is off, or measured less than
** CONTEXT_INTERVAL_NS ago.
*/
VRAM_HOT static void
context_delta(const struct preload_device *d, uint64_t *grow, uint64_t *shrink)
{
    *grow = *shrink = 0;
    if (!P.count_context)
        return;
    struct preload_use *u = &P.dev[d - P.dev].use;
    long long now = (long long)now_coarse_ns();
    long long last = __atomic_load_n(&u->checked_ns, __ATOMIC_RELAXED);
    if (last != 0 && now - last < CONTEXT_INTERVAL_NS)
        return;
    if (!__atomic_compare_exchange_n(&u->checked_ns, &last, now, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return; /* another thread measures now */
    uint64_t seen = 0;
    enum nvml_seen how = nvml_process_used(d->uuid, &seen);
    uint64_t counted = __atomic_load_n(&u->counted, __ATOMIC_ACQUIRE);
    uint64_t want = how != NVML_SEEN ? context_guess(d, how)
                    : seen > counted ? seen - counted
                                     : 0;
    uint64_t have = __atomic_load_n(&u->context, __ATOMIC_ACQUIRE);
    if (want == have ||
        !__atomic_compare_exchange_n(&u->context, &have, want, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    if (want > have)
        *grow = want - have;
    else
        *shrink = have - want;
}

/* What set account A's limit of D, for the refusal line, into BUF. */
static void
limit_source(int a, const struct preload_device *d, char *buf, size_t len)
{
    if (a == ACCT_USER) {
        char rule[96];
        snprintf(buf, len, "the policy %s, %s", policy_path(),
                 policy_rule_describe(d->rule, rule, sizeof rule));
    } else if ((P.quota.source != NULL && strcmp(P.quota.source, "VRAM_LIMIT") != 0) ||
               strcmp(P.quota.origin, "hami") == 0) {
        snprintf(buf, len, "HAMi's CUDA_DEVICE_MEMORY_LIMIT");
    } else if (strcmp(P.quota.origin, "vram-run") == 0) {
        snprintf(buf, len, "vram run --limit");
    } else if (strcmp(P.quota.origin, "slurm") == 0) {
        snprintf(buf, len, "Slurm --gpu-mem");
    } else {
        snprintf(buf, len, "VRAM_LIMIT");
    }
}

/* The refusal line (see the top of the file for its form): account A
** refused BYTES, the charge of a call that asked ASKED bytes (0: BYTES;
** the driver holds more than asked: pages, rounding, a pool's chunk). */
static void
refusal_line(const char *what, const struct preload_device *d, int a, uint64_t bytes,
             uint64_t asked, uint64_t group_used, uint64_t context)
{
    if (!line_allowed())
        return;
    char req[32], counted[32], quota[32], used[32], ctx[32], source[256], note[160] = "",
                                                                          line[1024];
    bool differs = asked != 0 && asked != bytes;
    size_format(differs ? asked : bytes, req, sizeof req);
    size_format(bytes, counted, sizeof counted);
    size_format(d->limit[a], quota, sizeof quota);
    size_format(group_used, used, sizeof used);
    size_format(context, ctx, sizeof ctx);
    limit_source(a, d, source, sizeof source);
    if (differs || context > 0)
        snprintf(note, sizeof note, " (%s%s%s%s%s)", differs ? "counted as " : "",
                 differs ? counted : "", differs && context > 0 ? ", " : "",
                 context > 0 ? "with this process's context, " : "",
                 context > 0 ? ctx : "");
    snprintf(line, sizeof line,
             "vram: out of GPU memory quota on %s: %s of %s%s refused by %s; quota %s, "
             "%s %.63s uses %s",
             d->uuid, what, req, note, source, quota, a == ACCT_USER ? "user" : "group",
             a == ACCT_USER ? P.user : P.group[a], used);
    biggest_users(P.ledger[a], d->uuid, line, sizeof line);
    say(line);
}

/*
** D's index in account A's ledger into *INDEX, looked up (and the device
** added to the ledger) the first time; the ledger's status otherwise
** (VRAM_E_NO_DEVICE: the ledger holds as many other devices as it can).
** Racing threads find the same index.
*/
VRAM_HOT static vram_status
ledger_index(struct preload_device *d, int a, int *index)
{
    int i = __atomic_load_n(&d->index[a], __ATOMIC_ACQUIRE);
    if (i < 0) {
        vram_status st = ledger_device(P.ledger[a], d->uuid, &i);
        if (st != VRAM_OK)
            return st;
        ledger_limit_set(P.ledger[a], i, d->limit[a]); /* for the monitors */
        __atomic_store_n(&d->index[a], i, __ATOMIC_RELEASE);
    }
    *index = i;
    return VRAM_OK;
}

/* What account A gives back or takes for BYTES with CONTEXT bytes of
** context charge: the context only where A charges contexts. */
VRAM_HOT static uint64_t
account_bytes(int a, uint64_t bytes, uint64_t context)
{
    uint64_t ctx = P.context_in[a] ? context : 0;
    return bytes + ctx < bytes ? UINT64_MAX : bytes + ctx;
}

/* Give BYTES (and CONTEXT, where counted) on D back to every account of
** accounts 0..N-1 (each holds them: its index was found when they were
** reserved). */
VRAM_HOT static void
release_accounts(const struct preload_device *d, uint64_t bytes, uint64_t context, int n)
{
    for (int a = 0; a < n; a++)
        if (P.ledger[a] != NULL)
            ledger_release_at(P.ledger[a], __atomic_load_n(&d->index[a], __ATOMIC_ACQUIRE),
                              account_bytes(a, bytes, context));
}

/*
** Reserve BYTES on CUDA ordinal ORD (-1: the current context's device)
** for the call WHAT, in every account (the user's first). On success *OUT
** is the device, to give back to. On refusal CUDA_ERROR_OUT_OF_MEMORY and
** a line naming the account that refused; the driver's own error when it
** cannot say which device (no context: the call would fail anyway).
** Before refusing, what this process charged ahead and the device no
** longer holds is given back (reclaim_stale) and the reservation tried
** once more.
*/
VRAM_HOT vcu_result
reserve(enum hook_id id, int ord, uint64_t bytes, struct preload_device **out)
{
    return reserve_excused(id, ord, bytes, 0, out, NULL, NULL);
}

VRAM_HOT vcu_result
reserve_excused(enum hook_id id, int ord, uint64_t bytes, uint64_t asked,
                struct preload_device **out, bool (*excuse)(void *arg), void *arg)
{
    if (P.no_ledger) {
        /* Nothing can be counted: refused, as the allocation of a full GPU. */
        if (line_allowed()) {
            char line[768];
            snprintf(line, sizeof line, "vram: %s refused: %s", hook_name(id), no_ledger_why);
            say(line);
        }
        return VCU_ERROR_OUT_OF_MEMORY;
    }
    vcu_result r = VCU_SUCCESS;
    if (ord < 0)
        r = current_device(&ord);
    struct preload_device *d = NULL;
    if (r == VCU_SUCCESS)
        r = device_get(ord, &d);
    if (r != VCU_SUCCESS)
        return r;
    struct preload_use *u = &d->use;
    for (int attempt = 0;; attempt++) {
        uint64_t grow, shrink;
        context_delta(d, &grow, &shrink);
        if (shrink > 0)
            release_accounts(d, 0, shrink, ACCT_COUNT);
        int a = 0;
        uint64_t group_used = 0;
        vram_status st = VRAM_OK;
        for (; a < ACCT_COUNT; a++) {
            if (P.ledger[a] == NULL)
                continue;
            int index = -1;
            st = ledger_index(d, a, &index);
            if (st == VRAM_OK)
                st = ledger_reserve_at(P.ledger[a], index, account_bytes(a, bytes, grow),
                                       d->limit[a], &group_used);
            if (st != VRAM_OK)
                break;
        }
        if (a == ACCT_COUNT) {
            /* Only context accounting reads COUNTED: without it, no locked
            ** instruction (each holds the loads after it until its line is
            ** here). */
            if (P.count_context)
                __atomic_fetch_add(&u->counted, bytes, __ATOMIC_ACQ_REL);
            *out = d;
            return VCU_SUCCESS;
        }
        release_accounts(d, bytes, grow, a);
        /* The context's growth was not charged: measure it again next time. */
        if (grow > 0) {
            __atomic_fetch_sub(&u->context, grow, __ATOMIC_ACQ_REL);
            __atomic_store_n(&u->checked_ns, 0, __ATOMIC_RELAXED);
        }
        if (st == VRAM_E_OOM && attempt == 0 && reclaim_stale(ord))
            continue;
        if (st == VRAM_E_OOM && excuse != NULL && excuse(arg)) {
            *out = NULL; /* nothing reserved, and nothing needed */
            return VCU_SUCCESS;
        }
        if (st == VRAM_E_OOM) {
            refusal_line(hook_name(id), d, a, bytes, asked, group_used,
                         grow + __atomic_load_n(&u->context, __ATOMIC_ACQUIRE));
        } else if (line_allowed()) {
            /* The ledger is unusable: refuse rather than let memory go uncounted. */
            char line[768];
            snprintf(line, sizeof line, "vram: %s refused: %s", hook_name(id),
                     vram_last_error());
            say(line);
        }
        return VCU_ERROR_OUT_OF_MEMORY;
    }
}

VRAM_HOT void
unreserve(const struct preload_device *d, uint64_t bytes)
{
    if (bytes == 0)
        return;
    release_accounts(d, bytes, 0, ACCT_COUNT);
    if (P.count_context) /* as in reserve */
        __atomic_fetch_sub(&P.dev[d - P.dev].use.counted, bytes, __ATOMIC_ACQ_REL);
}

void
force_charge(struct preload_device *d, uint64_t bytes)
{
    if (bytes == 0)
        return;
    for (int a = 0; a < ACCT_COUNT; a++) {
        int index = -1;
        uint64_t used;
        /* A limit of 0: counted, never refused (the device holds it). A
        ** ledger with no room for the device can count nothing more. */
        if (P.ledger[a] != NULL && ledger_index(d, a, &index) == VRAM_OK)
            (void)ledger_reserve_at(P.ledger[a], index, bytes, 0, &used);
    }
    if (P.count_context)
        __atomic_fetch_add(&d->use.counted, bytes, __ATOMIC_ACQ_REL);
}

/* The real function of hook ID into *FP (a function pointer of SIZE bytes). */
bool
real_of(enum hook_id id, void *fp, size_t size)
{
    void *p = interpose_real(id);
    if (p == NULL)
        return false;
    memcpy(fp, &p, size);
    return true;
}

/* ------------------------------------------------------------------ */
/* What the driver holds for an allocation                              */
/* ------------------------------------------------------------------ */

/*
** Measured on an H100 (driver 580, CUDA 13; tests/gpu/probe_rounding.c):
** cuMemAlloc_v2 (and pitched and managed memory) above 1 MiB holds its
** size rounded up to 2 MiB; at or below 1 MiB, a block of the driver's
** sub-allocator: a power of two of at least 512 bytes in a 2 MiB page
** shared with blocks of its size, the page held while one of its blocks
** lives (one allocation of 1 byte alone makes the process hold 2 MiB).
** Where the driver puts a block is not known before the call, so a block
** is charged ahead the two pages it may touch (the one it starts in and
** the next) and settled once its address is known: the pages that hold
** no other counted block (track.c's FRAME entries) are charged, the rest
** stay charged ahead for the next block of the device, up to PAGES_KEPT
** (the spare of struct preload_device), so that a block that lands in a
** page already held costs no ledger call. A page whose last block is
** freed becomes spare. An adversary freeing all but one block of each
** page thus keeps each page charged, as the driver keeps it held.
*/
#define PAGE_BYTES (2ULL << 20)
#define PAGES_AHEAD 2
#define PAGES_KEPT 2

VRAM_HOT static uint64_t
round_up(uint64_t n, uint64_t unit)
{
    uint64_t r = (n + unit - 1) / unit * unit;
    return r < n ? UINT64_MAX / unit * unit : r;
}

VRAM_HOT uint64_t
ptr_charge(uint64_t bytes)
{
    return bytes > TRACK_SMALL_MAX ? round_up(bytes, PAGE_BYTES) : 0;
}

/* The sub-allocator's block of BYTES (at most TRACK_SMALL_MAX). */
VRAM_HOT static uint64_t
block_of(uint64_t bytes)
{
    uint64_t b = 512;
    while (b < bytes)
        b <<= 1;
    return b;
}

/* Take up to WANT spare pages of D: how many were taken. */
VRAM_HOT static int
spare_take(struct preload_device *d, int want)
{
    int t = __atomic_load_n(&d->spare, __ATOMIC_RELAXED);
    while (t > 0) {
        int n = t < want ? t : want;
        if (__atomic_compare_exchange_n(&d->spare, &t, t - n, true, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return n;
    }
    return 0;
}

/* N pages charged and not held go back to D's spare; what passes
** PAGES_KEPT is given back to the accounts. */
VRAM_HOT void
spare_give(struct preload_device *d, int n)
{
    if (n <= 0)
        return;
    int t = __atomic_add_fetch(&d->spare, n, __ATOMIC_ACQ_REL);
    while (t > PAGES_KEPT) {
        if (__atomic_compare_exchange_n(&d->spare, &t, PAGES_KEPT, true, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            unreserve(d, (uint64_t)(t - PAGES_KEPT) * PAGE_BYTES);
            return;
        }
    }
}

bool
spare_reclaim(struct preload_device *d)
{
    int t = __atomic_exchange_n(&d->spare, 0, __ATOMIC_ACQ_REL);
    if (t > 0)
        unreserve(d, (uint64_t)t * PAGE_BYTES);
    return t > 0;
}

/* The real function that gives back an allocation of KIND at KEY (an
** allocation the table cannot hold is undone: it could never be given
** back). */
static void
undo_allocation(int kind, uint64_t key)
{
    vcu_pfn_cuMemFree free_ptr;
    vcu_pfn_cuMemRelease release;
    vcu_pfn_cuArrayDestroy destroy;
    vcu_pfn_cuMipmappedArrayDestroy destroy_mip;
    if (kind == TRACK_PTR && real_of(HOOK_ID_cuMemFree_v2, &free_ptr, sizeof free_ptr))
        free_ptr((vcu_deviceptr)key);
    else if (kind == TRACK_HANDLE && real_of(HOOK_ID_cuMemRelease, &release, sizeof release))
        release((vcu_mem_handle)key);
    else if (kind == TRACK_ARRAY &&
             real_of(HOOK_ID_cuArrayDestroy, &destroy, sizeof destroy))
        destroy((vcu_array)(uintptr_t)key);
    else if (kind == TRACK_MIPMAP &&
             real_of(HOOK_ID_cuMipmappedArrayDestroy, &destroy_mip, sizeof destroy_mip))
        destroy_mip((vcu_mipmapped_array)(uintptr_t)key);
}

/*
** Record a new allocation (KIND, KEY) of BYTES asked on D's ordinal ORD,
** CHARGED bytes reserved for it, or undo it when the table cannot hold it
** (out of host memory). Returns the hook's result.
*/
VRAM_HOT static vcu_result
track_or_undo(int kind, uint64_t key, int ord, struct preload_device *d, uint64_t bytes,
              uint64_t charged)
{
    uint64_t id = trace_next_id();
    if (track_put(kind, key, ord, bytes, id)) {
        trace_write(TRACE_ALLOC, id, bytes, ord, ord >= 0 ? trace_site() : TRACE_NO_SITE);
        return VCU_SUCCESS;
    }
    undo_allocation(kind, key);
    unreserve(d, charged);
    return VCU_ERROR_OUT_OF_MEMORY;
}

/* A sub-allocated block at KEY of BYTES asked: its pages counted, those
** it made charged from the C->pages charged ahead, the rest spare. */
VRAM_HOT static vcu_result
track_block(struct hook_call *c, uint64_t key, uint64_t bytes)
{
    uint64_t id = trace_next_id();
    int made = 0;
    if (!track_put_block(key, c->ord, bytes, block_of(bytes), id, &made)) {
        undo_allocation(TRACK_PTR, key);
        spare_give(c->d, c->pages);
        return VCU_ERROR_OUT_OF_MEMORY;
    }
    if (made > c->pages) /* a block the driver put across more pages than any should */
        force_charge(c->d, (uint64_t)(made - c->pages) * PAGE_BYTES);
    spare_give(c->d, c->pages - made);
    trace_write(TRACE_ALLOC, id, bytes, c->ord, trace_site());
    return VCU_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* The accounting of a counted call (preload.h)                         */
/* ------------------------------------------------------------------ */

VRAM_HOT bool
hook_reserve(struct hook_call *c, int ord, uint64_t bytes)
{
    if (bytes == 0)
        return true;
    c->bytes = bytes;
    c->r = ord >= 0 ? VCU_SUCCESS : current_device(&ord);
    c->ord = ord;
    if (c->r == VCU_SUCCESS)
        c->r = reserve_excused(c->id, ord, bytes, c->asked, &c->d, NULL, NULL);
    if (c->r == VCU_SUCCESS)
        return true;
    c->d = NULL;
    (void)trace_if_refused(c->r, c->ord, c->asked != 0 ? c->asked : bytes);
    return false;
}

VRAM_HOT bool
hook_reserve_block(struct hook_call *c)
{
    int ord = -1;
    struct preload_device *d = NULL;
    c->r = current_device(&ord);
    if (c->r == VCU_SUCCESS)
        c->r = device_get(ord, &d);
    c->ord = ord;
    if (c->r != VCU_SUCCESS)
        return false;
    int have = spare_take(d, PAGES_AHEAD);
    if (have < PAGES_AHEAD) {
        struct preload_device *d2;
        c->r = reserve_excused(c->id, ord, (uint64_t)(PAGES_AHEAD - have) * PAGE_BYTES,
                               c->asked, &d2, NULL, NULL);
        if (c->r != VCU_SUCCESS) {
            spare_give(d, have);
            (void)trace_if_refused(c->r, ord, c->asked);
            return false;
        }
    }
    c->d = d;
    c->pages = PAGES_AHEAD;
    return true;
}

VRAM_HOT vcu_result
hook_granted(struct hook_call *c, int kind, const void *out)
{
    vcu_result r = c->r;
    if (c->d == NULL)
        return r; /* not reserved: refused (and traced), or not counted */
    if (r != VCU_SUCCESS) {
        if (c->pages > 0)
            spare_give(c->d, c->pages);
        else
            unreserve(c->d, c->bytes);
        return trace_if_refused(r, c->ord, c->asked != 0 ? c->asked : c->bytes);
    }
    uint64_t key;
    if (kind == TRACK_PTR)
        key = *(const vcu_deviceptr *)out;
    else if (kind == TRACK_HANDLE)
        key = *(const vcu_mem_handle *)out;
    else {
        void *a;
        memcpy(&a, out, sizeof a); /* a vcu_array or a vcu_mipmapped_array */
        key = (uint64_t)(uintptr_t)a;
    }
    if (kind == TRACK_PTR && c->asked <= TRACK_SMALL_MAX)
        return track_block(c, key, c->asked);
    return track_or_undo(kind, key, c->ord, c->d, kind == TRACK_PTR ? c->asked : c->bytes,
                         c->bytes);
}

/* What a free of entry E gives back to D, once the driver has freed it. */
VRAM_HOT static void
give_back(struct preload_device *d, const struct track *e)
{
    if (e->kind != TRACK_PTR) {
        unreserve(d, e->bytes);
    } else if (e->bytes <= TRACK_SMALL_MAX) {
        spare_give(d, track_frames_unref(e->key, block_of(e->bytes)));
    } else {
        unreserve(d, ptr_charge(e->bytes));
    }
}

VRAM_HOT vcu_result
taken_freed(struct hook_call *c, ...)
{
    const struct track *e = &c->e;
    if (c->unref != TRACK_LAST)
        return c->r;
    if (c->r != VCU_SUCCESS) {
        (void)track_restore(e); /* still live */
    } else if (e->kind == TRACK_HOST || e->kind == TRACK_HOST_REGISTERED) {
        host_uncount(e->bytes);
    } else {
        struct preload_device *d = NULL;
        /* Shared with another process, the memory may live on there: its
        ** charge stays until this process ends. Pooled: its pool's reserve
        ** is what is charged. */
        if ((e->refs & (TRACK_EXPORTED | TRACK_POOLED)) == 0 &&
            device_get(e->dev, &d) == VCU_SUCCESS)
            give_back(d, e);
        trace_write(TRACE_FREE, e->trace_id, e->bytes, e->dev, TRACE_NO_SITE);
    }
    return c->r;
}
