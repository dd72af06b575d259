/* SPDX-License-Identifier: MIT */
/*
** ledger.h -- the shared record of a group's GPU memory use, so that the
** processes of one job share one quota.
**
** One file per (user, group): /dev/shm/vram-<uid>/<group>, in a directory
** of that user (mode 0700) so that no other user can take a group's name;
** when another user holds the directory's name, /dev/shm/vram-<uid>.<k>,
** the lowest such directory of the user's (docs/LEDGER.md).
** It holds the devices seen (by GPU UUID) and one entry per member
** process: pid, start time (so a recycled pid is not mistaken for it),
** command name, and per device the bytes it holds now and at its peak.
**
** No locks: a member reserves by adding the bytes to its own entry and
** then summing the group's entries; over the limit, it takes them back
** and the reservation is refused. Of two racing reservations the later
** one always sees the earlier, so the group never passes its limit, and a
** member stopped (SIGSTOP, a debugger) or killed at any instruction holds
** nothing others wait for: its entry is exactly its share, freed by any
** member or monitor once the process is dead (always before a refusal,
** otherwise at most every 100 ms; a member watches the others it judged
** alive through pidfds, so a look costs one poll, not a /proc read per
** member). Monitors read without writing
** anything a member needs. docs/LEDGER.md has the layout and the rules.
**
** Thread-safe; fork: the child's handles are reset by the ledger's own
** fork handler, and it gets a fresh entry at its first reservation (the
** parent's usage stays the parent's). No function here calls
** the CUDA driver, exits, or prints: errors are statuses with a line in
** vram_last_error().
*/
#ifndef VRAM_LEDGER_LEDGER_H
#define VRAM_LEDGER_LEDGER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "vram.h"

#define LEDGER_MAX_DEVICES 16
#define LEDGER_MAX_PROCS 512
#define LEDGER_UUID_LEN 48
#define LEDGER_GROUP_LEN 64
#define LEDGER_COMM_LEN 32

struct ledger;

/* A user's ledger directory: SEQ 0 is /dev/shm/vram-<uid>; SEQ k > 0 the
** fallback /dev/shm/vram-<uid>.<k>, used when other users hold the names
** before it (docs/LEDGER.md, "The directory"). */
struct ledger_dir {
    uid_t uid;
    uint32_t seq;
};

/* One process's use of one device, bytes. */
struct ledger_use {
    uint64_t used;
    uint64_t peak;
};

/* A copy of one process entry. */
struct ledger_proc {
    pid_t pid;
    uint64_t start_time; /* clock ticks after boot, /proc/PID/stat field 22 */
    uid_t uid;
    char comm[LEDGER_COMM_LEN];
    struct ledger_use dev[LEDGER_MAX_DEVICES];
    uint64_t pinned; /* bytes of page-locked host memory it holds (ledger_host_add) */
    uint64_t rss;    /* bytes resident (/proc/PID/stat), read by a monitor's snapshot
                        as it judges the process alive; 0 in a member's, or unread */
};

/* A copy of a whole ledger (for vram top/stat and OOM lines). Each
** process's identity is consistent (read between two equal generations);
** each number is one atomic read, and a group's use is the sum of its
** processes' uses as copied. */
struct ledger_snapshot {
    char group[LEDGER_GROUP_LEN];
    bool stale; /* an entry kept changing while it was copied: it is left out */
    int n_devices;
    char uuid[LEDGER_MAX_DEVICES][LEDGER_UUID_LEN];
    uint64_t limit[LEDGER_MAX_DEVICES]; /* the quota last set for the device; 0 = none */
    uint64_t used[LEDGER_MAX_DEVICES];  /* the group's total now */
    uint64_t refusals[LEDGER_MAX_DEVICES]; /* allocations refused by the quota, ever */
    /* The most the group's members held on the device at once, ever,
    ** bytes: kept by the members at each grant, so exact however short
    ** they lived (short only by an allocation of a member killed inside
    ** one grant or release: docs/LEDGER.md, L5). */
    uint64_t peak[LEDGER_MAX_DEVICES];
    uint64_t users[LEDGER_MAX_DEVICES]; /* members granted bytes on it, ever */
    int n_procs;
    struct ledger_proc procs[LEDGER_MAX_PROCS];
};

/*
** Attach to GROUP's ledger, creating it (and the user's directory) if
** needed, and add this process's entry. GROUP: letters, digits, '.', '_',
** '-', 1..63 characters, not "." or ".." (VRAM_E_CONFIG otherwise).
** VRAM_E_IO when the file cannot be created or mapped, when the directory
** or the file is a symbolic link, belongs to another user or has other
** permissions (the line names it and its owner), or when the ledger is
** full (LEDGER_MAX_PROCS live processes).
** Concurrent creators agree on one file. One entry per process: a second
** open in the same program shares it; an entry left by this pid before an
** execve() (whose memory the driver freed) is taken over with zero use.
*/
vram_status ledger_open(const char *group, struct ledger **out);

/* Detach (the entry stays until the process exits: see ledger_leave).
** NULL does nothing. */
void ledger_close(struct ledger *l);

/* Remove this process's entry now (its usage goes back to the group). */
void ledger_leave(struct ledger *l);

/*
** In a child after fork(): give the child its own, empty entry. The entry
** is made at the child's first reservation, so that children that never
** allocate (data-loader workers, fork+exec) take no entry; until then the
** child holds nothing and the parent's entry stays the parent's. Takes no
** lock and allocates nothing: safe in a pthread_atfork child handler.
** The ledger's own fork handler does this for every member's handle
** before the child runs; a call is needed only in a child made without
** fork handlers (a raw clone). VRAM_E_IO if /proc/self/stat cannot be
** read (the handle then takes the child's pid with no start time).
*/
vram_status ledger_after_fork(struct ledger *l);

/*
** Unlink the group's file if no live process has an entry in it (dead ones
** are reclaimed first); returns true if it is gone. Safe against a process
** joining at the same moment: the file is marked "removing" first, a
** joiner that sees the mark turns it back (and the removal is abandoned),
** and one that sees it removed opens the group anew. Called at
** process exit by the preload library and by `vram run`, so /dev/shm does
** not fill up with the ledgers of finished jobs, and by the monitors for
** groups whose members are all gone. With a reader's handle the removal
** runs in a child process (fork), which maps the file: a file its owner
** truncates meanwhile kills that child, never the caller, and the caller
** waits for it at most about a second (then it is killed, which the
** removal's steps allow at any instruction). Not for a process that
** forbids fork (the preload library uses members' handles only).
*/
bool ledger_remove_if_unused(struct ledger *l);

/*
** Reserve BYTES on the device UUID for this process: refused with
** VRAM_E_OOM when the group's use plus BYTES would pass LIMIT (0 = no
** limit: always granted, still counted). Dead members are reclaimed first.
** On refusal, *group_used (if not NULL) receives the group's use. LIMIT is
** also recorded as the device's quota for the monitoring commands.
** Other statuses: VRAM_E_INVALID (NULL, a UUID that is empty or of
** LEDGER_UUID_LEN characters or more, a handle of ledger_attach_existing),
** VRAM_E_NO_DEVICE (the ledger already holds LEDGER_MAX_DEVICES other
** devices), VRAM_E_IO (the ledger is full).
** Grants need no /proc read; dead members are looked for at most every
** 100 ms (asked every 64th reservation of a handle), and always before a
** refusal, so a dead member never causes one.
*/
vram_status ledger_reserve(struct ledger *l, const char *uuid, uint64_t bytes, uint64_t limit,
                           uint64_t *group_used);

/* Give back BYTES reserved on UUID by this process (after a failed driver
** call, or when the memory is freed). */
void ledger_release(struct ledger *l, const char *uuid, uint64_t bytes);

/*
** The same by the device's index in the ledger, for callers on a hot path
** (the preload library's hooks): ledger_device finds or adds device UUID
** (the statuses of ledger_reserve) and puts its index into *INDEX, which
** stays right for the life of the handle (records never move). The _at
** calls then skip the UUID's lookup; INDEX must come from ledger_device on
** the same handle (VRAM_E_INVALID if out of range). ledger_reserve_at
** does not record LIMIT: ledger_limit_set does, once per device (a
** reservation then touches no device record).
*/
vram_status ledger_device(struct ledger *l, const char *uuid, int *index);
void ledger_limit_set(struct ledger *l, int index, uint64_t limit);
vram_status ledger_reserve_at(struct ledger *l, int index, uint64_t bytes, uint64_t limit,
                              uint64_t *group_used);
void ledger_release_at(struct ledger *l, int index, uint64_t bytes);
uint64_t ledger_group_used_at(struct ledger *l, int index);

/*
** Count BYTES more (ledger_host_add) or fewer (ledger_host_sub, never
** below zero) of page-locked host memory that this process holds through
** the driver, for the monitoring commands. Not a quota: never refused,
** and not part of any device's use. ledger_host_add makes the process's
** entry if it has none yet (VRAM_E_IO when the ledger is full;
** VRAM_E_INVALID for a monitoring handle).
*/
vram_status ledger_host_add(struct ledger *l, uint64_t bytes);
void ledger_host_sub(struct ledger *l, uint64_t bytes);

/*
** The resident set of process PID, bytes (/proc/PID/stat field 24, in
** pages), if PID still has START_TIME (field 22; 0: any process of that
** pid). False when it is gone, another process now has the pid, or /proc
** cannot be read. For the monitors: a process is never asked to report it.
*/
bool ledger_proc_resident(pid_t pid, uint64_t start_time, uint64_t *bytes);

/* The group's use of UUID now, bytes (dead members reclaimed first; a
** reader's handle leaves them out, each judged through /proc); 0 for a
** device never seen, or a file a reader cannot read. */
uint64_t ledger_group_used(struct ledger *l, const char *uuid);

/* Copy the whole ledger into OUT (a member's handle reclaims dead members
** first; a reader's judges each process as it copies it, one /proc read
** for its liveness and its resident set, and leaves the dead out). A
** reader's: VRAM_E_IO with one line naming the file when it is no longer
** a ledger of this version (cut short, rewritten), VRAM_E_NO_DEVICE when
** it was removed. */
vram_status ledger_snapshot(struct ledger *l, struct ledger_snapshot *out);

/*
** Open GROUP's ledger of the calling user only if it exists, without
** adding an entry (for the monitoring commands and `vram run --report`):
** a reader's handle. VRAM_E_NO_DEVICE if there is none. A reader's handle
** never maps the file: it reads it with pread, so that whatever its owner
** does to it (truncating it, growing it, filling it with anything,
** replacing it) at any moment costs a reader at most a status with one
** line (VRAM_E_IO), never a signal, a hang or a wrong read. It writes
** nothing (its snapshots leave dead members out instead of reclaiming
** them) but in ledger_remove_if_unused, which it does in a child process.
*/
vram_status ledger_attach_existing(const char *group, struct ledger **out);

/* The same for ledger GROUP in directory DIR (of any user: for a monitor
** running as root, or a reader of the host's policy). */
vram_status ledger_attach_in(const struct ledger_dir *dir, const char *group,
                             struct ledger **out);

/* Whether L still reads or maps its group's ledger: the name in its
** directory still names the file it opened, a regular file of that user
** of the expected size (one lstat; a member's handle also checks that the
** file is not marked removed). A monitor keeps its handles across samples
** while this holds, instead of opening every ledger at every sample. */
bool ledger_current(const struct ledger *l);

/* The group ledgers of the calling user, in the directory its processes
** use: names into GROUPS (MAX of them, LEDGER_GROUP_LEN each, sorted); *n
** receives the count (at most MAX: more are left out). Entries that are
** not regular files of the user are skipped. ledger_list_in: the same for
** directory DIR. */
vram_status ledger_list(char (*groups)[LEDGER_GROUP_LEN], int max, int *n);
vram_status ledger_list_in(const struct ledger_dir *dir, char (*groups)[LEDGER_GROUP_LEN],
                           int max, int *n);

/* The ledger directories in /dev/shm of user ONLY ((uid_t)-1: of every
** user) that are valid (a real directory owned by the uid in its name,
** writable by nobody else): DIRS (MAX), *n, sorted by uid and then seq
** (of one user's, the first is the one its processes use). Names of that
** form that are not valid (another user's squat) are left out. */
vram_status ledger_list_dirs(uid_t only, struct ledger_dir *dirs, int max, int *n);

/*
** What the listing of a directory depends on: an entry added, removed or
** renamed changes its times (and its size, on tmpfs), a chmod or chown its
** change time, a replacement its inode. A monitor sampling at 10 Hz lists
** again only when the stamp changed (ledger_stamp_still): listing the
** ledgers and checking each entry's type and owner at every sample was
** 15 % of `vram top`'s own CPU time with 200 processes in 20 groups (0.59
** -> 0.50 % of a core at 10 Hz on a loaded 2-CPU VM, medians of 5).
*/
struct ledger_stamp {
    uint64_t ino, size, mode, uid;
    int64_t mtime_ns, ctime_ns;
    int64_t taken_ns; /* CLOCK_REALTIME when the stamp was taken */
};

/* The stamp of ledger directory DIR, or (DIR NULL) of /dev/shm, which
** holds the directories; false when it is not there (or not a directory). */
bool ledger_dir_stamp(const struct ledger_dir *dir, struct ledger_stamp *out);

/* Whether stamp NOW is stamp THEN's, and THEN was taken when the
** directory had been still long enough (LEDGER_STILL_NS) that a later
** change cannot share its times: file times come from a clock that ticks
** coarsely (a jiffy), so a change in the same tick as the one before would
** leave them as they were. */
bool ledger_stamp_still(const struct ledger_stamp *then, const struct ledger_stamp *now);

#endif
