/* SPDX-License-Identifier: MIT */
/*
** trace_replay.c -- the replay state's memory (see trace_replay.h; the
** loop itself is inline there).
*/
#include <stdlib.h>
#include <string.h>

#include "trace/trace_replay.h"

bool
trace_replay_init(struct trace_replay *r, const struct trace *t)
{
    memset(r, 0, sizeof *r);
    r->t = t;
    size_t n = t->n_slots > 0 ? t->n_slots : 1;
    r->ptr = calloc(n, sizeof *r->ptr);
    r->size = calloc(n, sizeof *r->size);
    r->live = calloc(n, sizeof *r->live);
    if (r->ptr == NULL || r->size == NULL || r->live == NULL) {
        trace_replay_fini(r);
        return false;
    }
    return true;
}

void
trace_replay_reset(struct trace_replay *r)
{
    memset(r->live, 0, (r->t->n_slots > 0 ? r->t->n_slots : 1) * sizeof *r->live);
    r->in_use = r->peak_in_use = 0;
    r->live_blocks = r->peak_live_blocks = 0;
    r->refused = 0;
    r->failed_event = 0;
}

void
trace_replay_fini(struct trace_replay *r)
{
    if (r == NULL)
        return;
    free(r->ptr);
    free(r->size);
    free(r->live);
    r->ptr = NULL;
    r->size = NULL;
    r->live = NULL;
}
