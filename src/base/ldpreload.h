/* SPDX-License-Identifier: MIT */
/*
** ldpreload.h -- the value of LD_PRELOAD that puts one library first, for
** `vram run` and the Slurm plug-in alike.
**
** The dynamic loader (ld.so(8)) splits LD_PRELOAD at colons and spaces, so
** "a.so b.so" and "a.so:b.so" are the same two entries, and empty entries
** are nothing. The result is LIB, then every other entry of the current
** value in its order, joined by colons: an entry equal to LIB, or naming a
** file of LIB's name elsewhere (another copy of the preload library), is
** left out, since a second copy would interpose every call twice. Other
** repeated entries are the user's and are kept as they are.
*/
#ifndef VRAM_BASE_LDPRELOAD_H
#define VRAM_BASE_LDPRELOAD_H

#include <stdbool.h>
#include <stddef.h>

/* The characters ld.so splits LD_PRELOAD at. */
#define LDPRELOAD_SEPARATORS ": "

/* Write the new LD_PRELOAD into OUT (LEN bytes): LIB first, then the
** entries of CURRENT (NULL or "" for none) as described above. False if
** LIB is empty or holds a separator (it could not be one entry), or if the
** result does not fit LEN; OUT is then "". The result is never longer
** than strlen(LIB) + 1 + strlen(CURRENT). */
bool ldpreload_build(const char *lib, const char *current, char *out, size_t len);

#endif
