/* SPDX-License-Identifier: MIT */
/*
** cmd_devices.c -- `vram devices`: the physical devices the backend sees
** (index, UUID, name, total and free memory) and the logical devices the
** configuration from the environment makes of them (index, physical
** device, strategy, cap). With --json, one object
** {"physical":[...],"logical":[...]} with sizes in integer bytes.
**
** Nothing here initializes a device: caps come from the configuration
** (vram_get_config), and a device without a limit or fraction shows
** TensorFlow's rule, "free - reserve", which is only evaluated when a
** program first uses the device. Listing therefore never freezes or
** allocates anything.
*/
#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "cmd.h"
#include "base/size.h"
#include "vram.h"

#define TF_RULE "free - reserve (TensorFlow's rule)"

/* The one option, --json, is stored in a bool. */
static const struct cli_opt opt_table[] = {
    {0, "json", 0, NULL, "print one JSON object with sizes in bytes", .store = CLIOPT_SET},
};

static const struct cli_command devices_cmd = {
    .prog = "vram devices",
    .synopsis = "[--json]",
    .about = "List the physical devices (index, UUID, name, total and free memory)\n"
             "and the logical devices that the environment (VRAM_BACKEND,\n"
             "VRAM_STRATEGY, VRAM_MEMORY_LIMIT, VRAM_MEMORY_FRACTION) makes of them.\n"
             "No device is initialized: a cap that depends on free memory at first\n"
             "use is shown as TensorFlow's rule.\n",
    CLIOPT_TABLE(opt_table),
    .exit_status = "0 ok, 1 no driver, no device or output error, 2 bad usage or a "
                   "malformed environment variable.",
    .no_operands = true,
};

/* One logical device as the configuration describes it. */
struct logical_row {
    int index, physical;
    vram_strategy strategy;
    uint64_t limit_bytes; /* memory_limit, or fraction x total; 0 = TF's rule */
    double fraction;      /* > 0 when the cap comes from the fraction */
};

/* Physical devices and the logical rows of CTX, into the caller's arrays. */
struct listing {
    int n_physical, n_logical;
    vram_physical_info *phys; /* n_physical */
    struct logical_row *rows; /* n_logical */
};

static void
listing_free(struct listing *l)
{
    free(l->phys);
    free(l->rows);
}

/* Fill L from CTX. Returns VRAM_OK or the failing call's status. */
static vram_status
listing_load(vram_context *ctx, struct listing *l)
{
    memset(l, 0, sizeof *l);
    vram_status st = vram_physical_count(ctx, &l->n_physical);
    if (st == VRAM_OK)
        st = vram_device_count(ctx, &l->n_logical);
    if (st != VRAM_OK)
        return st;
    l->phys = calloc((size_t)l->n_physical + 1, sizeof *l->phys);
    l->rows = calloc((size_t)l->n_logical + 1, sizeof *l->rows);
    if (l->phys == NULL || l->rows == NULL)
        return VRAM_E_HOST_MEMORY;
    int k = 0;
    for (int d = 0; d < l->n_physical; d++) {
        st = vram_physical_info_get(ctx, d, &l->phys[d]);
        vram_device_config cfg;
        if (st == VRAM_OK)
            st = vram_get_config(ctx, d, &cfg);
        if (st != VRAM_OK)
            return st;
        int n = cfg.n_logical > 1 ? cfg.n_logical : 1;
        for (int i = 0; i < n && k < l->n_logical; i++, k++) {
            struct logical_row *r = &l->rows[k];
            r->index = k;
            r->physical = d;
            r->strategy = cfg.strategy;
            r->limit_bytes = cfg.limit_bytes[i];
            if (r->limit_bytes == 0 && cfg.fraction > 0.0) {
                r->fraction = cfg.fraction;
                r->limit_bytes =
                    (uint64_t)(cfg.fraction * (double)l->phys[d].total_bytes);
            }
        }
    }
    l->n_logical = k;
    return VRAM_OK;
}

static int
print_json(const struct listing *l)
{
    struct json_object *root = json_object_new_object();
    struct json_object *phys = json_object_new_array();
    struct json_object *logi = json_object_new_array();
    if (root == NULL || phys == NULL || logi == NULL) {
        json_object_put(root);
        json_object_put(phys);
        json_object_put(logi);
        cli_error("devices: out of memory");
        return 1;
    }
    json_object_object_add(root, "physical", phys);
    json_object_object_add(root, "logical", logi);
    for (int d = 0; d < l->n_physical; d++) {
        const vram_physical_info *p = &l->phys[d];
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "index", json_object_new_int(p->index));
        json_object_object_add(o, "uuid", json_object_new_string(p->uuid));
        json_object_object_add(o, "name", json_object_new_string(p->name));
        json_object_object_add(o, "total_bytes", json_object_new_uint64(p->total_bytes));
        json_object_object_add(o, "free_bytes", json_object_new_uint64(p->free_bytes));
        char cc[24];
        snprintf(cc, sizeof cc, "%d.%d", p->cc_major, p->cc_minor);
        json_object_object_add(o, "compute_capability", json_object_new_string(cc));
        json_object_object_add(o, "granularity_bytes",
                               json_object_new_uint64(p->granularity));
        json_object_array_add(phys, o);
    }
    for (int i = 0; i < l->n_logical; i++) {
        const struct logical_row *r = &l->rows[i];
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "index", json_object_new_int(r->index));
        json_object_object_add(o, "physical", json_object_new_int(r->physical));
        json_object_object_add(o, "strategy",
                               json_object_new_string(vram_strategy_name(r->strategy)));
        /* cap_bytes null: decided at first use by TensorFlow's rule. */
        json_object_object_add(o, "cap_bytes",
                               r->limit_bytes > 0 ? json_object_new_uint64(r->limit_bytes)
                                                  : NULL);
        const char *rule = r->limit_bytes == 0 ? "free_minus_reserve"
                           : r->fraction > 0.0 ? "memory_fraction"
                                               : "memory_limit";
        json_object_object_add(o, "cap_rule", json_object_new_string(rule));
        json_object_array_add(logi, o);
    }
    printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
    json_object_put(root);
    return 0;
}

static int
print_table(const struct listing *l)
{
    int name_w = 4;
    for (int d = 0; d < l->n_physical; d++) {
        int n = (int)strlen(l->phys[d].name);
        if (n > name_w)
            name_w = n;
    }
    printf("Physical devices\n");
    printf("  %-3s  %-40s  %-*s  %12s  %12s  %s\n", "#", "UUID", name_w, "Name", "Total",
           "Free", "CC");
    for (int d = 0; d < l->n_physical; d++) {
        const vram_physical_info *p = &l->phys[d];
        char total[32], fr[32];
        printf("  %-3d  %-40s  %-*s  %12s  %12s  %d.%d\n", p->index, p->uuid, name_w,
               p->name, size_format(p->total_bytes, total, sizeof total),
               size_format(p->free_bytes, fr, sizeof fr), p->cc_major, p->cc_minor);
    }
    printf("\nLogical devices\n");
    printf("  %-3s  %-8s  %-16s  %s\n", "#", "Physical", "Strategy", "Cap");
    for (int i = 0; i < l->n_logical; i++) {
        const struct logical_row *r = &l->rows[i];
        char cap[96], sz[32];
        if (r->limit_bytes == 0)
            snprintf(cap, sizeof cap, "%s", TF_RULE);
        else if (r->fraction > 0.0)
            snprintf(cap, sizeof cap, "%s (fraction %g of total)",
                     size_format(r->limit_bytes, sz, sizeof sz), r->fraction);
        else
            snprintf(cap, sizeof cap, "%s (memory limit)",
                     size_format(r->limit_bytes, sz, sizeof sz));
        printf("  %-3d  %-8d  %-16s  %s\n", r->index, r->physical,
               vram_strategy_name(r->strategy), cap);
    }
    return 0;
}

int
cmd_devices(int argc, char **argv)
{
    bool json = false;
    int rc = cliopt_parse(&devices_cmd, argc, argv, NULL, &json, NULL);
    if (rc != CLIOPT_GO_ON)
        return rc;

    vram_context *ctx = NULL;
    vram_status st = vram_open(NULL, &ctx);
    switch (st) {
    case VRAM_OK:
        break;
    case VRAM_E_NO_DRIVER:
        cli_error("no CUDA driver: %s", vram_last_error());
        return 1;
    case VRAM_E_CONFIG:
        cli_error("%s", vram_last_error());
        return 2;
    default:
        cli_error("cannot open the device backend: %s", vram_last_error());
        return 1;
    }

    struct listing l;
    st = listing_load(ctx, &l);
    if (st != VRAM_OK) {
        cli_error("devices: %s",
                  st == VRAM_E_HOST_MEMORY ? "out of host memory" : vram_last_error());
        rc = 1;
    } else {
        rc = json ? print_json(&l) : print_table(&l);
    }
    listing_free(&l);
    vram_close(ctx);
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
        cli_error("writing to standard output: %s", strerror(errno));
        rc = 1;
    }
    return rc;
}
