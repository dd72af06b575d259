/* SPDX-License-Identifier: MIT */
/*
** slots.c -- per-allocation state of a trace replay (see slots.h).
*/
#include <stdlib.h>

#include "slots.h"

void
slots_free(struct replay_slots *sl)
{
    free(sl->ptr);
    free(sl->size);
    free(sl->live);
    sl->ptr = NULL;
    sl->size = NULL;
    sl->live = NULL;
}

bool
slots_alloc(struct replay_slots *sl, uint32_t n)
{
    size_t count = n > 0 ? n : 1;
    sl->ptr = calloc(count, sizeof *sl->ptr);
    sl->size = calloc(count, sizeof *sl->size);
    sl->live = calloc(count, sizeof *sl->live);
    if (sl->ptr == NULL || sl->size == NULL || sl->live == NULL) {
        slots_free(sl);
        return false;
    }
    return true;
}
