"""How the census sees fp8 GEMM calls: the scaled_mm_fp8 family's recorder patches.

``recorder_patches()`` observes ``oasr_scaled_mm_fp8.ops:scaled_mm_fp8`` and
``:scaled_mm_fp8_quant`` (the quantized linear calls them through the module attribute). Each
call is recorded as family ``scaled_mm_fp8``, its op, dtype ``float8_e4m3fn``, dims ``(N, K)``,
``M = numel(A) / K``; calls whose operands are not e4m3 are not this family's. Importing this
module imports neither torch nor the ops.
"""

from __future__ import annotations

from typing import Any

from oasr_core.census.recorder import Call, RecorderPatch, dtype_name

from oasr_scaled_mm_fp8.config_space import DTYPE, FAMILY, OP_MM, OP_QUANT


def fp8_call(op: str, a: Any, w: Any) -> Call | None:
    """The :class:`Call` of ``a [..., K] x w [N, K]^T`` with e4m3 operands; None if not ours."""
    if not hasattr(a, "dim") or not hasattr(w, "dim") or w.dim() != 2 or a.dim() < 1:
        return None
    if dtype_name(a.dtype) != DTYPE or dtype_name(w.dtype) != DTYPE:
        return None
    n, k = int(w.shape[0]), int(w.shape[1])
    if k <= 0 or n <= 0 or a.shape[-1] != k or a.numel() // k == 0:
        return None
    m = a.numel() // k
    return Call(family=FAMILY, op=op, dtype=DTYPE, dims=(("N", n), ("K", k)), m=m,
                elements=m * k + n * k + m * n, flops=2 * m * n * k, weight_elements=n * k)


def record_mm(a: Any, w: Any, a_scale: Any = None, w_scale: Any = None, bias: Any = None,
              out_dtype: Any = None, out: Any = None) -> Call | None:
    """``scaled_mm_fp8(a, w, a_scale, w_scale, bias, out_dtype, out)``."""
    return fp8_call(OP_MM, a, w)


def record_quant(a: Any, w: Any, a_scale: Any = None, w_scale: Any = None,
                 out_scale: Any = None, bias: Any = None, out: Any = None) -> Call | None:
    """``scaled_mm_fp8_quant(a, w, a_scale, w_scale, out_scale, bias, out)``."""
    return fp8_call(OP_QUANT, a, w)


def recorder_patches() -> list[RecorderPatch]:
    """The scaled_mm_fp8 family's patches (``Family.recorder_patches``)."""
    return [
        RecorderPatch(family=FAMILY, target="oasr_scaled_mm_fp8.ops:scaled_mm_fp8",
                      record=record_mm, description="the fp8 scaled GEMM"),
        RecorderPatch(family=FAMILY, target="oasr_scaled_mm_fp8.ops:scaled_mm_fp8_quant",
                      record=record_quant, description="the fp8 scaled GEMM quantizing its output"),
    ]
