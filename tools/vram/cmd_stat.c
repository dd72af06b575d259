/* SPDX-License-Identifier: MIT */
/*
** cmd_stat.c -- `vram stat`: one sample of the monitor (src/monitor/) as
** tables, --json (integer bytes) or --prometheus; `--config` prints every
** setting vram would use here and its source (the env table, as `vram
** env`); `--metrics-markdown` prints docs/METRICS.md. Columns and JSON keys
** come from VRAM_METRICS_LIST, like `vram top` and the exporter.
*/
#include <json-c/json.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "cmd.h"
#include "config/env.h"
#include "monitor/monitor.h"
#include "monitor/prom.h"
#include "base/size.h"
#include "base/text.h"

/* What the command line asks of `vram stat`. */
enum { FMT_TABLE, FMT_JSON, FMT_PROM };
struct stat_args {
    int fmt; /* FMT_... */
    bool nvml;
};

#define AT(member) offsetof(struct stat_args, member)

enum opt_id { OPT_CONFIG, OPT_MARKDOWN };

static const struct cli_opt opt_table[] = {
    {FMT_JSON, "json", 0, NULL, "print JSON (sizes in integer bytes)", .store = CLIOPT_ID,
     .field = AT(fmt)},
    {FMT_PROM, "prometheus", 0, NULL, "print what the exporter serves at /metrics",
     .store = CLIOPT_ID, .field = AT(fmt)},
    {OPT_CONFIG, "config", 0, NULL, "print every setting vram would use here and its source",
     .store = CLIOPT_CALL},
    {OPT_MARKDOWN, "metrics-markdown", 0, NULL, "print the metric list (docs/METRICS.md)",
     .store = CLIOPT_CALL},
    CMD_OPT_NO_NVML(AT(nvml)),
};

static const struct cli_command stat_cmd = {
    .prog = "vram stat",
    .synopsis = "[--json | --prometheus] [--no-nvml]\n--config\n--metrics-markdown",
    .about =
        "GPU memory per device (index, name, use), per group (quota, use, refusals)\n"
        "and per process, once, from the vram ledgers of the calling user and NVML.\n",
    CLIOPT_TABLE(opt_table),
    .exit_status = "0 ok, 1 failure, 2 bad usage (or, with --config, a malformed "
                   "variable).",
    .no_operands = true,
};

/*
** The tables fit 80 columns: the GPU by NVML's index and name (the UUID cut
** to its first group, as the --json output and the exporter give it in
** full), text columns cut to a width, the sizes with two decimals.
*/
#define TABLE_MAX_COLS 10
#define CELL_LEN 128 /* holds a whole NVML name (96), group (64) or UUID */

struct table {
    int n_cols;
    const char *head[TABLE_MAX_COLS];
    int max[TABLE_MAX_COLS];    /* most characters shown; 0 = all */
    bool right[TABLE_MAX_COLS]; /* right-aligned (numbers) */
    int width[TABLE_MAX_COLS];
    int n_rows, cap_rows;
    char (*cells)[TABLE_MAX_COLS][CELL_LEN];
};

static void
table_col(struct table *t, const char *head, int max, bool right)
{
    t->head[t->n_cols] = head;
    t->max[t->n_cols] = max;
    t->right[t->n_cols] = right;
    t->width[t->n_cols] = (int)strlen(head);
    t->n_cols++;
}

/* A new row; its cells are set with table_set. NULL when out of memory. */
static char (*table_row(struct table *t))[CELL_LEN]
{
    if (t->n_rows == t->cap_rows) {
        int cap = t->cap_rows == 0 ? 16 : 2 * t->cap_rows;
        void *bigger = realloc(t->cells, (size_t)cap * sizeof *t->cells);
        if (bigger == NULL)
            return NULL;
        t->cells = bigger;
        t->cap_rows = cap;
    }
    memset(t->cells[t->n_rows], 0, sizeof t->cells[0]);
    return t->cells[t->n_rows++];
}

/*
** Print T. Every cell is made safe for the terminal first, here, once for
** every table (base/text.h: a command name, a group name or a UUID is
** another process's or a ledger's bytes), then cut to its column's
** width, never inside a UTF-8 character.
*/
static void
table_print(struct table *t)
{
    for (int r = 0; r < t->n_rows; r++)
        for (int c = 0; c < t->n_cols; c++) {
            char *cell = t->cells[r][c], safe[TEXT_SAFE_LEN(CELL_LEN)];
            text_safe(cell, CELL_LEN, safe, CELL_LEN);
            memcpy(cell, safe, CELL_LEN);
            if (t->max[c] > 0 && (int)strlen(cell) > t->max[c]) {
                int cut = t->max[c];
                while (cut > 0 && ((unsigned char)cell[cut] & 0xc0) == 0x80)
                    cut--; /* not inside a character */
                cell[cut] = '\0';
            }
            if ((int)strlen(cell) > t->width[c])
                t->width[c] = (int)strlen(cell);
        }
    for (int r = -1; r < t->n_rows; r++) {
        for (int c = 0; c < t->n_cols; c++) {
            const char *cell = r < 0 ? t->head[c] : t->cells[r][c];
            bool last = c + 1 == t->n_cols;
            printf("%s%*s", c > 0 ? "  " : "", t->right[c] ? t->width[c] : last ? 0 : -t->width[c],
                   cell);
        }
        putchar('\n');
    }
    free(t->cells);
    t->cells = NULL;
    t->n_rows = t->cap_rows = 0;
}

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

/* The column heading of metric ID: its key up to "_bytes" ("used_bytes" ->
** "USED", "trend_bytes_per_minute" -> "TREND"). */
static const char *
heading(enum metric_id id)
{
    static char names[METRIC_COUNT][32];
    char *h = names[id];
    snprintf(h, sizeof names[id], "%s", metric_defs[id].key);
    char *cut = strstr(h, "_bytes");
    if (cut != NULL)
        *cut = '\0';
    for (char *c = h; *c != '\0'; c++)
        *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
    return h;
}

static void
metric_cols(struct table *t, enum metric_scope scope)
{
    for (int id = 0; id < METRIC_COUNT; id++)
        if (metric_defs[id].scope == scope)
            table_col(t, heading((enum metric_id)id), 0, true);
}

/* The metric cells of ROW from column FIRST on. */
static void
metric_cells(char (*r)[CELL_LEN], int first, enum metric_scope scope, const void *row)
{
    int c = first;
    for (int id = 0; id < METRIC_COUNT; id++)
        if (metric_defs[id].scope == scope)
            cell((enum metric_id)id, row, r[c++], CELL_LEN);
}

void
cli_gpu_index(const struct mon_view *v, const char *uuid, char *buf, size_t len)
{
    const struct mon_device *d = mon_device_of(v, uuid);
    if (d != NULL && d->index >= 0)
        snprintf(buf, len, "%d", d->index);
    else
        snprintf(buf, len, "-");
}

/* A process's own columns: its pid, command and group. */
static void
proc_cols(struct table *t)
{
    table_col(t, "PID", 0, true);
    table_col(t, "COMMAND", 15, false);
    table_col(t, "GROUP", 16, false);
}

static void
proc_cells(char (*r)[CELL_LEN], const struct mon_proc *p)
{
    snprintf(r[0], CELL_LEN, "%ld", (long)p->pid);
    snprintf(r[1], CELL_LEN, "%s", p->comm);
    snprintf(r[2], CELL_LEN, "%s", p->group[0] ? p->group : "-");
}

/* Host memory: one row per process and group, whatever its GPUs. */
static void
print_host_table(const struct mon_view *v)
{
    struct table t = {0};
    printf("\nHOST MEMORY\n");
    proc_cols(&t);
    metric_cols(&t, METRIC_HOST);
    for (int i = 0; i < v->n_procs; i++) {
        const struct mon_proc *p = &v->procs[i];
        char (*r)[CELL_LEN] = p->host_row ? table_row(&t) : NULL;
        if (r == NULL)
            continue;
        proc_cells(r, p);
        metric_cells(r, 3, METRIC_HOST, p);
    }
    table_print(&t);
}

static void
print_tables(const struct mon_view *v)
{
    struct table t = {0};
    printf("DEVICES%s\n", v->nvml ? " (NVML)" : " (ledgers only, no NVML)");
    table_col(&t, "GPU", 0, true);
    table_col(&t, "NAME", 24, false);
    metric_cols(&t, METRIC_DEVICE);
    table_col(&t, "UUID", 12, false);
    for (int i = 0; i < v->n_devices; i++) {
        char (*r)[CELL_LEN] = table_row(&t);
        if (r == NULL)
            break;
        cli_gpu_index(v, v->devices[i].uuid, r[0], CELL_LEN);
        snprintf(r[1], CELL_LEN, "%s", v->devices[i].name[0] ? v->devices[i].name : "-");
        metric_cells(r, 2, METRIC_DEVICE, &v->devices[i]);
        snprintf(r[t.n_cols - 1], CELL_LEN, "%s", v->devices[i].uuid);
    }
    table_print(&t);

    t = (struct table){0};
    printf("\nGROUPS\n");
    table_col(&t, "GPU", 0, true);
    table_col(&t, "GROUP", 24, false);
    metric_cols(&t, METRIC_GROUP);
    for (int i = 0; i < v->n_groups; i++) {
        char (*r)[CELL_LEN] = table_row(&t);
        if (r == NULL)
            break;
        cli_gpu_index(v, v->groups[i].uuid, r[0], CELL_LEN);
        snprintf(r[1], CELL_LEN, "%s", v->groups[i].group);
        metric_cells(r, 2, METRIC_GROUP, &v->groups[i]);
    }
    table_print(&t);

    t = (struct table){0};
    printf("\nPROCESSES\n");
    table_col(&t, "GPU", 0, true);
    proc_cols(&t);
    metric_cols(&t, METRIC_PROCESS);
    for (int i = 0; i < v->n_procs; i++) {
        const struct mon_proc *p = &v->procs[i];
        char (*r)[CELL_LEN] = table_row(&t);
        if (r == NULL)
            break;
        cli_gpu_index(v, p->uuid, r[0], CELL_LEN);
        proc_cells(r + 1, p);
        metric_cells(r, 4, METRIC_PROCESS, p);
    }
    table_print(&t);
    print_host_table(v);
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

/* TEXT as a JSON string: json-c escapes the control characters, but
** passes bytes that are not UTF-8 (and C1 controls) through: made safe
** first (base/text.h), as every text output of vram is. */
static json_object *
json_text(const char *text)
{
    char safe[TEXT_SAFE_LEN(128)];
    return json_object_new_string(text_safe(text, 128, safe, sizeof safe));
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
        json_object_object_add(o, "gpu", v->devices[i].index >= 0
                                             ? json_object_new_int(v->devices[i].index)
                                             : NULL);
        json_object_object_add(o, "name", json_text(v->devices[i].name));
        json_object_object_add(o, "uuid", json_text(v->devices[i].uuid));
        add_metrics(o, METRIC_DEVICE, &v->devices[i]);
        json_object_array_add(devs, o);
    }
    for (int i = 0; i < v->n_groups; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "group", json_text(v->groups[i].group));
        json_object_object_add(o, "uuid", json_text(v->groups[i].uuid));
        add_metrics(o, METRIC_GROUP, &v->groups[i]);
        json_object_array_add(groups, o);
    }
    for (int i = 0; i < v->n_procs; i++) {
        const struct mon_proc *p = &v->procs[i];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "pid", json_object_new_int64(p->pid));
        json_object_object_add(o, "uid",
                               json_object_new_int64(p->uid == (uid_t)-1 ? -1 : (int64_t)p->uid));
        json_object_object_add(o, "comm", json_text(p->comm));
        json_object_object_add(o, "group", json_text(p->group));
        json_object_object_add(o, "uuid", json_text(p->uuid));
        json_object_object_add(o, "quota_bytes", json_object_new_int64((int64_t)p->quota_bytes));
        add_metrics(o, METRIC_PROCESS, p);
        add_metrics(o, METRIC_HOST, p); /* the same on each of its GPU rows */
        json_object_array_add(procs, o);
    }
    json_object_object_add(root, "devices", devs);
    json_object_object_add(root, "groups", groups);
    json_object_object_add(root, "processes", procs);
    /* Group labels hold a '/' ("alice/exp42"): no escaping needed in JSON. */
    puts(json_object_to_json_string_ext(root,
                                        JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return 0;
}

void
cli_say_unread(const char *who, const struct mon_view *v)
{
    int said = 0;
    for (int i = 0; i < v->n_unread && i < MON_MAX_UNREAD; i++) {
        if (!v->unread_new[i])
            continue;
        cli_error("%s: %s", who, v->unread[i]);
        said++;
    }
    if (v->n_unread_new > said)
        cli_error("%s: and %d more ledgers not read", who, v->n_unread_new - said);
}

/* --config and --metrics-markdown (cliopt_handler): each prints and ends
** the command. */
static int
stat_option(void *ctx, const struct cli_opt *opt, const char *value)
{
    (void)ctx;
    (void)value;
    int bad = 0;
    if (opt->id == OPT_CONFIG)
        bad = env_print(stdout, NULL, NULL);
    else
        metrics_markdown(stdout);
    if (fflush(stdout) != 0)
        return 1;
    return bad > 0 ? 2 : 0; /* a malformed setting, as `vram env` says */
}

bool
cli_monitor_first(const char *who, bool nvml, struct monitor **m,
                  const struct mon_view **v)
{
    *m = NULL;
    if (monitor_open(nvml, m) == VRAM_OK && monitor_sample(*m, v) == VRAM_OK)
        return true;
    cli_error("%s: %s", who, vram_last_error());
    monitor_close(*m);
    *m = NULL;
    return false;
}

int
cmd_stat(int argc, char **argv)
{
    struct stat_args a = {FMT_TABLE, true};
    int rc = cliopt_parse(&stat_cmd, argc, argv, stat_option, &a, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;

    struct monitor *m = NULL;
    const struct mon_view *v = NULL;
    if (!cli_monitor_first("stat", a.nvml, &m, &v))
        return 1;
    cli_say_unread("stat", v);
    if (a.fmt == FMT_JSON)
        print_json(v);
    else if (a.fmt == FMT_PROM)
        prom_write(stdout, v);
    else
        print_tables(v);
    monitor_close(m);
    return fflush(stdout) == 0 ? 0 : 1;
}
