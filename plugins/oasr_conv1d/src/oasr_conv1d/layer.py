"""The conv1d family's answer to ``oasr_layer("Conv1d", dtype, "none")``.

:func:`layer_for` returns :func:`conv_layer` for fp16/bf16 full-precision models:
``conv_layer(x, layer, activation=None)`` computes ``activation(layer(x))`` on channels-last
``x (B, T, Cin)`` with the family's ops, reached through :mod:`oasr_conv1d.ops` at call time
(the census recorder rebinds that module's attributes). The model folds a following BatchNorm
into the layer's weight and bias before calling. The weight is packed into the kernels'
layout at its first eager call and cached on the weight, keyed by its ``data_ptr`` and
``_version`` (:mod:`oasr_conv1d.weights`): warm up eagerly before capturing a CUDA graph. On
the ``meta`` device (census probes) nothing is packed; the op's torch path computes shapes.

:func:`conv_forward` (``conv_layer.channels_first``, the protocol's form for a routed module:
:func:`oasr_core.route`) is ``layer(x)`` on torch's own layout ``x (B, Cin, T)``: where that
is a transposed channels-last CUDA tensor the op serves the channels-last data and the
output is the transposed view of the op's; anything else (another layout, whose copy would
cost what a kernel saves; a CPU tensor, counted ``torch:cpu``) is the module's own forward.

Both keep a per-layer plan in the family's ``Serving.layers`` memo (keyed by the layer's
``id``, the activation, or :data:`CHANNELS_FIRST`, and the input's shape and dtype, filled
after the layer's first CUDA call of that shape in an epoch). Where the op's plan for that
call is torch (the tiers chose torch, or a launcher refused), the layer's grouping is one no
kernel takes (neither dense nor depthwise), or the routed input is not channels-last data, the
plan is the torch path's counter key (``torch:selected``, ``torch:grouped``,
``torch:noncontiguous``) and a repeated call, counted under it, is ``F.conv1d`` on the layer's
registered weight and bias, read from
its parameter dict, with the layer's own stride, padding, dilation and groups: exactly what
the torch model calls (``nn.Conv1d.forward``; for :func:`conv_layer`, the op's torch path:
transpose, conv, activation, transpose back, contiguous as the op's output always is), with
no op key or checks, and for a routed module no copy or allocation of its own. Only a layer
whose ``weight`` and ``bias`` are both in its parameter dict and whose ``padding_mode`` is
``zeros`` gets such a plan; the rest always go through the op. The memo holds ids, not
layers: a new layer that reuses a dead one's id inherits a plan that is right for any
operands (torch's function, or the op with all its checks), at worst torch where a kernel
would serve, until the epoch ends.
"""

from __future__ import annotations

from typing import Any

DTYPES = ("fp16", "bf16")
CHANNELS_FIRST = "channels-first"
"""The second element of a routed module's layer key (where a :func:`conv_layer` key holds
its activation), so the two forms of one layer never share a plan."""

_OPS: Any = None


def conv_layer(x: Any, layer: Any, activation: str | None = None) -> Any:
    """``activation(layer(x))`` channels-last, for an ``nn.Conv1d`` ``layer``."""
    ops = _OPS or _load_ops()
    if ops.conv1d_activation is _OWN[0] and not _compiling():
        key = (id(layer), activation, x.shape, x.dtype)
        plan = _LAYERS.table.get(key)
        if plan is not None and plan is not _OP:  # torch, counted under its reason
            p = layer._parameters
            _FALLBACKS[plan] += 1
            y = _conv1d(x.transpose(1, 2), p["weight"], p["bias"], layer.stride,
                        layer.padding, layer.dilation, layer.groups)
            if activation is not None:
                y = _activate(y, activation)
            return y.transpose(1, 2).contiguous()
        if plan is None:
            out = _op(ops, x, layer, activation)
            if x.is_cuda:  # a CPU call keeps no plan: the layer may run on a GPU later
                _store(key, layer, _op_key(ops, x, layer, activation))
            return out
    return _op(ops, x, layer, activation)


def conv_forward(layer: Any, x: Any) -> Any:
    """``layer(x)`` on torch's layout ``x (B, Cin, T)``: a routed ``nn.Conv1d``'s forward."""
    ops = _OPS or _load_ops()
    if ops.conv1d_activation is _OWN[0] and not _compiling():
        key = (id(layer), CHANNELS_FIRST, x.shape, x.dtype)
        plan = _LAYERS.table.get(key)
        if plan is not None and plan is not _OP:  # torch, counted under its reason
            p = layer._parameters
            _FALLBACKS[plan] += 1
            return _conv1d(x, p["weight"], p["bias"], layer.stride, layer.padding,
                           layer.dilation, layer.groups)
        if plan is None:
            xt = _channels_last(x)
            if xt is None:
                if x.is_cuda:  # a layout the kernels do not take: torch from now on
                    _store(key, layer, None, "torch:noncontiguous")
                return type(layer).forward(layer, x)
            out = _op(ops, xt, layer, None)
            _store(key, layer, _op_key(ops, xt, layer, None))
            return out.transpose(1, 2)
    xt = _channels_last(x)
    if xt is None:
        return type(layer).forward(layer, x)
    return _op(ops, xt, layer, None).transpose(1, 2)


def _store(key: tuple, layer: Any, op_key: tuple | None, reason: str | None = None) -> None:
    """Memoise the plan of the CUDA layer call ``key`` that just ran: for a :func:`_plain`
    layer, the torch path's counter key (``torch:<reason>``) where torch serves it from now
    on (``reason`` given; a grouping no kernel takes; the op's plan under ``op_key``, the
    call's, is torch); else ``OP``."""
    if reason is None:
        if weights.kind_of(layer.in_channels, layer.out_channels, layer.groups) is None:
            reason = "torch:grouped"
        elif op_key is not None and _PLANS.table.get(op_key) is _TORCH:
            reason = "torch:selected"
    plan = reason if reason is not None and _plain(layer) else _OP
    _LAYERS.store(key, plan, _SERVING.bind())


conv_layer.channels_first = conv_forward  # type: ignore[attr-defined]


def torch_only(layer: Any, dtype: str) -> bool:
    """Whether every call of the routed ``nn.Conv1d`` ``layer`` is torch's whatever its input:
    its grouping is one no kernel takes (neither dense nor depthwise: wav2vec2's positional
    conv). Only a :func:`_plain` layer; :func:`oasr_core.route` then leaves it its own
    forward (``conv_layer.torch_only``). Anything else depends on the call (its device, the
    input's layout, the heuristic's gate by length), so :func:`conv_forward`'s per-layer plan
    decides (a CPU call is the module's own forward after one check)."""
    from oasr_conv1d.weights import kind_of

    return _plain(layer) and kind_of(layer.in_channels, layer.out_channels,
                                     layer.groups) is None


conv_layer.torch_only = torch_only  # type: ignore[attr-defined]


def _channels_last(x: Any) -> Any:
    """``x (B, C, T)``'s channels-last ``(B, T, C)`` view where it is a contiguous CUDA tensor
    (how speech encoders call their convolutions), else None: the module's forward serves it
    (a copy would cost what the kernel saves; the op serves other devices from torch, which
    would copy its output back to channels-last: such a call is counted as ``torch:cpu``)."""
    if not x.is_cuda:
        _FALLBACKS["torch:cpu"] += 1
        return None
    if x.dim() != 3:
        return None
    xt = x.transpose(1, 2)
    return xt if xt.is_contiguous() else None


def _op(ops: Any, x: Any, layer: Any, activation: str | None) -> Any:
    """The layer through the family's op (channels-last ``x``); a padding mode other than
    zeros is the module's own (torch computes it)."""
    padding = layer.padding if isinstance(layer.padding, str) else layer.padding[0]
    if getattr(layer, "padding_mode", "zeros") != "zeros":
        y = _activate(layer(x.transpose(1, 2)), activation)
        return y.transpose(1, 2).contiguous()
    return ops.conv1d_activation(x, layer.weight, layer.bias, activation,
                                 stride=layer.stride[0], padding=padding,
                                 dilation=layer.dilation[0], groups=layer.groups)


def _plain(layer: Any) -> bool:
    """Whether ``layer`` may get a torch plan: its ``weight`` and ``bias`` are both in its
    parameter dict (not a parametrized or non-module layer) and it pads with zeros."""
    params = getattr(layer, "_parameters", None)
    return (isinstance(params, dict) and "bias" in params
            and params.get("weight") is layer.weight
            and getattr(layer, "padding_mode", "zeros") == "zeros")


def _op_key(ops: Any, x: Any, layer: Any, activation: str | None) -> tuple | None:
    """The op's plan key of the call :func:`_op` just made (None: one the op keys none for)."""
    return ops._key(ops.op_name(activation), x, layer.weight, layer.stride, layer.padding,
                    layer.dilation, layer.groups)


def _load_ops() -> Any:
    """The ops module, imported on the first call (an import statement per call costs ~1 us
    of host time on a slow host); its attributes are still read per call. Binds the names the
    per-layer path reads."""
    global _OPS, _OWN, _SERVING, _LAYERS, _PLANS, _FALLBACKS, _TORCH, _OP, _compiling, \
        _conv1d, _activate, weights
    import torch
    import torch.nn.functional as F
    from oasr_core.kit import TORCH
    from oasr_core.kit.serving import OP

    from oasr_conv1d import ops, weights
    from oasr_conv1d.numerics import apply_activation

    # In a tuple: a census recorder rebinds every module global that is the op it wraps
    # (this module's too), not the items of a tuple, so ``ops.conv1d_activation is _OWN[0]``
    # tells it.
    # The op itself even when first loaded while a recorder has rebound it (its wrapper
    # names the op as ``__wrapped__``).
    _OWN = (getattr(ops.conv1d_activation, "__wrapped__", ops.conv1d_activation),)
    _SERVING, _LAYERS, _FALLBACKS = ops.SERVING, ops.SERVING.layers, ops.SERVING.fallbacks
    _PLANS, _TORCH, _OP = ops.SERVING.plans, TORCH, OP
    _compiling, _conv1d, _activate = torch.compiler.is_compiling, F.conv1d, apply_activation
    _OPS = ops
    return ops


def layer_for(kind: str, dtype: str, quantization: str) -> Any:
    """``oasr_layer``'s answer: :func:`conv_layer` for ``Conv1d`` at fp16/bf16, ``none``."""
    if kind != "Conv1d" or quantization != "none" or dtype not in DTYPES:
        return None
    return conv_layer
