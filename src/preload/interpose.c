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
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "base/hot.h"
#include "preload/hooks.h"

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

/* Glibc's dlsym, found by version so that our own is never found. Read by
** the x86-64 trampoline below, hence not static. */
typedef void *(*dlsym_fn)(void *, const char *);
__attribute__((visibility("hidden"))) dlsym_fn interpose_real_dlsym;

EARLY static void
real_dlsym_resolve(void)
{
    if (__atomic_load_n(&interpose_real_dlsym, __ATOMIC_ACQUIRE) != NULL)
        return;
    void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (p == NULL)
        p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"); /* glibc before 2.34 */
    if (p == NULL)
        return; /* not glibc: nothing works, but nothing crashes either */
    dlsym_fn fp;
    memcpy(&fp, &p, sizeof fp);
    __atomic_store_n(&interpose_real_dlsym, fp, __ATOMIC_RELEASE);
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
    real_dlsym_resolve();
    dlsym_fn rd = __atomic_load_n(&interpose_real_dlsym, __ATOMIC_ACQUIRE);
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
/* dlsym                                                                */
/* ------------------------------------------------------------------ */

/*
** Our answer to dlsym(HANDLE, SYMBOL), or NULL to let glibc's dlsym answer
** as if we were not there. Called first by the exported dlsym, possibly
** before anything of ours ran (another library's constructor may call
** dlsym), so it initializes nothing for names that are not ours.
*/
void *interpose_dlsym_hook(void *handle, const char *symbol)
    __attribute__((visibility("hidden")));

EARLY void *
interpose_dlsym_hook(void *handle, const char *symbol)
{
    real_dlsym_resolve();
    dlsym_fn rd = __atomic_load_n(&interpose_real_dlsym, __ATOMIC_ACQUIRE);
    if (rd == NULL || symbol == NULL)
        return NULL;
    int id = hook_by_symbol(symbol);
    if (id < 0 || preload_mode() == PRELOAD_PASSIVE)
        return NULL;
    /* Looked up from here, so RTLD_NEXT means "after us": for a hooked
    ** name that is the driver, which is what it is remembered as. */
    void *p = rd(handle, symbol);
    if (p == NULL)
        return NULL; /* glibc looks again and reports the error */
    remember_real(id, p, handle == RTLD_NEXT || handle == RTLD_DEFAULT ? NULL : handle);
    return hook_addr[id];
}

#if defined(__x86_64__)
/*
** The exported dlsym. glibc's dlsym resolves RTLD_NEXT (and namespaces)
** relative to its caller's return address, so for every name we do not
** answer we must *jump* to it, leaving the original caller's return
** address in place: a call from C would make RTLD_NEXT mean "after
** libvram-preload.so" for every library in the process, and a library
** loaded after us that wraps a function of its own through
** dlsym(RTLD_NEXT, ...) would find itself and recurse forever. C cannot
** promise a tail call (not at -O0), hence these few instructions.
*/
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        ".cfi_startproc\n"
        "    pushq %rdi\n"
        ".cfi_adjust_cfa_offset 8\n"
        "    pushq %rsi\n"
        ".cfi_adjust_cfa_offset 8\n"
        "    subq $8, %rsp\n" /* the call below needs a 16-byte aligned stack */
        ".cfi_adjust_cfa_offset 8\n"
        "    call interpose_dlsym_hook\n"
        "    addq $8, %rsp\n"
        ".cfi_adjust_cfa_offset -8\n"
        "    popq %rsi\n"
        ".cfi_adjust_cfa_offset -8\n"
        "    popq %rdi\n"
        ".cfi_adjust_cfa_offset -8\n"
        "    testq %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"
        /* Resolved by the hook above; NULL only without glibc: answer NULL. */
        "1:  movq interpose_real_dlsym(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    jz 2f\n"
        "    jmpq *%rax\n"
        "2:  ret\n"
        ".cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#else
/*
** Elsewhere, a plain C override: correct for every handle but RTLD_NEXT,
** which glibc then resolves relative to this library rather than to the
** caller (see the x86-64 version). Port the trampoline before relying on
** programs that wrap functions through dlsym(RTLD_NEXT, ...).
*/
EARLY PRELOAD_EXPORT void *
dlsym(void *handle, const char *symbol)
{
    void *p = interpose_dlsym_hook(handle, symbol);
    if (p != NULL)
        return p;
    dlsym_fn rd = __atomic_load_n(&interpose_real_dlsym, __ATOMIC_ACQUIRE);
    return rd != NULL ? rd(handle, symbol) : NULL;
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
static void
substitute(const char *symbol, void **pfn, int version, vcu_uint64 flags)
{
    if (symbol == NULL || pfn == NULL || *pfn == NULL ||
        preload_mode() == PRELOAD_PASSIVE)
        return;
    int id = hook_by_request(symbol, version, flags);
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
