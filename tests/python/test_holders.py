# SPDX-License-Identifier: MIT
"""test_holders.py -- vram.holders names what holds device memory: given
live allocations (id, address, size), the variable or container of the
program that refers to the arrays in them, found through the garbage
collector.

Arrays here are objects with __cuda_array_interface__ (as CuPy and Numba
show theirs) at made-up addresses, and real CPU tensors of the PyTorch
importable by /usr/bin/python3 (Debian's 1.13; the mechanism maps
data_ptr values, wherever the memory is): a module's list, dict and
object attribute, a function's local, a parameter of an nn.Module, and a
tensor kept only by the autograd graph of a loss kept in a list. The
recording's side (Recorder, install) is driven with a stand-in for the
preload library's function. The preload library's part is tested end to
end by tests/cli/test_record_holders.sh.
"""

import os
import subprocess
import sys
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

from vram import holders  # noqa: E402


class Arr:
    """A device array as CuPy shows one."""

    def __init__(self, ptr, n=64):
        self.ptr, self.n = ptr, n

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (self.n,), "typestr": "|u1", "version": 3}


class Trainer:
    def __init__(self):
        self.last = None
        self.hist = []


history = []
cache = {}
trainer = Trainer()
single = Arr(0x1000)


def fill():
    for k in range(3):
        history.append(Arr(0x2000 + k * 0x100))
    cache["step"] = Arr(0x3000)
    trainer.last = Arr(0x4000)
    trainer.hist.append(Arr(0x5000))


def line_of(text):
    with open(__file__) as f:
        for n, line in enumerate(f, 1):
            if line.strip() == text:
                return n
    raise AssertionError(text)


class FindHoldersTest(unittest.TestCase):
    def setUp(self):
        history.clear()
        cache.clear()
        trainer.hist.clear()
        fill()

    def test_named_from_module_globals(self):
        base = os.path.basename(__file__)
        live = [(1, 0x1000, 64), (2, 0x2000, 64), (3, 0x2100, 64), (4, 0x3000, 64),
                (5, 0x4000, 64), (6, 0x5000, 64), (7, 0x7000, 64)]
        found = holders.find_holders(live)
        mod = " of module %s" % __name__
        self.assertEqual(found[1], "Arr `single`" + mod)
        # Every line that appends to it (RecorderTest's below too).
        self.assertTrue(found[2].startswith("list `history`%s; appended at %s:%d, " % (
            mod, base, line_of("history.append(Arr(0x2000 + k * 0x100))"))), found[2])
        self.assertEqual(found[3], found[2])
        self.assertEqual(found[4], "dict `cache`%s; added at %s:%d" % (
            mod, base, line_of('cache["step"] = Arr(0x3000)')))
        self.assertTrue(found[5].startswith("attribute `trainer.last`" + mod + "; set at "),
                        found[5])
        self.assertIn("%s:%d" % (base, line_of("trainer.last = Arr(0x4000)")), found[5])
        self.assertEqual(found[6], "list `trainer.hist`%s; appended at %s:%d" % (
            mod, base, line_of("trainer.hist.append(Arr(0x5000))")))
        self.assertNotIn(7, found)  # nothing refers to it

    def test_an_address_inside_an_allocation(self):
        found = holders.find_holders([(9, 0x2000 - 16, 0x300)])
        self.assertTrue(found[9].startswith("list `history`"), found)

    def test_locals_of_the_frames_given(self):
        def step():
            kept = [Arr(0x9000)]
            buffer = Arr(0xa000)
            return holders.find_holders([(1, 0x9000, 8), (2, 0xa000, 8)],
                                        frames=[sys._getframe()])
        found = step()
        self.assertEqual(found[2], "Arr `buffer` (local of step() in %s)"
                         % os.path.basename(__file__))
        self.assertTrue(found[1].startswith("list `kept` (local of step() in "), found[1])

    def test_no_live_allocations(self):
        self.assertEqual(holders.find_holders([]), {})

    def test_budget(self):
        # No time at all: whatever it has, no error.
        self.assertIsInstance(holders.find_holders([(1, 0x1000, 64)], budget=0.0), dict)


TORCH = r"""
import os, sys
import torch
from vram import holders

net = torch.nn.Linear(64, 64)
losses = []
kept = {}

def train():
    for step in range(3):
        x = torch.randn(32, 64)
        h = torch.relu(net(x))
        loss = (h * h).sum()
        losses.append(loss)         # KEEPS THE GRAPH
        kept[step] = loss.detach().clone()
    return x

x = train()

def storage(t):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr(), s.nbytes()

live, ids = [], {}
def add(name, t):
    ptr, n = storage(t)
    ids[name] = len(live) + 1
    live.append((len(live) + 1, ptr, n))

add("weight", net.weight)
add("loss", losses[0])
add("loss2", losses[2])  # every tensor is an allocation of its own in a recording
add("kept", kept[1])
add("x", x)
# What the graph of the last loss saved and nothing else names: the
# relu's output of the last step.
add("h", losses[2].grad_fn.next_functions[0][0]._saved_self)
found = holders.find_holders(live)
for name, i in sorted(ids.items()):
    print("%s\t%s" % (name, found.get(i, "-")))
"""


class TorchTest(unittest.TestCase):
    def test_tensors_parameters_and_graphs(self):
        py = "/usr/bin/python3"
        if not os.path.exists(py) or subprocess.run([py, "-c", "import torch"],
                                                      stdout=subprocess.DEVNULL,
                                                      stderr=subprocess.DEVNULL).returncode:
            self.skipTest("no PyTorch for /usr/bin/python3")
        import tempfile
        with tempfile.TemporaryDirectory(prefix="vram_test_holders_") as d:
            script = os.path.join(d, "train.py")  # a file: its additions are named
            with open(script, "w") as f:
                f.write(TORCH)
            run = subprocess.run([py, script], env=dict(os.environ, PYTHONPATH=os.path.join(
                ROOT, "python")), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                universal_newlines=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr)
        got = dict(line.split("\t", 1) for line in run.stdout.splitlines())
        self.assertEqual(got["weight"], "parameter `net.weight` of module __main__")
        self.assertEqual(got["loss"], "list `losses` of module __main__; appended at "
                                      "train.py:%d" % (TORCH.splitlines().index(
                                          "        losses.append(loss)         # KEEPS THE GRAPH") + 1))
        self.assertTrue(got["kept"].startswith("dict `kept` of module __main__; added at "),
                        got["kept"])
        self.assertEqual(got["x"], "tensor `x` of module __main__")
        self.assertTrue(got["h"].startswith("the autograd graph of list `losses` of module "
                                            "__main__"), got["h"])


class RecorderTest(unittest.TestCase):
    def setUp(self):
        self.calls = []
        self.live = ""

        def call(op, *args):
            self.calls.append((op,) + args)
            return self.live if op == "live" else None

        self.call = call

    def test_mark_and_search(self):
        rec = holders.Recorder(self.call)
        history.clear()
        history.append(Arr(0x2000))
        self.live = "5 %d 64\n6 %d 64\n" % (0x2000, 0xdead00)
        rec.mark("step 1")
        self.assertEqual(self.calls[0], ("mark", "step 1"))
        self.assertEqual(self.calls[1], ("live",))
        self.assertEqual(self.calls[2][0], "held")
        lines = self.calls[2][1].splitlines()
        self.assertEqual(len(lines), 1)
        self.assertTrue(lines[0].startswith("5\tlist `history`"), lines)
        # The next mark at once: not due (a search costs more than nothing).
        rec.last_cost = 10.0
        rec.mark("step 2")
        self.assertEqual(self.calls[-1], ("mark", "step 2"))
        # A top-level function's first return is searched all the same.
        n = len(self.calls)
        rec.on_return(sys._getframe())
        self.assertEqual(self.calls[n], ("live",))
        n = len(self.calls)
        rec.on_return(sys._getframe())  # its second return: not due
        self.assertEqual(len(self.calls), n)

    def test_a_failing_search_is_one_line(self):
        def bad(op, *args):
            raise RuntimeError("planted")
        rec = holders.Recorder(bad)
        import io
        saved, sys.stderr = sys.stderr, io.StringIO()
        try:
            rec.search()
            text = sys.stderr.getvalue()
        finally:
            sys.stderr = saved
        self.assertEqual(text, "vram: record: naming what holds memory failed: planted\n")

    def test_install(self):
        # In a script: sys._vram_record, and the return of the function
        # the main module runs now (main()) watched.
        code = r"""
import sys
from vram import holders
calls = []
def call(op, *args):
    calls.append((op,) + args)
def main():
    return holders.install(call, -1)
rec = main()
assert sys._vram_record is rec
watch = [c for c in calls if c[0] == "watch"]
assert len(watch) == 1 and watch[0][1] is main.__code__, calls
assert watch[0][2] == rec.on_return
print("OK")
"""
        run = subprocess.run([sys.executable, "-c", code], env=dict(
            os.environ, PYTHONPATH=os.path.join(ROOT, "python")), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.strip(), "OK")


if __name__ == "__main__":
    unittest.main()
