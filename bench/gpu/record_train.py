#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""record_train.py -- a small training loop with a planted leak (or none),
for `vram record` on the GPU (tests/gpu/run.sh, section record).

    python3 bench/gpu/record_train.py --framework torch|jax|fake --case CASE \
        [--steps N] --out FILE.json

Cases:
  kept_logits   each step keeps its logits for a metric: 64 x 1000 float32,
                256,000 bytes (250 KB) a step, never freed
  step_cache    each step caches a mask: 1 MiB (1,048,576 bool) a step
  clean         nothing kept
  bounded       a cache of 4 MiB masks filled during the first 5 steps,
                then full (no growth after)
  varlen        batches of 32..128 rows, drawn from a fixed seed (JAX: padded
                to a multiple of 32 rows, as JAX programs bucket their
                shapes: one compilation per bucket, not per length)

The framework "fake" is the same loop without a framework, for a dry run
of the section on the CPU (tests/fakecuda's driver on LD_LIBRARY_PATH): each
array is one cuMemAlloc_v2 of its own size, called through the process's
global symbols (so that vram record's hook sees it, as it sees a
framework's), after a warm-up like a JIT compiler's (rounds of trial
workspaces), and everything is freed at the end like an interpreter's
teardown; its own count of live bytes is its figure.

The ground truth is the framework's own count, independent of vram: for
PyTorch torch.cuda.memory_allocated() after each step (synchronized); for
JAX the sum of the live arrays' bytes (jax.live_arrays()) after each step.
Its least-squares slope over steps 2..N-1 is written as
truth_bytes_per_step, with the planted bytes a step (planted_bytes) and
the median step time in ms (without the first 3). The planted line is
written as planted_line ("record_train.py:NN") for the call-site check.
Exit status 0 ok, 1 failure (the JSON then holds "error").
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time
import traceback

LOGITS_BYTES = 64 * 1000 * 4
MASK_BYTES = 1 << 20


def slope(ys):
    xs = list(range(len(ys)))
    if len(ys) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


class DriverUsed:
    """The device's used bytes (total - free) from libcuda's own
    cuMemGetInfo_v2 (a handle's symbol, so a preloaded hook is bypassed),
    in the primary context the frameworks use. None when unreadable."""

    def __init__(self):
        self.cu = None
        try:
            cu = ctypes.CDLL("libcuda.so.1")
            dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
            if cu.cuInit(0) != 0 or cu.cuDeviceGet(ctypes.byref(dev), 0) != 0:
                return
            if cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0:
                return
            self.cu, self.ctx = cu, ctx
        except (OSError, AttributeError):
            self.cu = None

    def __call__(self):
        if self.cu is None:
            return None
        free, total, popped = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_void_p()
        if self.cu.cuCtxPushCurrent_v2(self.ctx) != 0:
            return None
        rc = self.cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        self.cu.cuCtxPopCurrent_v2(ctypes.byref(popped))
        return int(total.value - free.value) if rc == 0 else None


def line_of(marker):
    """The line of this file holding MARKER (the planted allocation)."""
    with open(os.path.abspath(__file__)) as f:
        for n, text in enumerate(f, 1):
            if marker in text and "line_of" not in text:
                return "record_train.py:%d" % n
    return None


def torch_allocated(torch):
    """PyTorch's allocated bytes; 0 under an allocator that keeps no
    statistics (a pluggable one, such as vram.torch.use: "does not yet
    support getDeviceStats")."""
    try:
        return torch.cuda.memory_allocated()
    except RuntimeError:
        return 0


def run_torch(case, steps):
    import torch
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 1000)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    kept, cache = [], []
    gen = torch.Generator().manual_seed(1)
    allocated, times, used = [], [], []
    driver = DriverUsed()
    for step in range(steps):
        rows = 64
        if case == "varlen":
            rows = int(torch.randint(32, 129, (1,), generator=gen))
        x = torch.randn(rows, 512, device=dev)
        y = torch.randint(0, 1000, (rows,), device=dev)
        torch.cuda.synchronize()
        t = time.perf_counter()
        logits = model(x)  # allocates: kept_logits
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if case == "kept_logits":
            kept.append(logits.detach())  # planted: kept_logits
        elif case == "step_cache":
            cache.append(torch.zeros(MASK_BYTES, dtype=torch.bool, device=dev))  # planted: step_cache
        elif case == "bounded" and len(cache) < 5:
            cache.append(torch.zeros(4 * MASK_BYTES, dtype=torch.bool, device=dev))
        del logits, loss, x, y
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1000.0)
        allocated.append(torch_allocated(torch))
        used.append(driver())
    return allocated, times, used, torch.__version__


def run_jax(case, steps):
    import jax
    import jax.numpy as jnp
    key = jax.random.PRNGKey(0)
    k1, k2 = jax.random.split(key)
    params = {"w1": jax.random.normal(k1, (512, 2048)) * 0.02,
              "w2": jax.random.normal(k2, (2048, 1000)) * 0.02}

    def loss_fn(p, x, y):
        h = jax.nn.relu(x @ p["w1"])
        logits = h @ p["w2"]
        onehot = jax.nn.one_hot(y, 1000)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * onehot, -1)), logits

    @jax.jit
    def step_fn(p, x, y):
        (loss, logits), g = jax.value_and_grad(loss_fn, has_aux=True)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - 1e-3 * b, p, g), loss, logits

    kept, cache = [], []
    allocated, times, used = [], [], []
    driver = DriverUsed()
    rng = jax.random.PRNGKey(1)
    for step in range(steps):
        rows = 64
        rng, kx, ky, kr = jax.random.split(rng, 4)
        if case == "varlen":
            # Padded up to a multiple of 32 rows: step_fn compiles once per
            # bucket (4), not once per length (97: minutes of compiling).
            rows = -(-int(jax.random.randint(kr, (), 32, 129)) // 32) * 32
        x = jax.random.normal(kx, (rows, 512))
        y = jax.random.randint(ky, (rows,), 0, 1000)
        t = time.perf_counter()
        params, loss, logits = step_fn(params, x, y)  # allocates: kept_logits
        loss.block_until_ready()
        if case == "kept_logits":
            kept.append(logits)  # planted: kept_logits
        elif case == "step_cache":
            cache.append(jnp.zeros((MASK_BYTES,), dtype=jnp.bool_).block_until_ready())  # planted: step_cache
        elif case == "bounded" and len(cache) < 5:
            cache.append(jnp.zeros((4 * MASK_BYTES,), dtype=jnp.bool_).block_until_ready())
        del logits, loss, x, y
        times.append((time.perf_counter() - t) * 1000.0)
        allocated.append(sum(a.nbytes for a in jax.live_arrays()))
        used.append(driver())
    return allocated, times, used, jax.__version__


def run_fake(case, steps):
    ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    cu = ctypes.CDLL(None)  # the global scope: a preloaded hook comes first
    cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cu.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    cu.cuInit(0)
    dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cu.cuCtxPushCurrent_v2(ctx)
    live = {}

    def alloc(size):
        p = ctypes.c_uint64()
        if cu.cuMemAlloc_v2(ctypes.byref(p), size) != 0:
            raise MemoryError("cuMemAlloc_v2 of %d bytes" % size)
        live[p.value] = size
        return p.value

    def free(p):
        cu.cuMemFree_v2(p)
        del live[p]

    params = [alloc(512 * 2048 * 4), alloc(2048 * 1000 * 4)]
    for _ in range(8):  # a compiler's autotuning: trial workspaces
        for trial in range(11):
            a, b = alloc((34 + (trial % 3) * 18) << 20), alloc(2 << 20)
            free(b)
            free(a)
    kept, cache, allocated, times, used = [], [], [], [], []
    driver = DriverUsed()
    seed = 1
    for step in range(steps):
        rows = 64
        if case == "varlen":
            seed = (seed * 1103515245 + 12345) % (1 << 31)
            rows = 32 + seed % 97
        t = time.perf_counter()
        x, y = alloc(rows * 512 * 4), alloc(rows * 4)
        h = alloc(rows * 2048 * 4)
        grads = [alloc(512 * 2048 * 4), alloc(2048 * 1000 * 4)]
        logits = alloc(rows * 1000 * 4)  # allocates: kept_logits
        new = [alloc(512 * 2048 * 4), alloc(2048 * 1000 * 4)]
        for g in grads + [h] + params:
            free(g)
        params = new
        if case == "kept_logits":
            kept.append(logits)  # planted: kept_logits
        else:
            free(logits)
        if case == "step_cache":
            cache.append(alloc(MASK_BYTES))  # planted: step_cache
        elif case == "bounded" and len(cache) < 5:
            cache.append(alloc(4 * MASK_BYTES))
        free(x)
        free(y)
        times.append((time.perf_counter() - t) * 1000.0)
        allocated.append(sum(live.values()))
        used.append(driver())
    for p in list(live):  # the teardown
        free(p)
    return allocated, times, used, "fake"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", choices=("torch", "jax", "fake"), required=True)
    ap.add_argument("--case", choices=("kept_logits", "step_cache", "clean", "bounded",
                                       "varlen"), required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    res = {"framework": a.framework, "case": a.case, "steps": a.steps,
           "planted_bytes": {"kept_logits": LOGITS_BYTES,
                             "step_cache": MASK_BYTES}.get(a.case, 0),
           "planted_line": line_of("planted: " + a.case) if a.case in
           ("kept_logits", "step_cache") else None,
           "env": {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF",
                                                  "XLA_PYTHON_CLIENT_ALLOCATOR",
                                                  "VRAM_TRACE")}}
    rc = 0
    try:
        run = {"torch": run_torch, "jax": run_jax, "fake": run_fake}[a.framework]
        allocated, times, used, version = run(a.case, a.steps)
        res["version"] = version
        res["allocated_per_step"] = allocated
        res["truth_bytes_per_step"] = slope(allocated[1:-1])
        res["device_used_per_step"] = used
        res["device_bytes_per_step"] = (slope(used[1:-1]) if None not in used[1:-1]
                                        else None)
        res["truth_source"] = "framework"
        if res["truth_bytes_per_step"] == 0 and res["planted_bytes"] and max(allocated) == 0:
            # A framework build whose allocator keeps no statistics (an
            # allocator backend without them): the planted size stands in.
            res["truth_bytes_per_step"] = float(res["planted_bytes"])
            res["truth_source"] = "planted"
        res["step_ms_median"] = statistics.median(times[3:]) if len(times) > 3 else None
    except Exception:
        res["error"] = traceback.format_exc()[-2000:]
        rc = 1
    with open(a.out, "w") as f:
        json.dump(res, f)
        f.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
