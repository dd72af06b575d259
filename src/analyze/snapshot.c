/* SPDX-License-Identifier: MIT */
/*
** snapshot.c -- a trace as PyTorch's memory snapshot: the pickle that
** torch.cuda.memory._snapshot() returns and _dump_snapshot() writes, so
** that PyTorch's memory_viz (torch/cuda/_memory_viz.py and the page at
** pytorch.org/memory_viz) opens what vram recorded.
**
** The snapshot is a dict of
**   "segments": one per allocation live at the snapshot's point (the
**       peak, or a mark), each
**       holding one block: {"device", "address", "total_size",
**       "allocated_size", "active_size", "requested_size", "stream",
**       "segment_type", "segment_pool_id", "is_expandable", "frames",
**       "blocks": [{"address", "size", "requested_size", "state":
**       "active_allocated", "frames", "history": [{"addr", "real_size",
**       "frames"}]}]} (the block's "frames" for PyTorch 2, its "history"
**       for the readers of PyTorch 1.13);
**   "device_traces": per device, every event of the trace: {"action":
**       "alloc" | "free_requested" | "free_completed" | "oom", "addr",
**       "size", "stream", "time_us", "frames"} ("device_free" on "oom").
** Each allocation of vram record's traces is one cudaMalloc'd block of
** its own (the frameworks are steered to that), so one segment a block
** is what the recording saw. A trace keeps no addresses: each allocation
** gets one of its own, never reused, 512-byte aligned, from 0x7f0000000000
** up per device (PyTorch's readers match a free to its allocation by
** address). A frame is {"filename", "line", "name"}: Python frames as
** recorded, native ones with their module as the file and symbol+offset
** as the name, notes as "[note]".
**
** Written as pickle protocol 2 from plain data only (dicts, lists,
** strings, integers, booleans, None): no class is named, so the file
** loads with pickle.load and nothing else. Text is made valid UTF-8
** (a module path of other bytes gets '?' for them).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze_internal.h"

/* Where synthetic addresses of each device start, and their alignment. */
#define SNAP_BASE 0x7f0000000000ULL
#define SNAP_ALIGN 512ULL

/* Pickle opcodes (protocol 2). */
enum {
    P_PROTO = 0x80,
    P_EMPTY_DICT = '}',
    P_EMPTY_LIST = ']',
    P_MARK = '(',
    P_SETITEMS = 'u',
    P_APPENDS = 'e',
    P_BINUNICODE = 'X',
    P_BININT = 'J',
    P_LONG1 = 0x8a,
    P_NONE = 'N',
    P_TRUE = 0x88,
    P_FALSE = 0x89,
    P_TUPLE2 = 0x86,
    P_STOP = '.'
};

struct pk {
    FILE *out;
    bool failed;
};

static void
pk_byte(struct pk *p, int b)
{
    if (putc(b, p->out) == EOF)
        p->failed = true;
}

static void
pk_le(struct pk *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        pk_byte(p, (int)((v >> (8 * i)) & 0xff));
}

/* An integer from 0 to 2^64 - 1. */
static void
pk_uint(struct pk *p, uint64_t v)
{
    if (v < (1ULL << 31)) {
        pk_byte(p, P_BININT);
        pk_le(p, v, 4);
        return;
    }
    /* LONG1: little-endian two's complement; a ninth byte keeps a value
    ** with its top bit set positive. */
    int n = 1;
    while (n < 8 && (v >> (8 * n - 1)) != 0)
        n++;
    bool extra = n == 8 && (v >> 63) != 0;
    pk_byte(p, P_LONG1);
    pk_byte(p, n + extra);
    pk_le(p, v, n);
    if (extra)
        pk_byte(p, 0);
}

/* The length of the valid UTF-8 sequence at S (N bytes left), 0 if none. */
static size_t
utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
                             : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || len > n || (len == 2 && s[0] < 0xc2))
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

/* A string, its bytes that are not UTF-8 replaced by '?'. */
static void
pk_str(struct pk *p, const char *s)
{
    size_t n = strlen(s);
    pk_byte(p, P_BINUNICODE);
    pk_le(p, n, 4); /* each invalid byte becomes one '?': the length holds */
    for (size_t i = 0; i < n;) {
        size_t l = utf8_len((const unsigned char *)s + i, n - i);
        if (l == 0) {
            pk_byte(p, '?');
            i++;
            continue;
        }
        for (size_t k = 0; k < l; k++)
            pk_byte(p, (unsigned char)s[i + k]);
        i += l;
    }
}

/* KEY: the next value is its item (inside a MARK ... SETITEMS). */
static void
pk_key(struct pk *p, const char *key)
{
    pk_str(p, key);
}

/* The frames of SITE as a list of {"filename", "line", "name"}. */
static void
pk_frames(struct pk *p, const struct trace *t, uint32_t site)
{
    uint32_t n = 0;
    const uint32_t *f = trace_site_frames(t, site, &n);
    pk_byte(p, P_EMPTY_LIST);
    if (n == 0)
        return;
    pk_byte(p, P_MARK);
    for (uint32_t i = 0; i < n; i++) {
        const struct trace_frame *fr = &t->frames[f[i]];
        char name[1100];
        pk_byte(p, P_EMPTY_DICT);
        pk_byte(p, P_MARK);
        pk_key(p, "filename");
        pk_str(p, fr->kind == TRACE_FRAME_NOTE ? "" : fr->file);
        pk_key(p, "line");
        pk_uint(p, fr->kind == TRACE_FRAME_PY ? fr->line : 0);
        pk_key(p, "name");
        if (fr->kind == TRACE_FRAME_NATIVE)
            snprintf(name, sizeof name, "%s+0x%llx", fr->func[0] != '\0' ? fr->func : "?",
                     (unsigned long long)fr->offset);
        else if (fr->kind == TRACE_FRAME_NOTE)
            snprintf(name, sizeof name, "[%s]", fr->func);
        else
            snprintf(name, sizeof name, "%s", fr->func);
        pk_str(p, name);
        pk_byte(p, P_SETITEMS);
    }
    pk_byte(p, P_APPENDS);
}

/* One entry of a device trace. */
static void
pk_trace_entry(struct pk *p, const struct trace *t, const struct trace_event *ev,
               const char *action, uint64_t addr, uint32_t site)
{
    pk_byte(p, P_EMPTY_DICT);
    pk_byte(p, P_MARK);
    pk_key(p, "action");
    pk_str(p, action);
    pk_key(p, "addr");
    pk_uint(p, addr);
    pk_key(p, "size");
    pk_uint(p, ev->size);
    pk_key(p, "stream");
    pk_uint(p, ev->stream);
    pk_key(p, "time_us");
    pk_uint(p, ev->t_us);
    pk_key(p, "frames");
    pk_frames(p, t, site);
    if (ev->op == TRACE_OOM) {
        pk_key(p, "device_free");
        pk_uint(p, 0);
    }
    pk_byte(p, P_SETITEMS);
}

/* One segment of one block: the allocation EV made, at ADDR. */
static void
pk_segment(struct pk *p, const struct trace *t, const struct trace_event *ev, uint64_t addr)
{
    pk_byte(p, P_EMPTY_DICT);
    pk_byte(p, P_MARK);
    pk_key(p, "device");
    pk_uint(p, (uint64_t)(ev->device > 0 ? ev->device : 0));
    pk_key(p, "address");
    pk_uint(p, addr);
    pk_key(p, "total_size");
    pk_uint(p, ev->size);
    pk_key(p, "allocated_size");
    pk_uint(p, ev->size);
    pk_key(p, "active_size");
    pk_uint(p, ev->size);
    pk_key(p, "requested_size");
    pk_uint(p, ev->size);
    pk_key(p, "stream");
    pk_uint(p, ev->stream);
    pk_key(p, "segment_type");
    pk_str(p, ev->size <= (1ULL << 20) ? "small" : "large");
    pk_key(p, "segment_pool_id");
    pk_uint(p, 0);
    pk_uint(p, 0);
    pk_byte(p, P_TUPLE2);
    pk_key(p, "is_expandable");
    pk_byte(p, P_FALSE);
    pk_key(p, "frames");
    pk_frames(p, t, ev->site);
    pk_key(p, "blocks");
    pk_byte(p, P_EMPTY_LIST);
    pk_byte(p, P_MARK);
    pk_byte(p, P_EMPTY_DICT);
    pk_byte(p, P_MARK);
    pk_key(p, "address");
    pk_uint(p, addr);
    pk_key(p, "size");
    pk_uint(p, ev->size);
    pk_key(p, "requested_size");
    pk_uint(p, ev->size);
    pk_key(p, "state");
    pk_str(p, "active_allocated");
    pk_key(p, "frames");
    pk_frames(p, t, ev->site);
    pk_key(p, "history");
    pk_byte(p, P_EMPTY_LIST);
    pk_byte(p, P_MARK);
    pk_byte(p, P_EMPTY_DICT);
    pk_byte(p, P_MARK);
    pk_key(p, "addr");
    pk_uint(p, addr);
    pk_key(p, "real_size");
    pk_uint(p, ev->size);
    pk_key(p, "frames");
    pk_frames(p, t, ev->site);
    pk_byte(p, P_SETITEMS);
    pk_byte(p, P_APPENDS);
    pk_byte(p, P_SETITEMS);
    pk_byte(p, P_APPENDS);
    pk_byte(p, P_SETITEMS);
}

uint64_t
an_peak_event(const struct trace *t)
{
    uint64_t live = 0, best = 0, at = t->n_events > 0 ? t->n_events - 1 : 0;
    for (uint64_t i = 0; i < t->n_events; i++) {
        const struct trace_event *ev = &t->events[i];
        if (ev->slot >= t->n_slots)
            continue;
        if (ev->op == TRACE_ALLOC)
            live += ev->size;
        else if (ev->op == TRACE_FREE)
            live -= ev->size;
        if (live > best) {
            best = live;
            at = i;
        }
    }
    return at;
}

vram_status
an_write_torch_snapshot(FILE *out, const struct trace *t, uint64_t live_at)
{
    if (out == NULL || t == NULL)
        return error_set(VRAM_E_INVALID, "an_write_torch_snapshot: NULL argument");
    uint64_t n = t->n_events;
    int devices = t->n_devices > 0 ? t->n_devices : 1;
    uint64_t *addr = calloc(t->n_slots > 0 ? t->n_slots : 1, sizeof *addr);
    uint64_t *born = calloc(t->n_slots > 0 ? t->n_slots : 1, sizeof *born);
    uint64_t *next = calloc((size_t)devices, sizeof *next);
    bool *alive = calloc(t->n_slots > 0 ? t->n_slots : 1, sizeof *alive);
    if (addr == NULL || born == NULL || next == NULL || alive == NULL) {
        free(addr);
        free(born);
        free(next);
        free(alive);
        return no_memory();
    }
    /* Addresses in order of birth, and the live set after event LIVE_AT. */
    for (uint64_t i = 0; i < n; i++) {
        const struct trace_event *ev = &t->events[i];
        if (ev->slot >= t->n_slots)
            continue;
        if (ev->op == TRACE_ALLOC) {
            int d = ev->device > 0 && ev->device < devices ? ev->device : 0;
            addr[ev->slot] = SNAP_BASE + next[d];
            next[d] += (ev->size + SNAP_ALIGN - 1) / SNAP_ALIGN * SNAP_ALIGN + SNAP_ALIGN;
            born[ev->slot] = i;
            alive[ev->slot] = i <= live_at;
        } else if (ev->op == TRACE_FREE && i <= live_at) {
            alive[ev->slot] = false;
        }
    }

    struct pk p = {out, false};
    pk_byte(&p, P_PROTO);
    pk_byte(&p, 2);
    pk_byte(&p, P_EMPTY_DICT);
    pk_byte(&p, P_MARK);
    pk_key(&p, "segments");
    pk_byte(&p, P_EMPTY_LIST);
    bool any = false;
    for (uint32_t s = 0; s < t->n_slots; s++) {
        if (!alive[s])
            continue;
        if (!any)
            pk_byte(&p, P_MARK);
        any = true;
        pk_segment(&p, t, &t->events[born[s]], addr[s]);
    }
    if (any)
        pk_byte(&p, P_APPENDS);
    pk_key(&p, "device_traces");
    pk_byte(&p, P_EMPTY_LIST);
    pk_byte(&p, P_MARK);
    for (int d = 0; d < devices; d++) {
        pk_byte(&p, P_EMPTY_LIST);
        bool open = false;
        for (uint64_t i = 0; i < n; i++) {
            const struct trace_event *ev = &t->events[i];
            int dev = ev->device > 0 ? ev->device : 0;
            if (dev != d || (ev->op != TRACE_ALLOC && ev->op != TRACE_FREE && ev->op != TRACE_OOM))
                continue;
            if (!open)
                pk_byte(&p, P_MARK);
            open = true;
            if (ev->op == TRACE_ALLOC) {
                pk_trace_entry(&p, t, ev, "alloc", addr[ev->slot], ev->site);
            } else if (ev->op == TRACE_FREE) {
                uint32_t site = t->events[born[ev->slot]].site;
                pk_trace_entry(&p, t, ev, "free_requested", addr[ev->slot], site);
                pk_trace_entry(&p, t, ev, "free_completed", addr[ev->slot], site);
            } else {
                pk_trace_entry(&p, t, ev, "oom", 0, ev->site);
            }
        }
        if (open)
            pk_byte(&p, P_APPENDS);
    }
    pk_byte(&p, P_APPENDS);
    pk_byte(&p, P_SETITEMS);
    pk_byte(&p, P_STOP);
    free(addr);
    free(born);
    free(next);
    free(alive);
    if (p.failed || fflush(out) != 0 || ferror(out))
        return error_set(VRAM_E_IO, "writing the snapshot failed");
    return VRAM_OK;
}
