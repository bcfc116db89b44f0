"""How the census sees int8 GEMM calls: the scaled_mm family's recorder patches.

``recorder_patches()`` is the scaled_mm ``Family.recorder_patches``. It observes the family's
ops, ``oasr_scaled_mm.ops:scaled_mm`` and ``oasr_scaled_mm.ops:scaled_mm_quant`` (the
recorder rebinds every module global bound to them, and the quantized linear of
:mod:`oasr_scaled_mm.quantize` calls them through the module attribute). Each call is
recorded as family ``scaled_mm``, op ``scaled_mm`` or ``scaled_mm_quant``, dtype ``int8``, dims
``(N, K)``, ``M = numel(A) / K``. Calls whose operands are not int8 are not this family's.

Importing this module imports neither torch nor the ops.
"""

from __future__ import annotations

from typing import Any

from oasr_core.census.recorder import Call, RecorderPatch, dtype_name

from oasr_scaled_mm.config_space import FAMILY, OP_MM, OP_QUANT


def scaled_mm_call(op: str, a: Any, w: Any) -> Call | None:
    """The :class:`Call` of ``a [..., K] x w [N, K]^T`` with int8 operands; None if not ours."""
    if not hasattr(a, "dim") or not hasattr(w, "dim") or w.dim() != 2 or a.dim() < 1:
        return None
    if dtype_name(a.dtype) != "int8" or dtype_name(w.dtype) != "int8":
        return None
    n, k = int(w.shape[0]), int(w.shape[1])
    if k <= 0 or n <= 0 or a.shape[-1] != k:
        return None
    m = a.numel() // k
    if m == 0:
        return None
    return Call(family=FAMILY, op=op, dtype="int8", dims=(("N", n), ("K", k)), m=m,
                elements=m * k + n * k + m * n, flops=2 * m * n * k, weight_elements=n * k)


def record_scaled_mm(a: Any, w: Any, a_scale: Any = None, w_scale: Any = None, bias: Any = None,
                     out_dtype: Any = None, out: Any = None) -> Call | None:
    """``oasr_scaled_mm.ops.scaled_mm(a, w, a_scale, w_scale, bias, out_dtype, out)``."""
    return scaled_mm_call(OP_MM, a, w)


def record_scaled_mm_quant(a: Any, w: Any, a_scale: Any = None, w_scale: Any = None,
                           out_scale: Any = None, bias: Any = None,
                           out: Any = None) -> Call | None:
    """``oasr_scaled_mm.ops.scaled_mm_quant(a, w, a_scale, w_scale, out_scale, bias, out)``."""
    return scaled_mm_call(OP_QUANT, a, w)


def recorder_patches() -> list[RecorderPatch]:
    """The scaled_mm family's patches (``Family.recorder_patches``)."""
    return [
        RecorderPatch(family=FAMILY, target="oasr_scaled_mm.ops:scaled_mm",
                      record=record_scaled_mm, description="the int8 scaled GEMM"),
        RecorderPatch(family=FAMILY, target="oasr_scaled_mm.ops:scaled_mm_quant",
                      record=record_scaled_mm_quant,
                      description="the int8 scaled GEMM quantizing its output"),
    ]
