"""JIT specs of the scaled_mm lanes: the W8A8 code base's
(:class:`oasr_scaled_mm.w8a8.jit.LaneModules`) for :data:`oasr_scaled_mm.format.INT8`: one
translation unit per (config, op), one library per lane and arch; a lane's production module
links its default, its heuristic ladder and what the loaded tiers reference
(``OASR_SCALED_MM_COMPILE_SET=all``: the whole space). Nothing here runs at import.
"""

from __future__ import annotations

from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8.jit import LaneModules

MODULES = LaneModules(
    INT8, {cs.LANE_SM80: "scaled_mm_sm80_int8_mma", cs.LANE_SM90: "scaled_mm_sm90_int8_wgmma"},
    "OASR_SCALED_MM_COMPILE_SET")
NAMES = MODULES.names()
"""The module's names (:meth:`oasr_scaled_mm.w8a8.jit.LaneModules.names`)."""
globals().update(NAMES)
ScaledMmKernelModule = NAMES["KernelModule"]
__all__ = sorted(NAMES)
