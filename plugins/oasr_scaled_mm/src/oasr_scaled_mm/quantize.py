"""W8A8 int8 quantized linear layers for the census and for engines (``int8_w8a8``): the W8A8 code
base's (:mod:`oasr_scaled_mm.w8a8.linear`) for :data:`oasr_scaled_mm.format.INT8`.

:func:`quantized_linear` is what ``oasr_quantized_linear("int8_w8a8")`` returns: ``layer(x)`` as
the int8 GEMM ``oasr_scaled_mm.ops.scaled_mm``, the activation quantized per token
(:func:`quantize_rows`), the weight once per output channel and cached on the layer
(:data:`CACHE_ATTR`); or, where the family's route says unquantized
(:func:`oasr_scaled_mm.ops.unquantized`: the table, or the untuned route at a shape no entry
covers), the layer in its own dtype. The torch definition of the quantizer is
:func:`quantize_rows_reference`.
"""

from __future__ import annotations

from typing import Any

from oasr_core.kit.normed import fused_kernel, layer_norm_answer, quantize_after_norm

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8 import linear
from oasr_scaled_mm.w8a8.weights import QuantizedWeight

CACHE_ATTR = INT8.cache_attr
"""The attribute of an ``nn.Linear`` holding its :class:`QuantizedWeight`."""
QUANTIZATION = INT8.quantization


def quantize_rows(x: Any) -> tuple[Any, Any]:
    """Per-token int8 quantization: ``(q [..., K], scale float32 [...])``
    (:func:`oasr_scaled_mm.w8a8.linear.quantize_rows`: the one-kernel quantizer on CUDA)."""
    return linear.quantize_rows(INT8, x)


def quantize_rows_reference(x: Any) -> tuple[Any, Any]:
    """:func:`quantize_rows` in torch ops (any device): the definition the kernel matches.

    Symmetric int8 per row of the last dim: ``scale = absmax / 127`` (1 for an all-zero row),
    ``q = round_half_even(x / scale)`` clamped to [-127, 127], both divisions IEEE. The scale
    divides by a tensor of 127s rather than the scalar 127: torch turns a division by a CPU
    scalar into a multiplication by its reciprocal on CUDA, which is not the IEEE quotient the
    kernel computes.
    """
    import torch

    x32 = x.detach().to(torch.float32)
    amax = x32.abs().amax(dim=-1)
    scale = amax / torch.full_like(amax, 127.0)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(x32 / scale.unsqueeze(-1)).clamp_(-127.0, 127.0).to(torch.int8)
    return q, scale


def quantized_weight(layer: Any) -> QuantizedWeight:
    """The cached int8 copy of ``layer.weight`` (computed on first use and on change)."""
    return linear.quantized_weight(INT8, layer)


def quantized_linear(x: Any, layer: Any, activation: str | None = None, *,
                     residual: Any = None, alpha: float = 1.0) -> Any:
    """``activation(layer(x))`` (with ``residual``: ``residual + alpha * layer(x)``) with the
    layer a W8A8 int8 GEMM or, where the route says unquantized, in ``x``'s dtype
    (:func:`oasr_scaled_mm.w8a8.linear.quantized_linear`). ``x`` may be the family's
    :class:`~oasr_core.layers.NormedRows` (its layer norm deferred and fused with the
    quantizer)."""
    return linear.quantized_linear(INT8, x, layer, activation, residual=residual, alpha=alpha)


def layer_plan(key: tuple, x: Any, layer: Any) -> Any:
    """The per-layer plan of a call that just ran :func:`quantized_linear`
    (:func:`oasr_scaled_mm.w8a8.linear.layer_plan`)."""
    return linear.layer_plan(INT8, key, x, layer)


norm_quantize_rows = fused_kernel("oasr_scaled_mm.quantize_kernel")
"""``(x, norm) -> (q, scale) | None``: this family's fused layer norm and quantizer
(:func:`oasr_core.kit.normed.fused_kernel`)."""

# quantize_rows is looked up at call time (the census recorder and tests rebind it).
layer_norm = layer_norm_answer(QUANTIZATION, quantize_after_norm(norm_quantize_rows,
                                                                 lambda x: quantize_rows(x)))
"""``oasr_layer("LayerNorm", dtype, QUANTIZATION)``'s answer: the norm deferred for the linears
after it (:func:`oasr_core.kit.normed.layer_norm_answer`)."""
