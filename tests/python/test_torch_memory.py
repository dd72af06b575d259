# SPDX-License-Identifier: MIT
"""test_torch_memory.py -- PyTorch's own memory tools over vram.

- vram.torch.install_memory_api (what vram.torch.use() does): the real
  torch.cuda functions of the PyTorch importable here (Debian's CPU-only
  1.13, usually only by /usr/bin/python3, run as a child) answer with the
  plug-in's figures on the simulated device: memory_allocated,
  max_memory_allocated, memory_reserved, max_memory_reserved, memory_stats
  (the keys loggers read), memory_summary, reset_peak_memory_stats,
  reset_accumulated_memory_stats; each equal to vram.stats(); and the
  memory-history calls say how to get a snapshot instead. Skipped where no
  interpreter imports torch.
- `vram analyze --torch-snapshot`: the pickle loads as plain data, holds
  every event and the live set, opens in the memory_viz of that PyTorch
  (segments, memory, compare, stats; flamegraph.pl is not fetched), and
  `python -m vram.import_torch` reads it back into the same trace.
"""

import gzip
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PYDIR = os.path.join(ROOT, "python")
LOOPS = os.path.join(ROOT, "tests", "data", "loops")
MiB = 1 << 20


def run_with_torch(code, env=None, args=(), timeout=300):
    """Run CODE (with ARGS) by the first interpreter that imports torch;
    None when there is none. Returns the CompletedProcess."""
    full = dict(os.environ, PYTHONPATH=PYDIR, VRAM_BACKEND="sim", **(env or {}))
    for python in [sys.executable] + [p for p in ("/usr/bin/python3",) if os.path.exists(p)]:
        probe = subprocess.run([python, "-c", "import torch"], env=full,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode == 0:
            return subprocess.run([python, "-c", code] + list(args), env=full,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True,
                                  timeout=timeout)
    return None


MEMORY_API = r"""
import ctypes, sys, warnings
import torch
from torch.cuda import memory_allocated   # bound before vram is installed
import vram, vram.torch

vram.torch.install_memory_api(torch)
vram.use_torch_plugin(True)
# A CPU build never initializes CUDA; here the plug-in's device is the
# simulator, which the test drives by hand.
torch.cuda.is_initialized = lambda: True
lib = vram.library()
lib.vram_torch_malloc.restype = ctypes.c_void_p
lib.vram_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
lib.vram_torch_free.restype = None
lib.vram_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
MiB = 1 << 20

def same_as_vram():
    s = vram.stats(0)
    assert torch.cuda.memory_allocated(0) == s["bytes_in_use"], (torch.cuda.memory_allocated(0), s)
    assert torch.cuda.max_memory_allocated(0) == s["peak_bytes_in_use"]
    assert torch.cuda.memory_reserved(0) == s["bytes_reserved"]
    assert torch.cuda.max_memory_reserved(0) == s["peak_bytes_reserved"]
    return s

ptrs = [lib.vram_torch_malloc(4 * MiB, 0, None) for _ in range(3)]
assert all(ptrs)
assert memory_allocated(0) == 12 * MiB, memory_allocated(0)
assert torch.cuda.memory.memory_allocated(0) == 12 * MiB
lib.vram_torch_free(ptrs[0], 4 * MiB, 0, None)
s = same_as_vram()
assert torch.cuda.memory_allocated(0) == 8 * MiB
assert torch.cuda.max_memory_allocated(0) == 12 * MiB
assert s["bytes_reserved"] >= 8 * MiB

stats = torch.cuda.memory_stats(0)
for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
            "allocated_bytes.all.allocated", "allocated_bytes.all.freed",
            "reserved_bytes.all.current", "reserved_bytes.all.peak",
            "active_bytes.all.current", "active_bytes.all.peak",
            "requested_bytes.all.current", "inactive_split_bytes.all.current",
            "allocation.all.current", "allocation.all.peak",
            "segment.all.current", "num_alloc_retries", "num_ooms",
            "allocated_bytes.large_pool.current", "allocated_bytes.small_pool.current"):
    assert key in stats, key
assert stats["allocated_bytes.all.allocated"] == 12 * MiB
assert stats["allocated_bytes.all.freed"] == 4 * MiB
assert stats["allocation.all.current"] == 2 and stats["allocation.all.peak"] == 3
assert stats["active_bytes.all.current"] == 8 * MiB
assert stats["requested_bytes.all.current"] == 8 * MiB
nested = torch.cuda.memory_stats_as_nested_dict(0)
assert nested["allocated_bytes"]["all"]["current"] == 8 * MiB

summary = torch.cuda.memory_summary(0)
assert "Allocated memory" in summary and "GPU reserved memory" in summary, summary
assert "CUDA OOMs: 0" in summary, summary

torch.cuda.reset_peak_memory_stats(0)
s = same_as_vram()
assert torch.cuda.max_memory_allocated(0) == 8 * MiB
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.cuda.reset_max_memory_allocated(0)   # PyTorch's older name: the same reset

torch.cuda.reset_accumulated_memory_stats(0)
stats = torch.cuda.memory_stats(0)
assert stats["allocated_bytes.all.allocated"] == 0 and stats["allocated_bytes.all.freed"] == 0
assert stats["allocated_bytes.all.current"] == 8 * MiB

# Past the cap: counted as PyTorch counts its OOMs.
big = lib.vram_torch_malloc(1 << 40, 0, None)
assert not big
assert torch.cuda.memory_stats(0)["num_ooms"] == 1
assert "CUDA OOMs: 1" in torch.cuda.memory_summary(0)

# The memory history cannot record through a pluggable allocator: said.
for call in (lambda: torch.cuda.memory._record_memory_history(True),
             lambda: torch.cuda.memory._snapshot(),
             lambda: torch.cuda.memory_snapshot()):
    try:
        call()
    except vram.VramError as e:
        assert "vram record --torch-snapshot" in str(e), e
    else:
        raise AssertionError("no VramError")
for p in ptrs[1:]:
    lib.vram_torch_free(p, 4 * MiB, 0, None)
assert torch.cuda.memory_allocated(0) == 0
print("OK", torch.__version__)
"""


class MemoryApiTest(unittest.TestCase):
    def test_torch_memory_functions_answer_with_vrams_figures(self):
        run = run_with_torch(MEMORY_API, env={"VRAM_STRATEGY": "expandable",
                                              "VRAM_MEMORY_LIMIT": "256M"})
        if run is None:
            self.skipTest("no interpreter here imports torch")
        self.assertEqual(run.returncode, 0, run.stderr + run.stdout)
        self.assertTrue(run.stdout.startswith("OK"), run.stdout)


class SnapshotTest(unittest.TestCase):
    def setUp(self):
        self.vram = os.environ.get("VRAM_BINARY")
        if not self.vram:
            self.skipTest("VRAM_BINARY is not set")
        self.tmp = tempfile.TemporaryDirectory(prefix="vram_test_snapshot_")
        self.addCleanup(self.tmp.cleanup)

    def snapshot(self, trace, *extra):
        path = os.path.join(self.tmp.name, "s.pickle")
        run = subprocess.run([self.vram, "analyze", "--torch-snapshot", path] + list(extra) +
                             [trace], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        return path

    def test_every_event_and_the_live_set(self):
        trace = os.path.join(LOOPS, "helper_keeper.trace.csv.gz")
        path = self.snapshot(trace)

        class Plain(pickle.Unpickler):
            def find_class(self, module, name):  # plain data only
                raise AssertionError("the snapshot names %s.%s" % (module, name))

        with open(path, "rb") as f:
            snap = Plain(f).load()
        lines = [l for l in gzip.open(trace, "rt") if l[:1].isdigit()]
        allocs = sum(",a," in l for l in lines)
        frees = sum(",f," in l for l in lines)
        events = snap["device_traces"][0]
        self.assertEqual(sum(e["action"] == "alloc" for e in events), allocs)
        self.assertEqual(sum(e["action"] == "free_completed" for e in events), frees)
        self.assertEqual(sum(e["action"] == "free_requested" for e in events), frees)
        # At the peak (the last step): the weights, the step's activation
        # and temporary, and the 30 buffers kept by train.py:15.
        sizes = sorted(s["total_size"] for s in snap["segments"])
        self.assertEqual(sizes, [MiB] * 31 + [8 * MiB, 32 * MiB])
        seg = [s for s in snap["segments"]
               if [f["line"] for f in s["blocks"][0]["frames"]][1:2] == [15]][0]
        self.assertEqual(seg["total_size"], MiB)
        self.assertEqual(seg["blocks"][0]["state"], "active_allocated")
        self.assertEqual([(f["filename"], f["line"]) for f in seg["blocks"][0]["frames"]][:2],
                         [("/home/me/utils.py", 3), ("/home/me/train.py", 15)])
        # Addresses: unique among allocations, and each free names its own.
        alloc_addrs = [e["addr"] for e in events if e["action"] == "alloc"]
        self.assertEqual(len(set(alloc_addrs)), len(alloc_addrs))
        self.assertTrue(all(e["addr"] in set(alloc_addrs) for e in events
                            if e["action"] == "free_completed"))

    def test_at_a_mark(self):
        trace = os.path.join(LOOPS, "varlen_transformer_leak_marks.trace.csv.gz")
        path = self.snapshot(trace, "--snapshot-at", "step 10")
        with open(path, "rb") as f:
            snap = pickle.load(f)
        # The weights and the ten 1 MiB buffers kept by steps 0 to 9.
        kept = [s["total_size"] for s in snap["segments"] if s["total_size"] == MiB]
        self.assertEqual(len(kept), 10)
        run = subprocess.run([self.vram, "analyze", "--torch-snapshot",
                              os.path.join(self.tmp.name, "x.pickle"), "--snapshot-at",
                              "no such mark", trace], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(run.returncode, 2)
        self.assertEqual(run.stderr.count("\n"), 1)
        self.assertIn("no mark 'no such mark'", run.stderr)

    def test_import_torch_reads_it_back(self):
        trace = os.path.join(LOOPS, "helper_keeper.trace.csv.gz")
        path = self.snapshot(trace)
        back = os.path.join(self.tmp.name, "back.csv")
        run = subprocess.run([sys.executable, "-m", "vram.import_torch", path, "-o", back],
                             env=dict(os.environ, PYTHONPATH=PYDIR), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        a = subprocess.run([self.vram, "analyze", "--json", trace], stdout=subprocess.PIPE,
                           universal_newlines=True).stdout
        b = subprocess.run([self.vram, "analyze", "--json", back], stdout=subprocess.PIPE,
                           universal_newlines=True).stdout
        import json

        ja, jb = json.loads(a), json.loads(b)
        for key in ("peak_bytes", "iterations", "leak", "leak_bytes_per_iteration"):
            self.assertEqual(ja[key], jb[key], key)
        self.assertEqual(ja["leak_sites"][0]["headline"], jb["leak_sites"][0]["headline"])

    def test_pytorchs_memory_viz_opens_it(self):
        path = self.snapshot(os.path.join(LOOPS, "helper_keeper.trace.csv.gz"))
        code = r"""
import pickle, sys
from torch.cuda import _memory_viz as viz
snap = pickle.load(open(sys.argv[1], "rb"))
flat = lambda lines: lines          # no flamegraph.pl here: the lines themselves
# PyTorch 2 takes the dict, 1.13 the list of segments.
data = snap if "trace_plot" in dir(viz) else snap["segments"]
mem = viz.memory(data, format_flamegraph=flat)
assert "train.py:15:train_step" in mem and "utils.py:3:make_buffer" in mem, mem[:400]
seg = viz.segments(data, format_flamegraph=flat)
assert seg.count("active_allocated") == 33, seg[:400]
cmp = viz.compare(snap["segments"], snap["segments"][:10], format_flamegraph=flat)
assert cmp.count("only_before") == 23, cmp[:400]
if hasattr(viz, "stats"):
    st = viz.stats(data)
    assert st["segments"] == 33 and st["active_allocated"].value == 71 << 20, st
if hasattr(viz, "segsum"):
    viz.segsum(snap)
if hasattr(viz, "trace"):
    out = viz.trace(snap)
    assert "entries" in out
if hasattr(viz, "trace_plot"):
    assert "<html>" in viz.trace_plot(snap)
print("OK")
"""
        run = run_with_torch(code, args=[path])
        if run is None:
            self.skipTest("no interpreter here imports torch")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.strip().splitlines()[-1], "OK")  # compare() prints too


if __name__ == "__main__":
    unittest.main()
