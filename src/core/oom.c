/* SPDX-License-Identifier: MIT */
/*
** oom.c -- what the user reads when memory runs out: one line that says
** what was asked, what is held and the one setting worth trying (its
** value as the setting takes it, so that it can be pasted: "try
** VRAM_MEMORY_LIMIT=5G"), and on request the full dump TensorFlow users
** know (bins, regions, block map, occupancy map).
*/
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/size.h"
#include "core/internal.h"

/* Width of the occupancy map, as TensorFlow prints it. */
#define OCCUPANCY_WIDTH 100

/* The most any cap on DEV's physical device could be: its total memory.
** The hints compare what the job needs with it, to tell a cap that is too
** small from a GPU that is. */
static uint64_t
device_ceiling(const struct vram_device *dev)
{
    const struct physical *p = &dev->ctx->phys[dev->physical];
    return p->info.total_bytes;
}

void
oom_explain_locked(struct vram_device *dev, uint64_t size, char *buf, size_t len)
{
    char req[32], use[32], res[32], cap[32], big[32], need[32];
    uint64_t in_use = dev->heap.bytes_in_use;
    uint64_t reserved = device_reserved_locked(dev);
    uint64_t largest = heap_largest_free(&dev->heap);
    const char *strategy = vram_strategy_name(dev->strategy);
    size_format(size, req, sizeof req);
    size_format(in_use, use, sizeof use);
    size_format(reserved, res, sizeof res);
    size_format(dev->limit, cap, sizeof cap);
    size_format(largest, big, sizeof big);

    /* The one setting worth trying, never one already in force. */
    char hint[200];
    uint64_t needed = in_use + size;
    uint64_t ceiling = device_ceiling(dev);
    if (needed <= dev->limit) {
        /* Enough bytes under the cap, but not in one piece: expandable
        ** merges all free space; elsewhere, headroom is what helps. */
        if (!dev->policy.virtual_range)
            snprintf(hint, sizeof hint, "free memory is fragmented: try VRAM_STRATEGY=expandable");
        else if (needed + needed / 8 < ceiling) {
            uint64_t gib = (needed + needed / 8 + (1ULL << 30) - 1) >> 30 << 30;
            snprintf(hint, sizeof hint,
                     "free memory is fragmented: leave headroom with VRAM_MEMORY_LIMIT=%s",
                     size_format_setting(gib, need, sizeof need));
        } else {
            snprintf(hint, sizeof hint,
                     "free memory is fragmented and the GPU is nearly full: reduce the batch "
                     "size");
        }
    } else if (needed < ceiling && dev->limit < ceiling) {
        uint64_t gib = (needed + (1ULL << 30) - 1) >> 30 << 30;
        if (gib > ceiling)
            gib = ceiling;
        snprintf(hint, sizeof hint,
                 "the cap is too small for this job: try VRAM_MEMORY_LIMIT=%s",
                 size_format_setting(gib, need, sizeof need));
    } else {
        snprintf(hint, sizeof hint,
                 "the job needs more than the GPU has: reduce the batch size, use mixed "
                 "precision or gradient accumulation");
    }
    snprintf(
        buf, len,
        "out of memory on GPU:%d (%s): tried to allocate %s; %s in use, %s reserved, "
        "cap %s, largest free block %s; %s",
        dev->index, strategy ? strategy : "?", req, use, res, cap, big, hint);
}

static const char *
occupancy_char(uint64_t used, uint64_t span)
{
    if (used == 0)
        return ".";
    if (used * 2 < span)
        return "-";
    if (used < span)
        return "+";
    return "*";
}

/* One region's occupancy as OCCUPANCY_WIDTH characters: '.' free, '-'
** under half used, '+' over half, '*' full. */
static int
dump_occupancy(const struct region *r, FILE *out)
{
    uint64_t span = (r->size + OCCUPANCY_WIDTH - 1) / OCCUPANCY_WIDTH;
    const struct block *b = r->first;
    if (fputs("    [", out) < 0)
        return -1;
    for (int i = 0; i < OCCUPANCY_WIDTH; i++) {
        uint64_t lo = r->base + (uint64_t)i * span, hi = lo + span, used = 0;
        if (hi > r->base + r->size)
            hi = r->base + r->size;
        while (b != NULL && b->addr + b->size <= lo)
            b = b->next;
        for (const struct block *c = b; c != NULL && c->addr < hi; c = c->next) {
            if (c->free)
                continue;
            uint64_t s = c->addr > lo ? c->addr : lo;
            uint64_t e = c->addr + c->size < hi ? c->addr + c->size : hi;
            used += e - s;
        }
        fputs(lo >= hi ? " " : occupancy_char(used, hi - lo), out);
    }
    return fputs("]\n", out) < 0 ? -1 : 0;
}

vram_status
oom_dump_locked(struct vram_device *dev, FILE *out)
{
    const struct heap *h = &dev->heap;
    char a[32], b[32], c[32];
    int rc = 0;
    rc |= fprintf(out, "==== vram dump: GPU:%d (physical %d, %s) ====\n", dev->index,
                  dev->physical, vram_strategy_name(dev->strategy)) < 0;
    rc |= fprintf(out, "Limit:            %20" PRIu64 " (%s)\n", dev->limit,
                  size_format(dev->limit, a, sizeof a)) < 0;
    rc |= fprintf(out, "InUse:            %20" PRIu64 " (%s)\n", h->bytes_in_use,
                  size_format(h->bytes_in_use, a, sizeof a)) < 0;
    rc |= fprintf(out, "MaxInUse:         %20" PRIu64 "\n", dev->peak_in_use) < 0;
    rc |= fprintf(out, "Reserved:         %20" PRIu64 "\n",
                  device_reserved_locked(dev)) < 0;
    rc |= fprintf(out, "MaxReserved:      %20" PRIu64 "\n", dev->peak_reserved) < 0;
    rc |= fprintf(out, "NumAllocs:        %20" PRIu64 "\n", dev->num_allocs) < 0;
    rc |= fprintf(out, "NumOOMs:          %20" PRIu64 "\n", dev->num_ooms) < 0;
    rc |= fprintf(out, "LargestFreeBlock: %20" PRIu64 "\n", heap_largest_free(h)) < 0;
    if (dev->last_oom[0] != '\0')
        rc |= fprintf(out, "Last OOM: %s\n", dev->last_oom) < 0;

    rc |= fputs("-- free blocks by size class --\n", out) < 0;
    for (uint32_t k = 0; k < HEAP_CLASSES; k++) {
        if (h->lists[k] == NULL)
            continue;
        uint64_t n = 0, bytes = 0;
        for (const struct block *f = h->lists[k]; f != NULL; f = f->fnext) {
            n++;
            bytes += f->size;
        }
        rc |= fprintf(out, "  class %4u (>= %s): %" PRIu64 " blocks, %s\n", k,
                      size_format(heap_class_min(k), a, sizeof a), n,
                      size_format(bytes, b, sizeof b)) < 0;
    }
    rc |= fputs("-- regions and blocks --\n", out) < 0;
    for (const struct region *r = h->regions; r != NULL; r = r->next) {
        rc |= fprintf(out, "Region 0x%" PRIx64 " size %s, %" PRIu64 " live blocks\n",
                      r->base, size_format(r->size, a, sizeof a), r->live) < 0;
        for (const struct block *k = r->first; k != NULL; k = k->next) {
            if (k->free)
                rc |= fprintf(out, "  Free  at 0x%" PRIx64 " size %s\n", k->addr,
                              size_format(k->size, a, sizeof a)) < 0;
            else
                rc |= fprintf(out,
                              "  InUse at 0x%" PRIx64 " size %s requested %s stream %p\n",
                              k->addr, size_format(k->size, b, sizeof b),
                              size_format(k->requested, c, sizeof c), k->stream) < 0;
        }
        rc |= dump_occupancy(r, out) != 0;
    }
    rc |= fputs("==== end of dump ====\n", out) < 0;
    return rc ? VRAM_E_IO : VRAM_OK;
}
