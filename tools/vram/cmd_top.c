/* SPDX-License-Identifier: MIT */
/*
** cmd_top.c -- `vram top`: the monitor (src/monitor/) live in the terminal,
** through ncurses. Per GPU: total, used and each group's quota and use; per
** process: pid, user, command, group, current, peak, quota, its host
** memory (pinned through the driver, resident set), trend (MiB/min) and a
** small graph of its recent use. The columns read the fields of the
** PROCESS and HOST metrics of VRAM_METRICS_LIST, laid out by hand in
** proc_row (to fit 96 columns with the graph): a new metric is not shown
** until it is added there.
**
** Keys: q quits; s cycles the sort key; u, p, t, i sort by used, peak,
** trend, pid; r reverses. SIGINT, SIGTERM and SIGHUP quit too: the loop
** notices the flag within 100 ms and endwin() restores the terminal.
**
** With standard output not a terminal (`vram top | head`, a cron job's
** log), or with --once, the same lines are printed once as plain text,
** without curses and without a line cut, and the command exits: no
** escape code reaches a pipe or a file.
*/
#include <errno.h>
#include <limits.h>
#include <ncurses.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cliopt.h"
#include "cmd.h"
#include "monitor/monitor.h"
#include "base/clock.h"
#include "base/size.h"
#include "base/text.h"

enum sort_key { SORT_USED, SORT_PEAK, SORT_TREND, SORT_PID, SORT_COUNT };
static const char *const sort_names[SORT_COUNT] = {"used", "peak", "trend", "pid"};

/* The I-th value of --sort (cliopt's completion and its check). */
static const char *
sort_value(size_t i)
{
    return i < SORT_COUNT ? sort_names[i] : NULL;
}

/* The signal that asked us to quit; 0 = none. Written by the handler only. */
static volatile sig_atomic_t top_quit_signal;

static void
on_signal(int sig)
{
    top_quit_signal = sig;
}

#define TOP_USERS 64 /* user names remembered */

struct frame;

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
    struct frame *frame; /* the screen as last drawn; NULL: none yet */
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
    const struct mon_proc *x = *(const struct mon_proc *const *)a;
    const struct mon_proc *y = *(const struct mon_proc *const *)b;
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

/*
** The screen as last drawn, row by row. At 10 Hz most rows do not change
** between samples; a row is written to curses only when its text does,
** and curses refreshes only when one did. A process row's text is made
** again only when the numbers it shows change (struct row_key), which
** spares six floating-point conversions a row.
*/
struct row_key {
    int index; /* the GPU's, -1 unknown */
    pid_t pid;
    uid_t uid;
    char comm[LEDGER_COMM_LEN];
    char group[LEDGER_GROUP_LEN];
    uint64_t used, peak, quota, pinned, rss;
    double trend;
    char hist[8];
};

struct shown {
    bool valid; /* the terminal shows TEXT at COL on this row */
    bool keyed; /* KEY holds the numbers TEXT was made from */
    bool bold;
    int col;
    struct row_key key;
    char text[512];
};

struct frame {
    int lines, cols; /* the terminal's size it was made for */
    int used;        /* rows drawn last time */
    bool changed;    /* a row was written since the last refresh */
    struct shown *row;
    FILE *plain;     /* not NULL: a snapshot, each row printed there as text
                        (no curses, no size, nothing remembered) */
};

/* T's frame for the terminal's size now, new (the screen erased) when
** there is none or the size changed; NULL if out of memory (drawn then
** without one). */
static struct frame *
frame_get(struct top *t)
{
    struct frame *f = t->frame;
    if (f != NULL && f->lines == LINES && f->cols == COLS)
        return f;
    if (f != NULL)
        free(f->row);
    free(f);
    t->frame = f = calloc(1, sizeof *f);
    if (f == NULL)
        return NULL;
    f->lines = LINES;
    f->cols = COLS;
    f->row = calloc(LINES > 0 ? (size_t)LINES : 1, sizeof f->row[0]);
    if (f->row == NULL) {
        free(f);
        t->frame = NULL;
        return NULL;
    }
    erase();
    f->changed = true;
    return f;
}

static void
frame_free(struct top *t)
{
    if (t->frame != NULL)
        free(t->frame->row);
    free(t->frame);
    t->frame = NULL;
}

/* Whether ROW shows, at COL, the text made from KEY. */
static bool
frame_same(const struct frame *f, int row, int col, const struct row_key *key)
{
    return f != NULL && f->plain == NULL && row < f->lines && f->row[row].valid &&
           f->row[row].keyed &&
           f->row[row].col == col && memcmp(&f->row[row].key, key, sizeof *key) == 0;
}

/* Show TEXT at ROW, COL (bold if BOLD; made from KEY, or NULL), cut
** before the last column of the terminal so that no value, however
** wide, wraps onto the next line. Nothing is written if the row shows it
** already. */
static void
put_row(struct frame *f, int row, int col, bool bold, const char *text,
        const struct row_key *key)
{
    /* The one place text leaves top, on a terminal or as a snapshot: made
    ** safe here (base/text.h: a command name, a group name or a UUID is
    ** another process's or a ledger's bytes). */
    char safe[TEXT_SAFE_LEN(512)];
    text_safe(text, 512, safe, sizeof safe);
    if (f != NULL && f->plain != NULL) {
        /* Rows come in order; trailing spaces of padded columns go. */
        size_t n = strlen(safe);
        while (n > 0 && safe[n - 1] == ' ')
            n--;
        fprintf(f->plain, "%*s%.*s\n", n > 0 ? col : 0, "", (int)n, safe);
        return;
    }
    if (row >= LINES)
        return;
    struct shown *s = f != NULL && row < f->lines ? &f->row[row] : NULL;
    if (s != NULL && s->valid && s->col == col && s->bold == bold &&
        strcmp(s->text, text) == 0) {
        s->keyed = key != NULL;
        if (key != NULL)
            s->key = *key;
        return;
    }
    move(row, 0);
    clrtoeol();
    int room = COLS - 1 - col;
    if (bold)
        attron(A_BOLD);
    /* Cut to the room, never inside a character. */
    int cut = (int)strlen(safe);
    if (cut > room && room > 0) {
        cut = room;
        while (cut > 0 && ((unsigned char)safe[cut] & 0xc0) == 0x80)
            cut--;
    }
    if (room > 0)
        mvaddnstr(row, col, safe, cut);
    if (bold)
        attroff(A_BOLD);
    if (f == NULL)
        return;
    f->changed = true;
    if (s == NULL)
        return;
    s->valid = true;
    s->bold = bold;
    s->col = col;
    s->keyed = key != NULL;
    if (key != NULL)
        s->key = *key;
    snprintf(s->text, sizeof s->text, "%s", text);
}

/* Print one line at ROW, COL (bold if BOLD), through put_row. */
static void line(struct frame *f, int row, int col, bool bold, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void
line(struct frame *f, int row, int col, bool bold, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    put_row(f, row, col, bold, buf, NULL);
}

/* The numbers process row P shows, into *K. */
static void
row_key_of(const struct mon_view *v, const struct mon_proc *p, struct row_key *k)
{
    memset(k, 0, sizeof *k); /* padding too: keys are compared whole */
    const struct mon_device *d = mon_device_of(v, p->uuid);
    k->index = d != NULL && d->index >= 0 ? d->index : -1;
    k->pid = p->pid;
    k->uid = p->uid;
    memcpy(k->comm, p->comm, strnlen(p->comm, sizeof k->comm - 1));
    memcpy(k->group, p->group, strnlen(p->group, sizeof k->group - 1));
    k->used = p->used_bytes;
    k->peak = p->peak_bytes;
    k->quota = p->quota_bytes;
    k->pinned = p->pinned_bytes;
    k->rss = p->rss_bytes;
    k->trend = p->trend_bytes_per_minute;
    graph(p, k->hist, 5);
}

/* Process row P (its numbers K) at ROW. */
static void
proc_row(struct top *t, struct frame *f, int row, const struct mon_proc *p,
         const struct row_key *k)
{
    char cur[32], peak[32], quota[32], idx[16], pin[32], rss[32], trend[32];
    const char *user = user_name(t, p->uid);
    mib(p->used_bytes, cur, sizeof cur);
    mib(p->peak_bytes, peak, sizeof peak);
    mib(p->quota_bytes, quota, sizeof quota);
    mib(p->pinned_bytes, pin, sizeof pin);
    mib(p->rss_bytes, rss, sizeof rss);
    if (k->index >= 0)
        snprintf(idx, sizeof idx, "%d", k->index);
    else
        snprintf(idx, sizeof idx, "-");
    double per_min = p->trend_bytes_per_minute / (1024.0 * 1024.0);
    if (p->n_history < 2)
        snprintf(trend, sizeof trend, "-"); /* one sample: no slope yet */
    else
        snprintf(trend, sizeof trend,
                 per_min > -999.95 && per_min < 9999.95 ? "%.1f" : "%.0f", per_min);
    char buf[512];
    snprintf(buf, sizeof buf, "%3s %7ld %-6.6s %-10.10s %-10.10s %7s %7s %7s %7s  %s %7s %7s",
             idx, (long)p->pid, user, p->comm, p->group[0] ? p->group : "(no vram)", cur, peak,
             p->quota_bytes ? quota : "none", trend, k->hist, pin, p->rss_bytes ? rss : "-");
    put_row(f, row, 0, false, buf, k);
}

/*
** One screen, every line within 96 columns (cut at the terminal's width;
** the host memory columns come last but the graph): the GPUs by index and name
** (the UUID cut to its first group; `vram stat --json` has it whole), each
** with its groups, then the processes (ORDER: V's, sorted here) with their
** GPU's index first. With SNAPSHOT not NULL, the same lines once as plain
** text there, every process listed, nothing cut.
*/
static void
draw(struct top *t, const struct mon_view *v, const struct mon_proc **order,
     FILE *snapshot)
{
    struct frame plain = {.lines = INT_MAX, .plain = snapshot};
    struct frame *f = snapshot != NULL ? &plain : frame_get(t);
    int last_row = snapshot != NULL ? INT_MAX : LINES;
    if (f == NULL)
        erase(); /* no frame: every row is written */
    int row = 0;
    if (snapshot != NULL) {
        line(f, row++, 0, false, "vram top -- %d GPU%s%s, %d process%s; sort: %s%s",
             v->n_devices, v->n_devices == 1 ? "" : "s", v->nvml ? " (NVML)" : "",
             v->n_procs, v->n_procs == 1 ? "" : "es", sort_names[t->sort],
             t->reverse ? " (reversed)" : "");
    } else {
        line(f, row++, 0, false,
             "vram top -- %d GPU%s%s, %d process%s; sort: %s%s; every %.1f s",
             v->n_devices, v->n_devices == 1 ? "" : "s", v->nvml ? " (NVML)" : "",
             v->n_procs, v->n_procs == 1 ? "" : "es", sort_names[t->sort],
             t->reverse ? " (reversed)" : "", t->interval_s);
        line(f, row++, 0, false,
             "keys: q quit, s/u/p/t/i sort by next/used/peak/trend/pid, r reverse");
    }
    if (v->n_unread > 0)
        line(f, row++, 0, false, "not read: %s%s", v->unread[0],
             v->n_unread > 1 ? " (and more)" : "");
    put_row(f, row++, 0, false, "", NULL);
    line(f, row++, 0, true, "%3s %-24s %10s %10s  %-12s", "GPU", "NAME", "TOTAL MiB",
         "USED MiB", "UUID");
    for (int i = 0; i < v->n_devices; i++) {
        const struct mon_device *d = &v->devices[i];
        char a[32], b[32], idx[16];
        mib(d->total_bytes, a, sizeof a);
        mib(d->used_bytes, b, sizeof b);
        cli_gpu_index(v, d->uuid, idx, sizeof idx);
        line(f, row++, 0, false, "%3s %-24.24s %10s %10s  %-12.12s", idx,
             d->name[0] ? d->name : "-", d->total_bytes ? a : "-", b, d->uuid);
        for (int g = 0; g < v->n_groups; g++) {
            if (strcmp(v->groups[g].uuid, d->uuid) != 0)
                continue;
            mib(v->groups[g].quota_bytes, a, sizeof a);
            mib(v->groups[g].used_bytes, b, sizeof b);
            line(f, row++, 4, false, "group %-16.16s quota %9s MiB  used %9s MiB  refused %llu",
                 v->groups[g].group, v->groups[g].quota_bytes ? a : "none", b,
                 (unsigned long long)v->groups[g].refusals);
        }
    }
    put_row(f, row++, 0, false, "", NULL);
    sort_ctx = t;
    qsort(order, (size_t)v->n_procs, sizeof order[0], cmp_proc);
    line(f, row++, 0, true, "%3s %7s %-6s %-10s %-10s %7s %7s %7s %7s  %-5s %7s %7s", "GPU",
         "PID", "USER", "COMMAND", "GROUP", "MiB", "PEAK", "QUOTA", "MiB/min", "HIST", "PINNED",
         "RSS");
    for (int i = 0; i < v->n_procs && row < last_row; i++, row++) {
        struct row_key k;
        row_key_of(v, order[i], &k);
        if (!frame_same(f, row, 0, &k))
            proc_row(t, f, row, order[i], &k);
    }
    if (snapshot != NULL)
        return;
    if (f == NULL) {
        refresh();
        return;
    }
    for (int r = row; r < f->used && r < f->lines; r++) { /* rows shown before, not now */
        if (f->row[r].valid) {
            move(r, 0);
            clrtoeol();
            f->row[r].valid = false;
            f->changed = true;
        }
    }
    f->used = row;
    if (f->changed)
        refresh();
    f->changed = false;
}

/* The rows of V in their order in V, into ORDER (MON_MAX_PROCS). */
static void
order_of(const struct mon_view *v, const struct mon_proc **order)
{
    for (int i = 0; i < v->n_procs; i++)
        order[i] = &v->procs[i];
}

/* What the command line asks of `vram top`. */
struct top_args {
    struct top t;
    bool nvml;
    bool once; /* one plain snapshot, even on a terminal */
};

#define AT(member) offsetof(struct top_args, member)

static const struct cli_opt opt_table[] = {
    CMD_OPT_INTERVAL('d', AT(t.interval_s)),
    {0, "sort", 0, "KEY", "used, peak, trend or pid (default used)", .store = CLIOPT_CALL,
     .values = sort_value},
    {0, "once", 0, NULL,
     "print one plain snapshot and exit (what top does when standard output is not a "
     "terminal)",
     .store = CLIOPT_SET, .field = AT(once)},
    CMD_OPT_NO_NVML(AT(nvml)),
};

static const struct cli_command top_cmd = {
    .prog = "vram top",
    .synopsis = "[-d SECONDS] [--sort KEY] [--once] [--no-nvml]",
    .about = "GPU memory per device (index, name), group and process, live in the\n"
             "terminal. Keys: q quit, s cycle the sort key, u/p/t/i sort by\n"
             "used/peak/trend/pid, r reverse. With standard output not a terminal\n"
             "(a pipe, a file), or with --once, one snapshot of the same lines as\n"
             "plain text (every process, no line cut, no escape codes), then exit;\n"
             "its trend is '-' (one sample has no slope).\n",
    CLIOPT_TABLE(opt_table),
    .exit_status = "0 ok, 1 failure (a terminal that cannot be used, no monitor, output "
                   "that cannot be written), 2 bad usage.",
    .no_operands = true,
};

/* --sort KEY (cliopt_handler; the other options are stored by the table). */
static int
top_option(void *ctx, const struct cli_opt *opt, const char *value)
{
    struct top_args *a = ctx;
    size_t k;
    if (!cliopt_choice(&top_cmd, opt, value, &k))
        return CLI_EXIT_USAGE;
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
    /* The monitor's view is drawn in an order of its own: pointers to its
    ** rows, valid until the next sample. */
    const struct mon_proc **order = malloc(sizeof *order * MON_MAX_PROCS);
    if (order == NULL) {
        cli_error("top: out of memory");
        monitor_close(m);
        return 1;
    }
    if (a.once || !isatty(STDOUT_FILENO)) {
        order_of(sample, order);
        draw(&t, sample, order, stdout);
        rc = fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
        if (rc != 0)
            cli_error("top: writing the snapshot: %s", strerror(errno));
        free(order);
        monitor_close(m);
        return rc;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    /* newterm, not initscr: initscr ends the process on a terminal it
    ** cannot use (TERM unset or unknown); this says so in one line. */
    SCREEN *screen = newterm(NULL, stdout, stdin);
    if (screen == NULL) {
        cli_error("top: cannot use this terminal (TERM unset or unknown); --once prints "
                  "one plain snapshot instead");
        free(order);
        monitor_close(m);
        return 1;
    }
    set_term(screen);
    cbreak();
    noecho();
    curs_set(0);
    keypad(stdscr, TRUE);
    timeout(100);
    order_of(sample, order);
    draw(&t, sample, order, NULL);
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
            order_of(sample, order);
            next = now_mono_s() + t.interval_s;
            redraw = true;
        }
        if (redraw)
            draw(&t, sample, order, NULL);
    }
    endwin();
    delscreen(screen);
    if (rc != 0)
        cli_error("top: %s", vram_last_error());
    frame_free(&t);
    free(order);
    monitor_close(m);
    return rc;
}
