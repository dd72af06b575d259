/* SPDX-License-Identifier: MIT */
/*
** ledger.c -- the accounts of the group ledger (ledger.h): entries,
** devices, reservations, reclaiming the dead, snapshots and removal. The
** file itself is ledger_file.c's, /proc is ledger_proc.c's.
** docs/LEDGER.md explains the design.
**
** No locks. Invariants, true at every instant (not only between steps):
**   L1  the group's use of a device is the sum of the uses of the LIVE
**       entries; it is never stored, so no step can leave it wrong.
**   L2  an entry's uses are changed only by its own process; others only
**       free the entry (one compare-and-swap of its owner word) once that
**       process is dead. A dead process's entry is exactly its share.
**   L3  entries at index >= n_slots are free (n_slots only grows).
**   L4  device records are taken in index order by one compare-and-swap
**       of their tag and never freed; the UUID string follows the tag.
**   L5  a device's IN_USE is what the members were granted on it and
**       have not given back: a grant adds to its entry, then to IN_USE;
**       a release takes off IN_USE, then off its entry; whoever frees an
**       entry (its leaving member, a reclaimer of the dead, an execve's
**       takeover) takes what the entry held off IN_USE. So IN_USE is the
**       group's use at once (its PEAK the most it was, for the report),
**       short by the bytes of a member killed between the two steps of
**       one grant or release, never over. Only displayed: L1 is the quota.
**
** Why the quota holds (the proof the tests check): a reservation first
** adds its bytes to its own entry's pending bytes, then sums every LIVE
** entry's use and pending bytes; sequentially
** consistent atomics order all these adds in one total order, and the sum
** of the reservation whose add came last reads every other add that was
** granted and not yet given back. So that sum is at least the group's use
** at that moment, and it is granted only when it is within the limit. A
** grant then moves the bytes from pending to in use (added first, so they
** are never uncounted), and a sum reads each entry's pending bytes before
** its use, so that bytes on their way between the two are never missed.
** Racing reservations may both see each other and both back off: a
** refusal is retried (after a look for the dead, then once more) before
** it is reported.
**
** Nothing here calls the CUDA driver, exits, prints or (on the reserve and
** release paths) allocates: the interposer calls in from driver hooks.
*/
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/hot.h"
#include "ledger/ledger_internal.h"

/* Grants look for dead members at most this often (ns): a check costs a
** /proc read per member (about 7 us), and a grant cannot be wrong for
** skipping it -- reclaiming only ever lowers the group's use. */
#define RECLAIM_INTERVAL_NS UINT64_C(100000000)

/* A handle's reservations ask whether that interval has passed only every
** RECLAIM_EVERY-th time (a power of two): the question reads the clock and
** the group's time word, two cache lines a reservation could do without. */
#define RECLAIM_EVERY 64

/* Attempts at open-and-join while the file keeps being removed. */
#define OPEN_ATTEMPTS 8

/* Copies of one entry a snapshot tries before leaving it out as stale: an
** entry changes identity only when a process joins or is reclaimed, so a
** second try nearly always succeeds. */
#define SNAPSHOT_TRIES 4

/*
** What a monitoring handle last learned of each entry, so that a monitor
** sampling often (vram top at 10 Hz) judges each process at most once per
** JUDGE_INTERVAL_NS: in between, an entry judged alive (same owner word)
** is taken as alive, with the resident set last read. A process that died
** meanwhile shows that much longer (display only: nothing is freed
** without a judgment). vram top with 200 processes at 10 Hz, on a loaded
** 2-CPU VM: 3.9 % of a core with a /proc read per process per sample,
** 2.5 % with kill(pid, 0) in between, 1.5 % with neither (BENCHMARKS.md).
*/
#define JUDGE_INTERVAL_NS UINT64_C(1000000000)

struct judged {
    uint64_t word;  /* the owner word judged alive */
    uint64_t at_ns; /* CLOCK_MONOTONIC of that /proc read */
    uint64_t rss;   /* the resident set it read, bytes */
    int fd;         /* /proc/PID/statm of WORD's process, kept open; -1 none */
};

/*
** The /proc/PID/statm descriptors kept open by all monitoring handles of
** this process, at most half its RLIMIT_NOFILE (512 under the usual 1024):
** beyond, each judgment reads /proc/PID/stat by its path
** (ledger_proc_judge_fd says what keeping one saves).
*/
static _Atomic int kept_fds;
static _Atomic int kept_fds_max = -1; /* -1: not yet asked */

static bool
kept_fd_take(void)
{
    int max = atomic_load(&kept_fds_max);
    if (max < 0) {
        struct rlimit rl;
        max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                  ? (int)(rl.rlim_cur / 2 < 65536 ? rl.rlim_cur / 2 : 65536)
                  : 512;
        atomic_store(&kept_fds_max, max);
    }
    if (atomic_fetch_add(&kept_fds, 1) < max)
        return true;
    atomic_fetch_sub(&kept_fds, 1);
    return false;
}

/* Close entry J's kept descriptor, if any. */
static void
judged_forget(struct judged *j)
{
    if (j->fd >= 0) {
        close(j->fd);
        j->fd = -1;
        atomic_fetch_sub(&kept_fds, 1);
    }
}

/* This process's entry in a handle: the index in bits 0-15 and the
** generation of the owner word in bits 16-45; -1 = none. */
#define OWN_NONE INT64_C(-1)

/* Device records a handle remembers having found. Looking one up in the
** file hashes the UUID and compares it word by word: a quarter of the
** preload library's time per allocation and free over the stand-in
** driver. Records are never freed or moved (L4), so an index once found
** stays right for the life of the mapping. */
#define DEV_CACHE 8

struct dev_cached {
    _Atomic int ready; /* 1 once UUID and INDEX are written */
    int index;
    char uuid[LEDGER_UUID_LEN];
};

/*
** A handle: a member's maps the file (MAP), a reader's reads it with
** pread (FD; MAP is NULL), so that whatever the file's owner does to it
** cannot fault the reader. MAP, FD, GROUP, MEMBER and WRITABLE never
** change after open. OWN is atomic: the threads of one process share the
** handle. ME changes only in a fork child (forked: one thread).
*/
struct ledger {
    /* What a reservation reads, first: one cache line. */
    struct layout *map;
    bool member;   /* false: a monitoring handle, no entry, no reserve */
    bool writable; /* false: a read-only handle (ledger_attach_user) */
    _Atomic int64_t own;
    _Atomic uint32_t reserves; /* reservations made, for RECLAIM_EVERY */
    struct self me; /* its pid in the first line */
    struct ledger_dir dir; /* the directory that holds the file */
    uint64_t ino;   /* the file's inode, for ledger_file_unlink */
    int fd;         /* a reader's descriptor of the file (pread); -1 for a member */
    /* The limit this handle last recorded for each device (limit_set):
    ** UINT64_MAX none yet. */
    _Atomic uint64_t limit_put[LEDGER_MAX_DEVICES];
    char group[LEDGER_GROUP_LEN];
    struct ledger *next_member; /* the next of MEMBERS (a member's handle) */
    _Atomic int n_cached; /* entries of CACHED claimed (may pass DEV_CACHE) */
    struct dev_cached cached[DEV_CACHE];
    struct judged *judged; /* a monitoring handle's, LEDGER_MAX_PROCS; or NULL */
    /* A member's pidfds of the others (ledger_watch.c), made at the first
    ** look that meets another member; NULL before, or without memory. */
    _Atomic(struct ledger_watch *) watch;
};

/* ==== small helpers ==== */

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

VRAM_HOT static uint64_t
add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static vram_status
check_group(const char *group)
{
    if (group == NULL)
        return error_set(VRAM_E_INVALID, "ledger: NULL group");
    if (!ledger_group_valid(group))
        return error_set(VRAM_E_CONFIG,
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

VRAM_HOT static int
n_slots(const struct layout *m)
{
    /* Clamped: the file is shared and we never index out of it. */
    int n = atomic_load((_Atomic int32_t *)&m->n_slots);
    return n < 0 ? 0 : n > LEDGER_MAX_PROCS ? LEDGER_MAX_PROCS : n;
}

static uint64_t
ld(const _Atomic uint64_t *p)
{
    return atomic_load_explicit((_Atomic uint64_t *)p, memory_order_relaxed);
}

static void
st(_Atomic uint64_t *p, uint64_t v)
{
    atomic_store_explicit(p, v, memory_order_relaxed);
}

/* ==== fault points (ledger_testing.h) ==== */

/* Only in the tests' build of the ledger (VRAM_LEDGER_FAULTS): elsewhere
** ledger_fault is nothing, since each point's load of STOP_POINT would be
** a cache line more on the preload library's hooks. */
#ifdef VRAM_LEDGER_FAULTS

static _Atomic int stop_point;

void
ledger_fault_at(int point)
{
    if (atomic_load_explicit(&stop_point, memory_order_relaxed) != point)
        return;
    int expected = point;
    if (atomic_compare_exchange_strong(&stop_point, &expected, LEDGER_FAULT_NONE))
        raise(SIGSTOP);
}

void
ledger_test_stop_at(enum ledger_fault_point point)
{
    atomic_store(&stop_point, (int)point);
}

#endif

/* ==== entries ==== */

VRAM_HOT static uint64_t
own_word(const struct ledger *l, int64_t own)
{
    return owner_word(SLOT_LIVE, (uint32_t)((uint64_t)own >> 16), (int32_t)l->me.pid);
}

/*
** This process's entry if it has one and it is still its own; else NULL.
** The handle's identity is this process's: a fork child's handles are
** reset before the child runs (forked), so no pid is read here.
*/
VRAM_HOT static struct slot *
own_slot_if_any(struct ledger *l)
{
    int64_t own = atomic_load_explicit(&l->own, memory_order_relaxed);
    if (own < 0)
        return NULL;
    struct slot *s = &l->map->slots[own & 0xffff];
    if (atomic_load(&s->owner) != own_word(l, own))
        return NULL; /* judged dead (a recycled start time), or left */
    return s;
}

static void
slot_identity(struct slot *s, const struct self *me)
{
    st(&s->uid, (uint64_t)me->uid);
    st(&s->start_time, me->start_time);
    st(&s->pidns, me->pidns);
    st(&s->image, me->image);
    uint64_t words[LEDGER_COMM_LEN / 8];
    memcpy(words, me->comm, sizeof words);
    for (size_t k = 0; k < LEDGER_COMM_LEN / 8; k++)
        st(&s->comm[k], words[k]);
}

static void
slot_zero_uses(struct slot *s)
{
    for (int d = 0; d < LEDGER_MAX_DEVICES; d++) {
        atomic_store(&s->use[d].used, 0);
        atomic_store(&s->use[d].pending, 0);
        atomic_store(&s->use[d].peak, 0);
    }
    atomic_store(&s->pinned, 0);
}

/* Take at most BYTES off *P (never below 0): defined with the reservations. */
static void use_sub(_Atomic uint64_t *p, uint64_t bytes);

/* The number of device records in use (L4: they are taken in order). */
static int
n_devices(const struct layout *m)
{
    int n = 0;
    while (n < LEDGER_MAX_DEVICES && atomic_load((_Atomic uint64_t *)&m->dev[n].tag) != 0)
        n++;
    return n;
}

/* What entry S holds on each device into HELD (its first N_DEVICES). */
static int
entry_held(const struct layout *m, const struct slot *s, uint64_t held[LEDGER_MAX_DEVICES])
{
    int nd = n_devices(m);
    for (int d = 0; d < nd; d++)
        held[d] = atomic_load((_Atomic uint64_t *)&s->use[d].used);
    return nd;
}

/* An entry that held HELD (ND devices) was freed: its bytes leave the
** devices' use at once (L5). */
static void
in_use_off(struct layout *m, const uint64_t held[LEDGER_MAX_DEVICES], int nd)
{
    for (int d = 0; d < nd; d++)
        if (held[d] != 0)
            use_sub(&m->dev[d].in_use, held[d]);
}

/* Free entry S, judged dead under owner word W (one compare-and-swap,
** which fails if the entry changed since), and take what it held off the
** devices' use at once: read before the swap, when only a dead process
** could change it. */
static void
free_dead(struct layout *m, struct slot *s, uint64_t w)
{
    uint64_t held[LEDGER_MAX_DEVICES];
    int nd = entry_held(m, s, held);
    if (atomic_compare_exchange_strong(&s->owner, &w, owner_word(SLOT_FREE, owner_gen(w), 0)))
        in_use_off(m, held, nd);
}

/* Whether the LIVE entry S (owner word W) belongs to this process. */
static bool
same_process(const struct ledger *l, const struct slot *s, uint64_t w)
{
    return owner_state(w) == SLOT_LIVE && owner_pid(w) == l->me.pid &&
           ld(&s->start_time) == l->me.start_time && ld(&s->pidns) == l->me.pidns;
}

/* How a look for the dead is made (reclaim). */
enum look {
    LOOK_PERIODIC, /* at most every RECLAIM_INTERVAL_NS across the group */
    LOOK_NOW,      /* now, trusting the watch's pidfds */
    LOOK_THOROUGH  /* now, every member judged through /proc: before a refusal */
};
static void reclaim(struct ledger *l, enum look how);

/*
** Find or make this process's entry and record it in l->own. An entry of
** this same process (pid, start time, namespace) is shared when it comes
** from this program image (another handle), and emptied when it was left
** by the image before an execve(), whose device memory the driver freed.
** Threads racing here may each take an entry: the loser frees its own.
*/
static vram_status
claim_slot(struct ledger *l, struct slot **out)
{
    struct layout *m = l->map;
    int64_t seen = atomic_load(&l->own);
    for (int pass = 0; pass < 2; pass++) {
        int n = n_slots(m);
        int64_t own = OWN_NONE;
        for (int i = 0; i < n && own < 0; i++) {
            struct slot *s = &m->slots[i];
            uint64_t w = atomic_load(&s->owner);
            if (!same_process(l, s, w))
                continue;
            if (ld(&s->image) != l->me.image) {
                /* The old image's threads are gone, and the driver freed
                ** its memory: its bytes leave the group's use (L5). */
                uint64_t held[LEDGER_MAX_DEVICES];
                int nd = entry_held(m, s, held);
                slot_zero_uses(s);
                in_use_off(m, held, nd);
                st(&s->image, l->me.image);
            }
            own = (int64_t)i | ((int64_t)owner_gen(w) << 16);
        }
        for (int i = 0; i < LEDGER_MAX_PROCS && own < 0; i++) {
            struct slot *s = &m->slots[i];
            uint64_t w = atomic_load(&s->owner);
            if (owner_state(w) != SLOT_FREE)
                continue;
            uint32_t gen = owner_gen(w) + 1;
            if (!atomic_compare_exchange_strong(&s->owner, &w,
                                                owner_word(SLOT_INIT, gen, l->me.pid)))
                continue;
            ledger_fault(LEDGER_FAULT_SLOT);
            slot_identity(s, &l->me);
            slot_zero_uses(s);
            int top = atomic_load(&m->n_slots);
            while (top < i + 1 && !atomic_compare_exchange_weak(&m->n_slots, &top, i + 1))
                ;
            atomic_store(&s->owner, owner_word(SLOT_LIVE, gen, l->me.pid));
            own = (int64_t)i | ((int64_t)(gen & 0x3fffffffu) << 16);
        }
        if (own >= 0) {
            if (atomic_compare_exchange_strong(&l->own, &seen, own) || seen == own) {
                *out = &m->slots[own & 0xffff];
                return VRAM_OK;
            }
            /* Another thread of this process got there first: use its entry. */
            struct slot *mine = &m->slots[own & 0xffff];
            uint64_t w = atomic_load(&mine->owner);
            if ((seen & 0xffff) != (own & 0xffff))
                atomic_compare_exchange_strong(&mine->owner, &w,
                                               owner_word(SLOT_FREE, owner_gen(w), 0));
            struct slot *s = own_slot_if_any(l);
            if (s != NULL) {
                *out = s;
                return VRAM_OK;
            }
            continue;
        }
        reclaim(l, LOOK_THOROUGH); /* full: perhaps of the dead */
    }
    return error_set(VRAM_E_IO, "ledger of group %s is full: %d live processes", l->group,
                     LEDGER_MAX_PROCS);
}

/* This process's entry, made if needed (after fork, leave, or being
** judged dead). */
VRAM_HOT static vram_status
own_slot(struct ledger *l, struct slot **out)
{
    struct slot *s = own_slot_if_any(l);
    if (s != NULL) {
        *out = s;
        return VRAM_OK;
    }
    return claim_slot(l, out);
}

/* Free this process's entry (its uses go back to the group). */
static void
leave_slot(struct ledger *l)
{
    struct slot *s = own_slot_if_any(l);
    int64_t own = atomic_exchange(&l->own, OWN_NONE);
    if (s == NULL || own < 0)
        return;
    uint64_t w = own_word(l, own);
    uint64_t held[LEDGER_MAX_DEVICES];
    int nd = entry_held(l->map, s, held);
    if (atomic_compare_exchange_strong(&s->owner, &w, owner_word(SLOT_FREE, owner_gen(w), 0)))
        in_use_off(l->map, held, nd);
}

/* ==== fork ==== */

/*
** The members' handles open in this process. A fork child gets its own
** entry (the parent's use stays the parent's): an atfork handler resets
** every handle in the child before it runs, so that the hot path never
** compares pids (a cache line a reservation would read after a driver
** call). Guarded by members_lock, which the prepare handler holds across
** fork so that the list is whole in the child.
*/
static pthread_mutex_t members_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ledger *members;
static pthread_once_t members_once = PTHREAD_ONCE_INIT;

/* Make L the handle of this process, a fork child with one thread: its own
** identity, no entry yet (made at the first reservation). If /proc cannot
** be read, the pid alone (start time unknown: judged by the pid only). */
static vram_status
forked(struct ledger *l)
{
    struct self me;
    vram_status rc = ledger_self_read(&me);
    if (rc != VRAM_OK) {
        me = l->me;
        me.pid = ledger_my_pid();
        me.start_time = 0;
    }
    l->me = me;
    atomic_store(&l->own, OWN_NONE);
    /* The parent's pidfds: the child judges the others afresh. */
    ledger_watch_forget_all(atomic_load(&l->watch));
    return rc;
}

static void
members_prepare(void)
{
    pthread_mutex_lock(&members_lock);
}

static void
members_parent(void)
{
    pthread_mutex_unlock(&members_lock);
}

static void
members_child(void)
{
    for (struct ledger *l = members; l != NULL; l = l->next_member)
        (void)forked(l);
    pthread_mutex_unlock(&members_lock);
}

static void
members_init(void)
{
    pthread_atfork(members_prepare, members_parent, members_child);
}

static void
member_add(struct ledger *l)
{
    pthread_once(&members_once, members_init);
    pthread_mutex_lock(&members_lock);
    l->next_member = members;
    members = l;
    pthread_mutex_unlock(&members_lock);
}

static void
member_remove(struct ledger *l)
{
    pthread_mutex_lock(&members_lock);
    for (struct ledger **p = &members; *p != NULL; p = &(*p)->next_member)
        if (*p == l) {
            *p = l->next_member;
            break;
        }
    pthread_mutex_unlock(&members_lock);
}

/* ==== dead members ==== */

/*
** Start a look with L's watch, made at the first call, into *WT (NULL: L
** keeps none -- a monitoring or read-only handle, or no memory for one --
** and every member is judged through /proc). False when another thread
** of this process is looking with it now.
*/
static bool
watch_begin(struct ledger *l, struct ledger_watch **wt)
{
    struct ledger_watch *w = atomic_load(&l->watch);
    if (w == NULL && l->member) {
        struct ledger_watch *made = ledger_watch_new();
        if (made != NULL && !atomic_compare_exchange_strong(&l->watch, &w, made))
            ledger_watch_free(made); /* another thread made one: W is it */
        else
            w = made;
    }
    *wt = w;
    return w == NULL || ledger_watch_begin(w);
}

/*
** Free the entries of dead members. LOOK_PERIODIC: at most every
** RECLAIM_INTERVAL_NS across the group (whoever wins the time word looks;
** a looker stopped halfway only delays the next look by that interval).
** LOOK_THOROUGH judges every member through /proc, not trusting a pidfd
** (one the host program closed and replaced with a descriptor that never
** reports would hide a death): what a refusal or a removal rests on.
** Each entry is freed by one compare-and-swap of its owner word, which
** fails if it changed since it was judged: nothing is left half-done.
*/
static void
reclaim(struct ledger *l, enum look how)
{
    struct layout *m = l->map;
    if (!l->writable)
        return;
    /* A look now neither reads the clock nor writes the time word: it
    ** runs for every cuMemGetInfo in the preload library, where both cost
    ** a cache miss, and the periodic looks need no word of it. */
    if (how == LOOK_PERIODIC) {
        uint64_t now = now_ns();
        uint64_t last = atomic_load(&m->reclaim_ns);
        /* now < last: another time namespace wrote it; just look. */
        if (now >= last && now - last < RECLAIM_INTERVAL_NS)
            return;
        if (!atomic_compare_exchange_strong(&m->reclaim_ns, &last, now))
            return; /* another member is looking right now */
    }
    ledger_fault(LEDGER_FAULT_RECLAIM);
    int n = n_slots(m);
    int64_t own = atomic_load(&l->own);
    /* The watch is taken at the first other member met, or at once when
    ** there is one already (so that the pidfds of members that left are
    ** closed): a process that never met another looks without a locked
    ** instruction. */
    bool begun = false;
    struct ledger_watch *wt = NULL;
    if (how != LOOK_THOROUGH && atomic_load_explicit(&l->watch, memory_order_relaxed) != NULL) {
        if (!watch_begin(l, &wt))
            wt = NULL;
        begun = true;
    }
    for (int i = 0; i < n; i++) {
        struct slot *s = &m->slots[i];
        uint64_t w = atomic_load(&s->owner);
        unsigned state = owner_state(w);
        if (state == SLOT_FREE) {
            if (wt != NULL)
                ledger_watch_drop(wt, i); /* a member that left: its pidfd goes */
            continue;
        }
        if (own >= 0 && (own & 0xffff) == i && w == own_word(l, own))
            continue;
        /* Another thread of this process looking with the watch right now
        ** (or one cancelled inside its look): judge through /proc. */
        if (!begun && (how == LOOK_THOROUGH || !watch_begin(l, &wt)))
            wt = NULL;
        begun = true;
        if (wt != NULL && ledger_watch_has(wt, i, w))
            continue; /* judged alive before: its pidfd is polled below */
        /* An entry still being written: only a gone pid makes it dead. */
        uint64_t start = state == SLOT_LIVE ? ld(&s->start_time) : 0;
        uint64_t pidns = state == SLOT_LIVE ? ld(&s->pidns) : 0;
        if (atomic_load(&s->owner) != w)
            continue; /* changed while read: judged next time */
        int fd = -1;
        if (wt != NULL && start != 0 && pidns != 0 && pidns == l->me.pidns)
            fd = ledger_watch_open(wt, owner_pid(w));
        if (ledger_proc_dead(owner_pid(w), start, pidns, l->me.pidns)) {
            ledger_watch_close(fd);
            free_dead(m, s, w);
        } else if (fd >= 0) {
            ledger_watch_keep(wt, i, w, fd);
        }
    }
    if (wt == NULL)
        return;
    int ended[LEDGER_MAX_PROCS];
    int k = ledger_watch_poll(wt, ended, LEDGER_MAX_PROCS);
    for (int e = 0; e < k; e++) {
        int i = ended[e];
        struct slot *s = &m->slots[i];
        uint64_t w = atomic_load(&s->owner);
        uint64_t start = ld(&s->start_time), pidns = ld(&s->pidns);
        if (atomic_load(&s->owner) != w || !ledger_watch_has(wt, i, w))
            continue; /* another process in the entry now: judged next time */
        if (ledger_proc_dead(owner_pid(w), start, pidns, l->me.pidns)) {
            ledger_watch_drop(wt, i);
            free_dead(m, s, w);
        } else {
            ledger_watch_forget(wt, i); /* not the pidfd opened: not ours to close */
        }
    }
    ledger_watch_end(wt);
}

/* reclaim(L, LOOK_PERIODIC) at about every RECLAIM_EVERY-th call. A load
** and a store, not an atomic add: racing threads may lose a count, which only
** delays the look a little, and a reservation saves a locked instruction. */
VRAM_HOT static void
reclaim_now_and_then(struct ledger *l)
{
    uint32_t n = atomic_load_explicit(&l->reserves, memory_order_relaxed);
    atomic_store_explicit(&l->reserves, n + 1, memory_order_relaxed);
    if (n % RECLAIM_EVERY == 0)
        reclaim(l, LOOK_PERIODIC);
}

/* ==== devices ==== */

/* FNV-1a of the UUID, never 0 (0 = a free record). */
static uint64_t
uuid_tag(const char *uuid)
{
    uint64_t h = UINT64_C(14695981039346656037);
    for (; *uuid != '\0'; uuid++) {
        h ^= (unsigned char)*uuid;
        h *= UINT64_C(1099511628211);
    }
    return h | 1;
}

static void
uuid_read(const struct device *dv, char *out)
{
    for (int k = 0; k < LEDGER_UUID_LEN; k++)
        out[k] = atomic_load_explicit((_Atomic char *)&dv->uuid[k], memory_order_relaxed);
    out[LEDGER_UUID_LEN - 1] = '\0';
}

/* Whether record DV (tagged like UUID) is UUID's; completes its string if
** its writer has not (the same bytes, so racing writers agree). */
static bool
device_is(struct device *dv, const char *uuid)
{
    char have[LEDGER_UUID_LEN];
    uuid_read(dv, have);
    size_t hn = strlen(have), un = strlen(uuid);
    if (hn == un && memcmp(have, uuid, un) == 0)
        return true;
    if (hn > un || memcmp(have, uuid, hn) != 0)
        return false; /* another UUID with the same tag */
    for (size_t k = hn; k < un; k++)
        atomic_store_explicit(&dv->uuid[k], uuid[k], memory_order_relaxed);
    return true;
}

/* The index of device UUID this handle remembers, or -1. */
static int
device_cached(struct ledger *l, const char *uuid)
{
    int n = atomic_load_explicit(&l->n_cached, memory_order_acquire);
    for (int k = 0; k < n && k < DEV_CACHE; k++) {
        struct dev_cached *c = &l->cached[k];
        if (atomic_load_explicit(&c->ready, memory_order_acquire) &&
            strcmp(c->uuid, uuid) == 0)
            return c->index;
    }
    return -1;
}

/* Remember that UUID is record D (each entry is written by the one
** thread that claimed it, then published). */
static void
device_remember(struct ledger *l, const char *uuid, int d)
{
    int k = atomic_fetch_add(&l->n_cached, 1);
    if (k >= DEV_CACHE)
        return;
    struct dev_cached *c = &l->cached[k];
    snprintf(c->uuid, sizeof c->uuid, "%s", uuid);
    c->index = d;
    atomic_store_explicit(&c->ready, 1, memory_order_release);
}

static vram_status device_lookup(struct ledger *l, const char *uuid, bool add, int *out);

/* The index of device UUID; added if ADD (L4). -1 with no error set if
** absent and !ADD. */
static vram_status
device_index(struct ledger *l, const char *uuid, bool add, int *out)
{
    int d = device_cached(l, uuid);
    if (d >= 0) {
        *out = d;
        return VRAM_OK;
    }
    vram_status rc = device_lookup(l, uuid, add, &d);
    if (rc == VRAM_OK && d >= 0)
        device_remember(l, uuid, d);
    *out = d;
    return rc;
}

/* device_index in the file itself. */
static vram_status
device_lookup(struct ledger *l, const char *uuid, bool add, int *out)
{
    struct layout *m = l->map;
    uint64_t tag = uuid_tag(uuid);
    for (int d = 0; d < LEDGER_MAX_DEVICES; d++) {
        struct device *dv = &m->dev[d];
        uint64_t t = atomic_load(&dv->tag);
        if (t == 0) {
            if (!add || !l->writable) {
                *out = -1;
                return VRAM_OK;
            }
            if (!atomic_compare_exchange_strong(&dv->tag, &t, tag)) {
                d--; /* taken a moment ago: look at it again */
                continue;
            }
            ledger_fault(LEDGER_FAULT_DEVICE);
            for (size_t k = 0; uuid[k] != '\0'; k++)
                atomic_store_explicit(&dv->uuid[k], uuid[k], memory_order_relaxed);
            *out = d;
            return VRAM_OK;
        }
        if (t == tag && (!l->writable || device_is(dv, uuid))) {
            *out = d;
            return VRAM_OK;
        }
    }
    if (!add) {
        *out = -1;
        return VRAM_OK;
    }
    return error_set(VRAM_E_NO_DEVICE,
                     "ledger of group %s already tracks %d devices; cannot add %s", l->group,
                     LEDGER_MAX_DEVICES, uuid);
}

/*
** The sum of the LIVE entries' use of device D (L1), saturating; with
** their pending reservations if PENDING. Pending bytes are read before
** the use: a grant adds to the use first and then takes off the pending
** bytes, so a reader that meets the pending bytes gone reads the use
** after they arrived there. In the other order a grant made between the
** two loads would be in neither.
*/
VRAM_HOT static uint64_t
group_sum(const struct layout *m, int d, bool pending)
{
    uint64_t sum = 0;
    int n = n_slots(m);
    for (int i = 0; i < n; i++) {
        struct slot *s = (struct slot *)&m->slots[i];
        if (owner_state(atomic_load(&s->owner)) != SLOT_LIVE)
            continue;
        if (pending) {
            sum = add_sat(sum, atomic_load(&s->use[d].pending));
            ledger_fault(LEDGER_FAULT_SUMMING);
        }
        sum = add_sat(sum, atomic_load(&s->use[d].used));
    }
    return sum;
}

/* ==== opening ==== */

/* Join: claim an entry and make sure the file is not being removed (a
** removal in progress is vetoed). False if it was removed: open anew. */
static bool
join(struct ledger *l, vram_status *rc)
{
    struct slot *s = NULL;
    *rc = own_slot(l, &s);
    if (*rc != VRAM_OK)
        return true;
    uint32_t state = atomic_load(&l->map->state);
    if (state == FILE_REMOVING) {
        /* Our entry is already visible: turning the mark back makes the
        ** remover's final step fail. */
        if (atomic_compare_exchange_strong(&l->map->state, &state, FILE_ACTIVE))
            return true;
    }
    if (state != FILE_REMOVED)
        return true;
    leave_slot(l);
    return false;
}

/* Whether a reader's file (FD) is marked removed: its state word, read. */
static bool
read_removed(int fd)
{
    uint32_t state = 0;
    return pread(fd, &state, sizeof state, (off_t)offsetof(struct layout, state)) ==
               (ssize_t)sizeof state &&
           state == FILE_REMOVED;
}

/* Open a handle on GROUP of user UID (in directory AT, or the user's):
** a member's (MEMBER: an entry, the file mapped and made if need be), or
** a reader's (read with pread, never mapped). */
static vram_status
open_handle(const struct ledger_dir *at, uid_t uid, const char *group, bool member,
            struct ledger **out)
{
    if (out == NULL)
        return error_set(VRAM_E_INVALID, "ledger: NULL argument");
    vram_status rc = check_group(group);
    if (rc != VRAM_OK)
        return rc;
    /* Line-aligned: what a reservation reads is the handle's first line. */
    size_t size = (sizeof(struct ledger) + LEDGER_LINE - 1) / LEDGER_LINE * LEDGER_LINE;
    struct ledger *l = aligned_alloc(LEDGER_LINE, size);
    if (l == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "ledger: out of host memory");
    memset(l, 0, size);
    l->member = member;
    l->writable = member;
    l->fd = -1;
    atomic_init(&l->own, OWN_NONE);
    for (int d = 0; d < LEDGER_MAX_DEVICES; d++)
        atomic_init(&l->limit_put[d], UINT64_MAX);
    memcpy(l->group, group, strlen(group) + 1);
    rc = ledger_self_read(&l->me);
    for (int attempt = 0; rc == VRAM_OK; attempt++) {
        struct ledger_file f;
        rc = ledger_file_open(at, uid, group, member, member, &f);
        if (rc != VRAM_OK)
            break;
        l->map = f.map;
        l->fd = f.fd;
        l->dir = f.dir;
        l->ino = f.ino;
        bool ok = member ? join(l, &rc) : !read_removed(l->fd);
        if (ok)
            break;
        if (!member) {
            rc = error_set(VRAM_E_NO_DEVICE, "no ledger for group %s (just removed)", group);
            break;
        }
        /* Removed: its remover may be stopped before its unlink, so unlink
        ** it ourselves (only if the name still names this file). */
        ledger_file_unlink(&l->dir, group, l->ino);
        munmap(l->map, sizeof *l->map);
        l->map = NULL;
        if (attempt + 1 >= OPEN_ATTEMPTS)
            rc = error_set(VRAM_E_IO, "ledger of group %s keeps being removed while opened",
                           group);
    }
    if (rc != VRAM_OK) {
        ledger_close(l);
        return rc;
    }
    if (member) {
        reclaim(l, LOOK_PERIODIC);
        member_add(l);
    }
    *out = l;
    return VRAM_OK;
}

/* ==== the contract ==== */

vram_status
ledger_open(const char *group, struct ledger **out)
{
    return open_handle(NULL, geteuid(), group, true, out);
}

vram_status
ledger_attach_existing(const char *group, struct ledger **out)
{
    return open_handle(NULL, geteuid(), group, false, out);
}

vram_status
ledger_attach_in(const struct ledger_dir *dir, const char *group, struct ledger **out)
{
    if (dir == NULL)
        return error_set(VRAM_E_INVALID, "ledger_attach_in: NULL directory");
    return open_handle(dir, dir->uid, group, false, out);
}


void
ledger_close(struct ledger *l)
{
    if (l == NULL)
        return;
    if (l->member)
        member_remove(l);
    if (l->map != NULL)
        munmap(l->map, sizeof *l->map);
    if (l->fd >= 0)
        close(l->fd);
    for (int i = 0; l->judged != NULL && i < LEDGER_MAX_PROCS; i++)
        judged_forget(&l->judged[i]);
    free(l->judged);
    ledger_watch_free(atomic_load(&l->watch));
    free(l);
}

bool
ledger_current(const struct ledger *l)
{
    if (l == NULL || (l->map == NULL && l->fd < 0))
        return false;
    /* A reader's snapshot finds the file marked removed itself. */
    if (l->map != NULL && atomic_load(&l->map->state) == FILE_REMOVED)
        return false;
    return ledger_file_same(&l->dir, l->group, l->ino);
}

void
ledger_leave(struct ledger *l)
{
    if (l == NULL || !l->member)
        return;
    leave_slot(l);
}

/* The removal's steps (docs/LEDGER.md, "Removal") on L's mapping. */
static bool
remove_mapped(struct ledger *l)
{
    struct layout *m = l->map;
    reclaim(l, LOOK_THOROUGH);
    uint32_t state = FILE_ACTIVE;
    if (!atomic_compare_exchange_strong(&m->state, &state, FILE_REMOVING))
        return state == FILE_REMOVED;
    ledger_fault(LEDGER_FAULT_REMOVING);
    bool empty = true;
    int n = n_slots(m);
    for (int i = 0; i < n && empty; i++)
        empty = owner_state(atomic_load(&m->slots[i].owner)) == SLOT_FREE;
    state = FILE_REMOVING;
    if (!empty) {
        atomic_compare_exchange_strong(&m->state, &state, FILE_ACTIVE);
        return false;
    }
    if (!atomic_compare_exchange_strong(&m->state, &state, FILE_REMOVED))
        return false; /* a joiner turned it back */
    ledger_file_unlink(&l->dir, l->group, l->ino);
    return true;
}

/* How long a reader waits for the child that removes a ledger for it, ms:
** the child's work is a /proc read per entry at most (a few ms); one its
** user stopped (it runs as the caller) is killed then. */
#define REMOVE_WAIT_MS 1000

/* End a child process this library forked itself (never the host
** process: habit 7), without the host's exit handlers or buffers. */
static _Noreturn void
child_end(int status)
{
    _exit(status); /* a fork child's end */
}

/*
** A reader's removal: the steps need atomics on the file itself, so a
** child process maps it and takes them, and the reader (which maps
** nothing) waits for it: a file truncated meanwhile faults the child, not
** the reader. The child says nothing and asks no user database (it may be
** the child of a threaded program: only async-signal-safe work, and
** /proc reads).
*/
static bool
remove_in_child(struct ledger *l)
{
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        struct layout *m = ledger_file_map_quiet(&l->dir, l->group, l->ino);
        if (m == NULL)
            child_end(2);
        struct ledger tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.map = m;
        tmp.writable = true;
        tmp.fd = -1;
        atomic_init(&tmp.own, OWN_NONE);
        tmp.me = l->me; /* its pid namespace, for the judgments */
        tmp.dir = l->dir;
        tmp.ino = l->ino;
        memcpy(tmp.group, l->group, sizeof tmp.group);
        child_end(remove_mapped(&tmp) ? 0 : 1);
    }
    int status = 0;
    for (int waited = 0;; waited++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (w < 0 && errno != EINTR)
            return false; /* reaped elsewhere (SIGCHLD ignored): the next look tells */
        if (waited >= REMOVE_WAIT_MS) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            return false;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

bool
ledger_remove_if_unused(struct ledger *l)
{
    if (l == NULL)
        return false;
    if (l->member && l->map != NULL)
        return remove_mapped(l);
    if (l->fd >= 0)
        return remove_in_child(l);
    return false;
}

vram_status
ledger_after_fork(struct ledger *l)
{
    if (l == NULL)
        return error_set(VRAM_E_INVALID, "ledger_after_fork: NULL handle");
    return forked(l); /* done already by the fork handler; again is harmless */
}

/* VRAM_OK if L is a member's handle; else why CALL cannot go on: L is NULL,
** or a monitoring handle, which CANNOT ("cannot reserve"). */
VRAM_HOT static vram_status
check_member(const struct ledger *l, const char *call, const char *cannot)
{
    if (l == NULL)
        return error_set(VRAM_E_INVALID, "%s: NULL handle", call);
    if (!l->member)
        return error_set(VRAM_E_INVALID, "ledger of group %s: a monitoring handle %s",
                         l->group, cannot);
    return VRAM_OK;
}

/* Whether USED + BYTES would pass LIMIT (0 = none), without overflow. */
VRAM_HOT static bool
over_limit(uint64_t used, uint64_t bytes, uint64_t limit)
{
    return limit != 0 && (bytes > limit || used > limit - bytes);
}

/* Add BYTES to *P (saturating); the bytes actually added. */
VRAM_HOT static uint64_t
use_add(_Atomic uint64_t *p, uint64_t bytes)
{
    uint64_t old = atomic_load(p), want;
    do
        want = add_sat(old, bytes);
    while (!atomic_compare_exchange_weak(p, &old, want));
    return want - old;
}

/* Take at most BYTES off *P (never below 0). */
VRAM_HOT static void
use_sub(_Atomic uint64_t *p, uint64_t bytes)
{
    uint64_t old = atomic_load(p), want;
    do
        want = old - (bytes < old ? bytes : old);
    while (!atomic_compare_exchange_weak(p, &old, want));
}

vram_status
ledger_device(struct ledger *l, const char *uuid, int *index)
{
    vram_status rc = check_member(l, "ledger_device", "cannot reserve");
    if (rc == VRAM_OK && index == NULL)
        rc = error_set(VRAM_E_INVALID, "ledger_device: NULL index");
    if (rc == VRAM_OK)
        rc = check_uuid(uuid);
    if (rc == VRAM_OK)
        rc = device_index(l, uuid, true, index);
    return rc;
}

/* VRAM_OK if D can be a device index of L's (ledger_device). */
VRAM_HOT static vram_status
check_index(const char *call, int d)
{
    if (d < 0 || d >= LEDGER_MAX_DEVICES)
        return error_set(VRAM_E_INVALID, "%s: device index %d is not one of 0..%d", call, d,
                         LEDGER_MAX_DEVICES - 1);
    return VRAM_OK;
}

/* Record LIMIT as device D's quota for the monitors, unless this handle
** recorded that already (the shared record is then not touched). Another
** member recording another limit in between is not undone: the record is
** the limit last changed. */
static void
limit_set(struct ledger *l, int d, uint64_t limit)
{
    if (atomic_load_explicit(&l->limit_put[d], memory_order_relaxed) == limit)
        return;
    st(&l->map->dev[d].limit, limit);
    atomic_store_explicit(&l->limit_put[d], limit, memory_order_relaxed);
}

void
ledger_limit_set(struct ledger *l, int d, uint64_t limit)
{
    if (check_member(l, "ledger_limit_set", "cannot set a limit") == VRAM_OK &&
        check_index("ledger_limit_set", d) == VRAM_OK)
        limit_set(l, d, limit);
}

VRAM_HOT /*
** Start fetching the lines a reservation or release of device D will
** change or read: this process's owner word and counters of D and the
** header (n_slots, for the sum). Its first change is a locked instruction, which holds
** every later load until its own line is here; fetched together, the
** misses after a driver call overlap instead of following one another.
** A prefetch never faults: a stale entry index costs nothing but itself.
*/
static inline void
prefetch_use(const struct ledger *l, int d)
{
    int64_t own = atomic_load_explicit(&l->own, memory_order_relaxed);
    if (own < 0)
        return;
    const struct slot *s = &l->map->slots[own & 0xffff];
    __builtin_prefetch(&s->owner, 0);
    __builtin_prefetch(&s->use[d], 1);
    __builtin_prefetch(&l->map->n_slots, 0);
    __builtin_prefetch(&l->map->dev[d].in_use, 1);
}

vram_status
ledger_reserve_at(struct ledger *l, int d, uint64_t bytes, uint64_t limit,
                  uint64_t *group_used)
{
    vram_status rc = check_member(l, "ledger_reserve", "cannot reserve");
    if (rc == VRAM_OK)
        rc = check_index("ledger_reserve", d);
    if (rc != VRAM_OK)
        return rc;
    prefetch_use(l, d);
    reclaim_now_and_then(l);
    struct slot *s = NULL;
    rc = own_slot(l, &s);
    if (rc != VRAM_OK)
        return rc;

    struct slot_use *u = &s->use[d];
    uint64_t total = 0, added = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        added = use_add(&u->pending, bytes);
        ledger_fault(LEDGER_FAULT_CLAIMED);
        if (limit == 0)
            break;
        total = group_sum(l->map, d, true);
        if (!over_limit(total - (total < added ? total : added), added, limit) &&
            added == bytes)
            break;
        use_sub(&u->pending, added);
        added = 0;
        if (attempt == 0)
            reclaim(l, LOOK_THOROUGH); /* never refuse because of the dead */
        else
            sched_yield(); /* a racing reservation may be backing off */
    }
    if (added == 0 && bytes != 0) {
        uint64_t used = total - (total < bytes ? total : bytes);
        atomic_fetch_add(&l->map->dev[d].refusals, 1);
        if (group_used != NULL)
            *group_used = used;
        char uuid[LEDGER_UUID_LEN];
        uuid_read(&l->map->dev[d], uuid);
        return error_set(VRAM_E_OOM,
                         "group %s: %" PRIu64 " more bytes on %s would pass its limit of "
                         "%" PRIu64 " (%" PRIu64 " in use)",
                         l->group, bytes, uuid, limit, used);
    }
    ledger_fault(LEDGER_FAULT_CHECKED);
    /* In use first, then no longer pending: counted twice for a moment
    ** (never a moment uncounted). */
    use_add(&u->used, added);
    ledger_fault(LEDGER_FAULT_GRANTED);
    use_sub(&u->pending, added);
    uint64_t now = atomic_load(&u->used);
    uint64_t peak = atomic_load(&u->peak);
    bool first = false; /* this entry's first grant on D: raised its peak from 0 */
    while (now > peak) {
        if (atomic_compare_exchange_weak(&u->peak, &peak, now)) {
            first = peak == 0;
            break;
        }
    }
    /* The group's use at once and its peak (L5), after the entry's. */
    struct device *dv = &l->map->dev[d];
    uint64_t at_once = atomic_fetch_add(&dv->in_use, added) + added;
    uint64_t top = atomic_load(&dv->peak);
    while (at_once > top && !atomic_compare_exchange_weak(&dv->peak, &top, at_once))
        ;
    if (first)
        atomic_fetch_add(&dv->users, 1);
    return VRAM_OK;
}

vram_status
ledger_reserve(struct ledger *l, const char *uuid, uint64_t bytes, uint64_t limit,
               uint64_t *group_used)
{
    int d = -1;
    vram_status rc = ledger_device(l, uuid, &d);
    if (rc != VRAM_OK)
        return rc;
    limit_set(l, d, limit);
    return ledger_reserve_at(l, d, bytes, limit, group_used);
}

VRAM_HOT void
ledger_release_at(struct ledger *l, int d, uint64_t bytes)
{
    if (l == NULL || !l->member || d < 0 || d >= LEDGER_MAX_DEVICES)
        return;
    prefetch_use(l, d);
    struct slot *s = own_slot_if_any(l);
    if (s == NULL)
        return;
    ledger_fault(LEDGER_FAULT_RELEASE);
    /* The group's use at once first, then the entry's (L5). Never below
    ** zero: a release of more than was reserved (a caller bug, or an
    ** entry emptied by ledger_leave) must not wrap. */
    use_sub(&l->map->dev[d].in_use, bytes);
    use_sub(&s->use[d].used, bytes);
}

void
ledger_release(struct ledger *l, const char *uuid, uint64_t bytes)
{
    if (l == NULL || !l->member || check_uuid(uuid) != VRAM_OK)
        return;
    int d = -1;
    if (device_index(l, uuid, false, &d) == VRAM_OK)
        ledger_release_at(l, d, bytes);
}

vram_status
ledger_host_add(struct ledger *l, uint64_t bytes)
{
    struct slot *s = NULL;
    vram_status rc = check_member(l, "ledger_host_add", "holds no host memory");
    if (rc == VRAM_OK)
        rc = own_slot(l, &s);
    if (rc == VRAM_OK)
        use_add(&s->pinned, bytes);
    return rc;
}

void
ledger_host_sub(struct ledger *l, uint64_t bytes)
{
    struct slot *s = l != NULL && l->member ? own_slot_if_any(l) : NULL;
    if (s != NULL)
        use_sub(&s->pinned, bytes); /* never below zero, as ledger_release */
}

/* ==== a reader's copy of the file ==== */

/* Entries a reader reads at once: 16 of 640 bytes, a few pages. */
#define READ_CHUNK 16
/* Reads of one record that keeps changing, before it is left out. */
#define READ_TRIES 4

/*
** A reader's private copy of its file (image_read): the header, the
** device records and the entries below n_slots. Each record is read
** twice and kept only when both reads agree byte for byte: an entry's
** owner word holds a generation that a new member's claim always
** changes, so two equal reads of it, the second after the whole first,
** mean that the entry belonged to one process all along, and equal
** identity fields that they are that process's (a field read before the
** claim would differ from its second read). No read can fault: a file
** cut short makes a short read, which is said.
*/
struct image {
    struct layout *m; /* malloc'ed (the layout's size; only what is read is touched) */
    int n;            /* entries read */
    bool unstable[LEDGER_MAX_PROCS]; /* kept changing while read: left out, stale */
};

/* pread exactly LEN bytes at OFF into BUF; false on a short read (the
** file was cut) or an error. */
static bool
read_exact(int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/*
** COUNT records of SIZE bytes read twice, at OFF of the file, into A and
** B: each record that differs between the two is read again alone, both
** ways, until the two reads agree (READ_TRIES); UNSTABLE[i] (if not NULL)
** says which never did (A holds its last read). False when the file cannot
** be read that far.
*/
static bool
settle_records(int fd, void *a, void *b, size_t size, int count, off_t off, bool *unstable)
{
    for (int i = 0; i < count; i++) {
        char *x = (char *)a + size * (size_t)i, *y = (char *)b + size * (size_t)i;
        off_t at = off + (off_t)(size * (size_t)i);
        bool same = memcmp(x, y, size) == 0;
        for (int t = 0; !same && t < READ_TRIES; t++) {
            if (!read_exact(fd, x, size, at) || !read_exact(fd, y, size, at))
                return false;
            same = memcmp(x, y, size) == 0;
        }
        if (unstable != NULL)
            unstable[i] = !same;
    }
    return true;
}

/* COUNT records of SIZE bytes at OFF into DST, each as two reads agree
** (SCRATCH: room for COUNT records; settle_records). */
static bool
read_records(int fd, void *dst, void *scratch, size_t size, int count, off_t off,
             bool *unstable)
{
    size_t len = size * (size_t)count;
    return read_exact(fd, dst, len, off) && read_exact(fd, scratch, len, off) &&
           settle_records(fd, dst, scratch, size, count, off, unstable);
}

/* The line for L's file found cut short (or grown: a read of it failed). */
static vram_status
image_cut(const struct ledger *l, const char *dir)
{
    struct stat sb;
    if (fstat(l->fd, &sb) == 0 && (uint64_t)sb.st_size != sizeof(struct layout))
        return error_set(VRAM_E_IO,
                         "ledger %s/%s has %lld bytes, not the %zu of a ledger of this vram "
                         "(it is not read); remove it once no process of the group runs",
                         dir, l->group, (long long)sb.st_size, sizeof(struct layout));
    return error_set(VRAM_E_IO, "ledger %s/%s cannot be read: %s", dir, l->group,
                     errno != 0 ? strerror(errno) : "it changed size while it was read");
}

/* What a reader reads first, twice, one system call each: the header, the
** device records and the first READ_CHUNK entries. A group of up to 16
** processes is read in two calls. */
#define READ_FIRST (offsetof(struct layout, slots) + READ_CHUNK * sizeof(struct slot))

/*
** Read reader L's file into IM (image_free after). VRAM_E_IO with a line
** when it is no longer a ledger of this build (cut, rewritten),
** VRAM_E_NO_DEVICE when it was removed. The copy is allocated for the
** header, the devices and the entries below n_slots only (a few KiB for
** a small group, not the whole layout at every sample): only those are
** ever reached through IM->m.
*/
static vram_status
image_read(struct ledger *l, struct image *im)
{
    char dir[64];
    ledger_dir_path(dir, sizeof dir, &l->dir);
    memset(im, 0, sizeof *im);
    struct layout *m = malloc(READ_FIRST);
    unsigned char *scratch = malloc(READ_FIRST);
    vram_status rc = VRAM_OK;
    errno = 0;
    if (m == NULL || scratch == NULL)
        rc = error_set(VRAM_E_HOST_MEMORY, "ledger: out of host memory");
    else if (!read_exact(l->fd, m, READ_FIRST, 0) || !read_exact(l->fd, scratch, READ_FIRST, 0))
        rc = image_cut(l, dir);
    if (rc == VRAM_OK && (atomic_load(&m->magic) != LEDGER_MAGIC ||
                          atomic_load(&m->version) != LEDGER_VERSION ||
                          atomic_load(&m->size) != sizeof(struct layout)))
        rc = ledger_file_alien(dir, l->group, atomic_load(&m->magic),
                               atomic_load(&m->version));
    if (rc == VRAM_OK && atomic_load(&m->state) == FILE_REMOVED)
        rc = error_set(VRAM_E_NO_DEVICE, "no ledger for group %s (just removed)", l->group);
    int n = rc == VRAM_OK ? n_slots(m) : 0;
    int first = n < READ_CHUNK ? n : READ_CHUNK;
    if (rc == VRAM_OK &&
        (!settle_records(l->fd, m->dev, scratch + offsetof(struct layout, dev),
                         sizeof m->dev[0], LEDGER_MAX_DEVICES,
                         (off_t)offsetof(struct layout, dev), NULL) ||
         !settle_records(l->fd, m->slots, scratch + offsetof(struct layout, slots),
                         sizeof(struct slot), first, (off_t)offsetof(struct layout, slots),
                         im->unstable)))
        rc = image_cut(l, dir);
    if (rc == VRAM_OK && n > READ_CHUNK) {
        struct layout *bigger =
            realloc(m, offsetof(struct layout, slots) + (size_t)n * sizeof(struct slot));
        if (bigger == NULL)
            rc = error_set(VRAM_E_HOST_MEMORY, "ledger: out of host memory");
        else
            m = bigger;
    }
    for (int base = READ_CHUNK; rc == VRAM_OK && base < n; base += READ_CHUNK) {
        int k = n - base < READ_CHUNK ? n - base : READ_CHUNK;
        off_t off = (off_t)(offsetof(struct layout, slots) + sizeof(struct slot) * (size_t)base);
        if (!read_records(l->fd, &m->slots[base], scratch, sizeof(struct slot), k, off,
                          &im->unstable[base]))
            rc = image_cut(l, dir);
    }
    free(scratch);
    if (rc != VRAM_OK) {
        free(m);
        return rc;
    }
    im->m = m;
    im->n = n;
    return VRAM_OK;
}

static void
image_free(struct image *im)
{
    free(im->m);
    im->m = NULL;
}

/* A reader's sum of the live entries' use of device D (-1: the device of
** UUID), each judged alive through /proc (no judgment remembered). */
static uint64_t
reader_used(struct ledger *l, int d, const char *uuid)
{
    struct image im;
    if (image_read(l, &im) != VRAM_OK)
        return 0;
    const struct layout *m = im.m;
    uint64_t tag = d < 0 ? uuid_tag(uuid) : 0;
    for (int k = 0; d < 0 && k < LEDGER_MAX_DEVICES; k++) {
        char have[LEDGER_UUID_LEN];
        uuid_read(&m->dev[k], have);
        if (atomic_load(&m->dev[k].tag) == tag && strcmp(have, uuid) == 0)
            d = k;
    }
    uint64_t sum = 0;
    for (int i = 0; d >= 0 && i < im.n; i++) {
        const struct slot *s = &m->slots[i];
        uint64_t w = ld(&s->owner);
        if (im.unstable[i] || owner_state(w) != SLOT_LIVE ||
            ledger_proc_dead(owner_pid(w), ld(&s->start_time), ld(&s->pidns), l->me.pidns))
            continue;
        sum = add_sat(sum, ld(&s->use[d].used));
    }
    image_free(&im);
    return sum;
}

uint64_t
ledger_group_used(struct ledger *l, const char *uuid)
{
    if (l == NULL || check_uuid(uuid) != VRAM_OK)
        return 0;
    if (l->map == NULL)
        return reader_used(l, -1, uuid);
    reclaim(l, LOOK_NOW);
    int d = -1;
    device_index(l, uuid, false, &d);
    return d >= 0 ? group_sum(l->map, d, false) : 0;
}

VRAM_HOT uint64_t
ledger_group_used_at(struct ledger *l, int d)
{
    if (l == NULL || d < 0 || d >= LEDGER_MAX_DEVICES)
        return 0;
    if (l->map == NULL)
        return reader_used(l, d, NULL);
    reclaim(l, LOOK_NOW);
    return group_sum(l->map, d, false);
}

/* Copy entry S into *P; false if it is not LIVE or changed meanwhile. */
static bool
copy_proc(const struct slot *s, struct ledger_proc *p, uint64_t *word)
{
    _Atomic uint64_t *ow = (_Atomic uint64_t *)&s->owner;
    uint64_t w = atomic_load(ow);
    if (owner_state(w) != SLOT_LIVE)
        return false;
    p->pid = (pid_t)owner_pid(w);
    p->start_time = ld(&s->start_time);
    p->uid = (uid_t)ld(&s->uid);
    uint64_t words[LEDGER_COMM_LEN / 8];
    for (size_t k = 0; k < LEDGER_COMM_LEN / 8; k++)
        words[k] = ld(&s->comm[k]);
    memcpy(p->comm, words, sizeof p->comm);
    p->comm[LEDGER_COMM_LEN - 1] = '\0';
    for (int d = 0; d < LEDGER_MAX_DEVICES; d++) {
        p->dev[d].used = ld(&s->use[d].used);
        p->dev[d].peak = ld(&s->use[d].peak);
    }
    p->pinned = ld(&s->pinned);
    p->rss = 0;
    *word = w;
    return atomic_load(ow) == w;
}

/* A monitoring handle's judgment of entry I (owner word W, copied into P):
** whether its process is dead; P's resident set. See struct judged. */
static bool
judge_entry(struct ledger *l, int i, uint64_t w, struct ledger_proc *p, uint64_t pidns)
{
    if (l->judged == NULL) {
        l->judged = calloc(LEDGER_MAX_PROCS, sizeof *l->judged); /* NULL: no memory */
        for (int k = 0; l->judged != NULL && k < LEDGER_MAX_PROCS; k++)
            l->judged[k].fd = -1;
    }
    struct judged *j = l->judged != NULL ? &l->judged[i] : NULL;
    bool here = pidns == 0 || l->me.pidns == 0 || pidns == l->me.pidns;
    uint64_t now = now_ns();
    if (j != NULL && (j->word != w || !here))
        judged_forget(j); /* another process in the entry now, or one not read */
    if (here && j != NULL && j->word == w && now - j->at_ns < JUDGE_INTERVAL_NS) {
        p->rss = j->rss;
        return false;
    }
    /* J's descriptor, else a new one, kept if there is room for it. */
    bool keep = here && j != NULL && (j->fd >= 0 || kept_fd_take());
    int fd = j != NULL ? j->fd : -1;
    bool dead = ledger_proc_judge_fd(owner_pid(w), p->start_time, pidns, l->me.pidns, &fd,
                                     keep, &p->rss);
    if (dead && fd >= 0) {
        close(fd);
        fd = -1;
    }
    if (keep && fd < 0)
        atomic_fetch_sub(&kept_fds, 1); /* dead or unreadable: not kept */
    if (j != NULL)
        j->fd = fd;
    if (j != NULL && here && !dead)
        *j = (struct judged){w, now, p->rss, fd};
    return dead;
}

vram_status
ledger_snapshot(struct ledger *l, struct ledger_snapshot *out)
{
    if (l == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "ledger_snapshot: NULL argument");
    /* A member looks for the dead first, all of them, and reads its
    ** mapping. A reader (no entry, no mapping) reads its private copy and
    ** judges each live entry as it copies it: one /proc read per process
    ** gives both its liveness and its resident set, which is what makes a
    ** sample of 1,000 processes cheap (BENCHMARKS.md). */
    struct image im = {.m = NULL, .n = 0};
    const struct layout *m = l->map;
    if (l->member) {
        reclaim(l, LOOK_NOW);
    } else {
        vram_status rc = image_read(l, &im);
        if (rc != VRAM_OK)
            return rc;
        m = im.m;
    }

    /* Not the whole struct: its 512 entries are 170 KB, and each entry
    ** kept is written whole by copy_proc. */
    memset(out, 0, offsetof(struct ledger_snapshot, procs));
    memcpy(out->group, l->group, sizeof out->group);
    for (int d = 0; d < LEDGER_MAX_DEVICES; d++) {
        const struct device *dv = &m->dev[d];
        if (atomic_load((_Atomic uint64_t *)&dv->tag) == 0)
            break;
        uuid_read(dv, out->uuid[d]);
        if (out->uuid[d][0] == '\0') /* its writer is stopped before the UUID */
            snprintf(out->uuid[d], LEDGER_UUID_LEN, "(unnamed)");
        out->limit[d] = ld(&dv->limit);
        out->refusals[d] = ld(&dv->refusals);
        out->peak[d] = ld(&dv->peak);
        out->users[d] = ld(&dv->users);
        out->n_devices = d + 1;
    }
    int n = l->member ? n_slots(m) : im.n;
    for (int i = 0; i < n; i++) {
        const struct slot *s = &m->slots[i];
        struct ledger_proc *p = &out->procs[out->n_procs];
        uint64_t w = 0;
        bool got = false, live = false;
        for (int t = 0; t < SNAPSHOT_TRIES && !got; t++) {
            got = copy_proc(s, p, &w);
            live = owner_state(atomic_load((_Atomic uint64_t *)&s->owner)) == SLOT_LIVE;
            if (!live)
                break;
        }
        if (!l->member && im.unstable[i]) {
            out->stale = true; /* it kept changing while it was read */
            continue;
        }
        if (!got) {
            if (live)
                out->stale = true;
            else if (l->judged != NULL)
                judged_forget(&l->judged[i]); /* a free entry keeps no descriptor */
            continue;
        }
        /* A reader leaves a dead member out; the members reclaim it. */
        if (!l->member && judge_entry(l, i, w, p, ld(&s->pidns)))
            continue;
        for (int d = 0; d < out->n_devices; d++)
            out->used[d] = add_sat(out->used[d], p->dev[d].used);
        out->n_procs++;
    }
    image_free(&im);
    return VRAM_OK;
}

/* ==== for tests only (ledger_testing.h) ==== */

void
ledger_test_set_start_time(struct ledger *l, uint64_t t)
{
    struct slot *s = l != NULL && l->member ? own_slot_if_any(l) : NULL;
    if (s != NULL)
        st(&s->start_time, t);
}
