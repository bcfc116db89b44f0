"""Route an uncompiled model's layers to oasr's ops: :func:`route`.

For a model that is not compiled (run eagerly, or captured in CUDA graphs by an engine), one
call sends each ``nn.Linear`` through the plugins' linear for the dtype and scheme
(``oasr_linear``: a family's GEMM op, or a W8A8 family's quantized linear) and each
``nn.Conv1d`` through the plugins' conv (``oasr_layer("Conv1d")``), with no change to the
model's code. The forward is replaced on each instance, so the state dict, the parameters
and ``model(...)`` are unchanged; :func:`unroute` puts the modules' own forwards back.

A ``Conv1d`` gets torch's channels-first ``[B, C, T]``; the conv kernels are channels-last.
Where the input is a transposed channels-last tensor (``conv(x.transpose(1, 2))``, how
speech encoders call their convolutions) the routed forward hands the op the channels-last
data with no copy and returns the transposed view of its output; any other input (a
contiguous ``[B, C, T]``, whose copy would cost what the kernel saves), padding modes other
than zeros, and grouped convs neither dense nor depthwise run the module's own forward. A
linear answer's ``forward`` form (``(layer, x)``, :data:`oasr_core.layers.Linear`) is bound
as a routed linear's forward in the same way. A conv answer that has the protocol's
channels-first form (``answer.channels_first``,
:data:`oasr_core.layers.Layer`) is bound as the forward itself, so the family decides this
per layer and call shape once, and a call torch serves is the module's own ``F.conv1d``.
Whatever the ops do not serve at run time (an untuned shape, a CPU tensor, autograd) takes
their torch path, so routing never makes a model slower than torch where the tiers say so.

With a quantization scheme, an ``nn.LayerNorm`` whose output only routed quantized linears
read, each as its sole input (found by tracing the model's code,
:func:`oasr_core.norm_consumers.norms_feeding_only`; a norm read by anything else, or in code
that does not trace, stays torch's), is routed to the scheme's answer for ``LayerNorm``
(``oasr_layer``): a W8A8 family defers the norm, so the linears after it share one fused
norm-and-quantize pass instead of quantizing its output each; where those linears run
unquantized at a shape, the norm is torch's layer norm from its next call. A norm in training
mode runs its own forward.
"""

from __future__ import annotations

import functools
from typing import Any

from oasr_core.census.workloads import served_layers, served_linear
from oasr_core.errors import ConfigurationError
from oasr_core.runtime import get_runtime

_ROUTED = "_oasr_routed"


def _linear_forward(linear: Any, layer: Any, x: Any) -> Any:
    return linear(x, layer)


def _norm_forward(norm: Any, layer: Any, x: Any) -> Any:
    if layer.training:
        return type(layer).forward(layer, x)
    return norm(x, layer)


def _conv_forward(conv: Any, layer: Any, x: Any) -> Any:
    xt = x.transpose(1, 2) if x.dim() == 3 else None
    if xt is None or not xt.is_contiguous():
        return type(layer).forward(layer, x)
    return conv(xt, layer).transpose(1, 2)


def route(model: Any, *, dtype: str = "fp16", quantization: str = "none",
          linear: bool = True, conv1d: bool = True, pm: Any = None) -> dict[str, int]:
    """Send ``model``'s ``nn.Linear`` and ``nn.Conv1d`` layers through oasr's ops.

    ``dtype`` is the activation dtype the model runs in (``fp16``, ``bf16``);
    ``quantization`` a scheme a W8A8 family serves (``"int8_w8a8"``, ``"fp8_w8a8"``) or
    ``"none"``. Returns how many layers of each kind were routed (``{"Linear": n,
    "Conv1d": m}``, and with a scheme ``"LayerNorm"``: the norms before quantized linears,
    see the module docstring). A scheme no installed plugin serves raises
    :class:`~oasr_core.errors.ConfigurationError`; a kind no plugin serves is left to torch.
    Routing twice re-routes (the latest answer serves; a norm routed before and not now gets
    its own forward back).
    """
    from torch import nn

    pm = pm if pm is not None else get_runtime().pm
    lin = served_linear(pm, dtype=dtype, quantization=quantization) if linear else None
    if linear and lin is None:
        raise ConfigurationError(f"route: no installed plugin serves {dtype} linear layers "
                                 "(hook oasr_linear); install a GEMM family plugin")
    conv = served_layers(pm, dtype=dtype, quantization=quantization,
                         kinds=("Conv1d",)).get("Conv1d") if conv1d else None
    counts = {"Linear": 0, "Conv1d": 0}
    norms = _norms_to_route(model, pm, dtype, quantization) if lin is not None else {}
    if quantization != "none":
        counts["LayerNorm"] = 0
    for module in model.modules():
        if lin is not None and isinstance(module, nn.Linear):
            bound = getattr(lin, "forward", None)
            module.forward = functools.partial(bound, module) if bound \
                else functools.partial(_linear_forward, lin, module)
            counts["Linear"] += 1
        elif conv is not None and isinstance(module, nn.Conv1d) and \
                getattr(module, "padding_mode", "zeros") == "zeros" and \
                not isinstance(module.padding, str):
            channels_first = getattr(conv, "channels_first", None)
            module.forward = functools.partial(channels_first, module) if channels_first \
                else functools.partial(_conv_forward, conv, module)
            counts["Conv1d"] += 1
        elif id(module) in norms:
            module.forward = functools.partial(_norm_forward, norms[id(module)], module)
            counts["LayerNorm"] += 1
        else:
            if isinstance(module, nn.LayerNorm) and getattr(module, _ROUTED, False):
                unroute(module)  # routed before, for linears that no longer take its form
            continue
        object.__setattr__(module, _ROUTED, True)
    return counts


def _norms_to_route(model: Any, pm: Any, dtype: str, quantization: str) -> dict[int, Any]:
    """``{id(norm): the scheme's LayerNorm answer}`` for the norms whose output only the
    model's ``nn.Linear`` layers (all routed to the scheme's linear) read; empty without a
    scheme or an answer."""
    from torch import nn

    if quantization == "none":
        return {}
    answer = served_layers(pm, dtype=dtype, quantization=quantization,
                           kinds=("LayerNorm",)).get("LayerNorm")
    if answer is None or not any(isinstance(m, nn.LayerNorm) for m in model.modules()):
        return {}
    from oasr_core.norm_consumers import norms_feeding_only

    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return {id(m): answer for m in norms_feeding_only(model, linears)}


def unroute(model: Any) -> int:
    """Give every routed module of ``model`` its own forward back; returns how many."""
    count = 0
    for module in model.modules():
        if getattr(module, _ROUTED, False):
            del module.forward
            object.__delattr__(module, _ROUTED)
            count += 1
    return count
