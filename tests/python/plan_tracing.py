# SPDX-License-Identifier: MIT
"""Tracing a PyTorch program's GPU memory without a GPU (python/vram/plan.py),
checked against figures derived by hand for two small programs
(tests/python/plan_models.py): a CNN and a transformer.

Sizes below are what PyTorch's caching allocator counts: every block
rounded up to 512 bytes (r()). The two cuBLAS workspaces (32 MiB each on
sm90: the program's thread and autograd's backward thread) are modelled.

Run: python3 tests/python/plan_tracing.py (the CTest test plan_tracing; not named
test*.py, so the package test's discovery does not run it a second time)
Exit 77 (skipped) when PyTorch is not importable.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "python"), HERE]

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: PyTorch is not importable by %s" % sys.executable)
    sys.exit(77)

import plan_models as m  # noqa: E402
import vram.plan as plan  # noqa: E402

WS = 32 << 20  # cuBLAS workspace on sm90 (PyTorch 2.x: the figures below are for 2.11)


def r(n):
    return (n + 511) // 512 * 512


def f32(*shape):
    n = 4
    for s in shape:
        n *= s
    return n


class CNN(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.res = plan.trace(m.cnn, torch_version="2.11")

    def test_forward_allocations(self):
        """Forward, in order: the parameters as .cuda() copies them (conv
        weight 8x3x3x3, bias 8, linear weight 10x512, bias 10), the input
        4x3x8x8 and labels (4 int64), the conv output 4x8x8x8, the ReLU
        output (the conv output is then freed: conv saves its input, ReLU
        its output), the cuBLAS workspace at the first matmul, the logits
        4x10, log_softmax's output, nll_loss's loss and total weight."""
        ev = self.res.events
        fwd = [e for e in ev[:next(i for i, e in enumerate(ev) if e[3] == "backward")]
               if e[0] in "af"]
        want = [("a", f32(8, 3, 3, 3)), ("a", f32(8)), ("a", f32(10, 512)), ("a", f32(10)),
                ("a", f32(4, 3, 8, 8)), ("a", 8 * 4),
                ("a", f32(4, 8, 8, 8)), ("a", f32(4, 8, 8, 8)), ("f", f32(4, 8, 8, 8)),
                ("a", WS), ("a", f32(4, 10)), ("a", f32(4, 10)), ("a", 4), ("a", 4),
                ("f", f32(4, 10))]
        self.assertEqual([(e[0], e[2]) for e in fwd], want)

    def test_peak(self):
        """The peak is in backward, at the ReLU's backward (threshold_backward),
        with live: the parameters, input and labels, the ReLU output (saved),
        nll_loss's total weight (saved), the loss's gradient (ones), the
        linear layer's input gradient (4x512), its weight and bias gradients,
        threshold_backward's output (4x512) and both cuBLAS workspaces."""
        params = r(f32(8, 3, 3, 3)) + r(f32(8)) + r(f32(10, 512)) + r(f32(10))
        inputs = r(f32(4, 3, 8, 8)) + r(8 * 4)
        saved = r(f32(4, 8, 8, 8)) + r(4)
        backward = r(4) + r(f32(4, 512)) + r(f32(10, 512)) + r(f32(10)) + r(f32(4, 512))
        want = params + inputs + saved + backward + 2 * WS
        self.assertEqual(self.res.tensor_peak_bytes, want)
        self.assertEqual(self.res.peak_phase, "backward")
        b = self.res.breakdown
        self.assertEqual(b["weights"], params)
        self.assertEqual(b["gradients"], r(f32(10, 512)) + r(f32(10)))
        self.assertEqual(b["cublas_workspace"], 2 * WS)
        self.assertEqual(sum(b.values()), want)

    def test_trace_file_replays(self):
        """The trace is a vram trace: vram replay reads it, and its peak of
        live bytes is the peak of the requested (unrounded) sizes."""
        vram = os.environ.get("VRAM_BIN", os.path.join(ROOT, "build", "bin", "vram"))
        if not os.access(vram, os.X_OK):
            self.skipTest("no vram binary at %s" % vram)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "cnn.trace.csv")
            self.res.write_trace(path)
            out = subprocess.run([vram, "replay", "--json", path], capture_output=True,
                                 text=True, check=True).stdout
            row = json.loads(out.splitlines()[0])
            live = peak = 0
            sizes = {}
            for op, ident, size, _ in self.res.events:
                if op == "a":
                    sizes[ident] = size
                    live += size
                elif op == "f":
                    live -= sizes.pop(ident)
                peak = max(peak, live)
            self.assertEqual(row["peak_in_use_bytes"], peak)


class Transformer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.res = plan.trace(m.transformer, torch_version="2.11")
        V, h = m.T_VOCAB, m.T_HIDDEN
        cls.shapes = [(V, h), (h,), (h,), (3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,),
                      (4 * h, h), (4 * h,), (h, 4 * h), (h,), (h,), (h,), (V, h)]

    def test_model_states(self):
        """Weights, gradients and AdamW's two states per parameter, each
        tensor its own block."""
        W = sum(r(f32(*s)) for s in self.shapes)
        b = self.res.breakdown
        self.assertEqual(b["weights"], W)
        self.assertEqual(b["gradients"], W)
        self.assertEqual(b["optimizer_states"], 2 * W)

    def test_peak_in_optimizer_step(self):
        """Activations are small here, so the peak is AdamW's step on the
        last parameter (the output layer, V x h): weights, gradients, both
        states, the logits, token ids and loss the program still holds,
        the previous parameter's `denom` (the final LayerNorm's bias, still
        held by the loop variable), exp_avg_sq.sqrt() and its division by
        the bias correction for the output layer, and the two workspaces."""
        V, h, B, S = m.T_VOCAB, m.T_HIDDEN, m.T_BATCH, m.T_SEQ
        W = sum(r(f32(*s)) for s in self.shapes)
        held = r(f32(B, S, V)) + r(8 * B * S) + r(4)
        step = r(f32(h)) + 2 * r(f32(V, h))
        self.assertEqual(self.res.peak_phase, "optimizer step")
        self.assertEqual(self.res.tensor_peak_bytes, 4 * W + held + step + 2 * WS)

    def test_attention_scores(self):
        """The explicit attention keeps its B x S x S softmax output."""
        B, S = m.T_BATCH, m.T_SEQ
        ev = self.res.events
        end = next(i for i, e in enumerate(ev) if e[3] == "backward")
        self.assertIn(f32(B, S, S), [e[2] for e in ev[:end] if e[0] == "a"])


class Robustness(unittest.TestCase):
    def run_cli(self, *args):
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + HERE)
        return subprocess.run([sys.executable, "-m", "vram.plan"] + list(args),
                              capture_output=True, text=True, env=env)

    def test_cli_json(self):
        p = self.run_cli("--json", os.path.join(HERE, "plan_models.py") + ":cnn")
        self.assertEqual(p.returncode, 0, p.stderr)
        d = json.loads(p.stdout)
        self.assertEqual(d["tensor_peak_bytes"], plan.trace(m.cnn).tensor_peak_bytes)
        self.assertEqual(d["total_bytes"], d["tensor_peak_bytes"] + d["breakdown"]["cuda_context"])

    def test_errors_are_one_line(self):
        for args in (["nofile.py:f"], [os.path.join(HERE, "plan_models.py") + ":nothing"],
                     [os.path.join(HERE, "plan_models.py") + ":broken"], ["missing-colon"]):
            p = self.run_cli(*args)
            self.assertEqual(p.returncode, 1, args)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertTrue(p.stderr.startswith("vram: "), p.stderr)
        p = self.run_cli("--gpu-memory", "80X", "x.py:f")
        self.assertEqual(p.returncode, 2)

    def test_mixed_precision(self):
        """autocast on cuda traces with any PyTorch: on the fake CUDA device
        by PyTorch's own autocast, on a CPU-only one by vram's."""
        res = plan.trace(m.mixed_precision)
        self.assertGreater(res.tensor_peak_bytes, 0)

    def test_patches_undone(self):
        import torch
        import torch.nn.functional as F

        def state():
            return (torch.cuda.is_available, torch.autograd.backward, torch.nn.Parameter.__new__,
                    torch.nn.Module._apply, torch.autocast.__enter__, torch.Tensor.is_cuda,
                    F.multi_head_attention_forward, getattr(F, "scaled_dot_product_attention", 0),
                    F.has_torch_function_unary, torch.optim.Optimizer.__init__)
        before = state()
        plan.trace(m.cnn)
        plan.trace(m.mixed_precision, torch_version="2.11")
        self.assertEqual(before, state())

    def test_constants_keep_their_values(self):
        """A constant made inside the trace (torch.tensor([...])) keeps its
        values through later ops and tolist(): a network that sizes its
        layers from such values (torchvision's RegNet) builds as it would."""
        import torch
        seen = {}

        def fn():
            t = torch.tensor([0, 1, 3, 7])
            seen["diff"] = torch.diff(t).int().tolist()
            seen["widths"] = (torch.arange(3) * 8 + 16).tolist()
            layer = torch.nn.Linear(4, int(t[-1])).cuda()
            layer(torch.randn(2, 4, device="cuda"))
        res = plan.trace(fn)
        self.assertEqual(seen["diff"], [1, 2, 4])
        self.assertEqual(seen["widths"], [16, 24, 32])
        # Linear(4, 7) on cuda: weight 28 and bias 7 floats, each rounded.
        self.assertEqual(res.breakdown["weights"], r(f32(7, 4)) + r(f32(7)))

    def test_grouped_heads_take_the_math_path(self):
        """Grouped query heads rule out the memory-efficient kernel: fp32
        attention with enable_gqa is the math path, whose S x S scores the
        trace then holds."""
        import torch
        q = torch.empty(2, 4, 64, 32, device="meta")
        k = torch.empty(2, 2, 64, 32, device="meta")
        self.assertEqual(plan._sdp_choice_cuda(torch, (q, k, k), {"enable_gqa": True}), 0)
        self.assertEqual(plan._sdp_choice_cuda(torch, (q, q, q), {}), 2)
        self.assertEqual(plan._sdp_choice_cuda(torch, (q.half(), k.half(), k.half()),
                                               {"enable_gqa": True}), 1)

    def test_padding_mask_read_as_on_the_device(self):
        """A program that asks whether its padding mask is all ones (Hugging
        Face's masking before SDPA) gets the device's answer: the value of a
        64 x 1,024 boolean mask is known, and transformers' is_fake_tensor,
        which would make it build the full attention mask instead, says no
        during the trace only (transformers is stood in for here)."""
        import types
        import torch
        names = ["transformers", "transformers.utils", "transformers.utils.import_utils"]
        saved = {n: sys.modules.get(n) for n in names}
        utils = types.ModuleType(names[-1])

        def is_fake_tensor(t):
            return True

        utils.is_fake_tensor = is_fake_tensor
        utils.is_tracing = lambda t=None: utils.is_fake_tensor(t)
        for n in names:
            sys.modules[n] = utils if n == names[-1] else types.ModuleType(n)
        seen = {}
        try:
            def fn():
                ids = torch.zeros(64, 1024, dtype=torch.long, device="cuda")
                mask = torch.ones_like(ids).bool()
                seen["tracing"] = utils.is_tracing(mask)
                seen["all"] = bool(mask.all())
            plan.trace(fn)
        finally:
            for n, m in saved.items():
                if m is None:
                    sys.modules.pop(n, None)
                else:
                    sys.modules[n] = m
        self.assertEqual(seen, {"tracing": False, "all": True})
        self.assertIs(utils.is_fake_tensor, is_fake_tensor)

    def test_sizes_from_values(self):
        """An operator whose output size depends on values: from the values
        where vram knows them (a small tensor), else the largest they allow
        (every element), as detection models' box selection needs; a size
        with no bound is answered in one line."""
        import torch
        got = {}

        def fn():
            small = torch.tensor([0, 3, 0, 5], device="cuda")
            got["small"] = tuple(small.nonzero().shape)
            big = torch.randn(1000, 40, device="cuda")
            got["big"] = tuple((big > 0).nonzero().shape)
            got["masked"] = tuple(big[big > 0].shape)
        plan.trace(fn)
        self.assertEqual(got, {"small": (2, 1), "big": (40000, 2), "masked": (40000,)})

        def unbounded():
            counts = torch.randn(100000, device="cuda").long()
            torch.repeat_interleave(counts)
        with self.assertRaises(plan.TraceError) as e:
            plan.trace(unbounded)
        self.assertIn("tensor values", str(e.exception))

    def test_grouped_heads_trace_the_scores(self):
        """Traced, fp32 attention with grouped heads holds the math path's
        B x H x S x S scores, as on the device (PyTorch 2.11 on the H200: a
        2 x 8 x 256 x 256 call held 46 MB above its inputs, the same call
        with 8 key heads 1 MB); with as many key heads as query heads it
        takes the memory-efficient kernel, whose trace holds nothing that
        size. enable_gqa came in PyTorch 2.5."""
        import inspect
        import torch
        F = torch.nn.functional
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if sdpa is None or "enable_gqa" not in str(inspect.signature(sdpa)) \
                and "enable_gqa" not in (sdpa.__doc__ or ""):
            self.skipTest("scaled_dot_product_attention has no enable_gqa here")
        B, H, KV, S, D = 2, 8, 2, 256, 64

        def run(kv):
            def fn():
                q = torch.randn(B, H, S, D, device="cuda")
                k = torch.randn(B, kv, S, D, device="cuda")
                v = torch.randn(B, kv, S, D, device="cuda")
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != H)
            return [e[2] for e in plan.trace(fn).events if e[0] == "a"]
        self.assertIn(f32(B, H, S, S), run(KV))
        self.assertNotIn(f32(B, H, S, S), run(H))



class Autocast(unittest.TestCase):
    """Mixed precision: the same allocations whether PyTorch's CUDA autocast
    runs (a CUDA build) or vram applies its rules (a CPU-only build, meta
    device). Figures derived by hand from autocast's policies."""

    def trace_autocast(self, version="2.11"):
        import torch
        F = torch.nn.functional
        seen = {}

        def fn():
            lin = torch.nn.Linear(48, 40).cuda()      # weight 40 x 48, bias 40
            x = torch.randn(8, 48, device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = lin(x)                            # lower: x, weight, bias cast
                y2 = lin(x * 2)                       # the weight's copy is cached
                s = torch.softmax(y, -1)              # set_opt_dtype: float32
                n = F.layer_norm(y, (40,))            # fp32
                with torch.autocast("cuda", enabled=False):
                    off = x @ x.t()                   # no autocast: float32
                up = F.interpolate(y.view(1, 8, 5, 8), scale_factor=2.0, mode="bilinear")
            seen.update(y=y.dtype, y2=y2.dtype, s=s.dtype, n=n.dtype, off=off.dtype,
                        up=up.dtype)
            (s.sum() + n.sum() + y2.float().sum() + up.float().sum()).backward()
            seen.update(wgrad=lin.weight.grad.dtype, bgrad=lin.bias.grad.dtype)
        res = plan.trace(fn, torch_version=version)
        return res, seen

    def test_casts_follow_the_policies(self):
        import torch
        res, seen = self.trace_autocast()
        bf, f32_ = torch.bfloat16, torch.float32
        self.assertEqual(seen, {"y": bf, "y2": bf, "s": f32_, "n": f32_, "off": f32_,
                                "up": f32_, "wgrad": f32_, "bgrad": f32_})

    def test_weight_copies_cached(self):
        """The weight's bf16 copy (40 x 48 x 2 = 3,840 bytes) is made once for
        both calls; the input is cast for each call (8 x 48 x 2 = 768 bytes)."""
        res, _ = self.trace_autocast()
        ev = res.events
        end = next(i for i, e in enumerate(ev) if e[3] == "backward")
        fwd = [e[2] for e in ev[:end] if e[0] == "a"]
        self.assertEqual(fwd.count(40 * 48 * 2), 1)
        self.assertEqual(fwd.count(8 * 48 * 2), 2)
        # layer_norm's input cast to float32 (8 x 40 x 4) beside softmax's output
        self.assertGreaterEqual(fwd.count(8 * 40 * 4), 3)

    def test_lists_follow_the_version(self):
        """F.interpolate (upsample_bilinear2d) runs in float32 under 2.x's
        lists, in the autocast dtype under 1.13's."""
        import torch
        _, seen = self.trace_autocast("1.13")
        self.assertEqual(seen["up"], torch.bfloat16)
        self.assertEqual(seen["s"], torch.float32)

    def test_table_matches_this_pytorch(self):
        """The table's 1.13 lists are the operators Debian's 1.13 registers
        CUDA autocast kernels for (overloads merged)."""
        import torch
        from vram import torch_behaviour as tb
        if not torch.__version__.startswith("1.13"):
            self.skipTest("the registrations checked are 1.13's")
        names = {x.name[6:] for x in torch._C._jit_get_all_schemas()
                 if x.name.startswith("aten::")}
        registered = set()
        for x in torch._C._jit_get_all_schemas():
            if not x.name.startswith("aten::"):
                continue
            q = x.name + ("." + x.overload_name if x.overload_name else "")
            try:
                if "\nAutocastCUDA:" in torch._C._dispatch_dump(q):
                    registered.add(x.name[6:])
            except RuntimeError:
                pass
        e = tb.autocast_lists((1, 13))
        table = set().union(*(e[k] for k in ("lower", "fp32", "set_opt_dtype", "append_dtype",
                                              "promote", "banned")))
        self.assertEqual(table & names, registered)

    def test_cross_entropy(self):
        """cross_entropy under autocast: log_softmax in the logits' dtype
        (cross_entropy passes it explicitly), nll_loss on their float32 copy;
        the loss is float32."""
        import torch
        seen = {}

        def fn():
            lin = torch.nn.Linear(16, 10).cuda()
            x = torch.randn(4, 16, device="cuda")
            y = torch.randint(0, 10, (4,), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(lin(x), y)
            seen["loss"] = loss.dtype
        ev = plan.trace(fn, torch_version="2.11").events
        sizes = [e[2] for e in ev if e[0] == "a"]
        i = sizes.index(32 << 20)  # the logits follow cuBLAS's workspace
        self.assertEqual(sizes[i + 1:i + 4], [4 * 10 * 2, 4 * 10 * 2, 4 * 10 * 4])
        self.assertEqual(seen["loss"], torch.float32)

    def test_binary_cross_entropy_refused(self):
        import torch

        def fn():
            x = torch.rand(4, device="cuda")
            with torch.autocast("cuda", dtype=torch.float16):
                torch.nn.functional.binary_cross_entropy(x, x)
        with self.assertRaises(RuntimeError) as e:
            plan.trace(fn)
        self.assertIn("unsafe to autocast", str(e.exception))


class TorchVersion(unittest.TestCase):
    """--torch-version: what moves memory follows the job's PyTorch."""

    B, S, E, H = 2, 64, 32, 4

    def mha(self, version):
        import torch
        B, S, E, H = self.B, self.S, self.E, self.H

        def fn():
            a = torch.nn.MultiheadAttention(E, H, batch_first=True).cuda()
            x = torch.randn(B, S, E, device="cuda", requires_grad=True)
            out, _ = a(x, x, x, need_weights=False)
            out.sum().backward()
        return [e[2] for e in plan.trace(fn, torch_version=version).events if e[0] == "a"]

    def test_attention_follows_the_version(self):
        """nn.MultiheadAttention without weights: 1.x keeps the B*H x S x S
        fp32 softmax; 2.x calls SDPA, here the memory-efficient kernel (fp32),
        which keeps a logsumexp of B x H x S (rows padded to 32) and allocates
        its fp32 delta (B x H x S) in backward, and no S x S matrix."""
        B, S, E, H = self.B, self.S, self.E, self.H
        old, new = self.mha("1.13"), self.mha("2.11")
        self.assertIn(f32(B * H, S, S), old)
        self.assertNotIn(f32(B * H, S, S), new)
        self.assertGreaterEqual(new.count(f32(B, H, S)), 2)
        # 2.x's packed projection is made contiguous: a second 3E x B x S
        self.assertGreaterEqual(new.count(f32(B, S, 3 * E)), 2)

    def test_sdpa_given_to_an_older_pytorch(self):
        """A program for 2.x calling F.scaled_dot_product_attention traces on a
        PyTorch without it when the job's is 2.x: flash for bf16 (its output
        and a B x H x S fp32 logsumexp), no S x S scores."""
        import torch
        B, H, S, D = 2, 4, 96, 64

        def fn():
            q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            o = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            o.float().sum().backward()
        sizes = [e[2] for e in plan.trace(fn, torch_version="2.11").events if e[0] == "a"]
        self.assertIn(f32(B, H, S), sizes)
        self.assertNotIn(2 * B * H * S * S, sizes)
        self.assertNotIn(f32(B, H, S, S), sizes)

    def test_cublas_workspace_follows_the_version(self):
        old = plan.trace(m.cnn, torch_version="1.13").breakdown["cublas_workspace"]
        new = plan.trace(m.cnn, torch_version="2.11").breakdown["cublas_workspace"]
        self.assertEqual(old, 2 * (4096 * 1024 * 2 + 16 * 1024 * 8))
        self.assertEqual(new, 2 * WS)

    def test_optimizer_default_follows_the_version(self):
        """AdamW with foreach left to the default: 2.x's multi-tensor step
        holds sqrt(exp_avg_sq) of every parameter at once (256 x 256 and 256
        floats); 1.13's loop makes the denominator of one parameter at a time
        (sqrt, then its quotient)."""
        import torch

        def fn():
            lin = torch.nn.Linear(256, 256).cuda()
            opt = torch.optim.AdamW(lin.parameters())
            lin(torch.randn(4, 256, device="cuda")).sum().backward()
            opt.step()

        def step_allocs(version):
            ev = plan.trace(fn, torch_version=version).events
            i = next(k for k, e in enumerate(ev) if e[3] == "optimizer step")
            j = next(k for k in range(i + 1, len(ev)) if ev[k][0] == "m")
            return [(e[0], e[2]) for e in ev[i + 1:j]][4:]  # after the 4 states
        w, b = f32(256, 256), f32(256)
        self.assertEqual(step_allocs("2.11")[:2], [("a", w), ("a", b)])
        self.assertEqual(step_allocs("1.13")[:3], [("a", w), ("a", w), ("f", w)])

        def fused():
            lin = torch.nn.Linear(256, 256).cuda()
            opt = torch.optim.AdamW(lin.parameters(), fused=True)
            lin(torch.randn(4, 256, device="cuda")).sum().backward()
            opt.step()
        if torch.__version__ < "2":  # fused=True on a PyTorch without it for AdamW
            fn = fused
            self.assertEqual([e for e in step_allocs("2.11") if e[0] == "a"], [])

    def test_bad_version(self):
        for v in ("3.1", "1.12", "two", "2"):
            with self.assertRaises(plan.TraceError):
                plan.trace(m.cnn, torch_version=v)


if __name__ == "__main__":
    unittest.main()
