/* SPDX-License-Identifier: MIT */
/*
** cmd_exporter.c -- `vram exporter`: the monitor's samples as Prometheus
** text exposition at GET /metrics, served by libmicrohttpd.
**
** One thread samples every --interval seconds and renders the text once;
** each scrape copies the latest text under a lock, so that many scrapers
** cost one sample. libmicrohttpd runs a pool of threads with a connection
** limit, a per-connection memory limit (huge headers get an error answer)
** and an idle timeout. An idle timeout alone does not bound a client that
** trickles one byte at a time, so a reaper thread also ends every
** connection whose request has not been answered within a deadline for
** the whole request (shutdown() of its socket, which libmicrohttpd then
** closes), and each client address may hold only a few connections: a
** slow or hostile client holds a bounded number of connections for a
** bounded time while the others are answered.
** Only GET (and HEAD) /metrics: 404 for other paths, 405 for other methods.
** SIGINT and SIGTERM stop it cleanly (exit 0).
*/
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "cliopt.h"
#include "cmd.h"
#include "monitor/monitor.h"
#include "monitor/prom.h"

enum opt_id { OPT_LISTEN, OPT_INTERVAL, OPT_NO_NVML };

/*
** The default port. Not 9400, NVIDIA dcgm-exporter's, which runs beside
** this one on the same GPU servers. The Prometheus project's list of
** default ports ("Default port allocations" on its wiki) has been full
** from 9100 to 9999 since 2023, and new exporters take ports above 10000.
*/
#define EXP_DEFAULT_PORT "10042"

/* GET /: what a browser pointed at the exporter sees. */
static const char root_page[] =
    "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>vram exporter</title>"
    "</head>\n<body><h1>vram exporter</h1>\n<p>GPU memory per device, quota group and "
    "process, for Prometheus: <a href=\"/metrics\">/metrics</a>.</p>\n<p>vram "
    VRAM_VERSION "</p></body></html>\n";

static const struct cli_opt opt_table[] = {
    {OPT_LISTEN, "listen", 0, "ADDR:PORT", "address to serve on (default 127.0.0.1:" EXP_DEFAULT_PORT ")"},
    {OPT_INTERVAL, "interval", 0, "SECONDS", "seconds between samples, 0.1..3600 (default 1)"},
    {OPT_NO_NVML, "no-nvml", 0, NULL, "do not load libnvidia-ml.so.1: the ledgers alone"},
};
#define N_OPTS (sizeof opt_table / sizeof opt_table[0])

#define EXP_THREADS 4          /* libmicrohttpd's worker threads */
#define EXP_MAX_CONNECTIONS 64 /* open connections at once, all clients */
#define EXP_TIMEOUT_S 5        /* an idle connection is closed after this */
#define EXP_CONN_MEMORY 16384  /* bytes per connection for the request head */
/* A request must be complete and answered within this many ms of its
** connection's start, or of the previous answer on a kept-alive
** connection. A scrape takes about 1 ms on loopback; Prometheus's
** default scrape timeout is 10 s, so a client 2 s late is not a scraper. */
#define EXP_REQUEST_DEADLINE_MS 2000
#define EXP_REAP_EVERY_MS 100 /* the reaper's period: deadlines hold within it */
/* Connections one client address may hold at once: Prometheus uses one
** per target, a person with curl a few; the total is EXP_MAX_CONNECTIONS. */
#define EXP_PER_ADDRESS 8

/* One open connection, for the reaper. */
struct exp_conn {
    int fd;              /* the socket; -1 = slot free */
    uint64_t deadline_ns; /* CLOCK_MONOTONIC by which its request is answered */
    bool cut;            /* shut down by the reaper */
};

/* What the sampler and the request threads share. */
struct exporter {
    pthread_mutex_t lock;
    char *text;     /* the latest exposition, NUL-terminated; under lock */
    size_t len;     /* its length, bytes; under lock */
    bool stop;      /* under lock: the sampler ends */
    pthread_cond_t wake;
    pthread_cond_t reap_wake;
    struct monitor *mon; /* the sampler thread's only */
    int unread_said; /* the sampler's: ledgers not read at the last sample */
    double interval_s;
    /* The reaper's table: one entry per open connection, under conn_lock.
    ** libmicrohttpd says a connection is closed (notify_conn) before it
    ** closes the socket, so a descriptor in the table is never reused. */
    pthread_mutex_t conn_lock;
    struct exp_conn conns[EXP_MAX_CONNECTIONS + 8];
    unsigned long cut_total; /* connections ended by the deadline, under conn_lock */
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
    .opts = opt_table,
    .n_opts = N_OPTS,
    .exit_status = "0 stopped by SIGINT/SIGTERM, 1 failure (e.g. the address is in use), "
                   "2 bad usage.",
    .no_operands = true,
};

static uint64_t
mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

#define DEADLINE_NS ((uint64_t)EXP_REQUEST_DEADLINE_MS * UINT64_C(1000000))

/* libmicrohttpd's connection notifications: keep the reaper's table. */
static void
notify_conn(void *cls, struct MHD_Connection *c, void **socket_context,
            enum MHD_ConnectionNotificationCode code)
{
    struct exporter *e = cls;
    pthread_mutex_lock(&e->conn_lock);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = NULL;
        for (size_t i = 0; info != NULL && i < sizeof e->conns / sizeof e->conns[0]; i++)
            if (e->conns[i].fd < 0) {
                e->conns[i].fd = info->connect_fd;
                e->conns[i].deadline_ns = mono_ns() + DEADLINE_NS;
                e->conns[i].cut = false;
                *socket_context = &e->conns[i];
                break;
            }
    } else if (*socket_context != NULL) {
        struct exp_conn *k = *socket_context;
        k->fd = -1;
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&e->conn_lock);
}

/* A request was answered on C: its connection's next request gets a new
** deadline. */
static void
conn_answered(struct exporter *e, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (info == NULL || info->socket_context == NULL)
        return;
    struct exp_conn *k = info->socket_context;
    pthread_mutex_lock(&e->conn_lock);
    /* The response is being sent: give it the same time again. */
    k->deadline_ns = mono_ns() + DEADLINE_NS;
    pthread_mutex_unlock(&e->conn_lock);
}

/* End the connections past their deadline: shutdown() wakes libmicrohttpd's
** poll with an end of stream, and it closes them. */
static void
reap(struct exporter *e)
{
    uint64_t now = mono_ns();
    pthread_mutex_lock(&e->conn_lock);
    for (size_t i = 0; i < sizeof e->conns / sizeof e->conns[0]; i++) {
        struct exp_conn *k = &e->conns[i];
        if (k->fd >= 0 && !k->cut && now > k->deadline_ns) {
            shutdown(k->fd, SHUT_RDWR);
            k->cut = true;
            e->cut_total++;
        }
    }
    pthread_mutex_unlock(&e->conn_lock);
}


/* Parse "A.B.C.D:PORT" or "[V6]:PORT" into SS; false with a reason in WHY. */
static bool
parse_listen(const char *text, struct sockaddr_storage *ss, char *why, size_t len)
{
    const char *colon = strrchr(text, ':');
    if (colon == NULL || colon == text) {
        snprintf(why, len, "'%s': expected ADDR:PORT, e.g. 127.0.0.1:" EXP_DEFAULT_PORT "", text);
        return false;
    }
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno != 0 || end == colon + 1 || *end != '\0' || port < 0 || port > 65535) {
        snprintf(why, len, "'%s': the port must be a number 0..65535", text);
        return false;
    }
    char host[64];
    size_t hl = (size_t)(colon - text);
    bool v6 = text[0] == '[';
    if (v6 && (hl < 3 || text[hl - 1] != ']')) {
        snprintf(why, len, "'%s': an IPv6 address is written [ADDR]:PORT", text);
        return false;
    }
    if (v6) {
        text++;
        hl -= 2;
    }
    if (hl >= sizeof host) {
        snprintf(why, len, "address too long");
        return false;
    }
    memcpy(host, text, hl);
    host[hl] = '\0';
    memset(ss, 0, sizeof *ss);
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &a->sin6_addr) == 1)
            return true;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &a->sin_addr) == 1)
            return true;
    }
    snprintf(why, len, "'%s': not a numeric IP address", host);
    return false;
}

/* Ledgers the monitor could not read (another vram version...): their
** lines on stderr when their number changes, not at every sample. */
static void
say_unread(struct exporter *e, const struct mon_view *v)
{
    if (v->n_unread == e->unread_said)
        return;
    e->unread_said = v->n_unread;
    for (int i = 0; i < v->n_unread && i < MON_MAX_UNREAD; i++)
        cli_error("exporter: %s", v->unread[i]);
    if (v->n_unread > MON_MAX_UNREAD)
        cli_error("exporter: and %d more ledgers not read", v->n_unread - MON_MAX_UNREAD);
}

/* Sample once and swap in the new text. False (with the last error) on failure. */
static bool
refresh(struct exporter *e)
{
    const struct mon_view *v = NULL;
    if (monitor_sample(e->mon, &v) != VRAM_OK)
        return false;
    say_unread(e, v);
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
    pthread_mutex_lock(&e->lock);
    free(e->text);
    e->text = buf;
    e->len = len;
    pthread_mutex_unlock(&e->lock);
    return true;
}

static void *
sampler(void *arg)
{
    struct exporter *e = arg;
    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double at = (double)ts.tv_nsec / 1e9 + e->interval_s;
        ts.tv_sec += (time_t)at;
        ts.tv_nsec = (long)((at - (double)(time_t)at) * 1e9);
        pthread_cond_timedwait(&e->wake, &e->lock, &ts);
        if (e->stop)
            break;
        pthread_mutex_unlock(&e->lock);
        if (!refresh(e))
            cli_error("exporter: sample failed: %s", vram_last_error());
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* The reaper thread: its own, so that a slow sample never delays it. */
static void *
reaper(void *arg)
{
    struct exporter *e = arg;
    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + EXP_REAP_EVERY_MS * 1000000L;
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&e->reap_wake, &e->lock, &ts);
        if (e->stop)
            break;
        pthread_mutex_unlock(&e->lock);
        reap(e);
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

static enum MHD_Result
answer_text(struct MHD_Connection *c, unsigned code, const char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
                                                             MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, "Allow", "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result
answer(struct exporter *e, struct MHD_Connection *c, unsigned code, const char *text)
{
    conn_answered(e, c);
    return answer_text(c, code, text);
}

static enum MHD_Result
answer_page(struct MHD_Connection *c)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        sizeof root_page - 1, (void *)root_page, MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
           const char *version, const char *upload, size_t *upload_size, void **state)
{
    struct exporter *e = cls;
    (void)version;
    (void)upload;
    (void)state;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        *upload_size = 0; /* a body is not read */
        return answer(e, c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    if (strcmp(url, "/") == 0) {
        conn_answered(e, c);
        return answer_page(c);
    }
    if (strcmp(url, "/metrics") != 0)
        return answer(e, c, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n");
    conn_answered(e, c);
    pthread_mutex_lock(&e->lock);
    char *copy = malloc(e->len + 1);
    size_t len = e->len;
    if (copy != NULL)
        memcpy(copy, e->text, e->len + 1);
    pthread_mutex_unlock(&e->lock);
    if (copy == NULL)
        return answer_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    struct MHD_Response *r = MHD_create_response_from_buffer(len, copy, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(copy);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* What the command line asks of `vram exporter`. */
struct exporter_args {
    const char *listen;
    double interval;
    bool nvml;
};

/* One option of `vram exporter` (cliopt_handler). */
static int
exporter_option(void *ctx, const struct cli_opt *opt, const char *value)
{
    struct exporter_args *a = ctx;
    switch ((enum opt_id)opt->id) {
    case OPT_LISTEN:
        a->listen = value;
        break;
    case OPT_INTERVAL:
        if (!cliopt_seconds(&exporter_cmd, opt->name, value, 0.1, 3600, &a->interval))
            return CLI_EXIT_USAGE;
        break;
    case OPT_NO_NVML:
        a->nvml = false;
        break;
    }
    return CLIOPT_GO_ON;
}

int
cmd_exporter(int argc, char **argv)
{
    struct exporter_args a = {"127.0.0.1:" EXP_DEFAULT_PORT, 1.0, true};
    int rc = cliopt_parse(&exporter_cmd, argc, argv, exporter_option, &a, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;
    const char *listen = a.listen;
    double interval = a.interval;
    bool nvml = a.nvml;
    struct sockaddr_storage addr;
    char why[160];
    if (!parse_listen(listen, &addr, why, sizeof why)) {
        cli_error("exporter: --listen %s", why);
        return 2;
    }

    static struct exporter e; /* large-ish and shared with threads: not on the stack */
    pthread_mutex_init(&e.lock, NULL);
    pthread_cond_init(&e.wake, NULL);
    pthread_cond_init(&e.reap_wake, NULL);
    pthread_mutex_init(&e.conn_lock, NULL);
    for (size_t i = 0; i < sizeof e.conns / sizeof e.conns[0]; i++)
        e.conns[i].fd = -1;
    e.interval_s = interval;
    if (monitor_open(nvml, &e.mon) != VRAM_OK || !refresh(&e)) {
        cli_error("exporter: %s", vram_last_error());
        monitor_close(e.mon);
        return 1;
    }

    /* Signals are taken by sigwait below: block them in every thread. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, &e, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)EXP_THREADS, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)EXP_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)EXP_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)EXP_CONN_MEMORY,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)EXP_PER_ADDRESS,
        MHD_OPTION_NOTIFY_CONNECTION, notify_conn, &e, MHD_OPTION_END);
    if (d == NULL) {
        cli_error("exporter: cannot serve on %s (address in use or not local?)", listen);
        monitor_close(e.mon);
        free(e.text);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("vram exporter: serving http://%s/metrics (port %u)\n", listen,
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
    free(e.text);
    return rc;
}
