# SPDX-License-Identifier: MIT
"""test_vram.py -- the Python package (python/vram) against the simulated device.

Run by CTest as `python3 -m unittest` with VRAM_LIBRARY (the built
libvram.so) and VRAM_BACKEND=sim; by hand:

    VRAM_LIBRARY=build/lib/libvram.so VRAM_BACKEND=sim \
        python3 -m unittest discover -s tests/python -v

Allocations go through vram_alloc by ctypes (nothing else allocates on the
simulated device), so current and peak are known exactly.
"""

import ctypes
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import vram  # noqa: E402

MiB = 1 << 20

# The variables that change what vram_open does; each test sets its own.
SETTINGS = ("VRAM_TRACE", "VRAM_MEMORY_LIMIT", "VRAM_STRATEGY", "VRAM_ALLOW_GROWTH",
            "VRAM_MEMORY_FRACTION", "VRAM_LOG", "VRAM_LOG_FILE", "VRAM_OOM_DUMP")


class VramTestCase(unittest.TestCase):
    def setUp(self):
        vram.close()
        for name in SETTINGS:
            os.environ.pop(name, None)
        os.environ["VRAM_BACKEND"] = "sim"
        os.environ["VRAM_STRATEGY"] = "growth"
        self.live = []

    def tearDown(self):
        lib = vram.library()
        for dev, ptr in self.live:
            lib.vram_free(dev, ptr)
        self.live = []
        vram.close()

    def alloc(self, size, device=0):
        lib = vram.library()
        dev = vram.device_handle(device)
        ptr = ctypes.c_void_p()
        status = lib.vram_alloc(dev, size, None, ctypes.byref(ptr))
        if status != 0:
            raise AssertionError("vram_alloc(%d): %s" % (size, lib.vram_last_error().decode()))
        self.live.append((dev, ptr))
        return ptr

    def free(self, ptr, device=0):
        dev = vram.device_handle(device)
        self.assertEqual(vram.library().vram_free(dev, ptr), 0)
        self.live = [(d, p) for d, p in self.live if p.value != ptr.value]

    def trace_path(self, suffix=".csv"):
        fd, path = tempfile.mkstemp(prefix="vram-py-", suffix=suffix)
        os.close(fd)
        self.addCleanup(os.unlink, path)
        return path


def read_trace(path):
    """The trace's header and its events as lists of fields."""
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#")]
    return lines[0].split(","), [line.split(",") for line in lines[1:]]


class TestLibrary(VramTestCase):
    def test_stats_struct_matches_header(self):
        """STATS_FIELDS has the names, types and order of VRAM_STATS_LIST,
        and the library's sizeof(vram_stats) agrees."""
        with open(os.path.join(ROOT, "include", "vram.h"), encoding="utf-8") as f:
            header = f.read()
        body = header[header.index("#define VRAM_STATS_LIST(X)"):]
        body = body[: body.index("typedef struct vram_stats")]
        fields = re.findall(r"X\((uint64_t|double),\s*(\w+),", body)
        self.assertGreater(len(fields), 10)
        ours = [(name, "double" if t is ctypes.c_double else "uint64_t")
                for name, t in vram.STATS_FIELDS]
        self.assertEqual(ours, [(name, t) for t, name in fields])
        self.assertEqual(vram.library().vram_stats_size(), ctypes.sizeof(vram._Stats))

    def test_missing_library(self):
        env = dict(os.environ, VRAM_LIBRARY="/nonexistent/libvram.so",
                   PYTHONPATH=os.path.join(ROOT, "python"))
        code = ("import vram\n"
                "try:\n"
                "    vram.get_memory_info(0)\n"
                "except vram.VramError as e:\n"
                "    print('VramError:', e)\n")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout
        self.assertIn("VramError: cannot load /nonexistent/libvram.so", out)


class TestMemoryInfo(VramTestCase):
    def test_current_and_peak_follow_allocations(self):
        self.assertEqual(vram.get_memory_info(0), {"current": 0, "peak": 0})
        a = self.alloc(3 * MiB)
        b = self.alloc(1000)  # rounded up to 256
        self.assertEqual(vram.get_memory_info(0), {"current": 3 * MiB + 1024,
                                                   "peak": 3 * MiB + 1024})
        self.free(a)
        self.assertEqual(vram.get_memory_info(0), {"current": 1024, "peak": 3 * MiB + 1024})
        vram.reset_memory_stats(0)
        self.assertEqual(vram.get_memory_info(0), {"current": 1024, "peak": 1024})
        self.free(b)
        info = vram.get_memory_info()
        self.assertEqual(info["current"], 0)
        self.assertIsInstance(info["peak"], int)

    def test_stats(self):
        self.alloc(5 * MiB)
        s = vram.stats(0)
        self.assertEqual(list(s), [name for name, _ in vram.STATS_FIELDS])
        self.assertEqual(s["bytes_in_use"], 5 * MiB)
        self.assertEqual(s["live_blocks"], 1)
        self.assertEqual(s["num_allocs"], 1)
        self.assertGreaterEqual(s["bytes_reserved"], 5 * MiB)
        self.assertIsInstance(s["fragmentation"], float)
        self.assertGreaterEqual(s["fragmentation"], 1.0)

    def test_release_idle(self):
        os.environ["VRAM_STRATEGY"] = "expandable"
        keep = self.alloc(8 * MiB)
        gone = self.alloc(16 * MiB)
        self.assertEqual(vram.stats(0)["bytes_reserved"], 24 * MiB)
        self.free(gone)
        self.assertEqual(vram.release_idle(0), 16 * MiB)
        self.assertEqual(vram.stats(0)["bytes_reserved"], 8 * MiB)
        self.assertEqual(vram.release_idle(0), 0)
        self.assertEqual(vram.get_memory_info(0)["current"], 8 * MiB)
        self.free(keep)

    def test_devices_of_the_environment(self):
        os.environ["VRAM_SIM_DEVICES"] = "2"
        self.addCleanup(os.environ.pop, "VRAM_SIM_DEVICES", None)
        vram.close()
        self.alloc(MiB, device=1)
        self.assertEqual(vram.get_memory_info(1)["current"], MiB)
        self.assertEqual(vram.get_memory_info(0)["current"], 0)


class TestErrors(VramTestCase):
    def test_no_such_device(self):
        with self.assertRaises(vram.VramError) as cm:
            vram.get_memory_info(7)
        self.assertEqual(cm.exception.name, "VRAM_E_NO_DEVICE")
        self.assertEqual(cm.exception.status, 5)
        self.assertIn("no logical device 7", str(cm.exception))
        self.assertNotIn("\n", str(cm.exception))

    def test_bad_environment(self):
        os.environ["VRAM_MEMORY_LIMIT"] = "6X"
        with self.assertRaises(vram.VramError) as cm:
            vram.stats(0)
        self.assertEqual(cm.exception.name, "VRAM_E_CONFIG")
        self.assertIn("VRAM_MEMORY_LIMIT", str(cm.exception))

    def test_empty_mark(self):
        with self.assertRaises(vram.VramError) as cm:
            vram.mark("")
        self.assertEqual(cm.exception.name, "VRAM_E_INVALID")

    def test_out_of_memory_line(self):
        os.environ["VRAM_MEMORY_LIMIT"] = "64M"
        lib = vram.library()
        ptr = ctypes.c_void_p()
        status = lib.vram_alloc(vram.device_handle(0), 128 * MiB, None, ctypes.byref(ptr))
        self.assertEqual(status, 1)
        self.assertIn("out of memory on GPU:0", lib.vram_last_error().decode())
        self.assertEqual(vram.stats(0)["num_ooms"], 1)


class TestMarks(VramTestCase):
    def test_marks_without_trace_do_nothing(self):
        vram.mark("epoch 1")  # no VRAM_TRACE: nothing to write, no error

    def test_marks_and_oom_in_the_trace(self):
        path = self.trace_path()
        os.environ["VRAM_TRACE"] = path
        os.environ["VRAM_MEMORY_LIMIT"] = "64M"
        vram.mark("epoch 1")  # opens the context: the mark is not lost
        a = self.alloc(MiB)
        vram.mark('step, "2"\nnext')
        ptr = ctypes.c_void_p()
        lib = vram.library()
        self.assertEqual(lib.vram_alloc(vram.device_handle(0), 100 * MiB, None,
                                        ctypes.byref(ptr)), 1)
        self.free(a)
        vram.mark("épоch ✓")
        vram.close()  # flushes the trace

        header, events = read_trace(path)
        self.assertEqual(header, ["t_us", "op", "id", "size", "stream", "device", "label"])
        self.assertEqual([e[1] for e in events], ["m", "a", "m", "o", "f", "m"])
        self.assertEqual(events[0][6], "epoch 1")
        self.assertEqual(events[2][6], "step   2  next")
        self.assertEqual(events[3][3], str(100 * MiB))
        self.assertEqual(events[5][6], "épоch ✓")
        self.assertTrue(all(len(e) == 7 for e in events))

    def test_trace_reads_back_with_vram_replay(self):
        """The C reader accepts what the package made (vram replay loads it)."""
        cli = os.path.join(os.path.dirname(os.environ.get("VRAM_LIBRARY", "")), "..", "bin",
                           "vram")
        if not os.access(cli, os.X_OK):
            self.skipTest("no vram binary beside the library")
        path = self.trace_path(".csv.gz")
        os.environ["VRAM_TRACE"] = path
        vram.mark("warm up")
        a = self.alloc(2 * MiB)
        vram.mark("step 1")
        self.free(a)
        vram.close()
        run = subprocess.run([cli, "replay", "--json", path], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)


PLUGIN_CHILD = r"""
import ctypes, json, vram
vram.use_torch_plugin(True)
lib = vram.library()
lib.vram_torch_malloc.restype = ctypes.c_void_p
lib.vram_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
lib.vram_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                ctypes.c_void_p]
vram.mark("before any allocation")
hook = vram.StepMemoryHook()
out = {}
for step in range(3):
    hook(step)
    p = lib.vram_torch_malloc(4 << 20, 0, None)
    q = lib.vram_torch_malloc((step + 1) << 20, 0, None)
    lib.vram_torch_free(q, 0, 0, None)
    if step < 2:
        lib.vram_torch_free(p, 0, 0, None)
hook.end()
out["records"] = hook.records
out["info"] = vram.get_memory_info(0)
print(json.dumps(out))
"""


class TestTorchPluginMode(VramTestCase):
    """The plug-in's device seen from Python (vram_torch_device), driven by
    hand the way PyTorch drives it, in a child process: the plug-in's
    context lives until the process ends, and its trace (gzip) must then be
    complete."""

    def test_plugin_device_and_trace(self):
        import gzip
        import json

        path = self.trace_path(".csv.gz")
        env = dict(os.environ, VRAM_TRACE=path, VRAM_STRATEGY="growth",
                   PYTHONPATH=os.path.join(ROOT, "python"))
        run = subprocess.run([sys.executable, "-c", PLUGIN_CHILD], env=env,
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        out = json.loads(run.stdout)
        self.assertEqual([r["step"] for r in out["records"]], [0, 1, 2])
        self.assertEqual([r["peak"] for r in out["records"]], [5 * MiB, 6 * MiB, 7 * MiB])
        self.assertEqual(out["records"][2]["current"], 4 * MiB)
        self.assertEqual(out["info"], {"current": 4 * MiB, "peak": 7 * MiB})
        with gzip.open(path, "rt", encoding="utf-8") as f:  # complete: finished at exit
            lines = [line.rstrip("\n").split(",") for line in f if not line.startswith("#")]
        ops = [e[1] for e in lines[1:]]
        self.assertEqual(ops.count("m"), 4)
        self.assertEqual(ops.count("a"), 6)
        self.assertEqual(ops.count("f"), 5)
        self.assertEqual(lines[1][6], "before any allocation")


class TestCallbacks(VramTestCase):
    def test_memory_callback(self):
        path = self.trace_path()
        os.environ["VRAM_TRACE"] = path
        lines = []
        cb = vram.MemoryCallback(device=0, log=lines.append)
        cb.set_model(None)
        # Epoch 1 peaks at 8 MiB; epoch 2 holds 1 MiB and peaks at 3 MiB.
        cb.on_epoch_begin(0)
        keep = self.alloc(MiB)
        tmp = self.alloc(7 * MiB)
        self.free(tmp)
        cb.on_epoch_end(0, logs={})
        cb.on_epoch_begin(1)
        tmp = self.alloc(2 * MiB)
        self.free(tmp)
        cb.on_epoch_end(1, logs={})
        self.free(keep)

        self.assertEqual(cb.history, [
            {"epoch": 1, "current": MiB, "peak": 8 * MiB},
            {"epoch": 2, "current": MiB, "peak": 3 * MiB},
        ])
        self.assertEqual(lines, [
            "Epoch 1: vram current 1.0 MiB, peak 8.0 MiB",
            "Epoch 2: vram current 1.0 MiB, peak 3.0 MiB",
        ])
        vram.close()
        _, events = read_trace(path)
        self.assertEqual([e[6] for e in events if e[1] == "m"], ["epoch 1", "epoch 2"])

    def test_memory_callback_is_a_keras_callback_when_keras_exists(self):
        base = vram.MemoryCallback.__mro__[2]
        if base.__name__ == "_PlainCallback":
            for name in ("on_train_begin", "on_epoch_begin", "on_epoch_end", "set_model"):
                self.assertTrue(callable(getattr(vram.MemoryCallback(log=None), name)))
        else:
            self.assertEqual(base.__name__, "Callback")

    def test_memory_callback_on_keras(self):
        """With Keras imported, MemoryCallback is a keras.callbacks.Callback
        (a stand-in module here: neither Keras nor TensorFlow is needed)."""
        code = ("import sys, types\n"
                "keras = types.ModuleType('keras')\n"
                "keras.callbacks = types.SimpleNamespace()\n"
                "class Callback:\n"
                "    def __init__(self):\n"
                "        self.inited = True\n"
                "keras.callbacks.Callback = Callback\n"
                "sys.modules['keras'] = keras\n"
                "import vram\n"
                "cb = vram.MemoryCallback(log=None)\n"
                "assert isinstance(cb, Callback) and cb.inited\n"
                "cb.on_epoch_begin(0); cb.on_epoch_end(0)\n"
                "print(cb.history)\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.strip(), "[{'epoch': 1, 'current': 0, 'peak': 0}]")

    def test_peak_kept_across_epochs(self):
        cb = vram.MemoryCallback(log=None, reset_peak=False)
        cb.on_epoch_begin(0)
        self.free(self.alloc(4 * MiB))
        cb.on_epoch_end(0)
        cb.on_epoch_begin(1)
        cb.on_epoch_end(1)
        self.assertEqual([h["peak"] for h in cb.history], [4 * MiB, 4 * MiB])

    def test_step_hook(self):
        path = self.trace_path()
        os.environ["VRAM_TRACE"] = path
        lines = []
        hook = vram.StepMemoryHook(log=lines.append)
        self.assertIsNone(hook(0))
        x = self.alloc(2 * MiB)
        first = hook(1)
        self.assertEqual(first, {"step": 0, "current": 2 * MiB, "peak": 2 * MiB})
        self.free(self.alloc(5 * MiB))
        self.free(x)
        last = hook.end()
        self.assertEqual(last, {"step": 1, "current": 0, "peak": 7 * MiB})
        self.assertIsNone(hook.end())
        with hook.step(2):
            self.free(self.alloc(MiB))
        self.assertEqual(hook.records[-1], {"step": 2, "current": 0, "peak": MiB})
        self.assertEqual(len(hook.records), 3)
        self.assertEqual(lines[0], "step 0: vram current 2.0 MiB, peak 2.0 MiB")
        vram.close()
        _, events = read_trace(path)
        self.assertEqual([e[6] for e in events if e[1] == "m"], ["step 0", "step 1", "step 2"])

    def test_track(self):
        self.assertIsNone(vram.track(10))
        self.free(self.alloc(MiB))
        rec = vram.track(11)
        self.assertEqual(rec, {"step": 10, "current": 0, "peak": MiB})
        vram.track.hook().end()
        self.assertEqual([r["step"] for r in vram.track.hook().records][-2:], [10, 11])


if __name__ == "__main__":
    unittest.main()
