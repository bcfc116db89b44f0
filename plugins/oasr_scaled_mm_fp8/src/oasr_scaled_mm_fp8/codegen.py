"""C++ generation of the scaled_mm_fp8 family: the W8A8 code base's unit writer
(:class:`oasr_scaled_mm.w8a8.codegen.UnitWriter`) with the fp8 e4m3 kernel types.

One translation unit per (config, op) of either fp8 lane includes
``csrc/oasr_scaled_mm_fp8/sm89.cuh`` or ``sm90.cuh`` and names one kernel type per output dtype
(bf16 and fp16 for ``scaled_mm_fp8``, e4m3 for ``scaled_mm_fp8_quant``); its launcher is
``oasr_fp8_<lane>_<unit>`` (the scaled C ABI, :mod:`oasr_scaled_mm.w8a8.codegen`). After the
stages an sm89 kernel type takes fast accumulation on or off; an sm90 one its main-loop
schedule (the ``FP8FastAccum`` twin when fast) and epilogue.
"""

from __future__ import annotations

from pathlib import Path

from oasr_core.jit import kit
from oasr_scaled_mm.w8a8.codegen import UnitWriter, cxx_bool

from oasr_scaled_mm_fp8.config_space import LANE_SM89, LANE_SM90
from oasr_scaled_mm_fp8.format import E4M3

FAST_ACCUM = "FP8FastAccum"
"""CUTLASS's suffix of a 3.x main-loop schedule that skips accumulator promotion."""


def _sm90(p) -> list[str]:
    mainloop = kit.SM90_MAINLOOP[p["schedule"]] + (FAST_ACCUM if p["fast_accum"] else "")
    return [mainloop, kit.SM90_EPILOGUE[p["schedule"]]]


WRITER = UnitWriter(E4M3, namespace="oasr_fp8", element="cutlass::float_e4m3_t",
                    source=Path(__file__),
                    template_args={LANE_SM89: lambda p: [cxx_bool(p["fast_accum"])],
                                   LANE_SM90: _sm90})
"""The family's unit writer: ``symbol``, ``unit_source``, ``impl_hash``, ... (its names)."""
globals().update(WRITER.names())
