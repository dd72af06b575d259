/* SPDX-License-Identifier: MIT */
/*
** parse.c -- the parsers of the allocator's settings (parse.h): whole
** numbers, the backend, boolean words and VRAM_MEMORY_LIMIT. Each writes
** its result only on success; on failure it puts the reason (without the
** variable's name) into WHY. The quota's grammar is src/quota/quota_parse.c.
*/
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/size.h"
#include "config/parse.h"
#include "quota/quota.h"

/* A decimal integer in MIN..MAX: digits only, no sign, no space. */
bool
env_parse_int(const char *text, int64_t min, int64_t max, int64_t *out, char *why,
              size_t len)
{
    int64_t v = 0;
    const char *p = text;
    if (*p == '\0') {
        snprintf(why, len, "not a whole number");
        return false;
    }
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9') {
            snprintf(why, len, "not a whole number");
            return false;
        }
        int d = *p - '0';
        if (v > (INT64_MAX - d) / 10)
            v = INT64_MAX; /* saturate: it is out of range anyway */
        else
            v = v * 10 + d;
    }
    if (v < min || v > max) {
        snprintf(why, len, "out of range %" PRId64 "..%" PRId64, min, max);
        return false;
    }
    *out = v;
    return true;
}

bool
env_parse_backend(const char *text, vram_backend_kind *out, char *why, size_t len)
{
    if (strcmp(text, "sim") == 0)
        *out = VRAM_BACKEND_SIM;
    else if (strcmp(text, "cuda") == 0)
        *out = VRAM_BACKEND_CUDA;
    else {
        snprintf(why, len, "unknown backend");
        return false;
    }
    return true;
}

/* A boolean word, case-insensitive; -1 if TEXT is none. */
int
env_bool_word(const char *text)
{
    static const struct {
        const char *word;
        int value;
    } words[] = {{"true", 1}, {"false", 0}, {"1", 1},  {"0", 0},
                 {"yes", 1},  {"no", 0},    {"on", 1}, {"off", 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcasecmp(text, words[i].word) == 0)
            return words[i].value;
    return -1;
}

/*
** The caps of one device: sizes above 0 joined by '+', S..S+N (not
** NUL-terminated: a piece of the whole value).
*/
static bool
parse_caps(const char *s, size_t n, struct env_device_limit *out, char *why, size_t len)
{
    struct env_device_limit lim = {0};
    const char *end = s + n;
    for (const char *p = s;;) {
        const char *plus = memchr(p, '+', (size_t)(end - p));
        const char *stop = plus != NULL ? plus : end;
        size_t piece = (size_t)(stop - p);
        char buf[128];
        if (!quota_piece(p, piece, "cap", buf, sizeof buf, why, len)) {
            if (piece == 0)
                snprintf(why, len, "empty size (caps are joined by single '+')");
            return false;
        }
        if (lim.n == VRAM_MAX_LOGICAL) {
            snprintf(why, len, "more than %d logical devices on one device",
                     VRAM_MAX_LOGICAL);
            return false;
        }
        uint64_t bytes;
        if (!quota_size_above_0(buf, "cap", &bytes, why, len))
            return false;
        lim.bytes[lim.n++] = bytes;
        if (plus == NULL)
            break;
        p = plus + 1;
    }
    *out = lim;
    return true;
}

/*
** VRAM_MEMORY_LIMIT: either one plain item ("6G", "3G+3G") for every
** device, or a comma-separated list of keyed items ("0:6G,1:3G+3G").
** The two are never mixed: a value with any ':' is a keyed list.
*/
bool
env_parse_limit(const char *text, struct vram_env *env, char *why, size_t len)
{
    struct env_device_limit all = {0};
    struct env_device_limit per[ENV_MAX_DEVICES];
    memset(per, 0, sizeof per);
    bool keyed = strchr(text, ':') != NULL;
    char shown[TEXT_EXCERPT_LEN];

    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma != NULL ? comma : p + strlen(p);
        size_t n = (size_t)(end - p);
        if (n == 0) {
            snprintf(why, len, "empty item in the list");
            return false;
        }
        if (!keyed) {
            if (comma != NULL) {
                snprintf(why, len, "a list needs device ordinals (e.g. 0:6G,1:4G)");
                return false;
            }
            if (!parse_caps(p, n, &all, why, len))
                return false;
        } else {
            const char *colon = memchr(p, ':', n);
            char item[TEXT_EXCERPT_LEN];
            /* The excerpt of the item alone: stop it at the comma. */
            size_t show_n = n < sizeof item - 1 ? n : sizeof item - 1;
            memcpy(item, p, show_n);
            item[show_n] = '\0';
            text_excerpt(item, shown, sizeof shown);
            if (colon == NULL) {
                snprintf(why, len,
                         "'%s' has no device ordinal (plain and per-device items "
                         "cannot be mixed)",
                         shown);
                return false;
            }
            int ord = 0;
            if (colon == p) {
                snprintf(why, len, "'%s': missing device ordinal before ':'", shown);
                return false;
            }
            for (const char *q = p; q < colon; q++) {
                if (*q < '0' || *q > '9') {
                    snprintf(why, len, "'%s': device ordinal is not a whole number",
                             shown);
                    return false;
                }
                ord = ord * 10 + (*q - '0');
                if (ord >= ENV_MAX_DEVICES) {
                    snprintf(why, len, "'%s': device ordinal out of range 0..%d", shown,
                             ENV_MAX_DEVICES - 1);
                    return false;
                }
            }
            if (per[ord].n != 0) {
                snprintf(why, len, "device %d given twice", ord);
                return false;
            }
            if (!parse_caps(colon + 1, (size_t)(end - colon - 1), &per[ord], why, len))
                return false;
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    env->limit_all = all;
    memcpy(env->limit, per, sizeof per);
    return true;
}
