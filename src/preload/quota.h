/*
** quota.h -- the quota settings of the preload library, parsed from the
** environment by src/config/env.c (the one module that reads it) and
** resolved per device once the driver has said which GPUs exist.
**
**   VRAM_LIMIT   "6G" | "50%" | "0.5" (of each device's total memory)
**                | a per-device list: "0:6G,1:4G", "GPU-1234abcd-...:6G",
**                  keys are CUDA ordinals (after CUDA_VISIBLE_DEVICES) or
**                  UUIDs (a unique prefix of at least 8 characters after
**                  "GPU-" is accepted); devices not listed are not limited.
**   VRAM_GROUP   processes sharing one quota (default: the process alone).
** When neither VRAM_LIMIT nor VRAM_GROUP is set, HAMi's variables are read:
**   CUDA_DEVICE_MEMORY_LIMIT       a size for every device ("6144m" = MiB)
**   CUDA_DEVICE_MEMORY_LIMIT_<i>   a size for device i (0..15)
** A malformed value is an error (never "unlimited").
*/
#ifndef VRAM_PRELOAD_QUOTA_H
#define VRAM_PRELOAD_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "vram.h"

#define QUOTA_MAX_ENTRIES 16

enum quota_kind {
    QUOTA_NONE = 0,
    QUOTA_BYTES = 1,
    QUOTA_FRACTION = 2 /* of the device's total memory */
};

struct quota_value {
    enum quota_kind kind;
    uint64_t bytes;
    double fraction;
};

struct quota_entry {
    bool by_uuid;    /* key is a UUID (prefix), else an ordinal */
    int ordinal;
    char uuid[48];   /* "GPU-..." as given */
    struct quota_value value;
};

struct quota_env {
    bool active;                 /* some limit was set: the library enforces */
    const char *source;          /* "VRAM_LIMIT" or "CUDA_DEVICE_MEMORY_LIMIT" (static) */
    struct quota_value all;      /* applies to every device not in entries */
    int n_entries;
    struct quota_entry entries[QUOTA_MAX_ENTRIES];
    char group[64];              /* VRAM_GROUP, or "" (the process alone) */
};

/*
** The limit in bytes for the device with ORDINAL and UUID of TOTAL bytes:
** min(setting, TOTAL); 0 when the device is not limited.
*/
uint64_t quota_for_device(const struct quota_env *q, int ordinal, const char *uuid,
                          uint64_t total);

#endif
