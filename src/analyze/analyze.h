/* SPDX-License-Identifier: MIT */
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

/* The phases of one mark label taken together. */
struct an_phase_group {
    int32_t label;      /* as in an_phase */
    uint64_t count;     /* phases with this label */
    uint64_t peak_live; /* the largest of their peaks */
};

/* An allocation that stayed alive across iterations (a leak suspect). */
struct an_suspect {
    uint64_t id;        /* as in the trace */
    uint64_t size;      /* bytes */
    uint32_t born;      /* iteration of its allocation (index into iters, so
                           0 is the first); AN_NO_ITER before the first */
    uint64_t t_us;      /* when it was allocated */
    uint32_t site;      /* its call site in the trace; TRACE_NO_SITE */
};

/*
** Allocations grouped by the code that made them (traces with call
** sites): by the site's innermost frame that is not a note, with the note
** before it if any. For the leak, birth iterations too.
*/
struct an_site {
    uint32_t site;        /* the group's site with the most bytes (its stack
                             is shown); TRACE_NO_SITE: allocations without one */
    uint32_t frame;       /* the headline frame (index into trace frames);
                             UINT32_MAX: none */
    uint32_t note;        /* the note before it (index), or UINT32_MAX */
    const char *held_by;  /* leak: what holds most of the group's suspects, as
                             the recording named it (a "#@held" line of the
                             trace: "list `history` of module __main__; ..."),
                             borrowed from the trace; NULL: not named */
    uint64_t held_count;  /* leak: suspects of the group it holds */
    uint32_t made_at;     /* leak: the frame that allocated (the innermost of
                             the program's own code) when the headline is
                             another, the frame that keeps what it makes
                             (docs/ANALYZE.md); UINT32_MAX otherwise */
    uint64_t count;       /* allocations */
    uint64_t bytes;       /* their sum */
    uint32_t iters;       /* leak: iterations with at least one birth here */
    uint32_t first_iter;  /* leak: first and last iteration of birth (indexes);
                             AN_NO_ITER when none */
    uint32_t last_iter;
};

/* an_suspect.born of an allocation made before the first iteration. */
#define AN_NO_ITER UINT32_MAX

/* Live bytes at the peak by the phase (mark) in which they were allocated. */
struct an_origin {
    int32_t label;      /* index into trace labels; -1 before the first mark */
    uint64_t count;     /* live allocations */
    uint64_t bytes;     /* their sum */
};

/*
** Why the trace's final allocation failed (docs/ANALYZE.md). The cap is
** an_options.limit, else the trace metadata's "limit=SIZE"; without one
** the request is judged against the replay's peak reserved on the device
** that refused it (oom_reserved).
*/
enum an_oom_cause {
    AN_OOM_NONE = 0,     /* the trace does not end in an OOM */
    AN_OOM_OVER_CAP,     /* live + request > cap: the job is too big */
    AN_OOM_UNDER_CAP,    /* live + request <= cap: the memory was there, in
                            pieces or held outside the live set */
    AN_OOM_NEW_HIGH,     /* no cap known; live + request > the replay's peak
                            reserved: more than the job ever held */
    AN_OOM_WITHIN_RESERVED /* no cap known; live + request <= the replay's
                            peak reserved: it fit in what was held before */
};

/* The largest live allocations kept for the story of a final OOM. */
#define AN_OOM_TOP 10

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
    uint64_t limit;         /* cap of the replay, and the cap a final OOM is
                               judged against; 0 = the trace metadata's
                               "limit=SIZE" if any, else none */
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
    struct an_phase_group *phase_groups; /* per label, in order of first appearance */
    size_t n_phase_groups;
    struct an_iter *iters;
    size_t n_iters;
    bool iters_from_marks;         /* else detected from the pattern */
    uint64_t period_events;        /* detected period, events (0: none) */
    bool leak;                     /* a sustained rise of the per-iteration minimum */
    double leak_bytes_per_iter;    /* slope of the minima (least squares), bytes */
    double leak_r2;                /* fit quality of that slope, 0..1 */
    struct an_suspect *suspects;   /* by size, the sizes holding the
                                      most bytes first */
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
    uint64_t oom_live;             /* live bytes then, on the device that
                                      refused (all of them: one device) */

    /* Added with analyze.c (not in the first contract): */
    bool iters_from_floor;         /* cut where live bytes come back to their
                                      floor (inference requests of varying
                                      length); period_events is then 0 */
    uint64_t floor_bytes;          /* that floor (0 unless iters_from_floor) */
    double period_match;           /* fraction of events equal to the event one
                                      detected period later, 0..1 (0: none) */
    bool period_from_shape;        /* the period is that of the stream's shape
                                      (each event's op and how far away its
                                      partner is), sizes left out: steps whose
                                      sizes vary */
    size_t peak_iter;              /* iteration holding the peak; SIZE_MAX: none */
    struct an_origin *peak_origins;/* live at the peak by phase of birth, largest
                                      first; only when the trace has marks */
    size_t n_peak_origins;
    uint64_t *device_peaks;        /* peak live bytes of each logical device */
    int n_devices;
    size_t leak_iters_used;        /* iterations the slope was fitted over:
                                      indexes 1 .. leak_iters_used (the first,
                                      a warm-up, and a last one cut off by the
                                      end of the recording are left out) */
    uint64_t leak_capacity;        /* with a leak: the cap, else the device's
                                      bytes (an_options.device_memory, else the
                                      simulated H200's) */
    bool leak_capacity_is_cap;     /* leak_capacity is the cap (limit) */
    double leak_iters_to_full;     /* with a leak: iterations after the trace
                                      until the peak, growing at the rate,
                                      reaches leak_capacity (0: no leak, or
                                      already there) */
    uint64_t oom_event;            /* index of the final 'o' event */
    int32_t oom_device;            /* the device that refused it */
    uint64_t oom_time_us;
    uint64_t oom_cap;              /* the cap it is judged against; 0 unknown */
    uint64_t oom_reserved;         /* peak reserved by the replay on that device:
                                      the bound when no cap is known */
    enum an_oom_cause oom_cause;
    struct an_class *oom_classes;  /* live at the OOM on its device by size
                                      class, largest first */
    size_t n_oom_classes;
    struct an_suspect *oom_largest;/* the largest allocations live then on its
                                      device (<= AN_OOM_TOP) */
    size_t n_oom_largest;

    /* Call sites (traces of format 2 only; else none): */
    struct an_site *leak_sites;    /* the suspects by call site, most bytes first */
    size_t n_leak_sites;
    size_t leak_site_iters;        /* iterations a suspect can be born in (the
                                      second to the one before the fit's
                                      last): the denominator of a site's rate */
    struct an_site *peak_sites;    /* live at the peak by call site, most first */
    size_t n_peak_sites;
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

/* Frame FRAME of T as text into BUF: "model.py:88 in forward",
** "symbol (libx.so+0x1a2b)", "[note]"; FULL keeps whole paths. The
** headline of site group S: its frame, and its note in brackets. */
const char *an_frame_text(const struct trace *t, uint32_t frame, bool full, char *buf,
                          size_t len);
const char *an_site_headline(const struct trace *t, const struct an_site *s, char *buf,
                             size_t len);
/* Where R's iterations came from: "marks", "floor", "period" or "none"
** (the whole trace is one). */
const char *an_iters_source(const struct an_result *r);

/*
** T as PyTorch's memory snapshot (the pickle of torch.cuda.memory.
** _snapshot(), which PyTorch's memory_viz opens; docs/PYTHON.md): the
** allocations live after event LIVE_AT as segments of one block each, and
** every event of T in the device traces, with each allocation's call site
** as its frames. Addresses are made up (a trace keeps none), unique
** within the snapshot. VRAM_E_IO if writing fails, VRAM_E_HOST_MEMORY.
*/
vram_status an_write_torch_snapshot(FILE *out, const struct trace *t, uint64_t live_at);

/* The index of the event after which T's live bytes are at their peak
** (the first such; the last event for a trace without allocations). */
uint64_t an_peak_event(const struct trace *t);

/* Human-readable summary (what `vram analyze TRACE` prints). */
void an_print_text(FILE *out, const struct an_result *r);

/* One JSON object (what `vram analyze --json` prints), with at least
** peak_bytes, peak_time_us, iterations, leak, leak_bytes_per_iteration;
** sizes in integer bytes. Returns VRAM_OK, or VRAM_E_IO if writing failed
** (VRAM_E_HOST_MEMORY if the object could not be built). */
int an_print_json(FILE *out, const struct an_result *r);

/* ---- comparing two runs (`vram analyze --compare A B`) ---- */

/*
** One quantity in run A and in run B: a phase's peak (phases matched by
** mark label, the largest peak of each label) or the bytes of one size
** class live at the peak.
*/
struct an_cmp_row {
    const char *label;  /* phase label, borrowed from A's or B's trace; NULL
                           for "before the first mark" and for size classes */
    uint64_t lo, hi;    /* the size class [lo, hi); 0, 0 for phases */
    uint64_t a, b;      /* bytes in A and in B; 0 where absent */
    bool in_a, in_b;    /* present in A, in B */
};

/* The name of the size class ROW of a comparison, "[1.00 MiB, 2.00 MiB)",
** in BUF (LEN bytes). Returns BUF. */
const char *an_cmp_class_name(const struct an_cmp_row *row, char *buf, size_t len);

/* The name of phase or size-class ROW as the tables show it: its label,
** "(before the first mark)", or its class (an_cmp_class_name, into BUF). */
const char *an_cmp_row_name(const struct an_cmp_row *row, char *buf, size_t len);

struct an_compare {
    const struct an_result *a, *b; /* borrowed */
    struct an_cmp_row *phases;     /* A's labels in order, then B's others */
    size_t n_phases;
    struct an_cmp_row *classes;    /* largest class first */
    size_t n_classes;
};

/* The rows every comparison table opens with, each named by its label:
** peak live, peak reserved (under A's strategy: that name is written into
** NAME, LEN bytes) and the least live bytes within the last iteration. */
#define AN_CMP_PEAK_ROWS 3
void an_cmp_peak_rows(const struct an_compare *c, struct an_cmp_row rows[AN_CMP_PEAK_ROWS],
                      char *name, size_t len);

/* Compare A with B (both borrowed; they must outlive OUT). OUT written
** only on success; free with an_compare_free. VRAM_E_HOST_MEMORY. */
vram_status an_compare(const struct an_result *a, const struct an_result *b,
                       struct an_compare **out);

/* NULL does nothing. */
void an_compare_free(struct an_compare *c);

/* The comparison as a table: A, B and the change. */
void an_print_compare_text(FILE *out, const struct an_compare *c);

/* One JSON object: {"a":{...},"b":{...},"delta":{...},"phases":[...],
** "classes":[...]}. Returns VRAM_OK or VRAM_E_IO as an_print_json. */
int an_print_compare_json(FILE *out, const struct an_compare *c);

/* One self-contained HTML page (no network): timeline with iteration
** boundaries, peak breakdown, leak section. VRAM_E_IO if writing fails. */
vram_status an_write_html(FILE *out, const struct an_result *r);

/* The comparison C as one self-contained HTML page: A, B and the change
** of the peaks, the phase peaks and the classes live at the peak.
** VRAM_E_IO if writing fails. */
vram_status an_write_compare_html(FILE *out, const struct an_compare *c);

#endif
