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
*/
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/error.h"
#include "trace/trace.h"

/* The header every writer emits; readers find columns by these names. */
static const char trace_header[] = "t_us,op,id,size,stream,device\n";

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

vram_status
trace_writer_event(struct trace_writer *w, const struct trace_event *ev)
{
    /* Five 20-digit numbers, a 4-digit device, the op and separators. */
    char line[128], *p = line;
    vram_status st;

    if (w == NULL || ev == NULL)
        return error_set(VRAM_E_INVALID, "trace_writer_event: NULL argument");
    /* Refuse what no reader would accept rather than write a broken file. */
    if (ev->op != TRACE_ALLOC && ev->op != TRACE_FREE)
        return error_set(VRAM_E_INVALID, "%s: event op must be 'a' or 'f'", w->path);
    if (ev->device < 0 || ev->device > TRACE_MAX_DEVICE)
        return error_set(VRAM_E_INVALID, "%s: event device %d outside 0..%d", w->path,
                         (int)ev->device, TRACE_MAX_DEVICE);

    p = put_u64(p, ev->t_us);
    *p++ = ',';
    *p++ = ev->op;
    *p++ = ',';
    p = put_u64(p, ev->id);
    *p++ = ',';
    p = put_u64(p, ev->size);
    *p++ = ',';
    p = put_u64(p, ev->stream);
    *p++ = ',';
    p = put_u64(p, (uint64_t)ev->device);
    *p++ = '\n';

    pthread_mutex_lock(&w->lock);
    st = write_bytes_locked(w, line, (size_t)(p - line));
    pthread_mutex_unlock(&w->lock);
    return st;
}

vram_status
trace_writer_close(struct trace_writer *w)
{
    vram_status st = VRAM_OK;

    if (w == NULL)
        return VRAM_OK;
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
    } else if (fclose(w->fp) != 0 && st == VRAM_OK) {
        st = error_set(VRAM_E_IO, "%s: %s", w->path, strerror(errno));
    }
    pthread_mutex_destroy(&w->lock);
    free(w->path);
    free(w);
    return st;
}
