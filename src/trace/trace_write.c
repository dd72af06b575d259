/* SPDX-License-Identifier: MIT */
/*
** trace_write.c -- write allocation traces (docs/TRACE_FORMAT.md), plain or
** gzip-compressed, from any number of threads.
**
** Writers run inside the host process (the preload library traces live
** allocations), so every event is formatted by hand into a small stack
** buffer and written under one mutex: no allocation, no stdio locale
** machinery per event, and lines from different threads never interleave.
** After the first failed write the writer stays failed: later events are
** refused and close reports the error, so a short trace is never mistaken
** for a complete one.
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
#include <zlib.h>

#include "base/error.h"
#include "trace/trace.h"

/* The header every writer emits; readers find columns by these names. */
static const char trace_header[] = "t_us,op,id,size,stream,device,label\n";

/* Limits of the reader (trace_read.c): the highest logical device and the
** longest line, in bytes without its line end. */
#define TRACE_MAX_DEVICE 1023
#define TRACE_MAX_LINE 4096

struct trace_writer {
    pthread_mutex_t lock; /* guards everything below */
    char *path;           /* owned, for error messages */
    gzFile gz;            /* set when writing gzip ... */
    FILE *fp;             /* ... else this */
    bool failed;          /* a write failed; the file is incomplete */
    bool finished;        /* the file is closed (trace_writer_finish) */
};

static bool
ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/*
** Write N bytes of BUF. The caller holds w->lock (or owns W alone, while
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
    if (w->gz != NULL) {
        if (n > 0 && gzwrite(w->gz, buf, (unsigned)n) != (int)n) {
            int errnum;
            const char *msg = gzerror(w->gz, &errnum);
            w->failed = true;
            return error_set(VRAM_E_IO, "%s: %s", w->path,
                             errnum == Z_ERRNO ? strerror(errno) : msg);
        }
    } else if (fwrite(buf, 1, n, w->fp) != n) {
        w->failed = true;
        return error_set(VRAM_E_IO, "%s: %s", w->path, strerror(errno));
    }
    return VRAM_OK;
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

vram_status
trace_writer_open(const char *path, const char *meta, struct trace_writer **out)
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

    /* 'e': close-on-exec, since the host process may fork and exec. */
    errno = 0;
    if (ends_with(path, ".gz")) {
        w->gz = gzopen(path, "wb6e");
        if (w->gz == NULL)
            st = error_set(VRAM_E_IO, "%s: %s", path,
                           errno != 0 ? strerror(errno) : "cannot open");
    } else {
        w->fp = fopen(path, "we");
        if (w->fp == NULL)
            st = error_set(VRAM_E_IO, "%s: %s", path, strerror(errno));
    }

    if (st == VRAM_OK && meta != NULL) {
        /* The metadata must stay one line that readers accept: a line
         * end inside it would turn the rest into a (bad) header, and
         * readers refuse lines over 4096 bytes ("# " included). */
        size_t i, n = strnlen(meta, TRACE_MAX_LINE - 2);
        char *line = malloc(n + 3);
        if (line == NULL) {
            st = error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", path);
        } else {
            line[0] = '#';
            line[1] = ' ';
            for (i = 0; i < n; i++)
                line[2 + i] = (meta[i] == '\n' || meta[i] == '\r') ? ' ' : meta[i];
            line[n + 2] = '\n';
            st = write_bytes_locked(w, line, n + 3);
            free(line);
        }
    }
    if (st == VRAM_OK)
        st = write_bytes_locked(w, trace_header, sizeof trace_header - 1);

    if (st != VRAM_OK) {
        /* The status already set says why; closing adds nothing. */
        if (w->gz != NULL)
            gzclose_w(w->gz);
        if (w->fp != NULL)
            fclose(w->fp);
        pthread_mutex_destroy(&w->lock);
        free(w->path);
        free(w);
        return st;
    }
    *out = w;
    return VRAM_OK;
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

/* Write the N bytes of LINE under the writer's lock. */
static vram_status
write_line(struct trace_writer *w, const char *line, size_t n)
{
    vram_status st;

    pthread_mutex_lock(&w->lock);
    st = write_bytes_locked(w, line, n);
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
    *p++ = '\n'; /* an empty label */
    return write_line(w, line, (size_t)(p - line));
}

/*
** Copy LABEL into OUT as the format allows it (see the top of the file):
** at most TRACE_LABEL_MAX bytes, never cutting a UTF-8 sequence in two.
** Returns the bytes written.
*/
static size_t
sanitize_label(const char *label, char *out)
{
    size_t n = strnlen(label, TRACE_LABEL_MAX + 1), i;

    if (n > TRACE_LABEL_MAX) {
        /* Back up over continuation bytes (10xxxxxx) to the start of the
         * sequence that the cut splits, and drop that sequence whole: at
         * most 3 bytes, since a UTF-8 sequence has at most 4 (text that is
         * not UTF-8 is simply cut). */
        n = TRACE_LABEL_MAX;
        while (n > TRACE_LABEL_MAX - 3 && ((unsigned char)label[n] & 0xc0) == 0x80)
            n--;
        if (((unsigned char)label[n] & 0xc0) == 0x80)
            n = TRACE_LABEL_MAX;
    }
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)label[i];
        out[i] = (c < 0x20 || c == 0x7f || c == ',' || c == '"') ? ' ' : (char)c;
    }
    return n;
}

vram_status
trace_writer_mark(struct trace_writer *w, uint64_t t_us, int32_t device,
                  const char *label)
{
    /* The columns (91 bytes at most), the label and the line end. */
    char line[96 + TRACE_LABEL_MAX + 1], *p;
    vram_status st;

    if (w == NULL || label == NULL)
        return error_set(VRAM_E_INVALID, "trace_writer_mark: NULL argument");
    if (label[0] == '\0')
        return error_set(VRAM_E_INVALID, "%s: a mark needs a label", w->path);
    if ((st = check_device(w, device)) != VRAM_OK)
        return st;

    p = put_columns(line, t_us, TRACE_MARK, 0, 0, 0, device);
    p += sanitize_label(label, p);
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
    w->finished = true;
    if (w->failed)
        st = error_set(VRAM_E_IO,
                       "%s: an earlier write failed; the trace "
                       "is incomplete",
                       w->path);
    if (w->gz != NULL) {
        int rc = gzclose_w(w->gz);
        if (rc != Z_OK && st == VRAM_OK)
            st = error_set(VRAM_E_IO, "%s: %s", w->path,
                           rc == Z_ERRNO ? strerror(errno)
                                         : "gzip stream could not be finished");
        w->gz = NULL;
    } else if (w->fp != NULL) {
        if (fclose(w->fp) != 0 && st == VRAM_OK)
            st = error_set(VRAM_E_IO, "%s: %s", w->path, strerror(errno));
        w->fp = NULL;
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
    pthread_mutex_lock(&w->lock);
    if (w->finished || w->failed)
        return;
    /* Z_SYNC_FLUSH: everything so far reaches the file, and the stream
     * goes on afterwards. A failure here fails the writer as a write would. */
    if (w->gz != NULL ? gzflush(w->gz, Z_SYNC_FLUSH) != Z_OK : fflush(w->fp) != 0)
        w->failed = true;
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
    pthread_mutex_destroy(&w->lock);
    free(w->path);
    free(w);
    return st;
}
