/* SPDX-License-Identifier: MIT */
/*
** trampoline.h -- how the preload library overrides glibc's dynamic-
** loading functions (dlsym, dlvsym, dlopen, dlmopen) without changing
** what they mean for anybody else.
**
** glibc's dlsym and dlvsym resolve RTLD_NEXT, and dlopen and dlmopen
** choose the namespace and expand $ORIGIN and the RUNPATH, relative to
** their caller, which they find by its return address. An override that
** *called* glibc's would make every such call look as if it came from
** libvram-preload.so: dlsym(RTLD_NEXT, "malloc") in a library loaded
** after it would find that library's own malloc and recurse forever, and
** a plugin loaded by a library's RUNPATH would not be found. So the
** override is a trampoline that *jumps* to glibc's function, the caller's
** return address untouched.
**
** PRELOAD_TRAMPOLINE(name, pre, real) defines the exported function NAME
** (up to four pointer-sized arguments). It saves the arguments into an
** array of four and calls PRE(args), a C function of the library:
**   - a result other than NULL is NAME's answer, returned to the caller;
**   - NULL: the arguments are reloaded from the array (PRE may have
**     changed them) and the trampoline jumps to the function in the
**     pointer variable REAL, as if the caller had called it; NULL when
**     REAL is NULL (no glibc).
** C cannot promise a tail call (not at -O0), hence a few lines of
** assembly per architecture: x86-64 and aarch64 (where the return
** address is in x30, restored before the branch; the entry is a BTI
** landing pad, and x16 the register BTI lets a BR come from). Elsewhere a
** compiler with the musttail attribute (clang 13+, GCC 15+) gives the
** same in C (PRELOAD_TRAMPOLINE_C: the overrides are then written in C;
** PRELOAD_TRAMPOLINE_FORCE_C asks for that on x86-64 and aarch64 too, for
** tests/preload/trampoline/check_trampoline.sh); without it the library
** does not build, rather than change the meaning of RTLD_NEXT for every
** library of every process on the host.
*/
#ifndef VRAM_PRELOAD_TRAMPOLINE_H
#define VRAM_PRELOAD_TRAMPOLINE_H

#if defined(__x86_64__) && !defined(PRELOAD_TRAMPOLINE_FORCE_C)
/* At entry the stack is 8 past a 16-byte boundary (the return address):
** 40 bytes keep the call below aligned and hold the four arguments. */
#define PRELOAD_TRAMPOLINE(name, pre, real)                                              \
    __asm__(".text\n"                                                                    \
            ".globl " #name "\n"                                                         \
            ".type " #name ", @function\n" #name ":\n"                                   \
            ".cfi_startproc\n"                                                           \
            "    subq $40, %rsp\n"                                                       \
            ".cfi_adjust_cfa_offset 40\n"                                                \
            "    movq %rdi, 0(%rsp)\n"                                                   \
            "    movq %rsi, 8(%rsp)\n"                                                   \
            "    movq %rdx, 16(%rsp)\n"                                                  \
            "    movq %rcx, 24(%rsp)\n"                                                  \
            "    movq %rsp, %rdi\n"                                                      \
            "    call " #pre "\n"                                                        \
            "    movq 0(%rsp), %rdi\n"                                                   \
            "    movq 8(%rsp), %rsi\n"                                                   \
            "    movq 16(%rsp), %rdx\n"                                                  \
            "    movq 24(%rsp), %rcx\n"                                                  \
            "    addq $40, %rsp\n"                                                       \
            ".cfi_adjust_cfa_offset -40\n"                                               \
            "    testq %rax, %rax\n"                                                     \
            "    jz 1f\n"                                                                \
            "    ret\n"                                                                  \
            "1:  movq " #real "(%rip), %rax\n"                                           \
            "    testq %rax, %rax\n"                                                     \
            "    jz 2f\n"                                                                \
            "    jmpq *%rax\n"                                                           \
            "2:  ret\n"                                                                  \
            ".cfi_endproc\n"                                                             \
            ".size " #name ", .-" #name "\n");
#elif defined(__aarch64__) && !defined(PRELOAD_TRAMPOLINE_FORCE_C)
/* A frame record (x29, x30) and the four arguments in 64 bytes; x30, the
** caller's return address, is restored before the branch, so glibc sees
** the caller. */
#define PRELOAD_TRAMPOLINE(name, pre, real)                                              \
    __asm__(".text\n"                                                                    \
            ".globl " #name "\n"                                                         \
            ".type " #name ", %function\n"                                               \
            ".p2align 2\n" #name ":\n"                                                   \
            ".cfi_startproc\n"                                                           \
            "    hint 34\n"                                                              \
            "    stp x29, x30, [sp, #-64]!\n"                                            \
            ".cfi_def_cfa_offset 64\n"                                                   \
            ".cfi_offset 29, -64\n"                                                      \
            ".cfi_offset 30, -56\n"                                                      \
            "    mov x29, sp\n"                                                          \
            "    stp x0, x1, [sp, #16]\n"                                                \
            "    stp x2, x3, [sp, #32]\n"                                                \
            "    add x0, sp, #16\n"                                                      \
            "    bl " #pre "\n"                                                          \
            "    mov x16, x0\n"                                                          \
            "    ldp x0, x1, [sp, #16]\n"                                                \
            "    ldp x2, x3, [sp, #32]\n"                                                \
            "    ldp x29, x30, [sp], #64\n"                                              \
            ".cfi_def_cfa_offset 0\n"                                                    \
            ".cfi_restore 29\n"                                                          \
            ".cfi_restore 30\n"                                                          \
            "    cbz x16, 1f\n"                                                          \
            "    mov x0, x16\n"                                                          \
            "    ret\n"                                                                  \
            "1:  adrp x16, " #real "\n"                                                  \
            "    ldr x16, [x16, :lo12:" #real "]\n"                                      \
            "    cbz x16, 2f\n"                                                          \
            "    br x16\n"                                                               \
            "2:  mov x0, xzr\n"                                                          \
            "    ret\n"                                                                  \
            ".cfi_endproc\n"                                                             \
            ".size " #name ", .-" #name "\n");
#elif defined(__has_attribute) && __has_attribute(musttail)
#define PRELOAD_TRAMPOLINE_C 1 /* interpose.c writes the four in C, musttail */
#else
#error "libvram-preload.so needs a tail jump to glibc's dlsym: write PRELOAD_TRAMPOLINE for this architecture (src/preload/trampoline.h) or build with a compiler that has the musttail attribute"
#endif

#endif
