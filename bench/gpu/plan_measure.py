#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""plan_measure.py -- measure peak GPU memory of real runs and predict the
same runs with `vram plan` (tracing, and the structural model where it
applies), in one go, for data/measurements and BENCHMARKS.md.

    python3 bench/gpu/plan_measure.py --out DIR [--vram build/bin/vram] [--budget 270]
    python3 bench/gpu/plan_measure.py --cpu --out /tmp/x      # dry run, no GPU

Kinds of run (each a function written as ordinary PyTorch code for "cuda"):
  vision    12 torchvision classifiers (residual, depthwise/inverted-residual,
            vision transformers, ConvNeXt, ...) x batch 32 and 64 x three
            settings: fp32 + SGD momentum, bf16 autocast + AdamW, pure bf16
            + AdamW; three training steps on random 224x224 images.
  generate  Hugging Face causal LMs built from configs (GPT-2 small, a
            Qwen2 0.5B, the 250M LLaMA), generate() with a KV cache: batch 1
            and 16, prompt 256 and 1024, 64 new tokens, bf16 and fp32.
  lora      LoRA (peft, r 16 on q/v) on a frozen 250M LLaMA in bf16: batch
            4 and 8 x 512 and 1024 tokens, three AdamW steps (and 4-bit
            QLoRA when bitsandbytes is installed).

Measured as data/measurements/README.md describes: in this one process, each
run after gc, torch.cuda.empty_cache() and clearing cuBLAS's workspaces
(so each run allocates them as a fresh process would), its peak is
torch.cuda.max_memory_allocated() minus what was allocated before it.
Predictions run at the same time in CPU worker processes (vram.plan.trace
on the fake CUDA device, same PyTorch), and `vram plan --generate --json`
for generation. One JSON line per run goes to DIR/plan_measure.jsonl, with
provenance; bench/gpu/plan_compare.py prints the errors per kind.
"""
import argparse
import datetime
import gc
import importlib.util
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

VISION = ["resnet18", "resnet50", "resnext50_32x4d", "densenet121", "mobilenet_v2",
          "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2_x1_0", "regnet_y_800mf",
          "vit_b_16", "swin_t", "convnext_tiny"]
SETTINGS = ["fp32-sgdm", "mixed-bf16-adamw", "bf16-adamw"]

GPT2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024,
        "vocab_size": 50257}
QWEN2 = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
         "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
         "vocab_size": 151936, "max_position_embeddings": 32768, "tie_word_embeddings": True,
         "use_sliding_window": False}


def llama_cfg():
    with open(os.path.join(ROOT, "data", "measurements", "configs", "llama-300m.json")) as f:
        return json.load(f)


def gen_cfg(family):
    """The configuration a generation run of FAMILY builds."""
    return {"gpt2": GPT2, "qwen2": QWEN2}.get(family) or llama_cfg()


# ---------------------------------------------------------------------------
# The runs: every one a function of (spec, device), ordinary PyTorch code
# ---------------------------------------------------------------------------

def vision_run(spec, dev):
    import torch
    import torchvision
    name, batch, setting, steps, size = (spec["model"], spec["batch"], spec["setting"],
                                         spec["steps"], spec["image"])
    kw = {"image_size": size} if name.startswith("vit") and size != 224 else {}
    model = getattr(torchvision.models, name)(**kw).to(dev)
    if setting == "bf16-adamw":
        model = model.to(torch.bfloat16)
    if setting == "fp32-sgdm":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = torch.bfloat16 if setting == "bf16-adamw" else torch.float32
    x = torch.randn(batch, 3, size, size, device=dev, dtype=dtype)
    y = torch.randint(0, 1000, (batch,), device=dev)
    for _ in range(steps):
        with torch.autocast(dev.split(":")[0], dtype=torch.bfloat16,
                            enabled=setting == "mixed-bf16-adamw"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def _hf_model(cfg, dtype, dev):
    import torch
    import transformers
    c = transformers.AutoConfig.for_model(**cfg)
    torch.manual_seed(0)
    # Built on the device itself (random init of 500M parameters on the CPU
    # takes seconds); the same allocations end up on the GPU.
    where = torch.device(dev) if hasattr(torch.device, "__enter__") else None
    if where is not None:
        with where:
            m = transformers.AutoModelForCausalLM.from_config(c, torch_dtype=dtype)
    else:
        m = transformers.AutoModelForCausalLM.from_config(c, torch_dtype=dtype)
    return m.to(dev)


def generate_run(spec, dev):
    import torch
    cfg = gen_cfg(spec["family"])
    if spec.get("tiny"):
        cfg = dict(cfg, **spec["tiny"])
    dtype = torch.bfloat16 if spec["precision"] == "bf16" else torch.float32
    model = _hf_model(cfg, dtype, dev).eval()
    model.generation_config.eos_token_id = None  # exactly new_tokens tokens
    model.generation_config.pad_token_id = 0
    ids = torch.randint(0, cfg["vocab_size"], (spec["batch"], spec["prompt"]), device=dev)
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                       max_new_tokens=spec["new_tokens"], min_new_tokens=spec["new_tokens"])


def lora_run(spec, dev):
    import torch
    import peft
    cfg = llama_cfg()
    cfg.pop("model", None)
    if spec.get("tiny"):
        cfg = dict(cfg, **spec["tiny"])
    kw = {}
    if spec["base"] == "4bit":
        import transformers
        kw["quantization_config"] = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    model = _hf_model(cfg, torch.bfloat16, dev)
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32,
                                                       target_modules=["q_proj", "v_proj"]))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids = torch.randint(0, cfg["vocab_size"], (spec["batch"], spec["seq"]), device=dev)
    for _ in range(spec["steps"]):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


RUNS = {"vision": vision_run, "generate": generate_run, "lora": lora_run}


def specs(cpu):
    """Every run, in the order measured (cheap kinds first)."""
    out = []
    if cpu:  # tiny sizes: the code paths, not the figures
        for name in ("resnet18", "mobilenet_v2", "vit_b_16"):
            for setting in ("fp32-sgdm", "bf16-adamw"):
                out.append({"kind": "vision", "model": name, "batch": 2, "setting": setting,
                            "steps": 2, "image": 32 if name != "vit_b_16" else 32})
        tiny_gpt2 = {"n_layer": 2, "n_embd": 64, "n_head": 2}
        tiny_qwen = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
        for fam, tiny in (("gpt2", tiny_gpt2), ("qwen2", tiny_qwen)):
            out.append({"kind": "generate", "family": fam, "batch": 2, "prompt": 8,
                        "new_tokens": 4, "precision": "fp32", "tiny": tiny})
        out.append({"kind": "lora", "base": "bf16", "batch": 2, "seq": 16, "steps": 2,
                    "tiny": {"num_hidden_layers": 2, "hidden_size": 64,
                             "intermediate_size": 128, "num_attention_heads": 4,
                             "num_key_value_heads": 2}})
        return out
    # llama: the untied 250M LLaMA of configs/ (grouped-query attention, 16
    # heads on 4), held out from the generation model's derivation.
    for fam in ("gpt2", "qwen2", "llama"):
        for prec in ("bf16", "fp32"):
            for batch in (1, 16):
                # GPT-2 has 1024 positions: prompt and new tokens must fit in
                # them (past them its embedding lookup fails on the device,
                # which leaves the CUDA context unusable for every later run).
                for prompt in (256, 960 if fam == "gpt2" else 1024):
                    out.append({"kind": "generate", "family": fam, "batch": batch,
                                "prompt": prompt, "new_tokens": 64, "precision": prec})
    bases = ["bf16"] + (["4bit"] if importlib.util.find_spec("bitsandbytes") else [])
    for base in bases:
        for batch in (4, 8):
            for seq in (512, 1024):
                out.append({"kind": "lora", "base": base, "batch": batch, "seq": seq,
                            "steps": 3})
    for setting in SETTINGS:
        for name in VISION:
            for batch in (32, 64):
                out.append({"kind": "vision", "model": name, "batch": batch,
                            "setting": setting, "steps": 3, "image": 224})
    return out


def needs(spec):
    if spec["kind"] == "generate":
        return ["transformers"]
    if spec["kind"] == "lora":
        return ["transformers", "peft"] + (["bitsandbytes"] if spec["base"] == "4bit" else [])
    return ["torchvision"]


# ---------------------------------------------------------------------------
# Predictions (worker processes, CPU only)
# ---------------------------------------------------------------------------

def predict_trace(spec):
    """Worker: trace the run on the fake CUDA device."""
    t0 = time.time()
    try:
        import vram.plan as plan
        r = plan.trace(lambda: RUNS[spec["kind"]](spec, "cuda"))
        return {"trace_bytes": r.tensor_peak_bytes, "trace_mode": r.mode,
                "trace_breakdown": r.breakdown, "trace_seconds": round(time.time() - t0, 2)}
    except BaseException as e:  # noqa: B902 -- recorded, never fatal
        why = "%s: %s" % (type(e).__name__, e)
        if e.__cause__ is not None:  # PyTorch's own reason, e.g. under "Couldn't swap"
            why += " (cause: %s: %s)" % (type(e.__cause__).__name__, e.__cause__)
        return {"trace_error": why[:500],
                "trace_where": traceback.format_exc()[-1500:]}


def predict_structural(spec, vram):
    """`vram plan --generate --json` for a generation run."""
    if spec["kind"] != "generate" or not vram or not os.access(vram, os.X_OK):
        return {}
    import tempfile
    cfg = dict(gen_cfg(spec["family"]), **spec.get("tiny", {}))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    try:
        p = subprocess.run([vram, "plan", "--config", f.name, "--generate", "--batch",
                            str(spec["batch"]), "--prompt", str(spec["prompt"]),
                            "--new-tokens", str(spec["new_tokens"]), "--precision",
                            spec["precision"], "--json"], capture_output=True, text=True,
                           timeout=30)
        if p.returncode != 0:
            return {"structural_error": p.stderr.strip()[:300]}
        o = json.loads(p.stdout)
        phase = o.get("peak_phase", "")
        if phase == "prefill" and o.get("prefill_at"):
            phase += " (%s)" % o["prefill_at"]
        return {"structural_bytes": o["tensor_peak_bytes"], "structural_phase": phase}
    finally:
        os.unlink(f.name)


# ---------------------------------------------------------------------------
# Measuring (this process, the GPU)
# ---------------------------------------------------------------------------

def measure(torch, spec, dev):
    gc.collect()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    RUNS[spec["kind"]](spec, dev)
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    res = {"peak_allocated": torch.cuda.max_memory_allocated() - base,
           "peak_reserved": torch.cuda.max_memory_reserved(),
           "peak_requested": st.get("requested_bytes.all.peak", 0) - base,
           "base_allocated": base, "seconds": round(time.time() - t0, 2)}
    gc.collect()
    return res


def cublas_probe(torch, dev):
    """What a first matmul forward and backward allocate and keep (the
    cuBLAS workspaces the tracer models)."""
    gc.collect()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    a = torch.randn(64, 64, device=dev, requires_grad=True)
    b = torch.randn(64, 64, device=dev)
    m0 = torch.cuda.memory_allocated()
    c = a @ b
    torch.cuda.synchronize()
    m1 = torch.cuda.memory_allocated()
    c.sum().backward()
    torch.cuda.synchronize()
    m2 = torch.cuda.memory_allocated()
    return {"after_forward": m1 - m0 - 64 * 64 * 4, "after_backward": m2 - m0 - 3 * 64 * 64 * 4}


def provenance(torch):
    p = {"date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
         "host": platform.node(), "python": platform.python_version(), "torch": torch.__version__}
    for mod in ("torchvision", "transformers", "peft", "bitsandbytes"):
        try:
            p[mod] = __import__(mod).__version__
        except Exception:
            pass
    if torch.cuda.is_available():
        p["gpu"] = torch.cuda.get_device_name(0)
        p["cuda"] = torch.version.cuda
        try:
            p["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                          "--format=csv,noheader"], capture_output=True,
                                         text=True, timeout=10).stdout.strip()
        except Exception:
            pass
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--vram", default=os.path.join(ROOT, "build", "bin", "vram"))
    ap.add_argument("--budget", type=float, default=270, help="seconds of measuring (270)")
    ap.add_argument("--workers", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU, tiny sizes")
    ap.add_argument("--kinds", default="generate,lora,vision")
    ap.add_argument("--models", default="",
                    help="only these networks or families (comma list; default all)")
    ap.add_argument("--trace-wait", type=float, default=None,
                    help="seconds to wait for the traces after measuring (60; 600 with --cpu)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import torch
    kinds = a.kinds.split(",")
    todo = [s for s in specs(a.cpu) if s["kind"] in kinds]
    if a.models:
        names = set(a.models.split(","))
        todo = [s for s in todo if (s.get("model") or s.get("family") or s["kind"]) in names]
    missing = {}
    for s in todo:
        for mod in needs(s):
            if importlib.util.find_spec(mod) is None:
                missing[s["kind"]] = mod
    todo = [s for s in todo if s["kind"] not in missing]
    for k, mod in missing.items():
        print("plan_measure: %s runs skipped: %s is not installed" % (k, mod), flush=True)
    dev = "cpu" if a.cpu else "cuda"
    prov = provenance(torch)
    probe = None if a.cpu else cublas_probe(torch, dev)
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(a.workers)
    futures = [pool.apply_async(predict_trace, (s,)) for s in todo]
    rows, t0 = [], time.time()
    for s, fut in zip(todo, futures):
        row = {"spec": s}
        if time.time() - t0 > a.budget:
            row["measure_error"] = "skipped: past the %.0f s budget" % a.budget
        else:
            try:
                if a.cpu:
                    RUNS[s["kind"]](s, "cpu")
                    row["measured"] = None
                else:
                    row["measured"] = measure(torch, s, dev)
            except BaseException as e:  # noqa: B902
                row["measure_error"] = ("%s: %s" % (type(e).__name__, e))[:500]
                gc.collect()
                if not a.cpu:
                    torch.cuda.empty_cache()
        row.update(predict_structural(s, a.vram))
        rows.append((row, fut))
        print("plan_measure: %-9s %s %s" % (s["kind"], json.dumps(s, sort_keys=True),
              row.get("measured") or row.get("measure_error", "ran")), flush=True)
    wait = a.trace_wait if a.trace_wait is not None else (600 if a.cpu else 60)
    deadline = time.time() + wait
    path = os.path.join(a.out, "plan_measure.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"provenance": prov, "cublas_probe": probe,
                            "method": "max_memory_allocated minus allocated before the run; "
                                      "cuBLAS workspaces cleared before each run"}) + "\n")
        for row, fut in rows:
            try:
                row.update(fut.get(timeout=max(1.0, deadline - time.time())))
            except mp.TimeoutError:
                row["trace_error"] = "the trace did not finish in time"
            f.write(json.dumps(row, sort_keys=True) + "\n")
    pool.terminate()
    print("plan_measure: %d runs in %.0f s -> %s" % (len(rows), time.time() - t0, path))
    bad = [r for r, _ in rows if "trace_error" in r]
    for r in bad[:5]:
        print("plan_measure: trace failed for %s: %s" % (json.dumps(r["spec"]), r["trace_error"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
