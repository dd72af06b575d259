#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""policy_checks.py -- the host policy with real PyTorch on the GPU.

Two Unix users, each running a PyTorch process (then a JAX one, then a
CuPy one: --frameworks), under a policy of 4 GiB per
user loaded through /etc/ld.so.preload, in a private mount namespace (a
copy of /etc bound over /etc, a fresh /dev/shm: the machine's own files
never change, and the users exist only there). Each process allocates
256 MiB tensors until PyTorch raises its out-of-memory error, then holds
them; while both hold, nvidia-smi's per-process used memory must be at
most 4 GiB + 64 MiB for each (the context counted in the quota), and each
must have reached at least 3 GiB before the OOM (the OOM comes at the
quota, not before). The PyTorch and CuPy workers also pin 64 MiB of host
memory (pin_memory, alloc_pinned_memory: cudaHostAlloc), and root's
`vram stat --json` is asked, while they hold, for each process's pinned
bytes and resident set (recorded; a pinned count short of 64 MiB is a
miss of its own, not of the quota checks). Prints one JSON object; exit 0
when every quota check held.

Usage (root): policy_checks.py --preload build-gpu/lib/libvram-preload.so
      [--vram VRAM (default: bin/vram beside the library's lib/)]
      [--python PYTHON (default: this one)] [--out FILE]
      --cpu: no GPU: check the namespace, the users and the preload line only.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

QUOTA_MIB = 4096
SLACK_MIB = 64
PIN_MIB = 64  # pinned host memory the PyTorch and CuPy workers take

# Each framework's worker allocates 256 MiB buffers until the framework's
# own out-of-memory error, prints "held MIB ERROR", then holds them until
# the file named by its argument exists.
HOLD = r"""
import os, sys, time
print("held %d %s" % (len(chunks) * 256, err), flush=True)
for _ in range(1200):
    if os.path.exists(sys.argv[1]):
        break
    time.sleep(0.1)
"""
WORKERS = {
    "torch": r"""
import torch
chunks, err = [], None
try:
    while True:
        chunks.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError as e:
    err = str(e).splitlines()[0][:200]
torch.cuda.synchronize()
pinned = torch.empty(64 << 20, dtype=torch.uint8).pin_memory()
""" + HOLD,
    # JAX caps itself at a fraction (default 0.75) of the total the device
    # reports, which under a quota is the quota: measured on the H200, its
    # own OOM came at 2,816 MiB of arrays (nvidia-smi 3,622 MiB) with no
    # refusal from vram. The whole quota is asked for here, on demand.
    "jax": r"""
import os
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = "1.0"
import jax, jax.numpy as jnp
chunks, err = [], None
try:
    while True:
        x = jnp.zeros((256 << 20,), dtype=jnp.uint8)
        x.block_until_ready()
        chunks.append(x)
except Exception as e:
    err = (type(e).__name__ + ": " + str(e)).splitlines()[0][:200]
""" + HOLD,
    "cupy": r"""
import cupy
chunks, err = [], None
try:
    while True:
        chunks.append(cupy.empty(256 << 20, dtype=cupy.uint8))
except cupy.cuda.memory.OutOfMemoryError as e:
    err = str(e).splitlines()[0][:200]
cupy.cuda.Device().synchronize()
pinned = cupy.cuda.alloc_pinned_memory(64 << 20)
""" + HOLD,
}



def inside(args):
    """In the namespace: users, policy, preload, the two workers."""
    tmp = os.environ["VRAM_POLICY_GPU_TMP"]
    subprocess.run(["cp", "-a", "/etc", tmp + "/etc"], check=True)
    subprocess.run(["mount", "--bind", tmp + "/etc", "/etc"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", "vram-gpu-shm", "/dev/shm"],
                   check=True)
    users = ["vramgpua%d" % os.getpid(), "vramgpub%d" % os.getpid()]
    res = {"users": [], "ok": False}
    try:
        for u in users:
            subprocess.run(["useradd", "-M", "-N", "-g", "users", "-s", "/bin/sh", u],
                           check=True)
        os.makedirs("/etc/vram", mode=0o755, exist_ok=True)
        with open("/etc/vram/policy.conf", "w") as f:
            f.write("default %dM\n" % QUOTA_MIB)
        os.chmod("/etc/vram/policy.conf", 0o644)
        with open("/etc/ld.so.preload", "w") as f:
            f.write(os.path.realpath(args.preload) + "\n")
        os.chmod(tmp, 0o755)
        if args.cpu:
            out = subprocess.run(["setpriv", "--reuid", users[0], "--regid", "users",
                                  "--init-groups", "/bin/true"], capture_output=True,
                                 text=True)
            res["ok"] = out.returncode == 0 and out.stderr == ""
            res["cpu"] = "users, policy and preload line set up; /bin/true quiet"
            return res
        for u in users:
            home = os.path.join(tmp, "home-" + u)
            os.makedirs(home)
            shutil.chown(home, user=u)
        ok = True
        res["runs"] = []
        for fw in args.frameworks.split(","):
            if subprocess.run([args.python, "-c", "import " + fw],
                              capture_output=True).returncode != 0:
                res["runs"].append({"framework": fw, "skipped": "not importable"})
                continue
            run = both_users(args, tmp, users, fw)
            res["runs"].append(run)
            ok = ok and run["ok"]
        res["ok"] = ok
        return res
    finally:
        for u in users:
            subprocess.run(["userdel", u], capture_output=True)


def host_memory(args):
    """Root's `vram stat --json`: pid -> (pinned_bytes, rss_bytes); {} if it fails."""
    out = subprocess.run([args.vram, "stat", "--json", "--no-nvml"], capture_output=True,
                         text=True)
    try:
        rows = json.loads(out.stdout)["processes"]
    except (ValueError, KeyError):
        return {}
    return {r["pid"]: (r.get("pinned_bytes"), r.get("rss_bytes")) for r in rows}


def both_users(args, tmp, users, fw):
    """Both users run FW's worker at once; nvidia-smi while both hold."""
    worker = os.path.join(tmp, "worker_%s.py" % fw)
    with open(worker, "w") as f:
        f.write(WORKERS[fw])
    os.chmod(worker, 0o644)
    stop = os.path.join(tmp, "stop_" + fw)
    procs = []
    for u in users:
        env = dict(os.environ, HOME=os.path.join(tmp, "home-" + u))
        for k in list(env):
            if k.startswith("VRAM_") or k.startswith("CUDA_DEVICE_MEMORY") or \
                    k.startswith("XLA_PYTHON_CLIENT"):
                del env[k]
        p = subprocess.Popen(["setpriv", "--reuid", u, "--regid", "users", "--init-groups",
                              args.python, worker, stop], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
        procs.append((u, p))
    held = {}
    for u, p in procs:
        held[u] = p.stdout.readline().strip()
    time.sleep(1.0)
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True)
    used = {}
    for row in smi.stdout.splitlines():
        parts = [x.strip() for x in row.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            used[int(parts[0])] = int(parts[1])
    host = host_memory(args)
    open(stop, "w").close()
    run = {"framework": fw, "users": [], "ok": True}
    for u, p in procs:
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        words = held[u].split(" ", 2)
        mib = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
        smi_mib = used.get(p.pid)
        r = {"user": u, "tensors_mib": mib, "nvidia_smi_mib": smi_mib,
             "oom": words[2] if len(words) > 2 else None,
             "vram_lines": [x for x in err.splitlines() if x.startswith("vram:")][:2],
             "stderr_tail": [x for x in err.strip().splitlines()
                             if not x.startswith("vram:")][-3:]}
        pinned, rss = host.get(p.pid, (None, None))
        r["pinned_mib"] = None if pinned is None else pinned / 2**20
        r["rss_mib"] = None if rss is None else rss / 2**20
        r["pinned_shown"] = (None if fw not in ("torch", "cupy")
                             else pinned is not None and pinned >= PIN_MIB << 20)
        r["within_quota"] = smi_mib is not None and smi_mib <= QUOTA_MIB + SLACK_MIB
        r["oom_at_quota"] = mib >= QUOTA_MIB - 1024
        run["ok"] = run["ok"] and r["within_quota"] and r["oom_at_quota"]
        run["users"].append(r)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preload", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--vram")
    ap.add_argument("--out")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--frameworks", default="torch,jax,cupy")
    args = ap.parse_args()
    if args.vram is None:
        args.vram = os.path.join(os.path.dirname(os.path.dirname(
            os.path.realpath(args.preload))), "bin", "vram")
    if os.environ.get("VRAM_POLICY_GPU_INSIDE") == "1":
        res = inside(args)
        print(json.dumps(res))
        return 0 if res["ok"] else 1
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print(json.dumps({"ok": False, "error": "needs root and unshare"}))
        return 1
    tmp = tempfile.mkdtemp(prefix="vram-policy-gpu.")
    try:
        env = dict(os.environ, VRAM_POLICY_GPU_INSIDE="1", VRAM_POLICY_GPU_TMP=tmp)
        r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable,
                            os.path.abspath(__file__)] + sys.argv[1:], env=env,
                           capture_output=True, text=True)
        line = (r.stdout.strip().splitlines() or ["{}"])[-1]
        if args.out:
            with open(args.out, "w") as f:
                f.write(line + "\n")
        print(line)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-2000:])
        return r.returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
