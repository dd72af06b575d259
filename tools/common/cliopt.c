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
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "base/size.h"
#include "vram.h"

/* getopt_long's value of a long option with no one-letter alias: above
** every char, so it never collides with one. */
#define LONG_ONLY_BASE 256
#define VAL_HELP 'h'
#define VAL_VERSION 'V'

/* Width of the option column of --help (GNU's habit: 2 + 28). */
#define HELP_OPT_COL 30
#define HELP_WIDTH 79

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
    va_list ap;
    error_prefix(cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (try '%s --help')\n", cmd->prog);
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
            "Sizes are 1024-based: %s, %si, %siB and %sB alike; 512M, 1.5G, \"5.00 GiB\";\n"
            "a number needs a unit (B for bytes: 1073741824B).\n",
            example, example, example, example);
}

bool
cliopt_strategy(const struct cli_command *cmd, const char *text, vram_strategy *out)
{
    if (vram_strategy_parse(text, out) == VRAM_OK)
        return true;
    char known[256] = "", shown[TEXT_EXCERPT_LEN];
    FILE *f = fmemopen(known, sizeof known - 1, "w");
    if (f != NULL) {
        cliopt_strategy_names(f, ", ", " or ");
        fclose(f);
    }
    cliopt_usage_error(cmd, "--strategy: unknown strategy '%s' (expected %s)",
                       text_excerpt(text, shown, sizeof shown), known);
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
        /* getopt_long also says '?' for a prefix of several names. */
        spelled(arg, name, sizeof name);
        size_t len = strlen(name + 2), hits = 0;
        for (const struct option *lo = it->longopts; lo->name != NULL; lo++)
            hits += strncmp(lo->name, name + 2, len) == 0;
        return cliopt_usage_error(cmd, "%s option '%s'", hits > 1 ? "ambiguous" : "unknown",
                                  name);
    }
    if (optopt > 0x20 && optopt < 0x7f)
        return cliopt_usage_error(cmd, "unknown option '-%c'", optopt);
    return cliopt_usage_error(cmd, "unknown option '%s'", spelled(arg, name, sizeof name));
}

enum cliopt_kind
cliopt_next(struct cliopt_iter *it, const struct cli_opt **opt, const char **value)
{
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
