"""Feasibility predicates of the scaled_mm_fp8 lanes, as data and small pure functions.

Static rules (does the config build and compute the right thing on some arch of its lane):

- sm89: the warp tile divides the CTA tile into 1..8 warps of whole m16n8k32 instructions
  with the whole K tile per warp (the visitor epilogue takes one K partition); CTA tile N a
  multiple of 32 (the 4-wide fp32 epilogue thread map), at least 3 stages, shared memory
  (one byte per fp8 element) within the largest limit of the lane's arches;
- sm90: the rules every wgmma lane shares (:func:`oasr_core.kit.lanes.cutlass3_tile`), K tile
  128 (fp8 rows of 128 bytes: the 128B swizzle; 64 would halve the wgmma K depth per stage),
  clusters of at most 2 CTAs, at most 128 fp32 accumulators per consumer thread, no Stream-K.

Per-problem rules (:func:`supports`): N and K multiples of :data:`ALIGN` (16-byte fp8 rows for
cp.async / TMA and a 16-byte fp8 D), M >= 1.
"""

from __future__ import annotations

from oasr_core.kit import lanes
from oasr_scaled_mm.w8a8 import space
from oasr_scaled_mm.w8a8.space import ALIGN, MMA_SHAPE, SM90_MAX_ACCUMULATORS  # noqa: F401

from oasr_scaled_mm_fp8.config_space import LANE_SM89, LANE_SM90, OP_QUANT

SMEM_LIMIT = lanes.SMEM_LIMIT
SM89_ARCHES = ("sm89", "sm90")
"""Ada's fp8 mma.sync: sm89 and later (not sm80/sm86)."""
SM89_DEFAULT_ON = ("sm89",)
SM90_ARCHES = lanes.CUTLASS3_ARCHES
ARCHES = {LANE_SM89: SM89_ARCHES, LANE_SM90: SM90_ARCHES}
sm89_smem, sm90_smem = space.mma_smem, space.wgmma_smem
RULES = lanes.LaneRules({LANE_SM89: lambda c: space.mma_static(c, SM89_ARCHES),
                         LANE_SM90: lambda c: space.wgmma_static(c, k_tile=128)}, ARCHES,
                        {LANE_SM89: sm89_smem}, align=ALIGN)
"""The fp8 lanes' rules (static predicates, arches, sm89 shared memory, 16-byte rows; K tile
128)."""
is_feasible, fits_arch, aligned = RULES.is_feasible, RULES.fits_arch, RULES.aligned
supports = space.supports_with(aligned, OP_QUANT)
"""Per-problem predicate: ``config`` can run ``problem`` (16-byte aligned N and K, M >= 1; no
fp8 config is Stream-K)."""
