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
from oasr_core.types import Config, Problem

from oasr_scaled_mm_fp8.config_space import LANE_SM89, LANE_SM90

SMEM_LIMIT = lanes.SMEM_LIMIT
SM89_ARCHES = ("sm89", "sm90")
"""Ada's fp8 mma.sync: sm89 and later (not sm80/sm86)."""
SM89_DEFAULT_ON = ("sm89",)
SM90_ARCHES = lanes.CUTLASS3_ARCHES
ARCHES = {LANE_SM89: SM89_ARCHES, LANE_SM90: SM90_ARCHES}
ALIGN = 16
"""N and K must be multiples of this many fp8 elements (16 bytes)."""
MMA_SHAPE = (16, 8, 32)
"""The sm89 fp8 tensor-core instruction (m16n8k32)."""
SM90_MAX_ACCUMULATORS = 128
_SM90_EPILOGUE_SMEM = 8192


def sm89_smem(config: Config) -> int:
    """Shared memory of a 2.x config's main loop: stages x (A tile + B tile), fp8."""
    bm, bn, bk = config.params["tile"]
    return config.params["stages"] * (bm + bn) * bk


def sm90_smem(config: Config) -> int:
    """Lower bound of a 3.x config's shared memory (its fixed stage count, or two stages)."""
    tm, tn, tk = config.params["tile"]
    return (config.params["stages"] or 2) * (tm + tn) * tk + _SM90_EPILOGUE_SMEM


def _sm89_static(config: Config) -> bool:
    p = config.params
    (bm, bn, bk), (wm, wn, wk) = p["tile"], p["warp"]
    im, in_, ik = MMA_SHAPE
    if bm % wm or bn % wn or wk != bk or wm % im or wn % in_ or wk % ik:
        return False
    if not 1 <= (bm // wm) * (bn // wn) <= 8 or bn % 32 or p["stages"] < 3:
        return False
    return sm89_smem(config) <= max(SMEM_LIMIT[a] for a in SM89_ARCHES)


def _sm90_static(config: Config) -> bool:
    tile = lanes.cutlass3_tile(config, max_cluster=2)
    return (tile is not None and tile.k == 128
            and tile.m * tile.n // (128 * tile.consumers) <= SM90_MAX_ACCUMULATORS
            and sm90_smem(config) <= SMEM_LIMIT["sm90"])


RULES = lanes.LaneRules({LANE_SM89: _sm89_static, LANE_SM90: _sm90_static}, ARCHES,
                        {LANE_SM89: sm89_smem}, align=ALIGN)
"""The fp8 lanes' rules (static predicates, arches, sm89 shared memory, 16-byte rows)."""
is_feasible, fits_arch, aligned = RULES.is_feasible, RULES.fits_arch, RULES.aligned


def supports(config: Config, problem: Problem) -> bool:
    """Per-problem predicate: ``config`` can run ``problem`` (16-byte aligned N and K, M >= 1)."""
    return aligned(problem.dim("N"), problem.dim("K")) and problem.m >= 1
