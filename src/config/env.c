/* SPDX-License-Identifier: MIT */
/*
** env.c -- the one file that reads the environment (see env.h).
**
** VRAM_ENV_LIST is the only list of variables. The loader, `vram env` and
** docs/ENVIRONMENT.md (`vram env --markdown`) are generated from it, so
** the parser, the printout and the documentation cannot disagree.
** Defaults are written as the user would write them and go through the
** same parsers as the user's values.
**
** The parsers of single values are parse.c's (the allocator's) and
** src/quota/quota_parse.c's (the quota's grammar); this file holds the
** table, the loaders and the printing.
**
** The list has three sections, one per reader: the allocator (env_load,
** run by vram_open), the quota enforcer (env_quota_load, run by the
** preload library) and `vram run` (env_run_load). A reader parses only
** its own section, so that a malformed quota never stops vram_open and
** the other way round; `vram env` shows all three.
*/
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/size.h"
#include "base/strbuf.h"
#include "config/env.h"
#include "config/parse.h"
#include "quota/quota.h"

/* ------------------------------------------------------------------ */
/* The table                                                            */
/* ------------------------------------------------------------------ */

/*
** Names of the one indexed row, CUDA_DEVICE_MEMORY_LIMIT_<i>: HAMi's
** per-device sizes for CUDA ordinals 0..15 (HAMi knows 16 devices).
*/
#define ENV_INDEXED_COUNT 16
_Static_assert(ENV_INDEXED_COUNT <= QUOTA_MAX_ENTRIES,
               "every HAMi device limit must fit the quota's entries");
_Static_assert(QUOTA_MAX_ORDINAL == ENV_MAX_DEVICES,
               "VRAM_LIMIT and VRAM_MEMORY_LIMIT accept the same ordinals");

/*
** What the loaders fill: the allocator's public result and the two
** growth switches, which only matter while the strategy is resolved;
** the quota's pieces, which env_quota_load assembles by precedence; and
** `vram run`'s settings.
*/
struct env_state {
    struct vram_env env;
    int allow_growth;       /* VRAM_ALLOW_GROWTH: -1 unset, 0 false, 1 true */
    int tf_force_growth;    /* TF_FORCE_GPU_ALLOW_GROWTH: likewise */
    struct quota_env quota; /* VRAM_LIMIT (all, entries) and VRAM_GROUP (group) */
    uint64_t hami_all;      /* CUDA_DEVICE_MEMORY_LIMIT, bytes; 0 = unset */
    char hami_cache[512];   /* CUDA_DEVICE_MEMORY_SHARED_CACHE; "" = unset */
    uint64_t hami_dev[ENV_INDEXED_COUNT]; /* CUDA_DEVICE_MEMORY_LIMIT_<i>, bytes;
                                              0 = unset */
    struct env_run run;                   /* VRAM_PRELOAD_LIBRARY, LD_PRELOAD */
    char visible[4096];                   /* CUDA_VISIBLE_DEVICES; "" = unset */
    bool trace_sites;                     /* VRAM_TRACE_SITES */
    char trace_holders[512];              /* VRAM_TRACE_HOLDERS; "" = unset */
};

/*
** The kinds of value. Each has a parser, a printer and a C type: the
** field named in a row must have that type (checked at compile time
** below, so that a row cannot make a parser write the wrong field).
*/
enum env_kind {
    KIND_BACKEND,      /* vram_backend_kind: "sim" or "cuda" */
    KIND_DEVICES,      /* int, 1..ENV_MAX_DEVICES */
    KIND_SIZE,         /* uint64_t, bytes, > 0; a number needs a unit */
    KIND_SIZE_BYTES,   /* uint64_t, bytes, > 0; a bare number is bytes (HAMi's) */
    KIND_STRATEGY,     /* vram_strategy, by vram_strategy_parse */
    KIND_TRISTATE,     /* int: -1 unset, 0 false, 1 true */
    KIND_BOOL,         /* bool */
    KIND_FRACTION,     /* double in (0, 1]; 0 = unset */
    KIND_LIMIT,        /* the whole struct vram_env: limit_all or limit[] */
    KIND_MIB,          /* int64_t, MiB, >= 0; -1 = unset */
    KIND_LEVEL,        /* int, 0..4 */
    KIND_PATH,         /* char[512], NUL-terminated; "" = unset */
    KIND_QUOTA,        /* struct quota_env: all, entries and n_entries (VRAM_LIMIT) */
    KIND_GROUP,        /* char[64]: letters, digits, '.', '_', '-'; "" = unset */
    KIND_SIZE_INDEXED, /* uint64_t[ENV_INDEXED_COUNT], bytes, > 0; 0 = unset;
                          a bare number is bytes (HAMi's).
                          The row's name is a prefix: NAME0 .. NAME15 */
    KIND_TEXT          /* char[4096], NUL-terminated, any text; "" = unset */
};

typedef vram_backend_kind KIND_BACKEND_type;
typedef int KIND_DEVICES_type;
typedef uint64_t KIND_SIZE_type;
typedef uint64_t KIND_SIZE_BYTES_type;
typedef vram_strategy KIND_STRATEGY_type;
typedef int KIND_TRISTATE_type;
typedef bool KIND_BOOL_type;
typedef double KIND_FRACTION_type;
typedef struct vram_env KIND_LIMIT_type;
typedef int64_t KIND_MIB_type;
typedef int KIND_LEVEL_type;
typedef char KIND_PATH_type[512];
typedef struct quota_env KIND_QUOTA_type;
typedef char KIND_GROUP_type[QUOTA_GROUP_LEN];
typedef uint64_t KIND_SIZE_INDEXED_type[ENV_INDEXED_COUNT];
typedef char KIND_TEXT_type[4096];

/* VRAM_LIMIT's accepted values, for its messages and its doc. */
#define ENV_QUOTA_EXPECT QUOTA_EXPECT

#define ENV_BOOL_WORDS "true or false; also 1/0, yes/no, on/off"

/* HAMi's sizes: a bare number is bytes there, as HAMi reads it. */
#define ENV_HAMI_SIZE                                                                    \
    "a size above 0, e.g. 6144m (a number without a unit is bytes, as in HAMi)"

/*
** X(NAME, kind, field of struct env_state, default ("" = unset),
**   accepted values (for messages and docs), one-line doc).
** The order is the order of `vram env` and of the docs. The sections:
** the allocator's (vram_open), the quota enforcer's (the preload library)
** and `vram run`'s; VRAM_ENV_LIST is all three, in that order.
*/
#define VRAM_ENV_LIST(X) VRAM_ENV_ALLOCATOR(X) VRAM_ENV_QUOTA(X) VRAM_ENV_RUN(X)

#define VRAM_ENV_ALLOCATOR(X)                                                            \
    X(VRAM_BACKEND, KIND_BACKEND, env.backend, "cuda", "sim or cuda",                    \
      "Device backend: the CUDA driver, loaded at run time, or the simulated device.")   \
    X(VRAM_SIM_DEVICES, KIND_DEVICES, env.sim_devices, "1", "an integer from 1 to 64",   \
      "Physical devices of the simulated backend.")                                      \
    X(VRAM_SIM_MEMORY, KIND_SIZE, env.sim_memory, "143771M",                             \
      "a size above 0, e.g. 80G or 143771M",                                             \
      "Memory of each simulated device; the default is an NVIDIA H200's.")               \
    X(VRAM_STRATEGY, KIND_STRATEGY, env.strategy, "expandable",                          \
      "preallocate, growth, growth:tf-compat or expandable",                             \
      "How each logical device obtains memory: expandable (one virtual range backed "    \
      "granule by granule where live blocks are: what PyTorch's expandable_segments "    \
      "does), its whole cap at the first allocation (preallocate, TensorFlow's "         \
      "default), growth as needed (vram's policy), or TensorFlow's allow_growth (2 MiB " \
      "regions, each twice the last). Unset: expandable, unless VRAM_ALLOW_GROWTH or "   \
      "TF_FORCE_GPU_ALLOW_GROWTH is set (see \"Defaults\" above).")                     \
    X(VRAM_ALLOW_GROWTH, KIND_TRISTATE, allow_growth, "", ENV_BOOL_WORDS,                \
      "true selects the growth strategy unless VRAM_STRATEGY names a growth strategy; "  \
      "false selects preallocate, as in TensorFlow. Must agree with VRAM_STRATEGY and "  \
      "TF_FORCE_GPU_ALLOW_GROWTH.")                                                      \
    X(TF_FORCE_GPU_ALLOW_GROWTH, KIND_TRISTATE, tf_force_growth, "", ENV_BOOL_WORDS,     \
      "TensorFlow's own switch, honoured exactly like VRAM_ALLOW_GROWTH: a TensorFlow "  \
      "user who sets it gets TensorFlow's strategies.")                                  \
    X(VRAM_MEMORY_FRACTION, KIND_FRACTION, env.fraction, "",                             \
      "a fraction in (0, 1], e.g. 0.5 or 50%",                                           \
      "Cap of each logical device without a limit, as a share of the device's total "    \
      "memory (TensorFlow's per_process_gpu_memory_fraction).")                          \
    X(VRAM_MEMORY_LIMIT, KIND_LIMIT, env, "", "e.g. 6G, 512M, 0:6G,1:4G",                \
      "Caps of logical devices (TensorFlow's memory_limit): 6G caps every device, "      \
      "3G+3G splits every device into two logical devices of 3 GiB, 0:6G,1:4G "          \
      "sets physical devices by ordinal, 0:3G+3G,1:6G does both. Each cap above 0, "     \
      "at most 16 per device.")                                                          \
    X(TF_DEVICE_MIN_SYS_MEMORY_IN_MB, KIND_MIB, env.reserve_mb, "",                      \
      "a whole number of MiB, 0 or more",                                                \
      "Memory left free on each device when neither fraction nor limit is given; "       \
      "unset: TensorFlow's reserve (225 MiB when less than 2 GiB is free, else "         \
      "500/1050/1536 MiB by compute capability).")                                       \
    X(VRAM_LOG, KIND_LEVEL, env.log_level, "0", "an integer from 0 to 4",                \
      "Logging: 1 configuration, OOMs and backend errors; 2 also region events; "        \
      "3 also allocations of 1 MiB or more; 4 every allocation and free.")               \
    X(VRAM_LOG_FILE, KIND_PATH, env.log_file, "", "a file path",                         \
      "File that log lines are appended to; unset: standard error.")                     \
    X(VRAM_TRACE, KIND_PATH, env.trace_path, "", "a file path",                          \
      "Record every allocation and free to this trace file (input of vram replay), "     \
      "with refused allocations and vram_mark's phase marks. The preload library "       \
      "(vram run with a limit) records the allocations it counts there too.")            \
    X(VRAM_TRACE_SITES, KIND_BOOL, trace_sites, "false", ENV_BOOL_WORDS,                 \
      "With VRAM_TRACE, the preload library writes each allocation's call site: the "    \
      "innermost Python frames (file, line, function) of a Python thread that holds "    \
      "the GIL, and native return addresses as module + offset (vram record sets it)."   \
      " libvram's own traces have none.")                                                \
    X(VRAM_TRACE_HOLDERS, KIND_PATH, trace_holders, "", "a file path",                   \
      "With VRAM_TRACE_SITES, the file vram/holders.py of vram's Python package: in a "  \
      "Python program the preload library loads it at the first allocation, and the "   \
      "trace then names what holds each live allocation (the variable or container "    \
      "that refers to its tensor) at exit, when a top-level function of the main "      \
      "module returns and at vram.mark (vram record sets it; docs/RECORD.md).")          \
    X(VRAM_OOM_DUMP, KIND_BOOL, env.oom_dump, "false", ENV_BOOL_WORDS,                   \
      "On out of memory, also write the full allocator dump (bins, regions, block "      \
      "map) to the log.")

#define VRAM_ENV_QUOTA(X)                                                                \
    X(VRAM_LIMIT, KIND_QUOTA, quota, "", ENV_QUOTA_EXPECT,                               \
      "GPU memory quota of each process, or of the group (VRAM_GROUP): a size, a "       \
      "share of each device's total memory (50% or 0.5), or per device by CUDA "         \
      "ordinal (0..63, after CUDA_VISIBLE_DEVICES) or GPU UUID (at least 8 hex digits "  \
      "after GPU-): 0:6G,1:4G. Devices not listed are not limited. Sizes above 0, at "   \
      "most 16 devices. An entry that names no visible device is said once per "         \
      "process; vram run refuses it.")                                                   \
    X(VRAM_GROUP, KIND_GROUP, quota.group, "", "1 to 63 letters, digits, '.', '_', '-'", \
      "Processes with the same group share one quota (vram run gives each run its "      \
      "own); unset: each process alone.")                                                \
    X(CUDA_DEVICE_MEMORY_LIMIT, KIND_SIZE_BYTES, hami_all, "", ENV_HAMI_SIZE,            \
      "HAMi's limit of every device; read only when VRAM_LIMIT and VRAM_GROUP are "      \
      "both unset (a VRAM_GROUP alone turns HAMi's variables off, which the preload "    \
      "library says once per process).")                                                 \
    X(CUDA_DEVICE_MEMORY_LIMIT_, KIND_SIZE_INDEXED, hami_dev, "", ENV_HAMI_SIZE,         \
      "HAMi's limit of CUDA device i (0..15), ahead of CUDA_DEVICE_MEMORY_LIMIT; read "  \
      "only when VRAM_LIMIT and VRAM_GROUP are both unset.")                            \
    X(CUDA_DEVICE_MEMORY_SHARED_CACHE, KIND_PATH, hami_cache, "", "a file path",       \
      "HAMi's per-container accounting file: where it is set (and VRAM_LIMIT and "       \
      "VRAM_GROUP are not), the processes that share it share one quota, as in HAMi "   \
      "(group hami-<hash of the path>).")                                                \
    X(VRAM_CONTEXT, KIND_TRISTATE, quota.context, "", ENV_BOOL_WORDS,                       \
      "Charge each process's CUDA context, modules and the driver's own "                \
      "reservations (NVML's per-process used memory beyond what its calls counted) "     \
      "to its quotas; unset: on. Off turns it off for the job's quota only: the "        \
      "host's policy decides for the user's (on unless it says context off), and "       \
      "on turns it on there too.")                                                       \
    X(VRAM_LIMIT_SOURCE, KIND_GROUP, quota.origin, "", "vram-run, slurm or hami",       \
      "Who set VRAM_LIMIT, named in the refusal line (vram run and the Slurm plug-in "   \
      "set it); a label only, never a limit.")                                           \
    X(CUDA_VISIBLE_DEVICES, KIND_TEXT, visible, "", "the CUDA driver's list of GPUs",    \
      "Read by the preload library only to map the process's CUDA ordinals to the "     \
      "host's, for the ordinal keys of the host's policy file.")

#define VRAM_ENV_RUN(X)                                                                  \
    X(VRAM_PRELOAD_LIBRARY, KIND_PATH, run.preload_library, "", "a file path",           \
      "The preload library vram run injects; unset: the installed libvram-preload.so.0 " \
      "beside the vram binary (/usr/bin/vram: /usr/lib/<multiarch>/), else "             \
      "../lib/libvram-preload.so.0 from its directory (the build tree).")                \
    X(LD_PRELOAD, KIND_TEXT, run.ld_preload, "", "the dynamic loader's list",            \
      "vram run puts the preload library first and keeps the entries already here.")   \
    X(VRAM_PYTHON, KIND_PATH, run.python, "", "a python3 interpreter",                  \
      "The interpreter vram plan --model runs its tracer with; unset: the first of "    \
      "python3 and /usr/bin/python3 that can import torch.")                            \
    X(VRAM_PYTHONPATH, KIND_PATH, run.python_dir, "", "a directory",                     \
      "Where vram plan --model finds the vram Python package; unset: the installed "    \
      "one (share/vram/python beside the vram binary), else the checkout's python/.")   \
    X(PYTHONPATH, KIND_TEXT, run.pythonpath, "", "Python's module path",                \
      "vram plan --model puts the vram package first and keeps the entries already "    \
      "here.")                                                                           \
    X(PYTORCH_CUDA_ALLOC_CONF, KIND_TEXT, run.torch_alloc_conf, "",                      \
      "PyTorch's allocator options",                                                     \
      "vram record and vram tune add backend:cudaMallocAsync (PyTorch 2.0 or later) "    \
      "unless a backend is named here, so that each tensor reaches the driver.")         \
    X(TF_GPU_ALLOCATOR, KIND_TEXT, run.tf_gpu_allocator, "", "TensorFlow's allocator",   \
      "vram record and vram tune set cuda_malloc_async when unset, so that each tensor " \
      "reaches the driver.")                                                             \
    X(XLA_PYTHON_CLIENT_ALLOCATOR, KIND_TEXT, run.xla_allocator, "", "JAX's allocator",  \
      "vram record and vram tune set cuda_async when unset, so that each buffer "       \
      "reaches the driver at its own size.")                                             \
    X(XLA_PYTHON_CLIENT_PREALLOCATE, KIND_TEXT, run.xla_preallocate, "",                 \
      "whether JAX reserves its pool at start",                                          \
      "vram record and vram tune set false when unset: JAX's cuda_async pool otherwise " \
      "takes 75% of the device in one allocation at start, which the trace would count " \
      "as in use.")

/* Every row's field has its kind's type. */
#define ENV_CHECK_TYPE(name, kind, field, def, expect, doc)                              \
    _Static_assert(                                                                      \
        _Generic(&((struct env_state *)0)->field, kind##_type * : 1, default : 0),       \
        #name ": field type does not match kind " #kind);
VRAM_ENV_LIST(ENV_CHECK_TYPE)
#undef ENV_CHECK_TYPE

/* ENV_VRAM_BACKEND, ...: a variable's row in env_vars. ENV_QUOTA_FIRST and
** ENV_RUN_FIRST are the first rows of those sections. */
#define ENV_ID(name, ...) ENV_##name,
enum env_id {
    VRAM_ENV_ALLOCATOR(ENV_ID) ENV_QUOTA_FIRST,
    ENV_QUOTA_BEFORE_ = ENV_QUOTA_FIRST - 1,
    VRAM_ENV_QUOTA(ENV_ID) ENV_RUN_FIRST,
    ENV_RUN_BEFORE_ = ENV_RUN_FIRST - 1,
    VRAM_ENV_RUN(ENV_ID) ENV_COUNT
};
#undef ENV_ID

/* Indexed rows keep one set of texts in struct env_load: one such row. */
#define ENV_COUNT_INDEXED(name, kind, ...) +((kind) == KIND_SIZE_INDEXED)
_Static_assert(0 VRAM_ENV_LIST(ENV_COUNT_INDEXED) == 1, "exactly one indexed row");
#undef ENV_COUNT_INDEXED

struct env_var {
    const char *name;
    enum env_kind kind;
    size_t offset;      /* of the field in struct env_state */
    const char *def;    /* default, as a user would write it; "" = unset */
    const char *expect; /* the accepted values, in words */
    const char *doc;
};

static const struct env_var env_vars[ENV_COUNT] = {
#define ENV_ROW(name, kind, field, def, expect, doc)                                     \
    {#name, kind, offsetof(struct env_state, field), def, expect, doc},
    VRAM_ENV_LIST(ENV_ROW)
#undef ENV_ROW
};

/*
** Whose default each row's default is, for `vram env` and the docs: the
** convention the value follows when the user sets nothing. Rows not
** listed follow vram's own. The caps' rows are TensorFlow's rule (free
** memory minus its reserve); the frameworks' rows keep each framework's
** own default until vram record or vram tune steers them.
*/
static const struct {
    enum env_id id;
    const char *origin;
} default_origins[] = {
    {ENV_TF_FORCE_GPU_ALLOW_GROWTH, "TensorFlow"},
    {ENV_VRAM_MEMORY_FRACTION, "TensorFlow"},
    {ENV_VRAM_MEMORY_LIMIT, "TensorFlow"},
    {ENV_TF_DEVICE_MIN_SYS_MEMORY_IN_MB, "TensorFlow"},
    {ENV_CUDA_DEVICE_MEMORY_LIMIT, "HAMi"},
    {ENV_CUDA_DEVICE_MEMORY_LIMIT_, "HAMi"},
    {ENV_CUDA_DEVICE_MEMORY_SHARED_CACHE, "HAMi"},
    {ENV_CUDA_VISIBLE_DEVICES, "CUDA"},
    {ENV_LD_PRELOAD, "the system"},
    {ENV_PYTHONPATH, "the system"},
    {ENV_PYTORCH_CUDA_ALLOC_CONF, "PyTorch"},
    {ENV_TF_GPU_ALLOCATOR, "TensorFlow"},
    {ENV_XLA_PYTHON_CLIENT_ALLOCATOR, "JAX"},
    {ENV_XLA_PYTHON_CLIENT_PREALLOCATE, "JAX"},
};

/* Whose default row ID's default is ("vram" unless listed above). */
static const char *
default_origin(enum env_id id)
{
    for (size_t k = 0; k < sizeof default_origins / sizeof default_origins[0]; k++)
        if (default_origins[k].id == id)
            return default_origins[k].origin;
    return "vram";
}

/* One load in progress: the state being filled and the raw values. */
struct env_load {
    struct env_state s;
    env_getter get;
    void *user;
    const char *text[ENV_COUNT];          /* raw value; NULL if unset or ""; for the
                                             indexed row, its first set index's value */
    const char *itext[ENV_INDEXED_COUNT]; /* the indexed row's values, by index */
    bool empty[ENV_COUNT];                /* set but "" (the indexed row: any index) */
    char empty_buf[64];                   /* the indexed row's first empty name */
};

/* ------------------------------------------------------------------ */
/* One value                                                            */
/* ------------------------------------------------------------------ */

/* The name of variable ID, of index INDEX for the indexed row. */
static const char *
var_name(enum env_id id, int index, char *buf, size_t len)
{
    if (env_vars[id].kind != KIND_SIZE_INDEXED)
        return env_vars[id].name;
    if (index < 0)
        snprintf(buf, len, "%s<i>", env_vars[id].name);
    else
        snprintf(buf, len, "%s%d", env_vars[id].name, index);
    return buf;
}

/*
** Parse TEXT as the value of variable ID (INDEX: of the indexed row, else
** -1) into L->s. On failure: VRAM_E_CONFIG with the last error
**   NAME='value': reason (expected ...)
*/
static vram_status
parse_value(struct env_load *L, enum env_id id, int index, const char *text)
{
    const struct env_var *v = &env_vars[id];
    void *dst = (char *)&L->s + v->offset;
    char why[384] = "";
    bool ok = false;
    int64_t i;
    uint64_t u;
    double f;

    switch (v->kind) {
    case KIND_BACKEND:
        ok = env_parse_backend(text, dst, why, sizeof why);
        break;
    case KIND_DEVICES:
    case KIND_LEVEL:
        ok =
            env_parse_int(text, v->kind == KIND_DEVICES ? 1 : 0,
                      v->kind == KIND_DEVICES ? ENV_MAX_DEVICES : 4, &i, why, sizeof why);
        if (ok)
            *(int *)dst = (int)i;
        break;
    case KIND_SIZE:
    case KIND_SIZE_BYTES:
    case KIND_SIZE_INDEXED:
        if (size_parse_as(text,
                          v->kind == KIND_SIZE ? SIZE_BARE_REFUSED : SIZE_BARE_BYTES,
                          &u) != VRAM_OK)
            error_take(why, sizeof why);
        else if (u == 0)
            snprintf(why, sizeof why, "must be more than 0");
        else {
            if (v->kind != KIND_SIZE_INDEXED)
                *(uint64_t *)dst = u;
            else
                ((uint64_t *)dst)[index] = u;
            ok = true;
        }
        break;
    case KIND_STRATEGY: {
        vram_strategy s;
        ok = vram_strategy_parse(text, &s) == VRAM_OK;
        if (ok)
            *(vram_strategy *)dst = s;
        else
            snprintf(why, sizeof why, "unknown strategy");
        break;
    }
    case KIND_TRISTATE:
    case KIND_BOOL: {
        int b = env_bool_word(text);
        ok = b >= 0;
        if (!ok)
            snprintf(why, sizeof why, "not a boolean");
        else if (v->kind == KIND_BOOL)
            *(bool *)dst = b == 1;
        else
            *(int *)dst = b;
        break;
    }
    case KIND_FRACTION:
        ok = fraction_parse(text, &f) == VRAM_OK;
        if (ok)
            *(double *)dst = f;
        else
            error_take(why, sizeof why);
        break;
    case KIND_LIMIT:
        ok = env_parse_limit(text, dst, why, sizeof why);
        break;
    case KIND_MIB:
        /* Bounded so that the reserve in bytes still fits an int64_t. */
        ok = env_parse_int(text, 0, INT64_MAX >> 20, &i, why, sizeof why);
        if (ok)
            *(int64_t *)dst = i;
        break;
    case KIND_PATH:
    case KIND_TEXT: {
        size_t n = strlen(text);
        size_t cap =
            v->kind == KIND_PATH ? sizeof(KIND_PATH_type) : sizeof(KIND_TEXT_type);
        ok = n < cap;
        if (ok)
            memcpy(dst, text, n + 1);
        else
            snprintf(why, sizeof why, "%s longer than %zu bytes",
                     v->kind == KIND_PATH ? "path" : "value", cap - 1);
        break;
    }
    case KIND_QUOTA:
        ok = quota_parse(text, dst, why, sizeof why);
        break;
    case KIND_GROUP:
        ok = text[0] != '\0' &&
             quota_parse_group(text, dst, sizeof(KIND_GROUP_type), why, sizeof why);
        break;
    }
    if (ok)
        return VRAM_OK;
    char shown[TEXT_EXCERPT_LEN], name[64];
    return error_set(VRAM_E_CONFIG, "%s='%s': %s (expected %s)",
                     var_name(id, index, name, sizeof name),
                     text_excerpt(text, shown, sizeof shown), why, v->expect);
}

/* ------------------------------------------------------------------ */
/* Loading                                                              */
/* ------------------------------------------------------------------ */

static const char *
getenv_getter(const char *name, void *user)
{
    (void)user;
    return getenv(name);
}

/* Start L: every field unset, nothing read yet. */
static void
load_begin(struct env_load *L, env_getter get, void *user)
{
    memset(L, 0, sizeof *L);
    L->s.env.reserve_mb = -1;
    L->s.allow_growth = -1;
    L->s.tf_force_growth = -1;
    L->s.quota.context = -1;
    L->get = get != NULL ? get : getenv_getter;
    L->user = user;
}

/* A raw value: NULL if unset or empty (which row ID records). */
static const char *
load_get(struct env_load *L, int id, const char *name)
{
    const char *t = L->get(name, L->user);
    if (t != NULL && t[0] == '\0' && !L->empty[id]) {
        L->empty[id] = true;
        if (env_vars[id].kind == KIND_SIZE_INDEXED)
            snprintf(L->empty_buf, sizeof L->empty_buf, "%s", name);
    }
    return (t != NULL && t[0] != '\0') ? t : NULL;
}

/* Read the raw values of rows FIRST..END-1 (each name once). */
static void
load_read(struct env_load *L, int first, int end)
{
    for (int id = first; id < end; id++) {
        if (env_vars[id].kind != KIND_SIZE_INDEXED) {
            L->text[id] = load_get(L, id, env_vars[id].name);
            continue;
        }
        L->text[id] = NULL;
        for (int i = 0; i < ENV_INDEXED_COUNT; i++) {
            char name[64];
            L->itext[i] = load_get(L, id, var_name((enum env_id)id, i, name, sizeof name));
            if (L->text[id] == NULL)
                L->text[id] = L->itext[i];
        }
    }
}

/* Variable ID's value from the environment, else its default (for the
** indexed row: each index that is set, in order). */
static vram_status
load_var(struct env_load *L, enum env_id id)
{
    if (env_vars[id].kind == KIND_SIZE_INDEXED) {
        for (int i = 0; i < ENV_INDEXED_COUNT; i++) {
            vram_status st =
                L->itext[i] != NULL ? parse_value(L, id, i, L->itext[i]) : VRAM_OK;
            if (st != VRAM_OK)
                return st;
        }
        return VRAM_OK;
    }
    if (L->text[id] != NULL)
        return parse_value(L, id, -1, L->text[id]);
    if (env_vars[id].def[0] != '\0')
        return parse_value(L, id, -1, env_vars[id].def);
    return VRAM_OK;
}

/* Read and parse rows FIRST..END-1; the first malformed one's status. */
static vram_status
load_rows(struct env_load *L, int first, int end)
{
    load_read(L, first, end);
    for (int id = first; id < end; id++) {
        vram_status st = load_var(L, (enum env_id)id);
        if (st != VRAM_OK)
            return st;
    }
    return VRAM_OK;
}

/* Parse the N rows IDS, already read; the first malformed one's status. */
static vram_status
load_vars(struct env_load *L, const enum env_id *ids, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        vram_status st = load_var(L, ids[k]);
        if (st != VRAM_OK)
            return st;
    }
    return VRAM_OK;
}

/* Copy TEXT, a loaded string, into OUT (LEN bytes); too long for it is
** "WHAT longer than N bytes". */
/* The start of each env_*_load: rows [FIRST, END) loaded into *L, begun
** with GET. VRAM_E_INVALID when ARGS_OK is false (an output of the
** caller, FN, is NULL). */
static vram_status
load_section(struct env_load *L, env_getter get, void *user, bool args_ok, const char *fn,
             int first, int end)
{
    if (!args_ok)
        return error_set(VRAM_E_INVALID, "%s: an output is NULL", fn);
    load_begin(L, get, user);
    return load_rows(L, first, end);
}

static vram_status
copy_loaded(const char *text, char *out, size_t len, const char *what)
{
    size_t n = strlen(text);
    if (n >= len)
        return error_set(VRAM_E_CONFIG, "%s longer than %zu bytes", what, len - 1);
    memcpy(out, text, n + 1);
    return VRAM_OK;
}

/* Write "NAME='value'" for each growth switch that is set into BUF,
** joined by " and ", so that a conflict message names them all. */
static void
growth_names(const struct env_load *L, char *buf, size_t len)
{
    static const enum env_id ids[] = {ENV_VRAM_ALLOW_GROWTH,
                                      ENV_TF_FORCE_GPU_ALLOW_GROWTH};
    size_t used = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        if (L->text[ids[k]] == NULL || used >= len)
            continue;
        char shown[TEXT_EXCERPT_LEN];
        int w = snprintf(buf + used, len - used, "%s%s='%s'", used > 0 ? " and " : "",
                         env_vars[ids[k]].name,
                         text_excerpt(L->text[ids[k]], shown, sizeof shown));
        if (w > 0)
            used += (size_t)w;
    }
}

/*
** Settle the strategy from VRAM_STRATEGY and the two growth switches
** (which TensorFlow users already set), refusing any contradiction
** rather than guessing which one the user meant.
*/
static vram_status
resolve_strategy(struct env_load *L)
{
    struct env_state *s = &L->s;
    bool given = L->text[ENV_VRAM_STRATEGY] != NULL;
    char shown_a[TEXT_EXCERPT_LEN], shown_b[TEXT_EXCERPT_LEN], names[256];

    if (s->allow_growth >= 0 && s->tf_force_growth >= 0 &&
        s->allow_growth != s->tf_force_growth)
        return error_set(
            VRAM_E_CONFIG,
            "VRAM_ALLOW_GROWTH='%s' and TF_FORCE_GPU_ALLOW_GROWTH='%s' "
            "disagree (unset one of them)",
            text_excerpt(L->text[ENV_VRAM_ALLOW_GROWTH], shown_a, sizeof shown_a),
            text_excerpt(L->text[ENV_TF_FORCE_GPU_ALLOW_GROWTH], shown_b,
                         sizeof shown_b));

    int growth = s->allow_growth >= 0 ? s->allow_growth : s->tf_force_growth;
    s->env.strategy_set = given || growth >= 0;
    s->env.strategy_source = given                 ? "VRAM_STRATEGY"
                             : s->allow_growth >= 0 ? "VRAM_ALLOW_GROWTH"
                             : growth >= 0          ? "TF_FORCE_GPU_ALLOW_GROWTH"
                                                    : NULL;
    if (growth < 0)
        return VRAM_OK;

    bool named_growth = s->env.strategy != VRAM_STRATEGY_PREALLOCATE;
    if (given && named_growth != (growth == 1)) {
        growth_names(L, names, sizeof names);
        return error_set(
            VRAM_E_CONFIG, "VRAM_STRATEGY='%s' conflicts with %s (%s)",
            text_excerpt(L->text[ENV_VRAM_STRATEGY], shown_a, sizeof shown_a), names,
            growth == 1 ? "for growth set VRAM_STRATEGY=growth, or unset one"
                        : "unset one of them");
    }
    if (!given)
        s->env.strategy = growth == 1 ? VRAM_STRATEGY_GROWTH : VRAM_STRATEGY_PREALLOCATE;
    return VRAM_OK;
}

vram_status
env_load(env_getter get, void *user, struct vram_env *out)
{
    /* About 10 KiB: on the heap would need a failure path of its own. */
    struct env_load L;
    vram_status st =
        load_section(&L, get, user, out != NULL, "env_load", 0, ENV_QUOTA_FIRST);
    if (st == VRAM_OK)
        st = resolve_strategy(&L);
    if (st == VRAM_OK)
        *out = L.s.env;
    return st;
}

static const char *
no_variable(const char *name, void *user)
{
    (void)name;
    (void)user;
    return NULL;
}

vram_status
env_defaults(struct vram_env *out)
{
    return env_load(no_variable, NULL, out);
}

/* Whether HAMi's variables count: only when neither of vram's own quota
** variables is set (L has read them). */
static bool
hami_applies(const struct env_load *L)
{
    return L->text[ENV_VRAM_LIMIT] == NULL && L->text[ENV_VRAM_GROUP] == NULL;
}

/*
** The quota as the preload library applies it, from L's parsed rows:
** VRAM_LIMIT if set; else, when VRAM_GROUP is unset too, HAMi's
** variables (a device's own entry ahead of the all-devices one).
*/
static void
quota_assemble(const struct env_load *L, struct quota_env *q)
{
    memset(q, 0, sizeof *q);
    memcpy(q->group, L->s.quota.group, sizeof q->group);
    q->context = L->s.quota.context;
    if (L->text[ENV_VRAM_LIMIT] != NULL) {
        q->active = true;
        q->source = "VRAM_LIMIT";
        memcpy(q->origin, L->s.quota.origin, sizeof q->origin);
        q->all = L->s.quota.all;
        q->n_entries = L->s.quota.n_entries;
        memcpy(q->entries, L->s.quota.entries, sizeof q->entries);
        return;
    }
    if (!hami_applies(L))
        return;
    if (L->s.hami_all > 0) {
        q->all.kind = QUOTA_BYTES;
        q->all.bytes = L->s.hami_all;
    }
    for (int i = 0; i < ENV_INDEXED_COUNT; i++) {
        if (L->s.hami_dev[i] == 0)
            continue;
        struct quota_entry *e = &q->entries[q->n_entries++];
        e->by_uuid = false;
        e->ordinal = i;
        e->value.kind = QUOTA_BYTES;
        e->value.bytes = L->s.hami_dev[i];
    }
    q->active = q->all.kind != QUOTA_NONE || q->n_entries > 0;
    q->source = q->active ? "CUDA_DEVICE_MEMORY_LIMIT" : NULL;
    /* HAMi's shared cache names one container's accounting: its
    ** processes share a quota. The path itself cannot be a group name
    ** (it names a file in /dev/shm), so a hash of it is (FNV-1a, 64 bit:
    ** two containers of one host colliding is as likely as 1 in 2^64). */
    if (q->active && L->s.hami_cache[0] != '\0') {
        uint64_t h = UINT64_C(14695981039346656037);
        for (const char *c = L->s.hami_cache; *c != '\0'; c++)
            h = (h ^ (unsigned char)*c) * UINT64_C(1099511628211);
        snprintf(q->group, sizeof q->group, "hami-%016" PRIx64, h);
    }
}

/*
** A quota variable that is set but empty (as from an unset shell
** variable, `--limit "$LIMIT"`) is an error, never "no limit": NAME of
** the getter's environment.
*/
static vram_status
check_not_empty(const struct env_load *L, enum env_id id)
{
    if (L->empty[id])
        return error_set(VRAM_E_CONFIG,
                         "%s is set but empty (an unset shell variable?): give a limit, "
                         "e.g. 6G, or unset it",
                         env_vars[id].kind == KIND_SIZE_INDEXED ? L->empty_buf
                                                                : env_vars[id].name);
    return VRAM_OK;
}

/*
** HAMi's per-device names that limit nothing: an index past 15 or written
** with a leading zero (CUDA_DEVICE_MEMORY_LIMIT_16, _00). Only the process
** environment can be listed, so only with the default getter.
*/
static vram_status
check_hami_names(const struct env_load *L)
{
    extern char **environ;
    static const char prefix[] = "CUDA_DEVICE_MEMORY_LIMIT_";
    if (L->get != getenv_getter || environ == NULL)
        return VRAM_OK;
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, prefix, sizeof prefix - 1) != 0)
            continue;
        const char *p = *e + sizeof prefix - 1, *eq = strchr(p, '=');
        size_t n = eq != NULL ? (size_t)(eq - p) : strlen(p);
        bool digits = n > 0 && strspn(p, "0123456789") == n;
        bool ok = digits && (n == 1 || (n == 2 && p[0] == '1' && p[1] <= '5'));
        if (!ok)
            return error_set(VRAM_E_CONFIG,
                             "%s%.*s: HAMi's per-device limits are %s0 to %s15 (no leading "
                             "zero); this one would limit nothing",
                             prefix, (int)(n > 32 ? 32 : n), p, prefix, prefix);
    }
    return VRAM_OK;
}

bool
env_hami_ignored(env_getter get, void *user, char *buf, size_t len)
{
    if (len == 0)
        return false;
    buf[0] = '\0';
    struct env_load L;
    load_begin(&L, get, user);
    load_read(&L, ENV_VRAM_LIMIT, ENV_VRAM_LIMIT + 1);
    load_read(&L, ENV_VRAM_GROUP, ENV_VRAM_GROUP + 1);
    if (L.text[ENV_VRAM_GROUP] == NULL || L.text[ENV_VRAM_LIMIT] != NULL)
        return false;
    static const enum env_id hami[] = {ENV_CUDA_DEVICE_MEMORY_LIMIT,
                                       ENV_CUDA_DEVICE_MEMORY_LIMIT_,
                                       ENV_CUDA_DEVICE_MEMORY_SHARED_CACHE};
    for (size_t k = 0; k < sizeof hami / sizeof hami[0]; k++) {
        load_read(&L, hami[k], hami[k] + 1);
        bool indexed = env_vars[hami[k]].kind == KIND_SIZE_INDEXED;
        for (int i = 0; i < (indexed ? ENV_INDEXED_COUNT : 1); i++) {
            if ((indexed ? L.itext[i] : L.text[hami[k]]) == NULL)
                continue;
            char name[64];
            strbuf_append(buf, len, "%s%s", buf[0] != '\0' ? ", " : "",
                          var_name(hami[k], indexed ? i : -1, name, sizeof name));
        }
    }
    return buf[0] != '\0';
}

const char *
env_secure_get(const char *name, void *user)
{
    (void)user;
    return name != NULL && strcmp(name, env_vars[ENV_CUDA_VISIBLE_DEVICES].name) == 0
               ? getenv(name)
               : NULL;
}

bool
env_preload_set(char *buf, size_t len)
{
    if (len == 0)
        return false;
    buf[0] = '\0';
    struct env_load L;
    load_begin(&L, NULL, NULL);
    for (int id = ENV_QUOTA_FIRST; id < ENV_RUN_FIRST; id++) {
        if (id == ENV_CUDA_VISIBLE_DEVICES)
            continue;
        load_read(&L, id, id + 1);
        bool indexed = env_vars[id].kind == KIND_SIZE_INDEXED;
        for (int i = 0; i < (indexed ? ENV_INDEXED_COUNT : 1); i++) {
            if ((indexed ? L.itext[i] : L.text[id]) == NULL)
                continue;
            char name[64];
            strbuf_append(buf, len, "%s%s", buf[0] != '\0' ? ", " : "",
                          var_name((enum env_id)id, indexed ? i : -1, name, sizeof name));
        }
    }
    load_read(&L, ENV_VRAM_TRACE, ENV_VRAM_TRACE_SITES + 1);
    for (int id = ENV_VRAM_TRACE; id <= ENV_VRAM_TRACE_SITES; id++)
        if (L.text[id] != NULL)
            strbuf_append(buf, len, "%s%s", buf[0] != '\0' ? ", " : "", env_vars[id].name);
    return buf[0] != '\0';
}

vram_status
env_quota_load(env_getter get, void *user, struct quota_env *out)
{
    if (out == NULL)
        return error_set(VRAM_E_INVALID, "env_quota_load: an output is NULL");
    struct env_load L;
    load_begin(&L, get, user);
    static const enum env_id own[] = {ENV_VRAM_LIMIT, ENV_VRAM_GROUP};
    static const enum env_id hami[] = {ENV_CUDA_DEVICE_MEMORY_LIMIT,
                                       ENV_CUDA_DEVICE_MEMORY_LIMIT_,
                                       ENV_CUDA_DEVICE_MEMORY_SHARED_CACHE};
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
        load_read(&L, own[k], own[k] + 1);
    vram_status empty = check_not_empty(&L, ENV_VRAM_LIMIT);
    if (empty != VRAM_OK)
        return empty;
    /* HAMi's variables are not even read when vram's own are set: a
    ** malformed one cannot stop a job that does not use it. */
    bool with_hami = hami_applies(&L);
    for (size_t k = 0; with_hami && k < sizeof hami / sizeof hami[0]; k++)
        load_read(&L, hami[k], hami[k] + 1);
    if (with_hami) {
        empty = check_not_empty(&L, ENV_CUDA_DEVICE_MEMORY_LIMIT);
        if (empty == VRAM_OK)
            empty = check_not_empty(&L, ENV_CUDA_DEVICE_MEMORY_LIMIT_);
        if (empty == VRAM_OK)
            empty = check_hami_names(&L);
        if (empty != VRAM_OK)
            return empty;
    }
    vram_status st = load_vars(&L, own, sizeof own / sizeof own[0]);
    if (st == VRAM_OK && with_hami)
        st = load_vars(&L, hami, sizeof hami / sizeof hami[0]);
    if (st == VRAM_OK)
        st = load_rows(&L, ENV_VRAM_CONTEXT, ENV_VRAM_CONTEXT + 1);
    if (st != VRAM_OK)
        return st;
    /* VRAM_LIMIT_SOURCE is a label: a malformed one is dropped, never an
    ** error that could stop a job. */
    if (load_rows(&L, ENV_VRAM_LIMIT_SOURCE, ENV_VRAM_LIMIT_SOURCE + 1) != VRAM_OK)
        L.s.quota.origin[0] = '\0';
    quota_assemble(&L, out);
    return VRAM_OK;
}

vram_status
env_visible_load(env_getter get, void *user, char *out, size_t len, bool *set)
{
    struct env_load L;
    vram_status st = load_section(&L, get, user, out != NULL && len > 0 && set != NULL,
                                  "env_visible_load", ENV_CUDA_VISIBLE_DEVICES,
                                  ENV_CUDA_VISIBLE_DEVICES + 1);
    if (st == VRAM_OK)
        st = copy_loaded(L.s.visible, out, len, "CUDA_VISIBLE_DEVICES:");
    /* load_read drops an empty value; the driver reads "" as no GPU. */
    if (st == VRAM_OK)
        *set = L.get("CUDA_VISIBLE_DEVICES", L.user) != NULL;
    return st;
}

vram_status
env_trace_load(env_getter get, void *user, struct env_trace *out)
{
    /* The three rows are neighbours in the table: one call reads them. */
    _Static_assert(ENV_VRAM_TRACE_SITES == ENV_VRAM_TRACE + 1 &&
                       ENV_VRAM_TRACE_HOLDERS == ENV_VRAM_TRACE + 2,
                   "VRAM_TRACE_SITES and VRAM_TRACE_HOLDERS follow VRAM_TRACE");
    _Static_assert(sizeof out->path == sizeof(KIND_PATH_type) &&
                       sizeof out->holders == sizeof(KIND_PATH_type),
                   "the paths hold what the table's do");
    struct env_load L;
    vram_status st = load_section(&L, get, user, out != NULL, "env_trace_load",
                                  ENV_VRAM_TRACE, ENV_VRAM_TRACE_HOLDERS + 1);
    if (st != VRAM_OK)
        return st;
    memcpy(out->path, L.s.env.trace_path, sizeof out->path);
    out->sites = L.s.trace_sites;
    memcpy(out->holders, L.s.trace_holders, sizeof out->holders);
    return VRAM_OK;
}

vram_status
env_run_load(env_getter get, void *user, struct env_run *out)
{
    struct env_load L;
    vram_status st = load_section(&L, get, user, out != NULL, "env_run_load",
                                  ENV_RUN_FIRST, ENV_COUNT);
    if (st == VRAM_OK)
        *out = L.s.run;
    return st;
}

const struct env_device_limit *
env_device_limit(const struct vram_env *env, int dev)
{
    static const struct env_device_limit none = {0};
    if (env == NULL)
        return &none;
    if (dev >= 0 && dev < ENV_MAX_DEVICES && env->limit[dev].n > 0)
        return &env->limit[dev];
    if (env->limit_all.n > 0)
        return &env->limit_all;
    return &none;
}

/* ------------------------------------------------------------------ */
/* Printing                                                             */
/* ------------------------------------------------------------------ */

/* Longest value `vram env` prints in the value column (errors excepted). */
#define VALUE_LEN 640

/*
** `vram env` prints each value as its variable takes it, exactly
** ("143771M", "0:3G+3G,2:6G", "75%"), so that a value shown can be pasted
** into the variable it stands beside.
*/
static void
format_caps(const struct env_device_limit *lim, char *buf, size_t len)
{
    char size[32];
    for (int k = 0; k < lim->n; k++)
        strbuf_append(buf, len, "%s%s", k > 0 ? "+" : "",
               size_format_setting(lim->bytes[k], size, sizeof size));
}

static void
format_limit(const struct vram_env *env, char *buf, size_t len)
{
    if (env->limit_all.n > 0) {
        format_caps(&env->limit_all, buf, len);
        return;
    }
    bool any = false;
    for (int d = 0; d < ENV_MAX_DEVICES; d++) {
        if (env->limit[d].n == 0)
            continue;
        strbuf_append(buf, len, "%s%d:", any ? "," : "", d);
        format_caps(&env->limit[d], buf, len);
        any = true;
    }
    if (!any)
        strbuf_append(buf, len, "unset");
}

/* The value of variable ID in L, as `vram env` shows it. */
static void
format_value(const struct env_load *L, enum env_id id, char *buf, size_t len)
{
    const struct env_var *v = &env_vars[id];
    const void *src = (const char *)&L->s + v->offset;
    buf[0] = '\0';
    switch (v->kind) {
    case KIND_BACKEND:
        strbuf_append(buf, len, "%s",
               *(const vram_backend_kind *)src == VRAM_BACKEND_SIM ? "sim" : "cuda");
        break;
    case KIND_DEVICES:
    case KIND_LEVEL:
        strbuf_append(buf, len, "%d", *(const int *)src);
        break;
    case KIND_SIZE:
    case KIND_SIZE_BYTES:
        if (*(const uint64_t *)src > 0)
            size_format_setting(*(const uint64_t *)src, buf, len);
        else
            strbuf_append(buf, len, "unset"); /* only a row without a default */
        break;
    case KIND_STRATEGY: {
        const char *name = vram_strategy_name(*(const vram_strategy *)src);
        strbuf_append(buf, len, "%s", name != NULL ? name : "?");
        break;
    }
    case KIND_TRISTATE: {
        int b = *(const int *)src;
        strbuf_append(buf, len, "%s", b < 0 ? "unset" : b ? "true" : "false");
        break;
    }
    case KIND_BOOL:
        strbuf_append(buf, len, "%s", *(const bool *)src ? "true" : "false");
        break;
    case KIND_FRACTION: {
        double f = *(const double *)src;
        if (f > 0)
            strbuf_append(buf, len, "%.15g", f);
        else
            strbuf_append(buf, len, "unset");
        break;
    }
    case KIND_LIMIT:
        format_limit(src, buf, len);
        break;
    case KIND_MIB: {
        int64_t mb = *(const int64_t *)src;
        if (mb >= 0)
            strbuf_append(buf, len, "%" PRId64, mb); /* a number of MiB, as it is set */
        else
            strbuf_append(buf, len, "unset");
        break;
    }
    case KIND_PATH:
    case KIND_TEXT:
    case KIND_GROUP: {
        const char *text = src;
        strbuf_append(buf, len, "%s", text[0] != '\0' ? text : "unset");
        break;
    }
    case KIND_QUOTA:
        quota_format(src, buf, len);
        break;
    case KIND_SIZE_INDEXED: {
        const uint64_t *sizes = src;
        char size[32];
        bool any = false;
        for (int i = 0; i < ENV_INDEXED_COUNT; i++) {
            if (sizes[i] == 0)
                continue;
            strbuf_append(buf, len, "%sdevice %d: %s", any ? ", " : "", i,
                   size_format_setting(sizes[i], size, sizeof size));
            any = true;
        }
        if (!any)
            strbuf_append(buf, len, "unset");
        break;
    }
    }
}

void
env_each(env_getter get, void *user, env_row_fn row, void *ctx)
{
    struct env_load L;
    char value[ENV_COUNT][VALUE_LEN];
    bool bad[ENV_COUNT];

    load_begin(&L, get, user);
    load_read(&L, 0, ENV_COUNT);
    for (int id = 0; id < ENV_COUNT; id++) {
        bad[id] = load_var(&L, (enum env_id)id) != VRAM_OK;
        if (bad[id])
            snprintf(value[id], VALUE_LEN, "error: %s", vram_last_error());
        else
            format_value(&L, (enum env_id)id, value[id], VALUE_LEN);
    }

    /* HAMi's rows say when vram's own variables make the preload library
    ** ignore them (a malformed one is still flagged). */
    static const enum env_id hami[] = {ENV_CUDA_DEVICE_MEMORY_LIMIT,
                                       ENV_CUDA_DEVICE_MEMORY_LIMIT_};
    for (size_t k = 0; k < sizeof hami / sizeof hami[0]; k++)
        if (!bad[hami[k]] && L.text[hami[k]] != NULL && !hami_applies(&L))
            strbuf_append(value[hami[k]], VALUE_LEN, " (ignored: %s is set)",
                   L.text[ENV_VRAM_LIMIT] != NULL ? "VRAM_LIMIT" : "VRAM_GROUP");

    /* The strategy row shows the strategy in force, wherever it came from. */
    if (!bad[ENV_VRAM_STRATEGY]) {
        if (resolve_strategy(&L) != VRAM_OK) {
            bad[ENV_VRAM_STRATEGY] = true;
            snprintf(value[ENV_VRAM_STRATEGY], VALUE_LEN, "error: %s", vram_last_error());
        } else {
            enum env_id id = ENV_VRAM_STRATEGY;
            format_value(&L, id, value[id], VALUE_LEN);
            if (L.text[id] == NULL && L.s.env.strategy_set)
                strbuf_append(value[id], VALUE_LEN, " (set by %s)",
                       L.s.allow_growth >= 0 ? "VRAM_ALLOW_GROWTH"
                                             : "TF_FORCE_GPU_ALLOW_GROWTH");
        }
    }

    for (int id = 0; id < ENV_COUNT; id++) {
        char name_buf[64];
        struct env_row r = {var_name((enum env_id)id, -1, name_buf, sizeof name_buf),
                            value[id], NULL, NULL};
        /* A strategy set by a growth switch came from the environment. */
        bool set = L.text[id] != NULL ||
                   (id == ENV_VRAM_STRATEGY && L.s.env.strategy_source != NULL);
        if (!bad[id]) {
            r.source = set ? "environment" : "default";
            r.origin = set ? NULL : default_origin((enum env_id)id);
        }
        row(ctx, &r);
    }
}

/* env_print's rows, gathered to size the columns. */
struct print_rows {
    char names[ENV_COUNT][64];
    char values[ENV_COUNT][VALUE_LEN];
    char sources[ENV_COUNT][64];
    bool bad[ENV_COUNT];
    int n;
    int n_bad; /* rows whose value is malformed */
};

static void
gather_row(void *ctx, const struct env_row *row)
{
    struct print_rows *r = ctx;
    if (r->n == ENV_COUNT)
        return;
    snprintf(r->names[r->n], sizeof r->names[r->n], "%s", row->name);
    snprintf(r->values[r->n], sizeof r->values[r->n], "%s", row->value);
    r->bad[r->n] = row->source == NULL;
    r->n_bad += row->source == NULL;
    if (row->origin != NULL)
        snprintf(r->sources[r->n], sizeof r->sources[r->n], "%s (%s)", row->source,
                 row->origin);
    else
        snprintf(r->sources[r->n], sizeof r->sources[r->n], "%s",
                 row->source != NULL ? row->source : "");
    r->n++;
}

int
env_print(FILE *out, env_getter get, void *user)
{
    struct print_rows *r = calloc(1, sizeof *r); /* about 20 KiB */
    if (r == NULL) {
        fprintf(out, "error: out of memory\n");
        return 1;
    }
    env_each(get, user, gather_row, r);
    int name_w = (int)strlen("VARIABLE"), value_w = (int)strlen("VALUE");
    for (int i = 0; i < r->n; i++) {
        int n = (int)strlen(r->names[i]);
        name_w = n > name_w ? n : name_w;
        n = (int)strlen(r->values[i]);
        if (!r->bad[i] && n > value_w)
            value_w = n < 40 ? n : 40; /* a long path should not push every row */
    }
    fprintf(out, "%-*s  %-*s  %s\n", name_w, "VARIABLE", value_w, "VALUE", "SOURCE");
    for (int i = 0; i < r->n; i++) {
        if (r->bad[i])
            fprintf(out, "%-*s  %s\n", name_w, r->names[i], r->values[i]);
        else
            fprintf(out, "%-*s  %-*s  %s\n", name_w, r->names[i], value_w, r->values[i],
                    r->sources[i]);
    }
    int bad = r->n_bad;
    free(r);
    return bad;
}

/* The rows FIRST..END-1 as a Markdown table. */
static void
markdown_table(FILE *out, int first, int end)
{
    fputs("| Variable | Default | Meaning |\n"
          "|---|---|---|\n",
          out);
    for (int id = first; id < end; id++) {
        const struct env_var *v = &env_vars[id];
        char name[64];
        fprintf(out, "| `%s` | ", var_name((enum env_id)id, -1, name, sizeof name));
        if (v->def[0] != '\0')
            fprintf(out, "`%s`", v->def);
        else
            fputs("unset", out);
        const char *origin = default_origin((enum env_id)id);
        if (strcmp(origin, "vram") != 0)
            fprintf(out, " (%s)", origin);
        fprintf(out, " | %s Values: %s. |\n", v->doc, v->expect);
    }
}

void
env_markdown(FILE *out)
{
    fputs("# Environment variables\n"
          "\n"
          "<!-- Generated by `vram env --markdown` from the table in src/config/env.c;\n"
          "     edit that table, not this file. -->\n"
          "\n"
          "`vram env` prints the value each variable has now and where it came from,\n"
          "and flags a malformed one with its error. The variables come in three\n"
          "sections, by the part of vram that reads them.\n"
          "\n"
          "- Sizes are 1024-based: `6G`, `6GiB` and `6GB` all mean 6 x 1024^3 bytes.\n"
          "  Units are K, M, G, T and P, and B for bytes; `1.5G` and `5.00 GiB` (as\n"
          "  vram prints sizes) are allowed. A number without a unit is refused, with\n"
          "  the forms that say what was meant (`80G`, `80M`, `80B`): TensorFlow's\n"
          "  memory_limit and Slurm count in MiB, HAMi in bytes. Earlier versions\n"
          "  read it as bytes: write `1073741824B` for that. HAMi's own variables\n"
          "  keep HAMi's convention, bytes.\n"
          "- `vram env` shows each value as its variable takes it (`143771M`,\n"
          "  `0:3G+3G`, `50%`), exact, so that it can be pasted back.\n"
          "- Limits fail closed: a malformed value is an error with a one-line message\n"
          "  naming the variable. It never means \"unlimited\".\n"
          "- An empty value is the same as an unset one, except for the quota's\n"
          "  limits: an empty `VRAM_LIMIT` (or HAMi limit, where those are read) is an\n"
          "  error, as is a `CUDA_DEVICE_MEMORY_LIMIT_<i>` past 15 or with a leading zero.\n"
          "\n"
          "## Defaults\n"
          "\n"
          "When nothing names a strategy, vram's default is `expandable`: memory is\n"
          "mapped as the tensors need it (what PyTorch users know as\n"
          "`expandable_segments`), never the whole card at start-up. The rule is the\n"
          "same for every way in: the PyTorch plug-in (`vram.torch.use()`), the Python\n"
          "package, `vram_open` in C (with or without the environment) and the tools.\n"
          "TensorFlow's names keep TensorFlow's meaning where a TensorFlow user sets\n"
          "them: `TF_FORCE_GPU_ALLOW_GROWTH=false` (or `VRAM_ALLOW_GROWTH=false`) is\n"
          "TensorFlow's default, `preallocate`, and `true` is `growth`. A program that\n"
          "configures its devices through the C API (`vram_configure`) gets the\n"
          "strategy it names.\n"
          "\n"
          "The cap of a device without `VRAM_MEMORY_LIMIT` or `VRAM_MEMORY_FRACTION`\n"
          "is TensorFlow's rule: its free memory minus a reserve\n"
          "(`TF_DEVICE_MIN_SYS_MEMORY_IN_MB`). Under `expandable` the cap only bounds\n"
          "what may be mapped; nothing is taken before it is used.\n"
          "\n"
          "`vram env` says whose default each unset variable follows (`default (vram)`,\n"
          "`default (TensorFlow)`, `default (PyTorch)`, ...; the tables below name the\n"
          "ones that are not vram's), and shows a strategy chosen by a growth switch as\n"
          "`environment`, naming the switch.\n"
          "\n"
          "## The allocator\n"
          "\n"
          "vram reads these variables once, when a context is opened (`vram_open`),\n"
          "unless `vram_options.ignore_environment` is set; a malformed one makes\n"
          "`vram_open` fail with `VRAM_E_CONFIG`. `vram env` flags every malformed\n"
          "variable and exits with status 2; `vram env --check` names the first one\n"
          "and exits 2.\n"
          "\n",
          out);
    markdown_table(out, 0, ENV_QUOTA_FIRST);
    fputs("\n"
          "## The quota enforcer\n"
          "\n"
          "The preload library (`libvram-preload.so`, see docs/QUOTA.md) reads these;\n"
          "`vram run` sets `VRAM_LIMIT` and `VRAM_GROUP` from its options. `vram_open`\n"
          "does not read them, so a malformed one never stops the allocator.\n"
          "\n"
          "- `VRAM_LIMIT` wins. HAMi's `CUDA_DEVICE_MEMORY_LIMIT` and\n"
          "  `CUDA_DEVICE_MEMORY_LIMIT_<i>` are read only when `VRAM_LIMIT` and\n"
          "  `VRAM_GROUP` are both unset; then a device's own `_<i>` value wins over\n"
          "  the all-devices one.\n"
          "- A `VRAM_LIMIT` entry for a device wins over a limit for every device; a\n"
          "  UUID entry wins over an ordinal entry. UUIDs match without regard to case,\n"
          "  by prefix. A fraction is of the device's total memory; a limit above the\n"
          "  total is the total.\n"
          "\n",
          out);
    markdown_table(out, ENV_QUOTA_FIRST, ENV_RUN_FIRST);
    fputs("\n"
          "## vram run\n"
          "\n"
          "`vram run` reads these to start a command under the quota enforcer.\n"
          "\n",
          out);
    markdown_table(out, ENV_RUN_FIRST, ENV_COUNT);
}
