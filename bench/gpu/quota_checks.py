#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""quota_checks.py -- the quota enforcer on a real GPU, with real frameworks.

Run by tests/gpu/run.sh on the GPU machine:

    python3 bench/gpu/quota_checks.py --vram build-gpu/bin/vram --out results.json

Each check starts fresh processes under `vram run --limit ...` (the preload
library is found next to the vram binary) and reports what the framework
saw. Checks:
  torch_total      torch.cuda.mem_get_info() total equals the quota
  torch_oom        allocating past the quota raises torch.OutOfMemoryError
  torch_expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is counted
  jax_prealloc     JAX's default preallocation is 75% of the quota
  cupy             CuPy reports the quota and raises OutOfMemoryError past it
  group_share      two processes in one group share one quota
  gpt2_overhead    GPT-2 small step time with and without the preload (< 1%,
                   median of 3 interleaved rounds)
Prints one JSON object with every result; exits 0 even when a check fails
(the caller judges), 2 on bad usage.
"""
import argparse
import json
import os
import subprocess
import sys
import time

GiB = 1 << 30
QUOTA = 4 * GiB

TORCH_TOTAL = r"""
import json, torch
free, total = torch.cuda.mem_get_info()
res = {"total": total, "free": free}
x = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
try:
    y = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
    res["oom"] = False
except torch.OutOfMemoryError as e:
    res["oom"] = True
    res["error"] = str(e).splitlines()[0][:200]
print("RESULT " + json.dumps(res))
"""

TORCH_HOLD = r"""
import json, sys, torch
x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("READY", flush=True)
sys.stdin.read()          # hold the memory until the parent closes stdin
print("RESULT " + json.dumps({"held": int(sys.argv[1])}))
"""

TORCH_TRY = r"""
import json, sys, torch
res = {}
for n in sys.argv[1:]:
    try:
        t = torch.empty(int(n), dtype=torch.uint8, device="cuda")
        del t
        torch.cuda.empty_cache()
        res[n] = "ok"
    except torch.OutOfMemoryError:
        res[n] = "oom"
print("RESULT " + json.dumps(res))
"""

JAX_PREALLOC = r"""
import json, jax, jax.numpy as jnp
d = jax.devices()[0]
x = jnp.ones((1024,), dtype=jnp.float32).block_until_ready()
stats = d.memory_stats() or {}
print("RESULT " + json.dumps({"bytes_limit": stats.get("bytes_limit"),
                              "bytes_reserved": stats.get("bytes_reserved")}))
"""

CUPY = r"""
import json, cupy
free, total = cupy.cuda.runtime.memGetInfo()
res = {"total": total, "free": free}
pool = cupy.get_default_memory_pool()
a = cupy.empty(3 * 2**30, dtype=cupy.uint8)
try:
    b = cupy.empty(2 * 2**30, dtype=cupy.uint8)
    res["oom"] = False
except cupy.cuda.memory.OutOfMemoryError as e:
    res["oom"] = True
    res["error"] = str(e).splitlines()[0][:200]
print("RESULT " + json.dumps(res))
"""


def result_of(stdout):
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return None


def run(cmd, env=None, timeout=300):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return {"rc": p.returncode, "seconds": round(time.time() - t0, 1),
            "result": result_of(p.stdout),
            "stderr_tail": p.stderr.strip().splitlines()[-3:]}


def under_vram(vram, limit, group, code, *args, env=None):
    cmd = [vram, "run", "--limit", limit]
    if group:
        cmd += ["--group", group]
    return cmd + ["--", sys.executable, "-c", code] + list(args)


def check_torch_total(vram):
    r = run(under_vram(vram, "4G", None, TORCH_TOTAL))
    res = r["result"] or {}
    r["pass_total"] = res.get("total") == QUOTA
    r["pass_oom"] = res.get("oom") is True
    return r


def check_torch_expandable(vram):
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    r = run(under_vram(vram, "4G", None, TORCH_TOTAL), env=env)
    res = r["result"] or {}
    r["pass"] = res.get("oom") is True and res.get("total") == QUOTA
    return r


def check_jax(vram):
    env = dict(os.environ)
    for k in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
        env.pop(k, None)
    r = run(under_vram(vram, "4G", None, JAX_PREALLOC), env=env)
    res = r["result"] or {}
    lim = res.get("bytes_limit")
    r["ratio"] = None if not lim else round(lim / QUOTA, 4)
    r["pass"] = r["ratio"] is not None and 0.70 <= r["ratio"] <= 0.76
    return r


def check_cupy(vram):
    r = run(under_vram(vram, "4G", None, CUPY))
    res = r["result"] or {}
    r["pass"] = res.get("total") == QUOTA and res.get("oom") is True
    return r


def check_group_share(vram):
    group = "share-%d" % os.getpid()
    holder = subprocess.Popen(under_vram(vram, "4G", group, TORCH_HOLD, str(3 * GiB)),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    ready = holder.stdout.readline().strip() == "READY"
    other = run(under_vram(vram, "4G", group, TORCH_TRY, str(2 * GiB), str(GiB // 2)))
    holder.stdin.close()
    holder.wait(timeout=60)
    res = other["result"] or {}
    return {"holder_ready": ready, "other": other,
            "pass": ready and res.get(str(2 * GiB)) == "oom" and res.get(str(GiB // 2)) == "ok"}


def check_gpt2_overhead(vram, lib_dir, rounds=3):
    """GPT-2 small's median step time with and without the preload, in
    ROUNDS interleaved rounds (the order alternating), so that each ratio
    compares runs of the same minute: a process's step time moves by
    several per cent from one run to the next on the device machine. The
    verdict takes the median of the rounds' ratios."""
    out = {"rounds": []}
    for k in range(rounds):
        one = {}
        for mode in (("plain", "preload") if k % 2 == 0 else ("preload", "plain")):
            path = "/tmp/vram_gpt2_%s_%d.json" % (mode, os.getpid())
            cmd = [sys.executable, "bench/gpu/train.py", "--model", "gpt2", "--allocator",
                   "torch", "--steps", "20", "--out", path]
            if mode == "preload":
                cmd = [vram, "run", "--limit", "100G", "--"] + cmd
            r = run(cmd, timeout=400)
            try:
                with open(path) as f:
                    r["train"] = json.load(f)
            except (OSError, ValueError):
                r["train"] = None
            one[mode] = r
        a = (one["plain"].get("train") or {}).get("median_step_s")
        b = (one["preload"].get("train") or {}).get("median_step_s")
        one["diff"] = None if not a or not b else b / a - 1.0
        out["rounds"].append(one)
    diffs = sorted(r["diff"] for r in out["rounds"] if r["diff"] is not None)
    out["diffs"] = [r["diff"] for r in out["rounds"]]
    out["diff"] = None if len(diffs) < rounds else diffs[len(diffs) // 2]
    out["pass"] = out["diff"] is not None and out["diff"] < 0.01
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vram", required=True, help="path to the vram binary")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--only", default="", help="comma list of checks to run")
    a = ap.parse_args()
    checks = {
        "torch_total": lambda: check_torch_total(a.vram),
        "torch_expandable": lambda: check_torch_expandable(a.vram),
        "jax_prealloc": lambda: check_jax(a.vram),
        "cupy": lambda: check_cupy(a.vram),
        "group_share": lambda: check_group_share(a.vram),
        "gpt2_overhead": lambda: check_gpt2_overhead(a.vram, None),
    }
    only = [c for c in a.only.split(",") if c]
    results = {}
    for name, fn in checks.items():
        if only and name not in only:
            continue
        try:
            results[name] = fn()
        except Exception as e:  # one broken check must not hide the others
            results[name] = {"pass": False, "exception": "%s: %s" % (type(e).__name__, e)}
        print("%-18s %s" % (name, json.dumps(results[name])[:400]), flush=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
