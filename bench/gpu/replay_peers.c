/* SPDX-License-Identifier: MIT */
/*
** replay_peers.c -- replay allocation traces on a real GPU through the two
** allocators vram is compared with, so that `vram replay --backend cuda`
** and these figures come from the same run on the same GPU
** (tests/gpu/run.sh):
**
**   cudaMallocAsync  the CUDA stream-ordered pool: cudaMallocAsync and
**                    cudaFreeAsync on one stream, from the device's default
**                    pool with its release threshold raised to UINT64_MAX
**                    so that it keeps its memory across synchronisations.
**   cudaMalloc       cudaMalloc and cudaFree, no caching at all.
**
** Per trace and allocator: events replayed, host ns per event (the event
** loop plus one final stream synchronisation, median of --repeat runs),
** peak bytes reserved from the device and fragmentation = peak reserved /
** peak bytes live (the sum of the trace's sizes of live allocations, over
** the events replayed).
**
** Peak reserved is cudaMemPoolAttrReservedMemHigh for the pool. For
** cudaMalloc it is simply the peak of live bytes: every live allocation is
** its own piece of device memory, and the driver's rounding of each piece
** is not visible through the runtime. Its fragmentation is therefore 1.000
** by construction; what the cudaMalloc row measures is host time.
**
** Every run starts cold, like each `vram replay` run (a fresh context):
** the pool is trimmed to nothing (cudaMemPoolTrimTo) and its high-water
** mark reset before each run. Allocations still live at the end of a run
** (the trace never frees them, or --max-events cut it short) are freed
** after the timed loop.
**
** --max-events N replays only the first N events (cudaMalloc costs about
** 43 us a pair on an H200, so the 1.47M-event gpt2m_generate trace would
** take half a minute per run); the output then says "prefix" and "ops"
** counts the events replayed.
**
** Exit status: 0 ok, 1 failure (a CUDA call failed, no GPU), 2 bad usage
** or malformed trace. Built only where the CUDA toolkit is installed.
*/
#include <cuda_runtime_api.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/median.h"
#include "cliopt.h"
#include "trace/trace.h"
#include "trace/trace_replay.h"
#include "vram.h"

/* ------------------------------------------------------------------ */
/* Options: one table, from which both the parser and --help come      */
/* ------------------------------------------------------------------ */

enum opt_id {
    OPT_ALLOCATOR,
    OPT_REPEAT,
    OPT_MAX_EVENTS,
    OPT_DEVICE,
    OPT_WARM,
    OPT_JSON
};

/* --warm: time a second pass that finds the allocator warm. */
static bool warm_mode;

static const struct cli_opt opt_table[] = {
    {OPT_ALLOCATOR, "allocator", 0, "cudaMallocAsync|cudaMalloc|all",
     "allocators to replay through (default: all)", .store = CLIOPT_CALL},
    {OPT_REPEAT, "repeat", 0, "N",
     "replay N times (1..1000) and report the median ns/op "
     "(default 3)", .store = CLIOPT_CALL},
    {OPT_MAX_EVENTS, "max-events", 0, "N", "replay only the first N events of each trace",
     .store = CLIOPT_CALL},
    {OPT_DEVICE, "device", 0, "N", "CUDA device ordinal (default 0)", .store = CLIOPT_CALL},
    {OPT_WARM, "warm", 0, NULL, "time a second pass after an untimed first one",
     .store = CLIOPT_CALL},
    {OPT_JSON, "json", 0, NULL, "print one JSON object per line (sizes in bytes)",
     .store = CLIOPT_CALL},
};

enum allocator { ALLOC_POOL, ALLOC_MALLOC, N_ALLOCATORS };

static const char *const allocator_names[N_ALLOCATORS] = {"cudaMallocAsync",
                                                          "cudaMalloc"};

struct settings {
    bool use[N_ALLOCATORS];
    unsigned repeat;     /* 1..1000 */
    uint64_t max_events; /* 0 = all */
    int device;
    bool json;
};

/* What one replay of one trace through one allocator measured. */
struct result {
    uint64_t ops;                 /* events replayed */
    double ns_per_op;             /* host ns per event */
    uint64_t peak_live_bytes;     /* max of the sum of live trace sizes */
    uint64_t peak_reserved_bytes; /* see the top of the file */
    uint64_t ooms;                /* allocations the allocator refused */
};

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print "vram_replay_peers: " + the message + newline to stderr. */
static void
fail(const char *fmt, ...)
{
    va_list ap;
    fputs("vram_replay_peers: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static const struct cli_command peers_cmd = {
    .prog = "vram_replay_peers",
    .synopsis = "[OPTIONS] TRACE...",
    .about = "Replay allocation traces on the GPU through the CUDA stream-ordered\n"
             "pool (cudaMallocAsync, release threshold UINT64_MAX) and through\n"
             "cudaMalloc, for comparison with 'vram replay --backend cuda'.\n",
    CLIOPT_TABLE(opt_table),
    .exit_status = "0 ok, 1 failure, 2 bad usage or malformed trace.",
};

/* ------------------------------------------------------------------ */
/* CUDA helpers                                                         */
/* ------------------------------------------------------------------ */

/* True if E is success; otherwise print one line naming WHAT. */
static bool
cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return true;
    fail("%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return false;
}

static double
elapsed_ns(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) * 1e9 + (double)(b->tv_nsec - a->tv_nsec);
}

/* The allocator being replayed through, and what it needs. */
struct peer {
    enum allocator which;
    cudaStream_t stream; /* the one stream of the pool's replays */
    cudaMemPool_t pool;  /* the device's default pool */
    bool releasing;      /* freeing what a run left live (the messages say so) */
};

/* Empty the pool and reset its high-water mark: each run starts cold.
** (The pool's 64-bit attributes are cuuint64_t, from cuda.h: uint64_t here.) */
static bool
pool_reset(struct peer *pr)
{
    uint64_t zero = 0;
    return cuda_ok(cudaStreamSynchronize(pr->stream), "cudaStreamSynchronize") &&
           cuda_ok(cudaMemPoolTrimTo(pr->pool, 0), "cudaMemPoolTrimTo") &&
           cuda_ok(
               cudaMemPoolSetAttribute(pr->pool, cudaMemPoolAttrReservedMemHigh, &zero),
               "cudaMemPoolSetAttribute(ReservedMemHigh)");
}

/* The CUDA side of a replay (trace_replay.h's hooks); CTX is the peer. */
static int
peer_alloc(void *ctx, const struct trace_event *ev, uint64_t index, void **ptr)
{
    struct peer *pr = ctx;
    bool pool = pr->which == ALLOC_POOL;
    (void)index;
    cudaError_t e = pool ? cudaMallocAsync(ptr, (size_t)ev->size, pr->stream)
                         : cudaMalloc(ptr, (size_t)ev->size);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* clear it: not sticky */
        return TRACE_REPLAY_REFUSED;
    }
    return cuda_ok(e, pool ? "cudaMallocAsync" : "cudaMalloc") ? TRACE_REPLAY_OK
                                                               : TRACE_REPLAY_FAILED;
}

static int
peer_free(void *ctx, const struct trace_event *ev, uint64_t index, void *ptr, uint64_t size)
{
    struct peer *pr = ctx;
    bool pool = pr->which == ALLOC_POOL;
    (void)ev;
    (void)index;
    (void)size;
    cudaError_t e = pool ? cudaFreeAsync(ptr, pr->stream) : cudaFree(ptr);
    return cuda_ok(e, pr->releasing ? "freeing what the trace left live"
                      : pool      ? "cudaFreeAsync"
                                  : "cudaFree")
               ? TRACE_REPLAY_OK
               : TRACE_REPLAY_FAILED;
}

static const struct trace_replay_hooks peer_hooks = {peer_alloc, peer_free};

/*
** Replay the first N events of SL's trace once through PR into OUT. Returns false
** (after one line) if a CUDA call fails other than by running out of
** memory.
*/
static bool
replay_once(uint64_t n, struct peer *pr, struct trace_replay *sl, bool cold,
            struct result *out)
{
    bool pool = pr->which == ALLOC_POOL;
    if (pool && cold && !pool_reset(pr))
        return false;
    trace_replay_reset(sl);
    struct timespec t0, t1;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool ok = trace_replay_run(sl, 0, n, &peer_hooks, pr) == TRACE_REPLAY_OK;
    if (ok && pool)
        ok = cuda_ok(cudaStreamSynchronize(pr->stream), "cudaStreamSynchronize");
    clock_gettime(CLOCK_MONOTONIC, &t1);

    uint64_t peak = sl->peak_in_use;
    uint64_t reserved = peak;
    if (ok && pool) {
        uint64_t high = 0;
        ok = cuda_ok(
            cudaMemPoolGetAttribute(pr->pool, cudaMemPoolAttrReservedMemHigh, &high),
            "cudaMemPoolGetAttribute(ReservedMemHigh)");
        reserved = (uint64_t)high;
    }

    /* Untimed: free what is still live, so the next run starts empty. */
    pr->releasing = true;
    if (trace_replay_release(sl, &peer_hooks, pr) != TRACE_REPLAY_OK)
        return false;
    pr->releasing = false;
    if (!ok)
        return false;

    memset(out, 0, sizeof *out);
    out->ops = n;
    out->ns_per_op = n > 0 ? elapsed_ns(&t0, &t1) / (double)n : 0.0;
    out->peak_live_bytes = peak;
    out->peak_reserved_bytes = reserved;
    out->ooms = sl->refused;
    return true;
}

/* REPEAT runs; the statistics of the first, the median ns/op. */
static bool
replay_repeated(uint64_t n, unsigned repeat, struct peer *pr,
                struct trace_replay *sl, struct result *out)
{
    double times[1000];
    struct result first, r;
    memset(&first, 0, sizeof first);
    for (unsigned i = 0; i < repeat; i++) {
        /* --warm: an untimed cold pass first, then the timed pass finds the
        ** pool holding the memory, as in a long training run. */
        if (warm_mode && !replay_once(n, pr, sl, true, &r))
            return false;
        if (!replay_once(n, pr, sl, !warm_mode, &r))
            return false;
        if (i == 0)
            first = r;
        times[i] = r.ns_per_op;
    }
    /* Leave nothing reserved for whatever is replayed next. */
    if (pr->which == ALLOC_POOL && !pool_reset(pr))
        return false;
    first.ns_per_op = median_of(times, repeat);
    *out = first;
    return true;
}

/* ------------------------------------------------------------------ */
/* Output                                                               */
/* ------------------------------------------------------------------ */

static double
fragmentation_of(const struct result *r)
{
    return r->peak_live_bytes > 0
               ? (double)r->peak_reserved_bytes / (double)r->peak_live_bytes
               : 0.0;
}

/* V with DECIMALS digits after the point, as `vram replay --json` writes
** it. */
static struct json_object *
json_fixed(double v, int decimals)
{
    char num[64];
    snprintf(num, sizeof num, "%.*f", decimals, v);
    return json_object_new_double_s(v, num);
}

static bool
print_json(const char *name, enum allocator a, const struct result *r,
           uint64_t trace_events)
{
    struct json_object *o = json_object_new_object();
    if (o == NULL)
        return false;
    json_object_object_add(o, "trace", json_object_new_string(name));
    json_object_object_add(o, "allocator", json_object_new_string(allocator_names[a]));
    json_object_object_add(o, "ops", json_object_new_uint64(r->ops));
    json_object_object_add(o, "ns_per_op", json_fixed(r->ns_per_op, 1));
    json_object_object_add(o, "peak_in_use_bytes",
                           json_object_new_uint64(r->peak_live_bytes));
    json_object_object_add(o, "peak_reserved_bytes",
                           json_object_new_uint64(r->peak_reserved_bytes));
    json_object_object_add(o, "fragmentation", json_fixed(fragmentation_of(r), 3));
    json_object_object_add(o, "ooms", json_object_new_uint64(r->ooms));
    json_object_object_add(o, "trace_events", json_object_new_uint64(trace_events));
    json_object_object_add(o, "prefix", json_object_new_boolean(r->ops < trace_events));
    json_object_object_add(o, "warm", json_object_new_boolean(warm_mode));
    printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    fflush(stdout);
    json_object_put(o);
    return true;
}

static void
print_row(const char *name, enum allocator a, const struct result *r,
          uint64_t trace_events)
{
    char ops[64];
    if (r->ops < trace_events)
        snprintf(ops, sizeof ops, "%llu (prefix of %llu)", (unsigned long long)r->ops,
                 (unsigned long long)trace_events);
    else
        snprintf(ops, sizeof ops, "%llu", (unsigned long long)r->ops);
    printf("%-16s %-16s %28s %10.1f %12.2f %14.2f %7.3f %6llu\n", name,
           allocator_names[a], ops, r->ns_per_op,
           (double)r->peak_live_bytes / (double)(1ULL << 20),
           (double)r->peak_reserved_bytes / (double)(1ULL << 20), fragmentation_of(r),
           (unsigned long long)r->ooms);
    fflush(stdout);
}

/* ------------------------------------------------------------------ */
/* The program                                                          */

/* Where parse_args puts what it reads. */
struct peers_args {
    struct settings *set;
    const char **paths; /* the traces, pointing into ARGV */
    int n_paths;
};

/* One option or operand (cliopt_handler). */
static int
peers_arg(void *ctx, const struct cli_opt *o, const char *value)
{
    struct peers_args *a = ctx;
    struct settings *set = a->set;
    if (o == NULL) {
        a->paths[a->n_paths++] = value;
        return CLIOPT_GO_ON;
    }
    uint64_t v = 0;
    switch (o->id) {
    case OPT_ALLOCATOR:
        if (strcmp(value, "all") == 0) {
            set->use[ALLOC_POOL] = set->use[ALLOC_MALLOC] = true;
        } else if (strcmp(value, allocator_names[ALLOC_POOL]) == 0) {
            set->use[ALLOC_POOL] = true;
            set->use[ALLOC_MALLOC] = false;
        } else if (strcmp(value, allocator_names[ALLOC_MALLOC]) == 0) {
            set->use[ALLOC_POOL] = false;
            set->use[ALLOC_MALLOC] = true;
        } else {
            return cliopt_usage_error(
                &peers_cmd,
                "--allocator '%s': expected cudaMallocAsync, cudaMalloc or all", value);
        }
        break;
    case OPT_REPEAT:
        if (!cliopt_count(&peers_cmd, o->name, value, 1, 1000, &v))
            return CLI_EXIT_USAGE;
        set->repeat = (unsigned)v;
        break;
    case OPT_MAX_EVENTS:
        if (!cliopt_count(&peers_cmd, o->name, value, 1, UINT64_MAX, &set->max_events))
            return CLI_EXIT_USAGE;
        break;
    case OPT_DEVICE:
        if (!cliopt_count(&peers_cmd, o->name, value, 0, 1023, &v))
            return CLI_EXIT_USAGE;
        set->device = (int)v;
        break;
    case OPT_WARM:
        warm_mode = true;
        break;
    case OPT_JSON:
        set->json = true;
        break;
    }
    return CLIOPT_GO_ON;
}

/* Parse ARGV into SET and PATHS. Returns -1 to go on, else the exit code. */
static int
parse_args(int argc, char **argv, struct settings *set, const char **paths, int *n_paths)
{
    struct peers_args a = {set, paths, 0};
    int rc = cliopt_parse(&peers_cmd, argc, argv, peers_arg, &a, NULL);
    *n_paths = a.n_paths;
    if (rc != CLIOPT_GO_ON)
        return rc;
    if (*n_paths == 0)
        return cliopt_usage_error(&peers_cmd, "no trace given");
    return -1;
}

/* Select the device, make the stream and raise the pool's threshold. */
static bool
peer_setup(int device, struct peer *pr)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        fail("no CUDA device: %s",
             e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount says 0");
        return false;
    }
    if (device >= count) {
        fail("--device %d: this machine has %d CUDA device%s", device, count,
             count == 1 ? "" : "s");
        return false;
    }
    uint64_t threshold = UINT64_MAX;
    return cuda_ok(cudaSetDevice(device), "cudaSetDevice") &&
           cuda_ok(cudaStreamCreateWithFlags(&pr->stream, cudaStreamNonBlocking),
                   "cudaStreamCreate") &&
           cuda_ok(cudaDeviceGetDefaultMemPool(&pr->pool, device),
                   "cudaDeviceGetDefaultMemPool") &&
           cuda_ok(cudaMemPoolSetAttribute(pr->pool, cudaMemPoolAttrReleaseThreshold,
                                           &threshold),
                   "cudaMemPoolSetAttribute(ReleaseThreshold)");
}

int
main(int argc, char **argv)
{
    struct settings set;
    memset(&set, 0, sizeof set);
    set.use[ALLOC_POOL] = set.use[ALLOC_MALLOC] = true;
    set.repeat = 3;

    const char **paths = calloc(argc > 0 ? (size_t)argc : 1, sizeof *paths);
    if (paths == NULL) {
        fail("out of host memory");
        return 1;
    }
    int n_paths = 0;
    int rc = parse_args(argc, argv, &set, paths, &n_paths);
    if (rc >= 0) {
        free(paths);
        return rc;
    }
    rc = 0;

    /* Load (and so validate) every trace before touching the GPU. */
    struct trace **traces = calloc((size_t)n_paths, sizeof *traces);
    if (traces == NULL) {
        fail("out of host memory");
        free(paths);
        return 1;
    }
    for (int i = 0; i < n_paths && rc == 0; i++) {
        vram_status s = trace_load(paths[i], &traces[i]);
        if (s != VRAM_OK) {
            const char *why = vram_last_error();
            fail("%s", why[0] != '\0' ? why : vram_strerror(s));
            traces[i] = NULL;
            rc = s == VRAM_E_PARSE || s == VRAM_E_IO ? 2 : 1;
        } else if (traces[i]->n_devices > 1) {
            fail("%s: the trace uses %d devices; replay_peers replays one-device traces",
                 paths[i], traces[i]->n_devices);
            rc = 2;
        }
    }

    struct peer pr;
    memset(&pr, 0, sizeof pr);
    if (rc == 0 && !peer_setup(set.device, &pr))
        rc = 1;
    if (rc == 0 && !set.json)
        printf("%-16s %-16s %28s %10s %12s %14s %7s %6s\n", "trace", "allocator", "ops",
               "ns/op", "peak MiB", "reserved MiB", "frag", "OOMs");

    for (int i = 0; i < n_paths && rc == 0; i++) {
        const struct trace *t = traces[i];
        char name[256];
        trace_display_name(paths[i], name, sizeof name);
        uint64_t n = t->n_events;
        if (set.max_events > 0 && set.max_events < n)
            n = set.max_events;
        struct trace_replay sl;
        if (!trace_replay_init(&sl, t)) {
            fail("out of host memory");
            rc = 1;
            break;
        }
        for (int a = 0; a < N_ALLOCATORS && rc == 0; a++) {
            if (!set.use[a])
                continue;
            struct result r;
            pr.which = (enum allocator)a;
            if (!replay_repeated(n, set.repeat, &pr, &sl, &r)) {
                rc = 1;
                break;
            }
            if (set.json && !print_json(name, (enum allocator)a, &r, t->n_events)) {
                fail("out of host memory");
                rc = 1;
                break;
            }
            if (!set.json)
                print_row(name, (enum allocator)a, &r, t->n_events);
        }
        trace_replay_fini(&sl);
    }

    if (pr.stream != NULL)
        (void)cudaStreamDestroy(pr.stream);
    for (int i = 0; i < n_paths; i++)
        trace_free(traces[i]);
    free(traces);
    free(paths);
    return rc;
}
