/* SPDX-License-Identifier: MIT */
/*
** spank_vram.c -- the Slurm SPANK plug-in behind `srun --gpu-mem=SIZE`
** and `#SBATCH --gpu-mem=SIZE`: it runs every task of a job under the
** quota enforcer (libvram-preload.so, docs/QUOTA.md), with one quota per
** GPU shared by all tasks of the job on a node. docs/SLURM.md is the
** user's and the administrator's guide.
**
** Where each part runs:
**   - slurm_spank_init (srun, sbatch, salloc, slurmstepd, slurmd): reads
**     the plugstack.conf arguments and registers --gpu-mem. A malformed
**     argument fails the command or the job: a misconfigured quota never
**     means "no quota".
**   - gpu_mem_option (the option's callback; srun/sbatch/salloc first,
**     then slurmstepd again): parses SIZE; a malformed value, 0, or one
**     above max= rejects the command before the job is submitted.
**   - slurm_spank_task_init (slurmstepd, in each task, as the user, just
**     before execve): sets VRAM_LIMIT, VRAM_GROUP=slurm-<jobid> and puts
**     the preload library first in LD_PRELOAD, overwriting whatever the
**     user's environment said.
**   - slurm_spank_exit (slurmstepd, at the end of each job step): removes
**     the job's ledger from /dev/shm once no process of the job is left in
**     it.
**
** The plug-in never terminates its host (srun, slurmstepd): every failure
** is a message through slurm_error and a -1 return, which Slurm turns
** into a refused command or a failed task. Only the slurm_spank_* entry
** points and the four symbols of SPANK_PLUGIN are exported; the objects
** linked in (size.c, ledger.c, error.c) are hidden.
*/
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The entry points spank.h declares, and the symbols SPANK_PLUGIN defines,
** are the plug-in's interface: they alone keep default visibility. */
#pragma GCC visibility push(default)
#include <slurm/spank.h>
SPANK_PLUGIN(vram, 1)
#pragma GCC visibility pop

#include "base/ldpreload.h"
#include "base/size.h"
#include "ledger/ledger.h"
#include "vram.h"

#ifndef VRAM_SPANK_DEFAULT_PRELOAD
#define VRAM_SPANK_DEFAULT_PRELOAD "/usr/local/lib/libvram-preload.so"
#endif

/* The only ledger directory the ledger module supports today (ledger.h). */
#define SPANK_LEDGER_DIR "/dev/shm"

/* Room for a task's LD_PRELOAD, bytes (the user's entries plus ours). */
#define SPANK_ENV_LEN 8192

/* The plug-in's state in one process (srun, sbatch or one slurmstepd). */
struct spank_vram {
    uint64_t default_bytes; /* default=: quota without --gpu-mem, bytes; 0 = none */
    uint64_t max_bytes;     /* max=: largest --gpu-mem accepted, bytes; 0 = no max */
    uint64_t shard_bytes;   /* shard=: quota per gres/shard on the node, bytes; 0 = off */
    char preload[1024];     /* preload=: absolute path of libvram-preload.so */
    bool option_given;      /* --gpu-mem was given (and is valid) */
    uint64_t option_bytes;  /* its value, bytes */
};

static struct spank_vram g_vram = {.preload = VRAM_SPANK_DEFAULT_PRELOAD};

/* ---- plugstack.conf arguments ---- */

/* Parse SIZE for the argument or option NAME into *OUT (a bare number is
** MiB, as Slurm's sizes are); a size of 0 is
** refused (a quota of nothing is a mistake, not "unlimited"). On error a
** message names NAME and the value, and *OUT is untouched. */
static bool
parse_quota(const char *name, const char *text, uint64_t *out)
{
    uint64_t bytes;
    char ex[TEXT_EXCERPT_LEN];
    /* A bare number is MiB, as in Slurm's --mem=6144: a byte count is
    ** never what a Slurm user means. */
    if (size_parse_as(text, SIZE_BARE_MIB, &bytes) != VRAM_OK) {
        /* size_parse's line quotes the value itself. */
        slurm_error("vram: %s: %s (expected a size such as 6G, 6Gi, 6GiB, 512M, or a "
                    "number of MiB as with --mem; units are 1024-based)",
                    name, vram_last_error());
        return false;
    }
    if (bytes == 0) {
        slurm_error("vram: %s: '%s': a quota of 0 bytes (expected a size such as 6G)",
                    name, text_excerpt(text, ex, sizeof ex));
        return false;
    }
    *out = bytes;
    return true;
}

/* Does ARG start with KEY (which ends in '=')? Then *VALUE is the rest. */
static bool
arg_is(const char *arg, const char *key, const char **value)
{
    size_t n = strlen(key);
    if (strncmp(arg, key, n) != 0)
        return false;
    *value = arg + n;
    return true;
}

/* Read the plugstack.conf arguments into G; false (with a message) on an
** unknown or malformed one. */
static bool
parse_args(struct spank_vram *g, int ac, char **av)
{
    char ex[TEXT_EXCERPT_LEN];
    for (int i = 0; i < ac; i++) {
        const char *v;
        if (arg_is(av[i], "default=", &v)) {
            if (!parse_quota("plugstack.conf: spank_vram.so default", v,
                             &g->default_bytes))
                return false;
        } else if (arg_is(av[i], "max=", &v)) {
            if (!parse_quota("plugstack.conf: spank_vram.so max", v, &g->max_bytes))
                return false;
        } else if (arg_is(av[i], "shard=", &v)) {
            if (!parse_quota("plugstack.conf: spank_vram.so shard", v, &g->shard_bytes))
                return false;
        } else if (arg_is(av[i], "preload=", &v)) {
            size_t n = strlen(v);
            /* ':' and ' ' separate LD_PRELOAD entries; a relative path
            ** would be looked up from each task's working directory. */
            if (v[0] != '/' || strpbrk(v, ": \t") != NULL || n >= sizeof g->preload) {
                slurm_error(
                    "vram: plugstack.conf: spank_vram.so preload='%s': expected an "
                    "absolute path without ':' or spaces, shorter than %zu bytes",
                    text_excerpt(v, ex, sizeof ex), sizeof g->preload);
                return false;
            }
            memcpy(g->preload, v, n + 1);
        } else if (arg_is(av[i], "ledger=", &v)) {
            /* The ledger module keeps its files in /dev/shm only. */
            if (strcmp(v, SPANK_LEDGER_DIR) != 0 &&
                strcmp(v, SPANK_LEDGER_DIR "/") != 0) {
                slurm_error("vram: plugstack.conf: spank_vram.so ledger='%s': only "
                            "ledger=" SPANK_LEDGER_DIR " is supported for now",
                            text_excerpt(v, ex, sizeof ex));
                return false;
            }
        } else {
            slurm_error("vram: plugstack.conf: spank_vram.so: unknown argument '%s' "
                        "(expected default=SIZE, max=SIZE, shard=SIZE, preload=PATH or "
                        "ledger=" SPANK_LEDGER_DIR ")",
                        text_excerpt(av[i], ex, sizeof ex));
            return false;
        }
    }
    if (g->max_bytes != 0 && g->default_bytes > g->max_bytes) {
        char a[32], b[32];
        slurm_error("vram: plugstack.conf: spank_vram.so default=%s is above max=%s",
                    size_format_setting(g->default_bytes, a, sizeof a),
                    size_format_setting(g->max_bytes, b, sizeof b));
        return false;
    }
    return true;
}

/* ---- --gpu-mem ---- */

/* The option's callback: runs in srun/sbatch/salloc when the command line
** (or an #SBATCH line) is read, where a non-zero return refuses the
** command, and again in slurmstepd. */
static int
gpu_mem_option(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    uint64_t bytes;
    if (optarg == NULL || !parse_quota("--gpu-mem", optarg, &bytes))
        return -1;
    if (g_vram.max_bytes != 0 && bytes > g_vram.max_bytes) {
        char a[32], b[32];
        char ex[TEXT_EXCERPT_LEN];
        slurm_error(
            "vram: --gpu-mem: '%s' (%s) is above this cluster's maximum of %s per GPU",
            text_excerpt(optarg, ex, sizeof ex), size_format(bytes, a, sizeof a),
            size_format_setting(g_vram.max_bytes, b, sizeof b));
        return -1;
    }
    g_vram.option_given = true;
    g_vram.option_bytes = bytes;
    return 0;
}

static struct spank_option gpu_mem_spank_option = {
    .name = "gpu-mem",
    .arginfo = "SIZE",
    .usage = "GPU memory quota per GPU, shared by the job's tasks on a node "
             "(e.g. 6G, 6GiB; a bare number is MiB, as with --mem) [vram]",
    .has_arg = 1,
    .val = 0,
    .cb = gpu_mem_option,
};

int
slurm_spank_init(spank_t sp, int ac, char **av)
{
    if (!parse_args(&g_vram, ac, av))
        return -1;
    if (spank_option_register(sp, &gpu_mem_spank_option) != ESPANK_SUCCESS) {
        slurm_error("vram: cannot register --gpu-mem");
        return -1;
    }
    return 0;
}

/* ---- in each task ---- */

/* The job's quota per GPU on this node, bytes (0: no quota): --gpu-mem,
** else default=, else max=; with shard= and shards on the node, at most
** shards x shard= (the only quota when neither --gpu-mem nor default= is
** given). */
static uint64_t
task_quota(spank_t sp)
{
    uint64_t bytes = g_vram.option_given         ? g_vram.option_bytes
                     : g_vram.default_bytes != 0 ? g_vram.default_bytes
                                                 : g_vram.max_bytes;
    char buf[32];
    if (g_vram.shard_bytes == 0 ||
        spank_getenv(sp, "SLURM_SHARDS_ON_NODE", buf, (int)sizeof buf) != ESPANK_SUCCESS)
        return bytes;
    char *end;
    errno = 0;
    unsigned long long shards = strtoull(buf, &end, 10);
    if (errno != 0 || end == buf || *end != '\0' || shards == 0)
        return bytes;
    uint64_t cap = shards > UINT64_MAX / g_vram.shard_bytes ? UINT64_MAX
                                                            : shards * g_vram.shard_bytes;
    if (g_vram.option_given || g_vram.default_bytes != 0)
        return bytes < cap ? bytes : cap;
    return cap;
}

/* Set VAR=VALUE in the task, overwriting the user's value. */
static bool
task_setenv(spank_t sp, const char *var, const char *value)
{
    if (spank_setenv(sp, var, value, 1) != ESPANK_SUCCESS) {
        slurm_error("vram: cannot set %s in the task's environment", var);
        return false;
    }
    return true;
}

int
slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    uint64_t bytes = task_quota(sp);
    if (bytes == 0)
        return 0; /* no quota for this job: the task is left alone */

    uint32_t jobid;
    if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS) {
        slurm_error(
            "vram: cannot read the job id: no GPU memory quota, task not started");
        return -1;
    }
    /* The dynamic loader only warns about a missing preload library and
    ** runs the program without a quota: refuse instead. */
    if (access(g_vram.preload, R_OK) != 0) {
        slurm_error(
            "vram: %s: %s (plugstack.conf preload=): no GPU memory quota, task not "
            "started",
            g_vram.preload, strerror(errno));
        return -1;
    }

    /* As VRAM_LIMIT takes it: a number there needs a unit. */
    char limit[32], group[LEDGER_GROUP_LEN];
    size_format_setting(bytes, limit, sizeof limit);
    snprintf(group, sizeof group, "slurm-%" PRIu32, jobid);

    static char user[SPANK_ENV_LEN], preload[SPANK_ENV_LEN];
    spank_err_t rc = spank_getenv(sp, "LD_PRELOAD", user, (int)sizeof user);
    if (rc == ESPANK_ENV_NOEXIST)
        user[0] = '\0';
    else if (rc != ESPANK_SUCCESS) {
        slurm_error("vram: the task's LD_PRELOAD is unreadable or longer than %d bytes: "
                    "task not started",
                    SPANK_ENV_LEN - 1);
        return -1;
    }
    if (!ldpreload_build(g_vram.preload, user, preload, sizeof preload)) {
        slurm_error("vram: LD_PRELOAD would pass %d bytes: task not started",
                    SPANK_ENV_LEN - 1);
        return -1;
    }
    if (!task_setenv(sp, "VRAM_LIMIT", limit) || !task_setenv(sp, "VRAM_LIMIT_SOURCE", "slurm") ||
        !task_setenv(sp, "VRAM_GROUP", group) || !task_setenv(sp, "LD_PRELOAD", preload))
        return -1;
    return 0;
}

/* ---- at the end of a job step ---- */

/* Remove GROUP's ledger if no live process is in it. Ledgers are files of
** the job's user ("vram-<uid>/<group>", checked against the effective
** uid), so slurmstepd, running as root here, takes on the user's
** effective ids for the moment, as it does itself around user_init. */
static void
remove_ledger_as(uid_t uid, gid_t gid, const char *group)
{
    uid_t euid = geteuid();
    gid_t egid = getegid();
    bool switched = false;
    if (euid == 0 && uid != 0) {
        if (setegid(gid) != 0)
            return;
        if (seteuid(uid) != 0) {
            if (setegid(egid) != 0)
                slurm_error("vram: cannot restore the effective group id %u",
                            (unsigned)egid);
            return;
        }
        switched = true;
    }
    struct ledger *l;
    if (ledger_attach_existing(group, &l) == VRAM_OK) {
        if (!ledger_remove_if_unused(l))
            slurm_debug("vram: ledger of group %s still in use: kept", group);
        ledger_close(l);
    }
    if (switched) {
        if (seteuid(euid) != 0 || setegid(egid) != 0)
            slurm_error("vram: cannot restore the effective ids %u:%u", (unsigned)euid,
                        (unsigned)egid);
    }
}

int
slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_remote(sp) != 1)
        return 0;
    uint32_t jobid;
    uid_t uid;
    gid_t gid;
    if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS)
        return 0;
    char group[LEDGER_GROUP_LEN];
    snprintf(group, sizeof group, "slurm-%" PRIu32, jobid);
    remove_ledger_as(uid, gid, group);
    return 0;
}
