"""A W8A8 family's per-layer weight cache: the quantized copy an ``nn.Linear`` carries.

A quantized linear quantizes its layer's weight once and keeps the result on the layer
(:func:`cached_weight`, under the format's attribute name: the kit's prepared-weight cache,
:func:`oasr_core.kit.weights.prepared`), with a float32 copy of the bias; the cache is rebuilt
only when the layer's weight or bias changes -- a new tensor, another device or dtype, a new
shape, or an in-place update (the tensor's version counter). On the meta device (the census) a
tensor is identified by its object. Importing this module imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from oasr_core.kit.weights import prepared, stamp


@attrs.define(eq=False)
class QuantizedWeight:
    """An ``nn.Linear``'s quantized weight ``[N, K]``, per-channel scales ``[N]`` and float32
    bias (None without one)."""

    weight: Any
    scale: Any
    bias: Any


def cached_weight(layer: Any, attr: str, quantize_rows: Callable[[Any], tuple[Any, Any]]
                  ) -> QuantizedWeight:
    """``layer``'s :class:`QuantizedWeight` under ``attr``, made by ``quantize_rows(weight)``
    (``(q, scale)`` per output channel) on first use and whenever the weight or bias changed
    (made during graph capture too, as the layer's first call there)."""
    weight, bias = layer.weight, getattr(layer, "bias", None)

    def make() -> QuantizedWeight:
        import torch

        q, scale = quantize_rows(weight)
        b32 = bias.detach().to(torch.float32).contiguous() if bias is not None else None
        return QuantizedWeight(weight=q.contiguous(), scale=scale.contiguous(), bias=b32)

    return prepared(layer, attr, (*stamp(weight), *stamp(bias)), make, in_capture=True)
