/* SPDX-License-Identifier: MIT */
/*
** exporter_http.h -- the HTTP side of `vram exporter` (exporter_http.c):
** the libmicrohttpd daemon with its limits, the request handler, the
** per-request deadline and the --listen parser. Apart from the command
** (cmd_exporter.c) so that a fuzzer (tests/fuzz/fuzz_exporter.c) can
** drive the same daemon over socket pairs.
*/
#ifndef VRAM_TOOLS_EXPORTER_HTTP_H
#define VRAM_TOOLS_EXPORTER_HTTP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
** The default port. Not 9400, NVIDIA dcgm-exporter's, which runs beside
** this one on the same GPU servers. The Prometheus project's list of
** default ports ("Default port allocations" on its wiki) has been full
** from 9100 to 9999 since 2023, and new exporters take ports above 10000.
*/
#define EXP_DEFAULT_PORT "10042"

/* libmicrohttpd's worker threads: 0, one polling thread. A scrape only
** queues the rendered response (one sendmsg of it), so more threads add
** no throughput; a pool of 4 woke all 4 on every connection (one accept,
** three EAGAIN), which cost each scrape 0.1 ms more CPU at the median
** (0.35 against 0.22-0.26 ms, 1,000 processes, BENCHMARKS.md). */
#define EXP_THREADS 0
/* The serving thread's time slice, ns (sched_setattr's sched_runtime for
** a SCHED_OTHER thread: Linux 6.12 and later; 0.1 ms is its least). The
** default slice is 0.7 ms times 1 + log2(CPUs); a thread that asks for a
** shorter one preempts the others sooner when it wakes. A scrape takes the
** serving thread about 0.2 ms of CPU; its wait for a CPU after each wake-up
** was most of the exporter's part of the tail on a loaded 2-CPU VM (p99
** 3.8-5.0 ms, 2.9-4.3 ms with this slice: BENCHMARKS.md). */
#define EXP_SLICE_NS 100000

/* struct sched_attr of <linux/sched/types.h>, which cannot be included
** beside <sched.h>; glibc before 2.41 has no wrapper for sched_setattr
** and sched_getattr (syscall(SYS_sched_setattr...)). */
struct exp_sched_attr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
    uint32_t sched_util_min, sched_util_max;
};
#define EXP_TIMEOUT_S 5        /* an idle connection is closed after this */
#define EXP_CONN_MEMORY 16384  /* bytes per connection for the request head */
/* A request must be complete and answered within this many ms of its
** connection's start, or of the previous answer on a kept-alive
** connection. A scrape takes about 1 ms on loopback; Prometheus's
** default scrape timeout is 10 s, so a client 2 s late is not a scraper. */
#define EXP_REQUEST_DEADLINE_MS 2000
#define EXP_REAP_EVERY_MS 100 /* the reaper's period: deadlines hold within it */

/*
** Clients. A client is a local user (the uid that owns the peer's socket,
** whatever loopback or host address it connects from) or a remote host
** (its address); exporter_client.c tells which. The fairness rule:
**   - one client is served at most EXP_PER_CLIENT connections at once
**     (Prometheus uses one per target, a person with curl a few); a
**     connection past that is answered 503 with a line saying why, and
**     closed;
**   - at most EXP_MAX_CONNECTIONS are served at once, all clients
**     together; when they are all taken, a new connection of a client that
**     holds fewer than the client holding the most ends the oldest request
**     of that one (shutdown); otherwise it is answered 503;
**   - a connection that has not completed its request by its deadline is
**     ended (the reaper), refused ones included.
** So no client, however many connections it opens, from however many
** addresses, keeps a scraper that holds fewer from being served.
*/
#define EXP_PER_CLIENT 8
#define EXP_MAX_CONNECTIONS 64 /* served at once, all clients */
#define EXP_REFUSING 32        /* more, answered 503 while they last */
#define EXP_SLOTS (EXP_MAX_CONNECTIONS + EXP_REFUSING)

enum exp_client_kind { EXP_CLIENT_UNKNOWN, EXP_CLIENT_ADDRESS, EXP_CLIENT_USER };

/* Who a connection's client is (exporter_client.c). */
struct exp_client {
    enum exp_client_kind kind;
    uint32_t uid;     /* EXP_CLIENT_USER */
    uint8_t addr[16]; /* EXP_CLIENT_ADDRESS: IPv6, IPv4 as ::ffff:a.b.c.d */
};

/* The client at the other end of connection FD, whose peer address is
** PEER, into *OUT: a local user if the kernel shows the peer's socket in
** this network namespace, else the peer's address (EXP_CLIENT_UNKNOWN: not
** an IP connection). */
void exporter_client_of(int fd, const struct sockaddr *peer, struct exp_client *out);

/* Whether A and B are the same client. */
bool exporter_client_same(const struct exp_client *a, const struct exp_client *b);

/* "local user 1000", "address 10.0.0.7": C for a message, into BUF. */
char *exporter_client_name(const struct exp_client *c, char *buf, size_t len);

/* One open connection, for the reaper and the fairness rule. */
struct exp_conn {
    int fd;               /* the socket; -1 = slot free */
    uint64_t deadline_ns; /* CLOCK_MONOTONIC by which its request is answered */
    uint64_t since_ns;    /* its start, or its previous answer */
    bool cut;             /* shut down (reaper or eviction): closing */
    bool refused;         /* over the rule: its request is answered 503 */
    struct exp_client client;
};

/* The fairness rule's verdict on a new connection of WHO, given the N
** entries of CONNS (the new one not among them): *EVICT is the index of a
** connection to end first (-1: none). False: the new one is refused. */
bool exporter_admit(const struct exp_conn *conns, size_t n, const struct exp_client *who,
                    int *evict);

/* What the sampler and the request threads share. */
struct monitor;

struct MHD_Response;

struct exporter {
    pthread_mutex_t lock;
    /* The latest exposition as one libmicrohttpd response, under lock.
    ** Every scrape queues this same response (libmicrohttpd counts its
    ** references and frees the text with the last one), so that a scrape
    ** neither allocates nor copies the text: a copy per scrape (930 KB
    ** with 1,000 processes) was the tail of the scrape's latency. */
    struct MHD_Response *metrics;
    bool stop;      /* under lock: the sampler ends */
    pthread_cond_t wake;
    pthread_cond_t reap_wake;
    struct monitor *mon; /* the sampler thread's only */
    double interval_s;
    /* The reaper's table: one entry per open connection, under conn_lock.
    ** libmicrohttpd says a connection is closed (notify_conn) before it
    ** closes the socket, so a descriptor in the table is never reused. */
    pthread_mutex_t conn_lock;
    struct exp_conn conns[EXP_SLOTS];
    unsigned long cut_total;     /* connections ended by the deadline, under conn_lock */
    unsigned long refused_total; /* answered 503 by the fairness rule, under conn_lock */
    unsigned long evicted_total; /* ended for a client that held fewer, under conn_lock */
};

/* Set E up (locks, an empty connection table); INTERVAL_S between samples. */
void exporter_init(struct exporter *e, double interval_s);

/* Swap in BUF (LEN bytes, malloc'ed; E takes it, and frees it on
** failure) as the text GET /metrics answers; scrapes in flight finish with
** the text they began with. False (and the previous text stays) when
** libmicrohttpd cannot make a response of it. */
bool exporter_set_text(struct exporter *e, char *buf, size_t len);

/* Release E's text (after MHD_stop_daemon). */
void exporter_fini(struct exporter *e);

/*
** Start libmicrohttpd's daemon for E with the limits above, listening on
** ADDR; ADDR NULL: no listening socket, connections are handed to it with
** MHD_add_connection (the fuzzer). THREADS: its worker threads (0: one
** polling thread). NULL if it cannot start. Stop it with MHD_stop_daemon.
*/
struct MHD_Daemon *exporter_start(struct exporter *e, const struct sockaddr_storage *addr,
                                  unsigned threads);

/* End the connections past their deadline (the reaper thread, every
** EXP_REAP_EVERY_MS). */
void exporter_reap(struct exporter *e);

/* Parse "A.B.C.D:PORT" or "[V6]:PORT" into SS; false with a reason in WHY. */
bool exporter_parse_listen(const char *text, struct sockaddr_storage *ss, char *why,
                           size_t len);

#endif
