/* SPDX-License-Identifier: MIT */
/*
** ledger_testing.h -- test controls of the group ledger, kept out of its
** production contract (ledger.h). Each fault point is one relaxed load of
** a global on its path, in the tests' build of the ledger only
** (vram_ledger_faults, compiled with VRAM_LEDGER_FAULTS): the products'
** ledger has no fault points and no ledger_test_stop_at.
*/
#ifndef VRAM_LEDGER_LEDGER_TESTING_H
#define VRAM_LEDGER_LEDGER_TESTING_H

#include <stdint.h>

#include "ledger/ledger.h"

/* Places inside the ledger's critical steps where a test can stop the
** calling process (raise(SIGSTOP)) to show that nobody waits for it. */
enum ledger_fault_point {
    LEDGER_FAULT_NONE = 0,
    LEDGER_FAULT_CLAIMED,  /* a reservation added to its entry, not yet checked */
    LEDGER_FAULT_GRANTED,  /* a reservation checked, its peak not yet written */
    LEDGER_FAULT_RELEASE,  /* a release about to take bytes off its entry */
    LEDGER_FAULT_SLOT,     /* an entry taken (SLOT_INIT), its identity not yet written */
    LEDGER_FAULT_DEVICE,   /* a device's record taken, its UUID not yet written */
    LEDGER_FAULT_HEADER,   /* a new file's header written, its magic not yet set */
    LEDGER_FAULT_REMOVING, /* a removal marked, the entries not yet checked */
    LEDGER_FAULT_RECLAIM,  /* a look for the dead begun */
    LEDGER_FAULT_CHECKED,  /* a reservation found within its limit, not yet in use */
    LEDGER_FAULT_SUMMING,  /* a sum has read one entry's pending bytes, not its use */
    LEDGER_FAULT_COUNT
};

/* Stop (SIGSTOP) this process the next time it reaches POINT, once. */
void ledger_test_stop_at(enum ledger_fault_point point);

/* Overwrite the start time recorded in this process's entry with T, as if
** its pid had been recycled by a new process. */
void ledger_test_set_start_time(struct ledger *l, uint64_t t);

/* The members this process has judged through /proc so far (each a read
** of /proc/PID/stat or statm, or a kill(pid, 0)). */
uint64_t ledger_test_proc_reads(void);

#endif
