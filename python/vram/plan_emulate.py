# SPDX-License-Identifier: MIT
"""What vram.plan does itself where the tracing PyTorch cannot, or does
otherwise than the PyTorch the job will run on (torch_behaviour.py has the
facts, by version):

  - Autocast: CUDA autocast's casting rules applied to each operator the
    program calls, above autograd (so autograd saves the low-precision
    copies and casts the gradients back, as on the GPU), with autocast's
    cache of weight copies. Used where the tensors are on the meta device
    (a CPU-only PyTorch), which PyTorch's own autocast never touches.
  - Attention: F.scaled_dot_product_attention where the tracing PyTorch
    lacks it (before 2.0), with the fused kernels' allocations (flash:
    output and logsumexp kept for backward; memory-efficient: the same,
    logsumexp rows padded to 32) and their backward buffers; and
    nn.MultiheadAttention's forward as 2.x runs it (packed projection made
    contiguous, SDPA instead of the explicit scores) when the job's PyTorch
    does so and the tracing one does not.
  - Optimizers: the job's default (foreach on CUDA from 2.0) and the
    foreach Adam/AdamW step's temporaries as the job's version has them.
"""

import math
import threading
import types
import weakref

from .torch_behaviour import COMPOSITE_FP32, autocast_lists

_NAME_ALIASES = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow",
                 "__rpow__": "pow"}


def op_name(func):
    """The ATen name of a function the program called (torch.conv2d,
    Tensor.__matmul__, torch._C._nn.linear, ...)."""
    name = getattr(func, "__name__", "") or ""
    return _NAME_ALIASES.get(name, name)


# ---------------------------------------------------------------------------
# Letting a Python-level torch function (F.interpolate, F.multi_head_
# attention_forward, torch.einsum, ...) run with the mode active: its
# guard (has_torch_function...) answers False once, so its body runs and the
# mode sees the operators it calls, as CUDA autocast sees them in C++.
# ---------------------------------------------------------------------------

_GUARDS = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")
_GUARD_MODULES = ("torch.overrides", "torch.nn.functional", "torch.functional", "torch._tensor",
                  "torch.nn.init")


class Transparent:
    """Patches the guards of torch's Python functions for one trace."""

    def __init__(self):
        self.local = threading.local()
        self.saved = []

    def install(self):
        import sys
        for modname in _GUARD_MODULES:
            mod = sys.modules.get(modname)
            if mod is None:
                continue
            for g in _GUARDS:
                orig = getattr(mod, g, None)
                if orig is None:
                    continue
                self.saved.append((mod, g, orig))
                setattr(mod, g, self._guard(orig))

    def uninstall(self):
        for mod, g, orig in reversed(self.saved):
            setattr(mod, g, orig)
        self.saved = []

    def _guard(self, orig):
        local = self.local

        def guard(*a):
            if getattr(local, "skip", False):
                local.skip = False
                return False
            return orig(*a)
        return guard

    def active(self, func):
        """Is FUNC's body running transparently now? (Tensor methods written
        in Python call their C implementation, which reports the Python
        method again: that call is the operator itself.)"""
        return func in getattr(self.local, "stack", ())

    def call(self, mode, func, args, kwargs):
        """Run Python function FUNC with MODE active and its own guard off."""
        stack = self.local.__dict__.setdefault("stack", [])
        stack.append(func)
        self.local.skip = True
        try:
            with mode:
                return func(*args, **kwargs)
        finally:
            self.local.skip = False
            stack.pop()


def is_python_function(func):
    return isinstance(func, types.FunctionType)


# ---------------------------------------------------------------------------
# Autocast
# ---------------------------------------------------------------------------

class Autocast:
    """CUDA autocast's casting, for tensors on DEVICE_TYPE (meta: the
    stand-in for cuda), following the op lists of PyTorch VERSION."""

    def __init__(self, torch, version, device_type="meta"):
        self.torch = torch
        self.lists = autocast_lists(version)
        self.device_type = device_type
        self.cache = {}  # id(weight) -> (weakref to it, its low-precision copy)
        self.nesting = 0
        self.policy = {}
        for pol in ("lower", "fp32", "set_opt_dtype", "append_dtype", "promote", "banned"):
            for n in self.lists[pol]:
                self.policy[n] = pol
        for n in COMPOSITE_FP32:
            self.policy.setdefault(n, "fp32")

    # -- state: PyTorch's own flags (torch.autocast sets them on any build) --
    def enabled(self):
        t = self.torch
        try:
            return bool(t.is_autocast_enabled("cuda"))
        except TypeError:
            return bool(t.is_autocast_enabled())

    def dtype(self):
        t = self.torch
        f = getattr(t, "get_autocast_dtype", None)
        if f is not None:
            try:
                return f("cuda")
            except Exception:
                pass
        return t.get_autocast_gpu_dtype()

    def cache_enabled(self):
        f = getattr(self.torch, "is_autocast_cache_enabled", None)
        return bool(f()) if f is not None else True

    def entered(self):
        self.nesting += 1

    def exited(self):
        self.nesting -= 1
        if self.nesting <= 0:
            self.nesting = 0
            self.cache.clear()

    # -- casting --
    def eligible(self, t):
        torch = self.torch
        return (isinstance(t, torch.Tensor) and t.device.type == self.device_type and
                t.is_floating_point() and t.dtype != torch.float64)

    def cast(self, t, dtype):
        if not self.eligible(t) or t.dtype == dtype:
            return t
        torch = self.torch
        cacheable = (dtype == self.dtype() and t.dtype == torch.float32 and t.requires_grad and
                     t.is_leaf and not t._is_view() and self.cache_enabled())
        if cacheable:
            hit = self.cache.get(id(t))
            if hit is not None and hit[0]() is t:
                return hit[1]
            c = t.to(dtype)
            self.cache[id(t)] = (weakref.ref(t), c)
            return c
        return t.to(dtype)

    def _map(self, x, dtype):
        torch = self.torch
        if isinstance(x, torch.Tensor):
            return self.cast(x, dtype)
        if isinstance(x, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in x):
            return type(x)(self._map(e, dtype) for e in x)
        return x

    def run(self, name, func, args, kwargs):
        """Operators whose parts autocast casts differently from one policy
        for the whole: (True, output), else (False, None).
        cross_entropy_loss computes log_softmax in the input's own dtype
        (it passes that dtype explicitly, which autocast respects) and
        nll_loss in float32: a low-precision input gives low-precision
        log-probabilities (kept for backward) and their float32 copy."""
        torch = self.torch
        if name != "cross_entropy_loss" or not args or not self.eligible(args[0]):
            return False, None
        x = args[0]
        names = ("target", "weight", "reduction", "ignore_index", "label_smoothing")
        a = dict(zip(names, args[1:]))
        a.update({k: v for k, v in kwargs.items() if k in names})
        target = a.get("target")
        if x.dtype == torch.float32 or target is None or target.is_floating_point() or \
                a.get("label_smoothing", 0.0):
            return False, None
        lp = torch.log_softmax(x, 1 if x.dim() > 1 else 0, dtype=x.dtype)
        w = a.get("weight")
        out = torch._C._nn.nll_loss_nd(lp.float(), target,
                                       w.float() if w is not None else None,
                                       a.get("reduction", 1), a.get("ignore_index", -100))
        return True, out

    def apply(self, name, args, kwargs):
        """ARGS, KWARGS as autocast would pass them on to operator NAME."""
        pol = self.policy.get(name)
        if pol is None:
            return args, kwargs
        torch = self.torch
        if pol == "banned":
            raise RuntimeError(
                "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
                "autocast (use binary_cross_entropy_with_logits)")
        if pol in ("lower", "fp32"):
            dt = self.dtype() if pol == "lower" else torch.float32
            return (tuple(self._map(a, dt) for a in args),
                    {k: self._map(v, dt) for k, v in kwargs.items()})
        if pol == "promote":
            flat = [a for a in list(args) + list(kwargs.values())]
            widest = None
            for a in flat:
                for t in (a if isinstance(a, (list, tuple)) else (a,)):
                    if self.eligible(t):
                        widest = torch.float32 if (t.dtype == torch.float32 or
                                                   widest == torch.float32) else t.dtype
            if widest is None:
                return args, kwargs
            return (tuple(self._map(a, widest) for a in args),
                    {k: self._map(v, widest) for k, v in kwargs.items()})
        # set_opt_dtype / append_dtype: float32 through the dtype argument
        if not args or not self.eligible(args[0]):
            return args, kwargs
        if kwargs.get("dtype") is not None or any(isinstance(a, torch.dtype) for a in args):
            return args, kwargs
        kwargs = dict(kwargs, dtype=torch.float32)
        return args, kwargs


# ---------------------------------------------------------------------------
# Fused attention where the tracing PyTorch has none
# ---------------------------------------------------------------------------

def sdp_choice(torch, q, k, mask, dropout_p, enable_gqa, beh):
    """0 math, 1 flash, 2 memory-efficient, as the job's PyTorch on CUDA
    chooses (beh: torch_behaviour.behaviour())."""
    d = int(q.shape[-1])
    grouped = bool(enable_gqa) and k is not None and q.dim() >= 3 and k.dim() >= 3 and \
        int(q.shape[-3]) != int(k.shape[-3])
    if not beh.get("sdpa", True):
        return 0
    if beh.get("flash", True) and q.dtype in (torch.float16, torch.bfloat16) and mask is None \
            and d <= beh.get("flash_head_dim", 256) and d % 8 == 0:
        return 1
    if not grouped and (d % 8 == 0 or q.dtype == torch.float32):
        return 2
    return 0


def make_sdpa(torch, tracer, beh):
    """An F.scaled_dot_product_attention for a PyTorch that has none: the
    math path as PyTorch writes it, or a fused kernel's allocations."""
    from .plan import _attention_bwd_buffers

    class Fused(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, kind):
            b, h, lq, _ = q.shape
            dv = v.shape[-1]
            # The kernels write (batch, seq, heads, dim) and return its transpose.
            out = q.new_empty((b, lq, h, dv)).transpose(1, 2)
            rows = lq if kind == 1 else (lq + 31) // 32 * 32
            lse = q.new_empty((b, h, rows), dtype=torch.float32)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.kind = kind
            return out

        @staticmethod
        def backward(ctx, grad):
            q, k, v, out, lse = ctx.saved_tensors
            name = ("_scaled_dot_product_flash_attention_backward" if ctx.kind == 1 else
                    "_scaled_dot_product_efficient_attention_backward")
            extra = [tracer.alloc(n, "attention_workspace")
                     for n in _attention_bwd_buffers(name, (grad, q, k, v), torch) if n > 0]
            g = grad.transpose(1, 2).contiguous()
            dq = q.new_empty((q.shape[0], q.shape[2], q.shape[1], q.shape[3])).transpose(1, 2)
            dk = k.new_empty((k.shape[0], k.shape[2], k.shape[1], k.shape[3])).transpose(1, 2)
            dvv = v.new_empty((v.shape[0], v.shape[2], v.shape[1], v.shape[3])).transpose(1, 2)
            del g
            for i in extra:
                tracer.free(i)
            return dq, dk, dvv, None

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        kind = sdp_choice(torch, query, key, attn_mask, dropout_p, enable_gqa, beh)
        if kind in (1, 2) and not (query.requires_grad or key.requires_grad or
                                  value.requires_grad) and not torch.is_grad_enabled():
            b, h, lq, _ = query.shape
            return query.new_empty((b, lq, h, value.shape[-1])).transpose(1, 2)
        if kind in (1, 2):
            return Fused.apply(query, key, value, kind)
        # The math path: q and k scaled by sqrt(scale) each, the scores,
        # the mask added, softmax, dropout, the product with v.
        s = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(query.shape[-1]))
        lq, lk = query.shape[-2], key.shape[-2]
        if enable_gqa and key.dim() >= 3 and key.shape[-3] != query.shape[-3]:
            rep = query.shape[-3] // key.shape[-3]
            key = key.repeat_interleave(rep, -3)
            value = value.repeat_interleave(rep, -3)
        q = query * s
        attn = torch.matmul(q, key.transpose(-2, -1) * s)
        if is_causal:
            attn_mask = torch.ones(lq, lk, dtype=torch.bool, device=query.device).tril()
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                m = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device)
                attn_mask = m.masked_fill(attn_mask.logical_not(), float("-inf"))
            attn = attn + attn_mask
        attn = torch.softmax(attn, -1)
        if dropout_p > 0.0:
            attn = torch.nn.functional.dropout(attn, dropout_p)
        return torch.matmul(attn, value)
    return sdpa


def make_mha_forward(torch, orig, sdpa):
    """F.multi_head_attention_forward as PyTorch 2.x runs self-attention
    without weights (the training path of nn.MultiheadAttention): the packed
    projection made contiguous, the heads split by views, SDPA, the heads
    merged by a contiguous copy, the output projection. Anything else goes to
    the tracing PyTorch's own forward."""
    F = torch.nn.functional

    def mha(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
            bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
            training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
            use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
            v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
            is_causal=False):
        simple = (not need_weights and query is key and key is value and bias_k is None and
                  bias_v is None and not add_zero_attn and key_padding_mask is None and
                  attn_mask is None and not use_separate_proj_weight and static_k is None and
                  static_v is None and query.dim() == 3)
        if not simple:
            kw = dict(training=training, key_padding_mask=key_padding_mask,
                      need_weights=need_weights, attn_mask=attn_mask,
                      use_separate_proj_weight=use_separate_proj_weight,
                      q_proj_weight=q_proj_weight, k_proj_weight=k_proj_weight,
                      v_proj_weight=v_proj_weight, static_k=static_k, static_v=static_v)
            try:
                return orig(query, key, value, embed_dim_to_check, num_heads, in_proj_weight,
                            in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p,
                            out_proj_weight, out_proj_bias, average_attn_weights=average_attn_weights,
                            is_causal=is_causal, **kw)
            except TypeError:
                return orig(query, key, value, embed_dim_to_check, num_heads, in_proj_weight,
                            in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p,
                            out_proj_weight, out_proj_bias, **kw)
        tgt, bsz, e = query.shape
        hd = e // num_heads
        proj = F.linear(query, in_proj_weight, in_proj_bias)
        proj = proj.unflatten(-1, (3, e)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
        q, k, v = proj[0], proj[1], proj[2]
        q = q.view(tgt, bsz * num_heads, hd).transpose(0, 1).view(bsz, num_heads, tgt, hd)
        k = k.view(tgt, bsz * num_heads, hd).transpose(0, 1).view(bsz, num_heads, tgt, hd)
        v = v.view(tgt, bsz * num_heads, hd).transpose(0, 1).view(bsz, num_heads, tgt, hd)
        out = sdpa(q, k, v, None, dropout_p if training else 0.0, is_causal)
        out = out.permute(2, 0, 1, 3).contiguous().view(bsz * tgt, e)
        out = F.linear(out, out_proj_weight, out_proj_bias)
        return out.view(tgt, bsz, out.size(1)), None
    return mha


# ---------------------------------------------------------------------------
# Optimizers
# ---------------------------------------------------------------------------

def make_foreach_adam(torch, temps, decoupled):
    """The foreach Adam (DECOUPLED: AdamW) step with TEMPS state-sized
    temporaries (1 as in 2.x, 2 as in 1.13, 0 for the fused kernel): the
    allocations of the job's version; the values do not matter here."""

    def step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *a, **kw):
        # Per-tensor operators (PyTorch 1.13 has no meta kernels for the
        # _foreach_ ones), the temporaries all alive at once as a foreach
        # kernel's list is; the in-place updates allocate nothing.
        if not params:
            return
        lr = kw.get("lr", 1e-3)
        wd = kw.get("weight_decay", 0.0)
        beta1, beta2 = kw.get("beta1", 0.9), kw.get("beta2", 0.999)
        eps = kw.get("eps", 1e-8)
        with torch.no_grad():
            for s in state_steps:
                s += 1
            if wd != 0:
                if decoupled:
                    for p in params:
                        p.mul_(1 - lr * wd)
                else:
                    grads = [g.add(p, alpha=wd) for g, p in zip(grads, params)]
            for m, v, g in zip(exp_avgs, exp_avg_sqs, grads):
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            if temps == 0:
                return
            denom = [v.sqrt() for v in exp_avg_sqs]
            if temps >= 2:
                denom2 = [d.add(eps) for d in denom]
                for p, m, d in zip(params, exp_avgs, denom2):
                    p.addcdiv_(m, d, value=-lr)
                del denom2
            else:
                for p, m, d in zip(params, exp_avgs, denom):
                    d.add_(eps)
                    p.addcdiv_(m, d, value=-lr)
            del denom
    return step
