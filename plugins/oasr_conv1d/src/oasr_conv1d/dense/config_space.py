"""The dense (implicit-GEMM) conv1d config spaces of the two lanes, as data.

Every config is an :class:`oasr_core.types.Config` whose ``params`` name each kernel parameter,
so a tuning file reads without this module and a config rebuilds from its JSON:

- ``cutlass``: 2 (``ImplicitGemmConvolution``, mma.sync, runs on sm80..sm90) or 3 (the Hopper
  ``ConvUniversal`` kernel, TMA + wgmma, sm90 only);
- ``tile`` (CTA M x N x K of the implicit GEMM, M = B * T_out, N = Cout, K = kernel * Cin),
  ``warp`` (2.x) or ``cluster`` and ``schedule`` (3.x), ``stages``;
- ``algorithm`` (2.x): ``optimized``, ``analytic`` or ``few_channels`` (see
  ``csrc/oasr_conv1d/dense/sm80.cuh``);
- ``align_in`` / ``align_out``: elements per vector access of x and the weight (Cin must be a
  multiple) and of the output and bias (Cout must be a multiple);
- ``unit``: the translation unit (one per config; it holds both dtypes and every activation).

The lists are written out, not a cross product: 16-byte tiles for the usual widths
(:data:`oasr_core.kit.implicit_gemm.WIDE_TILES`: Whisper's 80 -> 384/512/768 and d -> d
stride-2 convs, wav2vec2's 512 -> 512 stack), a few-channels
kernel per narrow input width (wav2vec2's raw-audio conv has Cin = 1), an analytic kernel for
windows longer than 32 taps, and an element-wise one that runs any width.
"""

from __future__ import annotations

from oasr_core.kit import implicit_gemm
from oasr_core.kit.tiles import wgmma_name
from oasr_core.types import Config

from oasr_conv1d.geometry import LANE_SM80, LANE_SM90, LANES

SM90_SCHEDULES = ("ws",)
"""Hopper conv schedules CUTLASS 4.2 builds (its conv dispatch policy rejects the persistent
ping-pong and cooperative kernels)."""
_SM90_TAG = {"ws": "ws"}


def sm80_config(tile: tuple[int, int, int], warp: tuple[int, int, int], stages: int,
                algorithm: str = "optimized", align_in: int = 8, align_out: int = 8, *,
                lane: str = LANE_SM80) -> Config:
    """A CUTLASS 2.x implicit-GEMM fprop config (:func:`oasr_core.kit.implicit_gemm.config`:
    ``ig_b<tile>_w<warp>_s<stages>``, ``_an`` / ``_fc``, ``_a<in>x<out>``). ``lane`` puts it
    in the sm90 lane too."""
    return implicit_gemm.config(lane, tile, warp, stages, algorithm, align_in, align_out)


def sm90_config(tile: tuple[int, int, int], cluster: tuple[int, int] = (1, 1),
                schedule: str = "ws", stages: int = 0) -> Config:
    """A CUTLASS 3.x Hopper implicit-GEMM fprop config (``igh_<schedule>_<tile>_c<cluster>``,
    ``_s<stages>`` when the stage count is fixed; 0 lets the builder fill shared memory).
    TMA needs 16-byte rows: Cin and Cout multiples of 8."""
    if schedule not in SM90_SCHEDULES:
        raise ValueError(f"schedule {schedule!r} is not one of {SM90_SCHEDULES}")
    cid = wgmma_name(f"igh_{_SM90_TAG[schedule]}", tile, cluster, stages)
    return Config(id=cid, lane=LANE_SM90, params={
        "cutlass": 3, "tile": list(tile), "cluster": list(cluster), "schedule": schedule,
        "stages": stages, "align_in": 8, "align_out": 8, "unit": cid,
    })


_SM80_NARROW = (
    # (tile, warp, stages, algorithm, align_in, align_out): an analytic 16-byte tile for long
    # windows, then the kit's narrow tiles.
    ((128, 128, 32), (64, 64, 32), 3, "analytic", 8, 8),
    *implicit_gemm.NARROW_TILES,
)
_SM90_TILES = (
    # (tile, cluster, schedule, stages); CUTLASS 4.2 builds Hopper convolutions with the
    # non-persistent warp-specialized schedule only.
    ((128, 128, 64), (1, 1), "ws", 0),
    ((128, 128, 64), (2, 1), "ws", 0),
    ((128, 128, 64), (1, 2), "ws", 0),
    ((128, 64, 64), (1, 1), "ws", 0),
    ((64, 128, 64), (1, 1), "ws", 0),
    ((64, 256, 64), (1, 1), "ws", 0),
    ((64, 64, 64), (1, 1), "ws", 0),
)
_SM90_CUTLASS2 = (
    # 2.x kernels the Hopper lane keeps for what TMA cannot read (rows under 16 bytes) and for
    # comparison at the common widths.
    ((128, 128, 32), (64, 64, 32), 3, "optimized", 8, 8),
    *implicit_gemm.NARROW_TILES,
)

SM80_DEFAULT = "ig_b128x128x32_w64x64x32_s3"
"""CUTLASS's own first sm80 fp16 conv tile; nothing measured yet."""
SM90_DEFAULT = "igh_ws_128x128x64_c1x1"
"""The plain warp-specialized 128x128 tile; nothing measured yet."""
DEFAULTS = {LANE_SM80: SM80_DEFAULT, LANE_SM90: SM90_DEFAULT}


def listed(lane: str) -> tuple[Config, ...]:
    """Every config listed for ``lane``, before feasibility (KeyError for another lane)."""
    if lane == LANE_SM80:
        return (*(sm80_config(t, w, s) for t, w, s in implicit_gemm.WIDE_TILES),
                *(sm80_config(t, w, s, a, i, o) for t, w, s, a, i, o in _SM80_NARROW))
    if lane == LANE_SM90:
        return (*(sm90_config(t, c, sch, s) for t, c, sch, s in _SM90_TILES),
                *(sm80_config(t, w, s, a, i, o, lane=LANE_SM90)
                  for t, w, s, a, i, o in _SM90_CUTLASS2))
    raise KeyError(f"lane {lane!r} is not a dense conv1d lane ({', '.join(LANES)})")


def space(lane: str) -> tuple[Config, ...]:
    """The dense config space of ``lane``: the listed configs that are feasible."""
    from oasr_conv1d.dense.feasibility import is_feasible

    return tuple(c for c in listed(lane) if is_feasible(c))


def default_id(lane: str) -> str:
    """The id of ``lane``'s untuned dense default."""
    try:
        return DEFAULTS[lane]
    except KeyError:
        raise KeyError(f"lane {lane!r} is not a dense conv1d lane ({', '.join(LANES)})") from None


def config(lane: str, config_id: str) -> Config:
    """The dense config ``config_id`` of ``lane`` (KeyError when the space has none)."""
    for c in space(lane):
        if c.id == config_id:
            return c
    raise KeyError(f"lane {lane!r} has no dense config {config_id!r}")
