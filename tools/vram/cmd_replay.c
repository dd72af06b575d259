/* SPDX-License-Identifier: MIT */
/*
** cmd_replay.c -- `vram replay`: replay allocation traces through each
** strategy on the simulated device (or, with --backend cuda, on the real
** GPU through the CUDA driver) and report what every strategy cost.
**
** Per trace and strategy: operations, host nanoseconds per operation (the
** event loop alone, median of --repeat runs), peak bytes in use (the sum of
** the trace's sizes of live allocations), peak bytes reserved from the
** device, fragmentation = reserved / in use, OOMs and backend calls; with
** --min-limit also the smallest cap under which the trace runs without an
** OOM. Strategies come from VRAM_STRATEGY_LIST, so new ones join here
** without a change to this file.
**
** Every trace is loaded (and so validated) before any replay starts: a
** malformed file fails fast with "vram: FILE:LINE: reason" and exit 2.
**
** With --backend cuda each replay opens a CUDA context (the environment
** is still ignored) on the first n_devices GPUs; a trace that names more
** devices than the machine has fails with one line. The traces' stream
** handles belong to the process that recorded them, so every event is
** replayed on the default stream there.
*/
#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cliopt.h"
#include "cmd.h"
#include "base/median.h"
#include "trace/trace.h"
#include "trace/trace_replay.h"
#include "base/size.h"
#include "vram.h"

/* ------------------------------------------------------------------ */
/* Options: one table, from which both the parser and --help come      */
/* ------------------------------------------------------------------ */

/* The options replay_arg parses or notes (OPT_DEVICE_MEMORY: given). */
enum opt_id { OPT_BACKEND, OPT_STRATEGY, OPT_DEVICE_MEMORY, OPT_DRIVER_COSTS };

/* Every strategy the library knows, in the order of the public list. */
static const vram_strategy all_strategies[] = {
#define X(name, num, str) name,
    VRAM_STRATEGY_LIST(X)
#undef X
};

#define N_STRATEGIES (sizeof all_strategies / sizeof all_strategies[0])

/* ------------------------------------------------------------------ */
/* Settings and results                                                 */
/* ------------------------------------------------------------------ */

struct replay_settings {
    vram_backend_kind backend;              /* VRAM_BACKEND_SIM or _CUDA */
    bool device_memory_given;               /* --device-memory was on the line */
    vram_strategy strategies[N_STRATEGIES]; /* in the order asked, no repeats */
    size_t n_strategies;
    uint64_t limit_bytes;   /* 0 = no cap given */
    uint64_t device_memory; /* bytes per simulated device; with cuda, the
                               smallest GPU's total (--min-limit's bound) */
    uint64_t repeat;        /* runs per trace and strategy, 1..1000 */
    bool min_limit;
    bool warm; /* --warm: time a second pass */
    bool json;
};

/* Where parse_args puts what it reads. */
struct replay_args {
    struct replay_settings set;
    const char **paths; /* the traces, pointing into ARGV */
    int n_paths;
};

#define AT(member) offsetof(struct replay_args, set.member)

/* The values of --backend, --strategy and --driver-costs: the I-th, NULL
** past the last (completion, and the check of the first and last). */
static const char *
backend_value(size_t i)
{
    static const char *const names[] = {"sim", "cuda"}; /* VRAM_BACKEND_SIM, _CUDA */
    return i < sizeof names / sizeof names[0] ? names[i] : NULL;
}

static const char *
strategy_value(size_t i)
{
    return i < N_STRATEGIES ? vram_strategy_name(all_strategies[i])
           : i == N_STRATEGIES ? "all"
                               : NULL;
}

static const char *
driver_costs_value(size_t i)
{
    return i == 0 ? "h200" : NULL; /* the models of the simulated driver's costs */
}

static const struct cli_opt opt_table[] = {
    {OPT_BACKEND, "backend", 0, "sim|cuda",
     "replay on the simulated device (default) or on the GPU through the CUDA "
     "driver", .store = CLIOPT_CALL, .values = backend_value},
    {OPT_STRATEGY, "strategy", 0, "NAME[,NAME...]|all",
     "strategies to replay under (default: growth)", .store = CLIOPT_CALL,
     .values = strategy_value},
    {0, "limit", 0, "SIZE", "cap of each device (memory_limit), e.g. 6G; default: none",
     .store = CLIOPT_SIZE, .field = AT(limit_bytes)},
    {OPT_DEVICE_MEMORY, "device-memory", 0, "SIZE",
     "memory of each simulated device (default: an H200's 143771 MiB); "
     "--backend sim only", .store = CLIOPT_SIZE, .field = AT(device_memory), .notify = true},
    {0, "repeat", 0, "N", "replay N times (1..1000) and report the median ns/op",
     .store = CLIOPT_COUNT, .field = AT(repeat), .min = 1, .max = 1000},
    {0, "min-limit", 0, NULL,
     "also find the smallest cap (1 MiB resolution) with no OOM, by bisection "
     "between peak in use and the device memory", .store = CLIOPT_SET, .field = AT(min_limit)},
    {0, "warm", 0, NULL,
     "time a second pass over the trace on the same allocator, as in a long "
     "training run (the first pass obtains the memory; untimed)",
     .store = CLIOPT_SET, .field = AT(warm)},
    {OPT_DRIVER_COSTS, "driver-costs", 0, "MODEL",
     "--backend sim only: every backend call takes what the CUDA driver's costs "
     "on MODEL (h200: measured on an NVIDIA H200), so that ns/op models the "
     "GPU's whole time, driver calls included", .store = CLIOPT_CALL,
     .values = driver_costs_value},
    {0, "json", 0, NULL, "print one JSON object per line (sizes in bytes)",
     .store = CLIOPT_SET, .field = AT(json)},
};

static void
replay_notes(FILE *out)
{
    fprintf(out, "Strategies: ");
    cliopt_strategy_names(out, " ", " ");
    fprintf(out, " (or 'all').\n");
    cliopt_sizes_note(out, "6G");
}

static const struct cli_command replay_cmd = {
    .prog = "vram replay",
    .synopsis = "[OPTIONS] TRACE...",
    .about = "Replay .csv or .csv.gz allocation traces through the allocator on a\n"
             "simulated GPU (or the real one: --backend cuda) and report, per trace\n"
             "and strategy, what it cost.\n",
    CLIOPT_TABLE(opt_table),
    .notes = replay_notes,
    .exit_status = "0 ok, 1 failure, 2 bad usage or a malformed trace.",
};

/* --driver-costs MODEL, or NULL: the simulated device's driver cost model
** (vram_sim_options.driver_costs). One per process, as the settings. */
static const char *replay_driver_costs;

/* What one replay of one trace under one strategy measured. */
struct replay_result {
    uint64_t ops;                 /* events replayed */
    double ns_per_op;             /* host ns per event, event loop only */
    double cpu_ns_per_op;         /* the same in this thread's CPU time: what a
                                     busy machine's preemption does not add to */
    uint64_t peak_in_use_bytes;   /* max of the sum of trace sizes live */
    uint64_t peak_reserved_bytes; /* sum over devices of their peaks */
    uint64_t ooms;                /* allocations refused with VRAM_E_OOM */
    uint64_t backend_calls;       /* sum over devices */
    uint64_t peak_live_blocks;    /* max of allocations live at once */
    bool warm;                    /* ns_per_op is of a second pass (--warm) */
    uint64_t metadata_bytes;      /* allocator bookkeeping at the end, summed over
                                     devices; its slabs and tables never shrink,
                                     so this is their high-water mark */
    double driver_ns_per_op;      /* --driver-costs: the modelled driver time of
                                     the timed pass, per event */
};

/* One row of the report. */
struct replay_row {
    const char *trace; /* display name; points into the trace path */
    vram_strategy strategy;
    struct replay_result r; /* ns_per_op is the median of the runs */
    bool has_min_limit;     /* the search found a cap (false: none fits) */
    uint64_t min_limit_bytes;
};

/*
** A replay that could not be carried out: the exit code to return (the
** message is already printed).
*/
enum { REPLAY_OK = 0, REPLAY_FAIL = 1, REPLAY_BAD_INPUT = 2 };

/* ------------------------------------------------------------------ */
/* Parsing option values                                                */
/* ------------------------------------------------------------------ */

static bool
strategy_listed(const struct replay_settings *s, vram_strategy st)
{
    for (size_t i = 0; i < s->n_strategies; i++)
        if (s->strategies[i] == st)
            return true;
    return false;
}

/* Parse "all", one name or a comma list into S. Returns false (after
** printing the error) on an unknown name or an empty item. */
static bool
parse_strategies(const char *text, struct replay_settings *s)
{
    s->n_strategies = 0;
    if (strcmp(text, "all") == 0) {
        for (size_t i = 0; i < N_STRATEGIES; i++)
            s->strategies[s->n_strategies++] = all_strategies[i];
        return true;
    }
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        char name[64];
        vram_strategy st;
        if (len == 0 || len >= sizeof name) {
            cliopt_usage_error(&replay_cmd, "--strategy '%s': empty or overlong strategy name",
                               text);
            return false;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        if (strcmp(name, "all") == 0) {
            for (size_t i = 0; i < N_STRATEGIES; i++)
                if (!strategy_listed(s, all_strategies[i]))
                    s->strategies[s->n_strategies++] = all_strategies[i];
        } else if (!cliopt_strategy(&replay_cmd, name, &st)) {
            return false;
        } else if (!strategy_listed(s, st)) {
            s->strategies[s->n_strategies++] = st;
        }
        if (comma == NULL)
            return true;
        p = comma + 1;
    }
}

/* ------------------------------------------------------------------ */
/* One replay                                                           */
/* ------------------------------------------------------------------ */

static double
elapsed_ns(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) * 1e9 + (double)(b->tv_nsec - a->tv_nsec);
}

/* The modelled driver time of the simulated devices so far (their
** physical devices, each counted once: here one logical device each). */
static uint64_t
modelled_driver_ns(vram_device **devs, int n_dev)
{
    uint64_t ns = 0;
    for (int d = 0; d < n_dev; d++) {
        vram_stats st;
        if (vram_get_stats(devs[d], &st) == VRAM_OK)
            ns += st.modelled_driver_ns;
    }
    return ns;
}

/* The libvram side of a replay (trace_replay.h's hooks). */
struct lib_replay {
    const struct trace *t;
    vram_device **devs;
    bool cuda;        /* the traces' streams are the recording process's: not used */
    const char *pass; /* said before a failure's reason */
};

/* The line of a failed allocation, apart so that lib_alloc stays small
** enough to be inlined into the timed loop (as a call of its own it cost
** 22 instructions an allocation: callgrind, gpt2_bf16_b16 under growth). */
static __attribute__((noinline, cold)) int
lib_alloc_failed(const struct lib_replay *lr, const struct trace_event *ev, uint64_t index)
{
    cli_error("%s: %sevent %llu: allocating %llu bytes: %s", lr->t->path, lr->pass,
              (unsigned long long)(index + 1), (unsigned long long)ev->size,
              vram_last_error());
    return TRACE_REPLAY_FAILED;
}

static inline int
lib_alloc(void *ctx, const struct trace_event *ev, uint64_t index, void **ptr)
{
    struct lib_replay *lr = ctx;
    void *stream = lr->cuda ? NULL : (void *)(uintptr_t)ev->stream;
    vram_status s = vram_alloc(lr->devs[ev->device], (size_t)ev->size, stream, ptr);
    if (s == VRAM_OK)
        return TRACE_REPLAY_OK;
    if (s == VRAM_E_OOM)
        return TRACE_REPLAY_REFUSED;
    return lib_alloc_failed(lr, ev, index);
}

static int
lib_free(void *ctx, const struct trace_event *ev, uint64_t index, void *ptr, uint64_t size)
{
    struct lib_replay *lr = ctx;
    (void)size;
    if (vram_free(lr->devs[ev->device], ptr) == VRAM_OK)
        return TRACE_REPLAY_OK;
    cli_error("%s: %sevent %llu: free: %s", lr->t->path, lr->pass,
              (unsigned long long)(index + 1), vram_last_error());
    return TRACE_REPLAY_FAILED;
}

static const struct trace_replay_hooks lib_hooks = {lib_alloc, lib_free};

/*
** Replay T once under strategy ST with cap LIMIT (0 = none) on BACKEND:
** simulated devices of DEVICE_MEMORY bytes, or the GPUs. Into OUT.
** Returns REPLAY_OK, or prints one line and returns REPLAY_FAIL /
** REPLAY_BAD_INPUT.
*/
static int
replay_once(const struct trace *t, vram_backend_kind backend, vram_strategy st,
            uint64_t limit, uint64_t device_memory, bool warm, struct trace_replay *sl,
            struct replay_result *out)
{
    bool cuda = backend == VRAM_BACKEND_CUDA;
    int n_dev = t->n_devices > 0 ? t->n_devices : 1;
    vram_options opts;
    memset(&opts, 0, sizeof opts);
    opts.backend = cuda ? VRAM_BACKEND_CUDA : VRAM_BACKEND_SIM;
    if (!cuda) {
        opts.sim.devices = n_dev;
        opts.sim.memory_bytes = device_memory;
        opts.sim.driver_costs = replay_driver_costs;
    }
    opts.ignore_environment = true;

    vram_context *ctx = NULL;
    vram_status s = vram_open(&opts, &ctx);
    if (s != VRAM_OK) {
        cli_error("cannot open the %s: %s", cuda ? "CUDA backend" : "simulated device",
                  vram_last_error());
        return s == VRAM_E_INVALID || s == VRAM_E_CONFIG ? REPLAY_BAD_INPUT : REPLAY_FAIL;
    }

    vram_device **devs = calloc((size_t)n_dev, sizeof *devs);
    if (devs == NULL) {
        vram_close(ctx);
        cli_error("out of host memory");
        return REPLAY_FAIL;
    }
    for (int d = 0; d < n_dev; d++) {
        vram_device_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.strategy = st;
        cfg.limit_bytes[0] = limit;
        s = vram_configure(ctx, d, &cfg);
        if (s == VRAM_OK)
            s = vram_device_get(ctx, d, &devs[d]);
        if (s != VRAM_OK) {
            cli_error("%s: device %d: %s", t->path, d, vram_last_error());
            free(devs);
            vram_close(ctx);
            return s == VRAM_E_INVALID || s == VRAM_E_CONFIG ? REPLAY_BAD_INPUT
                                                             : REPLAY_FAIL;
        }
    }

    trace_replay_reset(sl);
    uint64_t driver_ns0 = 0;
    struct lib_replay lr = {.t = t, .devs = devs, .cuda = cuda, .pass = ""};
    int rc = REPLAY_OK;
    struct timespec t0, t1, c0, c1;

    /* The timed loop: the trace is already in memory, so this measures the
     * library's allocate and free calls plus a few loads and stores. */
    /* --warm: a first, untimed pass leaves the allocator as a long training
     * run has it (memory obtained, layout settled); then every allocation
     * still live is freed and the timed pass replays the trace again. */
    if (warm) {
        if (trace_replay_run(sl, 0, t->n_events, &lib_hooks, &lr) != TRACE_REPLAY_OK)
            rc = REPLAY_FAIL;
        lr.pass = "freeing before the timed pass: ";
        if (rc == REPLAY_OK &&
            trace_replay_release(sl, &lib_hooks, &lr) != TRACE_REPLAY_OK)
            rc = REPLAY_FAIL;
        lr.pass = "";
    }
    if (rc == REPLAY_OK) {
        driver_ns0 = modelled_driver_ns(devs, n_dev);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (trace_replay_run(sl, 0, t->n_events, &lib_hooks, &lr) != TRACE_REPLAY_OK)
            rc = REPLAY_FAIL;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    }

    if (rc == REPLAY_OK) {
        struct replay_result r;
        memset(&r, 0, sizeof r);
        r.ops = t->n_events;
        r.ns_per_op = t->n_events > 0 ? elapsed_ns(&t0, &t1) / (double)t->n_events : 0.0;
        r.cpu_ns_per_op = t->n_events > 0 ? elapsed_ns(&c0, &c1) / (double)t->n_events : 0.0;
        r.driver_ns_per_op =
            t->n_events > 0
                ? (double)(modelled_driver_ns(devs, n_dev) - driver_ns0) / (double)t->n_events
                : 0.0;
        r.peak_in_use_bytes = sl->peak_in_use;
        r.peak_live_blocks = sl->peak_live_blocks;
        r.warm = warm;
        r.ooms = sl->refused;
        for (int d = 0; d < n_dev && rc == REPLAY_OK; d++) {
            vram_stats stats;
            s = vram_get_stats(devs[d], &stats);
            if (s != VRAM_OK) {
                cli_error("%s: statistics of device %d: %s", t->path, d,
                          vram_last_error());
                rc = REPLAY_FAIL;
                break;
            }
            r.peak_reserved_bytes += stats.peak_bytes_reserved;
            r.backend_calls += stats.backend_calls;
            r.metadata_bytes += stats.metadata_bytes;
        }
        if (rc == REPLAY_OK)
            *out = r;
    }
    free(devs);
    vram_close(ctx);
    return rc;
}

/*
** Replay T REPEAT times under ST; the statistics are those of the first
** run (they do not depend on timing); ns_per_op and cpu_ns_per_op are the
** medians.
*/
static int
replay_repeated(const struct trace *t, vram_strategy st,
                const struct replay_settings *set, struct trace_replay *sl,
                struct replay_result *out)
{
    double times[1000], cpu[1000];
    struct replay_result first, r;
    memset(&first, 0, sizeof first);
    for (uint64_t i = 0; i < set->repeat; i++) {
        int rc = replay_once(t, set->backend, st, set->limit_bytes, set->device_memory,
                             set->warm, sl, &r);
        if (rc != REPLAY_OK)
            return rc;
        if (i == 0)
            first = r;
        times[i] = r.ns_per_op;
        cpu[i] = r.cpu_ns_per_op;
    }
    first.ns_per_op = median_of(times, (unsigned)set->repeat);
    first.cpu_ns_per_op = median_of(cpu, (unsigned)set->repeat);
    *out = first;
    return REPLAY_OK;
}

/*
** The smallest cap, to 1 MiB, under which T replays under ST without an
** OOM: bisection between the last MiB below PEAK_IN_USE (a cap below the
** bytes in use must refuse something) and the device memory. *FOUND is
** false when even a cap of the whole device is not enough.
*/
static int
find_min_limit(const struct trace *t, vram_strategy st, const struct replay_settings *set,
               uint64_t peak_in_use, struct trace_replay *sl, bool *found, uint64_t *out)
{
    const uint64_t mib = 1ULL << 20;
    struct replay_result r;
    uint64_t hi = set->device_memory / mib; /* in MiB; known to fit once tested */
    uint64_t lo = (peak_in_use + mib - 1) / mib;
    lo = lo > 0 ? lo - 1 : 0; /* in MiB; known (or assumed, at 0) to OOM */

    *found = false;
    if (hi == 0 || hi <= lo)
        return REPLAY_OK;
    int rc =
        replay_once(t, set->backend, st, hi * mib, set->device_memory, false, sl, &r);
    if (rc != REPLAY_OK)
        return rc;
    if (r.ooms > 0)
        return REPLAY_OK;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        rc = replay_once(t, set->backend, st, mid * mib, set->device_memory, false, sl,
                         &r);
        if (rc != REPLAY_OK)
            return rc;
        if (r.ooms > 0)
            lo = mid;
        else
            hi = mid;
    }
    *found = true;
    *out = hi * mib;
    return REPLAY_OK;
}

int
replay_summarize(const struct trace *t, vram_strategy st, uint64_t device_memory,
                 struct replay_summary *out)
{
    struct replay_settings set;
    memset(&set, 0, sizeof set);
    set.backend = VRAM_BACKEND_SIM;
    set.device_memory = device_memory;
    struct trace_replay sl;
    if (!trace_replay_init(&sl, t)) {
        cli_error("out of host memory");
        return REPLAY_FAIL;
    }
    struct replay_result r;
    memset(out, 0, sizeof *out);
    int rc = replay_once(t, VRAM_BACKEND_SIM, st, 0, device_memory, false, &sl, &r);
    if (rc == REPLAY_OK) {
        out->peak_in_use_bytes = r.peak_in_use_bytes;
        out->peak_reserved_bytes = r.peak_reserved_bytes;
        out->ooms = r.ooms;
        rc = find_min_limit(t, st, &set, r.peak_in_use_bytes, &sl, &out->has_min_limit,
                            &out->min_limit_bytes);
    }
    trace_replay_fini(&sl);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Output                                                               */
/* ------------------------------------------------------------------ */

static double
fragmentation_of(const struct replay_result *r)
{
    return r->peak_in_use_bytes > 0
               ? (double)r->peak_reserved_bytes / (double)r->peak_in_use_bytes
               : 0.0;
}

/* Bookkeeping bytes per block live at the peak: what the allocator's own
** memory costs per allocation. */
static uint64_t
meta_per_block(const struct replay_result *r)
{
    return r->peak_live_blocks ? r->metadata_bytes / r->peak_live_blocks : 0;
}

struct json_object *
cli_json_fixed(double v, int decimals)
{
    char num[64];
    snprintf(num, sizeof num, "%.*f", decimals, v);
    return json_object_new_double_s(v, num);
}

static int
print_json_row(const struct replay_row *row, bool with_min_limit)
{
    struct json_object *o = json_object_new_object();
    if (o == NULL)
        return REPLAY_FAIL;
    json_object_object_add(o, "trace", json_object_new_string(row->trace));
    json_object_object_add(o, "strategy",
                           json_object_new_string(vram_strategy_name(row->strategy)));
    json_object_object_add(o, "ops", json_object_new_uint64(row->r.ops));
    json_object_object_add(o, "ns_per_op", cli_json_fixed(row->r.ns_per_op, 1));
    json_object_object_add(o, "cpu_ns_per_op", cli_json_fixed(row->r.cpu_ns_per_op, 1));
    json_object_object_add(o, "peak_in_use_bytes",
                           json_object_new_uint64(row->r.peak_in_use_bytes));
    json_object_object_add(o, "peak_reserved_bytes",
                           json_object_new_uint64(row->r.peak_reserved_bytes));
    json_object_object_add(o, "fragmentation",
                           cli_json_fixed(fragmentation_of(&row->r), 3));
    json_object_object_add(o, "ooms", json_object_new_uint64(row->r.ooms));
    json_object_object_add(o, "warm", json_object_new_boolean(row->r.warm));
    if (replay_driver_costs != NULL) {
        json_object_object_add(o, "driver_costs",
                               json_object_new_string(replay_driver_costs));
        json_object_object_add(o, "driver_ns_per_op",
                               cli_json_fixed(row->r.driver_ns_per_op, 1));
    }
    json_object_object_add(o, "backend_calls",
                           json_object_new_uint64(row->r.backend_calls));
    json_object_object_add(o, "metadata_bytes_per_live_block",
                           json_object_new_uint64(meta_per_block(&row->r)));
    if (with_min_limit)
        json_object_object_add(
            o, "min_limit_bytes",
            row->has_min_limit ? json_object_new_uint64(row->min_limit_bytes) : NULL);
    printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    fflush(stdout);
    json_object_put(o);
    return REPLAY_OK;
}

enum {
    COL_TRACE,
    COL_STRATEGY,
    COL_OPS,
    COL_NS,
    COL_IN_USE,
    COL_RESERVED,
    COL_FRAG,
    COL_OOMS,
    COL_CALLS,
    COL_META,
    COL_MIN_LIMIT,
    N_COLS
};

static const struct {
    const char *title;
    bool left; /* left-aligned (text) rather than right-aligned (numbers) */
} table_cols[N_COLS] = {
    {"trace", true},         {"strategy", true},     {"ops", false},
    {"ns/op", false},        {"peak in use", false}, {"peak reserved", false},
    {"frag", false},         {"OOMs", false},        {"backend calls", false},
    {"meta B/block", false}, {"min limit", false},
};

#define CELL_LEN 48

/* The text of every cell of ROW. */
static void
row_cells(const struct replay_row *row, char cells[N_COLS][CELL_LEN])
{
    snprintf(cells[COL_TRACE], CELL_LEN, "%s", row->trace);
    snprintf(cells[COL_STRATEGY], CELL_LEN, "%s", vram_strategy_name(row->strategy));
    snprintf(cells[COL_OPS], CELL_LEN, "%llu", (unsigned long long)row->r.ops);
    snprintf(cells[COL_NS], CELL_LEN, "%.1f", row->r.ns_per_op);
    size_format(row->r.peak_in_use_bytes, cells[COL_IN_USE], CELL_LEN);
    size_format(row->r.peak_reserved_bytes, cells[COL_RESERVED], CELL_LEN);
    snprintf(cells[COL_FRAG], CELL_LEN, "%.3f", fragmentation_of(&row->r));
    snprintf(cells[COL_OOMS], CELL_LEN, "%llu", (unsigned long long)row->r.ooms);
    snprintf(cells[COL_CALLS], CELL_LEN, "%llu",
             (unsigned long long)row->r.backend_calls);
    snprintf(cells[COL_META], CELL_LEN, "%llu",
             (unsigned long long)meta_per_block(&row->r));
    if (row->has_min_limit)
        size_format(row->min_limit_bytes, cells[COL_MIN_LIMIT], CELL_LEN);
    else
        snprintf(cells[COL_MIN_LIMIT], CELL_LEN, "none");
}

static void
print_table_line(char cells[N_COLS][CELL_LEN], const size_t width[N_COLS], int n_cols)
{
    for (int c = 0; c < n_cols; c++) {
        int w = (int)width[c];
        if (c == n_cols - 1 && table_cols[c].left)
            fputs(cells[c], stdout);
        else if (table_cols[c].left)
            printf("%-*s", w, cells[c]);
        else
            printf("%*s", w, cells[c]);
        fputs(c == n_cols - 1 ? "\n" : "  ", stdout);
    }
}

static void
print_table(const struct replay_row *rows, size_t n_rows, bool with_min_limit)
{
    int n_cols = with_min_limit ? N_COLS : N_COLS - 1;
    size_t width[N_COLS];
    char cells[N_COLS][CELL_LEN];

    for (int c = 0; c < n_cols; c++)
        width[c] = strlen(table_cols[c].title);
    for (size_t i = 0; i < n_rows; i++) {
        row_cells(&rows[i], cells);
        for (int c = 0; c < n_cols; c++)
            if (strlen(cells[c]) > width[c])
                width[c] = strlen(cells[c]);
    }
    for (int c = 0; c < n_cols; c++)
        snprintf(cells[c], CELL_LEN, "%s", table_cols[c].title);
    print_table_line(cells, width, n_cols);
    for (size_t i = 0; i < n_rows; i++) {
        row_cells(&rows[i], cells);
        print_table_line(cells, width, n_cols);
    }
}

/* ------------------------------------------------------------------ */
/* The command                                                          */
/* ------------------------------------------------------------------ */

/* One option or operand of `vram replay` (cliopt_handler). */
static int
replay_arg(void *ctx, const struct cli_opt *o, const char *value)
{
    struct replay_args *a = ctx;
    struct replay_settings *set = &a->set;
    if (o == NULL) {
        a->paths[a->n_paths++] = value;
        return CLIOPT_GO_ON;
    }
    switch (o->id) {
    case OPT_BACKEND: {
        size_t k;
        if (!cliopt_choice(&replay_cmd, o, value, &k))
            return CLI_EXIT_USAGE;
        set->backend = k == 0 ? VRAM_BACKEND_SIM : VRAM_BACKEND_CUDA;
        break;
    }
    case OPT_STRATEGY:
        if (!parse_strategies(value, set))
            return CLI_EXIT_USAGE;
        break;
    case OPT_DEVICE_MEMORY:
        set->device_memory_given = true;
        break;
    case OPT_DRIVER_COSTS: {
        size_t k;
        if (!cliopt_choice(&replay_cmd, o, value, &k))
            return CLI_EXIT_USAGE;
        replay_driver_costs = driver_costs_value(k);
        break;
    }
    }
    return CLIOPT_GO_ON;
}

/*
** Parse ARGV into SET and the trace paths (which point into ARGV, stored
** in PATHS, *N_PATHS of them). Returns -1 to go on, else the exit code.
*/
static int
parse_args(int argc, char **argv, struct replay_settings *set, const char **paths,
           int *n_paths)
{
    struct replay_args a = {*set, paths, 0};
    int rc = cliopt_parse(&replay_cmd, argc, argv, replay_arg, &a, NULL);
    *n_paths = a.n_paths;
    *set = a.set;
    if (rc != CLIOPT_GO_ON)
        return rc;
    if (*n_paths == 0)
        return cliopt_usage_error(&replay_cmd, "no trace given");
    if (set->backend == VRAM_BACKEND_CUDA && replay_driver_costs != NULL)
        return cliopt_usage_error(&replay_cmd, "--driver-costs models the driver on the "
                                               "simulated device only (not with --backend cuda)");
    if (set->backend == VRAM_BACKEND_CUDA && set->device_memory_given)
        return cliopt_usage_error(&replay_cmd, "--device-memory applies to the simulated "
                                               "device only (not with --backend cuda)");
    return -1;
}

/*
** With --backend cuda (and for `vram tune`): how many GPUs there are, and
** the total memory of the smallest (the upper bound of --min-limit's
** search), into *N_GPUS and *MIN_TOTAL. Returns REPLAY_OK, or returns
** REPLAY_FAIL after one line (none if QUIET).
*/
vram_status
cli_open_cuda(vram_context **ctx, int *n)
{
    vram_options opts;
    memset(&opts, 0, sizeof opts);
    opts.backend = VRAM_BACKEND_CUDA;
    opts.ignore_environment = true;
    *ctx = NULL;
    *n = 0;
    vram_status s = vram_open(&opts, ctx);
    return s == VRAM_OK ? vram_physical_count(*ctx, n) : s;
}

int
replay_probe_gpus(int *n_gpus, uint64_t *min_total, bool quiet)
{
    vram_context *ctx = NULL;
    int n = 0;
    uint64_t least = UINT64_MAX;
    vram_status s = cli_open_cuda(&ctx, &n);
    for (int d = 0; s == VRAM_OK && d < n; d++) {
        vram_physical_info info;
        s = vram_physical_info_get(ctx, d, &info);
        if (s == VRAM_OK && info.total_bytes < least)
            least = info.total_bytes;
    }
    if (s != VRAM_OK) {
        if (!quiet)
            cli_error("cannot open the CUDA backend: %s", vram_last_error());
        vram_close(ctx);
        return REPLAY_FAIL;
    }
    vram_close(ctx);
    *n_gpus = n;
    *min_total = least;
    return REPLAY_OK;
}

int
cmd_replay(int argc, char **argv)
{
    struct replay_settings set;
    memset(&set, 0, sizeof set);
    set.backend = VRAM_BACKEND_SIM;
    set.strategies[0] = VRAM_STRATEGY_GROWTH;
    set.n_strategies = 1;
    set.device_memory = VRAM_SIM_DEFAULT_MEMORY;
    set.repeat = 1;

    const char **paths = calloc(argc > 0 ? (size_t)argc : 1, sizeof *paths);
    if (paths == NULL) {
        cli_error("out of host memory");
        return 1;
    }
    int n_paths = 0;
    int rc = parse_args(argc, argv, &set, paths, &n_paths);
    if (rc >= 0) {
        free(paths);
        return rc;
    }
    rc = REPLAY_OK;

    /* Load (and so validate) every trace before replaying any. */
    struct trace **traces = calloc((size_t)n_paths, sizeof *traces);
    char(*names)[256] = calloc((size_t)n_paths, sizeof *names);
    size_t max_rows = (size_t)n_paths * set.n_strategies;
    struct replay_row *rows = calloc(max_rows, sizeof *rows);
    size_t n_rows = 0;
    if (traces == NULL || names == NULL || rows == NULL) {
        cli_error("out of host memory");
        rc = REPLAY_FAIL;
        goto out;
    }
    for (int i = 0; i < n_paths && rc == REPLAY_OK; i++) {
        rc = cli_load_trace(paths[i], &traces[i]);
        trace_display_name(paths[i], names[i], sizeof names[i]);
    }

    for (int i = 0; i < n_paths && rc == REPLAY_OK && set.backend != VRAM_BACKEND_CUDA; i++)
        if (traces[i]->n_devices > VRAM_SIM_MAX_DEVICES) {
            cli_error("%s: the trace names device %d; the simulated backend has devices 0 "
                      "to %d",
                      paths[i], traces[i]->n_devices - 1, VRAM_SIM_MAX_DEVICES - 1);
            rc = REPLAY_BAD_INPUT;
        }
    if (rc == REPLAY_OK && set.backend == VRAM_BACKEND_CUDA) {
        int n_gpus = 0;
        rc = replay_probe_gpus(&n_gpus, &set.device_memory, false);
        for (int i = 0; i < n_paths && rc == REPLAY_OK; i++)
            if (traces[i]->n_devices > n_gpus) {
                cli_error("%s: the trace uses %d devices, this machine has %d GPU%s",
                          paths[i], traces[i]->n_devices, n_gpus, n_gpus == 1 ? "" : "s");
                rc = REPLAY_FAIL;
            }
    }

    for (int i = 0; i < n_paths && rc == REPLAY_OK; i++) {
        const struct trace *t = traces[i];
        struct trace_replay sl;
        if (!trace_replay_init(&sl, t)) {
            cli_error("out of host memory");
            rc = REPLAY_FAIL;
            break;
        }
        for (size_t k = 0; k < set.n_strategies && rc == REPLAY_OK; k++) {
            struct replay_row *row = &rows[n_rows];
            memset(row, 0, sizeof *row);
            row->trace = names[i];
            row->strategy = set.strategies[k];
            rc = replay_repeated(t, row->strategy, &set, &sl, &row->r);
            if (rc == REPLAY_OK && set.min_limit)
                rc = find_min_limit(t, row->strategy, &set, row->r.peak_in_use_bytes, &sl,
                                    &row->has_min_limit, &row->min_limit_bytes);
            if (rc != REPLAY_OK)
                break;
            n_rows++;
            if (set.json)
                rc = print_json_row(row, set.min_limit);
        }
        trace_replay_fini(&sl);
    }
    if (!set.json && n_rows > 0)
        print_table(rows, n_rows, set.min_limit);
    if (fflush(stdout) != 0 && rc == REPLAY_OK) {
        cli_error("writing the report: %s", strerror(errno));
        rc = REPLAY_FAIL;
    }

out:
    if (traces != NULL)
        for (int i = 0; i < n_paths; i++)
            trace_free(traces[i]);
    free(traces);
    free(names);
    free(rows);
    free(paths);
    return rc;
}
