"""Feasibility predicates of the scaled_mm lanes, as data and small pure functions.

Static rules (does the config build and compute the right thing on some arch of its lane):

- sm80: the warp tile divides the CTA tile into 1..8 warps of whole m16n8k32 instructions
  with the whole K tile per warp (the visitor epilogue takes one K partition); the CTA tile
  N a multiple of 32 (the 4-wide fp32 epilogue thread map covers a warp's 32 lanes), at
  least 3 stages (the sm80 multistage main loop), shared memory within the largest arch
  limit of the lane;
- sm90: tile M 64/128/256 (256 only cooperative, whose two consumer warpgroups take 128 rows
  each), tile N a multiple of 16 in 16..256 (TMA epilogue), K tile 64 or 128 (int8 rows of
  64/128 bytes: the 64B/128B swizzles), clusters of at most 2 CTAs, at most 128 int32
  accumulators per consumer thread, Stream-K only with the cooperative kernel.

Per-problem rules (:func:`supports`): N and K multiples of :data:`ALIGN` (16-byte int8 rows
for cp.async/TMA and an int8 D), M >= 1, Stream-K only where K has at least two K tiles to
split, and never for ``scaled_mm_quant`` (there is no quantizing Stream-K launcher).
"""

from __future__ import annotations

from oasr_core.kit import lanes

from oasr_scaled_mm.config_space import LANE_SM80, LANE_SM90, OP_QUANT
from oasr_scaled_mm.w8a8 import space
from oasr_scaled_mm.w8a8.space import ALIGN, MMA_SHAPE, SM90_MAX_ACCUMULATORS  # noqa: F401

SMEM_LIMIT = lanes.SMEM_LIMIT
SM80_ARCHES = lanes.CUTLASS2_ARCHES
SM80_DEFAULT_ON = lanes.CUTLASS2_DEFAULT_ON
SM90_ARCHES = lanes.CUTLASS3_ARCHES
ARCHES = {LANE_SM80: SM80_ARCHES, LANE_SM90: SM90_ARCHES}
sm80_smem, sm90_smem = space.mma_smem, space.wgmma_smem
RULES = lanes.LaneRules({LANE_SM80: lambda c: space.mma_static(c, SM80_ARCHES),
                         LANE_SM90: space.wgmma_static}, ARCHES, {LANE_SM80: sm80_smem},
                        align=ALIGN)
"""The int8 lanes' rules (static predicates, arches, sm80 shared memory, 16-byte rows)."""
is_feasible, fits_arch, aligned = RULES.is_feasible, RULES.fits_arch, RULES.aligned
supports = space.supports_with(aligned, OP_QUANT)
"""Per-problem predicate: ``config`` can run ``problem`` (alignment, op, split vs K)."""
