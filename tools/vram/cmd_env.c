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
     "print nothing and exit 0 if every variable is well-formed, else 2 naming the "
     "first malformed one",
     .store = CLIOPT_CALL},
};

static const struct cli_command env_cmd = {
    .prog = "vram env",
    .synopsis = "[--json | --markdown | --check]",
    .about = "Print every variable vram reads from the environment, its effective\n"
             "value and its source: environment, or default with whose default it is\n"
             "(vram's, TensorFlow's rule, PyTorch's, ...).\n",
    CLIOPT_TABLE(opt_table),
    .exit_status = "0 ok, 1 output could not be written, 2 bad usage or a malformed "
                   "variable (the table is printed all the same, the variable flagged).",
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

/* The JSON rows being made, and how many were malformed. */
struct json_rows {
    json_object *vars;
    int bad;
};

static void
json_row(void *ctx, const struct env_row *row)
{
    struct json_rows *rows = ctx;
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
        rows->bad++;
    }
    json_object_array_add(rows->vars, o);
}

/* What cli_env_errors counts. */
struct env_errors {
    int bad;
    char *first;
    size_t len;
};

static void
error_row(void *ctx, const struct env_row *row)
{
    struct env_errors *e = ctx;
    if (row->source != NULL)
        return;
    if (e->bad++ == 0 && e->len > 0) {
        const char *value = row->value;
        const char *why = strncmp(value, "error: ", 7) == 0 ? value + 7 : value;
        snprintf(e->first, e->len, "%s", why);
    }
}

int
cli_env_errors(char *first, size_t len)
{
    struct env_errors e = {0, first, len};
    if (len > 0)
        first[0] = '\0';
    env_each(NULL, NULL, error_row, &e); /* LEN 0: FIRST is left alone */
    return e.bad;
}

/* The table as JSON; the number of malformed variables. */
static int
print_json(void)
{
    json_object *root = json_object_new_object();
    struct json_rows rows = {json_object_new_array(), 0};
    env_each(NULL, NULL, json_row, &rows);
    json_object_object_add(root, "variables", rows.vars);
    puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
    json_object_put(root);
    return rows.bad;
}

int
cmd_env(int argc, char **argv)
{
    struct env_args a = {MODE_PRINT, NULL};
    int rc = cliopt_parse(&env_cmd, argc, argv, env_option, &a, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;

    int bad = 0;
    switch (a.mode) {
    case MODE_CHECK: {
        char first[1024];
        int n = cli_env_errors(first, sizeof first);
        if (n == 0)
            return 0;
        if (n > 1)
            cli_error("%s (and %d more malformed: see 'vram env')", first, n - 1);
        else
            cli_error("%s", first);
        return 2;
    }
    case MODE_MARKDOWN:
        env_markdown(stdout);
        break;
    case MODE_JSON:
        bad = print_json();
        break;
    case MODE_PRINT:
        bad = env_print(stdout, NULL, NULL);
        break;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("writing to standard output: %s", strerror(errno));
        return 1;
    }
    return bad > 0 ? 2 : 0;
}
