/* SPDX-License-Identifier: MIT */
/*
** test_policy.c -- the policy file (src/policy/policy.c): every rule and
** how rules combine (user over groups over default, the largest group,
** exemptions, root, readers, per-GPU keys, unknown host ordinals), every
** malformed line with its "PATH:LINE: problem" error, and the checks on
** the file itself (owner, mode, directory, symbolic link, size, NUL),
** which need root to set up and are skipped otherwise.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/policy.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)
#define H200 (143771ULL * MiB)

static const char UUID0[] = "GPU-8c6f1e2a-1234-5678-9abc-def012345678";
static const char UUID1[] = "GPU-00112233-4455-6677-8899-aabbccddeeff";

static struct policy
parse_ok(const char *text)
{
    struct policy p;
    if (policy_parse("policy.conf", text, strlen(text), &p) != VRAM_OK)
        fail_msg("%s: %s", text, vram_last_error());
    return p;
}

/* TEXT must be refused with exactly the error WANT. */
static void
parse_bad(const char *text, const char *want)
{
    struct policy p;
    memset(&p, 0x5a, sizeof p);
    vram_status st = policy_parse("policy.conf", text, strlen(text), &p);
    if (st != VRAM_E_CONFIG)
        fail_msg("accepted: %s", text);
    if (strcmp(vram_last_error(), want) != 0)
        fail_msg("%s:\n got  %s\n want %s", text, vram_last_error(), want);
    assert_null(strchr(vram_last_error(), '\n'));
    assert_int_equal(p.n_rules, 0x5a5a5a5a); /* untouched */
}

/* alice (uid 1001) in groups alice (1001), ml (2000), staff (50). */
static struct policy_who
alice(void)
{
    struct policy_who w;
    memset(&w, 0, sizeof w);
    w.uid = 1001;
    snprintf(w.user, sizeof w.user, "alice");
    w.n_groups = 3;
    w.gid[0] = 1001;
    snprintf(w.group[0], sizeof w.group[0], "alice");
    w.gid[1] = 2000;
    snprintf(w.group[1], sizeof w.group[1], "ml");
    w.gid[2] = 50;
    snprintf(w.group[2], sizeof w.group[2], "staff");
    return w;
}

static struct policy_who
root_who(void)
{
    struct policy_who w;
    memset(&w, 0, sizeof w);
    snprintf(w.user, sizeof w.user, "root");
    w.n_groups = 1;
    snprintf(w.group[0], sizeof w.group[0], "root");
    return w;
}

/* Alice's limit on GPU 0 (host ordinal 0, UUID0) of an H200 under TEXT,
** and the line of the rule that set it (0 for none). */
static uint64_t
limit_of(const char *text, const struct policy_who *w, int *line)
{
    struct policy p = parse_ok(text);
    struct policy_verdict v;
    policy_resolve(&p, w, &v);
    const struct policy_rule *r = NULL;
    uint64_t l = policy_limit(&v, 0, UUID0, H200, &r);
    *line = r != NULL ? r->line : 0;
    policy_free(&p);
    return l;
}

static void
test_empty_and_comments(void **state)
{
    (void)state;
    struct policy p = parse_ok("");
    assert_int_equal(p.n_rules, 0);
    assert_false(p.has_default);
    policy_free(&p);
    p = parse_ok("# nothing\n\n   \t  # indented comment\r\n");
    assert_int_equal(p.n_rules, 0);
    policy_free(&p);
    struct policy_who w = alice();
    int line;
    assert_true(limit_of("# only comments\n", &w, &line) == 0);
    assert_int_equal(line, 0);
}

static void
test_context(void **state)
{
    (void)state;
    struct policy p = parse_ok("default 1G\n");
    assert_true(p.context);
    policy_free(&p);
    p = parse_ok("context off\n");
    assert_false(p.context);
    policy_free(&p);
    p = parse_ok("context on # the default\n");
    assert_true(p.context);
    policy_free(&p);
}

static void
test_default(void **state)
{
    (void)state;
    struct policy_who w = alice();
    int line;
    assert_true(limit_of("default 40G\n", &w, &line) == 40 * GiB);
    assert_int_equal(line, 1);
    assert_true(limit_of("\n# x\ndefault 50%   # half a card\n", &w, &line) ==
                (uint64_t)(0.5 * (double)H200));
    assert_int_equal(line, 3);
    assert_true(limit_of("default 0.25\n", &w, &line) == H200 / 4);
    /* Above the card: the card. */
    assert_true(limit_of("default 1T\n", &w, &line) == H200);
    /* Per GPU, by ordinal and by UUID; a GPU not listed is not limited. */
    assert_true(limit_of("default 0:10G,1:20G\n", &w, &line) == 10 * GiB);
    assert_true(limit_of("default GPU-8c6f1e2a:12G\n", &w, &line) == 12 * GiB);
    assert_true(limit_of("default 1:20G\n", &w, &line) == 0);
}

static void
test_user_beats_group_and_default(void **state)
{
    (void)state;
    struct policy_who w = alice();
    int line;
    const char *text = "default 10G\ngroup ml 30G\nuser alice 20G\n";
    assert_true(limit_of(text, &w, &line) == 20 * GiB);
    assert_int_equal(line, 3);
    /* By uid as well as by name. */
    assert_true(limit_of("group ml 30G\nuser 1001 5G\n", &w, &line) == 5 * GiB);
    assert_int_equal(line, 2);
    /* Another user's rule does not apply. */
    assert_true(limit_of("default 10G\nuser bob 50G\n", &w, &line) == 10 * GiB);
    assert_int_equal(line, 1);
}

/* A limit as vram prints it ("20.00 GiB", a space before the unit) is
** one limit, so that a size shown can be pasted into the file. */
static void
test_printed_sizes(void **state)
{
    (void)state;
    struct policy_who w = alice();
    int line;
    assert_true(limit_of("user alice 20.00 GiB\n", &w, &line) == 20 * GiB);
    assert_true(limit_of("default 40 GiB # forty\n", &w, &line) == 40 * GiB);
    assert_true(limit_of("group ml 512 M\n", &w, &line) == 512 * MiB);
    parse_bad("user alice 20 GiB extra\n",
              "policy.conf:1: 'user' takes a name and a limit (e.g. user alice 40G)");
    parse_bad("default 40 20G\n",
              "policy.conf:1: 'default' takes one limit (e.g. default 40G)");
    parse_bad("default 40G GiB\n",
              "policy.conf:1: 'default' takes one limit (e.g. default 40G)");
}

static void
test_largest_group(void **state)
{
    (void)state;
    struct policy_who w = alice();
    int line;
    const char *text = "default 10G\ngroup staff 8G\ngroup ml 30G\ngroup other 90G\n";
    assert_true(limit_of(text, &w, &line) == 30 * GiB);
    assert_int_equal(line, 3);
    /* By gid. */
    assert_true(limit_of("group 50 12G\ngroup 2000 11G\n", &w, &line) == 12 * GiB);
    assert_int_equal(line, 1);
    /* A group smaller than the default still decides: the default is for
    ** users no rule names. */
    assert_true(limit_of("default 10G\ngroup staff 4G\n", &w, &line) == 4 * GiB);
    /* Groups that do not name this GPU fall through to the default. */
    assert_true(limit_of("default 10G\ngroup ml 1:30G\n", &w, &line) == 10 * GiB);
    assert_int_equal(line, 1);
    /* A fraction against a size: compared in bytes on this GPU. */
    assert_true(limit_of("group ml 10%\ngroup staff 5G\n", &w, &line) ==
                (uint64_t)(0.1 * (double)H200));
    assert_true(limit_of("group ml 10%\ngroup staff 15G\n", &w, &line) == 15 * GiB);
}

/*
** A per-GPU key that names no GPU of the host is an error of the policy,
** with the file, the line, the rule and the GPUs that exist; all rules
** for vram admin, those of one user's verdict for that user's processes.
*/
static void
test_keys_name_gpus(void **state)
{
    (void)state;
    struct quota_gpus g;
    memset(&g, 0, sizeof g);
    strcpy(g.uuid[0], UUID0);
    strcpy(g.uuid[1], UUID1);
    g.n = g.n_ordinals = 2;
    struct policy p = parse_ok("default 16:4G\n");
    assert_int_equal(policy_check_gpus(&p, NULL, &g), VRAM_E_CONFIG);
    assert_string_equal(vram_last_error(),
                        "policy.conf:1: default: GPU key '16' names no GPU of this host (0: "
                        "GPU-8c6f1e2a-1234-5678-9abc-def012345678, 1: "
                        "GPU-00112233-4455-6677-8899-aabbccddeeff): it would limit nothing");
    policy_free(&p);
    p = parse_ok("default 40G\nuser bob 0:8G,GPU-deadbeef:4G\ngroup ml GPU-00112233:10G\n");
    assert_int_equal(policy_check_gpus(&p, NULL, &g), VRAM_E_CONFIG);
    assert_string_equal(vram_last_error(),
                        "policy.conf:2: user bob: GPU key 'GPU-deadbeef' names no GPU of this "
                        "host (0: GPU-8c6f1e2a-1234-5678-9abc-def012345678, 1: "
                        "GPU-00112233-4455-6677-8899-aabbccddeeff): it would limit nothing");
    /* Alice's processes check alice's rules: bob's is not hers. */
    struct policy_who w = alice();
    struct policy_verdict v;
    policy_resolve(&p, &w, &v);
    assert_int_equal(policy_check_gpus(&p, &v, &g), VRAM_OK);
    policy_free(&p);
    p = parse_ok("group ml 2:10G\n");
    policy_resolve(&p, &w, &v);
    assert_int_equal(policy_check_gpus(&p, &v, &g), VRAM_E_CONFIG);
    assert_non_null(strstr(vram_last_error(), "policy.conf:1: group ml: GPU key '2' names no GPU"));
    /* Keys that name GPUs, and rules without keys, pass; so does a host
    ** without a GPU. */
    policy_free(&p);
    p = parse_ok("default 1:4G\nuser alice gpu-8C6F1E2A:2G\ngroup staff 50%\n");
    assert_int_equal(policy_check_gpus(&p, NULL, &g), VRAM_OK);
    struct quota_gpus none;
    memset(&none, 0, sizeof none);
    assert_int_equal(policy_check_gpus(&p, NULL, &none), VRAM_OK);
    g.n_ordinals = 1;
    assert_int_equal(policy_check_gpus(&p, NULL, &g), VRAM_E_CONFIG);
    policy_free(&p);
}

static void
test_user_rule_not_naming_gpu_falls_through(void **state)
{
    (void)state;
    struct policy_who w = alice();
    int line;
    assert_true(limit_of("group ml 30G\nuser alice 1:5G\n", &w, &line) == 30 * GiB);
    assert_int_equal(line, 1);
}

static void
test_exempt(void **state)
{
    (void)state;
    struct policy_who w = alice();
    int line;
    assert_true(limit_of("default 10G\nexempt user alice\n", &w, &line) == 0);
    assert_true(limit_of("default 10G\nexempt group staff\ngroup ml 5G\n", &w, &line) == 0);
    /* A user's own rule is more specific than an exempt group. */
    assert_true(limit_of("exempt group staff\nuser alice 7G\n", &w, &line) == 7 * GiB);
    struct policy p = parse_ok("default 10G\nexempt user alice\n");
    struct policy_verdict v;
    policy_resolve(&p, &w, &v);
    assert_true(v.exempt);
    policy_free(&p);
}

static void
test_root(void **state)
{
    (void)state;
    struct policy_who r = root_who();
    int line;
    /* Exempt by default, even from the default and root's group. */
    assert_true(limit_of("default 10G\ngroup root 5G\n", &r, &line) == 0);
    /* Unless a rule names root itself. */
    assert_true(limit_of("default 10G\nuser root 60G\n", &r, &line) == 60 * GiB);
    assert_true(limit_of("user 0 61G\n", &r, &line) == 61 * GiB);
    struct policy p = parse_ok("");
    struct policy_verdict v;
    policy_resolve(&p, &r, &v);
    assert_true(v.exempt);
    assert_true(v.reader);
    policy_free(&p);
}

static void
test_readers(void **state)
{
    (void)state;
    struct policy_who w = alice();
    struct policy_verdict v;
    struct policy p = parse_ok("default 1G\n");
    policy_resolve(&p, &w, &v);
    assert_false(v.reader);
    policy_free(&p);
    p = parse_ok("reader group staff\n");
    policy_resolve(&p, &w, &v);
    assert_true(v.reader);
    assert_false(v.exempt);
    policy_free(&p);
    p = parse_ok("reader user alice\nuser alice 3G\n");
    policy_resolve(&p, &w, &v);
    assert_true(v.reader);
    assert_true(policy_limit(&v, 0, UUID0, H200, NULL) == 3 * GiB);
    policy_free(&p);
    p = parse_ok("reader user bob\nreader group other\n");
    policy_resolve(&p, &w, &v);
    assert_false(v.reader);
    policy_free(&p);
}

static void
test_unknown_host_ordinal(void **state)
{
    (void)state;
    struct policy_who w = alice();
    struct policy p = parse_ok("user alice 0:30G,1:10G,GPU-00112233:50G\n");
    struct policy_verdict v;
    policy_resolve(&p, &w, &v);
    /* Known: its own entry. */
    assert_true(policy_limit(&v, 0, UUID0, H200, NULL) == 30 * GiB);
    /* Unknown: the smallest ordinal entry, never the largest. */
    assert_true(policy_limit(&v, -1, UUID0, H200, NULL) == 10 * GiB);
    /* A UUID key still names its GPU. */
    assert_true(policy_limit(&v, -1, UUID1, H200, NULL) == 50 * GiB);
    policy_free(&p);
    p = parse_ok("user alice 0:30G\ndefault 5G\n");
    policy_resolve(&p, &w, &v);
    assert_true(policy_limit(&v, -1, UUID0, H200, NULL) == 30 * GiB);
    assert_true(policy_limit(&v, 3, UUID1, H200, NULL) == 5 * GiB);
    policy_free(&p);
}

static void
test_host_ordinal(void **state)
{
    (void)state;
    assert_int_equal(policy_host_ordinal(NULL, 3), 3);
    assert_int_equal(policy_host_ordinal("2,0", 0), 2);
    assert_int_equal(policy_host_ordinal("2,0", 1), 0);
    assert_int_equal(policy_host_ordinal("2, 7", 1), 7);
    assert_int_equal(policy_host_ordinal("2,0", 2), -1);
    assert_int_equal(policy_host_ordinal("GPU-8c6f1e2a", 0), -1);
    assert_int_equal(policy_host_ordinal("1,GPU-8c6f1e2a", 0), 1);
    assert_int_equal(policy_host_ordinal("1,GPU-8c6f1e2a", 1), -1);
    assert_int_equal(policy_host_ordinal("", 0), -1);
    assert_int_equal(policy_host_ordinal("99999999999", 0), -1);
    assert_int_equal(policy_host_ordinal("0", -1), -1);
}

static void
test_describe(void **state)
{
    (void)state;
    char buf[96];
    struct policy p = parse_ok("default 1G\nuser alice 2G\ngroup ml 3G\n");
    assert_string_equal(policy_rule_describe(&p.def, buf, sizeof buf), "default (line 1)");
    assert_string_equal(policy_rule_describe(&p.rules[0], buf, sizeof buf),
                        "user alice (line 2)");
    assert_string_equal(policy_rule_describe(&p.rules[1], buf, sizeof buf),
                        "group ml (line 3)");
    assert_string_equal(policy_rule_describe(NULL, buf, sizeof buf), "no rule");
    policy_free(&p);
    policy_free(NULL);
}

static void
test_malformed(void **state)
{
    (void)state;
    parse_bad("usr alice 4G\n",
              "policy.conf:1: unknown keyword 'usr' (expected default, user, group, "
              "exempt, reader, context)");
    parse_bad("context maybe\n", "policy.conf:1: 'context' takes on or off");
    parse_bad("context\n", "policy.conf:1: 'context' takes on or off");
    parse_bad("context on\ncontext off\n",
              "policy.conf:2: context given twice (first at line 1)");
    parse_bad("\n\ndefault\n", "policy.conf:3: 'default' takes one limit (e.g. default 40G)");
    parse_bad("default 4G 5G\n",
              "policy.conf:1: 'default' takes one limit (e.g. default 40G)");
    parse_bad("default 4G\ndefault 5G\n",
              "policy.conf:2: default given twice (first at line 1)");
    parse_bad("default 6X\n",
              "policy.conf:1: default: '6X': unknown unit 'X' (expected e.g. 6G, 50%, 0.5, "
              "0:6G,1:4G or GPU-8c6f1e2a:6G)");
    parse_bad("user alice\n",
              "policy.conf:1: 'user' takes a name and a limit (e.g. user alice 40G)");
    parse_bad("group ml 4G extra\n",
              "policy.conf:1: 'group' takes a name and a limit (e.g. group ml 50%)");
    /* A number without a unit: refused with the forms to write (earlier
    ** versions read it as bytes). */
    parse_bad("default 40\n",
              "policy.conf:1: default: '40': a size needs a unit: 40G (GiB), 40M (MiB) "
              "or 40B (bytes) (expected e.g. 6G, 50%, 0.5, 0:6G,1:4G or "
              "GPU-8c6f1e2a:6G)");
    parse_bad("user alice 42949672960\n",
              "policy.conf:1: user alice: '42949672960': a size needs a unit: "
              "42949672960B for bytes (= 40G), as earlier versions read a bare number "
              "(expected e.g. 6G, 50%, 0.5, 0:6G,1:4G or GPU-8c6f1e2a:6G)");
    parse_bad("group ml 0:40G,1:20\n",
              "policy.conf:1: group ml: '20': a size needs a unit: 20G (GiB), 20M "
              "(MiB) or 20B (bytes) (expected e.g. 6G, 50%, 0.5, 0:6G,1:4G or "
              "GPU-8c6f1e2a:6G)");
    parse_bad("user alice 0\n",
              "policy.conf:1: user alice: '0': a limit must be more than 0 (expected e.g. "
              "6G, 50%, 0.5, 0:6G,1:4G or GPU-8c6f1e2a:6G)");
    parse_bad("user alice 150%\n",
              "policy.conf:1: user alice: '150%': more than 100% "
              "(expected e.g. 6G, 50%, 0.5, 0:6G,1:4G or GPU-8c6f1e2a:6G)");
    parse_bad("group ml 0:4G,0:5G\n",
              "policy.conf:1: group ml: device 0 given twice (expected e.g. 6G, 50%, 0.5, "
              "0:6G,1:4G or GPU-8c6f1e2a:6G)");
    parse_bad("user -alice 4G\n",
              "policy.conf:1: '-alice' is not a user name (1 to 32 letters, digits, '.', "
              "'_', '-', not starting with '-'; or a numeric id)");
    parse_bad("group m/l 4G\n",
              "policy.conf:1: 'm/l' is not a group name (1 to 32 letters, digits, '.', "
              "'_', '-', not starting with '-'; or a numeric id)");
    parse_bad("user abcdefghijklmnopqrstuvwxyz0123456 4G\n",
              "policy.conf:1: 'abcdefghijklmnopqrstuvwxyz0123456' is not a user name (1 to "
              "32 letters, digits, '.', '_', '-', not starting with '-'; or a numeric id)");
    parse_bad("user alice 4G\nuser alice 5G\n",
              "policy.conf:2: user alice given twice (first at line 1)");
    parse_bad("group ml 4G\n\ngroup ml 5G\n",
              "policy.conf:3: group ml given twice (first at line 1)");
    parse_bad("user alice 4G\nexempt user alice\n",
              "policy.conf:2: user alice is both limited and exempt (other rule at line 1)");
    parse_bad("exempt group ml\ngroup ml 4G\n",
              "policy.conf:2: group ml is both limited and exempt (other rule at line 1)");
    parse_bad("exempt group ml\nexempt group ml\n",
              "policy.conf:2: group ml given twice (first at line 1)");
    parse_bad("reader user bob\nreader user bob\n",
              "policy.conf:2: user bob given twice (first at line 1)");
    parse_bad("exempt alice\n",
              "policy.conf:1: 'exempt' takes 'user NAME' or 'group NAME' (e.g. exempt user "
              "ci-runner)");
    parse_bad("reader users bob\n",
              "policy.conf:1: 'reader' takes 'user NAME' or 'group NAME' (e.g. reader user "
              "prometheus)");
    parse_bad("reader user\n",
              "policy.conf:1: 'reader' takes 'user NAME' or 'group NAME' (e.g. reader user "
              "prometheus)");
    parse_bad("default 4G\x01\n", "policy.conf:1: control character 0x01 at column 11");
    char long_line[POLICY_MAX_LINE + 16];
    memset(long_line, ' ', sizeof long_line);
    long_line[sizeof long_line - 1] = '\0';
    parse_bad(long_line, "policy.conf:1: line longer than 1024 characters");
    /* A trailing line without its newline is read like the others. */
    struct policy p = parse_ok("user alice 4G");
    assert_int_equal(p.n_rules, 1);
    policy_free(&p);
}

static void
test_too_many_rules(void **state)
{
    (void)state;
    size_t cap = (size_t)(POLICY_MAX_RULES + 1) * 24;
    char *text = malloc(cap);
    assert_non_null(text);
    size_t n = 0, all_but_last = 0;
    for (int i = 0; i <= POLICY_MAX_RULES; i++) {
        all_but_last = n;
        n += (size_t)snprintf(text + n, cap - n, "user u%d 1G\n", i);
    }
    struct policy p;
    assert_int_equal(policy_parse("policy.conf", text, n, &p), VRAM_E_CONFIG);
    assert_string_equal(vram_last_error(), "policy.conf:4097: more than 4096 rules");
    /* One fewer is fine. */
    n = all_but_last;
    assert_int_equal(policy_parse("policy.conf", text, n, &p), VRAM_OK);
    assert_int_equal(p.n_rules, POLICY_MAX_RULES);
    policy_free(&p);
    free(text);
}

/* ---- the file: needs root to make files of other owners ---- */

static char dir[64];

static int
file_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/vram-policy-test.XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    return chmod(dir, 0755);
}

static int
file_teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

static void
write_file(const char *path, const char *text, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

/* policy_load of PATH must fail with STATUS and exactly WANT. */
static void
load_bad(const char *path, vram_status status, const char *want)
{
    struct policy p;
    bool present = false;
    assert_int_equal(policy_load(path, &p, &present), status);
    if (strcmp(vram_last_error(), want) != 0)
        fail_msg("got  %s\nwant %s", vram_last_error(), want);
}

static void
test_file(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char path[128], want[256];
    snprintf(path, sizeof path, "%s/policy.conf", dir);
    struct policy p;
    bool present = true;
    /* Missing: no policy. */
    assert_int_equal(policy_load(path, &p, &present), VRAM_OK);
    assert_false(present);
    /* Good. */
    write_file(path, "default 4G\nuser alice 8G\n", 0644);
    assert_int_equal(policy_load(path, &p, &present), VRAM_OK);
    assert_true(present);
    assert_int_equal(p.n_rules, 1);
    assert_string_equal(p.path, path);
    policy_free(&p);
    /* Writable by root's group: fine. */
    assert_int_equal(chmod(path, 0664), 0);
    assert_int_equal(policy_load(path, &p, &present), VRAM_OK);
    policy_free(&p);
    /* Writable by others. */
    assert_int_equal(chmod(path, 0646), 0);
    snprintf(want, sizeof want, "%s: writable by others (mode 0646; expected e.g. 0644)", path);
    load_bad(path, VRAM_E_CONFIG, want);
    /* Writable by another group. */
    assert_int_equal(chmod(path, 0664), 0);
    assert_int_equal(chown(path, 0, 100), 0);
    snprintf(want, sizeof want, "%s: writable by others (mode 0664; expected e.g. 0644)", path);
    load_bad(path, VRAM_E_CONFIG, want);
    /* Owned by somebody else. */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(chown(path, 65534, 0), 0);
    snprintf(want, sizeof want, "%s: owned by uid 65534, not root", path);
    load_bad(path, VRAM_E_CONFIG, want);
    assert_int_equal(chown(path, 0, 0), 0);
    /* Malformed: PATH:LINE. */
    write_file(path, "default 4G\nuser alice 8X\n", 0644);
    snprintf(want, sizeof want,
             "%s:2: user alice: '8X': unknown unit 'X' (expected e.g. 6G, 50%%, 0.5, "
             "0:6G,1:4G or GPU-8c6f1e2a:6G)",
             path);
    load_bad(path, VRAM_E_CONFIG, want);
    /* A NUL byte. */
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_int_equal(write(fd, "default 4G\n\0", 12), 12);
    close(fd);
    snprintf(want, sizeof want, "%s: holds a NUL byte (not a text file)", path);
    load_bad(path, VRAM_E_CONFIG, want);
    /* Too large. */
    assert_int_equal(truncate(path, POLICY_MAX_BYTES + 1), 0);
    snprintf(want, sizeof want, "%s: larger than %d bytes", path, POLICY_MAX_BYTES);
    load_bad(path, VRAM_E_CONFIG, want);
    /* A symbolic link, even to a good file. */
    char good[128];
    snprintf(good, sizeof good, "%s/good.conf", dir);
    write_file(good, "default 4G\n", 0644);
    unlink(path);
    assert_int_equal(symlink(good, path), 0);
    snprintf(want, sizeof want, "%s: is a symbolic link (it must be the file itself)", path);
    load_bad(path, VRAM_E_CONFIG, want);
    unlink(path);
    /* A directory, a FIFO: not regular files (and the FIFO does not block). */
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(want, sizeof want, "%s: not a regular file", path);
    load_bad(path, VRAM_E_CONFIG, want);
    rmdir(path);
    assert_int_equal(mkfifo(path, 0644), 0);
    load_bad(path, VRAM_E_CONFIG, want);
    unlink(path);
    /* The directory writable by others, or not root's. */
    write_file(path, "default 4G\n", 0644);
    assert_int_equal(chmod(dir, 0777), 0);
    snprintf(want, sizeof want, "%s: its directory %s is writable by others (mode 0777)", path,
             dir);
    load_bad(path, VRAM_E_CONFIG, want);
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(chown(dir, 65534, 0), 0);
    snprintf(want, sizeof want, "%s: its directory %s is owned by uid 65534, not root", path,
             dir);
    load_bad(path, VRAM_E_CONFIG, want);
    assert_int_equal(chown(dir, 0, 0), 0);
    assert_int_equal(policy_load(path, &p, &present), VRAM_OK);
    policy_free(&p);
}

static void
test_who(void **state)
{
    (void)state;
    struct policy_who w;
    assert_int_equal(policy_who_current(&w), VRAM_OK);
    assert_true(w.uid == geteuid());
    assert_true(w.n_groups >= 1);
    assert_true(w.gid[0] == getegid());
    assert_int_equal(policy_who_user("root", &w), VRAM_OK);
    assert_true(w.uid == 0);
    assert_string_equal(w.user, "root");
    assert_string_equal(w.group[0], "root");
    assert_int_equal(policy_who_user("0", &w), VRAM_OK);
    assert_string_equal(w.user, "root");
    assert_int_equal(policy_who_user("no-such-user-here", &w), VRAM_E_INVALID);
    assert_string_equal(vram_last_error(), "no user 'no-such-user-here' on this host");
    assert_int_equal(policy_who_user("4000000", &w), VRAM_OK);
    assert_true(w.uid == 4000000);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_and_comments),
        cmocka_unit_test(test_default),
        cmocka_unit_test(test_context),
        cmocka_unit_test(test_user_beats_group_and_default),
        cmocka_unit_test(test_printed_sizes),
        cmocka_unit_test(test_largest_group),
        cmocka_unit_test(test_keys_name_gpus),
        cmocka_unit_test(test_user_rule_not_naming_gpu_falls_through),
        cmocka_unit_test(test_exempt),
        cmocka_unit_test(test_root),
        cmocka_unit_test(test_readers),
        cmocka_unit_test(test_unknown_host_ordinal),
        cmocka_unit_test(test_host_ordinal),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_too_many_rules),
        cmocka_unit_test_setup_teardown(test_file, file_setup, file_teardown),
        cmocka_unit_test(test_who),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
