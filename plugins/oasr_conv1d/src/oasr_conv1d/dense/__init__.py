"""Dense (groups == 1) conv1d as CUTLASS implicit GEMM: config spaces, codegen, launch.

A dense conv1d over channels-last ``x (B, T_in, Cin)`` is the GEMM ``M = B * T_out``,
``N = Cout``, ``K = kernel * Cin`` whose A rows are gathered from x by the kernel's iterators
(no im2col buffer); the weight is packed once as ``(Cout, kernel, Cin)``
(:func:`pack_weight`). The epilogue is ``act(acc + bias)`` in fp32 (bias optional; ReLU, GELU
(erf) or SiLU chosen per call), so one unit per config serves ``conv1d`` and every
``conv1d_<act>`` op, for fp16 and bf16.

Two kernel kinds, one per lane by default:

- ``sm80_conv1d``: CUTLASS 2.x ``ImplicitGemmConvolution`` (fprop over NHWC with H = 1,
  mma.sync, ``csrc/oasr_conv1d/dense/sm80.cuh``): 16-byte optimized-iterator tiles, an
  analytic one for windows over 32 taps, few-channels kernels for Cin = 1, 2, 4 (wav2vec2's
  raw-audio conv 1 -> 512 k10 s5), and an element-wise analytic kernel that runs any widths;
- ``sm90_conv1d``: CUTLASS 3.x Hopper ``ConvUniversal`` over a 1-D ``ConvProblemShape`` (TMA
  im2col + wgmma, ``csrc/oasr_conv1d/dense/sm90.cuh``), which builds with CUTLASS 4.2 and
  nvcc 13 (about 30 s per unit, both dtypes, on one core here), plus the 2.x kernels for
  rows TMA cannot read (Cin or Cout not a multiple of 8). CUTLASS 4.2 builds Hopper
  convolutions with the non-persistent warp-specialized schedule only (its conv dispatch
  policy static-asserts "Persistent schedules not support for conv yet"), so the 3.x
  configs vary tile and cluster, not schedule.

What the plugin wires: :func:`space` / :func:`default_id` / :func:`is_feasible` /
:func:`supports` / :func:`fits_arch` / :func:`cost_features` for its lanes' dense part;
:func:`jit_units` (and :func:`flags`) to link a config into a lane module; :func:`symbol` to
find its launcher; :func:`impl_inputs` for the family's implementation hash; :func:`bind`
to run one on tensors.

Importing this package imports neither torch nor CUTLASS and compiles nothing.
"""

from __future__ import annotations

from oasr_conv1d.dense.codegen import (
    DTYPES,
    EXTRA_FLAGS,
    OPS,
    csrc_dir,
    flags,
    headers,
    impl_inputs,
    jit_units,
    kernel_type,
    module_spec,
    pdl_capable,
    symbol,
    unit_name,
    unit_source,
    workspace_symbol,
)
from oasr_conv1d.dense.config_space import (
    DEFAULTS,
    LANE_SM80,
    LANE_SM90,
    LANES,
    config,
    default_id,
    listed,
    space,
)
from oasr_conv1d.dense.feasibility import cost_features, fits_arch, is_feasible, supports
from oasr_conv1d.dense.launch import DenseKernel, bind, pack_weight, reference

__all__ = [
    "DEFAULTS", "DTYPES", "DenseKernel", "EXTRA_FLAGS", "LANES", "LANE_SM80", "LANE_SM90", "OPS",
    "bind", "config", "cost_features", "csrc_dir", "default_id", "fits_arch", "flags",
    "headers", "impl_inputs", "is_feasible", "jit_units", "kernel_type", "listed",
    "module_spec", "pack_weight", "pdl_capable", "reference", "space", "supports", "symbol",
    "unit_name", "unit_source", "workspace_symbol",
]
