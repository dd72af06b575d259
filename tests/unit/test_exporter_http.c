/* SPDX-License-Identifier: MIT */
/*
** test_exporter_http.c -- `vram exporter`'s HTTP side (tools/vram/
** exporter_http.c) without a network: the daemon started without a
** listening socket, each client one end of a socket pair handed to it.
**
** Scrapes share the one rendered text: several scrapes in flight at once
** cost no copy of it each (the process's resident set grows by less than
** one text), each finishes with the text it began with when the sampler
** swaps in a new one meanwhile, and the next scrape gets the new text.
** The serving thread asks the kernel for a short time slice. A scraper
** may keep its connection alive between scrapes.
*/
#include <dirent.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "testutil.h"

#include "exporter_http.h"

#define TEXT_BYTES (16u << 20) /* large enough that a copy shows in the resident set */
#define IN_FLIGHT 6            /* below the cap of one client, EXP_PER_CLIENT */

/* A text of TEXT_BYTES, every byte set from SEED, not all one value: the
** whole of it is resident before the measurement starts. */
static char *
make_text(unsigned seed)
{
    char *t = malloc(TEXT_BYTES);
    assert_non_null(t);
    for (size_t i = 0; i < TEXT_BYTES; i++)
        t[i] = (char)('a' + (i / 4096 + seed) % 26);
    t[TEXT_BYTES - 1] = '\n';
    return t;
}

/* Resident set of this process, bytes. */
static size_t
resident(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    unsigned long size = 0, res = 0;
    assert_int_equal(fscanf(f, "%lu %lu", &size, &res), 2);
    fclose(f);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* A connection handed to D, GET /metrics sent; the client's end. */
static int
scrape_start(struct MHD_Daemon *d, int k)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(40000 + k))};
    peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(MHD_add_connection(d, sv[1], (struct sockaddr *)&peer, sizeof peer),
                     MHD_YES);
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    assert_int_equal(send(sv[0], req, sizeof req - 1, MSG_NOSIGNAL), (ssize_t)(sizeof req - 1));
    return sv[0];
}

/* Read from FD until it has given at least WANT bytes (SIZE_MAX: until the
** end) or BUF (CAP) is full; the bytes read. Fails the test after 60 s
** without a byte (a hang, not a slow machine). */
static size_t
read_until(int fd, char *buf, size_t cap, size_t want)
{
    size_t got = 0;
    for (int waited = 0; got < want;) {
        struct pollfd p = {fd, POLLIN, 0};
        int n = poll(&p, 1, 100);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0) {
            assert_true(++waited < 600);
            continue;
        }
        ssize_t r = read(fd, buf + got, cap - got);
        if (r == 0)
            break;
        assert_true(r > 0);
        got += (size_t)r;
        if (got == cap)
            break; /* a first read, or an answer too long: the caller checks */
    }
    return got;
}

/* The body of the answer in BUF (LEN bytes): after the blank line, 200 OK. */
static const char *
body_of(const char *buf, size_t len, size_t *body_len)
{
    assert_true(len > 12);
    assert_memory_equal(buf, "HTTP/1.1 200", 12);
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    assert_non_null(end);
    *body_len = len - (size_t)(end + 4 - buf);
    return end + 4;
}

static void
scrapes_share_the_text(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    static struct exporter e;
    exporter_init(&e, 1.0);
    char *old_text = make_text(0), *new_text = make_text(7);
    char *expect_old = malloc(TEXT_BYTES), *expect_new = malloc(TEXT_BYTES);
    assert_non_null(expect_old);
    assert_non_null(expect_new);
    memcpy(expect_old, old_text, TEXT_BYTES);
    memcpy(expect_new, new_text, TEXT_BYTES);
    assert_true(exporter_set_text(&e, old_text, TEXT_BYTES));
    struct MHD_Daemon *d = exporter_start(&e, NULL, 0);
    assert_non_null(d);

    size_t cap = TEXT_BYTES + 65536;
    char *buf = malloc(cap);
    assert_non_null(buf);
    memset(buf, 0, cap); /* resident before the baseline */
    size_t before = resident();
    int fd[IN_FLIGHT];
    char head[IN_FLIGHT][256];
    size_t got[IN_FLIGHT];
    for (int k = 0; k < IN_FLIGHT; k++) {
        fd[k] = scrape_start(d, k);
        /* The first bytes of the answer: its handler ran and the answer is
         * queued; the rest waits in the daemon until the client reads. */
        got[k] = read_until(fd[k], head[k], sizeof head[k], 1);
    }
    size_t grown = resident() - before;
    /* A copy per scrape would be IN_FLIGHT texts (96 MiB); the socket
     * buffers are the kernel's, not the process's. */
    if (grown >= TEXT_BYTES)
        fail_msg("%d scrapes in flight grew the resident set by %zu bytes: the text is "
                 "copied per scrape (%u bytes)",
                 IN_FLIGHT, grown, TEXT_BYTES);

    /* The sampler swaps in a new text: the scrapes in flight finish with
     * theirs, byte for byte. */
    assert_true(exporter_set_text(&e, new_text, TEXT_BYTES));
    for (int k = 0; k < IN_FLIGHT; k++) {
        memcpy(buf, head[k], got[k]);
        size_t n = got[k] + read_until(fd[k], buf + got[k], cap - got[k], SIZE_MAX);
        close(fd[k]);
        size_t blen = 0;
        const char *body = body_of(buf, n, &blen);
        assert_int_equal(blen, TEXT_BYTES);
        assert_memory_equal(body, expect_old, TEXT_BYTES);
    }
    /* The next scrape gets the new one. */
    int f = scrape_start(d, IN_FLIGHT);
    size_t n = read_until(f, buf, cap, SIZE_MAX);
    close(f);
    size_t blen = 0;
    const char *body = body_of(buf, n, &blen);
    assert_int_equal(blen, TEXT_BYTES);
    assert_memory_equal(body, expect_new, TEXT_BYTES);

    MHD_stop_daemon(d);
    exporter_fini(&e);
    free(buf);
    free(expect_old);
    free(expect_new);
}

#define SMALL_TEXT "vram_up 1\n"

/* E serving SMALL_TEXT, its daemon started without a listening socket. */
static struct MHD_Daemon *
small_exporter(struct exporter *e)
{
    exporter_init(e, 1.0);
    char *text = strdup(SMALL_TEXT);
    assert_non_null(text);
    assert_true(exporter_set_text(e, text, strlen(text)));
    struct MHD_Daemon *d = exporter_start(e, NULL, 0);
    assert_non_null(d);
    return d;
}

/* One whole answer from FD into BUF (CAP): the head, then Content-Length
** bytes of body; its length, 0 if the connection ended first. */
static size_t
read_answer(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    const char *end = NULL;
    while (end == NULL) {
        size_t n = read_until(fd, buf + got, cap - 1 - got, 1);
        if (n == 0)
            return 0;
        got += n;
        buf[got] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    const char *cl = strcasestr(buf, "\r\nContent-Length: ");
    assert_non_null(cl);
    size_t want = (size_t)(end + 4 - buf) + (size_t)strtoul(cl + 18, NULL, 10);
    while (got < want) {
        size_t n = read_until(fd, buf + got, want - got, 1);
        if (n == 0)
            return 0;
        got += n;
    }
    return got;
}

/* A scraper keeps its connection: a second GET /metrics on it is
** answered too (libmicrohttpd closed it after an answer queued at the
** request's first call). */
static void
connection_kept_alive(void **state)
{
    (void)state;
    static struct exporter e;
    struct MHD_Daemon *d = small_exporter(&e);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(40100)};
    peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(MHD_add_connection(d, sv[1], (struct sockaddr *)&peer, sizeof peer),
                     MHD_YES);
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n";
    char buf[4096];
    for (int k = 0; k < 3; k++) {
        assert_int_equal(send(sv[0], req, sizeof req - 1, MSG_NOSIGNAL),
                         (ssize_t)(sizeof req - 1));
        size_t n = read_answer(sv[0], buf, sizeof buf);
        if (n == 0)
            fail_msg("request %d on the kept connection: the exporter closed it", k + 1);
        size_t blen = 0;
        const char *body = body_of(buf, n, &blen);
        assert_int_equal(blen, strlen(SMALL_TEXT));
        assert_memory_equal(body, SMALL_TEXT, blen);
    }
    close(sv[0]);
    MHD_stop_daemon(d);
    exporter_fini(&e);
}

/* The time slice of thread TID (0: the caller), ns. */
static uint64_t
slice_of(pid_t tid)
{
    struct exp_sched_attr a = {.size = sizeof a};
    assert_int_equal(syscall(SYS_sched_getattr, tid, &a, sizeof a, 0), 0);
    return a.sched_runtime;
}

/* The thread of this process named NAME, 0 if none. */
static pid_t
thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    pid_t found = 0;
    for (struct dirent *t; found == 0 && (t = readdir(d)) != NULL;) {
        char path[64], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%.16s/comm", t->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(comm, sizeof comm, f) != NULL && strncmp(comm, name, strlen(name)) == 0)
            found = (pid_t)atoi(t->d_name);
        fclose(f);
    }
    closedir(d);
    return found;
}

/* The serving thread asks for a short slice (EXP_SLICE_NS) and the caller
** keeps its own. Skipped where the kernel has no slice of choice for
** SCHED_OTHER (before Linux 6.12). */
static void
serving_thread_has_a_short_slice(void **state)
{
    (void)state;
    uint64_t mine = slice_of(0);
    struct exp_sched_attr probe = {.size = sizeof probe, .sched_runtime = EXP_SLICE_NS};
    if (syscall(SYS_sched_setattr, 0, &probe, 0) != 0 || slice_of(0) != EXP_SLICE_NS) {
        skip();
        return;
    }
    probe.sched_runtime = mine;
    assert_int_equal(syscall(SYS_sched_setattr, 0, &probe, 0), 0);
    assert_int_equal(slice_of(0), mine);

    static struct exporter e;
    struct MHD_Daemon *d = small_exporter(&e);
    pid_t serving = 0;
    for (int i = 0; serving == 0 && i < 200; i++) { /* the thread names itself once started */
        serving = thread_named("MHD-");
        if (serving == 0)
            usleep(10000);
    }
    assert_true(serving > 0);
    assert_int_equal(slice_of(serving), EXP_SLICE_NS);
    assert_int_equal(slice_of(0), mine);
    MHD_stop_daemon(d);
    exporter_fini(&e);
}

/* A client that is local user UID. */
static struct exp_client
user(uint32_t uid)
{
    return (struct exp_client){.kind = EXP_CLIENT_USER, .uid = uid};
}

/* Entry I of T: served, of client WHO, its request begun at SINCE. */
static void
put(struct exp_conn *t, size_t i, struct exp_client who, uint64_t since)
{
    t[i] = (struct exp_conn){.fd = (int)i + 3, .since_ns = since, .client = who};
}

/*
** The fairness rule: a client is served at most EXP_PER_CLIENT connections
** at once; with every one of EXP_MAX_CONNECTIONS taken, a client holding
** fewer than the biggest holder takes the place of that one's oldest
** request, and a client holding as many is refused. Refused connections
** and connections being closed count for nothing.
*/
static void
fairness_rule(void **state)
{
    (void)state;
    static struct exp_conn t[EXP_SLOTS];
    for (size_t i = 0; i < EXP_SLOTS; i++)
        t[i].fd = -1;
    int evict = 0;
    struct exp_client a = user(1000), b = user(1001), c = user(1002);
    assert_true(exporter_admit(t, EXP_SLOTS, &a, &evict));
    assert_int_equal(evict, -1);
    for (size_t i = 0; i < EXP_PER_CLIENT; i++)
        put(t, i, a, 100 + i);
    assert_false(exporter_admit(t, EXP_SLOTS, &a, &evict)); /* a 9th of A */
    assert_true(exporter_admit(t, EXP_SLOTS, &b, &evict));  /* B is another client */
    assert_int_equal(evict, -1);
    /* One of A's ends: A may have another. Refused ones do not count. */
    t[3].cut = true;
    assert_true(exporter_admit(t, EXP_SLOTS, &a, &evict));
    t[3].cut = false;
    t[3].refused = true;
    assert_true(exporter_admit(t, EXP_SLOTS, &a, &evict));
    t[3].refused = false;
    /* An address is a client too, and not the same as a user. */
    struct exp_client addr = {.kind = EXP_CLIENT_ADDRESS};
    addr.addr[15] = 7;
    assert_true(exporter_admit(t, EXP_SLOTS, &addr, &evict));

    /* Fill the served connections: A 8, then clients of 7 each (B, ...,
    ** the last of 1 each), oldest first. */
    size_t n = EXP_PER_CLIENT;
    for (uint32_t u = 2000; n < EXP_MAX_CONNECTIONS; u++)
        for (int k = 0; k < 7 && n < EXP_MAX_CONNECTIONS; k++, n++)
            put(t, n, user(u), 500 + n);
    /* Full: C (none) takes the place of A's oldest (A holds the most). */
    assert_true(exporter_admit(t, EXP_SLOTS, &c, &evict));
    assert_int_equal(evict, 0);
    /* Another of A is refused (A holds the most). */
    assert_false(exporter_admit(t, EXP_SLOTS, &a, &evict));
    /* A gives one up: now the 7-holders tie with A; one of 7 is refused,
    ** C still gets in, from the first biggest holder found. */
    t[0].cut = true;
    put(t, EXP_MAX_CONNECTIONS, c, 900);
    struct exp_client seven = user(2000);
    assert_false(exporter_admit(t, EXP_SLOTS, &seven, &evict));
    assert_true(exporter_admit(t, EXP_SLOTS, &c, &evict));
    assert_true(evict >= 1 && evict < EXP_MAX_CONNECTIONS);
    assert_true(exporter_client_same(&t[evict].client, &a));
    assert_int_equal(t[evict].since_ns, 101); /* A's oldest still open */
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scrapes_share_the_text),
        cmocka_unit_test(serving_thread_has_a_short_slice),
        cmocka_unit_test(connection_kept_alive),
        cmocka_unit_test(fairness_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
