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

/* The innermost Python frame of the program's own code in site SITE's
** stack; NO_FRAME when it has none. */
static uint32_t
own_frame(const struct trace *t, uint32_t site)
{
    uint32_t n;
    const uint32_t *f = trace_site_frames(t, site, &n);
    for (uint32_t i = 0; i < n; i++) {
        const struct trace_frame *fr = &t->frames[f[i]];
        if (fr->kind == TRACE_FRAME_PY && !library_file(fr->file))
            return f[i];
    }
    return NO_FRAME;
}

/*
** The line that keeps the memory. A leak group's headline is, walking the
** program's own Python frames of the stack from the innermost out, the
** first frame through which at least KEEP_SHARE of what was allocated in
** the suspects' iterations outlived the fit. A helper that allocates both
** for a line that keeps the tensor and for lines that drop theirs
** (make_buffer() under cache.append(make_buffer(n)) and under
** tmp = make_buffer(n)) keeps half of what it makes; the line that keeps
** keeps all of it. Where no frame keeps that much, or the stacks do not
** tell the lines apart (one caller only), the headline stays the innermost
** frame, as for the peak.
*/
#define KEEP_SHARE 0.9

struct keep_counts {
    uint64_t *made; /* per frame: allocations of the window made through it */
    uint64_t *kept; /* ... of which outlived the fit */
};

static vram_status
keep_count(const struct trace *t, const struct an_born *born, size_t n_born,
           struct keep_counts *k)
{
    k->made = calloc((size_t)t->n_frames + 1, sizeof *k->made);
    k->kept = calloc((size_t)t->n_frames + 1, sizeof *k->kept);
    if (k->made == NULL || k->kept == NULL) {
        free(k->made);
        free(k->kept);
        return no_memory();
    }
    for (size_t i = 0; i < n_born; i++) {
        uint32_t n;
        const uint32_t *f = trace_site_frames(t, born[i].site, &n);
        for (uint32_t j = 0; j < n; j++) {
            if (f[j] >= t->n_frames)
                continue;
            k->made[f[j]]++;
            k->kept[f[j]] += born[i].kept;
        }
    }
    return VRAM_OK;
}

/* The key of site SITE for the leak: its note and the frame that keeps
** (above), else site_key's. */
static uint64_t
keeper_key(const struct trace *t, uint32_t site, const struct keep_counts *k)
{
    uint64_t key = site_key(t, site);
    uint32_t n;
    const uint32_t *f = trace_site_frames(t, site, &n);
    for (uint32_t i = 0; i < n; i++) {
        const struct trace_frame *fr = &t->frames[f[i]];
        if (fr->kind != TRACE_FRAME_PY || library_file(fr->file) || f[i] >= t->n_frames)
            continue;
        if (k->made[f[i]] > 0 && (double)k->kept[f[i]] >= KEEP_SHARE * (double)k->made[f[i]])
            return (key & ~(uint64_t)UINT32_MAX) | f[i];
    }
    return key;
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

/* Group T's sites by their key: site_key's, or with KEEP (the leak) the
** frame that keeps the memory. */
static vram_status
groups_build(const struct trace *t, const struct keep_counts *keep, struct site_groups *g)
{
    uint32_t s;
    size_t i, k;
    uint64_t *site_keys;

    memset(g, 0, sizeof *g);
    g->group = calloc((size_t)t->n_sites + 1, sizeof *g->group);
    g->keys = calloc((size_t)t->n_sites + 1, sizeof *g->keys);
    site_keys = calloc((size_t)t->n_sites + 1, sizeof *site_keys);
    if (g->group == NULL || g->keys == NULL || site_keys == NULL) {
        free(site_keys);
        groups_free(g);
        return no_memory();
    }
    for (s = 1; s <= t->n_sites; s++)
        site_keys[s] = keep != NULL ? keeper_key(t, s, keep) : site_key(t, s);
    for (s = 1; s <= t->n_sites; s++)
        g->keys[s - 1] = site_keys[s];
    qsort(g->keys, t->n_sites, sizeof *g->keys, cmp_u64);
    /* The no-site group first: its key sorts above every real one. */
    for (i = 0, k = 0; i < t->n_sites; i++)
        if (k == 0 || g->keys[k - 1] != g->keys[i])
            g->keys[k++] = g->keys[i];
    memmove(g->keys + 1, g->keys, k * sizeof *g->keys);
    g->keys[0] = UINT64_MAX;
    g->n = k + 1;
    for (s = 1; s <= t->n_sites; s++) {
        uint64_t key = site_keys[s];
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
    free(site_keys);
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
             const struct keep_counts *keep, struct an_site **out, size_t *n_out)
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
    if ((st = groups_build(t, keep, &g)) != VRAM_OK)
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
        sites[k].made_at = NO_FRAME;
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
    /* Where the headline keeps what another frame made, that frame too. */
    for (k = 1; keep != NULL && k < g.n; k++) {
        uint32_t made = sites[k].site != TRACE_NO_SITE ? own_frame(t, sites[k].site) : NO_FRAME;
        if (made != NO_FRAME && made != sites[k].frame)
            sites[k].made_at = made;
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

/* An id and the index of its last "#@held" line. */
struct held_ref {
    uint64_t id;
    uint64_t k;
};

static int
cmp_held_ref(const void *a, const void *b)
{
    const struct held_ref *x = a, *y = b;
    return order_u64_2(x->id, y->id, x->k, y->k);
}

/* The last "#@held" text of allocation ID in the sorted REFS (N), or NULL. */
static const char *
held_text(const struct trace *t, const struct held_ref *refs, size_t n, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) { /* the first ref with an id above ID */
        size_t mid = lo + (hi - lo) / 2;
        if (refs[mid].id <= id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && refs[lo - 1].id == id ? t->held[refs[lo - 1].k].text : NULL;
}

/* A suspect's leak group and holder. */
struct group_text {
    size_t group;
    const char *text;
};

static int
cmp_group_text(const void *a, const void *b)
{
    const struct group_text *x = a, *y = b;
    int c = order_u64(x->group, y->group);
    return c != 0 ? c : strcmp(x->text, y->text);
}

/*
** What holds each leak group's suspects: the most common of their last
** "#@held" texts (the variable or container that refers to the tensor,
** as the Python side of vram record named it), with how many it holds.
*/
static vram_status
leak_holders(struct an_result *r, const struct keep_counts *keep)
{
    const struct trace *t = r->trace;
    if (t->n_held == 0 || r->n_leak_sites == 0)
        return VRAM_OK;
    struct held_ref *refs = calloc(t->n_held, sizeof *refs);
    struct group_text *gt = calloc(r->n_suspects, sizeof *gt);
    if (refs == NULL || gt == NULL) {
        free(refs);
        free(gt);
        return no_memory();
    }
    for (uint64_t k = 0; k < t->n_held; k++)
        refs[k] = (struct held_ref){t->held[k].id, k};
    qsort(refs, t->n_held, sizeof *refs, cmp_held_ref);
    size_t n = 0;
    for (size_t i = 0; i < r->n_suspects; i++) {
        const char *text = held_text(t, refs, t->n_held, r->suspects[i].id);
        uint32_t site = r->suspects[i].site <= t->n_sites ? r->suspects[i].site : 0;
        if (text == NULL || site == TRACE_NO_SITE)
            continue;
        /* The suspect's group: the one with its key (there are few). */
        uint64_t key = keeper_key(t, site, keep);
        for (size_t k = 0; k < r->n_leak_sites; k++) {
            const struct an_site *x = &r->leak_sites[k];
            if (x->site != TRACE_NO_SITE && ((uint64_t)x->note << 32 | x->frame) == key) {
                gt[n++] = (struct group_text){k, text};
                break;
            }
        }
    }
    /* Per group, the text that holds the most of its suspects. */
    qsort(gt, n, sizeof *gt, cmp_group_text);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && gt[j].group == gt[i].group && strcmp(gt[j].text, gt[i].text) == 0)
            j++;
        struct an_site *x = &r->leak_sites[gt[i].group];
        if (j - i > x->held_count) {
            x->held_count = j - i;
            x->held_by = gt[i].text;
        }
        i = j;
    }
    free(refs);
    free(gt);
    return VRAM_OK;
}

vram_status
an_leak_sites(struct an_result *r, const struct an_born *born, size_t n_born)
{
    const struct trace *t = r->trace;
    struct alloc_ref *a;
    struct keep_counts keep;
    vram_status st;

    if (t->n_sites == 0 || r->n_suspects == 0)
        return VRAM_OK;
    if ((st = keep_count(t, born, n_born, &keep)) != VRAM_OK)
        return st;
    a = calloc(r->n_suspects, sizeof *a);
    if (a == NULL) {
        free(keep.made);
        free(keep.kept);
        return no_memory();
    }
    for (size_t i = 0; i < r->n_suspects; i++)
        a[i] = (struct alloc_ref){r->suspects[i].site, r->suspects[i].born,
                                  r->suspects[i].size};
    st = group_allocs(t, a, r->n_suspects, r->n_iters, &keep, &r->leak_sites,
                      &r->n_leak_sites);
    if (st == VRAM_OK)
        st = leak_holders(r, &keep);
    free(a);
    free(keep.made);
    free(keep.kept);
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
    st = group_allocs(t, a, n, 0, NULL, out, n_out);
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
    if (s->made_at != NO_FRAME && s->made_at < t->n_frames) {
        char made[300];
        size_t used = strlen(head);
        snprintf(head + used, sizeof head - used, " (allocated in %s)",
                 an_frame_text(t, s->made_at, false, made, sizeof made));
    }
    if (s->note != NO_FRAME && s->frame != NO_FRAME)
        snprintf(buf, len, "%s [%s]", head, t->frames[s->note].func);
    else if (s->note != NO_FRAME)
        snprintf(buf, len, "[%s]", t->frames[s->note].func);
    else
        snprintf(buf, len, "%s", head);
    return buf;
}
