/* SPDX-License-Identifier: MIT */
/*
** policy.h -- the host's GPU memory policy: /etc/vram/policy.conf (the
** path is VRAM_POLICY_PATH, a CMake cache variable), read by the preload
** library in every process that touches the CUDA driver and by
** `vram admin check`. docs/POLICY.md is the reference; in short:
**
**   # comment                    (from '#' to the end of the line)
**   default 40G                  every user without a rule of their own
**   user alice 60G               a user, by name or numeric uid
**   group ml 0:50%,GPU-8c6f1e2a:20G   a Unix group, by name or numeric gid
**   exempt user ci-runner        no policy limit (root is exempt unless a
**   exempt group admins          'user root' line limits it)
**   reader group monitoring      may read every user's use (root always)
**   context off                  do not charge CUDA contexts (default: on)
**
** Limits use VRAM_LIMIT's grammar (env_quota_parse): sizes, fractions of
** each GPU, per-GPU lists keyed by ordinal or UUID.
**
** Which rule limits a process on one GPU, most specific first:
**   1. its user's own rule ('user' or 'exempt user');
**   2. else the LARGEST of its groups' rules that limit that GPU ('exempt
**      group' counting as unlimited): being put in one more group must
**      never lower anybody's limit, so membership only ever grants;
**   3. else 'default';
**   4. else no policy limit (the process is still counted in its user's
**      ledger, so that the admin sees it).
** A level whose rule does not name the GPU (a per-GPU list without it)
** falls through to the next. A per-GPU key that names no GPU of the host
** is an error of the policy (policy_check_gpus, once the GPUs are known). Policy ordinals are the host's: the process's
** CUDA ordinal mapped through CUDA_VISIBLE_DEVICES (policy_host_ordinal);
** when that cannot be known, the smallest ordinal-keyed limit of the rule
** applies, so that renaming GPUs never raises a limit.
**
** The file must be a regular file (not a symbolic link) owned by root,
** writable by nobody else (no write bit for others, nor for a group other
** than root's), in a directory owned by root that others cannot write; a
** file that is not, or is malformed, is an error naming PATH:LINE and the
** problem, and the preload library then disables CUDA in the process
** (fail closed). A missing file is no policy.
**
** No function here prints, exits, or calls the driver.
*/
#ifndef VRAM_POLICY_POLICY_H
#define VRAM_POLICY_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "quota/quota.h"
#include "vram.h"

#ifndef VRAM_POLICY_PATH
#define VRAM_POLICY_PATH "/etc/vram/policy.conf"
#endif

#define POLICY_NAME_LEN 33          /* user and group names: 1..32 characters */
#define POLICY_PATH_LEN 512
#define POLICY_MAX_RULES 4096       /* lines with a rule */
#define POLICY_MAX_BYTES (1 << 20)  /* a larger file is refused */
#define POLICY_MAX_LINE 1024        /* characters per line */
#define POLICY_MAX_GROUPS 256       /* groups of one process that are looked at */

enum policy_rule_kind {
    POLICY_USER = 1,        /* user NAME LIMIT */
    POLICY_GROUP = 2,       /* group NAME LIMIT */
    POLICY_EXEMPT_USER = 3, /* exempt user NAME */
    POLICY_EXEMPT_GROUP = 4,
    POLICY_READER_USER = 5, /* reader user NAME */
    POLICY_READER_GROUP = 6,
    POLICY_DEFAULT = 7      /* default LIMIT (only in struct policy.def) */
};

struct policy_rule {
    int kind;                   /* enum policy_rule_kind */
    int line;                   /* 1-based line in the file */
    char name[POLICY_NAME_LEN]; /* a name, or a numeric id as digits */
    struct quota_env limit;     /* POLICY_USER, POLICY_GROUP, POLICY_DEFAULT */
    char text[128];             /* the limit as written (cut at 127 characters) */
};

/* A parsed policy. Owns RULES: free with policy_free. */
struct policy {
    char path[POLICY_PATH_LEN]; /* where it was read, for messages */
    bool has_default;
    struct policy_rule def;     /* valid when has_default */
    bool context;               /* charge each process's context (default true) */
    int context_line;           /* the 'context' line, 0 if none */
    int n_rules;
    struct policy_rule *rules;  /* n_rules, in file order */
};

/* Who a process (or a user `vram admin check` asks about) is. */
struct policy_who {
    uid_t uid;
    char user[POLICY_NAME_LEN]; /* "" when the uid has no name */
    int n_groups;
    gid_t gid[POLICY_MAX_GROUPS]; /* primary first */
    char group[POLICY_MAX_GROUPS][POLICY_NAME_LEN]; /* "" when a gid has no name */
};

/* What the policy says of one user. Points into the policy it came from. */
struct policy_verdict {
    bool exempt;                   /* no policy limit anywhere */
    bool reader;                   /* may read every user's use */
    const struct policy_rule *user_rule; /* POLICY_USER, or NULL */
    int n_group_rules;
    const struct policy_rule *group_rules[POLICY_MAX_GROUPS]; /* POLICY_GROUP ones */
    const struct policy_rule *def; /* the default, or NULL */
};

/*
** Parse TEXT (N bytes, need not end in NUL) as a policy named PATH in
** messages. On a malformed line: VRAM_E_CONFIG with the last error
** "PATH:LINE: what is wrong". OUT is written only on success.
*/
vram_status policy_parse(const char *path, const char *text, size_t n, struct policy *out);

/*
** Read and parse the file PATH after checking who may write it (see the
** top). *PRESENT is false (and VRAM_OK returned, OUT untouched) when there
** is no file. VRAM_E_CONFIG for an unsafe or malformed file, VRAM_E_IO when
** it cannot be read; the last error is one line naming PATH.
*/
vram_status policy_load(const char *path, struct policy *out, bool *present);

/* The host's policy file as this build reads it (VRAM_POLICY_PATH). */
const char *policy_path(void);

/* Free what a successful policy_parse or policy_load made. NULL is fine. */
void policy_free(struct policy *p);

/* The calling process: its effective uid and groups (getgroups), named
** through the system's user database. VRAM_E_IO if the groups cannot be
** read. */
vram_status policy_who_current(struct policy_who *out);

/* User NAME (or a numeric uid) and their groups from the user database
** (getgrouplist). VRAM_E_INVALID when there is no such user. */
vram_status policy_who_user(const char *name, struct policy_who *out);

/* What P says of W. Never fails. */
void policy_resolve(const struct policy *p, const struct policy_who *w,
                    struct policy_verdict *out);

/*
** The policy's limit for one GPU: host ordinal HOST_ORD (-1: not known),
** UUID, TOTAL bytes (0: not known; see quota_for_device). 0 = no limit.
** *RULE (if not NULL) receives the rule that set it (NULL for none).
*/
uint64_t policy_limit(const struct policy_verdict *v, int host_ord, const char *uuid,
                      uint64_t total, const struct policy_rule **rule);

/*
** Whether every per-GPU key of the rules names a GPU of G (the host's:
** ordinal keys below G->n_ordinals, UUID keys a prefix of one of G's
** UUIDs): VRAM_OK, else VRAM_E_CONFIG with the last error
**   PATH:LINE: user alice: GPU key '16' names no GPU of this host (0:
**   GPU-..., 1: GPU-...): it would limit nothing
** for the first that names none. The rules are V's (those that apply to
** one user: its user rule, group rules and the default), or with V NULL
** every rule of P and its default (vram admin). A G with no GPU passes:
** where nothing can be allocated, nothing goes unlimited.
*/
vram_status policy_check_gpus(const struct policy *p, const struct policy_verdict *v,
                              const struct quota_gpus *g);

/* "user alice (line 4)", "group ml (line 7)", "default (line 2)" into BUF. */
char *policy_rule_describe(const struct policy_rule *r, char *buf, size_t len);

/*
** The host's ordinal of the process's CUDA ordinal ORD, given the
** process's CUDA_VISIBLE_DEVICES text VISIBLE (NULL = unset: ORD itself).
** -1 when the list does not say (UUIDs, MIG names, ORD past its end).
*/
int policy_host_ordinal(const char *visible, int ord);

#endif
