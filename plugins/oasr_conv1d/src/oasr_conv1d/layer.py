"""The conv1d family's answer to ``oasr_layer("Conv1d", dtype, "none")``.

:func:`layer_for` returns :func:`conv_layer` for fp16/bf16 full-precision models:
``conv_layer(x, layer, activation=None)`` computes ``activation(layer(x))`` on channels-last
``x (B, T, Cin)`` with the family's ops, reached through :mod:`oasr_conv1d.ops` at call time
(the census recorder rebinds that module's attributes). The model folds a following BatchNorm
into the layer's weight and bias before calling. The weight is packed into the kernels'
layout at its first eager call and cached on the weight, keyed by its ``data_ptr`` and
``_version`` (:mod:`oasr_conv1d.weights`): warm up eagerly before capturing a CUDA graph. On
the ``meta`` device (census probes) nothing is packed; the op's torch path computes shapes.
"""

from __future__ import annotations

from typing import Any

DTYPES = ("fp16", "bf16")


def conv_layer(x: Any, layer: Any, activation: str | None = None) -> Any:
    """``activation(layer(x))`` channels-last, for an ``nn.Conv1d`` ``layer``."""
    from oasr_conv1d import ops

    padding = layer.padding if isinstance(layer.padding, str) else layer.padding[0]
    if getattr(layer, "padding_mode", "zeros") != "zeros":
        # Reflect/replicate/circular padding is the module's own: torch computes it.
        from oasr_conv1d.numerics import apply_activation

        y = apply_activation(layer(x.transpose(1, 2)), activation)
        return y.transpose(1, 2).contiguous()
    return ops.conv1d_activation(x, layer.weight, layer.bias, activation,
                                 stride=layer.stride[0], padding=padding,
                                 dilation=layer.dilation[0], groups=layer.groups)


def layer_for(kind: str, dtype: str, quantization: str) -> Any:
    """``oasr_layer``'s answer: :func:`conv_layer` for ``Conv1d`` at fp16/bf16, ``none``."""
    if kind != "Conv1d" or quantization != "none" or dtype not in DTYPES:
        return None
    return conv_layer
