# SPDX-License-Identifier: MIT
"""child.py -- run a piece of Python in a child process and read its result.

Shared by the GPU checks that plug vram into PyTorch (python_checks.py,
plugin_oom.py): PyTorch's allocator can be chosen only once per process,
so each configuration runs in a fresh child, which prints one line
"RESULT <json>" with what it measured.
"""
import json
import subprocess
import sys


def run_child(code, args, env, timeout):
    """Run CODE (a string) with sys.argv[1:] = ARGS under ENV.

    Returns (result, run): the dict of the child's "RESULT " line (None if it
    printed none) and the subprocess.CompletedProcess. Raises
    subprocess.TimeoutExpired past TIMEOUT seconds.
    """
    run = subprocess.run([sys.executable, "-c", code] + list(args), env=env,
                         capture_output=True, text=True, timeout=timeout)
    result = None
    for line in run.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    return result, run
