/* SPDX-License-Identifier: MIT */
/*
** elfsym.h -- a function of a loaded object, found by reading the
** object's own dynamic symbol table (its GNU or System V hash table and
** its version table), without asking dlsym: for the preload library,
** which overrides dlsym and dlvsym and must still reach glibc's own, and
** for the tools that measure it, which need the driver's bare functions
** beside the hooks.
*/
#ifndef VRAM_BASE_ELFSYM_H
#define VRAM_BASE_ELFSYM_H

#include <link.h>

/* The function NAME defined by the loaded object LM itself, at its
** default version (a hidden, older version of the same name is passed
** over), or NULL. Reads only memory the dynamic loader mapped; never
** takes a lock, never allocates, safe before anything is initialized
** (not instrumented in the sanitizer builds). */
void *elf_symbol(const struct link_map *lm, const char *name);

#endif
