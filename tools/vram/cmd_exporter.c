/* SPDX-License-Identifier: MIT */
/*
** cmd_exporter.c -- `vram exporter`: the monitor's samples as Prometheus
** text exposition at GET /metrics, served by libmicrohttpd.
**
** One thread samples every --interval seconds and renders the text once;
** each scrape queues the latest text, shared and never copied, so that
** many scrapers cost one sample. The HTTP side -- libmicrohttpd with its
** limits, the per-request deadline that a reaper thread enforces, the
** fairness rule between clients -- is exporter_http.c.
** SIGINT and SIGTERM stop it cleanly (exit 0).
*/
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "cliopt.h"
#include "cmd.h"
#include "exporter_http.h"
#include "monitor/monitor.h"
#include "monitor/prom.h"

/* What the command line asks of `vram exporter`. */
struct exporter_args {
    const char *listen;
    double interval;
    bool nvml;
};

#define AT(member) offsetof(struct exporter_args, member)

static const struct cli_opt opt_table[] = {
    {0, "listen", 0, "ADDR:PORT", "address to serve on (default 127.0.0.1:" EXP_DEFAULT_PORT ")",
     .store = CLIOPT_STRING, .field = AT(listen)},
    CMD_OPT_INTERVAL(0, AT(interval)),
    CMD_OPT_NO_NVML(AT(nvml)),
};

static const struct cli_command exporter_cmd = {
    .prog = "vram exporter",
    .synopsis = "[--listen ADDR:PORT] [--interval SECONDS] [--no-nvml]",
    .about =
        "Serve the monitor's metrics (docs/METRICS.md) at http://ADDR:PORT/metrics\n"
        "for Prometheus; GET / answers a short page linking /metrics. ADDR is an\n"
        "IPv4 address or [IPv6]. Every series carries the gpu (index), UUID and\n"
        "modelName labels of NVIDIA's dcgm-exporter, and Hostname, so that one query\n"
        "can join the two exporters.\n",
    CLIOPT_TABLE(opt_table),
    .exit_status = "0 stopped by SIGINT/SIGTERM, 1 failure (e.g. the address is in use), "
                   "2 bad usage.",
    .no_operands = true,
};


/* Ledgers the monitor could not read (another vram version, a file its
** owner cut short...): a line on stderr for each when it becomes
** unreadable, not at every sample. */
static void
say_unread(const struct mon_view *v)
{
    cli_say_unread("exporter", v);
}

/* Sample once and swap in the new text. False (with the last error) on failure. */
static bool
refresh(struct exporter *e)
{
    const struct mon_view *v = NULL;
    if (monitor_sample(e->mon, &v) != VRAM_OK)
        return false;
    say_unread(v);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return false;
    prom_write(f, v);
    if (fclose(f) != 0) {
        free(buf);
        return false;
    }
    return exporter_set_text(e, buf, len);
}

/* The loop of a thread of the exporter: WORK(E), without the lock, every
** PERIOD_S seconds until e->stop (WAKE, signalled at the stop, ends the
** wait early). */
static void
every(struct exporter *e, pthread_cond_t *wake, double period_s,
      void (*work)(struct exporter *e))
{
    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double at = (double)ts.tv_nsec / 1e9 + period_s;
        ts.tv_sec += (time_t)at;
        ts.tv_nsec = (long)((at - (double)(time_t)at) * 1e9);
        pthread_cond_timedwait(wake, &e->lock, &ts);
        if (e->stop)
            break;
        pthread_mutex_unlock(&e->lock);
        work(e);
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
}

static void
sample(struct exporter *e)
{
    if (!refresh(e))
        cli_error("exporter: sample failed: %s", vram_last_error());
}

/* The threads are named for `top -H` and for the benchmark, which tells
** them from libmicrohttpd's ("MHD-worker"...). */
static void *
sampler(void *arg)
{
    struct exporter *e = arg;
    pthread_setname_np(pthread_self(), "vram-sampler");
    every(e, &e->wake, e->interval_s, sample);
    return NULL;
}

/* The reaper thread: its own, so that a slow sample never delays it. */
static void *
reaper(void *arg)
{
    struct exporter *e = arg;
    pthread_setname_np(pthread_self(), "vram-reaper");
    every(e, &e->reap_wake, EXP_REAP_EVERY_MS / 1000.0, exporter_reap);
    return NULL;
}

int
cmd_exporter(int argc, char **argv)
{
    struct exporter_args a = {"127.0.0.1:" EXP_DEFAULT_PORT, 1.0, true};
    int rc = cliopt_parse(&exporter_cmd, argc, argv, NULL, &a, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;
    struct sockaddr_storage addr;
    char why[160];
    if (!exporter_parse_listen(a.listen, &addr, why, sizeof why)) {
        cli_error("exporter: --listen %s", why);
        return 2;
    }

    static struct exporter e; /* large-ish and shared with threads: not on the stack */
    exporter_init(&e, a.interval);
    if (monitor_open(a.nvml, &e.mon) != VRAM_OK || !refresh(&e)) {
        cli_error("exporter: %s", vram_last_error());
        monitor_close(e.mon);
        exporter_fini(&e);
        return 1;
    }

    /* Signals are taken by sigwait below: block them in every thread. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct MHD_Daemon *d = exporter_start(&e, &addr, EXP_THREADS);
    if (d == NULL) {
        cli_error("exporter: cannot serve on %s (address in use or not local?)", a.listen);
        monitor_close(e.mon);
        exporter_fini(&e);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("vram exporter: serving http://%s/metrics (port %u)\n", a.listen,
           info != NULL ? (unsigned)info->port : 0u);
    fflush(stdout);

    pthread_t th, rth;
    rc = 0;
    bool have_reaper = pthread_create(&rth, NULL, reaper, &e) == 0;
    if (!have_reaper || pthread_create(&th, NULL, sampler, &e) != 0) {
        cli_error("exporter: cannot start its threads");
        rc = 1;
    } else {
        int sig = 0;
        sigwait(&sigs, &sig);
    }
    pthread_mutex_lock(&e.lock);
    e.stop = true;
    pthread_cond_signal(&e.wake);
    pthread_cond_signal(&e.reap_wake);
    pthread_mutex_unlock(&e.lock);
    if (rc == 0)
        pthread_join(th, NULL);
    if (have_reaper)
        pthread_join(rth, NULL);
    MHD_stop_daemon(d);
    monitor_close(e.mon);
    exporter_fini(&e);
    return rc;
}
