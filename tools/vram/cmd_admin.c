/* SPDX-License-Identifier: MIT */
/*
** cmd_admin.c -- `vram admin enable|disable|status|check`: put the quota
** enforcer in /etc/ld.so.preload (so that the host's policy reaches every
** process), take it out, say where the host stands, and check the policy
** file (docs/POLICY.md).
**
** /etc/ld.so.preload is read by the dynamic loader of every program on
** the host, root's included: a line naming a library that does not load
** makes every program print an error. So enable checks the library in
** child processes first (dlopen, then a preloaded /bin/true that must say
** nothing), refuses a path the loader would split (white space, ':') or
** that anybody but root could change, keeps the file's other lines,
** writes a temporary file in the same directory and renames it over the
** old one (no reader ever sees half a file), and checks again afterwards,
** putting the old file back if a program now complains.
**
** --root DIR reads and writes DIR/etc/ld.so.preload, DIR<policy path>
** and DIR/sys/fs/cgroup instead (tests, or preparing an image).
**
** Checking the policy includes its per-GPU keys, against the GPUs the
** driver lists with CUDA_VISIBLE_DEVICES unset (the policy's ordinals are
** the host's): a key that names none fails check and enable, exit 2.
*/
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cliopt.h"
#include "cmd.h"
#include "policy/policy.h"
#include "base/size.h"
#include "vram.h"

/* Every vram preload library: libvram-preload.so, and its versioned
** names (libvram-preload.so.0, ...), which earlier versions and this one
** wrote into /etc/ld.so.preload. */
#define PRELOAD_STEM "libvram-preload.so"
#define LD_PRELOAD_FILE "/etc/ld.so.preload"
#define CGROUP_DIR "/sys/fs/cgroup"
#define MAX_PRELOAD_FILE (64 * 1024) /* a larger /etc/ld.so.preload is refused */

struct admin {
    const char *root;    /* "" or DIR */
    const char *user;    /* --user, or NULL */
    const char *preload; /* --preload, or NULL */
    const char *verb;    /* enable, disable, status or check */
    char preload_file[PATH_MAX];
    char policy_file[PATH_MAX];
    char cgroup_dir[PATH_MAX];
};

#define AT(member) offsetof(struct admin, member)

/* The I-th action of `vram admin`, NULL past the last. */
static const char *
verb_value(size_t i)
{
    static const char *const verbs[] = {"enable", "disable", "status", "check"};
    return i < sizeof verbs / sizeof verbs[0] ? verbs[i] : NULL;
}

static const char *
verb_of(size_t i, const void *ctx)
{
    (void)ctx;
    return verb_value(i);
}

static const struct cli_opt opt_table[] = {
    {0, "user", 0, "NAME", "check: also print NAME's limit on each GPU",
     .store = CLIOPT_STRING, .field = AT(user)},
    {0, "root", 0, "DIR",
     "work on DIR/etc/ld.so.preload, DIR/etc/vram/policy.conf and DIR/sys/fs/cgroup",
     .store = CLIOPT_STRING, .field = AT(root)},
    {0, "preload", 0, "PATH",
     "enable: the library to preload (default: " VRAM_PRELOAD_NAME " in the library "
     "directory beside bin/vram)",
     .store = CLIOPT_STRING, .field = AT(preload)},
};

static const struct cli_command admin_cmd = {
    .prog = "vram admin",
    .synopsis = "enable|disable|status|check [OPTIONS]",
    .about = "Manage the host's quota policy:\n"
             "  enable   put the quota enforcer in /etc/ld.so.preload (after checking that\n"
             "           it loads and that the policy is valid), keeping the file's other\n"
             "           lines\n"
             "  disable  take it out again\n"
             "  status   the preload line, the library, the policy, and whether the kernel\n"
             "           has the cgroup v2 dmem controller (GPU memory limits of its own)\n"
             "  check    validate the policy file; with --user, that user's limits\n",
    CLIOPT_TABLE(opt_table),
    .exit_status = "0 ok, 1 failure, 2 bad usage or a policy that does not pass.",
    .operands = verb_value,
};

/* ------------------------------------------------------------------ */
/* The library                                                          */
/* ------------------------------------------------------------------ */

/*
** Whether PATH and every directory above it are root's and closed to
** others (a sticky directory such as /tmp is closed: others cannot
** replace root's files in it). A library in /etc/ld.so.preload runs in
** root's processes: whoever can replace it owns the host. WHY gets the
** reason.
*/
static bool
root_owned_chain(const char *path, char *why, size_t len)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (;;) {
        struct stat st;
        if (lstat(p, &st) != 0) {
            snprintf(why, len, "%s: %s", p, strerror(errno));
            return false;
        }
        bool dir = S_ISDIR(st.st_mode);
        bool others = (st.st_mode & S_IWOTH) != 0 && !(dir && (st.st_mode & S_ISVTX));
        bool group = (st.st_mode & S_IWGRP) != 0 && st.st_gid != 0 &&
                     !(dir && (st.st_mode & S_ISVTX));
        if (st.st_uid != 0) {
            snprintf(why, len, "%s is owned by uid %ld, not root", p, (long)st.st_uid);
            return false;
        }
        if (others || group) {
            snprintf(why, len, "%s is writable by others (mode %04o)", p,
                     (unsigned)(st.st_mode & 07777));
            return false;
        }
        char *slash = strrchr(p, '/');
        if (slash == NULL || slash == p)
            return true;
        *slash = '\0';
    }
}

/* Run ARGV with LD_PRELOAD=LIB (when not NULL) and stderr captured into
** ERR (LEN bytes); true when it exits 0 and prints nothing to stderr. */
static bool
quiet_child(char *const argv[], const char *lib, char *err, size_t len)
{
    int fds[2];
    err[0] = '\0';
    if (pipe(fds) != 0) {
        snprintf(err, len, "pipe: %s", strerror(errno));
        return false;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, len, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, STDIN_FILENO);
            dup2(null, STDOUT_FILENO);
        }
        char env_preload[PATH_MAX + 16];
        snprintf(env_preload, sizeof env_preload, "LD_PRELOAD=%s", lib != NULL ? lib : "");
        char *envp[] = {env_preload, "PATH=/usr/bin:/bin", NULL};
        execve(argv[0], argv, lib != NULL ? envp : envp + 1);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    for (;;) {
        char buf[512];
        ssize_t r = read(fds[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r && n + 1 < len; i++)
            err[n++] = buf[i] == '\n' ? ' ' : buf[i];
    }
    err[n] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && n == 0;
    if (!ok && n == 0)
        snprintf(err, len, "%s exited with status %d", argv[0],
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return ok;
}

/*
** Check that LIB is vram's preload library and loads: dlopen in a child
** (a library whose constructor crashes takes only the child down), the
** hooks present, and /bin/true with it preloaded saying nothing.
*/
static bool
library_loads(const char *lib, char *why, size_t len)
{
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, len, "fork: %s", strerror(errno));
        return false;
    }
    if (pid == 0) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            _exit(3);
        bool ours = dlsym(h, "cuMemAlloc_v2") != NULL && dlsym(h, "cuGetProcAddress_v2") != NULL;
        _exit(ours ? 0 : 4);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        snprintf(why, len, "%s: %s", lib,
                 code == 3   ? "cannot be loaded (dlopen failed)"
                 : code == 4 ? "is not vram's preload library (no cuMemAlloc_v2 hook)"
                             : "crashed the process that loaded it");
        return false;
    }
    char *argv[] = {"/bin/true", NULL};
    char err[512];
    if (!quiet_child(argv, lib, err, sizeof err)) {
        snprintf(why, len, "%s: /bin/true with it preloaded: %s", lib, err);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* /etc/ld.so.preload                                                   */
/* ------------------------------------------------------------------ */

/* The file's text into *OUT (malloc'ed, NUL-terminated; "" when there is
** no file). False with a line printed when it cannot be read. */
static bool
read_preload_file(const char *path, char **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT) {
        *out = calloc(1, 1);
        return *out != NULL;
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        cli_error("admin: %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return false;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > MAX_PRELOAD_FILE) {
        cli_error("admin: %s: not a regular file of at most %d bytes", path,
                  MAX_PRELOAD_FILE);
        close(fd);
        return false;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t n = 0;
    while (buf != NULL && n < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (buf == NULL) {
        cli_error("admin: out of host memory");
        return false;
    }
    buf[n] = '\0';
    *out = buf;
    return true;
}

/* Whether ENTRY (one word of the file, N bytes) is a vram preload library:
** its file name is PRELOAD_STEM, optionally followed by ".N" version parts. */
static bool
is_vram_entry(const char *entry, size_t n)
{
    const char *base = entry;
    for (size_t i = 0; i < n; i++)
        if (entry[i] == '/')
            base = entry + i + 1;
    size_t b = n - (size_t)(base - entry), m = strlen(PRELOAD_STEM);
    if (b < m || memcmp(base, PRELOAD_STEM, m) != 0)
        return false;
    for (size_t i = m; i < b; i++) {
        bool dot = base[i] == '.';
        if (!dot && (base[i] < '0' || base[i] > '9'))
            return false;
        if (dot && (i + 1 == b || base[i + 1] == '.'))
            return false; /* a version part is digits */
    }
    return b == m || base[m] == '.';
}

/*
** TEXT without its vram entries into a new string (malloc'ed): lines
** without one are kept as they are; a line with one keeps its other
** entries; a line left empty goes. *FOUND: the vram entries seen, the
** first one into FIRST (PATH_MAX bytes).
*/
static char *
without_vram(const char *text, int *found, char *first)
{
    size_t cap = strlen(text) + 2;
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    *found = 0;
    first[0] = '\0';
    for (const char *line = text; *line != '\0';) {
        const char *nl = strchr(line, '\n');
        size_t len = nl != NULL ? (size_t)(nl - line) : strlen(line);
        bool has = false;
        /* The loader's separators: white space and ':'. */
        for (size_t i = 0; i < len;) {
            size_t j = i;
            while (j < len && strchr(" \t\r:", line[j]) == NULL)
                j++;
            if (j > i && is_vram_entry(line + i, j - i)) {
                has = true;
                if ((*found)++ == 0)
                    snprintf(first, PATH_MAX, "%.*s", (int)(j - i), line + i);
            }
            i = j + 1;
        }
        if (!has) {
            memcpy(out + o, line, len);
            o += len;
            out[o++] = '\n';
        } else {
            size_t start = o;
            for (size_t i = 0; i < len;) {
                size_t j = i;
                while (j < len && strchr(" \t\r:", line[j]) == NULL)
                    j++;
                if (j > i && !is_vram_entry(line + i, j - i)) {
                    if (o > start)
                        out[o++] = ' ';
                    memcpy(out + o, line + i, j - i);
                    o += j - i;
                }
                i = j + 1;
            }
            if (o > start)
                out[o++] = '\n';
        }
        line = nl != NULL ? nl + 1 : line + len;
    }
    out[o] = '\0';
    return out;
}

/* The preload file (read_preload_file) and what is left of it without
** vram's entries (without_vram). */
struct preload_split {
    char *text;           /* the whole file; "" when there is none */
    char *rest;           /* without vram's entries; NULL: out of host memory */
    int found;            /* vram entries seen */
    char first[PATH_MAX]; /* the first of them */
};

/* PATH split into *PS (its TEXT and REST for the caller to free); false,
** with a line printed, when it cannot be read. */
static bool
split_preload_file(const char *path, struct preload_split *ps)
{
    ps->found = 0;
    ps->first[0] = '\0';
    if (!read_preload_file(path, &ps->text))
        return false;
    ps->rest = without_vram(ps->text, &ps->found, ps->first);
    return true;
}

/*
** Replace PATH by TEXT atomically: a temporary file in the same directory,
** written, synced, root's, mode 0644, renamed over PATH. An empty TEXT
** removes PATH (an empty ld.so.preload is allowed, but none is tidier).
*/
static bool
write_atomically(const char *path, const char *text)
{
    if (text[0] == '\0') {
        if (unlink(path) != 0 && errno != ENOENT) {
            cli_error("admin: removing %s: %s", path, strerror(errno));
            return false;
        }
        return true;
    }
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.vram-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        cli_error("admin: creating a file beside %s: %s", path, strerror(errno));
        return false;
    }
    size_t n = strlen(text), done = 0;
    bool ok = fchmod(fd, 0644) == 0 && fchown(fd, 0, 0) == 0;
    while (ok && done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        if (ok)
            done += (size_t)w;
    }
    ok = ok && fsync(fd) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) != 0) {
        e = errno;
        ok = false;
    }
    if (!ok) {
        cli_error("admin: writing %s: %s", path, strerror(e));
        unlink(tmp);
        return false;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash != NULL && slash != dir) {
        *slash = '\0';
        int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d >= 0) {
            fsync(d);
            close(d);
        }
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* The policy                                                           */
/* ------------------------------------------------------------------ */

/*
** The host's GPUs as CUDA numbers them with CUDA_VISIBLE_DEVICES unset
** (cmd_admin drops it from this process before the driver is loaded),
** which is what the policy's ordinals mean, into *G (once; the driver is
** asked without a context). False where no driver lists them.
*/
static bool
host_gpus(const struct quota_gpus **g)
{
    static struct quota_gpus gpus;
    static int state; /* 0 not asked, 1 listed, 2 no driver */
    if (state == 0) {
        int n = 0;
        state = backend_cuda_uuids(NULL, gpus.uuid, QUOTA_MAX_ORDINAL, &n) == VRAM_OK ? 1 : 2;
        gpus.n = gpus.n_ordinals = n < QUOTA_MAX_ORDINAL ? n : QUOTA_MAX_ORDINAL;
    }
    *g = &gpus;
    return state == 1;
}

/* Whether a rule of P keys its limit by GPU. */
static bool
policy_has_keys(const struct policy *p)
{
    bool keys = p->has_default && p->def.limit.n_entries > 0;
    for (int k = 0; !keys && k < p->n_rules; k++)
        keys = p->rules[k].limit.n_entries > 0;
    return keys;
}

/* Load the policy into P; 0 ok (*present says if there is one), else the
** exit status after the line. A per-GPU key that names none of the host's
** GPUs (where a driver lists them) is an error of the policy as a
** malformed line is: with it the library disables CUDA in the processes
** of every user the rule limits (docs/POLICY.md). *KEYS_CHECKED (may be
** NULL): whether there were keys to check and a driver to check them. */
static int
load_policy_keys(const struct admin *a, struct policy *p, bool *present, bool *keys_checked)
{
    vram_status st = policy_load(a->policy_file, p, present);
    const struct quota_gpus *g;
    if (keys_checked != NULL)
        *keys_checked = false;
    if (st == VRAM_OK && *present && policy_has_keys(p) && host_gpus(&g)) {
        if (keys_checked != NULL)
            *keys_checked = true;
        st = policy_check_gpus(p, NULL, g);
        if (st != VRAM_OK)
            policy_free(p);
    }
    if (st == VRAM_OK)
        return 0;
    cli_error("%s", vram_last_error());
    return st == VRAM_E_CONFIG ? 2 : 1;
}

static int
load_policy(const struct admin *a, struct policy *p, bool *present)
{
    return load_policy_keys(a, p, present, NULL);
}

static void
count_rules(const struct policy *p, int count[8])
{
    memset(count, 0, 8 * sizeof count[0]);
    for (int k = 0; k < p->n_rules; k++)
        count[p->rules[k].kind & 7]++;
}

/* USER's limit on each GPU the driver shows (or, without a driver, the
** rules that apply to them). */
static int
print_user(const struct admin *a, const struct policy *p)
{
    struct policy_who w;
    if (policy_who_user(a->user, &w) != VRAM_OK) {
        cli_error("admin: check: --user: %s", vram_last_error());
        return 2;
    }
    struct policy_verdict v;
    policy_resolve(p, &w, &v);
    printf("user %s (uid %lu; groups", w.user[0] != '\0' ? w.user : a->user,
           (unsigned long)w.uid);
    for (int g = 0; g < w.n_groups; g++)
        printf("%s%s", g == 0 ? " " : ", ", w.group[g][0] != '\0' ? w.group[g] : "?");
    printf("):%s%s\n", v.exempt ? " exempt" : "", v.reader ? " reader" : "");
    if (v.exempt) {
        printf("  no policy limit on any GPU\n");
        return 0;
    }
    char buf[128];
    if (v.user_rule != NULL)
        printf("  rule: %s: %s\n", policy_rule_describe(v.user_rule, buf, sizeof buf),
               v.user_rule->text);
    for (int k = 0; k < v.n_group_rules; k++)
        printf("  rule: %s: %s\n", policy_rule_describe(v.group_rules[k], buf, sizeof buf),
               v.group_rules[k]->text);
    if (v.def != NULL)
        printf("  rule: %s: %s\n", policy_rule_describe(v.def, buf, sizeof buf), v.def->text);
    vram_context *ctx = NULL;
    int n = 0;
    if (cli_open_cuda(&ctx, &n) != VRAM_OK) {
        printf("  no CUDA driver here: limits per GPU follow the rules above\n");
        vram_close(ctx);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        vram_physical_info info;
        if (vram_physical_info_get(ctx, i, &info) != VRAM_OK)
            continue;
        const struct policy_rule *r = NULL;
        uint64_t l = policy_limit(&v, i, info.uuid, info.total_bytes, &r);
        char lim[32], tot[32];
        size_format(l, lim, sizeof lim);
        size_format(info.total_bytes, tot, sizeof tot);
        printf("  GPU %d %s (%s): %s\n", i, info.uuid, tot,
               l == 0 ? "no limit" : lim);
        (void)r;
    }
    vram_close(ctx);
    return 0;
}

static int
do_check(const struct admin *a)
{
    struct policy p;
    bool present = false, keys_checked = false;
    int rc = load_policy_keys(a, &p, &present, &keys_checked);
    if (rc != 0)
        return rc;
    if (!present) {
        printf("%s: no policy file: only jobs' own settings (vram run, VRAM_LIMIT, Slurm, "
               "HAMi) limit anything\n",
               a->policy_file);
        if (a->user != NULL) {
            memset(&p, 0, sizeof p);
            rc = print_user(a, &p);
        }
        return rc;
    }
    int c[8];
    count_rules(&p, c);
    printf("%s: ok: %s%s, %d user, %d group, %d exempt, %d reader rules\n", a->policy_file,
           p.has_default ? "default " : "no default", p.has_default ? p.def.text : "",
           c[POLICY_USER], c[POLICY_GROUP], c[POLICY_EXEMPT_USER] + c[POLICY_EXEMPT_GROUP],
           c[POLICY_READER_USER] + c[POLICY_READER_GROUP]);
    if (policy_has_keys(&p) && !keys_checked)
        printf("per-GPU keys not checked here: no CUDA driver lists this host's GPUs; each "
               "process checks them (a key that names no GPU of its host disables CUDA "
               "there)\n");
    if (a->user != NULL)
        rc = print_user(a, &p);
    policy_free(&p);
    return rc;
}

/* ------------------------------------------------------------------ */
/* enable, disable, status                                              */
/* ------------------------------------------------------------------ */

static int
do_enable(const struct admin *a)
{
    char given[PATH_MAX], lib[PATH_MAX], why[PATH_MAX + 256];
    if (a->preload != NULL)
        snprintf(given, sizeof given, "%s", a->preload);
    else if (!cli_default_preload(given, sizeof given)) {
        cli_error("admin: enable: no preload library at %s (give --preload PATH)",
                  given[0] != '\0' ? given : "lib/" VRAM_PRELOAD_NAME);
        return 1;
    }
    if (realpath(given, lib) == NULL) {
        cli_error("admin: enable: %s: %s", given, strerror(errno));
        return 2;
    }
    if (strpbrk(lib, " \t\r\n:") != NULL) {
        cli_error("admin: enable: %s: the dynamic loader would split this path (white "
                  "space or ':'); install the library elsewhere",
                  lib);
        return 2;
    }
    if (!root_owned_chain(lib, why, sizeof why)) {
        cli_error("admin: enable: %s: %s; every process on the host, root's too, would run "
                  "it",
                  lib, why);
        return 2;
    }
    if (!library_loads(lib, why, sizeof why)) {
        cli_error("admin: enable: %s; nothing written", why);
        return 1;
    }
    struct policy p;
    bool present = false;
    int rc = load_policy(a, &p, &present);
    if (rc != 0) {
        cli_error("admin: enable: the policy does not pass (above): with it, CUDA would be "
                  "disabled in every process; nothing written");
        return rc;
    }
    if (present)
        policy_free(&p);
    struct preload_split ps;
    if (!split_preload_file(a->preload_file, &ps))
        return 1;
    if (ps.rest == NULL) {
        free(ps.text);
        cli_error("admin: out of host memory");
        return 1;
    }
    if (ps.found == 1 && strcmp(ps.first, lib) == 0 &&
        strncmp(ps.text, lib, strlen(lib)) == 0) {
        printf("%s already names %s: nothing to do\n", a->preload_file, lib);
        free(ps.text);
        free(ps.rest);
        return 0;
    }
    size_t n = strlen(lib) + 1 + strlen(ps.rest) + 1;
    char *text = malloc(n);
    if (text == NULL) {
        free(ps.text);
        free(ps.rest);
        cli_error("admin: out of host memory");
        return 1;
    }
    /* First: the quota enforcer's hooks must come before anybody's. */
    snprintf(text, n, "%s\n%s", lib, ps.rest);
    rc = write_atomically(a->preload_file, text) ? 0 : 1;
    if (rc == 0 && a->root[0] == '\0') {
        /* Now in force for every new process: one must start quietly. */
        char *argv[] = {"/bin/true", NULL};
        char err[512];
        if (!quiet_child(argv, NULL, err, sizeof err)) {
            cli_error("admin: enable: after writing %s, /bin/true said: %s; the old file is "
                      "back",
                      a->preload_file, err);
            write_atomically(a->preload_file, ps.text);
            rc = 1;
        }
    }
    if (rc == 0 && ps.found > 0)
        printf("%s: %s first, replacing %s\n", a->preload_file, lib, ps.first);
    else if (rc == 0)
        printf("%s: %s first\n", a->preload_file, lib);
    if (rc == 0 && !present)
        printf("no policy file at %s: jobs' own settings apply, nobody else is limited\n",
               a->policy_file);
    free(ps.text);
    free(ps.rest);
    free(text);
    return rc;
}

static int
do_disable(const struct admin *a)
{
    struct preload_split ps;
    if (!split_preload_file(a->preload_file, &ps))
        return 1;
    int rc = 0;
    if (ps.rest == NULL) {
        cli_error("admin: out of host memory");
        rc = 1;
    } else if (ps.found == 0) {
        printf("%s names no vram library: nothing to do\n", a->preload_file);
    } else {
        rc = write_atomically(a->preload_file, ps.rest) ? 0 : 1;
        if (rc == 0)
            printf("%s: %s taken out%s\n", a->preload_file, ps.first,
                   ps.rest[0] == '\0' ? " (the file is gone: it named nothing else)" : "");
    }
    free(ps.text);
    free(ps.rest);
    return rc;
}

/* The cgroup v2 dmem controller: the kernel's own GPU memory limits. */
static void
print_dmem(const struct admin *a)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/cgroup.controllers", a->cgroup_dir);
    FILE *f = fopen(path, "r");
    bool dmem = false;
    char word[64];
    while (f != NULL && fscanf(f, "%63s", word) == 1)
        dmem = dmem || strcmp(word, "dmem") == 0;
    if (f != NULL)
        fclose(f);
    if (!dmem) {
        printf("dmem:          no cgroup v2 dmem controller (%s %s): the kernel limits no "
               "GPU memory; vram's quota is the only limit\n",
               f == NULL ? "no cgroup v2 at" : "not in cgroup.controllers of", a->cgroup_dir);
        return;
    }
    snprintf(path, sizeof path, "%s/dmem.capacity", a->cgroup_dir);
    f = fopen(path, "r");
    int regions = 0;
    char line[256];
    printf("dmem:          cgroup v2 dmem controller present;");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char region[192];
        unsigned long long cap;
        if (sscanf(line, "%191s %llu", region, &cap) != 2)
            continue;
        char sz[32];
        size_format(cap, sz, sizeof sz);
        printf("%s %s %s", regions == 0 ? " dmem.capacity lists" : ",", region, sz);
        regions++;
    }
    if (f != NULL)
        fclose(f);
    if (regions == 0)
        printf(" dmem.capacity lists no GPU (the driver registers none)\n");
    else
        printf("\n");
}

static int
do_status(const struct admin *a)
{
    struct preload_split ps;
    if (!split_preload_file(a->preload_file, &ps))
        return 1;
    if (ps.found > 0)
        printf("ld.so.preload: %s names %s: enabled\n", a->preload_file, ps.first);
    else
        printf("ld.so.preload: %s names no vram library: disabled\n", a->preload_file);
    if (ps.found > 0) {
        char why[PATH_MAX + 256];
        if (library_loads(ps.first, why, sizeof why))
            printf("library:       %s loads\n", ps.first);
        else
            printf("library:       %s\n", why);
    }
    struct policy p;
    bool present = false;
    vram_status st = policy_load(a->policy_file, &p, &present);
    const struct quota_gpus *g;
    if (st == VRAM_OK && present && policy_has_keys(&p) && host_gpus(&g) &&
        (st = policy_check_gpus(&p, NULL, g)) != VRAM_OK)
        policy_free(&p);
    if (st != VRAM_OK)
        printf("policy:        %s (CUDA is disabled in the processes it limits until "
               "fixed)\n",
               vram_last_error());
    else if (!present)
        printf("policy:        %s: none (jobs' own settings only)\n", a->policy_file);
    else {
        printf("policy:        %s: %d rules%s%s\n", a->policy_file, p.n_rules,
               p.has_default ? ", default " : ", no default", p.has_default ? p.def.text : "");
        policy_free(&p);
    }
    print_dmem(a);
    free(ps.text);
    free(ps.rest);
    return 0;
}

/* The operand of `vram admin`, its action (cliopt_handler; the options
** are stored by the table). */
static int
admin_arg(void *ctx, const struct cli_opt *opt, const char *value)
{
    struct admin *a = ctx;
    (void)opt;
    if (a->verb != NULL)
        return cliopt_usage_error(&admin_cmd, "unexpected argument '%s'", value);
    a->verb = value;
    return CLIOPT_GO_ON;
}

int
cmd_admin(int argc, char **argv)
{
    struct admin a;
    memset(&a, 0, sizeof a);
    a.root = "";
    int rc = cliopt_parse(&admin_cmd, argc, argv, admin_arg, &a, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;
    const char *verb = a.verb;
    if (verb == NULL)
        return cliopt_usage_error(&admin_cmd, "no action given (enable, disable, status or "
                                              "check)");
    if (a.root[0] != '\0' && a.root[0] != '/') {
        return cliopt_usage_error(&admin_cmd, "--root: '%s' is not an absolute path", a.root);
    }
    const char *root = strcmp(a.root, "/") == 0 ? "" : a.root;
    a.root = root;
    snprintf(a.preload_file, sizeof a.preload_file, "%s%s", root, LD_PRELOAD_FILE);
    snprintf(a.policy_file, sizeof a.policy_file, "%s%s", root, policy_path());
    snprintf(a.cgroup_dir, sizeof a.cgroup_dir, "%s%s", root, CGROUP_DIR);
    /* The policy's ordinals are the host's: this process lists the GPUs
    ** (its keys, --user's limits) as CUDA numbers them without the
    ** caller's CUDA_VISIBLE_DEVICES. */
    unsetenv("CUDA_VISIBLE_DEVICES");
    bool writes = strcmp(verb, "enable") == 0 || strcmp(verb, "disable") == 0;
    if (a.user != NULL && strcmp(verb, "check") != 0) {
        return cliopt_usage_error(&admin_cmd, "--user is for check only");
    }
    if (writes && geteuid() != 0) {
        cli_error("admin: %s: only root may change %s", verb, a.preload_file);
        return 1;
    }
    if (strcmp(verb, "enable") == 0)
        return do_enable(&a);
    if (strcmp(verb, "disable") == 0)
        return do_disable(&a);
    if (strcmp(verb, "status") == 0)
        return do_status(&a);
    if (strcmp(verb, "check") == 0)
        return do_check(&a);
    char shown[TEXT_EXCERPT_LEN], hint[64] = "";
    const char *near = cliopt_nearest(verb, verb_of, NULL);
    if (near != NULL)
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
    return cliopt_usage_error(
        &admin_cmd, "unknown action '%s' (expected enable, disable, status or check)%s",
        text_excerpt(verb, shown, sizeof shown), hint);
}
