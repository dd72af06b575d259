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
** The peak: the group's ledger keeps, per device, the most its members
** held at once, raised by each member at each grant, and the count of
** refusals and of the members that used the device (ledger.h,
** ledger_snapshot), whatever became of them since. So --report reads
** the ledger once before the command starts and once after it ends:
** exact for commands short or long, with nothing sampled in between.
** `vram run` holds an entry of its own in the group meanwhile, so that
** the ledger outlives the command's last process.
**
** Exit status: the command's; 1 vram could not start it; 2 bad usage or a
** malformed setting (nothing ran); 126 the command cannot be executed; 127
** it was not found; with --report 128+N when it was killed by signal N.
*/
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
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
** A per-device entry that names no GPU limits nothing: the library would
** disable CUDA in every process of the command (docs/QUOTA.md, "A key that
** names no GPU"), so it is refused here, nothing run, when the driver can
** list the devices. Here more strictly than in the library: every key
** must name a GPU this process sees (the command inherits its
** CUDA_VISIBLE_DEVICES, so a UUID hidden here limits nothing the command
** sees unless it changes the list for its children). The driver is asked
** only for a per-device list, and without a context (no device memory);
** with no driver or no device there is nothing to check against (the
** library checks in each process).
*/
static int
check_entries_visible(const struct quota_env *q)
{
    if (!q->active || q->n_entries == 0)
        return -1;
    static struct quota_gpus g;
    int n = 0;
    if (backend_cuda_uuids(NULL, g.uuid, QUOTA_MAX_ORDINAL, &n) != VRAM_OK)
        return -1;
    g.n = g.n_ordinals = n > QUOTA_MAX_ORDINAL ? QUOTA_MAX_ORDINAL : n;
    int k = quota_unmatched(q, &g);
    if (k < 0)
        return -1;
    char line[4096];
    quota_unmatched_line(q, k, &g, line, sizeof line);
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
** Stopping the command run as a child (--report, vram record, vram tune).
** A signal that asks vram to stop (SIGINT, SIGQUIT, SIGTERM, SIGHUP)
** stops the command and every process it started: one sent to vram by
** another process (kill, a scheduler) is passed on to them all (a wrapper
** script alone would not pass it on); one the terminal sends reaches them
** directly (they are in its foreground process group), so it is not sent
** twice. A second such signal kills them all (SIGKILL) at once: the
** command had its chance to end cleanly. What they leave behind when the
** command ends is stopped the same way (stop_adopted), so that nothing of
** a stopped run goes on unwatched and its group's ledger can go.
**
** The handler only notes the signal (and SIGKILLs the command itself on
** the second, which kill() may do there); the waits below are not
** restarted (no SA_RESTART), so the loop that waits passes it on
** (stop_pending). RUN_STOPS counts the signals (at most 2), RUN_STOP_SIG
** is the first, RUN_FORWARD is set while one sent by another process
** waits to be passed on.
*/
static volatile sig_atomic_t run_child_pid;
static volatile sig_atomic_t run_stops;
static volatile sig_atomic_t run_stop_sig;
static volatile sig_atomic_t run_forward;

static void
forward_signal(int sig, siginfo_t *info, void *ctx)
{
    (void)ctx;
    if (run_stops == 0)
        run_stop_sig = sig;
    if (run_stops < 2)
        run_stops = run_stops + 1; /* the four signals are blocked here */
    if (info == NULL || info->si_code <= 0)
        run_forward = 1;
    if (run_stops > 1 && run_child_pid > 0)
        kill((pid_t)run_child_pid, SIGKILL);
}

static const int stop_sigs[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
#define N_STOP_SIGS (sizeof stop_sigs / sizeof stop_sigs[0])

/* What the four were before install_forwarding, for the command to get
** as vram got them (a signal ignored by whoever started vram stays
** ignored in the command). */
static struct sigaction stop_sigs_before[N_STOP_SIGS];

static void
install_forwarding(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = forward_signal;
    sa.sa_flags = SA_SIGINFO; /* no SA_RESTART: a wait ends, and passes it on */
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_STOP_SIGS; i++)
        sigaddset(&sa.sa_mask, stop_sigs[i]);
    for (size_t i = 0; i < N_STOP_SIGS; i++)
        sigaction(stop_sigs[i], &sa, &stop_sigs_before[i]);
}

/*
** The processes below ROOT: its children, theirs, and so on, into PIDS
** (at most MAX, ROOT not included); returns how many. From every
** process's parent in /proc/PID/stat (a process that starts or ends
** meanwhile may be missed or named: a signal to a gone pid does nothing,
** and a pid is not reused while its parent, here, has not reaped it).
*/
#define TREE_MAX 4096
static int
descendants(pid_t root, pid_t *pids, int max)
{
    static pid_t pid_of[TREE_MAX], ppid_of[TREE_MAX];
    int n_all = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d != NULL && n_all < TREE_MAX && (e = readdir(d)) != NULL) {
        char path[300], buf[512];
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t got = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (got <= 0)
            continue;
        buf[got] = '\0';
        const char *p = strrchr(buf, ')'); /* after the command name */
        char state;
        long ppid;
        if (p == NULL || sscanf(p + 1, " %c %ld", &state, &ppid) != 2)
            continue;
        pid_of[n_all] = (pid_t)strtol(e->d_name, NULL, 10);
        ppid_of[n_all] = (pid_t)ppid;
        n_all++;
    }
    if (d != NULL)
        closedir(d);
    /* Breadth first: PIDS is its own queue. */
    int n = 0;
    for (int head = -1; head < n; head++) {
        pid_t parent = head < 0 ? root : pids[head];
        for (int i = 0; i < n_all && n < max; i++)
            if (ppid_of[i] == parent && pid_of[i] != root)
                pids[n++] = pid_of[i];
    }
    return n;
}

/* Send SIG to ROOT (when above 0) and every process below it. */
static void
signal_tree(pid_t root, int sig)
{
    static pid_t pids[TREE_MAX];
    int n = descendants(root, pids, TREE_MAX);
    if (root > 0)
        kill(root, sig);
    for (int i = 0; i < n; i++)
        kill(pids[i], sig);
}

/* Pass on what the handler noted (see above): the first signal sent by
** another process to the command's whole tree, the second's SIGKILL too. */
static void
stop_pending(pid_t child)
{
    static bool killed;
    if (run_stops > 1 && !killed) {
        killed = true;
        run_forward = 0;
        signal_tree(child, SIGKILL);
    } else if (run_forward) {
        run_forward = 0;
        signal_tree(child, run_stop_sig);
    }
}

static void nap_ms(unsigned ms);

/*
** After a stopped command: what it left running (vram is a child
** subreaper while it runs a command, PR_SET_CHILD_SUBREAPER, so what the
** command started and left behind became vram's child rather than
** init's) is stopped too, with SIG; then SIGKILL after GRACE_MS (0: only
** when a second stop signal comes), waiting until none is left.
*/
static void
stop_adopted(int sig, unsigned grace_ms)
{
    static pid_t pids[TREE_MAX], sent[TREE_MAX];
    int n_sent = 0;
    unsigned waited = 0;
    for (;;) {
        int status;
        while (waitpid(-1, &status, WNOHANG) > 0) {
        } /* reap what ended */
        int n = descendants(getpid(), pids, TREE_MAX);
        if (n == 0)
            return;
        bool hard = run_stops > 1 || (grace_ms > 0 && waited >= grace_ms);
        for (int i = 0; i < n; i++) {
            bool before = false; /* SIG once each; SIGKILL every time */
            for (int k = 0; k < n_sent && !before; k++)
                before = sent[k] == pids[i];
            if (hard || !before)
                kill(pids[i], hard ? SIGKILL : sig);
            if (!before && n_sent < TREE_MAX)
                sent[n_sent++] = pids[i];
        }
        nap_ms(RUN_STOP_POLL_MS);
        waited += RUN_STOP_POLL_MS;
    }
}

/* ------------------------------------------------------------------ */
/* --report: what the group's ledger kept of the command's run          */
/* ------------------------------------------------------------------ */

/* One device of the group's ledger, before the command and after it. */
struct report_dev {
    char uuid[LEDGER_UUID_LEN];
    uint64_t limit;               /* the quota last set, bytes; 0 none */
    uint64_t peak0, peak;         /* the most the group held at once, bytes */
    uint64_t refusals0, refusals; /* allocations refused, ever */
    uint64_t users0, users;       /* members granted bytes on it, ever */
    bool earlier;                 /* in the ledger before the command started */
};

struct report {
    const char *group;
    struct ledger *own;           /* our own entry in the group, or NULL */
    struct ledger_snapshot *snap; /* scratch, heap (about 170 KiB) */
    int n_devices;
    struct report_dev dev[LEDGER_MAX_DEVICES];
    bool shared; /* the group had members of its own before the command */
    bool failed; /* the ledger could not be held or read: said, with ERROR */
    char error[256];
};

/* Our record of device UUID, added if new; NULL if the table is full. */
static struct report_dev *
report_device(struct report *r, const char *uuid)
{
    for (int d = 0; d < r->n_devices; d++)
        if (strcmp(r->dev[d].uuid, uuid) == 0)
            return &r->dev[d];
    if (r->n_devices == LEDGER_MAX_DEVICES)
        return NULL;
    struct report_dev *e = &r->dev[r->n_devices++];
    memset(e, 0, sizeof *e);
    snprintf(e->uuid, sizeof e->uuid, "%s", uuid);
    return e;
}

/* Read the group's ledger into R: BASELINE, before the command started. */
static void
report_read(struct report *r, bool baseline)
{
    struct ledger *l = NULL;
    vram_status st = ledger_attach_existing(r->group, &l);
    if (st == VRAM_OK)
        st = ledger_snapshot(l, r->snap);
    ledger_close(l);
    if (st != VRAM_OK) {
        if (!baseline && st != VRAM_E_NO_DEVICE && !r->failed) {
            r->failed = true;
            snprintf(r->error, sizeof r->error, "%s", vram_last_error());
        }
        return; /* not there: no process allocated */
    }
    const struct ledger_snapshot *s = r->snap;
    if (baseline)
        r->shared = s->n_procs > (r->own != NULL ? 1 : 0);
    int nd = s->n_devices < 0                    ? 0
             : s->n_devices > LEDGER_MAX_DEVICES ? LEDGER_MAX_DEVICES
                                                 : s->n_devices;
    for (int d = 0; d < nd; d++) {
        struct report_dev *e = report_device(r, s->uuid[d]);
        if (e == NULL)
            continue;
        e->limit = s->limit[d];
        e->peak = s->peak[d];
        e->refusals = s->refusals[d];
        e->users = s->users[d];
        if (baseline) {
            e->earlier = true;
            e->peak0 = e->peak;
            e->refusals0 = e->refusals;
            e->users0 = e->users;
        }
    }
}

/* B - A, or B when the ledger was made anew meanwhile (B < A). */
static uint64_t
since(uint64_t a, uint64_t b)
{
    return b >= a ? b - a : b;
}

/* One line per device to standard error (the UUIDs and the group name
** are bytes of the ledger and the user: cli_error makes them safe). */
static void
report_print(const struct report *r)
{
    char a[32], b[32];
    bool any = false;
    for (int d = 0; d < r->n_devices; d++) {
        const struct report_dev *e = &r->dev[d];
        uint64_t refused = since(e->refusals0, e->refusals);
        uint64_t users = since(e->users0, e->users);
        const char *quota = e->limit > 0 ? size_format(e->limit, b, sizeof b) : "none";
        const char *s_refused = refused == 1 ? "" : "s";
        if (e->earlier && e->peak == e->peak0 && refused == 0 && users == 0)
            continue; /* another run's device of a shared group */
        any = true;
        if (e->peak == 0 && refused > 0) {
            /* Nothing granted, something refused: a job too big for its
            ** quota from its first allocation (the ledger keeps the count
            ** of refusals, not their sizes; the preload library's own line
            ** above names the size). */
            cli_error("run: %s: refused %llu allocation%s, none granted, quota %s",
                    e->uuid, (unsigned long long)refused, s_refused, quota);
        } else if (!r->shared) {
            cli_error(
                    "run: %s: peak %s in use at once by %llu process%s, quota %s, "
                    "%llu allocation%s refused",
                    e->uuid, size_format(e->peak, a, sizeof a), (unsigned long long)users,
                    users == 1 ? "" : "es", quota, (unsigned long long)refused, s_refused);
        } else if (e->peak > e->peak0) {
            cli_error(
                    "run: %s: peak %s in use at once by group '%s' (its members from "
                    "before the command included), quota %s, %llu allocation%s refused",
                    e->uuid, size_format(e->peak, a, sizeof a), r->group, quota,
                    (unsigned long long)refused, s_refused);
        } else {
            cli_error(
                    "run: %s: group '%s' held at most %s at once, reached before the "
                    "command started, quota %s, %llu allocation%s refused",
                    e->uuid, r->group, size_format(e->peak, a, sizeof a), quota,
                    (unsigned long long)refused, s_refused);
        }
    }
    if (r->failed)
        cli_error("run: cannot read the ledger of group '%s': %s", r->group,
                r->error);
    else if (!any)
        cli_error("run: no GPU memory used by group '%s'", r->group);
}

static void
report_free(struct report *r)
{
    if (r->own != NULL) {
        ledger_leave(r->own);
        ledger_remove_if_unused(r->own);
        ledger_close(r->own);
    }
    free(r->snap);
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
** Run COMMAND as a child and wait for it; with REPORT, read the group's
** ledger before it starts and after it ends, and report; with WATCH, call its poll every interval and
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
    ** exit otherwise, and with it what the report reads. */
    if (report && ledger_open(group, &r.own) != VRAM_OK) {
        r.own = NULL; /* the ledger may be gone when the report reads it: said */
        r.failed = true;
        snprintf(r.error, sizeof r.error, "%s", vram_last_error());
    }
    if (report)
        report_read(&r, true); /* a shared group may have members already */

    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        cli_error("%s: pipe: %s", run_who, strerror(errno));
        report_free(&r);
        return RUN_FAIL;
    }
    /* What the command leaves behind becomes ours, not init's (adopted). */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t parent = getpid();
    run_stops = 0;
    install_forwarding();
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
        /* vram killed by SIGKILL (which it cannot pass on) kills the
        ** command too: nothing recorded or reported runs on unwatched. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(RUN_FAIL); /* vram died before the line above */
        for (size_t i = 0; i < N_STOP_SIGS; i++)
            sigaction(stop_sigs[i], &stop_sigs_before[i], NULL);
        execvp(command[0], command);
        int err = errno;
        ssize_t w = write(pipefd[1], &err, sizeof err);
        (void)w;
        _exit(err == ENOENT || err == ENOTDIR ? RUN_NOT_FOUND : RUN_CANNOT_EXEC);
    }
    close(pipefd[1]);
    run_child_pid = child;
    if (run_stops > 0) { /* a stop asked before the command had a pid */
        run_forward = 1;
        stop_pending(child);
    }

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
        stop_pending(child);
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
        } else {
            /* Not restarted after a signal: the loop passes it on. */
            w = waitpid(child, &status, 0);
            if (w == child)
                break;
        }
    }
    run_child_pid = 0;
    /* A stopped command's leftovers are stopped too; those of a command
    ** that ended by itself are left to run. */
    if (run_stops > 0)
        stop_adopted(run_stop_sig, 0);
    else if (watch != NULL && *stopped)
        stop_adopted(SIGTERM, watch->grace_ms);
    if (report) {
        report_read(&r, false);
        report_print(&r);
    }
    report_free(&r);
    /* A command a signal ended ran no exit handler: its group's ledger goes
    ** here once no live process is in it (a no-op when one still is). */
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
