"""The one-kernel activation quantizer: per-token e4m3 quantization on a CUDA device.

:func:`quantize_rows_cuda` quantizes a ``[..., K]`` fp16/bf16 CUDA tensor per row in one
kernel (``csrc/oasr_fp8_quantize/rows.cuh``), bit for bit what
:func:`oasr_scaled_mm_fp8.numerics.quantize_rows` computes in about eight torch kernels. Its
JIT module (:func:`spec`, no CUTLASS) is part of both lanes' prebuild
(:func:`oasr_scaled_mm_fp8.jit.lane_specs`) and loads once per arch
(:class:`oasr_core.kit.helpers.HelperKernel`); when it cannot load, torch quantizes. The
header lives outside ``csrc/oasr_scaled_mm_fp8/``: the quantizer is not part of the GEMM
kernels' ``impl_hash``.
"""

from __future__ import annotations

import ctypes
from typing import Any

from oasr_core.kit.helpers import HelperKernel, quantize_rows_with

SYMBOL = "oasr_fp8_quantize_rows"
MODULE = "scaled_mm_fp8_quantize_rows"
_SOURCE = f"""// oasr_scaled_mm_fp8 activation quantizer (oasr_scaled_mm_fp8.quantize_kernel)
#include "oasr_fp8_quantize/rows.cuh"

OASR_EXPORT int32_t {SYMBOL}(const void* x, int32_t dtype, int64_t rows, int64_t k, void* q,
    void* scale, void* stream) {{
  return oasr_fp8_quantize::quantize(x, dtype, rows, k, q, scale,
                                     static_cast<cudaStream_t>(stream));
}}
"""


def spec(arch: str):
    """The quantizer's :class:`oasr_core.jit.JitSpec` for arch family ``arch``."""
    from oasr_core.jit import JitSpec, TranslationUnit

    from oasr_scaled_mm_fp8 import codegen, jit

    unit = TranslationUnit(name="quantize_rows", source=_SOURCE, exports=(SYMBOL,))
    return JitSpec(name=MODULE, arch=jit.jit_arch(arch), units=(unit,),
                   include_dirs=(str(codegen.csrc_dir()),), extra_flags=jit.EXTRA_FLAGS,
                   cutlass=False)


KERNEL = HelperKernel(spec, SYMBOL, (ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_void_p), ctypes.c_int32,
                      label="oasr_scaled_mm_fp8: the activation quantizer",
                      fallback="quantizing with torch")


def quantize_rows_cuda(x: Any, arch: str) -> tuple[Any, Any] | None:
    """``(q e4m3 [..., K], scale float32 [...])`` of a contiguous fp16/bf16 CUDA tensor, or
    None when the kernel is unavailable or refused the call (the caller quantizes with torch)."""
    import torch

    return quantize_rows_with(KERNEL, x, arch, torch.float8_e4m3fn)
