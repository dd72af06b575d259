/* SPDX-License-Identifier: MIT */
/*
** cliopt.c -- the command-line layer of the tools (see cliopt.h).
**
** getopt_long does the scanning; what it leaves to us is the table it
** reads (built from the command's cli_opt table), the two options every
** command has, and one wording for its errors, which it would otherwise
** print itself in glibc's words ("unrecognized option") without the
** command's name.
*/
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "base/size.h"
#include "base/strbuf.h"
#include "base/text.h"
#include "vram.h"

/* getopt_long's value of a long option with no one-letter alias: above
** every char, so it never collides with one. */
#define LONG_ONLY_BASE 256
#define VAL_HELP 'h'
#define VAL_VERSION 'V'

/* Width of the option column of --help (GNU's habit: 2 + 28). */
#define HELP_OPT_COL 30
#define HELP_WIDTH 79

/* Longest name cliopt_nearest compares (longer ones are never near). */
#define NEAREST_MAX 64

/* "vram stat" -> writes "vram: stat: " to stderr; "vram" -> "vram: ". */
static void
error_prefix(const struct cli_command *cmd)
{
    const char *sp = strchr(cmd->prog, ' ');
    if (sp == NULL)
        fprintf(stderr, "%s: ", cmd->prog);
    else
        fprintf(stderr, "%.*s: %s: ", (int)(sp - cmd->prog), cmd->prog, sp + 1);
}

int
cliopt_usage_error(const struct cli_command *cmd, const char *fmt, ...)
{
    /* The line quotes the command line, which may hold anything: made
    ** safe for the terminal (base/text.h). */
    char line[1024], safe[TEXT_SAFE_LEN(sizeof line)];
    va_list ap;
    error_prefix(cmd);
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s (try '%s --help')\n", text_safe(line, sizeof line, safe, sizeof safe),
            cmd->prog);
    return CLI_EXIT_USAGE;
}

bool
cliopt_size(const struct cli_command *cmd, const char *name, const char *text,
            uint64_t *out)
{
    uint64_t v;
    if (size_parse(text, &v) != VRAM_OK) {
        /* size_parse's message quotes the value itself; for a number
        ** without a unit it gives the forms to write. */
        bool bare = text[0] != '\0' && strspn(text, "0123456789") == strlen(text);
        cliopt_usage_error(cmd, "--%s: %s%s", name, vram_last_error(),
                           bare ? "" : "; expected a size such as 6G, 6Gi, 6GiB or 512M");
        return false;
    }
    if (v == 0) {
        char shown[TEXT_EXCERPT_LEN];
        cliopt_usage_error(cmd, "--%s '%s': must be more than 0 bytes", name,
                           text_excerpt(text, shown, sizeof shown));
        return false;
    }
    *out = v;
    return true;
}

bool
cliopt_seconds(const struct cli_command *cmd, const char *name, const char *text, double min,
               double max, double *out)
{
    char *end = NULL;
    errno = 0;
    double d = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(d >= min) || d > max) {
        char shown[TEXT_EXCERPT_LEN];
        cliopt_usage_error(cmd, "--%s '%s': expected seconds, %g..%g", name,
                           text_excerpt(text, shown, sizeof shown), min, max);
        return false;
    }
    *out = d;
    return true;
}

/* Every strategy name, for the messages and the help texts. */
static const vram_strategy all_strategies[] = {
#define X(name, num, str) name,
    VRAM_STRATEGY_LIST(X)
#undef X
};

void
cliopt_strategy_names(FILE *out, const char *sep, const char *last)
{
    size_t n = sizeof all_strategies / sizeof all_strategies[0];
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s%s", i == 0 ? "" : i + 1 == n ? last : sep,
                vram_strategy_name(all_strategies[i]));
}

void
cliopt_sizes_note(FILE *out, const char *example)
{
    fprintf(out,
            "Sizes are 1024-based: %s, %si, %siB and %sB alike; 512M, 1.5G,\n"
            "\"5.00 GiB\"; a number needs a unit (B for bytes: 1073741824B).\n",
            example, example, example, example);
}

/* ------------------------------------------------------------------ */
/* "Did you mean": the nearest name                                     */
/* ------------------------------------------------------------------ */

/* The edit distance of A and B (insert, delete, replace, or swap two
** neighbours: one each), both at most NEAREST_MAX characters. */
static size_t
edit_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    static_assert(NEAREST_MAX < 128, "three rows on the stack");
    size_t d[3][NEAREST_MAX + 1]; /* rows i-2, i-1, i (mod 3) */
    for (size_t j = 0; j <= nb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t *cur = d[i % 3], *prev = d[(i - 1) % 3], *prev2 = d[(i + 1) % 3];
        cur[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t v = prev[j - 1] + cost;
            if (prev[j] + 1 < v)
                v = prev[j] + 1;
            if (cur[j - 1] + 1 < v)
                v = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                prev2[j - 2] + 1 < v)
                v = prev2[j - 2] + 1;
            cur[j] = v;
        }
    }
    return d[na % 3][nb];
}

const char *
cliopt_nearest(const char *text, cliopt_names each, const void *ctx)
{
    size_t n = strlen(text);
    if (n == 0 || n > NEAREST_MAX)
        return NULL;
    const char *prefix_of = NULL, *best = NULL;
    size_t prefixes = 0, best_d = SIZE_MAX;
    for (size_t i = 0;; i++) {
        const char *name = each(i, ctx);
        if (name == NULL)
            break;
        if (strncmp(name, text, n) == 0) {
            prefix_of = name;
            prefixes++;
        }
        if (strlen(name) > NEAREST_MAX)
            continue;
        size_t d = edit_distance(text, name);
        if (d < best_d) {
            best_d = d;
            best = name;
        }
    }
    if (prefixes == 1)
        return prefix_of;
    size_t most = n / 3;
    most = most < 1 ? 1 : most > 3 ? 3 : most;
    return best != NULL && best_d > 0 && best_d <= most ? best : NULL;
}

/* ------------------------------------------------------------------ */
/* The values of an option                                              */
/* ------------------------------------------------------------------ */

/* The numbers a small CLIOPT_COUNT range lists. */
static const char *const small_numbers[] = {"0",  "1",  "2",  "3",  "4",  "5",
                                            "6",  "7",  "8",  "9",  "10", "11",
                                            "12", "13", "14", "15", "16"};
#define SMALL_NUMBERS (sizeof small_numbers / sizeof small_numbers[0])

const char *
cliopt_value(const struct cli_opt *o, size_t i)
{
    if (o->values != NULL)
        return o->values(i);
    if (o->store == CLIOPT_STRATEGY) {
        size_t n = sizeof all_strategies / sizeof all_strategies[0];
        return i < n ? vram_strategy_name(all_strategies[i]) : NULL;
    }
    if (o->store == CLIOPT_COUNT && o->max < SMALL_NUMBERS && o->min <= o->max)
        return i <= o->max - o->min ? small_numbers[o->min + i] : NULL;
    return NULL;
}

static const char *
option_value_of(size_t i, const void *ctx)
{
    return cliopt_value(ctx, i);
}

bool
cliopt_choice(const struct cli_command *cmd, const struct cli_opt *o, const char *text,
              size_t *index)
{
    for (size_t i = 0; cliopt_value(o, i) != NULL; i++) {
        if (strcmp(text, cliopt_value(o, i)) == 0) {
            *index = i;
            return true;
        }
    }
    char known[512] = "", shown[TEXT_EXCERPT_LEN], hint[96] = "";
    size_t n = 0;
    while (cliopt_value(o, n) != NULL)
        n++;
    for (size_t i = 0; i < n; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
        strbuf_append(known, sizeof known, "%s%s", sep, cliopt_value(o, i));
    }
    const char *near = cliopt_nearest(text, option_value_of, o);
    if (near != NULL)
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
    cliopt_usage_error(cmd, "--%s '%s': expected %s%s", o->name,
                       text_excerpt(text, shown, sizeof shown), known, hint);
    return false;
}

bool
cliopt_strategy(const struct cli_command *cmd, const char *text, vram_strategy *out)
{
    if (vram_strategy_parse(text, out) == VRAM_OK)
        return true;
    static const struct cli_opt strategy = {0, "strategy", 0, "NAME", "",
                                            .store = CLIOPT_STRATEGY};
    char known[256] = "", shown[TEXT_EXCERPT_LEN], hint[96] = "";
    FILE *f = fmemopen(known, sizeof known - 1, "w");
    if (f != NULL) {
        cliopt_strategy_names(f, ", ", " or ");
        fclose(f);
    }
    const char *near = cliopt_nearest(text, option_value_of, &strategy);
    if (near != NULL)
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
    cliopt_usage_error(cmd, "--strategy: unknown strategy '%s' (expected %s)%s",
                       text_excerpt(text, shown, sizeof shown), known, hint);
    return false;
}

void
cliopt_begin(struct cliopt_iter *it, const struct cli_command *cmd, int argc, char **argv)
{
    memset(it, 0, sizeof *it);
    it->cmd = cmd;
    it->argc = argc;
    it->argv = argv;
    it->next = 1;

    /* '+': stop at the first operand (POSIX order); '-': return operands
    ** in place, in order, so that "analyze T --json" works. ':': report a
    ** missing value as ':' rather than '?'. */
    size_t s = 0;
    it->shortopts[s++] = cmd->stop_at_operand ? '+' : '-';
    it->shortopts[s++] = ':';
    it->shortopts[s++] = 'h';
    it->shortopts[s++] = 'V';
    size_t n = cmd->n_opts < CLIOPT_MAX ? cmd->n_opts : CLIOPT_MAX;
    size_t l = 0;
    for (size_t i = 0; i < n; i++) {
        const struct cli_opt *o = &cmd->opts[i];
        int val = o->short_name != 0 ? o->short_name : LONG_ONLY_BASE + (int)i;
        if (o->short_name != 0) {
            it->shortopts[s++] = o->short_name;
            if (o->metavar != NULL)
                it->shortopts[s++] = ':';
        }
        it->longopts[l++] =
            (struct option){o->name, o->metavar != NULL ? required_argument : no_argument,
                            NULL, val};
    }
    it->shortopts[s] = '\0';
    it->longopts[l++] = (struct option){"help", no_argument, NULL, VAL_HELP};
    it->longopts[l++] = (struct option){"version", no_argument, NULL, VAL_VERSION};
    it->longopts[l] = (struct option){NULL, 0, NULL, 0};
    optind = 0; /* glibc: start afresh, whatever was parsed before */
    opterr = 0; /* the messages are ours */
}

/* The table entry getopt_long's value VAL stands for; NULL if none. */
static const struct cli_opt *
option_of(const struct cli_command *cmd, int val)
{
    for (size_t i = 0; i < cmd->n_opts && i < CLIOPT_MAX; i++) {
        const struct cli_opt *o = &cmd->opts[i];
        if ((o->short_name != 0 && o->short_name == val) ||
            (o->short_name == 0 && val == LONG_ONLY_BASE + (int)i))
            return o;
    }
    return NULL;
}

/* How the option ARG ("--name" or "--name=value") was spelled, without
** its value, into BUF. */
static const char *
spelled(const char *arg, char *buf, size_t len)
{
    size_t n = strcspn(arg, "=");
    char shown[TEXT_EXCERPT_LEN];
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1),
             text_excerpt(arg, shown, sizeof shown));
    return buf;
}

/* The I-th long option of the table CTX (struct option[], NULL-ended). */
static const char *
long_name_of(size_t i, const void *ctx)
{
    const struct option *lo = ctx;
    for (size_t k = 0; k < i; k++)
        if (lo[k].name == NULL)
            return NULL;
    return lo[i].name;
}

/* The line for getopt_long's '?' (unknown, ambiguous, or a value given to a
** flag) or ':' (a value missing). */
static int
option_error(struct cliopt_iter *it, int c)
{
    const struct cli_command *cmd = it->cmd;
    /* glibc leaves optind past the argument it complained about. */
    const char *arg = optind > 0 && optind <= it->argc ? it->argv[optind - 1] : "";
    bool is_long = strncmp(arg, "--", 2) == 0;
    char name[80];
    if (c == ':') {
        const struct cli_opt *o = option_of(cmd, optopt);
        if (is_long || o == NULL)
            return cliopt_usage_error(cmd, "option '%s' needs a value%s%s%s",
                                      spelled(arg, name, sizeof name), o ? " (" : "",
                                      o ? o->metavar : "", o ? ")" : "");
        return cliopt_usage_error(cmd, "option '-%c' needs a value (%s)", optopt,
                                  o->metavar);
    }
    if (is_long && optopt != 0)
        return cliopt_usage_error(cmd, "option '%s' takes no value",
                                  spelled(arg, name, sizeof name));
    if (is_long) {
        /* getopt_long also says '?' for a prefix of several names: name
        ** them; an unknown one gets the nearest, if one is. */
        spelled(arg, name, sizeof name);
        size_t len = strlen(name + 2), hits = 0;
        char which[256] = "";
        for (const struct option *lo = it->longopts; lo->name != NULL; lo++)
            if (strncmp(lo->name, name + 2, len) == 0)
                strbuf_append(which, sizeof which, "%s--%s", hits++ > 0 ? ", " : "",
                              lo->name);
        if (hits > 1)
            return cliopt_usage_error(cmd, "ambiguous option '%s' (%s)", name, which);
        const char *near = cliopt_nearest(name + 2, long_name_of, it->longopts);
        if (near != NULL)
            return cliopt_usage_error(cmd, "unknown option '%s' (did you mean '--%s'?)",
                                      name, near);
        return cliopt_usage_error(cmd, "unknown option '%s'", name);
    }
    /* "-limit": a long option written with one dash. glibc leaves optind
    ** on a cluster of short options it has not finished. */
    if (optind < it->argc && optopt != 0 && it->argv[optind][0] == '-' &&
        it->argv[optind][1] == optopt)
        arg = it->argv[optind];
    if (arg[0] == '-' && arg[1] != '-' && strlen(arg) > 2) {
        spelled(arg, name, sizeof name);
        const char *near = cliopt_nearest(name + 1, long_name_of, it->longopts);
        if (near != NULL && strlen(name + 1) > 1)
            return cliopt_usage_error(cmd, "unknown option '%s' (did you mean '--%s'?)",
                                      name, near);
    }
    if (optopt > 0x20 && optopt < 0x7f)
        return cliopt_usage_error(cmd, "unknown option '-%c'", optopt);
    return cliopt_usage_error(cmd, "unknown option '%s'", spelled(arg, name, sizeof name));
}

/* ------------------------------------------------------------------ */
/* What completion asks                                                 */
/* ------------------------------------------------------------------ */

/* What option O's value is, for completion: "values" (then the values),
** "files", "dirs", "none", or "flag" (O takes no value), to OUT. */
static void
complete_values(const struct cli_opt *o, FILE *out)
{
    if (o->metavar == NULL) {
        fputs("flag\n", out);
        return;
    }
    if (cliopt_value(o, 0) != NULL) {
        fputs("values\n", out);
        for (size_t i = 0; cliopt_value(o, i) != NULL; i++)
            fprintf(out, "%s\n", cliopt_value(o, i));
        return;
    }
    const char *m = o->metavar != NULL ? o->metavar : "";
    if (strstr(m, "FILE") != NULL || strstr(m, "PATH") != NULL)
        fputs("files\n", out);
    else if (strcmp(m, "DIR") == 0)
        fputs("dirs\n", out);
    else
        fputs("none\n", out);
}

/*
** ARGV as a question of completion ("CMD --complete-...": see cliopt.h),
** answered on standard output; CLIOPT_EXIT with IT's status then, else
** CLIOPT_END (not such a question).
*/
static enum cliopt_kind
complete(struct cliopt_iter *it)
{
    const struct cli_command *cmd = it->cmd;
    const char *q = it->argc >= 2 ? it->argv[1] : "";
    if (strncmp(q, "--complete-", 11) != 0)
        return CLIOPT_END;
    if (it->argc == 2 && strcmp(q, "--complete-options") == 0) {
        for (const struct option *lo = it->longopts; lo->name != NULL; lo++)
            printf("--%s\n", lo->name);
    } else if (it->argc == 2 && strcmp(q, "--complete-operands") == 0) {
        if (cmd->operands != NULL) {
            fputs("values\n", stdout);
            for (size_t i = 0; cmd->operands(i) != NULL; i++)
                printf("%s\n", cmd->operands(i));
        } else {
            const char *kind = cmd->no_operands       ? "none"
                               : cmd->stop_at_operand ? "command"
                                                      : "files";
            printf("%s\n", kind);
        }
    } else if (it->argc == 3 && strcmp(q, "--complete-values") == 0) {
        const char *want = it->argv[2];
        want += strncmp(want, "--", 2) == 0 ? 2 : want[0] == '-' ? 1 : 0;
        const struct cli_opt *o = NULL;
        if (strcmp(want, "help") == 0 || strcmp(want, "version") == 0 ||
            strcmp(want, "h") == 0 || strcmp(want, "V") == 0) {
            fputs("flag\n", stdout);
            it->status = fflush(stdout) == 0 ? CLI_EXIT_OK : 1;
            return CLIOPT_EXIT;
        }
        for (size_t i = 0; i < cmd->n_opts && i < CLIOPT_MAX && o == NULL; i++)
            if (strcmp(cmd->opts[i].name, want) == 0 ||
                (want[0] != '\0' && want[1] == '\0' &&
                 cmd->opts[i].short_name == want[0]))
                o = &cmd->opts[i];
        if (o == NULL) {
            char shown[TEXT_EXCERPT_LEN];
            text_excerpt(it->argv[2], shown, sizeof shown);
            it->status =
                cliopt_usage_error(cmd, "--complete-values: no option '%s'", shown);
            return CLIOPT_EXIT;
        }
        complete_values(o, stdout);
    } else {
        return CLIOPT_END;
    }
    it->status = fflush(stdout) == 0 ? CLI_EXIT_OK : 1;
    return CLIOPT_EXIT;
}

enum cliopt_kind
cliopt_next(struct cliopt_iter *it, const struct cli_opt **opt, const char **value)
{
    if (it->next == 1 && !it->options_done && complete(it) == CLIOPT_EXIT)
        return CLIOPT_EXIT;
    if (!it->options_done) {
        int c = getopt_long(it->argc, it->argv, it->shortopts, it->longopts, NULL);
        it->next = optind;
        switch (c) {
        case -1:
            /* The end, "--", or (stop_at_operand) the first operand. */
            it->options_done = true;
            break;
        case 1: /* an operand, in order */
            *value = optarg;
            return CLIOPT_OPERAND;
        case VAL_HELP:
            cliopt_help(it->cmd, stdout);
            it->status = fflush(stdout) == 0 ? CLI_EXIT_OK : 1;
            return CLIOPT_EXIT;
        case VAL_VERSION:
            printf("vram %s\n", VRAM_VERSION);
            it->status = fflush(stdout) == 0 ? CLI_EXIT_OK : 1;
            return CLIOPT_EXIT;
        case '?':
        case ':':
            it->status = option_error(it, c);
            return CLIOPT_EXIT;
        default:
            *opt = option_of(it->cmd, c);
            *value = optarg;
            return CLIOPT_OPTION;
        }
    }
    if (it->next >= it->argc)
        return CLIOPT_END;
    *value = it->argv[it->next++];
    return CLIOPT_OPERAND;
}

enum cliopt_kind
cliopt_next_option(struct cliopt_iter *it, const struct cli_opt **opt, const char **value)
{
    enum cliopt_kind k = cliopt_next(it, opt, value);
    if (k == CLIOPT_OPERAND) {
        char shown[TEXT_EXCERPT_LEN];
        it->status = cliopt_usage_error(it->cmd, "unexpected argument '%s'",
                                        text_excerpt(*value, shown, sizeof shown));
        return CLIOPT_EXIT;
    }
    return k;
}

/* OPT's value (VALUE, NULL for a flag) stored as its table entry says,
** into CTX: CLIOPT_GO_ON, or the usage error's status. */
static int
store_option(const struct cli_command *cmd, const struct cli_opt *o, const char *value,
             void *ctx)
{
    char *at = (char *)ctx + o->field;
    bool ok = true;
    switch (o->store) {
    case CLIOPT_CALL:
        break;
    case CLIOPT_STRING:
        *(const char **)(void *)at = value;
        break;
    case CLIOPT_SET:
    case CLIOPT_CLEAR:
        *(bool *)(void *)at = o->store == CLIOPT_SET;
        break;
    case CLIOPT_SIZE:
        ok = cliopt_size(cmd, o->name, value, (uint64_t *)(void *)at);
        break;
    case CLIOPT_SECONDS:
        ok = cliopt_seconds(cmd, o->name, value, o->lo, o->hi, (double *)(void *)at);
        break;
    case CLIOPT_COUNT:
        ok = cliopt_count(cmd, o->name, value, o->min, o->max, (uint64_t *)(void *)at);
        break;
    case CLIOPT_STRATEGY:
        ok = cliopt_strategy(cmd, value, (vram_strategy *)(void *)at);
        break;
    case CLIOPT_ID:
        *(int *)(void *)at = o->id;
        break;
    }
    return ok ? CLIOPT_GO_ON : CLI_EXIT_USAGE;
}

int
cliopt_parse(const struct cli_command *cmd, int argc, char **argv, cliopt_handler on_arg,
             void *ctx, char ***rest)
{
    struct cliopt_iter it;
    const struct cli_opt *opt = NULL;
    const char *value = NULL;
    if (rest != NULL)
        *rest = NULL;
    cliopt_begin(&it, cmd, argc, argv);
    for (;;) {
        enum cliopt_kind k = cmd->no_operands ? cliopt_next_option(&it, &opt, &value)
                                              : cliopt_next(&it, &opt, &value);
        if (k == CLIOPT_END)
            return rest != NULL && !cmd->command_optional
                       ? cliopt_usage_error(cmd, "no command given")
                       : CLIOPT_GO_ON;
        if (k == CLIOPT_EXIT)
            return it.status;
        if (k == CLIOPT_OPERAND && rest != NULL) {
            *rest = argv + it.next - 1;
            return CLIOPT_GO_ON;
        }
        bool stored = k == CLIOPT_OPTION && opt->store != CLIOPT_CALL;
        int rc = stored ? store_option(cmd, opt, value, ctx) : CLIOPT_GO_ON;
        if (rc == CLIOPT_GO_ON && (!stored || opt->notify))
            rc = on_arg(ctx, k == CLIOPT_OPTION ? opt : NULL, value);
        if (rc != CLIOPT_GO_ON)
            return rc;
    }
}

bool
cliopt_count(const struct cli_command *cmd, const char *name, const char *text,
             uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 || v < lo ||
        v > hi) {
        cliopt_usage_error(cmd, "--%s '%s': expected a whole number from %llu to %llu",
                           name, text, (unsigned long long)lo, (unsigned long long)hi);
        return false;
    }
    *out = v;
    return true;
}

void
cliopt_wrap(FILE *out, int indent, int col, const char *text)
{
    const char *p = text;
    bool first = true;
    while (*p != '\0') {
        if (*p == '\n') { /* a line break of the text's own */
            fprintf(out, "\n%*s", indent, "");
            col = indent;
            first = true;
            p++;
            continue;
        }
        if (*p == ' ') {
            p++;
            continue;
        }
        int word = (int)strcspn(p, " \n");
        if (!first && col + 1 + word > HELP_WIDTH) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
            first = true;
        }
        if (!first) {
            fputc(' ', out);
            col++;
        }
        fwrite(p, 1, (size_t)word, out);
        col += word;
        p += word;
        first = false;
    }
    fputc('\n', out);
}

/* One option's lines: "  -d, --interval SECONDS  help..." */
static void
help_option(FILE *out, char short_name, const char *name, const char *metavar,
            const char *help)
{
    char left[96];
    int w;
    if (short_name != 0)
        w = snprintf(left, sizeof left, "  -%c, --%s%s%s", short_name, name,
                     metavar ? " " : "", metavar ? metavar : "");
    else
        w = snprintf(left, sizeof left, "      --%s%s%s", name, metavar ? " " : "",
                     metavar ? metavar : "");
    fputs(left, out);
    if (w + 2 > HELP_OPT_COL) { /* a long left column: the help below it */
        fprintf(out, "\n%*s", HELP_OPT_COL, "");
    } else {
        fprintf(out, "%*s", HELP_OPT_COL - w, "");
    }
    cliopt_wrap(out, HELP_OPT_COL, HELP_OPT_COL, help);
}

void
cliopt_help(const struct cli_command *cmd, FILE *out)
{
    /* Usage lines: PROG SYNOPSIS, and PROG again before every further one. */
    const char *s = cmd->synopsis != NULL ? cmd->synopsis : "";
    fprintf(out, "Usage: %s", cmd->prog);
    for (bool first = true; first || *s != '\0'; first = false) {
        size_t n = strcspn(s, "\n");
        if (!first)
            fprintf(out, "  or:  %s", cmd->prog);
        fprintf(out, "%s%.*s\n", n > 0 ? " " : "", (int)n, s);
        s += n;
        if (*s == '\n')
            s++;
    }
    if (cmd->about != NULL)
        fprintf(out, "\n%s", cmd->about);
    fprintf(out, "\nOptions:\n");
    for (size_t i = 0; i < cmd->n_opts && i < CLIOPT_MAX; i++)
        help_option(out, cmd->opts[i].short_name, cmd->opts[i].name, cmd->opts[i].metavar,
                    cmd->opts[i].help);
    help_option(out, 'h', "help", NULL, "print this help and exit");
    help_option(out, 'V', "version", NULL, "print the version and exit");
    if (cmd->notes != NULL) {
        fputc('\n', out);
        cmd->notes(out);
    }
    if (cmd->exit_status != NULL) {
        fprintf(out, "\nExit status:\n  ");
        cliopt_wrap(out, 2, 2, cmd->exit_status);
    }
    fprintf(out, "\nvram %s. Documentation: man vram, or docs/ in the source tree.\n",
            VRAM_VERSION);
}
