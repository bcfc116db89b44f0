"""Feasibility predicates of the gemm lanes: static (does it build and compute the right thing)
and per problem (can it run this shape).

The static rules encode failures that were seen, not guessed:

- the CUTLASS 2.x tensor-op epilogue thread map (``DefaultThreadMapTensorOp`` ->
  ``OutputTileOptimalThreadMap``) must cover a warp's 32 lanes exactly; with ``block_n = 16`` it
  does not, and such tiles compile, run, and return values 100-170x off (digest 3.1 and 6.2.1:
  a 128x16 tile reached production and produced empty transcripts);
- shared memory per CTA within the arch's opt-in limit (227 KiB on sm90, 163 KiB on sm80,
  99 KiB on sm86/sm89);
- Hopper tile N a multiple of 16: the TMA epilogue's automatic tile is gcd(32, N) columns and
  an 8-column one fails CUTLASS's "Stride Divisibility Condition" (128x72 did, in the compile
  survey of every config);
- Hopper accumulators per consumer thread low enough not to spill (a 128x256 tile held by one
  warpgroup needs 256 registers for accumulators alone);
- an explicit Hopper epilogue subtile has CUTLASS's row count (64, or 128 for the
  cooperative schedule: a ``static_assert`` otherwise) and a column count that is a multiple
  of 32 dividing the tile's N (64x80 failed CUTLASS's "Divisibility condition" in the compile
  survey; 64x96 built);
- Hopper clusters of at most 4 CTAs (the swapped 4x1 ones share one tile of A among the four
  CTAs along N, as cuBLAS's 8-CTA clusters do at M ~ 2152);
- split-K no larger than the K tiles it splits; 16-byte alignment (N and K multiples of 8).
"""

from __future__ import annotations

from oasr_core.kit import lanes
from oasr_core.types import Config, Problem

from oasr_gemm.config_space import (
    BMM_OPS,
    GROUP_OP,
    LANE_SM80,
    LANE_SM90,
    LOG_SOFTMAX_OP,
    RESIDUAL_OP,
    has_bmm,
    has_group,
)

SMEM_LIMIT = lanes.SMEM_LIMIT
SM80_ARCHES = lanes.CUTLASS2_ARCHES
SM80_DEFAULT_ON = lanes.CUTLASS2_DEFAULT_ON
SM90_ARCHES = lanes.CUTLASS3_ARCHES
ALIGN = 8
"""Elements per 16-byte access for fp16/bf16: N and K must be multiples of it."""
MAX_PARALLEL_WORKSPACE = 256 << 20
"""Largest fp32 partials buffer a parallel split-K config may ask for (bytes)."""
_SM90_EPILOGUE_SMEM = 8192
LOG_SOFTMAX_MAX_N = 1 << 24
"""The longest row the row log-softmax of op ``gemm_log_softmax`` takes (its ``kMaxN``;
:data:`oasr_gemm.log_softmax.MAX_N`)."""


def epilogue_covers_warp(block_n: int, warps_m: int, warps_n: int, partitions_k: int,
                         warp_m: int, elements_per_access: int, element_bits: int) -> bool:
    """Whether CUTLASS 2.x's ``OutputTileOptimalThreadMap`` maps a warp onto whole rows.

    A transcription of ``DefaultThreadMapTensorOp`` (Shape = (N, 8 rows, warps_m groups),
    Count = warp_m / 8) and ``RowArrangement``: the access width times the access rows must be
    the 32 lanes of a warp, and every iteration count must be at least one (else the kernel
    compiles with ``static_assert`` failures or, worse, silently drops columns).
    """
    rows = 8
    warp_count = warps_m * warps_n * partitions_k
    if warp_m % rows or block_n % elements_per_access:
        return False
    remaining_for_rows = warp_count // warps_m if warps_m <= warp_count else 1
    shape_width = block_n // elements_per_access
    if rows <= remaining_for_rows:
        return shape_width // 32 >= 1 and shape_width % 32 == 0
    shape_row = rows // remaining_for_rows
    target_width = 256 // (elements_per_access * element_bits // 8)
    target_rows = 32 // target_width
    if target_rows > shape_row:
        width, access_rows = 32 // shape_row, shape_row
    else:
        width = min(shape_width, 32, target_width)
        access_rows = min(rows, 32 // width)
    return (width * access_rows == 32 and shape_row // access_rows >= 1
            and shape_width // width >= 1 and width * elements_per_access <= block_n)


def sm80_smem(config: Config) -> int:
    """Shared memory of a 2.x config's main loop: stages x (A tile + B tile) in 16-bit."""
    bm, bn, bk = config.params["tile"]
    return config.params["stages"] * (bm + bn) * bk * 2


def sm90_smem(config: Config) -> int:
    """Lower bound of a 3.x config's shared memory (its fixed stage count, or two stages),
    with the epilogue's double-buffered subtile (an explicit one's size, else 8 KiB)."""
    tm, tn, tk = config.params["tile"]
    stages = config.params["stages"] or 2
    epilogue = config.params.get("epilogue")
    epi_bytes = 2 * epilogue[0] * epilogue[1] * 2 if epilogue else _SM90_EPILOGUE_SMEM
    return stages * (tm + tn) * tk * 2 + max(epi_bytes, _SM90_EPILOGUE_SMEM)


def _sm80_static(config: Config) -> bool:
    p = config.params
    (bm, bn, bk), (wm, wn, wk) = p["tile"], p["warp"]
    if bm % wm or bn % wn or bk % wk or wm % 16 or wn % 8 or wk % 16:
        return False
    warps_m, warps_n, parts_k = bm // wm, bn // wn, bk // wk
    if not 1 <= warps_m * warps_n * parts_k <= 8:
        return False
    if not epilogue_covers_warp(bn, warps_m, warps_n, parts_k, wm, 8, 16):
        return False
    if p["parallel_split_k"]:
        if p["split_k"] < 2 or p["stream_k"]:
            return False
        if not epilogue_covers_warp(bn, warps_m, warps_n, parts_k, wm, 4, 32):
            return False
    if p["stream_k"] and p["split_k"] != 1:
        return False
    if p["split_k"] > 1 and not p["parallel_split_k"] and (bm > 128 or bn > 256):
        return False
    if p["stages"] < 2:
        return False
    return sm80_smem(config) <= SMEM_LIMIT["sm90"]


def _sm90_static(config: Config) -> bool:
    tile = lanes.cutlass3_tile(config, max_cluster=4)
    if tile is None:
        return False
    accum_per_thread = tile.m * tile.n // (128 * tile.consumers)
    if accum_per_thread > (160 if tile.schedule == "ws" else 192):
        return False
    epilogue = config.params.get("epilogue")
    if epilogue:
        em, en = epilogue
        if em != 64 * tile.consumers or em > tile.m:
            return False
        if en % 32 or tile.n % en:
            return False
    return sm90_smem(config) <= SMEM_LIMIT["sm90"]


RULES = lanes.LaneRules(static={LANE_SM80: _sm80_static, LANE_SM90: _sm90_static},
                        arches={LANE_SM80: SM80_ARCHES, LANE_SM90: SM90_ARCHES},
                        smem={LANE_SM80: sm80_smem}, align=ALIGN)
"""The lanes' rules; ``is_feasible``, ``fits_arch`` and ``aligned`` are its methods."""
is_feasible = RULES.is_feasible
fits_arch = RULES.fits_arch
aligned = RULES.aligned


_BMM_OPS = frozenset(BMM_OPS.values())


def supports(config: Config, problem: Problem) -> bool:
    """Per-problem predicate: ``config`` can run ``problem`` (alignment, split vs K tiles;
    op ``gemm_residual`` only on the 3.x lane, whose epilogue reads the residual: the 2.x
    lane has no such kernel and its op calls are served by torch; op ``gemm_log_softmax``
    wherever a gemm with bias runs, with rows the row log-softmax takes: N a multiple of 8 up
    to :data:`oasr_gemm.log_softmax.MAX_N`; ops ``bmm_tn`` / ``bmm_nn`` on the split-free
    configs, the ones with batched units: :func:`oasr_gemm.config_space.has_bmm`; op
    ``group_gemm`` on the split-free configs of the 2.x lane, the ones with a grouped unit:
    :func:`oasr_gemm.config_space.has_group`)."""
    n, k, m = problem.dim("N"), problem.dim("K"), problem.m
    if not aligned(n, k) or m < 1:
        return False
    if problem.op in _BMM_OPS:
        return has_bmm(config)
    if problem.op == GROUP_OP:
        return has_group(config)
    if problem.op == RESIDUAL_OP and config.lane != LANE_SM90:
        return False
    if problem.op == LOG_SOFTMAX_OP and n > LOG_SOFTMAX_MAX_N:
        return False
    p = config.params
    split = p.get("split_k", 1)
    if split > 1:
        k_tiles = -(-k // p["tile"][2])
        if split > k_tiles:
            return False
        if p.get("parallel_split_k") and split * m * n * 4 > MAX_PARALLEL_WORKSPACE:
            return False
    return True


def cost_features(config: Config) -> dict[str, object]:
    """Cost-model features of a config: tile, warps or cluster, schedule, stages, split, smem."""
    p = config.params
    features: dict[str, object] = {
        "tile": list(p["tile"]), "stages": p["stages"], "split_k": p.get("split_k", 1),
        "stream_k": p.get("stream_k", False),
    }
    if config.lane == LANE_SM80:
        bm, bn, bk = p["tile"]
        wm, wn, wk = p["warp"]
        features.update(warps=(bm // wm) * (bn // wn) * (bk // wk), smem=sm80_smem(config),
                        parallel_split_k=p["parallel_split_k"], schedule="mma_sync")
    else:
        features.update(cluster=list(p["cluster"]), schedule=p["schedule"],
                        swap_ab=p["swap_ab"], smem=sm90_smem(config))
    return features
