"""JIT specs of the scaled_mm_fp8 lanes: the W8A8 code base's
(:class:`oasr_scaled_mm.w8a8.jit.LaneModules`) for :data:`oasr_scaled_mm_fp8.format.E4M3`: one
translation unit per (config, op), one library per lane and arch; a lane's production module
links its default, its heuristic ladder and what the loaded tiers reference
(``OASR_SCALED_MM_FP8_COMPILE_SET=all``: the whole space). Nothing here runs at import.
"""

from __future__ import annotations

from oasr_scaled_mm.w8a8.jit import LaneModules

from oasr_scaled_mm_fp8 import config_space as cs
from oasr_scaled_mm_fp8.format import E4M3

MODULES = LaneModules(
    E4M3, {cs.LANE_SM89: "scaled_mm_fp8_sm89_mma", cs.LANE_SM90: "scaled_mm_fp8_sm90_wgmma"},
    "OASR_SCALED_MM_FP8_COMPILE_SET")
NAMES = MODULES.names()
"""The module's names (:meth:`oasr_scaled_mm.w8a8.jit.LaneModules.names`)."""
globals().update(NAMES)
Fp8KernelModule = NAMES["KernelModule"]
heuristic_ids = NAMES["ladder_ids"]
__all__ = sorted(NAMES)
