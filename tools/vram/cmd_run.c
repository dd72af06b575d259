/* SPDX-License-Identifier: MIT */
/*
** cmd_run.c -- `vram run`: run a command under the quota enforcer.
**
**   vram run [--limit SPEC] [--group NAME] [--report] [--preload PATH]
**            [--] COMMAND [ARGS...]
**
** It checks the settings with the preload library's own parser
** (env_quota_load) before anything runs, sets VRAM_LIMIT and VRAM_GROUP
** (by default a fresh group, "run-<pid>-<seconds>", so that the whole
** process tree shares one quota), puts the preload library first in
** LD_PRELOAD and executes the command in place. With --report it runs
** the command as a child instead, waits, and prints one line per device
** with the peak the group reached.
**
** The peak: ledger.h keeps, per live process, the bytes held now and at
** the process's peak, and forgets a process once it has exited; it keeps
** no group peak. So while the command runs, the group's ledger is sampled
** (every 20 ms for two seconds, then every 100 ms); the report prints the
** sum of the per-process peaks of every process seen (an upper bound of
** the group's peak, exact for one process; a process that lived less than
** an interval, or peaked in its last one, is missed: "peak not seen" when
** all of a device's were) and, beside it, the most the group held at one
** sample (a lower bound).
**
** Exit status: the command's; 1 vram could not start it; 2 bad usage or a
** malformed setting (nothing ran); 126 the command cannot be executed; 127
** it was not found; with --report 128+N when it was killed by signal N.
*/
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "cliopt.h"
#include "cmd.h"
#include "config/env.h"
#include "backend/backend.h"
#include "base/ldpreload.h"
#include "base/size.h"
#include "installdirs.h"
#include "ledger/ledger.h"
#include "quota/quota.h"
#include "vram.h"

/* Exit statuses of their own (the others are the command's). */
enum {
    RUN_FAIL = 1,          /* vram could not start the command */
    RUN_USAGE = 2,         /* bad usage or a malformed setting */
    RUN_CANNOT_EXEC = 126, /* found, but not executable */
    RUN_NOT_FOUND = 127    /* no such command */
};

/* How often --report samples the group's ledger, ns: more often in the
** first seconds, where short commands live. */
#define REPORT_INTERVAL_NS 100000000L
#define REPORT_FIRST_INTERVAL_NS 20000000L
#define REPORT_FIRST_SECONDS 2
/* How often a command being stopped is checked for its exit, ms. */
#define RUN_STOP_POLL_MS 50

/* Where `make install` puts the preload library, relative to the vram
** binary's directory (set by cmake/Install.cmake from GNUInstallDirs:
** "../lib/x86_64-linux-gnu" under /usr on Debian, "../lib" elsewhere). */
#ifndef VRAM_BINDIR_TO_LIBDIR
#define VRAM_BINDIR_TO_LIBDIR "../lib"
#endif

/* The subcommand named in error messages: "run", or "record" when
** `vram record` uses the setup below (run_prepare, run_command). */
static const char *run_who = "run";
/* Whether "no GPU memory limit" is said: `vram run` is there to limit;
** `vram record` records, and limits only when asked. */
static bool run_says_unlimited = true;

/* ------------------------------------------------------------------ */
/* Options: one table, from which both the parser and --help come      */
/* ------------------------------------------------------------------ */

struct run_args {
    const char *limit;   /* --limit, or NULL */
    const char *group;   /* --group, or NULL */
    const char *preload; /* --preload, or NULL */
    bool report;
    char **command; /* NULL-terminated: argv's tail */
};

#define AT(member) offsetof(struct run_args, member)

static const struct cli_opt opt_table[] = {
    {0, "limit", 0, "SPEC",
     "GPU memory quota (sets VRAM_LIMIT): 6G, 50%, 0.5, 0:6G,1:4G, GPU-<uuid>:6G",
     .store = CLIOPT_STRING, .field = AT(limit)},
    {0, "group", 0, "NAME",
     "share the quota with every process of group NAME (sets VRAM_GROUP); "
     "default: a fresh group for this run",
     .store = CLIOPT_STRING, .field = AT(group)},
    {0, "report", 0, NULL,
     "wait for the command, then print each device's peak to standard error",
     .store = CLIOPT_SET, .field = AT(report)},
    {0, "preload", 0, "PATH",
     "the preload library (default: VRAM_PRELOAD_LIBRARY, else the installed "
     VRAM_PRELOAD_NAME " beside the vram binary: " VRAM_BINDIR_TO_LIBDIR
     "/, or ../lib/ in a build)",
     .store = CLIOPT_STRING, .field = AT(preload)},
};

static void
run_notes(FILE *out)
{
    fprintf(out,
            "Sizes are 1024-based: 6G, 6Gi, 6GiB and 6GB are the same, and need a unit\n"
            "(1073741824B for bytes); a fraction (50%%, 0.5) is of each device's total\n"
            "memory. Without --limit, VRAM_LIMIT from the\n"
            "environment (or HAMi's CUDA_DEVICE_MEMORY_LIMIT[_<i>]) applies; with no\n"
            "limit from any source the command runs unlimited, and vram says so.\n"
            "VRAM_MEMORY_LIMIT is another thing: the cap of the vram allocator inside\n"
            "one program (libvram), not a quota on the process tree.\n"
            "The library is put first in LD_PRELOAD, once; the entries already there\n"
            "follow, in their order. docs/QUOTA.md has more.\n");
}

static const struct cli_command run_cmd = {
    .prog = "vram run",
    .synopsis = "[OPTIONS] [--] COMMAND [ARGS...]",
    .about = "Run COMMAND with the quota enforcer (" VRAM_PRELOAD_NAME ") preloaded, so\n"
             "that COMMAND and every process it starts share one GPU memory quota\n"
             "per device. Past the quota an allocation fails as out of memory.\n",
    CLIOPT_TABLE(opt_table),
    .notes = run_notes,
    .exit_status = "the command's; 1 vram could not start it; 2 bad usage or a malformed "
                   "setting (nothing was run); 126 COMMAND cannot be executed; 127 COMMAND "
                   "not found; with --report, 128+N if COMMAND was killed by signal N.",
    .stop_at_operand = true,
};

/* ------------------------------------------------------------------ */
/* The settings                                                         */
/* ------------------------------------------------------------------ */

/* A getter for env_quota_load that sees the two flags and nothing else. */
struct flag_env {
    const char *limit;
    const char *group;
};

static const char *
flag_get(const char *name, void *user)
{
    const struct flag_env *f = user;
    if (strcmp(name, "VRAM_LIMIT") == 0)
        return f->limit;
    if (strcmp(name, "VRAM_GROUP") == 0)
        return f->group;
    return NULL;
}

/* Check --limit and --group with the preload library's parser: the same
** rules, the same messages. Returns -1 if they are good. */
static int
check_flags(const struct run_args *a)
{
    struct quota_env q;
    struct flag_env f = {a->limit, NULL};
    if (a->limit != NULL && env_quota_load(flag_get, &f, &q) != VRAM_OK) {
        cli_error("%s: --limit: %s", run_who, vram_last_error());
        return RUN_USAGE;
    }
    f = (struct flag_env){NULL, a->group};
    if (a->group != NULL && env_quota_load(flag_get, &f, &q) != VRAM_OK) {
        cli_error("%s: --group: %s", run_who, vram_last_error());
        return RUN_USAGE;
    }
    return -1;
}

static int
set_var(const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0) {
        cli_error("%s: cannot set %s: %s", run_who, name, strerror(errno));
        return RUN_FAIL;
    }
    return -1;
}

/*
** HAMi's limits as a VRAM_LIMIT value of exact sizes ("6G", "1000B"), into BUF.
** Needed because the group vram run sets turns HAMi's variables off (they
** count only while VRAM_LIMIT and VRAM_GROUP are both unset), and a limit
** must not vanish on the way. Both an all-devices limit and per-device
** ones become one entry per HAMi device 0..15 (HAMi limits no others).
*/
static void
hami_as_limit(const struct quota_env *q, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    char size[32];
    if (q->n_entries == 0) {
        snprintf(buf, len, "%s", size_format_setting(q->all.bytes, size, sizeof size));
        return;
    }
    for (int i = 0; i < 16; i++) {
        uint64_t bytes = q->all.kind == QUOTA_BYTES ? q->all.bytes : 0;
        for (int k = 0; k < q->n_entries; k++)
            if (!q->entries[k].by_uuid && q->entries[k].ordinal == i)
                bytes = q->entries[k].value.bytes;
        if (bytes == 0 || used >= len)
            continue;
        int w = snprintf(buf + used, len - used, "%s%d:%s", used > 0 ? "," : "", i,
                         size_format_setting(bytes, size, sizeof size));
        if (w > 0)
            used += (size_t)w;
    }
}

/*
** No limit from any source: the user ran `vram run` to limit something, so
** one line says that nothing is; and when VRAM_MEMORY_LIMIT is set (the
** vram allocator's cap inside a program), one more says why that is not a
** quota. The command still runs: its use is counted in the group, which
** `vram stat` and --report show.
*/
static void
say_unlimited(const char *group)
{
    cli_error("%s: no GPU memory limit (no --limit, VRAM_LIMIT or "
              "CUDA_DEVICE_MEMORY_LIMIT): the command runs unlimited, its use counted "
              "in group '%s'", run_who,
              group);
    struct vram_env env;
    if (env_load(NULL, NULL, &env) != VRAM_OK)
        return; /* a malformed setting: the allocator will say so itself */
    bool allocator_cap = env.limit_all.n > 0;
    for (int i = 0; i < ENV_MAX_DEVICES && !allocator_cap; i++)
        allocator_cap = env.limit[i].n > 0;
    if (allocator_cap)
        cli_error("%s: VRAM_MEMORY_LIMIT is set, but it only caps the vram allocator "
                  "inside a program that uses libvram; the quota of vram run is --limit or "
                  "VRAM_LIMIT", run_who);
}

/*
** Put the quota settings into this process's environment, which the
** command inherits: VRAM_LIMIT (the flag, else the one inherited, else
** HAMi's translated) and VRAM_GROUP, then check the whole as the preload
** library will read it. Returns -1 on success, else the exit status.
*/
/*
** A per-device entry that names no device this process can see (a
** mistyped UUID, an ordinal past the last GPU) limits nothing: refused,
** nothing run, when the driver can list the devices. The driver is asked
** only for a per-device list, and without a context (no device memory);
** with no driver or no device there is nothing to check against.
*/
static int
check_entries_visible(const struct quota_env *q)
{
    if (!q->active || q->n_entries == 0)
        return -1;
    static char uuids[QUOTA_MAX_ORDINAL][QUOTA_UUID_LEN];
    int n = 0;
    if (backend_cuda_uuids(NULL, uuids, QUOTA_MAX_ORDINAL, &n) != VRAM_OK)
        return -1;
    if (n > QUOTA_MAX_ORDINAL)
        n = QUOTA_MAX_ORDINAL;
    int k = quota_unmatched(q, n, uuids);
    if (k < 0)
        return -1;
    char line[1024];
    quota_unmatched_line(q, k, n, uuids, line, sizeof line);
    cli_error("%s: %s; nothing was run", run_who, line);
    return RUN_USAGE;
}

static int
set_quota_env(const struct run_args *a, const char *group)
{
    int rc;
    if (a->limit != NULL && (rc = set_var("VRAM_LIMIT", a->limit)) >= 0)
        return rc;
    /* A label for the refusal line ("refused by vram run --limit"). */
    if (a->limit != NULL && (rc = set_var("VRAM_LIMIT_SOURCE", "vram-run")) >= 0)
        return rc;
    /* Our group replaces any inherited one; without it in the way the
    ** load below says whether HAMi's variables were in force. */
    if (unsetenv("VRAM_GROUP") != 0) {
        cli_error("%s: cannot unset VRAM_GROUP: %s", run_who, strerror(errno));
        return RUN_FAIL;
    }
    struct quota_env q;
    if (env_quota_load(NULL, NULL, &q) != VRAM_OK) {
        cli_error("%s: %s", run_who, vram_last_error());
        return RUN_USAGE;
    }
    if (q.active && q.source != NULL && strcmp(q.source, "VRAM_LIMIT") != 0) {
        char spec[16 * 32];
        hami_as_limit(&q, spec, sizeof spec);
        if ((rc = set_var("VRAM_LIMIT", spec)) >= 0 ||
            (rc = set_var("VRAM_LIMIT_SOURCE", "hami")) >= 0)
            return rc;
    }
    if ((rc = set_var("VRAM_GROUP", group)) >= 0)
        return rc;
    if (env_quota_load(NULL, NULL, &q) != VRAM_OK) {
        cli_error("%s: %s", run_who, vram_last_error()); /* cannot happen: checked above */
        return RUN_USAGE;
    }
    if (!q.active && run_says_unlimited)
        say_unlimited(group);
    return check_entries_visible(&q);
}

/* ------------------------------------------------------------------ */
/* The preload library                                                  */
/* ------------------------------------------------------------------ */


/*
** The default library: VRAM_PRELOAD_NAME (libvram-preload.so.0) in the
** installed library directory relative to the running vram binary (/usr/bin/vram ->
** /usr/lib/x86_64-linux-gnu/), else in ../lib (the build tree:
** build/bin/vram -> build/lib/). Into BUF; false if there is none (BUF
** then holds the first path tried, or "").
*/
bool
cli_default_preload(char *buf, size_t len)
{
    const char *rels[] = {VRAM_BINDIR_TO_LIBDIR "/" VRAM_PRELOAD_NAME,
                          "../lib/" VRAM_PRELOAD_NAME};
    char first[PATH_MAX] = "";
    for (size_t i = 0; i < sizeof rels / sizeof rels[0]; i++) {
        if (installed_path(rels[i], buf, len))
            return true;
        if (first[0] == '\0' && strlen(buf) < sizeof first)
            memcpy(first, buf, strlen(buf) + 1);
    }
    snprintf(buf, len, "%s", first);
    return false;
}

/*
** The preload library's absolute path into OUT (PATH_MAX bytes): from
** --preload, else VRAM_PRELOAD_LIBRARY, else the default. Absolute, so
** that descendants that change directory still find it; a missing file is
** an error here because the dynamic loader would only warn and run the
** command without any quota. Returns -1 on success, else the exit status.
*/
static int
find_library(const struct run_args *a, const struct env_run *env, char *out)
{
    const char *given = a->preload;
    const char *from = "--preload";
    if (given == NULL && env->preload_library[0] != '\0') {
        given = env->preload_library;
        from = "VRAM_PRELOAD_LIBRARY";
    }
    bool user_given = given != NULL; /* else a wrong install, not bad input */
    char path[PATH_MAX];
    if (given == NULL) {
        if (!cli_default_preload(path, sizeof path)) {
            cli_error("%s: no preload library%s%s%s (build the vram_preload target, or "
                      "give --preload PATH or VRAM_PRELOAD_LIBRARY)", run_who,
                      path[0] != '\0' ? " at " : "", path,
                      path[0] != '\0' ? ": not found" : "");
            return RUN_FAIL;
        }
        given = path;
        from = "the preload library";
    }
    char shown[TEXT_EXCERPT_LEN];
    if (access(given, R_OK) != 0) {
        cli_error("%s: %s '%s': %s", run_who, from, text_excerpt(given, shown, sizeof shown),
                  strerror(errno));
        return user_given ? RUN_USAGE : RUN_FAIL;
    }
    /* Made absolute as the user wrote it (symbolic links kept). */
    char cwd[PATH_MAX];
    int w;
    if (given[0] == '/')
        w = snprintf(out, PATH_MAX, "%s", given);
    else if (getcwd(cwd, sizeof cwd) != NULL)
        w = snprintf(out, PATH_MAX, "%s/%s", cwd, given);
    else {
        cli_error("%s: cannot make '%s' absolute: %s", run_who,
                  text_excerpt(given, shown, sizeof shown), strerror(errno));
        return RUN_FAIL;
    }
    if (w < 0 || w >= PATH_MAX) {
        cli_error("%s: %s '%s': path too long", run_who, from,
                  text_excerpt(given, shown, sizeof shown));
        return RUN_USAGE;
    }
    if (strpbrk(out, ": \t\n") != NULL) {
        cli_error("%s: %s '%s': a path with ':' or a space cannot go in LD_PRELOAD", run_who,
                  from, text_excerpt(out, shown, sizeof shown));
        return RUN_USAGE;
    }
    return -1;
}

/* LD_PRELOAD = LIB, then the other entries already there (ldpreload.h).
** Returns -1 on success, else the exit status. */
static int
set_ld_preload(const char *lib, const char *old)
{
    size_t len = strlen(lib) + 1 + strlen(old) + 1; /* the most it can need */
    char *value = malloc(len);
    if (value == NULL) {
        cli_error("%s: out of memory", run_who);
        return RUN_FAIL;
    }
    int rc = RUN_FAIL;
    if (!ldpreload_build(lib, old, value, len))
        cli_error("%s: cannot put '%s' in LD_PRELOAD", run_who, lib); /* find_library checked it */
    else
        rc = set_var("LD_PRELOAD", value);
    free(value);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Running the command                                                  */
/* ------------------------------------------------------------------ */

/* The shell's convention: 127 when there is no such file, else 126. */
static int
exec_failure(const char *command, int err)
{
    char shown[TEXT_EXCERPT_LEN];
    text_excerpt(command, shown, sizeof shown);
    if (err == ENOENT || err == ENOTDIR) {
        cli_error("%s: '%s': command not found", run_who, shown);
        return RUN_NOT_FOUND;
    }
    cli_error("%s: cannot run '%s': %s", run_who, shown, strerror(err));
    return RUN_CANNOT_EXEC;
}

/* The command's exit status as a shell reports it. */
static int
child_status(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return RUN_FAIL;
}

/*
** The child of --report, for the signal handler (a handler reaches no
** struct). Signals sent to vram by another process (kill, a scheduler) are
** passed on; those the terminal sends reach the command's process group
** directly, so they are not sent twice.
*/
static volatile sig_atomic_t run_child_pid;

static void
forward_signal(int sig, siginfo_t *info, void *ctx)
{
    (void)ctx;
    if (info != NULL && info->si_code <= 0 && run_child_pid > 0)
        kill((pid_t)run_child_pid, sig);
}

static void
install_forwarding(void)
{
    static const int sigs[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = forward_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

/* ------------------------------------------------------------------ */
/* --report: what the group's ledger showed while the command ran       */
/* ------------------------------------------------------------------ */

/* A process seen in the ledger and its peak per device (our index). */
struct seen_proc {
    pid_t pid;
    uint64_t start_time;
    uint64_t peak[LEDGER_MAX_DEVICES];
};

struct report {
    const char *group;
    struct ledger *ledger;        /* NULL until the group's ledger exists */
    struct ledger *own;           /* our own entry in the group, or NULL */
    struct ledger_snapshot *snap; /* scratch, heap (about 160 KiB) */
    int n_devices;
    char uuid[LEDGER_MAX_DEVICES][LEDGER_UUID_LEN];
    uint64_t limit[LEDGER_MAX_DEVICES];     /* last quota seen, bytes; 0 none */
    uint64_t max_used[LEDGER_MAX_DEVICES];  /* most the group held at a sample */
    uint64_t refusals[LEDGER_MAX_DEVICES];  /* at the last sample */
    uint64_t refusals0[LEDGER_MAX_DEVICES]; /* before the command started */
    bool earlier[LEDGER_MAX_DEVICES];       /* in the ledger before the command started */
    struct seen_proc *procs;                /* processes of the command seen so far */
    size_t n_procs, cap_procs;
    struct seen_proc *before; /* members before the command started: not ours */
    size_t n_before, cap_before;
    bool failed; /* a snapshot failed: the report says so */
    char error[256];
};

/* Our index of device UUID, adding it; -1 if the table is full. */
static int
report_device(struct report *r, const char *uuid)
{
    for (int d = 0; d < r->n_devices; d++)
        if (strcmp(r->uuid[d], uuid) == 0)
            return d;
    if (r->n_devices == LEDGER_MAX_DEVICES)
        return -1;
    snprintf(r->uuid[r->n_devices], LEDGER_UUID_LEN, "%s", uuid);
    return r->n_devices++;
}

static struct seen_proc *
find_proc(struct seen_proc *procs, size_t n, pid_t pid, uint64_t start_time)
{
    for (size_t i = 0; i < n; i++)
        if (procs[i].pid == pid && procs[i].start_time == start_time)
            return &procs[i];
    return NULL;
}

/* The entry of process (PID, START_TIME) in table *T (*N used, *CAP
** allocated), added with no peaks if new; NULL if out of memory. */
static struct seen_proc *
seen_get(struct seen_proc **t, size_t *n, size_t *cap, pid_t pid, uint64_t start_time)
{
    struct seen_proc *e = find_proc(*t, *n, pid, start_time);
    if (e != NULL)
        return e;
    if (*n == *cap) {
        size_t grow = *cap == 0 ? 64 : *cap * 2;
        struct seen_proc *bigger = realloc(*t, grow * sizeof *bigger);
        if (bigger == NULL)
            return NULL;
        *t = bigger;
        *cap = grow;
    }
    e = &(*t)[(*n)++];
    memset(e, 0, sizeof *e);
    e->pid = pid;
    e->start_time = start_time;
    return e;
}

/* Fold one snapshot into R. BASELINE: before the command started. */
static void
report_sample(struct report *r, bool baseline)
{
    if (r->ledger == NULL && ledger_attach_existing(r->group, &r->ledger) != VRAM_OK) {
        r->ledger = NULL; /* not there yet: no process has allocated */
        return;
    }
    const struct ledger_snapshot *s = r->snap;
    if (ledger_snapshot(r->ledger, r->snap) != VRAM_OK) {
        r->failed = true;
        snprintf(r->error, sizeof r->error, "%s", vram_last_error());
        return;
    }
    int map[LEDGER_MAX_DEVICES];
    int nd = s->n_devices < 0                    ? 0
             : s->n_devices > LEDGER_MAX_DEVICES ? LEDGER_MAX_DEVICES
                                                 : s->n_devices;
    for (int d = 0; d < nd; d++) {
        map[d] = report_device(r, s->uuid[d]);
        if (map[d] < 0)
            continue;
        r->limit[map[d]] = s->limit[d];
        if (baseline) {
            r->refusals0[map[d]] = s->refusals[d];
            r->earlier[map[d]] = true;
        }
        r->refusals[map[d]] = s->refusals[d];
        if (s->used[d] > r->max_used[map[d]])
            r->max_used[map[d]] = s->used[d];
    }
    int np = s->n_procs < 0                  ? 0
             : s->n_procs > LEDGER_MAX_PROCS ? LEDGER_MAX_PROCS
                                             : s->n_procs;
    for (int i = 0; i < np; i++) {
        const struct ledger_proc *p = &s->procs[i];
        struct seen_proc *e;
        if (baseline)
            e = seen_get(&r->before, &r->n_before, &r->cap_before, p->pid, p->start_time);
        else if (find_proc(r->before, r->n_before, p->pid, p->start_time) != NULL)
            continue; /* another run's member of a shared group */
        else
            e = seen_get(&r->procs, &r->n_procs, &r->cap_procs, p->pid, p->start_time);
        if (e == NULL)
            continue; /* out of memory: the report undercounts, says nothing false */
        for (int d = 0; d < nd; d++)
            if (map[d] >= 0 && p->dev[d].peak > e->peak[map[d]])
                e->peak[map[d]] = p->dev[d].peak;
    }
}

/* One line per device to standard error. */
static void
report_print(const struct report *r)
{
    char a[32], b[32], c[32];
    bool any = false;
    for (int d = 0; d < r->n_devices; d++) {
        uint64_t sum = 0;
        int procs = 0;
        for (size_t i = 0; i < r->n_procs; i++) {
            if (r->procs[i].peak[d] == 0)
                continue;
            sum += r->procs[i].peak[d];
            procs++;
        }
        uint64_t refused = r->refusals[d] >= r->refusals0[d]
                               ? r->refusals[d] - r->refusals0[d]
                               : r->refusals[d]; /* the ledger was made anew */
        if (sum == 0 && r->max_used[d] == 0 && refused == 0 && r->earlier[d])
            continue; /* another run's device of a shared group */
        any = true;
        if (sum == 0 && r->max_used[d] == 0 && refused > 0) {
            /* Nothing granted, something refused: a job too big for its
            ** quota from its first allocation (the ledger keeps the count
            ** of refusals, not their sizes; the preload library's own line
            ** above names the size). */
            fprintf(stderr,
                    "vram: run: %s: refused %llu allocation%s, none granted, quota %s\n",
                    r->uuid[d], (unsigned long long)refused, refused == 1 ? "" : "s",
                    r->limit[d] > 0 ? size_format(r->limit[d], c, sizeof c) : "none");
            continue;
        }
        if (sum == 0 && r->max_used[d] == 0) {
            /* In the ledger, so reserved or refused, but never seen held. */
            fprintf(stderr,
                    "vram: run: %s: peak not seen (the processes that used it exited "
                    "between two samples), quota %s, %llu allocation%s refused\n",
                    r->uuid[d],
                    r->limit[d] > 0 ? size_format(r->limit[d], c, sizeof c) : "none",
                    (unsigned long long)refused, refused == 1 ? "" : "s");
            continue;
        }
        fprintf(stderr,
                "vram: run: %s: peak %s (sum of the peaks of %d process%s; at most %s "
                "in use at once when sampled), quota %s, %llu allocation%s refused\n",
                r->uuid[d], size_format(sum, a, sizeof a), procs, procs == 1 ? "" : "es",
                size_format(r->max_used[d], b, sizeof b),
                r->limit[d] > 0 ? size_format(r->limit[d], c, sizeof c) : "none",
                (unsigned long long)refused, refused == 1 ? "" : "s");
    }
    if (r->failed)
        fprintf(stderr, "vram: run: cannot read the ledger of group '%s': %s\n", r->group,
                r->error);
    else if (!any)
        fprintf(stderr, "vram: run: no GPU memory used by group '%s'\n", r->group);
}

static void
report_free(struct report *r)
{
    if (r->own != NULL) {
        ledger_leave(r->own);
        ledger_remove_if_unused(r->own);
        ledger_close(r->own);
    }
    ledger_close(r->ledger);
    free(r->snap);
    free(r->procs);
    free(r->before);
}

/* Sleep one sampling interval (a signal may cut it short). START: when
** the command started (CLOCK_MONOTONIC). */
static void
nap(const struct timespec *start)
{
    struct timespec now, ts = {0, REPORT_INTERVAL_NS};
    if (clock_gettime(CLOCK_MONOTONIC, &now) == 0 &&
        now.tv_sec - start->tv_sec < REPORT_FIRST_SECONDS)
        ts.tv_nsec = REPORT_FIRST_INTERVAL_NS;
    nanosleep(&ts, NULL);
}

/* Sleep MS milliseconds (a signal may cut it short). */
static void
nap_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/*
** Stop CHILD as WATCH asks (run_command_watched): SIGINT, which lets a
** training script end as at Ctrl-C (Python raises KeyboardInterrupt, its
** finally blocks run); after WATCH->grace_ms SIGTERM, after as long again
** SIGKILL. Returns when it has been reaped, its status in *STATUS; false
** if waitpid failed (said).
*/
static bool
stop_child(pid_t child, const struct run_watch *watch, int *status)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGKILL};
    for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++) {
        kill(child, sigs[k]);
        unsigned waited = 0;
        for (;;) {
            pid_t w = waitpid(child, status, WNOHANG);
            if (w == child)
                return true;
            if (w < 0 && errno != EINTR) {
                cli_error("%s: waitpid: %s", run_who, strerror(errno));
                return false;
            }
            if (sigs[k] != SIGKILL && waited >= watch->grace_ms)
                break;
            nap_ms(RUN_STOP_POLL_MS);
            waited += RUN_STOP_POLL_MS;
        }
    }
    return false; /* not reached: SIGKILL's wait only ends at the reap */
}

/*
** A command a signal ended (vram tune stops its command so; a crash) ran no
** exit handler, so the preload library could not remove the group's
** ledger: it is removed here once no live process is in it, so that
** /dev/shm does not fill with the ledgers of stopped commands.
*/
static void
remove_group_if_unused(const char *group)
{
    struct ledger *l = NULL;
    if (ledger_attach_existing(group, &l) != VRAM_OK)
        return;
    ledger_remove_if_unused(l);
    ledger_close(l);
}

/*
** Run COMMAND as a child and wait for it; with REPORT, sample the ledger
** until it exits and report; with WATCH, call its poll every interval and
** stop the command when it says so (*STOPPED then true). Whether exec
** failed comes back through a close-on-exec pipe, so that a missing
** command is one line and 127, as when vram execs it in place.
*/
static int
run_child(char **command, const char *group, bool report, const struct run_watch *watch,
          bool *stopped)
{
    struct report r;
    memset(&r, 0, sizeof r);
    r.group = group;
    r.snap = malloc(sizeof *r.snap);
    if (r.snap == NULL) {
        cli_error("%s: out of memory", run_who);
        return RUN_FAIL;
    }
    /* An entry of our own keeps the group's ledger in /dev/shm until the
    ** report is made: the last member of the command removes it at its
    ** exit otherwise, and with it the count of refusals of a command that
    ** lived less than one sampling interval. */
    if (report && ledger_open(group, &r.own) != VRAM_OK)
        r.own = NULL; /* the report may miss a short command's refusals */
    if (report)
        report_sample(&r, true); /* a shared group may have members already */

    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        cli_error("%s: pipe: %s", run_who, strerror(errno));
        report_free(&r);
        return RUN_FAIL;
    }
    struct timespec start = {0, 0};
    clock_gettime(CLOCK_MONOTONIC, &start);
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) {
        cli_error("%s: fork: %s", run_who, strerror(errno));
        close(pipefd[0]);
        close(pipefd[1]);
        report_free(&r);
        return RUN_FAIL;
    }
    if (child == 0) {
        close(pipefd[0]);
        execvp(command[0], command);
        int err = errno;
        ssize_t w = write(pipefd[1], &err, sizeof err);
        (void)w;
        _exit(err == ENOENT || err == ENOTDIR ? RUN_NOT_FOUND : RUN_CANNOT_EXEC);
    }
    close(pipefd[1]);
    run_child_pid = child;
    install_forwarding();

    int err = 0;
    ssize_t got;
    do
        got = read(pipefd[0], &err, sizeof err);
    while (got < 0 && errno == EINTR);
    close(pipefd[0]);

    int status = 0;
    pid_t w;
    if (got == (ssize_t)sizeof err) { /* exec failed: nothing ran */
        do
            w = waitpid(child, &status, 0);
        while (w < 0 && errno == EINTR);
        report_free(&r);
        return exec_failure(command[0], err);
    }
    for (;;) {
        w = waitpid(child, &status, WNOHANG);
        if (w == child)
            break;
        if (w < 0 && errno != EINTR) {
            cli_error("%s: waitpid: %s", run_who, strerror(errno));
            report_free(&r);
            return RUN_FAIL;
        }
        if (watch != NULL) {
            nap_ms(watch->interval_ms);
            if (waitpid(child, &status, WNOHANG) == child)
                break;
            if (watch->poll(watch->ctx)) {
                *stopped = true;
                if (!stop_child(child, watch, &status)) {
                    run_child_pid = 0;
                    report_free(&r);
                    return RUN_FAIL;
                }
                break;
            }
        } else if (report) {
            report_sample(&r, false);
            nap(&start);
        } else {
            do
                w = waitpid(child, &status, 0);
            while (w < 0 && errno == EINTR);
            if (w == child)
                break;
        }
    }
    run_child_pid = 0;
    if (report) {
        report_sample(&r, false); /* members the command left running */
        report_print(&r);
    }
    report_free(&r);
    if (WIFSIGNALED(status))
        remove_group_if_unused(group);
    return child_status(status);
}

/* ------------------------------------------------------------------ */
/* The command                                                          */
/* ------------------------------------------------------------------ */

/*
** The setup `vram run` and `vram record` share: check LIMIT (may be NULL)
** and GROUP (NULL: a fresh group "run-<pid>-<seconds>", written into
** GROUP_OUT), find the preload library (PRELOAD, else the environment's,
** else the default), put the quota settings and LD_PRELOAD into this
** process's environment. WHO names the subcommand in error messages.
** Returns -1 on success, else the exit status (nothing ran).
*/
int
run_prepare(const char *who, const char *limit, const char *group, const char *preload,
            char *group_out, size_t group_len)
{
    run_who = who;
    run_says_unlimited = strcmp(who, "run") == 0;
    struct run_args a = {.limit = limit, .group = group, .preload = preload};
    int rc;
    if ((rc = check_flags(&a)) >= 0)
        return rc;
    struct env_run env;
    if (env_run_load(NULL, NULL, &env) != VRAM_OK) {
        cli_error("%s: %s", run_who, vram_last_error());
        return RUN_USAGE;
    }
    char lib[PATH_MAX];
    if ((rc = find_library(&a, &env, lib)) >= 0)
        return rc;
    if (group != NULL)
        snprintf(group_out, group_len, "%s", group);
    else
        snprintf(group_out, group_len, "run-%ld-%lld", (long)getpid(),
                 (long long)time(NULL));
    if ((rc = set_quota_env(&a, group_out)) >= 0)
        return rc;
    return set_ld_preload(lib, env.ld_preload);
}

/* Run COMMAND (after run_prepare) as a child, wait, and return its exit
** status as `vram run --report` does (126, 127, 128+N; 1 on failure). */
int
run_command(char **command, const char *group)
{
    return run_child(command, group, false, NULL, NULL);
}

int
run_command_watched(char **command, const char *group, const struct run_watch *watch,
                    bool *stopped)
{
    *stopped = false;
    return run_child(command, group, false, watch, stopped);
}

int
cmd_run(int argc, char **argv)
{
    /* The command starts at the first operand: what follows are its own
    ** arguments, options or not. */
    struct run_args a = {.limit = NULL};
    int rc = cliopt_parse(&run_cmd, argc, argv, NULL, &a, &a.command);
    if (rc >= 0)
        return rc;
    char group[LEDGER_GROUP_LEN];
    if ((rc = run_prepare("run", a.limit, a.group, a.preload, group, sizeof group)) >= 0)
        return rc;
    if (a.report)
        return run_child(a.command, group, true, NULL, NULL);
    fflush(NULL);
    execvp(a.command[0], a.command);
    return exec_failure(a.command[0], errno);
}
