#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tune_checks.py -- `vram tune` on real training (tests/gpu/run.sh, section
tune), and its recommendation applied.

    python3 bench/gpu/tune_checks.py --vram build-gpu/bin/vram \
        --lib build-gpu/lib/libvram.so --work DIR [--budget SECONDS]
    python3 bench/gpu/tune_checks.py --vram build/bin/vram --work DIR \
        --dry-run PROBE     (CPU: the fake driver's probe loop stands in)

For each framework that imports (PyTorch; JAX when present), the clean
training loop of bench/gpu/record_train.py runs without end (a million
steps) under `vram tune --json`:
  steady        tune stopped it once steady: exit 0, stopped "steady",
                headroom 10 %, cap >= the smallest cap that replays
  applied       the loop, 300 steps, under the framework's recommended
                setting (PyTorch: set_per_process_memory_fraction with its
                own allocator, and vram.torch.use(limit, strategy); JAX:
                XLA_PYTHON_CLIENT_PREALLOCATE=false and _MEM_FRACTION),
                finishes without an out-of-memory error
  too small     the same under half the smallest cap fails (PyTorch:
                under `vram run --limit`, the driver's view the trace
                measured; JAX: its memory fraction), so the check above
                can fail
and the kept-logits leak under --seconds 20: exit 3, a leak, 15 %.
The recordings stay in DIR (tune_FW_CASE.trace.csv).

Prints one JSON object: {"cases": [...], "checks": {name: true|false|
null}}; null = could not be measured. Exit 0 always (the table judges).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TRAIN = os.path.join(HERE, "record_train.py")
MIB = 1 << 20

# Runs the training script after applying a setting (argv[1]: a JSON object
# {"framework", "fraction", "vram_limit", "vram_strategy"}); exit 0 ok, 3 an
# out-of-memory error, 1 anything else.
APPLY = r'''
import json, runpy, sys, traceback
def out_of_memory(text):
    # PyTorch's OutOfMemoryError, JAX's RESOURCE_EXHAUSTED, and a library's
    # own allocation refused (cublasCreate under vram run --limit).
    return ("out of memory" in text.lower() or "RESOURCE_EXHAUSTED" in text or
            "ALLOC_FAILED" in text)
s = json.loads(sys.argv[1])
sys.argv = sys.argv[2:]
try:
    if s["framework"] == "torch":
        import torch
        if s.get("vram_limit"):
            import vram.torch
            vram.torch.use(limit=s["vram_limit"], strategy=s["vram_strategy"])
        elif "fraction" in s:
            torch.cuda.set_per_process_memory_fraction(s["fraction"], 0)
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    sys.exit(e.code)
except BaseException as e:
    text = traceback.format_exc()
    sys.stderr.write(text[-1500:])
    sys.exit(3 if out_of_memory(text) else 1)
'''


def importable(mod):
    return subprocess.run([sys.executable, "-c", "import " + mod],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def tune(vram, args, command, timeout):
    t = time.time()
    p = subprocess.run([vram, "tune", "--json"] + args + ["--"] + command,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    r = {"rc": p.returncode, "seconds": round(time.time() - t, 1),
         "stderr": p.stderr[-800:]}
    try:
        r["json"] = json.loads(p.stdout)
    except ValueError:
        r["json"] = None
    return r


def apply(setting, fw, steps, lib, timeout, env_extra=None, prefix=None):
    """The training loop, STEPS steps, under SETTING (and PREFIX, a command
    that runs it, e.g. vram run --limit); its exit status (0 ok, 3 an
    out-of-memory error, 1 anything else) and the error's text. The loop
    writes its own error to --out, where it catches it."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), VRAM_LIBRARY=lib or "")
    env.update(env_extra or {})
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "XLA_PYTHON_CLIENT_ALLOCATOR", "VRAM_TRACE"):
        env.pop(k, None)
    cmd = (prefix or []) + [sys.executable, "-c", APPLY, json.dumps(setting), TRAIN,
                            "--framework", fw, "--case", "clean", "--steps", str(steps),
                            "--out", out]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=env, timeout=timeout)
    rc, err = p.returncode, p.stderr[-600:]
    try:
        with open(out) as f:
            loop_error = json.load(f).get("error")
    except (OSError, ValueError):
        loop_error = None
    os.unlink(out)
    if loop_error:
        err = loop_error[-600:]
        if rc == 1 and ("out of memory" in loop_error.lower() or
                        "RESOURCE_EXHAUSTED" in loop_error or "ALLOC_FAILED" in loop_error):
            rc = 3
    return rc, err


def judge_steady(j, rc):
    if j is None:
        return False
    rec = j["recommended"]
    return (rc == 0 and j["stopped"] == "steady" and j["steady"] and rec["headroom"] == 0.10
            and rec["cap_bytes"] >= rec["min_limit_bytes"] >= j["peak_in_use_bytes"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vram", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--work", required=True)
    ap.add_argument("--budget", type=float, default=170.0)
    ap.add_argument("--dry-run", metavar="PROBE", default=None)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    t0 = time.time()
    cases, checks = [], {}

    def left():
        return a.budget - (time.time() - t0)

    frameworks = ["probe"] if a.dry_run else [
        fw for fw, mod in (("torch", "torch"), ("jax", "jax")) if importable(mod)]
    for fw in frameworks:
        for case in ("clean", "kept_logits"):
            if left() < 30:
                checks["%s %s" % (fw, case)] = None
                continue
            trace = os.path.join(a.work, "tune_%s_%s.trace.csv" % (fw, case))
            if a.dry_run:
                command = [a.dry_run, "--via", "gpa12000", "train", "0",
                           "0" if case == "clean" else "256"]
            else:
                command = [sys.executable, TRAIN, "--framework", fw, "--case", case,
                           "--steps", "1000000", "--out", os.devnull]
            args = ["-o", trace]
            if case == "kept_logits":
                args += ["--seconds", "1" if a.dry_run else "20"]
            else:
                args += ["--seconds", str(int(max(30, min(120, left() - 60))))]
            r = tune(a.vram, args, command, timeout=max(30, left()))
            r.update(framework=fw, case=case, trace=trace)
            j = r["json"]
            if j is not None:
                r["summary"] = {k: j[k] for k in ("stopped", "steady", "complete_iterations",
                                                  "peak_in_use_bytes", "leak",
                                                  "leak_bytes_per_iteration")}
                r["recommended"] = j["recommended"]
                r["settings"] = j["settings"]
                r["device_memory_bytes"] = j["device_memory_bytes"]
            cases.append(r)
            if case == "kept_logits":
                checks["%s leak: exit 3, a leak, 15 %%" % fw] = (
                    j is not None and r["rc"] == 3 and j["leak"] and
                    j["recommended"]["headroom"] == 0.15)
                continue
            checks["%s clean: stopped once steady, 10 %%" % fw] = judge_steady(j, r["rc"])
            if j is None or a.dry_run or fw not in ("torch", "jax") or left() < 30:
                continue
            rec, total = j["recommended"], j["device_memory_bytes"]
            if fw == "torch":
                tries = [("fraction", {"fraction": j["settings"]["pytorch_fraction"]}, 0),
                         ("vram.torch.use", {"vram_limit": "%dM" % (rec["cap_bytes"] // MIB),
                                             "vram_strategy": rec["strategy"]}, 0),
                         ("too small", {}, 3)]
                # Too small is judged in the trace's own currency: the
                # driver's view of every allocation, which `vram run
                # --limit` caps. PyTorch's fraction caps only its own
                # allocator's bytes, not what cuBLAS allocates for itself
                # (cublasCreate's 64 MiB on the H200), so half the smallest
                # cap can still hold a small model's tensors under it.
                half = ["%s" % a.vram, "run", "--limit",
                        "%dM" % (rec["min_limit_bytes"] // 2 // MIB), "--"]
                for name, s, want in tries:
                    s["framework"] = fw
                    rc, err = apply(s, fw, 300, a.lib, timeout=max(30, left()),
                                    prefix=half if name == "too small" else None)
                    r["apply_" + name] = {"rc": rc, "stderr": err}
                    checks["torch %s: exit %d" % (name, want)] = rc == want
            else:
                frac = j["settings"]["jax_mem_fraction"]
                for name, f, want in (("mem fraction", frac, 0),
                                      ("too small", rows_min(j) / 2 / total, 3)):
                    rc, err = apply({"framework": fw}, fw, 300, a.lib, timeout=max(30, left()),
                                    env_extra={"XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                                               "XLA_PYTHON_CLIENT_MEM_FRACTION": "%.6f" % f})
                    r["apply_" + name] = {"rc": rc, "stderr": err}
                    checks["jax %s: exit %d" % (name, want)] = rc == want
    print(json.dumps({"cases": cases, "checks": checks}))
    return 0


def rows_min(j):
    """growth:tf-compat's smallest cap (JAX's model)."""
    for r in j["strategies"]:
        if r["strategy"] == "growth:tf-compat" and r["min_limit_bytes"]:
            return r["min_limit_bytes"]
    return j["recommended"]["min_limit_bytes"]


if __name__ == "__main__":
    sys.exit(main())
