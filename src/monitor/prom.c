/* SPDX-License-Identifier: MIT */
/*
** prom.c -- one sample as Prometheus text exposition (format 0.0.4), for
** `vram exporter` and `vram stat --prometheus`. Every family, its HELP and
** TYPE come from VRAM_METRICS_LIST; labels are escaped as the format says.
**
** A row's labels repeat in each family of its scope, so each row's are
** rendered once per sample and copied: with 1,000 processes this halves
** the time of the text (BENCHMARKS.md).
*/
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "monitor/monitor.h"
#include "monitor/prom.h"

/*
** Write TEXT as a label value. A value is UTF-8 in which backslash, double
** quote and newline are escaped (\\, \", \n), the text format's rules;
** Prometheus refuses a whole scrape for a value that is not UTF-8, and
** `vram stat --prometheus` prints to a terminal. So the text (a command
** name, a group name: another process's or a ledger's bytes) is made
** safe first (base/text.h: control characters, C1 controls and bytes that
** are not UTF-8 as the four characters \xNN), then escaped (runs without
** those three characters in one write).
*/
static void
put_label(FILE *out, const char *raw)
{
    char safe[TEXT_SAFE_LEN(256)];
    const char *text = text_safe(raw, 256, safe, sizeof safe);
    while (*text != '\0') {
        size_t run = strcspn(text, "\\\"\n");
        fwrite(text, 1, run, out);
        text += run;
        if (*text == '\0')
            break;
        fputs(*text == '\n' ? "\\n" : *text == '"' ? "\\\"" : "\\\\", out);
        text++;
    }
}

/*
** The labels every series starts with: those of NVIDIA's dcgm-exporter
** (gpu = NVML's index, UUID, modelName, Hostname), spelled as it spells
** them, so that one query joins both exporters' series on UUID. gpu and
** modelName are "" for a GPU that only the ledgers know of (no NVML).
*/
static void
put_gpu_labels(FILE *out, const struct mon_view *v, const char *uuid)
{
    const struct mon_device *d = mon_device_of(v, uuid);
    if (d != NULL && d->index >= 0)
        fprintf(out, "gpu=\"%d\",UUID=\"", d->index);
    else
        fputs("gpu=\"\",UUID=\"", out);
    put_label(out, uuid);
    fputs("\",modelName=\"", out);
    put_label(out, d != NULL ? d->name : "");
    fputs("\",Hostname=\"", out);
    put_label(out, v->hostname);
    fputc('"', out);
}

/* ',group="...",pid="...",uid="...",comm="..."}': the labels that end a
** process's series (uid -1: unknown). */
static void
put_process_labels(FILE *out, const struct mon_proc *p)
{
    fputs(",group=\"", out);
    put_label(out, p->group);
    fprintf(out, "\",pid=\"%ld\",uid=\"%ld\",comm=\"", (long)p->pid,
            p->uid == (uid_t)-1 ? -1L : (long)p->uid);
    put_label(out, p->comm);
    fputs("\"}", out);
}

/* A value: integers (all but the trend) in digits without printf, the
** same text as %.17g gives them; others by %.17g. */
static void
put_value(FILE *out, double v)
{
    if (v >= 0 && v < 1e15 && v == (double)(uint64_t)v) {
        char buf[24];
        size_t at = sizeof buf;
        buf[--at] = '\n';
        uint64_t n = (uint64_t)v;
        do
            buf[--at] = (char)('0' + n % 10);
        while ((n /= 10) != 0);
        buf[--at] = ' ';
        fwrite(buf + at, 1, sizeof buf - at, out);
    } else {
        fprintf(out, " %.17g\n", v);
    }
}

static int
rows_of(const struct mon_view *v, enum metric_scope s)
{
    return s == METRIC_DEVICE ? v->n_devices : s == METRIC_GROUP ? v->n_groups : v->n_procs;
}

static const void *
row_of(const struct mon_view *v, enum metric_scope s, int i)
{
    if (s == METRIC_DEVICE)
        return &v->devices[i];
    if (s == METRIC_GROUP)
        return &v->groups[i];
    return &v->procs[i];
}

/* Whether row I of scope S has series (a process's host memory: one of
** its rows, host_row). */
static bool
row_shown(const struct mon_view *v, enum metric_scope s, int i)
{
    return s != METRIC_HOST || v->procs[i].host_row;
}

/* The labels of row I of scope S, from after the '{' to the '}'. */
static void
put_row_labels(FILE *out, const struct mon_view *v, enum metric_scope s, int i)
{
    switch (s) {
    case METRIC_DEVICE:
        put_gpu_labels(out, v, v->devices[i].uuid);
        fputc('}', out);
        break;
    case METRIC_GROUP:
        put_gpu_labels(out, v, v->groups[i].uuid);
        fputs(",group=\"", out);
        put_label(out, v->groups[i].group);
        fputs("\"}", out);
        break;
    case METRIC_PROCESS:
        put_gpu_labels(out, v, v->procs[i].uuid);
        put_process_labels(out, &v->procs[i]);
        break;
    case METRIC_HOST: /* no GPU: host memory is no GPU's */
        fputs("Hostname=\"", out);
        put_label(out, v->hostname);
        fputc('"', out);
        put_process_labels(out, &v->procs[i]);
        break;
    }
}

#define N_SCOPES 4

/* Every row's labels rendered once: row I of scope S is
** buf[at[S][I], at[S][I + 1]). */
struct rendered {
    char *buf;
    size_t len;
    long *at[N_SCOPES];
};

static void
rendered_free(struct rendered *r)
{
    free(r->buf);
    for (int s = 0; s < N_SCOPES; s++)
        free(r->at[s]);
}

/* False when out of memory (nothing to free then). */
static bool
render_labels(const struct mon_view *v, struct rendered *r)
{
    memset(r, 0, sizeof *r);
    FILE *f = open_memstream(&r->buf, &r->len);
    if (f == NULL)
        return false;
    bool ok = true;
    for (int s = 0; s < N_SCOPES && ok; s++) {
        int n = rows_of(v, (enum metric_scope)s);
        r->at[s] = malloc(sizeof r->at[s][0] * (size_t)(n + 1));
        ok = r->at[s] != NULL;
        for (int i = 0; ok && i < n; i++) {
            r->at[s][i] = ftell(f);
            if (row_shown(v, (enum metric_scope)s, i))
                put_row_labels(f, v, (enum metric_scope)s, i);
        }
        if (ok)
            r->at[s][n] = ftell(f);
    }
    if (fclose(f) != 0 || !ok) {
        rendered_free(r);
        return false;
    }
    return true;
}

void
prom_write(FILE *out, const struct mon_view *v)
{
    struct rendered r;
    bool pre = render_labels(v, &r);
    for (int id = 0; id < METRIC_COUNT; id++) {
        const struct metric_def *d = &metric_defs[id];
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name,
                metric_type_name(d->type));
        int n = rows_of(v, d->scope);
        for (int i = 0; i < n; i++) {
            if (!row_shown(v, d->scope, i))
                continue;
            fputs(d->name, out);
            fputc('{', out);
            if (pre)
                fwrite(r.buf + r.at[d->scope][i], 1,
                       (size_t)(r.at[d->scope][i + 1] - r.at[d->scope][i]), out);
            else
                put_row_labels(out, v, d->scope, i); /* out of memory: slower */
            put_value(out, metric_value((enum metric_id)id, row_of(v, d->scope, i)));
        }
    }
    if (pre)
        rendered_free(&r);
}
