"""C++ generation of the scaled_mm family: the W8A8 code base's unit writer
(:class:`oasr_scaled_mm.w8a8.codegen.UnitWriter`) with the int8 kernel types.

One translation unit per (config, op) of either lane includes ``csrc/oasr_scaled_mm/sm80.cuh``
or ``sm90.cuh`` and names one kernel type per output dtype (fp16 and bf16 for ``scaled_mm``,
int8 for ``scaled_mm_quant``); its launcher is ``oasr_smm_<lane>_<unit>`` (the scaled C ABI,
:mod:`oasr_scaled_mm.w8a8.codegen`). Stream-K configs have no quantizing unit.
"""

from __future__ import annotations

from pathlib import Path

from oasr_core.jit import kit
from oasr_core.types import Config

from oasr_scaled_mm.config_space import LANE_SM80, LANE_SM90, OP_MM, OP_QUANT
from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8.codegen import UnitWriter

_CXX_OUT = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t", "int8": "int8_t"}


def sm80_kernel_type(config: Config, out_dtype: str) -> str:
    """The C++ type of a 2.x config's kernel writing ``out_dtype``."""
    p = config.params
    args = [_CXX_OUT[out_dtype], *p["tile"], *p["warp"], p["stages"],
            "true" if p["stream_k"] else "false"]
    return f"oasr_smm::sm80::Kernel<{', '.join(map(str, args))}>"


def sm90_kernel_type(config: Config, out_dtype: str) -> str:
    """The C++ type of a 3.x config's kernel writing ``out_dtype``."""
    p = config.params
    args = [_CXX_OUT[out_dtype], *p["tile"], *p["cluster"], p["stages"],
            kit.SM90_MAINLOOP[p["schedule"]], kit.SM90_EPILOGUE[p["schedule"]],
            kit.sm90_scheduler(p["stream_k"])]
    return f"oasr_smm::sm90::Kernel<{', '.join(map(str, args))}>"


WRITER = UnitWriter(INT8, namespace="oasr_smm", prefix="oasr_smm",
                    lane_tags={LANE_SM80: "sm80", LANE_SM90: "sm90"},
                    kernel_types={LANE_SM80: sm80_kernel_type, LANE_SM90: sm90_kernel_type},
                    out_codes={"fp16": 0, "bf16": 1, "int8": 2},
                    op_out_dtypes={OP_MM: ("fp16", "bf16"), OP_QUANT: ("int8",)},
                    source=Path(__file__))
"""The family's unit writer: ``symbol``, ``unit_source``, ``impl_hash``, ... (its names)."""
globals().update(WRITER.names())
