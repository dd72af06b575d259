/*
** cmd.h -- the subcommands of the `vram` tool. Each takes the arguments
** after its own name (argv[0] is the subcommand) and returns the exit
** code: 0 ok, 1 failure, 2 bad usage or bad input.
*/
#ifndef VRAM_TOOLS_CMD_H
#define VRAM_TOOLS_CMD_H

int cmd_replay(int argc, char **argv);
int cmd_env(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_run(int argc, char **argv);

/* Print "vram: " + the formatted message + newline to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
