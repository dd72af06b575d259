#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torchperf.py -- vram inside PyTorch: the out-of-memory exception and
empty_cache, against runs without them, on the GPU.

Run on the GPU machine, from the repository root, after building
build-gpu (tests/gpu/run.sh, section torchperf):

    python3 bench/gpu/torchperf.py [--lib build-gpu/lib/libvram.so] [--vram build-gpu/bin/vram]

Each configuration runs in a fresh child process (PyTorch's allocator is
chosen once per process) that plugs vram in with vram.torch.use(strategy=S,
limit="6G") and trains a small MLP (fixed seeds, fixed data) for 20 steps:

  plain        nothing else: the reference losses
  oom          before step 10, asks for 8 GiB (past the 6 GiB cap), catches
               torch.OutOfMemoryError, then trains on
  empty_cache  before step 10, allocates and frees 3 GiB, then calls
               torch.cuda.empty_cache(); records vram's bytes_reserved, the
               device's free memory (cudaMemGetInfo) and `vram stat --json`
               (NVML) before and after; a tensor read by a delayed side stream
               (record_stream) is freed just before, and its result checked;
               then trains on

for S in expandable and growth. Prints one JSON line with every figure and
a verdict per check:

  oom_raised      torch.OutOfMemoryError was raised (not a tensor at 0)
  oom_message     its message carries vram's line ("out of memory on GPU:0")
  oom_survives    the child exited 0 after training on
  oom_losses      its losses equal the plain run's (within 1e-6 relative)
  release_drop    bytes_reserved dropped by at least 90 % of what was idle
                  (reserved less in use, over 2 GiB after the 3 GiB freed), and
                  the device's free memory rose by at least 90 % of the drop
  release_stat    `vram stat` (NVML's used memory) shows the drop likewise
  release_stream  the side stream's result is right
  release_losses  training after empty_cache gives the plain run's losses
Exit status: 0 when every check passed, 1 when one did not, 2 when a child
could not run.
"""
import argparse
import json
import os
import subprocess
import sys

from child import run_child

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GiB, MiB = 1 << 30, 1 << 20

CHILD = r"""
import json, os, subprocess, sys, time
mode, strategy, vram_bin = sys.argv[1], sys.argv[2], sys.argv[3]
import torch
import vram, vram.torch
t0 = time.time()
alloc = vram.torch.use(strategy=strategy, limit="6G")
res = {"mode": mode, "strategy": strategy, "use_s": round(time.time() - t0, 2)}
torch.backends.cudnn.deterministic = True
torch.use_deterministic_algorithms(True, warn_only=True)
torch.manual_seed(0)
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
gen = torch.Generator(device=dev)
gen.manual_seed(1)
x = torch.randn(512, 1024, device=dev, generator=gen)
y = torch.randn(512, 1024, device=dev, generator=gen)

def stat_used():
    try:
        out = subprocess.run([vram_bin, "stat", "--json"], capture_output=True, text=True,
                             timeout=30).stdout
        j = json.loads(out)
        devs = j.get("devices") or []
        procs = [p for p in j.get("processes") or [] if p.get("pid") == os.getpid()]
        return {"nvml": j.get("nvml"), "device_used": devs[0]["used_bytes"] if devs else None,
                "process_used": procs[0]["used_bytes"] if procs else None}
    except Exception as e:
        return {"error": repr(e)[:200]}

def snapshot():
    torch.cuda.synchronize()
    s = vram.stats(0)
    free, total = torch.cuda.mem_get_info()
    return {"reserved": s["bytes_reserved"], "in_use": s["bytes_in_use"],
            "device_free": free, "stat": stat_used()}

losses = []
for step in range(20):
    if step == 10 and mode == "oom":
        try:
            big = torch.empty(8 << 30, dtype=torch.uint8, device=dev)
            res["oom"] = {"raised": None, "data_ptr_is_null": big.data_ptr() == 0}
            del big
        except Exception as e:
            res["oom"] = {"raised": type(e).__name__,
                          "is_torch_oom": isinstance(e, torch.OutOfMemoryError),
                          "message": str(e).strip().splitlines()[0][:400]}
    if step == 10 and mode == "empty_cache":
        side = torch.cuda.Stream()
        a = torch.full((16 << 20,), 3.0, device=dev)   # 64 MiB
        torch.cuda.synchronize()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)             # ~0.1 s: a is read late
            out = a * 2
        a.record_stream(side)
        tmp = [torch.empty(512 << 20, dtype=torch.uint8, device=dev) for _ in range(6)]
        for t in tmp:
            t.fill_(1)
        torch.cuda.synchronize()
        del tmp
        del a
        before = snapshot()
        t1 = time.time()
        torch.cuda.empty_cache()
        took = time.time() - t1
        c = torch.full((16 << 20,), 7.0, device=dev)   # may land where a was
        side.synchronize()
        after = snapshot()
        res["empty_cache"] = {"before": before, "after": after, "seconds": round(took, 4),
                              "side_stream_ok": bool(out.eq(6.0).all().item()),
                              "release_idle_again": vram.release_idle(0)}
        del c, out
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(float(loss.item()))
torch.cuda.synchronize()
res["losses"] = losses
res["allocation_function"] = getattr(alloc, "_vram_alloc_fn", None)
print("RESULT " + json.dumps(res), flush=True)
"""


def same_losses(a, b):
    """Both runs complete and their losses equal within 1e-6 x max(1, |loss|)
    (deterministic kernels: in practice bit for bit)."""
    if not a or not b or len(a) != len(b):
        return False
    scale = max([1.0] + [abs(x) for x in a])
    return max(abs(x - y) for x, y in zip(a, b)) <= 1e-6 * scale


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build-gpu", "lib", "libvram.so"))
    ap.add_argument("--vram", default=os.path.join(ROOT, "build-gpu", "bin", "vram"))
    ap.add_argument("--timeout", type=int, default=150)
    ap.add_argument("--strategies", default="expandable,growth")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    out = {"check": "torchperf", "runs": {}, "checks": {}}
    if not os.path.exists(lib):
        out.update(ok=False, error="no library at " + lib)
        print(json.dumps(out))
        return 2
    env = dict(os.environ, VRAM_LIBRARY=lib, VRAM_BACKEND="cuda",
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""), CUBLAS_WORKSPACE_CONFIG=":4096:8")
    broken = False
    for s in args.strategies.split(","):
        for mode in ("plain", "oom", "empty_cache"):
            key = "%s/%s" % (s, mode)
            try:
                result, run = run_child(CHILD, [mode, s, os.path.abspath(args.vram)], env,
                                        args.timeout)
            except subprocess.TimeoutExpired:
                out["runs"][key] = {"error": "ran past %d s" % args.timeout}
                broken = True
                continue
            r = {"exit": run.returncode, "result": result,
                 "vram_stderr": [l for l in run.stderr.splitlines() if l.startswith("vram:")][:3]}
            if result is None:
                r["stderr_tail"] = run.stderr.strip().splitlines()[-8:]
            out["runs"][key] = r
        runs = {m: out["runs"].get("%s/%s" % (s, m)) or {} for m in ("plain", "oom", "empty_cache")}
        res = {m: (runs[m].get("result") or {}) for m in runs}
        plain = res["plain"].get("losses")
        oom = res["oom"].get("oom") or {}
        c = {}
        c["oom_raised"] = bool(oom.get("is_torch_oom"))
        c["oom_message"] = "out of memory on GPU:0" in (oom.get("message") or "")
        c["oom_survives"] = runs["oom"].get("exit") == 0 and res["oom"].get("losses") is not None
        c["oom_losses"] = same_losses(plain, res["oom"].get("losses"))
        ec = res["empty_cache"].get("empty_cache") or {}
        b, a = ec.get("before") or {}, ec.get("after") or {}
        drop = (b.get("reserved") or 0) - (a.get("reserved") or 0)
        rise = (a.get("device_free") or 0) - (b.get("device_free") or 0)
        # Everything idle goes back: what was reserved beyond what was in use
        # (the 3 GiB freed, less what later allocations of the step took),
        # and the device's free memory rises by as much.
        idle = (b.get("reserved") or 0) - (b.get("in_use") or 0)
        c["release_drop"] = idle > 2 * GiB and drop >= 0.9 * idle and rise >= 0.9 * drop
        sb, sa = (b.get("stat") or {}), (a.get("stat") or {})
        if sb.get("device_used") is not None and sa.get("device_used") is not None:
            c["release_stat"] = drop > 0 and sb["device_used"] - sa["device_used"] >= 0.9 * drop
        else:
            c["release_stat"] = False
        c["release_stream"] = bool(ec.get("side_stream_ok"))
        c["release_losses"] = same_losses(plain, res["empty_cache"].get("losses"))
        out["checks"][s] = c
        out.setdefault("figures", {})[s] = {
            "reserved_drop_bytes": drop, "device_free_rise_bytes": rise,
            "stat_used_drop_bytes": (sb.get("device_used") or 0) - (sa.get("device_used") or 0),
            "empty_cache_seconds": ec.get("seconds"), "oom_message": oom.get("message"),
            "use_seconds": res["plain"].get("use_s")}
    ok = not broken and all(v for c in out["checks"].values() for v in c.values())
    out["ok"] = ok
    print(json.dumps(out))
    return 2 if broken else (0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
