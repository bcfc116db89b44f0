"""The conv2d family's answer to ``oasr_layer("Conv2d", dtype, "none")``.

:func:`layer_for` returns :func:`conv_layer` for fp16/bf16 full-precision models:
``conv_layer(x, layer, activation=None)`` computes ``activation(layer(x))`` on NHWC
``x (B, H, W, Cin)`` (NHWC out) with the family's ops, reached through
:mod:`oasr_conv2d.ops` at call time (the census recorder rebinds that module's attributes).
The weight is packed into the kernels' layout at its first eager call and cached on the
weight (:mod:`oasr_conv2d.weights`): warm up eagerly before capturing a CUDA graph. On the
``meta`` device (census probes) nothing is packed; the op's torch path computes shapes.
"""

from __future__ import annotations

from typing import Any

DTYPES = ("fp16", "bf16")


def conv_layer(x: Any, layer: Any, activation: str | None = None) -> Any:
    """``activation(layer(x))`` on NHWC data, for an ``nn.Conv2d`` ``layer``."""
    from oasr_conv2d import ops

    if getattr(layer, "padding_mode", "zeros") != "zeros":
        # Reflect/replicate/circular padding is the module's own: torch computes it.
        from oasr_conv2d.numerics import apply_activation

        y = apply_activation(layer(x.permute(0, 3, 1, 2)), activation)
        return y.permute(0, 2, 3, 1).contiguous()
    return ops.conv2d_activation(x, layer.weight, layer.bias, activation, stride=layer.stride,
                                 padding=layer.padding, dilation=layer.dilation,
                                 groups=layer.groups)


def layer_for(kind: str, dtype: str, quantization: str) -> Any:
    """``oasr_layer``'s answer: :func:`conv_layer` for ``Conv2d`` in fp16/bf16, else None."""
    if kind == "Conv2d" and dtype in DTYPES and quantization == "none":
        return conv_layer
    return None
