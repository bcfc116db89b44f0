"""The int8 number format of the W8A8 code base (:class:`oasr_scaled_mm.w8a8.formats.Format`):
symmetric int8 operands with an exact int32 accumulator, the ``scaled_mm`` family.

The activation quantizer's numerics are :data:`ROW_FORMAT` (device code in
``templates/row_format.cuh``); the kernels are ``csrc/oasr_scaled_mm/``; the lanes' configs,
feasibility, numerics gate, fitted ladder and untuned route are this package's modules.
Importing this module imports no torch.
"""

from __future__ import annotations

from pathlib import Path

from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm import feasibility as fe
from oasr_scaled_mm.w8a8.formats import Format, LaneFormat
from oasr_scaled_mm.w8a8.row_quantizer import RowFormat

ROW_FORMAT = RowFormat(
    name="int8, symmetric",
    propagate_nan=False,
    contract="""
amax     = max_i |float(X[r, i])|   (fmaxf: a NaN is skipped)
scale[r] = amax / 127 (IEEE division), or 1 when amax is 0
Q[r, i]  = int8(clamp(rint(float(X[r, i]) / scale[r]), -127, 127))   (IEEE division,
           round half to even): oasr_scaled_mm.quantize.quantize_rows_reference op for op,
           bit for bit; a row holding a NaN or an infinity is undefined in both
""",
    device_code=(Path(__file__).resolve().parent / "templates" / "row_format.cuh").read_text())
"""The int8 quantizer's numerics (the W8A8 row-quantizer skeleton does the rest)."""

INT8 = Format(
    family=cs.FAMILY, package="oasr_scaled_mm", dtype="int8", element="int8", ops=cs.OPS,
    quantization="int8_w8a8", linear_dtypes=("fp16", "bf16"), row_format=ROW_FORMAT,
    quantizer=("oasr_quantize_rows", "scaled_mm_quantize_rows", "oasr_quantize"),
    reference=("quantize", "quantize_rows_reference"), lanes=(
        LaneFormat(cs.LANE_SM80, fe.SM80_ARCHES, fe.SM80_DEFAULT_ON, "CUTLASS 2.x int8 "
                   "mma.sync, fused scale EVT", module="scaled_mm_sm80_int8_mma"),
        LaneFormat(cs.LANE_SM90, fe.SM90_ARCHES, fe.SM90_ARCHES, "CUTLASS 3.x int8 TMA + "
                   "wgmma, fused scale EVT", module="scaled_mm_sm90_int8_wgmma")),
    description="int8 W8A8 A W^T with per-token / per-channel scales (+bias, +int8 out)")
"""The int8 format."""
