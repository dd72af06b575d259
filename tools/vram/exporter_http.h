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
    struct exp_conn conns[EXP_MAX_CONNECTIONS + 8];
    unsigned long cut_total; /* connections ended by the deadline, under conn_lock */
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
