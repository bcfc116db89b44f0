"""JIT specs of the scaled_mm lanes: :class:`oasr_scaled_mm.w8a8.jit.LaneModules` of
:data:`oasr_scaled_mm.format.INT8` (one unit per config and op, one library per lane and arch;
``OASR_SCALED_MM_COMPILE_SET=all`` links the whole space). Nothing here runs at import.
"""

from __future__ import annotations

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8.jit import LaneModules

NAMES = LaneModules(INT8).names()
globals().update(NAMES, ScaledMmKernelModule=NAMES["KernelModule"])
__all__ = sorted(NAMES)
