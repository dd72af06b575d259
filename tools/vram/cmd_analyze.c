/* SPDX-License-Identifier: MIT */
/*
** cmd_analyze.c -- `vram analyze`: what a trace says about a program's
** memory (its peak and what was live then, its iterations, a leak verdict,
** fragmentation under a strategy, the story of a final OOM) as text,
** JSON or an HTML page; and `vram analyze --compare A B`, the difference
** of two runs (a change such as mixed precision or a smaller batch).
**
** The analysis itself is src/analyze/analyze.c; docs/ANALYZE.md explains
** how to read the report. Also here: the loading and analyzing helpers
** `vram doctor` shares (cmd.h).
*/
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyze/analyze.h"
#include "cliopt.h"
#include "cmd.h"
#include "trace/trace.h"
#include "base/outfile.h"
#include "base/size.h"
#include "vram.h"

struct analyze_settings {
    struct an_options opts;
    bool json, compare;
    const char *html;     /* NULL: no report */
    const char *snapshot; /* --torch-snapshot FILE, or NULL */
    const char *at;       /* --snapshot-at LABEL, or NULL */
    const char *paths[2];
    int n_paths;
};

#define AT(member) offsetof(struct analyze_settings, member)

static const struct cli_opt opt_table[] = {
    {0, "strategy", 0, "NAME",
     "replay under this strategy for reserved bytes and fragmentation (default: growth)",
     .store = CLIOPT_STRATEGY, .field = AT(opts.strategy)},
    {0, "limit", 0, "SIZE",
     "cap of the replay, and the cap a final OOM is judged against (default: none; "
     "the trace's limit= metadata if it has one)",
     .store = CLIOPT_SIZE, .field = AT(opts.limit)},
    {0, "device-memory", 0, "SIZE",
     "memory of the simulated device (default: an H200's 143771 MiB)",
     .store = CLIOPT_SIZE, .field = AT(opts.device_memory)},
    {0, "json", 0, NULL, "print one JSON object (sizes in integer bytes)",
     .store = CLIOPT_SET, .field = AT(json)},
    {0, "html", 0, "FILE",
     "also write a self-contained HTML report (of the comparison with --compare) to "
     "FILE ('-': to standard output, instead of the text)",
     .store = CLIOPT_STRING, .field = AT(html)},
    {0, "compare", 0, NULL,
     "compare two traces A B: peak, per-phase peaks, live set at the peak",
     .store = CLIOPT_SET, .field = AT(compare)},
    {0, "torch-snapshot", 0, "FILE",
     "also write the trace as PyTorch's memory snapshot (the pickle of "
     "torch.cuda.memory._snapshot(), which PyTorch's memory_viz opens) to FILE: every "
     "event, and what was live at the peak",
     .store = CLIOPT_STRING, .field = AT(snapshot)},
    {0, "snapshot-at", 0, "LABEL",
     "the snapshot's live memory at the last mark LABEL, not at the peak",
     .store = CLIOPT_STRING, .field = AT(at)},
};

static void
analyze_notes(FILE *out)
{
    fprintf(out, "Strategies: ");
    cliopt_strategy_names(out, ", ", " and ");
    fprintf(out, ".\n");
    cliopt_sizes_note(out, "6G");
}

static const struct cli_command analyze_cmd = {
    .prog = "vram analyze",
    .synopsis = "[OPTIONS] TRACE\n--compare [OPTIONS] A B",
    .about = "Analyze an allocation trace: the peak and what was live then, the\n"
             "iterations (from marks, else detected from the repeating events), a leak\n"
             "verdict (the least live bytes of each iteration rising steadily), the\n"
             "fragmentation of a replay under a strategy, and why a final OOM happened.\n"
             "With --compare, the difference of two runs (as text, --json or --html).\n"
             "See docs/ANALYZE.md.\n",
    CLIOPT_TABLE(opt_table),
    .notes = analyze_notes,
    .exit_status = "0 ok, 1 failure, 2 bad usage or a malformed trace.",
};

/* ------------------------------------------------------------------ */
/* Shared with `vram doctor` (cmd.h)                                    */
/* ------------------------------------------------------------------ */

int
cli_load_trace(const char *path, struct trace **out)
{
    vram_status s = trace_load(path, out);
    if (s == VRAM_OK) {
        if ((*out)->cut != NULL)
            cli_error("%s", (*out)->cut); /* read up to where it stops */
        return 0;
    }
    /* "FILE:LINE: reason" for malformed input; names the file otherwise. */
    const char *why = vram_last_error();
    if (why[0] != '\0')
        cli_error("%s", why);
    else
        cli_error("%s: %s", path, vram_strerror(s));
    return s == VRAM_E_PARSE || s == VRAM_E_IO ? 2 : 1;
}

int
cli_analyze(const struct trace *t, const struct an_options *o, struct an_result **out)
{
    vram_status s = analyze_trace(t, o, out);
    if (s == VRAM_OK)
        return 0;
    const char *why = vram_last_error();
    cli_error("%s: %s", t->path, why[0] != '\0' ? why : vram_strerror(s));
    return s == VRAM_E_INVALID || s == VRAM_E_CONFIG ? 2 : 1;
}

int
cli_write_snapshot(const struct trace *t, const char *path, const char *at)
{
    uint64_t upto = an_peak_event(t);
    if (at != NULL) {
        bool found = false;
        for (uint64_t i = t->n_events; i > 0 && !found; i--) {
            const struct trace_event *ev = &t->events[i - 1];
            if (ev->op == TRACE_MARK && ev->label < t->n_labels &&
                strcmp(t->labels[ev->label], at) == 0) {
                upto = i - 1;
                found = true;
            }
        }
        if (!found) {
            char shown[TEXT_EXCERPT_LEN];
            cli_error("%s: no mark '%s' (--snapshot-at names the label of a mark)", t->path,
                      text_excerpt(at, shown, sizeof shown));
            return 2;
        }
    }
    /* The snapshot, created or truncated; written in full or reported. */
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        cli_error("%s: %s", path, strerror(errno));
        return 1;
    }
    vram_status s = an_write_torch_snapshot(f, t, upto);
    if (fclose(f) != 0 && s == VRAM_OK)
        s = VRAM_E_IO;
    if (s != VRAM_OK) {
        cli_error("%s: writing the snapshot failed", path);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* The command                                                          */
/* ------------------------------------------------------------------ */

/* A trace named on the command line (cliopt_handler; the options are
** stored by the table). */
static int
analyze_arg(void *ctx, const struct cli_opt *o, const char *value)
{
    struct analyze_settings *set = ctx;
    (void)o;
    if (set->n_paths == 2)
        return cliopt_usage_error(&analyze_cmd, "too many traces (one, or two with --compare)");
    set->paths[set->n_paths++] = value;
    return CLIOPT_GO_ON;
}

/* Parse ARGV into SET. Returns -1 to go on, else the exit code. */
static int
parse_args(int argc, char **argv, struct analyze_settings *set)
{
    int rc = cliopt_parse(&analyze_cmd, argc, argv, analyze_arg, set, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;
    if (set->compare && set->n_paths != 2)
        return cliopt_usage_error(&analyze_cmd, "--compare needs two traces A B");
    if (!set->compare && set->n_paths != 1)
        return cliopt_usage_error(&analyze_cmd, set->n_paths == 0
                                                    ? "no trace given"
                                                    : "two traces given: add --compare "
                                                      "to compare them");
    if (set->compare && (set->snapshot != NULL || set->at != NULL))
        return cliopt_usage_error(&analyze_cmd, "--torch-snapshot is for one trace, not --compare");
    if (set->at != NULL && set->snapshot == NULL)
        return cliopt_usage_error(&analyze_cmd, "--snapshot-at needs --torch-snapshot FILE");
    if (set->html != NULL && strcmp(set->html, "-") == 0 && set->json) {
        cli_error("analyze: --json and --html - both want standard output");
        return 2;
    }
    return -1;
}

/* Write the HTML report of R, or of the comparison C, to PATH ("-":
** standard output). */
static int
write_html(const char *path, const struct an_result *r, const struct an_compare *c)
{
    bool to_stdout = strcmp(path, "-") == 0;
    /* The report, created or emptied (never through a link, never over
    ** another user's file); written in full or reported. */
    FILE *f = stdout;
    int fd = -1;
    if (!to_stdout && outfile_open(path, OUTFILE_TRUNCATE, &fd) != VRAM_OK) {
        cli_error("%s", vram_last_error());
        return 1;
    }
    if (!to_stdout && (f = fdopen(fd, "w")) == NULL) {
        cli_error("%s: %s", path, strerror(errno));
        close(fd);
        return 1;
    }
    vram_status s = c != NULL ? an_write_compare_html(f, c) : an_write_html(f, r);
    if (!to_stdout && fclose(f) != 0 && s == VRAM_OK)
        s = VRAM_E_IO;
    if (s != VRAM_OK) {
        cli_error("%s: writing the HTML report failed", path);
        return 1;
    }
    return 0;
}

static int
finish_stdout(int rc)
{
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) {
        cli_error("writing the report: %s", strerror(errno));
        return 1;
    }
    return rc;
}

/* The reports of R, or of the comparison C: the HTML one with --html,
** then, unless that went to standard output, JSON (--json) or text there. */
static int
report(const struct analyze_settings *set, const struct an_result *r,
       const struct an_compare *c)
{
    if (set->html != NULL) {
        int rc = write_html(set->html, r, c);
        if (rc != 0 || strcmp(set->html, "-") == 0)
            return rc;
    }
    if (!set->json) {
        if (c != NULL)
            an_print_compare_text(stdout, c);
        else
            an_print_text(stdout, r);
        return 0;
    }
    if ((c != NULL ? an_print_compare_json(stdout, c) : an_print_json(stdout, r)) == VRAM_OK)
        return 0;
    cli_error("writing the report: %s", vram_last_error());
    return 1;
}

static int
run_compare(const struct analyze_settings *set)
{
    struct trace *t[2] = {NULL, NULL};
    struct an_result *r[2] = {NULL, NULL};
    struct an_compare *c = NULL;
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = cli_load_trace(set->paths[i], &t[i]);
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = cli_analyze(t[i], &set->opts, &r[i]);
    if (rc == 0 && an_compare(r[0], r[1], &c) != VRAM_OK) {
        cli_error("analyze: %s", vram_last_error());
        rc = 1;
    }
    if (rc == 0)
        rc = report(set, NULL, c);
    rc = finish_stdout(rc);
    an_compare_free(c);
    for (int i = 0; i < 2; i++) {
        an_result_free(r[i]);
        trace_free(t[i]);
    }
    return rc;
}

int
cmd_analyze(int argc, char **argv)
{
    struct analyze_settings set;
    memset(&set, 0, sizeof set);
    set.opts.strategy = VRAM_STRATEGY_GROWTH;
    int rc = parse_args(argc, argv, &set);
    if (rc >= 0)
        return rc;
    if (set.compare)
        return run_compare(&set);

    struct trace *t = NULL;
    struct an_result *r = NULL;
    rc = cli_load_trace(set.paths[0], &t);
    if (rc == 0 && set.snapshot != NULL)
        rc = cli_write_snapshot(t, set.snapshot, set.at);
    if (rc == 0)
        rc = cli_analyze(t, &set.opts, &r);
    if (rc == 0)
        rc = report(&set, r, NULL);
    rc = finish_stdout(rc);
    an_result_free(r);
    trace_free(t);
    return rc;
}
