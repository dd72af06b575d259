/* SPDX-License-Identifier: MIT */
/*
** quota.c -- resolve the quota settings (quota.h, parsed by env.c) for one
** device, once the driver has said which GPUs exist.
**
** Which setting applies to a device, first match wins:
**   1. an entry keyed by a UUID that is a prefix of the device's UUID
**      (case-insensitive; "GPU-" on either side is optional);
**   2. an entry keyed by the device's CUDA ordinal;
**   3. the all-devices value.
** env.c refuses UUID keys that could both match one device, and ordinals
** given twice, so the order of the entries never decides anything.
**
** Called from the preload library's hooks: no allocation, no lock, no
** driver call, no output. quota_unmatched finds the per-device entries
** that name no GPU (a mistyped UUID would otherwise limit nothing without
** a word): the preload library then disables CUDA in the process, `vram
** run` refuses to start, `vram admin check` fails the policy.
*/
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "base/strbuf.h"
#include "quota/quota.h"

/* UUID without its "GPU-" (any case), as the driver and the user may
** write it with or without. */
static const char *
uuid_body(const char *uuid)
{
    return strncasecmp(uuid, "GPU-", 4) == 0 ? uuid + 4 : uuid;
}

/* Whether KEY (a UUID or a prefix of one) names the device UUID. */
static bool
uuid_matches(const char *key, const char *uuid)
{
    const char *k = uuid_body(key), *u = uuid_body(uuid);
    size_t n = strlen(k);
    return n > 0 && strlen(u) >= n && strncasecmp(k, u, n) == 0;
}

/* The setting that applies to the device, or NULL. */
static const struct quota_value *
quota_lookup(const struct quota_env *q, int ordinal, const char *uuid)
{
    if (uuid != NULL && uuid[0] != '\0')
        for (int k = 0; k < q->n_entries && k < QUOTA_MAX_ENTRIES; k++)
            if (q->entries[k].by_uuid && uuid_matches(q->entries[k].uuid, uuid))
                return &q->entries[k].value;
    for (int k = 0; k < q->n_entries && k < QUOTA_MAX_ENTRIES; k++)
        if (!q->entries[k].by_uuid && q->entries[k].ordinal == ordinal)
            return &q->entries[k].value;
    if (q->all.kind != QUOTA_NONE)
        return &q->all;
    return NULL;
}

/*
** TOTAL == 0 means the driver did not say: a size applies as given, and a
** fraction of an unknown total is 1 byte, which refuses every allocation
** rather than returning 0, which would mean "not limited" (fail closed).
** A fraction of a known total is rounded down but never to 0.
*/
uint64_t
quota_for_device(const struct quota_env *q, int ordinal, const char *uuid, uint64_t total)
{
    if (q == NULL || !q->active)
        return 0;
    const struct quota_value *v = quota_lookup(q, ordinal, uuid);
    if (v == NULL)
        return 0;
    uint64_t limit;
    switch (v->kind) {
    case QUOTA_BYTES:
        limit = v->bytes;
        break;
    case QUOTA_FRACTION: {
        if (total == 0)
            return 1;
        double f = v->fraction > 1.0 ? 1.0 : v->fraction;
        double bytes = f * (double)total;
        /* (double)total may round up past TOTAL: compare as doubles. */
        limit = bytes >= (double)total ? total : (uint64_t)bytes;
        if (limit == 0)
            limit = 1;
        break;
    }
    case QUOTA_NONE:
    default:
        return 0;
    }
    if (total > 0 && limit > total)
        limit = total;
    return limit;
}

int
quota_unmatched(const struct quota_env *q, const struct quota_gpus *g)
{
    if (q == NULL || g == NULL || !q->active || (g->n_ordinals <= 0 && g->n <= 0))
        return -1;
    for (int k = 0; k < q->n_entries && k < QUOTA_MAX_ENTRIES; k++) {
        const struct quota_entry *e = &q->entries[k];
        bool found = !e->by_uuid && e->ordinal >= 0 && e->ordinal < g->n_ordinals;
        for (int i = 0; e->by_uuid && !found && i < g->n && i < QUOTA_MAX_ORDINAL; i++)
            found = uuid_matches(e->uuid, g->uuid[i]);
        if (!found)
            return k;
    }
    return -1;
}

void
quota_key_text(const struct quota_entry *e, char *buf, size_t len)
{
    if (e->by_uuid)
        snprintf(buf, len, "%s", e->uuid);
    else
        snprintf(buf, len, "%d", e->ordinal);
}

void
quota_gpus_format(const struct quota_gpus *g, char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (g->n <= 0) {
        snprintf(buf, len, "none");
        return;
    }
    for (int i = 0; i < g->n && i < QUOTA_MAX_ORDINAL; i++)
        strbuf_append(buf, len, "%s%d: %s", i > 0 ? ", " : "", i, g->uuid[i]);
}

void
quota_unmatched_line(const struct quota_env *q, int k, const struct quota_gpus *g, char *buf,
                     size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (q == NULL || g == NULL || k < 0 || k >= q->n_entries || k >= QUOTA_MAX_ENTRIES)
        return;
    const struct quota_entry *e = &q->entries[k];
    const char *source = q->source != NULL ? q->source : "VRAM_LIMIT";
    char key[QUOTA_UUID_LEN];
    quota_key_text(e, key, sizeof key);
    /* HAMi's entries are variables of their own: name the variable. */
    if (strcmp(source, "VRAM_LIMIT") != 0)
        snprintf(buf, len, "%s_%d names no GPU (", source, e->ordinal);
    else
        snprintf(buf, len, "%s entry '%s' names no GPU (", source, key);
    char list[QUOTA_MAX_ORDINAL * (QUOTA_UUID_LEN + 6)];
    quota_gpus_format(g, list, sizeof list);
    strbuf_append(buf, len, "%s): it would limit nothing", list);
}
