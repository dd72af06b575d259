/* SPDX-License-Identifier: MIT */
/*
** fuzz_config.c -- a libFuzzer target over the settings' parsers: sizes and
** fractions (src/base/size.c), the allocator's settings (src/config) and
** the quota grammar (src/quota), alone and through the environment loaders.
**
** The first byte picks the parser; the rest is its text (cut at a NUL, as
** an environment value is). For the loaders the text is an environment,
** NAME=VALUE per line, read through a getter. Invariants:
**  - a refusal is one line (never empty, never a newline in it) and leaves
**    the output alone;
**  - what is accepted is in range: a size parses back from its decimal
**    form in bytes ("NB"), from its bare decimal form where a bare number
**    is bytes, and exactly from the form vram offers for a setting
**    (size_format_setting), and what size_format prints parses (below 1
**    EiB, the largest unit a setting takes being the PiB); a
**    fraction is in (0, 1], an integer within its bounds, a group name of
**    the allowed characters, a quota's per-device limit at most the
**    device's memory.
** Built without libFuzzer, replay.c's main() runs the corpus once.
*/
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"
#include "config/env.h"
#include "config/parse.h"
#include "quota/quota.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fail(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_config: invariant broken: %s, on '%s'\n", what, text);
    abort();
}

static void
check_line(const char *why, const char *text)
{
    if (why[0] == '\0' || strchr(why, '\n') != NULL)
        fail("a refusal is not one line", text);
}

static void
fuzz_size(const char *text)
{
    uint64_t v = 0x5a5a;
    if (size_parse(text, &v) != VRAM_OK) {
        check_line(vram_last_error(), text);
        if (v != 0x5a5a)
            fail("a refused size wrote its output", text);
        return;
    }
    char back[32], shown[32];
    uint64_t w = 0;
    snprintf(back, sizeof back, "%" PRIu64 "B", v);
    if (size_parse(back, &w) != VRAM_OK || w != v)
        fail("a size does not parse back from its decimal form in bytes", text);
    snprintf(back, sizeof back, "%" PRIu64, v);
    if (size_parse_as(back, SIZE_BARE_BYTES, &w) != VRAM_OK || w != v)
        fail("a size does not parse back from its bare decimal form as bytes", text);
    size_format_setting(v, back, sizeof back);
    if (size_parse(back, &w) != VRAM_OK || w != v || strchr(back, ' ') != NULL)
        fail("a size does not parse back from its setting's form", text);
    size_format(v, shown, sizeof shown);
    if (strchr(shown, '\n') != NULL)
        fail("a size prints on more than one line", text);
    /* Below 1 EiB: above, size_format says EiB, a unit no setting takes
    ** (and the last of them round up past 2^64). */
    if (v < (1ULL << 60) && size_parse(shown, &w) != VRAM_OK)
        fail("a size as vram prints it does not parse", text);
}

static void
fuzz_fraction(const char *text)
{
    double f = -7;
    if (fraction_parse(text, &f) != VRAM_OK) {
        check_line(vram_last_error(), text);
        if (f != -7)
            fail("a refused fraction wrote its output", text);
    } else if (!(f > 0 && f <= 1)) {
        fail("a fraction outside (0, 1]", text);
    }
}

static void
fuzz_int(const char *text, uint8_t bounds)
{
    static const int64_t edges[] = {0, 1, 15, 63, 4096, INT32_MAX, INT64_MAX};
    int64_t lo = edges[bounds % 4], hi = edges[3 + (bounds >> 4) % 4], v = -5;
    char why[256] = "";
    if (!env_parse_int(text, lo, hi, &v, why, sizeof why)) {
        check_line(why, text);
        if (v != -5)
            fail("a refused integer wrote its output", text);
    } else if (v < lo || v > hi) {
        fail("an integer out of its bounds", text);
    }
}

static void
fuzz_quota(const char *text)
{
    struct quota_env q, before;
    memset(&q, 0x5a, sizeof q);
    before = q;
    char why[256] = "";
    if (!quota_parse(text, &q, why, sizeof why)) {
        check_line(why, text);
        if (memcmp(&q, &before, sizeof q) != 0)
            fail("a refused quota changed its output", text);
        return;
    }
    q.source = "VRAM_LIMIT";
    q.group[0] = q.origin[0] = '\0';
    q.active = true;
    q.context = -1;
    if (q.n_entries < 0 || q.n_entries > QUOTA_MAX_ENTRIES)
        fail("entries out of range", text);
    for (int i = 0; i < q.n_entries; i++) {
        const struct quota_entry *e = &q.entries[i];
        if (memchr(e->uuid, '\0', sizeof e->uuid) == NULL)
            fail("an entry's UUID is not a string", text);
        if (e->value.kind == QUOTA_FRACTION && !(e->value.fraction > 0 && e->value.fraction <= 1))
            fail("an entry's fraction outside (0, 1]", text);
    }
    static const uint64_t total = UINT64_C(80) << 30;
    for (int dev = 0; dev < 4; dev++)
        if (quota_for_device(&q, dev, "GPU-8c6f1e2a-0000-0000-0000-000000000000", total) > total)
            fail("a limit above the device's memory", text);
    char shown[1024] = "";
    quota_format(&q, shown, sizeof shown);
    if (strchr(shown, '\n') != NULL)
        fail("a quota prints on more than one line", text);
}

static void
fuzz_group(const char *text)
{
    char g[QUOTA_GROUP_LEN] = "untouched", why[256] = "";
    if (!quota_parse_group(text, g, sizeof g, why, sizeof why)) {
        check_line(why, text);
        if (strcmp(g, "untouched") != 0)
            fail("a refused group wrote its output", text);
    } else if (strspn(g, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
               strlen(g)) {
        fail("a group name with a character a file name must not have", text);
    }
}

static void
fuzz_limit(const char *text)
{
    struct vram_env env;
    memset(&env, 0, sizeof env);
    char why[256] = "";
    if (!env_parse_limit(text, &env, why, sizeof why))
        check_line(why, text);
}

/* ---- the loaders, over an environment of NAME=VALUE lines ---- */

static const char *
getter(const char *name, void *user)
{
    size_t n = strlen(name);
    for (const char *line = user; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        if (strncmp(line, name, n) == 0 && line[n] == '=') {
            /* The value is the rest of the line: cut it in a static copy. */
            static char value[8192];
            size_t len = end ? (size_t)(end - line - n - 1) : strlen(line + n + 1);
            if (len >= sizeof value)
                len = sizeof value - 1;
            memcpy(value, line + n + 1, len);
            value[len] = '\0';
            return value;
        }
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

static void
check_row(void *ctx, const struct env_row *row)
{
    if (strchr(row->name, '\n') != NULL || strchr(row->value, '\n') != NULL)
        fail("a row of `vram env` on more than one line", ctx);
    /* (A text may itself start with "error: ": VRAM_TRACE=error: x.) */
    if (row->source == NULL && strncmp(row->value, "error: ", 7) != 0)
        fail("a row of `vram env` without a source is an error", ctx);
    if (row->origin != NULL && (row->source == NULL || strcmp(row->source, "default") != 0))
        fail("a row of `vram env` names whose default it is only when it is one", ctx);
}

static void
fuzz_loaders(const char *text)
{
    void *u = (void *)text;
    struct vram_env env;
    if (env_load(getter, u, &env) != VRAM_OK)
        check_line(vram_last_error(), text);
    struct quota_env q;
    if (env_quota_load(getter, u, &q) != VRAM_OK) {
        check_line(vram_last_error(), text);
    } else if (q.active) {
        static const uint64_t total = UINT64_C(80) << 30;
        for (int dev = 0; dev < 4; dev++)
            if (quota_for_device(&q, dev, "GPU-0", total) > total)
                fail("a limit above the device's memory", text);
    }
    static struct env_run run;
    if (env_run_load(getter, u, &run) != VRAM_OK)
        check_line(vram_last_error(), text);
    char buf[4096];
    bool set = false;
    if (env_visible_load(getter, u, buf, sizeof buf, &set) != VRAM_OK)
        check_line(vram_last_error(), text);
    static struct env_trace tr;
    if (env_trace_load(getter, u, &tr) != VRAM_OK)
        check_line(vram_last_error(), text);
    env_each(getter, u, check_row, u);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* The text, cut at the first NUL as a C string from the environment is. */
    char *text = malloc(size);
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    switch (data[0] % 8) {
    case 0:
        fuzz_size(text);
        break;
    case 1:
        fuzz_fraction(text);
        break;
    case 2:
        fuzz_int(text[0] ? text + 1 : text, (uint8_t)text[0]);
        break;
    case 3:
        fuzz_quota(text);
        break;
    case 4:
        fuzz_group(text);
        break;
    case 5:
        fuzz_limit(text);
        break;
    default:
        fuzz_loaders(text);
        break;
    }
    free(text);
    return 0;
}
