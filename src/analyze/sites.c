/* SPDX-License-Identifier: MIT */
/*
** sites.c -- the leak suspects and the peak's live set grouped by the code
** that allocated them, for traces with call sites (format 2 of
** docs/TRACE_FORMAT.md).
**
** Allocations are grouped by their site's headline: the innermost Python
** frame of the program's own code (not of an installed package or of
** Python's library: PyTorch's nn.Linear is not where the model leaks), else
** the innermost frame that is not a note (a package's Python line, else
** the innermost native frame), together with the note before it if any (an
** allocation made without the GIL is kept apart from one read directly,
** even where both name the same line). Stacks that differ only in their
** callers fall into one group; the group shows the stack of its site with
** the most bytes.
*/
#include <stdio.h>
#include <string.h>

#include "analyze/analyze_internal.h"

/* The frame index of no frame. */
#define NO_FRAME UINT32_MAX

/* Whether FILE is a library's: an installed package or Python's own. */
static bool
library_file(const char *file)
{
    return strstr(file, "/site-packages/") != NULL || strstr(file, "/dist-packages/") != NULL ||
           strstr(file, "/lib/python3") != NULL || file[0] == '<';
}

static uint64_t
site_key(const struct trace *t, uint32_t site)
{
    uint32_t n, i, note = NO_FRAME, head = NO_FRAME;
    const uint32_t *f = trace_site_frames(t, site, &n);

    for (i = 0; i < n; i++) {
        const struct trace_frame *fr = &t->frames[f[i]];
        if (fr->kind == TRACE_FRAME_PY && !library_file(fr->file))
            return (uint64_t)note << 32 | f[i];
        if (fr->kind != TRACE_FRAME_NOTE && head == NO_FRAME)
            head = f[i];
        if (fr->kind == TRACE_FRAME_NOTE && note == NO_FRAME && head == NO_FRAME)
            note = f[i];
    }
    return (uint64_t)note << 32 | head;
}

/* The sites of T grouped: GROUP[s] for site s (0: no site) is the index of
** its group in KEYS (sorted, distinct; keys[0] is the no-site group's). */
struct site_groups {
    uint32_t *group; /* t->n_sites + 1 */
    uint64_t *keys;
    size_t n;
};

static void
groups_free(struct site_groups *g)
{
    free(g->group);
    free(g->keys);
}

static vram_status
groups_build(const struct trace *t, struct site_groups *g)
{
    uint32_t s;
    size_t i, k;

    memset(g, 0, sizeof *g);
    g->group = calloc((size_t)t->n_sites + 1, sizeof *g->group);
    g->keys = calloc((size_t)t->n_sites + 1, sizeof *g->keys);
    if (g->group == NULL || g->keys == NULL) {
        groups_free(g);
        return no_memory();
    }
    for (s = 1; s <= t->n_sites; s++)
        g->keys[s - 1] = site_key(t, s);
    qsort(g->keys, t->n_sites, sizeof *g->keys, cmp_u64);
    /* The no-site group first: its key sorts above every real one. */
    for (i = 0, k = 0; i < t->n_sites; i++)
        if (k == 0 || g->keys[k - 1] != g->keys[i])
            g->keys[k++] = g->keys[i];
    memmove(g->keys + 1, g->keys, k * sizeof *g->keys);
    g->keys[0] = UINT64_MAX;
    g->n = k + 1;
    for (s = 1; s <= t->n_sites; s++) {
        uint64_t key = site_key(t, s);
        size_t lo = 1, hi = g->n;
        while (lo + 1 < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (g->keys[mid] <= key)
                lo = mid;
            else
                hi = mid;
        }
        g->group[s] = (uint32_t)lo;
    }
    return VRAM_OK;
}

static int
cmp_site_bytes(const void *a, const void *b)
{
    const struct an_site *x = a, *y = b;
    /* Leak groups: those born in the most iterations first (the tensor
    ** kept every step, not a workspace made once), then by bytes. */
    int c = order_u64_2(y->iters, x->iters, y->bytes, x->bytes);
    return c != 0 ? c : order_u64(x->site, y->site);
}

/*
** Accumulate N allocations (site, size, iteration of birth or AN_NO_ITER)
** from NEXT into groups, keep the non-empty ones, largest first.
*/
struct alloc_ref {
    uint32_t site;
    uint32_t born;
    uint64_t size;
};

static vram_status
group_allocs(const struct trace *t, const struct alloc_ref *a, size_t n, size_t n_iters,
             struct an_site **out, size_t *n_out)
{
    struct site_groups g;
    struct an_site *sites;
    uint64_t *site_bytes = NULL;
    unsigned char *seen = NULL; /* group x iteration: a birth there */
    size_t i, k;
    vram_status st;

    *out = NULL;
    *n_out = 0;
    if (t->n_sites == 0 || n == 0)
        return VRAM_OK;
    if ((st = groups_build(t, &g)) != VRAM_OK)
        return st;
    sites = calloc(g.n, sizeof *sites);
    site_bytes = calloc((size_t)t->n_sites + 1, sizeof *site_bytes);
    if (n_iters > 0 && g.n <= SIZE_MAX / n_iters)
        seen = calloc(g.n * n_iters, 1);
    if (sites == NULL || site_bytes == NULL || (n_iters > 0 && seen == NULL)) {
        free(sites);
        free(site_bytes);
        free(seen);
        groups_free(&g);
        return no_memory();
    }
    for (k = 0; k < g.n; k++) {
        sites[k].note = (uint32_t)(g.keys[k] >> 32);
        sites[k].frame = (uint32_t)g.keys[k];
        sites[k].first_iter = AN_NO_ITER;
        if (k == 0)
            sites[k].note = sites[k].frame = NO_FRAME;
    }
    for (i = 0; i < n; i++) {
        uint32_t s = a[i].site <= t->n_sites ? a[i].site : TRACE_NO_SITE;
        struct an_site *x = &sites[g.group[s]];
        x->count++;
        x->bytes += a[i].size;
        site_bytes[s] += a[i].size;
        if (a[i].born != AN_NO_ITER && a[i].born < n_iters) {
            unsigned char *b = &seen[(size_t)g.group[s] * n_iters + a[i].born];
            x->iters += *b == 0;
            *b = 1;
            if (x->first_iter == AN_NO_ITER || a[i].born < x->first_iter)
                x->first_iter = a[i].born;
            if (a[i].born > x->last_iter)
                x->last_iter = a[i].born;
        }
    }
    /* Each group's stack: its site with the most bytes. */
    for (uint32_t s = 1; s <= t->n_sites; s++) {
        struct an_site *x = &sites[g.group[s]];
        if (site_bytes[s] > 0 && (x->site == 0 || site_bytes[s] > site_bytes[x->site]))
            x->site = s;
    }
    for (i = 0, k = 0; i < g.n; i++)
        if (sites[i].count > 0)
            sites[k++] = sites[i];
    qsort(sites, k, sizeof *sites, cmp_site_bytes);
    free(site_bytes);
    free(seen);
    groups_free(&g);
    if (k == 0) {
        free(sites);
        return VRAM_OK;
    }
    *out = sites;
    *n_out = k;
    return VRAM_OK;
}

vram_status
an_leak_sites(struct an_result *r)
{
    const struct trace *t = r->trace;
    struct alloc_ref *a;
    vram_status st;

    if (t->n_sites == 0 || r->n_suspects == 0)
        return VRAM_OK;
    a = calloc(r->n_suspects, sizeof *a);
    if (a == NULL)
        return no_memory();
    for (size_t i = 0; i < r->n_suspects; i++)
        a[i] = (struct alloc_ref){r->suspects[i].site, r->suspects[i].born,
                                  r->suspects[i].size};
    st = group_allocs(t, a, r->n_suspects, r->n_iters, &r->leak_sites, &r->n_leak_sites);
    free(a);
    /* The iterations a suspect can be born in (find_suspects): from the
     * second (the first is a warm-up) to the one before the fit's last. */
    size_t last_fit = r->leak_iters_used < r->n_iters ? r->leak_iters_used : r->n_iters - 1;
    r->leak_site_iters = last_fit >= 2 ? last_fit - 1 : 0;
    return st;
}

vram_status
an_alive_sites(const struct trace *t, const bool *alive, const uint64_t *born_event,
               struct an_site **out, size_t *n_out)
{
    struct alloc_ref *a;
    size_t n = 0, k = 0;
    vram_status st;

    *out = NULL;
    *n_out = 0;
    if (t->n_sites == 0)
        return VRAM_OK;
    for (uint32_t s = 0; s < t->n_slots; s++)
        n += alive[s];
    if (n == 0)
        return VRAM_OK;
    a = calloc(n, sizeof *a);
    if (a == NULL)
        return no_memory();
    for (uint32_t s = 0; s < t->n_slots; s++) {
        if (!alive[s])
            continue;
        const struct trace_event *ev = &t->events[born_event[s]];
        a[k++] = (struct alloc_ref){ev->site, AN_NO_ITER, ev->size};
    }
    st = group_allocs(t, a, n, 0, out, n_out);
    free(a);
    return st;
}

/* The last path component of PATH. */
static const char *
base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL && slash[1] != '\0' ? slash + 1 : path;
}

const char *
an_frame_text(const struct trace *t, uint32_t frame, bool full, char *buf, size_t len)
{
    const struct trace_frame *f;

    if (frame == NO_FRAME || frame >= t->n_frames) {
        snprintf(buf, len, "(no call site recorded)");
        return buf;
    }
    f = &t->frames[frame];
    switch (f->kind) {
    case TRACE_FRAME_PY:
        snprintf(buf, len, "%s:%u in %s", full ? f->file : base_name(f->file),
                 (unsigned)f->line, f->func);
        break;
    case TRACE_FRAME_NATIVE:
        if (f->func[0] != '\0')
            snprintf(buf, len, "%s (%s+0x%llx)", f->func, full ? f->file : base_name(f->file),
                     (unsigned long long)f->offset);
        else
            snprintf(buf, len, "%s+0x%llx", full ? f->file : base_name(f->file),
                     (unsigned long long)f->offset);
        break;
    default:
        snprintf(buf, len, "[%s]", f->func);
        break;
    }
    return buf;
}

const char *
an_site_headline(const struct trace *t, const struct an_site *s, char *buf, size_t len)
{
    char head[600];

    if (s->site == TRACE_NO_SITE)
        return an_frame_text(t, NO_FRAME, false, buf, len);
    an_frame_text(t, s->frame, false, head, sizeof head);
    if (s->note != NO_FRAME && s->frame != NO_FRAME)
        snprintf(buf, len, "%s [%s]", head, t->frames[s->note].func);
    else if (s->note != NO_FRAME)
        snprintf(buf, len, "[%s]", t->frames[s->note].func);
    else
        snprintf(buf, len, "%s", head);
    return buf;
}
