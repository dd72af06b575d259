/* SPDX-License-Identifier: MIT */
/*
** fuzz_exporter.c -- a libFuzzer target over `vram exporter`'s request
** handling: the same libmicrohttpd daemon, limits and handler as the
** command (tools/vram/exporter_http.c), started once without a listening
** socket; each input is written as a client's bytes into one end of a
** socket pair whose other end is handed to the daemon.
**
** The first input byte picks how: bit 0 set, the bytes are first parsed
** as a --listen address (exporter_parse_listen) instead; else the request
** is sent whole, and the client then closes its sending side.
** Invariants: the daemon answers within the deadline or closes; every
** answer begins with an HTTP status line; a well-formed GET /metrics gets
** 200 and the metrics text, any other path 404 and any other method 405.
** libmicrohttpd itself is not built with the fuzzer's coverage, so the
** search is guided by the handler's branches only: the corpus
** (tests/fuzz/corpus/exporter) holds the requests worth starting from.
** Built without libFuzzer, replay.c's main() runs the corpus once.
*/
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "exporter_http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char metrics_text[] = "# HELP vram_fuzz_up 1\nvram_fuzz_up 1\n";

static void
fail(const char *what, const uint8_t *data, size_t size)
{
    fprintf(stderr, "fuzz_exporter: invariant broken: %s, on %zu bytes: '%.*s'\n", what, size,
            (int)(size > 200 ? 200 : size), (const char *)data);
    abort();
}

static struct exporter exp_state;
static struct MHD_Daemon *daemon_once;

static struct MHD_Daemon *
daemon_get(void)
{
    if (daemon_once == NULL) {
        signal(SIGPIPE, SIG_IGN);
        exporter_init(&exp_state, 1.0);
        char *text = strdup(metrics_text);
        if (text == NULL)
            abort();
        exporter_set_text(&exp_state, text, strlen(text));
        daemon_once = exporter_start(&exp_state, NULL, 0);
        if (daemon_once == NULL) {
            fprintf(stderr, "fuzz_exporter: libmicrohttpd would not start\n");
            abort();
        }
    }
    return daemon_once;
}

/* Send DATA, then read the answer until the daemon closes; its length. */
static size_t
exchange(const uint8_t *data, size_t size, char *answer, size_t cap)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return 0;
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(40000)};
    peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (MHD_add_connection(daemon_get(), sv[1], (struct sockaddr *)&peer, sizeof peer) !=
        MHD_YES) {
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    size_t sent = 0, got = 0;
    bool wr_open = true;
    /* The deadline is EXP_REQUEST_DEADLINE_MS; twice that is a hang. */
    for (int rounds = 0; rounds < 2 * EXP_REQUEST_DEADLINE_MS / 10;) {
        if (wr_open && sent == size) {
            shutdown(sv[0], SHUT_WR);
            wr_open = false;
        }
        struct pollfd p = {sv[0], (short)(POLLIN | (wr_open ? POLLOUT : 0)), 0};
        int n = poll(&p, 1, 10);
        if (n == 0) {
            rounds++;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (wr_open && (p.revents & POLLOUT)) {
            ssize_t w = send(sv[0], data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN)
                wr_open = false; /* the daemon closed: it answered or refused */
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            char sink[4096];
            char *to = got < cap ? answer + got : sink;
            size_t room = got < cap ? cap - got : sizeof sink;
            ssize_t r = recv(sv[0], to, room, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                close(sv[0]);
                return got < cap ? got : cap;
            }
            if (r > 0 && got < cap)
                got += (size_t)r;
        }
    }
    close(sv[0]);
    fail("no answer and no close within twice the deadline", data, size);
    return 0;
}

static void
fuzz_listen(const uint8_t *data, size_t size)
{
    char text[256];
    size_t n = size < sizeof text - 1 ? size : sizeof text - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    struct sockaddr_storage ss;
    char why[160] = "";
    if (!exporter_parse_listen(text, &ss, why, sizeof why)) {
        if (why[0] == '\0' || strchr(why, '\n') != NULL)
            fail("a refused --listen is not one line", data, size);
    } else if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) {
        fail("a --listen address of no family", data, size);
    }
}

/* The status code of ANSWER (LEN bytes), or -1 if it has no status line. */
static int
status_of(const char *answer, size_t len)
{
    if (len < 12 || (memcmp(answer, "HTTP/1.1 ", 9) != 0 && memcmp(answer, "HTTP/1.0 ", 9) != 0))
        return -1;
    int code = 0;
    for (int k = 9; k < 12; k++) {
        if (answer[k] < '0' || answer[k] > '9')
            return -1;
        code = code * 10 + (answer[k] - '0');
    }
    return code;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1) {
        fuzz_listen(data + 1, size - 1);
        return 0;
    }
    data++;
    size--;
    static char answer[1 << 16];
    size_t len = exchange(data, size, answer, sizeof answer);
    if (len == 0)
        return 0; /* closed without an answer (an empty or cut request) */
    int code = status_of(answer, len);
    if (code < 0)
        fail("an answer without a status line", data, size);
    /* One request line the handler routes, with a Host header (required
     * by HTTP/1.1) and nothing else: its answer is known. */
    static const char get_metrics[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char get_other[] = "GET /other HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char post_metrics[] = "POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    if (size >= sizeof get_metrics - 1 && memcmp(data, get_metrics, sizeof get_metrics - 1) == 0) {
        if (code != 200 || memmem(answer, len, metrics_text, sizeof metrics_text - 1) == NULL)
            fail("GET /metrics did not answer 200 with the metrics", data, size);
    } else if (size >= sizeof get_other - 1 &&
               memcmp(data, get_other, sizeof get_other - 1) == 0) {
        if (code != 404)
            fail("GET of another path did not answer 404", data, size);
    } else if (size >= sizeof post_metrics - 1 &&
               memcmp(data, post_metrics, sizeof post_metrics - 1) == 0) {
        if (code != 405)
            fail("POST did not answer 405", data, size);
    }
    return 0;
}
