/* SPDX-License-Identifier: MIT */
/*
** trace_write.c -- write allocation traces (docs/TRACE_FORMAT.md), plain or
** gzip-compressed, from any number of threads.
**
** Writers run inside the host process (the preload library traces live
** allocations), so every event is formatted by hand into a small stack
** buffer and written under one mutex: no stdio locale machinery per event,
** and lines from different threads never interleave.
**
** Nothing recorded waits in a buffer of ours: each event (and each line of
** the frames table with it) reaches the file in one write(2) at its line's
** end, gzip-compressed up to a Z_SYNC_FLUSH point when the name ends in
** ".gz". So a program killed at any moment, even by SIGKILL, leaves a file
** that holds every event it recorded, whole: a plain trace ends at a line
** end, a gzip one at a flush point, which a reader inflates up to its last
** event (trace_read.c reads such a trace with a warning). What this costs
** per event is measured in BENCHMARKS.md ("Trace writing").
**
** A write that fails (a full disk) or is cut short makes the writer cut
** the file back to its last whole event (a gzip stream then ends at a
** flush point, read as cut short), then stay failed: later events
** are refused and close reports the error, so a short trace is never
** mistaken for a complete one; the error says how many events it keeps.
**
** The file is opened by outfile_open (src/base/outfile.h): never through a
** symbolic link, never over another user's file.
**
** Mark labels are the only free text in a trace: they are made safe for
** the format here (no comma, quote or line end; at most TRACE_LABEL_MAX
** bytes), never rejected, because they come from the user's program.
*/
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "base/outfile.h"
#include "base/text.h"
#include "trace/trace.h"

/* The header every writer emits; readers find columns by these names. A
** writer with call sites declares format 2 first and adds the site
** column. */
static const char trace_header[] = "t_us,op,id,size,stream,device,label\n";
static const char trace_header_sites[] = "#@format 2\n"
                                         "t_us,op,id,size,stream,device,label,site\n";

/* Limits of the reader (trace_read.c): the highest logical device and the
** longest line, in bytes without its line end. */
#define TRACE_MAX_DEVICE 1023
#define TRACE_MAX_LINE 4096

/*
** What a writer has already written to the frames table: an open-addressing
** table from a line's text (its key) to the id it was given, kept at most
** half full. Keys are the text of the line after its id, so the table
** compares exactly what a reader would see.
*/
struct intern_entry {
    uint64_t hash;
    char *key; /* owned; NULL marks an empty bucket */
    uint32_t len, id;
};

struct intern {
    struct intern_entry *b; /* 1 << bits buckets */
    unsigned bits;
    uint32_t n; /* ids given: 1..n */
};

/* Bytes of deflate's output written at a time. */
#define TRACE_ZBUF 16384

struct trace_writer {
    pthread_mutex_t lock; /* guards everything below */
    char *path;           /* owned, for error messages */
    int fd;               /* the file; -1 once closed */
    bool gzip;            /* deflate what is written (the name ends in .gz) */
    bool z_ready;         /* Z is initialized */
    z_stream z;           /* the gzip stream, when GZIP */
    unsigned char *zbuf;  /* TRACE_ZBUF bytes of deflate's output, when GZIP */
    char *pend;           /* the lines of the event being written (owned) */
    size_t n_pend, cap_pend; /* bytes in PEND, and room */
    off_t good;           /* bytes of the file that end at an event */
    uint64_t n_events;    /* events written whole (marks included) */
    bool failed;          /* a write failed; the file is incomplete */
    bool finished;        /* the file is closed (trace_writer_finish) */
    bool sites;           /* format 2: the site column and the frames table */
    struct intern frames; /* frame text -> frame id */
    struct intern site_ids; /* "F,F,F" -> site id */
};

static bool
ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/*
** Add N bytes of BUF to the lines being written; they reach the file at
** commit_locked. The caller holds w->lock (or owns W alone, while
** opening). On failure the writer is marked failed and the last error
** says why.
*/
static vram_status
write_bytes_locked(struct trace_writer *w, const char *buf, size_t n)
{
    if (w->finished)
        return error_set(VRAM_E_IO, "%s: the trace is already closed", w->path);
    if (w->failed)
        return error_set(VRAM_E_IO, "%s: an earlier write failed", w->path);
    if (w->n_pend + n > w->cap_pend) {
        size_t cap = w->cap_pend * 2 > w->n_pend + n ? w->cap_pend * 2 : w->n_pend + n;
        char *bigger = realloc(w->pend, cap);
        if (bigger == NULL) {
            w->failed = true;
            return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", w->path);
        }
        w->pend = bigger;
        w->cap_pend = cap;
    }
    memcpy(w->pend + w->n_pend, buf, n);
    w->n_pend += n;
    return VRAM_OK;
}

/* Write the N bytes at P to the file, whole; false with errno set. */
static bool
write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = ENOSPC; /* a regular file that takes nothing is full */
            return false;
        }
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/*
** Deflate the N bytes at P with FLUSH and write what comes out; false
** with errno set (0: zlib's own failure) when a write fails.
*/
static bool
deflate_out(struct trace_writer *w, const void *p, size_t n, int flush, off_t *written)
{
    z_stream *z = &w->z;
    z->next_in = (Bytef *)(uintptr_t)p;
    z->avail_in = (uInt)n;
    for (;;) {
        z->next_out = w->zbuf;
        z->avail_out = TRACE_ZBUF;
        int rc = deflate(z, flush);
        if (rc == Z_STREAM_ERROR) {
            errno = 0;
            return false;
        }
        size_t out = TRACE_ZBUF - z->avail_out;
        if (!write_all(w->fd, w->zbuf, out))
            return false;
        *written += (off_t)out;
        if (flush == Z_FINISH ? rc == Z_STREAM_END : z->avail_out > 0)
            return true;
    }
}

/*
** After a failed write: cut the file back to its last whole event, so that
** no half line is left (a gzip stream then ends at its last flush point,
** which a reader inflates up to that event: the deflate state has taken
** the failed event in, so the stream cannot be ended there). Best effort:
** the error is said already.
*/
static void
cut_back_locked(struct trace_writer *w)
{
    if (ftruncate(w->fd, w->good) != 0)
        return; /* nothing better to do: the reader drops a half line */
}

/*
** Send the lines gathered since the last event to the file: one write
** (plain), or deflated up to a Z_SYNC_FLUSH point (gzip). The caller holds
** w->lock. EVENTS: how many events they hold, for the count a failure
** reports.
*/
static vram_status
commit_locked(struct trace_writer *w, uint64_t events)
{
    if (w->failed || w->finished) {
        w->n_pend = 0;
        return error_set(VRAM_E_IO, "%s: %s", w->path,
                         w->finished ? "the trace is already closed" : "an earlier write failed");
    }
    off_t written = 0;
    bool ok = w->gzip ? deflate_out(w, w->pend, w->n_pend, Z_SYNC_FLUSH, &written)
                      : write_all(w->fd, (const unsigned char *)w->pend, w->n_pend);
    if (!w->gzip)
        written = (off_t)w->n_pend;
    int e = errno;
    w->n_pend = 0;
    if (ok) {
        w->good += written;
        w->n_events += events;
        return VRAM_OK;
    }
    w->failed = true;
    cut_back_locked(w);
    return error_set(VRAM_E_IO, "%s: %s (the trace keeps the %llu events written before)",
                     w->path, e != 0 ? strerror(e) : "cannot compress",
                     (unsigned long long)w->n_events);
}

/* Append the decimal digits of V at P; return the end. */
static char *
put_u64(char *p, uint64_t v)
{
    char digits[20];
    int n = 0;

    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        *p++ = digits[--n];
    return p;
}

static vram_status
writer_open(const char *path, const char *meta, bool sites, struct trace_writer **out)
{
    struct trace_writer *w;
    vram_status st = VRAM_OK;

    if (path == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "trace_writer_open: NULL argument");
    w = calloc(1, sizeof *w);
    if (w == NULL || (w->path = strdup(path)) == NULL) {
        free(w);
        return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", path);
    }
    if (pthread_mutex_init(&w->lock, NULL) != 0) {
        free(w->path);
        free(w);
        return error_set(VRAM_E_HOST_MEMORY, "%s: cannot create a mutex", path);
    }

    w->fd = -1;
    w->gzip = ends_with(path, ".gz");
    w->cap_pend = 4096;
    w->pend = malloc(w->cap_pend);
    if (w->pend == NULL)
        st = error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", path);
    if (st == VRAM_OK && w->gzip) {
        w->zbuf = malloc(TRACE_ZBUF);
        /* Level 6, the largest window, a gzip wrapper (15 + 16). */
        if (w->zbuf == NULL ||
            deflateInit2(&w->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            st = error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", path);
        else
            w->z_ready = true;
    }
    /* Close-on-exec, since the host process may fork and exec. */
    if (st == VRAM_OK)
        st = outfile_open(path, OUTFILE_TRUNCATE, &w->fd);

    if (st == VRAM_OK && meta != NULL) {
        /* The metadata must stay one line that readers accept: a line
         * end inside it would turn the rest into a (bad) header, and
         * readers refuse lines over 4096 bytes ("# " included). */
        size_t n = strnlen(meta, TRACE_MAX_LINE - 2);
        char *line = malloc(n + 3);
        if (line == NULL) {
            st = error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", path);
        } else {
            line[0] = '#';
            line[1] = ' ';
            n = trace_meta_safe(meta, n, line + 2); /* one line, no control */
            line[n + 2] = '\n';
            st = write_bytes_locked(w, line, n + 3);
            free(line);
        }
    }
    w->sites = sites;
    if (st == VRAM_OK && sites)
        st = write_bytes_locked(w, trace_header_sites, sizeof trace_header_sites - 1);
    else if (st == VRAM_OK)
        st = write_bytes_locked(w, trace_header, sizeof trace_header - 1);
    if (st == VRAM_OK)
        st = commit_locked(w, 0);

    if (st != VRAM_OK) {
        /* The status already set says why; closing adds nothing. */
        if (w->fd >= 0)
            close(w->fd);
        if (w->z_ready)
            deflateEnd(&w->z);
        free(w->zbuf);
        free(w->pend);
        pthread_mutex_destroy(&w->lock);
        free(w->path);
        free(w);
        return st;
    }
    *out = w;
    return VRAM_OK;
}

vram_status
trace_writer_open(const char *path, const char *meta, struct trace_writer **out)
{
    return writer_open(path, meta, false, out);
}

vram_status
trace_writer_open_sites(const char *path, const char *meta, struct trace_writer **out)
{
    return writer_open(path, meta, true, out);
}

/*
** Format the columns every event has, up to the label's: "t_us,op,id,
** size,stream,device," at P; return the end. At most 4 x 20 digits, 4 of
** the device, the op and 6 commas: 91 bytes.
*/
static char *
put_columns(char *p, uint64_t t_us, char op, uint64_t id, uint64_t size, uint64_t stream,
            int32_t device)
{
    p = put_u64(p, t_us);
    *p++ = ',';
    *p++ = op;
    *p++ = ',';
    p = put_u64(p, id);
    *p++ = ',';
    p = put_u64(p, size);
    *p++ = ',';
    p = put_u64(p, stream);
    *p++ = ',';
    p = put_u64(p, (uint64_t)device);
    *p++ = ',';
    return p;
}

/* Write the N bytes of LINE, one event, under the writer's lock. */
static vram_status
write_line(struct trace_writer *w, const char *line, size_t n)
{
    vram_status st;

    pthread_mutex_lock(&w->lock);
    st = write_bytes_locked(w, line, n);
    if (st == VRAM_OK)
        st = commit_locked(w, 1);
    pthread_mutex_unlock(&w->lock);
    return st;
}

static vram_status
check_device(const struct trace_writer *w, int32_t device)
{
    if (device < 0 || device > TRACE_MAX_DEVICE)
        return error_set(VRAM_E_INVALID, "%s: event device %d outside 0..%d", w->path,
                         (int)device, TRACE_MAX_DEVICE);
    return VRAM_OK;
}

vram_status
trace_writer_event(struct trace_writer *w, const struct trace_event *ev)
{
    char line[128], *p;
    vram_status st;

    if (w == NULL || ev == NULL)
        return error_set(VRAM_E_INVALID, "trace_writer_event: NULL argument");
    /* Refuse what no reader would accept rather than write a broken file. */
    if (ev->op != TRACE_ALLOC && ev->op != TRACE_FREE && ev->op != TRACE_OOM)
        return error_set(
            VRAM_E_INVALID,
            "%s: event op must be 'a', 'f' or 'o' (marks: trace_writer_mark)", w->path);
    if (ev->op == TRACE_OOM && ev->size == 0)
        return error_set(VRAM_E_INVALID, "%s: an 'o' event needs the size asked for",
                         w->path);
    if ((st = check_device(w, ev->device)) != VRAM_OK)
        return st;

    p = put_columns(line, ev->t_us, ev->op, ev->op == TRACE_OOM ? 0 : ev->id, ev->size,
                    ev->stream, ev->device);
    if (w->sites) {
        *p++ = ','; /* an empty label */
        if (ev->op != TRACE_FREE && ev->site != TRACE_NO_SITE)
            p = put_u64(p, ev->site);
    }
    *p++ = '\n'; /* an empty label (and site) */
    return write_line(w, line, (size_t)(p - line));
}

/*
** Copy LABEL (at most LEN bytes; a NUL ends it sooner) into OUT as the
** format allows it (see the top of the file): at most MAX bytes, never
** cutting a UTF-8 sequence in two; commas, double quotes and control
** characters become spaces, and bytes a terminal must not get (those that
** are not UTF-8, C1 controls, format characters that reorder text:
** base/text.h) become '?'. Returns the bytes written. Labels, the text of
** frames and the metadata all come this way, on writing and on reading;
** the metadata, a comment, keeps its commas and quotes (FIELD false).
*/
static size_t
sanitize_text_n_as(const char *label, size_t len, size_t max, bool field, char *out)
{
    size_t n = strnlen(label, len < max + 1 ? len : max + 1), i;

    if (n > max) {
        /* Back up over continuation bytes (10xxxxxx) to the start of the
         * sequence that the cut splits, and drop that sequence whole: at
         * most 3 bytes, since a UTF-8 sequence has at most 4 (text that is
         * not UTF-8 is simply cut). */
        n = max;
        while (n > max - 3 && ((unsigned char)label[n] & 0xc0) == 0x80)
            n--;
        if (((unsigned char)label[n] & 0xc0) == 0x80)
            n = max;
    }
    for (i = 0; i < n;) {
        unsigned char c = (unsigned char)label[i];
        size_t k = text_char_len(label + i, n - i);
        if (k == 0) {
            out[i++] = c < 0x80 ? ' ' : '?';
        } else if (field && (c == ',' || c == '"')) {
            out[i++] = ' ';
        } else {
            memcpy(out + i, label + i, k);
            i += k;
        }
    }
    return n;
}

static size_t
sanitize_text_n(const char *label, size_t len, size_t max, char *out)
{
    return sanitize_text_n_as(label, len, max, true, out);
}

size_t
trace_meta_safe(const char *meta, size_t len, char *out)
{
    return sanitize_text_n_as(meta, len, TRACE_MAX_LINE - 2, false, out);
}

/* A C string, as the writer's callers give it. */
static size_t
sanitize_text(const char *label, size_t max, char *out)
{
    return sanitize_text_n(label, max + 1, max, out);
}

size_t
trace_label_safe(const char *label, size_t len, char *out)
{
    return sanitize_text_n(label, len, TRACE_LABEL_MAX, out);
}

size_t
trace_text_safe(const char *text, size_t len, size_t max, char *out)
{
    return sanitize_text_n(text, len, max, out);
}

vram_status
trace_writer_mark(struct trace_writer *w, uint64_t t_us, int32_t device,
                  const char *label)
{
    /* The columns (91 bytes at most), the label and the line end. */
    char line[96 + TRACE_LABEL_MAX + 2], *p;
    vram_status st;

    if (w == NULL || label == NULL)
        return error_set(VRAM_E_INVALID, "trace_writer_mark: NULL argument");
    if (label[0] == '\0')
        return error_set(VRAM_E_INVALID, "%s: a mark needs a label", w->path);
    if ((st = check_device(w, device)) != VRAM_OK)
        return st;

    p = put_columns(line, t_us, TRACE_MARK, 0, 0, 0, device);
    p += sanitize_text(label, TRACE_LABEL_MAX, p);
    if (w->sites)
        *p++ = ','; /* no site */
    *p++ = '\n';
    return write_line(w, line, (size_t)(p - line));
}

/* ------------------------------------------------------------------ */
/* The frames table                                                     */
/* ------------------------------------------------------------------ */

static void
intern_destroy(struct intern *t)
{
    size_t i;

    if (t->b == NULL)
        return;
    for (i = 0; i < ((size_t)1 << t->bits); i++)
        free(t->b[i].key);
    free(t->b);
    t->b = NULL;
}

static struct intern_entry *
intern_bucket(const struct intern *t, uint64_t h, const char *key, size_t n)
{
    size_t mask = ((size_t)1 << t->bits) - 1, i = (size_t)h & mask;

    while (t->b[i].key != NULL &&
           !(t->b[i].hash == h && t->b[i].len == n && memcmp(t->b[i].key, key, n) == 0))
        i = (i + 1) & mask;
    return &t->b[i];
}

/*
** The id of KEY (N bytes) in T into *ID; *ADDED when it is new (the
** caller then writes its line). False when out of host memory.
*/
static bool
intern_get(struct intern *t, const char *key, size_t n, uint32_t *id, bool *added)
{
    uint64_t h = trace_text_hash(key, n);
    struct intern_entry *e;

    if (t->b == NULL || ((size_t)t->n + 1) * 2 > ((size_t)1 << t->bits)) {
        struct intern bigger = {.bits = t->b == NULL ? 8 : t->bits + 1, .n = t->n};
        size_t i;
        bigger.b = calloc((size_t)1 << bigger.bits, sizeof *bigger.b);
        if (bigger.b == NULL)
            return false;
        for (i = 0; t->b != NULL && i < ((size_t)1 << t->bits); i++)
            if (t->b[i].key != NULL)
                *intern_bucket(&bigger, t->b[i].hash, t->b[i].key, t->b[i].len) = t->b[i];
        free(t->b);
        *t = bigger;
    }
    e = intern_bucket(t, h, key, n);
    *added = e->key == NULL;
    if (*added) {
        if ((e->key = malloc(n > 0 ? n : 1)) == NULL)
            return false;
        memcpy(e->key, key, n);
        e->hash = h;
        e->len = (uint32_t)n;
        e->id = ++t->n;
    }
    *id = e->id;
    return true;
}

/* Write the table line "#@WHAT ID,KEY" (the caller holds the lock). */
static vram_status
write_table_line_locked(struct trace_writer *w, const char *what, uint32_t id,
                        const char *key, size_t n)
{
    char head[32], *p = head;

    *p++ = '#';
    *p++ = '@';
    p = (char *)memcpy(p, what, strlen(what)) + strlen(what);
    *p++ = ' ';
    p = put_u64(p, id);
    *p++ = ',';
    vram_status st = write_bytes_locked(w, head, (size_t)(p - head));
    if (st == VRAM_OK)
        st = write_bytes_locked(w, key, n);
    if (st == VRAM_OK)
        st = write_bytes_locked(w, "\n", 1);
    return st;
}

/* The key of frame F, as its line has it after the id: at most 3 texts of
** TRACE_FRAME_TEXT_MAX and two numbers. */
static size_t
frame_key(const struct trace_frame *f, char *out)
{
    static const char hex[] = "0123456789abcdef";
    char *p = out;

    switch (f->kind) {
    case TRACE_FRAME_PY:
        p = (char *)memcpy(p, "py,", 3) + 3;
        p += sanitize_text(f->file != NULL && f->file[0] != '\0' ? f->file : "?",
                           TRACE_FRAME_TEXT_MAX, p);
        *p++ = ',';
        p = put_u64(p, f->line);
        *p++ = ',';
        p += sanitize_text(f->func != NULL ? f->func : "", TRACE_FRAME_TEXT_MAX, p);
        break;
    case TRACE_FRAME_NATIVE: {
        char digits[16];
        int n = 0;
        uint64_t v = f->offset;
        p = (char *)memcpy(p, "native,", 7) + 7;
        p += sanitize_text(f->file != NULL && f->file[0] != '\0' ? f->file : "?",
                           TRACE_FRAME_TEXT_MAX, p);
        *p++ = ',';
        *p++ = '0';
        *p++ = 'x';
        do {
            digits[n++] = hex[v & 15];
            v >>= 4;
        } while (v != 0);
        while (n > 0)
            *p++ = digits[--n];
        *p++ = ',';
        p += sanitize_text(f->func != NULL ? f->func : "", TRACE_FRAME_TEXT_MAX, p);
        break;
    }
    default: /* TRACE_FRAME_NOTE */
        p = (char *)memcpy(p, "note,", 5) + 5;
        p += sanitize_text(f->func != NULL && f->func[0] != '\0' ? f->func : "?",
                           TRACE_FRAME_TEXT_MAX, p);
        break;
    }
    return (size_t)(p - out);
}

vram_status
trace_writer_site(struct trace_writer *w, const struct trace_frame *frames, int n,
                  uint32_t *site)
{
    char key[3 * TRACE_FRAME_TEXT_MAX + 64];
    char ids[TRACE_SITE_MAX_FRAMES * 11], *p = ids;
    vram_status st = VRAM_OK;
    uint32_t id;
    bool added;
    int i;

    if (w == NULL || frames == NULL || site == NULL)
        return error_set(VRAM_E_INVALID, "trace_writer_site: NULL argument");
    if (!w->sites)
        return error_set(VRAM_E_INVALID, "%s: the trace was opened without call sites",
                         w->path);
    if (n <= 0)
        return error_set(VRAM_E_INVALID, "%s: a call site needs a frame", w->path);
    if (n > TRACE_SITE_MAX_FRAMES)
        n = TRACE_SITE_MAX_FRAMES;
    for (i = 0; i < n; i++)
        if (frames[i].kind != TRACE_FRAME_PY && frames[i].kind != TRACE_FRAME_NATIVE &&
            frames[i].kind != TRACE_FRAME_NOTE)
            return error_set(VRAM_E_INVALID, "%s: frame kind '%c' is unknown", w->path,
                             frames[i].kind);

    pthread_mutex_lock(&w->lock);
    for (i = 0; i < n && st == VRAM_OK; i++) {
        size_t len = frame_key(&frames[i], key);
        if (!intern_get(&w->frames, key, len, &id, &added))
            st = error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", w->path);
        else if (added)
            st = write_table_line_locked(w, "frame", id, key, len);
        if (i > 0)
            *p++ = ',';
        p = put_u64(p, id);
    }
    if (st == VRAM_OK && !intern_get(&w->site_ids, ids, (size_t)(p - ids), &id, &added))
        st = error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", w->path);
    else if (st == VRAM_OK && added)
        st = write_table_line_locked(w, "site", id, ids, (size_t)(p - ids));
    if (st == VRAM_OK && w->n_pend > 0)
        st = commit_locked(w, 0); /* the new table lines, before the event */
    else if (st != VRAM_OK)
        w->n_pend = 0; /* nothing half made reaches the file */
    pthread_mutex_unlock(&w->lock);
    if (st == VRAM_OK)
        *site = id;
    return st;
}

vram_status
trace_writer_held(struct trace_writer *w, uint64_t id, const char *text)
{
    char line[32 + TRACE_FRAME_TEXT_MAX + 2], *p = line;

    if (w == NULL || text == NULL)
        return error_set(VRAM_E_INVALID, "trace_writer_held: NULL argument");
    if (!w->sites)
        return error_set(VRAM_E_INVALID, "%s: the trace was opened without call sites",
                         w->path);
    if (text[0] == '\0')
        return error_set(VRAM_E_INVALID, "%s: a held line needs a text", w->path);
    p = (char *)memcpy(p, "#@held ", 7) + 7;
    p = put_u64(p, id);
    *p++ = ',';
    p += sanitize_text(text, TRACE_FRAME_TEXT_MAX, p);
    *p++ = '\n';
    return write_line(w, line, (size_t)(p - line));
}

/* Close W's file once; later writes fail. The caller holds w->lock. */
static vram_status
finish_locked(struct trace_writer *w)
{
    vram_status st = VRAM_OK;

    if (w->finished)
        return VRAM_OK;
    if (w->failed)
        st = error_set(VRAM_E_IO,
                       "%s: an earlier write failed; the trace "
                       "is incomplete",
                       w->path);
    if (w->gzip && w->z_ready && !w->failed) {
        off_t written = 0;
        if (!deflate_out(w, "", 0, Z_FINISH, &written)) {
            int e = errno;
            cut_back_locked(w);
            st = error_set(VRAM_E_IO, "%s: %s (the gzip stream could not be ended; the "
                                      "trace keeps its %llu events)",
                           w->path, e != 0 ? strerror(e) : "cannot compress",
                           (unsigned long long)w->n_events);
        }
    }
    if (w->z_ready) {
        deflateEnd(&w->z);
        w->z_ready = false;
    }
    w->finished = true;
    if (w->fd >= 0) {
        if (close(w->fd) != 0 && st == VRAM_OK)
            st = error_set(VRAM_E_IO, "%s: %s", w->path, strerror(errno));
        w->fd = -1;
    }
    return st;
}

vram_status
trace_writer_finish(struct trace_writer *w)
{
    vram_status st;

    if (w == NULL)
        return VRAM_OK;
    pthread_mutex_lock(&w->lock);
    st = finish_locked(w);
    pthread_mutex_unlock(&w->lock);
    return st;
}

void
trace_writer_fork_prepare(struct trace_writer *w)
{
    if (w == NULL)
        return;
    /* Every event is in the file already (commit_locked): holding the lock
     * is all it takes for the child's copy to hold nothing of the parent's. */
    pthread_mutex_lock(&w->lock);
}

void
trace_writer_fork_parent(struct trace_writer *w)
{
    if (w != NULL)
        pthread_mutex_unlock(&w->lock);
}

vram_status
trace_writer_close(struct trace_writer *w)
{
    vram_status st;

    if (w == NULL)
        return VRAM_OK;
    st = finish_locked(w); /* W is the caller's alone now */
    free(w->pend);
    free(w->zbuf);
    intern_destroy(&w->frames);
    intern_destroy(&w->site_ids);
    pthread_mutex_destroy(&w->lock);
    free(w->path);
    free(w);
    return st;
}
