/* SPDX-License-Identifier: MIT */
/*
** context.c -- opening a backend, configuring physical devices with
** TensorFlow's semantics and initializing their logical devices; and the
** registry of open contexts that record a trace, which vram_mark writes
** its marks to.
*/
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/size.h"
#include "config/env.h"
#include "core/core.h"
#include "core/internal.h"
#include "trace/trace.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

/* ================================================================== */
/* The contexts that record a trace                                    */
/* ================================================================== */

/*
** Every open context whose trace is recorded (VRAM_TRACE), so that
** vram_mark reaches each. A context joins at the end of vram_open and
** leaves at the start of vram_close, before its writer is closed; marks
** are written with the lock held, so no writer is closed under a mark.
** Lock order: traced.lock, then a writer's own lock (allocation and free
** events take only the latter).
*/
static struct traced_contexts {
    pthread_mutex_t lock; /* guards everything below */
    vram_context **ctx;   /* n entries, room for cap */
    size_t n, cap;
} traced = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Add CTX. VRAM_E_HOST_MEMORY if the list cannot grow. */
static vram_status
traced_add(vram_context *ctx)
{
    vram_status st = VRAM_OK;
    pthread_mutex_lock(&traced.lock);
    if (traced.n == traced.cap) {
        size_t cap = traced.cap == 0 ? 4 : traced.cap * 2;
        vram_context **grown = realloc(traced.ctx, cap * sizeof *grown);
        if (grown == NULL) {
            st = error_set(VRAM_E_HOST_MEMORY, "out of host memory");
        } else {
            traced.ctx = grown;
            traced.cap = cap;
        }
    }
    if (st == VRAM_OK)
        traced.ctx[traced.n++] = ctx;
    pthread_mutex_unlock(&traced.lock);
    return st;
}

/* Remove CTX if it is there. The list's memory stays for the next one. */
static void
traced_remove(vram_context *ctx)
{
    pthread_mutex_lock(&traced.lock);
    for (size_t i = 0; i < traced.n; i++) {
        if (traced.ctx[i] == ctx) {
            traced.ctx[i] = traced.ctx[--traced.n];
            break;
        }
    }
    pthread_mutex_unlock(&traced.lock);
}

vram_status
vram_mark(const char *label)
{
    if (label == NULL || label[0] == '\0')
        return error_set(VRAM_E_INVALID, "vram_mark: the label is %s",
                         label == NULL ? "NULL" : "empty");
    uint64_t t = now_wall_us();
    char why[512] = "";
    pthread_mutex_lock(&traced.lock);
    for (size_t i = 0; i < traced.n; i++) {
        vram_context *ctx = traced.ctx[i];
        if (trace_writer_mark(ctx->trace, t, 0, label) == VRAM_OK)
            continue;
        if (why[0] == '\0')
            snprintf(why, sizeof why, "%s", vram_last_error());
        /* The writer's errors are sticky: say so once, as device.c does. */
        if (!atomic_exchange(&ctx->trace_failed, true))
            log_write(LOG_CONFIG, "trace: %s; no further events are recorded",
                      vram_last_error());
    }
    pthread_mutex_unlock(&traced.lock);
    if (why[0] != '\0')
        return error_set(VRAM_E_IO, "vram_mark: %s", why);
    return VRAM_OK;
}

/* ================================================================== */
/* Open and close                                                      */
/* ================================================================== */

/* TensorFlow's reserve for the system: memory left out of the default cap. */
static uint64_t
tf_reserve(const vram_physical_info *info, uint64_t free_bytes, int64_t reserve_mb)
{
    if (reserve_mb >= 0)
        return (uint64_t)reserve_mb * MiB;
    if (free_bytes < 2 * GiB)
        return 225 * MiB;
    if (info->cc_major <= 6)
        return 500 * MiB;
    if (info->cc_major <= 7)
        return 1050 * MiB;
    return 1536 * MiB;
}

static vram_status
open_backend(vram_backend_kind kind, const vram_sim_options *sim, struct backend **out)
{
    switch (kind) {
    case VRAM_BACKEND_SIM:
        return backend_sim_open(sim, out);
    case VRAM_BACKEND_CUDA:
    case VRAM_BACKEND_DEFAULT:
        return backend_cuda_open(NULL, out);
    }
    return error_set(VRAM_E_INVALID, "unknown backend %d", (int)kind);
}

/* Give physical device D its configuration from the environment. */
static vram_status
config_from_env(const struct vram_env *env, int d, vram_device_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->strategy = env->strategy; /* the default when nothing chose one */
    cfg->fraction = env->fraction;
    const struct env_device_limit *lim = env_device_limit(env, d);
    cfg->n_logical = lim->n;
    for (int i = 0; i < lim->n; i++)
        cfg->limit_bytes[i] = lim->bytes[i];
    return VRAM_OK;
}

static vram_status
validate_config(const vram_device_config *c)
{
    if (vram_strategy_name(c->strategy) == NULL)
        return error_set(VRAM_E_INVALID, "unknown strategy %d", (int)c->strategy);
    if (!(c->fraction >= 0.0 && c->fraction <= 1.0))
        return error_set(VRAM_E_INVALID, "memory fraction %g outside (0, 1]",
                         c->fraction);
    if (c->n_logical < 0 || c->n_logical > VRAM_MAX_LOGICAL)
        return error_set(VRAM_E_INVALID, "%d logical devices (0 to %d)", c->n_logical,
                         VRAM_MAX_LOGICAL);
    if (c->n_logical > 1)
        for (int i = 0; i < c->n_logical; i++)
            if (c->limit_bytes[i] == 0)
                return error_set(
                    VRAM_E_INVALID,
                    "logical device %d of %d has no memory limit: with several "
                    "logical devices each needs one",
                    i, c->n_logical);
    return VRAM_OK;
}

static void
context_free(vram_context *ctx)
{
    if (ctx->phys != NULL) {
        for (int i = 0; i < ctx->n_physical; i++) {
            struct physical *p = &ctx->phys[i];
            for (int k = 0; p->devs != NULL && k < p->n_logical; k++)
                device_destroy(&p->devs[k]);
            free(p->devs);
        }
        free(ctx->phys);
    }
    if (ctx->trace != NULL && trace_writer_close(ctx->trace) != VRAM_OK)
        log_write(LOG_CONFIG, "trace: %s", vram_last_error());
    if (ctx->backend != NULL)
        ctx->backend->ops->close(ctx->backend);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

vram_status
vram_open(const vram_options *options, vram_context **out)
{
    if (out == NULL)
        return error_set(VRAM_E_INVALID, "vram_open: NULL out-pointer");
    vram_options opt;
    if (options != NULL)
        opt = *options;
    else
        memset(&opt, 0, sizeof opt);

    /* Without the environment, the table's defaults: one rule for the
    ** strategy of a device nobody configures (docs/ENVIRONMENT.md,
    ** "Defaults"). */
    struct vram_env env;
    bool use_env = !opt.ignore_environment;
    vram_status env_st = use_env ? env_load(NULL, NULL, &env) : env_defaults(&env);
    if (env_st != VRAM_OK)
        return env_st;
    if (use_env) {
        if (opt.backend == VRAM_BACKEND_DEFAULT)
            opt.backend = env.backend;
        if (opt.sim.devices == 0)
            opt.sim.devices = env.sim_devices;
        if (opt.sim.memory_bytes == 0)
            opt.sim.memory_bytes = env.sim_memory;
        if (log_configure(env.log_level, env.log_file) != 0)
            log_write(LOG_CONFIG, "VRAM_LOG_FILE: %s: logging to stderr", vram_last_error());
    }

    vram_context *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "out of host memory");
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->reserve_mb = use_env ? env.reserve_mb : -1;
    ctx->oom_dump = use_env && env.oom_dump;

    vram_status st = open_backend(opt.backend, &opt.sim, &ctx->backend);
    if (st == VRAM_OK)
        st = ctx->backend->ops->device_count(ctx->backend, &ctx->n_physical);
    if (st == VRAM_OK && ctx->n_physical <= 0)
        st = error_set(VRAM_E_NO_DEVICE, "the %s backend has no devices",
                       ctx->backend->ops->name);
    if (st == VRAM_OK) {
        ctx->phys = calloc((size_t)ctx->n_physical, sizeof *ctx->phys);
        if (ctx->phys == NULL)
            st = error_set(VRAM_E_HOST_MEMORY, "out of host memory");
    }
    for (int d = 0; st == VRAM_OK && d < ctx->n_physical; d++) {
        st = ctx->backend->ops->device_info(ctx->backend, d, &ctx->phys[d].info);
        if (st == VRAM_OK)
            st = config_from_env(&env, d, &ctx->phys[d].config);
    }
    if (st == VRAM_OK && use_env) {
        /* A limit for a device that does not exist is a mistake to report,
        ** not to ignore: limits fail closed. */
        for (int d = ctx->n_physical; d < ENV_MAX_DEVICES; d++)
            if (env.limit[d].n > 0) {
                st = error_set(VRAM_E_CONFIG,
                               "VRAM_MEMORY_LIMIT names device %d, but there are only %d",
                               d, ctx->n_physical);
                break;
            }
        for (int d = 0; st == VRAM_OK && d < ctx->n_physical; d++) {
            st = validate_config(&ctx->phys[d].config);
            if (st != VRAM_OK)
                st = error_set(VRAM_E_CONFIG, "device %d: %s", d, vram_last_error());
        }
    }
    if (st == VRAM_OK && use_env && env.trace_path[0] != '\0') {
        char meta[160];
        snprintf(meta, sizeof meta, "workload=vram pid=%ld backend=%s version=%s",
                 (long)getpid(), ctx->backend->ops->name, VRAM_VERSION);
        st = trace_writer_open(env.trace_path, meta, &ctx->trace);
        if (st != VRAM_OK)
            st = error_set(VRAM_E_CONFIG, "VRAM_TRACE=%s: %s", env.trace_path,
                           vram_last_error());
        else
            st = traced_add(ctx); /* last: nothing fails after it */
    }
    if (st != VRAM_OK) {
        context_free(ctx);
        return st;
    }
    log_write(LOG_CONFIG, "opened the %s backend: %d device(s)", ctx->backend->ops->name,
              ctx->n_physical);
    *out = ctx;
    return VRAM_OK;
}

void
context_trace_finish(vram_context *ctx)
{
    if (ctx != NULL && ctx->trace != NULL)
        (void)trace_writer_finish(ctx->trace);
}

void
vram_close(vram_context *ctx)
{
    if (ctx == NULL)
        return;
    if (ctx->trace != NULL)
        traced_remove(ctx); /* before its writer is closed: no mark reaches it */
    context_free(ctx);
}

/* ================================================================== */
/* Physical devices                                                    */
/* ================================================================== */

vram_status
vram_physical_count(vram_context *ctx, int *out)
{
    if (ctx == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "vram_physical_count: NULL argument");
    *out = ctx->n_physical;
    return VRAM_OK;
}

/* VRAM_OK if CTX is a context, ARGS_OK (CALL's other pointers are not
** NULL) and INDEX names one of its physical devices; else why not. */
static vram_status
check_physical(const vram_context *ctx, bool args_ok, const char *call, int index)
{
    if (ctx == NULL || !args_ok)
        return error_set(VRAM_E_INVALID, "%s: NULL argument", call);
    if (index < 0 || index >= ctx->n_physical)
        return error_set(VRAM_E_NO_DEVICE, "no physical device %d (there are %d)", index,
                         ctx->n_physical);
    return VRAM_OK;
}

vram_status
vram_physical_info_get(vram_context *ctx, int index, vram_physical_info *out)
{
    uint64_t free_bytes = 0, total = 0;
    vram_status st = check_physical(ctx, out != NULL, "vram_physical_info_get", index);
    if (st == VRAM_OK)
        st = ctx->backend->ops->mem_get_info(ctx->backend, index, &free_bytes, &total);
    if (st != VRAM_OK)
        return st;
    vram_physical_info info = ctx->phys[index].info;
    info.free_bytes = free_bytes;
    *out = info;
    return VRAM_OK;
}

vram_status
vram_configure(vram_context *ctx, int index, const vram_device_config *config)
{
    vram_status st = check_physical(ctx, config != NULL, "vram_configure", index);
    if (st == VRAM_OK)
        st = validate_config(config);
    if (st != VRAM_OK)
        return st;
    pthread_mutex_lock(&ctx->lock);
    struct physical *p = &ctx->phys[index];
    if (p->initialized)
        return error_set_unlock(
            &ctx->lock, VRAM_E_INITIALIZED,
            "physical devices cannot be modified after being initialized "
            "(device %d is in use)",
            index);
    p->config = *config;
    pthread_mutex_unlock(&ctx->lock);
    return VRAM_OK;
}

vram_status
vram_get_config(vram_context *ctx, int index, vram_device_config *out)
{
    vram_status st = check_physical(ctx, out != NULL, "vram_get_config", index);
    if (st != VRAM_OK)
        return st;
    pthread_mutex_lock(&ctx->lock);
    *out = ctx->phys[index].config;
    pthread_mutex_unlock(&ctx->lock);
    return VRAM_OK;
}

/* ================================================================== */
/* Logical devices                                                     */
/* ================================================================== */

static int
logical_count_locked(const vram_context *ctx, int upto)
{
    int n = 0;
    for (int d = 0; d < upto; d++) {
        const struct physical *p = &ctx->phys[d];
        n += p->initialized ? p->n_logical
                            : (p->config.n_logical > 1 ? p->config.n_logical : 1);
    }
    return n;
}

vram_status
vram_device_count(vram_context *ctx, int *out)
{
    if (ctx == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "vram_device_count: NULL argument");
    pthread_mutex_lock(&ctx->lock);
    *out = logical_count_locked(ctx, ctx->n_physical);
    pthread_mutex_unlock(&ctx->lock);
    return VRAM_OK;
}

/* Compute the caps of physical device D from its configuration and the
** free memory FREE_BYTES measured just before, and create its logical
** devices. */
static vram_status
initialize_locked(vram_context *ctx, int d, uint64_t free_bytes)
{
    struct physical *p = &ctx->phys[d];
    const vram_device_config *c = &p->config;
    int n = c->n_logical > 1 ? c->n_logical : 1;
    uint64_t reserve = tf_reserve(&p->info, free_bytes, ctx->reserve_mb);
    uint64_t dflt = free_bytes > reserve ? free_bytes - reserve : 0;
    struct vram_device *devs = calloc((size_t)n, sizeof *devs);
    if (devs == NULL)
        return error_set(VRAM_E_HOST_MEMORY, "out of host memory");
    int first = logical_count_locked(ctx, d);
    for (int i = 0; i < n; i++) {
        uint64_t cap = c->limit_bytes[i];
        if (cap == 0 && c->fraction > 0.0)
            cap = (uint64_t)(c->fraction * (double)p->info.total_bytes);
        if (cap == 0)
            cap = dflt;
        vram_status st = device_init(&devs[i], ctx, first + i, d, i, c->strategy, cap,
                                     p->info.granularity);
        if (st != VRAM_OK) {
            for (int k = 0; k < i; k++)
                device_destroy(&devs[k]);
            free(devs);
            return st;
        }
        char a[32];
        log_write(LOG_CONFIG, "GPU:%d on physical device %d (%s): %s, cap %s", first + i,
                  d, p->info.name, vram_strategy_name(c->strategy),
                  size_format(cap, a, sizeof a));
    }
    p->devs = devs;
    p->n_logical = n;
    p->initialized = true;
    return VRAM_OK;
}

vram_status
vram_device_get(vram_context *ctx, int index, vram_device **out)
{
    if (ctx == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "vram_device_get: NULL argument");
    pthread_mutex_lock(&ctx->lock);
    for (int d = 0; d < ctx->n_physical; d++) {
        int first = logical_count_locked(ctx, d);
        int n = logical_count_locked(ctx, d + 1) - first;
        if (index < first || index >= first + n)
            continue;
        struct physical *p = &ctx->phys[d];
        if (!p->initialized) {
            /* No lock across a backend call: measure free memory, then
            ** initialize unless another thread did meanwhile. */
            pthread_mutex_unlock(&ctx->lock);
            uint64_t free_bytes, total;
            vram_status st =
                ctx->backend->ops->mem_get_info(ctx->backend, d, &free_bytes, &total);
            if (st != VRAM_OK)
                return st;
            pthread_mutex_lock(&ctx->lock);
            if (!p->initialized) {
                st = initialize_locked(ctx, d, free_bytes);
                if (st != VRAM_OK) {
                    pthread_mutex_unlock(&ctx->lock);
                    return st;
                }
            }
            first = logical_count_locked(ctx, d);
        }
        *out = &p->devs[index - first];
        pthread_mutex_unlock(&ctx->lock);
        return VRAM_OK;
    }
    int total = logical_count_locked(ctx, ctx->n_physical);
    return error_set_unlock(&ctx->lock, VRAM_E_NO_DEVICE,
                            "no logical device %d (there are %d)", index, total);
}

vram_status
vram_device_info_get(vram_device *dev, vram_device_info *out)
{
    if (dev == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "vram_device_info_get: NULL argument");
    vram_device_info info = {dev->index, dev->physical, dev->strategy, dev->limit};
    *out = info;
    return VRAM_OK;
}
