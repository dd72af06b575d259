#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_api_checks.py -- PyTorch's own memory tools over vram, and what
`vram record` finds in real training loops (tests/gpu/run.sh, section torch).

    python3 bench/gpu/torch_api_checks.py --vram build-gpu/bin/vram \\
        --lib build-gpu/lib/libvram.so --work DIR [--budget SECONDS]
    python3 bench/gpu/torch_api_checks.py ... --framework fake   # the CPU dry run

Three parts, each a group of checks (true, false, or null: not measured):

  api       a child plugs vram in with vram.torch.use() and nothing else
            (no VRAM_STRATEGY): the default strategy is expandable and a
            1 MiB tensor reserves less than 64 MiB, not the card; a training
            loop (an MLP, Adam, 20 steps) resets the peak each step and logs
            torch.cuda.max_memory_allocated(), equal to vram.stats()'s
            peak_bytes_in_use at every step; memory_allocated and
            memory_reserved equal bytes_in_use and bytes_reserved; the
            memory_stats keys tools read are there; memory_summary works;
            reset_peak_memory_stats brings the peak to the current bytes;
            _record_memory_history raises vram's VramError.
  loops     real training loops recorded with `vram record`, each with and
            without vram.mark per step: a loop keeping x * 2 of a 4 MiB
            tensor (30 steps), an MLP with Adam (40 steps, clean),
            attention over sequences of varying length (40 steps, clean), a
            helper making buffers for a line that drops them and one that
            keeps them, and losses kept with their graphs. Iterations from
            the marks equal the steps, iterations found without marks are
            within one of them; leaks at their planted rate (5%), none in
            the clean loops; the top leak site is the line that keeps the
            memory (the helper loop); the holder names the container.
  snapshot  the recording of that loop with --torch-snapshot opens
            in this PyTorch's memory_viz: its command line (stats, trace,
            trace_plot, segment_plot) and memory() / segments() with the
            loop's file in the frames.

--framework fake runs the loops part on tests/fakecuda's driver
(LD_LIBRARY_PATH) with CuPy-like buffers and skips the PyTorch-only loops;
the api and snapshot parts then run against the PyTorch importable here
when it has no CUDA (the memory API through the simulated device; the
snapshot with that PyTorch's memory_viz), else report null.

Prints one JSON object {"checks": {name: bool|null}, "runs": [...]}. Exit 0
(the table judges), or with --strict 1 when a check is false; 2 on bad
usage. CTest gpu_torch_dryrun runs the dry run with --strict.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PYDIR = os.path.join(ROOT, "python")
MiB = 1 << 20

# ---------------------------------------------------------------------------
# api: PyTorch's memory functions under vram.torch.use()
# ---------------------------------------------------------------------------

API_CHILD = r"""
import json, sys
import torch
import vram, vram.torch

res = {"torch": torch.__version__}
cuda = torch.cuda.is_available()
res["cuda"] = cuda
if cuda:
    vram.torch.use()            # no strategy, no VRAM_STRATEGY: vram's default
    dev = "cuda"
else:
    # The dry run: PyTorch without CUDA; the plug-in's device is the
    # simulator, driven through vram_torch_malloc by hand.
    import ctypes
    vram.torch.install_memory_api(torch)
    vram.use_torch_plugin(True)
    torch.cuda.is_initialized = lambda: True
    lib = vram.library()
    lib.vram_torch_malloc.restype = ctypes.c_void_p
    lib.vram_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.vram_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                    ctypes.c_void_p]
    dev = None

if cuda:
    t = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    s = vram.stats(0)
else:
    p = lib.vram_torch_malloc(1 << 20, 0, None)
    s = vram.stats(0)
res["first_tensor_reserved"] = s["bytes_reserved"]
res["first_tensor_limit"] = s["bytes_limit"]

peaks = []
if cuda:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(20):
        torch.cuda.reset_peak_memory_stats()
        x = torch.randn(64 + 32 * (step % 4), 1024, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        v = vram.stats(0)
        peaks.append({"torch_peak": torch.cuda.max_memory_allocated(),
                      "vram_peak": v["peak_bytes_in_use"],
                      "torch_allocated": torch.cuda.memory_allocated(),
                      "vram_in_use": v["bytes_in_use"],
                      "torch_reserved": torch.cuda.memory_reserved(),
                      "vram_reserved": v["bytes_reserved"],
                      "torch_max_reserved": torch.cuda.max_memory_reserved(),
                      "vram_peak_reserved": v["peak_bytes_reserved"]})
else:
    held = []
    for step in range(5):
        torch.cuda.reset_peak_memory_stats(0)
        tmp = lib.vram_torch_malloc((8 + step) << 20, 0, None)
        held.append(lib.vram_torch_malloc(1 << 20, 0, None))
        lib.vram_torch_free(tmp, 0, 0, None)
        v = vram.stats(0)
        peaks.append({"torch_peak": torch.cuda.max_memory_allocated(0),
                      "vram_peak": v["peak_bytes_in_use"],
                      "torch_allocated": torch.cuda.memory_allocated(0),
                      "vram_in_use": v["bytes_in_use"],
                      "torch_reserved": torch.cuda.memory_reserved(0),
                      "vram_reserved": v["bytes_reserved"],
                      "torch_max_reserved": torch.cuda.max_memory_reserved(0),
                      "vram_peak_reserved": v["peak_bytes_reserved"]})
res["steps"] = peaks
stats = torch.cuda.memory_stats(0)
keys = ["allocated_bytes.all.current", "allocated_bytes.all.peak",
        "reserved_bytes.all.current", "reserved_bytes.all.peak",
        "active_bytes.all.current", "active_bytes.all.peak",
        "requested_bytes.all.current", "num_alloc_retries", "num_ooms",
        "allocation.all.current", "segment.all.current", "inactive_split_bytes.all.current"]
res["missing_keys"] = [k for k in keys if k not in stats]
summary = torch.cuda.memory_summary(0)
res["summary_ok"] = "Allocated memory" in summary and "GPU reserved memory" in summary
torch.cuda.reset_peak_memory_stats(0)
res["reset_peak_ok"] = torch.cuda.max_memory_allocated(0) == torch.cuda.memory_allocated(0)
try:
    torch.cuda.memory._record_memory_history()
    res["history_says"] = None
except vram.VramError as e:
    res["history_says"] = str(e)
except Exception as e:
    res["history_says"] = "%s: %s" % (type(e).__name__, e)
print("RESULT " + json.dumps(res))
"""


def run_api(args, env, out):
    checks = out["checks"]
    env = dict(env, VRAM_LIBRARY=args.lib, PYTHONPATH=PYDIR)
    for k in ("VRAM_STRATEGY", "VRAM_MEMORY_LIMIT", "PYTORCH_CUDA_ALLOC_CONF"):
        env.pop(k, None)
    if args.framework == "fake":
        env["VRAM_BACKEND"] = "sim"
    py = torch_python()
    names = ("api: the default strategy reserves < 64 MiB for a 1 MiB tensor",
             "api: max_memory_allocated == vram's peak at every step",
             "api: memory_allocated, memory_reserved == vram's",
             "api: memory_stats keys present", "api: memory_summary works",
             "api: reset_peak_memory_stats", "api: _record_memory_history says vram record")
    for n in names:
        checks[n] = None
    if py is None:
        out["api"] = {"error": "no python3 imports torch"}
        return
    run = subprocess.run([py, "-c", API_CHILD], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    res = None
    for line in run.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if res is None:
        out["api"] = {"error": "child exit %d" % run.returncode,
                      "stderr": run.stderr.strip().splitlines()[-5:]}
        return
    out["api"] = res
    if res["cuda"]:
        checks[names[0]] = res["first_tensor_reserved"] < 64 * MiB
    steps = res["steps"]
    checks[names[1]] = bool(steps) and all(s["torch_peak"] == s["vram_peak"] and s["torch_peak"] > 0
                                           for s in steps)
    checks[names[2]] = bool(steps) and all(
        s["torch_allocated"] == s["vram_in_use"] and s["torch_reserved"] == s["vram_reserved"]
        and s["torch_max_reserved"] == s["vram_peak_reserved"] for s in steps)
    checks[names[3]] = not res["missing_keys"]
    checks[names[4]] = res["summary_ok"]
    checks[names[5]] = res["reset_peak_ok"]
    checks[names[6]] = bool(res["history_says"]) and "vram record --torch-snapshot" in \
        res["history_says"]


# ---------------------------------------------------------------------------
# loops: real training loops recorded, with and without marks
# ---------------------------------------------------------------------------

PRELUDE = {
    "torch": r"""
import sys, torch
MARKS = "--marks" in sys.argv
if MARKS:
    import vram
def mark(step):
    if MARKS:
        vram.mark("step %d" % step)
def new(nbytes):
    return torch.empty(nbytes, dtype=torch.uint8, device="cuda")
def sync():
    torch.cuda.synchronize()
""",
    # The fake driver's arrays come from a module of "site-packages", as
    # CuPy's would: its frames are a library's, not the loop's.
    "fake": r"""
import os, sys
MARKS = "--marks" in sys.argv
if MARKS:
    import vram
sys.path.insert(0, os.environ["FAKE_SITE"])
from fakecupy import new, sync
def mark(step):
    if MARKS:
        vram.mark("step %d" % step)
""",
}

FAKECUPY = r"""
import ctypes
ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
cu = ctypes.CDLL(None)  # the global scope: the preloaded hook comes first
cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cu.cuMemFree_v2.argtypes = [ctypes.c_uint64]
cu.cuInit(0)
_dev, _ctx = ctypes.c_int(0), ctypes.c_void_p()
cu.cuDeviceGet(ctypes.byref(_dev), 0)
cu.cuDevicePrimaryCtxRetain(ctypes.byref(_ctx), _dev)
cu.cuCtxPushCurrent_v2(_ctx)


class Buffer:
    def __init__(self, size):
        p = ctypes.c_uint64()
        if cu.cuMemAlloc_v2(ctypes.byref(p), size) != 0:
            raise MemoryError(size)
        self.ptr, self.size = p.value, size

    def __del__(self):
        cu.cuMemFree_v2(self.ptr)

    def __mul__(self, k):
        return Buffer(self.size)

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (self.size,), "typestr": "|u1",
                "version": 3}


def new(nbytes):
    return Buffer(nbytes)


def sync():
    pass
"""

# name: (frameworks, steps, planted bytes a step (0: none), keeper line tag, holder, body).
# A line ending in "# KEEP" is the line that keeps the leak.
LOOPS = {
    "kept_product": (("torch", "fake"), 30, 4 * MiB, "KEEP", "list `history`", r"""
history = []
def main():
    for step in range(30):
        mark(step)
        x = new(4 << 20)
        history.append(x * 2)  # KEEP
    sync()
main()
"""),
    "mlp_adam": (("torch",), 40, 0, None, None, r"""
def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 512)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(40):
        mark(step)
        x = torch.randn(128, 512, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync()
main()
"""),
    "attention_varlen": (("torch",), 40, 0, None, None, r"""
import random
def main():
    torch.manual_seed(0)
    rng = random.Random(3)
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True).cuda()
    opt = torch.optim.SGD(layer.parameters(), lr=1e-3)
    for step in range(40):
        mark(step)
        n = rng.randrange(64, 257)
        x = torch.randn(8, n, 256, device="cuda")
        loss = layer(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync()
main()
"""),
    "varlen_fake": (("fake",), 40, 0, None, None, r"""
import random
def main():
    rng = random.Random(3)
    weights = new(32 << 20)
    for step in range(40):
        mark(step)
        n = rng.randrange(64, 257)
        acts = [new(n * 4096) for _ in range(4)]
        grads = [new(a.size) for a in acts]
        del acts, grads
    sync()
main()
"""),
    "helper": (("torch", "fake"), 30, MiB, "KEEP", "list `cache`", r"""
cache = []
def make_buffer(nbytes):
    return new(nbytes)
def main():
    weights = new(16 << 20)
    for step in range(30):
        mark(step)
        tmp = make_buffer(1 << 20)
        cache.append(make_buffer(1 << 20))  # KEEP
        del tmp
    sync()
main()
"""),
    "graph_kept": (("torch",), 30, None, None, "losses", r"""
def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 512)).cuda()
    losses = []
    for step in range(30):
        mark(step)
        x = torch.randn(64, 512, device="cuda")
        loss = model(x).pow(2).mean()
        losses.append(loss)  # KEEP: with its graph
    sync()
main()
"""),
}


def keep_line(body, tag):
    for n, line in enumerate(body.splitlines(), 1):
        if line.rstrip().endswith("# " + tag):
            return n
    return None


def run_loops(args, env, out):
    checks, runs = out["checks"], out["runs"]
    fw = args.framework
    deadline = time.monotonic() + args.budget
    py = sys.executable if fw == "fake" else torch_python(cuda=True)
    site = os.path.join(args.work, "site-packages")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(site, "fakecupy.py"), "w") as f:
        f.write(FAKECUPY)
    env = dict(env, FAKE_SITE=site)
    for name, (fws, steps, planted, tag, holder, body) in LOOPS.items():
        if fw not in fws:
            continue
        script = os.path.join(args.work, "loop_%s.py" % name)
        source = PRELUDE[fw] + body
        with open(script, "w") as f:
            f.write(source)
        line = keep_line(source, tag) if tag else None
        for marks in (False, True):
            key = "%s%s" % (name, " (marks)" if marks else "")
            r = {"loop": key, "steps": steps}
            runs.append(r)
            done = "loops: %s: recorded and analyzed" % key
            checks[done] = False  # until it is
            if py is None or time.monotonic() > deadline:
                r["error"] = "no python3 with CUDA PyTorch" if py is None else "past the budget"
                checks[done] = None
                continue
            trace = os.path.join(args.work, "loop_%s%s.trace.csv.gz" % (name, "_marks" if marks else ""))
            cmd = [args.vram, "record", "-o", trace]
            if name == "kept_product" and not marks:
                cmd += ["--torch-snapshot", os.path.join(args.work, "kept_product.pickle")]
            cmd += ["--", py, script] + (["--marks"] if marks else [])
            run = subprocess.run(cmd, env=dict(env, PYTHONPATH=PYDIR), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
            r["record_exit"] = run.returncode
            if run.returncode != 0:
                r["error"] = run.stderr.strip().splitlines()[-3:]
                continue
            a = subprocess.run([args.vram, "analyze", "--json", trace], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True)
            try:
                j = json.loads(a.stdout)
            except ValueError:
                r["error"] = "analyze: " + a.stderr.strip()
                continue
            checks[done] = True
            r.update(iterations=j["iterations"], iterations_from=j["iterations_from"],
                     period_events=j.get("period_events"), leak=j["leak"],
                     rate=j.get("leak_bytes_per_iteration"))
            top = (j.get("leak_sites") or [None])[0]
            if top:
                r.update(top_headline=top.get("headline"), held_by=top.get("held_by"))
            if marks:
                r["iterations_ok"] = j["iterations_from"] == "marks" and j["iterations"] == steps
            else:
                r["iterations_ok"] = j["iterations_from"] in ("period", "floor") and \
                    abs(j["iterations"] - steps) <= 1
            checks["loops: %s: iterations agree with the steps" % key] = r["iterations_ok"]
            if planted == 0:
                checks["loops: %s: no leak" % key] = not j["leak"]
            elif planted is not None:
                checks["loops: %s: leak at the planted rate (5%%)" % key] = bool(
                    j["leak"] and abs((j.get("leak_bytes_per_iteration") or 0) - planted)
                    <= 0.05 * planted)
            else:
                checks["loops: %s: leak found" % key] = bool(j["leak"])
            if line is not None:
                want = "loop_%s.py:%d" % (name, line)
                checks["loops: %s: the top suspect is the line that keeps it" % key] = bool(
                    top and (top.get("headline") or "").startswith(want))
            if holder is not None:
                checks["loops: %s: held by %s" % (key, holder)] = bool(
                    top and holder in (top.get("held_by") or ""))


# ---------------------------------------------------------------------------
# snapshot: the recording in this PyTorch's memory_viz
# ---------------------------------------------------------------------------

SNAP_CHILD = r"""
import json, pickle, subprocess, sys
from torch.cuda import _memory_viz as viz
path, work = sys.argv[1], sys.argv[2]
res = {}
snap = pickle.load(open(path, "rb"))
two = hasattr(viz, "trace_plot")  # PyTorch 2: the dict; 1.13: its segments
data = snap if two else snap["segments"]
flat = lambda lines: lines
mem = viz.memory(data, format_flamegraph=flat)
res["memory_names_the_loop"] = "loop_kept_product.py" in mem
res["segments"] = viz.segments(data, format_flamegraph=flat).count("active_allocated")
res["cli"] = {}
if two:
    for cmd in (["stats", path], ["trace", path], ["trace_plot", path, "-o", work + "/trace.html"],
                ["segment_plot", path, "-o", work + "/segments.html"]):
        run = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz"] + cmd,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        res["cli"][cmd[0]] = run.returncode == 0 and (run.stdout.strip() != "" or cmd[0].endswith("plot"))
        if run.returncode != 0:
            res.setdefault("cli_errors", {})[cmd[0]] = run.stderr.strip().splitlines()[-2:]
else:
    st = viz.stats(data)
    res["cli"]["stats"] = st["segments"] == len(snap["segments"])
print("RESULT " + json.dumps(res))
"""


def run_snapshot(args, env, out):
    checks = out["checks"]
    names = ("snapshot: memory_viz memory() names the loop's file",
             "snapshot: memory_viz's command line opens it (stats, trace, trace_plot, segment_plot)")
    for n in names:
        checks[n] = None
    path = os.path.join(args.work, "kept_product.pickle")
    if not os.path.exists(path):
        # The dry run without the loop recorded by PyTorch: a trace of the
        # fake loop, written as a snapshot by vram analyze.
        trace = os.path.join(args.work, "loop_kept_product.trace.csv.gz")
        if not os.path.exists(trace):
            return
        subprocess.run([args.vram, "analyze", "--torch-snapshot", path, trace],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    py = torch_python()
    if py is None:
        return
    run = subprocess.run([py, "-c", SNAP_CHILD, path, args.work], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    res = None
    for line in run.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    out["snapshot"] = res or {"error": run.stderr.strip().splitlines()[-3:]}
    if res is None:
        checks[names[0]] = False
        return
    checks[names[0]] = res["memory_names_the_loop"] and res["segments"] > 0
    checks[names[1]] = bool(res["cli"]) and all(res["cli"].values())


def torch_python(cuda=False):
    """The first interpreter that imports torch (with CUDA when CUDA)."""
    code = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)" if cuda \
        else "import torch"
    for py in [sys.executable, "/usr/bin/python3"]:
        if os.path.exists(py) and subprocess.run([py, "-c", code], stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL).returncode == 0:
            return py
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vram", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--budget", type=float, default=200)
    ap.add_argument("--framework", choices=("torch", "fake"), default="torch")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a check is false (the CTest dry run)")
    args = ap.parse_args()
    args.vram = os.path.abspath(args.vram)
    args.lib = os.path.abspath(args.lib)
    os.makedirs(args.work, exist_ok=True)
    out = {"check": "torch", "framework": args.framework, "checks": {}, "runs": []}
    env = dict(os.environ)
    try:
        run_api(args, env, out)
        run_loops(args, env, out)
        run_snapshot(args, env, out)
    except Exception as e:  # the table shows what could not be measured
        out["error"] = "%s: %s" % (type(e).__name__, e)
    print(json.dumps(out))
    if args.strict and (out.get("error") or any(v is False for v in out["checks"].values())):
        for name, v in sorted(out["checks"].items()):
            if v is False:
                print("MISS %s" % name, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
