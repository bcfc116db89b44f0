"""The scaled_mm_fp8 shape heuristic (``Sentinel.HEURISTIC``, the family's untuned selector):
a tile ladder (:mod:`oasr_scaled_mm.w8a8.ladders`, the mechanism the int8 family uses too).

Unfitted (:data:`LADDERS`), the ladder is "the largest data-parallel tile that still launches
at least half a wave": the lane's :func:`rungs` are one config per tile shape, largest tile
area first (ties: taller tile first); the first whose CTA count ``ceil(M / TM) * ceil(N /
TN)`` reaches :data:`FILL` x the SM count serves, and the smallest tile catches everything
below. Per tile shape the rung is its fast-accumulation config with a 1x1 cluster, the
non-persistent kernel before the cooperative one before ping-pong.

Fitted (:data:`ARCH_LADDERS`, read from ``fitted_ladders.json`` beside this module): the sm90
lane's table fitted on the H200 sweep of every tile (``benchmarks/results/h200_fp8.jsonl``,
220 points; ``benchmarks/fp8_ladder_fit.py``, whose report is
``benchmarks/results/fp8_ladder_fit.md``). Its rungs differ from the unfitted ones: the
persistent ping-pong 128x128 kernels, with a 2x1 cluster at the largest sizes, in place of
the cooperative 256x128 and 128x256 tiles, which lost to them wherever they launched. The
geomean regret over the sweep against the best tile is 1.044 for the unfitted rule and 1.005
for the fitted table (1.006 with each width left out of the fit; 1.005 on a later run). A
file that is missing or malformed leaves the unfitted tables serving (one warning for a
malformed one).

The SM count is the device's (:func:`oasr_scaled_mm.w8a8.devices.heuristic_device`), the ``sku``
stamp of a tuning file; the tables are the ``heuristic`` soft stamp (:func:`ladder_digest`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from oasr_core.types import Config, Lane
from oasr_scaled_mm.w8a8 import ladders
from oasr_scaled_mm.w8a8.devices import heuristic_device
from oasr_scaled_mm.w8a8.ladders import FittedLadder, Ladder

from oasr_scaled_mm_fp8.config_space import LANES, space

FILL = ladders.HALF_WAVE
"""The fraction of a wave of CTAs (one per SM) a rung of the unfitted ladder must launch."""
K_BOUNDS = (1024, 4096)
"""K bands of the tables: K <= 1024, 1024 < K <= 4096, K > 4096 (the int8 family's)."""
_SCHEDULE_ORDER = {"mma_sync": 0, "ws": 0, "cooperative": 1, "pingpong": 2}


def _preference(config: Config) -> tuple:
    p = config.params
    return (not p.get("fast_accum", False), tuple(p.get("cluster", (1, 1))) != (1, 1),
            _SCHEDULE_ORDER.get(p.get("schedule"), 3), config.id)


def rungs(configs: Iterable[Config]) -> tuple[Config, ...]:
    """One config per tile shape of ``configs``, largest tile area first (see the module
    docstring)."""
    best: dict[tuple[int, int], Config] = {}
    for c in sorted(configs, key=_preference):
        best.setdefault(tuple(c.params["tile"][:2]), c)
    return tuple(best[t] for t in sorted(best, key=lambda t: (-t[0] * t[1], -t[0])))


def unfitted_ladder(lane: str) -> Ladder:
    """The half-wave ladder over :func:`rungs` of ``lane``'s space."""
    ids = [c.id for c in rungs(space(lane))]
    bands = len(K_BOUNDS) + 1
    fill = [(FILL,) * bands] * (len(ids) - 1) + [(0.0,) * bands]
    return Ladder(lane=lane, rungs=ids, k_bounds=K_BOUNDS, fill=fill)


LADDERS: dict[str, Ladder] = {lane: unfitted_ladder(lane) for lane in LANES}
"""The unfitted ladder of each lane (see the module docstring)."""

FITTED_FILE = Path(__file__).with_name("fitted_ladders.json")
"""The fitted tables shipped with the package."""
_check_rungs = ladders.data_parallel_check(LANES, space)


def read_fitted(path: str | os.PathLike[str]) -> list[FittedLadder]:
    """The entries of a fitted-ladder file (:func:`oasr_scaled_mm.w8a8.ladders.read_fitted`)."""
    return ladders.read_fitted(path, _check_rungs)


def write_fitted(path: str | os.PathLike[str],
                 tables: Iterable[FittedLadder] | Mapping[tuple[str, str], Ladder]) -> Path:
    """Write a fitted-ladder file (:func:`oasr_scaled_mm.w8a8.ladders.write_fitted`)."""
    return ladders.write_fitted(path, tables, _check_rungs)


def load_fitted(path: str | os.PathLike[str] = FITTED_FILE) -> dict[tuple[str, str], Ladder]:
    """The tables of a fitted-ladder file by ``(lane, arch)`` (none for a missing file; one
    warning and none for a malformed one)."""
    return ladders.load_fitted(path, _check_rungs, label="oasr_scaled_mm_fp8")


ARCH_LADDERS: dict[tuple[str, str], Ladder] = load_fitted()
"""Per-(lane, arch family) tables that override :data:`LADDERS`, read once at import."""


def ladder_for(lane: str | Lane, arch: str | None = None) -> Ladder:
    """The ladder of ``lane`` on ``arch``: the fitted table when one exists, else the
    unfitted one."""
    name = lane if isinstance(lane, str) else lane.name
    if arch is not None and (name, arch) in ARCH_LADDERS:
        return ARCH_LADDERS[(name, arch)]
    return LADDERS[name]


globals().update(ladders.ladder_heuristic(
    lambda lane, arch: ladder_for(lane, arch),
    lambda lane: heuristic_device(lane.arch_families, lane.default_on)))
# heuristic_config(problem, lane, *, sm_count=None, arch=None), sentinel_heuristic(problem, lane)


def ladder_digest() -> str:
    """16 hex digits naming every table :func:`heuristic_config` reads (the ``heuristic``
    soft stamp: an entry measured against other tables is reported stale)."""
    return ladders.digest(LADDERS, ARCH_LADDERS)


def soft_validators() -> dict[str, str | None]:
    """``Family.soft_validators``: the JIT's stamps plus ``heuristic`` (:func:`ladder_digest`)."""
    from oasr_scaled_mm_fp8 import jit

    return {**jit.soft_validators(), "heuristic": ladder_digest()}
