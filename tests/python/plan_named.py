# SPDX-License-Identifier: MIT
"""`vram plan --model` on models named instead of programs
(python/vram/plan_builtin.py): a sample of torchvision's classification,
detection and segmentation zoo, Hugging Face models built from a config
(a stand-in transformers, tests/python/hf_standin), quantized layers
refused by name, and bad names answered in one line. The whole zoo is
measured against the GPU by bench/gpu/plan_zoo.py.

Run: python3 tests/python/plan_named.py (the CTest test plan_named, label
slow: tracing the sample takes a minute on a busy 2-CPU machine).
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


def r(n):
    return (n + 511) // 512 * 512


def f32(*shape):
    n = 4
    for s in shape:
        n *= s
    return n


class Named(unittest.TestCase):
    """Models named instead of programs; a sample of torchvision's zoo (the
    whole zoo is measured on the GPU by bench/gpu/plan_zoo.py)."""

    def run_cli(self, *args, env=None):
        e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + HERE)
        e.update(env or {})
        return subprocess.run([sys.executable, "-m", "vram.plan"] + list(args),
                              capture_output=True, text=True, env=e)

    def test_zoo_sample(self):
        """Sample (one step each): a classifier (mixed-fp16, with a
        GradScaler), a segmentation model (bf16 autocast) and a detection
        model (fp32)."""
        try:
            import torchvision  # noqa: F401
        except ImportError:
            self.skipTest("torchvision is not importable")
        for spec, extra in (("torchvision:resnet18", ["--precision", "mixed-fp16"]),
                            ("torchvision:lraspp_mobilenet_v3_large", ["--precision",
                                                                       "mixed-bf16"])):
            p = self.run_cli(spec, "--batch", "2", "--image", "32", "--steps", "1", "--json",
                             *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            d = json.loads(p.stdout)
            self.assertGreater(d["breakdown"]["weights"], 0, spec)
            self.assertGreater(d["breakdown"]["gradients"], 0, spec)
        # Detection: boxes matched, sampled and suppressed by value; the
        # transform resizes the images to 800 pixels (ResNet-50's first
        # convolution's output, 64 x 400 x 400 floats, is then live).
        p = self.run_cli("torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", "--batch", "1",
                         "--image", "64", "--json", "--steps", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertGreater(json.loads(p.stdout)["breakdown"]["weights"], 0)
        p = self.run_cli("--list", "torchvision")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("torchvision:resnet50 classification", p.stdout)
        self.assertIn("torchvision:fcn_resnet50 segmentation", p.stdout)

    def test_bad_named_models(self):
        for args in (["torchvision:nope", "--batch", "1"], ["torchvision:resnet18"],
                     ["hf:/nonexistent/dir", "--batch", "1"],
                     ["hf:org/not-cached", "--batch", "1"]):
            p = self.run_cli(*args, env={"HF_HUB_CACHE": "/nonexistent"})
            self.assertEqual(p.returncode, 1, args)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertTrue(p.stderr.startswith("vram: plan: "), p.stderr)
        for args in (["torchvision:resnet18", "--batch", "0"],
                     ["torchvision:resnet18", "--batch", "1", "--precision", "fp8"],
                     ["x.py:f", "--batch", "2"], ["torchvision:resnet18", "--torch-version",
                                                  "9.9"]):
            p = self.run_cli(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_hugging_face_from_a_config(self):
        """hf:DIR and hf:ORG/NAME (a model id in the local cache) build the
        model from config.json with transformers; here a stand-in
        transformers (tests/python/hf_standin) builds a small causal LM,
        whose weights are those of its config (vocab x hidden embedding,
        untied head, one hidden x hidden layer)."""
        standin = os.path.join(HERE, "hf_standin")
        cfg = {"model_type": "standin", "vocab_size": 1000, "hidden_size": 64,
               "architectures": ["StandinForCausalLM"]}
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "model")
            os.makedirs(model)
            with open(os.path.join(model, "config.json"), "w") as f:
                json.dump(cfg, f)
            snap = os.path.join(d, "hub", "models--acme--tiny", "snapshots", "abc123")
            os.makedirs(snap)
            os.makedirs(os.path.join(d, "hub", "models--acme--tiny", "refs"))
            with open(os.path.join(d, "hub", "models--acme--tiny", "refs", "main"), "w") as f:
                f.write("abc123")
            with open(os.path.join(snap, "config.json"), "w") as f:
                json.dump(cfg, f)
            env = {"PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "python"), HERE, standin]),
                   "HF_HUB_CACHE": os.path.join(d, "hub")}
            out = []
            for ref in (model, "acme/tiny"):
                p = self.run_cli("hf:" + ref, "--batch", "2", "--seq", "16", "--json", env=env)
                self.assertEqual(p.returncode, 0, p.stderr)
                out.append(json.loads(p.stdout))
            want = r(f32(1000, 64)) + r(f32(64, 64)) + r(f32(64)) + r(f32(1000, 64))
            self.assertEqual(out[0]["breakdown"]["weights"], want)
            self.assertEqual(out[0]["tensor_peak_bytes"], out[1]["tensor_peak_bytes"])

    def test_quantized_refused_by_name(self):
        """bitsandbytes' quantized layers (stood in for here) are refused in
        one line that names them."""
        standin = os.path.join(HERE, "hf_standin")
        with tempfile.TemporaryDirectory() as d:
            prog = os.path.join(d, "q.py")
            with open(prog, "w") as f:
                f.write("import torch, bitsandbytes as bnb\n"
                        "def step():\n"
                        "    bnb.nn.Linear4bit(64, 64).cuda()\n")
            p = self.run_cli(prog + ":step", env={
                "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "python"), standin])})
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("bitsandbytes.nn.Linear4bit", p.stderr)
        self.assertIn("not planned", p.stderr)


if __name__ == "__main__":
    unittest.main()
