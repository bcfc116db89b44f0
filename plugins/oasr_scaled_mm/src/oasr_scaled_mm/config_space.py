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

from oasr_core.types import Config

from oasr_scaled_mm.w8a8.space import SM90_SCHEDULES as SM90_SCHEDULES
from oasr_scaled_mm.w8a8.space import mma_config, mma_space, space_names, wgmma_config, wgmma_space

FAMILY = "scaled_mm"
OPS = OP_MM, OP_QUANT = ("scaled_mm", "scaled_mm_quant")
LANES = LANE_SM80, LANE_SM90 = ("sm80_int8_mma", "sm90_int8_wgmma")
SM80_DEFAULT, SM90_DEFAULT = "b128x128x64_w64x64x64_s5", "ws_64x128x128_c1x1"
"""The lanes' defaults; sm90's a middle tile: the 64x128 non-persistent kernel won M ~
416-2152 in the H200 study."""
DEFAULTS = dict(zip(LANES, (SM80_DEFAULT, SM90_DEFAULT), strict=True))


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


def _sm90_all():
    yield from wgmma_space(sm90_config)
    for tm in (128, 256):
        yield sm90_config((tm, 128, 128), (1, 1), "cooperative")
    yield sm90_config((128, 128, 128), (1, 1), "cooperative", stream_k=True)


globals().update(space_names(FAMILY, "oasr_scaled_mm", OPS, {
    LANE_SM80: lambda: mma_space(sm80_config, """
        b64x64x128_w32x32x128_s5  b128x128x64_w64x64x64_s5""", stream_k=True),
    LANE_SM90: _sm90_all}))
"""SPACES (the lanes' listed and feasible spaces, cached once per process), full_space, space,
config; serves (no quantizing Stream-K), unit_name, units_of."""
