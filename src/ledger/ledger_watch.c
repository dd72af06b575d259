/* SPDX-License-Identifier: MIT */
/*
** ledger_watch.c -- a member's watch over the group's other members, so
** that a look for the dead costs one system call however many members
** there are. Judging a member through /proc (ledger_proc.c) costs an
** open, a read and a close, several microseconds; the preload library
** looks at every cuMemGetInfo, and with N other members that was N /proc
** reads a call. Here each member judged alive gets a pidfd (pidfd_open,
** Linux 5.3+), which becomes readable when its process ends, and a look
** polls them all at once. A pidfd is a hint: an entry whose pidfd reports
** is judged again through /proc before anything is freed, so a descriptor
** the host program closed (or reused) can cost a judgment, never a live
** member's share.
**
** Kept only for members of this process's pid namespace (another
** namespace's pid names another process here), and at most WATCH_FDS
** descriptors a process: the host program's own need for descriptors
** comes first. Members beyond are judged through /proc at each look, as
** before.
*/
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ledger/ledger_internal.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on every architecture */
#endif

/* At most this many pidfds in one process, whatever its handles, and no
** more than 1/16 of its descriptor limit (64 under the usual 1024). */
#define WATCH_FDS 64

static _Atomic int fds_held;     /* by every watch of this process */
static _Atomic int fds_max = -1; /* -1: not yet asked */

struct ledger_watch {
    _Atomic bool busy;               /* a thread is looking with this watch */
    uint64_t word[LEDGER_MAX_PROCS]; /* the owner word entry I was judged alive under */
    int fd[LEDGER_MAX_PROCS];        /* its pidfd; -1 none */
    /* The current look's poll set: descriptors and their entries. */
    int n_poll;
    struct pollfd pfd[WATCH_FDS];
    int entry[WATCH_FDS];
};

struct ledger_watch *
ledger_watch_new(void)
{
    struct ledger_watch *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    for (int i = 0; i < LEDGER_MAX_PROCS; i++)
        w->fd[i] = -1;
    if (atomic_load(&fds_max) < 0) {
        struct rlimit rl;
        int max = WATCH_FDS;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            rl.rlim_cur / 16 < WATCH_FDS)
            max = (int)(rl.rlim_cur / 16);
        atomic_store(&fds_max, max);
    }
    return w;
}

/* Close every pidfd and forget every judgment (async-signal-safe: a fork
** child's handler calls it, with one thread). */
void
ledger_watch_forget_all(struct ledger_watch *w)
{
    if (w == NULL)
        return;
    for (int i = 0; i < LEDGER_MAX_PROCS; i++)
        ledger_watch_drop(w, i);
    w->n_poll = 0;
    atomic_store(&w->busy, false);
}

void
ledger_watch_free(struct ledger_watch *w)
{
    ledger_watch_forget_all(w);
    free(w);
}

bool
ledger_watch_begin(struct ledger_watch *w)
{
    if (atomic_exchange(&w->busy, true))
        return false;
    w->n_poll = 0;
    return true;
}

void
ledger_watch_end(struct ledger_watch *w)
{
    atomic_store(&w->busy, false);
}

/* Entry I's descriptor is not ours to close (see ledger_watch_poll). */
void
ledger_watch_forget(struct ledger_watch *w, int i)
{
    if (w->fd[i] >= 0)
        atomic_fetch_sub(&fds_held, 1);
    w->fd[i] = -1;
    w->word[i] = 0;
}

void
ledger_watch_drop(struct ledger_watch *w, int i)
{
    if (w->fd[i] >= 0)
        close(w->fd[i]);
    ledger_watch_forget(w, i);
}

bool
ledger_watch_has(struct ledger_watch *w, int i, uint64_t word)
{
    if (w->fd[i] < 0 || w->word[i] != word) {
        ledger_watch_drop(w, i); /* another process in the entry now */
        return false;
    }
    if (w->n_poll < WATCH_FDS) {
        w->pfd[w->n_poll] = (struct pollfd){.fd = w->fd[i], .events = POLLIN};
        w->entry[w->n_poll++] = i;
    }
    return true;
}

int
ledger_watch_open(struct ledger_watch *w, int32_t pid)
{
    (void)w;
    if (pid <= 0)
        return -1;
    if (atomic_fetch_add(&fds_held, 1) >= atomic_load(&fds_max)) {
        atomic_fetch_sub(&fds_held, 1);
        return -1;
    }
    long fd = syscall(SYS_pidfd_open, (long)pid, 0L); /* close-on-exec by itself */
    if (fd < 0)
        atomic_fetch_sub(&fds_held, 1);
    return fd >= 0 ? (int)fd : -1;
}

void
ledger_watch_close(int fd)
{
    if (fd >= 0) {
        close(fd);
        atomic_fetch_sub(&fds_held, 1);
    }
}

void
ledger_watch_keep(struct ledger_watch *w, int i, uint64_t word, int fd)
{
    ledger_watch_drop(w, i); /* counted in FDS_HELD since it was opened */
    w->fd[i] = fd;
    w->word[i] = word;
}

int
ledger_watch_poll(struct ledger_watch *w, int *ended, int max)
{
    if (w->n_poll == 0)
        return 0;
    int r;
    do
        r = poll(w->pfd, (nfds_t)w->n_poll, 0);
    while (r < 0 && errno == EINTR);
    int n = 0;
    for (int k = 0; r > 0 && k < w->n_poll && n < max; k++) {
        if (w->pfd[k].revents & POLLNVAL)
            ledger_watch_forget(w, w->entry[k]); /* closed behind our back: judged anew */
        else if (w->pfd[k].revents != 0)
            ended[n++] = w->entry[k];
    }
    return n;
}
