/*
** cliopt.c -- long-option parsing shared by the tools (see cliopt.h).
*/
#include <string.h>

#include "cliopt.h"

void
cliopt_begin(struct cliopt_iter *it, int argc, char **argv, const struct cli_opt *table,
             size_t n)
{
    memset(it, 0, sizeof *it);
    it->argc = argc;
    it->argv = argv;
    it->next = 1;
    it->table = table;
    it->n = n;
}

/* The option named by ARG ("--name" or "--name=value"); NULL if none. */
static const struct cli_opt *
find_option(const struct cliopt_iter *it, const char *arg, const char **inline_value)
{
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
    for (size_t i = 0; i < it->n; i++) {
        if (strlen(it->table[i].name) == len &&
            strncmp(it->table[i].name, name, len) == 0) {
            *inline_value = eq != NULL ? eq + 1 : NULL;
            return &it->table[i];
        }
    }
    return NULL;
}

enum cliopt_kind
cliopt_next(struct cliopt_iter *it, const struct cli_opt **opt, const char **value)
{
    if (it->next >= it->argc)
        return CLIOPT_END;
    const char *arg = it->argv[it->next++];
    if (it->only_operands || arg[0] != '-' || strcmp(arg, "-") == 0) {
        *value = arg;
        return CLIOPT_OPERAND;
    }
    if (strcmp(arg, "--") == 0) {
        it->only_operands = true;
        return cliopt_next(it, opt, value);
    }
    if (strcmp(arg, "-h") == 0)
        return CLIOPT_HELP;
    const char *v = NULL;
    const struct cli_opt *o = arg[1] == '-' ? find_option(it, arg, &v) : NULL;
    if (o == NULL) {
        snprintf(it->error, sizeof it->error, "unknown option '%.64s'", arg);
        return CLIOPT_ERROR;
    }
    if (o->metavar == NULL && v != NULL) {
        snprintf(it->error, sizeof it->error, "--%s takes no value", o->name);
        return CLIOPT_ERROR;
    }
    if (o->metavar != NULL && v == NULL) {
        if (it->next >= it->argc) {
            snprintf(it->error, sizeof it->error, "--%s needs a value (%s)", o->name,
                     o->metavar);
            return CLIOPT_ERROR;
        }
        v = it->argv[it->next++];
    }
    *opt = o;
    *value = v;
    return CLIOPT_OPTION;
}

void
cliopt_help(FILE *out, const struct cli_opt *table, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char left[64];
        if (table[i].metavar != NULL)
            snprintf(left, sizeof left, "--%s %s", table[i].name, table[i].metavar);
        else
            snprintf(left, sizeof left, "--%s", table[i].name);
        fprintf(out, "  %-34s %s\n", left, table[i].help);
    }
}
