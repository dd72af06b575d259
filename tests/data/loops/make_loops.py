#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make_loops.py -- write the synthetic training loops of this directory.

    python3 tests/data/loops/make_loops.py [DIR]

Each trace is what `vram record` writes for a loop whose truth is known,
named in its metadata line: steps=N (the program's steps; 1: no loop at
all), leak=BYTES (kept every step; 0: none), and for traces with call
sites keeper=FILE:LINE (the line that keeps the leaked tensors). They
reproduce what iterations found without marks got wrong, and
tests/unit/test_analyze.c (test_loops_agree_with_their_steps) checks that
`vram analyze` finds exactly those steps, that leak and its rate, and
that line. The files are gzip'ed with a fixed time so that running this
again writes the same bytes.
"""
import gzip
import os
import random
import sys

MIB = 1 << 20
KIB = 1 << 10


class Trace:
    """A trace being written: events, and for format 2 a frames table."""

    def __init__(self, meta, sites=False):
        self.meta = meta
        self.sites = sites
        self.lines = []
        self.t = 1_796_070_730_000_000
        self.next_id = 0
        self.frames = {}
        self.stacks = {}

    def _site(self, stack):
        if not stack:
            return ""
        ids = []
        for frame in stack:  # innermost first: (file, line, function)
            if frame not in self.frames:
                self.frames[frame] = len(self.frames) + 1
                f, line, func = frame
                self.lines.append("#@frame %d,py,%s,%d,%s" % (self.frames[frame], f, line, func))
            ids.append(self.frames[frame])
        key = tuple(ids)
        if key not in self.stacks:
            self.stacks[key] = len(self.stacks) + 1
            self.lines.append("#@site %d,%s" % (self.stacks[key], ",".join(map(str, ids))))
        return str(self.stacks[key])

    def _event(self, op, i, size, label="", site=""):
        self.t += 7
        row = "%d,%s,%d,%d,0,0,%s" % (self.t, op, i, size, label)
        self.lines.append(row + ("," + site if self.sites else ""))

    def alloc(self, size, stack=()):
        i = self.next_id
        self.next_id += 1
        self._event("a", i, size, site=self._site(stack) if self.sites else "")
        return (i, size)

    def free(self, a):
        self._event("f", a[0], a[1])

    def mark(self, label):
        self._event("m", 0, 0, label=label)

    def write(self, path):
        head = ["# " + self.meta]
        if self.sites:
            head.append("#@format 2")
        head.append("t_us,op,id,size,stream,device,label" + (",site" if self.sites else ""))
        text = "\n".join(head + self.lines) + "\n"
        with open(path, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as z:
                z.write(text.encode())


def short_steps(d):
    """The loop reported analysed as 10 iterations of 12 MiB: 30 steps of
    three events (a 4 MiB tensor kept, a 1 MiB temporary)."""
    t = Trace("workload=short_steps steps=30 leak=%d" % (4 * MIB))
    t.alloc(64 * MIB)  # weights
    for _ in range(30):
        t.alloc(4 * MIB)
        tmp = t.alloc(MIB)
        t.free(tmp)
    t.write(os.path.join(d, "short_steps.trace.csv.gz"))


def product_kept(d):
    """history.append(x * 2): x made, its product kept, x dropped when the
    next step rebinds it; 30 steps of four events."""
    t = Trace("workload=product_kept steps=30 leak=%d" % (4 * MIB))
    t.alloc(16 * MIB)
    x = None
    for _ in range(30):
        new = t.alloc(4 * MIB)
        if x is not None:
            t.free(x)
        x = new
        t.alloc(4 * MIB)  # x * 2, kept
        loss = t.alloc(512)
        t.free(loss)
    t.free(x)
    t.write(os.path.join(d, "product_kept.trace.csv.gz"))


def varlen_mlp(d, leak):
    """An MLP trained on batches of 32 to 128 rows: every activation's size
    changes with the batch, the weights' gradients do not."""
    name = "varlen_mlp_leak" if leak else "varlen_mlp"
    t = Trace("workload=%s steps=40 leak=%d" % (name, leak))
    rng = random.Random(5)
    t.alloc(64 * MIB)
    for _ in range(40):
        rows = rng.choice([32, 48, 64, 96, 128])
        b = t.alloc(rows * 4 * KIB)
        acts = [t.alloc(rows * 16 * KIB) for _ in range(3)]
        out = t.alloc(rows * 4 * KIB)
        loss = t.alloc(512)
        grads = []
        for a in reversed(acts):
            grads.append(t.alloc(a[1]))
            w = t.alloc(256 * KIB)
            t.free(w)
            t.free(a)
        for g in grads:
            t.free(g)
        t.free(out)
        t.free(b)
        t.free(loss)
        if leak:
            t.alloc(leak)
    t.write(os.path.join(d, name + ".trace.csv.gz"))


def varlen_transformer(d, leak, marks=False):
    """Attention over sequences of 100 to 512 tokens: q, k, v and the
    scores all change size with the sequence."""
    name = "varlen_transformer" + ("_leak" if leak else "") + ("_marks" if marks else "")
    t = Trace("workload=%s steps=40 leak=%d" % (name, leak))
    rng = random.Random(7)
    t.alloc(64 * MIB)
    for step in range(40):
        if marks:
            t.mark("step %d" % step)
        n = rng.randrange(100, 513)
        b = t.alloc(n * 32)
        kept = []
        for _ in range(4):
            q, k = t.alloc(n * 2 * KIB), t.alloc(n * 2 * KIB)
            att = t.alloc(n * n * 2)
            o = t.alloc(n * 2 * KIB)
            t.free(att)
            kept += [q, k, o]
        for a in reversed(kept):
            g = t.alloc(a[1])
            t.free(g)
            t.free(a)
        t.free(b)
        if leak:
            t.alloc(leak)
    t.write(os.path.join(d, name + ".trace.csv.gz"))


def weights_only(d):
    """A program that loads 24 equal weights and ends: allocations alone
    repeat at every period, but there is no step."""
    t = Trace("workload=weights_only steps=1 leak=0")
    for _ in range(24):
        t.alloc(10 * MIB)
    t.write(os.path.join(d, "weights_only.trace.csv.gz"))


def helper_keeper(d):
    """A helper that makes buffers for two lines of the loop: one drops its
    buffer, the other keeps it in a list. The line that keeps is the
    suspect, not the helper (every allocation is the helper's line's)."""
    t = Trace("workload=helper_keeper steps=30 leak=%d keeper=train.py:15" % MIB,
              sites=True)
    helper = ("/home/me/utils.py", 3, "make_buffer")
    main = ("/home/me/train.py", 20, "<module>")
    weights = t.alloc(32 * MIB, [("/home/me/train.py", 8, "<module>")])
    for _ in range(30):
        act = t.alloc(8 * MIB, [("/home/me/model.py", 12, "forward"),
                                ("/home/me/train.py", 13, "train_step"), main])
        tmp = t.alloc(MIB, [helper, ("/home/me/train.py", 14, "train_step"), main])
        t.alloc(MIB, [helper, ("/home/me/train.py", 15, "train_step"), main])
        t.free(tmp)
        t.free(act)
    t.free(weights)
    t.write(os.path.join(d, "helper_keeper.trace.csv.gz"))


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    short_steps(d)
    product_kept(d)
    varlen_mlp(d, 0)
    varlen_mlp(d, MIB)
    varlen_transformer(d, 0)
    varlen_transformer(d, MIB)
    varlen_transformer(d, MIB, marks=True)
    weights_only(d)
    helper_keeper(d)


if __name__ == "__main__":
    main()
