/* SPDX-License-Identifier: MIT */
/*
** cmd_env.c -- `vram env`: every setting vram reads from the environment,
** its effective value and where it came from (`--json`: as JSON); `--markdown` prints the
** documentation (docs/ENVIRONMENT.md is that output) and `--check` only
** says, through the exit status, whether vram_open would accept the
** environment. All of it comes from the one table in src/config/env.c.
*/
#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cliopt.h"
#include "cmd.h"
#include "config/env.h"
#include "vram.h"

enum env_mode { MODE_PRINT, MODE_JSON, MODE_MARKDOWN, MODE_CHECK };

static const struct cli_opt opt_table[] = {
    {MODE_JSON, "json", 0, NULL,
     "print one JSON object {\"variables\":[{\"name\",\"value\",\"source\"},...]}; "
     "a default has \"default_from\" (whose default: \"vram\", \"TensorFlow\", ...); a "
     "malformed value has \"error\" instead of \"value\" and \"source\"",
     .store = CLIOPT_CALL},
    {MODE_MARKDOWN, "markdown", 0, NULL,
     "print the documentation of every variable as Markdown", .store = CLIOPT_CALL},
    {MODE_CHECK, "check", 0, NULL,
     "exit 0 if the environment is valid, else 2 naming the bad value",
     .store = CLIOPT_CALL},
};

static const struct cli_command env_cmd = {
    .prog = "vram env",
    .synopsis = "[--json | --markdown | --check]",
    .about = "Print every variable vram reads from the environment, its effective\n"
             "value and its source: environment, or default with whose default it is\n"
             "(vram's, TensorFlow's rule, PyTorch's, ...).\n",
    CLIOPT_TABLE(opt_table),
    .exit_status = "0 ok, 1 output could not be written, 2 bad usage or (with --check) a "
                   "malformed variable.",
    .no_operands = true,
};

/* What the command line asks of `vram env`: one mode, named by MODE_ARG. */
struct env_args {
    enum env_mode mode;
    const char *mode_arg;
};

/* --json, --markdown or --check (cliopt_handler): one mode at a time. */
static int
env_option(void *ctx, const struct cli_opt *opt, const char *value)
{
    struct env_args *a = ctx;
    (void)value;
    if (a->mode_arg != NULL && (enum env_mode)opt->id != a->mode)
        return cliopt_usage_error(&env_cmd, "--%s and --%s cannot be combined", a->mode_arg,
                                  opt->name);
    a->mode = (enum env_mode)opt->id;
    a->mode_arg = opt->name;
    return CLIOPT_GO_ON;
}

static void
json_row(void *ctx, const struct env_row *row)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(row->name));
    if (row->source != NULL) {
        json_object_object_add(o, "value", json_object_new_string(row->value));
        json_object_object_add(o, "source", json_object_new_string(row->source));
        if (row->origin != NULL)
            json_object_object_add(o, "default_from", json_object_new_string(row->origin));
    } else {
        /* env_each says "error: why"; the key says it is an error. */
        const char *why =
            strncmp(row->value, "error: ", 7) == 0 ? row->value + 7 : row->value;
        json_object_object_add(o, "error", json_object_new_string(why));
    }
    json_object_array_add(ctx, o);
}

static void
print_json(void)
{
    json_object *root = json_object_new_object();
    json_object *vars = json_object_new_array();
    env_each(NULL, NULL, json_row, vars);
    json_object_object_add(root, "variables", vars);
    puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
    json_object_put(root);
}

int
cmd_env(int argc, char **argv)
{
    struct env_args a = {MODE_PRINT, NULL};
    int rc = cliopt_parse(&env_cmd, argc, argv, env_option, &a, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;

    switch (a.mode) {
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
    case MODE_JSON:
        print_json();
        break;
    case MODE_PRINT:
        env_print(stdout, NULL, NULL);
        break;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("writing to standard output: %s", strerror(errno));
        return 1;
    }
    return 0;
}
