/* SPDX-License-Identifier: MIT */
/*
** text.c -- the text report of `vram analyze`: an_print_text(), one
** heading word a line (trace, peak, phases, iterations, leak, replay,
** devices, oom), each followed by its detail, long lists cut to a few rows.
*/
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "analyze/analyze.h"
#include "analyze/analyze_internal.h"
#include "base/size.h"
#include "base/text.h"

/* Rows printed of long lists; the rest are summed up in one line. */
#define TEXT_ROWS 8

const char *
an_fmt_signed(double bytes, char *buf, size_t len)
{
    char tmp[24]; /* "1023.99 EiB" at most */
    size_format((uint64_t)llround(fabs(bytes)), tmp, sizeof tmp);
    buf[0] = bytes < 0 ? '-' : '+';
    snprintf(buf + 1, len - 1, "%s", tmp);
    return buf;
}

/* Seconds from the first event of R's trace to T_US. */
static double
rel_s(const struct an_result *r, uint64_t t_us)
{
    uint64_t t0 =
        r->trace != NULL && r->trace->n_events > 0 ? r->trace->events[0].t_us : 0;
    return t_us >= t0 ? (double)(t_us - t0) / 1e6 : -(double)(t0 - t_us) / 1e6;
}

static void
print_classes(FILE *out, const struct an_class *c, size_t n)
{
    for (size_t i = 0; i < n && i < TEXT_ROWS; i++) {
        char lo[32], hi[32], b[32], range[80];
        fmt_size(c[i].lo, lo, sizeof lo);
        if (c[i].hi == UINT64_MAX)
            snprintf(hi, sizeof hi, "...");
        else
            fmt_size(c[i].hi, hi, sizeof hi);
        snprintf(range, sizeof range, "[%s, %s)", lo, hi);
        fprintf(out, "    %-28s %6llu allocation%s %12s\n", range,
                (unsigned long long)c[i].count, c[i].count == 1 ? " " : "s",
                fmt_size(c[i].bytes, b, sizeof b));
    }
    if (n > TEXT_ROWS) {
        uint64_t count = 0, bytes = 0;
        for (size_t i = TEXT_ROWS; i < n; i++) {
            count += c[i].count;
            bytes += c[i].bytes;
        }
        char b[32];
        fprintf(out, "    and %zu smaller classes: %llu allocations, %s\n", n - TEXT_ROWS,
                (unsigned long long)count, fmt_size(bytes, b, sizeof b));
    }
}

/* The frames of site SITE, innermost first, as one line of at most
** TEXT_STACK frames: "a.py:3 in f < b.py:9 in main < ...". */
#define TEXT_STACK 6
static void
print_stack(FILE *out, const struct trace *t, uint32_t site)
{
    uint32_t n;
    const uint32_t *f = trace_site_frames(t, site, &n);
    char buf[600];

    if (n == 0)
        return;
    fprintf(out, "      stack:");
    for (uint32_t i = 0; i < n && i < TEXT_STACK; i++)
        fprintf(out, "%s %s", i > 0 ? " <" : "", an_frame_text(t, f[i], false, buf, sizeof buf));
    if (n > TEXT_STACK)
        fprintf(out, " < ... (%u more)", n - TEXT_STACK);
    fprintf(out, "\n");
}

/* The peak's live set by call site. */
static void
print_peak_sites(FILE *out, const struct an_result *r)
{
    char b[32], head[700];

    if (r->n_peak_sites == 0)
        return;
    fprintf(out, "  live then, by call site:\n");
    for (size_t i = 0; i < r->n_peak_sites && i < TEXT_ROWS; i++) {
        const struct an_site *x = &r->peak_sites[i];
        fprintf(out, "    %12s in %6llu allocation%s from %s\n", fmt_size(x->bytes, b, sizeof b),
                (unsigned long long)x->count, x->count == 1 ? " " : "s",
                an_site_headline(r->trace, x, head, sizeof head));
        print_stack(out, r->trace, x->site);
    }
    if (r->n_peak_sites > TEXT_ROWS)
        fprintf(out, "    and %zu more call sites\n", r->n_peak_sites - TEXT_ROWS);
}

/* The leak suspects by call site: "1.00 MiB per iteration from
** model.py:88 in forward, never freed, 28 of 28 iterations". */
static void
print_leak_sites(FILE *out, const struct an_result *r)
{
    char a[32], b[32], head[700];

    if (r->n_leak_sites == 0 || r->leak_site_iters == 0)
        return;
    fprintf(out, "  suspects by call site:\n");
    for (size_t i = 0; i < r->n_leak_sites && i < TEXT_ROWS; i++) {
        const struct an_site *x = &r->leak_sites[i];
        double rate = (double)x->bytes / (double)r->leak_site_iters;
        fprintf(out,
                "    %s per iteration from %s, never freed, %u of %zu iterations (%llu "
                "allocation%s, %s)\n",
                fmt_size((uint64_t)llround(rate), a, sizeof a),
                an_site_headline(r->trace, x, head, sizeof head), x->iters,
                r->leak_site_iters, (unsigned long long)x->count, x->count == 1 ? "" : "s",
                fmt_size(x->bytes, b, sizeof b));
        if (x->held_by != NULL)
            fprintf(out, "      held by %s (%llu of %llu)\n", x->held_by,
                    (unsigned long long)x->held_count, (unsigned long long)x->count);
        print_stack(out, r->trace, x->site);
    }
    if (r->n_leak_sites > TEXT_ROWS)
        fprintf(out, "    and %zu more call sites\n", r->n_leak_sites - TEXT_ROWS);
}

/* Phases grouped by label: the largest peak of each, in order of first
** appearance. */
static void
print_phases(FILE *out, const struct an_result *r)
{
    const struct trace *t = r->trace;
    size_t shown = 0;
    for (size_t i = 0; i < r->n_phase_groups && shown < TEXT_ROWS; i++, shown++) {
        const struct an_phase_group *g = &r->phase_groups[i];
        char b[32];
        fprintf(out, "    %-32s peak %s%s", label_text(t, g->label),
                fmt_size(g->peak_live, b, sizeof b), g->count > 1 ? "" : "\n");
        if (g->count > 1)
            fprintf(out, " (largest of %llu)\n", (unsigned long long)g->count);
    }
    if (r->n_phase_groups > shown)
        fprintf(out, "    and %zu more labels\n", r->n_phase_groups - shown);
}

/* "at this rate the 80.00 GiB device is full after about 310,000 more
** iterations": two significant digits, with thousands separators. */
static void
print_leak_projection(FILE *out, const struct an_result *r)
{
    char a[32];
    fmt_size(r->leak_capacity, a, sizeof a);
    const char *what = r->leak_capacity_is_cap ? "cap" : "device";
    if (r->leak_iters_to_full < 1.0) {
        fprintf(out, "  at this rate the %s %s is full within the next iteration\n", a, what);
        return;
    }
    double n = r->leak_iters_to_full;
    double mag = pow(10.0, floor(log10(n)) - 1.0);
    if (mag < 1.0)
        mag = 1.0;
    double rounded = floor(n / mag + 0.5) * mag;
    char digits[32], grouped[48];
    snprintf(digits, sizeof digits, "%.0f", rounded);
    size_t len = strlen(digits), j = 0;
    for (size_t i = 0; i < len && j + 2 < sizeof grouped; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            grouped[j++] = ',';
        grouped[j++] = digits[i];
    }
    grouped[j] = '\0';
    bool simulated = !r->leak_capacity_is_cap && r->leak_capacity == VRAM_SIM_DEFAULT_MEMORY;
    fprintf(out, "  at this rate the %s %s%s is full after about %s more iterations\n", a,
            what, simulated ? " (a simulated H200; --device-memory or --limit for yours)" : "",
            grouped);
}

static void
print_leak(FILE *out, const struct an_result *r)
{
    char a[32], b[32];
    if (r->n_iters < 3 || r->leak_iters_used < LEAK_ITERS_MIN) {
        fprintf(out,
                "leak       no verdict: %zu iteration%s (a leak shows across %d or more "
                "after the first)\n",
                r->n_iters, r->n_iters == 1 ? "" : "s", LEAK_ITERS_MIN);
        return;
    }
    if (!r->leak) {
        fprintf(out,
                "leak       no: the least live bytes per iteration change by %s per "
                "iteration (R^2 %.2f over %zu iterations)\n",
                an_fmt_signed(r->leak_bytes_per_iter, a, sizeof a), r->leak_r2,
                r->leak_iters_used);
        return;
    }
    fprintf(out,
            "leak       YES: memory grew %s per iteration (R^2 %.2f over %zu "
            "iterations, %s in all)\n",
            fmt_size((uint64_t)llround(r->leak_bytes_per_iter), a, sizeof a), r->leak_r2,
            r->leak_iters_used,
            fmt_size((uint64_t)llround(r->leak_bytes_per_iter *
                                       (double)(r->leak_iters_used - 1)),
                     b, sizeof b));
    print_leak_projection(out, r);
    if (r->n_suspects == 0) {
        fprintf(out, "  no allocation outlived its iteration to the end of the fit\n");
        return;
    }
    fprintf(out,
            "  suspects: %zu allocations (%s) born after the first iteration are still "
            "alive at the end of iteration %zu:\n",
            r->n_suspects, fmt_size(r->suspect_bytes, a, sizeof a), r->leak_iters_used + 1);
    /* Grouped by size (the list has a size's suspects together): count,
     * birth range. */
    size_t groups = 0;
    for (size_t i = 0; i < r->n_suspects;) {
        size_t j = i;
        uint32_t lo = UINT32_MAX, hi = 0;
        while (j < r->n_suspects && r->suspects[j].size == r->suspects[i].size) {
            if (r->suspects[j].born < lo)
                lo = r->suspects[j].born;
            if (r->suspects[j].born > hi)
                hi = r->suspects[j].born;
            j++;
        }
        if (groups < TEXT_ROWS) {
            fprintf(out, "    %6zu x %-12s born in iteration%s %u", j - i,
                    fmt_size(r->suspects[i].size, a, sizeof a), lo == hi ? "" : "s",
                    lo + 1);
            if (hi != lo)
                fprintf(out, "..%u", hi + 1);
            fprintf(out, " (first id %llu)\n", (unsigned long long)r->suspects[i].id);
        }
        groups++;
        i = j;
    }
    if (groups > TEXT_ROWS)
        fprintf(out, "    and %zu more sizes\n", groups - TEXT_ROWS);
    print_leak_sites(out, r);
}

/* The "why" line of each cause: live + request WHAT the bound, the cap or,
** BY_STRATEGY, what the replay's strategy reserved, its name between WHAT
** and AFTER; then what that means. */
struct oom_why {
    bool by_strategy;
    const char *what, *after, *means;
};
static const struct oom_why oom_why[] = {
    [AN_OOM_OVER_CAP] = {false, "exceeds the cap of", NULL,
                         "the job is too big for it (see `vram plan`)"},
    [AN_OOM_UNDER_CAP] = {false, "fits under the cap of", NULL,
                          "the free memory was in pieces or held outside the live set "
                          "(fragmentation); try VRAM_STRATEGY=expandable"},
    [AN_OOM_NEW_HIGH] = {true, "is more than", "ever reserved in the replay",
                         "the job outgrew its memory; give the cap with --limit for a "
                         "firmer answer"},
    [AN_OOM_WITHIN_RESERVED] = {true, "is within what", "reserved before in the replay",
                                "the memory existed, likely in pieces (fragmentation); try "
                                "VRAM_STRATEGY=expandable, or give the cap with --limit"},
};

static void
print_oom_why(FILE *out, const struct an_result *r)
{
    if ((size_t)r->oom_cause >= sizeof oom_why / sizeof *oom_why)
        return;
    const struct oom_why *w = &oom_why[r->oom_cause];
    if (w->what == NULL)
        return; /* AN_OOM_NONE */
    char need[32], bound[32];
    fprintf(out, "  why: live + request = %s %s ",
            fmt_size(r->oom_live + r->oom_request, need, sizeof need), w->what);
    if (w->by_strategy)
        fprintf(out, "%s %s (%s)", vram_strategy_name(r->strategy), w->after,
                fmt_size(r->oom_reserved, bound, sizeof bound));
    else
        fputs(fmt_size(r->oom_cap, bound, sizeof bound), out);
    fprintf(out, ": %s\n", w->means);
}

static void
print_oom(FILE *out, const struct an_result *r)
{
    char a[32], b[32], c[32];
    if (!r->ends_in_oom) {
        fprintf(out, "oom        none: the trace does not end in a refused allocation\n");
        return;
    }
    fprintf(out,
            "oom        the last allocation failed at %.3f s: %s asked with %s live\n",
            rel_s(r, r->oom_time_us), fmt_size(r->oom_request, a, sizeof a),
            fmt_size(r->oom_live, b, sizeof b));
    print_oom_why(out, r);
    if (r->n_oom_classes > 0) {
        fprintf(out, "  live then, by size class:\n");
        print_classes(out, r->oom_classes, r->n_oom_classes);
    }
    if (r->n_oom_largest > 0) {
        fprintf(out, "  largest live allocations then:\n");
        for (size_t i = 0; i < r->n_oom_largest && i < 5; i++) {
            const struct an_suspect *s = &r->oom_largest[i];
            if (s->born == AN_NO_ITER)
                snprintf(c, sizeof c, "before the first iteration");
            else
                snprintf(c, sizeof c, "in iteration %u", s->born + 1);
            fprintf(out, "    id %-10llu %12s  born %s\n", (unsigned long long)s->id,
                    fmt_size(s->size, a, sizeof a), c);
        }
    }
}

void
an_print_text(FILE *out, const struct an_result *r)
{
    if (out == NULL || r == NULL)
        return;
    const struct trace *t = r->trace;
    char a[32], b[32], c[32], path[TEXT_SAFE_LEN(1024)];
    if (t != NULL) /* the path may be anybody's file name: made safe */
        fprintf(out, "trace      %s: %llu events, %u allocations, %d device%s\n",
                text_safe(t->path, 1024, path, sizeof path),
                (unsigned long long)t->n_events, t->n_slots, t->n_devices,
                t->n_devices == 1 ? "" : "s");
    fprintf(out, "peak       %s live at %.3f s (event %llu",
            fmt_size(r->peak_bytes, a, sizeof a), rel_s(r, r->peak_time_us),
            (unsigned long long)(r->peak_event + 1));
    if (r->peak_iter != SIZE_MAX)
        fprintf(out, ", iteration %zu", r->peak_iter + 1);
    fprintf(out, ")\n");
    if (r->n_peak_classes > 0) {
        fprintf(out, "  live then, by size class:\n");
        print_classes(out, r->peak_classes, r->n_peak_classes);
    }
    print_peak_sites(out, r);
    if (r->n_peak_origins > 0) {
        fprintf(out, "  live then, by the phase that allocated it:\n");
        for (size_t i = 0; i < r->n_peak_origins && i < TEXT_ROWS; i++)
            fprintf(out, "    %-32s %6llu allocation%s %s\n",
                    label_text(t, r->peak_origins[i].label),
                    (unsigned long long)r->peak_origins[i].count,
                    r->peak_origins[i].count == 1 ? " " : "s",
                    fmt_size(r->peak_origins[i].bytes, a, sizeof a));
    }
    if (r->n_phases > 0) {
        fprintf(out, "phases     %zu, from %llu marks:\n", r->n_phases,
                (unsigned long long)(t != NULL ? t->n_marks : 0));
        print_phases(out, r);
    }
    if (r->iters_from_marks)
        fprintf(out, "iterations %zu, from the marks\n", r->n_iters);
    else if (r->iters_from_floor)
        fprintf(out,
                "iterations %zu, detected where live bytes come back to their floor of "
                "%s (requests)\n",
                r->n_iters, fmt_size(r->floor_bytes, a, sizeof a));
    else if (r->period_events > 0)
        fprintf(out,
                "iterations %zu, detected: the events repeat every %llu events (%.0f%% "
                "match%s)\n",
                r->n_iters, (unsigned long long)r->period_events, 100.0 * r->period_match,
                r->period_from_shape ? " of allocations, frees and lifetimes; sizes vary"
                                     : "");
    else
        fprintf(out, "iterations %zu: no marks and no repeating pattern\n", r->n_iters);
    if (r->leak_iters_used >= 2) {
        /* Over the iterations of the leak fit: 1 .. leak_iters_used. */
        size_t first = 1, last = r->leak_iters_used, lo = first, hi = first;
        for (size_t i = first; i <= last; i++) {
            if (r->iters[i].min_live < r->iters[lo].min_live)
                lo = i;
            if (r->iters[i].min_live > r->iters[hi].min_live)
                hi = i;
        }
        if (r->iters[lo].min_live == r->iters[hi].min_live)
            fprintf(out, "  quietest point of iterations %zu..%zu: %s in every one\n",
                    first + 1, last + 1, fmt_size(r->iters[lo].min_live, a, sizeof a));
        else
            fprintf(
                out,
                "  quietest point of iterations %zu..%zu: from %s (iteration %zu) to %s "
                "(iteration %zu)\n",
                first + 1, last + 1, fmt_size(r->iters[lo].min_live, a, sizeof a), lo + 1,
                fmt_size(r->iters[hi].min_live, b, sizeof b), hi + 1);
    }
    print_leak(out, r);
    fprintf(out, "replay     %s: peak reserved %s for %s live: fragmentation %.3f",
            vram_strategy_name(r->strategy), fmt_size(r->peak_reserved, a, sizeof a),
            fmt_size(r->peak_bytes, b, sizeof b), r->fragmentation);
    if (r->replay_ooms > 0)
        fprintf(out, ", %llu allocations refused", (unsigned long long)r->replay_ooms);
    fprintf(out, "\n");
    /* Over time: the most reserved beyond what was live, per point. */
    size_t worst = SIZE_MAX;
    for (size_t i = 0; i < r->n_points; i++) {
        const struct an_point *pt = &r->points[i];
        if (pt->reserved > pt->live &&
            (worst == SIZE_MAX ||
             pt->reserved - pt->live > r->points[worst].reserved - r->points[worst].live))
            worst = i;
    }
    if (worst != SIZE_MAX)
        fprintf(out,
                "  over time: at most %s reserved beyond live, at %.3f s (%s reserved, "
                "%s live)\n",
                fmt_size(r->points[worst].reserved - r->points[worst].live, a, sizeof a),
                rel_s(r, r->points[worst].t_us),
                fmt_size(r->points[worst].reserved, b, sizeof b),
                fmt_size(r->points[worst].live, c, sizeof c));
    if (r->n_devices > 1) {
        fprintf(out, "devices    peak live per device:");
        for (int d = 0; d < r->n_devices; d++)
            fprintf(out, " %d: %s%s", d, fmt_size(r->device_peaks[d], a, sizeof a),
                    d + 1 < r->n_devices ? "," : "\n");
    }
    print_oom(out, r);
}
