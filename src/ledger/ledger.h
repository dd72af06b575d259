/*
** ledger.h -- the shared record of a group's GPU memory use, so that the
** processes of one job share one quota (the preload library, vram
** run, vram stat/top/exporter and the Slurm plug-in read and write it).
**
** One file per (user, group) in /dev/shm, mode 0600, owned by the user:
** "vram-<uid>-<group>". It holds a process-shared robust mutex, the
** devices seen (by GPU UUID) and one entry per live process: pid, the
** process's start time (so a recycled pid is not mistaken for it), its
** command name, and per device the bytes it holds now and at its peak.
**
** Reserve-then-allocate: a process reserves bytes under the mutex (refused
** when the group's total plus the request would pass the limit), then
** calls the driver, then releases the reservation if the driver failed.
** The mutex is robust: if a holder dies (SIGKILL) the next locker gets
** EOWNERDEAD, marks the state consistent and reclaims the dead entry, so
** nobody hangs. Entries of dead processes are also reclaimed by reserve
** (always before refusing, otherwise at most every 100 ms), and by
** ledger_group_used and ledger_snapshot (the monitoring commands).
** docs/LEDGER.md has the layout and the rules.
**
** Thread-safe; fork: the child calls ledger_after_fork() and gets a fresh
** entry (the parent's usage stays the parent's). No function here calls
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
};

/* A consistent copy of a whole ledger (for vram top/stat and OOM lines). */
struct ledger_snapshot {
    char group[LEDGER_GROUP_LEN];
    int n_devices;
    char uuid[LEDGER_MAX_DEVICES][LEDGER_UUID_LEN];
    uint64_t limit[LEDGER_MAX_DEVICES]; /* the quota last set for the device; 0 = none */
    uint64_t used[LEDGER_MAX_DEVICES];  /* the group's total now */
    uint64_t refusals[LEDGER_MAX_DEVICES]; /* allocations refused by the quota, ever */
    int n_procs;
    struct ledger_proc procs[LEDGER_MAX_PROCS];
};

/*
** Attach to GROUP's ledger, creating it if needed, and add this process's
** entry. GROUP: letters, digits, '.', '_', '-', 1..63 characters
** (VRAM_E_CONFIG otherwise). VRAM_E_IO when the file cannot be created or
** mapped, or belongs to another user or has other permissions than 0600
** (the line says which), or is full (LEDGER_MAX_PROCS live processes).
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
** VRAM_E_IO if /proc/self/stat cannot be read. (A child that skips this
** call is noticed by pid at its first reservation and treated alike.)
*/
vram_status ledger_after_fork(struct ledger *l);

/*
** Unlink the group's file if no live process has an entry in it (dead ones
** are reclaimed first); returns true if it is gone. Safe against a process
** opening the group at the same moment: the file is marked under its lock
** first, and openers that see the mark open the group anew. Called at
** process exit by the preload library and by `vram run`, so /dev/shm does
** not fill up with the ledgers of finished jobs.
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
** devices), VRAM_E_IO (the ledger is full, or its mutex cannot be taken).
** Grants need no /proc read; dead members are looked for at most every
** 100 ms, and always before a refusal, so a dead member never causes one.
*/
vram_status ledger_reserve(struct ledger *l, const char *uuid, uint64_t bytes, uint64_t limit,
                           uint64_t *group_used);

/* Give back BYTES reserved on UUID by this process (after a failed driver
** call, or when the memory is freed). */
void ledger_release(struct ledger *l, const char *uuid, uint64_t bytes);

/* The group's use of UUID now, bytes (dead members reclaimed first); 0
** for a device never seen, or if the mutex cannot be taken. */
uint64_t ledger_group_used(struct ledger *l, const char *uuid);

/* Copy the whole ledger into OUT (reclaiming dead members first). */
vram_status ledger_snapshot(struct ledger *l, struct ledger_snapshot *out);

/* Open GROUP's ledger only if it exists, without adding an entry (for the
** monitoring commands). VRAM_E_NO_DEVICE if there is none. */
vram_status ledger_attach_existing(const char *group, struct ledger **out);

/* Every group ledger of the calling user: names into GROUPS (MAX of them,
** LEDGER_GROUP_LEN each, sorted); *n receives the count (at most MAX: more
** are left out). Files of that name owned by another user are skipped. */
vram_status ledger_list(char (*groups)[LEDGER_GROUP_LEN], int max, int *n);

/* ---- for tests only ---- */

/* Take L's mutex and sleep forever holding it (tests kill the caller). */
void ledger_test_lock_and_hang(struct ledger *l);

/* Overwrite the start time recorded in this process's entry with T, as if
** its pid had been recycled by a new process. */
void ledger_test_set_start_time(struct ledger *l, uint64_t t);

#endif
