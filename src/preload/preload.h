/* SPDX-License-Identifier: MIT */
/*
** preload.h -- what the files of the preload library share: the process's
** state (P), the per-thread hook depth, and the steps every hook family
** takes (route, reserve, track, give back), all defined in hooks.c. The
** hook families are hooks_info.c (cuInit and the memory reports, CUDA's
** and NVML's), hooks_ptr.c (device pointers), hooks_vmm.c (virtual
** memory), hooks_array.c (arrays) and hooks_host.c (pinned host memory,
** counted for display only); the table of live allocations is
** track.c; interpose.c hands out the real functions.
*/
#ifndef VRAM_PRELOAD_PRELOAD_H
#define VRAM_PRELOAD_PRELOAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "driver/cuda_api.h"
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

struct preload_account {
    struct ledger *ledger;        /* NULL: the process has no such account */
    char group[LEDGER_GROUP_LEN]; /* its ledger's group name */
};

/* What we know of one CUDA ordinal, immutable once READY is set. */
struct preload_device {
    int ready;                  /* 1: the fields below are set (atomic) */
    char uuid[LEDGER_UUID_LEN]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    uint64_t total;             /* bytes, the driver's cuDeviceTotalMem */
    uint64_t limit[ACCT_COUNT]; /* bytes, each account's quota; 0 = not limited */
    const struct policy_rule *rule; /* the policy rule behind limit[ACCT_USER] */
};

/*
** What the process holds on one CUDA ordinal, as the device sees it
** (atomics; the index is the ordinal's in P.dev):
**   counted     bytes this process has reserved for its allocations;
**   context     bytes charged for its context and the driver's own
**               reservations: NVML's per-process used memory minus COUNTED
**               when last measured (see context_update in hooks.c);
**   checked_ns  CLOCK_MONOTONIC of that measurement; 0: never.
*/
struct preload_use {
    uint64_t counted;
    uint64_t context;
    long long checked_ns;
};

/* The process's state (hooks.c). */
struct preload {
    int mode;                     /* enum preload_mode, atomic; 0 until initialized */
    struct quota_env quota;       /* the settings, read once */
    struct preload_account acct[ACCT_COUNT]; /* ACTIVE: at least one has a ledger */
    struct policy policy;         /* the host's policy file, if there is one */
    struct policy_verdict verdict; /* what it says of this process's user */
    char user[POLICY_NAME_LEN];   /* this process's user name, for messages */
    char visible[256];            /* CUDA_VISIBLE_DEVICES, for host ordinals */
    bool visible_set;
    pthread_mutex_t dev_lock;     /* publishes dev[] */
    struct preload_device dev[PRELOAD_MAX_DEVICES];
    struct preload_use use[PRELOAD_MAX_DEVICES];
    bool count_context;           /* charge contexts (policy 'context', VRAM_CONTEXT) */
    void *nvml_processes;         /* nvmlDeviceGetComputeRunningProcesses_v3 (atomic) */
    void *nvml_by_uuid;           /* nvmlDeviceGetHandleByUUID (atomic) */
    int nvml_state;               /* 0 not tried, 1 ready, 2 not there (atomic) */
    long long last_line_ns;     /* CLOCK_MONOTONIC of the last refusal line (atomic) */
    void *ctx_get_device;       /* the real cuCtxGetDevice (atomic), or NULL */
    int n_visible;              /* 1: one visible device (current_device answers
                                   0 without asking); -1: several or unknown;
                                   0: not counted yet. Atomic */
    struct trace_writer *trace; /* VRAM_TRACE, or NULL; set before ACTIVE is
                                   published, dropped in a forked child */
    uint64_t next_trace_id;     /* the next allocation's trace id (atomic) */
    int trace_failed;           /* a trace write failed; said once (atomic) */
    bool trace_sites;           /* VRAM_TRACE_SITES: each event names its call
                                   site; set with trace */
};
extern struct preload P;

/* Hooks running on this thread (initial-exec: no allocation on access).
** A hook entered while another runs on the same thread forwards. */
extern _Thread_local int hook_depth __attribute__((tls_model("initial-exec")));

/* Write LINE (without its newline) to stderr in one write. */
void say(const char *line);

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
** left in any limited account (UINT64_MAX when none limits it). */
uint64_t room_left(const char *uuid, const uint64_t limit[ACCT_COUNT]);

/* Reserve BYTES on CUDA ordinal ORD (-1: the current context's device)
** for the call WHAT; on refusal CUDA_ERROR_OUT_OF_MEMORY and a line. */
vcu_result reserve(const char *what, int ord, uint64_t bytes,
                   struct preload_device **out);

/* Give BYTES reserved on D back. */
void unreserve(const struct preload_device *d, uint64_t bytes);

/* Give back the entry E of an allocation that the driver freed. */
void untrack_release(const struct track *e);

/* The real function of hook ID into *FP (a function pointer of SIZE
** bytes). False if there is none. */
bool real_of(enum hook_id id, void *fp, size_t size);

/* Record a new allocation (KIND, KEY) of BYTES on D's ordinal ORD, or
** undo it when the table cannot hold it. Returns the hook's result. */
vcu_result track_or_undo(int kind, uint64_t key, int ord, const struct preload_device *d,
                         uint64_t bytes);

/* After an allocation hook: an 'o' trace event when R says memory ran out. */
vcu_result trace_if_refused(vcu_result r, int ord, uint64_t bytes);

enum route {
    ROUTE_FAIL,    /* return *fail */
    ROUTE_FORWARD, /* call the real function and return its result */
    ROUTE_COUNT    /* do the hook's work */
};

/* Where a call of hook ID goes; the real function is written to *FP (SIZE
** bytes) unless ROUTE_FAIL. */
enum route route(enum hook_id id, void *fp, size_t size, vcu_result *fail);

static inline uint64_t
min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

#endif
