"""oasr_conv1d: the channels-last fp16/bf16 conv1d family of oasr and its lanes.

``oasr_conv1d.conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)``
computes ``F.conv1d`` on channels-last data: ``x`` is ``(B, T, Cin)``, the result
``(B, T_out, Cout)``, with no transposes. ``oasr_conv1d.conv1d_activation(x, weight, bias,
activation, ...)`` fuses a bias and a ReLU, GELU (erf) or SiLU into the epilogue (ops
``conv1d_relu``, ``conv1d_gelu``, ``conv1d_silu``). Dense convolutions (groups == 1) run on
implicit-GEMM kernels (``oasr_conv1d.dense``), depthwise ones (groups == Cin == Cout) on the
family's own direct kernels (``oasr_conv1d.depthwise``). Each call shape resolves once per
tuning epoch, through ``oasr_core.select``, to a config of the device's lane or to torch.

Importing this package is cheap: it imports neither torch nor CUTLASS and compiles nothing;
the ops module loads on first attribute access.
"""

from __future__ import annotations

from oasr_core.kit.lazy import lazy_attributes

__version__ = "0.1.0"

_LAZY = {"conv1d", "conv1d_activation", "stats", "reset_stats"}

__all__ = ["__version__", *sorted(_LAZY)]

__getattr__ = lazy_attributes(__name__, "ops", _LAZY)
