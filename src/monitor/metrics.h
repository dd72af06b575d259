/* SPDX-License-Identifier: MIT */
/*
** metrics.h -- the one list of what vram's monitoring shows (docs/STYLE.md,
** habit 9). `vram stat` (its columns and --json keys), the Prometheus
** exporter and docs/METRICS.md (`vram stat --metrics-markdown`) are all
** generated from VRAM_METRICS_LIST, so they cannot disagree. `vram top`
** reads the same fields, but its screen is laid out by hand
** (tools/vram/cmd_top.c): a new row appears there only once added.
**
** A row: X(ID, NAME, TYPE, SCOPE, FIELD, HELP)
**   ID     enum suffix (METRIC_<ID>)
**   NAME   the Prometheus name: vram_ prefix, base unit, _total on counters
**   TYPE   GAUGE or COUNTER
**   SCOPE  DEVICE, GROUP (+ group) or PROCESS (+ group, pid, uid, comm):
**          the row struct of monitor.h it reads; every series also has
**          dcgm-exporter's gpu, UUID, modelName and Hostname.
**          HOST: a process's host memory, one series per process and
**          group (Hostname, group, pid, uid, comm: no GPU), read from the
**          mon_proc rows that carry it (host_row)
**   FIELD  the field of that struct; also the --json key
**   HELP   one line, with the unit
** Label sets are bounded: GPUs, group ledgers of one user, and at most
** LEDGER_MAX_PROCS live processes per ledger.
*/
#ifndef VRAM_MONITOR_METRICS_H
#define VRAM_MONITOR_METRICS_H

#include <stddef.h>
#include <stdio.h>

#define VRAM_METRICS_LIST(X)                                                              \
    X(DEVICE_TOTAL, "vram_device_memory_total_bytes", GAUGE, DEVICE, total_bytes,           \
      "Total memory of the GPU, bytes (NVML; 0 without NVML)")                             \
    X(DEVICE_USED, "vram_device_memory_used_bytes", GAUGE, DEVICE, used_bytes,              \
      "Memory in use on the GPU, bytes (NVML; else the sum of the vram ledgers)")          \
    X(GROUP_QUOTA, "vram_group_quota_bytes", GAUGE, GROUP, quota_bytes,                     \
      "Quota of the group on the GPU, bytes (0 = no quota)")                               \
    X(GROUP_USED, "vram_group_used_bytes", GAUGE, GROUP, used_bytes,                        \
      "Memory the group's processes hold on the GPU, bytes")                               \
    X(OOM_REFUSALS, "vram_oom_refusals_total", COUNTER, GROUP, refusals,                    \
      "Allocations refused by the group's quota on the GPU, since the ledger was made")    \
    X(PROCESS_USED, "vram_process_used_bytes", GAUGE, PROCESS, used_bytes,                  \
      "Memory the process holds on the GPU now, bytes")                                    \
    X(PROCESS_PEAK, "vram_process_peak_bytes", GAUGE, PROCESS, peak_bytes,                  \
      "Most memory the process has held on the GPU, bytes")                                \
    X(PROCESS_TREND, "vram_process_growth_bytes_per_minute", GAUGE, PROCESS,                \
      trend_bytes_per_minute,                                                              \
      "Least-squares slope of the process's use over the recent samples, bytes per minute") \
    X(PROCESS_PINNED, "vram_process_host_pinned_bytes", GAUGE, HOST, pinned_bytes,         \
      "Page-locked host memory the process holds through the CUDA driver, bytes "          \
      "(counted by the preload library; not part of any quota)")                           \
    X(PROCESS_RSS, "vram_process_host_resident_bytes", GAUGE, HOST, rss_bytes,             \
      "Resident set size of the process in host memory, bytes (/proc/PID/stat)")

enum metric_id {
#define METRIC_ENUM(id, name, type, scope, field, help) METRIC_##id,
    VRAM_METRICS_LIST(METRIC_ENUM)
#undef METRIC_ENUM
        METRIC_COUNT
};

enum metric_type { METRIC_GAUGE, METRIC_COUNTER };
enum metric_scope { METRIC_DEVICE, METRIC_GROUP, METRIC_PROCESS, METRIC_HOST };

struct metric_def {
    const char *name;  /* Prometheus name */
    enum metric_type type;
    enum metric_scope scope;
    const char *key;   /* the row field's name: --json key and column */
    const char *help;
};

/* The list as a table, indexed by enum metric_id. */
extern const struct metric_def metric_defs[METRIC_COUNT];

/* "gauge" or "counter". */
const char *metric_type_name(enum metric_type t);

/* The labels of SCOPE, e.g. "gpu, UUID, modelName, Hostname, group" (for
** the docs). */
const char *metric_scope_labels(enum metric_scope s);

/* docs/METRICS.md. */
void metrics_markdown(FILE *out);

#endif
