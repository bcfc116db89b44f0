"""The one-kernel activation quantizer: ``quantize_rows`` on a CUDA device.

:func:`quantize_rows_cuda` quantizes a ``[..., K]`` fp16/bf16 CUDA tensor per row in one
bandwidth-bound pass (the kit's :mod:`oasr_scaled_mm.w8a8.row_quantizer` in the int8 format
:data:`FORMAT`), bit for bit what :func:`oasr_scaled_mm.quantize.quantize_rows_reference`
computes in about nine torch kernels. Its JIT module (:func:`spec`) is tiny (no CUTLASS) and
is part of both lanes' production modules' prebuild (:func:`oasr_scaled_mm.jit.lane_specs`);
loaded once per process and arch. When it cannot be loaded (no toolchain, a failed build) the
caller's torch path serves, with one warning. Its source is generated here, not in
``csrc/oasr_scaled_mm/``, so it is not part of the GEMM kernels' ``impl_hash``: the quantizer
changes no GEMM table.
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

SYMBOL = "oasr_quantize_rows"
MODULE = "scaled_mm_quantize_rows"
FORMAT = RowFormat(
    name="int8, symmetric",
    propagate_nan=False,
    contract="""
amax     = max_i |float(X[r, i])|   (fmaxf: a NaN is skipped)
scale[r] = amax / 127 (IEEE division), or 1 when amax is 0
Q[r, i]  = int8(clamp(rint(float(X[r, i]) / scale[r]), -127, 127))   (IEEE division,
           round half to even): oasr_scaled_mm.quantize.quantize_rows_reference op for op,
           bit for bit; a row holding a NaN or an infinity is undefined in both
""",
    device_code=r"""
__device__ __forceinline__ float row_scale(float amax) {
  const float s = __fdiv_rn(amax, 127.f);
  return s > 0.f ? s : 1.f;
}

__device__ __forceinline__ uint32_t quantize_one(float v, float s) {
  const float r = rintf(__fdiv_rn(v, s));
  return uint8_t(static_cast<int8_t>(fminf(fmaxf(r, -127.f), 127.f)));
}

__device__ __forceinline__ uint32_t quantize_pair(float a, float b, float s) {
  return quantize_one(a, s) | (quantize_one(b, s) << 8);
}
""")
"""The int8 quantizer's numerics (the kit's row-quantizer skeleton does the rest)."""


def spec(arch: str):
    """The quantizer's :class:`oasr_core.jit.JitSpec` for arch family ``arch``."""
    from oasr_scaled_mm import jit

    return jit_spec(FORMAT, module=MODULE, symbol=SYMBOL, namespace="oasr_quantize",
                    title="oasr_scaled_mm activation quantizer (oasr_scaled_mm.quantize_kernel)",
                    target=jit.jit_arch(arch), extra_flags=jit.EXTRA_FLAGS)


KERNEL = row_quantizer(spec, SYMBOL, label="oasr_scaled_mm: the activation quantizer")
"""The loaded quantizer per arch (None, warned once, where it cannot be loaded)."""


def quantize_rows_cuda(x: Any, arch: str) -> tuple[Any, Any] | None:
    """``(q int8 [..., K], scale float32 [...])`` of a contiguous fp16/bf16 CUDA tensor, or
    None when the kernel is unavailable or refused the call (the caller quantizes with torch)."""
    import torch

    return quantize_rows_with(KERNEL, x, arch, torch.int8)


NORM_KERNEL = norm_quantizer(spec, SYMBOL, label="oasr_scaled_mm: the fused layer-norm quantizer")
"""The loaded fused layer norm + quantizer per arch (None, warned once, where it cannot be
loaded)."""


def norm_quantize_rows_cuda(x: Any, norm: Any, arch: str) -> tuple[Any, Any] | None:
    """The quantized rows of ``norm(x)`` (an ``nn.LayerNorm`` over the last dimension, its
    parameters in ``x``'s dtype or absent) of contiguous fp16/bf16 CUDA rows in one pass, or
    None when the kernel is unavailable or refused the call (a row longer than 16384, not a
    multiple of 8, or misaligned)."""
    import torch

    return norm_quantize_rows_with(NORM_KERNEL, x, norm, arch, torch.int8)
