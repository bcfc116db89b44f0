"""The config spaces of the gemm family's two lanes, as data.

Every config is an :class:`oasr_core.types.Config` whose ``params`` name each kernel parameter
explicitly, so a tuning file is readable without this module and a config can be rebuilt from
its JSON. ``params["unit"]`` names the compiled translation unit: configs that differ only in
a run-time argument (the 2.x lane's split-K factor) share one unit and one binary.

The lists are written out rather than generated from a cross product: each entry is here
because it won somewhere (GPU.md: non-persistent 64x32x64 and 64x64x128 at small M, 128x128x64
ping-pong at M >= 4096; the H200 run in benchmarks/results/h200_gemm.md: swapped 64x16/64x32
tiles up to 1.15x torch at M <= 512, ping-pong 128x96 and 128x192 at M 2152..32768) or probes a
region that is still open (M ~ 1000-2152: N widths of 80-160, non-persistent kernels with
fewer stages for two or three CTAs per SM, 1x2 and 2x1 clusters, deeper K tiles).
:mod:`oasr_gemm.feasibility` filters what does not fit or would be wrong.
"""

from __future__ import annotations

from collections.abc import Iterable

from oasr_core.kit.lanes import LaneSpaces
from oasr_core.types import Config

FAMILY = "gemm"
LANE_SM80 = "sm80_mma"
LANE_SM90 = "sm90_wgmma"
RESIDUAL_OP = "gemm_residual"
"""The fused-residual op (``out = residual + alpha * (a @ w.T + bias)``): 3.x configs only."""
LOG_SOFTMAX_OP = "gemm_log_softmax"
"""The CTC head (``out = log_softmax(a @ w.T + bias, dim=-1)``): a config's GEMM with bias
writing the logits, then the row log-softmax kernel over them (:mod:`oasr_gemm.log_softmax`).
Every config a gemm with bias takes serves it: the GEMM half is that very launch."""
BMM_LAYOUTS = ("tn", "nn")
"""Layouts of op ``bmm``'s second operand: ``tn``, b ``[L, N, K]`` row-major read transposed
(``q @ k.transpose(-1, -2)``; each batch is the gemm's W), and ``nn``, b ``[L, K, N]``
row-major (``probs @ v``)."""
BMM_OPS = {"tn": "bmm_tn", "nn": "bmm_nn"}
"""The op ``bmm`` is keyed under, per layout: the layout is part of the signature (the kernels
differ), the family's dims (N, K) are the rest, and M is the rows of A across the batch."""
GROUP_OP = "group_gemm"
"""A group of linears of equal (N, K) in one launch (``[F.linear(x, w, b) for ...]``), keyed
by (N, K) with M the rows summed over the group."""
OPS = ("gemm", "gemm_activation", RESIDUAL_OP, LOG_SOFTMAX_OP, *BMM_OPS.values(), GROUP_OP)
"""The family's ops, each keyed separately in the tuning tiers."""

SM90_SCHEDULES = ("ws", "pingpong", "cooperative")
"""``ws``: non-persistent ``KernelTmaWarpSpecialized``; ``pingpong`` / ``cooperative``: the
persistent ``KernelTmaWarpSpecialized{Pingpong,Cooperative}`` kernels."""
_SM90_TAG = {"ws": "ws", "pingpong": "pp", "cooperative": "co"}

SM80_DEFAULT = "b128x128x64_w64x64x64_s3"
SM90_DEFAULT = "ws_64x128x64_c1x1_s4"
"""The best single sm90 config measured on an H200 over 98 shapes (the first screening, fp16):
geomean 0.72x torch and never below 0.59x, where the 128x128x64 ping-pong tile that wins at
M >= 8192 falls to 0.35x at small M. With the plain epilogue (2026-11-29,
benchmarks/results/h200_gemm_nopdl.jsonl): 0.84x, never below 0.63x."""


def has_bmm(config: Config) -> bool:
    """Whether ``config`` has batched units (op ``bmm``): the split-free configs of either
    lane, no split-K (serial or parallel) and no Stream-K.

    The 2.x batched mode takes the grid's z index for the batch, the index serial and parallel
    split-K give to K partitions, and Stream-K splits K as well. At the batched shapes models
    run (L = batch x heads of attention, 32 and more) the batch alone gives the grid enough
    CTAs, so a K split buys nothing there; the original tuner's bmm candidates were these
    configs too."""
    p = config.params
    return p.get("split_k", 1) == 1 and not p.get("stream_k") and not p.get("parallel_split_k")


def has_group(config: Config) -> bool:
    """Whether ``config`` has a grouped unit (op ``group_gemm``): the split-free configs of
    the 2.x lane (CUTLASS 2.x ``GemmGrouped``, which runs on sm80..sm90). The 3.x lane has no
    grouped kernel (a ptr-array one is not built)."""
    return config.lane == LANE_SM80 and has_bmm(config)


def sm80_config(tile: tuple[int, int, int], warp: tuple[int, int, int], stages: int, *,
                split_k: int = 1, stream_k: bool = False, parallel: bool = False) -> Config:
    """A CUTLASS 2.x ``GemmUniversal`` config.

    ``split_k > 1`` without ``parallel`` is serial split-K (same binary as ``split_k=1``);
    with ``parallel`` it is the fp32-partials-plus-reduction form; ``stream_k`` uses
    ``ThreadblockSwizzleStreamK``.
    """
    bm, bn, bk = tile
    wm, wn, wk = warp
    unit = f"b{bm}x{bn}x{bk}_w{wm}x{wn}x{wk}_s{stages}"
    if stream_k:
        unit += "_sk"
    elif parallel:
        unit += "_pk"
    cid = unit
    if parallel:
        cid = f"{unit}{split_k}"
    elif split_k > 1:
        cid = f"{unit}_spk{split_k}"
    return Config(id=cid, lane=LANE_SM80, params={
        "tile": [bm, bn, bk], "warp": [wm, wn, wk], "stages": stages, "split_k": split_k,
        "stream_k": stream_k, "parallel_split_k": parallel, "unit": unit,
    })


def sm90_config(tile: tuple[int, int, int], cluster: tuple[int, int] = (1, 1),
                schedule: str = "ws", *, stages: int = 0, stream_k: bool = False,
                swap_ab: bool = False, epilogue: tuple[int, int] | None = None) -> Config:
    """A CUTLASS 3.x CollectiveBuilder config.

    ``stages=0`` lets the builder fit as many stages as shared memory allows after the
    epilogue (``StageCountAutoCarveout``); a fixed count leaves room for more CTAs per SM.
    ``stream_k`` pairs the cooperative kernel with ``StreamKScheduler``. ``swap_ab`` computes
    ``D^T = W A^T``: the tile's N then runs along M. ``epilogue`` is the epilogue subtile
    ``(rows, cols)`` stored per round (None: CUTLASS's automatic 64x32, 128x32 when
    cooperative); wider subtiles make fewer store rounds, which matters when K is short and
    the epilogue is a large share of a tile's time.
    """
    if schedule not in SM90_SCHEDULES:
        raise ValueError(f"schedule {schedule!r} is not one of {SM90_SCHEDULES}")
    tm, tn, tk = tile
    cm, cn = cluster
    tag = "sk" if stream_k else _SM90_TAG[schedule]
    cid = f"{tag}_{tm}x{tn}x{tk}_c{cm}x{cn}"
    if stages:
        cid += f"_s{stages}"
    if swap_ab:
        cid += "_swap"
    if epilogue:
        cid += f"_e{epilogue[0]}x{epilogue[1]}"
    params = {
        "tile": [tm, tn, tk], "cluster": [cm, cn], "schedule": schedule, "stages": stages,
        "stream_k": stream_k, "swap_ab": swap_ab, "split_k": 1, "unit": cid,
    }
    if epilogue:
        params["epilogue"] = [int(epilogue[0]), int(epilogue[1])]
    return Config(id=cid, lane=LANE_SM90, params=params)


_SM80_TILES = (
    # (block, warp): thin-M tiles for decode-sized M, then the classic CUTLASS shapes.
    ((16, 64, 64), (16, 32, 64)),
    ((16, 128, 64), (16, 32, 64)),
    ((16, 256, 64), (16, 64, 64)),
    ((32, 64, 64), (16, 32, 64)),
    ((32, 128, 64), (32, 32, 64)),
    ((32, 256, 64), (32, 64, 64)),
    ((64, 32, 64), (32, 32, 64)),
    ((64, 64, 64), (32, 32, 64)),
    ((64, 64, 32), (32, 32, 32)),
    ((64, 128, 64), (32, 64, 64)),
    ((64, 128, 64), (64, 32, 64)),
    ((64, 256, 64), (64, 64, 64)),
    ((128, 32, 64), (32, 32, 64)),
    ((128, 64, 64), (64, 32, 64)),
    ((128, 128, 64), (64, 64, 64)),
    ((128, 128, 64), (64, 32, 64)),
    ((128, 128, 32), (64, 64, 32)),
    ((128, 256, 32), (64, 64, 32)),
    ((128, 256, 64), (64, 64, 64)),
    ((256, 128, 32), (64, 64, 32)),
    ((256, 128, 64), (64, 64, 64)),
    # block_n = 16 on purpose: the epilogue predicate must reject it (digest 3.1).
    ((128, 16, 64), (32, 16, 64)),
)
_SM80_STREAM_K = (
    ((16, 128, 64), (16, 32, 64)),
    ((32, 128, 64), (32, 32, 64)),
    ((64, 128, 64), (32, 64, 64)),
    ((128, 128, 64), (64, 64, 64)),
    ((128, 256, 32), (64, 64, 32)),
)
_SM80_PARALLEL = (
    ((16, 64, 64), (16, 32, 64)),
    ((32, 64, 64), (16, 32, 64)),
    ((64, 64, 64), (32, 32, 64)),
    ((16, 128, 64), (16, 32, 64)),
    ((32, 128, 64), (32, 32, 64)),
)


def _sm80_all() -> Iterable[Config]:
    for tile, warp in _SM80_TILES:
        for stages in (3, 4):
            yield sm80_config(tile, warp, stages)
        splits = (2, 4, 8) if tile[0] <= 64 else (2, 4)
        for split in splits:
            yield sm80_config(tile, warp, 3, split_k=split)
    for tile, warp in _SM80_STREAM_K:
        yield sm80_config(tile, warp, 3, stream_k=True)
    for tile, warp in _SM80_PARALLEL:
        for split in (2, 4, 8):
            yield sm80_config(tile, warp, 3, split_k=split, parallel=True)


def _sm90_all() -> Iterable[Config]:
    ws_k64 = [(64, n) for n in (16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256)]
    ws_k64 += [(128, n) for n in (16, 32, 48, 64, 80, 96, 112, 128, 144, 160)]
    for tm, tn in ws_k64:
        yield sm90_config((tm, tn, 64))
    for tm, tn in ((64, 16), (64, 32), (64, 64), (64, 96), (64, 128), (128, 32), (128, 64),
                   (128, 128)):
        yield sm90_config((tm, tn, 128))
    for tile, stages in (((64, 32, 64), 4), ((64, 64, 64), 4), ((64, 96, 64), 4),
                         ((64, 128, 64), 4), ((128, 64, 64), 4), ((128, 80, 64), 3),
                         ((128, 96, 64), 3), ((64, 96, 64), 3), ((64, 128, 64), 3)):
        yield sm90_config(tile, stages=stages)
    for tile in ((64, 128, 64), (128, 64, 64), (128, 96, 64), (128, 128, 64)):
        yield sm90_config(tile, (2, 1))
    for tn in (64, 80, 96, 112, 128, 144, 160, 192):
        yield sm90_config((128, tn, 64), schedule="pingpong")
    for cluster in ((1, 2), (2, 1)):
        yield sm90_config((128, 128, 64), cluster, "pingpong")
        yield sm90_config((128, 96, 64), cluster, "pingpong")
    for tile in ((64, 64, 64), (64, 128, 64), (64, 256, 64), (128, 128, 128), (128, 96, 128)):
        yield sm90_config(tile, schedule="pingpong")
    yield sm90_config((128, 128, 128), (1, 2), "pingpong")
    for tn in (80, 112):
        yield sm90_config((128, tn, 64), (1, 2), "pingpong")
    for tn in (64, 96, 128, 192, 256):
        yield sm90_config((128, tn, 64), schedule="cooperative")
    for tile, cluster in (((128, 128, 64), (1, 2)), ((128, 128, 64), (2, 1)),
                          ((256, 128, 64), (1, 1)), ((256, 128, 64), (2, 1)),
                          ((128, 256, 64), (1, 2)), ((128, 128, 128), (1, 1))):
        yield sm90_config(tile, cluster, "cooperative")
    for tile, cluster in (((128, 64, 64), (1, 1)), ((128, 128, 64), (1, 1)),
                          ((128, 256, 64), (1, 1)), ((128, 128, 64), (1, 2))):
        yield sm90_config(tile, cluster, "cooperative", stream_k=True)
    for tile in ((64, 16, 64), (64, 16, 128), (64, 32, 128), (128, 16, 128), (128, 32, 64)):
        yield sm90_config(tile, swap_ab=True)
    yield sm90_config((128, 32, 64), schedule="pingpong", swap_ab=True)
    yield from _sm90_short_k()


def _sm90_short_k() -> Iterable[Config]:
    """Configs for short K (256-512) and mid M (1000-8192), where cuBLAS won: a tile's main
    loop is only 4-8 K steps there, so the epilogue's store rounds and the CTAs per SM decide.

    Wider epilogue subtiles (64x64, 64x128; 128x64 when cooperative) on the tiles that won
    around there, and non-persistent kernels with 2-4 stages (K steps beyond that buy little
    at this K) so two to four CTAs share an SM and one's epilogue overlaps another's loads.
    """
    for tn, epis in ((128, ((64, 64), (64, 128))), (192, ((64, 64),)), (96, ((64, 96),))):
        for epi in epis:
            yield sm90_config((128, tn, 64), schedule="pingpong", epilogue=epi)
    for cluster in ((2, 1), (1, 2)):
        yield sm90_config((128, 128, 64), cluster, "pingpong", epilogue=(64, 64))
    for tile, cluster, epi in (((256, 128, 64), (1, 1), (128, 64)),
                               ((256, 128, 64), (1, 1), (128, 128)),
                               ((256, 128, 64), (2, 1), (128, 64)),
                               ((128, 128, 64), (1, 1), (128, 64)),
                               ((128, 256, 64), (1, 1), (128, 64))):
        yield sm90_config(tile, cluster, "cooperative", epilogue=epi)
    for tile, stages, epi in (((64, 64, 64), 4, (64, 64)), ((64, 128, 64), 4, (64, 64)),
                              ((64, 128, 64), 4, (64, 128)), ((64, 96, 64), 4, (64, 96)),
                              ((128, 64, 64), 4, (64, 64)), ((128, 96, 64), 3, (64, 96)),
                              ((128, 128, 64), 3, (64, 64)), ((128, 128, 64), 3, None),
                              ((128, 128, 64), 2, None), ((128, 112, 64), 3, None),
                              ((128, 64, 64), 3, None), ((64, 128, 64), 2, None),
                              ((128, 64, 64), 2, None), ((64, 64, 128), 3, None),
                              ((64, 96, 128), 2, None), ((64, 128, 128), 2, None),
                              ((128, 64, 128), 2, None)):
        yield sm90_config(tile, stages=stages, epilogue=epi)
    yield from _sm90_swapped_wide()


def _sm90_swapped_wide() -> Iterable[Config]:
    """Swapped tiles 128 wide along N and 80-192 along M, for M ~ 1000-8192.

    An unswapped tile is 64, 128 or 256 rows of M (the wgmma M granularity), so M = 2152 is
    17 rows of 128 and a one-wave grid is out of reach; swapped, M runs along the tile's N,
    which comes in steps of 16. cuBLAS does exactly this there on the H200 (Nsight Compute,
    benchmarks/results/h200_cublas_kernels.md): 128x72 tiles over (N=512, M=2152) = 120 CTAs,
    128x136 over (1024, 2152) = 128, 128x192 over (2048, 1500) = 128, always 384 threads (two
    consumer warpgroups) and clusters of 2 or 8.
    """
    for tn in (80, 96, 112, 144, 160, 192):
        yield sm90_config((128, tn, 64), schedule="cooperative", swap_ab=True)
    for tn in (80, 112, 144):
        yield sm90_config((128, tn, 64), (2, 1), "cooperative", swap_ab=True)
    for tn in (80, 96, 112, 144):
        yield sm90_config((128, tn, 64), schedule="pingpong", swap_ab=True)
    for tn in (80, 96, 112):
        yield sm90_config((128, tn, 64), swap_ab=True)
    for cluster in ((1, 1), (1, 2)):
        yield sm90_config((256, 128, 64), cluster, "cooperative", swap_ab=True)
    # Clusters along N (the kernel's M) multicast one tile of A to two or four CTAs: at
    # K = 512-2048 and N = 512 (four tiles of 128) that cuts A's L2 traffic by 2-4x. Measured
    # on the H200: within 3-8% of the best at N = 512, M = 2152, first nowhere yet.
    for tn, cluster in ((80, (2, 1)), (80, (4, 1)), (96, (4, 1))):
        yield sm90_config((128, tn, 64), cluster, swap_ab=True)
    yield sm90_config((128, 80, 64), (4, 1), "cooperative", swap_ab=True)


def _is_feasible():
    from oasr_gemm.feasibility import is_feasible

    return is_feasible


SPACES = LaneSpaces("gemm", {LANE_SM80: _sm80_all, LANE_SM90: _sm90_all}, _is_feasible)
"""The lanes' listed and feasible spaces (cached once per process)."""
full_space = SPACES.full
space = SPACES.space
config = SPACES.config


BASIS = {
    LANE_SM80: (
        "b16x64x64_w16x32x64_s3", "b32x64x64_w16x32x64_s3", "b64x64x64_w32x32x64_s3",
        "b64x128x64_w32x64x64_s3", "b128x64x64_w64x32x64_s3", "b64x128x64_w32x64x64_s3_sk",
        "b32x64x64_w16x32x64_s3_pk4",
    ),
    LANE_SM90: (
        "ws_64x16x128_c1x1_swap", "pp_128x128x64_c1x1", "ws_64x64x64_c1x1_s4",
        "ws_64x32x128_c1x1_swap", "ws_64x64x128_c1x1", "ws_128x96x64_c1x1_s3",
        "pp_128x192x64_c1x1", "pp_128x96x64_c1x1",
    ),
}
"""The coverage basis each lane's production module always links besides its default.

sm90: a greedy cover of the H200 screening data (98 shapes, 7 widths, M 16..32768): with the
default, these nine configs hold every shape but one within 5% of the best of the whole
space. sm80 (not yet measured): small tiles for small M, one Stream-K and one parallel
split-K unit."""

DEFAULTS = {LANE_SM80: SM80_DEFAULT, LANE_SM90: SM90_DEFAULT}


def units(configs: Iterable[Config]) -> tuple[str, ...]:
    """The distinct compile units behind ``configs``, in first-seen order."""
    return tuple(dict.fromkeys(c.params["unit"] for c in configs))
