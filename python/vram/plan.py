# SPDX-License-Identifier: MIT
"""vram.plan -- the GPU memory of any PyTorch program, traced without a GPU.

    python -m vram.plan [--json] [--trace FILE] [--gpu-memory SIZE] PATH.py:FUNCTION

FUNCTION takes no arguments and does what the real program does, written
as ordinary PyTorch code for device "cuda": it builds the model, its
optimizer and inputs and runs a few steps (or an inference call). It runs
here under PyTorch's fake tensors: no GPU, no real weights, no memory for
them. Every allocation and free the program would make on the GPU is
recorded, in order, with its size; the result is

  - tensor_peak_bytes: what torch.cuda.max_memory_allocated() would report
    after FUNCTION (allocations rounded as PyTorch's caching allocator
    rounds them, 512 bytes);
  - a breakdown of the tensors live at that peak (weights, gradients,
    optimizer states, everything else), and the terms the fake run cannot
    see, modelled explicitly (cuBLAS workspaces, the fused attention
    kernels' own buffers, the CUDA context: see MODELLED);
  - optionally a vram trace (docs/TRACE_FORMAT.md) for `vram replay`
    and `vram analyze`.

Two ways to fake the device, chosen from the installed PyTorch:

  - "fake-cuda" (PyTorch built with CUDA; no GPU is used): tensors are
    FakeTensors on device cuda, so autocast, the cuDNN/SDPA kernel choices
    and every CUDA code path run as on the GPU.
  - "meta" (PyTorch built without CUDA, e.g. Debian's 1.13): "cuda" is
    mapped to the meta device. fp32 and pure 16-bit programs trace the
    same; autocast on cuda cannot be emulated there and is refused with
    one line (trace it with a CUDA build of PyTorch).

Python API:

    import vram.plan
    r = vram.plan.trace(fn)          # -> Result
    r.tensor_peak_bytes, r.breakdown, r.events
    r.write_trace("run.trace.csv")
"""

import argparse
import contextlib
import json
import os
import re
import sys
import threading
import time

__all__ = ["trace", "Result", "TraceError", "MODELLED", "main"]

ROUND = 512  # PyTorch's caching allocator rounds every block to 512 bytes

# CUDA context of a PyTorch process on an H200 (data/measurements/README.md);
# the same constant as the structural planner's (src/plan/plan.h).
CONTEXT_BYTES = 591855616

# What a fake run cannot see, and how it is modelled. Values for PyTorch 2.x
# on compute capability 9.x (H100/H200); `--profile` picks others.
PROFILES = {
    "sm90": {
        # cuBLAS workspace: allocated through the caching allocator at the
        # first matmul of each (handle, stream) and kept: 32 MiB on sm90
        # (":4096:8"); cuBLASLt shares it (unified workspace, PyTorch >= 2.6).
        "cublas_workspace": 4096 * 8 * 1024,
        "context": CONTEXT_BYTES,
    },
    "default": {
        # ":4096:2:16:8", every other architecture
        "cublas_workspace": 4096 * 1024 * 2 + 16 * 1024 * 8,
        "context": CONTEXT_BYTES,
    },
}

MODELLED = {
    "cublas_workspace": "cuBLAS workspace, one per thread that runs matmuls (the program's and "
                        "autograd's backward thread), kept for the process's life",
    "attention_workspace": "buffers the fused attention kernels allocate inside their backward "
                           "(flash: fp32 dq accumulator and softmax_d; memory-efficient: fp32 "
                           "delta and grad-q accumulator), freed when the kernel returns",
    "cudnn_workspace": "cuDNN convolution workspaces: chosen by cuDNN at run time, not modelled (0)",
    "cuda_context": "CUDA context of the process (measured on an H200), outside "
                    "max_memory_allocated",
}

_MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot",
               "addr", "_addmm_activation", "_scaled_mm", "_int_mm", "_grouped_mm"}
_FLASH_BWD = {"_scaled_dot_product_flash_attention_backward", "_flash_attention_backward"}
_EFFICIENT_BWD = {"_scaled_dot_product_efficient_attention_backward",
                  "_efficient_attention_backward"}
SHADOW_NUMEL = 1 << 14  # tensors up to this many elements also carry real values
# Integer and boolean tensors (token ids, positions, padding masks: what a
# program's control flow reads) carry them up to this many: a batch of 64
# sequences of 8,192 tokens. Their values cost at most 8 bytes an element
# on the CPU, and the ops on them are indexing and comparisons.
SHADOW_NUMEL_INDEX = 1 << 19


class TraceError(Exception):
    """Tracing failed; the text is one line for the user."""


def _round(n):
    return (n + ROUND - 1) // ROUND * ROUND if n > 0 else 0


def _import_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise TraceError("PyTorch is not importable by %s (%s)" % (sys.executable, e))
    return sys.modules["torch"]


class Result:
    """A traced run: events, the peak and its breakdown."""

    def __init__(self):
        self.events = []          # (op, id, size, label): op in 'a', 'f', 'm'
        self.tensor_peak_bytes = 0
        self.peak_event = -1
        self.peak_phase = "start"
        self.breakdown = {}
        self.mode = ""
        self.torch_version = ""
        self.profile = ""
        self.ops = 0
        self.seconds = 0.0
        self.context_bytes = CONTEXT_BYTES
        self.warnings = []

    @property
    def total_bytes(self):
        return self.tensor_peak_bytes + self.context_bytes

    def write_trace(self, path, meta=""):
        """Write the events as a vram trace (docs/TRACE_FORMAT.md). Sizes
        are the bytes each allocation asked for."""
        from .outfile import open_trace  # never through a link or over another's file
        with open_trace(path) as f:
            f.write("# workload=vram-plan mode=%s torch=%s%s\n" % (
                self.mode, self.torch_version, (" " + meta) if meta else ""))
            f.write("t_us,op,id,size,stream,device,label\n")
            for t, (op, ident, size, label) in enumerate(self.events):
                if op == "m":
                    f.write("%d,m,0,0,0,0,%s\n" % (t, _safe_label(label)))
                else:
                    f.write("%d,%s,%d,%d,0,0,\n" % (t, op, ident, size))

    def as_dict(self):
        return {
            "source": "trace",
            "mode": self.mode,
            "torch": self.torch_version,
            "profile": self.profile,
            "tensor_peak_bytes": self.tensor_peak_bytes,
            "total_bytes": self.total_bytes,
            "peak_phase": self.peak_phase,
            "breakdown": dict(self.breakdown, cuda_context=self.context_bytes),
            "modelled": MODELLED,
            "allocations": sum(1 for e in self.events if e[0] == "a"),
            "ops": self.ops,
            "seconds": round(self.seconds, 3),
            "warnings": self.warnings,
        }


def _safe_label(s):
    s = "".join(" " if (c in ',"' or ord(c) < 32) else c for c in s)
    return (s.encode("utf-8")[:128].decode("utf-8", "ignore").strip() or "mark")


class _Tracer:
    """The state of one trace: live storages, events, tags, modelled terms."""

    def __init__(self, torch, dev_type, profile):
        self.torch = torch
        self.dev_type = dev_type
        self.profile = PROFILES[profile]
        self.result = Result()
        self.live = {}        # storage key -> [id, size, weakref]
        self.sizes = {}       # id -> requested size (live ones)
        self.next_id = 0
        self.cur = 0          # live bytes, rounded
        self.peak = 0
        self.tags = {}        # id -> category
        self.phase = "forward"
        self.in_backward = 0
        self.late_patches = None  # set by _patched: patches for modules imported later
        self.workspaces = set()
        self.modules = []     # weakrefs to modules (whose parameters are tagged)
        self.optimizers = []  # weakrefs to optimizers
        from torch.multiprocessing.reductions import StorageWeakRef
        self.weakref = StorageWeakRef

    # ---- events ----
    def alloc(self, size, tag=None):
        ident = self.next_id
        self.next_id += 1
        self.result.events.append(("a", ident, size, ""))
        self.sizes[ident] = size
        self.cur += _round(size)
        if tag:
            self.tags[ident] = tag
        if self.cur > self.peak:
            self.peak = self.cur
            self.result.peak_event = len(self.result.events) - 1
            self.result.peak_phase = self.phase
        return ident

    def free(self, ident):
        size = self.sizes.pop(ident)
        self.result.events.append(("f", ident, size, ""))
        self.cur -= _round(size)

    def mark(self, label):
        self.result.events.append(("m", 0, 0, label))

    def set_phase(self, phase):
        if phase != self.phase:
            self.phase = phase
            self.mark(phase)

    # ---- storages ----
    def storage_of(self, t):
        try:
            if t.device.type != self.dev_type:
                return None
            f = getattr(t, "untyped_storage", None)
            return f() if f is not None else t._storage()
        except Exception:  # sparse, nested, ... tensors without one storage
            return None

    def key_of(self, st):
        return st._cdata

    def poll(self):
        """Frees since the last op: storages nobody holds any more."""
        dead = [k for k, v in self.live.items() if v[2].expired()]
        for k in dead:
            ident = self.live.pop(k)[0]
            self.free(ident)

    def see(self, t, tag=None):
        """T is an op's output: record its storage if new (or resized)."""
        st = self.storage_of(t)
        if st is None:
            return
        k = self.key_of(st)
        n = st.nbytes()
        v = self.live.get(k)
        if v is not None and v[2].expired():  # address reused after a free
            self.free(self.live.pop(k)[0])
            v = None
        if v is None:
            self.live[k] = [self.alloc(n, tag), n, self.weakref(st)]
        elif v[1] != n:  # resized in place: a new block, then the old one freed
            old = v[0]
            v[0], v[1] = self.alloc(n, tag), n
            self.free(old)
        elif tag:
            self.tags[v[0]] = tag

    def ident_of(self, t):
        st = self.storage_of(t)
        if st is None:
            return None
        v = self.live.get(self.key_of(st))
        return v[0] if v is not None else None

    def tag_tensor(self, t, tag):
        if t is None:
            return
        i = self.ident_of(t)
        if i is not None and self.tags.get(i) in (None, "activations"):
            self.tags[i] = tag

    def tag_states(self):
        """Tag what parameters, their gradients and optimizers hold now."""
        torch = self.torch
        for r in self.modules:
            m = r()
            if m is None:
                continue
            for p in list(getattr(m, "_parameters", {}).values()):
                if p is not None:
                    self.tag_tensor(p, "weights")
                    self.tag_tensor(p.grad, "gradients")
        for r in self.optimizers:
            o = r()
            if o is None:
                continue
            for st in o.state.values():
                if isinstance(st, dict):
                    for v in st.values():
                        if isinstance(v, torch.Tensor):
                            self.tag_tensor(v, "optimizer_states")

    # ---- modelled terms ----
    def modelled_before(self, name, args):
        """Allocations the real kernel makes that the fake one does not;
        returns the ids to free after the op."""
        if name in _MATMUL_OPS:
            who = "backward" if self.in_backward else threading.get_ident()
            if who not in self.workspaces:
                self.workspaces.add(who)
                self.alloc(self.profile["cublas_workspace"], "cublas_workspace")
            return ()
        if name in _FLASH_BWD or name in _EFFICIENT_BWD:
            return tuple(self.alloc(n, "attention_workspace")
                         for n in _attention_bwd_buffers(name, args, self.torch) if n > 0)
        return ()

    def finish(self):
        self.poll()
        r = self.result
        r.tensor_peak_bytes = self.peak
        # The live set at the peak, from the events, classified by tag.
        live = {}
        for op, ident, size, _ in r.events[:r.peak_event + 1]:
            if op == "a":
                live[ident] = size
            elif op == "f":
                live.pop(ident, None)
        b = {"weights": 0, "gradients": 0, "optimizer_states": 0, "activations": 0,
             "cublas_workspace": 0, "attention_workspace": 0, "cudnn_workspace": 0}
        for ident, size in live.items():
            b[self.tags.get(ident, "activations")] += _round(size)
        r.breakdown = b
        r.context_bytes = self.profile["context"]


def _attention_bwd_buffers(name, args, torch):
    """Bytes of the buffers a fused attention backward allocates itself.
    ARGS: (grad_out, query, key, value, out, logsumexp, ...), query
    (batch, heads, seq, dim)."""
    try:
        q = args[1]
        b, h, s, d = (int(x) for x in q.shape)
        k = args[2]
        hk, sk = int(k.shape[1]), int(k.shape[2])
    except Exception:
        return ()
    f32 = 4
    if name in _FLASH_BWD:
        s_r = (s + 127) // 128 * 128
        d_r = (d + 31) // 32 * 32 if d <= 128 else (d + 63) // 64 * 64
        bufs = [b * h * s_r * f32, b * s_r * h * d_r * f32]  # softmax_d, dq_accum
        if hk != h:  # grouped-query: dk, dv for every query head, then summed
            bufs.append(2 * b * sk * h * d * q.element_size())
        return bufs
    bufs = [b * h * s * f32]  # delta
    if q.dtype != torch.float32:
        bufs.append(b * s * h * d * f32)  # grad_q accumulated in fp32
    return bufs


# ---------------------------------------------------------------------------
# The modes
# ---------------------------------------------------------------------------

def _flat(x):
    from torch.utils._pytree import tree_flatten
    return tree_flatten(x)[0]


def _make_modes(torch, tracer, meta):
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.overrides import TorchFunctionMode
    from torch.utils._mode_utils import no_dispatch

    aten = torch.ops.aten
    scalar_read = {aten._local_scalar_dense.default}
    Tensor = torch.Tensor

    try:
        from torch._subclasses.fake_tensor import FakeTensor
    except ImportError:  # pragma: no cover
        FakeTensor = ()

    def is_fake(t):
        return isinstance(t, FakeTensor) if FakeTensor else False

    def shadow_of(t):
        return getattr(t, "_vram_value", None) if isinstance(t, Tensor) else None

    def small(t):
        try:
            limit = SHADOW_NUMEL if t.dtype.is_floating_point or t.dtype.is_complex \
                else SHADOW_NUMEL_INDEX
            return t.numel() <= limit
        except Exception:
            return False

    def to_cpu_value(x):
        """X's real value on the CPU (zeros when unknown), for small tensors.
        A real CPU tensor (a constant such as torch.tensor([...]) being
        lifted into the fake mode) is its own value."""
        v = shadow_of(x)
        if v is None and x.device.type == "cpu" and not is_fake(x):
            return x
        if v is None:
            with no_dispatch():
                v = torch.zeros(tuple(x.shape), dtype=x.dtype)
            try:
                x._vram_value = v
            except Exception:
                pass
        return v

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            tracer.result.ops += 1
            if tracer.late_patches is not None and tracer.late_patches():
                tracer.late_patches = None
            name = func.__name__.split(".")[0] if hasattr(func, "__name__") else str(func)
            if func in scalar_read:
                v = shadow_of(args[0])
                if v is None:
                    return False if args[0].dtype == torch.bool else 0
                with no_dispatch():
                    return v.item()
            if meta and name == "convolution_backward":
                out = _conv_backward_meta(torch, args, kwargs)
            elif name == "_fused_sdp_choice" and args[0].device.type in ("cuda", "meta"):
                out = _sdp_choice_cuda(torch, args, kwargs)
            else:
                out = None
            tracer.poll()
            extra = tracer.modelled_before(name, args)
            if out is None:
                out = func(*args, **kwargs)
            for ident in extra:
                tracer.free(ident)
            for t in _flat(out):
                if isinstance(t, Tensor):
                    tracer.see(t)
            _shadow(torch, func, args, kwargs, out, small, to_cpu_value, no_dispatch)
            return out

    class Device(TorchFunctionMode):
        """Maps "cuda" to the meta device (PyTorch without CUDA)."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if "device" in kwargs:
                kwargs["device"] = _remap(torch, kwargs["device"])
            name = getattr(func, "__name__", "")
            if name == "tolist" and args and isinstance(args[0], Tensor) and is_fake(args[0]):
                # PyTorch 1.13's fake tensors refuse tolist(): the shadow
                # value answers, as item() does.
                with no_dispatch():
                    v = to_cpu_value(args[0])
                    return v.tolist()
            if name == "cuda" and args and isinstance(args[0], Tensor):
                return args[0].to("meta", non_blocking=kwargs.get("non_blocking", False))
            if name in ("to", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor"):
                args = tuple(_remap(torch, a) if isinstance(a, (str, torch.device)) else a
                             for a in args)
            return func(*args, **kwargs)

    return Recorder, Device


def _remap(torch, d):
    if isinstance(d, int):
        return torch.device("meta")
    if isinstance(d, str) and (d == "cuda" or d.startswith("cuda:")):
        return torch.device("meta")
    if isinstance(d, torch.device) and d.type == "cuda":
        return torch.device("meta")
    return d


def _shadow(torch, func, args, kwargs, out, small, to_cpu_value, no_dispatch):
    """Real values for small tensors (masks, token ids, flags), so that the
    program's data-dependent decisions (.item(), `if tensor:`) see what
    they would see: computed on the CPU from the inputs' values (zeros where
    an input's value is unknown, as for values computed from big tensors)."""
    outs = [t for t in _flat(out) if isinstance(t, torch.Tensor)]
    if not outs or not all(small(t) for t in outs):
        return
    ins = [a for a in _flat((args, kwargs)) if isinstance(a, torch.Tensor)]
    if not all(small(t) for t in ins):
        return
    if any(getattr(t, "_vram_value", None) is None for t in ins) and func.__name__.startswith(
            ("normal", "uniform", "rand", "bernoulli", "exponential")):
        return
    try:
        from torch.utils._pytree import tree_map
        cpu = torch.device("cpu")

        def conv(a):
            if isinstance(a, torch.Tensor):
                return to_cpu_value(a)
            if isinstance(a, torch.device):
                return cpu
            return a
        cargs = tree_map(conv, args)
        ckw = tree_map(conv, kwargs)
        if "device" in ckw:
            ckw["device"] = cpu
        with no_dispatch():
            res = func(*cargs, **ckw)
        rflat = [t for t in _flat(res) if isinstance(t, torch.Tensor)]
        if len(rflat) != len(outs):
            return
        for o, r in zip(outs, rflat):
            if tuple(o.shape) == tuple(r.shape) and o.dtype == r.dtype:
                o._vram_value = r
    except Exception:
        return


def _conv_backward_meta(torch, args, kwargs):
    """convolution_backward's output shapes (PyTorch 1.13 has no meta
    kernel for it): grad input, grad weight, grad bias as masked."""
    grad_out, inp, weight = args[0], args[1], args[2]
    mask = kwargs.get("output_mask", args[10] if len(args) > 10 else (True, True, True))
    gi = torch.empty_like(inp) if mask[0] else None
    gw = torch.empty_like(weight) if mask[1] else None
    gb = (torch.empty((weight.shape[0],), dtype=grad_out.dtype, device=grad_out.device)
          if mask[2] else None)
    return (gi, gw, gb)


def _sdp_choice_cuda(torch, args, kwargs):
    """Which fused attention CUDA would pick (fake and meta tensors have a
    choice of their own, which is not the device's): flash for 16-bit
    inputs without a mask and head dim <= 256, memory-efficient otherwise
    when the head dim allows, math last. Grouped query heads
    (enable_gqa with fewer key heads than query heads) rule out the
    memory-efficient kernel: on the H200 with PyTorch 2.11, Qwen2 0.5B in
    fp32 (14 query heads, 2 key heads) generating from 16 x 1024 tokens
    peaked at 4,722 MiB, the math path's S x S scores, where the fake
    choice of the efficient kernel traced 3,461 MiB.
    Returns the SDPBackend number (0 math, 1 flash, 2 efficient)."""
    q = args[0] if args else kwargs["query"]
    k = args[1] if len(args) > 1 else kwargs.get("key")
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    gqa = args[7] if len(args) > 7 else kwargs.get("enable_gqa", False)
    d = int(q.shape[-1])
    grouped = bool(gqa) and k is not None and q.dim() >= 3 and k.dim() >= 3 and \
        int(q.shape[-3]) != int(k.shape[-3])
    if q.dtype in (torch.float16, torch.bfloat16) and mask is None and d <= 256 and d % 8 == 0:
        return 1
    if not grouped and (d % 8 == 0 or q.dtype == torch.float32):
        return 2
    return 0


# ---------------------------------------------------------------------------
# The fake CUDA runtime: what user code asks torch.cuda
# ---------------------------------------------------------------------------

class _Props:
    def __init__(self, total):
        self.name = "vram plan (fake CUDA device)"
        self.total_memory = total
        self.major, self.minor = 9, 0
        self.multi_processor_count = 132


@contextlib.contextmanager
def _patched(torch, tracer, meta, gpu_memory):
    saved = []

    def patch(obj, attr, value):
        saved.append((obj, attr, getattr(obj, attr, None), hasattr(obj, attr)))
        setattr(obj, attr, value)

    cuda = torch.cuda
    patch(cuda, "is_available", lambda: True)
    patch(cuda, "device_count", lambda: 1)
    patch(cuda, "current_device", lambda: 0)
    patch(cuda, "_lazy_init", lambda: None)
    patch(cuda, "set_device", lambda d: None)
    patch(cuda, "synchronize", lambda device=None: None)
    patch(cuda, "empty_cache", lambda: None)
    patch(cuda, "manual_seed", lambda seed: None)
    patch(cuda, "manual_seed_all", lambda seed: None)
    patch(cuda, "get_device_name", lambda device=None: _Props(gpu_memory).name)
    patch(cuda, "get_device_properties", lambda device=None: _Props(gpu_memory))
    patch(cuda, "get_device_capability", lambda device=None: (9, 0))
    patch(cuda, "mem_get_info", lambda device=None: (gpu_memory - tracer.cur, gpu_memory))
    patch(cuda, "memory_allocated", lambda device=None: tracer.cur)
    patch(cuda, "max_memory_allocated", lambda device=None: tracer.peak)
    patch(cuda, "reset_peak_memory_stats", lambda device=None: None)
    patch(cuda, "is_bf16_supported", lambda *a, **k: True)
    # The optimizer's profiling ranges mark its step; nothing is profiled.
    profiler = torch.autograd.profiler

    class _Range:
        def __init__(self, name="", *a, **k):
            self.name = str(name)

        def __enter__(self):
            if self.name.startswith("Optimizer.step"):
                self.prev = tracer.phase
                tracer.poll()
                tracer.set_phase("optimizer step")
            return self

        def __exit__(self, *exc):
            if self.name.startswith("Optimizer.step"):
                tracer.poll()
                tracer.tag_states()
                tracer.set_phase("forward")
            return False

        def __call__(self, f):
            return f
    patch(profiler, "record_function", _Range)
    # backward: a phase, and autograd's own thread for cuBLAS.
    orig_backward, orig_grad = torch.autograd.backward, torch.autograd.grad

    def _wrap(f):
        def run(*a, **k):
            tracer.poll()
            tracer.set_phase("backward")
            tracer.in_backward += 1
            try:
                return f(*a, **k)
            finally:
                tracer.in_backward -= 1
                tracer.poll()
                tracer.tag_states()
                tracer.set_phase("forward")
        return run
    patch(torch.autograd, "backward", _wrap(orig_backward))
    patch(torch.autograd, "grad", _wrap(orig_grad))
    # Parameters and optimizers, to tell weights, gradients and states apart.
    import weakref
    orig_param_new = torch.nn.Parameter.__new__

    # No weak reference to a Parameter itself: PyTorch 2.x moves a module's
    # fake parameters to "cuda" with torch.utils.swap_tensors, which refuses
    # a tensor that has one ("_apply(): Couldn't swap Linear.weight").
    # Modules are never swapped: their parameters are found through them.
    def param_new(cls, data=None, requires_grad=True):
        p = orig_param_new(cls, data, requires_grad)
        tracer.tag_tensor(p, "weights")
        return p
    patch(torch.nn.Parameter, "__new__", param_new)
    orig_module_init = torch.nn.Module.__init__

    def module_init(self, *a, **k):
        orig_module_init(self, *a, **k)
        tracer.modules.append(weakref.ref(self))
    patch(torch.nn.Module, "__init__", module_init)
    orig_opt_init = torch.optim.Optimizer.__init__

    def opt_init(self, *a, **k):
        orig_opt_init(self, *a, **k)
        tracer.optimizers.append(weakref.ref(self))
    patch(torch.optim.Optimizer, "__init__", opt_init)
    if meta:
        amp = torch.autocast
        orig_enter = amp.__enter__

        def enter(self):
            if getattr(self, "device", "cuda") == "cuda" and getattr(self, "_enabled", True):
                raise TraceError(
                    "autocast on cuda needs a PyTorch built with CUDA to trace (no GPU is "
                    "needed); this one (%s) is CPU-only" % torch.__version__)
            return orig_enter(self)
        patch(amp, "__enter__", enter)
    # Module.to()/.cuda()/.half() on fake parameters: each parameter is
    # replaced by a new Parameter (PyTorch 1.x's way, with the overwrite flag
    # set). PyTorch 2.x swaps a fake parameter's contents in place with
    # torch.utils.swap_tensors instead, which refuses a tensor that anything
    # holds a weak reference to, and FakeTensorMode does ("_apply(): Couldn't
    # swap Conv2d.weight ... Cannot swap t1 because it has weakref associated
    # with it"). Subclasses that override _apply call this one through super().
    no_grad = torch.no_grad
    Parameter = torch.nn.Parameter

    def fake_apply(self, fn, recurse=True):
        if recurse:
            for child in self.children():
                child._apply(fn)
        for key, p in list(self._parameters.items()):
            if p is None:
                continue
            with no_grad():
                new = Parameter(fn(p), p.requires_grad)
                if p.grad is not None:
                    new.grad = fn(p.grad)
            self._parameters[key] = new
        for key, b in list(self._buffers.items()):
            if b is not None:
                self._buffers[key] = fn(b)
        return self
    patch(torch.nn.Module, "_apply", fake_apply)

    # Hugging Face transformers counts a fake tensor as tracing (its
    # is_tracing asks is_fake_tensor) and then builds the B x 1 x S x S
    # attention mask that the device run skips: on the H200, LLaMA and
    # Qwen2 generation called SDPA with no mask and enable_gqa (the math
    # path in fp32), the trace with a mask and repeated heads (the
    # memory-efficient kernel), 2,291 MiB traced against 4,297 measured.
    # The trace answers as the device would; transformers is usually
    # imported inside the traced function, so the Recorder asks at each
    # operator until it is there.
    def late_patches():
        utils = sys.modules.get("transformers.utils.import_utils")
        if utils is None:
            return False
        if callable(getattr(utils, "is_fake_tensor", None)):
            patch(utils, "is_fake_tensor", lambda *a, **k: False)
        return True
    tracer.late_patches = late_patches
    fut = torch.__future__
    overwrite = fut.get_overwrite_module_params_on_conversion()
    fut.set_overwrite_module_params_on_conversion(True)
    try:
        yield
    finally:
        fut.set_overwrite_module_params_on_conversion(overwrite)
        for obj, attr, value, had in reversed(saved):
            if had:
                setattr(obj, attr, value)
            else:
                delattr(obj, attr)


def _fake_mode(torch, meta):
    from torch._subclasses.fake_tensor import FakeTensorMode
    import inspect
    params = inspect.signature(FakeTensorMode.__init__).parameters
    kw = {"allow_fallback_kernels": False}
    if "allow_non_fake_inputs" in params:
        kw["allow_non_fake_inputs"] = True
    if meta and "allow_meta" in params:
        kw["allow_meta"] = True
    mode = FakeTensorMode(**kw)
    if meta:
        mode.allow_meta = True
    # Small tensors are not kept as constants: vram's own shadow values do that.
    mode.may_turn_const = lambda t: False
    return mode


def trace(fn, profile="sm90", gpu_memory=80 << 30, mode=None):
    """Run FN (no arguments) on a fake CUDA device and return its Result."""
    torch = _import_torch()
    if mode is None:
        mode = "fake-cuda" if torch.backends.cuda.is_built() else "meta"
    if profile not in PROFILES:
        raise TraceError("unknown profile '%s' (%s)" % (profile, ", ".join(sorted(PROFILES))))
    meta = mode == "meta"
    tracer = _Tracer(torch, "meta" if meta else "cuda", profile)
    tracer.result.mode = mode
    tracer.result.torch_version = torch.__version__
    tracer.result.profile = profile
    Recorder, Device = _make_modes(torch, tracer, meta)
    t0 = time.time()
    fake = _fake_mode(torch, meta)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(torch, tracer, meta, gpu_memory))
        stack.enter_context(fake)
        stack.enter_context(Recorder())
        if meta:
            stack.enter_context(Device())
        tracer.mark("forward")
        fn()
    tracer.finish()
    tracer.result.seconds = time.time() - t0
    return tracer.result


def load_function(spec, tracer_scope=None):
    """PATH.py:FUNCTION -> a callable that loads the file and calls FUNCTION
    (the file is executed inside the trace, so tensors it makes at module
    level are fake too)."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise TraceError("'%s': expected PATH.py:FUNCTION" % spec)
    if not os.path.isfile(path):
        raise TraceError("%s: no such file" % path)
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
        raise TraceError("'%s' is not a Python function name" % name)

    def run():
        import runpy
        d = os.path.dirname(os.path.abspath(path))
        sys.path.insert(0, d)
        try:
            g = runpy.run_path(path, run_name="__vram_plan__")
        finally:
            if sys.path and sys.path[0] == d:
                sys.path.pop(0)
        f = g.get(name)
        if not callable(f):
            raise TraceError("%s has no function %s" % (path, name))
        f()
    return run


def _parse_size(s):
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", s, re.I)
    if not m:
        raise argparse.ArgumentTypeError("'%s' is not a size (80G, 512M, 1073741824)" % s)
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def _fmt(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return "%.2f %s" % (n / div, unit)
    return "%d B" % n


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write("vram: plan: %s (try 'vram plan --help')\n" % message)
        sys.exit(2)


def main(argv=None):
    p = _Parser(prog="vram plan --model",
                description="Trace a PyTorch program's GPU memory without a GPU.")
    p.add_argument("model", metavar="PATH.py:FUNCTION")
    p.add_argument("--json", action="store_true", help="one JSON object, sizes in bytes")
    p.add_argument("--trace", metavar="FILE", help="write the allocations as a vram trace")
    p.add_argument("--gpu-memory", metavar="SIZE", type=_parse_size,
                   help="the GPU's memory: does it fit, the cap to give the job")
    p.add_argument("--profile", default="sm90", choices=sorted(PROFILES),
                   help="modelled constants: sm90 (H100/H200, default) or default")
    p.add_argument("--mode", choices=("fake-cuda", "meta"),
                   help="how the device is faked (default: fake-cuda if PyTorch has CUDA)")
    a = p.parse_args(argv)
    try:
        fn = load_function(a.model)
        # The program's own prints go to stderr when stdout is the JSON.
        with contextlib.redirect_stdout(sys.stderr if a.json else sys.stdout):
            r = trace(fn, profile=a.profile, gpu_memory=a.gpu_memory or (80 << 30),
                      mode=a.mode)
        if a.trace:
            try:
                r.write_trace(a.trace,
                              meta="model=" + os.path.basename(a.model).replace(" ", "_"))
            except OSError as e:
                raise TraceError("--trace: %s: %s" % (a.trace, e.strerror or e)) from None
    except TraceError as e:
        sys.stderr.write("vram: plan: %s\n" % e)
        return 1
    except Exception as e:  # the user's program failed under the fake device
        line = ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:300]
        sys.stderr.write("vram: plan: tracing %s failed: %s\n" % (a.model, line))
        if os.environ.get("VRAM_PLAN_DEBUG"):
            import traceback
            traceback.print_exc()
        return 1
    d = r.as_dict()
    d["model"] = a.model
    headroom = r.total_bytes + r.total_bytes // 8
    if a.gpu_memory:
        d["gpu_memory_bytes"] = a.gpu_memory
        d["fits"] = r.total_bytes <= a.gpu_memory
        d["recommended_limit_bytes"] = headroom
    if a.trace:
        d["trace"] = a.trace
    if a.json:
        print(json.dumps(d, separators=(",", ":")))
        return 0
    b = d["breakdown"]
    print("%s, traced on %s (PyTorch %s), %d ops, %d allocations, %.1f s" % (
        a.model, r.mode, r.torch_version, r.ops, d["allocations"], r.seconds))
    rows = [("weights", b["weights"]), ("gradients", b["gradients"]),
            ("optimizer states", b["optimizer_states"]),
            ("activations, other", b["activations"]),
            ("cuBLAS workspace*", b["cublas_workspace"]),
            ("attention buffers*", b["attention_workspace"])]
    for label, v in rows:
        print("  %-19s %12s" % (label, _fmt(v)))
    print("  %-19s %12s  (max_memory_allocated, in the %s)" % (
        "tensor peak", _fmt(r.tensor_peak_bytes), r.peak_phase))
    print("  %-19s %12s" % ("CUDA context*", _fmt(r.context_bytes)))
    print("  %-19s %12s" % ("total", _fmt(r.total_bytes)))
    print("  * modelled, not traced; cuDNN convolution workspaces are not modelled")
    if a.gpu_memory:
        print("GPU memory %s: %s; cap to give the job (12.5%% headroom): %s" % (
            _fmt(a.gpu_memory), "fits" if d["fits"] else "does NOT fit", _fmt(headroom)))
    if a.trace:
        print("trace: %s (vram replay %s)" % (a.trace, a.trace))
    return 0


if __name__ == "__main__":
    sys.exit(main())
