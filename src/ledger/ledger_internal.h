/* SPDX-License-Identifier: MIT */
/*
** ledger_internal.h -- what the three parts of the group ledger share:
** the layout of the shared file (ledger_file.c maps it, ledger.c keeps the
** accounts in it) and the process identity read from /proc
** (ledger_proc.c). Not for use outside src/ledger/ledger*.c.
**
** Every word that more than one process writes is an atomic; no part of
** the file is ever guarded by a lock, so that no process waits on another
** one's progress (docs/LEDGER.md, "No waiting").
*/
#ifndef VRAM_LEDGER_LEDGER_INTERNAL_H
#define VRAM_LEDGER_LEDGER_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ledger/ledger.h"
#include "ledger/ledger_testing.h"

/* "VRAMLDG6": stored last, with release order, once the header is written.
** The first three words of the header (magic, version, size) keep their
** place in every version, so that a reader can name the version of a file
** it cannot read. Version 4 added each entry's pinned host memory;
** version 5 put the three counters of one device side by side (struct
** slot_use); version 6 gave each device the group's bytes in use at once,
** their peak and the members that used it (struct device, L5). */
#define LEDGER_MAGIC UINT64_C(0x5652414d4c444736)
#define LEDGER_MAGIC_PREFIX UINT64_C(0x5652414d4c444700) /* "VRAMLDG" and any digit */
#define LEDGER_VERSION 6

/* The size of a cache line: what a reservation touches is counted in them. */
#define LEDGER_LINE 64

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the ledger's words must be lock-free across processes");

/*
** A slot's owner word: state in bits 0-1, a generation in bits 2-31 (new
** at every claim, so that a compare-and-swap on a slot that was freed and
** taken again in between fails), the owner's pid in bits 32-63.
*/
enum slot_state { SLOT_FREE = 0, SLOT_INIT = 1, SLOT_LIVE = 2 };

static inline unsigned
owner_state(uint64_t w)
{
    return (unsigned)(w & 3u);
}

static inline uint32_t
owner_gen(uint64_t w)
{
    return (uint32_t)(w >> 2) & 0x3fffffffu;
}

static inline int32_t
owner_pid(uint64_t w)
{
    return (int32_t)(uint32_t)(w >> 32);
}

static inline uint64_t
owner_word(unsigned state, uint32_t gen, int32_t pid)
{
    return ((uint64_t)(uint32_t)pid << 32) | ((uint64_t)(gen & 0x3fffffffu) << 2) | state;
}

/*
** One member's use of one device, bytes. The three counters a reservation
** changes share a cache line: a hooked allocation runs right after a
** driver call that has walked the CPU's caches, and each line it touches
** then costs a miss (BENCHMARKS.md, "Preload hook cost").
*/
struct slot_use {
    _Atomic uint64_t used;
    /* Bytes of reservations being checked: counted against the limit, not
    ** yet shown as in use (a stopped or refused claim never shows). */
    _Atomic uint64_t pending;
    _Atomic uint64_t peak;
    uint64_t unused; /* two devices to a line */
};

/* One member process. The identity fields are written only while the slot
** is SLOT_INIT by the process claiming it (and the image by that process
** after an execve); the uses only by the owner (its threads: atomic
** read-modify-writes). Readers check the owner word before and after. */
struct slot {
    _Atomic uint64_t owner;
    _Atomic uint64_t uid;        /* real uid, for display */
    _Atomic uint64_t start_time; /* clock ticks after boot, /proc/PID/stat field 22 */
    _Atomic uint64_t pidns;      /* inode of its pid namespace; 0 = unknown */
    _Atomic uint64_t image;      /* AT_RANDOM of its program image: new at every execve */
    /* Bytes of page-locked host memory the process holds through the
    ** driver (cuMemAllocHost, cuMemHostAlloc, cuMemHostRegister): shown,
    ** never a quota. */
    _Atomic uint64_t pinned;
    /* Indexed like the devices, from the entry's second line: with the
    ** owner word's line, the first two devices' uses are one aligned pair
    ** of lines, which a CPU's adjacent-line prefetch fetches together. */
    _Alignas(LEDGER_LINE) struct slot_use use[LEDGER_MAX_DEVICES];
    _Atomic uint64_t comm[LEDGER_COMM_LEN / 8]; /* the command name, NUL-padded */
};

_Static_assert(sizeof(struct slot_use) * 2 == LEDGER_LINE, "two devices' uses a line");
_Static_assert(sizeof(struct slot) % (2 * LEDGER_LINE) == 0, "slots are whole pairs of lines");

/* One device. TAG (a hash of the UUID, never 0) claims the record; the
** UUID string follows, written by whoever finds it missing (the same
** bytes). The second line holds what reservations change: what the
** group's members were granted and have not given back (L5: for the
** report of the group's peak; the quota itself stands on L1, never on
** it), its peak, the refusals and the members that used the device. */
struct device {
    _Atomic uint64_t tag;
    _Atomic char uuid[LEDGER_UUID_LEN];
    _Atomic uint64_t limit; /* bytes; 0 = none */
    _Alignas(LEDGER_LINE) _Atomic uint64_t in_use; /* bytes, all members (L5) */
    _Atomic uint64_t peak;     /* the most IN_USE has been, bytes */
    _Atomic uint64_t refusals; /* count, ever */
    _Atomic uint64_t users;    /* members granted bytes on it, ever (an execve: a new one) */
};

_Static_assert(sizeof(struct device) == 2 * LEDGER_LINE, "a device record is two lines");

/* The file's life: ACTIVE (0, what a fresh zero-filled file is), REMOVING
** (a remover is checking that it is unused; any joiner may veto it back to
** ACTIVE), REMOVED (unlinked or about to be: joiners open the group anew). */
enum file_state { FILE_ACTIVE = 0, FILE_REMOVING = 1, FILE_REMOVED = 2 };

/* The whole file. All zeros is a valid empty ledger but for the header. */
struct layout {
    _Atomic uint64_t magic; /* LEDGER_MAGIC once the header is written */
    _Atomic uint32_t version;
    _Atomic uint32_t size; /* sizeof(struct layout), bytes */
    _Atomic uint32_t state;   /* enum file_state */
    _Atomic int32_t n_slots;  /* slots at index >= n_slots are free: scans stop there */
    _Atomic uint64_t reclaim_ns; /* CLOCK_MONOTONIC of the last look for the dead */
    _Atomic char group[LEDGER_GROUP_LEN];
    struct device dev[LEDGER_MAX_DEVICES];
    _Alignas(2 * LEDGER_LINE) struct slot slots[LEDGER_MAX_PROCS];
};

_Static_assert(sizeof(struct layout) < UINT32_MAX, "layout size fits its field");

/* What identifies a process in the ledger. */
struct self {
    pid_t pid;
    uid_t uid;
    uint64_t start_time; /* clock ticks after boot */
    uint64_t pidns;      /* 0 = unknown */
    uint64_t image;      /* 0 = unknown */
    char comm[LEDGER_COMM_LEN];
};

/* ---- ledger_proc.c: /proc ---- */

/* This process's pid, cached (refreshed in fork children). */
pid_t ledger_my_pid(void);
/* Fill *OUT with this process's identity (async-signal-safe but for the
** error line). */
vram_status ledger_self_read(struct self *out);
/* Whether the process PID with START_TIME in pid namespace PIDNS is dead
** (gone, its pid recycled, or a zombie); in doubt alive. START_TIME 0:
** only whether the pid exists. */
bool ledger_proc_dead(int32_t pid, uint64_t start_time, uint64_t pidns, uint64_t my_pidns);
/* The same, and the resident set of a live one into *RSS (bytes; 0 when
** not read), from the same read of /proc/PID/stat. */
bool ledger_proc_judge(int32_t pid, uint64_t start_time, uint64_t pidns, uint64_t my_pidns,
                       uint64_t *rss);
/* The same through *FD, the process's /proc/PID/statm kept open between
** the judgments of one process: -1 judges it in full (stat) and, when KEEP
** and it is alive with a START_TIME, opens *FD for the next ones. A kept
** descriptor names the process, not its number: once it is reaped,
** reading says ESRCH (dead) even if the pid is reused; while it has memory
** it is alive, and statm gives its resident set. That saves the path walk,
** open and close of each judgment, and stat's cost. On any doubt *FD is
** closed (-1) and the next judgment is a full one. */
bool ledger_proc_judge_fd(int32_t pid, uint64_t start_time, uint64_t pidns, uint64_t my_pidns,
                          int *fd, bool keep, uint64_t *rss);

/* ---- ledger_watch.c: pidfds of the members judged alive ---- */

struct ledger_watch;
/* A watch with nothing watched; NULL when out of host memory. */
struct ledger_watch *ledger_watch_new(void);
/* Close every pidfd and free it. NULL-safe. */
void ledger_watch_free(struct ledger_watch *w);
/* Close every pidfd and forget every entry (async-signal-safe: for a fork
** child, whose descriptors name the parent's watch). NULL-safe. */
void ledger_watch_forget_all(struct ledger_watch *w);
/* Start a look (false: another thread is looking with W), and end it. */
bool ledger_watch_begin(struct ledger_watch *w);
void ledger_watch_end(struct ledger_watch *w);
/* Whether entry I is watched under owner word WORD; if so it joins this
** look's poll, if not any old watch of I is dropped (closed). */
bool ledger_watch_has(struct ledger_watch *w, int i, uint64_t word);
/* A pidfd of process PID, or -1 (no pidfd_open, or W holds its most).
** Open it before the judgment that makes it the entry's: then it names
** the process judged, not a later one with the same pid. */
int ledger_watch_open(struct ledger_watch *w, int32_t pid);
/* Close FD from ledger_watch_open, not kept (its process was judged dead). */
void ledger_watch_close(int fd);
/* Entry I (owner word WORD) was judged alive: FD is its pidfd now. */
void ledger_watch_keep(struct ledger_watch *w, int i, uint64_t word, int fd);
/* Stop watching entry I, closing its pidfd; or without closing it, when a
** descriptor reported the end of a live process (not the pidfd opened:
** the host program closed it and reused the number). */
void ledger_watch_drop(struct ledger_watch *w, int i);
void ledger_watch_forget(struct ledger_watch *w, int i);
/* Poll this look's set without waiting: into ENDED (at most MAX) the
** entries whose process may have ended; their count. */
int ledger_watch_poll(struct ledger_watch *w, int *ended, int max);

/* ---- ledger_file.c: the directory and the file ---- */

/* A ledger file opened (ledger_file_open). */
struct ledger_file {
    struct ledger_dir dir; /* the directory it is in */
    struct layout *map;    /* a writer's mapping; NULL for a reader */
    int fd;                /* a reader's descriptor, read with pread; -1 for a writer */
    uint64_t ino;          /* its inode */
};

/* Directory D's path ("/dev/shm/vram-<uid>" or "/dev/shm/vram-<uid>.<seq>") into OUT. */
void ledger_dir_path(char *out, size_t cap, const struct ledger_dir *d);
/*
** Open GROUP's file of user UID into *OUT: in directory AT, or (AT NULL)
** in the directory the user's processes all find (the lowest valid one;
** made if CREATE and there is none). WRITABLE: the file is made if CREATE
** and missing, given all its blocks and mapped for writing, its header
** written if it is not yet; else it is opened for reading with pread (a
** reader never maps a file its owner may truncate) and its header checked.
*/
vram_status ledger_file_open(const struct ledger_dir *at, uid_t uid, const char *group,
                             bool create, bool writable, struct ledger_file *out);
/* The line (VRAM_E_IO) for GROUP's file in directory path DIR whose header
** has MAGIC and VERSION, not this build's. */
vram_status ledger_file_alien(const char *dir, const char *group, uint64_t magic,
                              uint32_t version);
/* Unlink GROUP's file in directory D if the name still names inode INO,
** then remove D if it is empty. */
void ledger_file_unlink(const struct ledger_dir *d, const char *group, uint64_t ino);
/* Whether GROUP's file in directory D is still inode INO: a regular file
** of D's uid, of the layout's size, not a link (one lstat). */
bool ledger_file_same(const struct ledger_dir *d, const char *group, uint64_t ino);
/* GROUP's file in directory D mapped for writing, if it is still inode
** INO, a regular file of D's uid, mode 0600, of this version's layout;
** else NULL. Says nothing and asks no user database: for a fork child
** (ledger_remove_if_unused of a reader's handle). */
struct layout *ledger_file_map_quiet(const struct ledger_dir *d, const char *group,
                                     uint64_t ino);
/* Whether NAME is a valid group name. */
bool ledger_group_valid(const char *name);

/* ---- fault points, for tests (ledger_testing.h) ---- */
#ifdef VRAM_LEDGER_FAULTS
void ledger_fault_at(int point);
#define ledger_fault(point) ledger_fault_at(point)
#else
#define ledger_fault(point) ((void)0)
#endif

#endif
