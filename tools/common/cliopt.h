/*
** cliopt.h -- long-option parsing for the command-line tools, from one
** table per command that also generates its --help (curl's habit: each
** option documented once).
**
** Accepted: "--name value", "--name=value", flags "--name", "-h" (help),
** "--" (everything after it is an operand) and "-" (an operand).
*/
#ifndef VRAM_TOOLS_CLIOPT_H
#define VRAM_TOOLS_CLIOPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct cli_opt {
    int id;              /* the command's own option number */
    const char *name;    /* long name without "--" */
    const char *metavar; /* NULL: a flag without a value */
    const char *help;    /* one line */
};

enum cliopt_kind {
    CLIOPT_OPTION,  /* *opt and, unless a flag, *value are set */
    CLIOPT_OPERAND, /* *value is the operand */
    CLIOPT_HELP,    /* -h was given */
    CLIOPT_END,     /* no more arguments */
    CLIOPT_ERROR    /* it->error says what is wrong, in one line */
};

struct cliopt_iter {
    int argc;
    char **argv;
    int next;           /* index of the next argument */
    bool only_operands; /* "--" was seen */
    const struct cli_opt *table;
    size_t n;
    char error[192];
};

/* Start walking ARGV from argv[1] against TABLE (N entries). */
void cliopt_begin(struct cliopt_iter *it, int argc, char **argv,
                  const struct cli_opt *table, size_t n);

/* The next option or operand. */
enum cliopt_kind cliopt_next(struct cliopt_iter *it, const struct cli_opt **opt,
                             const char **value);

/* One line per option: "  --name METAVAR    help". */
void cliopt_help(FILE *out, const struct cli_opt *table, size_t n);

#endif
