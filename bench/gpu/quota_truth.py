#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""quota_truth.py -- the ground truth of the quota is the GPU.

Runs every case of tests/gpu/quota_truth.c (one way of getting device
memory each: tiny, odd and 2 MiB +/- 1 allocations, a huge one, a
fragmenting pattern, pitch, arrays, mipmapped arrays, VMM, release after
map, pools with a high release threshold, a created pool, graphs, and the
dlvsym route around the dlsym override), each trying to pass a 1 GiB
quota, under two routes:
  run     `vram run --limit 1G -- quota_truth CASE`
  policy  a 1 GiB host policy ("default 1G") through /etc/ld.so.preload,
          for a Unix user made for the run, in a private mount namespace
          (a copy of /etc bound over /etc, a fresh /dev/shm: the machine's
          own files never change, the user exists only there).
The judge is NVML's per-process used memory (nvidia-smi's figure, the
CUDA context counted in it): sampled by the program after its
allocations and at the refusal, and by nvidia-smi from outside every
~50 ms while it runs and while it holds at the refusal. A case passes
when the peak never passes the quota and the program's allocation is
refused with CUDA_ERROR_OUT_OF_MEMORY at the quota (within 96 MiB of it:
how close each path gets is printed).

Prints one JSON line per case and route, then a summary line
{"quota_truth": ..., "ok": ...}; --out writes the same. Exit 0 when every
case passed.

Usage: quota_truth.py --vram BIN/vram --preload LIB/libvram-preload.so
           --truth TESTS/preload/quota_truth [--quota BYTES] [--cases a,b]
           [--routes run,policy] [--out FILE]
       --dry-run: over the fake driver and fake NVML of the build tree
           (--fake-dir DIR, default beside --truth), a 64 MiB quota and a
           16 MiB context; no nvidia-smi.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

CASES = ["tiny", "odd", "mib_plus1", "2mib_minus1", "2mib_plus1", "huge", "fragment",
         "pitch", "array", "array_tiny", "array3d", "mipmap", "vmm", "release_after_map",
         "pool", "pool_threshold", "pool_created", "graph", "dlvsym"]
MiB = 1 << 20


class Sampler(threading.Thread):
    """nvidia-smi's per-process used memory of PID, its highest, every ~50 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.samples, self.stop = pid, None, 0, False

    def run(self):
        while not self.stop:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True)
            for row in out.stdout.splitlines():
                parts = [x.strip() for x in row.split(",")]
                if len(parts) == 2 and parts[0] == str(self.pid) and parts[1].isdigit():
                    mib = int(parts[1])
                    self.peak = mib if self.peak is None else max(self.peak, mib)
                    self.samples += 1
            time.sleep(0.05)


def run_case(cmd, env, case, quota, external, timeout=300):
    """One case: its JSON line with the outside samples added."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    s = Sampler(p.pid) if external else None
    if s:
        s.start()
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    if s:
        s.stop = True
        s.join(5)
    row = {"case": case, "quota": quota, "pass": False}
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except ValueError:
                pass
    row["exit"] = p.returncode
    row["vram_lines"] = [x for x in err.splitlines() if x.startswith("vram:")][:3]
    if s:
        row["smi_peak_mib"] = s.peak
        row["smi_samples"] = s.samples
        if s.peak is not None and s.peak > quota // MiB:
            row["pass"] = False
            row["within"] = False
    return row


def base_env():
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("VRAM_") or k.startswith("CUDA_DEVICE_MEMORY"):
            del env[k]
    env["QUOTA_TRUTH_HOLD_MS"] = "500"
    return env


def route_run(a, env):
    rows = []
    for case in a.cases:
        cmd = [a.vram, "run", "--limit", str(a.quota), "--preload", a.preload, "--",
               a.truth, case, "--quota", str(a.quota)]
        row = run_case(cmd, env, case, a.quota, not a.dry_run)
        row["route"] = "run"
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def route_policy_inside(a):
    """In the namespace: the policy, the preload line, a user; each case."""
    tmp = os.environ["VRAM_TRUTH_TMP"]
    subprocess.run(["cp", "-a", "/etc", tmp + "/etc"], check=True)
    subprocess.run(["mount", "--bind", tmp + "/etc", "/etc"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", "vram-truth-shm", "/dev/shm"],
                   check=True)
    user = "vramtruth%d" % os.getpid()
    rows = []
    try:
        subprocess.run(["useradd", "-M", "-N", "-g", "users", "-s", "/bin/sh", user],
                       check=True)
        os.makedirs("/etc/vram", mode=0o755, exist_ok=True)
        with open("/etc/vram/policy.conf", "w") as f:
            f.write("default %d\n" % a.quota)
        os.chmod("/etc/vram/policy.conf", 0o644)
        with open("/etc/ld.so.preload", "w") as f:
            f.write(os.path.realpath(a.preload) + "\n")
        os.chmod(tmp, 0o755)
        env = base_env()
        for case in a.cases:
            cmd = ["setpriv", "--reuid", user, "--regid", "users", "--init-groups",
                   a.truth, case, "--quota", str(a.quota)]
            row = run_case(cmd, env, case, a.quota, not a.dry_run)
            row["route"] = "policy"
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        subprocess.run(["userdel", user], capture_output=True)
    return rows


def route_policy(a, env):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        row = {"route": "policy", "skipped": "needs root and unshare"}
        print(json.dumps(row), flush=True)
        return [row]
    tmp = tempfile.mkdtemp(prefix="vram-truth.")
    try:
        env = dict(env, VRAM_TRUTH_INSIDE="1", VRAM_TRUTH_TMP=tmp)
        r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable,
                            os.path.abspath(__file__)] + sys.argv[1:], env=env,
                           capture_output=True, text=True)
        rows = []
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                rows.append(json.loads(line))
                print(line, flush=True)
        if r.returncode != 0 and not rows:
            rows.append({"route": "policy", "error": r.stderr.strip()[-300:]})
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vram", required=True)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--truth", required=True)
    ap.add_argument("--quota", type=int)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--routes", default="run,policy")
    ap.add_argument("--out")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--fake-dir")
    a = ap.parse_args()
    a.cases = [c for c in a.cases.split(",") if c]
    a.truth = os.path.realpath(a.truth)
    if a.quota is None:
        a.quota = 64 * MiB if a.dry_run else 1 << 30
    env = base_env()
    if a.dry_run:
        here = os.path.dirname(a.truth)
        fake = a.fake_dir or os.path.join(os.path.dirname(here), "fakecuda")
        env["LD_LIBRARY_PATH"] = fake + ":" + here
        env["FAKECUDA_CONTEXT_BYTES"] = "16M"
    if os.environ.get("VRAM_TRUTH_INSIDE") == "1":
        route_policy_inside(a)
        return 0
    rows = []
    routes = a.routes.split(",")
    if "run" in routes:
        rows += route_run(a, env)
    if "policy" in routes:
        rows += route_policy(a, env)
    judged = [r for r in rows if "case" in r]
    ok = bool(judged) and all(r.get("pass") for r in judged)
    summary = {"quota_truth": [{k: r.get(k) for k in (
        "route", "case", "nvml_peak", "smi_peak_mib", "nvml_at_refusal", "refusal", "pass")}
        for r in judged], "skipped": [r for r in rows if "case" not in r],
        "quota": a.quota, "ok": ok}
    line = json.dumps(summary)
    print(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(json.dumps(r) for r in rows) + "\n" + line + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
