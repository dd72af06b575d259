/* SPDX-License-Identifier: MIT */
/*
** hooks_info.c -- the hooks that report memory: cuMemGetInfo_v2,
** cuDeviceTotalMem_v2 and NVML's nvmlDeviceGetMemoryInfo[_v2], each showing
** the device as the quota sees it (the after steps of their rows in
** hooks.h; preload.h). cuInit, once it has succeeded, checks that every
** per-GPU key of the settings and the policy names a GPU (keys.c).
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "driver/cuda_api.h"
#include "driver/nvml_api.h"
#include "ledger/ledger.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"
#include "quota/quota.h"

/* ------------------------------------------------------------------ */
/* Hooks: initialization and reports                                    */
/* ------------------------------------------------------------------ */

/* After cuInit: the driver can list the GPUs now, so the keys are checked
** (keys.c); one that names no GPU fails cuInit, and CUDA with it. */
static vcu_result
init_checked(struct hook_call *c, unsigned int flags)
{
    (void)flags;
    if (c->r == VCU_SUCCESS && !keys_check())
        c->r = VCU_ERROR_NOT_INITIALIZED;
    return c->r;
}

/*
** Free and total memory as the quota sees them: total = min(quota,
** physical), free = min(physical free, quota - group use), never negative.
** Errors are only ever the driver's own.
*/
static vcu_result
mem_info_view(struct hook_call *c, size_t *free_bytes, size_t *total_bytes)
{
    int ord;
    struct preload_device *d;
    if (c->r == VCU_SUCCESS && free_bytes != NULL && total_bytes != NULL &&
        current_device(&ord) == VCU_SUCCESS && device_get(ord, &d) == VCU_SUCCESS &&
        effective_limit(d->limit) != 0) {
        pools_refresh(ord); /* what pools hold now, not their charges ahead */
        uint64_t total = min_u64(effective_limit(d->limit), *total_bytes);
        uint64_t room = room_left(d, d->uuid, d->limit);
        *total_bytes = (size_t)total;
        *free_bytes = (size_t)min_u64(min_u64(*free_bytes, room), total);
    }
    return c->r;
}

static vcu_result
total_mem_view(struct hook_call *c, size_t *bytes, vcu_device dev)
{
    struct preload_device *d;
    if (c->r == VCU_SUCCESS && bytes != NULL && device_get(dev, &d) == VCU_SUCCESS &&
        effective_limit(d->limit) != 0)
        *bytes = (size_t)min_u64(effective_limit(d->limit), *bytes);
    return c->r;
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
nvml_limit(vnvml_device device, uint64_t total, char *uuid, size_t len,
           uint64_t limit[ACCT_COUNT])
{
    void *p = interpose_lib_sym(HOOK_NVML, "nvmlDeviceGetUUID");
    if (p == NULL)
        return false;
    vnvml_pfn_get_uuid get_uuid;
    memcpy(&get_uuid, &p, sizeof p);
    if (get_uuid(device, uuid, (unsigned)len) != VNVML_SUCCESS)
        return false;
    uuid[len - 1] = '\0';
    const struct policy_rule *rule;
    device_limits(device_by_uuid(uuid), uuid, total, limit, &rule);
    return effective_limit(limit) != 0;
}

/* NVML's TOTAL and USED of DEVICE as the quotas show them: TOTAL becomes
** min(the smallest limit, total), USED what the least room left in any
** limited account leaves of it. False, leaving both alone, when no
** account limits the device. */
static bool
nvml_quota_view(vnvml_device device, unsigned long long *total, unsigned long long *used)
{
    char uuid[LEDGER_UUID_LEN];
    uint64_t limit[ACCT_COUNT];
    if (!nvml_limit(device, *total, uuid, sizeof uuid, limit))
        return false;
    *total = min_u64(effective_limit(limit), *total);
    uint64_t room = room_left(NULL, uuid, limit);
    *used = *total - min_u64(room, *total);
    return true;
}

static vnvml_return
nvml_view(struct hook_call *c, vnvml_device device, struct vnvml_memory *m)
{
    if (c->r == VNVML_SUCCESS && m != NULL &&
        nvml_quota_view(device, &m->total, &m->used))
        m->free = m->total - m->used;
    return c->r;
}

static vnvml_return
nvml_view_v2(struct hook_call *c, vnvml_device device, struct vnvml_memory_v2 *m)
{
    if (c->r == VNVML_SUCCESS && m != NULL &&
        nvml_quota_view(device, &m->total, &m->used)) {
        /* total = reserved + used + free, as NVML keeps it. */
        uint64_t taken = min_u64(m->total, m->used + m->reserved);
        m->free = m->total - taken;
    }
    return c->r;
}

/* The exported hooks, written from their rows in hooks.h. */
PRELOAD_HOOKS_INFO(PRELOAD_HOOK_DEFINE)
