/* SPDX-License-Identifier: MIT */
/*
** callsite.c -- what made an allocation: the call site written with each
** 'a' and 'o' event when the trace carries call sites (VRAM_TRACE_SITES).
**
** Two sources, both read in the allocating thread:
**   - Python: when the process runs CPython (Py_IsInitialized found with
**     dlsym in the running process: nothing is linked, and a program
**     without Python finds nothing and pays one failed lookup at start),
**     and only when this thread holds the GIL (PyGILState_Check), the
**     innermost PY_DEPTH frames, through functions of the C API that
**     3.9 to 3.13 all export (PyEval_GetFrame, PyFrame_GetCode,
**     PyFrame_GetBack, PyFrame_GetLasti from 3.11, else
**     PyFrame_GetLineNumber): no structure layout is read.
**     A thread that runs without the GIL (PyTorch releases it around
**     every operator; autograd's worker threads never hold it) cannot be
**     read safely: reading frames needs the GIL, and taking the GIL here
**     could deadlock against a thread that holds it and waits for a lock
**     our caller holds. So the library watches where Python calls into
**     native code: at the first allocation it installs a profile function
**     (PyEval_SetProfileAllThreads from 3.12, else PyEval_SetProfile on
**     the main thread, through Py_AddPendingCall when the allocating
**     thread lacks the GIL), which at each call of a builtin (a C_CALL
**     event: torch.zeros, F.linear, a tensor method) notes the calling
**     line on its thread, with the GIL held. An allocation without the
**     GIL gets that line (the native call it is part of), behind a note
**     saying so; a thread that never ran Python gets a note naming it.
**     From 3.12 the watch is a sys.monitoring CALL callback instead (tool
**     id 4, else 3: the ids no profiler, debugger or coverage tool takes
**     by convention, so cProfile and sys.setprofile keep working): it
**     sees every call of a callable that is not a Python function, which
**     covers what C_CALL misses (a jitted JAX function, a ctypes
**     function pointer: C types that are not builtins). Before 3.12 the
**     profile function replaces one set with sys.setprofile (the
**     recording is that process's profiler; --no-sites leaves it alone).
**     Each watched call is keyed by its two innermost frames; its first
**     8 hits and one in 32 after (at random) read the whole stack again,
**     and a key whose outer frames turn out to differ (a library helper
**     reached from several lines of the program: JAX's dispatch for every
**     jnp call) is read whole at every hit from then on, keyed by the
**     whole stack.
**   - Native: the return addresses, recorded as module + offset (dladdr),
**     with the nearest dynamic symbol, so that addr2line can name the
**     source line after the run. They come from libunwind's
**     unw_backtrace when libunwind.so.8 can be loaded (dlopen'ed
**     RTLD_LOCAL: its _Unwind_* symbols must never take the place of
**     libgcc's, which C++ exceptions use), else from glibc's backtrace().
**     Measured on this project's 2-core machine: glibc's backtrace() costs
**     2.3-3.1 us a call even two frames deep (libgcc's unwinder), 16-frame
**     unw_backtrace 0.09-0.23 us (it caches what it learnt of each frame).
**
** A cache keyed by the raw stack (return addresses, and for Python each
** frame's code object and instruction offset) maps a stack seen before
** to its site id without any lookup of names: the names (dladdr, the code
** object's co_filename and co_qualname) are read once per distinct stack.
** Each code object in the cache is kept alive (one reference) so that its
** address can never name another function later.
*/
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "preload/callsite.h"
#include "preload/pyapi.h"
#include "preload/pyrecord.h"
#include "trace/trace.h"

/* Raw return addresses taken: this library's own frames (2 or 3: the
** capture, the tracking, the hook) and 13 or so of the caller's. */
#define NATIVE_DEPTH 16
/* Native frames kept in a site after our own are dropped. */
#define NATIVE_KEEP 10
/* Python frames read: the line that allocated and its callers, deep
** enough to leave a framework's own frames (nn.Linear's forward is 6 Python
** frames below the line that called the model in PyTorch 2). */
#define PY_DEPTH 12

/* The raw stack: what identifies a site without reading a name. */
struct raw_stack {
    uintptr_t native[NATIVE_DEPTH];
    uintptr_t code[PY_DEPTH]; /* code objects, innermost first */
    int pos[PY_DEPTH];        /* byte offset of the instruction (3.11+), or
                                 the line, with lasti_is_line */
    uint32_t inherited;       /* the id of the thread's last Python stack
                                 (py_site.id), for an allocation without
                                 the GIL */
    int n_native, n_py;
    bool note_thread;         /* no Python stack known on this thread */
};

/* What the cache keeps of a site with Python frames: its frames, so that
** an allocation without the GIL on the same thread can repeat them. */
struct py_site {
    struct trace_frame frames[PY_DEPTH];
    int n;
    uint32_t id; /* 1, 2, ...: names it in the key of a stack without the GIL */
};

/* The profile function's table: the two innermost frames of a call into
** native code (each frame's code object and instruction) to its named
** stack. Two, so that a helper called from several lines keeps them apart;
** callers further out are those of the first call seen. */
struct call_entry {
    uintptr_t code, caller;
    int pos, caller_pos;
    struct py_site *py; /* NULL: an empty bucket */
    uint32_t hits;      /* calls seen with this key */
    bool deep;          /* its outer frames differ: read whole every time */
    struct raw_stack *whole; /* the whole stack first seen (code, pos) */
};

/* A whole Python stack (its code objects and positions) to its names:
** the watched calls whose two innermost frames are not enough. */
struct deep_entry {
    uint64_t hash;
    struct raw_stack key; /* n_native 0 */
    struct py_site *py;   /* NULL: an empty bucket */
};

struct cache_entry {
    uint64_t hash;
    struct raw_stack key;
    uint32_t site;            /* 0: an empty bucket */
    struct py_site *py;       /* its Python frames, when it has some */
};

typedef int (*fn_backtrace)(void **, int);

static struct {
    pthread_mutex_t lock;
    fn_backtrace unwind;   /* unw_backtrace, else glibc's backtrace */
    struct cache_entry *b; /* 1 << bits buckets, at most half full */
    unsigned bits;
    size_t n;
    void *self_base;       /* this library's load address: its frames drop */
    bool lasti_is_line;    /* pos[] holds lines (Python before 3.11) */
    uint32_t py_ids;       /* py_site ids given */
    struct call_entry *calls; /* 1 << call_bits buckets, at most half full */
    unsigned call_bits;
    size_t n_calls;
    struct deep_entry *deep; /* 1 << deep_bits buckets, at most half full */
    unsigned deep_bits;
    size_t n_deep;
    uint64_t random;         /* next_random's state */
    int profile_asked;     /* the profile function is installed or on its
                              way (atomic) */
    int tool;              /* the sys.monitoring tool id taken (3.12+); -1 */
} C = {.lock = PTHREAD_MUTEX_INITIALIZER, .random = 0x9e3779b97f4a7c15ULL, .tool = -1};

/* The last Python stack read on this thread, or named at its last watched
** call into native code (initial-exec: no allocation on first access from
** inside a hook). Watched calls take the lock every time: a shortcut for a
** call with the same two innermost frames as the last one on the thread
** hid a second caller reached right after the first (the alternation the
** call-site test plants). */
static _Thread_local struct py_site *last_py __attribute__((tls_model("initial-exec")));
/* This thread is inside C.lock: reading frames can run the garbage
** collector, whose finalizers run Python, whose builtin calls reach the
** profile function, which must then not take the lock again. */
static _Thread_local bool in_lock __attribute__((tls_model("initial-exec")));

void
callsite_init(struct trace_writer *w, const char *holders)
{
    void *addrs[2];
    Dl_info info;

    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    void *p = h != NULL ? dlsym(h, "unw_backtrace") : NULL;
    if (p != NULL)
        memcpy(&C.unwind, &p, sizeof p);
    else
        C.unwind = backtrace;
    /* The first call loads what the unwinder needs (libgcc_s for glibc's):
     * here, outside any hook, not in the middle of the first allocation. */
    (void)C.unwind(addrs, 2);
    if (dladdr(&C, &info) != 0) /* an object of this library */
        C.self_base = info.dli_fbase;
    pyapi_find();
    C.lasti_is_line = py.frame_lasti == NULL;
    pyrecord_init(w, holders);
}

void
callsite_fork_child(void)
{
    pthread_mutex_init(&C.lock, NULL);
}

/* ------------------------------------------------------------------ */
/* Reading the stack                                                    */
/* ------------------------------------------------------------------ */

/* The Python frames from FRAME (borrowed) outwards into S; the GIL is held. */
static void
read_frames(void *frame, struct raw_stack *s)
{
    void *back;
    int i;

    py.incref(frame); /* every frame below is a reference we drop */
    for (i = 0; i < PY_DEPTH && frame != NULL; i++) {
        void *code = py.frame_code(frame);
        s->code[i] = (uintptr_t)code;
        s->pos[i] = C.lasti_is_line ? py.frame_line(frame) : py.frame_lasti(frame);
        py.decref(code); /* the frame keeps it alive while we look */
        back = py.frame_back(frame);
        py.decref(frame);
        frame = back;
    }
    if (frame != NULL)
        py.decref(frame);
    s->n_py = i;
}

/* This thread's Python frames into S, when it holds the GIL. */
static void
read_python(struct raw_stack *s)
{
    void *frame;

    if (!py.ready || !py.is_initialized() || !py.gil_check())
        return;
    frame = py.get_frame(); /* borrowed */
    if (frame != NULL)
        read_frames(frame, s);
}

/* A hash of the whole key, a word at a time (it is hashed at every
** allocation: bytewise FNV over its 230 bytes cost more than the unwind). */
static uint64_t
raw_hash(const struct raw_stack *s)
{
    uint64_t w[sizeof *s / 8], h = 0x9e3779b97f4a7c15ULL;
    size_t i;

    memcpy(w, s, sizeof w);
    for (i = 0; i < sizeof w / 8; i++) {
        h ^= w[i];
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    return h;
}

/* ------------------------------------------------------------------ */
/* Naming a new stack (once per distinct stack, under C.lock)           */
/* ------------------------------------------------------------------ */

/* A code object's string attribute NAME as a new C string ("?" if none).
** The GIL is held (we only name Python frames we just read). */
static char *
code_text(void *code, const char *name)
{
    void *o = py.getattr(code, name);
    const char *u;
    ssize_t n = 0;
    char *copy;

    if (o == NULL) {
        py.err_clear_fn();
        return strdup("?");
    }
    u = py.as_utf8(o, &n);
    if (u == NULL)
        py.err_clear_fn();
    copy = u != NULL ? strndup(u, (size_t)n) : strdup("?");
    py.decref(o);
    return copy;
}

/* The Python frames of S, named, kept for good (the cache owns them). */
static struct py_site *
name_python(const struct raw_stack *s)
{
    struct py_site *ps = calloc(1, sizeof *ps);
    void *type, *value, *tb;
    int i;

    if (ps == NULL)
        return NULL;
    /* An exception the program has pending (an allocation made while it
     * handles one) must survive our own lookups, which clear theirs. */
    py.err_fetch(&type, &value, &tb);
    for (i = 0; i < s->n_py; i++) {
        void *code = (void *)s->code[i];
        struct trace_frame *f = &ps->frames[i];
        f->kind = TRACE_FRAME_PY;
        f->file = code_text(code, "co_filename");
        /* co_qualname (3.11+) says Model.forward where co_name says forward. */
        f->func = code_text(code, C.lasti_is_line ? "co_name" : "co_qualname");
        f->line = (uint32_t)(C.lasti_is_line ? s->pos[i]
                                             : py.code_addr2line(code, s->pos[i]));
        /* Keep the code object: its address names it in the cache. */
        py.incref(code);
    }
    py.err_restore(type, value, tb);
    ps->n = s->n_py;
    ps->id = ++C.py_ids;
    return ps;
}

/* Native frame ADDR (a return address) into F; false for our own. */
static bool
name_native(uintptr_t addr, struct trace_frame *f)
{
    Dl_info info;

    /* The call instruction ends just before the return address: that
     * byte is the calling line's. */
    if (dladdr((void *)(addr - 1), &info) == 0 || info.dli_fname == NULL) {
        *f = (struct trace_frame){.kind = TRACE_FRAME_NATIVE, .file = "?",
                                  .offset = addr - 1, .func = ""};
        return true;
    }
    if (info.dli_fbase == C.self_base)
        return false;
    *f = (struct trace_frame){.kind = TRACE_FRAME_NATIVE,
                              .file = info.dli_fname,
                              .offset = addr - 1 - (uintptr_t)info.dli_fbase,
                              .func = info.dli_sname != NULL ? info.dli_sname : ""};
    return true;
}

/* The site of the new stack S into *SITE, and its Python frames into *PS. */
static bool
name_stack(struct trace_writer *w, const struct raw_stack *s, struct py_site **ps,
           uint32_t *site)
{
    struct trace_frame frames[2 + PY_DEPTH + NATIVE_KEEP];
    char note[96];
    int n = 0, i, kept = 0;

    *ps = NULL;
    if (s->n_py > 0) {
        if ((*ps = name_python(s)) == NULL)
            return false;
        memcpy(frames, (*ps)->frames, (size_t)s->n_py * sizeof frames[0]);
        n = s->n_py;
    } else if (s->inherited != 0 && last_py != NULL) {
        frames[n++] = (struct trace_frame){
            .kind = TRACE_FRAME_NOTE,
            .func = "ran without the GIL: the last Python call into native code seen on "
                    "this thread"};
        memcpy(frames + n, last_py->frames, (size_t)last_py->n * sizeof frames[0]);
        n += last_py->n;
    } else if (s->note_thread) {
        char name[32] = "";
        pthread_getname_np(pthread_self(), name, sizeof name);
        snprintf(note, sizeof note, "no Python frame on thread %s",
                 name[0] != '\0' ? name : "(unnamed)");
        frames[n++] = (struct trace_frame){.kind = TRACE_FRAME_NOTE, .func = note};
    }
    for (i = 0; i < s->n_native && kept < NATIVE_KEEP; i++)
        if (name_native(s->native[i], &frames[n]))
            n++, kept++;
    if (n == 0)
        return false;
    return trace_writer_site(w, frames, n, site) == VRAM_OK;
}

/* ------------------------------------------------------------------ */
/* The tables: open addressing, at most half full                       */
/* ------------------------------------------------------------------ */

/*
** Room for one more entry in the table at TABP (the address of a pointer
** to 1 << *BITS buckets of SIZE bytes holding N entries; NULL: none yet,
** the first has 1 << FIRST_BITS): kept while it stays at most half full,
** else replaced by one twice as large, each entry placed again by its
** hash (USED: whether a bucket holds an entry, and its hash), *BITS
** updated. False when out of memory, the table kept.
*/
static bool
table_room(void *tabp, unsigned *bits, size_t n, unsigned first_bits, size_t size,
           bool (*used)(const void *bucket, uint64_t *h))
{
    void *tab;
    memcpy(&tab, tabp, sizeof tab); /* a pointer to an entry type, as void * holds it */
    if (tab != NULL && (n + 1) * 2 <= (size_t)1 << *bits)
        return true;
    unsigned nb = tab == NULL ? first_bits : *bits + 1;
    unsigned char *b = calloc((size_t)1 << nb, size);
    if (b == NULL)
        return false;
    size_t mask = ((size_t)1 << nb) - 1;
    const unsigned char *old = tab;
    for (size_t i = 0; old != NULL && i < ((size_t)1 << *bits); i++) {
        uint64_t h, other;
        if (!used(old + i * size, &h))
            continue;
        size_t j = (size_t)h & mask;
        while (used(b + j * size, &other))
            j = (j + 1) & mask;
        memcpy(b + j * size, old + i * size, size);
    }
    free(tab);
    memcpy(tabp, &b, sizeof b);
    *bits = nb;
    return true;
}

/* ------------------------------------------------------------------ */
/* The cache                                                            */
/* ------------------------------------------------------------------ */

static struct cache_entry *
cache_bucket(const struct cache_entry *b, unsigned bits, uint64_t h,
             const struct raw_stack *s)
{
    size_t mask = ((size_t)1 << bits) - 1, i = (size_t)h & mask;

    while (b[i].site != 0 && !(b[i].hash == h && memcmp(&b[i].key, s, sizeof *s) == 0))
        i = (i + 1) & mask;
    return (struct cache_entry *)&b[i];
}

static bool
cache_used(const void *bucket, uint64_t *h)
{
    const struct cache_entry *e = bucket;
    *h = e->hash;
    return e->site != 0;
}

/* ------------------------------------------------------------------ */
/* Watching calls into native code                                      */
/* ------------------------------------------------------------------ */

static uint64_t
call_hash(const struct call_entry *e)
{
    uint64_t h = (uint64_t)e->code * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(unsigned)e->pos;
    h = (h ^ (uint64_t)e->caller) * 0xff51afd7ed558ccdULL;
    return h ^ (uint64_t)(unsigned)e->caller_pos ^ h >> 29;
}

static bool
call_used(const void *bucket, uint64_t *h)
{
    const struct call_entry *e = bucket;
    *h = e->py != NULL ? call_hash(e) : 0;
    return e->py != NULL;
}

static bool
deep_used(const void *bucket, uint64_t *h)
{
    const struct deep_entry *e = bucket;
    *h = e->hash;
    return e->py != NULL;
}

/* The named stack of the whole Python stack S (read from a watched call
** whose key is deep), from the deep table; NULL when out of memory. The
** lock is held. */
static struct py_site *
deep_site(const struct raw_stack *s)
{
    uint64_t h = raw_hash(s);
    size_t mask, i;

    if (!table_room(&C.deep, &C.deep_bits, C.n_deep, 8, sizeof *C.deep, deep_used))
        return NULL;
    mask = ((size_t)1 << C.deep_bits) - 1;
    i = (size_t)h & mask;
    while (C.deep[i].py != NULL &&
           !(C.deep[i].hash == h && memcmp(&C.deep[i].key, s, sizeof *s) == 0))
        i = (i + 1) & mask;
    if (C.deep[i].py == NULL) {
        struct py_site *ps = name_python(s);
        if (ps == NULL)
            return NULL;
        C.deep[i] = (struct deep_entry){.hash = h, .key = *s, .py = ps};
        C.n_deep++;
    }
    return C.deep[i].py;
}

/* Whether the whole stacks A and B hold the same frames. */
static bool
same_python(const struct raw_stack *a, const struct raw_stack *b)
{
    return a->n_py == b->n_py &&
           memcmp(a->code, b->code, (size_t)a->n_py * sizeof a->code[0]) == 0 &&
           memcmp(a->pos, b->pos, (size_t)a->n_py * sizeof a->pos[0]) == 0;
}

/* A pseudo-random number (xorshift64): which hits of a key read the
** whole stack, so that no period in the program's calls can hide a
** second caller from it. The lock is held. */
static uint64_t
next_random(void)
{
    C.random ^= C.random << 13;
    C.random ^= C.random >> 7;
    C.random ^= C.random << 17;
    return C.random;
}

/*
** A call into native code from Python FRAME (borrowed): its stack becomes
** the thread's last Python stack. Only the two innermost frames are read
** each time (their code objects and instructions); the whole stack is
** read and named once per key, read again at its first 8 hits and then
** at one in 32 chosen at random, to find keys whose outer frames vary,
** and at every hit of such a key. The GIL is held.
*/
static void
note_call(void *frame)
{
    struct call_entry key = {0}, *e;
    struct raw_stack s;
    void *code, *back;
    size_t j, mask;

    code = py.frame_code(frame);
    key.pos = C.lasti_is_line ? py.frame_line(frame) : py.frame_lasti(frame);
    py.decref(code); /* the frame keeps it alive */
    key.code = (uintptr_t)code;
    back = py.frame_back(frame);
    if (back != NULL) {
        void *caller = py.frame_code(back);
        key.caller = (uintptr_t)caller;
        key.caller_pos = C.lasti_is_line ? py.frame_line(back) : py.frame_lasti(back);
        py.decref(caller);
        py.decref(back);
    }
    pthread_mutex_lock(&C.lock);
    in_lock = true;
    if (!table_room(&C.calls, &C.call_bits, C.n_calls, 10, sizeof *C.calls, call_used))
        goto out;
    mask = ((size_t)1 << C.call_bits) - 1;
    j = call_hash(&key) & mask;
    while (C.calls[j].py != NULL &&
           !(C.calls[j].code == key.code && C.calls[j].pos == key.pos &&
             C.calls[j].caller == key.caller && C.calls[j].caller_pos == key.caller_pos))
        j = (j + 1) & mask;
    e = &C.calls[j];
    memset(&s, 0, sizeof s); /* the padding too: deep keys are hashed whole */
    if (e->py == NULL) {
        read_frames(frame, &s);
        if (s.n_py == 0 || (key.py = name_python(&s)) == NULL)
            goto out;
        key.whole = malloc(sizeof s);
        if (key.whole != NULL)
            *key.whole = s;
        *e = key;
        C.n_calls++;
    } else if (e->deep || e->hits++ < 8 || (next_random() & 31) == 0) {
        read_frames(frame, &s);
        if (!e->deep && e->whole != NULL && !same_python(&s, e->whole))
            e->deep = true;
    }
    last_py = e->py;
    if (e->deep && s.n_py > 0) {
        struct py_site *ps = deep_site(&s);
        if (ps != NULL)
            last_py = ps;
    }
out:
    in_lock = false;
    pthread_mutex_unlock(&C.lock);
}

/* The profile function (before 3.12): each call of a builtin (C_CALL),
** and the returns the recording's Python side watches (pyrecord.c). */
static int
profile_call(void *obj, void *frame, int what, void *arg)
{
    (void)obj;
    (void)arg;
    if (what == PY_TRACE_C_CALL && frame != NULL && !in_lock)
        note_call(frame);
    else if (what == PY_TRACE_RETURN && frame != NULL && !in_lock)
        pyrecord_return(frame);
    return 0;
}

/* The sys.monitoring CALL callback (3.12+): (code, instruction offset,
** callable, first argument). A call of a Python function or method leads
** to Python code whose own calls are seen in their turn; any other
** callable is native code, which may allocate without the GIL. */
static void *
monitor_call(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    if (nargs >= 3 && !in_lock) {
        void *type = py.object_type(args[2]);
        bool python = type == py.function_type || type == py.method_type;
        py.decref(type);
        if (!python) {
            void *frame = py.get_frame(); /* borrowed: the calling frame */
            if (frame != NULL)
                note_call(frame);
        }
    }
    py.incref(py.none);
    return py.none;
}

static struct py_method_def monitor_def = {"vram_callsite", NULL, PY_METH_FASTCALL,
                                           "vram's call-site watch"};

/* Drop RESULT, a method call's; false (the error cleared) if it raised. */
static bool
call_ok(void *result)
{
    if (result == NULL) {
        py.err_clear_fn();
        return false;
    }
    py.decref(result);
    return true;
}

/* Watch calls through sys.monitoring (3.12+); false where it is missing,
** or both tool ids are taken. The GIL is held. */
static bool
monitor_install(void)
{
    static const int tools[] = {4, 3};
    void *(*fn)(void *, void *const *, ssize_t) = monitor_call;
    void *sys, *mon, *events = NULL, *call = NULL, *cb = NULL;
    bool ok = false;
    size_t i;

    if (py.import == NULL || py.call_method == NULL || py.cfunction_new == NULL ||
        py.object_type == NULL || py.function_type == NULL || py.method_type == NULL ||
        py.none == NULL)
        return false;
    if ((sys = py.import("sys")) == NULL) {
        py.err_clear_fn();
        return false;
    }
    mon = py.getattr(sys, "monitoring");
    py.decref(sys);
    if (mon == NULL) {
        py.err_clear_fn(); /* before 3.12 */
        return false;
    }
    memcpy(&monitor_def.meth, &fn, sizeof fn);
    if ((events = py.getattr(mon, "events")) == NULL ||
        (call = py.getattr(events, "CALL")) == NULL ||
        (cb = py.cfunction_new(&monitor_def, NULL, NULL)) == NULL) {
        py.err_clear_fn();
        goto done;
    }
    for (i = 0; i < sizeof tools / sizeof tools[0] && !ok; i++) {
        if (!call_ok(py.call_method(mon, "use_tool_id", "is", tools[i], "vram")))
            continue;
        ok = call_ok(py.call_method(mon, "register_callback", "iOO", tools[i], call, cb)) &&
             call_ok(py.call_method(mon, "set_events", "iO", tools[i], call));
        if (!ok)
            (void)call_ok(py.call_method(mon, "free_tool_id", "i", tools[i]));
        else
            C.tool = tools[i];
    }
done:
    if (cb != NULL)
        py.decref(cb); /* sys.monitoring keeps its own reference */
    if (call != NULL)
        py.decref(call);
    if (events != NULL)
        py.decref(events);
    py.decref(mon);
    return ok;
}

/* Install the watch: sys.monitoring (3.12+), else the profile function on
** every thread (PyEval_SetProfileAllThreads), else on this one. The GIL
** is held; as a pending call (ARG not NULL), it runs on the main thread.
** An exception the program has pending survives. */
static int
profile_install(void *arg)
{
    void *type, *value, *tb;

    (void)arg;
    py.err_fetch(&type, &value, &tb);
    if (!monitor_install()) {
        if (py.set_profile_all != NULL)
            py.set_profile_all(profile_call, NULL);
        else
            py.set_profile(profile_call, NULL);
    }
    py.err_restore(type, value, tb);
    /* The recording's Python side: now when this runs as a pending call
    ** (ARG), else at the main thread's next chance, outside this
    ** allocation (its imports may run finalizers that free GPU memory,
    ** which a framework would do under the lock it holds). A pending call
    ** is not queued from a pending call: CPython runs none while one runs,
    ** and checks for them at every instruction meanwhile. */
    pyrecord_ask(C.tool, arg != NULL);
    return 0;
}

/* Have the profile function installed, once: now when this thread holds
** the GIL (HELD), else by the main thread at its next chance. */
static void
profile_ask(bool held)
{
    if (py.set_profile == NULL || (!held && py.add_pending == NULL) ||
        __atomic_exchange_n(&C.profile_asked, 1, __ATOMIC_RELAXED))
        return;
    static int pending = 1; /* the argument that says "a pending call" */
    if (held)
        profile_install(NULL);
    else if (py.add_pending(profile_install, &pending) != 0)
        __atomic_store_n(&C.profile_asked, 0, __ATOMIC_RELAXED); /* queue full: later */
}

uint32_t
callsite_capture(struct trace_writer *w)
{
    struct raw_stack s;
    void *addrs[NATIVE_DEPTH];
    struct cache_entry *e;
    uint32_t site = TRACE_NO_SITE;
    uint64_t h;
    int i;

    /* An allocation from a finalizer that the garbage collector ran while
     * this thread read frames under the lock: it gets no site. */
    if (in_lock)
        return TRACE_NO_SITE;
    memset(&s, 0, sizeof s); /* the padding too: the key is hashed whole */
    s.n_native = C.unwind(addrs, NATIVE_DEPTH);
    for (i = 0; i < s.n_native; i++)
        s.native[i] = (uintptr_t)addrs[i];
    read_python(&s);
    if (s.n_py == 0) {
        if (last_py != NULL)
            s.inherited = last_py->id;
        else
            s.note_thread = py.ready && py.is_initialized();
    }
    if (py.ready && !__atomic_load_n(&C.profile_asked, __ATOMIC_RELAXED))
        profile_ask(s.n_py > 0);
    h = raw_hash(&s);

    pthread_mutex_lock(&C.lock);
    in_lock = true;
    if (!table_room(&C.b, &C.bits, C.n, 10, sizeof *C.b, cache_used))
        goto out;
    e = cache_bucket(C.b, C.bits, h, &s);
    if (e->site == 0) {
        struct py_site *ps;
        if (!name_stack(w, &s, &ps, &site))
            goto out;
        *e = (struct cache_entry){.hash = h, .key = s, .site = site, .py = ps};
        C.n++;
    }
    site = e->site;
    if (e->py != NULL)
        last_py = e->py;
out:
    in_lock = false;
    pthread_mutex_unlock(&C.lock);
    return site;
}
