/* SPDX-License-Identifier: MIT */
/*
** cmd_tune.c -- `vram tune`: the tuning recipe of TensorFlow's memory
** advice, automated (docs/RECORD.md): measure the peak, then set a cap with
** 10-15 % headroom above it.
**
**   vram tune [OPTIONS] [--] COMMAND [ARGS...]
**   vram tune --trace FILE [OPTIONS]
**
** 1. Record COMMAND as `vram record` does (run_prepare, record_prepare)
**    into a plain CSV trace, and read that trace while it grows: every
**    poll loads its complete lines and finds its iterations as
**    `vram analyze` does (marks, else the period of the event stream, else
**    the floor of live bytes). Once --periods complete iterations after
**    the first have peaks within TUNE_FLAT_SHARE of each other and span
**    TUNE_SPAN_SHARE of the recording (a steady state), the command is stopped (SIGINT, then SIGTERM, then SIGKILL:
**    run_command_watched); --seconds and --iterations bound the recording.
**    With --trace the recording is a file and nothing runs.
** 2. Replay the trace under every strategy on the simulated device (the
**    GPU's size when known), uncapped for the peak reserved, then by
**    bisection for the smallest cap with no OOM (`vram replay --min-limit`).
** 3. Recommend the strategy with the lowest peak reserved (within
**    TUNE_TIE_SHARE, the simpler one of tune_simplicity), the smallest cap
**    that replays under it, the cap = that plus 10 % headroom after a
**    steady state, else 15 %, and the settings that apply the cap in each
**    framework.
**
** Exit status: 0 a recommendation from a steady state; 3 a recommendation
** from what was seen, without a steady state (too few iterations, peaks
** that vary, a leak; said); 1 the command failed or could not be started,
** nothing was recorded, or a replay failed; 2 bad usage or an unreadable
** or malformed trace; 126/127 COMMAND cannot be executed / not found.
*/
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "analyze/analyze.h"
#include "base/size.h"
#include "cliopt.h"
#include "cmd.h"
#include "ledger/ledger.h"
#include "trace/trace.h"
#include "vram.h"

enum {
    TUNE_OK = 0,
    TUNE_FAIL = 1,
    TUNE_USAGE = 2,
    TUNE_UNSTEADY = 3 /* recommended from what was seen */
};

/* Complete iterations after the first whose peaks must agree: the default
** of --periods. The first iteration is a warm-up (optimizer state, cuDNN's
** workspace search) and is never one of them. */
#define TUNE_PERIODS_DEFAULT 3
#define TUNE_PERIODS_MAX 1000
/* The default bound of a recording, seconds: a command that never settles
** (a leak) is stopped there, and recommended for from what was seen. */
#define TUNE_SECONDS_DEFAULT 600.0
/* A steady state: the peaks of those iterations within 1 % of the largest.
** A tensor-level trace of a training loop repeats its peak to the byte
** (the shared traces: resnet50_fp32's steps 2-15 within 0.0 %); 1 % still
** takes the few small tensors (a scalar, an RNG state) that move. */
#define TUNE_FLAT_SHARE 0.01
/* ... and those iterations must span this share of the recording (from its
** first event): a burst of identical rounds early on is no steady state.
** That rule decides when to stop a command still running; a command that
** ended by itself left its whole run, and its iterations are all it did
** (its start-up, slow on a busy machine, would otherwise outweigh them).
** On the H200, XLA's autotuning while compiling a JAX step allocated and
** freed the same trial workspaces 17 times in 13 ms, 3.8 s into the
** recording, and was taken for 17 steady steps before any step ran;
** PyTorch's steps of the same loop span 2.6 % of their recording after 40
** steps, so a tenth costs a recording a few more seconds of steps. */
#define TUNE_SPAN_SHARE 0.10
/* The tuning advice's headroom above the measured peak: 10-15 %. The low
** end once the peak has repeated flat (the replay already counts what the
** allocator loses to fragmentation), the high end when the recording may
** not have seen the largest input. */
#define TUNE_HEADROOM_STEADY 0.10
#define TUNE_HEADROOM_UNSTEADY 0.15
/* Strategies whose peaks reserved are within 1 % of the lowest tie. */
#define TUNE_TIE_SHARE 0.01
/* Polling the growing trace: the first interval, and at least this many
** times the last check's own time, so that reading a long trace costs the
** machine a tenth of one core at most. */
#define TUNE_POLL_MS 200
#define TUNE_POLL_COST_FACTOR 10
#define TUNE_POLL_MAX_MS 5000
/* Stopping: SIGINT, then SIGTERM after this long, then SIGKILL. */
#define TUNE_GRACE_MS 10000

#define MIB (1ULL << 20)

/* The order of simplicity, for ties: vram's default first, then one region
** of the whole cap, then TensorFlow's doubling regions, then the virtual
** memory of expandable. */
static const vram_strategy tune_simplicity[] = {
    VRAM_STRATEGY_GROWTH, VRAM_STRATEGY_PREALLOCATE, VRAM_STRATEGY_GROWTH_TF,
    VRAM_STRATEGY_EXPANDABLE};
#define N_STRATEGIES (sizeof tune_simplicity / sizeof tune_simplicity[0])
#define COUNT_STRATEGY(name, num, str) +1
_Static_assert(N_STRATEGIES == 0 VRAM_STRATEGY_LIST(COUNT_STRATEGY),
               "tune_simplicity ranks every strategy of VRAM_STRATEGY_LIST");
#undef COUNT_STRATEGY

/* The strategy that models each framework's own allocator under a cap:
** TensorFlow's BFC with memory_limit preallocates one region of the limit;
** JAX's BFC (TensorFlow's) with XLA_PYTHON_CLIENT_PREALLOCATE=false grows
** by TensorFlow's doubling regions. */
#define TUNE_TF_MODEL VRAM_STRATEGY_PREALLOCATE
#define TUNE_JAX_MODEL VRAM_STRATEGY_GROWTH_TF

/* ------------------------------------------------------------------ */
/* Options                                                              */
/* ------------------------------------------------------------------ */

struct tune_args {
    const char *trace;
    const char *output;
    const char *preload;
    uint64_t periods;        /* 2..TUNE_PERIODS_MAX */
    double seconds;
    uint64_t max_iterations; /* 0: no bound */
    uint64_t device_memory;  /* 0: unknown */
    bool driver_view;
    bool json;
    char **command;
};

#define AT(member) offsetof(struct tune_args, member)

static const struct cli_opt opt_table[] = {
    {0, "trace", 0, "FILE", "tune an existing trace (.csv or .csv.gz); nothing runs",
     .store = CLIOPT_STRING, .field = AT(trace)},
    {0, "output", 'o', "FILE",
     "keep the recording in FILE (plain CSV: it is read while it grows); default: a "
     "temporary file, removed", .store = CLIOPT_STRING, .field = AT(output)},
    {0, "periods", 0, "N",
     "a steady state is N complete iterations after the first whose peaks agree within "
     "1 % and that span a tenth of the recording (2..1000; default 3)",
     .store = CLIOPT_COUNT, .field = AT(periods), .min = 2, .max = TUNE_PERIODS_MAX},
    {0, "seconds", 0, "S",
     "stop the command after S seconds at most, steady or not (default 600)",
     .store = CLIOPT_SECONDS, .field = AT(seconds), .lo = 0.1, .hi = 1e7},
    {0, "iterations", 0, "N",
     "stop the command after N complete iterations at most, steady or not",
     .store = CLIOPT_COUNT, .field = AT(max_iterations), .min = 2, .max = UINT32_MAX},
    {0, "device-memory", 0, "SIZE",
     "the GPU's total memory, for the frameworks' fractions and the replays (default: "
     "the smallest GPU's, asked of the driver after a recording; with --trace unknown)",
     .store = CLIOPT_SIZE, .field = AT(device_memory)},
    {0, "driver-view", 0, NULL,
     "record the frameworks' own allocators as they are, as vram record --driver-view",
     .store = CLIOPT_SET, .field = AT(driver_view)},
    {0, "preload", 0, "PATH", "the preload library, as vram run --preload",
     .store = CLIOPT_STRING, .field = AT(preload)},
    {0, "json", 0, NULL,
     "print one JSON object (sizes in bytes; docs/RECORD.md has the schema)",
     .store = CLIOPT_SET, .field = AT(json)},
};

static void
tune_notes(FILE *out)
{
    fprintf(out,
            "COMMAND is recorded as by vram record until its iterations (as vram analyze\n"
            "finds them) show a steady state, then stopped with SIGINT (SIGTERM, SIGKILL\n"
            "after 10 s each), or until it ends. The trace is replayed under every\n"
            "strategy; the recommendation is the strategy with the lowest peak reserved\n"
            "(ties to the simpler), the smallest cap that replays without an OOM, the cap\n"
            "= that plus 10 %% headroom after a steady state, else 15 %%, and the settings\n"
            "that apply it in TensorFlow, PyTorch, JAX and vram run. docs/RECORD.md has more.\n");
}

static const struct cli_command tune_cmd = {
    .prog = "vram tune",
    .synopsis = "[OPTIONS] [--] COMMAND [ARGS...]\n--trace FILE [OPTIONS]",
    .about = "Record COMMAND until its memory use is steady (or read a trace), replay it\n"
             "under every strategy, and recommend a strategy, a GPU memory cap with\n"
             "10-15% headroom and the settings that apply it in each framework.\n",
    CLIOPT_TABLE(opt_table),
    .notes = tune_notes,
    .exit_status = "0 recommended from a steady state; 3 recommended from what was seen, "
                   "with no steady state (said); 1 the command failed, recorded nothing, "
                   "or a replay failed; 2 bad usage or an unreadable or malformed trace; "
                   "126 COMMAND cannot be executed; 127 COMMAND not found.",
    .stop_at_operand = true,
    .command_optional = true, /* with --trace there is none */
};

/* Parse ARGV into A. Returns -1 to go on, else the exit status. */
static int
parse_args(int argc, char **argv, struct tune_args *a)
{
    memset(a, 0, sizeof *a);
    a->periods = TUNE_PERIODS_DEFAULT;
    a->seconds = TUNE_SECONDS_DEFAULT;
    int rc = cliopt_parse(&tune_cmd, argc, argv, NULL, a, &a->command);
    if (rc != CLIOPT_GO_ON)
        return rc;
    if (a->trace != NULL && a->command != NULL)
        return cliopt_usage_error(&tune_cmd, "--trace and a command: give one of them");
    if (a->trace == NULL && a->command == NULL)
        return cliopt_usage_error(&tune_cmd, "no command given (or --trace FILE)");
    if (a->trace != NULL && (a->output != NULL || a->preload != NULL || a->driver_view))
        return cliopt_usage_error(&tune_cmd, "--output, --preload and --driver-view are for "
                                             "recording a command, not with --trace");
    if (a->output != NULL) {
        size_t len = strlen(a->output);
        if (len >= 3 && strcmp(a->output + len - 3, ".gz") == 0)
            return cliopt_usage_error(&tune_cmd,
                                      "--output '%s': tune reads the trace while it grows, "
                                      "so it is plain CSV (gzip it afterwards)",
                                      a->output);
    }
    return -1;
}

/* ------------------------------------------------------------------ */
/* The steady state                                                     */
/* ------------------------------------------------------------------ */

/* What the iterations of a trace say about its steady state. */
struct steady {
    size_t n_iters;   /* iterations found */
    size_t complete;  /* complete iterations after the first (a last one cut
                         off by the end of the recording is not) */
    bool steady;      /* the last PERIODS of them agree, and no leak */
    uint64_t lo, hi;  /* least and most of their peaks (with steady or not,
                         over the last min(PERIODS, complete) of them) */
    double spread;    /* (hi - lo) / hi */
    double span;      /* share of the recording the complete iterations span */
};

/* R's steady state over PERIODS iterations into S; WHOLE: R is the whole
** run of a command that ended by itself (no share of time asked). */
static void
steady_of(const struct an_result *r, unsigned periods, bool whole, struct steady *s)
{
    memset(s, 0, sizeof *s);
    s->n_iters = r->n_iters;
    /* analyze's leak fit takes exactly these: indexes 1 .. leak_iters_used */
    s->complete = r->leak_iters_used;
    if (s->complete == 0)
        return;
    size_t k = s->complete < periods ? s->complete : periods;
    s->lo = UINT64_MAX;
    for (size_t i = s->complete + 1 - k; i <= s->complete; i++) {
        uint64_t p = r->iters[i].peak_live;
        if (p < s->lo)
            s->lo = p;
        if (p > s->hi)
            s->hi = p;
    }
    s->spread = s->hi > 0 ? (double)(s->hi - s->lo) / (double)s->hi : 0.0;
    uint64_t t0 = r->iters[0].t_start_us, w0 = r->iters[1].t_start_us,
             t1 = r->iters[s->complete].t_end_us;
    s->span = t1 > t0 ? (double)(t1 - w0) / (double)(t1 - t0) : 1.0;
    s->steady = s->complete >= periods && s->spread <= TUNE_FLAT_SHARE &&
                (whole || s->span >= TUNE_SPAN_SHARE) && !r->leak;
}

/* ------------------------------------------------------------------ */
/* Watching the recording                                               */
/* ------------------------------------------------------------------ */

/* Why the recording ended: it ended by itself (NONE), tune stopped it, or
** the user did (Ctrl-C, a kill: SIGINT or SIGTERM ended it). */
enum stop_reason { STOP_NONE, STOP_STEADY, STOP_SECONDS, STOP_ITERATIONS, STOP_USER };

struct watch_state {
    const struct tune_args *a;
    const char *path;    /* the growing trace */
    struct run_watch *run;
    struct timespec start;
    off_t checked;       /* the file's size at the last check */
    enum stop_reason reason;
    struct steady last;  /* of the last check */
};

static double
seconds_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/*
** The complete lines of the trace at PATH (the writer's buffer reaches the
** file in pieces, so the last line may be half written) copied into an
** anonymous file, loaded. NULL when nothing can be read yet.
*/
static struct trace *
load_complete_lines(const char *path)
{
    int in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return NULL;
    struct stat st;
    char *text = NULL;
    if (fstat(in, &st) == 0 && st.st_size > 0)
        text = malloc((size_t)st.st_size);
    size_t n = 0;
    while (text != NULL && n < (size_t)st.st_size) {
        ssize_t got = read(in, text + n, (size_t)st.st_size - n);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(in);
    while (n > 0 && text[n - 1] != '\n')
        n--;
    struct trace *t = NULL;
    int mem = n > 0 ? memfd_create("vram-tune", MFD_CLOEXEC) : -1;
    if (mem >= 0 && write(mem, text, n) == (ssize_t)n) {
        char name[64];
        snprintf(name, sizeof name, "/proc/self/fd/%d", mem);
        if (trace_load(name, &t) != VRAM_OK)
            t = NULL;
    }
    if (mem >= 0)
        close(mem);
    free(text);
    return t;
}

/* run_watch's poll: true when the recording has what it needs. */
static bool
watch_poll(void *ctx)
{
    struct watch_state *w = ctx;
    if (seconds_since(&w->start) >= w->a->seconds) {
        w->reason = STOP_SECONDS;
        return true;
    }
    struct stat st;
    if (stat(w->path, &st) != 0 || st.st_size == w->checked)
        return false;
    w->checked = st.st_size;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct trace *t = load_complete_lines(w->path);
    struct an_result *r = NULL;
    if (t != NULL && t->n_events > 0 && analyze_trace(t, NULL, &r) == VRAM_OK) {
        steady_of(r, (unsigned)w->a->periods, false, &w->last);
        if (w->last.steady)
            w->reason = STOP_STEADY;
        else if (w->a->max_iterations > 0 && w->last.complete + 1 >= w->a->max_iterations)
            w->reason = STOP_ITERATIONS;
    }
    an_result_free(r);
    trace_free(t);
    /* The next check waits at least ten times what this one took. */
    double cost_ms = seconds_since(&t0) * 1000.0 * TUNE_POLL_COST_FACTOR;
    unsigned next = cost_ms > TUNE_POLL_MS ? (unsigned)cost_ms : TUNE_POLL_MS;
    w->run->interval_ms = next < TUNE_POLL_MAX_MS ? next : TUNE_POLL_MAX_MS;
    return w->reason != STOP_NONE;
}

/* ------------------------------------------------------------------ */
/* The recommendation                                                   */
/* ------------------------------------------------------------------ */

struct tune_row {
    vram_strategy strategy;
    struct replay_summary s;
};

struct tune {
    const struct trace *t;
    const struct an_result *r;
    struct steady steady;
    unsigned periods;            /* --periods */
    bool ran;                    /* a command was recorded (else --trace) */
    bool kept;                   /* the trace stays (--trace, -o) */
    enum stop_reason reason;     /* why the recording stopped; NONE: it ended */
    int command_status;          /* the command's, when it ran */
    uint64_t device_memory;      /* 0: unknown */
    const char *device_source;   /* "--device-memory", "the driver" */
    uint64_t replay_memory;      /* the simulated device's bytes */
    struct tune_row rows[N_STRATEGIES];
    size_t best;                 /* index into rows */
    double headroom;
    char headroom_why[256];
    uint64_t cap;                /* bytes, whole MiB */
    uint64_t tf_cap, jax_cap;    /* under their models' strategies; 0 none */
};

/* X * (1 + H) rounded up to whole MiB. */
static uint64_t
with_headroom(uint64_t x, double h)
{
    double v = ceil((double)x * (1.0 + h) / (double)MIB);
    return (uint64_t)v * MIB;
}

static const struct tune_row *
row_of(const struct tune *tu, vram_strategy st)
{
    for (size_t i = 0; i < N_STRATEGIES; i++)
        if (tu->rows[i].strategy == st)
            return &tu->rows[i];
    return NULL;
}

/* The best row: lowest peak reserved among those a cap fits; ties (within
** TUNE_TIE_SHARE) to the simpler, which comes first. false: none fits. */
static bool
choose(struct tune *tu)
{
    bool found = false;
    uint64_t least = UINT64_MAX;
    for (size_t i = 0; i < N_STRATEGIES; i++)
        if (tu->rows[i].s.has_min_limit && tu->rows[i].s.peak_reserved_bytes < least)
            least = tu->rows[i].s.peak_reserved_bytes;
    for (size_t i = 0; i < N_STRATEGIES && !found; i++) {
        const struct replay_summary *s = &tu->rows[i].s;
        if (s->has_min_limit &&
            (double)s->peak_reserved_bytes <= (double)least * (1.0 + TUNE_TIE_SHARE)) {
            tu->best = i;
            found = true;
        }
    }
    return found;
}

static void
pick_headroom(struct tune *tu)
{
    const struct steady *s = &tu->steady;
    char rate[32];
    tu->headroom = TUNE_HEADROOM_UNSTEADY;
    if (tu->r->leak)
        snprintf(tu->headroom_why, sizeof tu->headroom_why,
                 "15%%: a leak of %s per iteration: no cap holds for long",
                 size_format((uint64_t)tu->r->leak_bytes_per_iter, rate, sizeof rate));
    else if (s->steady) {
        tu->headroom = TUNE_HEADROOM_STEADY;
        snprintf(tu->headroom_why, sizeof tu->headroom_why,
                 "10%%: the peak repeated within %.1f%% over %zu iterations, and the replay "
                 "counts the allocator's fragmentation",
                 s->spread * 100.0, s->complete);
    } else if (s->complete >= 1 && s->spread > TUNE_FLAT_SHARE)
        snprintf(tu->headroom_why, sizeof tu->headroom_why,
                 "15%%: the iterations' peaks vary by %.1f%%: the recording may not have "
                 "seen the largest",
                 s->spread * 100.0);
    else if (s->complete >= tu->periods && s->span < TUNE_SPAN_SHARE)
        snprintf(tu->headroom_why, sizeof tu->headroom_why,
                 "15%%: the %zu iterations span %.1f%% of the recording, %.0f%% needed for a "
                 "steady state (a burst of rounds, such as autotuning, is not one)",
                 s->complete, s->span * 100.0, TUNE_SPAN_SHARE * 100.0);
    else
        snprintf(tu->headroom_why, sizeof tu->headroom_why,
                 "15%%: only %zu complete iterations after the first, %u needed for a "
                 "steady state",
                 s->complete, tu->periods);
}

/* A fraction of the device, rounded up to the thousandth so that the
** framework's cap is never below the one recommended. */
static double
fraction_of(uint64_t cap, uint64_t total)
{
    return ceil((double)cap / (double)total * 1000.0) / 1000.0;
}

static uint64_t
mib_up(uint64_t bytes)
{
    return (bytes + MIB - 1) / MIB;
}

/* ---- the settings, as text ---- */

static void
line_vram_run(const struct tune *tu, char *buf, size_t len)
{
    snprintf(buf, len, "vram run --limit %lluM -- COMMAND", (unsigned long long)mib_up(tu->cap));
}

static void
line_vram_torch(const struct tune *tu, char *buf, size_t len)
{
    snprintf(buf, len, "vram.torch.use(limit=\"%lluM\", strategy=\"%s\")",
             (unsigned long long)mib_up(tu->cap),
             vram_strategy_name(tu->rows[tu->best].strategy));
}

/* The fraction of the GPU's total memory that CAP is, as the framework
** writes it (PREFIX, the number, SUFFIX), or "CAPM / the GPU's total". */
static void
line_fraction(const struct tune *tu, uint64_t cap, const char *prefix, const char *suffix,
              char *buf, size_t len)
{
    if (tu->device_memory > 0)
        snprintf(buf, len, "%s%.3f%s", prefix, fraction_of(cap, tu->device_memory), suffix);
    else
        snprintf(buf, len, "%s%lluM / the GPU's total%s", prefix,
                 (unsigned long long)mib_up(cap), suffix);
}

static void
line_torch_fraction(const struct tune *tu, char *buf, size_t len)
{
    line_fraction(tu, tu->cap, "torch.cuda.set_per_process_memory_fraction(", ", 0)", buf, len);
}

static void
line_tf(const struct tune *tu, char *buf, size_t len)
{
    snprintf(buf, len,
             "tf.config.set_logical_device_configuration(gpu, "
             "[tf.config.LogicalDeviceConfiguration(memory_limit=%llu)])",
             (unsigned long long)mib_up(tu->tf_cap));
}

static void
line_jax(const struct tune *tu, char *buf, size_t len)
{
    line_fraction(tu, tu->jax_cap,
                  "XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=", "", buf,
                  len);
}

/* The JSON's "stopped" (WHY) and the text report's words for it (SAY). */
static const char *
stop_text(enum stop_reason why, bool say)
{
    switch (why) {
    case STOP_STEADY:
        return say ? "stopped once steady" : "steady";
    case STOP_SECONDS:
        return say ? "stopped at --seconds" : "seconds";
    case STOP_ITERATIONS:
        return say ? "stopped at --iterations" : "iterations";
    case STOP_USER:
        return say ? "interrupted (SIGINT or SIGTERM from outside)" : "interrupted";
    case STOP_NONE:
        break;
    }
    return say ? "ended with the command" : "ended";
}

/* ---- text ---- */

static void
print_text(const struct tune *tu)
{
    char a[32], b[32], c[32], line[320];
    const struct an_result *r = tu->r;
    const struct steady *s = &tu->steady;
    printf("trace: %s%s: %llu events, %zu iterations (%s)", tu->t->path,
           tu->kept ? "" : " (removed; -o FILE keeps it)", (unsigned long long)tu->t->n_events,
           r->n_iters, an_iters_source(r));
    if (tu->ran)
        printf(", recording %s", stop_text(tu->reason, true));
    printf("\n");
    if (s->steady)
        printf("steady state: the last %u of %zu complete iterations peak at %s to %s "
               "(within %.1f%%)\n",
               tu->periods, s->complete, size_format(s->lo, a, sizeof a),
               size_format(s->hi, b, sizeof b), s->spread * 100.0);
    else
        printf("no steady state: %s\n", tu->headroom_why + 5);
    if (r->leak)
        printf("leak: %s per iteration (R^2 %.2f): the cap below holds only until it is "
               "full (vram analyze says more)\n",
               size_format((uint64_t)r->leak_bytes_per_iter, a, sizeof a), r->leak_r2);
    printf("peak in use: %s\n\n", size_format(r->peak_bytes, a, sizeof a));

    printf("  %-18s %14s %6s %14s %14s\n", "strategy", "peak reserved", "frag", "min limit",
           "cap");
    for (size_t i = 0; i < N_STRATEGIES; i++) {
        const struct replay_summary *x = &tu->rows[i].s;
        double frag = x->peak_in_use_bytes > 0 ? (double)x->peak_reserved_bytes /
                                                     (double)x->peak_in_use_bytes
                                               : 0.0;
        printf("%s %-18s %14s %6.3f %14s %14s\n", i == tu->best ? "*" : " ",
               vram_strategy_name(tu->rows[i].strategy),
               size_format(x->peak_reserved_bytes, a, sizeof a), frag,
               x->has_min_limit ? size_format(x->min_limit_bytes, b, sizeof b) : "none",
               x->has_min_limit
                   ? size_format(with_headroom(x->min_limit_bytes, tu->headroom), c, sizeof c)
                   : "none");
    }
    const struct tune_row *best = &tu->rows[tu->best];
    bool tie = false;
    for (size_t i = 0; i < N_STRATEGIES; i++)
        tie |= tu->rows[i].s.has_min_limit &&
               tu->rows[i].s.peak_reserved_bytes < best->s.peak_reserved_bytes;
    printf("\nstrategy: %s (%s)\n", vram_strategy_name(best->strategy),
           tie ? "within 1% of the lowest peak reserved, and simpler"
               : "the lowest peak reserved");
    printf("smallest cap without an OOM: %s\n",
           size_format(best->s.min_limit_bytes, a, sizeof a));
    printf("cap: %s = %s + %s\n", size_format(tu->cap, a, sizeof a),
           size_format(best->s.min_limit_bytes, b, sizeof b), tu->headroom_why);
    printf("     (%.1f%% above the peak in use, %s)\n",
           r->peak_bytes > 0 ? ((double)tu->cap / (double)r->peak_bytes - 1.0) * 100.0 : 0.0,
           size_format(r->peak_bytes, c, sizeof c));
    if (tu->device_memory > 0)
        printf("device: %s (%s)%s\n", size_format(tu->device_memory, a, sizeof a),
               tu->device_source,
               tu->cap > tu->device_memory ? ": the cap is more than the device has" : "");
    else
        printf("device: unknown (--device-memory SIZE gives the fractions)\n");
    printf("\nsettings:\n");
    line_vram_run(tu, line, sizeof line);
    printf("  vram:        %s\n", line);
    line_vram_torch(tu, line, sizeof line);
    printf("  PyTorch:     %s\n", line);
    line_torch_fraction(tu, line, sizeof line);
    printf("  PyTorch:     %s   (its own allocator: not modelled, the cap of %s)\n", line,
           vram_strategy_name(best->strategy));
    line_tf(tu, line, sizeof line);
    printf("  TensorFlow:  %s   (BFC with a limit: modelled by %s)\n", line,
           vram_strategy_name(TUNE_TF_MODEL));
    line_jax(tu, line, sizeof line);
    printf("  JAX:         %s   (BFC growing: modelled by %s)\n", line,
           vram_strategy_name(TUNE_JAX_MODEL));
}

/* ---- JSON ---- */

static struct json_object *
json_size_or_null(bool known, uint64_t v)
{
    return known ? json_object_new_uint64(v) : NULL;
}

/* CAP as a fraction of the GPU's memory, to 3 decimals; null when that
** is unknown. */
static struct json_object *
json_fraction(const struct tune *tu, uint64_t cap)
{
    return tu->device_memory > 0 ? cli_json_fixed(fraction_of(cap, tu->device_memory), 3)
                                 : NULL;
}

static int
print_json(const struct tune *tu)
{
    char line[320];
    const struct an_result *r = tu->r;
    const struct steady *s = &tu->steady;
    struct json_object *o = json_object_new_object();
    if (o == NULL)
        return TUNE_FAIL;
    json_object_object_add(o, "trace", json_object_new_string(tu->t->path));
    json_object_object_add(o, "trace_kept", json_object_new_boolean(tu->kept));
    json_object_object_add(o, "events", json_object_new_uint64(tu->t->n_events));
    json_object_object_add(o, "iterations", json_object_new_uint64(r->n_iters));
    json_object_object_add(o, "iterations_from", json_object_new_string(an_iters_source(r)));
    json_object_object_add(o, "complete_iterations", json_object_new_uint64(s->complete));
    json_object_object_add(o, "steady", json_object_new_boolean(s->steady));
    json_object_object_add(o, "peak_spread", cli_json_fixed(s->spread, 4));
    json_object_object_add(o, "recorded", json_object_new_boolean(tu->ran));
    json_object_object_add(o, "stopped",
                           tu->ran ? json_object_new_string(stop_text(tu->reason, false)) : NULL);
    json_object_object_add(o, "command_status",
                           tu->ran ? json_object_new_int(tu->command_status) : NULL);
    json_object_object_add(o, "peak_in_use_bytes", json_object_new_uint64(r->peak_bytes));
    json_object_object_add(o, "leak", json_object_new_boolean(r->leak));
    json_object_object_add(o, "leak_bytes_per_iteration",
                           cli_json_fixed(r->leak ? r->leak_bytes_per_iter : 0.0, 0));
    json_object_object_add(o, "device_memory_bytes",
                           json_size_or_null(tu->device_memory > 0, tu->device_memory));
    json_object_object_add(o, "replay_device_memory_bytes",
                           json_object_new_uint64(tu->replay_memory));
    struct json_object *rows = json_object_new_array();
    for (size_t i = 0; i < N_STRATEGIES; i++) {
        const struct replay_summary *x = &tu->rows[i].s;
        struct json_object *row = json_object_new_object();
        json_object_object_add(row, "strategy",
                               json_object_new_string(vram_strategy_name(tu->rows[i].strategy)));
        json_object_object_add(row, "peak_reserved_bytes",
                               json_object_new_uint64(x->peak_reserved_bytes));
        json_object_object_add(row, "fragmentation",
                               cli_json_fixed(x->peak_in_use_bytes > 0
                                              ? (double)x->peak_reserved_bytes /
                                                    (double)x->peak_in_use_bytes
                                              : 0.0,
                                          3));
        json_object_object_add(row, "min_limit_bytes",
                               json_size_or_null(x->has_min_limit, x->min_limit_bytes));
        json_object_object_add(
            row, "cap_bytes",
            json_size_or_null(x->has_min_limit, with_headroom(x->min_limit_bytes, tu->headroom)));
        json_object_array_add(rows, row);
    }
    json_object_object_add(o, "strategies", rows);
    const struct tune_row *best = &tu->rows[tu->best];
    struct json_object *rec = json_object_new_object();
    json_object_object_add(rec, "strategy",
                           json_object_new_string(vram_strategy_name(best->strategy)));
    json_object_object_add(rec, "min_limit_bytes", json_object_new_uint64(best->s.min_limit_bytes));
    json_object_object_add(rec, "headroom", cli_json_fixed(tu->headroom, 2));
    json_object_object_add(rec, "headroom_reason", json_object_new_string(tu->headroom_why));
    json_object_object_add(rec, "cap_bytes", json_object_new_uint64(tu->cap));
    json_object_object_add(o, "recommended", rec);
    struct json_object *set = json_object_new_object();
    line_vram_run(tu, line, sizeof line);
    json_object_object_add(set, "vram_run", json_object_new_string(line));
    line_vram_torch(tu, line, sizeof line);
    json_object_object_add(set, "pytorch_vram", json_object_new_string(line));
    line_torch_fraction(tu, line, sizeof line);
    json_object_object_add(set, "pytorch", json_object_new_string(line));
    json_object_object_add(set, "pytorch_fraction", json_fraction(tu, tu->cap));
    line_tf(tu, line, sizeof line);
    json_object_object_add(set, "tensorflow", json_object_new_string(line));
    json_object_object_add(set, "tensorflow_memory_limit_mb",
                           json_object_new_uint64(mib_up(tu->tf_cap)));
    line_jax(tu, line, sizeof line);
    json_object_object_add(set, "jax", json_object_new_string(line));
    json_object_object_add(set, "jax_mem_fraction", json_fraction(tu, tu->jax_cap));
    json_object_object_add(o, "settings", set);
    printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return TUNE_OK;
}

/*
** Everything after the trace is in memory: analysis, replays, the
** recommendation. Returns the exit status.
*/
static int
recommend(struct tune *tu, const struct tune_args *a)
{
    struct an_options opts;
    memset(&opts, 0, sizeof opts);
    opts.strategy = VRAM_STRATEGY_GROWTH;
    opts.device_memory = tu->device_memory;
    struct an_result *r = NULL;
    int rc = cli_analyze(tu->t, &opts, &r);
    if (rc != 0)
        return rc;
    tu->r = r;
    tu->periods = (unsigned)a->periods;
    steady_of(r, tu->periods, tu->ran && tu->reason == STOP_NONE, &tu->steady);
    tu->replay_memory = tu->device_memory > 0 ? tu->device_memory : VRAM_SIM_DEFAULT_MEMORY;
    for (size_t i = 0; i < N_STRATEGIES && rc == 0; i++) {
        tu->rows[i].strategy = tune_simplicity[i];
        rc = replay_summarize(tu->t, tune_simplicity[i], tu->replay_memory, &tu->rows[i].s);
    }
    if (rc == 0 && !choose(tu)) {
        char m[32];
        cli_error("tune: %s: no strategy replays it without an OOM within the device's %s",
                  tu->t->path, size_format(tu->replay_memory, m, sizeof m));
        rc = TUNE_FAIL;
    }
    if (rc == 0) {
        pick_headroom(tu);
        tu->cap = with_headroom(tu->rows[tu->best].s.min_limit_bytes, tu->headroom);
        const struct tune_row *tf = row_of(tu, TUNE_TF_MODEL), *jax = row_of(tu, TUNE_JAX_MODEL);
        tu->tf_cap = tf->s.has_min_limit ? with_headroom(tf->s.min_limit_bytes, tu->headroom)
                                         : tu->cap;
        tu->jax_cap = jax->s.has_min_limit
                          ? with_headroom(jax->s.min_limit_bytes, tu->headroom)
                          : tu->cap;
        if (!tu->steady.steady)
            cli_error("tune: no steady state in %s: %s; recommended from what was seen",
                      tu->t->path, tu->headroom_why + 5);
        rc = a->json ? print_json(tu) : (print_text(tu), TUNE_OK);
        if (fflush(stdout) != 0) {
            cli_error("tune: writing the report: %s", strerror(errno));
            rc = TUNE_FAIL;
        }
        if (rc == TUNE_OK && !tu->steady.steady)
            rc = TUNE_UNSTEADY;
    }
    an_result_free(r);
    tu->r = NULL;
    return rc;
}

/* ------------------------------------------------------------------ */
/* The command                                                          */
/* ------------------------------------------------------------------ */

/* A temporary trace for the recording, created; false after one line. */
static bool
temp_trace(char *path, size_t len)
{
    const char *dir = P_tmpdir;
    snprintf(path, len, "%s/vram-tune-XXXXXX.trace.csv", dir);
    int fd = mkstemps(path, (int)strlen(".trace.csv"));
    if (fd < 0) {
        cli_error("tune: cannot create a temporary trace in %s: %s", dir, strerror(errno));
        return false;
    }
    close(fd);
    return true;
}

static int
tune_command(const struct tune_args *a)
{
    char group[LEDGER_GROUP_LEN], path[PATH_MAX], temp[PATH_MAX] = "";
    int rc;
    if ((rc = run_prepare("tune", NULL, NULL, a->preload, group, sizeof group)) >= 0)
        return rc;
    const char *output = a->output;
    if (output == NULL) {
        if (!temp_trace(temp, sizeof temp))
            return TUNE_FAIL;
        output = temp;
    }
    if ((rc = record_prepare("tune", output, a->driver_view, false, false, path,
                             sizeof path)) >= 0) {
        if (temp[0] != '\0')
            unlink(temp);
        return rc;
    }
    struct run_watch run = {.poll = watch_poll, .interval_ms = TUNE_POLL_MS,
                            .grace_ms = TUNE_GRACE_MS};
    struct watch_state w = {.a = a, .path = path, .run = &run, .checked = -1};
    run.ctx = &w;
    clock_gettime(CLOCK_MONOTONIC, &w.start);
    /* With --json the command's standard output goes to standard error, so
    ** that standard output is the one JSON object. */
    int saved_out = -1;
    if (a->json) {
        fflush(stdout);
        saved_out = dup(STDOUT_FILENO);
        if (saved_out < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
            cli_error("tune: cannot send the command's output to standard error: %s",
                      strerror(errno));
            if (saved_out >= 0)
                close(saved_out);
            if (temp[0] != '\0')
                unlink(temp);
            return TUNE_FAIL;
        }
    }
    bool stopped = false;
    int status = run_command_watched(a->command, group, &run, &stopped);
    if (saved_out >= 0) {
        dup2(saved_out, STDOUT_FILENO);
        close(saved_out);
    }

    struct tune tu;
    memset(&tu, 0, sizeof tu);
    tu.ran = true;
    tu.kept = a->output != NULL;
    tu.reason = stopped ? w.reason : STOP_NONE;
    if (!stopped && (status == 128 + SIGINT || status == 128 + SIGTERM))
        tu.reason = STOP_USER; /* Ctrl-C reaches the command too: tuned from what it did */
    tu.command_status = status;
    struct trace *t = NULL;
    if (status == 126 || status == 127) {
        rc = status; /* nothing ran: said already */
    } else if (!stopped && status != 0 && tu.reason != STOP_USER) {
        cli_error("tune: the command failed (exit status %d): no recommendation from a "
                  "failed run%s%s",
                  status, a->output != NULL ? "; its trace: " : "",
                  a->output != NULL ? path : "");
        rc = TUNE_FAIL;
    } else {
        struct stat st;
        if (stat(path, &st) == 0 && st.st_size == 0) {
            /* The library creates the trace at the first CUDA call it sees. */
            cli_error("tune: no GPU allocation was recorded (the command made no CUDA call "
                      "the preload library saw)");
            rc = TUNE_FAIL;
        } else if (trace_load(path, &t) != VRAM_OK) {
            cli_error("tune: the recording cannot be read: %s", vram_last_error());
            rc = TUNE_FAIL;
        } else if (t->n_events == 0 || t->n_slots == 0) {
            cli_error("tune: no GPU allocation was recorded (the command made no CUDA call "
                      "the preload library saw)");
            rc = TUNE_FAIL;
        } else {
            int n_gpus = 0;
            uint64_t total = 0;
            if (a->device_memory > 0) {
                tu.device_memory = a->device_memory;
                tu.device_source = "--device-memory";
            } else if (replay_probe_gpus(&n_gpus, &total, true) == 0 && n_gpus > 0) {
                tu.device_memory = total;
                tu.device_source = n_gpus > 1 ? "the smallest GPU's, from the driver"
                                              : "the GPU's, from the driver";
            }
            tu.t = t;
            rc = recommend(&tu, a);
        }
    }
    trace_free(t);
    if (temp[0] != '\0')
        unlink(temp);
    return rc;
}

static int
tune_trace(const struct tune_args *a)
{
    struct trace *t = NULL;
    int rc = cli_load_trace(a->trace, &t);
    if (rc != 0)
        return rc;
    if (t->n_slots == 0) {
        cli_error("tune: %s: no allocation in the trace: nothing to tune", a->trace);
        trace_free(t);
        return TUNE_USAGE;
    }
    struct tune tu;
    memset(&tu, 0, sizeof tu);
    tu.t = t;
    tu.kept = true;
    tu.device_memory = a->device_memory;
    tu.device_source = "--device-memory";
    rc = recommend(&tu, a);
    trace_free(t);
    return rc;
}

int
cmd_tune(int argc, char **argv)
{
    struct tune_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    return a.trace != NULL ? tune_trace(&a) : tune_command(&a);
}
