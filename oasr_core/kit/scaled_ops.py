"""Op plumbing the W8A8 families share (int8 ``scaled_mm`` and fp8 ``scaled_mm_fp8``): how one
call shape resolves to a prepared launcher, and the pair of torch custom ops each family
registers (a GEMM with a high-precision output and one quantizing its output).

Both families' eager ops call ``_run(op, a, w, a_scale, w_scale, bias, out_dtype, out_scale,
out)``; the custom ops reach it through the caller's module at call time, so a test that
rebinds the module's ``_run`` is seen by the custom ops too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

MM_SCHEMA = ("(Tensor a, Tensor w, Tensor a_scale, Tensor w_scale, Tensor? bias, "
             "ScalarType out_dtype) -> Tensor")
QUANT_SCHEMA = ("(Tensor a, Tensor w, Tensor a_scale, Tensor w_scale, Tensor? out_scale_tensor, "
                "float out_scale, Tensor? bias) -> Tensor")


def plan_shape(serving: Any, key: tuple, *, out_names: Mapping[Any, str], op_quant: str,
               select_mm: Callable[..., Any], select_quant: Callable[..., Any]) -> Any:
    """Resolve one call shape ``key = (op, out_dtype, N, K, M, device)``: select a config
    (``select_quant`` for ``op_quant``, else ``select_mm``), bind its launcher and prepare it
    for ``out_names[out_dtype]`` (the kit's :class:`~oasr_core.kit.serving.Serving`)."""
    from oasr_core.runtime import device_arch_of

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
                      label: str) -> bool:
    """Whether a quantized linear of width ``(N, K)`` at ``M`` rows on CUDA ``device`` runs in
    its activation dtype (``F.linear``): the tiers name ``Sentinel.UNQUANTIZED`` there (a build
    measured the layer faster unquantized, the activation quantizer included), or
    ``untuned_high(selection)`` says so for a shape no entry covers (a family's untuned
    route; None: an untuned shape stays quantized). Memoised per epoch in ``serving``'s plans
    (one dict lookup after the first call); a selection that fails keeps the layer quantized,
    with one warning naming ``label``."""
    from oasr_core.kit.launching import on_device
    from oasr_core.runtime import device_arch_of
    from oasr_core.types import Sentinel

    key = (ROUTE, n, k, m, device)
    route = serving.plans.table.get(key)
    if route is None:
        import oasr_core

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


def linear_in_dtype(x: Any, layer: Any) -> Any:
    """``layer(x)`` as ``F.linear`` in ``x``'s dtype: a quantized linear's high-precision path
    where its route says unquantized (the layer's quantized weight is not needed, nor
    checked for staleness)."""
    import torch

    weight = layer.weight if layer.weight.dtype == x.dtype else layer.weight.to(x.dtype)
    bias = layer.bias
    if bias is not None and bias.dtype != x.dtype:
        bias = bias.to(x.dtype)
    return torch.nn.functional.linear(x, weight, bias)


def register_custom_ops(module: Any, *, mm_name: str, quant_name: str, op_mm: str,
                        op_quant: str, quant_dtype: Any) -> tuple[Any, Any]:
    """Register ``torch.ops.oasr.<mm_name>`` and ``torch.ops.oasr.<quant_name>`` (with fake
    implementations, so they trace under ``torch.compile``) over ``module._run``; the quant
    op's output is ``quant_dtype``. Returns both custom ops."""
    import torch

    @torch.library.custom_op(f"oasr::{mm_name}", mutates_args=(), schema=MM_SCHEMA)
    def mm_op(a, w, a_scale, w_scale, bias, out_dtype):
        return module._run(op_mm, a, w, a_scale, w_scale, bias, out_dtype, None, None)

    @mm_op.register_fake
    def _mm_fake(a, w, a_scale, w_scale, bias, out_dtype):
        return a.new_empty((*a.shape[:-1], w.shape[0]), dtype=out_dtype)

    @torch.library.custom_op(f"oasr::{quant_name}", mutates_args=(), schema=QUANT_SCHEMA)
    def quant_op(a, w, a_scale, w_scale, out_scale_tensor, out_scale, bias):
        scale = out_scale_tensor if out_scale_tensor is not None else out_scale
        return module._run(op_quant, a, w, a_scale, w_scale, bias, quant_dtype, scale, None)

    @quant_op.register_fake
    def _quant_fake(a, w, a_scale, w_scale, out_scale_tensor, out_scale, bias):
        return a.new_empty((*a.shape[:-1], w.shape[0]), dtype=quant_dtype)

    return mm_op, quant_op
