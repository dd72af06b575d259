/* SPDX-License-Identifier: MIT */
/*
** main.c -- the `vram` command: dispatch to a subcommand of
** VRAM_COMMAND_LIST (cmd.h); `vram help` prints the list.
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/size.h"
#include "base/text.h"
#include "cliopt.h"
#include "cmd.h"
#include "vram.h"

#ifdef VRAM_NO_LIVE_TOOLS
/* Built with -DVRAM_LIVE_TOOLS=OFF: no ncurses, no libmicrohttpd. */
static int
cmd_not_built(int argc, char **argv)
{
    (void)argc;
    cli_error("'%s' is not in this build (configured with -DVRAM_LIVE_TOOLS=OFF); "
              "'vram stat' shows the same figures once",
              argv[0]);
    return 1;
}
#define cmd_top cmd_not_built
#define cmd_exporter cmd_not_built
#endif

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

static const struct command commands[] = {
#define X(name, function, summary) {name, function, summary},
    VRAM_COMMAND_LIST(X)
#undef X
};

void
cli_error(const char *fmt, ...)
{
    /* The line may quote what another process wrote (a trace, a ledger, a
    ** file name): made safe for the terminal here, once for every line. */
    char line[2048], safe[TEXT_SAFE_LEN(sizeof line)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "vram: %s\n", text_safe(line, sizeof line, safe, sizeof safe));
}

static const struct command *
find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0)
            return &commands[i];
    return NULL;
}

/* The I-th word `vram` takes first: a command, then help and version. */
static const char *
command_word(size_t i)
{
    static const char *const more[] = {"help", "version"};
    size_t n = sizeof commands / sizeof commands[0];
    if (i < n)
        return commands[i].name;
    return i - n < sizeof more / sizeof more[0] ? more[i - n] : NULL;
}

static const char *
command_word_of(size_t i, const void *ctx)
{
    (void)ctx;
    return command_word(i);
}

/* "unknown command 'NAME'", and the nearest command if one is near. */
static int unknown_command(const char *what, const char *name);

static void
commands_notes(FILE *out)
{
    fprintf(out, "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        fprintf(out, "  %-10s ", commands[i].name);
        cliopt_wrap(out, 13, 13, commands[i].summary);
    }
    fprintf(out, "\n'vram help COMMAND' or 'vram COMMAND --help' describes a command.\n");
}

static const struct cli_command vram_cmd = {
    .prog = "vram",
    .synopsis = "COMMAND [ARGS...]\nhelp [COMMAND]",
    .about = "GPU memory management for deep learning: replay and analyze allocation\n"
             "traces, run programs under a GPU memory quota, plan a job's memory, and\n"
             "monitor the GPUs' memory per device, group and process.\n",
    .notes = commands_notes,
    .exit_status = "that of the command; 2 bad usage.",
    .stop_at_operand = true,
    .operands = command_word,
};

static int
unknown_command(const char *what, const char *name)
{
    char shown[TEXT_EXCERPT_LEN];
    const char *near = cliopt_nearest(name, command_word_of, NULL);
    text_excerpt(name, shown, sizeof shown);
    if (near != NULL)
        return cliopt_usage_error(
            &vram_cmd, "%sunknown command '%s' (did you mean '%s'?)", what, shown, near);
    return cliopt_usage_error(&vram_cmd, "%sunknown command '%s'", what, shown);
}

/* `vram help [COMMAND]`: the command's --help, or the list. */
static int
help(int argc, char **argv)
{
    if (argc < 2) {
        cliopt_help(&vram_cmd, stdout);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (argc > 2)
        return cliopt_usage_error(&vram_cmd, "help takes one command name");
    const struct command *c = find_command(argv[1]);
    if (c == NULL)
        return unknown_command("help: ", argv[1]);
    char *args[] = {argv[1], "--help", NULL};
    return c->run(2, args);
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        cliopt_help(&vram_cmd, stderr);
        return 2;
    }
    /* Options before the command: --help, --version and nothing else. */
    struct cliopt_iter it;
    const struct cli_opt *opt = NULL;
    const char *name = NULL;
    cliopt_begin(&it, &vram_cmd, argc, argv);
    switch (cliopt_next(&it, &opt, &name)) {
    case CLIOPT_EXIT:
        return it.status;
    case CLIOPT_END:
        cliopt_help(&vram_cmd, stderr);
        return 2;
    case CLIOPT_OPTION: /* vram_cmd has no options of its own */
    case CLIOPT_OPERAND:
        break;
    }
    char **args = argv + it.next - 1;
    int n = argc - (it.next - 1);
    if (strcmp(name, "help") == 0)
        return help(n, args);
    if (strcmp(name, "version") == 0) {
        printf("vram %s\n", VRAM_VERSION);
        return 0;
    }
    const struct command *c = find_command(name);
    if (c != NULL)
        return c->run(n, args);
    return unknown_command("", name);
}
