#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""record_corpus.py -- record a corpus of real allocation traces on the GPU.

    python3 bench/gpu/record_corpus.py --out DIR [--vram build-gpu/bin/vram]
        [--only NAME,...] [--jobs 4] [--gpu-gb 64] [--budget 330] [--timeout 150]
        [--max-events 40000]
    python3 bench/gpu/record_corpus.py --cpu --out DIR   # dry run, nothing recorded
    python3 bench/gpu/record_corpus.py --list | --readme | --self-test [--vram PATH]

Runs every workload of bench/gpu/corpus_workloads.py (LLM fine-tuning with
gradient accumulation, LoRA, activation checkpointing, inference servers
with a KV cache, diffusion, vision with mixed precision, detection and
segmentation with variable image sizes, JAX under cuda_async, DDP-like
gradient buckets, CUDA graphs) in a child process of its own, several at a
time (--jobs, and no more than --gpu-gb of their expected GPU memory at
once), each a few steps, and writes DIR/NAME.trace.csv.gz in vram's trace
format (docs/TRACE_FORMAT.md).

How each is recorded:
  PyTorch  its own allocation history: torch.cuda.memory._record_memory_history
           (no stacks) from before the model is built, then
           torch.cuda.memory._snapshot(), converted by vram's importer
           (python/vram/import_torch.py, the same code as
           `python -m vram.import_torch`): each tensor's allocation and the
           completion of its free, sizes as PyTorch's caching allocator
           hands them out (multiples of 512).
  JAX      JAX keeps no allocation history, so `vram record --no-sites`
           (--vram) runs it with XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async and
           XLA_PYTHON_CLIENT_PREALLOCATE=false: every buffer is a
           cuMemAllocAsync of its own size, which the preload library sees.
           Without --vram the JAX workloads are skipped.

Each trace starts with a metadata line saying what ran (workload, family,
recorder, model, shapes, steps, versions, GPU) and carries a mark ("step N",
"request N") at each step, so `vram analyze` finds the iterations. A
recording longer than --max-events allocations and frees is cut at the last
step mark before it (trimmed=KEPT/TOTAL in the metadata).

Written to DIR: the traces, summary.jsonl (one line per workload: name,
family, status, events, peak_live_bytes, wall_s, file, bytes; "reason" when
skipped, "error" when failed), logs/NAME.log (each child's output). A table
is printed at the end. A workload whose library is missing (transformers,
peft, torchvision, JAX) is skipped and says so; one that fails or runs past
--timeout is reported and the others go on; none is started past --budget
seconds. Exit status: 0 when no workload failed, 1 otherwise, 2 bad usage.

--cpu runs tiny versions of every workload on the CPU, without recording,
to catch errors where there is no GPU. --self-test checks the conversion,
trimming and writing on made-up histories (no PyTorch needed) and, with
--vram, that `vram replay` reads what was written.
"""
import argparse
import bisect
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import corpus_workloads as cw  # noqa: E402
from vram import import_torch  # noqa: E402

KNOWN_ACTIONS = import_torch.ALLOC | import_torch.FREE | import_torch.OOM | import_torch.IGNORED
META_VALUE_MAX = 400   # characters of one metadata value
META_LINE_MAX = 3800   # a trace line is at most 4096 bytes (docs/TRACE_FORMAT.md)


# ---------------------------------------------------------------------------
# Events, marks, trimming and writing (no framework needed).

def meta_value(v):
    """V as one metadata value: no spaces (pairs are separated by them), no
    commas, no control characters; lists joined with ';'."""
    if isinstance(v, (list, tuple)):
        v = ";".join(str(x) for x in v)
    elif isinstance(v, float):
        v = "%.6g" % v
    v = "".join("_" if (c.isspace() or c == "," or ord(c) < 0x20 or ord(c) == 0x7f) else c
                for c in str(v))
    return (v[:META_VALUE_MAX - 3] + "...") if len(v) > META_VALUE_MAX else (v or "-")


def meta_line(pairs):
    """KEY=VALUE pairs (a list of tuples, in order) as the metadata text,
    cut to fit a trace line."""
    text = " ".join("%s=%s" % (k, meta_value(v)) for k, v in pairs)
    return text[:META_LINE_MAX]


def safe_label(text):
    t = "".join(" " if (c in ',"' or ord(c) < 0x20 or ord(c) == 0x7f) else c for c in text)
    return t[:128].strip() or "mark"


def place_marks(events, marks):
    """Each mark (t_us, label) as (index of the first event at or after
    it, label): the events are sorted by time."""
    times = [e[0] for e in events]
    return [(bisect.bisect_left(times, t), safe_label(label)) for t, label in sorted(marks)]


def trim(events, placed, cap):
    """(kept events, kept marks, how): at most CAP events, cut at the last
    mark that keeps no more than CAP (and at least a quarter of CAP, else
    at CAP itself)."""
    if len(events) <= cap:
        return events, placed, "no"
    cut = cap
    good = [i for i, _ in placed if i <= cap]
    if good and good[-1] >= cap // 4:
        cut = good[-1]
    return events[:cut], [(i, l) for i, l in placed if i < cut], "%d/%d" % (cut, len(events))


def peak_live(events):
    live = peak = 0
    for e in events:
        if e[1] == "a":
            live += e[3]
            peak = max(peak, live)
        elif e[1] == "f":
            live -= e[3]
    return peak


def write_trace(path, meta, events, placed):
    """EVENTS ((t_us, op, id, size, stream, device), time order) with the
    marks PLACED ((index, label)) before the event of that index, gzip."""
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt", newline="", encoding="utf-8", compresslevel=9) as f:
        f.write("# %s\n" % meta)
        f.write("t_us,op,id,size,stream,device%s\n" % (",label" if placed else ""))
        tail = "," if placed else ""
        k, last = 0, 0
        for i, e in enumerate(events + [None]):
            while k < len(placed) and placed[k][0] <= i:
                t = last if e is None else max(last, e[0])
                f.write("%d,m,0,0,0,0,%s\n" % (t, placed[k][1]))
                last = t
                k += 1
            if e is None:
                break
            last = max(last, e[0])
            f.write("%d,%s,%d,%d,%d,%d%s\n" % (last, e[1], e[2], e[3], e[4], e[5], tail))
    os.replace(tmp, path)


def from_snapshot(snap):
    """A PyTorch snapshot's history as events, through vram's importer.
    Returns (events, frees of memory allocated before the history, entries
    of actions the importer does not know, left out)."""
    traces = snap.get("device_traces") or []
    kept, other = [], 0
    for dev in traces:
        k = [e for e in dev if isinstance(e, dict) and e.get("action") in KNOWN_ACTIONS]
        other += len(dev) - len(k)
        kept.append(k)
    evs, skipped = import_torch.convert({"device_traces": kept})
    return [e[:6] for e in evs], skipped, other


def read_vram_trace(path):
    """The allocations, frees and refusals of a trace `vram record` wrote
    (format 1 or 2), and its metadata text."""
    events, meta, cols = [], "", None
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f):
            line = line.rstrip("\r\n")
            if n == 0 and line.startswith("#"):
                meta = line[1:].strip()
                continue
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split(",")
            if cols is None:
                cols = {c: i for i, c in enumerate(parts)}
                continue
            if len(parts) != len(cols):
                break  # a last line cut short by a killed program
            op = parts[cols["op"]]
            if op not in ("a", "f", "o"):
                continue
            dev = int(parts[cols["device"]]) if "device" in cols else 0
            events.append((int(parts[cols["t_us"]]), op, int(parts[cols["id"]]),
                           int(parts[cols["size"]]), int(parts[cols["stream"]]), dev))
    order = sorted(range(len(events)), key=lambda k: (events[k][0], k))
    return [events[k] for k in order], meta


def finish_trace(path, events, marks, cap, pairs):
    """Place the marks, trim, write PATH; returns the summary figures."""
    placed = place_marks(events, marks) if marks else []
    kept, placed, how = trim(events, placed, cap)
    peak = peak_live(kept)
    pairs = list(pairs) + [("events", len(kept)), ("peak_live", peak), ("trimmed", how),
                           ("marks", len(placed))]
    write_trace(path, meta_line(pairs), kept, placed)
    return {"events": len(kept), "events_recorded": len(events), "peak_live_bytes": peak,
            "trimmed": how, "marks": len(placed)}


def clock_ok(events, start_us):
    """Whether the recorder's t_us is the wall clock the marks use (PyTorch
    converts its cycle counter to the epoch): the first event within an
    hour of when recording began (the model may take a while to build on
    the CPU first; a clock of another origin is off by years)."""
    return bool(events) and abs(events[0][0] - start_us) < 3600 * 1000000


# ---------------------------------------------------------------------------
# A child: one workload.

def child(a):
    w = {x["name"]: x for x in cw.WORKLOADS}[a.child]
    res = {"name": w["name"], "family": w["family"], "framework": w["framework"]}
    try:
        if w["framework"] == "jax":
            res.update(child_jax(w, a))
        else:
            res.update(child_torch(w, a))
        res.setdefault("status", "ok")
    except cw.Skip as e:
        res.update(status="skipped", reason=str(e))
    except Exception as e:  # reported in the summary; the parent goes on
        traceback.print_exc()
        res.update(status="failed", error="%s: %s" % (type(e).__name__, str(e)[:600]))
    with open(a.result, "w") as f:
        json.dump(res, f)
        f.write("\n")
    return 0


def child_torch(w, a):
    torch = cw.need("torch", "PyTorch")
    cuda = not a.cpu
    if cuda and not torch.cuda.is_available():
        raise cw.Skip("no CUDA device visible to PyTorch")
    torch.manual_seed(0)
    recording = cuda
    hist = torch.cuda.memory if cuda else None
    start = time.time_ns() // 1000

    def allocs_and_frees():
        st = torch.cuda.memory_stats()
        return st.get("allocation.all.allocated", 0) + st.get("allocation.all.freed", 0)

    def enough():
        # The caching allocator's own counts of allocations and frees since
        # the start: the events the history holds, without copying it.
        return recording and allocs_and_frees() - base[0] >= a.max_events

    base = [0]
    ctx = cw.Ctx(torch, tiny=a.cpu, cuda=cuda, enough=enough)
    if cuda:
        torch.cuda.set_device(0)
        torch.cuda.init()
        base[0] = allocs_and_frees()
        hist._record_memory_history(enabled="all", context=None, stacks="python",
                                    max_entries=max(4 * a.max_events, 1000000))
    t0 = time.time()
    try:
        info = w["fn"](ctx)
    except BaseException:
        if recording:  # the workload's own error is the one to report
            try:
                hist._record_memory_history(enabled=None)
            except Exception:
                pass
        raise
    if recording:
        ctx.sync()
        snap = hist._snapshot()
        hist._record_memory_history(enabled=None)
    res = {"info": info, "run_s": round(time.time() - t0, 2), "torch": torch.__version__}
    if not recording:
        res["status"] = "ok"
        res["note"] = "dry run on the CPU: nothing recorded"
        return res
    events, skipped, other = from_snapshot(snap)
    marks = ctx.marks if clock_ok(events, start) else []
    pairs = [("workload", w["name"]), ("family", w["family"]),
             ("recorder", "torch-memory-history")]
    pairs += sorted(info.items())
    pairs += [("torch", torch.__version__), ("gpu", torch.cuda.get_device_name(0)),
              ("torch_peak_allocated", torch.cuda.max_memory_allocated()),
              ("torch_peak_reserved", torch.cuda.max_memory_reserved()),
              ("skipped_frees", skipped), ("other_actions", other)]
    res.update(finish_trace(a.trace, events, marks, a.max_events, pairs))
    res["torch_peak_reserved"] = torch.cuda.max_memory_reserved()
    if not marks:
        res["note"] = "no step marks (the history's clock is not the wall clock)"
    return res


def child_jax(w, a):
    jax = cw.need("jax", "JAX")
    if not a.cpu:
        if os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR") != "cuda_async":
            raise cw.Skip("not under vram record with cuda_async")
        if not any(d.platform == "gpu" for d in jax.devices()):
            raise cw.Skip("JAX sees no GPU (jax-cuda plugin missing?)")
    ctx = cw.Ctx(None, tiny=a.cpu, cuda=not a.cpu)
    t0 = time.time()
    info = w["fn"](ctx)
    return {"info": info, "run_s": round(time.time() - t0, 2), "marks": ctx.marks,
            "jax": jax.__version__,
            "gpu": str(jax.devices()[0].device_kind) if not a.cpu else "cpu"}


# ---------------------------------------------------------------------------
# The parent: schedule the children, convert JAX's recordings, report.

class Run:
    def __init__(self, w, a, tmp):
        self.w, self.a = w, a
        self.name = w["name"]
        self.trace = os.path.join(a.out, self.name + ".trace.csv.gz")
        self.result = os.path.join(tmp, self.name + ".json")
        self.raw = os.path.join(tmp, self.name + ".raw.csv")
        self.log = os.path.join(a.out, "logs", self.name + ".log")
        self.proc = None
        self.t0 = None
        self.deadline = None
        self.summary = None

    def command(self):
        me = [sys.executable, os.path.abspath(__file__), "--child", self.name,
              "--trace", self.trace, "--result", self.result,
              "--max-events", str(self.a.max_events)] + (["--cpu"] if self.a.cpu else [])
        if self.w["framework"] == "jax" and not self.a.cpu:
            return [self.a.vram, "record", "--no-sites", "-o", self.raw, "--"] + me
        return me

    def start(self, now, end):
        for p in (self.trace, self.result, self.raw):
            if os.path.exists(p):
                os.unlink(p)
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "4")
        env["PYTHONUNBUFFERED"] = "1"
        if self.w["framework"] == "jax":
            if self.a.cpu:
                env.setdefault("JAX_PLATFORMS", "cpu")
            else:
                env["XLA_PYTHON_CLIENT_ALLOCATOR"] = "cuda_async"
                env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        self.logf = open(self.log, "w")
        self.logf.write("$ %s\n" % " ".join(self.command()))
        self.logf.flush()
        self.proc = subprocess.Popen(self.command(), stdout=self.logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.t0 = now
        self.deadline = min(now + self.a.timeout, end)

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def finish(self, now, timed_out):
        self.logf.close()
        s = {"name": self.name, "family": self.w["family"], "framework": self.w["framework"],
             "wall_s": round(now - self.t0, 1)}
        r = None
        try:
            with open(self.result) as f:
                r = json.load(f)
        except (OSError, ValueError):
            pass
        if timed_out:
            s.update(status="failed", error="ran past %d s (killed)" % round(now - self.t0))
        elif r is None:
            s.update(status="failed", error="the child exited %s without a result (see %s)"
                     % (self.proc.returncode, os.path.relpath(self.log, self.a.out)))
        else:
            s.update({k: v for k, v in r.items() if k not in ("marks",)})
            if (s.get("status") == "ok" and self.w["framework"] == "jax" and not self.a.cpu):
                self.convert_jax(s, r)
        if s.get("status") == "ok" and os.path.exists(self.trace):
            s["file"] = os.path.basename(self.trace)
            s["bytes"] = os.path.getsize(self.trace)
        self.summary = s

    def convert_jax(self, s, r):
        try:
            events, vmeta = read_vram_trace(self.raw)
        except (OSError, ValueError, KeyError) as e:
            s.update(status="failed", error="vram record's trace unreadable: %s" % e)
            return
        if not events:
            s.update(status="failed", error="vram record recorded nothing (exit %s)"
                     % self.proc.returncode)
            return
        marks = [tuple(m) for m in r.get("marks") or []]
        info = r.get("info") or {}
        pairs = [("workload", self.name), ("family", self.w["family"]),
                 ("recorder", "vram-record-cuda_async")] + sorted(info.items())
        pairs += [("gpu", r.get("gpu")), ("vram_record", vmeta.replace(" ", ";"))]
        s.update(finish_trace(self.trace, events, marks, self.a.max_events, pairs))


def schedule(a, runs):
    """Run RUNS, at most a.jobs at once and a.gpu_gb of expected memory."""
    t_start = time.monotonic()
    end = t_start + a.budget
    pending, running = list(runs), []
    while pending or running:
        now = time.monotonic()
        for r in list(running):
            timed_out = r.proc.poll() is None and now >= r.deadline
            if timed_out:
                r.kill()
            if r.proc.poll() is not None:
                running.remove(r)
                r.finish(time.monotonic(), timed_out)
                report(r.summary)
        while pending and len(running) < a.jobs:
            if end - now < 15:
                for r in pending:
                    r.summary = {"name": r.name, "family": r.w["family"],
                                 "framework": r.w["framework"], "status": "skipped",
                                 "reason": "not started: past the %d s budget" % a.budget}
                    report(r.summary)
                pending = []
                break
            used = sum(r.w["est_gb"] for r in running)
            fit = [r for r in pending if used + r.w["est_gb"] <= a.gpu_gb]
            if not fit and running:
                break
            r = (fit or pending)[0]
            pending.remove(r)
            r.start(now, end)
            running.append(r)
        time.sleep(0.2)


def report(s):
    what = s.get("status")
    if what == "ok":
        what = "ok: %s events, peak %.1f MiB" % (s.get("events", "-"),
                                                 (s.get("peak_live_bytes") or 0) / 2**20)
    elif what == "skipped":
        what = "skipped: " + str(s.get("reason"))
    else:
        what = "FAILED: " + str(s.get("error"))
    print("corpus: %-20s %s (%ss)" % (s["name"], what, s.get("wall_s", 0)), flush=True)


def table(summaries, a):
    lines = ["%-20s %-15s %-8s %8s %10s %7s %7s  %s" % (
        "trace", "family", "status", "events", "peak MiB", "wall s", "KiB", "note")]
    for s in summaries:
        note = s.get("reason") or s.get("error") or s.get("note") or ""
        if s.get("trimmed") not in (None, "no"):
            note = ("trimmed %s " % s["trimmed"]) + note
        lines.append("%-20s %-15s %-8s %8s %10s %7s %7s  %s" % (
            s["name"], s["family"], s["status"],
            s.get("events", "-"),
            "%.1f" % (s["peak_live_bytes"] / 2**20) if s.get("peak_live_bytes") else "-",
            s.get("wall_s", "-"), "%.0f" % (s["bytes"] / 1024) if s.get("bytes") else "-",
            note[:110]))
    ok = [s for s in summaries if s["status"] == "ok" and (a.cpu or s.get("file"))]
    fams = sorted({s["family"] for s in ok})
    failed = [s["name"] for s in summaries if s["status"] == "failed"]
    skipped = [s["name"] for s in summaries if s["status"] == "skipped"]
    lines.append("corpus: %d %s from %d families (%s); %d skipped, %d failed%s" % (
        len(ok), "workloads ran" if a.cpu else "traces", len(fams), ", ".join(fams),
        len(skipped), len(failed), (": " + ", ".join(failed)) if failed else ""))
    return "\n".join(lines)


def parent(a):
    names = [w["name"] for w in cw.WORKLOADS]
    chosen = cw.WORKLOADS
    if a.only:
        want = [x for x in a.only.split(",") if x]
        bad = [x for x in want if x not in names and
               x not in {w["family"] for w in cw.WORKLOADS}]
        if bad:
            sys.stderr.write("record_corpus: unknown workload or family %s (--list names them)\n"
                             % ", ".join(bad))
            return 2
        chosen = [w for w in cw.WORKLOADS if w["name"] in want or w["family"] in want]
    os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="vram-corpus-")
    runs = []
    try:
        for w in chosen:
            r = Run(w, a, tmp)
            if w["framework"] == "jax" and not a.cpu and not (a.vram and os.access(a.vram, os.X_OK)):
                r.summary = {"name": r.name, "family": w["family"], "framework": "jax",
                             "status": "skipped",
                             "reason": "JAX keeps no allocation history: needs --vram "
                                       "(vram record), none given or not executable"}
                report(r.summary)
            runs.append(r)
        t0 = time.time()
        schedule(a, [r for r in runs if r.summary is None])
        wall = time.time() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summaries = [r.summary for r in runs]
    with open(os.path.join(a.out, "summary.jsonl"), "w") as f:
        for s in summaries:
            f.write(json.dumps(s, sort_keys=True) + "\n")
    text = table(summaries, a)
    with open(os.path.join(a.out, "table.txt"), "w") as f:
        f.write(text + "\n")
    print(text)
    print("corpus: %.0f s wall, %d at a time, traces and summary.jsonl in %s"
          % (wall, a.jobs, a.out), flush=True)
    return 1 if any(s["status"] == "failed" for s in summaries) else 0


# ---------------------------------------------------------------------------
# --list, --readme, --self-test.

def listing(readme):
    if readme:
        print("| trace | family | recorder | what ran |")
        print("| --- | --- | --- | --- |")
        for w in cw.WORKLOADS:
            print("| %s | %s | %s | %s |" % (
                w["name"], w["family"],
                "vram record" if w["framework"] == "jax" else "PyTorch history", w["what"]))
        return 0
    for w in cw.WORKLOADS:
        print("%-20s %-15s %-6s %3d GiB  %s" % (w["name"], w["family"], w["framework"],
                                                w["est_gb"], w["what"]))
    fams = {w["family"] for w in cw.WORKLOADS}
    print("%d workloads, %d families" % (len(cw.WORKLOADS), len(fams)))
    return 0


def self_test(a):
    """The conversion path on made-up histories: PyTorch's (with actions the
    importer ignores or does not know, a free from before the history, an
    address reused) and vram record's; trimming at marks; the written
    trace read back, and by `vram replay` with --vram."""
    fails = []

    def check(what, ok):
        print("self-test: %-58s %s" % (what, "ok" if ok else "FAILED"))
        if not ok:
            fails.append(what)

    t = 1796070730000000
    entries = [{"action": "free_completed", "addr": 7, "size": 512, "stream": 0, "time_us": t}]
    marks = []
    addr = 4096
    for step in range(10):
        marks.append((t + step * 1000 + 1, "step %d" % (step + 1)))
        base = t + step * 1000 + 10
        entries.append({"action": "segment_alloc", "addr": 0, "size": 2 << 20, "stream": 0,
                        "time_us": base})
        for k in range(5):
            entries.append({"action": "alloc", "addr": addr + k * 1024, "size": 512 * (k + 1),
                            "stream": 0, "time_us": base + 1 + k})
        entries.append({"action": "user_defined", "time_us": base + 6})
        for k in range(5):
            entries.append({"action": "free_requested", "addr": addr + k * 1024,
                            "size": 512 * (k + 1), "stream": 0, "time_us": base + 7 + k})
            entries.append({"action": "free_completed", "addr": addr + k * 1024,
                            "size": 512 * (k + 1), "stream": 0, "time_us": base + 7 + k})
    entries.append({"action": "alloc", "addr": addr, "size": 1024, "stream": 3,
                    "time_us": t + 20000})
    events, skipped, other = from_snapshot({"device_traces": [entries]})
    check("importer: 101 events, 1 free before the history, 10 unknown",
          len(events) == 101 and skipped == 1 and other == 10)
    check("clock matches the marks", clock_ok(events, t))
    d = tempfile.mkdtemp(prefix="vram-corpus-test-")
    try:
        p = os.path.join(d, "x.trace.csv.gz")
        s = finish_trace(p, events, marks, 1000, [("workload", "x y"), ("shape", [1, 2])])
        check("untrimmed: all events, 10 marks", s["events"] == 101 and s["marks"] == 10
              and s["trimmed"] == "no" and s["peak_live_bytes"] == 512 * 15)
        with gzip.open(p, "rt") as f:
            lines = f.read().splitlines()
        check("metadata line: no spaces inside values", lines[0] ==
              "# workload=x_y shape=1;2 events=101 peak_live=7680 trimmed=no marks=10")
        check("header with label; a mark before step 1's events",
              lines[1] == "t_us,op,id,size,stream,device,label"
              and lines[2].endswith(",m,0,0,0,0,step 1") and ",a,0,512,0,0," in lines[3])
        check("the allocation on stream 3 kept, live at the end",
              lines[-1].endswith(",a,50,1024,3,0,"))
        s = finish_trace(p, events, marks, 45, [("workload", "x")])
        check("trimmed at a step mark: 40 of 101 events, 4 marks",
              s["events"] == 40 and s["marks"] == 4 and s["trimmed"] == "40/101")
        s = finish_trace(p, events, [], 45, [("workload", "x")])
        check("no marks: cut at the cap", s["events"] == 45 and s["marks"] == 0)
        with gzip.open(p, "rt") as f:
            check("no marks: no label column", f.read().splitlines()[1] ==
                  "t_us,op,id,size,stream,device")
        raw = os.path.join(d, "raw.csv")
        with open(raw, "w") as f:
            f.write("# workload=vram-preload pid=1 version=0.1.0\n#@format 2\n"
                    "t_us,op,id,size,stream,device,label,site\n#@frame 1,py,a.py,1,f\n"
                    "#@site 1,1\n%d,a,0,1000,0,0,,1\n%d,m,0,0,0,0,x,\n%d,a,1,24,0,0,,1\n"
                    "%d,f,0,1000,0,0,,\n%d,a,2" % (t, t + 1, t + 2, t + 3, t + 4))
        ev, vmeta = read_vram_trace(raw)
        check("vram record's trace read: 3 events, a cut last line dropped",
              len(ev) == 3 and vmeta.startswith("workload=vram-preload") and ev[2][1] == "f")
        s = finish_trace(p, ev, [(t + 2, "step 1")], 100, [("workload", "j")])
        check("its trace rewritten with a mark", s["events"] == 3 and s["marks"] == 1
              and s["peak_live_bytes"] == 1024)
        if a.vram:
            full = os.path.join(d, "full.trace.csv.gz")
            finish_trace(full, events, marks, 1000, [("workload", "x")])
            for path in (full, p):
                r = subprocess.run([a.vram, "replay", "--json", path], capture_output=True,
                                   text=True, timeout=60)
                check("vram replay reads %s" % os.path.basename(path),
                      r.returncode == 0 and '"peak' in r.stdout)
                if r.returncode != 0:
                    print(r.stderr.strip()[-400:])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("self-test: %d passed, %d failed" % (13 + (2 if a.vram else 0) - len(fails),
                                                len(fails)))
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the directory for the traces, summary.jsonl and logs")
    ap.add_argument("--vram", help="the vram command, for the JAX workloads (vram record)")
    ap.add_argument("--only", help="workloads or families to run, comma-separated")
    ap.add_argument("--jobs", type=int, default=4, help="children at once (default 4)")
    ap.add_argument("--gpu-gb", type=float, default=64.0,
                    help="expected GPU memory of the children at once (default 64 GiB)")
    ap.add_argument("--budget", type=float, default=330.0,
                    help="seconds for the whole run; none starts after (default 330)")
    ap.add_argument("--timeout", type=float, default=150.0,
                    help="seconds for one workload (default 150)")
    ap.add_argument("--max-events", type=int, default=40000,
                    help="allocations and frees a trace keeps at most (default 40000)")
    ap.add_argument("--cpu", action="store_true",
                    help="dry run: tiny workloads on the CPU, nothing recorded")
    ap.add_argument("--list", action="store_true", help="list the workloads")
    ap.add_argument("--readme", action="store_true",
                    help="the workloads as data/traces/README.md's table")
    ap.add_argument("--self-test", action="store_true",
                    help="check the conversion on made-up histories")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.list or a.readme:
        return listing(a.readme)
    if a.vram:
        a.vram = os.path.abspath(a.vram)
    if a.self_test:
        return self_test(a)
    if a.child:
        if a.child not in {w["name"] for w in cw.WORKLOADS} or not a.result:
            ap.error("--child needs a known workload and --result")
        return child(a)
    if not a.out:
        ap.error("--out DIR is required")
    if a.jobs < 1 or a.max_events < 100 or a.budget <= 0 or a.timeout <= 0:
        ap.error("--jobs >= 1, --max-events >= 100, --budget and --timeout > 0")
    a.out = os.path.abspath(a.out)
    return parent(a)


if __name__ == "__main__":
    sys.exit(main())
