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

from . import plan_emulate as _emulate
from . import torch_behaviour as _behaviour

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
# Whether the tracing PyTorch lacks meta kernels for the _foreach_ ops (1.x).
_FOREACH_META_MISSING = True
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
        self.target_version = ""
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
            "torch_target": self.target_version,
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

    def __init__(self, torch, dev_type, profile, beh=None):
        self.torch = torch
        self.dev_type = dev_type
        self.profile = PROFILES[profile]
        # The job's PyTorch (torch_behaviour.behaviour()); its cuBLAS workspace.
        self.beh = beh or {}
        self.cublas_bytes = self.beh.get("cublas_workspace", self.profile["cublas_workspace"])
        self.fake = None          # the FakeTensorMode of the trace
        self.autocast = None      # plan_emulate.Autocast where vram applies autocast
        self.transparent = None   # plan_emulate.Transparent, with it
        self.fused_step = 0       # inside the step of an optimizer asked for fused=True
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
                self.alloc(self.cublas_bytes, "cublas_workspace")
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
            elif meta and name in ("nll_loss2d_forward", "nll_loss2d_backward"):
                out = _nll_loss2d_meta(torch, name, args, kwargs)
            elif meta and name == "_amp_foreach_non_finite_check_and_unscale_":
                return None  # GradScaler's check: in place, allocates nothing
            elif meta and name == "_amp_update_scale_":
                out = args[0]  # in place on the scale
            elif meta and name.startswith("_foreach_") and _FOREACH_META_MISSING:
                # PyTorch 1.x has no meta kernels for the multi-tensor ops: in
                # place they allocate nothing, otherwise one result per tensor.
                if name.endswith("_"):
                    return None
                shape = (lambda t: ()) if name == "_foreach_norm" else (lambda t: t.shape)
                out = [t.new_empty(shape(t)) for t in args[0]]
            elif name == "_fused_sdp_choice" and args[0].device.type in ("cuda", "meta"):
                out = _sdp_choice_cuda(torch, args, kwargs, tracer.beh)
            else:
                out = None
            if meta and tracer.fake is not None and any(
                    isinstance(a, Tensor) and a.device.type == "meta" and not is_fake(a)
                    for a in _flat((args, kwargs))):
                # PyTorch 1.13 makes an index given as a list ([0, 2]) as a
                # meta tensor outside the fake mode: made fake here.
                from torch.utils._pytree import tree_map
                conv = (lambda a: tracer.fake.from_tensor(a) if isinstance(a, Tensor) and
                        a.device.type == "meta" and not is_fake(a) else a)
                args, kwargs = tree_map(conv, args), tree_map(conv, kwargs)
            tracer.poll()
            extra = tracer.modelled_before(name, args)
            if out is None and name in _DATA_DEPENDENT:
                out = _data_dependent(torch, name, func, args, kwargs, shadow_of, no_dispatch)
            if out is None:
                try:
                    out = func(*args, **kwargs)
                except NotImplementedError:
                    # No meta kernel (PyTorch 1.x) for a backward operator:
                    # an out= variant fills the tensor it was given (already
                    # allocated, as large as the input); the others return a
                    # gradient shaped as their input.
                    if not meta:
                        raise
                    given = kwargs.get("grad_input", kwargs.get("out"))
                    if isinstance(given, Tensor):
                        out = given
                    elif name.endswith("_backward") and len(args) > 1 and \
                            isinstance(args[1], Tensor):
                        out = torch.empty_like(args[1])
                    else:
                        raise
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
            if name in ("tensor", "as_tensor") and str(kwargs.get("device")) == "meta" and \
                    not (args and isinstance(args[0], Tensor)):
                # PyTorch 1.13 makes these on meta outside the fake mode:
                # made on the CPU (a constant with its values), then moved.
                kwargs.pop("device")
                return func(*args, **kwargs).to("meta")
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
            ac = tracer.autocast
            if ac is not None and ac.enabled():
                # CUDA autocast, applied here, above autograd, as PyTorch
                # applies it above autograd on the device. A torch function
                # written in Python runs with this mode on, so that the
                # operators it calls are cast as they would be.
                op = _emulate.op_name(func)
                done, out = ac.run(op, func, args, kwargs)
                if done:
                    return out
                args, kwargs = ac.apply(op, args, kwargs)
                if _emulate.is_python_function(func) and not tracer.transparent.active(func):
                    return tracer.transparent.call(self, func, args, kwargs)
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
    # (grad_output, input, weight, bias_sizes, stride, padding, dilation,
    # transposed, output_padding, groups, output_mask): the bias's size is
    # given (a transposed convolution's weight is in x out / groups x ...).
    bias_sizes = args[3] if len(args) > 3 else kwargs.get("bias_sizes")
    out_ch = int(bias_sizes[0]) if bias_sizes else int(weight.shape[0])
    gb = (torch.empty((out_ch,), dtype=grad_out.dtype, device=grad_out.device)
          if mask[2] else None)
    return (gi, gw, gb)


# Operators whose output size depends on tensor values (or that have no
# fake kernel: torchvision's box operators): sized by _data_dependent.
_DATA_DEPENDENT = {"nonzero", "masked_select", "index", "_unique2", "unique_consecutive",
                   "unique_dim", "nms", "roi_align", "_roi_align_backward"}


def _data_dependent(torch, name, func, args, kwargs, shadow_of, no_dispatch):
    """The output of an operator whose size depends on tensor values: from
    the inputs' real values where vram knows them (small tensors), else the
    largest the values allow (every element selected, every box kept), which
    is what the program's own caps then bound (detection models keep at most
    their configured number of proposals and sampled boxes). Returns None to
    let the operator run as it is."""
    def known(t):
        return shadow_of(t)

    def empty(shape, dtype, like):
        return torch.empty(tuple(int(x) for x in shape), dtype=dtype, device=like.device)

    long = torch.int64
    if name == "nonzero":
        x = args[0]
        v = known(x)
        with no_dispatch():
            n = int((v != 0).sum()) if v is not None else x.numel()
            real = v.nonzero() if v is not None else None
        out = empty((n, x.dim()), long, x)
        if real is not None:
            out._vram_value = real
        return out
    if name == "masked_select":
        x, mask = args[0], args[1]
        v = known(mask)
        with no_dispatch():
            shape = torch.broadcast_shapes(tuple(x.shape), tuple(mask.shape))
            n = int(v.expand(shape).sum()) if v is not None else \
                int(torch.Size(shape).numel())
        return empty((n,), x.dtype, x)
    if name == "index":
        x, idx = args[0], list(args[1])
        if not any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in idx):
            return None
        new = []
        for i in idx:
            if i is None or i.dtype not in (torch.bool, torch.uint8):
                new.append(i)
                continue
            v = known(i)
            with no_dispatch():
                cols = v.nonzero().t() if v is not None else None
            n = cols.shape[1] if cols is not None else i.numel()
            for d in range(i.dim()):
                c = empty((n,), long, i)
                with no_dispatch():
                    c._vram_value = (cols[d].clone() if cols is not None else
                                     torch.zeros(n, dtype=long))
                new.append(c)
        return func(x, new)
    if name in ("_unique2", "unique_consecutive", "unique_dim"):
        x = args[0]
        if name == "unique_dim":
            return None
        ret_inv = args[2] if len(args) > 2 else kwargs.get("return_inverse", False)
        ret_cnt = args[3] if len(args) > 3 else kwargs.get("return_counts", False)
        v = known(x)
        with no_dispatch():
            n = int(v.unique().numel()) if v is not None else x.numel()
        return (empty((n,), x.dtype, x), empty(x.shape if ret_inv else (0,), long, x),
                empty((n,) if ret_cnt else (0,), long, x))
    if name == "nms":
        boxes, scores = args[0], args[1]
        vb, vs = known(boxes), known(scores)
        if vb is not None and vs is not None:
            with no_dispatch():
                real = func(vb, vs, *args[2:])
            out = empty((real.numel(),), long, boxes)
            out._vram_value = real
            return out
        return empty((boxes.shape[0],), long, boxes)
    if name == "roi_align":
        x, rois, ph, pw = args[0], args[1], args[3], args[4]
        return empty((rois.shape[0], x.shape[1], ph, pw), x.dtype, x)
    if name == "_roi_align_backward":
        g = args[0]
        return empty(args[5:9], g.dtype, g)
    return None


def _nll_loss2d_meta(torch, name, args, kwargs):
    """nll_loss2d's shapes (PyTorch 1.13 has no meta kernel for it): the
    loss (per pixel without reduction, else a scalar) and the total weight;
    backward: the gradient of the input."""
    if name == "nll_loss2d_backward":
        return torch.empty_like(args[1])
    inp, target = args[0], args[1]
    reduction = args[3] if len(args) > 3 else kwargs.get("reduction", 1)
    shape = tuple(target.shape) if reduction == 0 else ()
    return (torch.empty(shape, dtype=inp.dtype, device=inp.device),
            torch.empty((), dtype=inp.dtype, device=inp.device))


def _sdp_choice_cuda(torch, args, kwargs, beh=None):
    """Which fused attention CUDA would pick (fake and meta tensors have a
    choice of their own, which is not the device's): flash for 16-bit
    inputs without a mask and head dim <= 256, memory-efficient otherwise
    when the head dim allows, math last. Grouped query heads
    (enable_gqa with fewer key heads than query heads) rule out the
    memory-efficient kernel: on the H200 with PyTorch 2.11, Qwen2 0.5B in
    fp32 (14 query heads, 2 key heads) generating from 16 x 1024 tokens
    peaked at 4,722 MiB, the math path's S x S scores, where the fake
    choice of the efficient kernel traced 3,461 MiB.
    BEH (torch_behaviour.behaviour()) is the job's PyTorch: flash's head
    dimensions and whether it exists there.
    Returns the SDPBackend number (0 math, 1 flash, 2 efficient)."""
    q = args[0] if args else kwargs["query"]
    k = args[1] if len(args) > 1 else kwargs.get("key")
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    gqa = args[7] if len(args) > 7 else kwargs.get("enable_gqa", False)
    return _emulate.sdp_choice(torch, q, k, mask, 0.0, gqa, beh or {})


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
        _refuse_quantized(type(data), "weights")
        p = orig_param_new(cls, data, requires_grad)
        tracer.tag_tensor(p, "weights")
        return p
    patch(torch.nn.Parameter, "__new__", param_new)
    orig_module_init = torch.nn.Module.__init__

    def module_init(self, *a, **k):
        _refuse_quantized(type(self), "layer")
        orig_module_init(self, *a, **k)
        tracer.modules.append(weakref.ref(self))
    patch(torch.nn.Module, "__init__", module_init)
    orig_opt_init = torch.optim.Optimizer.__init__
    beh = tracer.beh
    own = _behaviour.behaviour(_torch_version(torch))
    # The job's optimizer defaults where the tracing PyTorch would choose
    # otherwise: foreach on CUDA from 2.0 (1.13: the per-parameter loop);
    # on the meta device PyTorch 2.x's own default would not pick foreach.
    flip_foreach = meta or beh.get("foreach_default") != own["foreach_default"]

    def opt_init(self, *a, **k):
        _refuse_quantized(type(self), "optimizer")
        orig_opt_init(self, *a, **k)
        tracer.optimizers.append(weakref.ref(self))
        if flip_foreach:
            for g in self.param_groups:
                if "foreach" in g and g["foreach"] is None:
                    g["foreach"] = beh["foreach_default"]
    patch(torch.optim.Optimizer, "__init__", opt_init)
    if meta and own["version"] < (2, 0):
        # Adam/AdamW(fused=True): a CUDA-only kernel (AdamW has none before
        # 2.0) that updates in place, with no temporaries: the foreach step
        # without them.
        for cls in (torch.optim.Adam, torch.optim.AdamW):
            def fused_init(self, *a, _orig=cls.__init__, **k):
                fused = bool(k.pop("fused", False))
                _orig(self, *a, **k)
                if not fused:
                    return
                for g in self.param_groups:
                    g["foreach"] = True
                step = self.step

                def fused_step(*sa, **sk):
                    tracer.fused_step += 1
                    try:
                        return step(*sa, **sk)
                    finally:
                        tracer.fused_step -= 1
                self.step = fused_step
            patch(cls, "__init__", fused_init)
    if own["version"] < (2, 0):
        # The foreach Adam/AdamW step of the job's version (its temporaries),
        # in place of the tracing 1.x's own.
        for modname, fname, decoupled in (("torch.optim.adam", "_multi_tensor_adam", False),
                                          ("torch.optim.adamw", "_multi_tensor_adamw", True)):
            mod = sys.modules.get(modname)
            if mod is not None and hasattr(mod, fname):
                impl = {t: _emulate.make_foreach_adam(torch, t, decoupled) for t in (0, 1, 2)}

                def foreach_step(*sa, _impl=impl, **sk):
                    t = 0 if tracer.fused_step else beh.get("foreach_adam_temps", 1)
                    return _impl[t](*sa, **sk)
                patch(mod, fname, foreach_step)
    F = torch.nn.functional
    if beh.get("sdpa") and not hasattr(F, "scaled_dot_product_attention"):
        # The job's PyTorch has F.scaled_dot_product_attention, the tracing one
        # does not (before 2.0): vram's, with the fused kernels' allocations.
        patch(F, "scaled_dot_product_attention", _emulate.make_sdpa(torch, tracer, beh))
    if beh.get("mha_uses_sdpa") and own["version"] < (2, 0):
        sdpa = getattr(F, "scaled_dot_product_attention", None) or \
            _emulate.make_sdpa(torch, tracer, beh)
        patch(F, "multi_head_attention_forward",
              _emulate.make_mha_forward(torch, F.multi_head_attention_forward, sdpa))
    if meta:
        # Tensors on the meta device stand for CUDA ones (GradScaler asserts it).
        patch(torch.Tensor, "is_cuda", property(lambda t: t.device.type in ("cuda", "meta")))
        # CUDA autocast, applied by vram (plan_emulate.Autocast): torch.autocast
        # sets PyTorch's own flags (is_autocast_enabled, the dtype), which the
        # emulation reads; the meta tensors never reach PyTorch's casts.
        amp = torch.autocast
        orig_enter, orig_exit = amp.__enter__, amp.__exit__
        tracer.autocast = _emulate.Autocast(torch, beh.get("version", own["version"]))
        tracer.transparent = _emulate.Transparent()
        tracer.transparent.install()
        saved.append((tracer.transparent, "uninstall", None, False))

        def on_cuda(self):
            return str(getattr(self, "device", "cuda")) == "cuda"

        def enter(self):
            r = orig_enter(self)
            if on_cuda(self):
                tracer.autocast.entered()
            return r

        def exit_(self, *exc):
            try:
                return orig_exit(self, *exc)
            finally:
                if on_cuda(self):
                    tracer.autocast.exited()
        patch(amp, "__enter__", enter)
        patch(amp, "__exit__", exit_)
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
    pending = {"transformers": True, "torchvision": meta}

    def late_patches():
        utils = sys.modules.get("transformers.utils.import_utils")
        if pending["transformers"] and utils is not None:
            pending["transformers"] = False
            if callable(getattr(utils, "is_fake_tensor", None)):
                patch(utils, "is_fake_tensor", lambda *a, **k: False)
        boxes = sys.modules.get("torchvision.ops.boxes")
        if pending["torchvision"] and boxes is not None:
            # torchvision's nms has no autograd kernel for the meta device:
            # called below autograd (it has no gradient), where the
            # Recorder sizes it.
            pending["torchvision"] = False
            op = torch.ops.torchvision.nms

            def nms(boxes, scores, iou_threshold):
                guard = torch._C._AutoDispatchBelowAutograd()  # a guard while it lives
                try:
                    return op(boxes, scores, iou_threshold)
                finally:
                    del guard
            patch(boxes, "nms", nms)
        return not any(pending.values())
    tracer.late_patches = late_patches
    fut = torch.__future__
    overwrite = fut.get_overwrite_module_params_on_conversion()
    fut.set_overwrite_module_params_on_conversion(True)
    try:
        yield
    finally:
        fut.set_overwrite_module_params_on_conversion(overwrite)
        for obj, attr, value, had in reversed(saved):
            if isinstance(obj, _emulate.Transparent):
                obj.uninstall()
            elif had:
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


def _torch_version(torch):
    """The tracing PyTorch's (major, minor), within the versions vram knows."""
    try:
        v = tuple(int(x) for x in torch.__version__.split(".")[:2])
    except ValueError:
        v = _behaviour.KNOWN_RANGE[1]
    lo, hi = _behaviour.KNOWN_RANGE
    return min(max(v, lo), hi)


def _refuse_quantized(cls, what):
    """Quantized weights, layers and optimizers of bitsandbytes and torchao:
    their CUDA kernels have no meta or fake implementation, so a trace
    cannot run them; refused by name, in one line."""
    mod = getattr(cls, "__module__", "") or ""
    top = mod.split(".")[0]
    if top in ("bitsandbytes", "torchao"):
        raise TraceError(
            "%s.%s (%s %s) is not planned: its CUDA kernels have no fake implementation to "
            "trace; plan the model with unquantized (fp16/bf16) weights for an upper bound" % (
                mod, cls.__name__, "bitsandbytes" if top == "bitsandbytes" else "torchao",
                "quantized " + what if what != "optimizer" else "8-bit optimizer"))


def trace(fn, profile="sm90", gpu_memory=80 << 30, mode=None, torch_version=None):
    """Run FN (no arguments) on a fake CUDA device and return its Result.
    TORCH_VERSION ('2.11'; default: the tracing PyTorch's) is the PyTorch
    the job will run on: what differs between versions and moves memory
    follows it (torch_behaviour.py)."""
    torch = _import_torch()
    if mode is None:
        mode = "fake-cuda" if torch.backends.cuda.is_built() else "meta"
    if mode not in ("fake-cuda", "meta"):
        raise TraceError("unknown mode '%s' (fake-cuda, meta)" % mode)
    if mode == "fake-cuda" and not torch.backends.cuda.is_built():
        raise TraceError("mode fake-cuda needs a PyTorch built with CUDA; this one (%s) is "
                         "CPU-only (use the meta mode)" % torch.__version__)
    if profile not in PROFILES:
        raise TraceError("unknown profile '%s' (%s)" % (profile, ", ".join(sorted(PROFILES))))
    try:
        target = (_behaviour.parse_version(torch_version) if torch_version
                  else _torch_version(torch))
    except _behaviour.VersionError as e:
        raise TraceError(str(e))
    capability = (9, 0) if profile == "sm90" else (8, 0)
    beh = _behaviour.behaviour(target, capability)
    meta = mode == "meta"
    global _FOREACH_META_MISSING
    _FOREACH_META_MISSING = _torch_version(torch) < (2, 0)
    tracer = _Tracer(torch, "meta" if meta else "cuda", profile, beh)
    tracer.result.mode = mode
    tracer.result.torch_version = torch.__version__
    tracer.result.target_version = "%d.%d" % target
    tracer.result.profile = profile
    Recorder, Device = _make_modes(torch, tracer, meta)
    t0 = time.time()
    fake = _fake_mode(torch, meta)
    tracer.fake = fake
    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(torch, tracer, meta, gpu_memory))
        stack.enter_context(fake)
        stack.enter_context(Recorder())
        if meta:
            stack.enter_context(Device())
        tracer.mark("forward")
        try:
            fn()
        except Exception as e:
            if type(e).__name__ in ("DynamicOutputShapeException", "DataDependentOutputException"):
                op = str(e.args[0] if e.args else e).split("(")[0]
                raise TraceError(
                    "the program sizes a tensor from tensor values (%s: box matching, "
                    "sampling and non-maximum suppression in detection models), which a trace "
                    "without data cannot know" % op)
            raise
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


def _torch_version_arg(s):
    try:
        _behaviour.parse_version(s)
    except _behaviour.VersionError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--torch-version ", "", 1))
    return s


def _positive(s):
    try:
        v = int(s, 10)
    except ValueError:
        v = 0
    if v < 1 or v > (1 << 20):
        raise argparse.ArgumentTypeError("'%s': expected a whole number from 1 to 1048576" % s)
    return v


def main(argv=None):
    from . import plan_builtin as builtin
    p = _Parser(prog="vram plan --model",
                description="Trace a PyTorch program's GPU memory without a GPU.")
    p.add_argument("model", metavar="PATH.py:FUNCTION|torchvision:NAME|hf:DIR|hf:ORG/NAME",
                   nargs="?")
    p.add_argument("--json", action="store_true", help="one JSON object, sizes in bytes")
    p.add_argument("--trace", metavar="FILE", help="write the allocations as a vram trace")
    p.add_argument("--gpu-memory", metavar="SIZE", type=_parse_size,
                   help="the GPU's memory: does it fit, the cap to give the job")
    p.add_argument("--profile", default="sm90", choices=sorted(PROFILES),
                   help="modelled constants: sm90 (H100/H200, default) or default")
    p.add_argument("--mode", choices=("fake-cuda", "meta"),
                   help="how the device is faked (default: fake-cuda if PyTorch has CUDA)")
    p.add_argument("--torch-version", metavar="X.Y", type=_torch_version_arg,
                   help="the PyTorch the job runs on (default: the tracing one)")
    g = p.add_argument_group("named models (torchvision:NAME, hf:DIR or hf:ORG/NAME)")
    g.add_argument("--batch", type=_positive, help="images or sequences per step")
    g.add_argument("--image", type=_positive, help="torchvision: image side in pixels (224)")
    g.add_argument("--seq", type=_positive, help="hf: tokens per sequence (512)")
    g.add_argument("--precision", default="fp32", choices=builtin.PRECISIONS)
    g.add_argument("--optimizer", default="adamw", choices=builtin.OPTIMIZERS)
    g.add_argument("--steps", type=_positive, default=2, help="training steps (2)")
    p.add_argument("--list", choices=("torchvision",),
                   help="list the named models this PyTorch can build, one a line")
    a = p.parse_args(argv)
    if a.list:
        try:
            for kind, name in builtin.zoo():
                print("torchvision:%s %s" % (name, kind))
        except ImportError as e:
            sys.stderr.write("vram: plan: torchvision is not importable (%s)\n" % e)
            return 1
        return 0
    if not a.model:
        p.error("give PATH.py:FUNCTION, torchvision:NAME or hf:DIR (or --list torchvision)")
    named = builtin.is_builtin(a.model)
    if not named and any(v is not None for v in (a.batch, a.image, a.seq)):
        p.error("--batch, --image and --seq go with named models (torchvision:NAME, hf:...); "
                "a program's sizes come from the program")
    try:
        if named:
            fn = builtin.builtin_step(a.model, a.batch, a.image, a.seq, a.precision,
                                      a.optimizer, a.steps)
        else:
            fn = load_function(a.model)
        # The program's own prints go to stderr when stdout is the JSON.
        with contextlib.redirect_stdout(sys.stderr if a.json else sys.stdout):
            r = trace(fn, profile=a.profile, gpu_memory=a.gpu_memory or (80 << 30),
                      mode=a.mode, torch_version=a.torch_version)
        if a.trace:
            try:
                r.write_trace(a.trace,
                              meta="model=" + os.path.basename(a.model).replace(" ", "_"))
            except OSError as e:
                raise TraceError("--trace: %s: %s" % (a.trace, e.strerror or e)) from None
    except (TraceError, builtin.BuiltinError) as e:
        sys.stderr.write("vram: plan: %s\n" % str(e).splitlines()[0])
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
    print("%s, traced on %s (PyTorch %s) for PyTorch %s, %d ops, %d allocations, %.1f s" % (
        a.model, r.mode, r.torch_version, r.target_version, r.ops, d["allocations"],
        r.seconds))
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
