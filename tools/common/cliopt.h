/* SPDX-License-Identifier: MIT */
/*
** cliopt.h -- the command-line layer of every `vram` subcommand (and of
** the GPU benchmarks), on glibc's getopt_long. One description per
** command (struct cli_command) gives the parser, the --help text (which
** the man pages are generated from, so it is complete: usage line,
** description, every option, notes, exit status) and the messages.
**
** Every command accepts, without listing them:
**   -h, --help      its help on standard output, exit 0
**   -V, --version   "vram VERSION" on standard output, exit 0
** and for the others "--name value", "--name=value", "-x value", "-xvalue",
** unambiguous prefixes of long names (getopt_long's rule), "--" (all
** that follows is an operand) and "-" (an operand). A bad option is one
** line on standard error naming the option and the command, then
** "(try 'vram CMD --help')", and exit status 2; a mistyped one names the
** nearest ("did you mean '--limit'?"), as does a mistyped value of an
** option whose values are listed.
**
** Completion (contrib/bash-completion/vram) asks the program itself, so
** that it offers exactly what the parser accepts. As the only argument
** after the command (never taken for an option, so no prefix of a real
** option is made ambiguous):
**   --complete-options        every long option, one a line
**   --complete-values NAME    what option NAME (--limit, -d) takes: a first
**                             line "values" then one value a line, or
**                             "files", "dirs", "none" (free text: a size, a
**                             number) or "flag" (no value)
**   --complete-operands       what the operands are: "values" and the words,
**                             "files", "command" (a command line) or "none"
** each exit 0 (2 for an option NAME the command does not have).
*/
#ifndef VRAM_TOOLS_CLIOPT_H
#define VRAM_TOOLS_CLIOPT_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vram.h"

/* Exit statuses of the layer (the commands document the same ones). */
#define CLI_EXIT_OK 0
#define CLI_EXIT_USAGE 2

/* Most options one command may have, the two implicit ones aside. */
#define CLIOPT_MAX 48

/*
** What cliopt_parse does with an option by itself: most options only store
** their value in the command's settings (the CTX of cliopt_parse), FIELD
** bytes into it; those reach the command's handler only with NOTIFY (to
** note that they were given). A value that does not parse is the usage
** error of the function named.
*/
enum cliopt_store {
    CLIOPT_CALL = 0, /* the handler is called (the default) */
    CLIOPT_STRING,   /* const char *: the value itself */
    CLIOPT_SET,      /* bool: true */
    CLIOPT_CLEAR,    /* bool: false (a --no-THING option) */
    CLIOPT_SIZE,     /* uint64_t: cliopt_size */
    CLIOPT_SECONDS,  /* double: cliopt_seconds, LO..HI */
    CLIOPT_COUNT,    /* uint64_t: cliopt_count, MIN..MAX */
    CLIOPT_STRATEGY, /* vram_strategy: cliopt_strategy */
    CLIOPT_ID        /* int: the option's id (of several, the last given wins) */
};

struct cli_opt {
    int id;              /* the command's own option number (its handler's) */
    const char *name;    /* long name without "--" */
    char short_name;     /* one-letter alias ('d' for -d), or 0 */
    const char *metavar; /* NULL: a flag without a value */
    const char *help;    /* one sentence; wrapped to the terminal's 80 columns */
    /* How cliopt_parse stores the value itself, given by name in the
    ** table: .store = CLIOPT_SIZE, .field = offsetof(struct args, limit). */
    enum cliopt_store store;
    size_t field;       /* where: offsetof(the settings' type, member) */
    double lo, hi;      /* the bounds of CLIOPT_SECONDS */
    uint64_t min, max;  /* the bounds of CLIOPT_COUNT */
    bool notify;        /* stored, and then given to the handler too */
    /* The values the option accepts, from the table its parser reads: the
    ** I-th, or NULL past the last (completion, "did you mean", cliopt_choice).
    ** NULL: none listed; CLIOPT_STRATEGY lists the strategies, and
    ** CLIOPT_COUNT a range of at most 16 numbers, without one. */
    const char *(*values)(size_t i);
};

/* A command's option table, for struct cli_command. */
#define CLIOPT_TABLE(table) .opts = (table), .n_opts = sizeof(table) / sizeof((table)[0])

struct cli_command {
    const char *prog;     /* "vram stat": messages say "vram: stat: ..." */
    const char *synopsis; /* what follows PROG on the usage line; more usage
                             lines after '\n' (each starts with PROG again) */
    const char *about;    /* what the command does: paragraphs, '\n'-ended */
    const struct cli_opt *opts;
    size_t n_opts;
    void (*notes)(FILE *out); /* text after the options (may be NULL) */
    const char *exit_status;  /* "0 ok, 1 failure, 2 bad usage." */
    /* The first operand ends the options: what follows it is a command
    ** line of its own (vram run), options or not. */
    bool stop_at_operand;
    /* The command takes no operands: cliopt_parse calls one a usage error
    ** (as cliopt_next_option does). */
    bool no_operands;
    /* With stop_at_operand: the command line after the options may be
    ** missing (vram tune --trace FILE); cliopt_parse's *REST is then NULL. */
    bool command_optional;
    /* The words an operand may be (vram admin's verbs), as the values of
    ** an option; NULL: operands are files, or a command line with
    ** stop_at_operand. */
    const char *(*operands)(size_t i);
};

enum cliopt_kind {
    CLIOPT_OPTION,  /* *opt and, unless a flag, *value are set */
    CLIOPT_OPERAND, /* *value is the operand */
    CLIOPT_END,     /* no more arguments */
    CLIOPT_EXIT     /* help, version or an error was printed: return it->status */
};

struct cliopt_iter {
    const struct cli_command *cmd;
    int argc;
    char **argv;
    int next;  /* index of the next argument not yet read */
    int status; /* with CLIOPT_EXIT: the command's exit status */
    bool options_done; /* getopt_long said no more options: operands follow */
    char shortopts[3 + 3 * (CLIOPT_MAX + 2)];
    struct option longopts[CLIOPT_MAX + 3];
};

/* Start walking ARGV (argv[0] is the command's name) against CMD. */
void cliopt_begin(struct cliopt_iter *it, const struct cli_command *cmd, int argc,
                  char **argv);

/* The next option or operand. */
enum cliopt_kind cliopt_next(struct cliopt_iter *it, const struct cli_opt **opt,
                             const char **value);

/* As cliopt_next, for a command that takes no operands: an operand is a
** usage error (CLIOPT_EXIT). */
enum cliopt_kind cliopt_next_option(struct cliopt_iter *it, const struct cli_opt **opt,
                                    const char **value);

/* What a command does with one option (OPT set; VALUE its value, NULL for
** a flag) or one operand (OPT NULL; VALUE the operand), CTX being the
** command's settings: CLIOPT_GO_ON, or an exit status that ends the walk
** (after printing why). */
#define CLIOPT_GO_ON (-1)
typedef int (*cliopt_handler)(void *ctx, const struct cli_opt *opt, const char *value);

/*
** Walk ARGV against CMD, storing the options the table says how to store
** (enum cliopt_store) into CTX and giving every other option and operand
** to ON_ARG (NULL: there are none). Returns CLIOPT_GO_ON when the walk got
** to the end, else the exit status (help, version, a usage error, or
** ON_ARG's). With REST not NULL (a command with stop_at_operand), the
** first operand ends the walk instead of going to ON_ARG: *REST points at
** it in ARGV (no operand is the usage error "no command given", unless
** the command has command_optional).
*/
int cliopt_parse(const struct cli_command *cmd, int argc, char **argv,
                 cliopt_handler on_arg, void *ctx, char ***rest);

/* Parse TEXT as a whole number in [LO, HI] for option NAME of CMD (false,
** the usage error printed, otherwise). */
bool cliopt_count(const struct cli_command *cmd, const char *name, const char *text,
                  uint64_t lo, uint64_t hi, uint64_t *out);

/* CMD's whole --help text to OUT. */
void cliopt_help(const struct cli_command *cmd, FILE *out);

/* A usage error of CMD: "vram: CMD: <message> (try 'vram CMD --help')" on
** standard error; returns CLI_EXIT_USAGE. */
int cliopt_usage_error(const struct cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Parse TEXT as a size (src/base/size.c: 6G, 6Gi, 6GiB, 512M,
** 1073741824B; a number without a unit is refused with the forms to
** write) for option NAME of CMD into *OUT; a bad one, or 0, is a usage
** error (false, the line printed). */
bool cliopt_size(const struct cli_command *cmd, const char *name, const char *text,
                 uint64_t *out);

/* Parse TEXT as seconds in [MIN, MAX] for option NAME of CMD (false, the
** usage error printed, otherwise). */
bool cliopt_seconds(const struct cli_command *cmd, const char *name, const char *text,
                    double min, double max, double *out);

/* Parse TEXT as a strategy name for --strategy of CMD; an unknown one is
** a usage error naming every known one (false, the line printed). */
bool cliopt_strategy(const struct cli_command *cmd, const char *text, vram_strategy *out);

/* Every strategy name to OUT: SEP between them, LAST before the last. */
void cliopt_strategy_names(FILE *out, const char *sep, const char *last);

/* The I-th value option O accepts (its values, or what its store implies),
** NULL past the last. */
const char *cliopt_value(const struct cli_opt *o, size_t i);

/* TEXT as one of the values of option O of CMD (which must list them):
** its index into *INDEX; otherwise the usage error "--NAME 'TEXT':
** expected A, B or C (did you mean 'B'?)" (false, the line printed). */
bool cliopt_choice(const struct cli_command *cmd, const struct cli_opt *o,
                   const char *text, size_t *index);

/* The I-th of N NAMES: the form cliopt_nearest takes. */
typedef const char *(*cliopt_names)(size_t i, const void *ctx);

/* Among the names EACH gives (with CTX), the one TEXT is most likely a
** typo of: the only one it is a prefix of, else the nearest by edit
** distance (a swap of two neighbours counts one) if within a third of its
** length (at least 1, at most 3); NULL when none is near. */
const char *cliopt_nearest(const char *text, cliopt_names each, const void *ctx);

/* The note every command that takes a size prints after its options:
** "Sizes are 1024-based: 6G, 6Gi, 6GiB and 6GB alike; 512M, 1.5G, ..."
** with EXAMPLE ("6G") as the example size. */
void cliopt_sizes_note(FILE *out, const char *example);

/* Write TEXT to OUT, the cursor being at column COL, words wrapped before
** column 80 onto lines indented by INDENT spaces; then a newline. */
void cliopt_wrap(FILE *out, int indent, int col, const char *text);

#endif
