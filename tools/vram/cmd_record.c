/* SPDX-License-Identifier: MIT */
/*
** cmd_record.c -- `vram record`: run a command with the preload library
** recording every allocation and free into a trace (docs/RECORD.md).
**
**   vram record [--output FILE | -o FILE] [--limit SPEC] [--driver-view]
**               [--no-sites] [--preload PATH] [--] COMMAND [ARGS...]
**
** The quota and preload setup is `vram run`'s (run_prepare): a fresh
** group, the preload library first in LD_PRELOAD, --limit checked by the
** library's own parser. To that it adds VRAM_TRACE = FILE (absolute, so
** that a command that changes directory still writes there),
** VRAM_TRACE_SITES=1 unless --no-sites (each allocation's call site: the
** innermost Python frames and native return addresses) and, unless
** --driver-view, the framework settings under which every tensor reaches
** the driver as its own allocation:
**   PYTORCH_CUDA_ALLOC_CONF  += backend:cudaMallocAsync (unless a backend
**                               is named already)
**   TF_GPU_ALLOCATOR          = cuda_malloc_async (if unset)
**   XLA_PYTHON_CLIENT_ALLOCATOR = cuda_async (if unset)
**   XLA_PYTHON_CLIENT_PREALLOCATE = false (if unset: the cuda_async pool
**                               otherwise takes 75% of the device in one
**                               allocation, freed at once, at start)
** A setting the user made is kept and said on standard error. The command
** runs as a child; when it ends, the trace is read back and summarized in
** one line.
**
** Exit status: the command's (126, 127, 128+N as `vram run --report`);
** 1 when vram could not start it, or the command succeeded but its trace
** cannot be read; 2 bad usage (nothing ran).
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/outfile.h"
#include "base/size.h"
#include "cliopt.h"
#include "cmd.h"
#include "config/env.h"
#include "ledger/ledger.h"
#include "trace/trace.h"
#include "vram.h"

enum { REC_FAIL = 1, REC_USAGE = 2 };

#define REC_DEFAULT_OUTPUT "vram.trace.csv"

struct record_args {
    const char *output;
    const char *limit;
    const char *preload;
    const char *snapshot; /* --torch-snapshot FILE, or NULL */
    const char *at;       /* --snapshot-at LABEL, or NULL */
    bool driver_view;
    bool no_sites;
    bool no_holders;
    char **command;
};

#define AT(member) offsetof(struct record_args, member)

static const struct cli_opt opt_table[] = {
    {0, "output", 'o', "FILE",
     "the trace to write (gzip-compressed when it ends in .gz); default "
     REC_DEFAULT_OUTPUT, .store = CLIOPT_STRING, .field = AT(output)},
    {0, "limit", 0, "SPEC", "GPU memory quota while recording, as vram run --limit",
     .store = CLIOPT_STRING, .field = AT(limit)},
    {0, "driver-view", 0, NULL,
     "leave the frameworks' own allocators as they are: the trace then holds their "
     "pool segments, not tensors", .store = CLIOPT_SET, .field = AT(driver_view)},
    {0, "no-sites", 0, NULL,
     "record no call sites (the code that allocated): a format-1 trace, as before "
     "(and no holders)",
     .store = CLIOPT_SET, .field = AT(no_sites)},
    {0, "no-holders", 0, NULL,
     "in a Python program, do not name what holds live memory (the variable or "
     "container that refers to each tensor) at exit, at the return of main() and at "
     "vram.mark",
     .store = CLIOPT_SET, .field = AT(no_holders)},
    {0, "preload", 0, "PATH", "the preload library, as vram run --preload",
     .store = CLIOPT_STRING, .field = AT(preload)},
    {0, "torch-snapshot", 0, "FILE",
     "also write the recording as PyTorch's memory snapshot (the pickle of "
     "torch.cuda.memory._snapshot(), which PyTorch's memory_viz opens) to FILE: every "
     "event, and what was live at the peak",
     .store = CLIOPT_STRING, .field = AT(snapshot)},
    {0, "snapshot-at", 0, "LABEL",
     "the snapshot's live memory at the last mark LABEL (vram.mark), not at the peak",
     .store = CLIOPT_STRING, .field = AT(at)},
};

static void
record_notes(FILE *out)
{
    fprintf(out,
            "Unless --driver-view, PyTorch, TensorFlow and JAX are set up so that each\n"
            "tensor is its own allocation: PYTORCH_CUDA_ALLOC_CONF gets\n"
            "backend:cudaMallocAsync (PyTorch 2.0 or later), TF_GPU_ALLOCATOR=\n"
            "cuda_malloc_async, XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async and\n"
            "XLA_PYTHON_CLIENT_PREALLOCATE=false; settings already made are kept. Each\n"
            "allocation names its call site (the innermost Python frames of a thread\n"
            "holding the GIL, and native return addresses) unless --no-sites.\n"
            "Every event reaches the file as it is recorded: a command killed at any\n"
            "moment leaves a trace of all it recorded. SIGINT, SIGTERM or SIGHUP sent to\n"
            "vram record stops the command and what it started (a second one kills\n"
            "them), then the summary is written and the group's ledger removed;\n"
            "SIGKILL of vram record kills the command with it.\n"
            "docs/RECORD.md has more.\n");
}

static const struct cli_command record_cmd = {
    .prog = "vram record",
    .synopsis = "[OPTIONS] [--] COMMAND [ARGS...]",
    .about = "Run COMMAND with the preload library recording every GPU allocation\n"
             "and free into a trace that vram analyze and vram replay read.\n",
    CLIOPT_TABLE(opt_table),
    .notes = record_notes,
    .exit_status = "the command's; 1 vram could not start it, or its trace cannot be "
                   "read; 2 bad usage (nothing was run); 126 COMMAND cannot be executed; "
                   "127 COMMAND not found; 128+N if COMMAND was killed by signal N.",
    .stop_at_operand = true,
};

/*
** OUTPUT made absolute into ABS, and created (emptied) now, so that a path
** that cannot be written is one line before anything runs rather than a
** line from the preload library in the middle of the command's output.
** Opened as every output is (outfile_open): a link or another user's file
** is refused. The preload library opens it again the same way.
*/
static int
prepare_output(const char *who, const char *output, char *abs, size_t len)
{
    char shown[TEXT_EXCERPT_LEN];
    text_excerpt(output, shown, sizeof shown);
    if (output[0] == '\0') {
        cli_error("%s: --output: an empty path", who);
        return REC_USAGE;
    }
    char cwd[PATH_MAX];
    int w;
    if (output[0] == '/')
        w = snprintf(abs, len, "%s", output);
    else if (getcwd(cwd, sizeof cwd) != NULL)
        w = snprintf(abs, len, "%s/%s", cwd, output);
    else {
        cli_error("%s: cannot make '%s' absolute: %s", who, shown, strerror(errno));
        return REC_FAIL;
    }
    if (w < 0 || (size_t)w >= len) {
        cli_error("%s: --output '%s': path too long", who, shown);
        return REC_USAGE;
    }
    /* Never through a link, never over another user's file: the default
    ** name lands in whatever directory the command is run from. */
    int fd = -1;
    if (outfile_open(abs, OUTFILE_TRUNCATE, &fd) != VRAM_OK) {
        const char *why = vram_last_error(); /* "ABS: reason" */
        size_t n = strlen(abs);
        if (strncmp(why, abs, n) == 0 && strncmp(why + n, ": ", 2) == 0)
            why += n + 2;
        cli_error("%s: --output '%s': %s", who, shown, why);
        return REC_USAGE;
    }
    close(fd);
    return -1;
}

static int
set_or_fail(const char *who, const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0) {
        cli_error("%s: cannot set %s: %s", who, name, strerror(errno));
        return REC_FAIL;
    }
    return -1;
}

/* NAME (now CURRENT, "" unset) set to VALUE when unset; a value other
** than VALUE or ALSO_OK (may be NULL) is kept, and a line says that WHAT
** are recorded as the framework's pool's regions. */
static int
steer(const char *who, const char *name, const char *current, const char *value,
      const char *also_ok, const char *what)
{
    if (current[0] == '\0')
        return set_or_fail(who, name, value);
    if (strcmp(current, value) != 0 && (also_ok == NULL || strcmp(current, also_ok) != 0))
        cli_error("%s: %s is set: %s are recorded as its pool's regions", who, name, what);
    return -1;
}

/*
** The frameworks' settings (see the head of this file). A value the user
** set is kept; one line on standard error says so when it keeps the
** framework's own pool.
*/
static int
steer_frameworks(const char *who, const struct env_run *env)
{
    int rc;
    const char *conf = env->torch_alloc_conf;
    if (strstr(conf, "backend") == NULL) {
        char value[sizeof env->torch_alloc_conf + 32];
        snprintf(value, sizeof value, "%s%sbackend:cudaMallocAsync", conf,
                 conf[0] != '\0' ? "," : "");
        if ((rc = set_or_fail(who, "PYTORCH_CUDA_ALLOC_CONF", value)) >= 0)
            return rc;
    } else if (strstr(conf, "backend:cudaMallocAsync") == NULL) {
        cli_error("%s: PYTORCH_CUDA_ALLOC_CONF names its own backend: PyTorch's "
                  "tensors are recorded as its pool's segments",
                  who);
    }
    if ((rc = steer(who, "TF_GPU_ALLOCATOR", env->tf_gpu_allocator, "cuda_malloc_async",
                    NULL, "TensorFlow's tensors")) >= 0)
        return rc;
    if ((rc = steer(who, "XLA_PYTHON_CLIENT_ALLOCATOR", env->xla_allocator, "cuda_async",
                    "platform", "JAX's buffers")) >= 0)
        return rc;
    if (env->xla_preallocate[0] == '\0' &&
        (rc = set_or_fail(who, "XLA_PYTHON_CLIENT_PREALLOCATE", "false")) >= 0)
        return rc;
    return -1;
}

/* One line about the trace at PATH; false if it cannot be read. */
static bool
summarize(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && st.st_size == 0) {
        /* The library opens the trace at the first CUDA call it sees. */
        cli_error("record: %s: no GPU allocation was seen (the command made no CUDA call "
                  "the preload library saw)",
                  path);
        return true;
    }
    struct trace *t = NULL;
    if (trace_load(path, &t) != VRAM_OK) {
        cli_error("record: the trace cannot be read: %s", vram_last_error());
        return false;
    }
    if (t->cut != NULL)
        cli_error("record: %s", t->cut);
    uint64_t allocs = 0;
    for (uint64_t i = 0; i < t->n_events; i++)
        if (t->events[i].op == TRACE_ALLOC)
            allocs++;
    char peak[32];
    if (t->n_events == 0)
        cli_error("record: %s: no GPU allocation was seen (no CUDA use, or only before the "
                  "library was loaded)",
                  path);
    else
        cli_error("record: %s: %llu events, %llu allocations, peak %s live (vram analyze %s)",
                  path, (unsigned long long)t->n_events, (unsigned long long)allocs,
                  size_format(t->peak_live_bytes, peak, sizeof peak), path);
    trace_free(t);
    return true;
}

/* VRAM_TRACE_HOLDERS: the package's holders.py, when HOLDERS and it is
** there (else said, and the recording goes on); unset otherwise. */
static int
prepare_holders(const char *who, const struct env_run *env, bool holders)
{
    if (!holders) {
        unsetenv("VRAM_TRACE_HOLDERS");
        return -1;
    }
    char dir[PATH_MAX], file[PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/vram/holders.py", cli_python_dir(env, dir, sizeof dir));
    if (access(file, R_OK) != 0) {
        cli_error("%s: %s: %s; what holds a Python program's memory is not named (set "
                  "VRAM_PYTHONPATH to the directory of the vram package)",
                  who, file, strerror(errno));
        unsetenv("VRAM_TRACE_HOLDERS");
        return -1;
    }
    return set_or_fail(who, "VRAM_TRACE_HOLDERS", file);
}

int
record_prepare(const char *who, const char *output, bool driver_view, bool sites,
               bool holders, char *path, size_t len)
{
    struct env_run env;
    if (env_run_load(NULL, NULL, &env) != VRAM_OK) {
        cli_error("%s: %s", who, vram_last_error());
        return REC_USAGE;
    }
    int rc;
    if ((rc = prepare_output(who, output, path, len)) >= 0)
        return rc;
    if ((rc = set_or_fail(who, "VRAM_TRACE", path)) >= 0)
        return rc;
    if ((rc = set_or_fail(who, "VRAM_TRACE_SITES", sites ? "1" : "0")) >= 0)
        return rc;
    if ((rc = prepare_holders(who, &env, sites && holders)) >= 0)
        return rc;
    if (!driver_view && (rc = steer_frameworks(who, &env)) >= 0)
        return rc;
    return -1;
}

int
cmd_record(int argc, char **argv)
{
    /* The command starts at the first operand, as in vram run. */
    struct record_args a = {.output = REC_DEFAULT_OUTPUT};
    int rc = cliopt_parse(&record_cmd, argc, argv, NULL, &a, &a.command);
    if (rc >= 0)
        return rc;
    if (a.at != NULL && a.snapshot == NULL)
        return cliopt_usage_error(&record_cmd, "--snapshot-at needs --torch-snapshot FILE");
    if (a.snapshot != NULL) {
        /* Created now, so that a path that cannot be written is said before
        ** the command runs, not after it. */
        char shown[TEXT_EXCERPT_LEN];
        FILE *f = a.snapshot[0] != '\0' ? fopen(a.snapshot, "wb") : NULL;
        if (f == NULL) {
            cli_error("record: --torch-snapshot '%s': %s",
                      text_excerpt(a.snapshot, shown, sizeof shown),
                      a.snapshot[0] != '\0' ? strerror(errno) : "an empty path");
            return REC_USAGE;
        }
        fclose(f);
    }
    char group[LEDGER_GROUP_LEN];
    if ((rc = run_prepare("record", a.limit, NULL, a.preload, group, sizeof group)) >= 0)
        return rc;
    char path[PATH_MAX];
    if ((rc = record_prepare("record", a.output, a.driver_view, !a.no_sites, !a.no_holders,
                             path, sizeof path)) >= 0)
        return rc;
    int status = run_command(a.command, group);
    if (status == 126 || status == 127)
        return status; /* nothing ran: said already */
    if (!summarize(path) && status == 0)
        return REC_FAIL;
    if (a.snapshot != NULL) {
        struct trace *t = NULL;
        int src = cli_load_trace(path, &t);
        if (src == 0)
            src = cli_write_snapshot(t, a.snapshot, a.at);
        trace_free(t);
        if (src == 0)
            fprintf(stderr, "vram: record: %s: PyTorch's memory snapshot (python3 -m "
                            "torch.cuda._memory_viz trace_plot %s -o memory.html)\n",
                    a.snapshot, a.snapshot);
        else if (status == 0)
            return REC_FAIL;
    }
    return status;
}
