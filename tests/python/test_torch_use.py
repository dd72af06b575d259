# SPDX-License-Identifier: MIT
"""test_torch_use.py -- vram.torch.use() wires every hook PyTorch's allocator
object offers to the right entry point of libvram.so.

No CUDA build of PyTorch is needed: a stand-in `torch` module with the
shape of PyTorch 2.11's API (torch.cuda.memory.CUDAPluggableAllocator, its
allocator() object with the set_*_fn setters, change_current_allocator)
records what use() does. The hooks themselves are tested in C
(tests/unit/test_streams.c, test_torch_streams.c) and with real PyTorch on a
GPU (bench/gpu/stream_checks.py).

The OOM shim (python/vram/oom_shim.cpp) is built for real against the
PyTorch importable here (Debian's 1.13 with libtorch-dev's headers) and
driven on the simulated device: past the cap it must throw
c10::OutOfMemoryError carrying vram's line.
"""

import ctypes
import os
import sys
import types
import unittest
import warnings

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import vram  # noqa: E402
import vram.torch as vtorch  # noqa: E402

ALL_SETTERS = (
    "set_init_fn",
    "set_reset_fn",
    "set_memory_fraction_fn",
    "set_base_alloc_fn",
    "set_record_stream_fn",
    "set_begin_allocate_to_pool",
    "set_end_allocate_to_pool_fn",
    "set_release_pool",
)


def fake_torch(setters=ALL_SETTERS):
    """A `torch` module whose allocator object has SETTERS; returns it and
    the record of calls."""
    calls = {"installed": {}, "current": None, "created": None}

    class Native:
        pass

    native = Native()
    for name in setters:
        setattr(native, name, (lambda n: lambda addr: calls["installed"].__setitem__(n, addr))(name))

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc_fn, free_fn):
            calls["created"] = (path, alloc_fn, free_fn)

        def allocator(self):
            return native

    def change_current_allocator(allocator):
        calls["current"] = allocator

    torch = types.ModuleType("torch")
    torch.__version__ = "2.11.0+fake"
    torch.cuda = types.ModuleType("torch.cuda")
    torch.cuda.memory = types.ModuleType("torch.cuda.memory")
    torch.cuda.memory.CUDAPluggableAllocator = CUDAPluggableAllocator
    torch.cuda.memory.change_current_allocator = change_current_allocator
    # The statistics PyTorch's pluggable allocator cannot give.
    for name in ("memory_stats_as_nested_dict", "reset_peak_memory_stats",
                 "reset_accumulated_memory_stats", "memory_snapshot"):
        fn = (lambda n: lambda device=None: calls.__setitem__("pytorch", n))(name)
        setattr(torch.cuda.memory, name, fn)
        setattr(torch.cuda, name, fn)
    for name in ("_record_memory_history", "_snapshot", "_dump_snapshot"):
        setattr(torch.cuda.memory, name, lambda *a, **k: None)
    torch._C = types.ModuleType("torch._C")
    torch._C._cuda_memoryStats = lambda device: {}
    return torch, calls


class UseTest(unittest.TestCase):
    def setUp(self):
        self.saved_torch = sys.modules.get("torch")
        self.saved_env = {k: os.environ.get(k) for k in ("VRAM_STRATEGY", "VRAM_MEMORY_LIMIT")}
        self.lib = ctypes.CDLL(os.environ["VRAM_LIBRARY"])

    def tearDown(self):
        if self.saved_torch is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = self.saved_torch
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def address(self, symbol):
        return ctypes.cast(getattr(self.lib, symbol), ctypes.c_void_p).value

    def test_every_hook_installed(self):
        torch, calls = fake_torch()
        sys.modules["torch"] = torch
        allocator = vtorch.use(strategy="expandable", limit="6G")
        self.assertEqual(calls["created"][1:], ("vram_torch_malloc", "vram_torch_free"))
        self.assertEqual(calls["created"][0], os.environ["VRAM_LIBRARY"])
        self.assertIs(calls["current"], allocator)
        self.assertEqual(os.environ["VRAM_STRATEGY"], "expandable")
        self.assertEqual(os.environ["VRAM_MEMORY_LIMIT"], "6G")
        expected = {
            "set_record_stream_fn": "vram_torch_record_stream",
            "set_memory_fraction_fn": "vram_torch_set_memory_fraction",
            "set_base_alloc_fn": "vram_torch_base_alloc",
            "set_begin_allocate_to_pool": "vram_torch_begin_allocate_to_pool",
            "set_end_allocate_to_pool_fn": "vram_torch_end_allocate_to_pool",
            "set_release_pool": "vram_torch_release_pool",
        }
        for setter, symbol in expected.items():
            self.assertEqual(calls["installed"].get(setter), self.address(symbol), setter)
        # Every setter PyTorch offers is either installed or deliberately not:
        # init needs nothing (the plug-in opens lazily).
        self.assertNotIn("set_init_fn", calls["installed"])

    def test_pytorchs_memory_statistics_are_vrams(self):
        torch, calls = fake_torch()
        sys.modules["torch"] = torch
        vtorch.use(raise_oom=False)
        for module in (torch.cuda, torch.cuda.memory):
            self.assertIs(module.memory_stats_as_nested_dict, vtorch.memory_stats)
            self.assertIs(module.reset_peak_memory_stats, vtorch._reset_peak)
            self.assertIs(module.reset_accumulated_memory_stats, vtorch._reset_accumulated)
        self.assertIn("allocated_bytes", torch._C._cuda_memoryStats(0))
        for name in ("_record_memory_history", "_snapshot", "_dump_snapshot"):
            with self.assertRaises(vram.VramError) as cm:
                getattr(torch.cuda.memory, name)()
            self.assertIn("vram record --torch-snapshot", str(cm.exception))
        # Every figure in PyTorch's names, from vram's.
        nested = vtorch.nested_stats(dict((name, 7) for name, _ in vram.STATS_FIELDS))
        self.assertEqual(nested["allocated_bytes"]["all"], {"current": 7, "peak": 7,
                                                            "allocated": 7, "freed": 7})
        self.assertEqual(nested["num_ooms"], 7)
        self.assertEqual(nested["num_alloc_retries"], 7)
        self.assertEqual(nested["allocated_bytes"]["small_pool"]["current"], 0)
        zero = vtorch.nested_stats(None)
        self.assertEqual(zero["reserved_bytes"]["all"]["peak"], 0)

    def test_shim_is_the_allocation_function(self):
        torch, calls = fake_torch()
        sys.modules["torch"] = torch
        saved = vtorch.oom_shim
        vtorch.oom_shim = lambda t, path: "/some/libvram_torch_oom.so"
        try:
            vtorch.use()
        finally:
            vtorch.oom_shim = saved
        self.assertEqual(calls["created"], ("/some/libvram_torch_oom.so",
                                            "vram_torch_malloc_raising",
                                            "vram_torch_free_raising"))
        # empty_cache goes to vram's release path.
        self.assertEqual(calls["installed"].get("set_reset_fn"),
                         self.address("vram_torch_empty_cache"))

    def test_without_a_shim_warns_and_plugs_the_plain_function(self):
        torch, calls = fake_torch()  # no headers: the shim cannot be built
        sys.modules["torch"] = torch
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            vtorch.use()
        self.assertTrue(any("OutOfMemoryError" in str(w.message) for w in seen))
        self.assertEqual(calls["created"][1], "vram_torch_malloc")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            vtorch.use(raise_oom=False)
        self.assertFalse(any("OutOfMemoryError" in str(w.message) for w in seen))

    def test_shim_raises_pytorchs_oom_error(self):
        # PyTorch may be importable only from the system's interpreter.
        pythons = [sys.executable] + [p for p in ("/usr/bin/python3",) if os.path.exists(p)]
        env = dict(os.environ, VRAM_BACKEND="sim", VRAM_STRATEGY="expandable",
                   VRAM_MEMORY_LIMIT="64M", PYTHONPATH=os.path.join(ROOT, "python"))
        # A child: the plug-in reads its settings once per process.
        code = r"""
import ctypes, os, sys
try:
    import torch
except ImportError:
    print("SKIP PyTorch is not importable by " + sys.executable)
    sys.exit(0)
import vram, vram.torch
try:
    path = vram.torch.oom_shim(torch, os.environ["VRAM_LIBRARY"])
except vram.VramError as e:
    print("SKIP the shim cannot be built here: %s" % e)
    sys.exit(0)
assert vram.torch.oom_shim(torch, os.environ["VRAM_LIBRARY"]) == path  # cached
ctypes.CDLL(os.environ["VRAM_LIBRARY"])
shim = ctypes.CDLL(path)
f = shim.vram_torch_oom_selftest
f.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
buf = ctypes.create_string_buffer(1024)
for size, dev in ((1 << 20, 0), (1 << 30, 0), (1 << 20, 0), (1 << 20, 7)):
    kind = f(size, dev, buf, len(buf))
    print(kind, buf.value.decode())
"""
        import subprocess

        for python in pythons:
            run = subprocess.run([python, "-c", code], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
            self.assertEqual(run.returncode, 0, run.stderr)
            if not run.stdout.startswith("SKIP"):
                break
        if run.stdout.startswith("SKIP"):
            self.skipTest(run.stdout.strip())
        lines = run.stdout.splitlines()
        self.assertEqual(lines[0], "0 ")  # fits
        self.assertTrue(lines[1].startswith("1 CUDA out of memory (vram): out of memory on GPU:0"),
                        lines[1])  # c10::OutOfMemoryError with vram's line
        self.assertIn("cap 64.00 MiB", lines[1])
        self.assertEqual(lines[2], "0 ")  # and the process goes on
        self.assertTrue(lines[3].startswith("2 vram could not allocate"), lines[3])
        self.assertEqual(run.stderr, "")  # the line is in the exception, not on stderr

    def test_refuses_without_record_stream(self):
        torch, calls = fake_torch([s for s in ALL_SETTERS if s != "set_record_stream_fn"])
        sys.modules["torch"] = torch
        with self.assertRaises(vram.VramError) as cm:
            vtorch.use()
        self.assertIn("set_record_stream_fn", str(cm.exception))
        self.assertIsNone(calls["current"])  # PyTorch's allocator untouched

    def test_warns_without_graph_hooks(self):
        torch, calls = fake_torch(("set_record_stream_fn",))
        sys.modules["torch"] = torch
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            vtorch.use()
        self.assertTrue(any("CUDA graphs" in str(w.message) for w in seen))
        self.assertIsNotNone(calls["current"])

    def test_refuses_without_pluggable_allocator(self):
        torch, _ = fake_torch()
        del torch.cuda.memory.CUDAPluggableAllocator
        sys.modules["torch"] = torch
        with self.assertRaises(vram.VramError) as cm:
            vtorch.use()
        self.assertIn("CUDAPluggableAllocator", str(cm.exception))


class ShimCacheTest(unittest.TestCase):
    """The compiled shim is code loaded into the process: a cached one that
    is not the user's (or root's), that others may write, or that is a
    link is not used, and a cache directory like that neither; one warning
    each. A stand-in compiler (a shell script that writes its -o file)
    and a stand-in PyTorch with a headers directory make it run anywhere."""

    def setUp(self):
        import shutil
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="vram-shim-cache.")
        self.addCleanup(shutil.rmtree, self.dir, True)
        os.chmod(self.dir, 0o755)
        os.makedirs(os.path.join(self.dir, "torch", "include", "c10"))
        self.torch, _ = fake_torch()
        self.torch.__file__ = os.path.join(self.dir, "torch", "__init__.py")
        self.lib = os.path.join(self.dir, "lib", "libvram.so")
        os.makedirs(os.path.dirname(self.lib))
        os.chmod(os.path.dirname(self.lib), 0o755)
        open(self.lib, "w").close()
        self.cxx = os.path.join(self.dir, "fake-c++")
        with open(self.cxx, "w") as f:
            f.write('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && echo shim >"$2"; '
                    'shift; done\nexit 0\n')
        os.chmod(self.cxx, 0o755)
        saved = os.environ.get("HOME")
        os.environ["HOME"] = os.path.join(self.dir, "home")
        self.addCleanup(lambda: os.environ.__setitem__("HOME", saved) if saved is not None
                        else os.environ.pop("HOME", None))

    @staticmethod
    def text(path):
        with open(path) as f:
            return f.read()

    def shim(self):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            path = vtorch.oom_shim(self.torch, self.lib, compiler=self.cxx)
        return path, [str(w.message) for w in seen if "shim cache" in str(w.message)]

    def test_a_safe_cache_is_used_quietly(self):
        first, said = self.shim()
        self.assertEqual(os.path.dirname(first), os.path.join(self.dir, "lib", "vram-torch-shim"))
        self.assertEqual(os.stat(first).st_mode & 0o777, 0o755)
        self.assertEqual(said, [])
        again, said = self.shim()
        self.assertEqual((again, said), (first, []))

    def test_a_shim_others_may_write_is_built_again(self):
        first, _ = self.shim()
        os.chmod(first, 0o777)
        with open(first, "w") as f:
            f.write("planted")
        path, said = self.shim()
        self.assertEqual(len(said), 1, said)
        self.assertIn("%s is writable by others (mode 0777)" % first, said[0])
        self.assertEqual(self.text(path), "shim\n")  # not the planted one
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o755)

    def test_a_linked_shim_is_not_used(self):
        first, _ = self.shim()
        planted = os.path.join(self.dir, "planted.so")
        with open(planted, "w") as f:
            f.write("planted")
        os.unlink(first)
        os.symlink(planted, first)
        path, said = self.shim()
        self.assertEqual(len(said), 1, said)
        self.assertIn("%s is not a regular file" % first, said[0])
        self.assertEqual(self.text(path), "shim\n")

    def test_a_directory_others_may_write_is_not_used(self):
        first, _ = self.shim()
        cache = os.path.dirname(first)
        os.chmod(cache, 0o777)
        path, said = self.shim()
        self.assertEqual(len(said), 1, said)
        self.assertIn("%s is writable by others (mode 0777)" % cache, said[0])
        self.assertEqual(os.path.dirname(path), os.path.join(self.dir, "home", ".cache", "vram"))

    def test_a_shim_of_another_user_is_not_used(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to give a file to another user")
        first, _ = self.shim()
        os.chown(first, 65534, 65534)
        path, said = self.shim()
        self.assertEqual(len(said), 1, said)
        self.assertIn("%s is owned by uid 65534" % first, said[0])
        self.assertEqual(os.stat(path).st_uid, 0)
        os.chown(os.path.dirname(first), 65534, 65534)
        path, said = self.shim()
        self.assertEqual(len(said), 1, said)
        self.assertIn("vram-torch-shim is owned by uid 65534", said[0])
        self.assertEqual(os.path.dirname(path), os.path.join(self.dir, "home", ".cache", "vram"))


if __name__ == "__main__":
    unittest.main()
