/* SPDX-License-Identifier: MIT */
/*
** ledger_fill.c -- a stand-in for a GPU job, for the monitoring tests
** (test_stat.sh, test_top.sh, test_exporter.sh): joins GROUP's ledger and
** reserves MIB MiB on the device UUID under a quota of LIMIT MiB, then
** asks for REFUSE MiB more (refused when it would pass the quota: one OOM
** refusal), then grows by GROW MiB every 200 ms, and holds until killed
** (at most 300 s, so that a forgotten helper ends by itself).
** Usage: ledger_fill GROUP UUID MIB LIMIT [GROW [REFUSE]]
** Prints "ready" once the first reservation holds. Exit 0, 1 on failure.
**
** ledger_fill --stopped GROUP UUID MIB: a member stopped for good in the
** middle of the ledger's critical step: it reserves MIB MiB, prints
** "ready", then stops itself (SIGSTOP) inside its next reservation, after
** its claim and before its check, and stays so until killed.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ledger/ledger.h"
#include "ledger/ledger_testing.h"

static uint64_t
mib_arg(const char *s)
{
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0') {
        fprintf(stderr, "ledger_fill: '%s': not a number\n", s);
        exit(1);
    }
    return (uint64_t)v << 20;
}

static int
stopped(const char *group, const char *uuid, uint64_t bytes)
{
    struct ledger *l = NULL;
    if (ledger_open(group, &l) != VRAM_OK || ledger_reserve(l, uuid, bytes, 0, NULL) != VRAM_OK) {
        fprintf(stderr, "ledger_fill: %s\n", vram_last_error());
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    ledger_test_stop_at(LEDGER_FAULT_CLAIMED);
    ledger_reserve(l, uuid, bytes, 0, NULL);
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--stopped") == 0)
        return stopped(argv[2], argv[3], mib_arg(argv[4]));
    if (argc < 5 || argc > 7) {
        fprintf(stderr, "usage: ledger_fill GROUP UUID MIB LIMIT [GROW [REFUSE]]\n");
        return 1;
    }
    uint64_t bytes = mib_arg(argv[3]), limit = mib_arg(argv[4]);
    uint64_t grow = argc > 5 ? mib_arg(argv[5]) : 0;
    uint64_t refuse = argc > 6 ? mib_arg(argv[6]) : 0;
    struct ledger *l = NULL;
    if (ledger_open(argv[1], &l) != VRAM_OK ||
        ledger_reserve(l, argv[2], bytes, limit, NULL) != VRAM_OK) {
        fprintf(stderr, "ledger_fill: %s\n", vram_last_error());
        return 1;
    }
    if (refuse > 0 && ledger_reserve(l, argv[2], refuse, limit, NULL) == VRAM_OK)
        ledger_release(l, argv[2], refuse);
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < 1500; i++) {
        usleep(200 * 1000);
        if (grow > 0 && ledger_reserve(l, argv[2], grow, limit, NULL) != VRAM_OK)
            grow = 0; /* at the quota: hold */
    }
    return 0;
}
