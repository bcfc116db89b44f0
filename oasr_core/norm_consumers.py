"""Which ``nn.LayerNorm`` layers of a model hand their output to given linears only:
:func:`norms_feeding_only`.

A W8A8 family serves a layer norm whose output only its quantized linears read by deferring it
(:class:`oasr_core.layers.NormedRows`: one fused norm-and-quantize pass shared by the linears
after it). In a model oasr did not write, :func:`oasr_core.route` must find such norms without
changing the model's code, and must never hand the deferred form to anything else (a residual
add, attention, an unquantized layer, the model's output): those need the tensor.

The model is read with ``torch.fx`` symbolic tracing, ``nn.Linear`` and ``nn.LayerNorm`` kept
as leaf calls: a norm qualifies when every call of it in the traced graph takes one argument
and every user of its output is a call of one of the given linears with that output as its
only argument (at least one), or reads its sizes (``h.shape``, ``h.size()``:
:data:`METADATA`). A module whose forward does not trace (data-dependent control flow, a
library's own tracing limits) is not guessed at: its children are traced instead, and a norm
that appears in no traced graph stays torch's. Tracing runs no arithmetic and needs no inputs; any
attribute a forward sets on its module while traced is put back afterwards.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any


def plain_layer_norm(module: Any) -> bool:
    """Whether ``module`` is an ``nn.LayerNorm`` running torch's own forward (a subclass that
    overrides it, such as an fp32 norm computing in another dtype, is not)."""
    from torch import nn

    return isinstance(module, nn.LayerNorm) and type(module).forward is nn.LayerNorm.forward


def norms_feeding_only(model: Any, linears: Collection[Any]) -> list[Any]:
    """The plain ``nn.LayerNorm`` modules of ``model`` (:func:`plain_layer_norm`) whose output
    is read only by modules of ``linears`` (``nn.Linear`` instances), as their sole input, in
    the traced forward (see the module docstring); in ``model.modules()`` order."""
    linear_ids = {id(m) for m in linears}
    verdict: dict[int, bool] = {}
    for root, graph in _traced(model):
        _judge(root, graph, linear_ids, verdict)
    return [m for m in model.modules() if verdict.get(id(m)) and plain_layer_norm(m)]


def _judge(root: Any, graph: Any, linear_ids: set[int], verdict: dict[int, bool]) -> None:
    """Fold one traced graph's evidence about each norm into ``verdict`` (a norm any graph
    shows read otherwise is refused for good)."""
    for node in graph.nodes:
        if node.op != "call_module":
            continue
        module = root.get_submodule(node.target)
        if not plain_layer_norm(module):
            continue
        users = list(node.users)
        linears = [u for u in users if u.op == "call_module" and u.args == (node,)
                   and not u.kwargs and id(root.get_submodule(u.target)) in linear_ids]
        ok = (len(node.args) == 1 and not node.kwargs and bool(linears) and all(
            user in linears or _reads_metadata(user, node) for user in users))
        verdict[id(module)] = verdict.get(id(module), True) and ok


METADATA = frozenset(("shape", "dtype", "device", "is_cuda", "size", "dim", "numel"))
"""What a deferred norm's output answers besides the linears' calls (the attributes and
methods of :class:`oasr_core.layers.NormedRows`): code that reads its sizes (``b, t, _ =
h.shape`` before the projections of an attention) still gets the same numbers."""


def _reads_metadata(user: Any, node: Any) -> bool:
    """Whether ``user`` only reads ``node``'s metadata: ``node.shape`` (``getattr``) or
    ``node.size(...)`` (a method call), for a name of :data:`METADATA`."""
    if user.kwargs or not user.args or user.args[0] is not node \
            or node in user.args[1:]:
        return False
    if user.op == "call_function" and user.target is getattr:
        return len(user.args) == 2 and user.args[1] in METADATA
    return user.op == "call_method" and user.target in METADATA


def _traced(module: Any) -> Iterator[tuple[Any, Any]]:
    """``(root, graph)`` for ``module`` traced whole, or else for each child, recursively."""
    graph = _trace(module)
    if graph is not None:
        yield module, graph
        return
    for child in module.children():
        yield from _traced(child)


def _trace(module: Any) -> Any:
    """``module``'s forward traced by ``torch.fx`` (linears and layer norms as leaf calls), or
    None where it does not trace or has nothing to find (a leaf module itself)."""
    from torch import fx, nn

    if isinstance(module, (nn.Linear, nn.LayerNorm)) or not any(
            isinstance(m, nn.LayerNorm) for m in module.modules()):
        return None

    class Tracer(fx.Tracer):
        def is_leaf_module(self, m: Any, qualname: str) -> bool:
            return isinstance(m, (nn.Linear, nn.LayerNorm)) or super().is_leaf_module(m, qualname)

    saved = [(m, dict(m.__dict__), dict(m._parameters), dict(m._buffers), dict(m._modules))
             for m in module.modules()]
    try:
        return Tracer().trace(module)
    except Exception:  # noqa: BLE001 - any code that does not trace is left to its children
        return None
    finally:
        for m, attributes, parameters, buffers, modules in saved:
            for own, before in ((m._parameters, parameters), (m._buffers, buffers),
                                (m._modules, modules), (m.__dict__, attributes)):
                own.clear()
                own.update(before)
