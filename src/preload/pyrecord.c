/* SPDX-License-Identifier: MIT */
/*
** pyrecord.c -- the recording's Python side: in a Python program recorded
** with call sites, the file VRAM_TRACE_HOLDERS names (vram's
** python/vram/holders.py) is loaded as a module of its own and given one
** function of this library, through which it writes marks (vram.mark
** under vram record) and what holds each live allocation ("#@held" lines,
** docs/TRACE_FORMAT.md), and learns the live allocations (the table of
** track.c). The library exports nothing for it: the function is a
** PyCFunction made here.
**
** The module is loaded by a pending call (Py_AddPendingCall), which the
** main thread runs at its next chance outside any hook: its imports can
** run finalizers that free GPU memory, which a framework would do under
** the lock it holds while it allocates. Everything here runs with the GIL
** held, on the thread Python runs it on. A failure to load is one line on
** standard error; the recording goes on without holders.
*/
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "preload/preload.h"
#include "preload/pyapi.h"
#include "preload/pyrecord.h"
#include "preload/track.h"
#include "trace/trace.h"

/* Code objects whose returns are watched (before Python 3.12). */
#define WATCH_MAX 4

static struct {
    struct trace_writer *w; /* the recording's writer; NULL in a forked child */
    char path[512];         /* VRAM_TRACE_HOLDERS; "" = none */
    int tool;               /* sys.monitoring tool id (3.12+), else -1 */
    int asked;              /* the module's loading is on its way (atomic) */
    void *watch_code[WATCH_MAX]; /* references kept */
    void *watch_fn[WATCH_MAX];
    int n_watch;
} R = {.tool = -1};

void
pyrecord_init(struct trace_writer *w, const char *holders)
{
    R.w = w;
    if (holders != NULL)
        snprintf(R.path, sizeof R.path, "%s", holders);
}

void
pyrecord_fork_child(void)
{
    R.w = NULL;
}

/* A new reference to None. */
static void *
none(void)
{
    py.incref(py.none);
    return py.none;
}

/* The text of Python object O (borrowed) into BUF; "" when it has none. */
static const char *
text_of(void *o, char *buf, size_t len)
{
    ssize_t n = 0;
    const char *u = o != NULL ? py.as_utf8(o, &n) : NULL;
    if (u == NULL) {
        py.err_clear_fn();
        buf[0] = '\0';
        return buf;
    }
    snprintf(buf, len, "%.*s", (int)(n < (ssize_t)len ? n : (ssize_t)len - 1), u);
    return buf;
}

/* "live": "id address bytes" lines of the live device allocations. */
static void *
live_text(void)
{
    size_t n = track_list(TRACK_PTR, NULL, 0), room = n + 64;
    struct track *v = malloc(room * sizeof *v);
    char *text = malloc(room * 64 + 1);
    void *out = NULL;
    if (v != NULL && text != NULL) {
        n = track_list(TRACK_PTR, v, room);
        size_t used = 0;
        for (size_t i = 0; i < n && i < room; i++) {
            if (v[i].dev < 0)
                continue;
            int k = snprintf(text + used, room * 64 + 1 - used, "%" PRIu64 " %" PRIu64
                             " %" PRIu64 "\n", v[i].trace_id, v[i].key, v[i].bytes);
            if (k > 0)
                used += (size_t)k;
        }
        out = py.from_utf8(text, (ssize_t)used);
    }
    free(v);
    free(text);
    if (out == NULL) {
        py.err_clear_fn();
        return none();
    }
    return out;
}

/* "held": "id<TAB>text" lines into the trace's "#@held" lines. */
static void
held_lines(const char *text, ssize_t n)
{
    const char *p = text, *end = text + n;
    while (p < end && R.w != NULL) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *stop = eol != NULL ? eol : end;
        const char *tab = memchr(p, '\t', (size_t)(stop - p));
        char *num_end = NULL;
        uint64_t id = strtoull(p, &num_end, 10);
        if (tab != NULL && num_end == tab && tab + 1 < stop) {
            char line[1024];
            snprintf(line, sizeof line, "%.*s", (int)(stop - tab - 1), tab + 1);
            (void)trace_writer_held(R.w, id, line); /* a failed write is sticky */
        }
        p = stop + (eol != NULL);
    }
}

/* The function the module is given: (op, ...) as holders.py's Recorder
** says. Never raises: a call it cannot serve returns None. */
static void *
record_call(void *self, void *const *args, ssize_t nargs)
{
    char op[16], label[256];
    (void)self;
    if (nargs < 1)
        return none();
    text_of(args[0], op, sizeof op);
    if (strcmp(op, "live") == 0)
        return live_text();
    if (strcmp(op, "mark") == 0 && nargs >= 2 && R.w != NULL) {
        if (text_of(args[1], label, sizeof label)[0] != '\0')
            (void)trace_writer_mark(R.w, now_wall_us(), 0, label);
    } else if (strcmp(op, "held") == 0 && nargs >= 2) {
        ssize_t n = 0;
        const char *u = py.as_utf8(args[1], &n);
        if (u != NULL)
            held_lines(u, n);
        else
            py.err_clear_fn();
    } else if (strcmp(op, "watch") == 0 && nargs >= 3 && R.n_watch < WATCH_MAX) {
        py.incref(args[1]);
        py.incref(args[2]);
        R.watch_code[R.n_watch] = args[1];
        R.watch_fn[R.n_watch] = args[2];
        R.n_watch++;
    }
    return none();
}

static struct py_method_def record_def = {"vram_record", NULL, PY_METH_FASTCALL,
                                          "vram record's Python side"};

/* One line on standard error for a failed load: its exception's text. */
static void
say_failed(const char *what)
{
    void *type = NULL, *value = NULL, *tb = NULL;
    char why[300] = "", line[1024];
    py.err_fetch(&type, &value, &tb);
    if (value != NULL && py.str != NULL) {
        void *s = py.str(value);
        if (s != NULL) {
            text_of(s, why, sizeof why);
            py.decref(s);
        }
    }
    py.err_clear_fn();
    if (type != NULL)
        py.decref(type);
    if (value != NULL)
        py.decref(value);
    if (tb != NULL)
        py.decref(tb);
    snprintf(line, sizeof line,
             "vram: record: VRAM_TRACE_HOLDERS=%s: %s%s%s; what holds memory is not named",
             R.path, what, why[0] != '\0' ? ": " : "", why);
    say(line);
}

/* Drop O (a new reference, or NULL after a failed call); false for NULL. */
static bool
dropped(void *o)
{
    if (o == NULL)
        return false;
    py.decref(o);
    return true;
}

/*
** The pending call: load the file as module _vram_holders and call its
** install(function, tool). The GIL is held, on the main thread, outside
** any hook; an exception the program has pending survives.
*/
static int
install_pending(void *arg)
{
    void *type, *value, *tb, *util = NULL, *spec = NULL, *mod = NULL, *loader = NULL;
    void *fn = NULL;
    void *(*call)(void *, void *const *, ssize_t) = record_call;
    (void)arg;
    if (R.w == NULL)
        return 0;
    py.err_fetch(&type, &value, &tb);
    memcpy(&record_def.meth, &call, sizeof call);
    const char *what = "cannot load it";
    bool ok = (util = py.import("importlib.util")) != NULL &&
              (spec = py.call_method(util, "spec_from_file_location", "ss",
                                     "_vram_holders", R.path)) != NULL &&
              spec != py.none &&
              (mod = py.call_method(util, "module_from_spec", "O", spec)) != NULL &&
              (loader = py.getattr(spec, "loader")) != NULL &&
              dropped(py.call_method(loader, "exec_module", "O", mod));
    if (ok) {
        what = "its install() failed";
        ok = (fn = py.cfunction_new(&record_def, NULL, NULL)) != NULL &&
             dropped(py.call_method(mod, "install", "Oi", fn, R.tool));
    }
    if (!ok && spec == py.none)
        what = "not a Python file";
    if (!ok)
        say_failed(what);
    void *refs[] = {fn, loader, mod, spec, util};
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++)
        if (refs[k] != NULL)
            py.decref(refs[k]);
    py.err_restore(type, value, tb);
    return 0;
}

void
pyrecord_ask(int tool, bool now)
{
    if (R.path[0] == '\0' || R.w == NULL || py.add_pending == NULL ||
        py.import == NULL || py.call_method == NULL || py.cfunction_new == NULL ||
        py.from_utf8 == NULL || py.none == NULL ||
        __atomic_exchange_n(&R.asked, 1, __ATOMIC_RELAXED))
        return;
    R.tool = tool;
    if (now)
        install_pending(NULL);
    else if (py.add_pending(install_pending, NULL) != 0)
        __atomic_store_n(&R.asked, 0, __ATOMIC_RELAXED); /* queue full: later */
}

void
pyrecord_return(void *frame)
{
    if (R.n_watch == 0)
        return;
    void *code = py.frame_code(frame);
    py.decref(code); /* the frame keeps it alive */
    for (int k = 0; k < R.n_watch; k++) {
        if (R.watch_code[k] != code || py.call_objargs == NULL)
            continue;
        void *type, *value, *tb;
        py.err_fetch(&type, &value, &tb); /* a return by an exception keeps it */
        void *r = py.call_objargs(R.watch_fn[k], frame, NULL);
        if (r != NULL)
            py.decref(r);
        else
            py.err_clear_fn();
        py.err_restore(type, value, tb);
    }
}
