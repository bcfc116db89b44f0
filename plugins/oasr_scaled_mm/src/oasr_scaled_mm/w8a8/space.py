"""What the config spaces of the W8A8 lanes share: how a config is named and what it holds,
which units and launchers it has per op, and the feasibility rules both formats' lanes
follow (one-byte operands: the same instruction shapes, shared-memory footprints and
16-byte rows).

A W8A8 family's ``config_space`` lists its lanes' tiles (its data) and builds each config with
:func:`mma_config` (CUTLASS 2.x, mma.sync) or :func:`wgmma_config` (CUTLASS 3.x, TMA +
wgmma), passing what its format adds (int8: ``stream_k``; fp8: ``fast_accum``) as ordered
``extra`` params and an id suffix; :func:`op_functions` gives its ``serves`` / ``unit_name`` /
``units_of`` and :func:`lane_spaces` its :class:`~oasr_core.kit.lanes.LaneSpaces`. Config ids
and params (their order included) are what tuning files hold: they are unchanged by where this
code lives. Importing this module imports no torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from oasr_core.kit import lanes, tiles
from oasr_core.kit.lanes import LaneSpaces
from oasr_core.types import Config, Problem

SM90_SCHEDULES = ("ws", "pingpong", "cooperative")
"""``ws``: non-persistent ``KernelTmaWarpSpecialized``; ``pingpong`` / ``cooperative``: the
persistent ``KernelTmaWarpSpecialized{Pingpong,Cooperative}`` kernels."""
SM90_TAG = {"ws": "ws", "pingpong": "pp", "cooperative": "co"}
"""The id prefix of each 3.x schedule."""
MMA_TILES = tiles.mma_tiles("""
    b64x64x128_w32x32x128_s5  b64x128x128_w32x64x128_s3  b128x64x128_w64x32x128_s3
    b128x128x64_w64x64x64_s5  b128x128x128_w64x64x128_s3
    b128x256x64_w64x64x64_s3  b256x128x64_w64x64x64_s3
""")
"""The data-parallel ``(tile, warp, stages)`` of both formats' 2.x lanes: CUTLASS's int8 sm80
list (warp counts 2x2, 2x4, 4x2), 128x128x128 with 3 stages instead of 4 so that it also fits
the 99 KiB of sm86/sm89. One-byte fp8 operands take the same K-32 instruction shape,
shared-memory footprint and warps."""
WGMMA_WS_TILES = ((64, 32), (64, 64), (64, 128), (128, 64), (128, 128))
"""(M, N) of both formats' non-persistent 3.x tiles (K 128), for small and middle M."""
WGMMA_PP_CLUSTERS = ((1, 1), (1, 2), (2, 1))
"""Clusters of both formats' persistent ping-pong 128x128x128 tile, for large M."""


def mma_config(lane: str, tile: tuple[int, int, int], warp: tuple[int, int, int], stages: int,
               *, extra: Mapping[str, Any], suffix: str = "") -> Config:
    """A CUTLASS 2.x config ``b{tile}_w{warp}_s{stages}{suffix}``: params ``tile``, ``warp``,
    ``stages``, then ``extra``, ``schedule`` (``mma_sync``) and ``unit``."""
    cid = tiles.mma_name(tile, warp, stages) + suffix
    return Config(id=cid, lane=lane, params={
        "tile": list(tile), "warp": list(warp), "stages": stages, **extra,
        "schedule": "mma_sync", "unit": cid,
    })


def wgmma_config(lane: str, tile: tuple[int, int, int], cluster: tuple[int, int],
                 schedule: str, *, stages: int, extra: Mapping[str, Any], tag: str | None = None,
                 suffix: str = "") -> Config:
    """A CUTLASS 3.x config ``{tag}_{tile}_c{cluster}[_s{stages}]{suffix}`` (``tag``: the
    schedule's, :data:`SM90_TAG`, unless given; ``stages=0``: as many as shared memory allows
    after the epilogue): params ``tile``, ``cluster``, ``schedule``, ``stages``, then ``extra``
    and ``unit``."""
    if schedule not in SM90_SCHEDULES:
        raise ValueError(f"schedule {schedule!r} is not one of {SM90_SCHEDULES}")
    cid = tiles.wgmma_name(tag or SM90_TAG[schedule], tile, cluster, stages) + suffix
    return Config(id=cid, lane=lane, params={
        "tile": list(tile), "cluster": list(cluster), "schedule": schedule, "stages": stages,
        **extra, "unit": cid,
    })


def mma_space(make: Callable[..., Config], twins: str, **flag: bool) -> Iterator[Config]:
    """A 2.x lane's list: every :data:`MMA_TILES` tile as ``make`` builds it by default, then
    the ``twins`` (tile names, :func:`oasr_core.kit.tiles.mma_tiles`) with the format's
    ``flag`` set the other way (int8: ``stream_k=True``; fp8: ``fast_accum=False``)."""
    for tile, warp, stages in MMA_TILES:
        yield make(tile, warp, stages)
    for tile, warp, stages in tiles.mma_tiles(twins):
        yield make(tile, warp, stages, **flag)


def wgmma_space(make: Callable[..., Config]) -> Iterator[Config]:
    """What both formats' 3.x lanes list first: the non-persistent tiles
    (:data:`WGMMA_WS_TILES`, K 128) and the ping-pong 128x128x128 at each of
    :data:`WGMMA_PP_CLUSTERS`, as ``make(tile, cluster, schedule)`` builds them."""
    for tm, tn in WGMMA_WS_TILES:
        yield make((tm, tn, 128))
    for cluster in WGMMA_PP_CLUSTERS:
        yield make((128, 128, 128), cluster, "pingpong")


def space_names(family: str, package: str, ops: tuple[str, str],
                lanes: Mapping[str, Callable[[], Iterable[Config]]]) -> dict[str, Any]:
    """What a family's ``config_space`` names from its lanes' lists: ``SPACES``
    (:func:`lane_spaces`), its ``full_space`` / ``space`` / ``config``, and :func:`op_functions`'
    ``serves`` / ``unit_name`` / ``units_of``."""
    spaces = lane_spaces(family, package, lanes)
    return {"SPACES": spaces, "full_space": spaces.full, "space": spaces.space,
            "config": spaces.config, **op_functions(ops)}


def lane_spaces(family: str, package: str,
                lanes: Mapping[str, Callable[[], Iterable[Config]]]) -> LaneSpaces:
    """The lanes' listed and feasible spaces (cached once per process), feasibility from
    ``<package>.feasibility.is_feasible``, imported when first needed."""

    def is_feasible() -> Any:
        return importlib.import_module(f"{package}.feasibility").is_feasible

    return LaneSpaces(family, dict(lanes), is_feasible)


def op_functions(ops: tuple[str, str]) -> dict[str, Callable[..., Any]]:
    """``serves(config, op)`` (whether ``config`` has a launcher for ``op``: a Stream-K config
    has no quantizing one), ``unit_name(config, op)`` (the translation unit compiling
    ``config`` for ``op``: ``<unit>`` or ``<unit>_quant``) and ``units_of(config)`` (``(op,
    unit name)`` of every unit behind ``config``) for a family's two ops ``(mm, quant)``."""
    op_mm, op_quant = ops

    def check(op: str) -> None:
        if op not in ops:
            raise ValueError(f"op {op!r} is not one of {ops}")

    def serves(config: Config, op: str) -> bool:
        check(op)
        return op == op_mm or not config.params.get("stream_k", False)

    def unit_name(config: Config, op: str) -> str:
        check(op)
        return config.params["unit"] + ("_quant" if op == op_quant else "")

    def units_of(config: Config) -> tuple[tuple[str, str], ...]:
        return tuple((op, unit_name(config, op)) for op in ops if serves(config, op))

    return {"serves": serves, "unit_name": unit_name, "units_of": units_of}


MMA_SHAPE = (16, 8, 32)
"""The 2.x one-byte tensor-core instruction (int8 on sm80, e4m3 on sm89: m16n8k32)."""
SM90_MAX_ACCUMULATORS = 128
"""32-bit accumulators per consumer thread a 3.x config may hold (beyond this, spills)."""
SM90_EPILOGUE_SMEM = 8192
ALIGN = 16
"""N and K must be multiples of this many one-byte elements (16 bytes)."""


def mma_smem(config: Config) -> int:
    """Shared memory of a 2.x config's main loop: stages x (A tile + B tile), one byte each."""
    bm, bn, bk = config.params["tile"]
    return config.params["stages"] * (bm + bn) * bk


def wgmma_smem(config: Config) -> int:
    """Lower bound of a 3.x config's shared memory (its fixed stage count, or two stages)."""
    tm, tn, tk = config.params["tile"]
    return (config.params["stages"] or 2) * (tm + tn) * tk + SM90_EPILOGUE_SMEM


def mma_static(config: Config, arches: Iterable[str]) -> bool:
    """A 2.x config's static rule: the warp tile divides the CTA tile into 1..8 warps of whole
    m16n8k32 instructions with the whole K tile per warp (the visitor epilogue takes one K
    partition), CTA tile N a multiple of 32 (the 4-wide fp32 epilogue thread map), at least 3
    stages, shared memory within the largest limit of ``arches``."""
    p = config.params
    (bm, bn, bk), (wm, wn, wk) = p["tile"], p["warp"]
    im, in_, ik = MMA_SHAPE
    if bm % wm or bn % wn or wk != bk or wm % im or wn % in_ or wk % ik:
        return False
    if not 1 <= (bm // wm) * (bn // wn) <= 8 or bn % 32 or p["stages"] < 3:
        return False
    return mma_smem(config) <= max(lanes.SMEM_LIMIT[a] for a in arches)


def wgmma_static(config: Config, *, k_tile: int | None = None) -> bool:
    """A 3.x config's static rule: the rules every wgmma lane shares
    (:func:`oasr_core.kit.lanes.cutlass3_tile`, clusters of at most 2 CTAs), K tile ``k_tile``
    when given, at most :data:`SM90_MAX_ACCUMULATORS` per consumer thread, shared memory
    within the sm90 limit."""
    tile = lanes.cutlass3_tile(config, max_cluster=2)
    return (tile is not None and (k_tile is None or tile.k == k_tile)
            and tile.m * tile.n // (128 * tile.consumers) <= SM90_MAX_ACCUMULATORS
            and wgmma_smem(config) <= lanes.SMEM_LIMIT["sm90"])


def supports_with(aligned: Callable[[int, int], bool], op_quant: str
                  ) -> Callable[[Config, Problem], bool]:
    """``Lane.supports`` of a W8A8 lane: N and K ``aligned``, M >= 1, and a Stream-K config
    only where K has at least two K tiles to split and never for ``op_quant`` (there is no
    quantizing Stream-K launcher)."""

    def supports(config: Config, problem: Problem) -> bool:
        n, k = problem.dim("N"), problem.dim("K")
        if not aligned(n, k) or problem.m < 1:
            return False
        if config.params.get("stream_k", False):
            if problem.op == op_quant:
                return False
            if -(-k // config.params["tile"][2]) < 2:
                return False
        return True

    supports.__doc__ = supports_with.__doc__
    return supports
