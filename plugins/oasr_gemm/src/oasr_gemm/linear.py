"""The gemm family's linear layer for the census's reference models (``oasr_linear``).

:func:`linear_for` is what the plugin answers to ``oasr_linear(dtype, quantization)``: for a
full-precision model of a dtype the family serves, :func:`linear` runs each linear layer as
:func:`oasr_gemm.ops.gemm`, a layer followed by an activation as one
:func:`oasr_gemm.ops.gemm_activation` call (the activation fused in the epilogue), and a layer
whose output is added to a residual as one :func:`oasr_gemm.ops.gemm_residual` call, so the
census records them as ops ``gemm``, ``gemm_activation`` and ``gemm_residual``. The ops are
reached through their module at call time: the census recorder rebinds the module attributes.
On a CPU or the meta device the ops take their torch path; importing this module imports
neither torch nor the ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DTYPES = ("fp16", "bf16")
"""Activation dtypes the family serves (its ``Family.dtypes``)."""


_OPS: Any = None


def linear(x: Any, layer: Any, activation: str | None = None, *, residual: Any = None,
           alpha: float = 1.0) -> Any:
    """``activation(layer(x))`` with the family's ops; with ``residual``,
    ``residual + alpha * layer(x)`` in one call (no activation then: the op has none)."""
    ops = _OPS or _load_ops()
    if residual is not None:
        if activation is not None:
            raise ValueError(f"linear: a residual add after activation {activation!r} has no "
                             "fused op (gemm_residual takes none)")
        return ops.gemm_residual(x, layer.weight, layer.bias, residual, alpha)
    if activation is None:
        return ops.gemm(x, layer.weight, layer.bias)
    return ops.gemm_activation(x, layer.weight, layer.bias, activation)


def _load_ops() -> Any:
    """The ops module, imported on the first call (an import statement per call costs ~1 us
    of host time on a slow host); its attributes are still read per call."""
    global _OPS
    from oasr_gemm import ops

    _OPS = ops
    return ops


def linear_for(dtype: str, quantization: str) -> Callable[..., Any] | None:
    """:func:`linear` for a full-precision ``dtype`` the family serves, else None."""
    return linear if quantization == "none" and dtype in DTYPES else None
