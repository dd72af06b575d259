/* SPDX-License-Identifier: MIT */
/*
** policy.c -- the host's GPU memory policy file (see policy.h and
** docs/POLICY.md): the safety checks on the file, the parser with its
** "PATH:LINE: problem" errors, and which rule limits whom.
*/
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdarg.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/size.h"
#include "policy/policy.h"
#include "quota/quota.h"

/* ------------------------------------------------------------------ */
/* Parsing                                                              */
/* ------------------------------------------------------------------ */

#define KEYWORDS "default, user, group, exempt, reader, context"

/* Parser state: the text being cut into lines, and the rules so far. */
struct parse {
    const char *path;
    int line;
    struct policy p;
    int cap; /* rules allocated */
};

/* Set the last error "PATH:LINE: fmt" and return VRAM_E_CONFIG. */
#define parse_error(s, ...)                                                              \
    error_set_at(VRAM_E_CONFIG, (s)->path, (unsigned long long)(s)->line, __VA_ARGS__)

/*
** A user or group name as the system's tools accept them (useradd's
** default rule, plus a trailing '$' for machine accounts): letters,
** digits, '.', '_', '-', not starting with '-', 1..32 characters; or a
** numeric id (all digits).
*/
static bool
name_ok(const char *w)
{
    size_t n = strlen(w);
    if (n == 0 || n >= POLICY_NAME_LEN || w[0] == '-')
        return false;
    for (size_t j = 0; j < n; j++) {
        char c = w[j];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
                  (c == '$' && j == n - 1);
        if (!ok)
            return false;
    }
    return true;
}

static const char *
kind_word(int kind)
{
    switch (kind) {
    case POLICY_USER:
    case POLICY_EXEMPT_USER:
    case POLICY_READER_USER:
        return "user";
    case POLICY_GROUP:
    case POLICY_EXEMPT_GROUP:
    case POLICY_READER_GROUP:
        return "group";
    default:
        return "default";
    }
}

/* Whether rule kinds A and B are about the same kind of subject and
** decide the same thing (a limit or an exemption are one decision). */
static bool
same_decision(int a, int b)
{
    bool la = a == POLICY_USER || a == POLICY_EXEMPT_USER;
    bool lb = b == POLICY_USER || b == POLICY_EXEMPT_USER;
    bool ga = a == POLICY_GROUP || a == POLICY_EXEMPT_GROUP;
    bool gb = b == POLICY_GROUP || b == POLICY_EXEMPT_GROUP;
    return (la && lb) || (ga && gb) || a == b;
}

static vram_status
add_rule(struct parse *s, const struct policy_rule *r)
{
    for (int k = 0; k < s->p.n_rules; k++) {
        const struct policy_rule *o = &s->p.rules[k];
        if (!same_decision(o->kind, r->kind) || strcmp(o->name, r->name) != 0)
            continue;
        if (o->kind == r->kind)
            return parse_error(s, "%s %s given twice (first at line %d)",
                               kind_word(r->kind), r->name, o->line);
        return parse_error(s, "%s %s is both limited and exempt (other rule at line %d)",
                           kind_word(r->kind), r->name, o->line);
    }
    if (s->p.n_rules == POLICY_MAX_RULES)
        return parse_error(s, "more than %d rules", POLICY_MAX_RULES);
    if (s->p.n_rules == s->cap) {
        int cap = s->cap == 0 ? 16 : s->cap * 2;
        struct policy_rule *n = realloc(s->p.rules, (size_t)cap * sizeof *n);
        if (n == NULL)
            return error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", s->path);
        s->p.rules = n;
        s->cap = cap;
    }
    s->p.rules[s->p.n_rules++] = *r;
    return VRAM_OK;
}

/* LIMIT in VRAM_LIMIT's grammar into R->limit; WHO names the rule. */
static vram_status
parse_limit_word(const struct parse *s, const char *who, const char *word,
                 struct policy_rule *r)
{
    char why[384] = "";
    memset(&r->limit, 0, sizeof r->limit);
    if (quota_parse(word, &r->limit, why, sizeof why)) {
        r->limit.active = true;
        snprintf(r->text, sizeof r->text, "%s", word);
        return VRAM_OK;
    }
    return parse_error(s, "%s: %s (expected %s)", who, why, QUOTA_EXPECT);
}

/* One line's words (at most 4 are looked at; *N counts them all). */
static int
split(char *line, char **w, int max)
{
    int n = 0;
    for (char *p = line;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r')
            *p++ = '\0';
        if (*p == '\0')
            break;
        if (n < max)
            w[n] = p;
        n++;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\r')
            p++;
    }
    return n;
}

/*
** A limit as vram prints sizes, "20.00 GiB", is two words: when word AT
** (the rule's last) is followed by a unit alone (1 to 3 letters) and ends
** in a digit, the two are one limit again, joined into BUF (LEN bytes),
** and *N counts one word less.
*/
static void
join_unit(char **w, int *n, int at, char *buf, size_t len)
{
    if (*n != at + 2 || at + 1 >= 4)
        return;
    const char *num = w[at], *unit = w[at + 1];
    size_t nn = strlen(num), nu = strlen(unit);
    bool letters = nu >= 1 && nu <= 3;
    for (size_t i = 0; i < nu && letters; i++) {
        char c = unit[i];
        letters = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    }
    bool number = nn > 0 && num[nn - 1] >= '0' && num[nn - 1] <= '9';
    if (!letters || !number || nn + nu + 2 > len)
        return;
    memcpy(buf, num, nn);
    buf[nn] = ' ';
    memcpy(buf + nn + 1, unit, nu + 1);
    w[at] = buf;
    (*n)--;
}

/* Check a NAME word of rule WHAT ("user", "group"). */
static vram_status
check_name(const struct parse *s, const char *what, const char *name)
{
    if (name_ok(name))
        return VRAM_OK;
    char shown[TEXT_EXCERPT_LEN];
    return parse_error(s,
                       "'%s' is not a %s name (1 to 32 letters, digits, '.', '_', '-', "
                       "not starting with '-'; or a numeric id)",
                       text_excerpt(name, shown, sizeof shown), what);
}

static vram_status
parse_line(struct parse *s, char *line)
{
    char *hash = strchr(line, '#');
    if (hash != NULL)
        *hash = '\0';
    char *w[4], joined[POLICY_MAX_LINE + 2];
    int n = split(line, w, 4);
    if (n == 0)
        return VRAM_OK;
    if (strcmp(w[0], "default") == 0)
        join_unit(w, &n, 1, joined, sizeof joined);
    else if (strcmp(w[0], "user") == 0 || strcmp(w[0], "group") == 0)
        join_unit(w, &n, 2, joined, sizeof joined);
    struct policy_rule r;
    memset(&r, 0, sizeof r);
    r.line = s->line;
    char shown[TEXT_EXCERPT_LEN];
    if (strcmp(w[0], "default") == 0) {
        if (n != 2)
            return parse_error(s, "'default' takes one limit (e.g. default 40G)");
        if (s->p.has_default)
            return parse_error(s, "default given twice (first at line %d)", s->p.def.line);
        r.kind = POLICY_DEFAULT;
        if (parse_limit_word(s, "default", w[1], &r) != VRAM_OK)
            return VRAM_E_CONFIG;
        s->p.def = r;
        s->p.has_default = true;
        return VRAM_OK;
    }
    if (strcmp(w[0], "context") == 0) {
        if (n != 2 || (strcmp(w[1], "on") != 0 && strcmp(w[1], "off") != 0))
            return parse_error(s, "'context' takes on or off");
        if (s->p.context_line != 0)
            return parse_error(s, "context given twice (first at line %d)",
                               s->p.context_line);
        s->p.context = strcmp(w[1], "on") == 0;
        s->p.context_line = s->line;
        return VRAM_OK;
    }
    if (strcmp(w[0], "user") == 0 || strcmp(w[0], "group") == 0) {
        bool user = w[0][0] == 'u';
        if (n != 3)
            return parse_error(s, "'%s' takes a name and a limit (e.g. %s)", w[0],
                               user ? "user alice 40G" : "group ml 50%");
        if (check_name(s, w[0], w[1]) != VRAM_OK)
            return VRAM_E_CONFIG;
        r.kind = user ? POLICY_USER : POLICY_GROUP;
        snprintf(r.name, sizeof r.name, "%s", w[1]);
        char who[POLICY_NAME_LEN + 8];
        snprintf(who, sizeof who, "%s %s", w[0], w[1]);
        if (parse_limit_word(s, who, w[2], &r) != VRAM_OK)
            return VRAM_E_CONFIG;
        return add_rule(s, &r);
    }
    if (strcmp(w[0], "exempt") == 0 || strcmp(w[0], "reader") == 0) {
        bool exempt = w[0][0] == 'e';
        if (n != 3 || (strcmp(w[1], "user") != 0 && strcmp(w[1], "group") != 0))
            return parse_error(s, "'%s' takes 'user NAME' or 'group NAME' (e.g. %s user %s)",
                               w[0], w[0], exempt ? "ci-runner" : "prometheus");
        if (check_name(s, w[1], w[2]) != VRAM_OK)
            return VRAM_E_CONFIG;
        bool user = w[1][0] == 'u';
        r.kind = exempt ? (user ? POLICY_EXEMPT_USER : POLICY_EXEMPT_GROUP)
                        : (user ? POLICY_READER_USER : POLICY_READER_GROUP);
        snprintf(r.name, sizeof r.name, "%s", w[2]);
        return add_rule(s, &r);
    }
    return parse_error(s, "unknown keyword '%s' (expected " KEYWORDS ")",
                       text_excerpt(w[0], shown, sizeof shown));
}

vram_status
policy_parse(const char *path, const char *text, size_t n, struct policy *out)
{
    if (path == NULL || (text == NULL && n > 0) || out == NULL)
        return error_set(VRAM_E_INVALID, "policy_parse: NULL argument");
    struct parse s;
    memset(&s, 0, sizeof s);
    s.path = path;
    s.p.context = true;
    snprintf(s.p.path, sizeof s.p.path, "%s", path);
    vram_status st = VRAM_OK;
    char line[POLICY_MAX_LINE + 1];
    size_t i = 0;
    while (i < n && st == VRAM_OK) {
        s.line++;
        const char *nl = memchr(text + i, '\n', n - i);
        size_t len = nl != NULL ? (size_t)(nl - (text + i)) : n - i;
        if (len > POLICY_MAX_LINE) {
            st = parse_error(&s, "line longer than %d characters", POLICY_MAX_LINE);
            break;
        }
        memcpy(line, text + i, len);
        line[len] = '\0';
        for (size_t j = 0; j < len; j++) {
            unsigned char c = (unsigned char)line[j];
            if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
                st = parse_error(&s, "control character 0x%02x at column %zu", c, j + 1);
                break;
            }
        }
        if (st == VRAM_OK)
            st = parse_line(&s, line);
        i += len + (nl != NULL);
    }
    if (st != VRAM_OK) {
        free(s.p.rules);
        return st;
    }
    *out = s.p;
    return VRAM_OK;
}

const char *
policy_path(void)
{
    return VRAM_POLICY_PATH;
}

void
policy_free(struct policy *p)
{
    if (p == NULL)
        return;
    free(p->rules);
    p->rules = NULL;
    p->n_rules = 0;
}

/* ------------------------------------------------------------------ */
/* The file                                                             */
/* ------------------------------------------------------------------ */

/* Whether ST's mode lets anybody but root write it: others' write bit,
** or the group's for a group other than root's. */
static bool
writable_by_others(const struct stat *st)
{
    return (st->st_mode & S_IWOTH) != 0 || ((st->st_mode & S_IWGRP) != 0 && st->st_gid != 0);
}

/* The directory holding PATH must be root's and closed to others, or
** anybody who can write it could put another file in PATH's place. */
static vram_status
check_directory(const char *path)
{
    char dir[POLICY_PATH_LEN];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    struct stat st;
    if (stat(dir, &st) != 0)
        return error_set(VRAM_E_IO, "%s: cannot read its directory %s: %s", path, dir,
                         strerror(errno));
    if (st.st_uid != 0)
        return error_set(VRAM_E_CONFIG,
                         "%s: its directory %s is owned by uid %ld, not root", path, dir,
                         (long)st.st_uid);
    if (writable_by_others(&st))
        return error_set(VRAM_E_CONFIG, "%s: its directory %s is writable by others (mode %04o)",
                         path, dir, (unsigned)(st.st_mode & 07777));
    return VRAM_OK;
}

vram_status
policy_load(const char *path, struct policy *out, bool *present)
{
    if (path == NULL || out == NULL || present == NULL)
        return error_set(VRAM_E_INVALID, "policy_load: NULL argument");
    if (strlen(path) >= POLICY_PATH_LEN)
        return error_set(VRAM_E_CONFIG, "policy file path longer than %d bytes",
                         POLICY_PATH_LEN - 1);
    /* O_NONBLOCK: a FIFO put in its place must not stop the process. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT) {
            *present = false;
            return VRAM_OK;
        }
        if (e == ELOOP)
            return error_set(VRAM_E_CONFIG, "%s: is a symbolic link (it must be the file itself)",
                             path);
        return error_set(VRAM_E_IO, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    vram_status rc = VRAM_OK;
    if (fstat(fd, &st) != 0)
        rc = error_set(VRAM_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = error_set(VRAM_E_CONFIG, "%s: not a regular file", path);
    else if (st.st_uid != 0)
        rc = error_set(VRAM_E_CONFIG, "%s: owned by uid %ld, not root", path,
                       (long)st.st_uid);
    else if (writable_by_others(&st))
        rc = error_set(VRAM_E_CONFIG, "%s: writable by others (mode %04o; expected e.g. 0644)",
                       path, (unsigned)(st.st_mode & 07777));
    else if (st.st_size > POLICY_MAX_BYTES)
        rc = error_set(VRAM_E_CONFIG, "%s: larger than %d bytes", path, POLICY_MAX_BYTES);
    if (rc == VRAM_OK)
        rc = check_directory(path);
    char *buf = NULL;
    size_t n = 0;
    if (rc == VRAM_OK) {
        buf = malloc((size_t)st.st_size + 1);
        if (buf == NULL)
            rc = error_set(VRAM_E_HOST_MEMORY, "%s: out of host memory", path);
    }
    /* Read what fstat promised, and no more: a file growing under us is
    ** read as it was. */
    while (rc == VRAM_OK && n < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = error_set(VRAM_E_IO, "%s: cannot read: %s", path, strerror(errno));
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (rc == VRAM_OK && memchr(buf, '\0', n) != NULL)
        rc = error_set(VRAM_E_CONFIG, "%s: holds a NUL byte (not a text file)", path);
    struct policy p;
    if (rc == VRAM_OK)
        rc = policy_parse(path, buf, n, &p);
    free(buf);
    if (rc != VRAM_OK)
        return rc;
    *out = p;
    *present = true;
    return VRAM_OK;
}

/* ------------------------------------------------------------------ */
/* Who                                                                  */
/* ------------------------------------------------------------------ */

/* The name of user (USER true) or group ID into BUF (LEN bytes), "" if it
** has none or a longer one. The buffer fits the largest group entries. */
static void
id_name(bool user, unsigned id, char *buf, size_t len)
{
    char tmp[16384];
    const char *name = NULL;
    if (user) {
        struct passwd pw, *res = NULL;
        if (getpwuid_r((uid_t)id, &pw, tmp, sizeof tmp, &res) == 0 && res != NULL)
            name = res->pw_name;
    } else {
        struct group gr, *res = NULL;
        if (getgrgid_r((gid_t)id, &gr, tmp, sizeof tmp, &res) == 0 && res != NULL)
            name = res->gr_name;
    }
    buf[0] = '\0';
    if (name != NULL && strlen(name) < len)
        snprintf(buf, len, "%s", name);
}

/* Fill W's groups from GIDS (N of them, PRIMARY first, no repeats). */
static void
who_groups(struct policy_who *w, gid_t primary, const gid_t *gids, int n)
{
    w->n_groups = 0;
    w->gid[w->n_groups++] = primary;
    for (int i = 0; i < n && w->n_groups < POLICY_MAX_GROUPS; i++) {
        bool seen = false;
        for (int k = 0; k < w->n_groups; k++)
            seen = seen || w->gid[k] == gids[i];
        if (!seen)
            w->gid[w->n_groups++] = gids[i];
    }
    for (int k = 0; k < w->n_groups; k++)
        id_name(false, w->gid[k], w->group[k], sizeof w->group[k]);
}

vram_status
policy_who_current(struct policy_who *out)
{
    if (out == NULL)
        return error_set(VRAM_E_INVALID, "policy_who_current: OUT is NULL");
    gid_t gids[POLICY_MAX_GROUPS];
    int n = getgroups(POLICY_MAX_GROUPS, gids);
    if (n < 0) {
        /* More groups than we look at: a limit from a group we skip is
        ** lost, which can only lower the largest; say so instead. */
        return error_set(VRAM_E_IO, "cannot read this process's groups: %s",
                         strerror(errno));
    }
    struct policy_who w;
    memset(&w, 0, sizeof w);
    w.uid = geteuid();
    id_name(true, w.uid, w.user, sizeof w.user);
    who_groups(&w, getegid(), gids, n);
    *out = w;
    return VRAM_OK;
}

vram_status
policy_who_user(const char *name, struct policy_who *out)
{
    if (name == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "policy_who_user: NULL argument");
    struct passwd pw, *res = NULL;
    char tmp[4096];
    char *end = NULL;
    errno = 0;
    unsigned long id = strtoul(name, &end, 10);
    bool numeric = name[0] >= '0' && name[0] <= '9' && end != NULL && *end == '\0' &&
                   errno == 0 && id <= UINT_MAX;
    int rc = numeric ? getpwuid_r((uid_t)id, &pw, tmp, sizeof tmp, &res)
                     : getpwnam_r(name, &pw, tmp, sizeof tmp, &res);
    struct policy_who w;
    memset(&w, 0, sizeof w);
    if (rc != 0 || res == NULL) {
        if (!numeric) {
            char shown[TEXT_EXCERPT_LEN];
            return error_set(VRAM_E_INVALID, "no user '%s' on this host",
                             text_excerpt(name, shown, sizeof shown));
        }
        /* A uid without a name still has a policy: the default. */
        w.uid = (uid_t)id;
        w.n_groups = 0;
        *out = w;
        return VRAM_OK;
    }
    w.uid = res->pw_uid;
    snprintf(w.user, sizeof w.user, "%s", res->pw_name);
    gid_t gids[POLICY_MAX_GROUPS];
    int n = POLICY_MAX_GROUPS;
    if (getgrouplist(res->pw_name, res->pw_gid, gids, &n) < 0)
        n = POLICY_MAX_GROUPS;
    who_groups(&w, res->pw_gid, gids, n);
    *out = w;
    return VRAM_OK;
}

/* ------------------------------------------------------------------ */
/* Which rule                                                           */
/* ------------------------------------------------------------------ */

/* Whether a rule's NAME names the user or group (NAME_OF, ID). */
static bool
names(const char *rule_name, const char *name_of, unsigned long id)
{
    if (rule_name[0] >= '0' && rule_name[0] <= '9' &&
        strspn(rule_name, "0123456789") == strlen(rule_name)) {
        char *end;
        return strtoul(rule_name, &end, 10) == id;
    }
    return name_of[0] != '\0' && strcmp(rule_name, name_of) == 0;
}

void
policy_resolve(const struct policy *p, const struct policy_who *w,
               struct policy_verdict *out)
{
    struct policy_verdict v;
    memset(&v, 0, sizeof v);
    bool user_decided = false, group_exempt = false;
    v.reader = w->uid == 0;
    for (int k = 0; p != NULL && k < p->n_rules; k++) {
        const struct policy_rule *r = &p->rules[k];
        bool is_user = r->kind == POLICY_USER || r->kind == POLICY_EXEMPT_USER ||
                       r->kind == POLICY_READER_USER;
        bool match = false;
        if (is_user)
            match = names(r->name, w->user, (unsigned long)w->uid);
        for (int g = 0; !is_user && !match && g < w->n_groups; g++)
            match = names(r->name, w->group[g], (unsigned long)w->gid[g]);
        if (!match)
            continue;
        switch (r->kind) {
        case POLICY_USER:
            v.user_rule = r;
            user_decided = true;
            break;
        case POLICY_EXEMPT_USER:
            v.exempt = true;
            user_decided = true;
            break;
        case POLICY_GROUP:
            if (v.n_group_rules < POLICY_MAX_GROUPS)
                v.group_rules[v.n_group_rules++] = r;
            break;
        case POLICY_EXEMPT_GROUP:
            group_exempt = true;
            break;
        case POLICY_READER_USER:
        case POLICY_READER_GROUP:
            v.reader = true;
            break;
        default:
            break;
        }
    }
    /* root is exempt unless a rule of its own limits it. */
    if (!user_decided && w->uid == 0)
        v.exempt = true;
    /* An exempt group is the largest of the groups: unlimited. */
    if (!user_decided && group_exempt)
        v.exempt = true;
    if (v.exempt) {
        v.user_rule = NULL;
        v.n_group_rules = 0;
    }
    if (!v.exempt && p != NULL && p->has_default)
        v.def = &p->def;
    *out = v;
}

/*
** The limit of one rule's value Q for a GPU: as quota_for_device, except
** that a rule keyed by ordinals, asked about a GPU whose host ordinal is
** unknown (and that no UUID key names), gives its smallest limit.
*/
static uint64_t
rule_limit(const struct quota_env *q, int host_ord, const char *uuid, uint64_t total)
{
    if (host_ord >= 0)
        return quota_for_device(q, host_ord, uuid, total);
    struct quota_env uuids = *q;
    uuids.n_entries = 0;
    uint64_t smallest = 0;
    for (int k = 0; k < q->n_entries && k < QUOTA_MAX_ENTRIES; k++) {
        if (q->entries[k].by_uuid) {
            uuids.entries[uuids.n_entries++] = q->entries[k];
            continue;
        }
        struct quota_env one = *q;
        one.n_entries = 1;
        one.entries[0] = q->entries[k];
        uint64_t l = quota_for_device(&one, q->entries[k].ordinal, uuid, total);
        if (l != 0 && (smallest == 0 || l < smallest))
            smallest = l;
    }
    /* A UUID key naming the GPU wins, as it would with the ordinal known. */
    struct quota_env only_uuid = uuids;
    only_uuid.all.kind = QUOTA_NONE;
    uint64_t by_uuid = quota_for_device(&only_uuid, -1, uuid, total);
    if (by_uuid != 0)
        return by_uuid;
    uint64_t all = quota_for_device(&uuids, -1, uuid, total);
    if (smallest != 0 && (all == 0 || smallest < all))
        return smallest;
    return all;
}

uint64_t
policy_limit(const struct policy_verdict *v, int host_ord, const char *uuid, uint64_t total,
             const struct policy_rule **rule)
{
    const struct policy_rule *chosen = NULL;
    uint64_t limit = 0, largest = 0;
    if (v != NULL && !v->exempt) {
        if (v->user_rule != NULL) {
            limit = rule_limit(&v->user_rule->limit, host_ord, uuid, total);
            chosen = limit != 0 ? v->user_rule : NULL;
        }
        /* The largest of the groups that name this GPU. */
        for (int k = 0; limit == 0 && k < v->n_group_rules; k++) {
            uint64_t l = rule_limit(&v->group_rules[k]->limit, host_ord, uuid, total);
            if (l > 0 && (chosen == NULL || l > largest)) {
                largest = l;
                chosen = v->group_rules[k];
            }
        }
        if (limit == 0 && chosen != NULL)
            limit = largest;
        if (limit == 0 && v->def != NULL) {
            limit = rule_limit(&v->def->limit, host_ord, uuid, total);
            chosen = limit != 0 ? v->def : NULL;
        }
    }
    if (rule != NULL)
        *rule = chosen;
    return limit;
}

/* Rule R's keys against G: VRAM_OK, or the error naming the first key
** that names no GPU (see policy_check_gpus). */
static vram_status
rule_check_gpus(const char *path, const struct policy_rule *r, const struct quota_gpus *g)
{
    int k = quota_unmatched(&r->limit, g);
    if (k < 0)
        return VRAM_OK;
    char key[QUOTA_UUID_LEN], who[POLICY_NAME_LEN + 8],
        list[QUOTA_MAX_ORDINAL * (QUOTA_UUID_LEN + 6)];
    quota_key_text(&r->limit.entries[k], key, sizeof key);
    quota_gpus_format(g, list, sizeof list);
    if (r->kind == POLICY_DEFAULT)
        snprintf(who, sizeof who, "default");
    else
        snprintf(who, sizeof who, "%s %s", kind_word(r->kind), r->name);
    return error_set_at(VRAM_E_CONFIG, path, (unsigned long long)r->line,
                        "%s: GPU key '%s' names no GPU of this host (%s): it would limit "
                        "nothing",
                        who, key, list);
}

vram_status
policy_check_gpus(const struct policy *p, const struct policy_verdict *v,
                  const struct quota_gpus *g)
{
    if (p == NULL || g == NULL)
        return VRAM_OK;
    vram_status st = VRAM_OK;
    if (v == NULL) {
        for (int k = 0; k < p->n_rules && st == VRAM_OK; k++)
            if (p->rules[k].kind == POLICY_USER || p->rules[k].kind == POLICY_GROUP)
                st = rule_check_gpus(p->path, &p->rules[k], g);
        if (st == VRAM_OK && p->has_default)
            st = rule_check_gpus(p->path, &p->def, g);
        return st;
    }
    if (v->user_rule != NULL)
        st = rule_check_gpus(p->path, v->user_rule, g);
    for (int k = 0; k < v->n_group_rules && st == VRAM_OK; k++)
        st = rule_check_gpus(p->path, v->group_rules[k], g);
    if (st == VRAM_OK && v->def != NULL)
        st = rule_check_gpus(p->path, v->def, g);
    return st;
}

char *
policy_rule_describe(const struct policy_rule *r, char *buf, size_t len)
{
    if (r == NULL)
        snprintf(buf, len, "no rule");
    else if (r->kind == POLICY_DEFAULT)
        snprintf(buf, len, "default (line %d)", r->line);
    else
        snprintf(buf, len, "%s %s (line %d)", kind_word(r->kind), r->name, r->line);
    return buf;
}

int
policy_host_ordinal(const char *visible, int ord)
{
    if (ord < 0)
        return -1;
    if (visible == NULL)
        return ord;
    /* The driver reads the list up to the first entry it cannot use; an
    ** entry that is not a plain number (a UUID, a MIG name) means the list
    ** does not give host ordinals. */
    const char *p = visible;
    for (int i = 0;; i++) {
        while (*p == ' ')
            p++;
        if (*p < '0' || *p > '9')
            return -1;
        long v = 0;
        while (*p >= '0' && *p <= '9') {
            v = v * 10 + (*p - '0');
            if (v > 4096)
                return -1;
            p++;
        }
        while (*p == ' ')
            p++;
        if (i == ord)
            return (int)v;
        if (*p != ',')
            return -1;
        p++;
    }
}
