/* SPDX-License-Identifier: MIT */
/*
** trace.h -- reading and writing allocation traces (docs/TRACE_FORMAT.md).
**
** A trace is CSV, optionally gzip-compressed (detected from the content,
** not the name): an optional first line "# key=value ..." of metadata, a
** header naming the columns, then one event a line:
**     t_us,op,id,size,stream[,device][,label]
** op is 'a' (allocate), 'f' (free; it names the id it releases), 'm' (a
** phase mark: its text is in the label column) or 'o' (an allocation of
** SIZE bytes refused for lack of memory). Columns are found by their
** header name, so readers accept the shared traces (no device or label
** column, only 'a' and 'f') and vram's own.
*/
#ifndef VRAM_TRACE_TRACE_H
#define VRAM_TRACE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vram.h"

enum trace_op {
    TRACE_ALLOC = 'a', /* id, size, stream, device */
    TRACE_FREE = 'f',  /* the id it releases, with its size and device */
    TRACE_MARK = 'm',  /* a phase mark: label; id, size and stream are 0 */
    TRACE_OOM = 'o'    /* an allocation of size bytes refused; id is 0 */
};

/* Longest mark label, in bytes; longer labels are cut on writing. */
#define TRACE_LABEL_MAX 128

/*
** Copy LABEL (at most LEN bytes; a NUL ends it sooner) into OUT (room for
** TRACE_LABEL_MAX bytes) as the format allows a label: commas, double
** quotes and control characters become spaces, bytes a terminal must not
** get (not UTF-8, C1 controls, format characters that reorder text:
** base/text.h) become '?', and it is cut at TRACE_LABEL_MAX bytes, never
** inside a UTF-8 sequence. Returns the bytes
** written (no NUL). The writer makes the labels it is given safe with it,
** and the reader those of a trace made by hand, so that no consumer ever
** prints a control character from a trace.
*/
size_t trace_label_safe(const char *label, size_t len, char *out);

/* The same for other text of a trace: TEXT (at most LEN bytes) cut at MAX
** bytes, into OUT (room for MAX bytes): a frame's file, function or note
** (MAX TRACE_FRAME_TEXT_MAX). */
size_t trace_text_safe(const char *text, size_t len, size_t max, char *out);

/* The metadata line's text (without "# ") as writers write it and readers
** keep it: at most 4094 bytes, control characters as spaces and what a
** terminal must not get as '?' (commas and quotes stay), into OUT (room
** for 4094 bytes). Returns the bytes written. */
size_t trace_meta_safe(const char *meta, size_t len, char *out);

/* The slot of events that have none (marks and OOMs): never an index. */
#define TRACE_NO_SLOT UINT32_MAX

/* The label of events that have none (all but marks). */
#define TRACE_NO_LABEL UINT32_MAX

/* The call site of events that have none: no site recorded, or a trace
** without a frames table. Sites are numbered from 1. */
#define TRACE_NO_SITE 0

/* The newest format this reader reads (docs/TRACE_FORMAT.md): 1, the
** events alone; 2, the events with a call-site column and a frames table
** in "#@" lines. */
#define TRACE_FORMAT_VERSION 2

/* Most frames in one call site, and the longest text of a frame (a file,
** a module, a function or symbol, a note), in bytes; writers cut longer
** text. A frame line stays well under the 4096-byte line limit. */
#define TRACE_SITE_MAX_FRAMES 64
#define TRACE_FRAME_TEXT_MAX 1000

/*
** One frame of a call site: a line of Python source, a native return
** address (as its module and the offset from the module's load address,
** which addr2line takes), or a note saying what is honestly known where
** there is no frame ("no Python frame on thread pt_autograd_0").
*/
enum trace_frame_kind {
    TRACE_FRAME_PY = 'p',     /* file, line, func */
    TRACE_FRAME_NATIVE = 'n', /* file = module path, offset, func = symbol or "" */
    TRACE_FRAME_NOTE = 't'    /* func = the note's text; file "" */
};

struct trace_frame {
    const char *file; /* py: the source file; native: the module; note: "" */
    const char *func; /* py: the function; native: the symbol ("" unknown); note: text */
    uint64_t offset;  /* native: return address - the module's load address */
    uint32_t line;    /* py: the line number (0 unknown) */
    char kind;        /* enum trace_frame_kind */
};

struct trace_event {
    uint64_t t_us;   /* wall-clock microseconds */
    uint64_t id;     /* allocation number, unique within the trace */
    uint64_t size;   /* bytes */
    uint64_t stream; /* opaque stream handle; 0 = default */
    uint32_t slot;   /* dense index of id, 0..n_slots-1 (loader only); for
                        marks and OOMs TRACE_NO_SLOT: replays skip them */
    int32_t device;  /* logical device; 0 when the trace has no column */
    uint32_t label;  /* TRACE_MARK: index into trace.labels (loader only);
                        TRACE_NO_LABEL for the other ops */
    uint32_t site;   /* 'a' and 'o': the call site, 1..trace.n_sites, or
                        TRACE_NO_SITE */
    char op;         /* enum trace_op */
};

/*
** A whole trace in memory, validated: every free names an id that is
** live at that point, no id is allocated twice. Ids are mapped to dense
** slots so replays can index arrays. Marks and OOMs are events too (in
** order, with t_us and device) but have no slot and change no live bytes.
*/
/*
** What held a live allocation at one point of the recording (a "#@held"
** line of format 2): the variable or container of the program that refers
** to it, as the Python side of `vram record` named it (docs/RECORD.md).
*/
struct trace_held {
    uint64_t id;    /* the allocation's id */
    uint64_t event; /* the line came before event EVENT (n_events: the end) */
    char *text;     /* "list `history` of module __main__; ...", made safe; owned */
};

struct trace {
    char *path;                 /* as given; owned */
    char *meta;                 /* the "# ..." line without "# ", or "" ; owned */
    struct trace_event *events; /* owned */
    uint64_t n_events;
    uint32_t n_slots;         /* distinct ids */
    int n_devices;            /* 1 + highest device seen */
    uint64_t peak_live_bytes; /* max over time of the sum of live sizes */
    char **labels;            /* mark labels, distinct, owned; marks refer by
                                 index (event.label < n_labels) */
    uint32_t n_labels;
    uint64_t n_marks, n_ooms; /* events of those kinds */
    int format;               /* the file's format version: 1 or 2 */
    struct trace_frame *frames; /* the frames table, owned (its strings too) */
    uint32_t n_frames;
    uint32_t n_sites;           /* call sites 1..n_sites */
    uint32_t *site_start;       /* site s's frames are site_frames[site_start[s-1]
                                   .. site_start[s]-1]: n_sites + 1 entries */
    uint32_t *site_frames;      /* indexes into frames, innermost first */
    char *cut;                  /* NULL when the file is whole; else one line
                                   (no "vram: ") saying where it was found cut
                                   short and up to which line it was read, or
                                   that its last line lacks a line end. Owned */
    struct trace_held *held;    /* "#@held" lines in their order, owned */
    uint64_t n_held;
};

/* The frames of call site SITE of T (1..n_sites), innermost first, as
** indexes into t->frames, and their count in *N. NULL and 0 for
** TRACE_NO_SITE or a site out of range. */
const uint32_t *trace_site_frames(const struct trace *t, uint32_t site, uint32_t *n);

/*
** Load PATH (.csv or .csv.gz). On malformed input: VRAM_E_PARSE and the
** thread's last error is "PATH:LINE: reason" (bad number, unknown op,
** missing column, free of an unknown id, duplicate id, corrupt gzip...).
** A file cut short (a gzip stream that ends early, a last line without its
** line end that does not read) is not malformed: it loads up to its last
** whole line, and the trace's CUT says so, for the caller to show.
** VRAM_E_IO if the file cannot be read (last error says why),
** VRAM_E_HOST_MEMORY. OUT written only on success.
*/
vram_status trace_load(const char *path, struct trace **out);

/* Free T. NULL does nothing. */
void trace_free(struct trace *t);

/* The name of the trace at PATH for a report, in BUF (LEN bytes): its
** basename without ".trace.csv.gz" (or ".trace.csv", ".csv.gz", ".csv",
** ".gz"). Returns BUF. */
const char *trace_display_name(const char *path, char *buf, size_t len);

/* FNV-1a over the N bytes at P: the hash of the reader's label table and
** of the writer's frames table. */
uint64_t trace_text_hash(const char *p, size_t n);

/* ---- writing ---- */

struct trace_writer;

/*
** Create PATH (gzip-compressed when it ends in ".gz") and write the
** metadata line (META without the "# "; may be NULL) and the header.
** VRAM_E_IO with the reason in the last error.
*/
vram_status trace_writer_open(const char *path, const char *meta,
                              struct trace_writer **out);

/*
** The same, for a trace that carries call sites: format 2, with the
** "#@format 2" line and the site column (trace_writer_site). A trace
** opened by trace_writer_open is format 1, as every trace was before.
*/
vram_status trace_writer_open_sites(const char *path, const char *meta,
                                    struct trace_writer **out);

/*
** The id of the call site made of the N FRAMES (innermost first; at most
** TRACE_SITE_MAX_FRAMES are kept), into *SITE (1 and up). A site or
** frame seen before keeps its id; a new one is written to the frames
** table first, so that its lines always come before the events that use
** it. Text is made safe as labels are and cut at TRACE_FRAME_TEXT_MAX.
** Thread-safe. VRAM_E_INVALID for a format-1 writer, N == 0 or a frame of
** an unknown kind; VRAM_E_HOST_MEMORY, VRAM_E_IO.
*/
vram_status trace_writer_site(struct trace_writer *w, const struct trace_frame *frames,
                              int n, uint32_t *site);

/*
** What holds live allocation ID now: a "#@held ID,TEXT" line (format 2),
** TEXT made safe as labels are and cut at TRACE_FRAME_TEXT_MAX. Thread-safe.
** VRAM_E_INVALID for a format-1 writer or an empty TEXT, VRAM_E_IO.
*/
vram_status trace_writer_held(struct trace_writer *w, uint64_t id, const char *text);

/*
** Append one event: 'a', 'f' or 'o' (its slot and label are ignored; an
** 'o' needs a size above 0; its site, from trace_writer_site, is written
** for 'a' and 'o' when the writer carries sites). Thread-safe. VRAM_E_INVALID for an op or
** device no reader would accept, VRAM_E_IO.
*/
vram_status trace_writer_event(struct trace_writer *w, const struct trace_event *ev);

/*
** Append a mark at T_US on DEVICE with LABEL, sanitized: commas, double
** quotes, CR, LF and other control characters become spaces, and it is
** cut at TRACE_LABEL_MAX bytes. Thread-safe. VRAM_E_INVALID for a NULL
** or empty label or a bad device, VRAM_E_IO.
*/
vram_status trace_writer_mark(struct trace_writer *w, uint64_t t_us, int32_t device,
                              const char *label);

/* Flush and close. NULL does nothing. VRAM_E_IO if the final flush fails. */
vram_status trace_writer_close(struct trace_writer *w);

/*
** Flush and close W's file but keep W itself: later events fail with
** VRAM_E_IO, and trace_writer_close still frees it. For a writer that
** threads may still be using while the process ends (the preload library's
** destructor), where freeing it would not be safe. Thread-safe.
*/
vram_status trace_writer_finish(struct trace_writer *w);

/*
** Around fork(), from pthread_atfork handlers: PREPARE writes every
** buffered line to the file and holds W's lock across the fork, so that
** the child's copy of W holds no line its parent will write too; PARENT
** releases the lock. The child must never use its copy (its lock stays
** held there): it forgets W. NULL does nothing.
*/
void trace_writer_fork_prepare(struct trace_writer *w);
void trace_writer_fork_parent(struct trace_writer *w);

#endif
