#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""python_checks.py -- the Python package (python/vram) with PyTorch on a real GPU.

Run on the GPU machine, from the repository root, after building
build-gpu/lib/libvram.so:

    python3 bench/gpu/python_checks.py [--lib build-gpu/lib/libvram.so]

A child process plugs vram into PyTorch (CUDAPluggableAllocator over
LIB: VRAM_BACKEND=cuda, VRAM_STRATEGY=expandable, VRAM_TRACE=a .csv.gz)
and checks, through the package:
  plugin       PyTorch's allocator backend is "pluggable" and the package
               reads the plug-in's device
  tensors      vram.get_memory_info(0) current follows torch.empty tensors
               (their bytes, rounded up to 256 each) as they are made and
               freed; peak >= current; reset_memory_stats sets peak to current
  steps        StepMemoryHook over 3 training steps of a small MLP records
               3 steps with current > 0 and peak >= current
  trace        after the child exits, its trace (finished at exit) holds the
               marks "tensors", "step 0".."step 2", "done" in order, with
               allocations and frees between them
Prints one JSON line with every figure; "ok" is true when every check held.
Exit status: 0 when every check held, 1 when one failed, 2 on bad usage or
when the child could not run.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

from child import run_child

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MiB = 1 << 20

CHILD = r"""
import json, sys, torch
lib = sys.argv[1]
alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "vram_torch_malloc", "vram_torch_free")
torch.cuda.memory.change_current_allocator(alloc)
import vram

res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
res["allocator_backend"] = torch.cuda.memory.get_allocator_backend()
res["package_uses_plugin"] = vram._torch_plugin_in_use()

vram.mark("tensors")
base = vram.get_memory_info(0)["current"]
sizes = [64 * 2**20, 10 * 10**6 + 3, 4 * 2**20 + 100]
ts = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in sizes]
torch.cuda.synchronize()
rounded = sum((n + 255) // 256 * 256 for n in sizes)
info = vram.get_memory_info(0)
res["tensors"] = {"requested": sum(sizes), "expected_delta": rounded,
                  "delta": info["current"] - base, "peak": info["peak"],
                  "current": info["current"]}
del ts[1]
torch.cuda.synchronize()
res["tensors"]["delta_after_free"] = vram.get_memory_info(0)["current"] - base
res["tensors"]["expected_after_free"] = rounded - (sizes[1] + 255) // 256 * 256
vram.reset_memory_stats(0)
after_reset = vram.get_memory_info(0)
res["tensors"]["reset_peak_equals_current"] = after_reset["peak"] == after_reset["current"]
del ts
torch.cuda.synchronize()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(256, 1024, device="cuda")
y = torch.randn(256, 1024, device="cuda")
hook = vram.StepMemoryHook(device=0)
for step in range(3):
    hook(step)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
hook.end()
res["steps"] = hook.records
vram.mark("done")
s = vram.stats(0)
res["stats"] = {k: s[k] for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_reserved",
                                  "peak_bytes_reserved", "num_allocs", "num_frees",
                                  "maps", "unmaps")}
print("RESULT " + json.dumps(res))
"""


def read_trace(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#")]
    return lines[0].split(","), [line.split(",") for line in lines[1:]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build-gpu", "lib", "libvram.so"))
    ap.add_argument("--timeout", type=int, default=240)
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    if not os.path.exists(lib):
        print(json.dumps({"check": "python", "ok": False, "error": "no library at " + lib}))
        return 2

    out = {"check": "python", "lib": lib}
    errors = []
    with tempfile.TemporaryDirectory(prefix="vram-py-gpu-") as tmp:
        trace = os.path.join(tmp, "python.trace.csv.gz")
        env = dict(os.environ, VRAM_LIBRARY=lib, VRAM_BACKEND="cuda",
                   VRAM_STRATEGY="expandable", VRAM_TRACE=trace,
                   PYTHONPATH=os.path.join(ROOT, "python"))
        try:
            result, run = run_child(CHILD, [lib], env, args.timeout)
        except subprocess.TimeoutExpired:
            out.update(ok=False, error="the child ran past %d s" % args.timeout)
            print(json.dumps(out))
            return 2
        if run.returncode != 0 or result is None:
            out.update(ok=False, error="child exit %d" % run.returncode,
                       stderr=run.stderr.strip().splitlines()[-5:])
            print(json.dumps(out))
            return 2
        out.update(result)

        # plugin
        if result["allocator_backend"] != "pluggable":
            errors.append("allocator backend is %r" % result["allocator_backend"])
        if not result["package_uses_plugin"]:
            errors.append("the package did not detect the plug-in")
        # tensors
        t = result["tensors"]
        if t["delta"] != t["expected_delta"]:
            errors.append("current grew by %d, expected %d" % (t["delta"], t["expected_delta"]))
        if t["delta_after_free"] != t["expected_after_free"]:
            errors.append("after a free: %d, expected %d" % (t["delta_after_free"],
                                                             t["expected_after_free"]))
        if t["peak"] < t["current"]:
            errors.append("peak below current")
        if not t["reset_peak_equals_current"]:
            errors.append("reset_memory_stats left peak != current")
        # steps
        steps = result["steps"]
        if [r["step"] for r in steps] != [0, 1, 2]:
            errors.append("steps recorded: %r" % [r["step"] for r in steps])
        for r in steps:
            if not (r["current"] > 0 and r["peak"] >= r["current"]):
                errors.append("step %s: current %d, peak %d" % (r["step"], r["current"],
                                                                r["peak"]))
        # trace (the child has exited: the plug-in finished it)
        try:
            header, events = read_trace(trace)
            marks = [e[6] for e in events if e[1] == "m"]
            ops = [e[1] for e in events]
            out["trace"] = {"events": len(events), "marks": marks,
                            "a": ops.count("a"), "f": ops.count("f"), "o": ops.count("o")}
            if header != ["t_us", "op", "id", "size", "stream", "device", "label"]:
                errors.append("trace header %r" % header)
            if marks != ["tensors", "step 0", "step 1", "step 2", "done"]:
                errors.append("trace marks %r" % marks)
            first, last = ops.index("m"), len(ops) - 1 - ops[::-1].index("m")
            if "a" not in ops[first:last] or "f" not in ops[first:last]:
                errors.append("no allocations between the marks")
        except (OSError, EOFError, ValueError, IndexError) as e:
            errors.append("trace: %s" % e)

    out["errors"] = errors
    out["ok"] = not errors
    print(json.dumps(out))
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
