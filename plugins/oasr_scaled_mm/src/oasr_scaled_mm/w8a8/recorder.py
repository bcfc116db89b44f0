"""How the census sees a W8A8 format's GEMM calls: the family's recorder patches.

The patches observe the family's two ops, ``<package>.ops:<op>`` (the recorder rebinds every
module global bound to them; the quantized linear calls them through the module attribute).
Each call is recorded as the format's family, its op and dtype, dims ``(N, K)``,
``M = numel(A) / K``; calls whose operands are not the format's dtype are not the family's.
Importing this module imports neither torch nor the ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oasr_core.census.recorder import Call, RecorderPatch, dtype_name

from oasr_scaled_mm.w8a8.formats import Format


def call_of(fmt: Format, op: str, a: Any, w: Any) -> Call | None:
    """The :class:`Call` of ``a [..., K] x w [N, K]^T`` with operands of the format's dtype;
    None if not the family's."""
    if not hasattr(a, "dim") or not hasattr(w, "dim") or w.dim() != 2 or a.dim() < 1:
        return None
    if dtype_name(a.dtype) != fmt.dtype or dtype_name(w.dtype) != fmt.dtype:
        return None
    n, k = int(w.shape[0]), int(w.shape[1])
    if k <= 0 or n <= 0 or a.shape[-1] != k:
        return None
    m = a.numel() // k
    if m == 0:
        return None
    return Call(family=fmt.family, op=op, dtype=fmt.dtype, dims=(("N", n), ("K", k)), m=m,
                elements=m * k + n * k + m * n, flops=2 * m * n * k, weight_elements=n * k)


def records(fmt: Format) -> tuple[Callable[..., Call | None], Callable[..., Call | None]]:
    """The record functions of the format's two ops, each taking its op's arguments."""

    def record_mm(a: Any, w: Any, a_scale: Any = None, w_scale: Any = None, bias: Any = None,
                  out_dtype: Any = None, out: Any = None) -> Call | None:
        return call_of(fmt, fmt.op_mm, a, w)

    def record_quant(a: Any, w: Any, a_scale: Any = None, w_scale: Any = None,
                     out_scale: Any = None, bias: Any = None, out: Any = None) -> Call | None:
        return call_of(fmt, fmt.op_quant, a, w)

    record_mm.__doc__ = f"``{fmt.package}.ops.{fmt.op_mm}(a, w, a_scale, w_scale, bias, " \
                        "out_dtype, out)``."
    record_quant.__doc__ = f"``{fmt.package}.ops.{fmt.op_quant}(a, w, a_scale, w_scale, " \
                           "out_scale, bias, out)``."
    return record_mm, record_quant


def recorder_patches(fmt: Format, record_mm: Callable[..., Any],
                     record_quant: Callable[..., Any]) -> list[RecorderPatch]:
    """The family's patches (``Family.recorder_patches``)."""
    kind = f"the {fmt.element} scaled GEMM"
    return [
        RecorderPatch(family=fmt.family, target=f"{fmt.package}.ops:{fmt.op_mm}",
                      record=record_mm, description=kind),
        RecorderPatch(family=fmt.family, target=f"{fmt.package}.ops:{fmt.op_quant}",
                      record=record_quant, description=f"{kind} quantizing its output"),
    ]


def names(fmt: Format) -> dict[str, Any]:
    """What a format's ``recorder`` module names: ``record_<op>`` for both ops (each takes its
    op's arguments), ``call_of(op, a, w)`` (the census ``Call`` of ``a [..., K] x w [N, K]^T``;
    None if not this family's) and ``recorder_patches()`` (``Family.recorder_patches``: the
    patches observing ``<package>.ops:<op>`` for both ops). Importing neither torch nor the
    ops."""
    record_mm, record_quant = records(fmt)

    def call_of_op(op: str, a: Any, w: Any) -> Call | None:
        return call_of(fmt, op, a, w)

    def patches() -> list[RecorderPatch]:
        return recorder_patches(fmt, record_mm, record_quant)

    return {f"record_{fmt.op_mm}": record_mm, f"record_{fmt.op_quant}": record_quant,
            "call_of": call_of_op, "recorder_patches": patches}
