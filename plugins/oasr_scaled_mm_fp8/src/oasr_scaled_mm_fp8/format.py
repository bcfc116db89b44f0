"""The fp8 e4m3 number format of the W8A8 code base
(:class:`oasr_scaled_mm.w8a8.formats.Format`): e4m3 operands with the tensor cores' fp32 sum
and saturating e4m3 outputs, the ``scaled_mm_fp8`` family.

The activation quantizer's numerics are :data:`ROW_FORMAT` (device code in
``templates/row_format.cuh``); the kernels are ``csrc/oasr_scaled_mm_fp8/``; the lanes'
configs, feasibility, numerics gate, fitted ladder and untuned route are this package's
modules. Importing this module imports no torch.
"""

from __future__ import annotations

from pathlib import Path

from oasr_scaled_mm.w8a8.formats import Format
from oasr_scaled_mm.w8a8.row_quantizer import RowFormat

from oasr_scaled_mm_fp8 import config_space as cs

ROW_FORMAT = RowFormat(
    name="fp8 e4m3, saturating",
    propagate_nan=True,
    headers=("cuda_fp8.h",),
    contract="""
amax     = max_i |float(X[r, i])|   (NaN-propagating, as torch's amax)
scale[r] = amax / 448 (IEEE division), or 1 when amax is 0
Q[r, i]  = e4m3_rn(clamp(float(X[r, i]) / scale[r], -448, 448))   (IEEE division; the clamp
           keeps NaN, as torch.clamp does): oasr_scaled_mm_fp8.numerics.quantize_rows op for
           op, bit for bit (NaN payloads aside)
""",
    device_code=(Path(__file__).resolve().parent / "templates" / "row_format.cuh").read_text())
"""The e4m3 quantizer's numerics (the W8A8 row-quantizer skeleton does the rest)."""

E4M3 = Format(
    package="oasr_scaled_mm_fp8", title="fp8 e4m3", dtype=cs.DTYPE, element="fp8",
    linear_dtypes=("bf16", "fp16"), row_format=ROW_FORMAT, quantizer_namespace="oasr_fp8_quantize",
    reference=("numerics", "quantize_rows"), lane_modules={
        cs.LANE_SM89: "scaled_mm_fp8_sm89_mma", cs.LANE_SM90: "scaled_mm_fp8_sm90_wgmma"})
"""The fp8 e4m3 format."""
