"""The config spaces of the scaled_mm_fp8 family's two lanes, as data.

Every config is an :class:`oasr_core.types.Config` whose ``params`` name each kernel parameter
explicitly (tile, warp or cluster, stages, schedule, ``fast_accum``), so a tuning file reads
without this module. A config compiles into one translation unit per op (:func:`units_of`):
``<id>`` for ``scaled_mm_fp8`` (bf16 and fp16 outputs) and ``<id>_quant`` for
``scaled_mm_fp8_quant`` (e4m3 output). Neither lane has Stream-K configs.

sm89_fp8_mma (CUTLASS 2.x, Ada's fp8 mma.sync m16n8k32; runs on sm89 and sm90): the seven
data-parallel tiles the int8 lane uses (one-byte operands take the same K-32 instruction
shape, shared-memory footprint and warp arrangements), with fast accumulation, plus two staged
(``OpMultiplyAdd``) twins for deep K.

sm90_fp8_wgmma (CUTLASS 3.x, TMA + wgmma; K tile 128 = one 128-byte swizzle row of fp8): the
non-persistent kernel at five tiles for small and middle M, the persistent ping-pong 128x128
with three clusters and 128x64, and the cooperative 128x128 / 256x128 / 128x256 (the last two
also with 2x1 clusters) for large M, all with the ``FP8FastAccum`` main loops (the only
competitive ones on Hopper), plus the promoted (non-fast) ping-pong and cooperative 128x128
for deep K. 9 + 16 configs: a whole space compiles in a few minutes on 16 cores.
"""

from __future__ import annotations

from oasr_core.types import Config
from oasr_scaled_mm.w8a8.space import SM90_SCHEDULES as SM90_SCHEDULES
from oasr_scaled_mm.w8a8.space import mma_config, mma_space, space_names, wgmma_config, wgmma_space

FAMILY, DTYPE = "scaled_mm_fp8", "float8_e4m3fn"
"""The family, and the operand dtype as the census spells it (signature keys carry none)."""
OPS = OP_MM, OP_QUANT = ("scaled_mm_fp8", "scaled_mm_fp8_quant")
LANES = LANE_SM89, LANE_SM90 = ("sm89_fp8_mma", "sm90_fp8_wgmma")
DEFAULTS = {LANE_SM89: "b128x128x64_w64x64x64_s5_fa", LANE_SM90: "ws_64x128x128_c1x1_fa"}
SM89_DEFAULT, SM90_DEFAULT = DEFAULTS.values()


def sm89_config(tile: tuple[int, int, int], warp: tuple[int, int, int], stages: int, *,
                fast_accum: bool = True) -> Config:
    """A CUTLASS 2.x fp8 config: ``b{tile}_w{warp}_s{stages}_{fa,st}``."""
    return mma_config(LANE_SM89, tile, warp, stages, extra={"fast_accum": fast_accum},
                      suffix="_fa" if fast_accum else "_st")


def sm90_config(tile: tuple[int, int, int], cluster: tuple[int, int] = (1, 1),
                schedule: str = "ws", *, fast_accum: bool = True, stages: int = 0) -> Config:
    """A CUTLASS 3.x fp8 config: ``{ws,pp,co}_{tile}_c{cluster}[_fa]`` (``stages=0``: as many
    as shared memory allows after the epilogue)."""
    return wgmma_config(LANE_SM90, tile, cluster, schedule, stages=stages,
                        extra={"stream_k": False, "fast_accum": fast_accum},
                        suffix="_fa" if fast_accum else "")


def _sm90_all():
    yield from wgmma_space(sm90_config)
    yield sm90_config((128, 64, 128), (1, 1), "pingpong")
    for tm, tn in ((128, 128), (256, 128), (128, 256)):
        yield sm90_config((tm, tn, 128), (1, 1), "cooperative")
    for tm, tn in ((256, 128), (128, 256)):
        yield sm90_config((tm, tn, 128), (2, 1), "cooperative")
    for schedule in ("pingpong", "cooperative"):
        yield sm90_config((128, 128, 128), (1, 1), schedule, fast_accum=False)


globals().update(space_names(FAMILY, "oasr_scaled_mm_fp8", OPS, {
    LANE_SM89: lambda: mma_space(sm89_config, """
        b128x128x64_w64x64x64_s5  b128x128x128_w64x64x128_s3""", fast_accum=False),
    LANE_SM90: _sm90_all}))
"""SPACES (the lanes' listed and feasible spaces, cached once per process), full_space, space,
config; serves (every fp8 config has both ops), unit_name, units_of."""
