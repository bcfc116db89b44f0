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
from oasr_core.kit import convolution
from oasr_core.kit.records import abi_unit

FAMILY = "conv2d"
LANE = "sm80_conv2d"
"""The family's one lane: CUTLASS 2.x implicit GEMM (mma.sync), sm80..sm90."""
LANES = (LANE,)

CSRC = Path(__file__).resolve().parent / "csrc"
"""The include dir holding ``oasr_conv2d/*.cuh`` (the family's headers)."""

DTYPE_CODE = convolution.DTYPE_CODE
"""``CallArgs.dtype`` code per family dtype (``oasr_conv2d::DType``)."""
ACT_CODE = convolution.ACT_CODE
"""``CallArgs.act`` code per activation (``oasr_conv2d::Act``; GELU is the erf form)."""


class Geometry(ctypes.Structure):
    """One call's convolution geometry (``oasr_conv2d::Geometry``, 88 bytes, field by field;
    ``reserved`` stays zero), built by :func:`geometry`, which checks the sizes."""

    _fields_ = convolution.record_fields(
        ("batch", "h_in", "w_in", "h_out", "w_out"),
        ("c_in", "c_out", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw", "groups"))


assert ctypes.sizeof(Geometry) == 88, "Geometry must match oasr_conv2d::Geometry (88 bytes)"

ABI_UNIT = abi_unit("oasr_conv2d::Geometry")
"""The family ABI's part of :func:`oasr_core.jit.kit.c_abi_unit`'s arguments."""


out_length = convolution.out_length
"""``out_length(n_in, kernel, stride, pad, dilation)``: torch's output extent of a convolution
along one axis; 0 when the window does not fit."""
pair = convolution.pair
"""``pair(value)``: a conv parameter as torch reads it, one value for both axes or an (h, w)
pair."""


def geometry(batch: int, h_in: int, w_in: int, c_in: int, c_out: int, kh: int, kw: int,
             sh: int = 1, sw: int = 1, ph: int = 0, pw: int = 0, dh: int = 1, dw: int = 1,
             groups: int = 1) -> Geometry:
    """The record of one call; a ``ValueError`` naming the bad size when it is not a conv."""
    convolution.check_sizes(
        FAMILY, (("batch", batch, 1), ("h_in", h_in, 1), ("w_in", w_in, 1), ("c_in", c_in, 1),
                 ("c_out", c_out, 1), ("kh", kh, 1), ("kw", kw, 1), ("sh", sh, 1),
                 ("sw", sw, 1), ("ph", ph, 0), ("pw", pw, 0), ("dh", dh, 1), ("dw", dw, 1),
                 ("groups", groups, 1)), c_in, c_out, groups)
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
    return convolution.call_args(FAMILY, geo.batch * geo.h_out * geo.w_out, geo.c_out,
                                 geo.c_in // geo.groups * geo.kh * geo.kw, dtype, activation,
                                 flags)


def out_shape(g: Geometry) -> tuple[int, int, int, int]:
    """The output's shape ``(B, H_out, W_out, Cout)`` (NHWC)."""
    return (g.batch, g.h_out, g.w_out, g.c_out)


def describe(g: Geometry) -> str:
    """``B=8 H=1024 W=80 Cin=1 Cout=256 k=3x3 stride=2x2 pad=0x0 dil=1x1 groups=1``."""
    return (f"B={g.batch} H={g.h_in} W={g.w_in} Cin={g.c_in} Cout={g.c_out} k={g.kh}x{g.kw} "
            f"stride={g.sh}x{g.sw} pad={g.ph}x{g.pw} dil={g.dh}x{g.dw} groups={g.groups}")
