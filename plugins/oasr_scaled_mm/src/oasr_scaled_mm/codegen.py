"""C++ generation of the scaled_mm family: the W8A8 code base's unit writer
(:class:`oasr_scaled_mm.w8a8.codegen.UnitWriter`) with the int8 kernel types.

One translation unit per (config, op) of either lane includes ``csrc/oasr_scaled_mm/sm80.cuh``
or ``sm90.cuh`` and names one kernel type per output dtype (fp16 and bf16 for ``scaled_mm``,
int8 for ``scaled_mm_quant``); its launcher is ``oasr_smm_<lane>_<unit>`` (the scaled C ABI,
:mod:`oasr_scaled_mm.w8a8.codegen`). Stream-K configs have no quantizing unit. After the stages
an sm80 kernel type takes Stream-K on or off; an sm90 one the schedule's main loop and epilogue
and the tile scheduler (Stream-K's or the default).
"""

from __future__ import annotations

from pathlib import Path

from oasr_core.jit import kit

from oasr_scaled_mm.config_space import LANE_SM80, LANE_SM90
from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8.codegen import UnitWriter, cxx_bool

WRITER = UnitWriter(INT8, namespace="oasr_smm", element="int8_t", source=Path(__file__),
                    template_args={
    LANE_SM80: lambda p: [cxx_bool(p["stream_k"])],
    LANE_SM90: lambda p: [kit.SM90_MAINLOOP[p["schedule"]], kit.SM90_EPILOGUE[p["schedule"]],
                          kit.sm90_scheduler(p["stream_k"])],
})
"""The family's unit writer: ``symbol``, ``unit_source``, ``impl_hash``, ... (its names)."""
globals().update(WRITER.names())
