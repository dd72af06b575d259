/* SPDX-License-Identifier: MIT */
/*
** exporter_client.c -- who is at the other end of one of the exporter's
** connections (exporter_http.h, "Clients"): a local user, by the uid that
** owns the peer's socket, or a remote host, by its address.
**
** A connection from this host comes from a socket in this network
** namespace, whatever address it uses (127.0.0.1, any of 127/8, ::1, the
** host's own public address), and every local user can open one: an
** address says nothing about who is behind it. The kernel knows the owner
** of each socket; NETLINK_SOCK_DIAG answers "which socket has local
** address A:P and remote address B:Q" with its uid (what `ss -e` prints),
** for any caller. Asked for the peer's end of our connection (its local
** end is our remote end), it finds it only when the peer is on this host
** and in this namespace: then the client is that uid; otherwise (a remote
** host, a container with a network of its own, a kernel that will not
** say) the client is the peer's address, as a remote host's always is.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "exporter_http.h"

/* An address in the form a client key keeps: IPv4 as the IPv4-mapped IPv6
** address, so that ::ffff:10.0.0.1 and 10.0.0.1 are one client. */
static bool
key_address(const struct sockaddr *sa, uint8_t out[16], uint16_t *port, int *family)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &a->sin_addr, 4);
        *port = a->sin_port;
        *family = AF_INET;
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        memcpy(out, &a->sin6_addr, 16);
        *port = a->sin6_port;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        *family = memcmp(out, mapped, sizeof mapped) == 0 ? AF_INET : AF_INET6;
        return true;
    }
    return false;
}

/*
** The uid owning the socket whose local end is PEER (PPORT) and remote end
** LOCAL (LPORT), both as key_address writes them, FAMILY AF_INET or
** AF_INET6; false when no such socket is in this namespace or the kernel
** does not answer. One request on a netlink socket of its own, closed
** after; the answer is waited for at most 100 ms (it comes in
** microseconds: the kernel answers within the send).
*/
static bool
socket_owner(int family, const uint8_t peer[16], uint16_t pport, const uint8_t local[16],
             uint16_t lport, uint32_t *uid)
{
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0)
        return false;
    struct {
        struct nlmsghdr h;
        struct inet_diag_req_v2 r;
    } req;
    memset(&req, 0, sizeof req);
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST;
    req.h.nlmsg_seq = 1;
    req.r.sdiag_family = (uint8_t)family;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = ~0u;
    /* The kernel finds the socket whose local end is (src, sport). */
    req.r.id.idiag_sport = pport;
    req.r.id.idiag_dport = lport;
    req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (family == AF_INET) {
        memcpy(req.r.id.idiag_src, peer + 12, 4);
        memcpy(req.r.id.idiag_dst, local + 12, 4);
    } else {
        memcpy(req.r.id.idiag_src, peer, 16);
        memcpy(req.r.id.idiag_dst, local, 16);
    }
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    bool found = false;
    if (sendto(nl, &req, sizeof req, 0, (struct sockaddr *)&kernel, sizeof kernel) ==
        (ssize_t)sizeof req) {
        struct pollfd p = {nl, POLLIN, 0};
        union {
            struct nlmsghdr h;
            char bytes[1024];
        } ans;
        ssize_t n = poll(&p, 1, 100) == 1 ? recv(nl, &ans, sizeof ans, 0) : -1;
        if (n >= (ssize_t)NLMSG_LENGTH(sizeof(struct inet_diag_msg)) &&
            ans.h.nlmsg_type == SOCK_DIAG_BY_FAMILY) {
            const struct inet_diag_msg *m = NLMSG_DATA(&ans.h);
            *uid = m->idiag_uid;
            found = true;
        }
    }
    close(nl);
    return found;
}

void
exporter_client_of(int fd, const struct sockaddr *peer, struct exp_client *out)
{
    memset(out, 0, sizeof *out);
    out->kind = EXP_CLIENT_UNKNOWN;
    if (peer == NULL)
        return;
    uint16_t pport = 0;
    int family = 0;
    if (!key_address(peer, out->addr, &pport, &family))
        return; /* not an IP connection (a socket pair): one client, unknown */
    out->kind = EXP_CLIENT_ADDRESS;
    struct sockaddr_storage me;
    socklen_t len = sizeof me;
    uint8_t local[16];
    uint16_t lport = 0;
    int lfamily = 0;
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&me, &len) != 0 ||
        !key_address((struct sockaddr *)&me, local, &lport, &lfamily))
        return;
    /* A socket of IPv6 family that carries IPv4 (a dual-stack listener)
    ** is found by the kernel under AF_INET6; ask both ways. */
    uint32_t uid = 0;
    int fam = peer->sa_family == AF_INET6 ? AF_INET6 : AF_INET;
    bool found = socket_owner(fam, out->addr, pport, local, lport, &uid);
    if (!found && fam == AF_INET6 && family == AF_INET)
        found = socket_owner(AF_INET, out->addr, pport, local, lport, &uid);
    if (found) {
        out->kind = EXP_CLIENT_USER;
        out->uid = uid;
    }
}

bool
exporter_client_same(const struct exp_client *a, const struct exp_client *b)
{
    if (a->kind != b->kind)
        return false;
    if (a->kind == EXP_CLIENT_USER)
        return a->uid == b->uid;
    if (a->kind == EXP_CLIENT_ADDRESS)
        return memcmp(a->addr, b->addr, sizeof a->addr) == 0;
    return true;
}

char *
exporter_client_name(const struct exp_client *c, char *buf, size_t len)
{
    if (c->kind == EXP_CLIENT_USER) {
        snprintf(buf, len, "local user %u", (unsigned)c->uid);
    } else if (c->kind == EXP_CLIENT_ADDRESS) {
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        char a[INET6_ADDRSTRLEN] = "?";
        if (memcmp(c->addr, mapped, sizeof mapped) == 0)
            inet_ntop(AF_INET, c->addr + 12, a, sizeof a);
        else
            inet_ntop(AF_INET6, c->addr, a, sizeof a);
        snprintf(buf, len, "address %s", a);
    } else {
        snprintf(buf, len, "an unknown client");
    }
    return buf;
}
