"""Convolution geometry as torch defines it, and the shape record a convolution unit reads.

What a convolution family's record module (its ``geometry.py``, :attr:`RecordKernel.ABI
<oasr_core.kit.records.RecordKernel.ABI>`) shares with every other, whatever the number of
spatial axes: torch's output extent along one axis (:func:`out_length`), a parameter as torch
reads it for several axes (:func:`pair`), the size checks of a record (:func:`check_sizes`),
the dtype and activation codes of the units (:data:`DTYPE_CODE`, :data:`ACT_CODE`: the C
headers' ``DType`` / ``Act`` enums) and the kit's call record of one convolution
(:func:`call_args`: the implicit GEMM's M, N and K). A record is a ``ctypes.Structure`` of
64-bit extents then 32-bit sizes (:func:`record_fields`), mirroring the family's C struct.
:func:`custom_ops` registers a family's ``<family>`` and ``<family>_activation`` custom ops.

Importing this module imports neither torch nor CUTLASS.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from oasr_core.jit.kit import CallArgs

DTYPE_CODE = {"fp16": 0, "bf16": 1}
"""``CallArgs.dtype`` code per dtype (the units' ``DType`` enum)."""
ACT_CODE = {None: 0, "relu": 1, "gelu": 2, "silu": 3}
"""``CallArgs.act`` code per activation (the units' ``Act`` enum; GELU is the erf form)."""


def record_fields(extents: Sequence[str], sizes: Sequence[str]) -> list[tuple[str, type]]:
    """A shape record's ``_fields_``: ``extents`` as int64, then ``sizes`` as int32, then an
    int32 ``reserved`` that stays zero."""
    return [*((name, ctypes.c_int64) for name in extents),
            *((name, ctypes.c_int32) for name in (*sizes, "reserved"))]


def out_length(n_in: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """torch's output extent of a convolution along one axis; 0 when the window does not fit."""
    span = dilation * (kernel - 1) + 1
    padded = n_in + 2 * pad
    return 0 if padded < span else (padded - span) // stride + 1


def pair(value: object) -> tuple[object, object]:
    """A conv parameter as torch reads it for two axes: one value for both, or an (h, w)
    pair; ``(None, None)`` for a sequence of another length."""
    if isinstance(value, (tuple, list)):
        if len(value) == 2:
            return value[0], value[1]
        if len(value) == 1:
            return value[0], value[0]
        return None, None
    return value, value


def check_sizes(family: str, sizes: Iterable[tuple[str, int, int]], c_in: int, c_out: int,
                groups: int) -> None:
    """Raise a ``ValueError`` naming the first bad size of ``family``'s record: each
    ``(name, value, low)`` an integer at least ``low``, and ``groups`` dividing both channel
    counts."""
    for name, value, low in sizes:
        if int(value) != value or value < low:
            raise ValueError(f"{family} geometry: {name}={value!r} must be an integer >= {low}")
    if c_in % groups or c_out % groups:
        raise ValueError(f"{family} geometry: groups={groups} must divide c_in={c_in} and "
                         f"c_out={c_out}")


def call_args(family: str, m: int, n: int, k: int, dtype: str, activation: str | None,
              flags: int = 0) -> CallArgs:
    """The kit's call record of one convolution, an implicit GEMM of ``m`` x ``n`` x ``k``
    (output pixels, output channels, filter taps times input channels per group), no
    workspace (the caller sets one when the unit asks); a ``ValueError`` naming ``family``
    for a dtype or activation the units do not have."""
    if dtype not in DTYPE_CODE:
        raise ValueError(f"{family}: dtype {dtype!r} is not one of {sorted(DTYPE_CODE)}")
    if activation not in ACT_CODE:
        raise ValueError(f"{family}: activation {activation!r} is not one of "
                         f"{[a for a in ACT_CODE if a]} or None")
    call = CallArgs()
    call.m, call.n, call.k = m, n, k
    call.dtype, call.act, call.split, call.flags = DTYPE_CODE[dtype], ACT_CODE[activation], 1, flags
    return call


def custom_ops(family: str, param: str, run: Callable[..., Any],
               fake: Callable[..., Any]) -> tuple[Any, Any]:
    """Register a convolution family's two custom ops (:func:`oasr_core.kit.ops.custom_op`,
    which imports torch): ``torch.ops.oasr.<family>(x, weight, bias, stride, padding, dilation,
    groups)`` and ``<family>_activation(x, weight, bias, activation, stride, ...)``, each conv
    parameter of schema type ``param`` (``int``, ``int[2]``). Both run ``run(activation, x,
    weight, bias, stride, padding, dilation, groups)`` (activation None for the first) and
    trace with ``fake(x, weight, stride, padding, dilation)``; returns the two ops."""
    from oasr_core.kit.ops import custom_op

    params = f"{param} stride, {param} padding, {param} dilation, int groups"
    plain = custom_op(
        family, f"(Tensor x, Tensor weight, Tensor? bias, {params}) -> Tensor",
        lambda x, weight, bias, stride, padding, dilation, groups: run(
            None, x, weight, bias, stride, padding, dilation, groups),
        lambda x, weight, bias, stride, padding, dilation, groups: fake(
            x, weight, stride, padding, dilation))
    fused = custom_op(
        f"{family}_activation",
        f"(Tensor x, Tensor weight, Tensor? bias, str activation, {params}) -> Tensor",
        lambda x, weight, bias, activation, stride, padding, dilation, groups: run(
            activation, x, weight, bias, stride, padding, dilation, groups),
        lambda x, weight, bias, activation, stride, padding, dilation, groups: fake(
            x, weight, stride, padding, dilation))
    return plain, fused


def op_recorders(family: str, activations: Sequence[str], default_activation: str,
                 record: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The census recorders of a convolution family's two ops (:func:`custom_ops`'s
    ``<family>`` and ``<family>_activation``, with their Python signatures): each files a call
    with ``record(op, x, weight, stride, padding, dilation, groups)`` under op ``<family>`` or
    ``<family>_<activation>``; an activation not in ``activations`` is not the family's
    (None)."""

    def record_plain(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                     dilation: Any = 1, groups: Any = 1) -> Any:
        return record(family, x, weight, stride, padding, dilation, groups)

    def record_activation(x: Any, weight: Any, bias: Any = None,
                          activation: Any = default_activation, stride: Any = 1,
                          padding: Any = 0, dilation: Any = 1, groups: Any = 1) -> Any:
        if activation is not None and activation not in activations:
            return None
        op = family if activation is None else f"{family}_{activation}"
        return record(op, x, weight, stride, padding, dilation, groups)

    return record_plain, record_activation


def recorder_rows(family: str, record_plain: Callable[..., Any],
                  record_activation: Callable[..., Any], torch_record: Callable[..., Any],
                  torch_text: str) -> tuple[tuple[str, Callable[..., Any], str], ...]:
    """``(target, record, description)`` of each census recorder patch of a convolution
    family: its two ops (``oasr_<family>.ops:<family>`` and ``..._activation``, recorded by
    :func:`op_recorders`'s pair) and torch's functional conv (``torch_record``, which reads
    torch's layout; ``torch_text`` says what calls it)."""
    ops = f"oasr_{family}.ops"
    return ((f"{ops}:{family}", record_plain, "the family op"),
            (f"{ops}:{family}_activation", record_activation, "the fused bias + activation ops"),
            (f"torch.nn.functional:{family}", torch_record, torch_text))
