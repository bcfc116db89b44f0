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

from oasr_core.kit.helpers import HelperKernel

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

    fn = KERNEL.get(arch)
    if fn is None:
        return None
    k = x.shape[-1]
    rows = x.numel() // k if k else 0
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    if rows == 0:
        return q, scale
    stream = torch._C._cuda_getCurrentRawStream(x.device.index)
    code = 0 if x.dtype == torch.float16 else 1
    status = fn(x.data_ptr(), code, rows, k, q.data_ptr(), scale.data_ptr(), stream)
    return (q, scale) if status == 0 else None
