"""JIT specs of the fp8 lanes, as the int8 family builds its own
(:class:`oasr_scaled_mm.w8a8.jit.LaneModules`) for :data:`oasr_scaled_mm_fp8.format.E4M3`;
``OASR_SCALED_MM_FP8_COMPILE_SET=all`` links the whole space. Nothing here runs at import.
"""

from __future__ import annotations

from oasr_scaled_mm.w8a8.jit import LaneModules

from oasr_scaled_mm_fp8.format import E4M3

NAMES = LaneModules(E4M3).names()
globals().update(NAMES, Fp8KernelModule=NAMES["KernelModule"], heuristic_ids=NAMES["ladder_ids"])
__all__ = sorted(NAMES)
