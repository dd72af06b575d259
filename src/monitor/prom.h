/* SPDX-License-Identifier: MIT */
/*
** prom.h -- a monitor sample as Prometheus text exposition (prom.c).
*/
#ifndef VRAM_MONITOR_PROM_H
#define VRAM_MONITOR_PROM_H

#include <stdio.h>

struct mon_view;

/* Write every metric of VRAM_METRICS_LIST for V to OUT, with HELP and TYPE
** lines, in text exposition format 0.0.4. */
void prom_write(FILE *out, const struct mon_view *v);

#endif
