/* SPDX-License-Identifier: MIT */
/*
** cmd_stat.c -- `vram stat`: one sample of the monitor (src/monitor/) as
** tables, --json (integer bytes) or --prometheus; `--config` prints every
** setting vram would use here and its source (the env table, as `vram
** env`); `--metrics-markdown` prints docs/METRICS.md. Columns and JSON keys
** come from VRAM_METRICS_LIST, like `vram top` and the exporter.
*/
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "cliopt.h"
#include "cmd.h"
#include "config/env.h"
#include "monitor/monitor.h"
#include "monitor/prom.h"
#include "base/size.h"

enum opt_id { OPT_JSON, OPT_PROM, OPT_CONFIG, OPT_MARKDOWN, OPT_NO_NVML };

static const struct cli_opt opt_table[] = {
    {OPT_JSON, "json", 0, NULL, "print JSON (sizes in integer bytes)"},
    {OPT_PROM, "prometheus", 0, NULL, "print what the exporter serves at /metrics"},
    {OPT_CONFIG, "config", 0, NULL, "print every setting vram would use here and its source"},
    {OPT_MARKDOWN, "metrics-markdown", 0, NULL, "print the metric list (docs/METRICS.md)"},
    {OPT_NO_NVML, "no-nvml", 0, NULL, "do not load libnvidia-ml.so.1: the ledgers alone"},
};
#define N_OPTS (sizeof opt_table / sizeof opt_table[0])

static const struct cli_command stat_cmd = {
    .prog = "vram stat",
    .synopsis = "[--json | --prometheus] [--no-nvml]\n--config\n--metrics-markdown",
    .about = "GPU memory per device (index, name, use), per group (quota, use, refusals)\n"
             "and per process, once, from the vram ledgers of the calling user and NVML.\n",
    .opts = opt_table,
    .n_opts = N_OPTS,
    .exit_status = "0 ok, 1 failure, 2 bad usage.",
};

/* The value of metric ID in ROW as text for a table. */
static void
cell(enum metric_id id, const void *row, char *buf, size_t len)
{
    double v = metric_value(id, row);
    if (id == METRIC_PROCESS_TREND) {
        char s[32];
        size_format((uint64_t)(v < 0 ? -v : v), s, sizeof s);
        snprintf(buf, len, "%s%s/min", v < 0 ? "-" : "", s);
    } else if (strstr(metric_defs[id].name, "_bytes") != NULL)
        size_format((uint64_t)v, buf, len);
    else
        snprintf(buf, len, "%.0f", v);
}

static void
print_cells(enum metric_scope scope, const void *row)
{
    for (int id = 0; id < METRIC_COUNT; id++)
        if (metric_defs[id].scope == scope) {
            char buf[48];
            cell((enum metric_id)id, row, buf, sizeof buf);
            printf("  %22s", buf);
        }
    putchar('\n');
}

static void
print_header(enum metric_scope scope)
{
    for (int id = 0; id < METRIC_COUNT; id++)
        if (metric_defs[id].scope == scope)
            printf("  %22s", metric_defs[id].key);
    putchar('\n');
}

static void
print_tables(const struct mon_view *v)
{
    printf("DEVICES%s\n%-40s", v->nvml ? " (NVML)" : " (ledgers only, no NVML)", "uuid");
    print_header(METRIC_DEVICE);
    for (int i = 0; i < v->n_devices; i++) {
        printf("%-40s", v->devices[i].uuid);
        print_cells(METRIC_DEVICE, &v->devices[i]);
    }
    printf("\nGROUPS\n%-20s %-40s", "group", "uuid");
    print_header(METRIC_GROUP);
    for (int i = 0; i < v->n_groups; i++) {
        printf("%-20s %-40s", v->groups[i].group, v->groups[i].uuid);
        print_cells(METRIC_GROUP, &v->groups[i]);
    }
    printf("\nPROCESSES\n%-8s %-6s %-16s %-20s %-40s", "pid", "uid", "comm", "group", "uuid");
    print_header(METRIC_PROCESS);
    for (int i = 0; i < v->n_procs; i++) {
        const struct mon_proc *p = &v->procs[i];
        printf("%-8ld %-6ld %-16s %-20s %-40s", (long)p->pid,
               p->uid == (uid_t)-1 ? -1L : (long)p->uid, p->comm,
               p->group[0] ? p->group : "-", p->uuid);
        print_cells(METRIC_PROCESS, p);
    }
}

static void
add_metrics(json_object *o, enum metric_scope scope, const void *row)
{
    for (int id = 0; id < METRIC_COUNT; id++) {
        if (metric_defs[id].scope != scope)
            continue;
        double v = metric_value((enum metric_id)id, row);
        json_object_object_add(o, metric_defs[id].key,
                               id == METRIC_PROCESS_TREND ? json_object_new_double(v)
                                                          : json_object_new_int64((int64_t)v));
    }
}

static int
print_json(const struct mon_view *v)
{
    json_object *root = json_object_new_object();
    json_object *devs = json_object_new_array();
    json_object *groups = json_object_new_array();
    json_object *procs = json_object_new_array();
    json_object_object_add(root, "nvml", json_object_new_boolean(v->nvml));
    for (int i = 0; i < v->n_devices; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "uuid", json_object_new_string(v->devices[i].uuid));
        add_metrics(o, METRIC_DEVICE, &v->devices[i]);
        json_object_array_add(devs, o);
    }
    for (int i = 0; i < v->n_groups; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "group", json_object_new_string(v->groups[i].group));
        json_object_object_add(o, "uuid", json_object_new_string(v->groups[i].uuid));
        add_metrics(o, METRIC_GROUP, &v->groups[i]);
        json_object_array_add(groups, o);
    }
    for (int i = 0; i < v->n_procs; i++) {
        const struct mon_proc *p = &v->procs[i];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "pid", json_object_new_int64(p->pid));
        json_object_object_add(o, "uid",
                               json_object_new_int64(p->uid == (uid_t)-1 ? -1 : (int64_t)p->uid));
        json_object_object_add(o, "comm", json_object_new_string(p->comm));
        json_object_object_add(o, "group", json_object_new_string(p->group));
        json_object_object_add(o, "uuid", json_object_new_string(p->uuid));
        json_object_object_add(o, "quota_bytes", json_object_new_int64((int64_t)p->quota_bytes));
        add_metrics(o, METRIC_PROCESS, p);
        json_object_array_add(procs, o);
    }
    json_object_object_add(root, "devices", devs);
    json_object_object_add(root, "groups", groups);
    json_object_object_add(root, "processes", procs);
    puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
    json_object_put(root);
    return 0;
}

int
cmd_stat(int argc, char **argv)
{
    enum { FMT_TABLE, FMT_JSON, FMT_PROM } fmt = FMT_TABLE;
    bool nvml = true;
    struct cliopt_iter it;
    const struct cli_opt *opt = NULL;
    const char *value = NULL;

    cliopt_begin(&it, &stat_cmd, argc, argv);
    enum cliopt_kind kind;
    while ((kind = cliopt_next_option(&it, &opt, &value)) == CLIOPT_OPTION) {
        switch ((enum opt_id)opt->id) {
        case OPT_JSON:
            fmt = FMT_JSON;
            break;
        case OPT_PROM:
            fmt = FMT_PROM;
            break;
        case OPT_CONFIG:
            env_print(stdout, NULL, NULL);
            return fflush(stdout) == 0 ? 0 : 1;
        case OPT_MARKDOWN:
            metrics_markdown(stdout);
            return fflush(stdout) == 0 ? 0 : 1;
        case OPT_NO_NVML:
            nvml = false;
            break;
        }
    }
    if (kind == CLIOPT_EXIT)
        return it.status;

    struct monitor *m = NULL;
    const struct mon_view *v = NULL;
    if (monitor_open(nvml, &m) != VRAM_OK || monitor_sample(m, &v) != VRAM_OK) {
        cli_error("stat: %s", vram_last_error());
        monitor_close(m);
        return 1;
    }
    if (fmt == FMT_JSON)
        print_json(v);
    else if (fmt == FMT_PROM)
        prom_write(stdout, v);
    else
        print_tables(v);
    monitor_close(m);
    return fflush(stdout) == 0 ? 0 : 1;
}
