/* SPDX-License-Identifier: MIT */
/*
** parse.h -- the parsers of the allocator's settings, shared by the
** environment loader (env.c). Each returns true and writes its result
** only on success; on failure it writes the reason, without the
** variable's name, into WHY (LEN bytes).
*/
#ifndef VRAM_CONFIG_PARSE_H
#define VRAM_CONFIG_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/env.h"
#include "vram.h"

/* A decimal integer in MIN..MAX: digits only, no sign, no space. */
bool env_parse_int(const char *text, int64_t min, int64_t max, int64_t *out, char *why,
                   size_t len);

/* "sim" or "cuda". */
bool env_parse_backend(const char *text, vram_backend_kind *out, char *why, size_t len);

/* A boolean word, case-insensitive (true/false, 1/0, yes/no, on/off);
** -1 if TEXT is none. */
int env_bool_word(const char *text);

/* VRAM_MEMORY_LIMIT into ENV's limit_all and limit[]: one plain item
** ("6G", "3G+3G") for every device, or keyed items ("0:6G,1:3G+3G"). */
bool env_parse_limit(const char *text, struct vram_env *env, char *why, size_t len);

#endif
