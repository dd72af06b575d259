/* SPDX-License-Identifier: MIT */
/*
** exporter_http.c -- the HTTP side of `vram exporter` (exporter_http.h).
**
** libmicrohttpd runs one polling thread with a connection limit, a
** per-connection memory limit (huge headers get an error answer) and an
** idle timeout. An idle timeout alone does not bound a client that
** trickles one byte at a time, so the reaper (exporter_reap) also ends
** every connection whose request has not been answered within a deadline
** for the whole request (shutdown() of its socket, which libmicrohttpd
** then closes), and the fairness rule of exporter_http.h ("Clients")
** decides, as each connection starts, whether it is served, answered 503,
** or served in place of a connection of a client holding more: a slow or
** hostile client holds a bounded number of connections for a bounded time
** while the others are answered.
** Only GET (and HEAD) /metrics: 404 for other paths, 405 for other
** methods; GET / answers a short page linking /metrics.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/size.h"
#include "exporter_http.h"
#include "vram.h"

/* GET /: what a browser pointed at the exporter sees. */
static const char root_page[] =
    "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>vram exporter</title>"
    "</head>\n<body><h1>vram exporter</h1>\n<p>GPU memory per device, quota group and "
    "process, for Prometheus: <a href=\"/metrics\">/metrics</a>.</p>\n<p>vram "
    VRAM_VERSION "</p></body></html>\n";

static uint64_t
mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

#define DEADLINE_NS ((uint64_t)EXP_REQUEST_DEADLINE_MS * UINT64_C(1000000))

/* Whether entry K is a connection being served (not refused, not ending). */
static bool
served(const struct exp_conn *k)
{
    return k->fd >= 0 && !k->cut && !k->refused;
}

bool
exporter_admit(const struct exp_conn *conns, size_t n, const struct exp_client *who,
               int *evict)
{
    *evict = -1;
    size_t total = 0, mine = 0;
    for (size_t i = 0; i < n; i++) {
        if (!served(&conns[i]))
            continue;
        total++;
        mine += exporter_client_same(&conns[i].client, who);
    }
    if (mine >= EXP_PER_CLIENT)
        return false;
    if (total < EXP_MAX_CONNECTIONS)
        return true;
    /* All taken: the client holding the most gives up its oldest request,
    ** if it holds more than WHO. Ties go to the first found. */
    size_t most = 0;
    int holder = -1;
    for (size_t i = 0; i < n; i++) {
        if (!served(&conns[i]))
            continue;
        size_t count = 0;
        for (size_t j = 0; j < n; j++)
            count += served(&conns[j]) &&
                     exporter_client_same(&conns[j].client, &conns[i].client);
        if (count > most) {
            most = count;
            holder = (int)i;
        }
    }
    if (holder < 0 || most <= mine)
        return false;
    for (size_t i = 0; i < n; i++)
        if (served(&conns[i]) && exporter_client_same(&conns[i].client, &conns[holder].client) &&
            (*evict < 0 || conns[i].since_ns < conns[*evict].since_ns))
            *evict = (int)i;
    return true;
}

/* End connection K now (under conn_lock): shutdown() wakes libmicrohttpd's
** poll with an end of stream, and it closes the socket. */
static void
cut(struct exp_conn *k)
{
    shutdown(k->fd, SHUT_RDWR);
    k->cut = true;
}

/*
** A connection starts: the fairness rule's verdict (exporter_http.h), and
** a slot of the table for it. The table has a slot for every connection
** libmicrohttpd may hold (its limit is the table's size), and at most
** EXP_MAX_CONNECTIONS of them are served: the rest hold refused
** connections and connections being closed. When those fill all but
** EXP_PER_CLIENT slots, the oldest refused one is ended, so that the limit
** of libmicrohttpd, which closes a connection without a word, is never
** what a client meets.
*/
static void
conn_started(struct exporter *e, struct MHD_Connection *c, void **socket_context)
{
    const union MHD_ConnectionInfo *fdi =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *addr =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    *socket_context = NULL;
    if (fdi == NULL)
        return;
    struct exp_client who;
    exporter_client_of(fdi->connect_fd, addr != NULL ? addr->client_addr : NULL, &who);
    uint64_t now = mono_ns();
    pthread_mutex_lock(&e->conn_lock);
    size_t n = sizeof e->conns / sizeof e->conns[0];
    int evict = -1;
    bool admitted = exporter_admit(e->conns, n, &who, &evict);
    if (evict >= 0) {
        cut(&e->conns[evict]);
        e->evicted_total++;
    }
    struct exp_conn *slot = NULL, *oldest_refused = NULL;
    size_t in_use = 0;
    for (size_t i = 0; i < n; i++) {
        struct exp_conn *k = &e->conns[i];
        in_use += k->fd >= 0;
        if (k->fd < 0 && slot == NULL)
            slot = k;
        if (k->fd >= 0 && k->refused && !k->cut &&
            (oldest_refused == NULL || k->since_ns < oldest_refused->since_ns))
            oldest_refused = k;
    }
    if (in_use + 1 >= n - EXP_PER_CLIENT && oldest_refused != NULL)
        cut(oldest_refused); /* its slot frees once libmicrohttpd closes it */
    if (slot == NULL) { /* libmicrohttpd holds no more than the table: never */
        shutdown(fdi->connect_fd, SHUT_RDWR);
        e->cut_total++;
        pthread_mutex_unlock(&e->conn_lock);
        return;
    }
    *slot = (struct exp_conn){
        .fd = fdi->connect_fd,
        .deadline_ns = now + DEADLINE_NS,
        .since_ns = now,
        .refused = !admitted,
        .client = who,
    };
    if (!admitted)
        e->refused_total++;
    *socket_context = slot;
    pthread_mutex_unlock(&e->conn_lock);
}

/* libmicrohttpd's connection notifications: keep the table. */
static void
notify_conn(void *cls, struct MHD_Connection *c, void **socket_context,
            enum MHD_ConnectionNotificationCode code)
{
    struct exporter *e = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_started(e, c, socket_context);
        return;
    }
    pthread_mutex_lock(&e->conn_lock);
    if (*socket_context != NULL) {
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
    if (k->refused)
        return; /* its 503 ends it: no more time */
    pthread_mutex_lock(&e->conn_lock);
    /* The response is being sent: give it the same time again. */
    k->since_ns = mono_ns();
    k->deadline_ns = k->since_ns + DEADLINE_NS;
    pthread_mutex_unlock(&e->conn_lock);
}

/* End the connections past their deadline: shutdown() wakes libmicrohttpd's
** poll with an end of stream, and it closes them. */
void
exporter_reap(struct exporter *e)
{
    uint64_t now = mono_ns();
    pthread_mutex_lock(&e->conn_lock);
    for (size_t i = 0; i < sizeof e->conns / sizeof e->conns[0]; i++) {
        struct exp_conn *k = &e->conns[i];
        if (k->fd >= 0 && !k->cut && now > k->deadline_ns) {
            cut(k);
            e->cut_total++;
        }
    }
    pthread_mutex_unlock(&e->conn_lock);
}


void
exporter_init(struct exporter *e, double interval_s)
{
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    pthread_cond_init(&e->reap_wake, NULL);
    pthread_mutex_init(&e->conn_lock, NULL);
    for (size_t i = 0; i < sizeof e->conns / sizeof e->conns[0]; i++)
        e->conns[i].fd = -1;
    e->interval_s = interval_s;
}

bool
exporter_set_text(struct exporter *e, char *buf, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(buf);
        error_set(VRAM_E_HOST_MEMORY, "libmicrohttpd could not make a response of %zu bytes",
                  len);
        return false;
    }
    if (MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8") !=
        MHD_YES) {
        MHD_destroy_response(r); /* frees BUF */
        error_set(VRAM_E_HOST_MEMORY, "libmicrohttpd could not add a header");
        return false;
    }
    pthread_mutex_lock(&e->lock);
    struct MHD_Response *old = e->metrics;
    e->metrics = r;
    pthread_mutex_unlock(&e->lock);
    if (old != NULL)
        MHD_destroy_response(old); /* the text is freed with its last scrape */
    return true;
}

void
exporter_fini(struct exporter *e)
{
    if (e->metrics != NULL)
        MHD_destroy_response(e->metrics);
    e->metrics = NULL;
}

bool
exporter_parse_listen(const char *text, struct sockaddr_storage *ss, char *why, size_t len)
{
    /* TEXT is quoted in the reasons: cut, its control characters made
     * harmless, so that the error stays one line. */
    char shown[TEXT_EXCERPT_LEN];
    text_excerpt(text, shown, sizeof shown);
    const char *colon = strrchr(text, ':');
    if (colon == NULL || colon == text) {
        snprintf(why, len, "'%s': expected ADDR:PORT, e.g. 127.0.0.1:" EXP_DEFAULT_PORT "", shown);
        return false;
    }
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno != 0 || end == colon + 1 || *end != '\0' || port < 0 || port > 65535) {
        snprintf(why, len, "'%s': the port must be a number 0..65535", shown);
        return false;
    }
    char host[64];
    size_t hl = (size_t)(colon - text);
    bool v6 = text[0] == '[';
    if (v6 && (hl < 3 || text[hl - 1] != ']')) {
        snprintf(why, len, "'%s': an IPv6 address is written [ADDR]:PORT", shown);
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
    snprintf(why, len, "'%s': not a numeric IP address", text_excerpt(host, shown, sizeof shown));
    return false;
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

/* The connection's entry in the table, NULL if it has none. */
static struct exp_conn *
conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info != NULL ? info->socket_context : NULL;
}

/* 503 for a connection the fairness rule refused: why, and that the
** connection closes. */
static enum MHD_Result
answer_refused(struct MHD_Connection *c, const struct exp_client *who)
{
    char name[64], text[256];
    snprintf(text, sizeof text,
             "vram exporter: too many connections from this client (%s): at most %d at "
             "once per client, %d in all; close one and try again\n",
             exporter_client_name(who, name, sizeof name), EXP_PER_CLIENT,
             EXP_MAX_CONNECTIONS);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_COPY);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_SERVICE_UNAVAILABLE, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
           const char *version, const char *upload, size_t *upload_size, void **state)
{
    static int seen; /* *STATE once the request's head was seen */
    struct exporter *e = cls;
    (void)version;
    (void)upload;
    const struct exp_conn *k = conn_of(c);
    if (k != NULL && k->refused) {
        *upload_size = 0;
        return answer_refused(c, &k->client);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        *upload_size = 0; /* a body is not read */
        return answer(e, c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    /* libmicrohttpd closes the connection after an answer queued at the
     * first call, the request's head alone (its body might be unread): a
     * GET is answered at the next call, in the same turn of its loop, so
     * that a scraper can keep the connection alive. A body is dropped. */
    if (*state == NULL) {
        *state = &seen;
        return MHD_YES;
    }
    if (*upload_size != 0) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(url, "/") == 0) {
        conn_answered(e, c);
        return answer_page(c);
    }
    if (strcmp(url, "/metrics") != 0)
        return answer(e, c, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n");
    conn_answered(e, c);
    /* Queued under the lock: the connection takes its reference before the
    ** sampler can drop the exporter's. */
    pthread_mutex_lock(&e->lock);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, e->metrics);
    pthread_mutex_unlock(&e->lock);
    return ret;
}


struct MHD_Daemon *
exporter_start(struct exporter *e, const struct sockaddr_storage *addr, unsigned threads)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    if (addr == NULL)
        flags |= MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC; /* ITC: MHD_add_connection wakes it */
    else if (addr->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_OptionItem ops[10] = {
        /* One connection per slot of the table (conn_started). */
        {MHD_OPTION_CONNECTION_LIMIT, EXP_SLOTS, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, EXP_TIMEOUT_S, NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, EXP_CONN_MEMORY, NULL},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)notify_conn, e},
    };
    size_t n = 4;
    if (addr != NULL)
        ops[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, (void *)addr};
    if (threads > 0)
        ops[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, threads, NULL};
    ops[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    /* The serving threads inherit the short slice; the caller's own
     * attributes are put back for the threads it starts later. */
    struct exp_sched_attr mine = {.size = sizeof mine};
    bool restore = syscall(SYS_sched_getattr, 0, &mine, sizeof mine, 0) == 0;
    struct exp_sched_attr quick = mine;
    quick.size = sizeof quick;
    quick.sched_runtime = EXP_SLICE_NS;
    if (restore && quick.sched_policy == SCHED_OTHER)
        (void)syscall(SYS_sched_setattr, 0, &quick, 0); /* a hint: older kernels ignore it */
    struct MHD_Daemon *d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, e,
                                            MHD_OPTION_ARRAY, ops, MHD_OPTION_END);
    if (restore)
        (void)syscall(SYS_sched_setattr, 0, &mine, 0);
    return d;
}
