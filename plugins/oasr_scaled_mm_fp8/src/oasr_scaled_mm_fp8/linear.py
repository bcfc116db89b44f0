"""The scaled_mm_fp8 family's linear layer for the census's reference models (``oasr_linear``): the
W8A8 code base's (:mod:`oasr_scaled_mm.w8a8.plugin`) for :data:`oasr_scaled_mm_fp8.format.E4M3`.

:data:`linear` runs each linear layer as :func:`oasr_scaled_mm_fp8.quantize.quantized_linear`
(the W8A8 GEMM, its activation in torch) or, where the table or the untuned route says
unquantized, through the installed unquantized linear with the activation or the residual add
fused. Importing this module imports neither torch nor the ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oasr_scaled_mm.w8a8 import plugin

from oasr_scaled_mm_fp8.format import E4M3

QUANTIZATION = E4M3.quantization
DTYPES = E4M3.linear_dtypes
"""Activation dtypes the quantized linear takes (and returns)."""
linear = plugin.linear(E4M3)
"""``linear(x, layer, activation=None, *, residual=None, alpha=1.0)``."""


def linear_for(dtype: str, quantization: str) -> Callable[..., Any] | None:
    """:data:`linear` for :data:`QUANTIZATION` at a dtype of :data:`DTYPES`, else None."""
    return plugin.linear_for(E4M3, dtype, quantization)


def layer_for(kind: str, dtype: str, quantization: str) -> Callable[..., Any] | None:
    """``oasr_layer``'s answer: for ``LayerNorm`` under :data:`QUANTIZATION`,
    :data:`oasr_scaled_mm_fp8.quantize.layer_norm`; else None."""
    return plugin.layer_for(E4M3, kind, dtype, quantization)
