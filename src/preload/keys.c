/* SPDX-License-Identifier: MIT */
/*
** keys.c -- a per-GPU key that names no GPU limits nothing, so it fails
** closed (docs/QUOTA.md, "A key that names no GPU"): once the driver can
** list the GPUs (after the first successful cuInit, and before any
** device's facts are used), every per-GPU key of the job's settings
** (VRAM_LIMIT, HAMi's CUDA_DEVICE_MEMORY_LIMIT_<i>) and of the host's
** policy rules that apply to this process's user is checked, and the
** first that names no GPU disables CUDA in the process with one line.
**
** What a key must name:
**   - a job's ordinal key: a CUDA ordinal of this process (after
**     CUDA_VISIBLE_DEVICES: the settings are the process's);
**   - a job's UUID key: a GPU of the host, seen by this process or not (a
**     launcher may give each worker one GPU of the job's list);
**   - a policy's ordinal key: an ordinal of the host, a UUID key a GPU of
**     the host.
** The host's GPUs are what the driver lists when CUDA_VISIBLE_DEVICES is
** unset; else NVML's list (NVML ignores CUDA_VISIBLE_DEVICES); without
** NVML, only what this process can know: its own GPUs, and host ordinals
** up to the largest its CUDA_VISIBLE_DEVICES names (the driver stops at
** the first entry that names no GPU, so those below exist). A key that
** cannot be shown to name a GPU fails, as one that names none does.
**
** The driver's and NVML's own functions are called, never a hook; nothing
** here allocates device memory. Threads that meet the check at once wait
** for the first to finish it (a mutex of this process, never another's;
** taken around fork, so that a child never inherits it held).
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/uuid.h"
#include "driver/cuda_api.h"
#include "driver/nvml_api.h"
#include "policy/policy.h"
#include "preload/preload.h"
#include "quota/quota.h"

enum { KEYS_UNCHECKED = 0, KEYS_OK = 1, KEYS_FAILED = 2 };

/* The check's state: KEYS_* (atomic), and what it works in (under LOCK:
** three lists of 3 KiB each are too large for a host thread's stack). */
static struct {
    int state;
    pthread_mutex_t lock;
    struct quota_gpus seen, host, job;
} K = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Whether any key is set that names a GPU: the job's or the policy's. */
static bool
any_keys(void)
{
    const struct policy_verdict *v = &P.verdict;
    bool keys = P.quota.active && P.quota.n_entries > 0;
    keys = keys || (v->user_rule != NULL && v->user_rule->limit.n_entries > 0);
    for (int k = 0; !keys && k < v->n_group_rules; k++)
        keys = v->group_rules[k]->limit.n_entries > 0;
    return keys || (v->def != NULL && v->def->limit.n_entries > 0);
}

/* The GPUs this process sees (CUDA ordinal i is G->uuid[i]) into G; false
** when the driver cannot say (cuInit has not succeeded yet). */
static bool
seen_gpus(struct quota_gpus *g)
{
    void *c = interpose_lib_sym(HOOK_CUDA, "cuDeviceGetCount");
    void *u = interpose_lib_sym(HOOK_CUDA, "cuDeviceGetUuid_v2");
    if (u == NULL)
        u = interpose_lib_sym(HOOK_CUDA, "cuDeviceGetUuid");
    vcu_pfn_cuDeviceGetCount get_count;
    vcu_pfn_cuDeviceGetUuid get_uuid;
    memcpy(&get_count, &c, sizeof c);
    memcpy(&get_uuid, &u, sizeof u);
    int n = 0;
    if (c == NULL || u == NULL || get_count(&n) != VCU_SUCCESS || n < 0)
        return false;
    g->n = g->n_ordinals = n < QUOTA_MAX_ORDINAL ? n : QUOTA_MAX_ORDINAL;
    for (int i = 0; i < g->n; i++) {
        vcu_uuid id;
        if (get_uuid(&id, i) != VCU_SUCCESS)
            return false;
        uuid_format((const unsigned char *)id.bytes, g->uuid[i], sizeof g->uuid[i]);
    }
    return true;
}

/* The host's GPUs as NVML lists them into G; false without NVML. NVML is
** loaded privately (RTLD_LOCAL) when the program has not loaded it, as for
** context accounting, and left initialized for it. */
static bool
nvml_gpus(struct quota_gpus *g)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h == NULL)
        h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return false;
    void *fi = interpose_lib_sym(HOOK_NVML, "nvmlInit_v2");
    void *fc = interpose_lib_sym(HOOK_NVML, "nvmlDeviceGetCount_v2");
    void *fh = interpose_lib_sym(HOOK_NVML, "nvmlDeviceGetHandleByIndex_v2");
    void *fu = interpose_lib_sym(HOOK_NVML, "nvmlDeviceGetUUID");
    if (fi == NULL || fc == NULL || fh == NULL || fu == NULL)
        return false;
    vnvml_pfn_init init;
    vnvml_pfn_count count;
    vnvml_pfn_handle handle;
    vnvml_pfn_get_uuid get_uuid;
    memcpy(&init, &fi, sizeof fi);
    memcpy(&count, &fc, sizeof fc);
    memcpy(&handle, &fh, sizeof fh);
    memcpy(&get_uuid, &fu, sizeof fu);
    unsigned n = 0;
    if (init() != VNVML_SUCCESS || count(&n) != VNVML_SUCCESS)
        return false;
    g->n = g->n_ordinals = n < QUOTA_MAX_ORDINAL ? (int)n : QUOTA_MAX_ORDINAL;
    for (int i = 0; i < g->n; i++) {
        vnvml_device d;
        if (handle((unsigned)i, &d) != VNVML_SUCCESS ||
            get_uuid(d, g->uuid[i], QUOTA_UUID_LEN) != VNVML_SUCCESS)
            return false;
        g->uuid[i][QUOTA_UUID_LEN - 1] = '\0';
    }
    return true;
}

/* Add the GPUs of FROM that TO lacks to TO's UUIDs (a MIG instance the
** process sees has a UUID of its own, which NVML's list of GPUs lacks). */
static void
add_missing(struct quota_gpus *to, const struct quota_gpus *from)
{
    for (int i = 0; i < from->n && to->n < QUOTA_MAX_ORDINAL; i++) {
        bool there = false;
        for (int j = 0; j < to->n && !there; j++)
            there = strcmp(to->uuid[j], from->uuid[i]) == 0;
        if (!there)
            memcpy(to->uuid[to->n++], from->uuid[i], QUOTA_UUID_LEN);
    }
}

/* The host's GPUs into HOST, from SEEN (this process's) and what else can
** be known (see the top). */
static void
host_gpus(const struct quota_gpus *seen, struct quota_gpus *host)
{
    if (!P.visible_set) {
        *host = *seen;
        return;
    }
    if (nvml_gpus(host)) {
        add_missing(host, seen);
        return;
    }
    *host = *seen;
    host->n_ordinals = 0;
    for (int i = 0; i < seen->n; i++) {
        int h = policy_host_ordinal(P.visible, i);
        if (h >= host->n_ordinals)
            host->n_ordinals = h + 1;
    }
}

/* Check every key (the lock held); KEYS_UNCHECKED when the driver cannot
** list the GPUs yet, so that a later call checks. */
static int
check_locked(void)
{
    if (!seen_gpus(&K.seen))
        return KEYS_UNCHECKED;
    if (K.seen.n == 0)
        return KEYS_OK; /* no GPU: nothing can be allocated, nothing goes unlimited */
    host_gpus(&K.seen, &K.host);
    char line[4096];
    /* The job's: ordinals of this process, UUIDs of the host. */
    K.job = K.host;
    add_missing(&K.job, &K.seen);
    K.job.n_ordinals = K.seen.n;
    int k = quota_unmatched(&P.quota, &K.job);
    if (k >= 0) {
        quota_unmatched_line(&P.quota, k, P.quota.entries[k].by_uuid ? &K.job : &K.seen, line,
                             sizeof line);
        disable(line);
        return KEYS_FAILED;
    }
    /* The policy's rules that apply to this user: the host's GPUs. */
    if (policy_check_gpus(&P.policy, &P.verdict, &K.host) != VRAM_OK) {
        snprintf(line, sizeof line, "%s", vram_last_error());
        disable(line);
        return KEYS_FAILED;
    }
    return KEYS_OK;
}

/* Around fork: the child's copy of the lock must not be held by a thread
** the child does not have (it would wait for good). */
static void
keys_fork_prepare(void)
{
    pthread_mutex_lock(&K.lock);
}

static void
keys_fork_parent(void)
{
    pthread_mutex_unlock(&K.lock);
}

static void
keys_fork_child(void)
{
    pthread_mutex_init(&K.lock, NULL);
}

static void
keys_at_fork(void)
{
    pthread_atfork(keys_fork_prepare, keys_fork_parent, keys_fork_child);
}

bool
keys_check(void)
{
    int s = __atomic_load_n(&K.state, __ATOMIC_ACQUIRE);
    if (s != KEYS_UNCHECKED)
        return s == KEYS_OK;
    if (!any_keys()) {
        __atomic_store_n(&K.state, KEYS_OK, __ATOMIC_RELEASE);
        return true;
    }
    static pthread_once_t fork_handlers = PTHREAD_ONCE_INIT;
    pthread_once(&fork_handlers, keys_at_fork);
    pthread_mutex_lock(&K.lock);
    s = __atomic_load_n(&K.state, __ATOMIC_ACQUIRE);
    if (s == KEYS_UNCHECKED) {
        s = check_locked();
        if (s != KEYS_UNCHECKED)
            __atomic_store_n(&K.state, s, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&K.lock);
    return s != KEYS_FAILED;
}
