"""The gemm family's linear layer for the census's reference models (``oasr_linear``).

:func:`linear_for` is what the plugin answers to ``oasr_linear(dtype, quantization)``: for a
full-precision model of a dtype the family serves, :func:`linear` runs each linear layer as
:func:`oasr_gemm.ops.gemm`, a layer followed by an activation as one
:func:`oasr_gemm.ops.gemm_activation` call (the activation fused in the epilogue), and a layer
whose output is added to a residual as one :func:`oasr_gemm.ops.gemm_residual` call, and a
CTC head (``log_softmax=True``) as one :func:`oasr_gemm.ops.gemm_log_softmax` call, so the
census records them as ops ``gemm``, ``gemm_activation``, ``gemm_residual`` and
``gemm_log_softmax``. The ops are
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
           alpha: float = 1.0, log_softmax: bool = False) -> Any:
    """``activation(layer(x))`` with the family's ops; with ``residual``,
    ``residual + alpha * layer(x)`` in one call (no activation then: the op has none); with
    ``log_softmax``, ``log_softmax(layer(x), dim=-1)`` in one call (the CTC head; no
    activation or residual then).

    A plain or activated call has a per-layer plan (the family's ``Serving.layers`` memo,
    keyed by the layer's ``id``, the activation and the input's shape and dtype, filled after
    the layer's first call of that shape in an epoch): where the op's plan is torch, a repeated
    call is ``F.linear`` (and the activation) on the layer's registered weight and bias,
    read from its parameter dict, with no op key or operand checks, so it costs what the
    torch model's layer costs (whose ``self.weight`` goes through ``Module.__getattr__``);
    otherwise the op serves it. A call while compiling, or while a census recorder has
    rebound the op, goes through the op as always. The memo holds ids, not layers (it keeps
    no model alive): a new layer that reuses a dead one's id inherits a plan that is right
    for any operands (torch's function, or the op with all its checks), at worst torch where
    a kernel would serve, until the epoch ends.
    """
    ops = _OPS or _load_ops()
    if log_softmax:
        if activation is not None or residual is not None:
            raise ValueError("linear: log_softmax takes no activation or residual "
                             "(gemm_log_softmax is the linear then the log-softmax)")
        return ops.gemm_log_softmax(x, layer.weight, layer.bias)
    if residual is not None:
        if activation is not None:
            raise ValueError(f"linear: a residual add after activation {activation!r} has no "
                             "fused op (gemm_residual takes none)")
        return ops.gemm_residual(x, layer.weight, layer.bias, residual, alpha)
    if activation is None:
        return forward(layer, x)
    if ops.gemm_activation is _OWN[1] and not _compiling():
        key = (id(layer), activation, x.shape, x.dtype)
        plan = _LAYERS.table.get(key)
        if plan is _TORCH:
            p = layer._parameters
            w = p.get("weight")
            if w is not None and "bias" in p:
                _FALLBACKS[_SELECTED] += 1
                return _activate(_linear(x, w, p["bias"]), activation)
        elif plan is None:
            return _first(key, "gemm_activation", activation, x, layer)
        return _run("gemm_activation", activation, x, layer.weight, layer.bias, None)
    return ops.gemm_activation(x, layer.weight, layer.bias, activation)


def forward(layer: Any, x: Any) -> Any:
    """``layer(x)``: a routed ``nn.Linear``'s forward (``linear.forward``, which
    :func:`oasr_core.route` binds): :func:`linear` without an activation, its arguments in
    the order a bound forward takes them, so a routed call costs no extra Python frame
    (:func:`linear`'s plain branch is this function)."""
    ops = _OPS or _load_ops()
    if ops.gemm is _OWN[0] and not _compiling():
        key = (id(layer), None, x.shape, x.dtype)
        plan = _LAYERS.table.get(key)
        if plan is _TORCH:
            # Only a layer whose weight and bias are registered parameters gets a torch
            # plan (_first): read from its parameter dict, not through Module.__getattr__.
            p = layer._parameters
            w = p.get("weight")
            if w is not None and "bias" in p:
                _FALLBACKS[_SELECTED] += 1
                return _linear(x, w, p["bias"])
        elif plan is None:
            return _first(key, "gemm", None, x, layer)
        return _run("gemm", None, x, layer.weight, layer.bias, None)
    return ops.gemm(x, layer.weight, layer.bias)


linear.forward = forward  # type: ignore[attr-defined]


def torch_only(layer: Any, dtype: str) -> bool:
    """Whether every call of ``layer`` (an ``nn.Linear`` routed for activation ``dtype``,
    with no activation) is torch's under the tiers in force, whatever its M: its ``(N, K)``
    is one the kernels never take (not a multiple of 8), or no tier can answer a config for
    op ``gemm`` at it at any M (:func:`oasr_core.selection.torch_at_every_m`).
    :func:`oasr_core.route` then leaves the layer its own forward until the tiers change
    (``linear.torch_only``). A layer whose weight and bias are not both in its parameter
    dict (a parametrized weight) is never torch-only: it keeps the per-call path."""
    params = getattr(layer, "_parameters", None)
    w = params.get("weight") if isinstance(params, dict) else None
    if w is None or "bias" not in params or w.dim() != 2:
        return False
    n, k = w.shape
    if n % 8 or k % 8:
        return True
    from oasr_core.selection import torch_at_every_m

    return torch_at_every_m("gemm", "gemm", dtype, (int(n), int(k)))


linear.torch_only = torch_only  # type: ignore[attr-defined]


def _first(key: tuple, op: str, activation: str | None, x: Any, layer: Any) -> Any:
    """A layer call with no plan yet in this epoch: the op serves it, then the layer's plan
    follows the op's (``Serving.layer_plan``). A layer whose ``weight`` and ``bias`` are not
    both in its parameter dict (a parametrized or non-module layer) always calls the op."""
    w = layer.weight
    out = _run(op, activation, x, w, layer.bias, None)
    params = getattr(layer, "_parameters", None)
    plain = isinstance(params, dict) and params.get("weight") is w and "bias" in params
    _SERVING.layer_plan(key, _OPS._key(op, activation, x, w) if plain else None)
    return out


def _load_ops() -> Any:
    """The ops module, imported on the first call (an import statement per call costs ~1 us
    of host time on a slow host); its attributes are still read per call. Binds the names the
    per-layer path reads."""
    global _OPS, _OWN, _LAYERS, _SERVING, _FALLBACKS, _SELECTED, _TORCH, \
        _run, _compiling, _linear, _activate
    import torch.nn.functional as F
    from oasr_core.kit import TORCH

    from oasr_gemm import ops

    # In a tuple: a census recorder rebinds every module global that is the op it wraps
    # (this module's too), not the items of a tuple, so ``ops.gemm is _OWN[0]`` tells it.
    # The ops themselves even when first loaded while a recorder has rebound them (its
    # wrapper names the op as ``__wrapped__``).
    _OWN = tuple(getattr(op, "__wrapped__", op) for op in (ops.gemm, ops.gemm_activation))
    _SERVING, _LAYERS, _FALLBACKS = ops.SERVING, ops.SERVING.layers, ops.SERVING.fallbacks
    _SELECTED, _TORCH, _run, _compiling = ops._SELECTED, TORCH, ops._run, ops._compiling
    _linear, _activate = F.linear, ops.apply_activation
    _OPS = ops
    return ops


def linear_for(dtype: str, quantization: str) -> Callable[..., Any] | None:
    """:func:`linear` for a full-precision ``dtype`` the family serves, else None."""
    return linear if quantization == "none" and dtype in DTYPES else None
