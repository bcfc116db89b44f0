"""The scaled_mm_fp8 family's linear layer for the census's reference models (``oasr_linear``).

:func:`linear_for` answers ``oasr_linear(dtype, "fp8_w8a8")`` at the activation dtypes the
quantized linear takes (:data:`DTYPES`) with :func:`linear`: each linear layer runs as
:func:`oasr_scaled_mm_fp8.quantize.quantized_linear`, then its activation in torch, or,
where the table or the untuned route says unquantized, through the installed unquantized
linear with the activation or the residual add fused. The scheme and dtypes are the family's
``Family.quantizations``. Importing this module imports neither torch nor the ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oasr_scaled_mm.w8a8.scaled_ops import layer_linear

from oasr_scaled_mm_fp8.quantize import QUANTIZATION

DTYPES = ("bf16", "fp16")
"""Activation dtypes the quantized linear takes (and returns)."""


linear = layer_linear("oasr_scaled_mm_fp8.quantize", "fp8")
"""``linear(x, layer, activation=None, *, residual=None, alpha=1.0)``: each layer through
:func:`oasr_scaled_mm_fp8.quantize.quantized_linear`
(:func:`oasr_scaled_mm.w8a8.scaled_ops.layer_linear`)."""


def linear_for(dtype: str, quantization: str) -> Callable[..., Any] | None:
    """:func:`linear` for ``fp8_w8a8`` at a dtype of :data:`DTYPES`, else None."""
    return linear if quantization == QUANTIZATION and dtype in DTYPES else None


def layer_for(kind: str, dtype: str, quantization: str) -> Callable[..., Any] | None:
    """``oasr_layer``'s answer: for ``LayerNorm`` under ``fp8_w8a8`` at a dtype of
    :data:`DTYPES`, :data:`oasr_scaled_mm_fp8.quantize.layer_norm` (the norm deferred for the
    linears after it, which share one fused norm-and-quantize pass); else None."""
    if kind != "LayerNorm" or linear_for(dtype, quantization) is None:
        return None
    from oasr_scaled_mm_fp8.quantize import layer_norm

    return layer_norm
