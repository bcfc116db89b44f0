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
from oasr_scaled_mm.w8a8.formats import Format
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
    package="oasr_scaled_mm", title="int8", dtype="int8", element="int8",
    linear_dtypes=("fp16", "bf16"), row_format=ROW_FORMAT, quantizer_namespace="oasr_quantize",
    reference=("quantize", "quantize_rows_reference"), lane_modules={
        cs.LANE_SM80: "scaled_mm_sm80_int8_mma", cs.LANE_SM90: "scaled_mm_sm90_int8_wgmma"})
"""The int8 format."""
