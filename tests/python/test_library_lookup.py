# SPDX-License-Identifier: MIT
"""test_library_lookup.py -- which libvram.so the Python package loads.

A copy of the package outside any checkout, in a child interpreter (so the
package imported by the other tests is untouched), with the dynamic
linker's answer and the installed library directories replaced by
temporary ones: the order of the places, and an error that names each.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

CHILD = textwrap.dedent(
    """
    import ctypes.util, json, sys
    sys.path.insert(0, sys.argv[1])
    import vram
    ctypes.util.find_library = lambda name: None
    vram._system_libdirs = lambda: sys.argv[2:]
    try:
        print(json.dumps({"path": vram._library_path()}))
    except vram.VramError as e:
        print(json.dumps({"error": str(e)}))
    """
)


class LibraryLookup(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vram-lookup.")
        self.site = os.path.join(self.tmp, "site")
        shutil.copytree(os.path.join(ROOT, "python", "vram"), os.path.join(self.site, "vram"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        self.libdirs = [os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")]
        for d in self.libdirs:
            os.mkdir(d)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def lookup(self, env_library=None):
        env = {k: v for k, v in os.environ.items() if k != "VRAM_LIBRARY"}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if env_library is not None:
            env["VRAM_LIBRARY"] = env_library
        out = subprocess.run([sys.executable, "-c", CHILD, self.site] + self.libdirs,
                             env=env, capture_output=True, text=True, check=True).stdout
        import json
        return json.loads(out)

    def test_none_found_names_every_place(self):
        error = self.lookup()["error"]
        self.assertTrue(error.startswith("libvram not found; looked at: VRAM_LIBRARY (unset)"), error)
        for place in (os.path.join(self.site, "vram", "libvram.so.0"),
                      os.path.join(self.site, "vram", "libvram.so"),
                      "the dynamic linker's search path",
                      os.path.join(self.libdirs[0], "libvram.so.0"),
                      os.path.join(self.libdirs[1], "libvram.so.0")):
            self.assertIn(place, error)
        self.assertIn("set VRAM_LIBRARY", error)
        # Not in a checkout: no build/lib/libvram.so of one.
        self.assertNotIn(os.path.join("build", "lib"), error)

    def test_installed_library_directory(self):
        lib = os.path.join(self.libdirs[1], "libvram.so.0")
        open(lib, "w").close()
        self.assertEqual(self.lookup(), {"path": lib})

    def test_beside_the_package_first(self):
        open(os.path.join(self.libdirs[0], "libvram.so.0"), "w").close()
        beside = os.path.join(self.site, "vram", "libvram.so.0")
        open(beside, "w").close()
        self.assertEqual(self.lookup(), {"path": beside})

    def test_vram_library_wins(self):
        open(os.path.join(self.site, "vram", "libvram.so.0"), "w").close()
        self.assertEqual(self.lookup("/x/libvram.so"), {"path": "/x/libvram.so"})

    def test_version(self):
        sys.path.insert(0, self.site)
        try:
            out = subprocess.run([sys.executable, "-c", "import vram; print(vram.__version__)"],
                                 env=dict(os.environ, PYTHONPATH=self.site), capture_output=True,
                                 text=True, check=True).stdout.strip()
        finally:
            sys.path.remove(self.site)
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            self.assertIn("project(vram VERSION %s " % out, f.read())


if __name__ == "__main__":
    unittest.main()
