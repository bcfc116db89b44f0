"""The conv1d kernel ABI's Python half: the ctypes mirror of ``oasr_conv1d::Geometry``.

Every conv1d unit, dense or depthwise, exports ``<symbol>(const oasr_kit::CallArgs*, const
oasr_conv1d::Geometry*, x, w, bias, out, stream)`` and ``<symbol>_workspace(const Geometry*,
int32 dtype)`` (``csrc/oasr_conv1d/geometry.cuh`` states the contract). This module mirrors
the record field by field, names the dtype and activation codes, and computes torch's output
length, so the dense and depthwise lanes build their calls from one place.

Importing it imports neither torch nor CUTLASS.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from oasr_core.jit.kit import CallArgs
from oasr_core.kit import convolution
from oasr_core.kit.records import abi_unit

FAMILY = "conv1d"
LANE_SM80 = "sm80_conv1d"
"""The CUTLASS 2.x-era lane (mma.sync dense units, direct depthwise units); sm80..sm90."""
LANE_SM90 = "sm90_conv1d"
"""The Hopper lane (CUTLASS 3.x dense units, direct depthwise units built for 90a); sm90."""
LANES = (LANE_SM80, LANE_SM90)

CSRC = Path(__file__).resolve().parent / "csrc"
"""The include dir holding ``oasr_conv1d/*.cuh`` (the family's headers)."""
HEADER = "oasr_conv1d/geometry.cuh"
"""The ABI header, as a unit includes it."""

DTYPE_CODE = convolution.DTYPE_CODE
"""``CallArgs.dtype`` code per family dtype (``oasr_conv1d::DType``)."""
ACT_CODE = convolution.ACT_CODE
"""``CallArgs.act`` code per activation (``oasr_conv1d::Act``; GELU is the erf form)."""


class Geometry(ctypes.Structure):
    """One call's convolution geometry (``oasr_conv1d::Geometry``, 56 bytes, field by field;
    ``reserved`` stays zero), built by :func:`geometry`, which checks the sizes."""

    _fields_ = convolution.record_fields(
        ("batch", "t_in", "t_out"),
        ("c_in", "c_out", "kernel", "stride", "pad", "dilation", "groups"))


assert ctypes.sizeof(Geometry) == 56, "Geometry must match oasr_conv1d::Geometry (56 bytes)"

LAUNCH_ARGTYPES = [ctypes.POINTER(CallArgs), ctypes.POINTER(Geometry), ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
"""ctypes argument types of a unit's launcher: call, geometry, x, w, bias, out, stream."""
WORKSPACE_ARGTYPES = [ctypes.POINTER(Geometry), ctypes.c_int32]
"""ctypes argument types of a unit's ``<symbol>_workspace`` query."""


ABI_UNIT = abi_unit("oasr_conv1d::Geometry")
"""The family ABI's part of :func:`oasr_core.jit.kit.c_abi_unit`'s arguments (the kit's record
ABI over ``oasr_conv1d::Geometry``)."""


out_length = convolution.out_length
"""``out_length(t_in, kernel, stride, pad, dilation)``: torch's output length of a 1-D
convolution; 0 when the window does not fit."""


def geometry(batch: int, t_in: int, c_in: int, c_out: int, kernel: int, stride: int = 1,
             pad: int = 0, dilation: int = 1, groups: int = 1) -> Geometry:
    """The record of one call; a ``ValueError`` naming the bad size when it is not a conv."""
    convolution.check_sizes(
        FAMILY, (("batch", batch, 1), ("t_in", t_in, 1), ("c_in", c_in, 1), ("c_out", c_out, 1),
                 ("kernel", kernel, 1), ("stride", stride, 1), ("pad", pad, 0),
                 ("dilation", dilation, 1), ("groups", groups, 1)), c_in, c_out, groups)
    t_out = out_length(t_in, kernel, stride, pad, dilation)
    if t_out <= 0:
        raise ValueError(f"conv1d geometry: t_in={t_in} with pad={pad} is shorter than the "
                         f"window (kernel={kernel}, dilation={dilation})")
    return Geometry(batch, t_in, t_out, c_in, c_out, kernel, stride, pad, dilation, groups, 0)


def call_args(geo: Geometry, dtype: str, activation: str | None = None,
              flags: int = 0) -> CallArgs:
    """The kit's call record for ``geo``: m = batch * t_out, n = c_out,
    k = c_in / groups * kernel, no workspace (the caller sets one when the unit asks)."""
    return convolution.call_args(FAMILY, geo.batch * geo.t_out, geo.c_out,
                                 geo.c_in // geo.groups * geo.kernel, dtype, activation, flags)


def out_shape(g: Geometry) -> tuple[int, int, int]:
    """The output's shape ``(B, T_out, Cout)`` (channels last)."""
    return (g.batch, g.t_out, g.c_out)


def describe(g: Geometry) -> str:
    """``B=8 T=3000 Cin=80 Cout=512 k=3 stride=1 pad=1 dil=1 groups=1``."""
    return (f"B={g.batch} T={g.t_in} Cin={g.c_in} Cout={g.c_out} k={g.kernel} "
            f"stride={g.stride} pad={g.pad} dil={g.dilation} groups={g.groups}")
