/* SPDX-License-Identifier: MIT */
/*
** env.h -- the one module that reads the environment.
**
** Every variable vram understands is one row of VRAM_ENV_LIST in env.c:
** name, kind, default and a one-line doc. From that table come the
** parser, `vram env` (each effective value and where it came from) and
** docs/ENVIRONMENT.md (`vram env --markdown`). No other file calls getenv.
**
** Settings that limit something fail closed: a malformed value is an
** error (VRAM_E_CONFIG), never "unlimited".
*/
#ifndef VRAM_CONFIG_ENV_H
#define VRAM_CONFIG_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vram.h"

#define ENV_MAX_DEVICES 64

/* Where an effective value came from. */
enum env_source { ENV_SRC_DEFAULT = 0, ENV_SRC_ENVIRONMENT = 1 };

/*
** VRAM_MEMORY_LIMIT for one physical device: one cap per logical device.
** n == 0: no limit given for this device.
*/
struct env_device_limit {
    int n;
    uint64_t bytes[VRAM_MAX_LOGICAL];
};

/* The parsed environment. Plain data; copy freely. */
struct vram_env {
    vram_backend_kind backend;         /* VRAM_BACKEND: sim or cuda */
    int sim_devices;                   /* VRAM_SIM_DEVICES, >= 1 */
    uint64_t sim_memory;               /* VRAM_SIM_MEMORY, bytes, > 0 */
    bool strategy_set;                 /* a strategy was chosen by any variable */
    vram_strategy strategy;            /* from VRAM_STRATEGY / *_ALLOW_GROWTH, else
                                          the default (expandable) */
    const char *strategy_source;       /* the variable that chose it (static text:
                                          "VRAM_STRATEGY", "VRAM_ALLOW_GROWTH" or
                                          "TF_FORCE_GPU_ALLOW_GROWTH"); NULL: the
                                          default */
    double fraction;                   /* VRAM_MEMORY_FRACTION; 0 = unset */
    struct env_device_limit limit_all; /* "6G" or "3G+3G": every device */
    struct env_device_limit limit[ENV_MAX_DEVICES]; /* "0:6G,1:4G" */
    int64_t reserve_mb;   /* TF_DEVICE_MIN_SYS_MEMORY_IN_MB; -1 unset */
    int log_level;        /* VRAM_LOG, 0..4 */
    char log_file[512];   /* VRAM_LOG_FILE; "" = stderr */
    char trace_path[512]; /* VRAM_TRACE; "" = no trace */
    bool oom_dump;        /* VRAM_OOM_DUMP */
};

/*
** Read every variable with GET (NULL = getenv) and fill OUT. On a
** malformed value: VRAM_E_CONFIG, and the thread's last error is one line
** naming the variable, the value and what is expected, e.g.
**   VRAM_MEMORY_LIMIT='6X': '6X': unknown unit 'X' (expected e.g. 6G, 512M, 0:6G,1:4G)
** Conflicts (VRAM_STRATEGY=preallocate with VRAM_ALLOW_GROWTH=true) are
** errors too. OUT is written only on success.
*/
typedef const char *(*env_getter)(const char *name, void *user);
vram_status env_load(env_getter get, void *user, struct vram_env *out);

/* The table's defaults alone, as env_load finds them in an empty
** environment: what a context opened with ignore_environment starts
** from (the strategy expandable, no cap but TensorFlow's rule). */
vram_status env_defaults(struct vram_env *out);

/* The limits configured for physical device DEV (its own entry, else the
** all-devices entry, else n == 0). */
const struct env_device_limit *env_device_limit(const struct vram_env *env, int dev);

/*
** The preload library's settings only (VRAM_LIMIT, VRAM_GROUP and, when
** both are unset, HAMi's CUDA_DEVICE_MEMORY_LIMIT[_<i>]); see
** src/quota/quota.h. A malformed value: VRAM_E_CONFIG with one line
** naming it. OUT is written only on success.
*/
struct quota_env;
vram_status env_quota_load(env_getter get, void *user, struct quota_env *out);

/*
** HAMi's variables (CUDA_DEVICE_MEMORY_LIMIT[_<i>],
** CUDA_DEVICE_MEMORY_SHARED_CACHE) that VRAM_GROUP turns off: set while
** VRAM_GROUP is set and VRAM_LIMIT is not, so that none of them limits or
** groups the process. Their names, ", "-separated, into BUF (LEN bytes);
** false (BUF "") when there are none.
*/
bool env_hami_ignored(env_getter get, void *user, char *buf, size_t len);

/*
** CUDA_VISIBLE_DEVICES as the process has it, into OUT (LEN bytes); *SET
** says whether it is set at all (set and empty: no GPU). Used only to map
** CUDA ordinals to the host's for the policy file. A value longer than
** LEN: VRAM_E_CONFIG. OUT is written only on success.
*/
vram_status env_visible_load(env_getter get, void *user, char *out, size_t len, bool *set);

/* The preload library's trace settings. Plain data; copy freely. */
struct env_trace {
    char path[512];    /* VRAM_TRACE; "" = no trace */
    bool sites;        /* VRAM_TRACE_SITES */
    char holders[512]; /* VRAM_TRACE_HOLDERS; "" = unset */
};

/*
** VRAM_TRACE, VRAM_TRACE_SITES and VRAM_TRACE_HOLDERS alone, for the
** preload library (which reads no other setting of the allocator's
** section). A malformed value (too long, not a boolean): VRAM_E_CONFIG
** with one line naming it. OUT is written only on success.
*/
vram_status env_trace_load(env_getter get, void *user, struct env_trace *out);

/*
** The getter of a process that runs with raised privileges (AT_SECURE:
** setuid, setgid, file capabilities), in which the preload library
** ignores the user's settings: every variable unset, but
** CUDA_VISIBLE_DEVICES, which the driver applies whoever set it.
*/
const char *env_secure_get(const char *name, void *user);

/*
** The preload library's own variables that are set in the process's
** environment (its quota section but CUDA_VISIBLE_DEVICES, VRAM_TRACE
** and VRAM_TRACE_SITES), ", "-separated, into BUF (LEN bytes): what a
** process with raised privileges ignores. False (BUF "") when none is.
*/
bool env_preload_set(char *buf, size_t len);

/* The settings `vram run` reads for itself. Plain data; copy freely. */
struct env_run {
    char preload_library[512]; /* VRAM_PRELOAD_LIBRARY; "" = unset */
    char ld_preload[4096];     /* LD_PRELOAD as found; "" = unset */
    char python[512];          /* VRAM_PYTHON; "" = unset */
    char python_dir[512];      /* VRAM_PYTHONPATH; "" = unset */
    char pythonpath[4096];     /* PYTHONPATH as found; "" = unset */
    char torch_alloc_conf[4096]; /* PYTORCH_CUDA_ALLOC_CONF; "" = unset */
    char tf_gpu_allocator[4096]; /* TF_GPU_ALLOCATOR; "" = unset */
    char xla_allocator[4096];    /* XLA_PYTHON_CLIENT_ALLOCATOR; "" = unset */
    char xla_preallocate[4096];  /* XLA_PYTHON_CLIENT_PREALLOCATE; "" = unset */
};

/* Read the variables of the tools (VRAM_PRELOAD_LIBRARY, LD_PRELOAD,
** VRAM_PYTHON, VRAM_PYTHONPATH, PYTHONPATH, and the frameworks' allocator
** choices vram record steers) with GET (NULL = getenv). A
** value too long for its field: VRAM_E_CONFIG with one line naming it.
** OUT is written only on success. */
vram_status env_run_load(env_getter get, void *user, struct env_run *out);

/* Print every variable: name, effective value (as the variable takes it,
** so that it pastes back), source ("environment", or "default" with whose
** default it is: "default (vram)", "default (TensorFlow)", ...), one per
** line, aligned. GET as for env_load. Variables whose value is malformed
** are printed with the error instead. Returns the number of those (the
** commands that print the table exit 2 when it is not 0). */
int env_print(FILE *out, env_getter get, void *user);

/* One variable as `vram env` shows it. */
struct env_row {
    const char *name;   /* CUDA_DEVICE_MEMORY_LIMIT_<i> for the indexed row */
    const char *value;  /* its effective value, or "error: why" */
    const char *source; /* "environment" or "default"; NULL when malformed */
    const char *origin; /* with "default": whose default it is ("vram",
                           "TensorFlow", "PyTorch", "JAX", "HAMi", "CUDA",
                           "the system"); else NULL */
};

/* The rows, one call of ROW each, in the table's order. */
typedef void (*env_row_fn)(void *ctx, const struct env_row *row);
void env_each(env_getter get, void *user, env_row_fn row, void *ctx);

/* Print the table as Markdown (docs/ENVIRONMENT.md is this output). */
void env_markdown(FILE *out);

#endif
