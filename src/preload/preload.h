/* SPDX-License-Identifier: MIT */
/*
** preload.h -- what the files of the preload library share: the process's
** state (P), the per-thread hook depth, the one shape of every hook
** (PRELOAD_HOOK_DEFINE) and the steps hooks of several families share
** (route, reserve, track, give back), defined in hooks.c. The hook
** families, each writing the hooks of its list in hooks.h with its own
** steps, are hooks_info.c (cuInit and the memory reports, CUDA's and
** NVML's), hooks_ptr.c (device pointers), hooks_vmm.c (virtual memory),
** hooks_array.c (arrays), hooks_pool.c (stream-ordered pools, and the
** charge of any pool the driver reports the reserve of), hooks_graph.c
** (graphs' memory) and hooks_host.c (pinned host memory, counted for
** display only); the table of live allocations is track.c; interpose.c
** hands out the real functions; memcalls.h classifies every driver entry
** point that can make the device hold memory.
*/
#ifndef VRAM_PRELOAD_PRELOAD_H
#define VRAM_PRELOAD_PRELOAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "driver/cuda_api.h"
#include "driver/nvml_api.h"
#include "ledger/ledger.h"
#include "policy/policy.h"
#include "preload/hooks.h"
#include "preload/track.h"
#include "quota/quota.h"

#define PRELOAD_MAX_DEVICES 64 /* CUDA ordinals we keep facts for */

/*
** The accounts an allocation is counted in, each a ledger with its own
** limit; an allocation must fit every account the process has, so the
** effective limit is the smallest, and a job's settings can lower the
** host's policy but never raise it:
**   ACCT_USER  the user's account under the host's policy file: one group
**              "user-<uid>" that every process of the user joins, whatever
**              started it (none without a policy, or for exempt users);
**   ACCT_JOB   the job's: VRAM_GROUP, or the process alone, limited by
**              VRAM_LIMIT (vram run --limit, Slurm's --gpu-mem) or HAMi's
**              variables (none when neither a limit nor a group is set).
*/
enum { ACCT_USER = 0, ACCT_JOB = 1, ACCT_COUNT = 2 };

/*
** What the process holds on one CUDA ordinal, as the device sees it
** (atomics):
**   counted     bytes this process has reserved for its allocations
**               (kept only under context accounting, its one reader);
**   context     bytes charged for its context and the driver's own
**               reservations: NVML's per-process used memory minus COUNTED
**               when last measured (see context_delta in hooks.c);
**   checked_ns  CLOCK_MONOTONIC_COARSE of that measurement; 0: never.
*/
struct preload_use {
    uint64_t counted;
    uint64_t context;
    long long checked_ns;
};

/*
** Memory that a pool of the driver holds and reports the size of (a
** stream-ordered pool's CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, a device's
** graph pool's CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), charged in its
** device's accounts as the sum of three (bytes):
**   settled    its reserve when last read;
**   unsettled  the pre-charges of the calls completed since;
**   inflight   the pre-charges of the calls in flight.
** Each pre-charge is at least what its call can add to the reserve and
** is charged before the call, so the reserve never passes the charge; a
** settle (hooks_pool.c) reads the reserve and charges exactly that,
** unless a call completed between its read and its update (that call's
** growth may be in the reserve and no longer in flight: the next settle
** decides). LOCK, a spin word, guards the fields and is never held across
** a driver or ledger call. All fields but ORD under LOCK.
*/
struct charged_pool {
    int lock;
    int ord;             /* its CUDA ordinal; -1: not device memory (not charged) */
    uint64_t settled;    /* bytes */
    uint64_t unsettled;  /* bytes */
    uint64_t inflight;   /* bytes */
    uint64_t gen;        /* calls completed */
};

/*
** What we know of one CUDA ordinal: the facts, immutable once READY is
** set; the device's index in each account's ledger, found at its first
** reservation; what the process holds on it. What a counted call reads
** comes first, in one cache line: the hooks run right after a driver call
** that has walked the CPU's caches, so each line they touch is a miss
** (BENCHMARKS.md, "Preload hook cost").
*/
struct preload_device {
    _Alignas(64) int ready;     /* 1: the facts are set (atomic) */
    int index[ACCT_COUNT];      /* in each account's ledger; -1: not found yet (atomic) */
    uint64_t limit[ACCT_COUNT]; /* bytes, each account's quota; 0 = not limited */
    struct preload_use use;
    uint64_t total;             /* bytes, the driver's cuDeviceTotalMem */
    const struct policy_rule *rule; /* the policy rule behind limit[ACCT_USER] */
    char uuid[LEDGER_UUID_LEN]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    int spare;                  /* 2 MiB pages charged ahead for the driver's
                                   sub-allocator, none of its blocks in
                                   them yet (hooks_ptr.c; atomic) */
    struct charged_pool graph;  /* the device's pool of graph allocations */
};

/* The process's state (hooks.c). What every counted call reads comes
** first, in one cache line (see struct preload_device). */
struct preload {
    _Alignas(64) int mode;        /* enum preload_mode, atomic; 0 until initialized */
    int n_visible;              /* 1: one visible device (current_device answers
                                   0 without asking); -1: several or unknown;
                                   0: not counted yet. Atomic */
    bool count_context;           /* some account charges contexts */
    bool context_in[ACCT_COUNT];  /* each account's: the policy's 'context' for
                                     the user's, VRAM_CONTEXT (on unless off)
                                     for the job's */
    bool trace_sites;           /* VRAM_TRACE_SITES: each event names its call
                                   site; set with trace */
    bool no_ledger;             /* an account's ledger could not be created for
                                   lack of room in /dev/shm: every allocation is
                                   refused (CUDA_ERROR_OUT_OF_MEMORY); set with mode */
    /* Each account's ledger (ACTIVE: at least one); NULL: no such account. */
    struct ledger *ledger[ACCT_COUNT];
    struct trace_writer *trace; /* VRAM_TRACE, or NULL; set before ACTIVE is
                                   published, dropped in a forked child */
    char group[ACCT_COUNT][LEDGER_GROUP_LEN]; /* each account's group name */
    struct quota_env quota;       /* the settings, read once */
    struct policy policy;         /* the host's policy file, if there is one */
    struct policy_verdict verdict; /* what it says of this process's user */
    char user[POLICY_NAME_LEN];   /* this process's user name, for messages */
    char visible[256];            /* CUDA_VISIBLE_DEVICES, for host ordinals */
    bool visible_set;
    pthread_mutex_t dev_lock;     /* publishes dev[] */
    struct preload_device dev[PRELOAD_MAX_DEVICES];
    int context_guessed;          /* the line about a context NVML does not show
                                     was said (atomic) */
    void *nvml_processes;         /* nvmlDeviceGetComputeRunningProcesses_v3 (atomic) */
    void *nvml_by_uuid;           /* nvmlDeviceGetHandleByUUID (atomic) */
    int nvml_state;               /* 0 not tried, 1 ready, 2 not there (atomic) */
    long long last_line_ns;     /* CLOCK_MONOTONIC of the last refusal line (atomic) */
    void *ctx_get_device;       /* the real cuCtxGetDevice (atomic), or NULL */
    void *ctx_get_current;      /* the real cuCtxGetCurrent (atomic), or NULL */
    unsigned ctx_epoch;         /* +1 at each end of a context: the threads'
                                   caches of context -> device are stale (atomic) */
    uint64_t next_trace_id;     /* the next allocation's trace id (atomic) */
    int trace_failed;           /* a trace write failed; said once (atomic) */
};
extern struct preload P;

/* Hooks running on this thread (initial-exec: no allocation on access).
** A hook entered while another runs on the same thread forwards. */
extern _Thread_local int hook_depth __attribute__((tls_model("initial-exec")));

/* Write LINE (without its newline) to stderr in one write. */
void say(const char *line);

/* Fail closed: CUDA is off in this process from now on; WHY is said once
** as "vram: WHY; CUDA is disabled in this process". */
void disable(const char *why);

/* Whether every per-GPU key of the settings and of the policy names a GPU
** (keys.c): checked once the driver can list the GPUs; false after one
** that names none has disabled CUDA. */
bool keys_check(void);

/* The facts of CUDA ordinal ORD, asked from the driver the first time. */
vcu_result device_get(int ord, struct preload_device **out);

/* The CUDA ordinal of the calling thread's current context. */
vcu_result current_device(int *ord);

/* The device of UUID among those this process has seen, or -1. */
int device_by_uuid(const char *uuid);

/* Each account's limit of the GPU UUID of TOTAL bytes, CUDA ordinal ORD
** (-1: not known), into LIMIT; *RULE: the policy rule behind the user's. */
void device_limits(int ord, const char *uuid, uint64_t total, uint64_t limit[ACCT_COUNT],
                   const struct policy_rule **rule);

/* The smallest of LIMIT's non-zero entries: what the process may hold at
** most; 0 when no account limits the GPU. */
uint64_t effective_limit(const uint64_t limit[ACCT_COUNT]);

/* How much more the process may take on UUID under LIMIT: the least room
** left in any limited account (UINT64_MAX when none limits it). D: the
** device if known (NULL: not), whose ledger indexes save the lookups. */
uint64_t room_left(const struct preload_device *d, const char *uuid,
                   const uint64_t limit[ACCT_COUNT]);

struct hook_call;

/* Reserve BYTES on CUDA ordinal ORD (-1: the current context's device)
** for a call of hook ID; on refusal CUDA_ERROR_OUT_OF_MEMORY and a line
** naming the call. */
vcu_result reserve(enum hook_id id, int ord, uint64_t bytes, struct preload_device **out);

/* reserve, for a call that asked ASKED bytes (0: BYTES), which its
** refusal line names beside BYTES; and a refusal that EXCUSE(ARG) excuses
** (a call that will make the device hold nothing) is a success that
** reserved nothing: *OUT NULL, no line, no trace event. */
vcu_result reserve_excused(enum hook_id id, int ord, uint64_t bytes, uint64_t asked,
                           struct preload_device **out, bool (*excuse)(void *arg), void *arg);

/* Give BYTES reserved on D back. */
void unreserve(const struct preload_device *d, uint64_t bytes);

/* BYTES charged ahead in CP (its ordinal's accounts) for the
** call of C, which may add at most that to the pool's reserve (C->d, ->ord,
** ->bytes and ->pool then say so). A refusal that EXCUSE(ARG) excuses
** charges nothing and is not one (C->pool stays NULL). False, with the
** refusal in C->r, when refused (hooks_pool.c). */
bool cpool_ahead(struct hook_call *c, struct charged_pool *cp, uint64_t bytes,
                 bool (*excuse)(void *arg), void *arg);

/* The call that charged BYTES ahead in CP (on D) has returned: DONE, the
** charge is the pool's until the next settle; else it is given back. */
void cpool_done(struct charged_pool *cp, struct preload_device *d, uint64_t bytes, bool done);

/* Read CP's reserve (READ(WHAT, &bytes)) and charge exactly that: true if
** bytes went back. Nothing when a call completed meanwhile. */
bool cpool_settle(struct charged_pool *cp, bool (*read)(const void *what, uint64_t *reserve),
                  const void *what);

/* Settle ordinal ORD's graph pool (hooks_graph.c): true if bytes went back. */
bool graph_pool_settle(int ord);

/* Settle the pools of ORD that charge anything (cuMemGetInfo shows what
** the device holds, not what was charged ahead). */
void pools_refresh(int ord);

/* A fork child follows no pool yet (hooks_pool.c). */
void pools_fork_child(void);

/* R, after an 'o' trace event of BYTES on ORD when R says memory ran out. */
vcu_result trace_if_refused(vcu_result r, int ord, uint64_t bytes);

/* A stream-ordered allocation at KEY of BYTES on ORD, tracked for the
** trace only (nothing when no trace is written). */
void trace_pooled(int ord, uint64_t key, uint64_t bytes);

/* Count BYTES on D in every account without a limit check: memory the
** device already holds (a driver's reserve that grew past what was
** charged ahead). */
void force_charge(struct preload_device *d, uint64_t bytes);

/* Give back what this process charged ahead on ordinal ORD and the
** device no longer holds (pools' stale reserves, pages charged ahead):
** true if anything went back. Run before a refusal (hooks_pool.c). */
bool reclaim_stale(int ord);

/* The CUDA ordinal's device facts by D, and D's ordinal. */
static inline int
device_ordinal(const struct preload_device *d)
{
    return (int)(d - P.dev);
}

/* The real function of hook ID into *FP (a function pointer of SIZE
** bytes). False if there is none. */
bool real_of(enum hook_id id, void *fp, size_t size);

/* ------------------------------------------------------------------ */
/* The accounting of a counted call                                    */
/* ------------------------------------------------------------------ */

/*
** Every hook but the two cuGetProcAddress is written by the preprocessor
** from its row in hooks.h (PRELOAD_HOOK_DEFINE, below, expanded by each
** family file over its list): hook_enter decides where the call goes;
** when it is to be counted, the row's BEFORE step runs, then (unless
** BEFORE refused) the real function, then its AFTER step, which returns
** the hook's result; the hook depth is held from hook_enter to the end.
** The steps share the call's state below, and the helpers after it do
** what several rows do.
*/
struct hook_call {
    enum hook_id id;
    void *real;               /* the real function */
    int r;                    /* the result so far (vcu_result or vnvml_return):
                                 the real function's once it has run */
    int ord;                  /* the CUDA ordinal counted on; -1: not known */
    uint64_t bytes;           /* what the call reserved or wanted to */
    struct preload_device *d; /* where BYTES are reserved; NULL: nothing is */
    struct track e;           /* a free's entry, taken out of the table */
    enum track_unref unref;   /* a free's: what taking it out did; TRACK_UNKNOWN:
                                 the call frees nothing we count */
    uint64_t asked;           /* an allocation's bytes as the program asked
                                 (BYTES may be more); 0: BYTES */
    int pages;                /* a sub-allocated block: the 2 MiB pages
                                 charged ahead for it; 0: not one */
    struct charged_pool *pool; /* the pool BYTES are charged ahead in, or NULL */
    void *scratch;            /* a step's own, from BEFORE to AFTER (hooks_vmm.c) */
    uint64_t mask;            /* a graph's: the ordinals charged ahead on */
};

enum route {
    ROUTE_FAIL,    /* return c->r */
    ROUTE_FORWARD, /* call the real function and return its result */
    ROUTE_COUNT    /* do the row's steps */
};

/*
** Where a call of hook ID (of library LIB) goes; the real function is
** put in C->real unless ROUTE_FAIL. No real function:
** CUDA_ERROR_NOT_INITIALIZED (NVML_ERROR_UNINITIALIZED). DISABLED mode:
** the same for CUDA; NVML only reports, and forwards. PASSIVE mode, or a
** call nested in another hook on this thread: forward. ROUTE_COUNT sets
** *C up and enters the hook (hook_depth); the wrapper leaves it. Inline:
** it is the part of every hooked call that runs in every mode.
*/
static inline enum route
hook_enter(struct hook_call *c, enum hook_id id, enum hook_lib lib)
{
    enum preload_mode m = preload_mode();
    c->real = m == PRELOAD_DISABLED && lib == HOOK_CUDA ? NULL : interpose_real(id);
    if (c->real == NULL) {
        c->r = lib == HOOK_CUDA ? VCU_ERROR_NOT_INITIALIZED : VNVML_ERROR_UNINITIALIZED;
        return ROUTE_FAIL;
    }
    if (m != PRELOAD_ACTIVE || hook_depth > 0)
        return ROUTE_FORWARD;
    c->id = id;
    c->r = VCU_SUCCESS;
    c->ord = -1;
    c->bytes = 0;
    c->d = NULL;
    c->unref = TRACK_UNKNOWN;
    c->asked = 0;
    c->pages = 0;
    c->pool = NULL;
    c->scratch = NULL;
    c->mask = 0;
    hook_depth++;
    return ROUTE_COUNT;
}

/* BEFORE of an allocation: reserve BYTES on ORD (-1: the current
** context's device). False, with the refusal in C->r, when refused. BYTES
** 0 (a call the driver will refuse itself): nothing is reserved. */
bool hook_reserve(struct hook_call *c, int ord, uint64_t bytes);

/* What cuMemAlloc_v2 of BYTES makes the device hold (hooks.c, "What the
** driver holds for an allocation"): above TRACK_SMALL_MAX, BYTES rounded
** up to 2 MiB; at or below, 0 (a block of the driver's sub-allocator,
** charged by its pages). */
uint64_t ptr_charge(uint64_t bytes);

/* BEFORE of an allocation of C->asked bytes (at most TRACK_SMALL_MAX) on
** the current device, which the driver sub-allocates: the pages it may
** take are charged ahead (C->pages). False, with the refusal in C->r,
** when refused. hook_granted settles it. */
bool hook_reserve_block(struct hook_call *c);

/* Give back the pages charged ahead on D for blocks to come: true if
** there were any. */
bool spare_reclaim(struct preload_device *d);

/* N pages charged ahead on D and not held go back to its spare. */
void spare_give(struct preload_device *d, int n);

/* AFTER of an allocation: when the call succeeded, the allocation of KIND
** whose key the driver wrote to *OUT (a vcu_deviceptr, vcu_mem_handle,
** vcu_array or vcu_mipmapped_array) is tracked (a pointer with its bytes
** asked, C->asked; anything else with the bytes charged); when it failed,
** the reservation is given back; a refusal is traced. */
vcu_result hook_granted(struct hook_call *c, int kind, const void *out);

/* BEFORE of a free: take the entry (KIND, KEY) out of the table first, so
** that two threads never give the same bytes back. Always true. */
static inline bool
hook_take(struct hook_call *c, int kind, uint64_t key)
{
    if (track_take(kind, key, &c->e))
        c->unref = TRACK_LAST;
    return true;
}

/* AFTER of a free: once the driver has freed it, the entry's bytes go
** back (its device's, or the pinned host memory's); if the driver
** refused, the entry goes back into the table. */
vcu_result taken_freed(struct hook_call *c, ...);

/* Count BYTES of pinned memory less in every account of the process
** (hooks_host.c). */
void host_uncount(uint64_t bytes);

/* BEFORE of a call that reserves and takes nothing. */
static inline bool
call_only(struct hook_call *c, ...)
{
    (void)c;
    return true;
}

/* AFTER of a call whose result changes nothing. */
static inline vcu_result
result_only(struct hook_call *c, ...)
{
    return c->r;
}

/* What a hook of each library returns. */
#define HOOK_RESULT_HOOK_CUDA vcu_result
#define HOOK_RESULT_HOOK_NVML vnvml_return
#define HOOK_UNPAREN(...) __VA_ARGS__

/*
** The measurement build (libvram-preload-timing.so, timing.c) times each
** counted call outside the real function: HOOK_TIMING_START at the hook's
** entry, HOOK_TIMING_CALL around the real call, HOOK_TIMING_END at its
** exit. In libvram-preload.so they are nothing.
*/
#ifdef VRAM_HOOK_TIMING
/* A tick counter: the TSC on x86-64 (after the loads and stores before it
** are done), else CLOCK_MONOTONIC in ns. */
static inline uint64_t
hook_ticks(void)
{
#if defined(__x86_64__)
    __builtin_ia32_lfence();
    return __builtin_ia32_rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}
void hook_timing_record(enum hook_id id, uint64_t ticks);
/* The most recent samples (at most MAX) of the hook exported as SYMBOL,
** in nanoseconds, into NS; returns how many (0 for a name that is not a
** hook, or not called). Not thread-safe against hooks running meanwhile.
** Exported, for the measuring program. */
__attribute__((visibility("default"))) long vram_hook_timing(const char *symbol, double *ns,
                                                        long max);
/* What the measurement itself adds to a sample, nanoseconds. Exported. */
__attribute__((visibility("default"))) double vram_hook_timing_overhead(void);
#define HOOK_TIMING_START uint64_t hook_t0_ = hook_ticks(), hook_t1_ = hook_t0_, hook_t2_ = hook_t0_;
#define HOOK_TIMING_CALL(call) { hook_t1_ = hook_ticks(); call; hook_t2_ = hook_ticks(); }
#define HOOK_TIMING_END(id) hook_timing_record(id, hook_t1_ - hook_t0_ + hook_ticks() - hook_t2_);
#else
#define HOOK_TIMING_START
#define HOOK_TIMING_CALL(call) call;
#define HOOK_TIMING_END(id)
#endif

/* The exported function of one row of hooks.h: the X of a family's list. */
/* clang-format off */
#define PRELOAD_HOOK_DEFINE(symbol, type, asked, since, until, stream, lib, before, after,\
                            params, args)                                                \
    HOOK_RESULT_##lib symbol params                                                      \
    {                                                                                    \
        HOOK_TIMING_START                                                                \
        struct hook_call c;                                                              \
        enum route to = hook_enter(&c, HOOK_ID_##symbol, lib);                           \
        type real;                                                                       \
        memcpy(&real, &c.real, sizeof real);                                             \
        switch (to) {                                                                    \
        case ROUTE_FAIL:                                                                 \
            return c.r;                                                                  \
        case ROUTE_FORWARD:                                                              \
            return real args;                                                            \
        case ROUTE_COUNT:                                                                \
            break;                                                                       \
        }                                                                                \
        if (before(&c, HOOK_UNPAREN args))                                               \
            HOOK_TIMING_CALL(c.r = real args)                                            \
        HOOK_RESULT_##lib r = after(&c, HOOK_UNPAREN args);                              \
        HOOK_TIMING_END(HOOK_ID_##symbol)                                                \
        hook_depth--;                                                                    \
        return r;                                                                        \
    }
/* clang-format on */

static inline uint64_t
min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

#endif
