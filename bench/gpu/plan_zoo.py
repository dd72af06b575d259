#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""plan_zoo.py -- `vram plan --model` on every model of torchvision's
classification, detection and segmentation zoo and on Hugging Face models
built from configs, against torch.cuda.max_memory_allocated(): the traced
prediction on the fake CUDA device (PyTorch's own autocast), the traced
prediction on the meta device as a CPU-only PyTorch traces (vram's autocast
table), and the measurement, for a mixed-precision training step.

    python3 bench/gpu/plan_zoo.py --out DIR [--budget 300] [--kinds ...] [--models a,b]
    python3 bench/gpu/plan_zoo.py --cpu --out DIR --models resnet18    # dry run, no GPU
    python3 bench/gpu/plan_zoo.py --predict-only --torch-version 2.11 --out DIR
        # on a machine without a GPU (a CPU-only PyTorch): the traced
        # predictions alone, for --compare against a GPU run
    python3 bench/gpu/plan_zoo.py --compare DIR/plan_zoo.jsonl [PRED.jsonl]

Every run is the training step vram.plan writes for a named model
(python/vram/plan_builtin.py), so measured and traced run the same code:
mixed-bf16 (torch.autocast bf16, float32 weights), AdamW, two steps, batch
--batch (8) of 224 x 224 images (detection: 2 images of 320 x 320), or of
--seq (256) tokens for Hugging Face. Measured in this process one model
after another, each after gc, empty_cache and clearing cuBLAS's workspaces
(a fresh process's allocations); its peak is max_memory_allocated minus
what was allocated before. The traces run at the same time in CPU worker
processes. A model whose trace gives a reason instead of a figure (a
detection model's data-dependent sizes, a quantized layer) is listed with
its one-line reason.

Targets, per predictor, over the models that have a figure: median
absolute error <= 2%, every model <= 5%. Prints one PASS/MISS row per
predictor and per check, and writes DIR/plan_zoo.jsonl (every run) and
DIR/plan_zoo.md (the table for BENCHMARKS.md).
"""
import argparse
import datetime
import gc
import importlib.util
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

MEDIAN, WORST = 0.02, 0.05
HF_CONFIGS = ["gpt2.json", "bert-base.json", "llama-300m.json", "qwen2-0.5b.json"]


def runs(a):
    """Every run: (spec, batch, image, seq)."""
    from vram import plan_builtin as builtin
    out = []
    kinds = a.kinds.split(",")
    want = set(a.models.split(",")) if a.models else None
    tv = [k for k in ("classification", "detection", "segmentation") if k in kinds]
    if tv and importlib.util.find_spec("torchvision"):
        for kind, name in builtin.zoo(tv):
            if want and name not in want:
                continue
            if kind == "detection":
                out.append({"spec": "torchvision:" + name, "kind": kind, "batch": 2,
                            "image": 64 if a.cpu else 320})
            else:
                out.append({"spec": "torchvision:" + name, "kind": kind,
                            "batch": 2 if a.cpu else a.batch, "image": 64 if a.cpu else 224})
    if "hf" in kinds:
        for c in HF_CONFIGS:
            name = c[:-5]
            if want and name not in want:
                continue
            out.append({"spec": "hf:" + os.path.join(a.hf_dir, name), "kind": "hf",
                        "batch": 2 if a.cpu else a.batch, "seq": 16 if a.cpu else a.seq})
    return out


def hf_dirs(work):
    """data/measurements/configs/NAME.json as NAME/config.json (hf: takes a
    model directory), with the architecture transformers builds."""
    arch = {"gpt2": "GPT2LMHeadModel", "bert": "BertForMaskedLM",
            "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
    for c in HF_CONFIGS:
        with open(os.path.join(ROOT, "data", "measurements", "configs", c)) as f:
            cfg = json.load(f)
        cfg.pop("model", None)
        cfg.setdefault("architectures", [arch.get(cfg.get("model_type"), "")])
        d = os.path.join(work, c[:-5])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)


def step_of(r, precision, steps):
    from vram import plan_builtin as builtin
    return builtin.builtin_step(r["spec"], r["batch"], r.get("image"), r.get("seq"),
                                precision, "adamw", steps)


def predict(r, mode, precision, steps, torch_version):
    """Worker: trace run R on MODE (fake-cuda or meta)."""
    t0 = time.time()
    try:
        import vram.plan as plan
        res = plan.trace(step_of(r, precision, steps), mode=mode, torch_version=torch_version)
        return {"bytes": res.tensor_peak_bytes, "phase": res.peak_phase,
                "torch": res.torch_version, "target": res.target_version,
                "seconds": round(time.time() - t0, 1)}
    except BaseException as e:  # noqa: B902 -- recorded as the model's reason
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if type(e).__name__ not in ("TraceError", "BuiltinError"):
            why = "%s: %s" % (type(e).__name__, why)
        return {"reason": why[:300], "where": traceback.format_exc()[-800:]}


def measure(torch, r, precision, steps):
    gc.collect()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    step_of(r, precision, steps)()
    torch.cuda.synchronize()
    res = {"peak_allocated": torch.cuda.max_memory_allocated() - base,
           "seconds": round(time.time() - t0, 2)}
    gc.collect()
    torch.cuda.empty_cache()
    return res


def autocast_check(torch):
    """The table's lists for this PyTorch against the operators it registers
    CUDA autocast kernels for (a CUDA build). Returns (ok, text)."""
    from vram import torch_behaviour as tb
    schemas = [s for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")]
    names = {s.name[6:] for s in schemas}
    reg = set()
    for s in schemas:
        q = s.name + ("." + s.overload_name if s.overload_name else "")
        try:
            if "\nAutocastCUDA:" in torch._C._dispatch_dump(q):
                reg.add(s.name[6:])
        except RuntimeError:
            pass
    v = tuple(int(x) for x in torch.__version__.split(".")[:2])
    e = tb.autocast_lists(v)
    table = set().union(*(e[k] for k in ("lower", "fp32", "set_opt_dtype", "append_dtype",
                                          "promote", "banned"))) & names
    missing, extra = sorted(reg - table), sorted(table - reg)
    return not missing and not extra, "entry %d.%d: %d ops; registered, not in the table: %s; " \
        "in the table, not registered: %s" % (e["version"] + (len(table), missing or "none",
                                                              extra or "none"))


def quantized_checks(torch, cpu):
    """Quantized layers: refused by name (bitsandbytes, torchao), where installed."""
    import vram.plan as plan
    rows = []
    for mod in ("bitsandbytes", "torchao"):
        if importlib.util.find_spec(mod) is None:
            rows.append((mod, None, "not installed"))
            continue

        def fn(mod=mod):
            m = torch.nn.Sequential(torch.nn.Linear(256, 256)).cuda()
            if mod == "bitsandbytes":
                import bitsandbytes as bnb
                m = torch.nn.Sequential(bnb.nn.Linear4bit(256, 256)).cuda()
            else:
                from torchao.quantization import quantize_, int8_weight_only
                quantize_(m, int8_weight_only())
            m(torch.randn(4, 256, device="cuda")).float().sum()
        try:
            plan.trace(fn, mode="meta" if cpu else None)
            rows.append((mod, False, "traced without refusal"))
        except Exception as e:
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            rows.append((mod, mod in text and "not planned" in text, text[:200]))
    return rows


def compare(rows, preds=("cuda", "meta")):
    """{predictor: [(error, row)]} over rows with a measurement and a figure."""
    errs = {p: [] for p in preds}
    for r in rows:
        meas = (r.get("measured") or {}).get("peak_allocated")
        for p in preds:
            b = (r.get(p) or {}).get("bytes")
            if meas and b:
                errs[p].append(((b - meas) / meas, r))
    return errs


def report(rows, head, out_dir):
    lines = []
    say = lines.append
    prov = head.get("provenance", {})
    say("vram plan on the zoo: %s, torch %s, torchvision %s, transformers %s, %s" % (
        prov.get("gpu", "no GPU"), prov.get("torch", "?"), prov.get("torchvision", "-"),
        prov.get("transformers", "-"), prov.get("date", "?")))
    ok = True
    for label, good, text in head.get("checks", []):
        st = "PASS" if good else ("MISS" if good is False else "-")
        ok &= good is not False
        say("%-44s %s  %s" % (label, st, text))
    errs = compare(rows)
    names = {"cuda": "traced, fake CUDA (PyTorch's autocast)",
             "meta": "traced, meta (vram's autocast, CPU-only)"}
    for p, v in errs.items():
        if not v:
            say("%-44s -     no model with both a figure and a measurement" % names[p])
            continue
        a = [abs(e) for e, _ in v]
        med, worst = statistics.median(a), max(a)
        good = med <= MEDIAN and worst <= WORST
        ok &= good
        w = max(v, key=lambda x: abs(x[0]))[1]["spec"]
        say("%-44s %s  %d models, median %.2f%%, worst %.2f%% (%s)" % (
            names[p], "PASS" if good else "MISS", len(v), 100 * med, 100 * worst, w))
    both = [r for r in rows if (r.get("cuda") or {}).get("bytes") and
            (r.get("meta") or {}).get("bytes")]
    if both:
        d = [abs(r["meta"]["bytes"] - r["cuda"]["bytes"]) / r["cuda"]["bytes"] for r in both]
        say("%-44s -     %d models, median %.2f%%, worst %.2f%%" % (
            "meta against fake CUDA", len(both), 100 * statistics.median(d), 100 * max(d)))
    reasons = [r for r in rows if "reason" in (r.get("cuda") or {}) or
               "reason" in (r.get("meta") or {})]
    for r in reasons:
        why = (r.get("cuda") or {}).get("reason") or (r.get("meta") or {}).get("reason")
        say("  reason, %s: %s" % (r["spec"].split("/")[-1], why))
    for r in rows:
        if "measure_error" in r:
            say("  not measured, %s: %s" % (r["spec"].split("/")[-1], r["measure_error"]))
    md = ["| model | kind | measured MiB | fake CUDA MiB | error | meta (CPU-only) MiB | error |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        meas = (r.get("measured") or {}).get("peak_allocated")
        cells = []
        for p in ("cuda", "meta"):
            b = (r.get(p) or {}).get("bytes")
            reason = (r.get(p) or {}).get("reason")
            cells.append("%.0f" % (b / 2**20) if b else ("reason" if reason else "-"))
            cells.append("%+.1f%%" % (100 * (b - meas) / meas) if b and meas else "-")
        md.append("| %s | %s | %s | %s |" % (r["spec"].split("/")[-1], r["kind"],
                                             "%.0f" % (meas / 2**20) if meas else "-",
                                             " | ".join(cells)))
    text = "\n".join(lines)
    print(text)
    if out_dir:
        with open(os.path.join(out_dir, "plan_zoo.md"), "w") as f:
            f.write(text + "\n\n" + "\n".join(md) + "\n")
    return ok


def provenance(torch):
    p = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
         "host": platform.node(), "python": platform.python_version(), "torch": torch.__version__}
    for mod in ("torchvision", "transformers", "peft", "bitsandbytes", "torchao"):
        try:
            p[mod] = __import__(mod).__version__
        except Exception:
            pass
    if torch.cuda.is_available():
        p["gpu"] = torch.cuda.get_device_name(0)
        p["cuda"] = torch.version.cuda
    return p


def read(path):
    head, rows = {}, []
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            (rows.append(d) if "spec" in d else head.update(d))
    return head, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--budget", type=float, default=300, help="seconds in all (300)")
    ap.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--kinds", default="classification,segmentation,detection,hf")
    ap.add_argument("--models", default="", help="only these (comma list of names)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--precision", default="mixed-bf16")
    ap.add_argument("--torch-version", default=None,
                    help="the job's PyTorch for the traces (default: this one)")
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU, tiny sizes")
    ap.add_argument("--predict-only", action="store_true",
                    help="traces alone (meta mode), no GPU: for --compare")
    ap.add_argument("--compare", nargs="+", metavar="JSONL",
                    help="report on a run; with a second file, its traces as the meta column")
    a = ap.parse_args()
    if a.compare:
        head, rows = read(a.compare[0])
        if len(a.compare) > 1:
            _, pred = read(a.compare[1])
            by = {os.path.basename(p["spec"]): p for p in pred}
            for r in rows:
                p = by.get(os.path.basename(r["spec"]))
                r["meta"] = (p or {}).get("meta") or {"reason": "not traced"}
            head["checks"] = [("traces from %s" % a.compare[1], None,
                               "PyTorch %s for %s" % (next((p["meta"].get("torch") for p in pred
                                                           if "torch" in p.get("meta", {})), "?"),
                                                      a.torch_version or "its target"))]
        return 0 if report(rows, head, os.path.dirname(os.path.abspath(a.compare[0]))) else 1
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    import torch
    a.hf_dir = os.path.join(a.out, "hf-configs")
    hf_dirs(a.hf_dir)
    todo = runs(a)
    gpu = not a.cpu and not a.predict_only
    if gpu and not torch.cuda.is_available():
        print("plan_zoo: no GPU here (use --cpu or --predict-only)")
        return 1
    modes = ["meta"] if a.predict_only else (["fake-cuda", "meta"] if
                                              torch.backends.cuda.is_built() else ["meta"])
    if "hf" in a.kinds and importlib.util.find_spec("transformers") is None:
        todo = [r for r in todo if r["kind"] != "hf"]
        print("plan_zoo: Hugging Face runs skipped: transformers is not installed", flush=True)
    head = {"provenance": provenance(torch), "checks": [],
            "setting": {"precision": a.precision, "optimizer": "adamw", "steps": a.steps,
                        "batch": a.batch, "seq": a.seq}}
    if gpu or torch.backends.cuda.is_built():
        good, text = autocast_check(torch)
        head["checks"].append(("autocast table vs this PyTorch's kernels", good, text))
    for mod, good, text in quantized_checks(torch, not torch.backends.cuda.is_built()):
        head["checks"].append(("quantized %s refused by name" % mod, good, text))
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(a.workers, maxtasksperchild=4)
    futs = {}
    for r in todo:  # the slow traces first would be better, but order = measuring order
        for m in modes:
            futs[(r["spec"], m)] = pool.apply_async(
                predict, (r, m, a.precision, a.steps, a.torch_version))
    deadline = t0 + a.budget
    for r in todo:
        if not gpu:
            continue
        if time.time() > deadline - 60:
            r["measure_error"] = "skipped: past the %.0f s budget" % a.budget
            continue
        try:
            r["measured"] = measure(torch, r, a.precision, a.steps)
        except BaseException as e:  # noqa: B902
            r["measure_error"] = ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:300]
            gc.collect()
            torch.cuda.empty_cache()
        print("plan_zoo: measured %s %s" % (r["spec"].split("/")[-1],
                                            r.get("measured") or r.get("measure_error")),
              flush=True)
    for r in todo:
        for m in modes:
            key = "cuda" if m == "fake-cuda" else "meta"
            try:
                left = max(1.0, deadline - time.time())
                r[key] = futs[(r["spec"], m)].get(timeout=left)
            except mp.TimeoutError:
                r[key] = {"reason": "the trace did not finish within the budget"}
    pool.terminate()
    path = os.path.join(a.out, "plan_zoo.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(head) + "\n")
        for r in todo:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    print("plan_zoo: %d models in %.0f s -> %s" % (len(todo), time.time() - t0, path))
    ok = report(todo, head, a.out)
    return 0 if ok or not gpu else 1


if __name__ == "__main__":
    sys.exit(main())
