#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""record_checks.py -- `vram record` on real training (tests/gpu/run.sh,
section record): each case of bench/gpu/record_train.py recorded, then
`vram analyze --json` on its trace, against the framework's own figures.

    python3 bench/gpu/record_checks.py --vram build-gpu/bin/vram --work DIR \
        [--frameworks torch,jax] [--steps 40] [--budget SECONDS]

(--frameworks fake: the same on tests/fakecuda's driver, a CPU dry run.)

For each framework that imports (JAX is skipped when absent) and each case:
  kept_logits, step_cache  a leak; its rate within 5% of the framework's own
                           (torch.cuda.memory_allocated / jax.live_arrays
                           slope per step); the largest suspects are the
                           planted tensor's size
                           and the top leak call site names the planted
                           line (step_cache: the torch.zeros line first;
                           kept_logits: the line that made the logits,
                           logits = model(x), in the top site's stack)
  clean, bounded, varlen   no leak
and, for JAX, the kept_logits case once more under XLA_PYTHON_CLIENT_ALLOCATOR=
cuda_async (its stream-ordered pool, which vram record keeps): whether each
array then reaches the driver at its own size. Every case also gives the
driver's figure (the slope of the device's used bytes, device_bytes_per_step)
and its trace's share of allocations that are whole 2 MiB multiples (an allocator that rounds every array up to the
driver's 2 MiB granularity shows 1.0; then the framework's own count and the
card's loss differ, and the trace can only show the latter). Also the clean
case once more without vram record (PyTorch only): the median step time
recorded / not recorded. The traces stay in DIR (rec_FW_CASE.trace.csv.gz)
with the framework's figures (truth_FW_CASE.json).

Prints one JSON object: {"cases": [...], "overhead": {...}, "checks":
{name: true|false|null}}; null = could not be measured. Exit 0 always
(the table judges).
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "record_train.py")
CASES = ("kept_logits", "step_cache", "clean", "bounded", "varlen")


def importable(mod):
    if mod == "fake":  # the fake driver: a libcuda.so.1 on LD_LIBRARY_PATH
        code = "import ctypes; ctypes.CDLL('libcuda.so.1')"
    else:
        code = "import " + mod
    return subprocess.run([sys.executable, "-c", code],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def rounded_share(trace):
    """Share of the trace's allocations whose size is a whole multiple of
    2 MiB (None when unreadable)."""
    n = whole = 0
    try:
        with gzip.open(trace, "rt") as f:
            for line in f:
                p = line.split(",")
                if len(p) > 3 and p[1] == "a" and p[3].isdigit():
                    n += 1
                    whole += int(p[3]) % (2 << 20) == 0
    except (OSError, EOFError, ValueError):
        return None
    return round(whole / n, 3) if n else None


def one(vram, work, fw, case, steps, timeout, allocator=None):
    tag = case if allocator is None else "%s_%s" % (case, allocator)
    trace = os.path.join(work, "rec_%s_%s.trace.csv.gz" % (fw, tag))
    truth_path = os.path.join(work, "truth_%s_%s.json" % (fw, tag))
    r = {"framework": fw, "case": case if allocator is None else "%s@%s" % (case, allocator),
         "trace": trace}
    cmd = [vram, "record", "-o", trace, "--", sys.executable, TRAIN, "--framework", fw,
           "--case", case, "--steps", str(steps), "--out", truth_path]
    env = dict(os.environ)
    if allocator is not None:
        env["XLA_PYTHON_CLIENT_ALLOCATOR"] = allocator
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    t = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=env)
    r["record_seconds"] = round(time.time() - t, 1)
    r["record_rc"] = p.returncode
    r["record_stderr"] = p.stderr[-600:]
    truth = load(truth_path) or {}
    r["truth_bytes_per_step"] = truth.get("truth_bytes_per_step")
    r["device_bytes_per_step"] = truth.get("device_bytes_per_step")
    r["env"] = truth.get("env")
    r["rounded_2mib_share"] = rounded_share(trace)
    r["planted_bytes"] = truth.get("planted_bytes")
    r["truth_source"] = truth.get("truth_source")
    r["planted_line"] = truth.get("planted_line")
    r["step_ms_recorded"] = truth.get("step_ms_median")
    r["version"] = truth.get("version")
    if truth.get("error"):
        r["error"] = truth["error"][-600:]
    a = subprocess.run([vram, "analyze", "--json", trace], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    try:
        j = json.loads(a.stdout)
    except ValueError:
        r["analyze_error"] = (a.stderr or a.stdout)[-400:]
        return r
    r["leak"] = j.get("leak")
    r["leak_bytes_per_iteration"] = j.get("leak_bytes_per_iteration")
    r["iterations"] = j.get("iterations")
    r["iterations_to_full"] = j.get("leak_iterations_to_full")
    sus = j.get("suspects") or []
    r["suspect_sizes"] = [s.get("size") for s in sus[:5]]
    r["period_events"] = j.get("period_events")
    sites = j.get("leak_sites") or []
    if sites:
        top = sites[0]
        r["top_site"] = top.get("headline")
        r["top_site_rate"] = top.get("bytes_per_iteration")
        r["top_site_iterations"] = "%s of %s" % (top.get("iterations"),
                                                 top.get("of_iterations"))
        r["top_site_stack"] = ["%s:%s in %s" % (os.path.basename(f["file"]), f["line"],
                                                f["function"])
                               if f.get("kind") == "py" else
                               (f.get("text") or "%s (%s+%s)" % (
                                   f.get("symbol"), os.path.basename(f.get("module", "")),
                                   f.get("offset")))
                               for f in (top.get("stack") or [])[:8]]
    return r


def line_of(marker):
    """Each record_train.py:NN whose line holds MARKER, in the file's order."""
    with open(TRAIN) as f:
        hits = ["record_train.py:%d" % n for n, text in enumerate(f, 1) if marker in text]
    return hits


def site_check(r):
    """Whether the top leak call site's Python frames name the planted line:
    for step_cache the torch.zeros / jnp.zeros line (the fake loop's is the
    caller of its alloc helper), for kept_logits the line that made the
    logits (they come from inside the model: nn.Linear's F.linear is
    innermost). None when nothing was analyzed."""
    if r.get("leak") is None:
        return None
    stack = r.get("top_site_stack") or []
    case = r["case"].split("@")[0]
    marker = "planted: step_cache" if case == "step_cache" else "allocates: kept_logits"
    hits = line_of(marker)
    if not hits:
        return None
    # The loops come in the file in this order: run_torch, run_jax, run_fake.
    order = {"torch": 0, "jax": 1, "fake": 2}.get(r["framework"], 0)
    if order >= len(hits):
        return None
    want = hits[order]
    # The Python frames (a note, "ran without the GIL: ...", may come first),
    # and the line analyze names for the site (its stack in the JSON keeps
    # the innermost frames only: JAX's dispatch is deeper than they go).
    lines = [f for f in stack if ".py:" in f] + [r.get("top_site") or ""]
    return any(f.startswith(want + " in ") for f in lines)


def judge(out, r):
    """The checks of one case into out["checks"]."""
    name = "%s %s" % (r["framework"], r["case"])
    if r["case"].split("@")[0] in ("kept_logits", "step_cache"):
        truth, rate, ok = r.get("truth_bytes_per_step"), r.get("leak_bytes_per_iteration"), None
        if truth and rate is not None:
            ok = bool(r.get("leak")) and abs(rate - truth) <= 0.05 * truth
        out["checks"][name + ": leak found, rate within 5% of the framework's"] = ok
        sizes = r.get("suspect_sizes") or []
        out["checks"][name + ": the largest suspect is the planted tensor"] = (
            None if r.get("planted_bytes") is None or r.get("leak") is None else
            bool(sizes) and sizes[0] == r["planted_bytes"])
        out["checks"][name + ": the top leak call site names the planted line"] = (
            site_check(r))
    else:
        leak = r.get("leak")
        recorded = leak is not None and r.get("truth_bytes_per_step") is not None
        out["checks"][name + ": no leak"] = (not leak) if recorded else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vram", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--frameworks", default="torch,jax")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--budget", type=float, default=170.0)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    t0 = time.time()
    out = {"cases": [], "overhead": {}, "checks": {}, "skipped": []}
    for fw in a.frameworks.split(","):
        if not importable(fw):
            out["skipped"].append("%s: not importable" % fw)
            continue
        runs = [(case, None) for case in CASES]
        if fw == "jax":
            runs.append(("kept_logits", "cuda_async"))
        for case, allocator in runs:
            left = a.budget - (time.time() - t0)
            label = case if allocator is None else "%s@%s" % (case, allocator)
            if left < 15:
                out["skipped"].append("%s %s: past the budget" % (fw, label))
                continue
            try:
                r = one(a.vram, a.work, fw, case, a.steps, min(left, 60), allocator)
            except subprocess.TimeoutExpired:
                r = {"framework": fw, "case": label, "error": "timeout"}
            out["cases"].append(r)
            judge(out, r)
        # The recording's cost: the clean case without vram record. Not for
        # JAX: a second compilation would take the time of two more cases
        # out of the section's three minutes.
        if fw != "jax" and a.budget - (time.time() - t0) > 15:
            path = os.path.join(a.work, "truth_%s_clean_plain.json" % fw)
            env = {k: v for k, v in os.environ.items()}
            subprocess.run([sys.executable, TRAIN, "--framework", fw, "--case", "clean",
                            "--steps", str(a.steps), "--out", path], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            plain = (load(path) or {}).get("step_ms_median")
            rec = next((c.get("step_ms_recorded") for c in out["cases"]
                        if c.get("framework") == fw and c.get("case") == "clean"), None)
            out["overhead"][fw] = {"step_ms_plain": plain, "step_ms_recorded": rec,
                                   "ratio": (rec / plain) if rec and plain else None}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
