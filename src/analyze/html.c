/* SPDX-License-Identifier: MIT */
/*
** html.c -- `vram analyze --html`: the analysis of one trace as a single
** self-contained HTML5 page. Inline CSS and inline SVG only: no script, no
** font, image or style sheet fetched from anywhere, no link, so that the
** page opens the same on an air-gapped cluster (tests/cli/test_html.sh
** checks it, renders it in headless Chromium and looks at the picture).
**
** Sections, each with an id the test looks for: summary (the header),
** figures, timeline, peak, leak and, when the trace ends in an OOM, oom.
** Every text that comes from the trace (path, metadata, mark labels) goes
** through put_esc. Numbers inside the markup (SVG coordinates, widths,
** ratios) are printed by put_num, not printf's %f, so that a host locale
** with a decimal comma cannot break the SVG.
*/
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze.h"
#include "base/error.h"
#include "base/size.h"
#include "base/text.h"

/* Colours: distinguishable for the common colour-vision deficiencies
** (blue against orange), each with a contrast of 4.5:1 or more on white. */
#define C_LIVE "#2563eb"     /* live bytes */
#define C_RESERVED "#c2410c" /* reserved bytes */
#define C_ITER "#94a3b8"     /* iteration boundaries */
#define C_ALERT "#b91c1c"    /* peak, trend of a leak, OOM */
#define C_GRID "#e5e7eb"
#define C_AXIS "#6b7280"

/* Charts are drawn in SVG user units (the viewBox) and scaled by the page
** to its width: at most 1200 px, less its padding. */
#define CHART_W 1120.0
#define CHART_LEFT 84.0 /* room for the byte labels */
#define CHART_RIGHT (CHART_W - 28.0)

/* Rows shown of the suspect and phase tables; the rest are counted. */
#define MAX_SUSPECT_ROWS 20
#define MAX_PHASE_ROWS 30
#define MAX_CLASS_ROWS 12

/* Least distance between two iteration numbers above the timeline, px. */
#define ITER_LABEL_GAP 26.0

enum { NUM_BUF = 40 };

struct page {
    FILE *out;
    const struct an_result *r;
    uint64_t t0;    /* µs of the first event: times print as seconds since */
    uint64_t t_end; /* µs of the last event (or point) */
};

/* One axis: values lo..hi drawn at px0..px1 (px1 < px0 for a y axis). */
struct scale {
    double lo, hi;
    double px0, px1;
};

static const char *const iec_units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};

/* ------------------------------------------------------------------ */
/* Output helpers                                                       */
/* ------------------------------------------------------------------ */

static void
put(struct page *p, const char *s)
{
    fputs(s, p->out);
}

static void putf(struct page *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
putf(struct page *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
}

/* LEN bytes of TEXT, escaped for HTML text and attribute values. Control
** characters other than tab and newline are not allowed in HTML, and the
** page is UTF-8: those, bytes that are not UTF-8, C1 controls and the
** format characters that reorder text (base/text.h) are shown as '?'. */
static void
put_esc_n(struct page *p, const char *text, size_t len)
{
    static const char *const entity[256] = {
        ['&'] = "&amp;", ['<'] = "&lt;", ['>'] = "&gt;", ['"'] = "&quot;", ['\''] = "&#39;"};
    len = strnlen(text, len);
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)text[i];
        size_t k = text_char_len(text + i, len - i);
        if (entity[c] != NULL)
            put(p, entity[c]);
        else if (c == '\t' || c == '\n')
            fputc(c, p->out);
        else if (k == 0)
            fputc('?', p->out);
        else
            fwrite(text + i, 1, k, p->out);
        i += k > 0 ? k : 1;
    }
}

/* TEXT (NULL reads as "") escaped. */
static void
put_esc(struct page *p, const char *text)
{
    if (text != NULL)
        put_esc_n(p, text, strlen(text));
}

/* V with DECIMALS (0..3) digits after a '.', whatever the locale. */
static void
put_num(struct page *p, double v, int decimals)
{
    static const long long scale[] = {1, 10, 100, 1000};
    if (!isfinite(v))
        v = 0;
    if (decimals < 0)
        decimals = 0;
    if (decimals > 3)
        decimals = 3;
    double a = fabs(v) * (double)scale[decimals];
    if (a > 9e15)
        a = 9e15;
    long long n = llround(a);
    const char *sign = (v < 0 && n != 0) ? "-" : "";
    if (decimals == 0)
        putf(p, "%s%lld", sign, n);
    else
        putf(p, "%s%lld.%0*lld", sign, n / scale[decimals], decimals,
             n % scale[decimals]);
}

/* N with thousands separators: 1,971. */
static void
put_count(struct page *p, uint64_t n)
{
    char digits[NUM_BUF];
    snprintf(digits, sizeof digits, "%" PRIu64, n);
    size_t len = strlen(digits);
    for (size_t i = 0; i < len; i++) {
        fputc(digits[i], p->out);
        if (i + 1 < len && (len - i - 1) % 3 == 0)
            fputc(',', p->out);
    }
}

/* BYTES in IEC units, two decimals ("1.15 GiB", "512 B"). */
static void
put_size(struct page *p, uint64_t bytes)
{
    char buf[NUM_BUF];
    put(p, size_format(bytes, buf, sizeof buf));
}

/* A signed amount of bytes: "+1.20 MiB", "&minus;3.00 KiB". */
static void
put_size_signed(struct page *p, double bytes)
{
    if (!isfinite(bytes))
        bytes = 0;
    put(p, bytes < 0 ? "&minus;" : "+");
    double a = fabs(bytes);
    put_size(p, a >= 1.8e19 ? UINT64_MAX : (uint64_t)llround(a));
}

/* A size class bound: whole units when exact ("64 MiB"), else as put_size. */
static void
put_bound(struct page *p, uint64_t bytes)
{
    int u = 0;
    while (u < 6 && bytes >= (1ULL << (10 * (u + 1))) &&
           bytes % (1ULL << (10 * (u + 1))) == 0)
        u++;
    if (bytes % (1ULL << (10 * u)) == 0)
        putf(p, "%" PRIu64 " %s", bytes >> (10 * u), iec_units[u]);
    else
        put_size(p, bytes);
}

/* Decimals that show T_US apart from its neighbours on a trace this long. */
static int
time_decimals(const struct page *p)
{
    double span = (double)(p->t_end - p->t0) / 1e6;
    return span < 1 ? 3 : span < 100 ? 2 : 1;
}

/* T_US as seconds since the first event: "12.34 s". */
static void
put_time(struct page *p, uint64_t t_us)
{
    double s = t_us > p->t0 ? (double)(t_us - p->t0) / 1e6 : 0;
    put_num(p, s, time_decimals(p));
    put(p, "&nbsp;s");
}

/* The text of mark LABEL, or NULL. */
static const char *
label_text(const struct page *p, int32_t label)
{
    const struct trace *t = p->r->trace;
    if (t == NULL || label < 0 || (uint32_t)label >= t->n_labels || t->labels == NULL)
        return NULL;
    return t->labels[label];
}

/* Mark LABEL escaped, or what stands before the first mark. */
static void
put_label(struct page *p, int32_t label)
{
    const char *text = label_text(p, label);
    if (text != NULL)
        put_esc(p, text);
    else
        put(p, "<i>before the first mark</i>");
}

/* ------------------------------------------------------------------ */
/* Scales and ticks                                                     */
/* ------------------------------------------------------------------ */

static double
sc(const struct scale *s, double v)
{
    double span = s->hi - s->lo;
    if (!(span > 0))
        return s->px0;
    return s->px0 + (v - s->lo) / span * (s->px1 - s->px0);
}

/*
** A tick step near SPAN/N bytes that reads well in IEC units: 1, 2 or 5
** times a power of ten of one unit (1024^k), or the next unit. *UNIT gets
** k: every multiple of the step is a whole number of that unit.
*/
static double
byte_step(double span, int n, int *unit)
{
    static const double nice[] = {1, 2, 5, 10, 20, 50, 100, 200, 500};
    double raw = span / n;
    if (!(raw >= 1))
        raw = 1;
    int k = 0;
    double u = 1;
    while (k < 5 && u * 1024 <= raw) {
        u *= 1024;
        k++;
    }
    for (size_t i = 0; i < sizeof nice / sizeof nice[0]; i++)
        if (raw / u <= nice[i]) {
            *unit = k;
            return nice[i] * u;
        }
    *unit = k + 1;
    return u * 1024;
}

/* A step near SPAN/N: 1, 2 or 5 times a power of ten. */
static double
decimal_step(double span, int n)
{
    double raw = span / n;
    if (!(raw > 0))
        return 1;
    double pw = pow(10, floor(log10(raw)));
    double m = raw / pw;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * pw;
}

/* A byte tick label: V in unit K, a whole number by construction. */
static void
put_byte_tick(struct page *p, double v, int k)
{
    if (v == 0) {
        put(p, "0");
        return;
    }
    put_num(p, v / pow(1024, k), 0);
    putf(p, " %s", iec_units[k]);
}

/* An SVG attribute, NAME="V", V a coordinate (one decimal), after a space. */
static void
put_attr(struct page *p, const char *name, double v)
{
    putf(p, " %s=\"", name);
    put_num(p, v, 1);
    fputc('"', p->out);
}

/* The opening of an SVG chart H pixels high (CHART_W wide), named ARIA. */
static void
svg_open(struct page *p, double h, const char *aria)
{
    put(p, "<svg viewBox=\"0 0 ");
    put_num(p, CHART_W, 0);
    put(p, " ");
    put_num(p, h, 0);
    putf(p, "\" role=\"img\" aria-label=\"%s\">\n", aria);
}

/* An SVG line from (X1, Y1) to (X2, Y2) with ATTRS ("stroke=..."). */
static void
svg_line(struct page *p, double x1, double x2, double y1, double y2, const char *attrs)
{
    put(p, "<line");
    put_attr(p, "x1", x1);
    put_attr(p, "x2", x2);
    put_attr(p, "y1", y1);
    put_attr(p, "y2", y2);
    putf(p, " %s/>", attrs);
}

/* The opening of an SVG text at (X, Y) anchored at ANCHOR ("start",
** "middle", "end"), of class CLS (or none), before its '>'. */
static void
svg_text(struct page *p, const char *cls, double x, double y, const char *anchor)
{
    put(p, "<text");
    if (cls != NULL)
        putf(p, " class=\"%s\"", cls);
    put_attr(p, "x", x);
    put_attr(p, "y", y);
    putf(p, " text-anchor=\"%s\"", anchor);
}

/* Horizontal grid lines and labels of Y (bytes) from its lo to its hi, in
** steps of STEP (unit K), across X0..X1. */
static void
y_grid(struct page *p, const struct scale *y, double step, int k, double x0, double x1)
{
    for (int i = 0; i <= 1000 && y->lo + i * step <= y->hi + step * 1e-6; i++) {
        double v = y->lo + i * step, py = sc(y, v);
        svg_line(p, x0, x1, py, py, "stroke=\"" C_GRID "\"");
        svg_text(p, NULL, x0 - 8, py + 4, "end");
        put(p, ">");
        put_byte_tick(p, v, k);
        put(p, "</text>\n");
    }
}

/* A vertical tick at X on the bottom axis at Y0, with its label opened
** (the caller writes the text and closes it). */
static void
x_tick_open(struct page *p, double x, double y0)
{
    svg_line(p, x, x, y0, y0 + 5, "stroke=\"" C_AXIS "\"");
    svg_text(p, NULL, x, y0 + 20, "middle");
    put(p, ">");
}

static void
put_xy(struct page *p, double x, double y)
{
    put_num(p, x, 1);
    fputc(',', p->out);
    put_num(p, y, 1);
}

/* ------------------------------------------------------------------ */
/* Page parts                                                           */
/* ------------------------------------------------------------------ */

static const char style[] =
    "*{box-sizing:border-box}\n"
    "body{margin:0;background:#f1f3f6;color:#111827;"
    "font:15px/1.5 system-ui,-apple-system,\"Segoe UI\",Roboto,\"Helvetica Neue\","
    "\"DejaVu Sans\",Arial,sans-serif}\n"
    "main{max-width:1200px;margin:0 auto;padding:24px}\n"
    "header,section{background:#fff;border:1px solid #e5e7eb;border-radius:8px;"
    "padding:20px 24px;margin:0 0 20px}\n"
    "h1{font-size:26px;margin:0 0 6px;overflow-wrap:anywhere}\n"
    "h2{font-size:20px;margin:0 0 12px}\n"
    "h3{font-size:16px;margin:22px 0 8px}\n"
    "p{margin:0 0 10px}\n"
    ".kicker{margin:0;color:#4b5563;font-size:13px;font-weight:600;"
    "text-transform:uppercase;letter-spacing:.06em}\n"
    ".meta{display:flex;flex-wrap:wrap;gap:6px;margin:8px 0 10px}\n"
    ".kv{background:#f1f3f6;border-radius:4px;padding:1px 8px;"
    "font:13px/1.7 ui-monospace,\"DejaVu Sans Mono\",Menlo,Consolas,monospace;"
    "overflow-wrap:anywhere}\n"
    ".kv b{color:#4b5563;font-weight:600}\n"
    ".facts{color:#374151;margin:0}\n"
    ".cards{display:grid;gap:14px;"
    "grid-template-columns:repeat(auto-fit,minmax(190px,1fr))}\n"
    ".card{border:1px solid #e5e7eb;border-top:4px solid #9ca3af;border-radius:8px;"
    "padding:12px 16px}\n"
    ".card .label{font-size:12px;font-weight:600;color:#4b5563;text-transform:uppercase;"
    "letter-spacing:.05em}\n"
    ".card .value{font-size:28px;font-weight:700;font-variant-numeric:tabular-nums;"
    "margin:2px 0 4px;white-space:nowrap}\n"
    ".card .sub{font-size:13px;color:#374151}\n"
    ".card.live{border-top-color:" C_LIVE "}\n"
    ".card.res{border-top-color:" C_RESERVED "}\n"
    ".card.iter{border-top-color:#475569}\n"
    ".card.good{border-top-color:#15803d}.card.good .value{color:#15803d}\n"
    ".card.bad{border-top-color:" C_ALERT "}.card.bad .value{color:" C_ALERT "}\n"
    ".legend{display:flex;flex-wrap:wrap;gap:8px 22px;font-size:13px;color:#374151;"
    "margin:0 0 4px}\n"
    ".sw{display:inline-block;width:22px;height:12px;margin-right:7px;"
    "vertical-align:-1px;border-radius:2px}\n"
    ".sw.live{background:rgba(37,99,235,.25);border-top:2px solid " C_LIVE "}\n"
    ".sw.res{height:0;border-top:3px solid " C_RESERVED "}\n"
    ".sw.iter{height:0;border-top:2px dashed " C_ITER "}\n"
    ".sw.peak{width:12px;height:12px;border-radius:50%;background:" C_ALERT "}\n"
    ".sw.trend{height:0;border-top:2px dashed " C_ALERT "}\n"
    ".sw.res,.sw.iter,.sw.trend{vertical-align:4px}\n"
    ".sw.min{width:10px;height:10px;border-radius:50%;background:" C_LIVE "}\n"
    ".sw.min.hollow{background:#fff;border:1.5px solid " C_LIVE "}\n"
    "svg{display:block;width:100%;height:auto}\n"
    "svg text{font-family:system-ui,-apple-system,\"Segoe UI\",Roboto,\"DejaVu Sans\","
    "Arial,sans-serif;font-size:12px;fill:#374151}\n"
    "svg .halo{paint-order:stroke;stroke:#fff;stroke-width:4px;stroke-linejoin:round}\n"
    "svg .strong{font-size:13px;font-weight:700;fill:#111827}\n"
    "table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}\n"
    "th,td{padding:5px 10px;border-bottom:1px solid #e5e7eb;text-align:left;"
    "font-size:14px;vertical-align:middle}\n"
    "th{font-size:12px;font-weight:600;text-transform:uppercase;letter-spacing:.04em;"
    "color:#4b5563}\n"
    "td.num,th.num{text-align:right;white-space:nowrap}\n"
    "table.compact{width:auto;min-width:55%}\n"
    "td.name{white-space:nowrap}\n"
    "td.barcell{width:46%}\n"
    ".bar{height:14px;background:" C_LIVE ";border-radius:2px;min-width:2px}\n"
    ".bar.phase{background:#475569}\n"
    ".verdict{font-size:18px;font-weight:600;padding:10px 14px;border-radius:6px;"
    "margin:0 0 14px}\n"
    ".verdict.bad{background:#fef2f2;color:#991b1b;border-left:5px solid " C_ALERT "}\n"
    ".verdict.good{background:#f0fdf4;color:#166534;border-left:5px solid #15803d}\n"
    ".verdict.none{background:#f1f3f6;color:#374151;border-left:5px solid #9ca3af}\n"
    ".note{color:#4b5563;font-size:13px}\n"
    "#oom{border-color:#fca5a5;background:#fffafa}\n"
    "#oom h2{color:#991b1b}\n"
    "footer{color:#6b7280;font-size:12px;text-align:center;padding:0 0 8px}\n"
    "details.site summary{cursor:pointer;font-family:ui-monospace,\"DejaVu Sans Mono\","
    "Menlo,Consolas,monospace;font-size:13px;overflow-wrap:anywhere}\n"
    "ol.stack{margin:6px 0 4px;padding-left:26px;font:12px/1.6 ui-monospace,"
    "\"DejaVu Sans Mono\",Menlo,Consolas,monospace;color:#374151;overflow-wrap:anywhere}\n"
    "ol.stack li.note{color:#92400e}\n";

/* The trace's file name: PATH after its last '/'. */
static const char *
trace_name(const struct page *p)
{
    const struct trace *t = p->r->trace;
    if (t == NULL || t->path == NULL || t->path[0] == '\0')
        return "trace";
    const char *slash = strrchr(t->path, '/');
    return (slash != NULL && slash[1] != '\0') ? slash + 1 : t->path;
}

static void
head(struct page *p)
{
    put(p, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
           "<title>vram analyze: ");
    put_esc(p, trace_name(p));
    put(p, "</title>\n<style>\n");
    put(p, style);
    put(p, "</style>\n</head>\n<body>\n<main>\n");
}

/* The header: name, metadata as key=value chips, events and duration. */
static void
summary(struct page *p)
{
    const struct trace *t = p->r->trace;
    put(p, "<header id=\"summary\">\n<p class=\"kicker\">vram analyze</p>\n<h1>");
    put_esc(p, trace_name(p));
    put(p, "</h1>\n");
    const char *meta = t != NULL ? t->meta : NULL;
    if (meta != NULL && meta[0] != '\0') {
        put(p, "<div class=\"meta\">");
        const char *s = meta;
        while (*s != '\0') {
            while (*s == ' ' || *s == '\t')
                s++;
            if (*s == '\0')
                break;
            size_t len = strcspn(s, " \t");
            const char *eq = memchr(s, '=', len);
            put(p, "<span class=\"kv\">");
            if (eq != NULL && eq != s) {
                put(p, "<b>");
                put_esc_n(p, s, (size_t)(eq - s));
                put(p, "</b> ");
                put_esc_n(p, eq + 1, len - (size_t)(eq - s) - 1);
            } else {
                put_esc_n(p, s, len);
            }
            put(p, "</span>");
            s += len;
        }
        put(p, "</div>\n");
    }
    put(p, "<p class=\"facts\">");
    put_count(p, t != NULL ? t->n_events : 0);
    put(p, " events over ");
    put_time(p, p->t_end);
    if (t != NULL && t->n_marks > 0) {
        put(p, " &middot; ");
        put_count(p, t->n_marks);
        put(p, t->n_marks == 1 ? " mark" : " marks");
    }
    if (t != NULL && t->n_ooms > 0) {
        put(p, " &middot; ");
        put_count(p, t->n_ooms);
        put(p, t->n_ooms == 1 ? " failed allocation" : " failed allocations");
    }
    if (t != NULL && t->path != NULL) {
        put(p, " &middot; <span class=\"note\">");
        put_esc(p, t->path);
        put(p, "</span>");
    }
    put(p, "</p>\n</header>\n");
}

static void
card_open(struct page *p, const char *cls, const char *label)
{
    putf(p, "<div class=\"card %s\"><div class=\"label\">%s</div><div class=\"value\">",
         cls, label);
}

static void
card_sub(struct page *p)
{
    put(p, "</div><div class=\"sub\">");
}

static void
card_close(struct page *p)
{
    put(p, "</div></div>\n");
}

static const char *
strategy_text(vram_strategy s)
{
    const char *name = vram_strategy_name(s);
    return name != NULL ? name : "unknown";
}

static void
figures(struct page *p)
{
    const struct an_result *r = p->r;
    put(p, "<section id=\"figures\">\n<h2>Key figures</h2>\n<div class=\"cards\">\n");

    card_open(p, "live", "Peak live");
    put_size(p, r->peak_bytes);
    card_sub(p);
    put(p, "at ");
    put_time(p, r->peak_time_us);
    if (r->peak_iter < r->n_iters) {
        put(p, ", in iteration ");
        put_count(p, r->peak_iter + 1);
    }
    put(p, "; event ");
    put_count(p, r->peak_event + 1);
    if (r->trace != NULL) {
        put(p, " of ");
        put_count(p, r->trace->n_events);
    }
    card_close(p);

    card_open(p, "res", "Peak reserved");
    put_size(p, r->peak_reserved);
    card_sub(p);
    put(p, "replayed under <b>");
    put_esc(p, strategy_text(r->strategy));
    put(p, "</b>; fragmentation ");
    put_num(p, r->fragmentation, 3);
    put(p, "&times; (reserved &divide; live)");
    if (r->replay_ooms > 0) {
        put(p, "; the replay refused ");
        put_count(p, r->replay_ooms);
        put(p, r->replay_ooms == 1 ? " allocation" : " allocations");
    }
    card_close(p);

    card_open(p, "iter", "Iterations");
    put_count(p, r->n_iters);
    card_sub(p);
    if (r->n_iters == 0) {
        put(p, "none found: no marks, no repeating pattern");
    } else if (r->iters_from_marks) {
        put(p, "from the trace&rsquo;s marks");
    } else if (r->iters_from_floor) {
        put(p, "cut where live bytes come back to their floor of ");
        put_size(p, r->floor_bytes);
    } else if (r->period_events > 0) {
        put(p, "detected: the events repeat every ");
        put_count(p, r->period_events);
        put(p, " events");
        if (r->period_match > 0) {
            put(p, " (");
            put_num(p, 100 * r->period_match, 0);
            put(p, r->period_from_shape ? "% alike in shape; sizes vary)" : "% alike)");
        }
    } else {
        put(p, "detected from the repeating event stream");
    }
    card_close(p);

    size_t used = r->leak_iters_used >= 2 && r->leak_iters_used <= r->n_iters
                      ? r->leak_iters_used
                      : r->n_iters;
    if (r->n_iters < 2) {
        card_open(p, "", "Leak");
        put(p, "&mdash;");
        card_sub(p);
        put(p, "needs two iterations or more");
    } else if (r->leak) {
        card_open(p, "bad", "Leak");
        put_size_signed(p, r->leak_bytes_per_iter);
        card_sub(p);
        put(p, "per iteration over ");
        put_count(p, used);
        put(p, " iterations (R&sup2; ");
        put_num(p, r->leak_r2, 2);
        put(p, "); ");
        put_count(p, r->n_suspects);
        put(p, r->n_suspects == 1 ? " suspect" : " suspects");
    } else {
        card_open(p, "good", "Leak");
        put(p, "None");
        card_sub(p);
        put(p, "the least live bytes per iteration stay level");
    }
    card_close(p);

    if (r->ends_in_oom) {
        card_open(p, "bad", "Ends in");
        put(p, "OOM");
        card_sub(p);
        put(p, "a request of ");
        put_size(p, r->oom_request);
        put(p, " failed with ");
        put_size(p, r->oom_live);
        put(p, " live");
        card_close(p);
    }
    put(p, "</div>\n</section>\n");
}

/*
** The time axis of the timeline. Stretches without any event longer than
** GAP_SHARE of the trace (a model loading, a data loader stalling, the
** pause before the first step) would squeeze the work into a sliver, so
** the MAX_GAPS longest are drawn GAP_PX wide, shaded and labelled with
** their length; the rest of the axis is linear in time.
*/
#define MAX_GAPS 3
#define GAP_SHARE 0.15
#define GAP_PX 76.0

struct time_axis {
    double t0, t1; /* µs */
    double px0, px1;
    double px_per_us; /* outside the gaps */
    size_t n_gaps;
    double lo[MAX_GAPS], hi[MAX_GAPS]; /* µs, in order, disjoint */
};

/* Remember the gap A..B (µs) if it is among the MAX_GAPS longest. */
static void
gap_offer(struct time_axis *ax, double a, double b)
{
    size_t i = ax->n_gaps;
    if (i == MAX_GAPS) {
        size_t shortest = 0;
        for (size_t j = 1; j < MAX_GAPS; j++)
            if (ax->hi[j] - ax->lo[j] < ax->hi[shortest] - ax->lo[shortest])
                shortest = j;
        if (b - a <= ax->hi[shortest] - ax->lo[shortest])
            return;
        i = shortest;
    } else {
        ax->n_gaps++;
    }
    ax->lo[i] = a;
    ax->hi[i] = b;
}

/* The axis for times W0..W1 (µs) drawn at PX0..PX1, with the gaps of the
** trace inside that window. */
static void
time_axis_init(struct time_axis *ax, const struct page *p, double w0, double w1,
               double px0, double px1)
{
    const struct an_result *r = p->r;
    const struct trace *t = r->trace;
    *ax = (struct time_axis){.t0 = w0, .t1 = w1, .px0 = px0, .px1 = px1};
    if (!(ax->t1 > ax->t0))
        ax->t1 = ax->t0 + 1;
    double min_gap = GAP_SHARE * (ax->t1 - ax->t0);
    if (t != NULL && t->events != NULL && t->n_events > 1) {
        for (uint64_t i = 1; i < t->n_events; i++) {
            double a = (double)t->events[i - 1].t_us, b = (double)t->events[i].t_us;
            if (b - a > min_gap && a >= ax->t0 && b <= ax->t1)
                gap_offer(ax, a, b);
        }
    } else {
        for (size_t i = 1; i < r->n_points; i++) {
            double a = (double)r->points[i - 1].t_us, b = (double)r->points[i].t_us;
            if (b - a > min_gap && a >= ax->t0 && b <= ax->t1)
                gap_offer(ax, a, b);
        }
    }
    /* In time order (insertion sort: at most MAX_GAPS). */
    for (size_t i = 1; i < ax->n_gaps; i++)
        for (size_t j = i; j > 0 && ax->lo[j] < ax->lo[j - 1]; j--) {
            double lo = ax->lo[j], hi = ax->hi[j];
            ax->lo[j] = ax->lo[j - 1];
            ax->hi[j] = ax->hi[j - 1];
            ax->lo[j - 1] = lo;
            ax->hi[j - 1] = hi;
        }
    double active = ax->t1 - ax->t0;
    for (size_t i = 0; i < ax->n_gaps; i++)
        active -= ax->hi[i] - ax->lo[i];
    if (active < 1)
        active = 1;
    ax->px_per_us = (px1 - px0 - (double)ax->n_gaps * GAP_PX) / active;
}

/* Where time T (µs) is drawn. */
static double
tx(const struct time_axis *ax, double t)
{
    double px = ax->px0, prev = ax->t0;
    if (t < ax->t0)
        t = ax->t0;
    for (size_t i = 0; i < ax->n_gaps; i++) {
        if (t <= ax->lo[i])
            break;
        px += (ax->lo[i] - prev) * ax->px_per_us;
        if (t < ax->hi[i])
            return px + (t - ax->lo[i]) / (ax->hi[i] - ax->lo[i]) * GAP_PX;
        px += GAP_PX;
        prev = ax->hi[i];
    }
    if (t > ax->t1)
        t = ax->t1;
    return px + (t - prev) * ax->px_per_us;
}

/* Is T (µs) inside a gap? */
static bool
in_gap(const struct time_axis *ax, double t)
{
    for (size_t i = 0; i < ax->n_gaps; i++)
        if (t > ax->lo[i] && t < ax->hi[i])
            return true;
    return false;
}

static void
vline(struct page *p, double x, double y0, double y1, const char *attrs)
{
    svg_line(p, x, x, y0, y1, attrs);
    put(p, "\n");
}

static void
hline(struct page *p, double x0, double x1, double y, const char *attrs)
{
    svg_line(p, x0, x1, y, y, attrs);
    put(p, "\n");
}

/* The bottom axis of the timeline: the shaded gaps with their length, the
** axis line broken at each, and seconds since the first event. */
static void
time_ticks(struct page *p, const struct time_axis *ax, double top, double bottom)
{
    for (size_t i = 0; i < ax->n_gaps; i++) {
        double a = tx(ax, ax->lo[i]), b = tx(ax, ax->hi[i]), mid = (a + b) / 2;
        put(p, "<rect");
        put_attr(p, "x", a);
        put_attr(p, "y", top);
        put_attr(p, "width", b - a);
        put_attr(p, "height", bottom - top);
        put(p, " fill=\"#eef0f3\"/>\n");
        svg_text(p, NULL, mid, top + 16, "middle");
        put(p, ">no events</text>\n");
        svg_text(p, "strong", mid, top + 32, "middle");
        put(p, ">");
        double len = (ax->hi[i] - ax->lo[i]) / 1e6;
        put_num(p, len, len < 10 ? 2 : len < 100 ? 1 : 0);
        put(p, " s</text>\n");
    }
    /* The axis line, broken at each gap with two slanted strokes. */
    double from = ax->px0;
    for (size_t i = 0; i <= ax->n_gaps; i++) {
        double to = i < ax->n_gaps ? tx(ax, ax->lo[i]) + 4 : ax->px1;
        hline(p, from, to, bottom, "stroke=\"" C_AXIS "\"");
        if (i < ax->n_gaps) {
            double b = tx(ax, ax->hi[i]);
            for (int k = 0; k < 2; k++) {
                double cx = k == 0 ? to : b - 4;
                svg_line(p, cx - 4, cx + 4, bottom + 6, bottom - 6,
                         "stroke=\"" C_AXIS "\" stroke-width=\"1.5\"");
                put(p, "\n");
            }
            from = b - 4;
        }
    }
    /* Ticks every STEP seconds (since the first event of the trace)
    ** outside the gaps, 44 px apart at least. */
    double active_s =
        (ax->px1 - ax->px0 - (double)ax->n_gaps * GAP_PX) / ax->px_per_us / 1e6;
    double step = decimal_step(active_s, 10);
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    double first = ceil((ax->t0 - (double)p->t0) / 1e6 / step - 1e-6), last = -1e9;
    for (long i = 0; i <= 100000; i++) {
        double s = (first + (double)i) * step, t = (double)p->t0 + s * 1e6;
        if (t > ax->t1 + step * 1e-3)
            break;
        if (in_gap(ax, t) && i > 0)
            continue;
        double px = tx(ax, t);
        if (px - last < 44)
            continue;
        last = px;
        x_tick_open(p, px, bottom);
        put_num(p, s, dec);
        put(p, "</text>\n");
    }
}

/* The points of the timeline to draw for times W0..W1: [*FIRST, *END). */
static void
points_in(const struct an_result *r, double w0, double w1, size_t *first, size_t *end)
{
    size_t i = 0;
    while (i + 1 < r->n_points && (double)r->points[i + 1].t_us <= w0)
        i++;
    size_t j = i;
    while (j < r->n_points && (double)r->points[j].t_us <= w1)
        j++;
    *first = i;
    *end = j > i ? j : i + 1;
}

/* A stepped line through the live (or RESERVED) bytes of points [FIRST,
** END): a value holds until the next event, so the line goes across, then
** up or down. FILL closes it down to the X axis as an area. */
static void
step_path(struct page *p, const struct time_axis *x, const struct scale *y, size_t first,
          size_t end, bool reserved, bool fill, const char *attrs)
{
    const struct an_point *pt = p->r->points;
    double bottom = y->px0;
    putf(p, "<path %s d=\"M", attrs);
    double x0 = tx(x, (double)pt[first].t_us);
    double prev = sc(y, (double)(reserved ? pt[first].reserved : pt[first].live));
    put_xy(p, x0, fill ? bottom : prev);
    if (fill) {
        put(p, " L");
        put_xy(p, x0, prev);
    }
    double px = x0;
    for (size_t i = first + 1; i < end; i++) {
        px = tx(x, (double)pt[i].t_us);
        double py = sc(y, (double)(reserved ? pt[i].reserved : pt[i].live));
        if (py == prev)
            continue;
        put(p, " H");
        put_num(p, px, 1);
        put(p, " V");
        put_num(p, py, 1);
        prev = py;
    }
    put(p, " H");
    put_num(p, fmax(px, tx(x, x->t1)), 1);
    if (fill) {
        put(p, " V");
        put_num(p, bottom, 1);
        put(p, " Z");
    }
    put(p, "\"/>\n");
}

/* One chart of live and reserved bytes over times W0..W1 (µs): iteration
** boundaries, the peak and the final OOM where they fall inside. */
static void
timeline_chart(struct page *p, double w0, double w1, const char *aria)
{
    const struct an_result *r = p->r;
    const double h = 428, left = CHART_LEFT, right = CHART_RIGHT, top = 44,
                 bottom = h - 52;
    size_t first, end;
    points_in(r, w0, w1, &first, &end);
    double ymax = 0;
    if ((double)r->peak_time_us >= w0 && (double)r->peak_time_us <= w1)
        ymax = (double)r->peak_bytes;
    for (size_t i = first; i < end; i++) {
        ymax = fmax(ymax, (double)r->points[i].live);
        ymax = fmax(ymax, (double)r->points[i].reserved);
    }
    if (ymax < 1)
        ymax = 1;
    int k;
    double ystep = byte_step(ymax * 1.1, 5, &k);
    struct scale y = {0, ceil(ymax * 1.1 / ystep) * ystep, bottom, top};
    struct time_axis x;
    time_axis_init(&x, p, w0, w1, left, right);

    svg_open(p, h, aria);
    y_grid(p, &y, ystep, k, left, right);
    time_ticks(p, &x, top, bottom);
    svg_text(p, NULL, (left + right) / 2, h - 8, "middle");
    put(p, ">seconds since the first event</text>\n");

    step_path(p, &x, &y, first, end, false, true,
              "fill=\"" C_LIVE "\" fill-opacity=\"0.18\" stroke=\"none\"");

    /* Iteration boundaries, under the lines; a number above every one that
    ** has room. */
    double last_line = -1e9, last_label = -1e9;
    bool any = false;
    for (size_t i = 0; i < r->n_iters; i++) {
        double t = (double)r->iters[i].t_start_us;
        if (t < w0 || t > w1)
            continue;
        double px = tx(&x, t);
        if (px - last_line < 2)
            continue;
        last_line = px;
        any = true;
        vline(p, px, top, bottom, "stroke=\"" C_ITER "\" stroke-dasharray=\"4 3\"");
        if (px - last_label >= ITER_LABEL_GAP && px <= right - 6) {
            last_label = px;
            svg_text(p, NULL, px, top - 12, "middle");
            put(p, ">");
            put_count(p, i + 1);
            put(p, "</text>\n");
        }
    }
    if (any) {
        svg_text(p, NULL, left - 8, top - 12, "end");
        put(p, ">iteration</text>\n");
    }

    /* Reserved, then live on top. */
    step_path(p, &x, &y, first, end, true, false,
              "fill=\"none\" stroke=\"" C_RESERVED "\" stroke-width=\"2\"");
    step_path(p, &x, &y, first, end, false, false,
              "fill=\"none\" stroke=\"" C_LIVE "\" stroke-width=\"1.5\"");
    vline(p, left, top, bottom, "stroke=\"" C_AXIS "\"");

    /* The final OOM: a red line where it happened (at the end). */
    double t_oom = r->oom_time_us != 0 ? (double)r->oom_time_us : (double)p->t_end;
    if (r->ends_in_oom && t_oom >= w0 && t_oom <= w1) {
        double px = tx(&x, t_oom);
        vline(p, px, top, bottom, "stroke=\"" C_ALERT "\" stroke-width=\"2\"");
        svg_text(p, "halo strong", px - 6, bottom - 10, "end");
        put(p, " style=\"fill:" C_ALERT "\">OOM: ");
        put_size(p, r->oom_request);
        put(p, " refused</text>\n");
    }

    /*
    ** The peak: a dot, and its value in the headroom above every line (the
    ** scale leaves a tenth of the height free at the top), tied to the dot
    ** by a thin line, on the side of the dot with room for it.
    */
    if ((double)r->peak_time_us >= w0 && (double)r->peak_time_us <= w1) {
        double px = tx(&x, (double)r->peak_time_us), py = sc(&y, (double)r->peak_bytes);
        double ty = top + 17;
        if (py - 7 > ty + 4)
            vline(p, px, ty + 4, py - 7, "stroke=\"" C_ALERT "\" stroke-width=\"1\"");
        put(p, "<circle");
        put_attr(p, "cx", px);
        put_attr(p, "cy", py);
        put(p, " r=\"5.5\" fill=\"" C_ALERT "\" stroke=\"#fff\" stroke-width=\"2\"/>\n");
        bool to_left = px > left + 0.7 * (right - left);
        svg_text(p, "halo strong", to_left ? px - 6 : px + 6, ty,
                 to_left ? "end" : "start");
        put(p, ">peak ");
        put_size(p, r->peak_bytes);
        put(p, " at ");
        put_time(p, r->peak_time_us);
        put(p, "</text>\n");
    }
    put(p, "</svg>\n");
}

/*
** The timeline section: the whole trace; then, when its steady iterations
** take less than CLOSE_UP_SHARE of that chart's width (behind a long
** warm-up, a model loading), the same from the first steady iteration on,
** so that each is wide enough to see. An iteration is steady when it
** lasts at most 3 times the median: a first iteration that holds the
** whole set-up is not.
*/
#define CLOSE_UP_SHARE 0.4

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The index of the first steady iteration (above), or SIZE_MAX if there
** are fewer than two iterations or no memory to find it. */
static size_t
first_steady_iter(const struct an_result *r)
{
    if (r->n_iters < 2 || r->iters == NULL)
        return SIZE_MAX;
    uint64_t *len = malloc(r->n_iters * sizeof *len);
    if (len == NULL)
        return SIZE_MAX;
    for (size_t i = 0; i < r->n_iters; i++)
        len[i] = r->iters[i].t_end_us - r->iters[i].t_start_us;
    qsort(len, r->n_iters, sizeof *len, cmp_u64);
    uint64_t median = len[r->n_iters / 2];
    free(len);
    for (size_t i = 0; i < r->n_iters; i++)
        if (r->iters[i].t_end_us - r->iters[i].t_start_us <= 3 * median)
            return i;
    return SIZE_MAX;
}

static void
timeline(struct page *p)
{
    const struct an_result *r = p->r;
    put(p, "<section id=\"timeline\">\n<h2>Timeline</h2>\n");
    if (r->n_points == 0 || r->points == NULL) {
        put(p, "<p class=\"note\">The trace has no events.</p>\n</section>\n");
        return;
    }
    put(p,
        "<div class=\"legend\"><span><i class=\"sw live\"></i>live bytes "
        "(held by the program)</span><span><i class=\"sw res\"></i>reserved under <b>");
    put_esc(p, strategy_text(r->strategy));
    put(p, "</b> (held from the device)</span>");
    if (r->n_iters > 0)
        put(p, "<span><i class=\"sw iter\"></i>start of an iteration (numbered "
               "above)</span>");
    put(p, "<span><i class=\"sw peak\"></i>peak</span></div>\n");

    double w0 = (double)p->t0, w1 = (double)p->t_end;
    timeline_chart(p, w0, w1, "live and reserved bytes over time");
    struct time_axis all;
    time_axis_init(&all, p, w0, w1, CHART_LEFT, CHART_RIGHT);
    put(p, "<p class=\"note\">");
    put_count(p, r->n_points);
    put(p, " samples; the peak is exact.");
    if (all.n_gaps > 0)
        put(p,
            " Shaded: a stretch without events, drawn narrow (its length is written in "
            "it).");
    put(p, "</p>\n");

    size_t first = first_steady_iter(r);
    if (first != SIZE_MAX) {
        double c0 = (double)r->iters[first].t_start_us;
        if (c0 > w0 &&
            tx(&all, w1) - tx(&all, c0) < CLOSE_UP_SHARE * (CHART_RIGHT - CHART_LEFT)) {
            put(p, "<h3>The iterations, close up</h3>\n");
            timeline_chart(p, c0, w1, "live and reserved bytes over the iterations");
            put(p, "<p class=\"note\">From the start of iteration ");
            put_count(p, first + 1);
            put(p, " at ");
            put_time(p, r->iters[first].t_start_us);
            put(p, " to the end of the trace.</p>\n");
        }
    }
    put(p, "</section>\n");
}

/* Phases aggregated by label: for each distinct mark label, in order of
** first appearance, the highest peak of its phases and how many there are. */
static void
phase_table(struct page *p)
{
    const struct an_result *r = p->r;
    if (r->n_phases == 0 || r->phases == NULL)
        return;
    uint64_t top = 0;
    for (size_t i = 0; i < r->n_phases; i++)
        if (r->phases[i].peak_live > top)
            top = r->phases[i].peak_live;
    put(p, "<h3>Peak by phase</h3>\n<p class=\"note\">Phases run from one mark to the "
           "next; phases with the same label are taken together.</p>\n<table>\n<thead>"
           "<tr><th>Phase</th><th class=\"num\">Times</th><th>Highest peak</th>"
           "<th class=\"num\">Bytes</th></tr></thead>\n<tbody>\n");
    size_t rows = 0, hidden = 0;
    for (size_t i = 0; i < r->n_phase_groups; i++) {
        int32_t label = r->phase_groups[i].label;
        uint64_t peak = r->phase_groups[i].peak_live, times = r->phase_groups[i].count;
        if (rows == MAX_PHASE_ROWS) {
            hidden++;
            continue;
        }
        rows++;
        put(p, "<tr><td class=\"name\">");
        put_label(p, label);
        put(p, "</td><td class=\"num\">");
        put_count(p, times);
        put(p, "</td><td class=\"barcell\"><div class=\"bar phase\" style=\"width:");
        put_num(p, top > 0 ? 100.0 * (double)peak / (double)top : 0, 1);
        put(p, "%\"></div></td><td class=\"num\">");
        put_size(p, peak);
        put(p, "</td></tr>\n");
    }
    put(p, "</tbody>\n</table>\n");
    if (hidden > 0) {
        put(p, "<p class=\"note\">and ");
        put_count(p, hidden);
        put(p, " more labels.</p>\n");
    }
}

/* The cells of one size-class row after its name: a bar scaled to TOP,
** bytes, allocations and share of TOTAL. */
static void
class_cells(struct page *p, uint64_t bytes, uint64_t count, uint64_t top, uint64_t total)
{
    put(p, "<td class=\"barcell\"><div class=\"bar\" style=\"width:");
    put_num(p, top > 0 ? fmin(100, 100.0 * (double)bytes / (double)top) : 0, 1);
    put(p, "%\"></div></td><td class=\"num\">");
    put_size(p, bytes);
    put(p, "</td><td class=\"num\">");
    put_count(p, count);
    put(p, "</td><td class=\"num\">");
    double share = total > 0 ? 100.0 * (double)bytes / (double)total : 0;
    if (share > 0 && share < 0.1)
        put(p, "&lt;&nbsp;0.1");
    else
        put_num(p, share, 1);
    put(p, "%</td></tr>\n");
}

/* Size classes C[0..N) (largest bytes first) as bars: those that hold
** 99.5% of TOTAL, at most MAX_CLASS_ROWS, then the rest in one row. */
static void
class_table(struct page *p, const struct an_class *c, size_t n, uint64_t total)
{
    uint64_t top = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].bytes > top)
            top = c[i].bytes;
    put(p, "<table>\n<thead><tr><th>Size class</th><th>Live bytes</th>"
           "<th class=\"num\">Bytes</th><th class=\"num\">Allocations</th>"
           "<th class=\"num\">Share</th></tr></thead>\n<tbody>\n");
    size_t rows = 0;
    uint64_t shown = 0;
    while (rows < n && rows < MAX_CLASS_ROWS &&
           (rows < 3 || (double)shown < 0.995 * (double)total)) {
        shown += c[rows].bytes;
        rows++;
    }
    if (rows + 1 == n)
        rows++;
    for (size_t i = 0; i < rows; i++) {
        put(p, "<tr><td class=\"name\">");
        put_bound(p, c[i].lo);
        if (c[i].hi > c[i].lo) {
            put(p, " &ndash; ");
            put_bound(p, c[i].hi);
        } else {
            put(p, " and more");
        }
        put(p, "</td>");
        class_cells(p, c[i].bytes, c[i].count, top, total);
    }
    if (rows < n) {
        uint64_t bytes = 0, count = 0;
        for (size_t i = rows; i < n; i++) {
            bytes += c[i].bytes;
            count += c[i].count;
        }
        put(p, "<tr><td class=\"name\"><i>");
        put_count(p, n - rows);
        put(p, " smaller classes</i></td>");
        class_cells(p, bytes, count, top, total);
    }
    put(p, "</tbody>\n</table>\n");
}

/*
** Allocations A[0..N) (equal sizes neighbours: largest first, or for
** suspects the sizes holding the most bytes first) as a table with one
** row per size: how many, their bytes, the iterations they
** were born in, the first one's time and id. At most MAX_ROWS rows; the
** rest counted below.
*/
static void
alloc_table(struct page *p, const struct an_suspect *a, size_t n, size_t max_rows)
{
    put(p, "<table class=\"compact\">\n<thead><tr><th class=\"num\">Size</th>"
           "<th class=\"num\">Allocations</th><th class=\"num\">Bytes</th>"
           "<th class=\"num\">Born in iteration</th><th class=\"num\">First at</th>"
           "<th class=\"num\">First id</th></tr></thead>\n<tbody>\n");
    size_t i = 0, rows = 0;
    while (i < n && rows < max_rows) {
        size_t j = i;
        uint32_t lo = UINT32_MAX, hi = 0;
        bool before = false;
        size_t first = i;
        for (; j < n && a[j].size == a[i].size; j++) {
            if (a[j].born == AN_NO_ITER) {
                before = true;
            } else {
                lo = a[j].born < lo ? a[j].born : lo;
                hi = a[j].born > hi ? a[j].born : hi;
            }
            if (a[j].t_us < a[first].t_us ||
                (a[j].t_us == a[first].t_us && a[j].id < a[first].id))
                first = j;
        }
        put(p, "<tr><td class=\"num\">");
        put_size(p, a[i].size);
        put(p, "</td><td class=\"num\">");
        put_count(p, j - i);
        put(p, "</td><td class=\"num\">");
        put_size(p, a[i].size * (j - i));
        put(p, "</td><td class=\"num\">");
        if (before)
            put(p, lo == UINT32_MAX ? "before the first" : "before the first to ");
        if (lo != UINT32_MAX && !before && lo != hi) {
            put_count(p, (uint64_t)lo + 1);
            put(p, "&ndash;");
        }
        if (lo != UINT32_MAX)
            put_count(p, (uint64_t)hi + 1);
        put(p, "</td><td class=\"num\">");
        put_time(p, a[first].t_us);
        put(p, "</td><td class=\"num\">");
        put_count(p, a[first].id);
        put(p, "</td></tr>\n");
        rows++;
        i = j;
    }
    put(p, "</tbody>\n</table>\n");
    if (i < n) {
        uint64_t rest = 0;
        for (size_t k = i; k < n; k++)
            rest += a[k].size;
        put(p, "<p class=\"note\">and ");
        put_count(p, n - i);
        put(p, " smaller allocations (");
        put_size(p, rest);
        put(p, ").</p>\n");
    }
}

/* What was live at the peak: by size class, by the phase that allocated
** it (with marks), by device (with several); then the phases' peaks. */
static void
peak_breakdown(struct page *p)
{
    const struct an_result *r = p->r;
    put(p, "<section id=\"peak\">\n<h2>What was live at the peak</h2>\n");
    uint64_t count = 0;
    for (size_t i = 0; i < r->n_peak_classes; i++)
        count += r->peak_classes[i].count;
    put(p, "<p><b>");
    put_size(p, r->peak_bytes);
    put(p, "</b> in ");
    put_count(p, count);
    put(p, count == 1 ? " allocation" : " allocations");
    put(p, " at ");
    put_time(p, r->peak_time_us);
    put(p, ", by size class (largest share first):</p>\n");
    if (r->n_peak_classes > 0 && r->peak_classes != NULL)
        class_table(p, r->peak_classes, r->n_peak_classes, r->peak_bytes);

    if (r->n_peak_origins > 0 && r->peak_origins != NULL) {
        uint64_t top = 0;
        for (size_t i = 0; i < r->n_peak_origins; i++)
            if (r->peak_origins[i].bytes > top)
                top = r->peak_origins[i].bytes;
        put(p, "<h3>By the phase that allocated it</h3>\n<table>\n<thead><tr><th>Phase"
               "</th><th>Live bytes</th><th class=\"num\">Bytes</th><th class=\"num\">"
               "Allocations</th><th class=\"num\">Share</th></tr></thead>\n<tbody>\n");
        size_t rows =
            r->n_peak_origins < MAX_PHASE_ROWS ? r->n_peak_origins : MAX_PHASE_ROWS;
        for (size_t i = 0; i < rows; i++) {
            const struct an_origin *o = &r->peak_origins[i];
            put(p, "<tr><td class=\"name\">");
            put_label(p, o->label);
            put(p, "</td>");
            class_cells(p, o->bytes, o->count, top, r->peak_bytes);
        }
        put(p, "</tbody>\n</table>\n");
        if (r->n_peak_origins > rows) {
            put(p, "<p class=\"note\">and ");
            put_count(p, r->n_peak_origins - rows);
            put(p, " more phases.</p>\n");
        }
    }

    if (r->n_devices > 1 && r->device_peaks != NULL) {
        uint64_t top = 0;
        for (int d = 0; d < r->n_devices; d++)
            if (r->device_peaks[d] > top)
                top = r->device_peaks[d];
        put(p, "<h3>Peak by device</h3>\n<table>\n<thead><tr><th>Logical device</th>"
               "<th>Peak live</th><th class=\"num\">Bytes</th></tr></thead>\n<tbody>\n");
        for (int d = 0; d < r->n_devices; d++) {
            putf(p,
                 "<tr><td class=\"name\">%d</td><td class=\"barcell\"><div class=\"bar\" "
                 "style=\"width:",
                 d);
            put_num(p, top > 0 ? 100.0 * (double)r->device_peaks[d] / (double)top : 0, 1);
            put(p, "%\"></div></td><td class=\"num\">");
            put_size(p, r->device_peaks[d]);
            put(p, "</td></tr>\n");
        }
        put(p, "</tbody>\n</table>\n");
    }
    phase_table(p);
    put(p, "</section>\n");
}

/*
** The least live bytes of each iteration, with the least-squares line of
** slope leak_bytes_per_iter through the mean of the iterations it was
** fitted over: leak_iters_used of them from the second on (analyze.c
** leaves out the first, a warm-up, and a last one cut short by the end of
** the recording). Those left out are drawn hollow. Needs two iterations.
*/
static void
leak_chart(struct page *p)
{
    const struct an_result *r = p->r;
    size_t n = r->n_iters;
    size_t used = r->leak_iters_used, f = 1; /* f: index of the first fitted */
    if (used < 2 || used >= n) {
        used = n;
        f = 0;
    }
    size_t last = f + used - 1;
    double mx = 0, my = 0, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double v = (double)r->iters[i].min_live;
        if (i >= f && i <= last) {
            mx += (double)(i + 1);
            my += v;
        }
        lo = fmin(lo, v);
        hi = fmax(hi, v);
    }
    mx /= (double)used;
    my /= (double)used;
    double slope = isfinite(r->leak_bytes_per_iter) ? r->leak_bytes_per_iter : 0;
    double xa = (double)(f + 1), xb = (double)(last + 1);
    double ya = my + slope * (xa - mx), yb = my + slope * (xb - mx);
    lo = fmax(0, fmin(lo, fmin(ya, yb)));
    hi = fmax(hi, fmax(ya, yb));
    double span = hi - lo;
    if (span < hi * 0.02)
        span = fmax(hi * 0.02, 1024);
    int k;
    double step = byte_step(span, 4, &k);
    double ylo = floor(lo / step) * step, yhi = ceil(hi / step) * step;
    if (yhi <= ylo)
        yhi = ylo + step;

    const double h = 280, left = CHART_LEFT, right = CHART_RIGHT, top = 14,
                 bottom = h - 48;
    struct scale y = {ylo, yhi, bottom, top};
    struct scale x = {0.5, (double)n + 0.5, left, right};

    put(p, "<div class=\"legend\"><span><i class=\"sw min\"></i>least live bytes within "
           "each iteration</span><span><i class=\"sw trend\"></i>trend (least squares)"
           "</span>");
    if (used < n)
        put(p, "<span><i class=\"sw min hollow\"></i>left out of the fit (the warm-up, "
               "an end cut short)</span>");
    put(p, "</div>\n");
    svg_open(p, h, "least live bytes per iteration");
    y_grid(p, &y, step, k, left, right);
    double istep = decimal_step((double)n, 12);
    if (istep < 1)
        istep = 1;
    for (int i = 1; i <= 1000 && i * istep <= (double)n; i++) {
        x_tick_open(p, sc(&x, i * istep), bottom);
        put_num(p, i * istep, 0);
        put(p, "</text>\n");
    }
    if (istep > 1) {
        x_tick_open(p, sc(&x, 1), bottom);
        put(p, "1</text>\n");
    }
    svg_text(p, NULL, (left + right) / 2, h - 8, "middle");
    put(p, ">iteration</text>\n");
    hline(p, left, right, bottom, "stroke=\"" C_AXIS "\"");

    put(p,
        "<polyline fill=\"none\" stroke=\"" C_LIVE "\" stroke-width=\"1.5\" points=\"");
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            fputc(' ', p->out);
        put_xy(p, sc(&x, (double)(i + 1)), sc(&y, (double)r->iters[i].min_live));
    }
    put(p, "\"/>\n");
    /* The trend under the dots, so that a perfect fit still shows both. */
    svg_line(p, sc(&x, xa), sc(&x, xb), sc(&y, ya), sc(&y, yb),
             "stroke=\"" C_ALERT "\" stroke-width=\"2.5\" stroke-dasharray=\"8 5\"");
    put(p, "\n");
    double radius = n > 200 ? 1.5 : n > 60 ? 2.5 : 4;
    for (size_t i = 0; i < n; i++) {
        put(p, "<circle");
        put_attr(p, "cx", sc(&x, (double)(i + 1)));
        put_attr(p, "cy", sc(&y, (double)r->iters[i].min_live));
        put_attr(p, "r", radius);
        put(p, i < f || i > last
                   ? " fill=\"#fff\" stroke=\"" C_LIVE "\" stroke-width=\"1.5\"/>\n"
                   : " fill=\"" C_LIVE "\"/>\n");
    }
    put(p, "</svg>\n<p class=\"note\">The least live bytes of an iteration are what "
           "survives from one iteration to the next; a steady rise is a leak.");
    if (ylo > 0)
        put(p, " The vertical axis does not start at zero.");
    put(p, "</p>\n");
}

static void
suspect_table(struct page *p)
{
    const struct an_result *r = p->r;
    put(p, "<h3>Suspects</h3>\n");
    if (r->n_suspects == 0 || r->suspects == NULL) {
        put(p, "<p>No allocation was flagged as a suspect.</p>\n");
        return;
    }
    put(p, "<p>");
    put_count(p, r->n_suspects);
    put(p, r->n_suspects == 1 ? " allocation outlived" : " allocations outlived");
    put(p, " the iteration that made it and stayed alive: <b>");
    put_size(p, r->suspect_bytes);
    put(p, "</b> in all. The sizes that hold the most first:</p>\n");
    alloc_table(p, r->suspects, r->n_suspects, MAX_SUSPECT_ROWS);
}

static void
leak_section(struct page *p)
{
    const struct an_result *r = p->r;
    put(p, "<section id=\"leak\">\n<h2>Leak check</h2>\n");
    size_t n = r->n_iters;
    size_t used =
        r->leak_iters_used >= 2 && r->leak_iters_used <= n ? r->leak_iters_used : n;
    if (n < 2 || r->iters == NULL) {
        put(p,
            "<p class=\"verdict none\">No verdict: a leak shows across iterations, and "
            "this trace has ");
        put(p, n == 1 ? "only one" : "none");
        put(p, " (neither marks nor a repeating pattern of events).</p>\n");
    } else if (r->leak) {
        put(p, "<p class=\"verdict bad\">Memory grew ");
        put_size(p, (uint64_t)llround(fabs(r->leak_bytes_per_iter)));
        put(p, " per iteration over ");
        put_count(p, used);
        put(p, " iterations</p>\n<p>The least live bytes of an iteration (what persists "
               "from one to the next) rose by about ");
        put_size(p, (uint64_t)llround(fabs(r->leak_bytes_per_iter) * (double)(used - 1)));
        put(p, " from the first to the last");
        if (used < n) {
            put(p, " of the ");
            put_count(p, used);
            put(p, " fitted");
        }
        put(p, " (least-squares fit, R&sup2; ");
        put_num(p, r->leak_r2, 2);
        put(p, ").</p>\n");
        /* The projection, two significant digits as in the text report. */
        put(p, "<p>At this rate the ");
        put_size(p, r->leak_capacity);
        put(p, r->leak_capacity_is_cap ? " cap" : " device");
        if (r->leak_iters_to_full < 1.0) {
            put(p, " is full within the next iteration.</p>\n");
        } else {
            double mag = pow(10.0, floor(log10(r->leak_iters_to_full)) - 1.0);
            put(p, " is full after about ");
            put_count(p, (uint64_t)(floor(r->leak_iters_to_full / (mag < 1.0 ? 1.0 : mag) + 0.5) *
                                    (mag < 1.0 ? 1.0 : mag)));
            put(p, " more iterations.</p>\n");
        }
    } else {
        put(p, "<p class=\"verdict good\">No leak: the least live bytes per iteration "
               "stayed level over ");
        put_count(p, used);
        put(p, " iterations</p>\n<p>Trend ");
        put_size_signed(p, r->leak_bytes_per_iter);
        put(p, " per iteration (least-squares fit, R&sup2; ");
        put_num(p, r->leak_r2, 2);
        put(p, ").</p>\n");
    }
    if (n >= 2 && r->iters != NULL)
        leak_chart(p);
    suspect_table(p);
    put(p, "</section>\n");
}

/* What each cause of a final OOM says: BEFORE the bound (the cap, or BY_CAP
** false, the most the replay reserved), then AFTER; over the cap, by how
** much follows. */
struct oom_story {
    bool by_cap;
    const char *before, *after;
};
static const struct oom_story oom_story[] = {
    [AN_OOM_OVER_CAP] = {true, " That is more than the cap of <b>",
                         "</b>: the job is too big for it, by "},
    [AN_OOM_UNDER_CAP] = {true, " That fits in the cap of <b>",
                          "</b>: the memory was there, but in pieces too small (fragmentation) "
                          "or held outside the live set (cached blocks, another process)."},
    [AN_OOM_NEW_HIGH] = {false, " No cap is known; that is more than the job ever held before (",
                         " reserved at most in the replay): it outgrew its memory."},
    [AN_OOM_WITHIN_RESERVED] = {false,
                                " No cap is known; that fits in what the job held before (",
                                " reserved at most in the replay): the memory was there, in "
                                "pieces or held outside the live set."},
};

/* The story of the final OOM: what was asked, what was held, why it
** failed (r->oom_cause), and what held the memory then. */
static void
oom_section(struct page *p)
{
    const struct an_result *r = p->r;
    if (!r->ends_in_oom)
        return;
    uint64_t need = r->oom_request + r->oom_live;
    put(p, "<section id=\"oom\">\n<h2>The trace ends in an out-of-memory "
           "error</h2>\n<p>At ");
    put_time(p, r->oom_time_us != 0 ? r->oom_time_us : p->t_end);
    put(p, " an allocation of <b>");
    put_size(p, r->oom_request);
    put(p, "</b> was refused while <b>");
    put_size(p, r->oom_live);
    put(p, "</b> were live: it needed ");
    put_size(p, need);
    put(p, " at once.");
    if ((size_t)r->oom_cause < sizeof oom_story / sizeof *oom_story &&
        oom_story[r->oom_cause].before != NULL) {
        const struct oom_story *s = &oom_story[r->oom_cause];
        put(p, s->before);
        put_size(p, s->by_cap ? r->oom_cap : r->peak_reserved);
        put(p, s->after);
        if (r->oom_cause == AN_OOM_OVER_CAP) {
            put_size(p, need > r->oom_cap ? need - r->oom_cap : 0);
            put(p, ".");
        }
    }
    put(p, "</p>\n");
    if (r->leak && r->n_iters >= 2) {
        put(p, "<p>The leak explains the growth: ");
        put_size_signed(p, r->leak_bytes_per_iter);
        put(p, " per iteration; ");
        put_count(p, r->n_suspects);
        put(p, r->n_suspects == 1 ? " suspect holds " : " suspects hold ");
        put_size(p, r->suspect_bytes);
        put(p, " (see the leak check below).</p>\n");
    }
    if (r->n_oom_classes > 0 && r->oom_classes != NULL) {
        put(p, "<h3>Live at the OOM, by size class</h3>\n");
        class_table(p, r->oom_classes, r->n_oom_classes, r->oom_live);
    }
    if (r->n_oom_largest > 0 && r->oom_largest != NULL) {
        put(p, "<h3>The ");
        put_count(p, r->n_oom_largest);
        put(p, r->n_oom_largest == 1 ? " largest allocation" : " largest allocations");
        put(p, " live then</h3>\n");
        alloc_table(p, r->oom_largest, r->n_oom_largest, r->n_oom_largest);
    }
    put(p, "</section>\n");
}

/* ------------------------------------------------------------------ */
/* Call sites                                                           */
/* ------------------------------------------------------------------ */

/* Rows shown of a call-site table; the rest are counted. */
#define MAX_SITE_ROWS 10

/* The stack of site SITE: the headline (its title attribute holds the
** whole stack, shown on hover), and the frames as a list shown on click. */
static void
site_cell(struct page *p, const struct an_site *x)
{
    const struct trace *t = p->r->trace;
    uint32_t n;
    const uint32_t *f = trace_site_frames(t, x->site, &n);
    char buf[1200];

    put(p, "<details class=\"site\"><summary title=\"");
    for (uint32_t i = 0; i < n; i++) {
        put_esc(p, an_frame_text(t, f[i], true, buf, sizeof buf));
        put(p, i + 1 < n ? "&#10;" : "");
    }
    put(p, "\">");
    put_esc(p, an_site_headline(t, x, buf, sizeof buf));
    put(p, "</summary>\n<ol class=\"stack\">");
    for (uint32_t i = 0; i < n; i++) {
        put(p, t->frames[f[i]].kind == TRACE_FRAME_NOTE ? "<li class=\"note\">" : "<li>");
        put_esc(p, an_frame_text(t, f[i], true, buf, sizeof buf));
        put(p, "</li>");
    }
    put(p, "</ol></details>");
}

/*
** A section of call sites: the peak's (ITERS 0) or the leak's, with each
** site's rate over the ITERS iterations a suspect can be born in.
*/
static void
sites_section(struct page *p, const char *id, const char *title, const struct an_site *s,
              size_t n, size_t iters)
{
    if (n == 0)
        return;
    putf(p, "<section id=\"%s\">\n<h2>%s</h2>\n", id, title);
    put(p, iters > 0
               ? "<p class=\"note\">Grouped by the line that keeps the memory: the "
                 "innermost frame of the program's own code through which nearly all that "
                 "was allocated outlived the iterations (else the innermost that made "
                 "it). Hover over a call site for its stack, click to open it.</p>\n"
                 "<table>\n<tr><th>call site</th>"
               : "<p class=\"note\">Grouped by the innermost frame that made each "
                 "allocation (the Python line when one was read). Hover over a call site "
                 "for its stack, click to open it.</p>\n<table>\n<tr><th>call site</th>");
    if (iters > 0)
        put(p, "<th class=\"num\">per iteration</th><th class=\"num\">iterations</th>");
    put(p, "<th class=\"num\">allocations</th><th class=\"num\">bytes</th></tr>\n");
    for (size_t i = 0; i < n && i < MAX_SITE_ROWS; i++) {
        put(p, "<tr><td>");
        site_cell(p, &s[i]);
        if (s[i].held_by != NULL) {
            put(p, "<br><span class=\"note\">held by ");
            put_esc(p, s[i].held_by);
            putf(p, " (%llu of %llu)</span>", (unsigned long long)s[i].held_count,
                 (unsigned long long)s[i].count);
        }
        put(p, "</td>");
        if (iters > 0) {
            put(p, "<td class=\"num\">");
            put_size(p, (uint64_t)llround((double)s[i].bytes / (double)iters));
            putf(p, "</td><td class=\"num\">%u of %zu</td>", s[i].iters, iters);
        }
        put(p, "<td class=\"num\">");
        put_count(p, s[i].count);
        put(p, "</td><td class=\"num\">");
        put_size(p, s[i].bytes);
        put(p, "</td></tr>\n");
    }
    put(p, "</table>\n");
    if (n > MAX_SITE_ROWS)
        putf(p, "<p class=\"note\">and %zu more call sites</p>\n", n - MAX_SITE_ROWS);
    put(p, "</section>\n");
}

/* ------------------------------------------------------------------ */
/* The page                                                             */
/* ------------------------------------------------------------------ */

vram_status
an_write_html(FILE *out, const struct an_result *r)
{
    if (out == NULL || r == NULL)
        return error_set(VRAM_E_INVALID, "an_write_html: no output or no result");
    struct page pg = {.out = out, .r = r};
    const struct trace *t = r->trace;
    if (t != NULL && t->n_events > 0 && t->events != NULL) {
        pg.t0 = t->events[0].t_us;
        pg.t_end = t->events[t->n_events - 1].t_us;
    } else if (r->n_points > 0 && r->points != NULL) {
        pg.t0 = r->points[0].t_us;
        pg.t_end = r->points[r->n_points - 1].t_us;
    }
    if (r->n_points > 0 && r->points != NULL &&
        r->points[r->n_points - 1].t_us > pg.t_end)
        pg.t_end = r->points[r->n_points - 1].t_us;
    if (pg.t_end < pg.t0)
        pg.t_end = pg.t0;

    head(&pg);
    summary(&pg);
    figures(&pg);
    oom_section(&pg);
    timeline(&pg);
    peak_breakdown(&pg);
    sites_section(&pg, "peak-sites", "The code that held the peak", r->peak_sites,
                  r->n_peak_sites, 0);
    leak_section(&pg);
    if (r->leak_site_iters > 0)
        sites_section(&pg, "leak-sites", "The code that leaked", r->leak_sites,
                      r->n_leak_sites, r->leak_site_iters);
    put(&pg,
        "<footer>Written by vram " VRAM_VERSION " (vram analyze --html). Sizes in IEC "
        "units: 1 MiB = 1024 KiB.</footer>\n</main>\n</body>\n</html>\n");
    if (fflush(out) != 0 || ferror(out))
        return error_set(VRAM_E_IO, "writing the HTML report failed");
    return VRAM_OK;
}

/* ------------------------------------------------------------------ */
/* The comparison of two runs (vram analyze --compare --html)           */
/* ------------------------------------------------------------------ */

/* The next cell of a comparison row: size V, or "-" when not KNOWN. */
static void
compare_cell(struct page *p, bool known, uint64_t v)
{
    put(p, "</td><td class=\"num\">");
    if (known)
        put_size(p, v);
    else
        put(p, "-");
}

/* One row: NAME, A, B and the change, "-" where a side lacks the row. */
static void
compare_row(struct page *p, const char *name, const struct an_cmp_row *row)
{
    put(p, "<tr><td>");
    put_esc(p, name);
    compare_cell(p, row->in_a, row->a);
    compare_cell(p, row->in_b, row->b);
    put(p, "</td><td class=\"num\">");
    if (row->in_a && row->in_b)
        put_size_signed(p, (double)row->b - (double)row->a);
    else
        put(p, "-");
    put(p, "</td></tr>\n");
}

static void
compare_table_head(struct page *p, const char *title)
{
    put(p, "<section>\n<h2>");
    put_esc(p, title);
    put(p, "</h2>\n<table>\n<thead><tr><th></th><th class=\"num\">A</th>"
           "<th class=\"num\">B</th><th class=\"num\">Change (B &minus; A)</th></tr></thead>"
           "\n<tbody>\n");
}

static void
compare_table_end(struct page *p)
{
    put(p, "</tbody>\n</table>\n</section>\n");
}

/* A titled table of N phase or size-class ROWS; nothing when N is 0. */
static void
compare_table(struct page *p, const char *title, const struct an_cmp_row *rows, size_t n)
{
    char name[96];
    if (n == 0)
        return;
    compare_table_head(p, title);
    for (size_t i = 0; i < n; i++)
        compare_row(p, an_cmp_row_name(&rows[i], name, sizeof name), &rows[i]);
    compare_table_end(p);
}

vram_status
an_write_compare_html(FILE *out, const struct an_compare *c)
{
    if (out == NULL || c == NULL)
        return error_set(VRAM_E_INVALID, "an_write_compare_html: no output or no comparison");
    struct page pg = {.out = out, .r = c->b};
    struct page *p = &pg;
    const struct an_result *a = c->a, *b = c->b;
    const char *pa = a->trace != NULL ? a->trace->path : "?";
    const char *pb = b->trace != NULL ? b->trace->path : "?";

    put(p, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
           "<title>vram analyze --compare: ");
    put_esc(p, pa);
    put(p, " vs ");
    put_esc(p, pb);
    put(p, "</title>\n<style>\n");
    put(p, style);
    put(p, "</style>\n</head>\n<body>\n<main>\n<header id=\"summary\">\n"
           "<p class=\"kicker\">vram analyze --compare</p>\n<h1>A: ");
    put_esc(p, pa);
    put(p, "<br>B: ");
    put_esc(p, pb);
    put(p, "</h1>\n</header>\n");

    compare_table_head(p, "Peaks");
    char name[96];
    struct an_cmp_row peaks[AN_CMP_PEAK_ROWS];
    an_cmp_peak_rows(c, peaks, name, sizeof name);
    for (size_t i = 0; i < AN_CMP_PEAK_ROWS; i++)
        compare_row(p, peaks[i].label, &peaks[i]);
    putf(p, "<tr><td>iterations</td><td class=\"num\">%zu</td><td class=\"num\">%zu</td>"
            "<td></td></tr>\n",
         a->n_iters, b->n_iters);
    putf(p, "<tr><td>leak</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td></td>"
            "</tr>\n",
         a->leak ? "yes" : "no", b->leak ? "yes" : "no");
    compare_table_end(p);
    compare_table(p, "Phase peaks (by mark label; the largest of each)", c->phases,
                  c->n_phases);
    compare_table(p, "Live at the peak, by size class", c->classes, c->n_classes);
    put(p, "<footer>Written by vram " VRAM_VERSION " (vram analyze --compare --html). Sizes "
           "in IEC units: 1 MiB = 1024 KiB.</footer>\n</main>\n</body>\n</html>\n");
    if (fflush(out) != 0 || ferror(out))
        return error_set(VRAM_E_IO, "writing the HTML report failed");
    return VRAM_OK;
}
