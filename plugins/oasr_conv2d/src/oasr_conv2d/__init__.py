"""oasr_conv2d: the NHWC fp16/bf16 conv2d family of oasr and its lane.

``oasr_conv2d.conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)``
computes ``F.conv2d`` on NHWC data: ``x`` is ``(B, H, W, Cin)``, the result
``(B, H_out, W_out, Cout)``. ``oasr_conv2d.conv2d_activation(x, weight, bias, activation,
...)`` fuses a bias and a ReLU, GELU (erf) or SiLU into the epilogue (ops ``conv2d_relu``,
``conv2d_gelu``, ``conv2d_silu``). Dense convolutions (groups == 1) run on CUTLASS 2.x
implicit-GEMM kernels; depthwise and grouped ones on torch. Each call shape resolves once per
tuning epoch, through ``oasr_core.select``, to a config of the device's lane or to torch
(every shape no tuning entry covers).

Importing this package is cheap: it imports neither torch nor CUTLASS and compiles nothing;
the ops module loads on first attribute access.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {"conv2d", "conv2d_activation", "stats", "reset_stats"}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from oasr_conv2d import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'oasr_conv2d' has no attribute {name!r}")
