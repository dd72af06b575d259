/* SPDX-License-Identifier: MIT */
/*
** bench_monitor.c -- `make bench`'s measurements of the monitoring commands
** with many live members, as Markdown for BENCHMARKS.md:
**   1. the exporter's work behind a scrape with PROCS processes in GROUPS
**      groups: monitor_sample + the Prometheus text, timed in this process
**      (median, p99 and max over SCRAPES samples), then GET /metrics of a
**      running `vram exporter` over loopback (the latency a scraper sees:
**      the exporter renders once per interval, a scrape only sends it), in
**      HTTP_ROUNDS rounds of SCRAPES each way -- a new connection per
**      scrape, then one kept alive as Prometheus does --, each round's p99
**      printed; beside each scrape's wall time, from /proc/.../schedstat,
**      the time the scraper and the exporter's serving threads spent
**      waiting for a CPU, and the serving threads' CPU time: on a shared
**      machine the wall time's tail is mostly the waits, which the
**      exporter does not control;
**   2. `vram top -d 0.1` (10 Hz) on a pseudo-terminal with TOP_PROCS
**      processes: its CPU time (utime + stime of /proc/PID/stat) over
**      TOP_SECONDS, as a share of one core.
** The members are real processes (fork children of this one), each with an
** entry in a real group ledger holding 1 MiB per member index on one GPU
** UUID and 1 MiB of pinned host memory: the monitor reads what it reads in
** production (the files, and /proc of every member). As root, it runs in a
** private mount namespace with its own /dev/shm, so that other ledgers on
** the machine neither slow nor pad the figures (and none is left behind).
**
** The samples are timed back to back (SCRAPES of them), then SCRAPES/10
** one a second (the exporter's default interval, after which each
** process's /proc judgment has expired).
** Usage: bench_monitor VRAM [PROCS GROUPS SCRAPES TOP_PROCS TOP_SECONDS
** [OTHER_VRAM]] (defaults 1000 100 200 200 30). With OTHER_VRAM, its
** exporter is scraped too, the two alternated round by round so that both
** see the same load (an A/B comparison of two builds). Exit 0, or 1 when
** something could not be set up (a line on stderr says what).
**
** Test code: exit is allowed here (docs/STYLE.md's habit 7 covers the library).
*/
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ledger/ledger.h"
#include "monitor/monitor.h"
#include "monitor/prom.h"

#define UUID "GPU-bench-0000-0000-0000-000000000000"
#define MIB (UINT64_C(1) << 20)
/* Rounds of scrapes, one second apart: on a shared machine the load moves
** from second to second, and each round's p99 shows how much. */
#define HTTP_ROUNDS 5

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU time of the calling thread, seconds: on a loaded machine the wall
** time also counts the time others ran. */
static double
thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
die(const char *what)
{
    fprintf(stderr, "bench_monitor: %s%s%s\n", what, errno ? ": " : "",
            errno ? strerror(errno) : "");
    exit(1);
}

/* ---- members ---- */

struct members {
    int n, groups;
    pid_t *pids;
    int hold; /* write end: the members exit at its EOF */
};

/* N members in GROUPS groups "bench-<k>"; returns once each has its entry. */
static void
members_start(struct members *m, int n, int groups)
{
    int hold[2], ready[2];
    if (pipe(hold) != 0 || pipe(ready) != 0)
        die("pipe");
    m->n = n;
    m->groups = groups;
    m->pids = calloc((size_t)n, sizeof *m->pids);
    if (m->pids == NULL)
        die("out of memory");
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0) {
            close(hold[1]);
            close(ready[0]);
            char group[32];
            snprintf(group, sizeof group, "bench-%d", i % groups);
            struct ledger *l = NULL;
            char ok = 1;
            if (ledger_open(group, &l) != VRAM_OK ||
                ledger_reserve(l, UUID, (uint64_t)(i % 64 + 1) * MIB, 0, NULL) != VRAM_OK ||
                ledger_host_add(l, MIB) != VRAM_OK) {
                fprintf(stderr, "bench_monitor: member %d: %s\n", i, vram_last_error());
                ok = 0;
            }
            if (write(ready[1], &ok, 1) != 1)
                _exit(1);
            char c;
            while (read(hold[0], &c, 1) < 0 && errno == EINTR)
                ;
            _exit(0);
        }
        m->pids[i] = pid;
    }
    close(hold[0]);
    close(ready[1]);
    m->hold = hold[1];
    for (int i = 0; i < n; i++) {
        char ok = 0;
        if (read(ready[0], &ok, 1) != 1 || !ok)
            die("a member could not join its ledger");
    }
    close(ready[0]);
}

/* The members exit, and their groups' ledgers go (as `vram run` removes a
** finished job's), so that the next measurement sees only its own. */
static void
members_stop(struct members *m)
{
    close(m->hold);
    for (int i = 0; i < m->n; i++)
        waitpid(m->pids[i], NULL, 0);
    free(m->pids);
    for (int g = 0; g < m->groups; g++) {
        char group[32];
        snprintf(group, sizeof group, "bench-%d", g);
        struct ledger *l = NULL;
        if (ledger_attach_existing(group, &l) != VRAM_OK)
            continue;
        if (!ledger_remove_if_unused(l))
            fprintf(stderr, "bench_monitor: the ledger of %s stays: %s\n", group,
                    vram_last_error());
        ledger_close(l);
    }
}

/* ---- statistics ---- */

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sort V (N) and print "median M ms, p99 P ms, max X ms". */
static void
print_ms(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    int p99 = (int)((n - 1) * 0.99 + 0.5);
    printf("median %.2f ms, p99 %.2f ms, max %.2f ms (%d runs)", v[n / 2] * 1e3,
           v[p99] * 1e3, v[n - 1] * 1e3, n);
}

/* ---- 1. the exporter ---- */

static void
bench_sample(int procs, int groups, int scrapes, double pause_s)
{
    struct monitor *mon = NULL;
    const struct mon_view *v = NULL;
    if (monitor_open(false, &mon) != VRAM_OK)
        die("monitor_open");
    double *t = calloc((size_t)scrapes, sizeof *t);
    double *c = calloc((size_t)scrapes, sizeof *c);
    double *r = calloc((size_t)scrapes, sizeof *r);
    if (t == NULL || c == NULL || r == NULL)
        die("out of memory");
    size_t bytes = 0;
    for (int i = -5; i < scrapes; i++) { /* 5 unrecorded: the history fills */
        char *buf = NULL;
        size_t len = 0;
        double t0 = now_s(), c0 = thread_cpu_s();
        if (monitor_sample(mon, &v) != VRAM_OK)
            die("monitor_sample");
        double cs = thread_cpu_s();
        FILE *f = open_memstream(&buf, &len);
        if (f == NULL)
            die("open_memstream");
        prom_write(f, v);
        fclose(f);
        double t1 = now_s(), c1 = thread_cpu_s();
        free(buf);
        if (i >= 0) {
            t[i] = t1 - t0;
            c[i] = c1 - c0;
            r[i] = c1 - cs;
        }
        bytes = len;
        if (pause_s > 0)
            usleep((useconds_t)(pause_s * 1e6));
    }
    printf("- sample + Prometheus text, %d processes in %d groups (%d process rows, "
           "%zu bytes of text), %s: ",
           procs, groups, v->n_procs, bytes,
           pause_s > 0 ? "one a second as the exporter takes them (each process's /proc "
                         "read again)"
                       : "back to back (as vram top at 10 Hz: /proc read once a second)");
    print_ms(t, scrapes);
    printf("\n  CPU time of the sampling thread: ");
    print_ms(c, scrapes);
    printf("\n  of which writing the text: ");
    print_ms(r, scrapes);
    printf("\n");
    if (v->n_procs != procs)
        printf("  (expected %d process rows: the figures are not comparable)\n", procs);
    free(t);
    free(c);
    free(r);
    monitor_close(mon);
}

/* A free loopback port. */
static int
free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) != 0)
        die("a free port");
    close(s);
    return ntohs(a.sin_port);
}

/* GET /metrics on PORT: the bytes of the answer, -1 on failure. */
static long
get_metrics(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        if (s >= 0)
            close(s);
        return -1;
    }
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    long total = -1;
    if (write(s, req, sizeof req - 1) == (ssize_t)(sizeof req - 1)) {
        char buf[65536];
        ssize_t r;
        total = 0;
        while ((r = read(s, buf, sizeof buf)) > 0)
            total += r;
    }
    close(s);
    return total;
}

/* GET /metrics over *FD, a connection kept alive between calls (opened to
** PORT when *FD < 0), as Prometheus scrapes; closed after an answer that
** says "Connection: close", as a client does. The bytes of the answer, -1
** on failure (*FD then closed). */
static long
get_metrics_kept(int *fd, int port)
{
    if (*fd < 0) {
        *fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (*fd < 0 || connect(*fd, (struct sockaddr *)&a, sizeof a) != 0)
            goto fail;
    }
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(*fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1))
        goto fail;
    char buf[65536];
    size_t have = 0;
    const char *end = NULL;
    while (end == NULL) { /* the head */
        ssize_t r = read(*fd, buf + have, sizeof buf - 1 - have);
        if (r <= 0)
            goto fail;
        have += (size_t)r;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
        if (end == NULL && have == sizeof buf - 1)
            goto fail;
    }
    const char *cl = strcasestr(buf, "\r\nContent-Length:");
    if (cl == NULL || cl > end)
        goto fail;
    const char *closing = strcasestr(buf, "\r\nConnection: close");
    long body = atol(cl + 17), total = (long)have;
    long left = body - (long)(have - (size_t)(end + 4 - buf));
    while (left > 0) {
        ssize_t r = read(*fd, buf, sizeof buf);
        if (r <= 0)
            goto fail;
        left -= r;
        total += r;
    }
    if (closing != NULL && closing < end) {
        close(*fd);
        *fd = -1;
    }
    return total;
fail:
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
    return -1;
}

/* Run time and run-queue wait, ns (/proc/.../schedstat: time on a CPU,
** time runnable but waiting for one). */
struct sched_ns {
    double run, wait;
};

static bool
sched_add(const char *path, struct sched_ns *to)
{
    char buf[128];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    unsigned long long run = 0, wait = 0;
    if (n <= 0)
        return false;
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu", &run, &wait) != 2)
        return false;
    to->run += (double)run;
    to->wait += (double)wait;
    return true;
}

/* The calling thread's. */
static struct sched_ns
sched_self(void)
{
    struct sched_ns s = {0, 0};
    sched_add("/proc/thread-self/schedstat", &s);
    return s;
}

/* The sum over PID's threads that serve HTTP: libmicrohttpd names them
** "MHD-..." (the sampler and the reaper are "vram-sampler", "vram-reaper"). */
static struct sched_ns
sched_serving(pid_t pid)
{
    struct sched_ns s = {0, 0};
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return s;
    for (struct dirent *t; (t = readdir(d)) != NULL;) {
        if (t->d_name[0] == '.')
            continue;
        char comm[32] = "";
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/comm", (int)pid, t->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, comm, sizeof comm - 1);
        close(fd);
        if (n < 4 || strncmp(comm, "MHD-", 4) != 0)
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/schedstat", (int)pid, t->d_name);
        sched_add(path, &s);
    }
    closedir(d);
    return s;
}

/* One exporter's scrapes, in ROUNDS rounds of N each. */
struct scrapes {
    const char *vram;
    bool kept; /* over one connection kept alive, else a new one each */
    int n, rounds;
    long bytes;
    double *wall;  /* what the scraper waits, s */
    double *cwait; /* of which the scraper itself waited for a CPU */
    double *swait; /* the exporter's serving threads waited for a CPU */
    double *srun;  /* the serving threads' CPU time */
    double *round_p99;
};

static void
scrapes_alloc(struct scrapes *x, const char *vram, bool kept, int n, int rounds)
{
    size_t all = (size_t)n * (size_t)rounds;
    *x = (struct scrapes){vram, kept, n, rounds, 0, calloc(all, sizeof(double)),
                          calloc(all, sizeof(double)), calloc(all, sizeof(double)),
                          calloc(all, sizeof(double)), calloc((size_t)rounds, sizeof(double))};
    if (x->wall == NULL || x->cwait == NULL || x->swait == NULL || x->srun == NULL ||
        x->round_p99 == NULL)
        die("out of memory");
}

/* Round R of X[0] (a new connection per scrape) and X[1] (one kept
** alive), one exporter of theirs: start it, wait for its first full
** sample, scrape N times 5 ms apart each way, stop it. */
static void
scrape_round(struct scrapes *x, int r)
{
    int port = free_port();
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, STDOUT_FILENO); /* its "serving ..." line, once per round */
        execl(x->vram, x->vram, "exporter", "--listen", listen, "--interval", "1", "--no-nvml",
              (char *)NULL);
        _exit(127);
    }
    long got = -1;
    for (int i = 0; i < 100 && got < 100000; i++) { /* until the first full sample */
        usleep(100000);
        got = get_metrics(port);
    }
    double *round = calloc((size_t)x->n, sizeof *round);
    for (int m = 0; m < 2 && got >= 0 && round != NULL; m++) {
        struct scrapes *y = &x[m];
        int fd = -1;
        for (int i = 0; i < y->n && got >= 0; i++) {
            size_t k = (size_t)r * (size_t)y->n + (size_t)i;
            struct sched_ns c0 = sched_self(), s0 = sched_serving(pid);
            double t0 = now_s();
            got = y->kept ? get_metrics_kept(&fd, port) : get_metrics(port);
            double t1 = now_s();
            struct sched_ns c1 = sched_self(), s1 = sched_serving(pid);
            y->wall[k] = round[i] = t1 - t0;
            y->cwait[k] = (c1.wait - c0.wait) / 1e9;
            y->swait[k] = (s1.wait - s0.wait) / 1e9;
            y->srun[k] = (s1.run - s0.run) / 1e9;
            y->bytes = got;
            usleep(5000); /* a scraper is not a flood */
        }
        if (fd >= 0)
            close(fd);
        qsort(round, (size_t)y->n, sizeof round[0], cmp_double);
        y->round_p99[r] = round[(int)((y->n - 1) * 0.99 + 0.5)];
    }
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    if (round == NULL || got < 0)
        die("the exporter did not answer");
    free(round);
}

static void
scrapes_print(struct scrapes *x)
{
    int all = x->n * x->rounds;
    printf("- GET /metrics of `%s exporter --interval 1` over loopback (%ld bytes), %s, %d "
           "rounds of %d:\n  what the scraper waits: ",
           x->vram, x->bytes,
           x->kept ? "one connection kept alive (as Prometheus scrapes)"
                   : "a new connection per scrape",
           x->rounds, x->n);
    double *own = calloc((size_t)all, sizeof *own);
    if (own == NULL)
        die("out of memory");
    /* The two waits can overlap (both runnable at once): subtracting both
     * may undercount, hence "at least" in the line below. */
    for (int k = 0; k < all; k++) {
        own[k] = x->wall[k] - x->cwait[k] - x->swait[k];
        if (own[k] < 0)
            own[k] = 0;
    }
    print_ms(x->wall, all);
    qsort(x->round_p99, (size_t)x->rounds, sizeof(double), cmp_double);
    printf("\n  p99 of each round, best first:");
    for (int r = 0; r < x->rounds; r++)
        printf(" %.2f", x->round_p99[r] * 1e3);
    printf(" ms\n  less the time the scraper or the exporter's serving threads waited for a "
           "CPU: ");
    print_ms(own, all);
    printf("\n  the scraper's wait for a CPU: ");
    print_ms(x->cwait, all);
    printf("\n  the serving threads' wait for a CPU: ");
    print_ms(x->swait, all);
    printf("\n  the serving threads' CPU time: ");
    print_ms(x->srun, all);
    printf("\n");
    free(own);
    free(x->wall);
    free(x->cwait);
    free(x->swait);
    free(x->srun);
    free(x->round_p99);
}

/* SCRAPES scrapes each way (a new connection each, one kept alive) in
** each of ROUNDS rounds one second apart, of each exporter of VRAM (N of
** them, alternated round by round, so that they see the same load). */
static void
bench_http(const char *const *vram, int n, int scrapes, int rounds)
{
    struct scrapes x[2][2];
    for (int b = 0; b < n; b++)
        for (int m = 0; m < 2; m++)
            scrapes_alloc(&x[b][m], vram[b], m == 1, scrapes, rounds);
    for (int r = 0; r < rounds; r++)
        for (int b = 0; b < n; b++) {
            scrape_round(x[b], r);
            sleep(1);
        }
    for (int b = 0; b < n; b++)
        for (int m = 0; m < 2; m++)
            scrapes_print(&x[b][m]);
}

/* ---- 2. top ---- */

/* utime + stime of PID, seconds; -1 if unreadable. */
static double
cpu_s(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Read and drop what the terminal shows, for SECONDS. */
static void
drain(int fd, double seconds)
{
    double end = now_s() + seconds;
    char buf[65536];
    while (now_s() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0 && read(fd, buf, sizeof buf) <= 0)
            break;
    }
}

static void
bench_top(const char *vram, int procs, double seconds)
{
    struct winsize ws = {.ws_row = 60, .ws_col = 120};
    int fd = -1;
    pid_t pid = forkpty(&fd, NULL, NULL, &ws);
    if (pid < 0)
        die("forkpty");
    if (pid == 0) {
        setenv("TERM", "xterm", 1);
        execl(vram, vram, "top", "-d", "0.1", "--no-nvml", (char *)NULL);
        _exit(127);
    }
    drain(fd, 2.0); /* start-up and the first samples are not the steady state */
    double c0 = cpu_s(pid), t0 = now_s();
    drain(fd, seconds);
    double c1 = cpu_s(pid), t1 = now_s();
    if (write(fd, "q", 1) != 1)
        kill(pid, SIGTERM);
    drain(fd, 0.5);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    close(fd);
    if (c0 < 0 || c1 < 0)
        die("cannot read vram top's CPU time");
    printf("- `vram top -d 0.1` (10 Hz), %d processes, 120x60 terminal: %.2f s CPU in "
           "%.1f s = %.2f %% of one core (clock ticks of 1/%ld s)\n",
           procs, c1 - c0, t1 - t0, 100.0 * (c1 - c0) / (t1 - t0), sysconf(_SC_CLK_TCK));
}

/* The CPUs and the load average, WHEN. */
static void
print_load(const char *when)
{
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0)
        load[0] = -1;
    printf("- %ld CPUs online, load average %.2f %s\n", sysconf(_SC_NPROCESSORS_ONLN), load[0],
           when);
}

/* ---- the namespace ---- */

/* As root: a private /dev/shm of our own (tmpfs) in a private mount
** namespace. Otherwise the real one, said. */
static void
private_shm(void)
{
    if (geteuid() != 0) {
        printf("- (not root: the real /dev/shm, whatever other ledgers it holds)\n");
        return;
    }
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0)
        die("a private /dev/shm (unshare -m, tmpfs)");
}

int
main(int argc, char **argv)
{
    if (argc != 2 && argc != 7 && argc != 8) {
        fprintf(stderr, "usage: bench_monitor VRAM [PROCS GROUPS SCRAPES TOP_PROCS "
                        "TOP_SECONDS [OTHER_VRAM]]\n");
        return 2;
    }
    const char *vram[2] = {argv[1], argc == 8 ? argv[7] : NULL};
    int procs = argc >= 7 ? atoi(argv[2]) : 1000;
    int groups = argc >= 7 ? atoi(argv[3]) : 100;
    int scrapes = argc >= 7 ? atoi(argv[4]) : 200;
    int top_procs = argc >= 7 ? atoi(argv[5]) : 200;
    double top_s = argc >= 7 ? atof(argv[6]) : 30;
    if (procs < 1 || groups < 1 || groups > procs || scrapes < 1 || top_procs < 1 ||
        top_s <= 0 || procs / groups > LEDGER_MAX_PROCS) {
        fprintf(stderr, "bench_monitor: bad numbers\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("## Monitoring with many processes, %s\n\n", when);
    printf("- command: `make bench` (`build/tests/bench_monitor %s %d %d %d %d %.0f%s%s`)\n",
           vram[0], procs, groups, scrapes, top_procs, top_s, vram[1] ? " " : "",
           vram[1] ? vram[1] : "");
    print_load("at the start");
    fflush(stdout);
    private_shm();

    struct members m;
    members_start(&m, procs, groups);
    bench_sample(procs, groups, scrapes, 0);
    fflush(stdout);
    bench_sample(procs, groups, scrapes / 10 > 0 ? scrapes / 10 : 1, 1.05);
    fflush(stdout);
    bench_http(vram, vram[1] ? 2 : 1, scrapes, HTTP_ROUNDS);
    fflush(stdout);
    members_stop(&m);

    members_start(&m, top_procs, top_procs / 10 > 0 ? top_procs / 10 : 1);
    bench_top(vram[0], top_procs, top_s);
    members_stop(&m);
    print_load("at the end");
    return 0;
}
