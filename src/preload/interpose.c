/* SPDX-License-Identifier: MIT */
/*
** interpose.c -- how calls reach the hooks of libvram-preload.so, and how
** the hooks reach the real driver (docs/QUOTA.md, "How the interposer
** works").
**
** A CUDA program reaches the driver three ways, and each is covered:
**   1. a direct link to libcuda.so.1: our exported hooks come first in
**      symbol lookup (LD_PRELOAD);
**   2. dlsym on a libcuda handle (XLA, Triton): our dlsym override returns
**      our hook for a hooked name;
**   3. cuGetProcAddress (the CUDA runtime, so PyTorch and CuPy): the runtime
**      finds cuGetProcAddress_v2 with dlsym (2. gives it ours), then asks
**      it for "cuGetProcAddress" itself (we return ours again) and resolves
**      everything else through that; for a hooked name we return the hook
**      of the variant the driver returned, _ptsz included.
** In PASSIVE mode 2. and 3. hand out the real functions, so a program
** without a quota runs on the bare driver; 1. forwards at once.
**
** The real function behind each hook is whatever the driver's own dlsym or
** cuGetProcAddress last returned for it (one slot per hook, written with
** atomics; all copies of the driver in a process are one driver), else
** found on demand (interpose_real).
*/
#include <dlfcn.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/elfsym.h"
#include "base/hot.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/trampoline.h"

/*
** The dlsym path runs before anything else in the process may be ready:
** sanitizer runtimes call dlsym from their own initialization, before
** their shadow memory exists, so in a sanitizer build (make test-asan)
** the functions on that path must not be instrumented.
*/
#define EARLY __attribute__((no_sanitize("address", "thread", "undefined")))

/* ------------------------------------------------------------------ */
/* The tables, from PRELOAD_HOOKS                                       */
/* ------------------------------------------------------------------ */

struct hook_row {
    const char *symbol; /* exported name */
    const char *asked;  /* cuGetProcAddress's base name, or NULL */
    int since, until;   /* cudaVersion range; until 0 = open */
    enum hook_stream stream;
    enum hook_lib lib;
};

static const struct hook_row hook_rows[HOOK_COUNT] = {
#define X(symbol, type, asked, since, until, stream, lib, before, after, params, args)   \
    {#symbol, asked, since, until, stream, lib},
    PRELOAD_HOOKS(X)
#undef X
};

/*
** Our hooks' addresses. Filled at first use rather than in a static
** initializer because ISO C has no object-to-function-pointer conversion;
** the library is linked -Bsymbolic, so these are our own definitions even
** if something loaded before us exports the same names.
*/
static void *hook_addr[HOOK_COUNT];

static void
hook_addrs_fill(void)
{
    if (__atomic_load_n(&hook_addr[HOOK_COUNT - 1], __ATOMIC_ACQUIRE) != NULL)
        return;
    void *a[HOOK_COUNT];
    size_t i = 0;
#define X(symbol, type, asked, since, until, stream, lib, before, after, params, args)   \
    {                                                                                    \
        type fp = symbol;                                                                \
        memcpy(&a[i], &fp, sizeof a[i]);                                                 \
        i++;                                                                             \
    }
    PRELOAD_HOOKS(X)
#undef X
    /* Every thread computes the same values: racing writers agree. */
    for (i = 0; i < HOOK_COUNT; i++)
        __atomic_store_n(&hook_addr[i], a[i], __ATOMIC_RELEASE);
}

_Static_assert(sizeof(void *) == sizeof(vcu_pfn_cuInit), "function pointers fit void *");

/* The row exported as SYMBOL, or -1. Cheap for the names that are not
** ours (every dlsym of the process passes here): two characters first. */
EARLY static int
hook_by_symbol(const char *symbol)
{
    if (!((symbol[0] == 'c' && symbol[1] == 'u') ||
          (symbol[0] == 'n' && strncmp(symbol, "nvml", 4) == 0)))
        return -1;
    for (int i = 0; i < HOOK_COUNT; i++)
        if (strcmp(symbol, hook_rows[i].symbol) == 0)
            return i;
    return -1;
}

/*
** The row that cuGetProcAddress(ASKED, VERSION, FLAGS) returns the variant
** of, or -1: the name and version range match, and the stream variant is
** the one FLAGS select (the driver returns the _ptsz one for
** PER_THREAD_DEFAULT_STREAM where there is one, else the legacy one).
*/
static int
hook_by_request(const char *asked, int version, vcu_uint64 flags)
{
    if (asked[0] != 'c' || asked[1] != 'u')
        return -1;
    bool ptsz = (flags & VCU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    for (int i = 0; i < HOOK_COUNT; i++) {
        const struct hook_row *r = &hook_rows[i];
        if (r->asked == NULL || strcmp(asked, r->asked) != 0 || version < r->since ||
            (r->until != 0 && version >= r->until))
            continue;
        if (r->stream == HOOK_ANY || (r->stream == HOOK_PTSZ) == ptsz)
            return i;
    }
    return -1;
}

/* ------------------------------------------------------------------ */
/* Real functions                                                       */
/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* glibc's own dynamic-loading functions                                */
/* ------------------------------------------------------------------ */

/*
** The library overrides dlsym, dlvsym, dlopen and dlmopen (trampoline.h),
** so glibc's own cannot be asked for by name: every lookup from here
** would find ours. They are read from the symbol table of the object that
** holds them -- the one that defines dladdr (libc.so.6 from glibc 2.34,
** libdl.so.2 before) -- each at its default version (elf_symbol). Read by
** the trampolines, hence not static.
*/
typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
__attribute__((visibility("hidden"))) void *interpose_glibc_dlsym;
__attribute__((visibility("hidden"))) void *interpose_glibc_dlvsym;
__attribute__((visibility("hidden"))) void *interpose_glibc_dlopen;
__attribute__((visibility("hidden"))) void *interpose_glibc_dlmopen;

/* Find glibc's four, once (racing threads find the same). */
EARLY static void
glibc_dl_resolve(void)
{
    if (__atomic_load_n(&interpose_glibc_dlmopen, __ATOMIC_ACQUIRE) != NULL)
        return;
    int (*where)(const void *, Dl_info *) = dladdr;
    void *addr;
    memcpy(&addr, &where, sizeof addr);
    Dl_info info;
    struct link_map *lm = NULL;
    if (dladdr1(addr, &info, (void **)&lm, RTLD_DL_LINKMAP) == 0 || lm == NULL)
        return; /* not glibc: nothing works, but nothing crashes either */
    void *f[4] = {elf_symbol(lm, "dlsym"), elf_symbol(lm, "dlvsym"),
                  elf_symbol(lm, "dlopen"), elf_symbol(lm, "dlmopen")};
    __atomic_store_n(&interpose_glibc_dlsym, f[0], __ATOMIC_RELEASE);
    __atomic_store_n(&interpose_glibc_dlvsym, f[1], __ATOMIC_RELEASE);
    __atomic_store_n(&interpose_glibc_dlopen, f[2], __ATOMIC_RELEASE);
    __atomic_store_n(&interpose_glibc_dlmopen, f[3], __ATOMIC_RELEASE);
}

/* glibc's dlsym, or NULL. */
EARLY static dlsym_fn
glibc_dlsym(void)
{
    glibc_dl_resolve();
    void *p = __atomic_load_n(&interpose_glibc_dlsym, __ATOMIC_ACQUIRE);
    dlsym_fn f;
    memcpy(&f, &p, sizeof f);
    return f;
}

/* The real function behind each hook (NULL: not known yet). */
static void *real_fn[HOOK_COUNT];

/* A handle on which the program found a hooked function of each library:
** the library it uses, where unhooked helpers are looked up first. */
static void *lib_handle[2];

/* Remember P, found on HANDLE, as the real function of hook ID, unless it
** is our own hook (dlsym(RTLD_DEFAULT, ...) finds ours first). */
static void
remember_real(int id, void *p, void *handle)
{
    hook_addrs_fill();
    if (p == NULL || p == hook_addr[id])
        return;
    __atomic_store_n(&real_fn[id], p, __ATOMIC_RELEASE);
    if (handle != NULL)
        __atomic_store_n(&lib_handle[hook_rows[id].lib], handle, __ATOMIC_RELEASE);
}

/*
** NAME in the library LIB as the program loaded it: on the handle it used,
** else the next definition after ours (a direct link), else in an already
** loaded libcuda.so.1 / libnvidia-ml.so.1. Never loads a library, never
** returns one of our hooks.
*/
static void *
lib_lookup(enum hook_lib lib, const char *name)
{
    static const char *const soname[2] = {"libcuda.so.1", "libnvidia-ml.so.1"};
    dlsym_fn rd = glibc_dlsym();
    if (rd == NULL)
        return NULL;
    hook_addrs_fill();
    void *p = NULL;
    void *h = __atomic_load_n(&lib_handle[lib], __ATOMIC_ACQUIRE);
    if (h != NULL)
        p = rd(h, name);
    if (p == NULL)
        p = rd(RTLD_NEXT, name);
    if (p == NULL) {
        h = dlopen(soname[lib], RTLD_LAZY | RTLD_NOLOAD);
        if (h != NULL) {
            p = rd(h, name);
            dlclose(h); /* only drops the reference NOLOAD took */
        }
    }
    for (int i = 0; p != NULL && i < HOOK_COUNT; i++)
        if (p == hook_addr[i])
            return NULL;
    return p;
}

VRAM_HOT void *
interpose_real(enum hook_id id)
{
    void *p = __atomic_load_n(&real_fn[id], __ATOMIC_ACQUIRE);
    if (p != NULL)
        return p;
    p = lib_lookup(hook_rows[id].lib, hook_rows[id].symbol);
    if (p != NULL)
        __atomic_store_n(&real_fn[id], p, __ATOMIC_RELEASE);
    return p;
}

const char *
hook_name(enum hook_id id)
{
    return hook_rows[id].symbol;
}

void *
interpose_lib_sym(enum hook_lib lib, const char *name)
{
    return lib_lookup(lib, name);
}

/* ------------------------------------------------------------------ */
/* The dynamic-loading functions: the routes to the driver               */
/* ------------------------------------------------------------------ */

/* Said at most once each per process (atomic). */
static int said_deepbind, said_dlmopen;

/* Write LINE once per process, when *ONCE was 0. */
static void
say_once(int *once, const char *line)
{
    if (!__atomic_exchange_n(once, 1, __ATOMIC_RELAXED))
        say(line);
}

/* Our own override of NAME when it is one of the four, else NULL: asked
** for by name through any handle or version, ours are given, so that
** glibc's -- a lookup that sees no hook -- is never handed out. */
EARLY static void *
own_dl(const char *name)
{
    if (name[0] != 'd' || name[1] != 'l')
        return NULL;
    void *own = NULL;
    if (strcmp(name, "dlsym") == 0) {
        void *(*f)(void *, const char *) = dlsym;
        memcpy(&own, &f, sizeof own);
    } else if (strcmp(name, "dlvsym") == 0) {
        void *(*f)(void *, const char *, const char *) = dlvsym;
        memcpy(&own, &f, sizeof own);
    } else if (strcmp(name, "dlopen") == 0) {
        void *(*f)(const char *, int) = dlopen;
        memcpy(&own, &f, sizeof own);
    } else if (strcmp(name, "dlmopen") == 0) {
        void *(*f)(Lmid_t, const char *, int) = dlmopen;
        memcpy(&own, &f, sizeof own);
    }
    return own;
}

/*
** glibc's private lookups, which older glibcs export (GLIBC_PRIVATE) and
** which resolve symbols without passing dlsym: withheld from a process
** under a quota. The name is changed into one that no object defines, so
** that glibc's answer is NULL and dlerror says why.
*/
static const char *const withheld[][2] = {
    {"__libc_dlsym", "__libc_dlsym (withheld by vram: it reaches the CUDA driver around the "
                     "GPU quota)"},
    {"__libc_dlvsym", "__libc_dlvsym (withheld by vram: it reaches the CUDA driver around "
                      "the GPU quota)"},
    {"__libc_dlopen_mode", "__libc_dlopen_mode (withheld by vram: it loads around the GPU "
                           "quota)"},
    {"_dl_sym", "_dl_sym (withheld by vram: it reaches the CUDA driver around the GPU quota)"},
    {"_dl_vsym", "_dl_vsym (withheld by vram: it reaches the CUDA driver around the GPU "
                 "quota)"},
};

/* NAME's replacement if it is withheld (and a quota applies), or NULL. */
static const char *
withheld_as(const char *name)
{
    if (name[0] != '_')
        return NULL;
    for (size_t i = 0; i < sizeof withheld / sizeof withheld[0]; i++)
        if (strcmp(name, withheld[i][0]) == 0)
            return preload_mode() == PRELOAD_PASSIVE ? NULL : withheld[i][1];
    return NULL;
}

/*
** Our answer to a lookup of SYMBOL on HANDLE (VERSION: dlvsym's, or NULL)
** when SYMBOL is hooked: the hook, its real function remembered; NULL to
** let glibc answer as if we were not there. Called first by the exported
** dlsym, possibly before anything of ours ran (another library's
** constructor may call dlsym), so it initializes nothing for names that
** are not ours.
*/
EARLY static void *
hook_answer(void *handle, const char *symbol, const char *version)
{
    int id = hook_by_symbol(symbol);
    if (id < 0 || preload_mode() == PRELOAD_PASSIVE)
        return NULL;
    /* Looked up from here, so RTLD_NEXT means "after us": for a hooked
    ** name that is the driver, which is what it is remembered as. */
    void *p = NULL;
    if (version == NULL) {
        p = glibc_dlsym()(handle, symbol);
    } else {
        void *v = __atomic_load_n(&interpose_glibc_dlvsym, __ATOMIC_ACQUIRE);
        dlvsym_fn vf;
        memcpy(&vf, &v, sizeof vf);
        p = vf != NULL ? vf(handle, symbol, version) : NULL;
    }
    if (p == NULL)
        return NULL; /* glibc looks again and reports the error */
    remember_real(id, p, handle == RTLD_NEXT || handle == RTLD_DEFAULT ? NULL : handle);
    return hook_addr[id];
}

/* dlsym(handle, symbol): args[0], args[1]. */
__attribute__((visibility("hidden"))) void *interpose_pre_dlsym(void **args);
EARLY void *
interpose_pre_dlsym(void **args)
{
    glibc_dl_resolve();
    const char *symbol = args[1];
    if (symbol == NULL || glibc_dlsym() == NULL)
        return NULL;
    void *own = own_dl(symbol);
    if (own != NULL)
        return own;
    const char *instead = withheld_as(symbol);
    if (instead != NULL) {
        args[1] = (void *)(uintptr_t)instead;
        return NULL;
    }
    return hook_answer(args[0], symbol, NULL);
}

/* dlvsym(handle, symbol, version): args[0..2]. glibc's dlsym is one
** dlvsym away (dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34")): ours is given. */
__attribute__((visibility("hidden"))) void *interpose_pre_dlvsym(void **args);
EARLY void *
interpose_pre_dlvsym(void **args)
{
    glibc_dl_resolve();
    const char *symbol = args[1];
    if (symbol == NULL || args[2] == NULL || glibc_dlsym() == NULL)
        return NULL;
    void *own = own_dl(symbol);
    if (own != NULL)
        return own;
    const char *instead = withheld_as(symbol);
    if (instead != NULL) {
        args[1] = (void *)(uintptr_t)instead;
        return NULL;
    }
    return hook_answer(args[0], symbol, args[2]);
}

/*
** RTLD_DEEPBIND makes the loaded object look symbols up in itself and its
** own dependencies before the global scope, where the preload library
** is: an object linked to libcuda.so.1 (or libc.so.6, for dlsym) would
** reach the driver directly. Under a quota it is loaded without the flag,
** said once.
*/
static void
no_deepbind(void **flags_arg, const char *file)
{
    int flags = (int)(intptr_t)flags_arg[0];
    if (!(flags & RTLD_DEEPBIND) || preload_mode() == PRELOAD_PASSIVE)
        return;
    flags_arg[0] = (void *)(intptr_t)(flags & ~RTLD_DEEPBIND);
    char line[512];
    snprintf(line, sizeof line,
             "vram: dlopen of %.200s with RTLD_DEEPBIND: loaded without it (deep binding "
             "would let it reach the CUDA driver around the GPU quota)",
             file != NULL ? file : "the program");
    say_once(&said_deepbind, line);
}

/* dlopen(file, flags): args[0], args[1]. */
__attribute__((visibility("hidden"))) void *interpose_pre_dlopen(void **args);
EARLY void *
interpose_pre_dlopen(void **args)
{
    glibc_dl_resolve();
    if ((int)(intptr_t)args[1] & RTLD_DEEPBIND)
        no_deepbind(&args[1], args[0]);
    return NULL;
}

/*
** dlmopen(lmid, file, flags): args[0..2]. A new link-map namespace (or an
** existing one other than the base) is made without the preload library
** (LD_PRELOAD and /etc/ld.so.preload apply to the base only): a
** libcuda.so.1 loaded there, or an object linked to it, would reach the
** driver around the quota. Under a quota such a dlmopen is refused: glibc
** is asked to open a file that cannot exist, whose name says why, so that
** the caller gets NULL and dlerror the reason; one line says so.
*/
#define DLMOPEN_REFUSED                                                                  \
    "/dev/null/vram: dlmopen into a new namespace is refused in a process under a GPU "  \
    "quota"
__attribute__((visibility("hidden"))) void *interpose_pre_dlmopen(void **args);
EARLY void *
interpose_pre_dlmopen(void **args)
{
    glibc_dl_resolve();
    Lmid_t lmid = (Lmid_t)(intptr_t)args[0];
    if (lmid != LM_ID_BASE && preload_mode() != PRELOAD_PASSIVE) {
        char line[512];
        snprintf(line, sizeof line,
                 "vram: dlmopen of %.200s into another link-map namespace refused: the quota "
                 "enforcer is not there, so CUDA loaded there would pass the GPU quota",
                 args[1] != NULL ? (const char *)args[1] : "the program");
        say_once(&said_dlmopen, line);
        args[0] = (void *)(intptr_t)LM_ID_BASE;
        args[1] = (void *)(uintptr_t)DLMOPEN_REFUSED;
        args[2] = (void *)(intptr_t)RTLD_LAZY;
        return NULL;
    }
    if ((int)(intptr_t)args[2] & RTLD_DEEPBIND)
        no_deepbind(&args[2], args[1]);
    return NULL;
}

#ifndef PRELOAD_TRAMPOLINE_C
PRELOAD_TRAMPOLINE(dlsym, interpose_pre_dlsym, interpose_glibc_dlsym)
PRELOAD_TRAMPOLINE(dlvsym, interpose_pre_dlvsym, interpose_glibc_dlvsym)
PRELOAD_TRAMPOLINE(dlopen, interpose_pre_dlopen, interpose_glibc_dlopen)
PRELOAD_TRAMPOLINE(dlmopen, interpose_pre_dlmopen, interpose_glibc_dlmopen)
#else
/* The four in C, each ending in a call the compiler must make a jump
** (musttail): see trampoline.h. */
EARLY PRELOAD_EXPORT void *
dlsym(void *handle, const char *symbol)
{
    void *args[4] = {handle, (void *)(uintptr_t)symbol, NULL, NULL};
    void *r = interpose_pre_dlsym(args), *p = interpose_glibc_dlsym;
    dlsym_fn f;
    memcpy(&f, &p, sizeof f);
    if (r != NULL || f == NULL)
        return r;
    __attribute__((musttail)) return f(args[0], args[1]);
}

EARLY PRELOAD_EXPORT void *
dlvsym(void *handle, const char *symbol, const char *version)
{
    void *args[4] = {handle, (void *)(uintptr_t)symbol, (void *)(uintptr_t)version, NULL};
    void *r = interpose_pre_dlvsym(args), *p = interpose_glibc_dlvsym;
    dlvsym_fn f;
    memcpy(&f, &p, sizeof f);
    if (r != NULL || f == NULL)
        return r;
    __attribute__((musttail)) return f(args[0], args[1], args[2]);
}

EARLY PRELOAD_EXPORT void *
dlopen(const char *file, int flags)
{
    void *args[4] = {(void *)(uintptr_t)file, (void *)(intptr_t)flags, NULL, NULL};
    (void)interpose_pre_dlopen(args);
    void *p = interpose_glibc_dlopen;
    void *(*f)(const char *, int);
    memcpy(&f, &p, sizeof f);
    if (f == NULL)
        return NULL;
    __attribute__((musttail)) return f(args[0], (int)(intptr_t)args[1]);
}

EARLY PRELOAD_EXPORT void *
dlmopen(Lmid_t lmid, const char *file, int flags)
{
    void *args[4] = {(void *)(intptr_t)lmid, (void *)(uintptr_t)file, (void *)(intptr_t)flags,
                     NULL};
    (void)interpose_pre_dlmopen(args);
    void *p = interpose_glibc_dlmopen;
    void *(*f)(Lmid_t, const char *, int);
    memcpy(&f, &p, sizeof f);
    if (f == NULL)
        return NULL;
    __attribute__((musttail)) return f((Lmid_t)(intptr_t)args[0], args[1],
                                       (int)(intptr_t)args[2]);
}
#endif

/* ------------------------------------------------------------------ */
/* cuGetProcAddress                                                     */
/* ------------------------------------------------------------------ */

/*
** After the real cuGetProcAddress answered *PFN for SYMBOL: substitute the
** hook of the variant it returned, remembering the real one. The
** substitution happens in DISABLED mode too, so that cuInit is ours and
** fails; only PASSIVE mode leaves the answer alone.
*/
/*
** Names for which cuGetProcAddress returns another row's function: cuda.h
** 12 #defines cuGraphInstantiate as cuGraphInstantiateWithFlags, so from
** 12000 "cuGraphInstantiate" is asked for that function. Where no row's
** range covers the request, the answer is substituted only when it *is*
** the real function of one of these rows (found by its exported name), so
** the hook handed out always has the ABI of what the driver gave, whatever
** the driver's table says.
*/
static const struct {
    const char *asked;
    enum hook_id id;
} aliases[] = {
    {"cuGraphInstantiate", HOOK_ID_cuGraphInstantiateWithFlags},
    {"cuGraphInstantiate", HOOK_ID_cuGraphInstantiate_v2},
};

/* The row whose real function P is, among the aliases of ASKED, or -1. */
static int
hook_by_alias(const char *asked, void *p)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(asked, aliases[i].asked) == 0 && interpose_real(aliases[i].id) == p)
            return (int)aliases[i].id;
    return -1;
}

static void
substitute(const char *symbol, void **pfn, int version, vcu_uint64 flags)
{
    if (symbol == NULL || pfn == NULL || *pfn == NULL ||
        preload_mode() == PRELOAD_PASSIVE)
        return;
    int id = hook_by_request(symbol, version, flags);
    if (id < 0)
        id = hook_by_alias(symbol, *pfn);
    if (id < 0)
        return;
    remember_real(id, *pfn, NULL);
    *pfn = hook_addr[id];
}

vcu_result
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, vcu_uint64 flags,
                    vcu_proc_address_result *symbolStatus)
{
    vcu_pfn_cuGetProcAddress real;
    void *p = interpose_real(HOOK_ID_cuGetProcAddress_v2);
    if (p == NULL)
        return VCU_ERROR_NOT_INITIALIZED; /* no driver: what a stub returns */
    memcpy(&real, &p, sizeof real);
    vcu_result r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == VCU_SUCCESS)
        substitute(symbol, pfn, cudaVersion, flags);
    return r;
}

vcu_result
cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, vcu_uint64 flags)
{
    vcu_pfn_cuGetProcAddress_v1 real;
    void *p = interpose_real(HOOK_ID_cuGetProcAddress);
    if (p == NULL)
        return VCU_ERROR_NOT_INITIALIZED;
    memcpy(&real, &p, sizeof real);
    vcu_result r = real(symbol, pfn, cudaVersion, flags);
    if (r == VCU_SUCCESS)
        substitute(symbol, pfn, cudaVersion, flags);
    return r;
}
