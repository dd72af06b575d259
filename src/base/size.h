/* SPDX-License-Identifier: MIT */
/*
** size.h -- parsing and printing of byte sizes and fractions, shared by
** the environment module, the quota grammar, the CLI, the preload library
** and the Slurm plug-in.
**
** Sizes accept "1073741824", "512M", "6G", "6Gi", "6GiB", "6GB", "1.5G",
** "6144m": a non-negative decimal number with an optional suffix K, M, G,
** T, P (case-insensitive, optionally followed by "B", "i" or "iB"), all
** 1024-based.
** Leading/trailing spaces are rejected; so are signs, empty strings,
** overflow past UINT64_MAX and trailing garbage.
*/
#ifndef VRAM_BASE_SIZE_H
#define VRAM_BASE_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "vram.h"

/* Parse TEXT as a size. VRAM_E_PARSE on any malformed text (the
** thread's last error says why, e.g. "'6X': unknown unit 'X'"). */
vram_status size_parse(const char *text, uint64_t *out);

/* Parse TEXT as a fraction in (0, 1]: "50%" or "0.5". VRAM_E_PARSE
** otherwise (0, negative, > 1, NaN, garbage). */
vram_status fraction_parse(const char *text, double *out);

/* Print BYTES with an IEC unit and two decimals ("1.50 GiB", "512 B")
** into BUF of LEN bytes; returns BUF. */
char *size_format(uint64_t bytes, char *buf, size_t len);

/* A buffer of this many bytes holds any text_excerpt. */
#define TEXT_EXCERPT_LEN 72

/* Copy TEXT (NULL reads as "") into BUF of LEN bytes for quoting inside a
** one-line error message: at most 64 characters, then "...", and control
** characters replaced by '?' so that no value can break the line. Shared
** by the parsers here and by env.c. Returns BUF. */
char *text_excerpt(const char *text, char *buf, size_t len);

#endif
