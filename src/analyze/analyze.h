/*
** analyze.h -- what `vram analyze`, `vram doctor` and the HTML report know
** about a trace: its peak and what was live then, its iterations (from
** marks, else detected from the repeating event stream), a leak verdict
** with a rate and suspects, the allocator's fragmentation over time under
** a strategy, and the story of a final OOM. Computed once by
** analyze_trace(); printed as text, JSON or HTML by the tools.
*/
#ifndef VRAM_ANALYZE_ANALYZE_H
#define VRAM_ANALYZE_ANALYZE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "trace/trace.h"
#include "vram.h"

/* Live bytes by size class at the peak (powers of two: [lo, hi)). */
struct an_class {
    uint64_t lo, hi;   /* bytes */
    uint64_t count;    /* live allocations */
    uint64_t bytes;    /* their sum */
};

/* One iteration (training step, request): events [first, last]. */
struct an_iter {
    uint64_t first_event, last_event;
    uint64_t t_start_us, t_end_us;
    uint64_t min_live;  /* the quietest point: least live bytes within it */
    uint64_t peak_live; /* most live bytes within it */
    int32_t label;      /* the mark that opened it (index into trace labels), -1 */
};

/* A phase between two marks, with its own peak. */
struct an_phase {
    int32_t label;      /* index into trace labels; -1 before the first mark */
    uint64_t first_event, last_event;
    uint64_t peak_live;
};

/* An allocation that stayed alive across iterations (a leak suspect). */
struct an_suspect {
    uint64_t id;        /* as in the trace */
    uint64_t size;      /* bytes */
    uint32_t born;      /* iteration of its allocation */
    uint64_t t_us;      /* when it was allocated */
};

/* One point of the timeline (downsampled to at most AN_MAX_POINTS). */
struct an_point {
    uint64_t t_us;
    uint64_t live;      /* bytes live (trace sizes) */
    uint64_t reserved;  /* bytes reserved by the allocator under the strategy */
};

#define AN_MAX_POINTS 2000

struct an_options {
    vram_strategy strategy; /* replayed for reserved bytes and fragmentation */
    uint64_t device_memory; /* simulated device; 0 = an H200 */
    uint64_t limit;         /* cap of the replay; 0 = none */
};

struct an_result {
    const struct trace *trace;     /* borrowed */
    uint64_t peak_bytes;           /* most live bytes at once */
    uint64_t peak_time_us;
    uint64_t peak_event;           /* index of the event that reached it */
    struct an_class *peak_classes; /* non-empty classes, largest bytes first */
    size_t n_peak_classes;
    struct an_phase *phases;       /* per mark, when the trace has marks */
    size_t n_phases;
    struct an_iter *iters;
    size_t n_iters;
    bool iters_from_marks;         /* else detected from the pattern */
    uint64_t period_events;        /* detected period, events (0: none) */
    bool leak;                     /* a sustained rise of the per-iteration minimum */
    double leak_bytes_per_iter;    /* slope of the minima (least squares), bytes */
    double leak_r2;                /* fit quality of that slope, 0..1 */
    struct an_suspect *suspects;   /* largest first */
    size_t n_suspects;
    uint64_t suspect_bytes;        /* their sum */
    struct an_point *points;       /* the timeline */
    size_t n_points;
    vram_strategy strategy;
    uint64_t peak_reserved;        /* under the strategy */
    double fragmentation;          /* peak reserved / peak live */
    uint64_t replay_ooms;          /* allocations the replay refused */
    bool ends_in_oom;              /* the trace's last allocation failed (op 'o') */
    uint64_t oom_request;          /* bytes asked then */
    uint64_t oom_live;             /* live bytes then */
};

/*
** Analyze T. OPTIONS may be NULL (growth, an H200, no cap). OUT is
** written only on success; free it with an_result_free. VRAM_E_HOST_MEMORY,
** or the replay's status (with its last error) if the allocator fails
** otherwise than by OOM.
*/
vram_status analyze_trace(const struct trace *t, const struct an_options *options,
                          struct an_result **out);

void an_result_free(struct an_result *r);

/* Human-readable summary (what `vram analyze TRACE` prints). */
void an_print_text(FILE *out, const struct an_result *r);

/* One JSON object (what `vram analyze --json` prints), with at least
** peak_bytes, peak_time_us, iterations, leak, leak_bytes_per_iteration. */
int an_print_json(FILE *out, const struct an_result *r);

/* One self-contained HTML page (no network): timeline with iteration
** boundaries, peak breakdown, leak section. VRAM_E_IO if writing fails. */
vram_status an_write_html(FILE *out, const struct an_result *r);

#endif
