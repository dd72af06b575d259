/* SPDX-License-Identifier: MIT */
/*
** monitor.h -- the collector behind `vram stat`, `vram top` and
** `vram exporter`: one sample of every group ledger of the calling user
** (src/ledger/ledger.h) plus, where libnvidia-ml.so.1 can be loaded,
** each GPU's total and used memory and the processes NVML sees that run
** outside vram. Between samples it keeps a short history per process, from
** which the trend (least squares, bytes per minute) and top's graph come.
**
** Scope: the calling user's ledgers; root, and the users and groups the
** host's policy names as readers, see every user's, another user's group
** labelled "<user>/<group>". Every ledger is read through a reader's
** handle (ledger_attach_in: read with pread, never mapped, nothing
** waited on), so that no file a user controls can fault, stop or fool
** the monitor: a ledger that cannot be read is one line (unread, said
** once) and the others are shown. A group whose members are all gone is
** not shown, and its file is removed when the caller may (root, or its
** owner). Processes seen only through NVML show their uid and command
** from /proc.
**
** Not thread-safe: one thread samples and reads a monitor at a time (the
** exporter holds its own lock). Nothing here prints or exits.
*/
#ifndef VRAM_MONITOR_MONITOR_H
#define VRAM_MONITOR_MONITOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ledger/ledger.h"
#include "monitor/metrics.h"
#include "vram.h"

#define MON_MAX_DEVICES 64

struct mon_view;

/* The row of device UUID in V; NULL if V has none. */
const struct mon_device *mon_device_of(const struct mon_view *v, const char *uuid);
#define MON_MAX_GROUPS 256
#define MON_MAX_USERS 1024
#define MON_MAX_PROCS 2048
#define MON_HISTORY 32 /* samples kept per process */
#define MON_MAX_UNREAD 32 /* lines kept of ledgers that could not be read */

/* One GPU (scope DEVICE). */
struct mon_device {
    char uuid[LEDGER_UUID_LEN];
    int index;            /* NVML's index (nvidia-smi's, dcgm-exporter's gpu); -1 unknown */
    char name[96];        /* NVML's name, e.g. "NVIDIA H200"; "" unknown */
    uint64_t total_bytes; /* NVML total, bytes; 0 without NVML */
    uint64_t used_bytes;  /* NVML used, bytes; else the ledgers' sum */
    bool from_nvml;       /* NVML reported this device */
};

/* One group on one GPU (scope GROUP). */
struct mon_group {
    char group[LEDGER_GROUP_LEN];
    char uuid[LEDGER_UUID_LEN];
    uint64_t quota_bytes; /* bytes; 0 = no quota */
    uint64_t used_bytes;  /* bytes */
    uint64_t refusals;    /* count, ever */
};

/* One process on one GPU (scope PROCESS). */
struct mon_proc {
    char group[LEDGER_GROUP_LEN]; /* "" = seen by NVML only, not under vram */
    char uuid[LEDGER_UUID_LEN];
    pid_t pid;
    uid_t uid;
    char comm[LEDGER_COMM_LEN];
    uint64_t used_bytes;  /* bytes */
    uint64_t peak_bytes;  /* bytes */
    uint64_t quota_bytes; /* the group's quota on this GPU, bytes; 0 = none */
    double trend_bytes_per_minute; /* slope of used over the history; 0 with < 3 samples */
    /* Host memory of the whole process, the same on each of its GPU rows: */
    uint64_t pinned_bytes; /* page-locked through the driver (the ledger); 0 outside vram */
    uint64_t rss_bytes;    /* resident set (/proc/PID/stat); 0 when unreadable */
    bool host_row;         /* the first row of this process in this group: the
                              one the HOST metrics are read from */
    int n_history;                 /* valid entries of history, oldest first */
    uint64_t history[MON_HISTORY]; /* used_bytes at the last samples, bytes */
};

/* One sample. Plain data. */
struct mon_view {
    double time_s; /* CLOCK_MONOTONIC seconds of the sample */
    bool nvml;     /* NVML was loaded and answered */
    char hostname[256]; /* this machine's name (dcgm-exporter's Hostname label) */
    int n_devices;
    struct mon_device devices[MON_MAX_DEVICES];
    int n_groups;
    struct mon_group groups[MON_MAX_GROUPS * LEDGER_MAX_DEVICES];
    int n_procs;
    struct mon_proc procs[MON_MAX_PROCS];
    /* Ledgers listed but not read (another vram version, a bad owner or
    ** mode, a file cut short or rewritten by its owner...): how many, and
    ** the lines of the first MON_MAX_UNREAD, for the commands to print.
    ** Never read in part. A line is new when its ledger was read (or not
    ** there) at the monitor's last sample: a ledger that stays unreadable
    ** is said once, not at every sample. N_UNREAD_NEW counts the new ones,
    ** those beyond MON_MAX_UNREAD included; of the lines kept, new ones
    ** take the places of old ones first. */
    int n_unread, n_unread_new;
    char unread[MON_MAX_UNREAD][320];
    bool unread_new[MON_MAX_UNREAD];
};

struct monitor;

/* A collector. USE_NVML: try to dlopen libnvidia-ml.so.1 (its absence is
** not an error). VRAM_E_HOST_MEMORY if out of memory. */
vram_status monitor_open(bool use_nvml, struct monitor **out);

/* Free M. NULL does nothing. */
void monitor_close(struct monitor *m);

/* Whether M reads every user's ledgers (root, or a reader of the policy). */
bool monitor_all_users(const struct monitor *m);

/* Take a sample: *VIEW then points to it (owned by M, valid until the next
** monitor_sample or monitor_close). VRAM_E_IO when /dev/shm cannot be
** listed; a ledger that vanishes meanwhile is skipped. */
vram_status monitor_sample(struct monitor *m, const struct mon_view **view);

/* The value of metric ID in ROW (a mon_device, mon_group or mon_proc as
** the metric's scope says). */
double metric_value(enum metric_id id, const void *row);

#endif
