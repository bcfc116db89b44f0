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

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8.linear import quantize_names

globals().update(quantize_names(INT8))  # CACHE_ATTR, QUANTIZATION, quantize_rows, ..., layer_norm


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
