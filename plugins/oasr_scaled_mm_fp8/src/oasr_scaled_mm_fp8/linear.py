"""The scaled_mm_fp8 family's linear layer for the census's reference models (``oasr_linear``).

:func:`linear_for` answers ``oasr_linear(dtype, "fp8_w8a8")`` at the activation dtypes the
quantized linear takes (:data:`DTYPES`) with :func:`linear`: each linear layer runs as
:func:`oasr_scaled_mm_fp8.quantize.quantized_linear`, then its activation in torch. The scheme
and dtypes are the family's ``Family.quantizations``. Importing this module imports neither
torch nor the ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oasr_scaled_mm_fp8.quantize import QUANTIZATION

DTYPES = ("bf16", "fp16")
"""Activation dtypes the quantized linear takes (and returns)."""


def linear(x: Any, layer: Any, activation: str | None = None, *, residual: Any = None,
           alpha: float = 1.0) -> Any:
    """``activation(layer(x))``, the layer a W8A8 fp8 GEMM (its activation in torch), or
    the unquantized linear with the activation fused where the table says unquantized; with
    ``residual``, ``residual + alpha * layer(x)`` (fused where the unquantized linear fuses
    it)."""
    from oasr_scaled_mm_fp8 import quantize

    return quantize.quantized_linear(x, layer, activation, residual=residual, alpha=alpha)


def linear_for(dtype: str, quantization: str) -> Callable[..., Any] | None:
    """:func:`linear` for ``fp8_w8a8`` at a dtype of :data:`DTYPES`, else None."""
    return linear if quantization == QUANTIZATION and dtype in DTYPES else None
