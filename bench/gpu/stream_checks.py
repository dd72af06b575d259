#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""stream_checks.py -- vram as PyTorch's allocator keeps results right across
streams and CUDA graphs: each scenario's results, bit for bit, against
PyTorch's own allocator in the same run.

Run on the GPU machine, from the repository root, after building
build-gpu/lib/libvram.so:

    python3 bench/gpu/stream_checks.py [--lib build-gpu/lib/libvram.so] [--quick]

Scenarios (each in every configuration below, in a child process, since
PyTorch's allocator can be chosen once per process):
  side_stream   a tensor made on the main stream is read on a side stream
                (record_stream), freed on the main stream, and the next tensor
                of its size is written there at once
  h2d_copy      non-blocking host-to-device copies on a copy stream, consumed
                on the main stream (record_stream), the next copy at once
  two_streams   one tensor read by two side streams of different lengths
  train_overlap a training loop whose side stream computes statistics of each
                step's activations while the next step runs
  cuda_graph    a model captured with torch.cuda.graph and replayed, with
                other tensors allocated between replays
The side streams' reads are delayed with torch.cuda._sleep, so that a block
reused too early is overwritten before it is read.

Configurations:
  torch, torch2       PyTorch's allocator (twice: its results are the reference
                      and must repeat exactly)
  vram_expandable,    vram through vram.torch.use(): every hook installed
  vram_growth
  vram_nohooks        vram plugged in the old way (CUDAPluggableAllocator +
                      change_current_allocator, no hooks): shows that the
                      scenarios catch the bug -- its results should differ
Also measured: host time of record_stream + free + allocate (vram vs torch)
and vram's driver calls in train_overlap's last steps (must be 0).

Prints one JSON line; "ok" when both vram configurations match torch bit for
bit in every scenario and make no driver call in the steady steps. Exit
status 0 when ok, 1 when not, 2 when a child could not run.
"""
import argparse
import json
import os
import subprocess
import sys

from child import run_child

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

CHILD = r"""
import hashlib, json, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[3], "python"))
import torch
mode, lib, quick = sys.argv[1], sys.argv[2], sys.argv[4] == "1"
if mode.startswith("vram_") and mode != "vram_nohooks":
    import vram.torch
    vram.torch.use(strategy=mode[len("vram_"):], library=lib)
elif mode == "vram_nohooks":
    a = torch.cuda.memory.CUDAPluggableAllocator(lib, "vram_torch_malloc", "vram_torch_free")
    torch.cuda.memory.change_current_allocator(a)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")
SLEEP = 20_000_000 if quick else 60_000_000   # cycles: tens of ms
N = 1 << 22                                    # 16 MiB of float32

def digest(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:16]

def gen(seed):
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    return g

def side_stream():
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    outs = []
    for i in range(4):
        x = torch.randn(N, device=dev, generator=gen(i))
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP)
            out = x * 2.0 + 1.0
        x.record_stream(side)
        del x
        y = torch.full((N,), 7.0, device=dev)      # main: may reuse x's memory
        main.wait_stream(side)
        outs.append(out + 0.0)
        del y, out
    torch.cuda.synchronize()
    return digest(*outs)

def h2d_copy():
    main, copy = torch.cuda.current_stream(), torch.cuda.Stream()
    hosts = [torch.randn(N, generator=torch.Generator().manual_seed(10 + i)).pin_memory()
             for i in range(4)]
    outs = []
    for h in hosts:
        with torch.cuda.stream(copy):
            d = h.to(dev, non_blocking=True)
        main.wait_stream(copy)
        d.record_stream(main)
        torch.cuda._sleep(SLEEP)                   # main consumes late
        outs.append(d * 3.0)
        del d                                      # next copy may reuse it at once
    torch.cuda.synchronize()
    return digest(*outs)

def two_streams():
    main, s1, s2 = torch.cuda.current_stream(), torch.cuda.Stream(), torch.cuda.Stream()
    outs = []
    for i in range(3):
        x = torch.randn(N, device=dev, generator=gen(20 + i))
        s1.wait_stream(main)
        s2.wait_stream(main)
        with torch.cuda.stream(s1):
            torch.cuda._sleep(SLEEP // 4)
            a = x + 1.0
        with torch.cuda.stream(s2):
            torch.cuda._sleep(SLEEP)
            b = x * x
        x.record_stream(s1)
        x.record_stream(s2)
        del x
        y = torch.full((N,), -1.0, device=dev)
        z = torch.full((N,), -2.0, device=dev)
        main.wait_stream(s1)
        main.wait_stream(s2)
        outs += [a + 0.0, b + 0.0]
        del a, b, y, z
    torch.cuda.synchronize()
    return digest(*outs)

def model_and_data(seed, width=1024):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                            torch.nn.Linear(width, width), torch.nn.ReLU(),
                            torch.nn.Linear(width, 16)).to(dev)
    xs = [torch.randn(256, width, device=dev, generator=gen(seed + k)) for k in range(4)]
    return m, xs

def train_overlap():
    # No synchronize inside the loop: the side stream's statistics of step
    # k run while step k+1 allocates on the main stream. The side stream's
    # work (a sleep) is longer than a step's, so the main stream waits for
    # the side's step k-2 before step k, as a real pipeline bounds its lag:
    # without that the side would fall further behind every step, and any
    # allocator would need new memory for the ever longer queue of blocks
    # still in use there. For the same reason the host stays at most three
    # steps ahead of the device, as a loop that reads its loss does: with
    # the host unboundedly ahead (no wait at all), the blocks of every
    # queued step are in use and no allocator reaches a steady state (the
    # growth strategy then made 6 backend calls in the last 15 of 30 steps
    # on the H200, expandable none).
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    done, stepped = [], []
    m, xs = model_and_data(30)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
    stats, calls = [], []
    steps = 12 if quick else 30
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(steps):
        if step >= 2:
            main.wait_event(done[step - 2])
        if step >= 3:
            stepped[step - 3].synchronize()
        x = xs[step % len(xs)]
        h = m[1](m[0](x))                          # the activations the side reads
        loss = m[4](m[3](m[2](h))).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        stepped.append(torch.cuda.Event())
        stepped[-1].record(main)
        act = h.detach()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP // 2)
            stats.append((act * act).sum(dim=1))
            done.append(torch.cuda.Event())
            done[-1].record(side)
        act.record_stream(side)
        del act, h, loss
        if mode.startswith("vram"):
            import vram
            calls.append(vram.stats(0)["backend_calls"])
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    res = {"digest": digest(torch.stack(stats), *[p for p in m.parameters()]),
           "mean_step_ms": elapsed / steps * 1e3}
    if calls:
        res["steady_backend_calls"] = calls[-1] - calls[steps // 2]
    return res

def cuda_graph():
    m, xs = model_and_data(40, width=512)
    static_in = torch.zeros_like(xs[0])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):                    # warm-up, as PyTorch documents
        for _ in range(3):
            static_out = m(static_in).relu()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = m(static_in).relu() * 2.0
    kept = []
    for i in range(8):
        static_in.copy_(xs[i % len(xs)] * (1.0 + i))
        g.replay()
        kept.append(static_out.clone())            # allocated between replays
        junk = [torch.full((256, 512), float(i), device=dev) for _ in range(4)]
        del junk
    torch.cuda.synchronize()
    out = digest(*kept)
    del g, static_out
    return out

def cost():
    # host time of allocate + record_stream + free (no GPU work in between)
    side = torch.cuda.Stream()
    n = 2000
    for _ in range(50):
        x = torch.empty(1 << 20, device=dev)
        x.record_stream(side)
        del x
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x = torch.empty(1 << 20, device=dev)
        x.record_stream(side)
        del x
    t = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    return t * 1e9

res = {"mode": mode}
for name, fn in (("side_stream", side_stream), ("h2d_copy", h2d_copy),
                 ("two_streams", two_streams), ("train_overlap", train_overlap),
                 ("cuda_graph", cuda_graph), ("cost_ns", cost)):
    try:
        res[name] = fn()
    except Exception as e:
        res[name] = {"error": "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:200]
                                          if str(e).strip() else "")}
        torch.cuda.synchronize()
print("RESULT " + json.dumps(res), flush=True)
"""

SCENARIOS = ("side_stream", "h2d_copy", "two_streams", "train_overlap", "cuda_graph")
MODES = ("torch", "torch2", "vram_expandable", "vram_growth", "vram_nohooks")


def value(r):
    """The comparable result of a scenario (its digest), or None."""
    if isinstance(r, dict):
        return r.get("digest")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build-gpu", "lib", "libvram.so"))
    ap.add_argument("--timeout", type=int, default=180)
    ap.add_argument("--quick", action="store_true", help="shorter sleeps and loops")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    if not os.path.exists(lib):
        print(json.dumps({"check": "streams", "ok": False, "error": "no library at " + lib}))
        return 2
    runs, errors = {}, {}
    for mode in MODES:
        env = dict(os.environ, VRAM_BACKEND="cuda", VRAM_LIBRARY=lib, PYTHONUNBUFFERED="1")
        try:
            result, run = run_child(CHILD, [mode, lib, ROOT, "1" if args.quick else "0"],
                                    env, args.timeout)
        except subprocess.TimeoutExpired:
            result, run = None, None
            errors[mode] = "ran past %d s" % args.timeout
        if result is None:
            errors.setdefault(mode, (run.stderr.strip().splitlines() or ["no result"])[-1][:300]
                              if run is not None else "no result")
            continue
        runs[mode] = result
    ref = runs.get("torch", {})
    out = {"check": "streams", "runs": runs, "errors": errors, "scenarios": {}}
    ok = "torch" in runs and all(m in runs for m in ("vram_expandable", "vram_growth"))
    for s in SCENARIOS:
        want = value(ref.get(s))
        row = {"torch_repeats": want is not None and value(runs.get("torch2", {}).get(s)) == want}
        for m in ("vram_expandable", "vram_growth", "vram_nohooks"):
            got = value(runs.get(m, {}).get(s))
            row[m] = None if want is None else got == want
        # The bug shows without the hooks (a differing or failed result).
        row["caught_without_hooks"] = row["vram_nohooks"] is False
        ok = ok and want is not None and row["vram_expandable"] is True and \
            row["vram_growth"] is True
        out["scenarios"][s] = row
    for m in ("vram_expandable", "vram_growth"):
        t = runs.get(m, {}).get("train_overlap")
        calls = t.get("steady_backend_calls") if isinstance(t, dict) else None
        out.setdefault("steady_backend_calls", {})[m] = calls
        ok = ok and calls == 0
    out["cost_ns"] = {m: r.get("cost_ns") for m, r in runs.items()}
    out["step_ms"] = {m: (r.get("train_overlap") or {}).get("mean_step_ms")
                      if isinstance(r.get("train_overlap"), dict) else None
                      for m, r in runs.items()}
    out["ok"] = bool(ok)
    print(json.dumps(out))
    return 0 if ok else (2 if errors.keys() & {"torch", "vram_expandable", "vram_growth"} else 1)


if __name__ == "__main__":
    sys.exit(main())
