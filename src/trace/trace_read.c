/* SPDX-License-Identifier: MIT */
/*
** trace_read.c -- load a trace file (docs/TRACE_FORMAT.md) into memory,
** validated, with every id mapped to a dense slot.
**
** The file is read in large chunks, inflated with zlib when it starts
** with the gzip magic (plain text otherwise: the name does not matter),
** and split into lines and fields here, by hand: the largest shared trace
** (1.5 million events, 49 MB of text) must load in a fraction of a
** second, and a getline/strtoull loop spends most of that in libc. Ids
** are looked up in an open-addressing table of our own.
**
** Marks ('m') and refused allocations ('o') are kept as events in order,
** but take no slot and no live bytes; mark labels are stored once each
** (a hash table of our own finds repeats) and events name them by index.
**
** Every error path frees what was built so far; OUT is written only on
** success.
*/
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "trace/trace.h"

/* Longest line accepted, not counting its "\n" or "\r\n". Real lines are
** under 100 bytes; the limit keeps a binary or corrupt file from being
** taken as one enormous line. */
#define TRACE_MAX_LINE 4096

/* Bytes of text taken from the source at a time. */
#define READ_CHUNK (1u << 20)

/* Highest logical device a trace may name: far above any machine, low
** enough that replays can size per-device arrays from n_devices. */
#define TRACE_MAX_DEVICE 1023

/* Initial capacities; all grow by doubling. */
#define EVENTS_INITIAL 4096
#define IDS_INITIAL_BITS 12
#define LABELS_INITIAL_BITS 6

/*
** X(role, header name, required, number): the columns a reader understands.
** A header may name them in any order; other columns are ignored so that
** the format can grow without breaking this reader. NUMBER is where a plain
** decimal column goes in struct trace_event (NOT_NUMBER for the others,
** which parse_event reads by name).
*/
#define NOT_NUMBER SIZE_MAX
#define EVENT_NUMBER(member) offsetof(struct trace_event, member)
#define TRACE_COLUMN_LIST(X)                                                             \
    X(COL_T_US, "t_us", true, EVENT_NUMBER(t_us))                                        \
    X(COL_OP, "op", true, NOT_NUMBER)                                                    \
    X(COL_ID, "id", true, EVENT_NUMBER(id))                                              \
    X(COL_SIZE, "size", true, EVENT_NUMBER(size))                                        \
    X(COL_STREAM, "stream", true, EVENT_NUMBER(stream))                                  \
    X(COL_DEVICE, "device", false, NOT_NUMBER)                                           \
    X(COL_LABEL, "label", false, NOT_NUMBER)                                             \
    X(COL_SITE, "site", false, NOT_NUMBER)

/* clang-format off */
enum column_role {
    COL_IGNORED = 0,
#define X_(role, name, required, number) role,
    TRACE_COLUMN_LIST(X_)
#undef X_
    COL_COUNT
};

static const struct {
    const char *name;
    bool required;
    size_t number; /* offset of its uint64_t in struct trace_event, or NOT_NUMBER */
} columns[COL_COUNT] = {
    [COL_IGNORED] = {"", false, NOT_NUMBER},
#define X_(role, name, required, number) [role] = {name, required, number},
    TRACE_COLUMN_LIST(X_)
#undef X_
};
/* clang-format on */

/*
** What the loader knows of one id: its bucket in the id table. The table
** maps id -> slot with open addressing and linear probing, kept at most
** half full. Slot information lives in the bucket itself, so that
** checking an event touches one cache line.
**
** The hash keeps the low bits of the id and folds the high bits onto
** them: the ids of real traces are sequential, so consecutive ids land in
** consecutive buckets and an allocation and its free, usually close in
** time, find their bucket still in cache. (A multiplicative hash
** scattered them over the whole table, a cache miss per event, and made
** the largest trace load half again as slowly.)
*/
struct id_entry {
    uint64_t id;
    uint64_t size;  /* bytes, as allocated */
    uint32_t slot;  /* slot + 1; 0 marks an empty bucket */
    int16_t device; /* logical device it was allocated on */
    bool live;      /* allocated and not yet freed */
};

struct id_table {
    struct id_entry *b; /* 1 << bits buckets */
    unsigned bits;
    uint64_t count; /* occupied buckets */
};

/*
** The distinct mark labels: LIST in order of first appearance, and an
** open-addressing table of indexes into it (index + 1; 0 = empty), kept
** at most half full, so that a trace with a label per step loads in
** linear time.
*/
struct label_table {
    char **list;
    uint32_t n, cap;
    uint32_t *b; /* 1 << bits buckets */
    unsigned bits;
};

/* One field of the line being parsed: a span of the read buffer. */
struct field {
    const char *p;
    size_t n;
};

/* Everything trace_load builds before it hands out the trace. */
struct reader {
    const char *path;
    uint64_t line; /* number of the line being handled, 1-based */
    bool have_header;
    int n_cols;              /* fields per line, from the header */
    enum column_role *roles; /* n_cols entries */
    struct field *fields;    /* n_cols entries, reused for every line */
    char *meta;              /* the first line's comment, or NULL */

    struct trace_event *events;
    uint64_t n_events, cap_events;

    struct id_table ids;
    uint32_t n_slots; /* distinct ids so far */

    uint64_t live_bytes; /* sum of live sizes, all devices */
    uint64_t peak_live_bytes;
    int32_t max_device; /* highest device seen; -1 for none */

    struct label_table labels;
    uint64_t n_marks, n_ooms;

    int format;              /* 1, or what "#@format" said */
    bool format_line;        /* a "#@format" line was read */
    struct trace_frame *frames;
    uint32_t n_frames, cap_frames;
    uint32_t *site_start;    /* n_sites + 1 entries when n_sites > 0 */
    uint32_t *site_frames;
    uint32_t n_sites, cap_sites, n_site_frames, cap_site_frames;

    char *cut; /* NULL, or where the file was found cut short (trace.cut) */
    struct trace_held *held; /* "#@held" lines */
    uint64_t n_held, cap_held;
};

/* ------------------------------------------------------------------ */
/* Errors                                                               */
/* ------------------------------------------------------------------ */

/* Fail with VRAM_E_PARSE and "PATH:LINE: reason" for the current line. */
#define parse_error(r, ...)                                                              \
    error_set_at(VRAM_E_PARSE, (r)->path, (unsigned long long)(r)->line, __VA_ARGS__)

/*
** Copy field F into BUF for an error message: at most 32 bytes, with
** anything unprintable shown as '?', so that a binary file still yields a
** one-line, readable error.
*/
static const char *
field_text(const struct field *f, char *buf, size_t len)
{
    size_t max = len - 4, i, o = 0;

    for (i = 0; i < f->n && o < max && o < 32; i++) {
        unsigned char c = (unsigned char)f->p[i];
        buf[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (i < f->n) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

/* ------------------------------------------------------------------ */
/* The id table                                                         */
/* ------------------------------------------------------------------ */

static inline uint64_t
id_hash(uint64_t id, unsigned bits)
{
    uint64_t h = id;
    unsigned shift;

    for (shift = bits; shift < 64; shift += bits)
        h ^= id >> shift;
    return h & (((uint64_t)1 << bits) - 1);
}

static bool
ids_init(struct id_table *t, unsigned bits)
{
    t->b = calloc((size_t)1 << bits, sizeof *t->b);
    t->bits = bits;
    t->count = 0;
    return t->b != NULL;
}

static void
ids_destroy(struct id_table *t)
{
    free(t->b);
    t->b = NULL;
}

/* The bucket that holds ID, or the empty bucket where it would go. */
static struct id_entry *
ids_bucket(const struct id_table *t, uint64_t id)
{
    uint64_t mask = ((uint64_t)1 << t->bits) - 1;
    uint64_t i = id_hash(id, t->bits);

    while (t->b[i].slot != 0 && t->b[i].id != id)
        i = (i + 1) & mask;
    return &t->b[i];
}

/* Double the table. False when out of memory (the table is unchanged). */
static bool
ids_grow(struct id_table *t)
{
    struct id_table bigger;
    uint64_t i, cap = (uint64_t)1 << t->bits;

    if (!ids_init(&bigger, t->bits + 1))
        return false;
    for (i = 0; i < cap; i++) {
        if (t->b[i].slot != 0)
            *ids_bucket(&bigger, t->b[i].id) = t->b[i];
    }
    bigger.count = t->count;
    ids_destroy(t);
    *t = bigger;
    return true;
}

/* ------------------------------------------------------------------ */
/* The label table                                                      */
/* ------------------------------------------------------------------ */

uint64_t
trace_text_hash(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t i;

    for (i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The bucket holding the label P (N bytes), or the empty one where it
** would go. */
static uint32_t *
labels_bucket(const struct label_table *t, const char *p, size_t n)
{
    uint64_t mask = ((uint64_t)1 << t->bits) - 1;
    uint64_t i = trace_text_hash(p, n) & mask;

    while (t->b[i] != 0) {
        const char *l = t->list[t->b[i] - 1];
        if (strlen(l) == n && memcmp(l, p, n) == 0)
            break;
        i = (i + 1) & mask;
    }
    return &t->b[i];
}

/* Double the buckets. False when out of memory (the table is unchanged). */
static bool
labels_grow(struct label_table *t)
{
    unsigned bits = t->bits == 0 ? LABELS_INITIAL_BITS : t->bits + 1;
    uint32_t *b = calloc((size_t)1 << bits, sizeof *b);
    struct label_table bigger;
    uint32_t k;

    if (b == NULL)
        return false;
    bigger = *t;
    bigger.b = b;
    bigger.bits = bits;
    for (k = 0; k < t->n; k++)
        *labels_bucket(&bigger, t->list[k], strlen(t->list[k])) = k + 1;
    free(t->b);
    *t = bigger;
    return true;
}

static void
labels_destroy(struct label_table *t)
{
    uint32_t k;

    for (k = 0; k < t->n; k++)
        free(t->list[k]);
    free(t->list);
    free(t->b);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------------ */
/* Fields                                                               */
/* ------------------------------------------------------------------ */

enum num_result { NUM_OK, NUM_BAD, NUM_OVERFLOW };

/* Parse F as a decimal uint64_t: digits only, no sign, no spaces. */
static enum num_result
parse_u64(const struct field *f, uint64_t *out)
{
    uint64_t v = 0;
    size_t i;

    if (f->n == 0)
        return NUM_BAD;
    for (i = 0; i < f->n; i++) {
        unsigned d = (unsigned)((unsigned char)f->p[i] - '0');
        if (d > 9)
            return NUM_BAD;
        if (v > (UINT64_MAX - d) / 10)
            return NUM_OVERFLOW;
        v = v * 10 + d;
    }
    *out = v;
    return NUM_OK;
}

/* Parse numeric field F of column ROLE into *OUT, or say what is wrong. */
static vram_status
number_field(const struct reader *r, const struct field *f, enum column_role role,
             uint64_t *out)
{
    char text[48];

    switch (parse_u64(f, out)) {
    case NUM_OK:
        return VRAM_OK;
    case NUM_OVERFLOW:
        return parse_error(r, "%s '%s' does not fit in 64 bits", columns[role].name,
                           field_text(f, text, sizeof text));
    case NUM_BAD:
        break;
    }
    return parse_error(r, "%s '%s' is not a non-negative decimal integer",
                       columns[role].name, field_text(f, text, sizeof text));
}

/* Parse the device column: a decimal integer in 0..TRACE_MAX_DEVICE. */
static vram_status
device_field(const struct reader *r, const struct field *f, int32_t *out)
{
    char text[48];
    uint64_t v;

    if (f->n > 1 && f->p[0] == '-') {
        struct field digits = {f->p + 1, f->n - 1};
        if (parse_u64(&digits, &v) != NUM_BAD)
            return parse_error(r, "device %s is negative",
                               field_text(f, text, sizeof text));
    }
    switch (parse_u64(f, &v)) {
    case NUM_OK:
        if (v > TRACE_MAX_DEVICE)
            return parse_error(r, "device %s is out of range (0..%d)",
                               field_text(f, text, sizeof text), TRACE_MAX_DEVICE);
        *out = (int32_t)v;
        return VRAM_OK;
    case NUM_OVERFLOW:
        return parse_error(r, "device %s is out of range (0..%d)",
                           field_text(f, text, sizeof text), TRACE_MAX_DEVICE);
    case NUM_BAD:
        break;
    }
    return parse_error(r, "device '%s' is not a decimal integer",
                       field_text(f, text, sizeof text));
}

/*
** Split LINE (N bytes, no line end) at commas into r->fields. The header
** fixed how many fields a line has; any other count is an error.
*/
static vram_status
split_fields(struct reader *r, const char *line, size_t n)
{
    const char *p = line, *end = line + n;
    int i = 0;

    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        if (i < r->n_cols) {
            r->fields[i].p = p;
            r->fields[i].n = (size_t)(stop - p);
        }
        i++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (i != r->n_cols)
        return parse_error(r, "expected %d fields as in the header, found %d", r->n_cols,
                           i);
    return VRAM_OK;
}

/* ------------------------------------------------------------------ */
/* Lines                                                                */
/* ------------------------------------------------------------------ */

/* The header: learn which field holds which column. */
static vram_status
parse_header(struct reader *r, const char *line, size_t n)
{
    bool seen[COL_COUNT] = {false};
    int i, known = 0, n_cols = 1;
    size_t k;

    for (k = 0; k < n; k++)
        n_cols += line[k] == ',';
    r->roles = calloc((size_t)n_cols, sizeof *r->roles);
    r->fields = calloc((size_t)n_cols, sizeof *r->fields);
    if (r->roles == NULL || r->fields == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
    r->n_cols = n_cols;
    if (split_fields(r, line, n) != VRAM_OK)
        return VRAM_E_PARSE; /* cannot happen: n_cols was counted */

    for (i = 0; i < n_cols; i++) {
        const struct field *f = &r->fields[i];
        int c;
        for (c = 1; c < COL_COUNT; c++) {
            if (strlen(columns[c].name) == f->n &&
                memcmp(columns[c].name, f->p, f->n) == 0)
                break;
        }
        if (c == COL_COUNT || (c == COL_SITE && r->format < 2))
            continue; /* a column this reader does not know (in this format) */
        if (seen[c])
            return parse_error(r, "column '%s' appears twice in the header",
                               columns[c].name);
        seen[c] = true;
        r->roles[i] = (enum column_role)c;
        known++;
    }
    if (known == 0)
        return parse_error(r, "no header: expected a line naming the "
                              "columns t_us,op,id,size,stream[,device][,label]");
    for (i = 1; i < COL_COUNT; i++) {
        if (columns[i].required && !seen[i])
            return parse_error(r, "the header lacks the required column '%s'",
                               columns[i].name);
    }
    r->have_header = true;
    return VRAM_OK;
}

/* The index of the label in F, stored on first sight. */
static vram_status
intern_label(struct reader *r, const struct field *f, uint32_t *out)
{
    struct label_table *t = &r->labels;
    uint32_t *slot;
    char *copy;

    if (t->b == NULL || (uint64_t)(t->n + 1) * 2 > ((uint64_t)1 << t->bits)) {
        if (!labels_grow(t))
            return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
    }
    slot = labels_bucket(t, f->p, f->n);
    if (*slot != 0) {
        *out = *slot - 1;
        return VRAM_OK;
    }
    if (t->n == UINT32_MAX - 1)
        return parse_error(r, "more than %" PRIu32 " distinct labels", UINT32_MAX - 2);
    if (t->n == t->cap) {
        uint32_t cap = t->cap == 0 ? 64 : t->cap * 2;
        char **grown = realloc(t->list, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
        t->list = grown;
        t->cap = cap;
    }
    copy = strndup(f->p, f->n);
    if (copy == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
    t->list[t->n] = copy;
    *slot = ++t->n;
    *out = t->n - 1;
    return VRAM_OK;
}

/*
** A mark or a refused allocation: no slot, no live bytes. LABEL is the
** label column's field, or NULL when the header has none.
*/
static vram_status
apply_marker(struct reader *r, struct trace_event *ev, const struct field *label)
{
    ev->slot = TRACE_NO_SLOT;
    /* Neither has an id of its own: whatever the file says is ignored
     * (docs/TRACE_FORMAT.md), as the writer writes 0. */
    ev->id = 0;
    if (ev->op == TRACE_OOM) {
        if (ev->size == 0)
            return parse_error(r, "an 'o' event (a refused allocation) needs the size "
                                  "asked for, above 0");
        r->n_ooms++;
        return VRAM_OK;
    }
    if (label == NULL)
        return parse_error(r, "mark without a label (the header has no label column)");
    /* A hand-made trace's label is made safe as a writer makes it: the
     * consumers print labels to terminals and pages. */
    char safe[TRACE_LABEL_MAX];
    struct field shown = {safe, trace_label_safe(label->p, label->n, safe)};
    if (shown.n == 0)
        return parse_error(r, "mark without a label");
    label = &shown;
    ev->size = 0; /* nor a size or a stream: a mark is a point in time */
    ev->stream = 0;
    r->n_marks++;
    return intern_label(r, label, &ev->label);
}

/* Check EV against the ids seen so far and account for its bytes. */
static vram_status
apply_event(struct reader *r, struct trace_event *ev)
{
    struct id_entry *e = ids_bucket(&r->ids, ev->id);

    if (ev->op == TRACE_FREE) {
        if (e->slot == 0)
            return parse_error(r, "free of id %" PRIu64 ", which was never allocated",
                               ev->id);
        if (!e->live)
            return parse_error(r, "free of id %" PRIu64 ", which was already freed",
                               ev->id);
        if (e->size != ev->size)
            return parse_error(r,
                               "free of id %" PRIu64 " with size %" PRIu64
                               ", but it was allocated with size %" PRIu64,
                               ev->id, ev->size, e->size);
        if (e->device != ev->device)
            return parse_error(r,
                               "free of id %" PRIu64 " on device %" PRId32
                               ", but it was allocated on device %d",
                               ev->id, ev->device, (int)e->device);
        e->live = false;
        r->live_bytes -= e->size;
        ev->slot = e->slot - 1;
        return VRAM_OK;
    }

    if (e->slot != 0)
        return parse_error(r,
                           e->live ? "id %" PRIu64 " allocated again while live"
                                   : "id %" PRIu64 " allocated again after its "
                                     "free (ids are unique within a trace)",
                           ev->id);
    if (r->live_bytes > UINT64_MAX - ev->size)
        return parse_error(r, "live bytes exceed 64 bits");
    if (r->n_slots == UINT32_MAX - 1)
        return parse_error(r, "more than %" PRIu32 " ids", UINT32_MAX - 2);
    /* Keep the table at most half full; growing moves the buckets. */
    if ((r->ids.count + 1) * 2 > ((uint64_t)1 << r->ids.bits)) {
        if (!ids_grow(&r->ids))
            return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
        e = ids_bucket(&r->ids, ev->id);
    }
    ev->slot = r->n_slots++;
    *e = (struct id_entry){.id = ev->id,
                           .size = ev->size,
                           .slot = ev->slot + 1,
                           .device = (int16_t)ev->device,
                           .live = true};
    r->ids.count++;

    r->live_bytes += ev->size;
    if (r->live_bytes > r->peak_live_bytes)
        r->peak_live_bytes = r->live_bytes;
    return VRAM_OK;
}

/* ------------------------------------------------------------------ */
/* The frames table                                                     */
/* ------------------------------------------------------------------ */

static void
frames_free(struct trace_frame *frames, uint32_t n)
{
    uint32_t k;

    for (k = 0; k < n; k++) {
        free((char *)frames[k].file);
        free((char *)frames[k].func);
    }
    free(frames);
}

/* Split the N bytes at P at commas into at most MAX fields of OUT; the
** count into *GOT (more than MAX when there are more). */
static void
split_args(const char *p, size_t n, struct field *out, int max, int *got)
{
    const char *end = p + n;
    int i = 0;

    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        if (i < max)
            out[i] = (struct field){p, (size_t)(stop - p)};
        i++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    *got = i;
}

/* A table id in F: the next one expected (EXPECT), else an error naming
** WHAT. */
static vram_status
table_id(const struct reader *r, const struct field *f, const char *what, uint32_t expect)
{
    char text[48];
    uint64_t v;

    if (parse_u64(f, &v) != NUM_OK)
        return parse_error(r, "%s id '%s' is not a decimal integer", what,
                           field_text(f, text, sizeof text));
    if (v != expect)
        return parse_error(r,
                           "%s id %" PRIu64 " out of order (expected %" PRIu32
                           ": ids are 1, 2, 3... in the order defined)",
                           what, v, expect);
    return VRAM_OK;
}

/* "#@format N" */
static vram_status
format_directive(struct reader *r, const char *p, size_t n)
{
    struct field f = {p, n};
    char text[48];
    uint64_t v;

    if (r->format_line)
        return parse_error(r, "a second '#@format' line");
    if (r->have_header)
        return parse_error(r, "'#@format' after the header (it comes before it)");
    if (parse_u64(&f, &v) != NUM_OK || v == 0)
        return parse_error(r, "'#@format %s': the version is not a positive integer",
                           field_text(&f, text, sizeof text));
    if (v > TRACE_FORMAT_VERSION)
        return parse_error(r,
                           "trace format %" PRIu64 " is newer than this vram reads (1 to %d); "
                           "read it with the vram that wrote it, or a newer one",
                           v, TRACE_FORMAT_VERSION);
    r->format = (int)v;
    r->format_line = true;
    return VRAM_OK;
}

/* "#@frame ID,py,FILE,LINE,FUNC" / "ID,native,MODULE,0xOFFSET,SYMBOL" /
** "ID,note,TEXT" */
/* Field F's text made safe as a writer writes a frame's (trace_text_safe),
** in a new string; NULL when out of memory. */
static char *
safe_dup(const struct field *f)
{
    size_t max = f->n < TRACE_FRAME_TEXT_MAX ? f->n : TRACE_FRAME_TEXT_MAX;
    char *s = malloc(max + 1);
    if (s != NULL)
        s[trace_text_safe(f->p, f->n, max, s)] = '\0';
    return s;
}

static vram_status
frame_directive(struct reader *r, const char *p, size_t n)
{
    struct field a[6];
    struct trace_frame fr = {0};
    char text[48];
    vram_status st;
    int got;
    uint64_t v;

    split_args(p, n, a, 6, &got);
    if ((st = table_id(r, &a[0], "frame", r->n_frames + 1)) != VRAM_OK)
        return st;
    if (got >= 2 && a[1].n == 2 && memcmp(a[1].p, "py", 2) == 0) {
        if (got != 5)
            return parse_error(r, "a py frame has 5 fields (ID,py,FILE,LINE,FUNCTION), "
                                  "found %d", got);
        fr.kind = TRACE_FRAME_PY;
        if (parse_u64(&a[3], &v) != NUM_OK || v > UINT32_MAX)
            return parse_error(r, "frame line '%s' is not a line number",
                               field_text(&a[3], text, sizeof text));
        fr.line = (uint32_t)v;
    } else if (got >= 2 && a[1].n == 6 && memcmp(a[1].p, "native", 6) == 0) {
        size_t i;
        if (got != 5)
            return parse_error(r, "a native frame has 5 fields "
                                  "(ID,native,MODULE,0xOFFSET,SYMBOL), found %d", got);
        fr.kind = TRACE_FRAME_NATIVE;
        if (a[3].n < 3 || a[3].n > 18 || a[3].p[0] != '0' || a[3].p[1] != 'x')
            return parse_error(r, "frame offset '%s' is not a hexadecimal 0x... offset",
                               field_text(&a[3], text, sizeof text));
        for (i = 2; i < a[3].n; i++) {
            char c = a[3].p[i];
            unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                         : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                         : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                                : 16u;
            if (d == 16)
                return parse_error(r, "frame offset '%s' is not a hexadecimal 0x... offset",
                                   field_text(&a[3], text, sizeof text));
            fr.offset = fr.offset << 4 | d;
        }
    } else if (got >= 2 && a[1].n == 4 && memcmp(a[1].p, "note", 4) == 0) {
        if (got != 3)
            return parse_error(r, "a note frame has 3 fields (ID,note,TEXT), found %d", got);
        fr.kind = TRACE_FRAME_NOTE;
    } else {
        return parse_error(r, "frame kind '%s' is not 'py', 'native' or 'note'",
                           got >= 2 ? field_text(&a[1], text, sizeof text) : "");
    }
    if (a[2].n == 0)
        return parse_error(r, "a %s frame without its %s", fr.kind == TRACE_FRAME_PY ? "py"
                           : fr.kind == TRACE_FRAME_NATIVE ? "native" : "note",
                           fr.kind == TRACE_FRAME_NOTE ? "text"
                           : fr.kind == TRACE_FRAME_PY ? "file" : "module");
    if (r->n_frames == r->cap_frames) {
        uint32_t cap = r->cap_frames == 0 ? 64 : r->cap_frames * 2;
        struct trace_frame *grown = realloc(r->frames, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
        r->frames = grown;
        r->cap_frames = cap;
    }
    /* The text made safe as a writer makes it: tools print it. */
    if (fr.kind == TRACE_FRAME_NOTE) {
        fr.file = strdup("");
        fr.func = safe_dup(&a[2]);
    } else {
        fr.file = safe_dup(&a[2]);
        fr.func = safe_dup(&a[4]);
    }
    if (fr.file == NULL || fr.func == NULL) {
        free((char *)fr.file);
        free((char *)fr.func);
        return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
    }
    r->frames[r->n_frames++] = fr;
    return VRAM_OK;
}

/* Make *V (capacity *CAP, doubling from FIRST) hold at least NEED
** uint32_t. False when out of memory (*V unchanged). */
static bool
u32_reserve(uint32_t **v, uint32_t *cap, uint64_t need, uint32_t first)
{
    while (need > *cap) {
        uint32_t bigger = *cap == 0 ? first : *cap * 2;
        uint32_t *grown = realloc(*v, (size_t)bigger * sizeof *grown);
        if (grown == NULL)
            return false;
        *v = grown;
        *cap = bigger;
    }
    return true;
}

/* Make room for one more site of N frames. */
static bool
sites_reserve(struct reader *r, uint32_t n)
{
    if (!u32_reserve(&r->site_start, &r->cap_sites, (uint64_t)r->n_sites + 2, 64) ||
        !u32_reserve(&r->site_frames, &r->cap_site_frames,
                     (uint64_t)r->n_site_frames + n, 256))
        return false;
    r->site_start[0] = 0;
    return true;
}

/* "#@site ID,FRAME,FRAME,..." (innermost first) */
static vram_status
site_directive(struct reader *r, const char *p, size_t n)
{
    struct field a[TRACE_SITE_MAX_FRAMES + 1];
    char text[48];
    vram_status st;
    int got, i;

    split_args(p, n, a, TRACE_SITE_MAX_FRAMES + 1, &got);
    if ((st = table_id(r, &a[0], "site", r->n_sites + 1)) != VRAM_OK)
        return st;
    if (got < 2)
        return parse_error(r, "site %" PRIu32 " has no frames", r->n_sites + 1);
    if (got > TRACE_SITE_MAX_FRAMES + 1)
        return parse_error(r, "site %" PRIu32 " has %d frames (at most %d)", r->n_sites + 1,
                           got - 1, TRACE_SITE_MAX_FRAMES);
    if (r->n_sites == UINT32_MAX - 1 || !sites_reserve(r, (uint32_t)got - 1))
        return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
    for (i = 1; i < got; i++) {
        uint64_t v;
        if (parse_u64(&a[i], &v) != NUM_OK || v == 0)
            return parse_error(r, "site frame '%s' is not a frame id",
                               field_text(&a[i], text, sizeof text));
        if (v > r->n_frames)
            return parse_error(r, "site %" PRIu32 " names frame %" PRIu64
                                  ", which is not defined before it",
                               r->n_sites + 1, v);
        r->site_frames[r->n_site_frames++] = (uint32_t)v - 1;
    }
    r->n_sites++;
    r->site_start[r->n_sites] = r->n_site_frames;
    return VRAM_OK;
}

/* "#@held ID,TEXT": what holds live allocation ID now. The id is not
** checked against the events: the line comes from another thread than the
** allocation's, which may write it a moment later. */
static vram_status
held_directive(struct reader *r, const char *p, size_t n)
{
    const char *comma = memchr(p, ',', n);
    struct field id = {p, comma != NULL ? (size_t)(comma - p) : n};
    char text[48];
    uint64_t v;

    if (parse_u64(&id, &v) != NUM_OK)
        return parse_error(r, "held id '%s' is not an allocation id",
                           field_text(&id, text, sizeof text));
    if (comma == NULL || comma + 1 == p + n)
        return parse_error(r, "a held line without its text (ID,TEXT)");
    if (r->n_held == r->cap_held) {
        uint64_t cap = r->cap_held == 0 ? 64 : r->cap_held * 2;
        struct trace_held *grown = realloc(r->held, cap * sizeof *grown);
        if (grown == NULL)
            return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
        r->held = grown;
        r->cap_held = cap;
    }
    size_t len = (size_t)(p + n - comma - 1);
    char *safe = malloc(len + 1);
    if (safe == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
    /* Made safe as a label is (a trace by hand may hold anything). */
    size_t k = trace_text_safe(comma + 1, len, TRACE_FRAME_TEXT_MAX, safe);
    safe[k] = '\0';
    r->held[r->n_held++] = (struct trace_held){v, r->n_events, safe};
    return VRAM_OK;
}

/*
** A "#@" line: the format version or the frames table. Directives a
** reader does not know are ignored, as unknown columns are, so that later
** additions that older readers may skip need no new version.
*/
static vram_status
parse_directive(struct reader *r, const char *line, size_t n)
{
    const char *sp = memchr(line, ' ', n);
    size_t word = sp != NULL ? (size_t)(sp - line) : n;
    const char *args = sp != NULL ? sp + 1 : line + n;
    size_t n_args = n - word - (sp != NULL);

    if (word == 6 && memcmp(line, "format", 6) == 0)
        return format_directive(r, args, n_args);
    if ((word == 5 && memcmp(line, "frame", 5) == 0) ||
        (word == 4 && memcmp(line, "site", 4) == 0)) {
        if (r->format < 2)
            return parse_error(r, "'#@%.*s' needs a '#@format 2' line before the header",
                               (int)word, line);
        return word == 5 ? frame_directive(r, args, n_args) : site_directive(r, args, n_args);
    }
    if (word == 4 && memcmp(line, "held", 4) == 0) {
        if (r->format < 2)
            return parse_error(r, "'#@held' needs a '#@format 2' line before the header");
        return held_directive(r, args, n_args);
    }
    return VRAM_OK;
}

/* The site column of EV: empty or 0 for none, else a site defined above,
** and only on 'a' and 'o'. */
static vram_status
site_field(const struct reader *r, const struct field *f, struct trace_event *ev)
{
    char text[48];
    uint64_t v;

    if (parse_u64(f, &v) != NUM_OK)
        return parse_error(r, "site '%s' is not a non-negative decimal integer",
                           field_text(f, text, sizeof text));
    if (v == TRACE_NO_SITE)
        return VRAM_OK;
    if (ev->op != TRACE_ALLOC && ev->op != TRACE_OOM)
        return parse_error(r, "site %" PRIu64 " on an '%c' event (only 'a' and 'o' "
                              "events have call sites)", v, ev->op);
    if (v > r->n_sites)
        return parse_error(r, "site %" PRIu64 " is not defined (no '#@site %" PRIu64
                              "' line before it)", v, v);
    ev->site = (uint32_t)v;
    return VRAM_OK;
}

/* One event line. */
static vram_status
parse_event(struct reader *r, const char *line, size_t n)
{
    struct trace_event ev = {.label = TRACE_NO_LABEL, .site = TRACE_NO_SITE};
    const struct field *label = NULL, *site = NULL;
    vram_status st;
    int i;

    if ((st = split_fields(r, line, n)) != VRAM_OK)
        return st;
    for (i = 0; i < r->n_cols; i++) {
        const struct field *f = &r->fields[i];
        enum column_role role = r->roles[i];
        char text[48];

        if (role == COL_IGNORED)
            continue;
        if (role == COL_LABEL) {
            label = f; /* may be empty: checked with the op below */
            continue;
        }
        if (role == COL_SITE) {
            site = f; /* may be empty: checked with the op below */
            continue;
        }
        if (f->n == 0)
            return parse_error(r, "empty field '%s'", columns[role].name);
        if (columns[role].number != NOT_NUMBER) {
            st = number_field(r, f, role, (uint64_t *)((char *)&ev + columns[role].number));
        } else if (role == COL_DEVICE) {
            st = device_field(r, f, &ev.device);
        } else { /* COL_OP */
            if (f->n != 1 || (f->p[0] != TRACE_ALLOC && f->p[0] != TRACE_FREE &&
                              f->p[0] != TRACE_MARK && f->p[0] != TRACE_OOM))
                return parse_error(r, "op '%s' is not 'a', 'f', 'm' or 'o'",
                                   field_text(f, text, sizeof text));
            ev.op = f->p[0];
            st = VRAM_OK;
        }
        if (st != VRAM_OK)
            return st;
    }

    if (site != NULL && site->n > 0 && (st = site_field(r, site, &ev)) != VRAM_OK)
        return st;
    if (ev.op != TRACE_MARK && label != NULL && label->n > 0) {
        char text[48];
        st = parse_error(r, "label '%s' on an '%c' event (only marks have labels)",
                         field_text(label, text, sizeof text), ev.op);
    } else if (ev.op == TRACE_MARK || ev.op == TRACE_OOM) {
        st = apply_marker(r, &ev, label);
    } else {
        st = apply_event(r, &ev);
    }
    if (st != VRAM_OK)
        return st;
    if (r->n_events == r->cap_events) {
        uint64_t cap = r->cap_events * 2;
        struct trace_event *grown = realloc(r->events, cap * sizeof *grown);
        if (grown == NULL)
            return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
        r->events = grown;
        r->cap_events = cap;
    }
    r->events[r->n_events++] = ev;
    if (ev.device > r->max_device)
        r->max_device = ev.device;
    return VRAM_OK;
}

static bool
is_blank(const char *line, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        if (line[i] != ' ' && line[i] != '\t')
            return false;
    }
    return true;
}

/* Handle line number r->line: LINE is N bytes without its "\n". */
static vram_status
handle_line(struct reader *r, const char *line, size_t n)
{
    if (n > 0 && line[n - 1] == '\r')
        n--;
    if (n > TRACE_MAX_LINE)
        return parse_error(r, "line longer than %d bytes", TRACE_MAX_LINE);
    /* A UTF-8 byte-order mark (spreadsheets write one) is not text. */
    if (r->line == 1 && n >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0) {
        line += 3;
        n -= 3;
    }
    if (n >= 2 && line[0] == '#' && line[1] == '@')
        return parse_directive(r, line + 2, n - 2);
    if (n > 0 && line[0] == '#') {
        /* Only the first line's comment is the trace's metadata. */
        if (r->line == 1) {
            /* Kept as a writer writes it: safe to print (trace_meta_safe). */
            size_t skip = (n > 1 && line[1] == ' ') ? 2 : 1;
            r->meta = malloc(n - skip + 1);
            if (r->meta == NULL)
                return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
            r->meta[trace_meta_safe(line + skip, n - skip, r->meta)] = '\0';
        }
        return VRAM_OK;
    }
    if (is_blank(line, n))
        return VRAM_OK;
    if (!r->have_header)
        return parse_header(r, line, n);
    return parse_event(r, line, n);
}

/* ------------------------------------------------------------------ */
/* The file                                                             */
/* ------------------------------------------------------------------ */

/*
** Where the text comes from: the file's bytes, inflated by zlib when they
** start with the gzip magic, else taken as they are.
**
** This drives inflate() itself rather than gzread(): gzread throws away
** what it inflated in the call that meets a damaged stream, so a
** truncated trace would be reported thousands of lines before the damage
** (a bad checksum at the very end even as line 1). Here every byte
** inflated before the damage is handed out first, and the error comes
** with the next read, so "PATH:LINE" names the line the damage cut.
*/
enum source_result {
    SRC_OK,
    SRC_IO,        /* read() failed; err_errno says why */
    SRC_TRUNCATED, /* the file ends inside a gzip member */
    SRC_CORRUPT,   /* inflate() found bad data; err_msg says what */
    SRC_NOMEM
};

#define SOURCE_IN_SIZE (256u * 1024)

struct source {
    int fd;
    bool gzip;        /* else the bytes are the text */
    bool in_eof;      /* read() has returned 0 */
    bool z_ready;     /* inflateInit2 succeeded */
    bool member_done; /* the current gzip member has ended */
    z_stream z;
    unsigned char *in;           /* SOURCE_IN_SIZE bytes read from fd */
    size_t plain_off, plain_len; /* plain text: bytes of IN not yet given */
    enum source_result pending;  /* an error to report at the next read */
    int err_errno;
    char err_msg[96];
};

/* Read up to CAP bytes of the file into BUF, *LEN of them (0 at its end,
** then S->in_eof). False on a read error (recorded). */
static bool
source_read_fd(struct source *s, void *buf, size_t cap, size_t *len)
{
    ssize_t n;

    do
        n = read(s->fd, buf, cap);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        s->err_errno = errno;
        return false;
    }
    if (n == 0)
        s->in_eof = true;
    *len = (size_t)n;
    return true;
}

/* Fill S->in from the file. False on a read error (recorded). */
static bool
source_fill(struct source *s, size_t *len)
{
    return source_read_fd(s, s->in, SOURCE_IN_SIZE, len);
}

/* Take FD (closed by source_close, also on failure) and look at its first
** bytes to tell gzip from plain text. */
static enum source_result
source_open(struct source *s, int fd)
{
    size_t len = 0;

    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->in = malloc(SOURCE_IN_SIZE);
    if (s->in == NULL)
        return SRC_NOMEM;
    /* read() may return a single byte (a pipe); the magic needs two. */
    while (len < 2 && !s->in_eof) {
        size_t n;
        if (!source_read_fd(s, s->in + len, SOURCE_IN_SIZE - len, &n))
            return SRC_IO;
        len += n;
    }
    s->gzip = len >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b;
    if (!s->gzip) {
        s->plain_len = len;
        return SRC_OK;
    }
    /* 15 + 16: the largest window, gzip wrapper only. */
    if (inflateInit2(&s->z, 15 + 16) != Z_OK)
        return SRC_NOMEM;
    s->z_ready = true;
    s->z.next_in = s->in;
    s->z.avail_in = (uInt)len;
    return SRC_OK;
}

static void
source_close(struct source *s)
{
    if (s->z_ready)
        inflateEnd(&s->z);
    free(s->in);
    close(s->fd);
}

/* Inflate into BUF until it is full, the input ends or an error. */
static enum source_result
source_inflate(struct source *s, char *buf, size_t len)
{
    z_stream *z = &s->z;

    z->next_out = (Bytef *)buf;
    z->avail_out = (uInt)len;
    while (z->avail_out > 0) {
        int ret;

        if (z->avail_in == 0 && !s->in_eof) {
            size_t n;
            if (!source_fill(s, &n))
                return SRC_IO;
            z->next_in = s->in;
            z->avail_in = (uInt)n;
            continue;
        }
        if (s->member_done) {
            if (z->avail_in == 0)
                break; /* the end of the file */
            if (z->next_in[0] != 0x1f) {
                /* Bytes after the last member that start no other one:
                 * ignored, as gzip and gzread do. */
                z->avail_in = 0;
                s->in_eof = true;
                break;
            }
            inflateReset(z); /* another member follows (cat a.gz b.gz) */
            s->member_done = false;
        }
        if (z->avail_in == 0)
            return SRC_TRUNCATED;
        ret = inflate(z, Z_NO_FLUSH);
        switch (ret) {
        case Z_STREAM_END:
            s->member_done = true;
            break;
        case Z_OK:
        case Z_BUF_ERROR: /* no progress: more input is read above */
            break;
        case Z_MEM_ERROR:
            return SRC_NOMEM;
        default:
            snprintf(s->err_msg, sizeof s->err_msg, "%s",
                     z->msg != NULL ? z->msg : "invalid data");
            return SRC_CORRUPT;
        }
    }
    return SRC_OK;
}

/*
** Put up to LEN bytes of text into BUF and their count in *GOT; 0 means
** the end. An error met after some text was produced is held back until
** the next call, so that the caller first parses everything before it.
*/
static enum source_result
source_read(struct source *s, char *buf, size_t len, size_t *got)
{
    enum source_result res;

    *got = 0;
    if (s->pending != SRC_OK)
        return s->pending;
    if (!s->gzip) {
        size_t n;
        if (s->plain_off < s->plain_len) {
            n = s->plain_len - s->plain_off < len ? s->plain_len - s->plain_off : len;
            memcpy(buf, s->in + s->plain_off, n);
            s->plain_off += n;
            *got = n;
            return SRC_OK;
        }
        if (s->in_eof)
            return SRC_OK;
        return source_read_fd(s, buf, len, got) ? SRC_OK : SRC_IO;
    }

    res = source_inflate(s, buf, len);
    *got = len - s->z.avail_out;
    if (res != SRC_OK && *got > 0) {
        s->pending = res;
        res = SRC_OK;
    }
    return res;
}

/* Report what went wrong with the source, at the line it cut short. */
static vram_status
source_error(struct reader *r, const struct source *s, enum source_result res)
{
    switch (res) {
    case SRC_IO:
        return error_set(VRAM_E_IO, "%s: %s", r->path, strerror(s->err_errno));
    case SRC_NOMEM:
        return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
    case SRC_TRUNCATED:
        r->line++;
        return parse_error(r, "truncated gzip stream (the file ends inside "
                              "it)");
    case SRC_CORRUPT:
        r->line++;
        return parse_error(r, "corrupt gzip stream (%s)", s->err_msg);
    case SRC_OK:
        break;
    }
    return VRAM_OK;
}

/*
** A line that does not parse in a gzip file may be a damaged byte that
** inflate turned into plausible text: the gzip check (CRC-32) at the end
** of the member tells. Read the rest of S (into BUF, SIZE bytes); if it is
** corrupt, report that instead of ST, which it explains. (A stream that
** merely ends early garbles nothing before its end: the line's own reason
** stands.)
*/
static vram_status
blame_gzip(struct reader *r, struct source *s, char *buf, size_t size, vram_status st)
{
    if (!s->gzip || st != VRAM_E_PARSE)
        return st;
    char first[256];
    snprintf(first, sizeof first, "%s", vram_last_error());
    for (;;) {
        size_t got = 0;
        enum source_result res = source_read(s, buf, size, &got);
        if (res == SRC_CORRUPT) {
            const char *colon = strstr(first, ": ");
            return error_set(VRAM_E_PARSE,
                             "%s:%" PRIu64 ": corrupt gzip stream (%s): the file is damaged, "
                             "so this line may be garbage (%s)",
                             r->path, r->line, s->err_msg, colon != NULL ? colon + 2 : first);
        }
        if (res != SRC_OK || got == 0)
            return error_set(st, "%s", first);
    }
}

/*
** The file ends before its text does (a recording killed, or stopped by a
** full disk): what came before line r->line + 1 is kept, and R->cut says
** so. WHY: how it was found.
*/
static vram_status
cut_short(struct reader *r, const char *why)
{
    char line[512];
    snprintf(line, sizeof line,
             "%s:%" PRIu64 ": the trace is cut short here (%s): it is read up to line %" PRIu64
             ", its last whole line",
             r->path, r->line + 1, why, r->line);
    free(r->cut);
    r->cut = strdup(line);
    if (r->cut == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
    return VRAM_OK;
}

/*
** The last line of the text, N bytes at LINE, has no line end: a file cut
** short in its middle (a writer killed inside a write that crossed a page,
** or one that buffered its lines), or one made by hand without a final
** line end. It is read when it reads, and said either way: a line that
** does not read is dropped as the half line of a cut file; one that does
** may still be half an event (a number cut short is a number).
*/
static vram_status
last_line(struct reader *r, const char *line, size_t n)
{
    /* Longer than any line can be: not half of one, but a bad file. */
    if (n > TRACE_MAX_LINE + (line[n - 1] == '\r')) {
        r->line++;
        return parse_error(r, "line longer than %d bytes", TRACE_MAX_LINE);
    }
    r->line++;
    vram_status st = handle_line(r, line, n);
    char why[320];
    if (st == VRAM_E_PARSE) {
        const char *reason = strstr(vram_last_error(), ": ");
        snprintf(why, sizeof why, "the last line has no line end and does not read: %s",
                 reason != NULL ? reason + 2 : vram_last_error());
        r->line--;
        return cut_short(r, why);
    }
    if (st != VRAM_OK)
        return st;
    char text[512];
    snprintf(text, sizeof text,
             "%s:%" PRIu64 ": the last line has no line end: it is read as it stands, but if "
             "the file was cut short there it may be half an event",
             r->path, r->line);
    free(r->cut);
    r->cut = strdup(text);
    return r->cut != NULL ? VRAM_OK
                          : error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
}

/* Read every line of S through handle_line. */
static vram_status
read_lines(struct reader *r, struct source *s)
{
    /* A chunk, plus room for the unfinished line carried over from the
     * previous chunk (at most TRACE_MAX_LINE bytes and a '\r'). */
    size_t size = READ_CHUNK + TRACE_MAX_LINE + 1;
    size_t have = 0;
    char *buf = malloc(size);
    vram_status st = VRAM_OK;

    if (buf == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
    for (;;) {
        enum source_result res;
        size_t got;
        char *p, *end, *nl;

        res = source_read(s, buf + have, size - have, &got);
        if (res == SRC_TRUNCATED) {
            /* Every byte before the cut inflated intact: the whole lines
             * are read; the half line after them is not. */
            st = cut_short(r, "the file ends inside its gzip stream, as a recording that "
                              "was killed or ran out of disk leaves it");
            break;
        }
        if (res != SRC_OK) {
            st = source_error(r, s, res);
            break;
        }
        if (got == 0) {
            if (have > 0)
                st = last_line(r, buf, have);
            break;
        }


        p = buf;
        end = buf + have + got;
        while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
            r->line++;
            if ((st = handle_line(r, p, (size_t)(nl - p))) != VRAM_OK) {
                st = blame_gzip(r, s, buf, size, st);
                goto out;
            }
            p = nl + 1;
        }
        have = (size_t)(end - p);
        if (have > TRACE_MAX_LINE + 1) {
            r->line++;
            st = blame_gzip(r, s, buf, size,
                            parse_error(r, "line longer than %d bytes", TRACE_MAX_LINE));
            break;
        }
        memmove(buf, p, have);
    }
out:
    free(buf);
    return st;
}

static void
reader_destroy(struct reader *r)
{
    void *owned[] = {r->roles,      r->fields,      r->meta, r->events,
                     r->site_start, r->site_frames, r->cut};
    for (size_t k = 0; k < sizeof owned / sizeof *owned; k++)
        free(owned[k]);
    for (uint64_t k = 0; k < r->n_held; k++)
        free(r->held[k].text);
    free(r->held);
    ids_destroy(&r->ids);
    labels_destroy(&r->labels);
    frames_free(r->frames, r->n_frames);
}

/* Move what R built into a new struct trace. */
static vram_status
reader_finish(struct reader *r, struct trace **out)
{
    struct trace *t = calloc(1, sizeof *t);
    char *path = strdup(r->path);
    char *meta = r->meta != NULL ? r->meta : strdup("");

    if (t == NULL || path == NULL || meta == NULL) {
        free(t);
        free(path);
        if (meta != r->meta)
            free(meta);
        return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", r->path);
    }
    if (r->n_events < r->cap_events) {
        /* Give back the doubling slack; a failed shrink changes nothing. */
        struct trace_event *fit =
            realloc(r->events, (r->n_events > 0 ? r->n_events : 1) * sizeof *fit);
        if (fit != NULL)
            r->events = fit;
    }
    t->path = path;
    t->meta = meta;
    t->events = r->events;
    t->n_events = r->n_events;
    t->n_slots = r->n_slots;
    t->n_devices = r->max_device + 1 > 0 ? (int)r->max_device + 1 : 1;
    t->peak_live_bytes = r->peak_live_bytes;
    t->labels = r->labels.list;
    t->n_labels = r->labels.n;
    t->n_marks = r->n_marks;
    t->n_ooms = r->n_ooms;
    t->format = r->format;
    t->frames = r->frames;
    t->n_frames = r->n_frames;
    t->n_sites = r->n_sites;
    t->site_start = r->site_start;
    t->site_frames = r->site_frames;
    t->cut = r->cut;
    r->cut = NULL;
    t->held = r->held;
    t->n_held = r->n_held;
    r->frames = NULL;
    r->n_frames = 0;
    r->site_start = NULL;
    r->site_frames = NULL;
    r->held = NULL;
    r->n_held = 0;
    r->meta = NULL;
    r->events = NULL;
    r->labels.list = NULL;
    r->labels.n = 0;
    *out = t;
    return VRAM_OK;
}

vram_status
trace_load(const char *path, struct trace **out)
{
    struct reader r = {0};
    struct source src;
    enum source_result res;
    vram_status st;
    int fd;

    if (path == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "trace_load: NULL argument");
    r.path = path;
    r.max_device = -1;
    r.format = 1;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return error_set(VRAM_E_IO, "%s: %s", path, strerror(errno));
    res = source_open(&src, fd);
    if (res != SRC_OK) {
        st = source_error(&r, &src, res);
        source_close(&src);
        return st;
    }

    r.cap_events = EVENTS_INITIAL;
    r.events = malloc(r.cap_events * sizeof *r.events);
    if (r.events == NULL || !ids_init(&r.ids, IDS_INITIAL_BITS)) {
        st = error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", path);
        goto out;
    }

    st = read_lines(&r, &src);
    if (st == VRAM_OK && !r.have_header) {
        r.line++;
        st = parse_error(&r, "no header (end of file reached)");
    }
    if (st == VRAM_OK)
        st = reader_finish(&r, out);
out:
    source_close(&src);
    reader_destroy(&r);
    return st;
}

void
trace_free(struct trace *t)
{
    uint32_t k;

    if (t == NULL)
        return;
    free(t->path);
    free(t->meta);
    free(t->events);
    for (k = 0; k < t->n_labels; k++)
        free(t->labels[k]);
    free(t->labels);
    frames_free(t->frames, t->n_frames);
    free(t->site_start);
    free(t->site_frames);
    free(t->cut);
    for (uint64_t h = 0; h < t->n_held; h++)
        free(t->held[h].text);
    free(t->held);
    free(t);
}

const char *
trace_display_name(const char *path, char *buf, size_t len)
{
    static const char *const suffixes[] = {".trace.csv.gz", ".trace.csv", ".csv.gz",
                                           ".csv", ".gz"};
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    size_t n = strlen(base);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t sn = strlen(suffixes[i]);
        if (n > sn && strcmp(base + n - sn, suffixes[i]) == 0) {
            n -= sn;
            break;
        }
    }
    if (n >= len)
        n = len - 1;
    memcpy(buf, base, n);
    buf[n] = '\0';
    return buf;
}

const uint32_t *
trace_site_frames(const struct trace *t, uint32_t site, uint32_t *n)
{
    if (t == NULL || site == TRACE_NO_SITE || site > t->n_sites) {
        *n = 0;
        return NULL;
    }
    *n = t->site_start[site] - t->site_start[site - 1];
    return t->site_frames + t->site_start[site - 1];
}
