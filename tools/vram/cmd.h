/* SPDX-License-Identifier: MIT */
/*
** cmd.h -- the subcommands of the `vram` tool, and what several of them
** share.
*/
#ifndef VRAM_TOOLS_CMD_H
#define VRAM_TOOLS_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vram.h"

/* The option rows of the monitoring commands (stat, top, exporter), worded
** once; FIELD is offsetof(the command's settings, member). */
#define CMD_OPT_NO_NVML(field_)                                                          \
    {0, "no-nvml", 0, NULL, "do not load libnvidia-ml.so.1: the ledgers alone",          \
     .store = CLIOPT_CLEAR, .field = (field_)}
#define CMD_OPT_INTERVAL(short_, field_)                                                 \
    {0, "interval", short_, "SECONDS", "seconds between samples, 0.1..3600 (default 1)", \
     .store = CLIOPT_SECONDS, .field = (field_), .lo = 0.1, .hi = 3600}

/*
** The subcommands, X(NAME, FUNCTION, SUMMARY): the one list. main.c's
** dispatch table and `vram help` come from it. Each FUNCTION takes the
** arguments after its own name (argv[0] is the subcommand) and returns the
** exit code: 0 ok, 1 failure, 2 bad usage or bad input.
*/
#define VRAM_COMMAND_LIST(X)                                                              \
    X("replay", cmd_replay,                                                             \
      "replay allocation traces through each strategy on a simulated GPU")              \
    X("env", cmd_env,                                                                   \
      "print every setting vram reads from the environment, and its source")            \
    X("devices", cmd_devices,                                                           \
      "list the GPUs and the logical devices the configuration makes of them")          \
    X("run", cmd_run, "run a command under a GPU memory quota (the preload library)")   \
    X("record", cmd_record,                                                             \
      "run a command and record its GPU allocations, tensor by tensor, into a trace")   \
    X("tune", cmd_tune,                                                                 \
      "record a command until steady, replay it, recommend a strategy, a cap and settings")\
    X("analyze", cmd_analyze,                                                           \
      "peak, iterations, leak verdict, fragmentation and OOM story of a trace")         \
    X("doctor", cmd_doctor,                                                             \
      "check the environment, the GPUs or a trace for the usual memory problems")       \
    X("plan", cmd_plan, "predict a training job's peak GPU memory before it runs")      \
    X("stat", cmd_stat,                                                                 \
      "GPU memory per device, group and process, once (--json, --config)")              \
    X("top", cmd_top, "GPU memory per device, group and process, live in the terminal") \
    X("exporter", cmd_exporter,                                                         \
      "serve the monitoring metrics to Prometheus at /metrics")                         \
    X("admin", cmd_admin,                                                               \
      "manage the host's policy: /etc/ld.so.preload, the policy file, dmem (root)")

#define X(name, function, summary) int function(int argc, char **argv);
VRAM_COMMAND_LIST(X)
#undef X

/* The preload library's file name, its SONAME ("libvram-preload.so.0"),
** from the build (cmake/Install.cmake): what vram run, record and admin
** look for beside the binary, and what /etc/ld.so.preload names. */
#ifndef VRAM_PRELOAD_NAME
#define VRAM_PRELOAD_NAME "libvram-preload.so.0"
#endif

/* The preload library installed beside this binary (VRAM_PRELOAD_NAME in
** the library directory, from the directory of bin/vram) into BUF; false
** if there is none (BUF then holds the path tried, or ""). */
bool cli_default_preload(char *buf, size_t len);

/* The number of malformed variables among those vram reads (the rows
** `vram env` flags), the first one's line ("NAME='value': why") into
** FIRST (LEN bytes). (cmd_env.c; `vram doctor` too.) */
int cli_env_errors(char *first, size_t len);

/* Print "vram: " + the formatted message + newline to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- shared by `vram run` and `vram record` (cmd_run.c) ---- */

/* The quota and preload setup of `vram run`, WHO naming the subcommand in
** its messages; -1 on success, else the exit status. */
int run_prepare(const char *who, const char *limit, const char *group, const char *preload,
                char *group_out, size_t group_len);

/* Run COMMAND as a child after run_prepare; its exit status (126, 127,
** 128+N for a signal, 1 if it could not be started). */
int run_command(char **command, const char *group);

/* What `vram tune` watches while its command runs (run_command_watched). */
struct run_watch {
    /* Called every INTERVAL_MS while the command runs; true stops it. */
    bool (*poll)(void *ctx);
    void *ctx;
    unsigned interval_ms;
    /* Stopping: SIGINT, after GRACE_MS SIGTERM, after GRACE_MS more SIGKILL. */
    unsigned grace_ms;
};

/* As run_command, calling WATCH while the command runs and stopping it
** when WATCH's poll says so (*STOPPED then true; the status is then what
** the stop left, 128+N for a signal N that ended it). */
int run_command_watched(char **command, const char *group, const struct run_watch *watch,
                        bool *stopped);

/* ---- shared by `vram record` and `vram tune` (cmd_record.c) ---- */

/* The directory holding the vram Python package: VRAM_PYTHONPATH (ENV),
** else the installed one (share/vram/python beside the binary, into BUF of
** LEN bytes), else the checkout's python/ (cmd_plan.c). */
struct env_run;
const char *cli_python_dir(const struct env_run *env, char *buf, size_t len);

/* OUTPUT made absolute into PATH and created empty, VRAM_TRACE set to it
** and, unless DRIVER_VIEW, the frameworks steered to tensor-level
** allocations; call sites recorded if SITES (VRAM_TRACE_SITES), and with
** them, if HOLDERS, what holds live memory in a Python program
** (VRAM_TRACE_HOLDERS: the package's holders.py); WHO names the subcommand
** in messages. -1 on success, else the exit status (nothing ran). */
int record_prepare(const char *who, const char *output, bool driver_view, bool sites,
                   bool holders, char *path, size_t len);

/* ---- shared by `vram replay` and `vram tune` (cmd_replay.c) ---- */

struct trace;

/* What replaying a trace under one strategy on the simulated device cost. */
struct replay_summary {
    uint64_t peak_in_use_bytes;   /* most bytes live (trace sizes) */
    uint64_t peak_reserved_bytes; /* most reserved from the device, no cap */
    uint64_t ooms;                /* allocations refused with no cap */
    bool has_min_limit;           /* a cap fits within DEVICE_MEMORY */
    uint64_t min_limit_bytes;     /* the smallest cap with no OOM, to 1 MiB */
};

/* Replay T under ST on simulated devices of DEVICE_MEMORY bytes, uncapped,
** then find the smallest cap (`vram replay --min-limit`). REPLAY's exit
** codes: 0, or 1 / 2 with the line printed. */
int replay_summarize(const struct trace *t, vram_strategy st, uint64_t device_memory,
                     struct replay_summary *out);

/* The number of GPUs and the smallest one's total memory (UINT64_MAX when
** there is none), through the CUDA driver; 0, or 1 after one line (none if
** QUIET) when the driver cannot be opened. */
int replay_probe_gpus(int *n_gpus, uint64_t *min_total, bool quiet);

/* The CUDA backend opened as the GPUs are (the environment ignored) into
** *CTX, and the number of physical GPUs into *N. On failure *CTX may still
** need vram_close. (`vram admin check` shares it.) */
vram_status cli_open_cuda(vram_context **ctx, int *n);

struct json_object;

/* V as a JSON number written with DECIMALS decimals (`vram tune` too). */
struct json_object *cli_json_fixed(double v, int decimals);

/* ---- shared by `vram analyze` and `vram doctor` (cmd_analyze.c) ---- */

struct trace;
struct an_options;
struct an_result;

/* Load the trace at PATH into *OUT. On failure one line is printed and
** the exit code returned: 2 malformed or unreadable, 1 otherwise. A trace
** cut short (a killed recording) loads up to its last whole line, and one
** line on standard error says where it stops. */
int cli_load_trace(const char *path, struct trace **out);

/* Analyze T (analyze_trace) into *OUT; on failure one line is printed
** and the exit code (1, or 2 for a bad option) returned. */
int cli_analyze(const struct trace *t, const struct an_options *o, struct an_result **out);

/* Write T as PyTorch's memory snapshot (an_write_torch_snapshot) to PATH,
** at the last mark labelled AT (NULL: the end). Returns 0, or the exit
** status after one line on standard error: 2 when T has no such mark, 1
** when PATH cannot be written. */
int cli_write_snapshot(const struct trace *t, const char *path, const char *at);

/* ---- shared by `vram stat`, `vram top` (cmd_stat.c) ---- */

struct monitor;
struct mon_view;

/* Open the monitor (with NVML unless !NVML) into *M and take its first
** sample into *V; false, after one line naming WHO, if either fails. */
bool cli_monitor_first(const char *who, bool nvml, struct monitor **m,
                       const struct mon_view **v);

/* The ledgers V could not read (another vram version, a file its owner
** cut short...) that are new since the monitor's last sample: one line
** each on stderr, naming WHO; the output shows the others. */
void cli_say_unread(const char *who, const struct mon_view *v);

/* The index of the GPU UUID as NVML numbers it, "-" when unknown (a GPU
** only the ledgers know), into BUF. */
void cli_gpu_index(const struct mon_view *v, const char *uuid, char *buf, size_t len);

#endif
