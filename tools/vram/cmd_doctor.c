/* SPDX-License-Identifier: MIT */
/*
** cmd_doctor.c -- `vram doctor [TRACE]`: the troubleshooting table of the
** TensorFlow articles vram comes from, turned into checks. Each check
** prints one line
**     [ok|warn|problem] NAME: evidence. Next: what to do.
** Without TRACE: the environment (malformed values; preallocation, the
** default, grabbing memory at start-up) and the GPUs. With TRACE: what
** preallocation would cost the job, a leak, an OOM with memory to spare
** (fragmentation), an OOM because the job is too big, uneven use of
** several GPUs. docs/ANALYZE.md describes every check.
**
** Exit status: 0 when no check found a problem (warnings allowed), 1 when
** one did (or the doctor could not run), 2 bad usage or a malformed trace.
*/
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze.h"
#include "cliopt.h"
#include "cmd.h"
#include "config/env.h"
#include "trace/trace.h"
#include "base/size.h"
#include "vram.h"

#define MIB (1ULL << 20)

/* Preallocation is worth a warning when it holds this many times what
** growth reserves for the same job. */
#define PREALLOC_WASTE_RATIO 2.0
/* Per-device peaks differing by more than this share of the largest. */
#define UNEVEN_SHARE 0.20
/* A GPU whose memory is held by others beyond this share of its total. */
#define OTHERS_SHARE 0.10

/* What the command line asks of `vram doctor`. */
struct doctor_args {
    struct an_options opts;
    bool json;
    const char *path; /* the trace, or NULL: the environment */
    bool trace_opts;  /* --strategy or --limit was given */
};

#define AT(member) offsetof(struct doctor_args, member)

/* --strategy and --limit are noted (notify): they apply to a trace only. */
static const struct cli_opt opt_table[] = {
    {0, "strategy", 0, "NAME", "with TRACE: replay under this strategy (default: growth)",
     .store = CLIOPT_STRATEGY, .field = AT(opts.strategy), .notify = true},
    {0, "limit", 0, "SIZE",
     "with TRACE: the job's cap (memory_limit), to judge a final OOM against",
     .store = CLIOPT_SIZE, .field = AT(opts.limit), .notify = true},
    {0, "json", 0, NULL, "print one JSON object {\"checks\":[...],...}",
     .store = CLIOPT_SET, .field = AT(json)},
};

static const struct cli_command doctor_cmd = {
    .prog = "vram doctor",
    .synopsis = "[OPTIONS] [TRACE]",
    .about = "Check for the usual GPU memory problems, each with its evidence and a\n"
             "next step. Without TRACE: the environment and the GPUs. With TRACE:\n"
             "preallocation, a leak, an OOM below the cap (fragmentation), an OOM\n"
             "above it (the job is too big), uneven use of several GPUs.\n",
    CLIOPT_TABLE(opt_table),
    .exit_status = "0 no problem found (warnings allowed), 1 a problem found or the "
                   "checks could not run, 2 bad usage or a malformed trace.",
};

/* ------------------------------------------------------------------ */
/* Checks                                                               */
/* ------------------------------------------------------------------ */

enum verdict { V_OK, V_WARN, V_PROBLEM };

static const char *const verdict_names[] = {"ok", "warn", "problem"};

struct check {
    const char *name;
    enum verdict v;
    char evidence[768];
    char next[384];
};

#define MAX_CHECKS 8

struct report {
    struct check c[MAX_CHECKS];
    int n;
};

static struct check *
add_check(struct report *rep, const char *name, enum verdict v)
{
    struct check *c = &rep->c[rep->n++];
    memset(c, 0, sizeof *c);
    c->name = name;
    c->v = v;
    return c;
}

/* Append formatted text to BUF (LEN bytes), cutting it if it is full. */
static void appendf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
appendf(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

static const char *
fmt_size(uint64_t bytes, char *buf, size_t len)
{
    return size_format(bytes, buf, len);
}

/* The text of environment LIMIT (one device's caps): "6.00 GiB" or
** "3.00 GiB + 3.00 GiB". */
static void
limit_text(const struct env_device_limit *l, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < l->n; i++) {
        char s[32];
        appendf(buf, len, "%s%s", i ? " + " : "", fmt_size(l->bytes[i], s, sizeof s));
    }
}

/* Does ENV cap any device (a fraction or a limit)? */
static bool
env_capped(const struct vram_env *env)
{
    if (env->fraction > 0.0 || env->limit_all.n > 0)
        return true;
    for (int d = 0; d < ENV_MAX_DEVICES; d++)
        if (env->limit[d].n > 0)
            return true;
    return false;
}

/* ---- without a trace ---- */

/* Every variable vram reads (the allocator's, the quota enforcer's and
** vram run's, as `vram env` shows them); *ENV_OK says whether the
** allocator's load, which the next checks stand on, succeeded. */
static void
check_environment(struct report *rep, bool *env_ok, struct vram_env *env)
{
    vram_status s = env_load(NULL, NULL, env);
    *env_ok = s == VRAM_OK;
    char first[512];
    snprintf(first, sizeof first, "%s", *env_ok ? "" : vram_last_error());
    int bad = cli_env_errors(first, *env_ok ? sizeof first : 0);
    if (bad == 0 && !*env_ok)
        bad = 1;
    if (bad > 0) {
        struct check *c = add_check(rep, "environment", V_PROBLEM);
        if (bad > 1)
            snprintf(c->evidence, sizeof c->evidence, "%s (and %d more malformed)", first,
                     bad - 1);
        else
            snprintf(c->evidence, sizeof c->evidence, "%s", first);
        snprintf(c->next, sizeof c->next,
                 "fix that variable; `vram env` shows every setting and where it came "
                 "from, `vram env --markdown` documents them");
        return;
    }
    struct check *c = add_check(rep, "environment", V_OK);
    snprintf(c->evidence, sizeof c->evidence,
             "every setting vram reads is well-formed (`vram env` lists them)");
    snprintf(c->next, sizeof c->next, "nothing");
}

static void
check_preallocation_env(struct report *rep, bool env_ok, const struct vram_env *env)
{
    if (!env_ok) {
        struct check *c = add_check(rep, "preallocation", V_WARN);
        snprintf(c->evidence, sizeof c->evidence,
                 "cannot tell: the environment is malformed (see above), and a program "
                 "would refuse to start");
        snprintf(c->next, sizeof c->next, "fix the environment first");
        return;
    }
    vram_strategy st = env->strategy; /* the default when nothing chose one */
    bool capped = env_capped(env);
    if (st != VRAM_STRATEGY_PREALLOCATE) {
        struct check *c = add_check(rep, "preallocation", V_OK);
        snprintf(
            c->evidence, sizeof c->evidence,
            "the strategy is %s: memory is taken as the job needs it, not at start-up",
            vram_strategy_name(st));
        snprintf(c->next, sizeof c->next, "nothing");
        return;
    }
    if (capped) {
        struct check *c = add_check(rep, "preallocation", V_OK);
        char cap[160] = "";
        if (env->limit_all.n > 0)
            limit_text(&env->limit_all, cap, sizeof cap);
        else if (env->fraction > 0.0)
            snprintf(cap, sizeof cap, "%.0f%% of each GPU", 100.0 * env->fraction);
        else
            snprintf(cap, sizeof cap, "per-device limits");
        snprintf(c->evidence, sizeof c->evidence,
                 "preallocate takes its whole cap at start-up, and the cap is set (%s)",
                 cap);
        snprintf(c->next, sizeof c->next,
                 "nothing, if the cap fits the job; `vram doctor TRACE` compares it with "
                 "what the job needs");
        return;
    }
    /* Only a setting the user made can choose preallocate: the default is
    ** expandable (docs/ENVIRONMENT.md, "Defaults"). */
    struct check *c = add_check(rep, "preallocation", V_WARN);
    snprintf(c->evidence, sizeof c->evidence,
             "%s chose preallocate with no cap: preallocate (TensorFlow's default) grabs "
             "nearly all of each GPU's memory at start-up (free memory minus a small "
             "reserve), whatever the job needs",
             env->strategy_source != NULL ? env->strategy_source : "the environment");
    bool by_switch = env->strategy_source != NULL &&
                     strcmp(env->strategy_source, "VRAM_STRATEGY") != 0;
    snprintf(c->next, sizeof c->next,
             "%s%s%s, or cap each job with VRAM_MEMORY_LIMIT (e.g. 6G) or "
             "VRAM_MEMORY_FRACTION (e.g. 0.5)",
             by_switch ? "unset " : "set VRAM_STRATEGY=expandable or growth",
             by_switch ? env->strategy_source : "",
             by_switch ? " (vram then takes expandable)" : "");
}

static void
check_devices(struct report *rep, bool env_ok)
{
    if (!env_ok) {
        struct check *c = add_check(rep, "devices", V_WARN);
        snprintf(c->evidence, sizeof c->evidence,
                 "not checked: the environment is malformed");
        snprintf(c->next, sizeof c->next, "fix the environment first");
        return;
    }
    vram_context *ctx = NULL;
    vram_status s = vram_open(NULL, &ctx);
    if (s != VRAM_OK) {
        struct check *c = add_check(rep, "devices", V_WARN);
        snprintf(c->evidence, sizeof c->evidence, "no GPU can be used: %s",
                 vram_last_error());
        snprintf(
            c->next, sizeof c->next,
            s == VRAM_E_NO_DRIVER
                ? "install the NVIDIA driver, or set VRAM_BACKEND=sim to try vram on "
                  "a simulated GPU"
                : "check `vram devices` and the driver (nvidia-smi)");
        return;
    }
    int n = 0;
    s = vram_physical_count(ctx, &n);
    char list[512] = "", crowded[384] = "";
    uint64_t others_max = 0;
    for (int d = 0; d < n && s == VRAM_OK; d++) {
        vram_physical_info info;
        s = vram_physical_info_get(ctx, d, &info);
        if (s != VRAM_OK)
            break;
        char a[32], b[32];
        appendf(list, sizeof list, "%sGPU %d %s: %s free of %s", d ? "; " : "", d,
                info.name, fmt_size(info.free_bytes, a, sizeof a),
                fmt_size(info.total_bytes, b, sizeof b));
        uint64_t held =
            info.total_bytes > info.free_bytes ? info.total_bytes - info.free_bytes : 0;
        if ((double)held > OTHERS_SHARE * (double)info.total_bytes) {
            appendf(crowded, sizeof crowded, "%sGPU %d (%s held)", crowded[0] ? ", " : "",
                    d, fmt_size(held, a, sizeof a));
            if (held > others_max)
                others_max = held;
        }
    }
    vram_close(ctx);
    if (s != VRAM_OK || n == 0) {
        struct check *c = add_check(rep, "devices", V_WARN);
        snprintf(c->evidence, sizeof c->evidence, "%s",
                 n == 0 ? "the backend sees no GPU" : vram_last_error());
        snprintf(c->next, sizeof c->next,
                 "check `vram devices` and CUDA_VISIBLE_DEVICES");
        return;
    }
    if (crowded[0] != '\0') {
        struct check *c = add_check(rep, "devices", V_WARN);
        snprintf(c->evidence, sizeof c->evidence, "other processes hold memory on %.300s; %.400s",
                 crowded, list);
        snprintf(c->next, sizeof c->next,
                 "see who with nvidia-smi; on a shared GPU give every job a quota with "
                 "`vram run --limit SIZE` or VRAM_MEMORY_LIMIT");
        return;
    }
    struct check *c = add_check(rep, "devices", V_OK);
    snprintf(c->evidence, sizeof c->evidence, "%d GPU%s: %s", n, n == 1 ? "" : "s", list);
    snprintf(c->next, sizeof c->next, "nothing");
}

/* ---- with a trace ---- */

static void
check_preallocation_trace(struct report *rep, const struct an_result *r,
                          const struct an_result *pre)
{
    struct vram_env env;
    bool env_ok = env_load(NULL, NULL, &env) == VRAM_OK;
    vram_strategy st = env_ok ? env.strategy : VRAM_STRATEGY_EXPANDABLE;
    bool capped = env_ok && env_capped(&env);
    char a[32], b[32], c3[32];
    double ratio = r->peak_reserved > 0
                       ? (double)pre->peak_reserved / (double)r->peak_reserved
                       : 0.0;
    bool waste = ratio > PREALLOC_WASTE_RATIO;
    enum verdict v = st == VRAM_STRATEGY_PREALLOCATE && !capped && waste ? V_WARN : V_OK;
    struct check *c = add_check(rep, "preallocation", v);
    if (r->peak_bytes == 0) {
        /* Nothing was ever granted (a trace of refusals only): there is no
        ** peak to compare the strategies on. */
        snprintf(c->evidence, sizeof c->evidence,
                 "no allocation in the trace was granted, so no strategy held any memory "
                 "for it");
        snprintf(c->next, sizeof c->next, "nothing");
        return;
    }
    snprintf(
        c->evidence, sizeof c->evidence,
        "preallocate would hold %s from the first allocation for a job whose peak is "
        "%s live; %s reserved at most %s (%.1fx less); this environment's strategy is "
        "%s%s",
        fmt_size(pre->peak_reserved, a, sizeof a), fmt_size(r->peak_bytes, b, sizeof b),
        vram_strategy_name(r->strategy), fmt_size(r->peak_reserved, c3, sizeof c3), ratio,
        vram_strategy_name(st),
        !env_ok  ? " (the environment is malformed: the default assumed)"
        : capped ? ", with a cap"
                 : "");
    if (v == V_WARN) {
        uint64_t cap_mib = (uint64_t)ceil(1.1 * (double)r->peak_reserved / (double)MIB);
        snprintf(c->next, sizeof c->next,
                 "set VRAM_STRATEGY=growth, or cap the job with VRAM_MEMORY_LIMIT=%lluM "
                 "(its peak reserved under %s plus 10%%)",
                 (unsigned long long)cap_mib, vram_strategy_name(r->strategy));
    } else {
        snprintf(c->next, sizeof c->next, "nothing");
    }
}

static void
check_leak(struct report *rep, const struct an_result *r)
{
    char a[32], b[32];
    if (r->leak) {
        struct check *c = add_check(rep, "leak", V_PROBLEM);
        snprintf(
            c->evidence, sizeof c->evidence,
            "memory grew %s per iteration: the least live bytes of each iteration rise "
            "steadily over %zu iterations (R^2 %.2f)",
            fmt_size((uint64_t)llround(r->leak_bytes_per_iter), a, sizeof a),
            r->leak_iters_used, r->leak_r2);
        if (r->n_suspects > 0) {
            size_t same = 0;
            uint32_t lo = UINT32_MAX, hi = 0;
            for (size_t i = 0; i < r->n_suspects; i++)
                if (r->suspects[i].size == r->suspects[0].size) {
                    same++;
                    lo = r->suspects[i].born < lo ? r->suspects[i].born : lo;
                    hi = r->suspects[i].born > hi ? r->suspects[i].born : hi;
                }
            appendf(
                c->evidence, sizeof c->evidence,
                "; suspects: %zu allocations (%s) made after the first iteration are "
                "still alive at the end, the largest %zu x %s born in iterations %u..%u",
                r->n_suspects, fmt_size(r->suspect_bytes, b, sizeof b), same,
                fmt_size(r->suspects[0].size, a, sizeof a), lo + 1, hi + 1);
        }
        if (r->n_leak_sites > 0) {
            char head[700];
            appendf(c->evidence, sizeof c->evidence, "; the top call site: %.300s",
                    an_site_headline(r->trace, &r->leak_sites[0], head, sizeof head));
            if (r->leak_sites[0].held_by != NULL)
                appendf(c->evidence, sizeof c->evidence, ", held by %.300s",
                        r->leak_sites[0].held_by);
        }
        snprintf(
            c->next, sizeof c->next,
            "find what keeps them alive from step to step: a list that collects "
            "outputs or losses (keep loss.item() or a detached copy), a cache keyed by "
            "step; `vram analyze TRACE` lists the suspects");
        return;
    }
    struct check *c = add_check(rep, "leak", V_OK);
    if (r->leak_iters_used < 3)
        snprintf(c->evidence, sizeof c->evidence,
                 "no verdict: %zu iteration%s found (marks or a repeating pattern give "
                 "more)",
                 r->n_iters, r->n_iters == 1 ? "" : "s");
    else
        snprintf(
            c->evidence, sizeof c->evidence,
            "the least live bytes per iteration stay level (%s%s per iteration over %zu "
            "iterations)",
            r->leak_bytes_per_iter < 0 ? "-" : "+",
            fmt_size((uint64_t)llround(fabs(r->leak_bytes_per_iter)), a, sizeof a),
            r->leak_iters_used);
    snprintf(c->next, sizeof c->next,
             r->leak_iters_used < 3
                 ? "call vram_mark(\"step N\") at each step for a verdict"
                 : "nothing");
}

/* The three largest classes live at the OOM, into BUF. */
static void
oom_breakdown_text(const struct an_result *r, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t i = 0; i < r->n_oom_classes && i < 3; i++) {
        char lo[32], hi[32], b[32];
        const struct an_class *cl = &r->oom_classes[i];
        appendf(buf, len, "%s%llu x [%s, %s) = %s", i ? ", " : "",
                (unsigned long long)cl->count, fmt_size(cl->lo, lo, sizeof lo),
                cl->hi == UINT64_MAX ? "..." : fmt_size(cl->hi, hi, sizeof hi),
                fmt_size(cl->bytes, b, sizeof b));
    }
}

static void
check_oom(struct report *rep, const struct an_result *r)
{
    char a[32], b[32], c3[32], d[32];
    bool frag =
        r->oom_cause == AN_OOM_UNDER_CAP || r->oom_cause == AN_OOM_WITHIN_RESERVED;
    bool big = r->oom_cause == AN_OOM_OVER_CAP || r->oom_cause == AN_OOM_NEW_HIGH;
    uint64_t need = r->oom_live + r->oom_request;
    const char *against = r->oom_cap > 0 ? "the cap" : "the most the replay reserved";
    uint64_t bound = r->oom_cap > 0 ? r->oom_cap : r->oom_reserved;

    struct check *c = add_check(rep, "oom-fragmentation", frag ? V_PROBLEM : V_OK);
    if (frag) {
        snprintf(c->evidence, sizeof c->evidence,
                 "the last allocation (%s) failed with %s live: live + request = %s is "
                 "within %s (%s), so the memory was there but not in one piece",
                 fmt_size(r->oom_request, a, sizeof a),
                 fmt_size(r->oom_live, b, sizeof b), fmt_size(need, c3, sizeof c3),
                 against, fmt_size(bound, d, sizeof d));
        snprintf(
            c->next, sizeof c->next,
            "set VRAM_STRATEGY=expandable: free memory then never splits into regions "
            "that cannot merge");
    } else {
        snprintf(c->evidence, sizeof c->evidence, "%s",
                 r->ends_in_oom ? "the final OOM is not one of fragmentation (see "
                                  "oom-too-big)"
                                : "the trace does not end in an OOM");
        snprintf(c->next, sizeof c->next, "nothing");
    }

    c = add_check(rep, "oom-too-big", big ? V_PROBLEM : V_OK);
    if (big) {
        char parts[400];
        oom_breakdown_text(r, parts, sizeof parts);
        if (r->oom_live == 0)
            /* The first allocation already failed: nothing else was live. */
            snprintf(c->evidence, sizeof c->evidence,
                     "the last allocation (%s) was refused with nothing else live: it "
                     "alone exceeds %s (%s)",
                     fmt_size(r->oom_request, a, sizeof a), against,
                     fmt_size(bound, d, sizeof d));
        else
            snprintf(c->evidence, sizeof c->evidence,
                     "the last allocation (%s) failed with %s live: live + request = %s "
                     "exceeds %s (%s); live then: %s",
                     fmt_size(r->oom_request, a, sizeof a),
                     fmt_size(r->oom_live, b, sizeof b), fmt_size(need, c3, sizeof c3),
                     against, fmt_size(bound, d, sizeof d), parts);
        snprintf(
            c->next, sizeof c->next,
            "the job is too big for its memory: `vram plan` sizes it (a smaller batch, "
            "mixed precision, gradient accumulation or checkpointing), or give it a "
            "larger cap");
    } else {
        snprintf(c->evidence, sizeof c->evidence, "%s",
                 r->ends_in_oom ? "live + request fit: not a job too big for its memory"
                                : "the trace does not end in an OOM");
        snprintf(c->next, sizeof c->next, "nothing");
    }
}

static void
check_balance(struct report *rep, const struct an_result *r)
{
    char a[32];
    if (r->n_devices < 2) {
        struct check *c = add_check(rep, "multi-gpu", V_OK);
        snprintf(c->evidence, sizeof c->evidence, "the trace uses one device");
        snprintf(c->next, sizeof c->next, "nothing");
        return;
    }
    uint64_t lo = UINT64_MAX, hi = 0;
    int dlo = 0, dhi = 0;
    for (int d = 0; d < r->n_devices; d++) {
        if (r->device_peaks[d] < lo) {
            lo = r->device_peaks[d];
            dlo = d;
        }
        if (r->device_peaks[d] > hi) {
            hi = r->device_peaks[d];
            dhi = d;
        }
    }
    bool uneven = hi > 0 && (double)(hi - lo) > UNEVEN_SHARE * (double)hi;
    struct check *c = add_check(rep, "multi-gpu", uneven ? V_WARN : V_OK);
    snprintf(c->evidence, sizeof c->evidence, "peak live per device:");
    for (int d = 0; d < r->n_devices; d++)
        appendf(c->evidence, sizeof c->evidence, " %d: %s%s", d,
                fmt_size(r->device_peaks[d], a, sizeof a),
                d + 1 < r->n_devices ? "," : "");
    if (uneven) {
        appendf(c->evidence, sizeof c->evidence,
                "; device %d peaks %.0f%% below device %d", dlo,
                100.0 * (double)(hi - lo) / (double)hi, dhi);
        snprintf(
            c->next, sizeof c->next,
            "check how the work is split (the data-parallel strategy, a device that "
            "also holds the loss, the optimizer or the input pipeline); caps sized per "
            "device (VRAM_MEMORY_LIMIT=0:6G,1:4G) keep the small ones from idling");
    } else {
        snprintf(c->next, sizeof c->next, "nothing");
    }
}

/* ------------------------------------------------------------------ */
/* Output                                                               */
/* ------------------------------------------------------------------ */

static int
print_report(const struct report *rep, bool json)
{
    int problems = 0, warnings = 0;
    for (int i = 0; i < rep->n; i++) {
        problems += rep->c[i].v == V_PROBLEM;
        warnings += rep->c[i].v == V_WARN;
    }
    if (json) {
        struct json_object *o = json_object_new_object(), *arr = json_object_new_array();
        for (int i = 0; i < rep->n; i++) {
            struct json_object *c = json_object_new_object();
            json_object_object_add(c, "name", json_object_new_string(rep->c[i].name));
            json_object_object_add(c, "status",
                                   json_object_new_string(verdict_names[rep->c[i].v]));
            json_object_object_add(c, "evidence",
                                   json_object_new_string(rep->c[i].evidence));
            json_object_object_add(c, "next", json_object_new_string(rep->c[i].next));
            json_object_array_add(arr, c);
        }
        json_object_object_add(o, "checks", arr);
        json_object_object_add(o, "problems", json_object_new_int(problems));
        json_object_object_add(o, "warnings", json_object_new_int(warnings));
        printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
    } else {
        for (int i = 0; i < rep->n; i++)
            printf("[%s] %s: %s. Next: %s.\n", verdict_names[rep->c[i].v], rep->c[i].name,
                   rep->c[i].evidence, rep->c[i].next);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("writing the report: %s", strerror(errno));
        return 1;
    }
    return problems > 0 ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* The command                                                          */
/* ------------------------------------------------------------------ */

static int
doctor_trace(const char *path, const struct an_options *opts, bool json)
{
    struct trace *t = NULL;
    struct an_result *r = NULL, *pre = NULL;
    int rc = cli_load_trace(path, &t);
    if (rc == 0)
        rc = cli_analyze(t, opts, &r);
    if (rc == 0) {
        struct an_options p = *opts;
        p.strategy = VRAM_STRATEGY_PREALLOCATE;
        rc = cli_analyze(t, &p, &pre);
    }
    if (rc == 0) {
        struct report rep;
        rep.n = 0;
        check_preallocation_trace(&rep, r, pre);
        check_leak(&rep, r);
        check_oom(&rep, r);
        check_balance(&rep, r);
        rc = print_report(&rep, json);
    }
    an_result_free(pre);
    an_result_free(r);
    trace_free(t);
    return rc;
}

static int
doctor_environment(bool json)
{
    struct report rep;
    struct vram_env env;
    bool env_ok = false;
    rep.n = 0;
    check_environment(&rep, &env_ok, &env);
    check_preallocation_env(&rep, env_ok, &env);
    check_devices(&rep, env_ok);
    return print_report(&rep, json);
}


/* The trace of `vram doctor`, or --strategy or --limit given
** (cliopt_handler; the table stores their values). */
static int
doctor_arg(void *ctx, const struct cli_opt *o, const char *value)
{
    struct doctor_args *a = ctx;
    if (o != NULL) {
        a->trace_opts = true;
        return CLIOPT_GO_ON;
    }
    if (a->path != NULL)
        return cliopt_usage_error(&doctor_cmd, "one trace at a time");
    a->path = value;
    return CLIOPT_GO_ON;
}

int
cmd_doctor(int argc, char **argv)
{
    struct doctor_args a = {
        .opts = {.strategy = VRAM_STRATEGY_GROWTH, .device_memory = 0, .limit = 0}};
    int rc = cliopt_parse(&doctor_cmd, argc, argv, doctor_arg, &a, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;
    if (a.path == NULL && a.trace_opts)
        return cliopt_usage_error(&doctor_cmd, "--strategy and --limit apply to a trace");
    return a.path != NULL ? doctor_trace(a.path, &a.opts, a.json)
                          : doctor_environment(a.json);
}
