#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""train.py -- train a real model for a few steps with PyTorch's own CUDA
allocator or with vram plugged in, and write what it cost to a JSON file.

    python3 bench/gpu/train.py --model resnet50|gpt2 --allocator torch|vram \
        [--steps N] [--lib build/lib/libvram.so] --out FILE.json

Models (random weights, random data, fixed seeds so that the losses of the
two allocators can be compared step by step):
  resnet50  torchvision.models.resnet50(), batch 128 of 224x224 images,
            1000 classes, SGD with momentum, fp32; 20 steps by default.
  gpt2      transformers GPT2LMHeadModel(GPT2Config()) (GPT-2 small),
            batch 8 x 1024 token ids, labels = inputs, AdamW, bf16
            autocast; 10 steps by default.

With --allocator vram the library is plugged in before any CUDA
allocation, exactly as a user would (README.md, "PyTorch"), with
VRAM_BACKEND=cuda and VRAM_STRATEGY=expandable (--strategy) put in the
environment first; other VRAM_* variables pass through.

Reported: the loss of every step; the time of every step (between two
torch.cuda.synchronize() calls) and their median without the first 3
(warm-up); peak bytes reserved from the device by the allocator --
torch.cuda.max_memory_reserved() for PyTorch's allocator (its statistics
are empty under a pluggable allocator), vram_torch_peak_reserved() read
through ctypes for vram; and, for both, the whole device as nvidia-smi
would show it for this process: total - free (torch.cuda.mem_get_info)
after the last step, which also counts the CUDA context and library
workspaces. Exit status 0 ok, 1 failure (the JSON file then holds "error").
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time
import traceback

WARMUP = 3


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("resnet50", "gpt2"), required=True)
    p.add_argument("--allocator", choices=("torch", "vram"), required=True)
    p.add_argument("--steps", type=int, default=None,
                   help="training steps (default: 20 for resnet50, 10 for gpt2)")
    p.add_argument("--lib", default="build/lib/libvram.so",
                   help="path of libvram.so (default: build/lib/libvram.so)")
    p.add_argument("--strategy", default="expandable",
                   help="VRAM_STRATEGY for --allocator vram (default: expandable)")
    p.add_argument("--device", type=int, default=0, help="CUDA device (default 0)")
    p.add_argument("--no-deterministic", dest="deterministic", action="store_false",
                   help="allow non-deterministic kernels (losses may then differ "
                        "between runs in the last digits)")
    p.add_argument("--out", required=True, help="JSON file to write")
    a = p.parse_args()
    if a.steps is None:
        a.steps = 20 if a.model == "resnet50" else 10
    if a.steps < 1:
        p.error("--steps must be at least 1")
    return a


def plug_in_vram(torch, lib_path, strategy):
    """Make vram PyTorch's CUDA allocator; return the library for ctypes."""
    os.environ["VRAM_BACKEND"] = "cuda"
    os.environ["VRAM_STRATEGY"] = strategy
    # The three lines of README.md's "PyTorch" section.
    alloc = torch.cuda.memory.CUDAPluggableAllocator(
        lib_path, "vram_torch_malloc", "vram_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    # The same path gives the same loaded library, hence the same process-wide
    # context as the one PyTorch allocates through.
    lib = ctypes.CDLL(lib_path)
    lib.vram_torch_peak_reserved.argtypes = [ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_uint64)]
    lib.vram_torch_peak_reserved.restype = ctypes.c_int
    lib.vram_last_error.argtypes = []
    lib.vram_last_error.restype = ctypes.c_char_p
    return alloc, lib


def vram_peak_reserved(lib, device):
    out = ctypes.c_uint64(0)
    st = lib.vram_torch_peak_reserved(device, ctypes.byref(out))
    if st != 0:
        raise RuntimeError("vram_torch_peak_reserved: status %d: %s"
                           % (st, lib.vram_last_error().decode(errors="replace")))
    return out.value


def build_resnet50(torch, dev):
    import torchvision
    model = torchvision.models.resnet50().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)

    def step():
        x = torch.randn(128, 3, 224, 224, device=dev, generator=gen)
        y = torch.randint(0, 1000, (128,), device=dev, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, step, {"batch": 128, "image": [3, 224, 224], "dtype": "float32",
                         "optimizer": "SGD(lr=0.1, momentum=0.9)"}


def build_gpt2(torch, dev):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)

    def step():
        ids = torch.randint(0, cfg.vocab_size, (8, 1024), device=dev, generator=gen)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    return model, step, {"batch": 8, "tokens": 1024, "dtype": "bfloat16 autocast",
                         "optimizer": "AdamW(lr=1e-4)"}


def run(a, result):
    if a.deterministic:
        # cuBLAS needs this before its first handle for deterministic results.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    lib_path = os.path.abspath(a.lib)
    if a.allocator == "vram" and not os.path.exists(lib_path):
        raise RuntimeError("no library at %s (build first, or give --lib)" % lib_path)

    import torch
    result["torch_version"] = torch.__version__
    lib = alloc = None
    if a.allocator == "vram":
        alloc, lib = plug_in_vram(torch, lib_path, a.strategy)
        result["vram_lib"] = lib_path
        result["vram_strategy"] = a.strategy
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to PyTorch")

    dev = torch.device("cuda", a.device)
    torch.cuda.set_device(dev)
    result["gpu"] = torch.cuda.get_device_name(dev)
    torch.manual_seed(0)
    if a.deterministic:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True, warn_only=True)
        # Filling every new tensor with NaN would add kernels to each step.
        import torch.utils.deterministic
        torch.utils.deterministic.fill_uninitialized_memory = False
    result["deterministic"] = a.deterministic

    free0, total = torch.cuda.mem_get_info(dev)
    result["device_total_bytes"] = total
    result["device_used_before_bytes"] = total - free0

    build = build_resnet50 if a.model == "resnet50" else build_gpt2
    model, step, shape = build(torch, dev)
    result.update(shape)

    # With vram: the driver calls each step made (map, unmap, synchronize
    # included), through the Python package on the plug-in's device.
    vram_pkg = None
    if a.allocator == "vram":
        os.environ["VRAM_LIBRARY"] = lib_path
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "..", "python"))
        import vram as vram_pkg
    calls = []

    losses, times = [], []
    for i in range(a.steps):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.item()))
        extra = ""
        if vram_pkg is not None:
            st = vram_pkg.stats(a.device)
            calls.append({k: st[k] for k in ("backend_calls", "maps", "unmaps")})
            extra = ", driver calls so far %d (maps %d, unmaps %d)" % (
                st["backend_calls"], st["maps"], st["unmaps"])
        print("%s/%s step %d: loss %.6f, %.1f ms%s" % (a.model, a.allocator, i + 1,
                                                       losses[-1], times[-1] * 1e3,
                                                       extra),
              flush=True)

    free1, _ = torch.cuda.mem_get_info(dev)
    result["device_used_bytes"] = total - free1
    if a.allocator == "torch":
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
        result["peak_reserved_source"] = "torch.cuda.max_memory_reserved"
        result["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(dev)
    else:
        result["peak_reserved_bytes"] = vram_peak_reserved(lib, a.device)
        result["peak_reserved_source"] = "vram_torch_peak_reserved"
    timed = times[WARMUP:] if len(times) > WARMUP else times
    if calls:
        result["vram_calls_after_step"] = calls
        # Driver calls in the timed steps (after the warm-up): the steady state.
        first = calls[WARMUP - 1] if len(calls) > WARMUP else calls[0]
        result["vram_steady_calls"] = calls[-1]["backend_calls"] - first["backend_calls"]
        result["vram_steady_unmaps"] = calls[-1]["unmaps"] - first["unmaps"]
    result["losses"] = losses
    result["step_times_s"] = times
    result["warmup_steps"] = len(times) - len(timed)
    result["median_step_s"] = statistics.median(timed)
    del model, step
    return alloc


def main():
    a = parse_args()
    result = {"model": a.model, "allocator": a.allocator, "steps": a.steps}
    rc = 0
    try:
        keep = run(a, result)  # the allocator object must outlive every tensor
        del keep
    except Exception as e:  # report any failure in the JSON, then exit 1
        traceback.print_exc()
        result["error"] = "%s: %s" % (type(e).__name__, e)
        rc = 1
    # Written for the report (tests/gpu/run.sh reads it).
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    if rc == 0:
        print("%s/%s: median step %.1f ms, peak reserved %.2f GiB, device used %.2f GiB"
              % (a.model, a.allocator, result["median_step_s"] * 1e3,
                 result["peak_reserved_bytes"] / 2**30,
                 result["device_used_bytes"] / 2**30), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
