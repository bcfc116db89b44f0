"""The scaled_mm shape heuristic: a tile ladder, its threshold tables, and their fitting.

``Sentinel.HEURISTIC`` (the family's untuned selector) is "the largest tile that fills enough
of the GPU for its K": a lane's :class:`Ladder` lists data-parallel configs from the largest
tile to the smallest, and the first whose CTA count ``ceil(M / TM) * ceil(N / TN)`` reaches
``fill * SM count`` serves; ``fill`` is looked up per rung and per K band, and the last rung
(fill 0) catches everything. Stream-K tiles are never on a ladder: only a measured tuning
entry can pick one.

The thresholds are data (:data:`LADDERS`, per lane, with optional per-arch overrides in
:data:`ARCH_LADDERS`). The tables below are unfitted: a half-wave rule (every tile needs half
a wave of CTAs), with two deliberate exceptions taken from the H200 study in GPU.md -- the
persistent 128x128 ping-pong rung of the sm90 lane needs two waves (it won only at large M,
the non-persistent 128x128 below that), and the sm80 lane's 128x128x128 tile (deep K tile)
is off the ladder at K <= 1024, where its 128x128x64 twin serves.

Fitted tables are data too: ``fitted_ladders.json`` beside this module (:data:`FITTED_FILE`,
shipped in the wheel) holds per-(lane, arch) tables that :func:`fit_ladder` produced from
measured rows, with the evidence behind them; it is read once at import into
:data:`ARCH_LADDERS`. A missing file means no fitted tables; a malformed one is warned about
(naming the file and the problem) and ignored as a whole, so the unfitted tables serve.
``benchmarks/scaled_mm_vs_torch.py sweep`` measures the rows on a GPU and ``... fit`` fits
and writes the file (:func:`write_fitted`). The mechanism (tables, fitting, the file format)
is the kit's :mod:`oasr_scaled_mm.w8a8.ladders`, shared with the fp8 family; this module holds the
int8 lanes' tables and re-exports the kit's names it always offered.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from oasr_core.types import Config, Lane

from oasr_scaled_mm.config_space import LANE_SM80, LANE_SM90, LANES, space
from oasr_scaled_mm.w8a8 import ladders
from oasr_scaled_mm.w8a8.devices import DEFAULT_SM_COUNT
from oasr_scaled_mm.w8a8.devices import current_index as _device_index
from oasr_scaled_mm.w8a8.ladders import (  # noqa: F401  (re-exported: this module's API)
    FILL_GRID,
    HALF_WAVE,
    INF,
    MISSING_PENALTY,
    FittedLadder,
    Ladder,
    LadderFit,
    Row,
    check_ladder,
    describe,
    ladder_regret,
)

K_BOUNDS = (1024, 4096)
"""K bands of the shipped tables: K <= 1024, 1024 < K <= 4096, K > 4096."""


def _uniform(value: float) -> tuple[float, float, float]:
    return (value,) * (len(K_BOUNDS) + 1)


LADDERS: dict[str, Ladder] = {
    LANE_SM90: Ladder(
        lane=LANE_SM90,
        rungs=("pp_128x128x128_c1x1", "ws_128x128x128_c1x1", "ws_128x64x128_c1x1",
               "ws_64x128x128_c1x1", "ws_64x64x128_c1x1", "ws_64x32x128_c1x1"),
        k_bounds=K_BOUNDS,
        fill=(_uniform(2.0), _uniform(HALF_WAVE), _uniform(HALF_WAVE), _uniform(HALF_WAVE),
              _uniform(HALF_WAVE), _uniform(0.0)),
    ),
    LANE_SM80: Ladder(
        lane=LANE_SM80,
        rungs=("b256x128x64_w64x64x64_s3", "b128x256x64_w64x64x64_s3",
               "b128x128x128_w64x64x128_s3", "b128x128x64_w64x64x64_s5",
               "b128x64x128_w64x32x128_s3", "b64x128x128_w32x64x128_s3",
               "b64x64x128_w32x32x128_s5"),
        k_bounds=K_BOUNDS,
        fill=(_uniform(HALF_WAVE), _uniform(HALF_WAVE), (INF, HALF_WAVE, HALF_WAVE),
              _uniform(HALF_WAVE), _uniform(HALF_WAVE), _uniform(HALF_WAVE), _uniform(0.0)),
    ),
}
"""The ladder of each lane (unfitted; see the module docstring)."""

FITTED_FILE = Path(__file__).with_name("fitted_ladders.json")
"""The fitted tables shipped with the package (see the module docstring)."""
_check_rungs = ladders.data_parallel_check(LANES, space)
"""``ValueError`` unless a table is one of this package's lanes with data-parallel rungs."""


def read_fitted(path: str | os.PathLike[str]) -> list[FittedLadder]:
    """The entries of a fitted-ladder file (:func:`oasr_scaled_mm.w8a8.ladders.read_fitted`
    with this package's lane check)."""
    return ladders.read_fitted(path, _check_rungs)


def write_fitted(path: str | os.PathLike[str],
                 tables: Iterable[FittedLadder] | Mapping[tuple[str, str], Ladder]) -> Path:
    """Write a fitted-ladder file (:func:`oasr_scaled_mm.w8a8.ladders.write_fitted`)."""
    return ladders.write_fitted(path, tables, _check_rungs)


def load_fitted(path: str | os.PathLike[str] = FITTED_FILE) -> dict[tuple[str, str], Ladder]:
    """The tables of a fitted-ladder file by ``(lane, arch)``, for :data:`ARCH_LADDERS`; a
    missing file is none, a malformed one one warning and none
    (:func:`oasr_scaled_mm.w8a8.ladders.load_fitted`)."""
    return ladders.load_fitted(path, _check_rungs, label="oasr_scaled_mm")


ARCH_LADDERS: dict[tuple[str, str], Ladder] = load_fitted()
"""Per-(lane, arch family) tables that override :data:`LADDERS`: the fitted tables of
:data:`FITTED_FILE`, read once at import."""


def ladder_for(lane: str | Lane, arch: str | None = None) -> Ladder:
    """The ladder of ``lane`` on ``arch``; a lane without a table gets a half-wave ladder."""
    name = lane if isinstance(lane, str) else lane.name
    if arch is not None and (name, arch) in ARCH_LADDERS:
        return ARCH_LADDERS[(name, arch)]
    if name in LADDERS:
        return LADDERS[name]
    if isinstance(lane, str):
        raise KeyError(f"no ladder for lane {name!r}")
    return half_wave_ladder(lane)


def half_wave_ladder(lane: Lane) -> Ladder:
    """The unfitted rule for any lane: its data-parallel configs by tile area, half a wave."""
    return ladders.half_wave_ladder(lane, K_BOUNDS)


def ladder_configs(lane: Lane, arch: str | None = None) -> tuple[Config, ...]:
    """The configs on ``lane``'s ladder (every rung, whatever the shape)."""
    ladder = ladder_for(lane, arch)
    return tuple(c for c in (lane.config(r) for r in ladder.rungs) if c is not None)


globals().update(ladders.ladder_heuristic(
    lambda lane, arch: ladder_for(lane, arch),
    lambda lane: device_sms(lane.name, lane.arch_families, lane.default_on)))
# heuristic_config(problem, lane, *, sm_count=None, arch=None), sentinel_heuristic(problem, lane)


def ladder_digest() -> str:
    """16 hex digits naming every table the heuristic reads: :data:`LADDERS` and the fitted
    :data:`ARCH_LADDERS` loaded from :data:`FITTED_FILE`. Tuning files carry it as the soft
    stamp ``heuristic`` (the SM count it also reads is the ``sku`` stamp's ``sms``), so an
    entry measured against other tables is reported stale."""
    return ladders.digest(LADDERS, ARCH_LADDERS)


def soft_validators() -> dict[str, Any]:
    """``Family.soft_validators``: the JIT's stamps plus ``heuristic`` (:func:`ladder_digest`)."""
    from oasr_scaled_mm import jit

    return {**jit.soft_validators(), "heuristic": ladder_digest()}


def device_sms(lane: str, arch_families: Sequence[str],
               default_on: Sequence[str] = ()) -> tuple[str, int]:
    """``(arch family, SM count)`` the heuristic uses for ``lane`` in this process: the current
    CUDA device's when its arch family is one of the lane's, else the lane's first default
    arch with :data:`DEFAULT_SM_COUNT`. The device is asked once per runtime
    (:meth:`oasr_core.runtime.Runtime.device`)."""
    facts = _device_facts(_device_index())
    if facts is not None and facts.arch in arch_families:
        return facts.arch, facts.sm_count
    arch = (tuple(default_on) or tuple(arch_families))[0]
    return arch, DEFAULT_SM_COUNT.get(arch, 108)


def _device_facts(device: int | None) -> Any:
    if device is None:
        return None
    from oasr_core.runtime import DeviceFacts, current_runtime

    rt = current_runtime()
    return rt.device(device) if rt is not None else DeviceFacts.query(device)


# --- fitting ---------------------------------------------------------------------------------


def fit_ladder(rows: Iterable[Row], *, lane: Lane, sm_count: int, start: Ladder | None = None,
               **options: Any) -> LadderFit:
    """:func:`oasr_scaled_mm.w8a8.ladders.fit_ladder` from ``start`` (default: the lane's current
    table)."""
    return ladders.fit_ladder(rows, lane=lane, sm_count=sm_count,
                              start=start or ladder_for(lane), **options)
