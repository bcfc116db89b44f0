"""A quantized family's per-layer weight cache: the quantized copy an ``nn.Linear`` carries.

A quantized linear quantizes its layer's weight once and keeps the result on the layer
(:func:`cached_weight`, under the family's attribute name), with a float32 copy of the bias;
the cache is rebuilt only when the layer's weight or bias changes -- a new tensor, another
device or dtype, a new shape, or an in-place update (the tensor's version counter). On the
meta device (the census) a tensor is identified by its object. Importing this module imports
no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs


@attrs.define(eq=False)
class QuantizedWeight:
    """An ``nn.Linear``'s quantized weight ``[N, K]``, per-channel scales ``[N]``, float32
    bias (None without one), and the identity of the tensors they were made from."""

    key: tuple
    weight: Any
    scale: Any
    bias: Any


def identity(t: Any) -> tuple:
    """What identifies a tensor's contents for the cache (``(None,)`` for no tensor)."""
    if t is None:
        return (None,)
    ptr = t.data_ptr() if t.device.type != "meta" else id(t)
    return (ptr, t._version, t.device, t.dtype, tuple(t.shape))


def cached_weight(layer: Any, attr: str, quantize_rows: Callable[[Any], tuple[Any, Any]]
                  ) -> QuantizedWeight:
    """``layer``'s :class:`QuantizedWeight` under ``attr``, made by ``quantize_rows(weight)``
    (``(q, scale)`` per output channel) on first use and whenever the weight or bias changed."""
    import torch

    weight, bias = layer.weight, getattr(layer, "bias", None)
    key = (*identity(weight), *identity(bias))
    cached = getattr(layer, attr, None)
    if isinstance(cached, QuantizedWeight) and cached.key == key:
        return cached
    with torch.no_grad():
        q, scale = quantize_rows(weight)
        b32 = bias.detach().to(torch.float32).contiguous() if bias is not None else None
    state = QuantizedWeight(key=key, weight=q.contiguous(), scale=scale.contiguous(), bias=b32)
    object.__setattr__(layer, attr, state)
    return state
