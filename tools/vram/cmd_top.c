/* SPDX-License-Identifier: MIT */
/*
** cmd_top.c -- `vram top`: the monitor (src/monitor/) live in the terminal,
** through ncurses. Per GPU: total, used and each group's quota and use; per
** process: pid, user, command, group, current, peak, quota, its host
** memory (pinned through the driver, resident set), trend (MiB/min) and a
** small graph of its recent use. The process columns are the PROCESS
** metrics of VRAM_METRICS_LIST, like `vram stat`.
**
** Keys: q quits; s cycles the sort key; u, p, t, i sort by used, peak,
** trend, pid; r reverses. SIGINT, SIGTERM and SIGHUP quit too: the loop
** notices the flag within 100 ms and endwin() restores the terminal.
*/
#include <errno.h>
#include <ncurses.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cliopt.h"
#include "cmd.h"
#include "monitor/monitor.h"
#include "base/clock.h"
#include "base/size.h"

enum sort_key { SORT_USED, SORT_PEAK, SORT_TREND, SORT_PID, SORT_COUNT };
static const char *const sort_names[SORT_COUNT] = {"used", "peak", "trend", "pid"};

/* The signal that asked us to quit; 0 = none. Written by the handler only. */
static volatile sig_atomic_t top_quit_signal;

static void
on_signal(int sig)
{
    top_quit_signal = sig;
}

#define TOP_USERS 64 /* user names remembered */

/* The state of the view. */
struct top {
    enum sort_key sort;
    bool reverse;
    double interval_s;
    /* uid -> name, looked up once: getpwuid reads /etc/passwd (or asks
    ** nscd) at every call, and at 10 Hz with a screen of processes that
    ** was most of top's own CPU time. */
    int n_users;
    uid_t uids[TOP_USERS];
    char names[TOP_USERS][16];
};

/* The name of UID ("?" unknown, else the number when it has none). */
static const char *
user_name(struct top *t, uid_t uid)
{
    for (int i = 0; i < t->n_users; i++)
        if (t->uids[i] == uid)
            return t->names[i];
    int i = t->n_users < TOP_USERS ? t->n_users++ : TOP_USERS - 1; /* full: the last */
    char *name = t->names[i];
    struct passwd *pw = uid == (uid_t)-1 ? NULL : getpwuid(uid);
    if (pw != NULL)
        snprintf(name, 16, "%s", pw->pw_name);
    else if (uid == (uid_t)-1)
        snprintf(name, 16, "?");
    else
        snprintf(name, 16, "%ld", (long)uid);
    t->uids[i] = uid;
    return name;
}

static struct top *sort_ctx; /* qsort has no context argument */

static int
cmp_proc(const void *a, const void *b)
{
    const struct mon_proc *x = a, *y = b;
    double vx = 0, vy = 0;
    switch (sort_ctx->sort) {
    case SORT_USED: vx = (double)x->used_bytes; vy = (double)y->used_bytes; break;
    case SORT_PEAK: vx = (double)x->peak_bytes; vy = (double)y->peak_bytes; break;
    case SORT_TREND: vx = x->trend_bytes_per_minute; vy = y->trend_bytes_per_minute; break;
    case SORT_PID: vx = -(double)x->pid; vy = -(double)y->pid; break;
    case SORT_COUNT: break;
    }
    int r = vx < vy ? 1 : vx > vy ? -1 : (x->pid > y->pid) - (x->pid < y->pid);
    return sort_ctx->reverse ? -r : r;
}

/* A graph of H's last WIDTH samples, scaled to their maximum, into BUF. */
static void
graph(const struct mon_proc *p, char *buf, int width)
{
    static const char levels[] = " _.-=+*#";
    uint64_t max = 0;
    int first = p->n_history > width ? p->n_history - width : 0;
    for (int i = first; i < p->n_history; i++)
        if (p->history[i] > max)
            max = p->history[i];
    int k = 0;
    for (int i = first; i < p->n_history; i++)
        buf[k++] = max == 0 ? ' ' : levels[(int)(p->history[i] * 7 / max)];
    while (k < width)
        buf[k++] = ' ';
    buf[k] = '\0';
}

/* BYTES in MiB within 7 characters: one decimal below 10000 MiB, none
** above (a 143771 MiB GPU is "143771"). */
static void
mib(uint64_t bytes, char *buf, size_t len)
{
    double v = (double)bytes / (1024.0 * 1024.0);
    snprintf(buf, len, v < 9999.95 ? "%.1f" : "%.0f", v);
}

/* Print one line at ROW, COL, cut before the last column of the terminal,
** so that no value, however wide, wraps onto the next line. */
static void line(int row, int col, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
line(int row, int col, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    int room = COLS - 1 - col;
    if (room > 0)
        mvaddnstr(row, col, buf, room);
}

/*
** One screen, every line within 96 columns (cut at the terminal's width;
** the host memory columns come last but the graph): the GPUs by index and name
** (the UUID cut to its first group; `vram stat --json` has it whole), each
** with its groups, then the processes with their GPU's index first.
*/
static void
draw(struct top *t, struct mon_view *v)
{
    erase();
    int row = 0;
    line(row++, 0, "vram top -- %d GPU%s%s, %d process%s; sort: %s%s; every %.1f s",
             v->n_devices, v->n_devices == 1 ? "" : "s", v->nvml ? " (NVML)" : "",
             v->n_procs, v->n_procs == 1 ? "" : "es", sort_names[t->sort],
             t->reverse ? " (reversed)" : "", t->interval_s);
    line(row++, 0, "keys: q quit, s/u/p/t/i sort by next/used/peak/trend/pid, r reverse");
    if (v->n_unread > 0)
        line(row++, 0, "not read: %s%s", v->unread[0], v->n_unread > 1 ? " (and more)" : "");
    row++;
    attron(A_BOLD);
    line(row++, 0, "%3s %-24s %10s %10s  %-12s", "GPU", "NAME", "TOTAL MiB", "USED MiB",
             "UUID");
    attroff(A_BOLD);
    for (int i = 0; i < v->n_devices; i++) {
        const struct mon_device *d = &v->devices[i];
        char a[32], b[32], idx[16];
        mib(d->total_bytes, a, sizeof a);
        mib(d->used_bytes, b, sizeof b);
        cli_gpu_index(v, d->uuid, idx, sizeof idx);
        line(row++, 0, "%3s %-24.24s %10s %10s  %-12.12s", idx, d->name[0] ? d->name : "-",
                 d->total_bytes ? a : "-", b, d->uuid);
        for (int g = 0; g < v->n_groups; g++) {
            if (strcmp(v->groups[g].uuid, d->uuid) != 0)
                continue;
            mib(v->groups[g].quota_bytes, a, sizeof a);
            mib(v->groups[g].used_bytes, b, sizeof b);
            line(row++, 4, "group %-16.16s quota %9s MiB  used %9s MiB  refused %llu",
                     v->groups[g].group, v->groups[g].quota_bytes ? a : "none", b,
                     (unsigned long long)v->groups[g].refusals);
        }
    }
    row++;
    sort_ctx = t;
    qsort(v->procs, (size_t)v->n_procs, sizeof v->procs[0], cmp_proc);
    attron(A_BOLD);
    line(row++, 0, "%3s %7s %-6s %-10s %-10s %7s %7s %7s %7s  %-5s %7s %7s", "GPU", "PID",
         "USER", "COMMAND", "GROUP", "MiB", "PEAK", "QUOTA", "MiB/min", "HIST", "PINNED",
         "RSS");
    attroff(A_BOLD);
    for (int i = 0; i < v->n_procs && row < LINES; i++) {
        const struct mon_proc *p = &v->procs[i];
        char cur[32], peak[32], quota[32], hist[6], idx[16], pin[32], rss[32];
        const char *user = user_name(t, p->uid);
        mib(p->used_bytes, cur, sizeof cur);
        mib(p->peak_bytes, peak, sizeof peak);
        mib(p->quota_bytes, quota, sizeof quota);
        mib(p->pinned_bytes, pin, sizeof pin);
        mib(p->rss_bytes, rss, sizeof rss);
        graph(p, hist, 5);
        cli_gpu_index(v, p->uuid, idx, sizeof idx);
        char trend[32];
        double per_min = p->trend_bytes_per_minute / (1024.0 * 1024.0);
        snprintf(trend, sizeof trend, per_min > -999.95 && per_min < 9999.95 ? "%.1f" : "%.0f",
                 per_min);
        line(row++, 0, "%3s %7ld %-6.6s %-10.10s %-10.10s %7s %7s %7s %7s  %s %7s %7s", idx,
             (long)p->pid, user, p->comm, p->group[0] ? p->group : "(no vram)", cur, peak,
             p->quota_bytes ? quota : "none", trend, hist, pin, p->rss_bytes ? rss : "-");
    }
    refresh();
}

/* Copy the rows of SRC in use into DST: the whole view is 1.5 MB, and
** at 10 Hz copying it all was a tenth of top's time. */
static void
view_copy(struct mon_view *dst, const struct mon_view *src)
{
    memcpy(dst, src, offsetof(struct mon_view, groups));
    memcpy(dst->groups, src->groups, sizeof src->groups[0] * (size_t)src->n_groups);
    dst->n_procs = src->n_procs;
    memcpy(dst->procs, src->procs, sizeof src->procs[0] * (size_t)src->n_procs);
    dst->n_unread = src->n_unread;
    memcpy(dst->unread, src->unread, sizeof src->unread);
}

/* What the command line asks of `vram top`. */
struct top_args {
    struct top t;
    bool nvml;
};

#define AT(member) offsetof(struct top_args, member)

static const struct cli_opt opt_table[] = {
    {0, "interval", 'd', "SECONDS", "seconds between samples, 0.1..3600 (default 1)",
     .store = CLIOPT_SECONDS, .field = AT(t.interval_s), .lo = 0.1, .hi = 3600},
    {0, "sort", 0, "KEY", "used, peak, trend or pid (default used)", .store = CLIOPT_CALL},
    {0, "no-nvml", 0, NULL, "do not load libnvidia-ml.so.1: the ledgers alone",
     .store = CLIOPT_CLEAR, .field = AT(nvml)},
};

static const struct cli_command top_cmd = {
    .prog = "vram top",
    .synopsis = "[-d SECONDS] [--sort KEY] [--no-nvml]",
    .about = "GPU memory per device (index, name), group and process, live in the\n"
             "terminal. Keys: q quit, s cycle the sort key, u/p/t/i sort by\n"
             "used/peak/trend/pid, r reverse.\n",
    CLIOPT_TABLE(opt_table),
    .exit_status = "0 ok, 1 failure (no terminal, no monitor), 2 bad usage.",
    .no_operands = true,
};

/* --sort KEY (cliopt_handler; the other options are stored by the table). */
static int
top_option(void *ctx, const struct cli_opt *opt, const char *value)
{
    struct top_args *a = ctx;
    (void)opt;
    int k = 0;
    while (k < SORT_COUNT && strcmp(value, sort_names[k]) != 0)
        k++;
    if (k == SORT_COUNT)
        return cliopt_usage_error(&top_cmd, "--sort '%s': expected used, peak, trend or pid",
                                  value);
    a->t.sort = (enum sort_key)k;
    return CLIOPT_GO_ON;
}

int
cmd_top(int argc, char **argv)
{
    struct top_args a = {.t = {.sort = SORT_USED, .reverse = false, .interval_s = 1.0}, .nvml = true};
    int rc = cliopt_parse(&top_cmd, argc, argv, top_option, &a, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;
    struct top t = a.t;
    bool nvml = a.nvml;

    struct monitor *m = NULL;
    const struct mon_view *sample = NULL;
    if (!cli_monitor_first("top", nvml, &m, &sample))
        return 1;
    /* The view is sorted in place for drawing: a private copy. */
    struct mon_view *v = malloc(sizeof *v);
    if (v == NULL) {
        cli_error("top: out of memory");
        monitor_close(m);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    if (initscr() == NULL) {
        cli_error("top: cannot initialise the terminal");
        free(v);
        monitor_close(m);
        return 1;
    }
    cbreak();
    noecho();
    curs_set(0);
    keypad(stdscr, TRUE);
    timeout(100);
    view_copy(v, sample);
    draw(&t, v);
    double next = now_mono_s() + t.interval_s;
    rc = 0;
    while (top_quit_signal == 0) {
        int ch = getch();
        bool redraw = true;
        switch (ch) {
        case 'q': case 'Q': top_quit_signal = -1; continue;
        case 's': t.sort = (enum sort_key)((t.sort + 1) % SORT_COUNT); break;
        case 'u': t.sort = SORT_USED; break;
        case 'p': t.sort = SORT_PEAK; break;
        case 't': t.sort = SORT_TREND; break;
        case 'i': t.sort = SORT_PID; break;
        case 'r': t.reverse = !t.reverse; break;
        default: redraw = false; break;
        }
        if (now_mono_s() >= next) {
            if (monitor_sample(m, &sample) != VRAM_OK) {
                rc = 1;
                break;
            }
            view_copy(v, sample);
            next = now_mono_s() + t.interval_s;
            redraw = true;
        }
        if (redraw)
            draw(&t, v);
    }
    endwin();
    if (rc != 0)
        cli_error("top: %s", vram_last_error());
    free(v);
    monitor_close(m);
    return rc;
}
