# SPDX-License-Identifier: MIT
"""Training steps vram.plan writes itself, for models named instead of
programs:

    torchvision:NAME   a model of torchvision's classification, detection
                       or segmentation zoo (random weights), trained on
                       random images of --image pixels (labels, boxes or
                       masks to match);
    hf:DIR             a Hugging Face model built from DIR/config.json
                       (from_config: random weights, nothing downloaded);
    hf:ORG/NAME        the same, the directory found in the local Hugging
                       Face cache ($HF_HUB_CACHE, $HF_HOME/hub or
                       ~/.cache/huggingface/hub); never downloaded.

Each step is ordinary PyTorch code for device "cuda": build the model and
optimizer, then STEPS times forward, loss, backward, optimizer step and
zero_grad(set_to_none=True), under the precision asked for:

    fp32         everything in float32
    mixed-bf16   float32 weights, torch.autocast("cuda", torch.bfloat16)
    mixed-fp16   the same in float16, with a GradScaler
    bf16, fp16   weights, gradients, states and inputs in 16 bits
"""

import json
import os

__all__ = ["PRECISIONS", "OPTIMIZERS", "builtin_step", "zoo", "resolve_hf", "is_builtin"]

PRECISIONS = ("fp32", "mixed-bf16", "mixed-fp16", "bf16", "fp16")
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw")
ZOO_KINDS = ("classification", "detection", "segmentation")


class BuiltinError(Exception):
    """A named model that cannot be built; the text is one line."""


def is_builtin(spec):
    return spec.startswith("torchvision:") or spec.startswith("hf:")


# ---------------------------------------------------------------------------
# torchvision
# ---------------------------------------------------------------------------

def zoo(kinds=ZOO_KINDS):
    """[(kind, name)] of torchvision's zoo as the installed torchvision has it."""
    import torchvision
    from torchvision import models
    out = []
    mods = {"classification": models, "detection": models.detection,
            "segmentation": models.segmentation}
    list_models = getattr(models, "list_models", None)
    for kind in kinds:
        mod = mods[kind]
        if list_models is not None:
            names = list_models(module=mod)
        else:  # torchvision before 0.14: the lower-case builders of the module
            names = sorted(n for n, f in vars(mod).items()
                           if callable(f) and n[:1].islower() and not n.startswith("_") and
                           "weights" in getattr(getattr(f, "__code__", None), "co_varnames", ()))
        out += [(kind, n) for n in names]
    del torchvision
    return out


def _kind_of(name):
    for kind, n in zoo():
        if n == name:
            return kind
    return None


def _optimizer(torch, params, name):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4)
    return torch.optim.AdamW(params, lr=1e-4)


def _train(torch, model, make_loss, precision, optimizer, steps):
    """STEPS training steps of MODEL; MAKE_LOSS() runs the forward pass."""
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}
    if precision in low:
        model = model.to(low[precision])
    opt = _optimizer(torch, [p for p in model.parameters() if p.requires_grad], optimizer)
    mixed = precision.startswith("mixed-")
    dtype = torch.float16 if precision == "mixed-fp16" else torch.bfloat16
    scaler = None
    if precision == "mixed-fp16":
        amp = getattr(torch, "amp", None)
        scaler = (amp.GradScaler("cuda") if amp is not None and hasattr(amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())
    for _ in range(steps):
        with torch.autocast("cuda", dtype=dtype, enabled=mixed):
            loss = make_loss()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)
        del loss


def torchvision_step(name, batch, image=224, precision="fp32", optimizer="adamw", steps=2):
    """A function that trains torchvision model NAME for STEPS steps."""
    def step():
        import torch
        from torchvision import models
        kind = _kind_of(name)
        if kind is None:
            raise BuiltinError("torchvision has no classification, detection or segmentation "
                               "model '%s' (python -m vram.plan --list torchvision)" % name[:60])
        get = getattr(models, "get_model_builder", None)
        mod = {"classification": models, "detection": models.detection,
               "segmentation": models.segmentation}[kind]
        builder = get(name) if get is not None else getattr(mod, name)
        fdt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
        torch.manual_seed(0)
        if kind == "classification":
            kw = {"image_size": image} if name.startswith("vit_") and image != 224 else {}
            model = builder(weights=None, **kw).cuda().train()
            x = torch.randn(batch, 3, image, image, device="cuda", dtype=fdt)
            y = torch.randint(0, 1000, (batch,), device="cuda")

            def loss():
                out = model(x)
                if not isinstance(out, torch.Tensor):  # Inception, GoogLeNet: (logits, aux)
                    out = out[0]
                return torch.nn.functional.cross_entropy(out, y)
        elif kind == "segmentation":
            model = builder(weights=None, weights_backbone=None, num_classes=21).cuda().train()
            x = torch.randn(batch, 3, image, image, device="cuda", dtype=fdt)
            y = torch.randint(0, 21, (batch, image, image), device="cuda")

            def loss():
                return torch.nn.functional.cross_entropy(model(x)["out"], y)
        else:
            model = builder(weights=None, weights_backbone=None, num_classes=91).cuda().train()
            xs = [torch.rand(3, image, image, device="cuda", dtype=fdt) for _ in range(batch)]
            q = image // 4
            targets = []
            for i in range(batch):
                t = {"boxes": torch.tensor([[q, q, 3 * q, 3 * q]], dtype=torch.float32,
                                           device="cuda"),
                     "labels": torch.tensor([1 + i % 90], device="cuda")}
                if name.startswith("maskrcnn"):
                    m = torch.zeros(1, image, image, dtype=torch.uint8, device="cuda")
                    m[:, q:3 * q, q:3 * q] = 1
                    t["masks"] = m
                if name.startswith("keypointrcnn"):
                    kp = torch.full((1, 17, 3), float(2 * q), device="cuda")
                    kp[..., 2] = 1
                    t["keypoints"] = kp
                targets.append(t)

            def loss():
                return sum(model(xs, targets).values())
        _train(torch, model, loss, precision, optimizer, steps)
    return step


# ---------------------------------------------------------------------------
# Hugging Face, from a configuration
# ---------------------------------------------------------------------------

def _hub_cache():
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return env["HF_HUB_CACHE"]
    if env.get("HUGGINGFACE_HUB_CACHE"):
        return env["HUGGINGFACE_HUB_CACHE"]
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    return os.path.join(home, "hub")


def resolve_hf(ref):
    """hf:REF -> the directory holding its config.json: REF itself (a
    directory, or a config.json), else a model id in the local cache."""
    if not ref:
        raise BuiltinError("hf: needs a model directory or a model id (hf:gpt2, hf:DIR)")
    if os.path.isdir(ref):
        if not os.path.isfile(os.path.join(ref, "config.json")):
            raise BuiltinError("%s: no config.json in this directory" % ref[:200])
        return ref
    if os.path.isfile(ref):
        if os.path.basename(ref) != "config.json":
            raise BuiltinError("%s: give the model's directory or its config.json" % ref[:200])
        return os.path.dirname(os.path.abspath(ref))
    parts = ref.split("/")
    if len(parts) > 2 or not all(p and p not in (".", "..") and
                                 all(c.isalnum() or c in "-_." for c in p) for p in parts):
        raise BuiltinError("'%s' is neither a directory nor a model id (ORG/NAME)" % ref[:200])
    cache = _hub_cache()
    repo = os.path.join(cache, "models--" + "--".join(parts))
    snaps = os.path.join(repo, "snapshots")
    rev = None
    try:
        with open(os.path.join(repo, "refs", "main")) as f:
            rev = f.read().strip()
    except OSError:
        pass
    cands = []
    if rev and "/" not in rev and rev not in (".", ".."):
        cands.append(os.path.join(snaps, rev))
    try:
        others = sorted((os.path.join(snaps, d) for d in os.listdir(snaps)),
                        key=lambda p: os.stat(p).st_mtime, reverse=True)
        cands += others
    except OSError:
        pass
    for c in cands:
        if os.path.isfile(os.path.join(c, "config.json")):
            return c
    raise BuiltinError("model id '%s' is not in the local Hugging Face cache (%s) and vram "
                       "plan never downloads: give the model's directory" % (ref[:100], cache))


def hf_step(ref, batch, seq=512, precision="fp32", optimizer="adamw", steps=2):
    """A function that trains the Hugging Face model REF, built from its
    configuration, on BATCH random sequences of SEQ tokens."""
    d = resolve_hf(ref)
    try:
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        if not isinstance(cfg, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise BuiltinError("%s/config.json: %s" % (d[:200], str(e).splitlines()[0][:120]))

    def step():
        import torch
        try:
            import transformers
        except ImportError as e:
            raise BuiltinError("Hugging Face models need transformers, which this python "
                               "cannot import (%s)" % e)
        config = transformers.AutoConfig.from_pretrained(d)
        archs = " ".join(getattr(config, "architectures", None) or [])
        auto = None
        for name in (("AutoModelForCausalLM",) if "CausalLM" in archs or "LMHead" in archs
                     else ()) + ("AutoModelForMaskedLM", "AutoModelForCausalLM", "AutoModel"):
            cls = getattr(transformers, name, None)
            if cls is None:
                continue
            try:
                torch.manual_seed(0)
                model = cls.from_config(config)
                auto = name
                break
            except (ValueError, KeyError):
                continue
        if auto is None:
            raise BuiltinError("%s: transformers builds no model from this config "
                               "(model_type %s)" % (d[:200], cfg.get("model_type")))
        model = model.cuda().train()
        vocab = int(getattr(config, "vocab_size", 0) or cfg.get("vocab_size") or 1000)
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")

        def loss():
            if auto == "AutoModel":
                out = model(input_ids=ids)
                h = out[0] if not hasattr(out, "last_hidden_state") else out.last_hidden_state
                return h.float().pow(2).mean()
            return model(input_ids=ids, labels=ids).loss
        _train(torch, model, loss, precision, optimizer, steps)
    return step


def builtin_step(spec, batch, image=None, seq=None, precision="fp32", optimizer="adamw",
                 steps=2):
    """The step function of a torchvision:NAME or hf:REF spec."""
    if precision not in PRECISIONS:
        raise BuiltinError("precision '%s': unknown (%s)" % (precision[:40], ", ".join(PRECISIONS)))
    if optimizer not in OPTIMIZERS:
        raise BuiltinError("optimizer '%s': unknown (%s)" % (optimizer[:40], ", ".join(OPTIMIZERS)))
    if not batch or batch < 1:
        raise BuiltinError("%s needs --batch (images or sequences per step)" % spec[:80])
    kind, _, ref = spec.partition(":")
    if kind == "torchvision":
        if seq:
            raise BuiltinError("--seq goes with hf: models; torchvision takes --image")
        return torchvision_step(ref, batch, image or 224, precision, optimizer, steps)
    if image:
        raise BuiltinError("--image goes with torchvision: models; hf: takes --seq")
    return hf_step(ref, batch, seq or 512, precision, optimizer, steps)
