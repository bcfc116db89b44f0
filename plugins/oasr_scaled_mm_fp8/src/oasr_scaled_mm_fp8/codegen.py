"""C++ generation of the scaled_mm_fp8 family: the W8A8 code base's unit writer
(:class:`oasr_scaled_mm.w8a8.codegen.UnitWriter`) with the fp8 e4m3 kernel types.

One translation unit per (config, op) of either fp8 lane includes
``csrc/oasr_scaled_mm_fp8/sm89.cuh`` or ``sm90.cuh`` and names one kernel type per output dtype
(bf16 and fp16 for ``scaled_mm_fp8``, e4m3 for ``scaled_mm_fp8_quant``); its launcher is
``oasr_fp8_<lane>_<unit>`` (the scaled C ABI, :mod:`oasr_scaled_mm.w8a8.codegen`).
"""

from __future__ import annotations

from pathlib import Path

from oasr_core.jit import kit
from oasr_core.types import Config
from oasr_scaled_mm.w8a8.codegen import UnitWriter

from oasr_scaled_mm_fp8.config_space import LANE_SM89, LANE_SM90, OP_MM, OP_QUANT
from oasr_scaled_mm_fp8.format import E4M3

_CXX_OUT = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t",
            "fp8": "cutlass::float_e4m3_t"}
_FAST_ACCUM = "FP8FastAccum"
"""CUTLASS's suffix of a 3.x main-loop schedule that skips accumulator promotion."""


def sm89_kernel_type(config: Config, out_dtype: str) -> str:
    """The C++ type of a 2.x config's kernel writing ``out_dtype``."""
    p = config.params
    args = [_CXX_OUT[out_dtype], *p["tile"], *p["warp"], p["stages"],
            "true" if p["fast_accum"] else "false"]
    return f"oasr_fp8::sm89::Kernel<{', '.join(map(str, args))}>"


def sm90_mainloop(config: Config) -> str:
    """The 3.x main-loop schedule of ``config`` (its ``FP8FastAccum`` twin when fast)."""
    base = kit.SM90_MAINLOOP[config.params["schedule"]]
    return base + _FAST_ACCUM if config.params["fast_accum"] else base


def sm90_kernel_type(config: Config, out_dtype: str) -> str:
    """The C++ type of a 3.x config's kernel writing ``out_dtype``."""
    p = config.params
    args = [_CXX_OUT[out_dtype], *p["tile"], *p["cluster"], p["stages"], sm90_mainloop(config),
            kit.SM90_EPILOGUE[p["schedule"]]]
    return f"oasr_fp8::sm90::Kernel<{', '.join(map(str, args))}>"


WRITER = UnitWriter(E4M3, namespace="oasr_fp8", prefix="oasr_fp8",
                    lane_tags={LANE_SM89: "sm89", LANE_SM90: "sm90"},
                    kernel_types={LANE_SM89: sm89_kernel_type, LANE_SM90: sm90_kernel_type},
                    out_codes={"fp16": 0, "bf16": 1, "fp8": 2},
                    op_out_dtypes={OP_MM: ("fp16", "bf16"), OP_QUANT: ("fp8",)},
                    source=Path(__file__))
"""The family's unit writer: ``symbol``, ``unit_source``, ``impl_hash``, ... (its names)."""
globals().update(WRITER.names())
