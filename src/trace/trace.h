/*
** trace.h -- reading and writing allocation traces (docs/TRACE_FORMAT.md).
**
** A trace is CSV, optionally gzip-compressed (detected from the content,
** not the name): an optional first line "# key=value ..." of metadata, a
** header naming the columns, then one event a line:
**     t_us,op,id,size,stream[,device]
** op is 'a' (allocate) or 'f' (free); a free names the id it releases.
** Columns are found by their header name, so readers accept the shared
** traces (no device column) and vram's own (device column).
*/
#ifndef VRAM_TRACE_TRACE_H
#define VRAM_TRACE_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "vram.h"

enum trace_op { TRACE_ALLOC = 'a', TRACE_FREE = 'f' };

struct trace_event {
    uint64_t t_us;   /* wall-clock microseconds */
    uint64_t id;     /* allocation number, unique within the trace */
    uint64_t size;   /* bytes */
    uint64_t stream; /* opaque stream handle; 0 = default */
    uint32_t slot;   /* dense index of id, 0..n_slots-1 (loader only) */
    int32_t device;  /* logical device; 0 when the trace has no column */
    uint32_t label;  /* TRACE_MARK: index into trace.labels (loader only) */
    char op;         /* enum trace_op */
};

/*
** A whole trace in memory, validated: every free names an id that is
** live at that point, no id is allocated twice. Ids are mapped to dense
** slots so replays can index arrays.
*/
struct trace {
    char *path;                 /* as given; owned */
    char *meta;                 /* the "# ..." line without "# ", or "" ; owned */
    struct trace_event *events; /* owned */
    uint64_t n_events;
    uint32_t n_slots;         /* distinct ids */
    int n_devices;            /* 1 + highest device seen */
    uint64_t peak_live_bytes; /* max over time of the sum of live sizes */
    char **labels;            /* mark labels, owned; events refer by index */
    uint32_t n_labels;
    uint64_t n_marks, n_ooms; /* events of those kinds */
};

/*
** Load PATH (.csv or .csv.gz). On malformed input: VRAM_E_PARSE and the
** thread's last error is "PATH:LINE: reason" (bad number, unknown op,
** missing column, free of an unknown id, duplicate id, truncated gzip...).
** VRAM_E_IO if the file cannot be read (last error says why),
** VRAM_E_HOST_MEMORY. OUT written only on success.
*/
vram_status trace_load(const char *path, struct trace **out);

/* Free T. NULL does nothing. */
void trace_free(struct trace *t);

/* ---- writing ---- */

struct trace_writer;

/*
** Create PATH (gzip-compressed when it ends in ".gz") and write the
** metadata line (META without the "# "; may be NULL) and the header.
** VRAM_E_IO with the reason in the last error.
*/
vram_status trace_writer_open(const char *path, const char *meta,
                              struct trace_writer **out);

/* Append one event (its slot is ignored). Thread-safe. VRAM_E_IO. */
vram_status trace_writer_event(struct trace_writer *w, const struct trace_event *ev);

/* Flush and close. NULL does nothing. VRAM_E_IO if the final flush fails. */
vram_status trace_writer_close(struct trace_writer *w);

#endif
