/* SPDX-License-Identifier: MIT */
/*
** fuzz_trace.c -- a libFuzzer target over the trace reader (src/trace).
**
** The input is a trace file's bytes, plain CSV or gzip (the reader tells
** them apart by the content). It is loaded from a memory file through
** trace_load, the path every tool takes. Invariants:
**  - a refusal is one line that names the file;
**  - a loaded trace is consistent: every allocation or free has a slot
**    below n_slots, every mark a label below n_labels, every device below
**    n_devices, marks and OOMs counted;
**  - writing it back (trace_writer) and loading that gives the same
**    events: what the reader accepts, the writer can express.
** Built without libFuzzer, replay.c's main() runs the corpus once.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"
#include "trace/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fail(const char *what)
{
    fprintf(stderr, "fuzz_trace: invariant broken: %s (%s)\n", what, vram_last_error());
    abort();
}

/* A memory file holding DATA; its path ("/proc/self/fd/N") into PATH. */
static int
memory_file(const char *name, const uint8_t *data, size_t size, char *path, size_t len)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    for (size_t off = 0; off < size;) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

static void
check_consistent(const struct trace *t)
{
    uint64_t marks = 0, ooms = 0;
    for (uint64_t i = 0; i < t->n_events; i++) {
        const struct trace_event *e = &t->events[i];
        if (e->device < 0 || e->device >= t->n_devices)
            fail("an event's device is out of range");
        switch (e->op) {
        case TRACE_ALLOC:
        case TRACE_FREE:
            if (e->slot >= t->n_slots)
                fail("an allocation's slot is out of range");
            break;
        case TRACE_MARK:
            marks++;
            if (e->label >= t->n_labels || t->labels[e->label] == NULL)
                fail("a mark's label is out of range");
            break;
        case TRACE_OOM:
            ooms++;
            break;
        default:
            fail("an event of unknown op");
        }
    }
    if (marks != t->n_marks || ooms != t->n_ooms)
        fail("marks or OOMs miscounted");
}

/* Write T to a memory file and load it again: the same events. */
static void
check_round_trip(const struct trace *t)
{
    char path[64];
    int fd = memory_file("fuzz-trace-out", NULL, 0, path, sizeof path);
    if (fd < 0)
        return;
    struct trace_writer *w = NULL;
    if (trace_writer_open(path, t->meta, &w) != VRAM_OK) {
        close(fd);
        return;
    }
    for (uint64_t i = 0; i < t->n_events; i++) {
        const struct trace_event *e = &t->events[i];
        vram_status st = e->op == TRACE_MARK
                             ? trace_writer_mark(w, e->t_us, e->device, t->labels[e->label])
                             : trace_writer_event(w, e);
        if (st != VRAM_OK)
            fail("the writer refused an event the reader accepted");
    }
    if (trace_writer_close(w) != VRAM_OK)
        fail("the writer's close failed");
    struct trace *u = NULL;
    if (trace_load(path, &u) != VRAM_OK)
        fail("a written trace does not load");
    if (u->n_events != t->n_events || u->n_slots != t->n_slots ||
        u->peak_live_bytes != t->peak_live_bytes || u->n_marks != t->n_marks ||
        u->n_ooms != t->n_ooms)
        fail("a written trace loads differently");
    for (uint64_t i = 0; i < t->n_events; i++) {
        const struct trace_event *a = &t->events[i], *b = &u->events[i];
        if (a->op != b->op || a->t_us != b->t_us || a->size != b->size || a->stream != b->stream ||
            a->device != b->device || (a->op != TRACE_MARK && a->id != b->id) ||
            (a->op == TRACE_MARK && strcmp(t->labels[a->label], u->labels[b->label]) != 0))
            fail("an event changed on the way through the writer");
    }
    trace_free(u);
    close(fd);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = memory_file("fuzz-trace", data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    struct trace *t = NULL;
    vram_status st = trace_load(path, &t);
    if (st != VRAM_OK) {
        const char *err = vram_last_error();
        if (t != NULL || strchr(err, '\n') != NULL || strncmp(err, path, strlen(path)) != 0)
            fail("a refusal is not one line naming the file");
    } else {
        check_consistent(t);
        check_round_trip(t);
        trace_free(t);
    }
    close(fd);
    return 0;
}
