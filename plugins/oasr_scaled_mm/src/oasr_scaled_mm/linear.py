"""The scaled_mm family's linear layer for the census's reference models (``oasr_linear``).

:func:`linear_for` is what the plugin answers to ``oasr_linear(dtype, quantization)``: for
the ``int8_w8a8`` scheme at an activation dtype the quantized linear takes
(:data:`DTYPES`), :func:`linear` runs each linear layer as the W8A8 GEMM of
:func:`oasr_scaled_mm.quantize.quantized_linear` and an activation that follows it in torch
(the int8 kernels fuse none), or, where the table says unquantized, through the installed
unquantized linear with the activation or the residual add fused. The scheme and dtypes are
the family's ``Family.quantizations``. Importing this module imports neither torch nor the
ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oasr_scaled_mm.quantize import QUANTIZATION
from oasr_scaled_mm.w8a8.scaled_ops import layer_linear

DTYPES = ("fp16", "bf16")
"""Activation dtypes the quantized linear takes (and returns)."""


linear = layer_linear("oasr_scaled_mm.quantize", "int8")
"""``linear(x, layer, activation=None, *, residual=None, alpha=1.0)``: each layer through
:func:`oasr_scaled_mm.quantize.quantized_linear`
(:func:`oasr_scaled_mm.w8a8.scaled_ops.layer_linear`)."""


def linear_for(dtype: str, quantization: str) -> Callable[..., Any] | None:
    """:func:`linear` for ``int8_w8a8`` at a dtype of :data:`DTYPES`, else None."""
    return linear if quantization == QUANTIZATION and dtype in DTYPES else None


def layer_for(kind: str, dtype: str, quantization: str) -> Callable[..., Any] | None:
    """``oasr_layer``'s answer: for ``LayerNorm`` under ``int8_w8a8`` at a dtype of
    :data:`DTYPES`, :data:`oasr_scaled_mm.quantize.layer_norm` (the norm deferred for the linears
    after it, which share one fused norm-and-quantize pass); else None."""
    if kind != "LayerNorm" or linear_for(dtype, quantization) is None:
        return None
    from oasr_scaled_mm.quantize import layer_norm

    return layer_norm
