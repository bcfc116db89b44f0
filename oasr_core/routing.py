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

A layer whose answer is torch at every call is not routed in effect: an answer may carry
``torch_only(layer, dtype)`` (:data:`oasr_core.layers.Linear`), and where it says so the
module keeps its own forward (no instance attribute, no oasr frame on its path: a call costs
exactly what torch's module costs). The gemm family's linear says so for a width no tier can
serve a kernel at, at any M (no user or system entry, the untuned selector torch, the
cost-model tier silent there: :func:`oasr_core.selection.torch_at_every_m`; in a process
without a CUDA device, every width), or one the kernels never take; the conv1d family's for
a grouping no kernel takes. Every other routed layer keeps its answer's forward and its per-M
(per-call-shape) plan. Such a layer is still routed (counted, restored by :func:`unroute`),
and it follows the tiers: every reload of the runtime (new tier files, a build, an autotune
session's start and end) plans each routed layer again (:func:`replan`), binding the
answer's forward where a tier now has something to serve. :func:`through_ops` sends every
routed layer through its answer for a block (a tally of which tier serves each call,
``oasr tune bench``'s summary, where such a layer still shows as served by torch).
The decision reads the current CUDA device's arch (a layer later run on a device of
another arch is, at worst, torch's where a kernel might have served) and is made for the
``dtype`` given to :func:`route`.

An ``nn.LSTM`` / ``nn.RNN`` / ``nn.GRU`` is routed to the plugins' answer for its class name
(``oasr_layer``; :data:`RECURRENT_KINDS`, all under the ``lstm`` switch of :func:`route`),
which carries the module's forward (``answer.forward``, ``(layer, input, hx=None)``, bound as
the module's forward): a recurrent family steps an input of one time step (a transducer's
prediction network while decoding) through its op and runs every other call (a sequence, a
packed or bidirectional one, training) with the module's own forward; its ``torch_only``
keeps the module's own forward outright where no tier serves any of its layers.

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

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from oasr_core.census.workloads import served_layers, served_linear
from oasr_core.errors import ConfigurationError
from oasr_core.runtime import ReloadHook, get_runtime

_ROUTED = "_oasr_routed"
_PLAN = "_oasr_plan"
"""A planned layer's :class:`_Planned` (on the module's ``__dict__``)."""


class _Planned:
    """How a routed layer is served: ``forward`` (the answer's, bound to the module) unless
    ``torch_only(module, dtype)`` says every call is torch's, then the module's own forward.
    """

    __slots__ = ("forward", "torch_only", "dtype")

    def __init__(self, forward: Callable[..., Any], torch_only: Callable[[Any, str], bool],
                 dtype: str) -> None:
        self.forward, self.torch_only, self.dtype = forward, torch_only, dtype


_PLANNED: weakref.WeakSet = weakref.WeakSet()
"""The routed layers whose forward follows the tiers (re-planned on every reload)."""
_LOCK = threading.Lock()
_THROUGH_OPS = [0]
"""How many :func:`through_ops` blocks are open (while any is, no layer is left to torch)."""


def _plan(module: Any) -> None:
    """Bind ``module``'s forward for the tiers in force: its own (no instance attribute)
    where its answer is torch at every M, else the answer's."""
    planned = module.__dict__.get(_PLAN)
    if planned is None:
        return
    if not _THROUGH_OPS[0] and planned.torch_only(module, planned.dtype):
        module.__dict__.pop("forward", None)
    else:
        module.forward = planned.forward


def _bind(module: Any, forward: Callable[..., Any],
          torch_only: Callable[[Any, str], bool] | None, dtype: str) -> None:
    """Route ``module`` to ``forward``; with the answer's ``torch_only``, planned (kept in
    step with the tiers, its own forward where the answer is torch at every call)."""
    with _LOCK:
        module.__dict__.pop(_PLAN, None)
        _PLANNED.discard(module)
        if torch_only is None:
            module.forward = forward
            return
        module.__dict__[_PLAN] = _Planned(forward, torch_only, dtype)
        _PLANNED.add(module)
        _plan(module)


def replan() -> int:
    """Plan every routed layer again for the tiers in force (a reload does this itself);
    returns how many run their module's own forward now."""
    with _LOCK:
        modules = list(_PLANNED)
        for module in modules:
            _plan(module)
        return sum("forward" not in m.__dict__ for m in modules)


_RELOADS = ReloadHook(lambda _epoch: replan())
"""Re-plans the routed layers after every reload of the process runtime (the tiers, an
autotune session's start and end)."""


def own_forwards(model: Any) -> int:
    """How many routed layers of ``model`` run their module's own forward now (their answer
    torch at every call under the tiers in force)."""
    return sum(_PLAN in m.__dict__ and "forward" not in m.__dict__ for m in model.modules())


@contextlib.contextmanager
def through_ops() -> Iterator[None]:
    """While entered, every routed layer runs its answer's forward, none its own (each call
    reaches the family's op, which serves torch where the tiers say so, counted): what a
    tally of the calls each tier serves runs under (``oasr tune bench``'s summary). The
    layers are planned again on exit."""
    with _LOCK:
        _THROUGH_OPS[0] += 1
    replan()
    try:
        yield
    finally:
        with _LOCK:
            _THROUGH_OPS[0] -= 1
        replan()


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


RECURRENT_KINDS = ("LSTM", "RNN", "GRU")
"""The recurrent layers :func:`route` sends to the plugins' ``oasr_layer`` answer of their
class name (``nn.LSTM``, ``nn.RNN``, ``nn.GRU``): its ``lstm`` switch routes them all."""


def route(model: Any, *, dtype: str = "fp16", quantization: str = "none",
          linear: bool = True, conv1d: bool = True, lstm: bool = True,
          pm: Any = None) -> dict[str, int]:
    """Send ``model``'s ``nn.Linear``, ``nn.Conv1d`` and recurrent (``nn.LSTM``, ``nn.RNN``,
    ``nn.GRU``) layers through oasr's ops.

    ``dtype`` is the activation dtype the model runs in (``fp16``, ``bf16``);
    ``quantization`` a scheme a W8A8 family serves (``"int8_w8a8"``, ``"fp8_w8a8"``) or
    ``"none"``. Returns how many layers of each kind were routed (``{"Linear": n,
    "Conv1d": m}``; ``"LSTM"`` / ``"RNN"`` / ``"GRU"`` when the model holds such a layer a
    plugin serves (``lstm`` switches every recurrent kind, :data:`RECURRENT_KINDS`); and
    with a scheme ``"LayerNorm"``: the norms before quantized linears, see the module
    docstring). A scheme no installed plugin serves raises
    :class:`~oasr_core.errors.ConfigurationError`; a kind no plugin serves is left to torch.
    Routing twice re-routes (the latest answer serves; a norm routed before and not now gets
    its own forward back). A routed layer whose answer is torch at every call under the tiers
    in force keeps its module's own forward until a reload says otherwise (module
    docstring); it is counted like any routed layer.
    """
    from torch import nn

    pm = pm if pm is not None else get_runtime().pm
    _RELOADS.bind()
    lin = served_linear(pm, dtype=dtype, quantization=quantization) if linear else None
    if linear and lin is None:
        raise ConfigurationError(f"route: no installed plugin serves {dtype} linear layers "
                                 "(hook oasr_linear); install a GEMM family plugin")
    conv = served_layers(pm, dtype=dtype, quantization=quantization,
                         kinds=("Conv1d",)).get("Conv1d") if conv1d else None
    served = served_layers(pm, dtype=dtype, quantization=quantization,
                           kinds=RECURRENT_KINDS) if lstm else {}
    recurrent = [(kind, getattr(nn, kind), answer) for kind, answer in served.items()
                 if getattr(answer, "forward", None) is not None]
    counts = {"Linear": 0, "Conv1d": 0}
    norms = _norms_to_route(model, pm, dtype, quantization) if lin is not None else {}
    if quantization != "none":
        counts["LayerNorm"] = 0
    for module in model.modules():
        if lin is not None and isinstance(module, nn.Linear):
            bound = getattr(lin, "forward", None)
            _bind(module, functools.partial(bound, module) if bound
                  else functools.partial(_linear_forward, lin, module),
                  getattr(lin, "torch_only", None), dtype)
            counts["Linear"] += 1
        elif conv is not None and isinstance(module, nn.Conv1d) and \
                getattr(module, "padding_mode", "zeros") == "zeros" and \
                not isinstance(module.padding, str):
            channels_first = getattr(conv, "channels_first", None)
            _bind(module, functools.partial(channels_first, module) if channels_first
                  else functools.partial(_conv_forward, conv, module),
                  getattr(conv, "torch_only", None), dtype)
            counts["Conv1d"] += 1
        elif (found := next(((kind, answer) for kind, cls, answer in recurrent
                             if isinstance(module, cls)), None)) is not None:
            kind, answer = found
            _bind(module, functools.partial(answer.forward, module),
                  getattr(answer, "torch_only", None), dtype)
            counts[kind] = counts.get(kind, 0) + 1
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
            with _LOCK:
                module.__dict__.pop(_PLAN, None)
                _PLANNED.discard(module)
                module.__dict__.pop("forward", None)
            object.__delattr__(module, _ROUTED)
            count += 1
    return count
