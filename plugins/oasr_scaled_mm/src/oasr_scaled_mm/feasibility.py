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
from oasr_core.types import Config, Problem

from oasr_scaled_mm.config_space import LANE_SM80, LANE_SM90, OP_QUANT

SMEM_LIMIT = lanes.SMEM_LIMIT
SM80_ARCHES = lanes.CUTLASS2_ARCHES
SM80_DEFAULT_ON = lanes.CUTLASS2_DEFAULT_ON
SM90_ARCHES = lanes.CUTLASS3_ARCHES
ARCHES = {LANE_SM80: SM80_ARCHES, LANE_SM90: SM90_ARCHES}
ALIGN = 16
"""N and K must be multiples of this many int8 elements (16 bytes)."""
MMA_SHAPE = (16, 8, 32)
"""The sm80 int8 tensor-core instruction (m16n8k32)."""
SM90_MAX_ACCUMULATORS = 128
"""int32 accumulators per consumer thread a 3.x config may hold (beyond this, spills)."""
_SM90_EPILOGUE_SMEM = 8192


def sm80_smem(config: Config) -> int:
    """Shared memory of a 2.x config's main loop: stages x (A tile + B tile), int8."""
    bm, bn, bk = config.params["tile"]
    return config.params["stages"] * (bm + bn) * bk


def sm90_smem(config: Config) -> int:
    """Lower bound of a 3.x config's shared memory (its fixed stage count, or two stages)."""
    tm, tn, tk = config.params["tile"]
    stages = config.params["stages"] or 2
    return stages * (tm + tn) * tk + _SM90_EPILOGUE_SMEM


def _sm80_static(config: Config) -> bool:
    p = config.params
    (bm, bn, bk), (wm, wn, wk) = p["tile"], p["warp"]
    im, in_, ik = MMA_SHAPE
    if bm % wm or bn % wn or wk != bk or wm % im or wn % in_ or wk % ik:
        return False
    if not 1 <= (bm // wm) * (bn // wn) <= 8:
        return False
    if bn % 32 or p["stages"] < 3:
        return False
    return sm80_smem(config) <= max(SMEM_LIMIT[a] for a in SM80_ARCHES)


def _sm90_static(config: Config) -> bool:
    tile = lanes.cutlass3_tile(config, max_cluster=2)
    return (tile is not None
            and tile.m * tile.n // (128 * tile.consumers) <= SM90_MAX_ACCUMULATORS
            and sm90_smem(config) <= SMEM_LIMIT["sm90"])


RULES = lanes.LaneRules({LANE_SM80: _sm80_static, LANE_SM90: _sm90_static}, ARCHES,
                        {LANE_SM80: sm80_smem}, align=ALIGN)
"""The int8 lanes' rules (static predicates, arches, sm80 shared memory, 16-byte rows)."""
is_feasible, fits_arch, aligned = RULES.is_feasible, RULES.fits_arch, RULES.aligned


def supports(config: Config, problem: Problem) -> bool:
    """Per-problem predicate: ``config`` can run ``problem`` (alignment, op, split vs K)."""
    n, k = problem.dim("N"), problem.dim("K")
    if not aligned(n, k) or problem.m < 1:
        return False
    if config.params.get("stream_k", False):
        if problem.op == OP_QUANT:
            return False
        if -(-k // config.params["tile"][2]) < 2:
            return False
    return True

