# SPDX-License-Identifier: MIT
"""test_import_torch.py -- `python -m vram.import_torch` on hand-made PyTorch
memory snapshots (the dict torch.cuda.memory._dump_snapshot pickles): the
events it writes, the stacks carried into the frames table (format 2), and
one line with exit 2 for a truncated pickle, a pickle that is not a
snapshot, a foreign version, malformed frames and a pickle naming a
function. When VRAM_BINARY names the vram tool, `vram analyze` reads the
trace too and names the planted line as the leak's call site."""

import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PYDIR = os.path.join(ROOT, "python")
MiB = 1 << 20


def frames(line):
    # Innermost first, as PyTorch writes them with context="all": the
    # allocator's own C++ frame, then the Python lines.
    return [{"filename": "c10/cuda/CUDACachingAllocator.cpp", "line": 1200, "name": "malloc"},
            {"filename": "/home/me/train.py", "line": line, "name": "train_step"},
            {"filename": "/home/me/train.py", "line": 90, "name": "main"}]


def leaking_snapshot(steps=12):
    """A training loop in PyTorch's history format: per step two 4 MiB
    activations allocated and freed (free_requested, then free_completed),
    and 256 KiB kept; a free of memory allocated before the history began;
    segment events; an OOM at the end."""
    trace, t, addr = [], 1000, 0x7f0000000000
    trace.append({"action": "segment_alloc", "addr": addr, "size": 64 * MiB, "stream": 0,
                  "time_us": t, "frames": []})
    trace.append({"action": "free_completed", "addr": 0x100, "size": 512, "stream": 0,
                  "time_us": t, "frames": []})
    kept = addr + 32 * MiB
    for step in range(steps):
        acts = [addr + k * 4 * MiB for k in range(2)]
        for a in acts:
            t += 10
            trace.append({"action": "alloc", "addr": a, "size": 4 * MiB, "stream": 0,
                          "time_us": t, "frames": frames(40)})
        for a in acts:
            t += 10
            trace.append({"action": "free_requested", "addr": a, "size": 4 * MiB,
                          "stream": 0, "time_us": t, "frames": frames(41)})
            trace.append({"action": "free_completed", "addr": a, "size": 4 * MiB,
                          "stream": 0, "time_us": t, "frames": frames(41)})
        t += 10
        trace.append({"action": "alloc", "addr": kept, "size": 256 * 1024, "stream": 0,
                      "time_us": t, "frames": frames(57)})
        kept += 256 * 1024
    t += 10
    trace.append({"action": "oom", "addr": 0, "size": 80 * MiB, "stream": 0,
                  "device_free": 0, "time_us": t, "frames": frames(40)})
    return {"segments": [], "device_traces": [trace]}


class ImportTorch(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def run_import(self, data, out="t.trace.csv", raw=False):
        src = os.path.join(self.dir, "snap.pickle")
        with open(src, "wb") as f:
            f.write(data if raw else pickle.dumps(data))
        dst = os.path.join(self.dir, out)
        env = dict(os.environ, PYTHONPATH=PYDIR)
        p = subprocess.run([sys.executable, "-m", "vram.import_torch", src, "-o", dst],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env)
        return p, dst

    def read(self, path, sites=False):
        """The metadata and the events (t_us, op, id, size, stream, device);
        with SITES, also the frames table: {frame id: text}, {site id:
        [frame ids]} and each event's site."""
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            lines = f.read().splitlines()
        self.assertTrue(lines[0].startswith("# workload=torch-snapshot"))
        if not sites:
            self.assertEqual(lines[1], "t_us,op,id,size,stream,device")
            return lines[0], [l.split(",") for l in lines[2:]]
        self.assertEqual(lines[1:3], ["#@format 2", "t_us,op,id,size,stream,device,site"])
        fr, st, ev, ev_sites = {}, {}, [], []
        for l in lines[3:]:
            if l.startswith("#@frame "):
                ident, rest = l[8:].split(",", 1)
                self.assertEqual(int(ident), len(fr) + 1)  # defined in order
                fr[int(ident)] = rest
            elif l.startswith("#@site "):
                ids = [int(x) for x in l[7:].split(",")]
                self.assertEqual(ids[0], len(st) + 1)
                self.assertTrue(all(i in fr for i in ids[1:]))  # defined before
                st[ids[0]] = ids[1:]
            else:
                e = l.split(",")
                self.assertTrue(e[6] == "" or int(e[6]) in st)  # defined before use
                ev.append(e[:6])
                ev_sites.append(int(e[6]) if e[6] else 0)
        return lines[0], ev, fr, st, ev_sites

    def test_events(self):
        p, dst = self.run_import(leaking_snapshot(), out="t.trace.csv.gz")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        meta, ev, fr, st, ev_sites = self.read(dst, sites=True)
        self.assertIn("skipped=1", meta)  # the free of memory from before
        ops = [e[1] for e in ev]
        # 12 steps x (2 allocs, 2 frees, 1 kept) + the OOM; segments ignored.
        self.assertEqual(ops.count("a"), 36)
        self.assertEqual(ops.count("f"), 24)
        self.assertEqual(ops[-1], "o")
        self.assertEqual(int(ev[-1][3]), 80 * MiB)
        # Each free names the id its address was allocated with.
        live = {}
        for t, op, ident, size, stream, dev in ev:
            if op == "a":
                live[ident] = size
            elif op == "f":
                self.assertEqual(live.pop(ident), size)
        self.assertEqual(sorted(set(live.values())), [str(256 * 1024)])
        times = [int(e[0]) for e in ev]
        self.assertEqual(times, sorted(times))
        vram = os.environ.get("VRAM_BINARY")
        if vram:
            a = subprocess.run([vram, "analyze", "--json", dst], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            self.assertEqual(a.returncode, 0, a.stderr)
            self.assertIn('"leak": true', a.stdout.replace('"leak":true', '"leak": true'))
            d = json.loads(a.stdout)
            top = d["leak_sites"][0]
            self.assertEqual(top["headline"], "train.py:57 in train_step")
            self.assertEqual(top["stack"][0], {"kind": "py", "file": "/home/me/train.py",
                                               "line": 57, "function": "train_step"})
            # The whole leak is this line's: its rate is the leak's.
            self.assertAlmostEqual(top["bytes_per_iteration"] / d["leak_bytes_per_iteration"],
                                   1.0, delta=0.01)
            self.assertEqual(top["iterations"], top["of_iterations"])

    def test_stacks(self):
        """Stacks become call sites: Python frames only, each distinct frame
        and stack written once, the frees without one."""
        p, dst = self.run_import(leaking_snapshot(), out="t.trace.csv")
        self.assertEqual(p.returncode, 0, p.stderr)
        _, ev, fr, st, ev_sites = self.read(dst, sites=True)
        self.assertEqual(sorted(fr.values()), ["py,/home/me/train.py,40,train_step",
                                               "py,/home/me/train.py,57,train_step",
                                               "py,/home/me/train.py,90,main"])
        self.assertEqual(len(st), 2)  # lines 40 and 57, each with main
        for (t, op, ident, size, stream, dev), site in zip(ev, ev_sites):
            if op == "f":
                self.assertEqual(site, 0)
                continue
            self.assertIn(site, st)
            want = "57" if size == str(256 * 1024) else "40"
            self.assertEqual(fr[st[site][0]], "py,/home/me/train.py,%s,train_step" % want)
            self.assertEqual(fr[st[site][1]], "py,/home/me/train.py,90,main")
        # Text the format cannot hold is made safe; without stacks, format 1.
        snap = {"device_traces": [[{"action": "alloc", "addr": 1, "size": 10, "frames": [
            {"filename": "/a,b.py", "line": 3, "name": 'f"\n'}]}]]}
        p, dst = self.run_import(snap)
        self.assertEqual(p.returncode, 0, p.stderr)
        _, _, fr, _, _ = self.read(dst, sites=True)
        self.assertEqual(fr, {1: "py,/a b.py,3,f  "})

    def test_without_time(self):
        snap = {"device_traces": [[{"action": "alloc", "addr": 1, "size": 10},
                                   {"action": "free", "addr": 1, "size": 10}], []]}
        p, dst = self.run_import(snap)
        self.assertEqual(p.returncode, 0, p.stderr)
        _, ev = self.read(dst)
        self.assertEqual([(e[0], e[1]) for e in ev], [("0", "a"), ("1", "f")])

    def assert_refused(self, p, reason):
        self.assertEqual(p.returncode, 2)
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("vram.import_torch: "), lines[0])
        self.assertIn(reason, lines[0])

    def test_bad_input(self):
        whole = pickle.dumps(leaking_snapshot())
        p, dst = self.run_import(whole[: len(whole) // 2], raw=True)
        self.assert_refused(p, "truncated")
        self.assertFalse(os.path.exists(dst))
        p, _ = self.run_import(b"not a pickle at all", raw=True)
        self.assert_refused(p, "not a pickle")
        p, _ = self.run_import([1, 2, 3])
        self.assert_refused(p, "not a PyTorch memory snapshot")
        p, _ = self.run_import({"device_traces": {"0": []}})
        self.assert_refused(p, "snapshot version")
        p, _ = self.run_import({"device_traces": [[{"action": "teleport", "addr": 1}]]})
        self.assert_refused(p, "unknown action 'teleport'")
        p, _ = self.run_import({"device_traces": [[{"addr": 1, "size": 2}]]})
        self.assert_refused(p, "no action")
        p, _ = self.run_import({"device_traces": [[{"action": "alloc", "addr": 1, "size": 2,
                                                    "frames": "train.py:3"}]]})
        self.assert_refused(p, "frames is not a list")
        p, _ = self.run_import({"device_traces": [[{"action": "alloc", "addr": 1, "size": 2,
                                                    "frames": [{"filename": "a.py"}]}]]})
        self.assert_refused(p, "a frame is not {filename, line, name}")
        # A pickle that would call a function when loaded is refused, not run.
        evil = b"cos\nsystem\n(S'touch " + os.path.join(self.dir, "ran").encode() + b"'\ntR."
        p, _ = self.run_import(evil, raw=True)
        self.assert_refused(p, "os.system")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "ran")))

    def test_unwritable_output(self):
        p, _ = self.run_import(leaking_snapshot(), out="no/such/dir/t.csv")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stderr.splitlines()), 1)


if __name__ == "__main__":
    unittest.main()
