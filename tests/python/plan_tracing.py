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

WS = 32 << 20  # cuBLAS workspace on sm90


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
        cls.res = plan.trace(m.cnn)

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
        cls.res = plan.trace(m.transformer)
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
        """autocast on cuda: traced on the fake CUDA device; refused with one
        line where PyTorch has no CUDA (the meta device cannot emulate it)."""
        if plan._import_torch().backends.cuda.is_built():
            res = plan.trace(m.mixed_precision)
            self.assertGreater(res.tensor_peak_bytes, 0)
        else:
            with self.assertRaises(plan.TraceError) as e:
                plan.trace(m.mixed_precision)
            self.assertIn("CUDA", str(e.exception))

    def test_patches_undone(self):
        import torch
        before = (torch.cuda.is_available, torch.autograd.backward, torch.nn.Parameter.__new__,
                  torch.nn.Module._apply)
        plan.trace(m.cnn)
        after = (torch.cuda.is_available, torch.autograd.backward, torch.nn.Parameter.__new__,
                 torch.nn.Module._apply)
        self.assertEqual(before, after)

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


if __name__ == "__main__":
    unittest.main()
