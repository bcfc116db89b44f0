"""W8A8 fp8 e4m3 quantized linear layers for the census and for engines (``fp8_w8a8``): the W8A8
code base's (:mod:`oasr_scaled_mm.w8a8.linear`) for :data:`oasr_scaled_mm_fp8.format.E4M3`.

:func:`quantized_linear` is what ``oasr_quantized_linear("fp8_w8a8")`` returns: ``layer(x)`` as
the fp8 e4m3 GEMM ``oasr_scaled_mm_fp8.ops.scaled_mm_fp8``, the activation quantized per token
(:func:`quantize_rows`), the weight once per output channel and cached on the layer
(:data:`CACHE_ATTR`); or, where the family's route says unquantized
(:func:`oasr_scaled_mm_fp8.ops.unquantized`: the table, or the untuned route at a shape no entry
covers), the layer in its own dtype. The torch definition of the quantizer is
:func:`oasr_scaled_mm_fp8.numerics.quantize_rows`.
"""

from __future__ import annotations

from typing import Any

from oasr_core.kit.normed import fused_kernel, layer_norm_answer, quantize_after_norm
from oasr_scaled_mm.w8a8 import linear
from oasr_scaled_mm.w8a8.weights import QuantizedWeight

from oasr_scaled_mm_fp8.format import E4M3

CACHE_ATTR = E4M3.cache_attr
"""The attribute of an ``nn.Linear`` holding its :class:`QuantizedWeight`."""
QUANTIZATION = E4M3.quantization


def quantize_rows(x: Any) -> tuple[Any, Any]:
    """Per-token fp8 e4m3 quantization: ``(q [..., K], scale float32 [...])``
    (:func:`oasr_scaled_mm.w8a8.linear.quantize_rows`: the one-kernel quantizer on CUDA)."""
    return linear.quantize_rows(E4M3, x)


def quantized_weight(layer: Any) -> QuantizedWeight:
    """The cached fp8 e4m3 copy of ``layer.weight`` (computed on first use and on change)."""
    return linear.quantized_weight(E4M3, layer)


def quantized_linear(x: Any, layer: Any, activation: str | None = None, *,
                     residual: Any = None, alpha: float = 1.0) -> Any:
    """``activation(layer(x))`` (with ``residual``: ``residual + alpha * layer(x)``) with the
    layer a W8A8 fp8 e4m3 GEMM or, where the route says unquantized, in ``x``'s dtype
    (:func:`oasr_scaled_mm.w8a8.linear.quantized_linear`). ``x`` may be the family's
    :class:`~oasr_core.layers.NormedRows` (its layer norm deferred and fused with the
    quantizer)."""
    return linear.quantized_linear(E4M3, x, layer, activation, residual=residual, alpha=alpha)


def layer_plan(key: tuple, x: Any, layer: Any) -> Any:
    """The per-layer plan of a call that just ran :func:`quantized_linear`
    (:func:`oasr_scaled_mm.w8a8.linear.layer_plan`)."""
    return linear.layer_plan(E4M3, key, x, layer)


norm_quantize_rows = fused_kernel("oasr_scaled_mm_fp8.quantize_kernel")
"""``(x, norm) -> (q, scale) | None``: this family's fused layer norm and quantizer
(:func:`oasr_core.kit.normed.fused_kernel`)."""

# quantize_rows is looked up at call time (the census recorder and tests rebind it).
layer_norm = layer_norm_answer(QUANTIZATION, quantize_after_norm(norm_quantize_rows,
                                                                 lambda x: quantize_rows(x)))
"""``oasr_layer("LayerNorm", dtype, QUANTIZATION)``'s answer: the norm deferred for the linears
after it (:func:`oasr_core.kit.normed.layer_norm_answer`)."""
