/* SPDX-License-Identifier: MIT */
/*
** quota.h -- the quota settings of the preload library: their grammar
** (quota_parse.c), read from the environment by src/config/env.c (the one
** module that reads it), and resolved per device once the driver has said
** which GPUs exist (quota.c).
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
#ifndef VRAM_QUOTA_QUOTA_H
#define VRAM_QUOTA_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vram.h"

#define QUOTA_MAX_ENTRIES 16
#define QUOTA_MAX_ORDINAL 64 /* keys are CUDA ordinals 0..63 */
#define QUOTA_GROUP_LEN 64   /* VRAM_GROUP, with its NUL */

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
    char group[QUOTA_GROUP_LEN]; /* VRAM_GROUP, or "" (the process alone) */
    int context;                 /* VRAM_CONTEXT: -1 unset, 0 off, 1 on (charge the
                                    process's context) */
    char origin[QUOTA_GROUP_LEN]; /* VRAM_LIMIT_SOURCE with VRAM_LIMIT: "vram-run",
                                     "slurm", "hami", or "" (a label for messages) */
};

/*
** The limit in bytes for the device with ORDINAL and UUID of TOTAL bytes:
** min(setting, TOTAL); 0 when the device is not limited.
*/
uint64_t quota_for_device(const struct quota_env *q, int ordinal, const char *uuid,
                          uint64_t total);

/* Longest UUID text a device has ("GPU-" and 36 characters), with its NUL. */
#define QUOTA_UUID_LEN 48

/*
** The GPUs a per-GPU key may name: an ordinal key names a GPU when it is
** below N_ORDINALS; a UUID key when it is a prefix of one of the N UUIDS
** (any case, "GPU-" optional). Which list that is depends on the reader:
** for VRAM_LIMIT and HAMi's variables, ordinals are the process's CUDA
** ordinals (after CUDA_VISIBLE_DEVICES) and UUIDs the host's GPUs; for the
** host's policy both are the host's (docs/QUOTA.md, "A key that names no
** GPU").
*/
struct quota_gpus {
    int n_ordinals;
    int n;
    char uuid[QUOTA_MAX_ORDINAL][QUOTA_UUID_LEN];
};

/*
** The first of Q's per-device entries that names none of G's GPUs. -1
** when every entry names one, Q is inactive, or G holds no GPU at all (no
** device: nothing can be allocated, so nothing goes unlimited).
*/
int quota_unmatched(const struct quota_env *q, const struct quota_gpus *g);

/* Entry E's key as written ("GPU-8c6f1e2a", "3") into BUF (LEN bytes). */
void quota_key_text(const struct quota_entry *e, char *buf, size_t len);

/* G's UUIDs as a list, "0: GPU-..., 1: GPU-..." ("none" when empty), into
** BUF (LEN bytes, cut to fit). */
void quota_gpus_format(const struct quota_gpus *g, char *buf, size_t len);

/*
** One line (no "vram: ", no newline) into BUF (LEN bytes) saying that
** entry K of Q names none of the GPUs of G, which it lists, e.g.
**   VRAM_LIMIT entry 'GPU-8c6f1e2a' names no GPU (0: GPU-..., 1: GPU-...):
**   it would limit nothing
** (HAMi's entries name their variable: CUDA_DEVICE_MEMORY_LIMIT_7 ...).
*/
void quota_unmatched_line(const struct quota_env *q, int k, const struct quota_gpus *g,
                          char *buf, size_t len);

/*
** VRAM_LIMIT: one plain limit for every device ("6G", "50%", "0.5"), or a
** comma-separated list of KEY:LIMIT items, keys CUDA ordinals or GPU UUID
** prefixes. Never mixed: a value with any ':' is a list. Fills DST's all,
** n_entries and entries only (the caller sets the rest). False, with the
** reason in WHY (LEN bytes), when TEXT is malformed; DST is then untouched.
*/
bool quota_parse(const char *text, struct quota_env *dst, char *why, size_t len);

/* What quota_parse accepts, in words, for the messages of its callers. */
#define QUOTA_EXPECT "e.g. 6G, 50%, 0.5, 0:6G,1:4G or GPU-8c6f1e2a:6G"

/* One piece of a value's list, S..S+N (not NUL-terminated), as a string
** into BUF (SIZE bytes). False, with the reason in WHY (LEN bytes), when
** it is empty ("empty WHAT") or longer than BUF holds. */
bool quota_piece(const char *s, size_t n, const char *what, char *buf, size_t size,
                 char *why, size_t len);

/* TEXT as a size above 0 into *OUT. False, with the reason in WHY, when
** it is not a size or is 0 ("'0': a WHAT must be more than 0"). */
bool quota_size_above_0(const char *text, const char *what, uint64_t *out, char *why,
                        size_t len);

/* VRAM_GROUP into DST (CAP bytes): it names a file in /dev/shm, so a short,
** plain word (letters, digits, '.', '_', '-'). False, with the reason in
** WHY, otherwise. */
bool quota_parse_group(const char *text, char *dst, size_t cap, char *why, size_t len);

/* Append Q's limits as `vram env` shows them, in VRAM_LIMIT's own grammar
** and exact, so that they paste back ("6G", "0:50%,GPU-8c6f1e2a:4G",
** "unset"), to BUF (LEN bytes, a string). */
void quota_format(const struct quota_env *q, char *buf, size_t len);

#endif
