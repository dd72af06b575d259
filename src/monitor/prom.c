/* SPDX-License-Identifier: MIT */
/*
** prom.c -- one sample as Prometheus text exposition (format 0.0.4), for
** `vram exporter` and `vram stat --prometheus`. Every family, its HELP and
** TYPE come from VRAM_METRICS_LIST; labels are escaped as the format says.
*/
#include <inttypes.h>
#include <stdio.h>

#include "monitor/monitor.h"
#include "monitor/prom.h"

/* Write TEXT as a label value: backslash, double quote and newline escaped. */
static void
put_label(FILE *out, const char *text)
{
    for (const char *c = text; *c != '\0'; c++) {
        if (*c == '\\' || *c == '"') {
            fputc('\\', out);
            fputc(*c, out);
        } else if (*c == '\n')
            fputs("\\n", out);
        else
            fputc(*c, out);
    }
}

/*
** The labels every series starts with: those of NVIDIA's dcgm-exporter
** (gpu = NVML's index, UUID, modelName, Hostname), so that one query joins
** both exporters' series on GPU, then uuid, vram's own (kept for the
** dashboards written before). gpu and modelName are "" for a GPU that only
** the ledgers know of (no NVML).
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
    fputs("\",uuid=\"", out);
    put_label(out, uuid);
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

static void
put_value(FILE *out, double v)
{
    fprintf(out, " %.17g\n", v);
}

void
prom_write(FILE *out, const struct mon_view *v)
{
    for (int id = 0; id < METRIC_COUNT; id++) {
        const struct metric_def *d = &metric_defs[id];
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name,
                metric_type_name(d->type));
        switch (d->scope) {
        case METRIC_DEVICE:
            for (int i = 0; i < v->n_devices; i++) {
                fprintf(out, "%s{", d->name);
                put_gpu_labels(out, v, v->devices[i].uuid);
                fputc('}', out);
                put_value(out, metric_value((enum metric_id)id, &v->devices[i]));
            }
            break;
        case METRIC_GROUP:
            for (int i = 0; i < v->n_groups; i++) {
                fprintf(out, "%s{", d->name);
                put_gpu_labels(out, v, v->groups[i].uuid);
                fputs(",group=\"", out);
                put_label(out, v->groups[i].group);
                fputs("\"}", out);
                put_value(out, metric_value((enum metric_id)id, &v->groups[i]));
            }
            break;
        case METRIC_PROCESS:
            for (int i = 0; i < v->n_procs; i++) {
                const struct mon_proc *p = &v->procs[i];
                fprintf(out, "%s{", d->name);
                put_gpu_labels(out, v, p->uuid);
                put_process_labels(out, p);
                put_value(out, metric_value((enum metric_id)id, p));
            }
            break;
        case METRIC_HOST: /* no GPU: one series per process and group */
            for (int i = 0; i < v->n_procs; i++) {
                const struct mon_proc *p = &v->procs[i];
                if (!p->host_row)
                    continue;
                fprintf(out, "%s{Hostname=\"", d->name);
                put_label(out, v->hostname);
                fputc('"', out);
                put_process_labels(out, p);
                put_value(out, metric_value((enum metric_id)id, p));
            }
            break;
        }
    }
}
