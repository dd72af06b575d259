/* SPDX-License-Identifier: MIT */
/*
** hooks_info.c -- the hooks that report memory: cuInit, cuMemGetInfo_v2,
** cuDeviceTotalMem_v2 and NVML's nvmlDeviceGetMemoryInfo[_v2], each showing
** the device as the quota sees it (preload.h).
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

vcu_result
cuInit(unsigned int flags)
{
    vcu_pfn_cuInit real;
    vcu_result r;
    if (route(HOOK_ID_cuInit, &real, sizeof real, &r) == ROUTE_FAIL)
        return r;
    return real(flags);
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
        effective_limit(d->limit) != 0) {
        uint64_t total = min_u64(effective_limit(d->limit), *total_bytes);
        uint64_t room = room_left(d->uuid, d->limit);
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
        effective_limit(d->limit) != 0)
        *bytes = (size_t)min_u64(effective_limit(d->limit), *bytes);
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
    uint64_t room = room_left(uuid, limit);
    *used = *total - min_u64(room, *total);
    return true;
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
    if (r == VNVML_SUCCESS && m != NULL && nvml_quota_view(device, &m->total, &m->used))
        m->free = m->total - m->used;
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
    if (r == VNVML_SUCCESS && m != NULL && nvml_quota_view(device, &m->total, &m->used)) {
        /* total = reserved + used + free, as NVML keeps it. */
        uint64_t taken = min_u64(m->total, m->used + m->reserved);
        m->free = m->total - taken;
    }
    hook_depth--;
    return r;
}
