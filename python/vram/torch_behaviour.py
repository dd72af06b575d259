# SPDX-License-Identifier: MIT
"""What PyTorch does differently from one version to the next, where it
moves a training step's GPU memory: the one table `vram plan --model`
follows for the PyTorch the job will run on (`--torch-version`), whatever
PyTorch traces it.

  - AUTOCAST_CUDA: CUDA autocast's casting rules, as lists of operators
    per policy, each list with the PyTorch version it was read from. vram
    applies them itself when the tracing PyTorch cannot (a CPU-only build,
    whose tensors are on the meta device, never reaches CUDA autocast).
  - behaviour(version): the other terms (fused attention, cuBLAS workspace,
    the optimizers' default foreach implementation and its buffers).

Nothing here imports torch.
"""

import re

__all__ = ["AUTOCAST_CUDA", "autocast_lists", "behaviour", "parse_version", "VersionError",
           "KNOWN_RANGE"]


class VersionError(ValueError):
    """A --torch-version vram cannot follow; the text is one line."""


# Versions vram knows how to follow: 1.13 up to the newest listed here.
KNOWN_RANGE = ((1, 13), (2, 11))

# ---------------------------------------------------------------------------
# CUDA autocast's op lists (the policies of at::autocast::CastPolicy):
#   lower: every floating CUDA input cast to the autocast dtype (fp16/bf16);
#          fp32 leaf tensors that require grad (weights) are cast once and the
#          copy cached until the outermost autocast region exits;
#   fp32:  every floating input cast to float32;
#   set_opt_dtype: run in float32 through the op's own dtype argument, when
#          the first input is a floating CUDA tensor and no dtype was given;
#   append_dtype: the same for ops whose dtype overloads differ (norm);
#   promote: every floating input cast to the widest floating type among
#          them (float32 over the autocast dtype);
#   banned: refused under autocast (the error PyTorch raises).
# Names are ATen operator names (overloads merged). Each entry is the
# version the lists were read from; a job's version uses the newest entry
# not newer than it.
# ---------------------------------------------------------------------------

_LOWER_1_13 = """
    _convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d
    conv_transpose3d convolution cudnn_convolution cudnn_convolution_transpose prelu addmm
    addmv addr matmul einsum mm mv linear addbmm baddbmm bmm chain_matmul linalg_multi_dot
    _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell
"""
_FP32_1_13 = """
    acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow
    softplus layer_norm native_layer_norm group_norm frobenius_norm nuclear_norm
    cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d
    hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss
    margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss
    multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp
"""
_SET_OPT_1_13 = "prod softmax log_softmax cumprod cumsum sum"
_PROMOTE_1_13 = """
    addcdiv addcmul atan2 bilinear cross dot grid_sampler index_put tensordot scatter_add
"""

# The 2.x lists: the 1.13 ones with these changes (read from the source of
# a 2.x release that declares them with std::optional, 2.5 or later).
_LOWER_2_5_ADD = "linalg_vecdot _scaled_dot_product_flash_attention scaled_dot_product_attention"
_LOWER_2_5_DROP = ""  # cudnn_convolution(_transpose) are registered apart, still lower
_FP32_2_5_ADD = """
    upsample_nearest1d _upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d
    upsample_nearest3d _upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d
    _upsample_bilinear2d_aa upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa
"""
_SET_OPT_2_5_ADD = "linalg_vector_norm linalg_matrix_norm"
_PROMOTE_2_5_ADD = "vdot"


def _words(s):
    return frozenset(s.split())


AUTOCAST_CUDA = [
    {
        "version": (1, 13),
        "source": "aten/src/ATen/autocast_mode.cpp of PyTorch 1.13 (and checked against the "
                  "AutocastCUDA kernels Debian's 1.13 registers)",
        "lower": _words(_LOWER_1_13),
        "fp32": _words(_FP32_1_13),
        "set_opt_dtype": _words(_SET_OPT_1_13),
        "append_dtype": _words("norm"),
        "promote": _words(_PROMOTE_1_13),
        "banned": _words("binary_cross_entropy"),
    },
    {
        "version": (2, 5),
        "source": "aten/src/ATen/autocast_mode.h of PyTorch 2.x (2.5 or later): "
                  "AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE, "
                  "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE, AT_FORALL_PROMOTE",
        "lower": (_words(_LOWER_1_13) - _words(_LOWER_2_5_DROP)) | _words(_LOWER_2_5_ADD),
        "fp32": _words(_FP32_1_13) | _words(_FP32_2_5_ADD),
        "set_opt_dtype": _words(_SET_OPT_1_13) | _words(_SET_OPT_2_5_ADD),
        "append_dtype": _words("norm"),
        "promote": _words(_PROMOTE_1_13) | _words(_PROMOTE_2_5_ADD),
        "banned": _words("binary_cross_entropy"),
    },
]

# Composite operators that are not in the lists but whose own operators
# are: the policy the emulation applies to their first input, where it sees
# only the composite (cross_entropy's log_softmax runs in float32, nll_loss
# in float32).
COMPOSITE_FP32 = frozenset(("cross_entropy_loss", "nll_loss_nd"))


def autocast_lists(version):
    """The AUTOCAST_CUDA entry that applies to VERSION ((major, minor))."""
    best = AUTOCAST_CUDA[0]
    for e in AUTOCAST_CUDA:
        if e["version"] <= tuple(version):
            best = e
    return best


def parse_version(text):
    """'2.11', '2.11.0+cu130', '1.13.0a0' -> (2, 11). Raises VersionError."""
    m = re.match(r"^\s*(\d+)\.(\d+)(?:\.\d+)?(?:[a-z0-9.+_-]*)\s*$", str(text), re.I)
    if not m:
        raise VersionError("--torch-version '%s': expected MAJOR.MINOR, e.g. 2.11" %
                           str(text)[:40])
    v = (int(m.group(1)), int(m.group(2)))
    if v < KNOWN_RANGE[0] or v > KNOWN_RANGE[1]:
        raise VersionError("--torch-version %d.%d: vram follows PyTorch %d.%d to %d.%d" % (
            v + KNOWN_RANGE[0] + KNOWN_RANGE[1]))
    return v


def behaviour(version, capability=(9, 0)):
    """The memory-moving behaviour of PyTorch VERSION on a GPU of compute
    CAPABILITY (the device the plan is for; sm90 = H100/H200)."""
    v = tuple(version)
    b = {"version": v}
    # cuBLAS workspace, allocated through the caching allocator at the first
    # matmul of each thread (handle and stream) and kept. CUBLAS_WORKSPACE_CONFIG
    # defaults to ":4096:2:16:8" (8 MiB + 128 KiB); from 2.3 on, Hopper
    # (sm90) gets ":4096:8" (32 MiB).
    if v >= (2, 3) and capability >= (9, 0):
        b["cublas_workspace"] = 4096 * 8 * 1024
    else:
        b["cublas_workspace"] = 4096 * 1024 * 2 + 16 * 1024 * 8
    # F.scaled_dot_product_attention and its fused kernels exist from 2.0;
    # nn.MultiheadAttention calls it when no weights are asked for (2.0 on).
    b["sdpa"] = v >= (2, 0)
    b["mha_uses_sdpa"] = v >= (2, 0)
    # Flash attention: 16-bit inputs, sm80 or newer, head dim <= 128 (2.0,
    # 2.1: FlashAttention 1), <= 256 from 2.2 (FlashAttention 2).
    b["flash_head_dim"] = 256 if v >= (2, 2) else 128
    b["flash"] = v >= (2, 0) and capability >= (8, 0)
    # enable_gqa (grouped-query heads in SDPA) from 2.5.
    b["enable_gqa"] = v >= (2, 5)
    # Optimizers on CUDA default to the foreach (multi-tensor) step from
    # 2.0; 1.13 defaults to the per-parameter loop.
    b["foreach_default"] = v >= (2, 0)
    # The foreach Adam/AdamW step's temporaries, each as large as all the
    # parameters of one device and dtype: 1.13 keeps sqrt(exp_avg_sq) and
    # the denominator (two), 2.x works on the sqrt in place (one).
    b["foreach_adam_temps"] = 2 if v < (2, 0) else 1
    return b
