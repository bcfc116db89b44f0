"""Op plumbing the W8A8 families share (int8 ``scaled_mm`` and fp8 ``scaled_mm_fp8``): how one
call shape resolves to a prepared launcher (:func:`plan_shape`), the quantized linear's route
(:func:`unquantized_route`), its unquantized path (:func:`linear_in_dtype`) and the custom ops'
schemas. The ops themselves are :mod:`oasr_scaled_mm.w8a8.ops`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import oasr_core
from oasr_core.errors import OasrError
from oasr_core.kit.serving import OP
from oasr_core.layers import activate, dense, served_linear, takes_residual
from oasr_core.runtime import device_arch_of, get_runtime
from oasr_core.types import Sentinel

MM_SCHEMA = ("(Tensor a, Tensor w, Tensor a_scale, Tensor w_scale, Tensor? bias, "
             "ScalarType out_dtype) -> Tensor")
QUANT_SCHEMA = ("(Tensor a, Tensor w, Tensor a_scale, Tensor w_scale, Tensor? out_scale_tensor, "
                "float out_scale, Tensor? bias) -> Tensor")


def plan_shape(serving: Any, key: tuple, *, out_names: Mapping[Any, str], op_quant: str,
               select_mm: Callable[..., Any], select_quant: Callable[..., Any]) -> Any:
    """Resolve one call shape ``key = (op, out_dtype, N, K, M, device)``: select a config
    (``select_quant`` for ``op_quant``, else ``select_mm``), bind its launcher and prepare it
    for ``out_names[out_dtype]`` (the kit's :class:`~oasr_core.kit.serving.Serving`)."""
    op, out_dtype, n, k, m, dev = key
    arch = device_arch_of(dev)
    select = select_quant if op == op_quant else select_mm
    return serving.plan(key, arch, select=lambda: select(n, k, m, arch),
                        kernel_key=lambda config: (op, config.id),
                        prepare=lambda kernel: kernel.prepare(out_names[out_dtype], m, n, k),
                        what=f"op={op} N={n} K={k}")


ROUTE = "route"
"""The first element of a route's memo key in a family's plans (beside its call shapes)."""


def unquantized_route(serving: Any, family: str, op: str, dtype: str, n: int, k: int, m: int,
                      device: int, *, untuned_high: Callable[[Any], bool] | None = None,
                      label: str, variant: Any = None) -> bool:
    """Whether a quantized linear of width ``(N, K)`` at ``M`` rows on CUDA ``device`` runs in
    its activation dtype (``F.linear``): the tiers name ``Sentinel.UNQUANTIZED`` there (a build
    measured the layer faster unquantized, the activation quantizer included), or
    ``untuned_high(selection)`` says so for a shape no entry covers (a family's untuned
    route; None: an untuned shape stays quantized). Memoised per epoch in ``serving``'s plans
    (one dict lookup after the first call); a selection that fails keeps the layer quantized,
    with one warning naming ``label``. ``variant`` tells apart routes ``untuned_high`` answers
    differently at one shape (fp8: an activation that arrives quantized by its layer norm)."""
    from oasr_core.kit.ops import on_device

    key = (ROUTE, n, k, m, device, variant)
    route = serving.plans.table.get(key)
    if route is None:
        arch = on_device(device, lambda: device_arch_of(device))
        try:
            sel = oasr_core.select(family, op, dtype, (n, k), m, arch)
        except Exception as exc:  # noqa: BLE001 - a broken tier never takes the layer down
            serving.warn_once(f"route:{n}:{k}", f"{label}: selection failed for N={n} K={k} "
                              f"({exc}); the layer runs quantized")
            sel = None
        high = sel is not None and (sel.choice is Sentinel.UNQUANTIZED or (
            untuned_high is not None and untuned_high(sel)))
        route = serving.plans.store(key, high, serving.bind())
    return route


_DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16"}
FULL_PRECISION = "full-precision linear"
"""The first element of the memo key of :func:`linear_in_dtype`'s resolved linear."""


def linear_in_dtype(x: Any, layer: Any, activation: str | None = None, *,
                    serving: Any = None, residual: Any = None, alpha: float = 1.0) -> Any:
    """``activation(layer(x))`` in ``x``'s dtype, or with ``residual`` ``residual + alpha *
    layer(x)`` (no activation then): a quantized linear's high-precision path where its route
    says unquantized (the layer's quantized weight is not needed, nor checked for staleness).

    With ``serving`` (the family's :class:`~oasr_core.kit.serving.Serving`), the layer runs
    through the linear an installed plugin serves for that dtype unquantized
    (``oasr_linear(dtype, "none")``: the gemm family's ops, the activation or the residual add
    fused where that linear fuses them), so a quantized model is as fast where it runs
    unquantized as the unquantized model is with oasr; resolved once per epoch (memoised in
    ``serving``'s plans). Without such a plugin, or for a layer whose weight is not in ``x``'s
    dtype, it is ``F.linear`` and the activation or the add in torch, as the reference models
    compute them. ``x`` may be a :class:`~oasr_core.layers.NormedRows` (its dense rows).
    """
    if residual is not None and activation is not None:
        raise ValueError(f"linear_in_dtype: a residual add after activation {activation!r} has "
                         "no fused form")
    x = dense(x)
    if serving is not None and layer.weight.dtype == x.dtype:
        found = _full_precision_linear(serving, x.dtype)
        if found is not None:
            served, fuses_residual = found
            if residual is None:
                return served(x, layer) if activation is None else served(x, layer, activation)
            if fuses_residual:
                return served(x, layer, residual=residual, alpha=alpha)
            return add_residual(served(x, layer), residual, alpha)
    import torch

    weight = layer.weight if layer.weight.dtype == x.dtype else layer.weight.to(x.dtype)
    bias = layer.bias
    if bias is not None and bias.dtype != x.dtype:
        bias = bias.to(x.dtype)
    y = torch.nn.functional.linear(x, weight, bias)
    return activate(y, activation) if residual is None else add_residual(y, residual, alpha)


def layer_linear(module: str, kind: str) -> Callable[..., Any]:
    """A W8A8 family's answer to ``oasr_linear`` for its scheme: ``linear(x, layer,
    activation=None, *, residual=None, alpha=1.0)`` calling ``<module>.quantized_linear`` with
    the same arguments (``module`` imported on the first call and the function looked up on
    every call, so a recorder or test that rebinds it is seen; importing the family's linear
    module imports neither torch nor the ops). ``kind`` names the GEMM in the docstring.

    A call without ``residual`` has a per-layer plan (the family's ``Serving.layers`` memo, the
    ``SERVING`` of the package's ``ops``, keyed by the layer's ``id``, the activation and the
    input's shape, dtype and type, filled after the layer's first call of that shape in an
    epoch by ``<module>.layer_plan``): where the layer runs unquantized, a repeated call goes
    straight to the unquantized linear (the gemm family's, with its own per-layer plan, or
    ``F.linear``), with no route key, weight checks or lookups of its own; otherwise it calls
    ``quantized_linear``. A call while compiling goes through ``quantized_linear`` as always.
    """
    import importlib

    loaded: list[Any] = []

    def load() -> list[Any]:
        import torch

        quantize = importlib.import_module(module)
        serving = importlib.import_module(module.rsplit(".", 1)[0] + ".ops").SERVING
        # The function itself, in a list: the identity check below tells a rebound one.
        loaded.extend((quantize, quantize.quantized_linear, serving.layers,
                       torch.compiler.is_compiling))
        return loaded

    def linear(x: Any, layer: Any, activation: str | None = None, *, residual: Any = None,
               alpha: float = 1.0) -> Any:
        quantize, own, layers, compiling = loaded or load()
        if residual is None and quantize.quantized_linear is own and not compiling():
            key = (id(layer), activation, x.shape, x.dtype, type(x))
            plan = layers.table.get(key)
            if plan is not None and plan is not OP:
                return plan(x, layer, activation)
            out = own(x, layer, activation)
            if plan is None:
                quantize.layer_plan(key, x, layer)
            return out
        return quantize.quantized_linear(x, layer, activation, residual=residual, alpha=alpha)

    linear.__doc__ = (f"``activation(layer(x))``, the layer a W8A8 {kind} GEMM (its activation "
                      "in torch), or the unquantized linear with the activation fused where "
                      "the table says unquantized; with ``residual``, ``residual + alpha * "
                      "layer(x)`` (fused where the unquantized linear fuses it).")
    return linear


def add_residual(y: Any, residual: Any, alpha: float) -> Any:
    """``residual + y`` (``alpha`` 1) or ``residual + alpha * y``, as the reference models add
    a linear's output to the residual stream when nothing fuses it."""
    return residual + y if alpha == 1.0 else residual + alpha * y


def full_precision_linear(serving: Any, dtype: Any) -> Any:
    """The plugins' unquantized linear for torch ``dtype`` (None: none), as
    :func:`linear_in_dtype` resolves it (memoised per epoch in ``serving``'s plans)."""
    found = _full_precision_linear(serving, dtype)
    return None if found is None else found[0]


def _full_precision_linear(serving: Any, dtype: Any) -> tuple[Any, bool] | None:
    """``(linear, takes a residual)`` of the plugins' unquantized linear for torch ``dtype``
    (None: none, or a dtype without a name), memoised per epoch; a failing hook is warned
    about once and leaves torch."""
    key = (FULL_PRECISION, dtype)
    table = serving.plans.table
    if key in table:
        return table[key]
    name = _DTYPE_NAMES.get(str(dtype).removeprefix("torch."))
    linear = None
    if name is not None:
        try:
            linear = served_linear(get_runtime().pm, dtype=name)
        except OasrError as exc:
            serving.warn_once(f"full-precision:{name}", f"{serving.label}: no unquantized "
                              f"linear for {name} ({exc}); F.linear serves the layers the "
                              "table runs unquantized")
    if linear is not None:
        linear = (linear, takes_residual(linear))
    return serving.plans.store(key, linear, serving.bind())
