"""The config spaces of the scaled_mm family's two lanes, as data.

Every config is an :class:`oasr_core.types.Config` whose ``params`` name each kernel
parameter explicitly (tile, warp or cluster, stages, schedule, stream_k), so a tuning file is
readable without this module. A config compiles into one translation unit per op it serves
(:func:`units_of`): ``<id>`` for ``scaled_mm`` (fp16 and bf16 outputs) and ``<id>_quant`` for
``scaled_mm_quant`` (int8 output); Stream-K configs have no quantizing unit.

sm80_int8_mma (CUTLASS 2.x mma.sync m16n8k32): seven data-parallel tiles with the warp
arrangements and stage counts CUTLASS's own generator lists for int8 on sm80
(``GenerateSM80_TensorOp_16832_TN``; 128x128x128 with 3 stages instead of 4 so that it also
fits the 99 KiB of sm86/sm89), and Stream-K on two of them.

sm90_int8_wgmma (CUTLASS 3.x, TMA + wgmma): what won the H200 quantized study (GPU.md) --
the non-persistent ``KernelTmaWarpSpecialized`` kernel at 64x32 / 64x64 (K tile 128) for small
M, 64x128 / 128x64 / 128x128 between M ~ 416 and 2152, 128x128 ping-pong with 1x1 / 1x2 / 2x1
clusters above -- plus the cooperative 128x128 and 256x128 tiles and one Stream-K tile for deep K,
which only a measured entry can pick.
"""

from __future__ import annotations

from collections.abc import Iterable

from oasr_core.types import Config

from oasr_scaled_mm.w8a8.space import (
    MMA_TILES,
    WGMMA_PP_CLUSTERS,
    WGMMA_WS_TILES,
    lane_spaces,
    mma_config,
    op_functions,
    wgmma_config,
)
from oasr_scaled_mm.w8a8.space import SM90_SCHEDULES as SM90_SCHEDULES

FAMILY = "scaled_mm"
OPS = ("scaled_mm", "scaled_mm_quant")
OP_MM, OP_QUANT = OPS
LANE_SM80 = "sm80_int8_mma"
LANE_SM90 = "sm90_int8_wgmma"
LANES = (LANE_SM80, LANE_SM90)

SM80_DEFAULT = "b128x128x64_w64x64x64_s5"
SM90_DEFAULT = "ws_64x128x128_c1x1"
"""A middle tile: the 64x128 non-persistent kernel won M ~ 416-2152 in the H200 study."""
DEFAULTS = {LANE_SM80: SM80_DEFAULT, LANE_SM90: SM90_DEFAULT}


def sm80_config(tile: tuple[int, int, int], warp: tuple[int, int, int], stages: int, *,
                stream_k: bool = False) -> Config:
    """A CUTLASS 2.x int8 config: ``b{tile}_w{warp}_s{stages}`` (``_sk`` for Stream-K)."""
    return mma_config(LANE_SM80, tile, warp, stages, extra={"stream_k": stream_k},
                      suffix="_sk" if stream_k else "")


def sm90_config(tile: tuple[int, int, int], cluster: tuple[int, int] = (1, 1),
                schedule: str = "ws", *, stages: int = 0, stream_k: bool = False) -> Config:
    """A CUTLASS 3.x int8 config: ``{ws,pp,co,sk}_{tile}_c{cluster}``.

    ``stages=0`` lets the builder fit as many stages as shared memory allows after the
    epilogue; ``stream_k`` pairs the cooperative kernel with ``StreamKScheduler``.
    """
    return wgmma_config(LANE_SM90, tile, cluster, schedule, stages=stages,
                        extra={"stream_k": stream_k}, tag="sk" if stream_k else None)


_SM80_STREAM_K = (
    ((64, 64, 128), (32, 32, 128), 5),
    ((128, 128, 64), (64, 64, 64), 5),
)


def _sm80_all() -> Iterable[Config]:
    for tile, warp, stages in MMA_TILES:
        yield sm80_config(tile, warp, stages)
    for tile, warp, stages in _SM80_STREAM_K:
        yield sm80_config(tile, warp, stages, stream_k=True)


def _sm90_all() -> Iterable[Config]:
    for tm, tn in WGMMA_WS_TILES:
        yield sm90_config((tm, tn, 128))
    for cluster in WGMMA_PP_CLUSTERS:
        yield sm90_config((128, 128, 128), cluster, "pingpong")
    for tm in (128, 256):
        yield sm90_config((tm, 128, 128), (1, 1), "cooperative")
    yield sm90_config((128, 128, 128), (1, 1), "cooperative", stream_k=True)


SPACES = lane_spaces(FAMILY, "oasr_scaled_mm", {LANE_SM80: _sm80_all, LANE_SM90: _sm90_all})
"""The lanes' listed and feasible spaces (cached once per process)."""
full_space = SPACES.full
space = SPACES.space
config = SPACES.config
globals().update(op_functions(OPS))  # serves (no quantizing Stream-K), unit_name, units_of
