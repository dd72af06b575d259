/*
** main.c -- the `vram` command: dispatch to a subcommand.
** The table below is the one list of subcommands; `vram help` prints it.
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
    {"replay", cmd_replay,
     "replay allocation traces through each strategy on a simulated GPU"},
    {"env", cmd_env,
     "print every setting vram reads from the environment, and its source"},
    {"devices", cmd_devices,
     "list the GPUs and the logical devices the configuration makes of them"},
    {"run", cmd_run, "run a command under a GPU memory quota (the preload library)"},
    {"analyze", cmd_analyze,
     "peak, iterations, leak verdict, fragmentation and OOM story of a trace"},
    {"doctor", cmd_doctor,
     "check the environment, the GPUs or a trace for the usual memory problems"},
    {"plan", cmd_plan, "predict a training job's peak GPU memory before it runs"},
    {"stat", cmd_stat, "GPU memory per device, group and process, once (--json, --config)"},
    {"top", cmd_top, "GPU memory per device, group and process, live in the terminal"},
    {"exporter", cmd_exporter, "serve the monitoring metrics to Prometheus at /metrics"},
    {"admin", cmd_admin,
     "manage the host's policy: /etc/ld.so.preload, the policy file, dmem (root)"},
};

void
cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("vram: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void
usage(FILE *out)
{
    fprintf(out, "usage: vram COMMAND [ARGS...]\n\nCommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'vram COMMAND --help' describes a command. Version %s.\n",
            VRAM_VERSION);
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "help") == 0 || strcmp(name, "--help") == 0 ||
        strcmp(name, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("vram %s\n", VRAM_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    cli_error("unknown command '%s' (try 'vram help')", name);
    return 2;
}
