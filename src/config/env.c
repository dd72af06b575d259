/*
** env.c -- the one file that reads the environment (see env.h).
**
** VRAM_ENV_LIST is the only list of variables. The loader, `vram env` and
** docs/ENVIRONMENT.md (`vram env --markdown`) are generated from it, so
** the parser, the printout and the documentation cannot disagree.
** Defaults are written as the user would write them and go through the
** same parsers as the user's values.
*/
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/env.h"
#include "core/error.h"
#include "util/size.h"

/* ------------------------------------------------------------------ */
/* The table                                                            */
/* ------------------------------------------------------------------ */

/*
** What the loader fills: the public result, plus the two growth switches,
** which only matter while the strategy is resolved.
*/
struct env_state {
    struct vram_env env;
    int allow_growth;    /* VRAM_ALLOW_GROWTH: -1 unset, 0 false, 1 true */
    int tf_force_growth; /* TF_FORCE_GPU_ALLOW_GROWTH: likewise */
};

/*
** The kinds of value. Each has a parser, a printer and a C type: the
** field named in a row must have that type (checked at compile time
** below, so that a row cannot make a parser write the wrong field).
*/
enum env_kind {
    KIND_BACKEND,  /* vram_backend_kind: "sim" or "cuda" */
    KIND_DEVICES,  /* int, 1..ENV_MAX_DEVICES */
    KIND_SIZE,     /* uint64_t, bytes, > 0 */
    KIND_STRATEGY, /* vram_strategy, by vram_strategy_parse */
    KIND_TRISTATE, /* int: -1 unset, 0 false, 1 true */
    KIND_BOOL,     /* bool */
    KIND_FRACTION, /* double in (0, 1]; 0 = unset */
    KIND_LIMIT,    /* the whole struct vram_env: limit_all or limit[] */
    KIND_MIB,      /* int64_t, MiB, >= 0; -1 = unset */
    KIND_LEVEL,    /* int, 0..4 */
    KIND_PATH      /* char[512], NUL-terminated; "" = unset */
};

typedef vram_backend_kind KIND_BACKEND_type;
typedef int KIND_DEVICES_type;
typedef uint64_t KIND_SIZE_type;
typedef vram_strategy KIND_STRATEGY_type;
typedef int KIND_TRISTATE_type;
typedef bool KIND_BOOL_type;
typedef double KIND_FRACTION_type;
typedef struct vram_env KIND_LIMIT_type;
typedef int64_t KIND_MIB_type;
typedef int KIND_LEVEL_type;
typedef char KIND_PATH_type[512];

#define ENV_BOOL_WORDS "true or false; also 1/0, yes/no, on/off"

/*
** X(NAME, kind, field of struct env_state, default ("" = unset),
**   accepted values (for messages and docs), one-line doc).
** The order is the order of `vram env` and of the docs.
*/
#define VRAM_ENV_LIST(X)                                                                 \
    X(VRAM_BACKEND, KIND_BACKEND, env.backend, "cuda", "sim or cuda",                    \
      "Device backend: the CUDA driver, loaded at run time, or the simulated device.")   \
    X(VRAM_SIM_DEVICES, KIND_DEVICES, env.sim_devices, "1", "an integer from 1 to 64",   \
      "Physical devices of the simulated backend.")                                      \
    X(VRAM_SIM_MEMORY, KIND_SIZE, env.sim_memory, "143771M",                             \
      "a size above 0, e.g. 80G or 143771M",                                             \
      "Memory of each simulated device; the default is an NVIDIA H200's.")               \
    X(VRAM_STRATEGY, KIND_STRATEGY, env.strategy, "preallocate",                         \
      "preallocate, growth, growth:tf-compat or expandable",                                         \
      "How each logical device obtains memory: its whole cap at the first allocation "   \
      "(TensorFlow's default), growth as needed (vram's policy), TensorFlow's "          \
      "allow_growth (2 MiB regions, each twice the last), or expandable (one virtual "   \
      "range backed granule by granule where live blocks are).")                         \
    X(VRAM_ALLOW_GROWTH, KIND_TRISTATE, allow_growth, "", ENV_BOOL_WORDS,                \
      "true selects the growth strategy unless VRAM_STRATEGY names a growth strategy; "  \
      "false selects preallocate. Must agree with VRAM_STRATEGY and "                    \
      "TF_FORCE_GPU_ALLOW_GROWTH.")                                                      \
    X(TF_FORCE_GPU_ALLOW_GROWTH, KIND_TRISTATE, tf_force_growth, "", ENV_BOOL_WORDS,     \
      "TensorFlow's own switch, honoured exactly like VRAM_ALLOW_GROWTH.")               \
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
      "Record every allocation and free to this trace file (input of vram replay).")     \
    X(VRAM_OOM_DUMP, KIND_BOOL, env.oom_dump, "false", ENV_BOOL_WORDS,                   \
      "On out of memory, also write the full allocator dump (bins, regions, block "      \
      "map) to the log.")

/* Every row's field has its kind's type. */
#define ENV_CHECK_TYPE(name, kind, field, def, expect, doc)                              \
    _Static_assert(                                                                      \
        _Generic(&((struct env_state *)0)->field, kind##_type * : 1, default : 0),       \
        #name ": field type does not match kind " #kind);
VRAM_ENV_LIST(ENV_CHECK_TYPE)
#undef ENV_CHECK_TYPE

/* ENV_VRAM_BACKEND, ...: a variable's row in env_vars. */
#define ENV_ID(name, ...) ENV_##name,
enum env_id { VRAM_ENV_LIST(ENV_ID) ENV_COUNT };
#undef ENV_ID

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

/* One load in progress: the state being filled and the raw values. */
struct env_load {
    struct env_state s;
    const char *text[ENV_COUNT]; /* the environment's value; NULL if unset or "" */
};

/* ------------------------------------------------------------------ */
/* Parsers. Each writes DST only on success; on failure it puts the     */
/* reason (without the variable's name) into WHY.                       */
/* ------------------------------------------------------------------ */

/* A decimal integer in MIN..MAX: digits only, no sign, no space. */
static bool
parse_int(const char *text, int64_t min, int64_t max, int64_t *out, char *why, size_t len)
{
    int64_t v = 0;
    const char *p = text;
    if (*p == '\0') {
        snprintf(why, len, "not a whole number");
        return false;
    }
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9') {
            snprintf(why, len, "not a whole number");
            return false;
        }
        int d = *p - '0';
        if (v > (INT64_MAX - d) / 10)
            v = INT64_MAX; /* saturate: it is out of range anyway */
        else
            v = v * 10 + d;
    }
    if (v < min || v > max) {
        snprintf(why, len, "out of range %" PRId64 "..%" PRId64, min, max);
        return false;
    }
    *out = v;
    return true;
}

static bool
parse_backend(const char *text, vram_backend_kind *out, char *why, size_t len)
{
    if (strcmp(text, "sim") == 0)
        *out = VRAM_BACKEND_SIM;
    else if (strcmp(text, "cuda") == 0)
        *out = VRAM_BACKEND_CUDA;
    else {
        snprintf(why, len, "unknown backend");
        return false;
    }
    return true;
}

/* A boolean word, case-insensitive; -1 if TEXT is none. */
static int
bool_word(const char *text)
{
    static const struct {
        const char *word;
        int value;
    } words[] = {{"true", 1}, {"false", 0}, {"1", 1},  {"0", 0},
                 {"yes", 1},  {"no", 0},    {"on", 1}, {"off", 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcasecmp(text, words[i].word) == 0)
            return words[i].value;
    return -1;
}

/* Copy the thread's last error (a size or fraction parser's reason) into
** WHY, before anything overwrites it. */
static void
take_last_error(char *why, size_t len)
{
    snprintf(why, len, "%s", vram_last_error());
}

/*
** The caps of one device: sizes above 0 joined by '+', S..S+N (not
** NUL-terminated: a piece of the whole value).
*/
static bool
parse_caps(const char *s, size_t n, struct env_device_limit *out, char *why, size_t len)
{
    struct env_device_limit lim = {0};
    const char *end = s + n;
    for (const char *p = s;;) {
        const char *plus = memchr(p, '+', (size_t)(end - p));
        const char *stop = plus != NULL ? plus : end;
        size_t piece = (size_t)(stop - p);
        char buf[128];
        if (piece == 0) {
            snprintf(why, len, "empty size (caps are joined by single '+')");
            return false;
        }
        if (piece >= sizeof buf) {
            snprintf(why, len, "a size of more than %zu characters", sizeof buf - 1);
            return false;
        }
        if (lim.n == VRAM_MAX_LOGICAL) {
            snprintf(why, len, "more than %d logical devices on one device",
                     VRAM_MAX_LOGICAL);
            return false;
        }
        memcpy(buf, p, piece);
        buf[piece] = '\0';
        uint64_t bytes;
        if (size_parse(buf, &bytes) != VRAM_OK) {
            take_last_error(why, len);
            return false;
        }
        if (bytes == 0) {
            char shown[TEXT_EXCERPT_LEN];
            snprintf(why, len, "'%s': a cap must be more than 0",
                     text_excerpt(buf, shown, sizeof shown));
            return false;
        }
        lim.bytes[lim.n++] = bytes;
        if (plus == NULL)
            break;
        p = plus + 1;
    }
    *out = lim;
    return true;
}

/*
** VRAM_MEMORY_LIMIT: either one plain item ("6G", "3G+3G") for every
** device, or a comma-separated list of keyed items ("0:6G,1:3G+3G").
** The two are never mixed: a value with any ':' is a keyed list.
*/
static bool
parse_limit(const char *text, struct vram_env *env, char *why, size_t len)
{
    struct env_device_limit all = {0};
    struct env_device_limit per[ENV_MAX_DEVICES];
    memset(per, 0, sizeof per);
    bool keyed = strchr(text, ':') != NULL;
    char shown[TEXT_EXCERPT_LEN];

    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma != NULL ? comma : p + strlen(p);
        size_t n = (size_t)(end - p);
        if (n == 0) {
            snprintf(why, len, "empty item in the list");
            return false;
        }
        if (!keyed) {
            if (comma != NULL) {
                snprintf(why, len, "a list needs device ordinals (e.g. 0:6G,1:4G)");
                return false;
            }
            if (!parse_caps(p, n, &all, why, len))
                return false;
        } else {
            const char *colon = memchr(p, ':', n);
            char item[TEXT_EXCERPT_LEN];
            /* The excerpt of the item alone: stop it at the comma. */
            size_t show_n = n < sizeof item - 1 ? n : sizeof item - 1;
            memcpy(item, p, show_n);
            item[show_n] = '\0';
            text_excerpt(item, shown, sizeof shown);
            if (colon == NULL) {
                snprintf(why, len,
                         "'%s' has no device ordinal (plain and per-device items "
                         "cannot be mixed)",
                         shown);
                return false;
            }
            int ord = 0;
            if (colon == p) {
                snprintf(why, len, "'%s': missing device ordinal before ':'", shown);
                return false;
            }
            for (const char *q = p; q < colon; q++) {
                if (*q < '0' || *q > '9') {
                    snprintf(why, len, "'%s': device ordinal is not a whole number",
                             shown);
                    return false;
                }
                ord = ord * 10 + (*q - '0');
                if (ord >= ENV_MAX_DEVICES) {
                    snprintf(why, len, "'%s': device ordinal out of range 0..%d", shown,
                             ENV_MAX_DEVICES - 1);
                    return false;
                }
            }
            if (per[ord].n != 0) {
                snprintf(why, len, "device %d given twice", ord);
                return false;
            }
            if (!parse_caps(colon + 1, (size_t)(end - colon - 1), &per[ord], why, len))
                return false;
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    env->limit_all = all;
    memcpy(env->limit, per, sizeof per);
    return true;
}

/*
** Parse TEXT as the value of variable ID into L->s. On failure:
** VRAM_E_CONFIG with the last error
**   NAME='value': reason (expected ...)
*/
static vram_status
parse_value(struct env_load *L, enum env_id id, const char *text)
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
        ok = parse_backend(text, dst, why, sizeof why);
        break;
    case KIND_DEVICES:
    case KIND_LEVEL:
        ok =
            parse_int(text, v->kind == KIND_DEVICES ? 1 : 0,
                      v->kind == KIND_DEVICES ? ENV_MAX_DEVICES : 4, &i, why, sizeof why);
        if (ok)
            *(int *)dst = (int)i;
        break;
    case KIND_SIZE:
        if (size_parse(text, &u) != VRAM_OK)
            take_last_error(why, sizeof why);
        else if (u == 0)
            snprintf(why, sizeof why, "must be more than 0");
        else {
            *(uint64_t *)dst = u;
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
        int b = bool_word(text);
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
            take_last_error(why, sizeof why);
        break;
    case KIND_LIMIT:
        ok = parse_limit(text, dst, why, sizeof why);
        break;
    case KIND_MIB:
        /* Bounded so that the reserve in bytes still fits an int64_t. */
        ok = parse_int(text, 0, INT64_MAX >> 20, &i, why, sizeof why);
        if (ok)
            *(int64_t *)dst = i;
        break;
    case KIND_PATH: {
        size_t n = strlen(text);
        ok = n < sizeof(KIND_PATH_type);
        if (ok)
            memcpy(dst, text, n + 1);
        else
            snprintf(why, sizeof why, "path longer than %zu bytes",
                     sizeof(KIND_PATH_type) - 1);
        break;
    }
    }
    if (ok)
        return VRAM_OK;
    char shown[TEXT_EXCERPT_LEN];
    return error_set(VRAM_E_CONFIG, "%s='%s': %s (expected %s)", v->name,
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

/* Start L: every field unset, every raw value read (empty = unset). */
static void
load_begin(struct env_load *L, env_getter get, void *user)
{
    memset(L, 0, sizeof *L);
    L->s.env.reserve_mb = -1;
    L->s.allow_growth = -1;
    L->s.tf_force_growth = -1;
    if (get == NULL)
        get = getenv_getter;
    for (int id = 0; id < ENV_COUNT; id++) {
        const char *t = get(env_vars[id].name, user);
        L->text[id] = (t != NULL && t[0] != '\0') ? t : NULL;
    }
}

/* Variable ID's value from the environment, else its default. */
static vram_status
load_var(struct env_load *L, enum env_id id)
{
    if (L->text[id] != NULL)
        return parse_value(L, id, L->text[id]);
    if (env_vars[id].def[0] != '\0')
        return parse_value(L, id, env_vars[id].def);
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
    if (out == NULL)
        return error_set(VRAM_E_INVALID, "env_load: OUT is NULL");
    /* About 10 KiB: on the heap would need a failure path of its own. */
    struct env_load L;
    load_begin(&L, get, user);
    for (int id = 0; id < ENV_COUNT; id++) {
        vram_status st = load_var(&L, (enum env_id)id);
        if (st != VRAM_OK)
            return st;
    }
    vram_status st = resolve_strategy(&L);
    if (st != VRAM_OK)
        return st;
    *out = L.s.env;
    return VRAM_OK;
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

/* Append to BUF (LEN bytes, holding a string) as snprintf would; once
** full, the tail is cut, which only shortens a printed value. */
static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
append(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

static void
format_caps(const struct env_device_limit *lim, char *buf, size_t len)
{
    char size[32];
    for (int k = 0; k < lim->n; k++)
        append(buf, len, "%s%s", k > 0 ? " + " : "",
               size_format(lim->bytes[k], size, sizeof size));
}

static void
format_limit(const struct vram_env *env, char *buf, size_t len)
{
    if (env->limit_all.n > 0) {
        format_caps(&env->limit_all, buf, len);
        append(buf, len, " on every device");
        return;
    }
    bool any = false;
    for (int d = 0; d < ENV_MAX_DEVICES; d++) {
        if (env->limit[d].n == 0)
            continue;
        append(buf, len, "%sdevice %d: ", any ? ", " : "", d);
        format_caps(&env->limit[d], buf, len);
        any = true;
    }
    if (!any)
        append(buf, len, "unset");
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
        append(buf, len, "%s",
               *(const vram_backend_kind *)src == VRAM_BACKEND_SIM ? "sim" : "cuda");
        break;
    case KIND_DEVICES:
    case KIND_LEVEL:
        append(buf, len, "%d", *(const int *)src);
        break;
    case KIND_SIZE:
        size_format(*(const uint64_t *)src, buf, len);
        break;
    case KIND_STRATEGY: {
        const char *name = vram_strategy_name(*(const vram_strategy *)src);
        append(buf, len, "%s", name != NULL ? name : "?");
        break;
    }
    case KIND_TRISTATE: {
        int b = *(const int *)src;
        append(buf, len, "%s", b < 0 ? "unset" : b ? "true" : "false");
        break;
    }
    case KIND_BOOL:
        append(buf, len, "%s", *(const bool *)src ? "true" : "false");
        break;
    case KIND_FRACTION: {
        double f = *(const double *)src;
        if (f > 0)
            append(buf, len, "%g", f);
        else
            append(buf, len, "unset");
        break;
    }
    case KIND_LIMIT:
        format_limit(src, buf, len);
        break;
    case KIND_MIB: {
        int64_t mb = *(const int64_t *)src;
        if (mb >= 0)
            append(buf, len, "%" PRId64 " MiB", mb);
        else
            append(buf, len, "unset");
        break;
    }
    case KIND_PATH: {
        const char *path = src;
        append(buf, len, "%s", path[0] != '\0' ? path : "unset");
        break;
    }
    }
}

void
env_print(FILE *out, env_getter get, void *user)
{
    struct env_load L;
    char value[ENV_COUNT][VALUE_LEN];
    bool bad[ENV_COUNT];

    load_begin(&L, get, user);
    for (int id = 0; id < ENV_COUNT; id++) {
        bad[id] = load_var(&L, (enum env_id)id) != VRAM_OK;
        if (bad[id])
            snprintf(value[id], VALUE_LEN, "error: %s", vram_last_error());
        else
            format_value(&L, (enum env_id)id, value[id], VALUE_LEN);
    }

    /* The strategy row shows the strategy in force, wherever it came from. */
    if (!bad[ENV_VRAM_STRATEGY]) {
        if (resolve_strategy(&L) != VRAM_OK) {
            bad[ENV_VRAM_STRATEGY] = true;
            snprintf(value[ENV_VRAM_STRATEGY], VALUE_LEN, "error: %s", vram_last_error());
        } else {
            enum env_id id = ENV_VRAM_STRATEGY;
            format_value(&L, id, value[id], VALUE_LEN);
            if (L.text[id] == NULL && L.s.env.strategy_set)
                append(value[id], VALUE_LEN, " (set by %s)",
                       L.s.allow_growth >= 0 ? "VRAM_ALLOW_GROWTH"
                                             : "TF_FORCE_GPU_ALLOW_GROWTH");
        }
    }

    int name_w = (int)strlen("VARIABLE"), value_w = (int)strlen("VALUE");
    for (int id = 0; id < ENV_COUNT; id++) {
        int n = (int)strlen(env_vars[id].name);
        name_w = n > name_w ? n : name_w;
        n = (int)strlen(value[id]);
        if (!bad[id] && n > value_w)
            value_w = n < 40 ? n : 40; /* a long path should not push every row */
    }
    fprintf(out, "%-*s  %-*s  %s\n", name_w, "VARIABLE", value_w, "VALUE", "SOURCE");
    for (int id = 0; id < ENV_COUNT; id++) {
        if (bad[id])
            fprintf(out, "%-*s  %s\n", name_w, env_vars[id].name, value[id]);
        else
            fprintf(out, "%-*s  %-*s  %s\n", name_w, env_vars[id].name, value_w,
                    value[id], L.text[id] != NULL ? "environment" : "default");
    }
}

void
env_markdown(FILE *out)
{
    fputs(
        "# Environment variables\n"
        "\n"
        "<!-- Generated by `vram env --markdown` from the table in src/config/env.c;\n"
        "     edit that table, not this file. -->\n"
        "\n"
        "vram reads these variables once, when a context is opened (`vram_open`),\n"
        "unless `vram_options.ignore_environment` is set. `vram env` prints the value\n"
        "each one has now and where it came from; `vram env --check` exits with status\n"
        "2 and names the first malformed one.\n"
        "\n"
        "- Sizes are 1024-based: `6G`, `6GiB` and `6GB` all mean 6 x 1024^3 bytes.\n"
        "  Units are K, M, G, T and P; `1.5G` is allowed; a plain number is bytes.\n"
        "- Limits fail closed: a malformed value makes `vram_open` fail with\n"
        "  `VRAM_E_CONFIG` and a one-line message naming the variable. It never means\n"
        "  \"unlimited\".\n"
        "- An empty value is the same as an unset one.\n"
        "\n"
        "| Variable | Default | Meaning |\n"
        "|---|---|---|\n",
        out);
    for (int id = 0; id < ENV_COUNT; id++) {
        const struct env_var *v = &env_vars[id];
        fprintf(out, "| `%s` | ", v->name);
        if (v->def[0] != '\0')
            fprintf(out, "`%s`", v->def);
        else
            fputs("unset", out);
        fprintf(out, " | %s Values: %s. |\n", v->doc, v->expect);
    }
}
