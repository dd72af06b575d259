/* SPDX-License-Identifier: MIT */
/*
** quota_parse.c -- the grammar of the quota settings (quota.h): VRAM_LIMIT
** and VRAM_GROUP as the environment loader (src/config/env.c) hands them
** over, and their printed form for `vram env`. Each parser writes its
** result only on success; on failure it puts the reason (without the
** variable's name) into WHY.
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/size.h"
#include "base/strbuf.h"
#include "quota/quota.h"

static bool
is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool
quota_piece(const char *s, size_t n, const char *what, char *buf, size_t size, char *why,
            size_t len)
{
    if (n == 0) {
        snprintf(why, len, "empty %s", what);
        return false;
    }
    if (n >= size) {
        snprintf(why, len, "a %s of more than %zu characters", what, size - 1);
        return false;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    return true;
}

bool
quota_size_above_0(const char *text, const char *what, uint64_t *out, char *why, size_t len)
{
    if (size_parse(text, out) != VRAM_OK) {
        error_take(why, len);
        return false;
    }
    if (*out == 0) {
        char shown[TEXT_EXCERPT_LEN];
        snprintf(why, len, "'%s': a %s must be more than 0",
                 text_excerpt(text, shown, sizeof shown), what);
        return false;
    }
    return true;
}

/*
** One limit, S..S+N: a fraction when it ends in '%' or is digits with a
** '.' ("50%", "0.5"), else a size above 0 ("6G", "1073741824"). A whole
** number without a unit is bytes, as everywhere in vram.
*/
static bool
parse_quota_value(const char *s, size_t n, struct quota_value *out, char *why, size_t len)
{
    char buf[128];
    if (!quota_piece(s, n, "limit", buf, sizeof buf, why, len))
        return false;
    bool fraction = buf[n - 1] == '%' ||
                    (memchr(buf, '.', n) != NULL && strspn(buf, "0123456789.") == n);
    struct quota_value v = {QUOTA_NONE, 0, 0.0};
    if (fraction) {
        if (fraction_parse(buf, &v.fraction) != VRAM_OK) {
            error_take(why, len);
            return false;
        }
        v.kind = QUOTA_FRACTION;
    } else {
        if (!quota_size_above_0(buf, "limit", &v.bytes, why, len))
            return false;
        v.kind = QUOTA_BYTES;
    }
    *out = v;
    return true;
}

/*
** A GPU UUID or a prefix of one, S..S+N, starting with "GPU-" (any case):
** after it the layout xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, cut anywhere
** after the first 8 hex digits. A key that could match no device is an
** error here, because a typo must not leave a device unlimited.
*/
static bool
parse_uuid_key(const char *s, size_t n, struct quota_entry *e, const char *shown,
               char *why, size_t len)
{
    static const char layout[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    const char *u = s + 4;
    size_t m = n - 4, hex = 0;
    if (m > sizeof layout - 1) {
        snprintf(why, len, "'%s': longer than a GPU UUID (GPU-%s)", shown, layout);
        return false;
    }
    for (size_t j = 0; j < m; j++) {
        bool ok = layout[j] == '-' ? u[j] == '-' : is_hex(u[j]);
        if (!ok) {
            snprintf(why, len, "'%s': not a GPU UUID (GPU-%s)", shown, layout);
            return false;
        }
        hex += layout[j] != '-';
    }
    if (hex < 8) {
        snprintf(why, len,
                 "'%s': a GPU UUID prefix needs at least 8 hex digits after 'GPU-'",
                 shown);
        return false;
    }
    e->by_uuid = true;
    e->ordinal = -1;
    memcpy(e->uuid, s, n);
    e->uuid[n] = '\0';
    return true;
}

/* The device key of one item, S..S+N: a CUDA ordinal or a GPU UUID. */
static bool
parse_quota_key(const char *s, size_t n, struct quota_entry *e, const char *shown,
                char *why, size_t len)
{
    if (n == 0) {
        snprintf(why, len, "'%s': missing device key before ':'", shown);
        return false;
    }
    if (n >= 4 && strncasecmp(s, "GPU-", 4) == 0)
        return parse_uuid_key(s, n, e, shown, why, len);
    int ord = 0;
    for (size_t j = 0; j < n; j++) {
        if (s[j] < '0' || s[j] > '9') {
            snprintf(why, len,
                     "'%s': device key is neither an ordinal (0..%d) nor a GPU UUID "
                     "(GPU-...)",
                     shown, QUOTA_MAX_ORDINAL - 1);
            return false;
        }
        ord = ord * 10 + (s[j] - '0');
        if (ord >= QUOTA_MAX_ORDINAL) {
            snprintf(why, len, "'%s': device ordinal out of range 0..%d", shown,
                     QUOTA_MAX_ORDINAL - 1);
            return false;
        }
    }
    e->by_uuid = false;
    e->ordinal = ord;
    e->uuid[0] = '\0';
    return true;
}

/* Whether entries A and B can name the same device: the same ordinal, or
** one UUID a prefix of the other (case-insensitive). */
static bool
same_device_key(const struct quota_entry *a, const struct quota_entry *b)
{
    if (a->by_uuid != b->by_uuid)
        return false; /* an ordinal and a UUID: only the driver knows */
    if (!a->by_uuid)
        return a->ordinal == b->ordinal;
    size_t na = strlen(a->uuid), nb = strlen(b->uuid);
    return strncasecmp(a->uuid, b->uuid, na < nb ? na : nb) == 0;
}

/*
** VRAM_LIMIT: one plain limit for every device, or a comma-separated list
** of KEY:LIMIT items. Never mixed: a value with any ':' is a list. Fills
** DST's all, n_entries and entries only (the caller sets the rest).
*/
bool
quota_parse(const char *text, struct quota_env *dst, char *why, size_t len)
{
    struct quota_value all = {QUOTA_NONE, 0, 0.0};
    struct quota_entry entries[QUOTA_MAX_ENTRIES];
    int n_entries = 0;
    bool keyed = strchr(text, ':') != NULL;
    memset(entries, 0, sizeof entries);

    if (!keyed) {
        if (strchr(text, ',') != NULL) {
            snprintf(why, len, "a list needs device keys (e.g. 0:6G,1:4G)");
            return false;
        }
        if (!parse_quota_value(text, strlen(text), &all, why, len))
            return false;
    }
    for (const char *p = text; keyed;) {
        const char *comma = strchr(p, ',');
        const char *end = comma != NULL ? comma : p + strlen(p);
        size_t n = (size_t)(end - p);
        char item[TEXT_EXCERPT_LEN], shown[TEXT_EXCERPT_LEN];
        if (n == 0) {
            snprintf(why, len, "empty item in the list");
            return false;
        }
        /* The excerpt of the item alone: stop it at the comma. */
        size_t show_n = n < sizeof item - 1 ? n : sizeof item - 1;
        memcpy(item, p, show_n);
        item[show_n] = '\0';
        text_excerpt(item, shown, sizeof shown);
        const char *colon = memchr(p, ':', n);
        if (colon == NULL) {
            snprintf(why, len,
                     "'%s' has no device key (plain and per-device items cannot be "
                     "mixed)",
                     shown);
            return false;
        }
        if (n_entries == QUOTA_MAX_ENTRIES) {
            snprintf(why, len, "more than %d devices in the list", QUOTA_MAX_ENTRIES);
            return false;
        }
        struct quota_entry *e = &entries[n_entries];
        if (!parse_quota_key(p, (size_t)(colon - p), e, shown, why, len))
            return false;
        for (int k = 0; k < n_entries; k++) {
            if (!same_device_key(&entries[k], e))
                continue;
            if (e->by_uuid)
                snprintf(why, len, "'%s' and '%s' can name the same device",
                         entries[k].uuid, e->uuid);
            else
                snprintf(why, len, "device %d given twice", e->ordinal);
            return false;
        }
        if (!parse_quota_value(colon + 1, (size_t)(end - colon - 1), &e->value, why, len))
            return false;
        n_entries++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    dst->all = all;
    dst->n_entries = n_entries;
    memcpy(dst->entries, entries, sizeof entries);
    return true;
}

/* VRAM_GROUP: it names a file in /dev/shm, so a short, plain word. */
bool
quota_parse_group(const char *text, char *dst, size_t cap, char *why, size_t len)
{
    size_t n = strlen(text);
    if (n >= cap) {
        snprintf(why, len, "more than %zu characters", cap - 1);
        return false;
    }
    for (size_t j = 0; j < n; j++) {
        char c = text[j];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        if (!ok) {
            char ch[16];
            unsigned char u = (unsigned char)c;
            if (u >= 0x20 && u < 0x7f)
                snprintf(ch, sizeof ch, "'%c'", c);
            else
                snprintf(ch, sizeof ch, "byte 0x%02x", u);
            snprintf(why, len, "%s is not allowed", ch);
            return false;
        }
    }
    memcpy(dst, text, n + 1);
    return true;
}

/* One quota limit as VRAM_LIMIT takes it, exactly: "6G" or "50%". */
static void
format_quota_value(const struct quota_value *v, char *buf, size_t len)
{
    char size[32];
    if (v->kind == QUOTA_BYTES)
        strbuf_append(buf, len, "%s", size_format_setting(v->bytes, size, sizeof size));
    else if (v->kind == QUOTA_FRACTION)
        strbuf_append(buf, len, "%.15g%%", v->fraction * 100.0);
}

void
quota_format(const struct quota_env *q, char *buf, size_t len)
{
    if (q->all.kind != QUOTA_NONE) {
        format_quota_value(&q->all, buf, len);
        return;
    }
    for (int k = 0; k < q->n_entries; k++) {
        const struct quota_entry *e = &q->entries[k];
        if (e->by_uuid)
            strbuf_append(buf, len, "%s%s:", k > 0 ? "," : "", e->uuid);
        else
            strbuf_append(buf, len, "%s%d:", k > 0 ? "," : "", e->ordinal);
        format_quota_value(&e->value, buf, len);
    }
    if (q->n_entries == 0)
        strbuf_append(buf, len, "unset");
}
