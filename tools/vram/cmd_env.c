/*
** cmd_env.c -- `vram env`: every setting vram reads from the environment,
** its effective value and where it came from; `--markdown` prints the
** documentation (docs/ENVIRONMENT.md is that output) and `--check` only
** says, through the exit status, whether vram_open would accept the
** environment. All of it comes from the one table in src/config/env.c.
*/
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "config/env.h"
#include "vram.h"

enum env_mode { MODE_PRINT, MODE_MARKDOWN, MODE_CHECK, MODE_HELP };

/* The options, in one table from which both the parser and --help come. */
static const struct {
    const char *name; /* with the dashes */
    enum env_mode mode;
    const char *help;
} env_opts[] = {
    {"--markdown", MODE_MARKDOWN,
     "print the documentation of every variable as Markdown"},
    {"--check", MODE_CHECK,
     "exit 0 if the environment is valid, else 2 naming the bad value"},
    {"--help", MODE_HELP, "print this help"},
};

#define N_ENV_OPTS (sizeof env_opts / sizeof env_opts[0])

static void
env_usage(FILE *out)
{
    fprintf(out, "usage: vram env [--markdown | --check]\n\n"
                 "Print every variable vram reads from the environment, its effective\n"
                 "value and its source (default or environment).\n\n"
                 "Options:\n");
    for (size_t i = 0; i < N_ENV_OPTS; i++)
        fprintf(out, "  %-12s %s\n", env_opts[i].name, env_opts[i].help);
    fprintf(out, "\nExit status: 0 ok, 1 output could not be written, 2 bad usage\n"
                 "or (with --check) a malformed variable.\n");
}

int
cmd_env(int argc, char **argv)
{
    enum env_mode mode = MODE_PRINT;
    const char *mode_arg = NULL;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        enum env_mode m = MODE_PRINT;
        bool known = false;
        if (strcmp(arg, "-h") == 0) {
            m = MODE_HELP;
            known = true;
        }
        for (size_t k = 0; k < N_ENV_OPTS && !known; k++)
            if (strcmp(arg, env_opts[k].name) == 0) {
                m = env_opts[k].mode;
                known = true;
            }
        if (!known) {
            if (arg[0] == '-')
                cli_error("env: unknown option '%s' (try 'vram env --help')", arg);
            else
                cli_error("env: unexpected argument '%s' (try 'vram env --help')", arg);
            return 2;
        }
        if (m == MODE_HELP) {
            env_usage(stdout);
            return 0;
        }
        if (mode_arg != NULL && m != mode) {
            cli_error("env: %s and %s cannot be combined", mode_arg, arg);
            return 2;
        }
        mode = m;
        mode_arg = arg;
    }

    switch (mode) {
    case MODE_CHECK: {
        struct vram_env env;
        if (env_load(NULL, NULL, &env) != VRAM_OK) {
            cli_error("%s", vram_last_error());
            return 2;
        }
        return 0;
    }
    case MODE_MARKDOWN:
        env_markdown(stdout);
        break;
    case MODE_PRINT:
    case MODE_HELP:
        env_print(stdout, NULL, NULL);
        break;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("writing to standard output: %s", strerror(errno));
        return 1;
    }
    return 0;
}
