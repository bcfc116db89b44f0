"""The scaled_mm family's linear layer for the census's reference models (``oasr_linear``): the
W8A8 code base's (:mod:`oasr_scaled_mm.w8a8.plugin`) for :data:`oasr_scaled_mm.format.INT8`.

:data:`linear` runs each linear layer as :func:`oasr_scaled_mm.quantize.quantized_linear` (the
W8A8 GEMM, its activation in torch) or, where the table or the untuned route says unquantized,
through the installed unquantized linear with the activation or the residual add fused.
Importing this module imports neither torch nor the ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8 import plugin

QUANTIZATION = INT8.quantization
DTYPES = INT8.linear_dtypes
"""Activation dtypes the quantized linear takes (and returns)."""
linear = plugin.linear(INT8)
"""``linear(x, layer, activation=None, *, residual=None, alpha=1.0)``."""


def linear_for(dtype: str, quantization: str) -> Callable[..., Any] | None:
    """:data:`linear` for :data:`QUANTIZATION` at a dtype of :data:`DTYPES`, else None."""
    return plugin.linear_for(INT8, dtype, quantization)


def layer_for(kind: str, dtype: str, quantization: str) -> Callable[..., Any] | None:
    """``oasr_layer``'s answer: for ``LayerNorm`` under :data:`QUANTIZATION`,
    :data:`oasr_scaled_mm.quantize.layer_norm`; else None."""
    return plugin.layer_for(INT8, kind, dtype, quantization)
