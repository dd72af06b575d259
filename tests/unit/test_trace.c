/* SPDX-License-Identifier: MIT */
/*
** test_trace.c -- the trace reader and writer (src/trace/, the format in
** docs/TRACE_FORMAT.md).
**
** The four real traces (directory in VRAM_TRACES, set by CTest) must load
** with the event counts and peaks of data/traces/README.md. Every
** malformed case the reader promises to catch has its own test, written
** to a temporary file here, and each checks the status and that the error
** line names the file and the offending line. Writer tests round-trip
** through the reader, plain and gzip, from several threads. Marks ('m')
** and refused allocations ('o') round-trip too, and a trace of the old
** format (no label column, only 'a' and 'f') reads exactly as before.
** Call sites (format 2: the site column and the "#@" frames table)
** round-trip, interned; a format-1 trace with a site column reads as
** before; a newer format and every kind of damaged table is one line.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trace/trace.h"

#define HEADER "t_us,op,id,size,stream\n"

/* ------------------------------------------------------------------ */
/* Helpers                                                              */
/* ------------------------------------------------------------------ */

/* Write LEN bytes of DATA to a new temporary file; PATH is a mkstemp
** template that receives the name. */
static void
write_temp(char *path, const void *data, size_t len)
{
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    assert_int_equal(close(fd), 0);
}

/* Fail unless the last error starts with "PATH:LINE: " and contains
** NEEDLE (when not NULL). */
static void
expect_error_at(const char *path, uint64_t line, const char *needle)
{
    const char *err = vram_last_error();
    char prefix[256];

    snprintf(prefix, sizeof prefix, "%s:%" PRIu64 ": ", path, line);
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("expected an error starting '%s', got '%s'", prefix, err);
    if (needle != NULL && strstr(err, needle) == NULL)
        fail_msg("expected '%s' in the error, got '%s'", needle, err);
}

/* Load TEXT from a temporary file and expect VRAM_E_PARSE at LINE, with
** NEEDLE in the message, and OUT left alone. */
static void
expect_parse_error(const char *text, uint64_t line, const char *needle)
{
    char path[] = "/tmp/vram_test_trace_XXXXXX";
    struct trace dummy, *t = &dummy;

    write_temp(path, text, strlen(text));
    assert_int_equal(trace_load(path, &t), VRAM_E_PARSE);
    assert_ptr_equal(t, &dummy);
    expect_error_at(path, line, needle);
    unlink(path);
}

/* Load TEXT from a temporary file, expecting success. Free the result. */
static struct trace *
load_text(const char *text)
{
    char path[] = "/tmp/vram_test_trace_XXXXXX";
    struct trace *t = NULL;
    vram_status st;

    write_temp(path, text, strlen(text));
    st = trace_load(path, &t);
    if (st != VRAM_OK)
        fail_msg("loading '%s' failed: %s", text, vram_last_error());
    assert_non_null(t);
    unlink(path);
    return t;
}

/* ------------------------------------------------------------------ */
/* The real traces                                                      */
/* ------------------------------------------------------------------ */

struct real_trace {
    const char *name;
    uint64_t events;     /* from data/traces/README.md */
    uint32_t ids;        /* allocations; counted with awk */
    uint64_t peak_bytes; /* measured; the README rounds it to MiB */
    uint64_t peak_mib;   /* the README's figure */
};

static const struct real_trace real_traces[] = {
    {"resnet50_fp32", 21175, 10911, 11379364496u, 10852},
    {"gpt2_bf16_b16", 34716, 17656, 25379906248u, 24204},
    {"gpt2m_generate", 1476138, 738216, 1522219008u, 1452},
    {"leak_mlp", 1971, 1055, 1234337796u, 1177},
};

static void
check_real_trace(const struct real_trace *rt)
{
    const char *dir = getenv("VRAM_TRACES");
    char path[1024], workload[64];
    struct trace *t = NULL;
    uint64_t diff, mib = (uint64_t)1 << 20, i;

    if (dir == NULL || dir[0] == '\0')
        skip();
    snprintf(path, sizeof path, "%s/%s.trace.csv.gz", dir, rt->name);
    if (trace_load(path, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());

    assert_int_equal(t->n_events, rt->events);
    assert_int_equal(t->n_slots, rt->ids);
    assert_int_equal(t->n_devices, 1);
    assert_int_equal(t->peak_live_bytes, rt->peak_bytes);
    diff = t->peak_live_bytes > rt->peak_mib * mib
               ? t->peak_live_bytes - rt->peak_mib * mib
               : rt->peak_mib * mib - t->peak_live_bytes;
    assert_true(diff <= mib);
    snprintf(workload, sizeof workload, "workload=%s ", rt->name);
    assert_true(strncmp(t->meta, workload, strlen(workload)) == 0);
    assert_string_equal(t->path, path);
    for (i = 0; i < t->n_events; i++) {
        assert_true(t->events[i].slot < t->n_slots);
        assert_true(t->events[i].op == TRACE_ALLOC || t->events[i].op == TRACE_FREE);
    }
    assert_int_equal(t->n_marks, 0);
    assert_int_equal(t->n_labels, 0);
    trace_free(t);
}

static void
test_real_resnet50(void **state)
{
    (void)state;
    check_real_trace(&real_traces[0]);
}

static void
test_real_gpt2(void **state)
{
    (void)state;
    check_real_trace(&real_traces[1]);
}

static void
test_real_gpt2m_generate(void **state)
{
    (void)state;
    check_real_trace(&real_traces[2]);
}

static void
test_real_leak_mlp(void **state)
{
    (void)state;
    check_real_trace(&real_traces[3]);
}

/* ------------------------------------------------------------------ */
/* What the reader accepts                                              */
/* ------------------------------------------------------------------ */

/* Slots are dense and shared by an allocation and its free; the peak is
** the largest sum of live sizes. */
static void
test_slots_and_peak(void **state)
{
    struct trace *t;
    (void)state;

    t = load_text("# workload=x a=1\n" HEADER "10,a,100,512,0\n"
                  "11,a,7,1024,0\n"
                  "12,f,100,512,0\n"
                  "13,a,5,256,9\n"
                  "14,f,7,1024,0\n");
    assert_string_equal(t->meta, "workload=x a=1");
    assert_int_equal(t->n_events, 5);
    assert_int_equal(t->n_slots, 3);
    assert_int_equal(t->n_devices, 1);
    assert_int_equal(t->peak_live_bytes, 1536);
    assert_int_equal(t->events[0].slot, 0);
    assert_int_equal(t->events[1].slot, 1);
    assert_int_equal(t->events[2].slot, 0);
    assert_int_equal(t->events[3].slot, 2);
    assert_int_equal(t->events[4].slot, 1);
    assert_int_equal(t->events[3].t_us, 13);
    assert_int_equal(t->events[3].id, 5);
    assert_int_equal(t->events[3].size, 256);
    assert_int_equal(t->events[3].stream, 9);
    assert_int_equal(t->events[3].device, 0);
    assert_int_equal(t->events[2].op, TRACE_FREE);
    trace_free(t);
}

/* CRLF, blank and comment lines, unknown and reordered columns, a device
** column, a metadata line without its space, no final line end. */
static void
test_accepts_variants(void **state)
{
    struct trace *t;
    (void)state;

    t = load_text("#k=v\r\n"
                  "\r\n"
                  "note,device,size,id,op,stream,t_us,future\r\n"
                  "# a comment between events\r\n"
                  "hello,2,512,1,a,0,5,\r\n"
                  "   \r\n"
                  ",2,512,1,f,0,6,x");
    assert_string_equal(t->meta, "k=v");
    assert_int_equal(t->n_events, 2);
    assert_int_equal(t->n_devices, 3);
    assert_int_equal(t->events[0].device, 2);
    assert_int_equal(t->events[0].size, 512);
    assert_int_equal(t->events[0].t_us, 5);
    assert_int_equal(t->events[1].op, TRACE_FREE);
    assert_int_equal(t->peak_live_bytes, 512);
    trace_free(t);
}

/* A header alone is a valid, empty trace; without a "#" line meta is "". */
static void
test_header_only(void **state)
{
    struct trace *t;
    (void)state;

    t = load_text(HEADER);
    assert_int_equal(t->n_events, 0);
    assert_int_equal(t->n_slots, 0);
    assert_int_equal(t->n_devices, 1);
    assert_int_equal(t->peak_live_bytes, 0);
    assert_string_equal(t->meta, "");
    trace_free(t);
    trace_free(NULL);
}

/* The largest numbers fit; device 1023 is the last accepted. */
static void
test_limits_accepted(void **state)
{
    struct trace *t;
    (void)state;

    t = load_text("t_us,op,id,size,stream,device\n"
                  "18446744073709551615,a,18446744073709551615,"
                  "18446744073709551615,18446744073709551615,1023\n");
    assert_int_equal(t->events[0].t_us, UINT64_MAX);
    assert_int_equal(t->events[0].id, UINT64_MAX);
    assert_int_equal(t->events[0].stream, UINT64_MAX);
    assert_int_equal(t->peak_live_bytes, UINT64_MAX);
    assert_int_equal(t->n_devices, 1024);
    trace_free(t);
}

/* The old format (no label column, only 'a' and 'f') reads as before:
** no labels, no marks, every event has a slot; and the same events with
** an empty label column give the same trace. */
static void
test_old_format_unchanged(void **state)
{
    static const char *const texts[] = {
        HEADER "10,a,100,512,0\n11,a,7,1024,0\n12,f,100,512,0\n13,f,7,1024,0\n",
        "t_us,op,id,size,stream,device,label\n"
        "10,a,100,512,0,0,\n11,a,7,1024,0,0,\n12,f,100,512,0,0,\n13,f,7,1024,0,0,\n",
    };
    size_t k, i;
    (void)state;

    for (k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        struct trace *t = load_text(texts[k]);
        assert_int_equal(t->n_events, 4);
        assert_int_equal(t->n_slots, 2);
        assert_int_equal(t->n_devices, 1);
        assert_int_equal(t->peak_live_bytes, 1536);
        assert_int_equal(t->n_labels, 0);
        assert_null(t->labels);
        assert_int_equal(t->n_marks, 0);
        assert_int_equal(t->n_ooms, 0);
        for (i = 0; i < t->n_events; i++) {
            assert_true(t->events[i].slot < t->n_slots);
            assert_int_equal(t->events[i].label, TRACE_NO_LABEL);
        }
        assert_int_equal(t->events[2].slot, 0);
        assert_int_equal(t->events[3].slot, 1);
        trace_free(t);
    }
}

/* Marks and refused allocations: kept in order, no slot, no live bytes;
** labels stored once each; an OOM's device counts in n_devices. */
static void
test_marks_and_ooms(void **state)
{
    struct trace *t;
    (void)state;

    t = load_text("t_us,op,id,size,stream,device,label\n"
                  "1,m,0,0,0,0,epoch 1\n"
                  "2,a,5,1024,0,0,\n"
                  "3,m,0,0,0,0,step 1\n"
                  "4,o,0,999999,0,2,\n"
                  "5,f,5,1024,0,0,\n"
                  "6,m,0,0,0,0,epoch 1\n"
                  "7,a,6,512,0,0,\n"
                  "8,m,0,0,0,0,  spaced  \n");
    assert_int_equal(t->n_events, 8);
    assert_int_equal(t->n_slots, 2);
    assert_int_equal(t->peak_live_bytes, 1024);
    assert_int_equal(t->n_devices, 3);
    assert_int_equal(t->n_marks, 4);
    assert_int_equal(t->n_ooms, 1);
    assert_int_equal(t->n_labels, 3);
    assert_string_equal(t->labels[0], "epoch 1");
    assert_string_equal(t->labels[1], "step 1");
    assert_string_equal(t->labels[2], "  spaced  ");

    assert_int_equal(t->events[0].op, TRACE_MARK);
    assert_int_equal(t->events[0].slot, TRACE_NO_SLOT);
    assert_int_equal(t->events[0].label, 0);
    assert_int_equal(t->events[2].label, 1);
    assert_int_equal(t->events[5].label, 0); /* the same label, stored once */
    assert_int_equal(t->events[7].label, 2);
    assert_int_equal(t->events[3].op, TRACE_OOM);
    assert_int_equal(t->events[3].slot, TRACE_NO_SLOT);
    assert_int_equal(t->events[3].label, TRACE_NO_LABEL);
    assert_int_equal(t->events[3].size, 999999);
    assert_int_equal(t->events[3].device, 2);
    assert_int_equal(t->events[3].t_us, 4);
    assert_int_equal(t->events[1].slot, 0);
    assert_int_equal(t->events[4].slot, 0);
    assert_int_equal(t->events[6].slot, 1);
    assert_int_equal(t->events[1].label, TRACE_NO_LABEL);
    trace_free(t);

    /* An 'o' needs no label column (a trace of the old columns may have
     * OOMs); the label column may come anywhere. */
    t = load_text(HEADER "1,a,0,512,0\n2,o,0,4096,0\n");
    assert_int_equal(t->n_ooms, 1);
    assert_int_equal(t->n_slots, 1);
    trace_free(t);
    t = load_text("label,t_us,op,id,size,stream\nwarm up,1,m,0,0,0\n,2,a,1,8,0\n");
    assert_int_equal(t->n_marks, 1);
    assert_string_equal(t->labels[t->events[0].label], "warm up");
    trace_free(t);

    /* A trace made by hand: its labels are made safe as a writer's are
     * (no escape sequence reaches a terminal), its marks' and OOMs' ids,
     * sizes and streams are not kept (the format says they are 0). */
    char text[512];
    int n = snprintf(text, sizeof text,
                     "t_us,op,id,size,stream,label\n1,m,7,8,9,red\x1b[31m\t\"x\"\n"
                     "2,o,5,4096,3,\n3,m,0,0,0,%0200d\n",
                     0);
    assert_true(n > 0 && (size_t)n < sizeof text);
    t = load_text(text);
    assert_int_equal(t->n_marks, 2);
    assert_string_equal(t->labels[t->events[0].label], "red [31m  x ");
    assert_true(t->events[0].id == 0 && t->events[0].size == 0 && t->events[0].stream == 0);
    assert_true(t->events[1].id == 0 && t->events[1].size == 4096);
    assert_int_equal(strlen(t->labels[t->events[2].label]), TRACE_LABEL_MAX);
    trace_free(t);
}

/* Labels of a long run ("step N" for every step) grow the label table
** and are each stored once. */
static void
test_many_labels(void **state)
{
    size_t cap = 4000 * 48 + 64, len = 0;
    char *text = malloc(cap);
    struct trace *t;
    uint32_t i;
    (void)state;

    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "t_us,op,id,size,stream,label\n");
    for (i = 0; i < 4000; i++)
        len +=
            (size_t)snprintf(text + len, cap - len, "%u,m,0,0,0,step %u\n", i, i % 3000);
    t = load_text(text);
    free(text);
    assert_int_equal(t->n_marks, 4000);
    assert_int_equal(t->n_labels, 3000);
    for (i = 0; i < 4000; i++) {
        char want[32];
        snprintf(want, sizeof want, "step %u", i % 3000);
        assert_string_equal(t->labels[t->events[i].label], want);
    }
    trace_free(t);
}

/* ------------------------------------------------------------------ */
/* Malformed input: one test per rule                                   */
/* ------------------------------------------------------------------ */

static void
test_missing_header(void **state)
{
    (void)state;
    expect_parse_error("1,a,0,512,0\n", 1, "no header");
    expect_parse_error("# meta\n\n1,a,0,512,0\n", 3, "no header");
}

static void
test_missing_column(void **state)
{
    (void)state;
    expect_parse_error("# m\nt_us,op,id,size\n1,a,0,512\n", 2,
                       "required column 'stream'");
    expect_parse_error("t_us,op,size,stream\n", 1, "required column 'id'");
    expect_parse_error("t_us,op,id,size,stream,op\n", 1, "appears twice");
}

static void
test_field_count(void **state)
{
    (void)state;
    expect_parse_error(HEADER "1,a,0,512,0\n2,a,1,512\n", 3,
                       "expected 5 fields as in the header, found 4");
    expect_parse_error(HEADER "1,a,0,512,0,7\n", 2, "found 6");
}

static void
test_non_numeric(void **state)
{
    (void)state;
    expect_parse_error(HEADER "1,a,0,12x,0\n", 2, "size '12x'");
    expect_parse_error(HEADER "1,a,-3,512,0\n", 2, "id '-3'");
    expect_parse_error(HEADER "1.5,a,0,512,0\n", 2, "t_us '1.5'");
    expect_parse_error(HEADER "1,a,0, 512,0\n", 2, "size ' 512'");
    expect_parse_error(HEADER "1,a,0,512,0x10\n", 2, "stream '0x10'");
}

static void
test_overflow(void **state)
{
    (void)state;
    expect_parse_error(HEADER "1,a,0,18446744073709551616,0\n", 2,
                       "does not fit in 64 bits");
    expect_parse_error(HEADER "99999999999999999999999,a,0,1,0\n", 2,
                       "t_us '99999999999999999999999' does not fit");
    /* Live bytes past 2^64 cannot be counted either. */
    expect_parse_error(HEADER "1,a,0,18446744073709551615,0\n2,a,1,1,0\n", 3,
                       "live bytes");
}

static void
test_empty_field(void **state)
{
    (void)state;
    expect_parse_error(HEADER "1,a,,512,0\n", 2, "empty field 'id'");
    expect_parse_error(HEADER "1,,0,512,0\n", 2, "empty field 'op'");
}

static void
test_bad_op(void **state)
{
    (void)state;
    expect_parse_error(HEADER "1,x,0,512,0\n", 2, "op 'x'");
    expect_parse_error(HEADER "1,af,0,512,0\n", 2, "op 'af'");
    expect_parse_error(HEADER "1,A,0,512,0\n", 2, "is not 'a', 'f', 'm' or 'o'");
    expect_parse_error(HEADER "1,M,0,512,0\n", 2, "op 'M'");
}

#define LHEADER "t_us,op,id,size,stream,device,label\n"

static void
test_bad_marks(void **state)
{
    (void)state;
    expect_parse_error(LHEADER "1,m,0,0,0,0,\n", 2, "mark without a label");
    expect_parse_error(HEADER "1,m,0,0,0\n", 2,
                       "mark without a label (the header has no label column)");
    expect_parse_error(LHEADER "1,o,0,0,0,0,\n", 2, "an 'o' event");
    expect_parse_error(LHEADER "1,a,0,512,0,0,x\n", 2,
                       "label 'x' on an 'a' event (only marks have labels)");
    expect_parse_error(LHEADER "1,a,0,512,0,0,\n2,f,0,512,0,0,oops\n", 3,
                       "on an 'f' event");
    expect_parse_error(LHEADER "1,o,0,8,0,0,why\n", 2, "on an 'o' event");
    /* A mark's other columns are still numbers. */
    expect_parse_error(LHEADER "1,m,,0,0,0,x\n", 2, "empty field 'id'");
    expect_parse_error(LHEADER "1,m,0,0,0,-1,x\n", 2, "device -1 is negative");
}

static void
test_free_not_live(void **state)
{
    (void)state;
    expect_parse_error(HEADER "1,a,0,512,0\n2,f,1,512,0\n", 3,
                       "free of id 1, which was never allocated");
    expect_parse_error(HEADER "1,a,0,512,0\n2,f,0,512,0\n3,f,0,512,0\n", 4,
                       "free of id 0, which was already freed");
}

static void
test_id_reused(void **state)
{
    (void)state;
    expect_parse_error(HEADER "1,a,4,512,0\n2,a,4,512,0\n", 3,
                       "id 4 allocated again while live");
    expect_parse_error(HEADER "1,a,4,512,0\n2,f,4,512,0\n3,a,4,512,0\n", 4,
                       "id 4 allocated again after its free");
}

static void
test_free_size_mismatch(void **state)
{
    (void)state;
    expect_parse_error(HEADER "1,a,4,512,0\n2,f,4,1024,0\n", 3,
                       "free of id 4 with size 1024, but it was allocated "
                       "with size 512");
}

static void
test_free_device_mismatch(void **state)
{
    (void)state;
    expect_parse_error("t_us,op,id,size,stream,device\n"
                       "1,a,4,512,0,1\n2,f,4,512,0,0\n",
                       3, "on device 0, but it was allocated on device 1");
}

static void
test_device_range(void **state)
{
    (void)state;
    expect_parse_error("t_us,op,id,size,stream,device\n1,a,0,512,0,-1\n", 2,
                       "device -1 is negative");
    expect_parse_error("t_us,op,id,size,stream,device\n1,a,0,512,0,1024\n", 2,
                       "device 1024 is out of range (0..1023)");
    expect_parse_error("t_us,op,id,size,stream,device\n1,a,0,512,0,x\n", 2, "device 'x'");
}

/* Exactly 4096 bytes (with or without "\r") pass; 4097 do not, even
** when the line never ends. */
static void
test_line_too_long(void **state)
{
    static const char head[] = "t_us,op,id,size,stream,note\n";
    static const char event[] = "1,a,0,512,0,";
    size_t len = sizeof head - 1 + 4096 + 2 + 16;
    char *text = malloc(len), *p;
    struct trace *t;
    (void)state;

    assert_non_null(text);
    /* A line of exactly 4096 bytes, then "\r\n". */
    memcpy(text, head, sizeof head - 1);
    p = text + sizeof head - 1;
    memcpy(p, event, sizeof event - 1);
    memset(p + sizeof event - 1, 'x', 4096 - (sizeof event - 1));
    memcpy(p + 4096, "\r\n", 3);
    t = load_text(text);
    assert_int_equal(t->n_events, 1);
    trace_free(t);

    /* One more byte. */
    memset(p + sizeof event - 1, 'x', 4097 - (sizeof event - 1));
    memcpy(p + 4097, "\n", 2);
    expect_parse_error(text, 2, "line longer than 4096 bytes");

    /* A line that never ends. */
    p[4097] = '\0';
    expect_parse_error(text, 2, "line longer than 4096 bytes");
    free(text);

    /* A long binary file without line ends. */
    text = malloc(3 * 1024 * 1024);
    assert_non_null(text);
    memset(text, 'z', 3 * 1024 * 1024 - 1);
    text[3 * 1024 * 1024 - 1] = '\0';
    expect_parse_error(text, 1, "line longer than 4096 bytes");
    free(text);
}

static void
test_empty_file(void **state)
{
    (void)state;
    expect_parse_error("", 1, "no header");
    expect_parse_error("# only metadata\n\n", 3, "no header");
}

/*
** A gzip stream cut short (tests/data/truncated.trace.csv.gz: the first
** 4000 bytes of leak_mlp.trace.csv.gz, as a recording killed or stopped by
** a full disk leaves it). Its text holds 666 whole lines and part of line
** 667: the whole lines are read (the metadata, the header and 664
** events), the half line is not, and CUT says where it stops.
*/
static void
test_truncated_gzip(void **state)
{
    const char *dir = getenv("VRAM_TEST_DATA");
    char path[1024], want[1400];
    struct trace *t = NULL;
    (void)state;

    if (dir == NULL || dir[0] == '\0')
        skip();
    snprintf(path, sizeof path, "%s/truncated.trace.csv.gz", dir);
    assert_int_equal(trace_load(path, &t), VRAM_OK);
    assert_int_equal(t->n_events, 664);
    assert_non_null(t->cut);
    snprintf(want, sizeof want,
             "%s:667: the trace is cut short here (the file ends inside its gzip stream, as "
             "a recording that was killed or ran out of disk leaves it): it is read up to "
             "line 666, its last whole line",
             path);
    assert_string_equal(t->cut, want);
    trace_free(t);
}

/*
** A plain trace whose last line lacks its line end: dropped, and said,
** when it does not read (half a line); read, and said all the same, when
** it does (a number cut short is still a number). A whole file says
** nothing.
*/
static void
test_cut_plain(void **state)
{
    char path[] = "/tmp/vram_test_trace_XXXXXX";
    const char *half = HEADER "1,a,0,512,0\n2,f,0,5";
    struct trace *t = NULL;
    (void)state;

    write_temp(path, half, strlen(half));
    assert_int_equal(trace_load(path, &t), VRAM_OK);
    assert_int_equal(t->n_events, 1);
    assert_non_null(t->cut);
    assert_non_null(strstr(t->cut, ":3: the trace is cut short here (the last line has no "
                                   "line end and does not read: expected 5 fields as in the "
                                   "header, found 4): it is read up to line 2, its last "
                                   "whole line"));
    trace_free(t);
    unlink(path);

    t = load_text(HEADER "1,a,0,512,0\n2,a,1,512,1");
    assert_int_equal(t->n_events, 2);
    assert_int_equal(t->events[1].stream, 1); /* perhaps 12 or 100 once */
    assert_non_null(t->cut);
    assert_non_null(strstr(t->cut, ":3: the last line has no line end: it is read as it "
                                   "stands, but if the file was cut short there it may be "
                                   "half an event"));
    trace_free(t);

    t = load_text(HEADER "1,a,0,512,0\n");
    assert_null(t->cut);
    trace_free(t);
}

/* A gzip stream whose checksum is wrong: every line is intact (the
** metadata, the header and 100 events), the damage comes after them. */
static void
test_corrupt_gzip(void **state)
{
    char path[] = "/tmp/vram_test_trace_XXXXXX.gz";
    struct trace_writer *w;
    struct trace_event ev = {.op = TRACE_ALLOC, .size = 512};
    struct trace dummy, *t = &dummy;
    unsigned char byte;
    FILE *f;
    long size;
    int fd;
    (void)state;

    fd = mkstemps(path, 3);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_writer_open(path, "k=v", &w), VRAM_OK);
    for (ev.id = 0; ev.id < 100; ev.id++)
        assert_int_equal(trace_writer_event(w, &ev), VRAM_OK);
    assert_int_equal(trace_writer_close(w), VRAM_OK);

    /* Flip a bit of the CRC-32 in the trailer (the last 8 bytes). */
    f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    size = ftell(f);
    assert_int_equal(fseek(f, size - 8, SEEK_SET), 0);
    assert_int_equal(fread(&byte, 1, 1, f), 1);
    byte ^= 1;
    assert_int_equal(fseek(f, size - 8, SEEK_SET), 0);
    assert_int_equal(fwrite(&byte, 1, 1, f), 1);
    assert_int_equal(fclose(f), 0);

    assert_int_equal(trace_load(path, &t), VRAM_E_PARSE);
    assert_ptr_equal(t, &dummy);
    expect_error_at(path, 103, "corrupt gzip stream (incorrect data check)");
    unlink(path);
}

static void
test_missing_file(void **state)
{
    struct trace dummy, *t = &dummy;
    (void)state;

    assert_int_equal(trace_load("/nonexistent/x.csv.gz", &t), VRAM_E_IO);
    assert_ptr_equal(t, &dummy);
    assert_string_equal(vram_last_error(),
                        "/nonexistent/x.csv.gz: No such file or directory");
    assert_int_equal(trace_load("/tmp", &t), VRAM_E_IO);
    assert_string_equal(vram_last_error(), "/tmp: Is a directory");
}

/* ------------------------------------------------------------------ */
/* The writer                                                           */
/* ------------------------------------------------------------------ */

static const struct trace_event sample[] = {
    {.t_us = 1, .op = TRACE_ALLOC, .id = 10, .size = 512, .stream = 0, .device = 0},
    {.t_us = 2, .op = TRACE_ALLOC, .id = 11, .size = 4096, .stream = 140234, .device = 3},
    {.t_us = 3, .op = TRACE_FREE, .id = 10, .size = 512, .stream = 0, .device = 0},
    {.t_us = UINT64_MAX,
     .op = TRACE_ALLOC,
     .id = UINT64_MAX,
     .size = 1,
     .stream = UINT64_MAX,
     .device = 1023},
    {.t_us = 5, .op = TRACE_FREE, .id = 11, .size = 4096, .stream = 140234, .device = 3},
};

static void
round_trip(const char *suffix)
{
    char path[64];
    struct trace_writer *w;
    struct trace *t;
    size_t i, n = sizeof sample / sizeof sample[0];
    int fd;

    snprintf(path, sizeof path, "/tmp/vram_test_trace_XXXXXX%s", suffix);
    fd = mkstemps(path, (int)strlen(suffix));
    assert_true(fd >= 0);
    close(fd);

    assert_int_equal(trace_writer_open(path, "workload=rt\nsecond", &w), VRAM_OK);
    for (i = 0; i < n; i++)
        assert_int_equal(trace_writer_event(w, &sample[i]), VRAM_OK);
    assert_int_equal(trace_writer_close(w), VRAM_OK);

    if (trace_load(path, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());
    /* A line end in the metadata must not split the line. */
    assert_string_equal(t->meta, "workload=rt second");
    assert_int_equal(t->n_events, n);
    assert_int_equal(t->n_slots, 3);
    assert_int_equal(t->n_devices, 1024);
    for (i = 0; i < n; i++) {
        assert_int_equal(t->events[i].t_us, sample[i].t_us);
        assert_int_equal(t->events[i].op, sample[i].op);
        assert_int_equal(t->events[i].id, sample[i].id);
        assert_int_equal(t->events[i].size, sample[i].size);
        assert_int_equal(t->events[i].stream, sample[i].stream);
        assert_int_equal(t->events[i].device, sample[i].device);
    }
    trace_free(t);
    unlink(path);
}

static void
test_round_trip_plain(void **state)
{
    (void)state;
    round_trip(".csv");
}

static void
test_round_trip_gzip(void **state)
{
    FILE *f;
    unsigned char magic[2];
    char path[] = "/tmp/vram_test_trace_XXXXXX.csv.gz";
    struct trace_writer *w;
    int fd;
    (void)state;

    round_trip(".csv.gz");

    /* ".gz" really means gzip; no metadata means no "#" line. */
    fd = mkstemps(path, 7);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_writer_open(path, NULL, &w), VRAM_OK);
    assert_int_equal(trace_writer_close(w), VRAM_OK);
    f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(magic, 1, 2, f), 2);
    fclose(f);
    assert_int_equal(magic[0], 0x1f);
    assert_int_equal(magic[1], 0x8b);
    unlink(path);
}

/* Marks and OOMs through the writer and back, plain and gzip. */
static void
round_trip_marks(const char *suffix)
{
    char path[64];
    struct trace_writer *w;
    struct trace *t;
    struct trace_event a = {.t_us = 2, .op = TRACE_ALLOC, .id = 1, .size = 512},
                       o = {.t_us = 4,
                            .op = TRACE_OOM,
                            .id = 77,
                            .size = 1 << 30,
                            .device = 1},
                       f = {.t_us = 5, .op = TRACE_FREE, .id = 1, .size = 512};
    int fd;

    snprintf(path, sizeof path, "/tmp/vram_test_trace_XXXXXX%s", suffix);
    fd = mkstemps(path, (int)strlen(suffix));
    assert_true(fd >= 0);
    close(fd);

    assert_int_equal(trace_writer_open(path, "workload=marks", &w), VRAM_OK);
    assert_int_equal(trace_writer_mark(w, 1, 0, "epoch 1"), VRAM_OK);
    assert_int_equal(trace_writer_event(w, &a), VRAM_OK);
    assert_int_equal(trace_writer_mark(w, 3, 0, "step 1"), VRAM_OK);
    assert_int_equal(trace_writer_event(w, &o), VRAM_OK);
    assert_int_equal(trace_writer_event(w, &f), VRAM_OK);
    assert_int_equal(trace_writer_mark(w, 6, 0, "epoch 1"), VRAM_OK);
    assert_int_equal(trace_writer_close(w), VRAM_OK);

    if (trace_load(path, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());
    assert_int_equal(t->n_events, 6);
    assert_int_equal(t->n_marks, 3);
    assert_int_equal(t->n_ooms, 1);
    assert_int_equal(t->n_labels, 2);
    assert_int_equal(t->n_slots, 1);
    assert_int_equal(t->peak_live_bytes, 512);
    assert_int_equal(t->events[0].op, TRACE_MARK);
    assert_int_equal(t->events[0].t_us, 1);
    assert_string_equal(t->labels[t->events[0].label], "epoch 1");
    assert_string_equal(t->labels[t->events[2].label], "step 1");
    assert_int_equal(t->events[5].label, t->events[0].label);
    assert_int_equal(t->events[3].op, TRACE_OOM);
    assert_int_equal(t->events[3].size, 1 << 30);
    assert_int_equal(t->events[3].id, 0); /* an OOM has no id */
    assert_int_equal(t->events[3].device, 1);
    assert_int_equal(t->events[4].op, TRACE_FREE);
    trace_free(t);
    unlink(path);
}

static void
test_round_trip_marks(void **state)
{
    char path[] = "/tmp/vram_test_trace_XXXXXX.csv";
    char line[256];
    struct trace_writer *w;
    FILE *f;
    int fd;
    (void)state;

    round_trip_marks(".csv");
    round_trip_marks(".csv.gz");

    /* The header names the label column; 'a' lines end with an empty one. */
    fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_writer_open(path, NULL, &w), VRAM_OK);
    {
        struct trace_event a = {.t_us = 9, .op = TRACE_ALLOC, .id = 3, .size = 256};
        assert_int_equal(trace_writer_event(w, &a), VRAM_OK);
    }
    assert_int_equal(trace_writer_mark(w, 10, 2, "x"), VRAM_OK);
    assert_int_equal(trace_writer_close(w), VRAM_OK);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "t_us,op,id,size,stream,device,label\n");
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "9,a,3,256,0,0,\n");
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "10,m,0,0,0,2,x\n");
    fclose(f);
    unlink(path);
}

/* ------------------------------------------------------------------ */
/* Call sites (format 2)                                                */
/* ------------------------------------------------------------------ */

static void
round_trip_sites(const char *suffix)
{
    char path[64];
    struct trace_writer *w;
    struct trace *t;
    uint32_t s1, s2, s3, n;
    const uint32_t *fr;
    int fd;
    const struct trace_frame py[] = {
        {.kind = TRACE_FRAME_PY, .file = "model.py", .line = 88, .func = "forward"},
        {.kind = TRACE_FRAME_PY, .file = "train,loop.py", .line = 12, .func = "main"},
    };
    const struct trace_frame other[] = {
        {.kind = TRACE_FRAME_NOTE, .func = "no Python frame on thread pt_autograd_0"},
        {.kind = TRACE_FRAME_NATIVE, .file = "/lib/libtorch.so", .offset = 0x1a2b,
         .func = "_ZN5torch8autograd6Engine11thread_mainE"},
        {.kind = TRACE_FRAME_PY, .file = "train,loop.py", .line = 12, .func = "main"},
    };

    snprintf(path, sizeof path, "/tmp/vram_test_trace_XXXXXX%s", suffix);
    fd = mkstemps(path, (int)strlen(suffix));
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_writer_open_sites(path, "workload=sites", &w), VRAM_OK);
    assert_int_equal(trace_writer_site(w, py, 2, &s1), VRAM_OK);
    assert_int_equal(trace_writer_site(w, other, 3, &s2), VRAM_OK);
    assert_int_equal(trace_writer_site(w, py, 2, &s3), VRAM_OK);
    assert_int_equal(s1, 1);
    assert_int_equal(s2, 2);
    assert_int_equal(s3, s1); /* interned: the same stack, the same id */
    {
        struct trace_event a = {.t_us = 1, .op = TRACE_ALLOC, .id = 1, .size = 64, .site = s1};
        struct trace_event b = {.t_us = 2, .op = TRACE_ALLOC, .id = 2, .size = 32, .site = s2};
        struct trace_event c = {.t_us = 3, .op = TRACE_ALLOC, .id = 3, .size = 16};
        struct trace_event o = {.t_us = 4, .op = TRACE_OOM, .size = 1 << 20, .site = s2};
        struct trace_event f = {.t_us = 5, .op = TRACE_FREE, .id = 1, .size = 64, .site = s1};
        assert_int_equal(trace_writer_event(w, &a), VRAM_OK);
        assert_int_equal(trace_writer_event(w, &b), VRAM_OK);
        assert_int_equal(trace_writer_event(w, &c), VRAM_OK);
        assert_int_equal(trace_writer_mark(w, 4, 0, "step 1"), VRAM_OK);
        assert_int_equal(trace_writer_event(w, &o), VRAM_OK);
        assert_int_equal(trace_writer_event(w, &f), VRAM_OK);
    }
    assert_int_equal(trace_writer_close(w), VRAM_OK);

    assert_int_equal(trace_load(path, &t), VRAM_OK);
    assert_int_equal(t->format, 2);
    assert_string_equal(t->meta, "workload=sites");
    assert_int_equal(t->n_events, 6);
    assert_int_equal(t->n_frames, 4); /* main's frame once, in both sites */
    assert_int_equal(t->n_sites, 2);
    assert_int_equal(t->events[0].site, 1);
    assert_int_equal(t->events[1].site, 2);
    assert_int_equal(t->events[2].site, TRACE_NO_SITE);
    assert_int_equal(t->events[3].site, TRACE_NO_SITE); /* the mark */
    assert_int_equal(t->events[4].site, 2);             /* the OOM */
    assert_int_equal(t->events[5].site, TRACE_NO_SITE); /* frees carry none */
    fr = trace_site_frames(t, 1, &n);
    assert_int_equal(n, 2);
    assert_int_equal(t->frames[fr[0]].kind, TRACE_FRAME_PY);
    assert_string_equal(t->frames[fr[0]].file, "model.py");
    assert_int_equal(t->frames[fr[0]].line, 88);
    assert_string_equal(t->frames[fr[0]].func, "forward");
    assert_string_equal(t->frames[fr[1]].file, "train loop.py"); /* the comma made safe */
    fr = trace_site_frames(t, 2, &n);
    assert_int_equal(n, 3);
    assert_int_equal(t->frames[fr[0]].kind, TRACE_FRAME_NOTE);
    assert_string_equal(t->frames[fr[0]].func, "no Python frame on thread pt_autograd_0");
    assert_int_equal(t->frames[fr[1]].kind, TRACE_FRAME_NATIVE);
    assert_string_equal(t->frames[fr[1]].file, "/lib/libtorch.so");
    assert_int_equal(t->frames[fr[1]].offset, 0x1a2b);
    assert_string_equal(t->frames[fr[1]].func, "_ZN5torch8autograd6Engine11thread_mainE");
    assert_int_equal(fr[2], trace_site_frames(t, 1, &n)[1]);
    assert_null(trace_site_frames(t, 3, &n));
    assert_int_equal(n, 0);
    assert_null(trace_site_frames(t, TRACE_NO_SITE, &n));
    trace_free(t);
    unlink(path);
}

static void
test_round_trip_sites(void **state)
{
    (void)state;
    round_trip_sites(".csv");
    round_trip_sites(".csv.gz");
}

/* What a format-2 writer puts in the file, line by line. */
static void
test_sites_text(void **state)
{
    char path[] = "/tmp/vram_test_trace_XXXXXX.csv";
    char text[1024];
    struct trace_writer *w;
    uint32_t s;
    FILE *f;
    size_t n;
    int fd;
    const struct trace_frame fr[] = {
        {.kind = TRACE_FRAME_PY, .file = "a.py", .line = 3, .func = "f"},
        {.kind = TRACE_FRAME_NATIVE, .file = "/bin/x", .offset = 0xbeef, .func = ""},
    };
    (void)state;

    fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_writer_open_sites(path, "m", &w), VRAM_OK);
    assert_int_equal(trace_writer_site(w, fr, 2, &s), VRAM_OK);
    {
        struct trace_event a = {.t_us = 9, .op = TRACE_ALLOC, .id = 3, .size = 256, .site = s};
        struct trace_event b = {.t_us = 10, .op = TRACE_FREE, .id = 3, .size = 256};
        assert_int_equal(trace_writer_event(w, &a), VRAM_OK);
        assert_int_equal(trace_writer_event(w, &b), VRAM_OK);
    }
    assert_int_equal(trace_writer_mark(w, 11, 0, "x"), VRAM_OK);
    assert_int_equal(trace_writer_close(w), VRAM_OK);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_string_equal(text, "# m\n"
                              "#@format 2\n"
                              "t_us,op,id,size,stream,device,label,site\n"
                              "#@frame 1,py,a.py,3,f\n"
                              "#@frame 2,native,/bin/x,0xbeef,\n"
                              "#@site 1,1,2\n"
                              "9,a,3,256,0,0,,1\n"
                              "10,f,3,256,0,0,,\n"
                              "11,m,0,0,0,0,x,\n");
    unlink(path);

    /* A format-1 writer has no sites to give. */
    memcpy(path + strlen(path) - 10, "XXXXXX.csv", 10);
    fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_writer_open(path, NULL, &w), VRAM_OK);
    assert_int_equal(trace_writer_site(w, fr, 2, &s), VRAM_E_INVALID);
    assert_int_equal(trace_writer_close(w), VRAM_OK);
    unlink(path);
}

/* Format 1 reads as before: a site column there is an unknown column
** (even with garbage in it), "#" lines are comments. */
static void
test_sites_format1_unchanged(void **state)
{
    struct trace *t;
    (void)state;

    t = load_text("# workload=old\n"
                  "t_us,op,id,size,stream,site\n"
                  "1,a,1,64,0,zz\n"
                  "# frame 1,py,x.py,1,f\n"
                  "2,f,1,64,0,\n");
    assert_int_equal(t->format, 1);
    assert_int_equal(t->n_events, 2);
    assert_int_equal(t->n_sites, 0);
    assert_int_equal(t->n_frames, 0);
    assert_int_equal(t->events[0].site, TRACE_NO_SITE);
    assert_string_equal(t->meta, "workload=old");
    trace_free(t);

    /* A "#@format 1" line says what a file without one means; unknown
     * directives are skipped. */
    t = load_text("#@format 1\n#@later something\n" HEADER "1,a,1,64,0\n");
    assert_int_equal(t->format, 1);
    assert_string_equal(t->meta, ""); /* a directive is not the metadata */
    trace_free(t);
}

#define SHEADER "#@format 2\nt_us,op,id,size,stream,device,label,site\n"

/* "#@held" lines: what held an allocation, kept in order with the event
** they came before, made safe; written by trace_writer_held. */
static void
test_held_lines(void **state)
{
    (void)state;
    struct trace *t = load_text(SHEADER "1,a,7,64,0,0,,\n"
                                "#@held 7,list `history` of module __main__; appended at x.py:3\n"
                                "#@held 9,dict `c`\x01 of module m, key\n"
                                "2,f,7,64,0,0,,\n");
    assert_int_equal(t->n_held, 2);
    assert_int_equal(t->held[0].id, 7);
    assert_int_equal(t->held[0].event, 1);
    assert_string_equal(t->held[0].text,
                        "list `history` of module __main__; appended at x.py:3");
    assert_int_equal(t->held[1].id, 9); /* not checked against the events */
    assert_string_equal(t->held[1].text, "dict `c`  of module m  key");
    trace_free(t);
    expect_parse_error(HEADER "#@held 1,x\n", 2,
                       "'#@held' needs a '#@format 2' line before the header");
    expect_parse_error(SHEADER "#@held x,y\n", 3, "held id 'x' is not an allocation id");
    expect_parse_error(SHEADER "#@held 4\n", 3, "a held line without its text");
    expect_parse_error(SHEADER "#@held 4,\n", 3, "a held line without its text");

    /* The writer: format 2 only, the text made safe. */
    char path[] = "/tmp/vram_test_held_XXXXXX.csv", text[512];
    int fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    close(fd);
    struct trace_writer *w = NULL;
    assert_int_equal(trace_writer_open_sites(path, NULL, &w), VRAM_OK);
    assert_int_equal(trace_writer_held(w, 12, "list `a`, \"b\"\n"), VRAM_OK);
    assert_int_equal(trace_writer_held(w, 12, ""), VRAM_E_INVALID);
    assert_int_equal(trace_writer_close(w), VRAM_OK);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_non_null(strstr(text, "\n#@held 12,list `a`   b  \n"));
    assert_int_equal(trace_writer_open(path, NULL, &w), VRAM_OK);
    assert_int_equal(trace_writer_held(w, 1, "x"), VRAM_E_INVALID);
    assert_int_equal(trace_writer_close(w), VRAM_OK);
    unlink(path);
}

static void
test_sites_errors(void **state)
{
    (void)state;
    /* A newer format: one line that says so. */
    expect_parse_error("# x\n#@format 3\n" HEADER, 2,
                       "trace format 3 is newer than this vram reads (1 to 2)");
    expect_parse_error("#@format two\n" HEADER, 1, "the version is not a positive integer");
    expect_parse_error("#@format 2\n#@format 2\n" HEADER, 2, "a second '#@format' line");
    expect_parse_error(HEADER "#@format 2\n", 2, "'#@format' after the header");
    expect_parse_error(HEADER "#@frame 1,py,a.py,1,f\n", 2,
                       "'#@frame' needs a '#@format 2' line before the header");
    expect_parse_error(HEADER "#@site 1,1\n", 2, "'#@site' needs a '#@format 2' line");
    /* Frames. */
    expect_parse_error(SHEADER "#@frame 2,py,a.py,1,f\n", 3,
                       "frame id 2 out of order (expected 1");
    expect_parse_error(SHEADER "#@frame x,py,a.py,1,f\n", 3, "frame id 'x' is not");
    expect_parse_error(SHEADER "#@frame 1,lua,a.lua,1,f\n", 3,
                       "frame kind 'lua' is not 'py', 'native' or 'note'");
    expect_parse_error(SHEADER "#@frame 1\n", 3, "frame kind '' is not");
    expect_parse_error(SHEADER "#@frame 1,py,a.py,1\n", 3, "a py frame has 5 fields");
    expect_parse_error(SHEADER "#@frame 1,py,a.py,1,f,g\n", 3, "a py frame has 5 fields");
    expect_parse_error(SHEADER "#@frame 1,py,a.py,-1,f\n", 3,
                       "frame line '-1' is not a line number");
    expect_parse_error(SHEADER "#@frame 1,py,,1,f\n", 3, "a py frame without its file");
    expect_parse_error(SHEADER "#@frame 1,native,/x,1234,f\n", 3,
                       "frame offset '1234' is not a hexadecimal");
    expect_parse_error(SHEADER "#@frame 1,native,/x,0xg,f\n", 3,
                       "frame offset '0xg' is not a hexadecimal");
    expect_parse_error(SHEADER "#@frame 1,native,/x,0x12345678123456789,f\n", 3,
                       "is not a hexadecimal");
    expect_parse_error(SHEADER "#@frame 1,note,a,b\n", 3, "a note frame has 3 fields");
    expect_parse_error(SHEADER "#@frame 1,note,\n", 3, "a note frame without its text");
    /* A table cut short, the file ending inside a frame line: read up to
    ** the line before, and said. */
    struct trace *t = load_text(SHEADER "#@frame 1,py,a.py,1,f\n#@frame 2,py,mod");
    assert_int_equal(t->n_frames, 1);
    assert_non_null(t->cut);
    assert_non_null(strstr(t->cut, ":4: the trace is cut short here (the last line has no "
                                   "line end and does not read: a py frame has 5 fields "
                                   "(ID,py,FILE,LINE,FUNCTION), found 3)"));
    trace_free(t);
    /* Sites. */
    expect_parse_error(SHEADER "#@frame 1,py,a.py,1,f\n#@site 1\n", 4, "site 1 has no frames");
    expect_parse_error(SHEADER "#@frame 1,py,a.py,1,f\n#@site 1,2\n", 4,
                       "site 1 names frame 2, which is not defined before it");
    expect_parse_error(SHEADER "#@frame 1,py,a.py,1,f\n#@site 1,0\n", 4,
                       "site frame '0' is not a frame id");
    expect_parse_error(SHEADER "#@frame 1,py,a.py,1,f\n#@site 1,1,\n", 4,
                       "site frame '' is not a frame id");
    expect_parse_error(SHEADER "#@frame 1,py,a.py,1,f\n#@site 2,1\n", 4,
                       "site id 2 out of order (expected 1");
    /* Events. */
    expect_parse_error(SHEADER "1,a,1,64,0,0,,1\n", 3,
                       "site 1 is not defined (no '#@site 1' line before it)");
    expect_parse_error(SHEADER "1,a,1,64,0,0,,x\n", 3,
                       "site 'x' is not a non-negative decimal integer");
    expect_parse_error(SHEADER "#@frame 1,py,a.py,1,f\n#@site 1,1\n"
                               "1,a,1,64,0,0,,1\n2,f,1,64,0,0,,1\n",
                       6, "site 1 on an 'f' event (only 'a' and 'o' events have call sites)");
    expect_parse_error(SHEADER "#@frame 1,py,a.py,1,f\n#@site 1,1\n1,m,0,0,0,0,x,1\n", 5,
                       "site 1 on an 'm' event");
}

/* A site of more than TRACE_SITE_MAX_FRAMES frames: the writer keeps the
** innermost, the reader refuses a longer one. */
static void
test_sites_limits(void **state)
{
    char path[] = "/tmp/vram_test_trace_XXXXXX.csv";
    struct trace_frame fr[TRACE_SITE_MAX_FRAMES + 5];
    char names[TRACE_SITE_MAX_FRAMES + 5][16], *text, *p;
    char long_name[3000];
    struct trace_writer *w;
    struct trace *t;
    uint32_t s, n;
    int fd, i;
    (void)state;

    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    for (i = 0; i < TRACE_SITE_MAX_FRAMES + 5; i++) {
        snprintf(names[i], sizeof names[i], "f%d", i);
        fr[i] = (struct trace_frame){.kind = TRACE_FRAME_PY, .file = long_name,
                                     .line = (uint32_t)i, .func = names[i]};
    }
    fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_writer_open_sites(path, NULL, &w), VRAM_OK);
    assert_int_equal(trace_writer_site(w, fr, TRACE_SITE_MAX_FRAMES + 5, &s), VRAM_OK);
    assert_int_equal(trace_writer_site(w, fr, 0, &s), VRAM_E_INVALID);
    fr[0].kind = 'z';
    assert_int_equal(trace_writer_site(w, fr, 1, &s), VRAM_E_INVALID);
    assert_int_equal(trace_writer_close(w), VRAM_OK);
    assert_int_equal(trace_load(path, &t), VRAM_OK);
    assert_int_equal(t->n_sites, 1);
    trace_site_frames(t, 1, &n);
    assert_int_equal(n, TRACE_SITE_MAX_FRAMES);
    assert_int_equal(strlen(t->frames[0].file), TRACE_FRAME_TEXT_MAX);
    trace_free(t);
    unlink(path);

    /* 65 frames in one site line. */
    text = malloc(64 * 1024);
    assert_non_null(text);
    p = text + sprintf(text, SHEADER "#@frame 1,py,a.py,1,f\n#@site 1");
    for (i = 0; i < TRACE_SITE_MAX_FRAMES + 1; i++)
        p += sprintf(p, ",1");
    sprintf(p, "\n");
    expect_parse_error(text, 4, "site 1 has 65 frames (at most 64)");
    free(text);
}

/* Labels are made safe, never refused: commas, quotes and control
** characters become spaces; a long label is cut at 128 bytes, never
** inside a UTF-8 sequence. */
static void
test_mark_labels_sanitized(void **state)
{
    char path[] = "/tmp/vram_test_trace_XXXXXX.csv";
    char long_label[300], utf8[300], want[300];
    struct trace_writer *w;
    struct trace *t;
    size_t i;
    int fd;
    (void)state;

    memset(long_label, 'L', sizeof long_label - 1);
    long_label[sizeof long_label - 1] = '\0';
    /* 127 ASCII bytes, then "é" (2 bytes) straddling the cut at 128. */
    memset(utf8, 'u', 127);
    memcpy(utf8 + 127, "\xc3\xa9tail", 7);

    fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_writer_open(path, NULL, &w), VRAM_OK);
    assert_int_equal(trace_writer_mark(w, 1, 0,
                                       "a,b\"c\r\nd\te\x7f"
                                       "f"),
                     VRAM_OK);
    assert_int_equal(trace_writer_mark(w, 2, 0, long_label), VRAM_OK);
    assert_int_equal(trace_writer_mark(w, 3, 0, utf8), VRAM_OK);
    assert_int_equal(trace_writer_mark(w, 4, 0, "\n"), VRAM_OK);
    assert_int_equal(trace_writer_mark(w, 5, 0, "caf\xc3\xa9 \xe2\x9c\x93"), VRAM_OK);
    assert_int_equal(trace_writer_close(w), VRAM_OK);

    if (trace_load(path, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());
    assert_int_equal(t->n_marks, 5);
    assert_string_equal(t->labels[t->events[0].label], "a b c  d e f");
    assert_int_equal(strlen(t->labels[t->events[1].label]), TRACE_LABEL_MAX);
    for (i = 0; i < TRACE_LABEL_MAX; i++)
        assert_int_equal(t->labels[t->events[1].label][i], 'L');
    memset(want, 'u', 127);
    want[127] = '\0';
    assert_string_equal(t->labels[t->events[2].label], want);
    assert_string_equal(t->labels[t->events[3].label], " ");
    assert_string_equal(t->labels[t->events[4].label], "caf\xc3\xa9 \xe2\x9c\x93");
    trace_free(t);
    unlink(path);
}

struct writer_thread {
    struct trace_writer *w;
    uint64_t first_id;
};

#define THREAD_PAIRS 2000
#define N_THREADS 4

static void *
writer_thread_main(void *arg)
{
    const struct writer_thread *wt = arg;
    uint64_t i;

    for (i = 0; i < THREAD_PAIRS; i++) {
        struct trace_event ev = {.t_us = i,
                                 .op = TRACE_ALLOC,
                                 .id = wt->first_id + i,
                                 .size = 512 + i,
                                 .device = (int32_t)(wt->first_id % 7)};
        if (trace_writer_event(wt->w, &ev) != VRAM_OK)
            return arg;
        ev.op = TRACE_FREE;
        if (trace_writer_event(wt->w, &ev) != VRAM_OK)
            return arg;
    }
    return NULL;
}

/* Lines from several threads never interleave. */
static void
test_writer_threads(void **state)
{
    char path[] = "/tmp/vram_test_trace_XXXXXX.gz";
    struct writer_thread wt[N_THREADS];
    pthread_t th[N_THREADS];
    struct trace_writer *w;
    struct trace *t;
    int fd, i;
    (void)state;

    fd = mkstemps(path, 3);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_writer_open(path, "threads=4", &w), VRAM_OK);
    for (i = 0; i < N_THREADS; i++) {
        wt[i].w = w;
        wt[i].first_id = (uint64_t)i * 1000003;
        assert_int_equal(pthread_create(&th[i], NULL, writer_thread_main, &wt[i]), 0);
    }
    for (i = 0; i < N_THREADS; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
    }
    assert_int_equal(trace_writer_close(w), VRAM_OK);

    if (trace_load(path, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());
    assert_int_equal(t->n_events, 2 * THREAD_PAIRS * N_THREADS);
    assert_int_equal(t->n_slots, THREAD_PAIRS * N_THREADS);
    trace_free(t);
    unlink(path);
}

/*
** A writer killed by SIGKILL (no exit handler, no close) leaves every event
** it wrote: nothing waits in a buffer. Plain: a whole file; gzip: a stream
** cut at its last flush point, read to its last event with CUT set.
*/
static void
killed_writer(const char *suffix)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/vram_test_trace_XXXXXX%s", suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    assert_true(fd >= 0);
    close(fd);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct trace_writer *w = NULL;
        struct trace_event ev = {.op = TRACE_ALLOC, .size = 4096};
        if (trace_writer_open(path, "k=v", &w) != VRAM_OK)
            _exit(2);
        for (ev.id = 0; ev.id < 1000; ev.id++)
            if (trace_writer_event(w, &ev) != VRAM_OK)
                _exit(3);
        kill(getpid(), SIGKILL);
        _exit(4);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    struct trace *t = NULL;
    if (trace_load(path, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());
    assert_int_equal(t->n_events, 1000);
    assert_int_equal(t->events[999].id, 999);
    if (suffix[0] == '\0')
        assert_null(t->cut);
    else
        assert_non_null(strstr(t->cut, ":1003: the trace is cut short here (the file ends "
                                       "inside its gzip stream"));
    trace_free(t);
    unlink(path);
}

static void
test_writer_killed(void **state)
{
    (void)state;
    killed_writer("");
    killed_writer(".gz");
}

/*
** A full disk (a file size limit here, RLIMIT_FSIZE: writes past it fail
** with EFBIG, the first one short): the writer says how many events the
** file keeps, and the file holds exactly those, whole: a plain one ends at
** a line end, a gzip one at a flush point.
*/
static void
full_writer(const char *suffix)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/vram_test_trace_XXXXXX%s", suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    assert_true(fd >= 0);
    close(fd);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit lim = {5000, 5000};
        struct trace_writer *w = NULL;
        struct trace_event ev = {.op = TRACE_ALLOC, .size = 4096};
        char line[600] = "";
        signal(SIGXFSZ, SIG_IGN);
        close(pipefd[0]);
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0 || trace_writer_open(path, "k=v", &w) != VRAM_OK)
            _exit(2);
        for (ev.id = 0; ev.id < 100000; ev.id++) {
            if (trace_writer_event(w, &ev) != VRAM_OK) {
                snprintf(line, sizeof line, "%s", vram_last_error());
                break;
            }
        }
        /* Every later event is refused; close says the trace is short. */
        vram_status later = trace_writer_event(w, &ev);
        vram_status closed = trace_writer_close(w);
        dprintf(pipefd[1], "%d %d %s", (int)later, (int)closed, line);
        _exit(0);
    }
    close(pipefd[1]);
    char got[700] = "";
    ssize_t n = read(pipefd[0], got, sizeof got - 1);
    close(pipefd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(n > 0);
    got[n] = '\0';
    int later = 0, closed = 0, kept = -1;
    char rest[700] = "";
    assert_int_equal(sscanf(got, "%d %d %699[^\n]", &later, &closed, rest), 3);
    assert_int_equal(later, VRAM_E_IO);
    assert_int_equal(closed, VRAM_E_IO);
    const char *at = strstr(rest, ": File too large (the trace keeps the ");
    if (at == NULL || sscanf(at, ": File too large (the trace keeps the %d events", &kept) != 1)
        fail_msg("unexpected error '%s'", rest);
    assert_true(kept > 10);
    struct trace *t = NULL;
    if (trace_load(path, &t) != VRAM_OK)
        fail_msg("%s", vram_last_error());
    assert_int_equal(t->n_events, (uint64_t)kept);
    if (suffix[0] == '\0')
        assert_null(t->cut); /* cut back to its last line end */
    else
        assert_non_null(t->cut);
    trace_free(t);
    unlink(path);
}

static void
test_writer_full(void **state)
{
    (void)state;
    full_writer("");
    full_writer(".gz");
}

static void
test_writer_errors(void **state)
{
    char path[] = "/tmp/vram_test_trace_XXXXXX";
    char path2[] = "/tmp/vram_test_trace_XXXXXX";
    struct trace_writer *w = NULL;
    struct trace_event ev = {.op = 'x'};
    int fd;
    (void)state;

    assert_int_equal(trace_writer_open("/nonexistent/t.csv", NULL, &w), VRAM_E_IO);
    assert_null(w);
    assert_string_equal(vram_last_error(),
                        "/nonexistent/t.csv: No such file or directory");
    assert_int_equal(trace_writer_open("/nonexistent/t.csv.gz", "m", &w), VRAM_E_IO);
    assert_null(w);
    assert_true(strncmp(vram_last_error(), "/nonexistent/t.csv.gz: ", 23) == 0);

    /* Events no reader would accept are refused, not written. */
    fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_writer_open(path, NULL, &w), VRAM_OK);
    assert_int_equal(trace_writer_event(w, &ev), VRAM_E_INVALID);
    ev.op = TRACE_ALLOC;
    ev.device = -1;
    assert_int_equal(trace_writer_event(w, &ev), VRAM_E_INVALID);
    ev.device = 1024;
    assert_int_equal(trace_writer_event(w, &ev), VRAM_E_INVALID);
    /* Marks go through trace_writer_mark, with a label; an OOM has a size. */
    ev.device = 0;
    ev.op = TRACE_MARK;
    assert_int_equal(trace_writer_event(w, &ev), VRAM_E_INVALID);
    ev.op = TRACE_OOM;
    ev.size = 0;
    assert_int_equal(trace_writer_event(w, &ev), VRAM_E_INVALID);
    assert_int_equal(trace_writer_mark(w, 1, 0, NULL), VRAM_E_INVALID);
    assert_int_equal(trace_writer_mark(w, 1, 0, ""), VRAM_E_INVALID);
    assert_int_equal(trace_writer_mark(w, 1, 1024, "x"), VRAM_E_INVALID);
    assert_int_equal(trace_writer_mark(NULL, 1, 0, "x"), VRAM_E_INVALID);
    ev.op = TRACE_ALLOC;
    assert_int_equal(trace_writer_close(w), VRAM_OK);
    {
        /* Nothing refused was written: the file is a valid, empty trace. */
        struct trace *t;
        if (trace_load(path, &t) != VRAM_OK)
            fail_msg("%s", vram_last_error());
        assert_int_equal(t->n_events, 0);
        trace_free(t);
    }
    assert_int_equal(trace_writer_close(NULL), VRAM_OK);
    unlink(path);

    /* Metadata too long for one line is cut so that the file stays
     * readable. */
    {
        char *meta = malloc(10000);
        struct trace *t;
        assert_non_null(meta);
        memset(meta, 'm', 9999);
        meta[9999] = '\0';
        fd = mkstemp(path2);
        assert_true(fd >= 0);
        close(fd);
        assert_int_equal(trace_writer_open(path2, meta, &w), VRAM_OK);
        assert_int_equal(trace_writer_close(w), VRAM_OK);
        free(meta);
        if (trace_load(path2, &t) != VRAM_OK)
            fail_msg("%s", vram_last_error());
        assert_int_equal(strlen(t->meta), 4094);
        trace_free(t);
        unlink(path2);
    }

    /* A device is not a trace file (a full one: test_writer_full). */
    assert_int_equal(trace_writer_open("/dev/full", "m", &w), VRAM_E_IO);
    assert_string_equal(vram_last_error(), "/dev/full: not a regular file: not written");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_resnet50),
        cmocka_unit_test(test_real_gpt2),
        cmocka_unit_test(test_real_gpt2m_generate),
        cmocka_unit_test(test_real_leak_mlp),
        cmocka_unit_test(test_slots_and_peak),
        cmocka_unit_test(test_accepts_variants),
        cmocka_unit_test(test_header_only),
        cmocka_unit_test(test_limits_accepted),
        cmocka_unit_test(test_old_format_unchanged),
        cmocka_unit_test(test_marks_and_ooms),
        cmocka_unit_test(test_many_labels),
        cmocka_unit_test(test_missing_header),
        cmocka_unit_test(test_missing_column),
        cmocka_unit_test(test_field_count),
        cmocka_unit_test(test_non_numeric),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_empty_field),
        cmocka_unit_test(test_bad_op),
        cmocka_unit_test(test_bad_marks),
        cmocka_unit_test(test_free_not_live),
        cmocka_unit_test(test_id_reused),
        cmocka_unit_test(test_free_size_mismatch),
        cmocka_unit_test(test_free_device_mismatch),
        cmocka_unit_test(test_device_range),
        cmocka_unit_test(test_line_too_long),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_truncated_gzip),
        cmocka_unit_test(test_cut_plain),
        cmocka_unit_test(test_corrupt_gzip),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_round_trip_plain),
        cmocka_unit_test(test_round_trip_gzip),
        cmocka_unit_test(test_round_trip_marks),
        cmocka_unit_test(test_mark_labels_sanitized),
        cmocka_unit_test(test_writer_threads),
        cmocka_unit_test(test_writer_killed),
        cmocka_unit_test(test_writer_full),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_round_trip_sites),
        cmocka_unit_test(test_sites_text),
        cmocka_unit_test(test_sites_format1_unchanged),
        cmocka_unit_test(test_sites_errors),
        cmocka_unit_test(test_held_lines),
        cmocka_unit_test(test_sites_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
