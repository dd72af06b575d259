#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""plugin_oom.py -- what PyTorch does when vram, plugged in, is out of memory.

Run on the GPU machine, from the repository root, after building
build-gpu/lib/libvram.so:

    python3 bench/gpu/plugin_oom.py [--lib build-gpu/lib/libvram.so]

For each strategy (expandable, growth) a child process plugs vram into
PyTorch (CUDAPluggableAllocator; VRAM_BACKEND=cuda, VRAM_MEMORY_LIMIT=1G) and:
  fits      allocates 512 MiB and writes it
  refused   asks for 2 GiB more: past the cap, vram_torch_malloc returns
            NULL; records what PyTorch makes of it (the exception's type and
            first line, or "no exception" and whether the tensor's pointer
            is NULL)
  recovers  frees the 512 MiB, then allocates and writes 768 MiB: the
            process goes on after the refusal
and what vram wrote on stderr. Prints one JSON line; "ok" is true when, for
every strategy, vram explained the refusal in one line on stderr and the
process recovered; "pytorch_raises" when PyTorch also turned the refusal
into an exception (PyTorch 2.11 does not: the tensor's pointer is NULL).
Exit status: 0 when ok, 1 when not, 2 when a child could not run.
"""
import argparse
import json
import os
import subprocess
import sys

from child import run_child

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

CHILD = r"""
import json, sys, torch
lib = sys.argv[1]
alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "vram_torch_malloc", "vram_torch_free")
torch.cuda.memory.change_current_allocator(alloc)
MiB = 2**20
res = {}
a = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
a.fill_(1)
torch.cuda.synchronize()
res["fits"] = True
try:
    b = torch.empty(2048 * MiB, dtype=torch.uint8, device="cuda")
    res["refused"] = {"exception": None, "data_ptr_is_null": b.data_ptr() == 0}
    del b
except Exception as e:
    res["refused"] = {"exception": type(e).__name__,
                      "message": str(e).strip().splitlines()[0][:200]}
del a
c = torch.empty(768 * MiB, dtype=torch.uint8, device="cuda")
c.fill_(2)
torch.cuda.synchronize()
res["recovers"] = int(c[-1].item()) == 2
print("RESULT " + json.dumps(res), flush=True)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build-gpu", "lib", "libvram.so"))
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    if not os.path.exists(lib):
        print(json.dumps({"check": "plugin_oom", "ok": False, "error": "no library at " + lib}))
        return 2
    out = {"check": "plugin_oom", "strategies": {}}
    ok = raise_all = True
    for strategy in ("expandable", "growth"):
        env = dict(os.environ, VRAM_BACKEND="cuda", VRAM_STRATEGY=strategy,
                   VRAM_MEMORY_LIMIT="1G")
        try:
            result, run = run_child(CHILD, [lib], env, args.timeout)
        except subprocess.TimeoutExpired:
            out.update(ok=False, error="%s: the child ran past %d s" % (strategy, args.timeout))
            print(json.dumps(out))
            return 2
        vram_lines = [l for l in run.stderr.splitlines() if l.startswith("vram:")]
        r = {"exit": run.returncode, "result": result, "vram_stderr": vram_lines[:3]}
        if result is None:
            r["stderr_tail"] = run.stderr.strip().splitlines()[-5:]
        good = (result is not None and run.returncode == 0 and result.get("fits")
                and result.get("recovers") and len(vram_lines) == 1)
        raises = result is not None and result["refused"].get("exception") is not None
        r["ok"] = bool(good)
        r["pytorch_raises"] = raises
        ok = ok and bool(good)
        raise_all = raise_all and raises
        out["strategies"][strategy] = r
    out["ok"] = ok
    out["pytorch_raises"] = raise_all
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
