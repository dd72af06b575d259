/* SPDX-License-Identifier: MIT */
/*
** size.h -- parsing and printing of byte sizes and fractions, shared by
** the environment module, the quota grammar, the CLI, the preload library
** and the Slurm plug-in.
**
** Sizes accept "1073741824B", "512M", "6G", "6Gi", "6GiB", "6GB", "1.5G",
** "6144m", "5.00 GiB": a non-negative decimal number, then a unit K, M, G,
** T, P (case-insensitive, optionally followed by "B", "i" or "iB"), all
** 1024-based, or B for bytes; one space may come before the unit, as
** size_format prints it. A number without a unit means what the setting's
** convention says (enum size_bare); 0 needs none.
** Leading/trailing spaces are rejected; so are signs, empty strings,
** overflow past UINT64_MAX and trailing garbage.
*/
#ifndef VRAM_BASE_SIZE_H
#define VRAM_BASE_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "vram.h"

/* What a number without a unit means where a size is read. */
enum size_bare {
    SIZE_BARE_REFUSED, /* vram's own settings and options: an error that
                          gives the forms to write ("80G", "80M", "80B") */
    SIZE_BARE_BYTES,   /* bytes: HAMi's variables, as HAMi reads them, and
                          the numbers vram writes into its own files */
    SIZE_BARE_MIB      /* MiB: Slurm's convention (--mem=6144), for the
                          Slurm plug-in's --gpu-mem and arguments */
};

/* Parse TEXT as a size, a number without a unit refused (SIZE_BARE_REFUSED).
** VRAM_E_PARSE on any malformed text (the thread's last error says why,
** e.g. "'6X': unknown unit 'X'"). */
vram_status size_parse(const char *text, uint64_t *out);

/* As size_parse, a number without a unit meaning what BARE says. */
vram_status size_parse_as(const char *text, enum size_bare bare, uint64_t *out);

/* Parse TEXT as a fraction in (0, 1]: "50%" or "0.5". VRAM_E_PARSE
** otherwise (0, negative, > 1, NaN, garbage). */
vram_status fraction_parse(const char *text, double *out);

/* Print BYTES with an IEC unit and two decimals ("1.50 GiB", "512 B")
** into BUF of LEN bytes; returns BUF. size_parse reads it back (to the
** precision printed) below 1 EiB; from there it says EiB, which no
** setting takes. */
char *size_format(uint64_t bytes, char *buf, size_t len);

/* Print BYTES exactly as a setting takes it, without a space, in the
** largest unit that divides it: "5G", "1536M", "1000B", "0" (at most 22
** bytes with the NUL). For advice such as "try VRAM_MEMORY_LIMIT=5G",
** pasted as it stands; size_parse reads back the same number of bytes. */
char *size_format_setting(uint64_t bytes, char *buf, size_t len);

/* A buffer of this many bytes holds any text_excerpt. */
#define TEXT_EXCERPT_LEN 72

/* Copy TEXT (NULL reads as "") into BUF of LEN bytes for quoting inside a
** one-line error message: at most 64 characters, then "...", and control
** characters replaced by '?' so that no value can break the line. Shared
** by the parsers here and by env.c. Returns BUF. */
char *text_excerpt(const char *text, char *buf, size_t len);

#endif
