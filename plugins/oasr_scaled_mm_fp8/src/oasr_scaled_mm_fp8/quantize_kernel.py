"""The one-kernel activation quantizer: per-token e4m3 quantization on a CUDA device.

:func:`quantize_rows_cuda` quantizes a ``[..., K]`` fp16/bf16 CUDA tensor per row in one
bandwidth-bound pass (the kit's :mod:`oasr_scaled_mm.w8a8.row_quantizer` in the e4m3 format
:data:`FORMAT`), bit for bit what :func:`oasr_scaled_mm_fp8.numerics.quantize_rows` computes
in about eight torch kernels (NaN payloads aside). Its JIT module (:func:`spec`, no CUTLASS)
is part of both lanes' prebuild (:func:`oasr_scaled_mm_fp8.jit.lane_specs`) and loads once per
arch (:class:`oasr_core.kit.helpers.HelperKernel`); when it cannot load, torch quantizes. Its
source is generated here, not in ``csrc/oasr_scaled_mm_fp8/``: the quantizer is not part of
the GEMM kernels' ``impl_hash``.
"""

from __future__ import annotations

from typing import Any

from oasr_scaled_mm.w8a8.row_quantizer import RowFormat, jit_spec
from oasr_scaled_mm.w8a8.rows import (
    norm_quantize_rows_with,
    norm_quantizer,
    quantize_rows_with,
    row_quantizer,
)

SYMBOL = "oasr_fp8_quantize_rows"
MODULE = "scaled_mm_fp8_quantize_rows"
FORMAT = RowFormat(
    name="fp8 e4m3, saturating",
    propagate_nan=True,
    headers=("cuda_fp8.h",),
    contract="""
amax     = max_i |float(X[r, i])|   (NaN-propagating, as torch's amax)
scale[r] = amax / 448 (IEEE division), or 1 when amax is 0
Q[r, i]  = e4m3_rn(clamp(float(X[r, i]) / scale[r], -448, 448))   (IEEE division; the clamp
           keeps NaN, as torch.clamp does): oasr_scaled_mm_fp8.numerics.quantize_rows op for
           op, bit for bit (NaN payloads aside)
""",
    device_code=r"""
__device__ __forceinline__ float row_scale(float amax) {
  const float s = __fdiv_rn(amax, 448.f);
  return s == 0.f ? 1.f : s;
}

// cvt's .satfinite is the clamp: a finite quotient beyond +-448 and an infinity become +-448
// (what the clamp then rounding gives), a NaN stays NaN.
__device__ __forceinline__ uint32_t quantize_pair(float a, float b, float s) {
  return __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(a, s), __fdiv_rn(b, s)),
                                  __NV_SATFINITE, __NV_E4M3);
}
""")
"""The e4m3 quantizer's numerics (the kit's row-quantizer skeleton does the rest)."""


def spec(arch: str):
    """The quantizer's :class:`oasr_core.jit.JitSpec` for arch family ``arch``."""
    from oasr_scaled_mm_fp8 import jit

    return jit_spec(FORMAT, module=MODULE, symbol=SYMBOL, namespace="oasr_fp8_quantize",
                    title="oasr_scaled_mm_fp8 activation quantizer "
                          "(oasr_scaled_mm_fp8.quantize_kernel)",
                    target=jit.jit_arch(arch), extra_flags=jit.EXTRA_FLAGS)


KERNEL = row_quantizer(spec, SYMBOL, label="oasr_scaled_mm_fp8: the activation quantizer")
"""The loaded quantizer per arch (None, warned once, where it cannot be loaded)."""


def quantize_rows_cuda(x: Any, arch: str) -> tuple[Any, Any] | None:
    """``(q e4m3 [..., K], scale float32 [...])`` of a contiguous fp16/bf16 CUDA tensor, or
    None when the kernel is unavailable or refused the call (the caller quantizes with torch)."""
    import torch

    return quantize_rows_with(KERNEL, x, arch, torch.float8_e4m3fn)


NORM_KERNEL = norm_quantizer(spec, SYMBOL,
                             label="oasr_scaled_mm_fp8: the fused layer-norm quantizer")
"""The loaded fused layer norm + quantizer per arch (None, warned once, where it cannot be
loaded)."""


def norm_quantize_rows_cuda(x: Any, norm: Any, arch: str) -> tuple[Any, Any] | None:
    """The quantized rows of ``norm(x)`` (an ``nn.LayerNorm`` over the last dimension, its
    parameters in ``x``'s dtype or absent) of contiguous fp16/bf16 CUDA rows in one pass, or
    None when the kernel is unavailable or refused the call (a row longer than 16384, not a
    multiple of 8, or misaligned)."""
    import torch

    return norm_quantize_rows_with(NORM_KERNEL, x, norm, arch, torch.float8_e4m3fn)
