"""The conv2d kernel ABI's Python half: the ctypes mirror of ``oasr_conv2d::Geometry``.

Every conv2d unit exports ``<symbol>(const oasr_kit::CallArgs*, const oasr_conv2d::Geometry*,
x, w, bias, out, stream)`` and ``<symbol>_workspace(const Geometry*, int32 dtype)``
(``csrc/oasr_conv2d/geometry.cuh`` states the contract). This module mirrors the record field
by field, names the dtype and activation codes and computes torch's output extents.

Importing it imports neither torch nor CUTLASS.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from oasr_core.jit.kit import CallArgs
from oasr_core.kit.records import abi_unit

FAMILY = "conv2d"
LANE = "sm80_conv2d"
"""The family's one lane: CUTLASS 2.x implicit GEMM (mma.sync), sm80..sm90."""
LANES = (LANE,)

CSRC = Path(__file__).resolve().parent / "csrc"
"""The include dir holding ``oasr_conv2d/*.cuh`` (the family's headers)."""

DTYPE_CODE = {"fp16": 0, "bf16": 1}
"""``CallArgs.dtype`` code per family dtype (``oasr_conv2d::DType``)."""
ACT_CODE = {None: 0, "relu": 1, "gelu": 2, "silu": 3}
"""``CallArgs.act`` code per activation (``oasr_conv2d::Act``; GELU is the erf form)."""


class Geometry(ctypes.Structure):
    """One call's convolution geometry (``oasr_conv2d::Geometry``, 88 bytes, field by field).

    ``reserved`` stays zero. Built by :func:`geometry`, which checks the sizes.
    """

    _fields_ = [
        ("batch", ctypes.c_int64), ("h_in", ctypes.c_int64), ("w_in", ctypes.c_int64),
        ("h_out", ctypes.c_int64), ("w_out", ctypes.c_int64),
        ("c_in", ctypes.c_int32), ("c_out", ctypes.c_int32), ("kh", ctypes.c_int32),
        ("kw", ctypes.c_int32), ("sh", ctypes.c_int32), ("sw", ctypes.c_int32),
        ("ph", ctypes.c_int32), ("pw", ctypes.c_int32), ("dh", ctypes.c_int32),
        ("dw", ctypes.c_int32), ("groups", ctypes.c_int32), ("reserved", ctypes.c_int32),
    ]


assert ctypes.sizeof(Geometry) == 88, "Geometry must match oasr_conv2d::Geometry (88 bytes)"

ABI_UNIT = abi_unit("oasr_conv2d::Geometry")
"""The family ABI's part of :func:`oasr_core.jit.kit.c_abi_unit`'s arguments."""


def out_length(n_in: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """torch's output extent of a convolution along one axis; 0 when the window does not fit."""
    span = dilation * (kernel - 1) + 1
    padded = n_in + 2 * pad
    return 0 if padded < span else (padded - span) // stride + 1


def pair(value: object) -> tuple[object, object]:
    """A conv parameter as torch reads it: one value for both axes, or an (h, w) pair."""
    if isinstance(value, (tuple, list)):
        if len(value) == 2:
            return value[0], value[1]
        if len(value) == 1:
            return value[0], value[0]
        return None, None
    return value, value


def geometry(batch: int, h_in: int, w_in: int, c_in: int, c_out: int, kh: int, kw: int,
             sh: int = 1, sw: int = 1, ph: int = 0, pw: int = 0, dh: int = 1, dw: int = 1,
             groups: int = 1) -> Geometry:
    """The record of one call; a ``ValueError`` naming the bad size when it is not a conv."""
    for name, value, low in (("batch", batch, 1), ("h_in", h_in, 1), ("w_in", w_in, 1),
                             ("c_in", c_in, 1), ("c_out", c_out, 1), ("kh", kh, 1),
                             ("kw", kw, 1), ("sh", sh, 1), ("sw", sw, 1), ("ph", ph, 0),
                             ("pw", pw, 0), ("dh", dh, 1), ("dw", dw, 1), ("groups", groups, 1)):
        if int(value) != value or value < low:
            raise ValueError(f"conv2d geometry: {name}={value!r} must be an integer >= {low}")
    if c_in % groups or c_out % groups:
        raise ValueError(f"conv2d geometry: groups={groups} must divide c_in={c_in} and "
                         f"c_out={c_out}")
    h_out, w_out = out_length(h_in, kh, sh, ph, dh), out_length(w_in, kw, sw, pw, dw)
    if h_out <= 0 or w_out <= 0:
        raise ValueError(f"conv2d geometry: input {h_in}x{w_in} with padding {ph}x{pw} is "
                         f"smaller than the window {kh}x{kw} (dilation {dh}x{dw})")
    return Geometry(batch, h_in, w_in, h_out, w_out, c_in, c_out, kh, kw, sh, sw, ph, pw, dh,
                    dw, groups, 0)


def call_args(geo: Geometry, dtype: str, activation: str | None = None,
              flags: int = 0) -> CallArgs:
    """The kit's call record for ``geo``: m = batch * h_out * w_out, n = c_out,
    k = c_in / groups * kh * kw, no workspace."""
    if dtype not in DTYPE_CODE:
        raise ValueError(f"conv2d: dtype {dtype!r} is not one of {sorted(DTYPE_CODE)}")
    if activation not in ACT_CODE:
        raise ValueError(f"conv2d: activation {activation!r} is not one of "
                         f"{[a for a in ACT_CODE if a]} or None")
    call = CallArgs()
    call.m, call.n = geo.batch * geo.h_out * geo.w_out, geo.c_out
    call.k = geo.c_in // geo.groups * geo.kh * geo.kw
    call.dtype, call.act, call.split, call.flags = DTYPE_CODE[dtype], ACT_CODE[activation], 1, flags
    return call


def out_shape(g: Geometry) -> tuple[int, int, int, int]:
    """The output's shape ``(B, H_out, W_out, Cout)`` (NHWC)."""
    return (g.batch, g.h_out, g.w_out, g.c_out)


def describe(g: Geometry) -> str:
    """``B=8 H=1024 W=80 Cin=1 Cout=256 k=3x3 stride=2x2 pad=0x0 dil=1x1 groups=1``."""
    return (f"B={g.batch} H={g.h_in} W={g.w_in} Cin={g.c_in} Cout={g.c_out} k={g.kh}x{g.kw} "
            f"stride={g.sh}x{g.sw} pad={g.ph}x{g.pw} dil={g.dh}x{g.dw} groups={g.groups}")
