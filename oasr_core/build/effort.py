"""Effort levels of a build: how much it compiles and measures for its answer.

A level (``oasr tune build --effort``) fixes what each signature costs:

- **configs**: the signature's *candidate set*, found before anything is measured: the union
  over its points of each cost model's top ``top_k`` (the calibration's and ``structure_k`` of
  the structure's; the structure's ``top_k`` when the prior is uncalibrated), plus the configs
  the forced sentinels stand for and the incumbents. Every config of the set is compiled
  once and measured at *every* point of the signature: a config one point's model liked is
  compiled anyway, and the partition shares configs between neighbouring points, so timing
  it at the neighbours costs a few graph replays and spares their cross-evaluation.
  ``top_k=None`` is the whole space (exhaustive);
- **points**: ``max_points`` per signature, fill included;
- **repetitions**: the protocol's ``stage_rounds`` (successive halving; the last stage stops
  once every arm's sigma is within ``stop_stdrel`` of its median).

Each level is replayable from an exhaustive log (``oasr tune build --from-log LOG --effort
LEVEL``): the replay keeps, at each point, only the rows the level would have measured
(:func:`restrict_rows`) and thins the log's points to the level's ``max_points``, so its
regret and cost can be scored offline before its knobs are chosen
(``benchmarks/effort_levels_offline.py``; ``benchmarks/results/effort_levels_offline.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core.errors import ConfigurationError
from oasr_core.types import Config, Family, Lane, Sentinel

from .inputs import Signature, _thin


@attrs.frozen
class Effort:
    """One effort level (see the module docstring)."""

    name: str
    top_k: int | None
    """Configs each cost model keeps per point, pooled over the signature (None: all)."""
    structure_k: int | None = attrs.field(default=None, kw_only=True)
    """What the uncalibrated structure keeps beside a calibrated model (None: ``top_k``;
    0: nothing, the calibration ranks alone). Without a calibration the structure keeps
    ``top_k``."""
    max_points: int = attrs.field(kw_only=True)
    """Points per signature, fill included."""
    stage_rounds: tuple[int, ...] = attrs.field(converter=tuple, kw_only=True)
    """Rounds per halving stage of the bench protocol."""
    measured_dtypes: bool = False
    """Compile only the dtypes the build measures (half a gemm unit's kernels) for units
    whose production object is not cached yet. Those objects are not the production
    module's, which then compiles the configs the new table references on first load; False:
    the build's objects are the production ones."""
    coarse_cells: bool = False
    """A point's matrix row takes every arm timed there, those halving dropped early too (their
    coarse medians), so cross-evaluation runs only for a finalist never timed at the point: a
    pooled set times every finalist at every point, so it all but never runs. Replaying the
    pruned H200 Conformer logs (halved, with cross rows) this way chose the same configs at
    100% of weighted points; cross runs were half of those builds' measuring."""
    max_units: int | None = None
    """Compile units the census's candidate sets may need (per lane; None: no cap), or
    ``units_per_signature`` per signature where that is more (:func:`unit_cap`). Where the
    pooled top-``top_k`` sets need more, :func:`census_sets` keeps what serves the census's
    points best."""
    units_per_signature: float | None = None
    """The cap's share per signature of the census: a larger census may take longer to
    build (the H200 targets: 90 s for the Conformer's 6 signatures, 180 s for 14)."""
    description: str = ""


LEVELS: dict[str, Effort] = {
    "quick": Effort("quick", top_k=2, structure_k=0, max_points=14, stage_rounds=(3, 4, 9),
                    measured_dtypes=True, coarse_cells=True, max_units=12,
                    units_per_signature=2.0,
                    description="the calibration's top-2 per point pooled per signature, at "
                    "most 12 compile units (2 per signature for a larger census), 14 points, "
                    "the measured dtype's "
                    "kernels only"),
    "default": Effort("default", top_k=2, structure_k=0, max_points=14,
                      stage_rounds=(3, 6, 15), measured_dtypes=True, coarse_cells=True,
                      max_units=15, units_per_signature=2.5,
                      description="the calibration's top-2 per point pooled per signature, at "
                      "most 15 compile units (2.5 per signature for a larger census), 14 "
                      "points, the measured dtype's kernels only"),
    "exhaustive": Effort("exhaustive", top_k=None, max_points=24, stage_rounds=(3, 6, 15),
                         description="every config of the lane at 24 points (--no-prune)"),
}
"""The levels, chosen from the offline scores against the committed exhaustive logs
(``benchmarks/results/effort_levels_offline.md``). On the Conformer census (5 signatures),
with models held out per signature: the calibration's top-2 pooled at 14 points scored 1.3%
geomean / 5.2% p95 regret (the exhaustive build 1.0% / 5.0%) with 29 of 133 units and a
ninth of the arm rows; adding the structure's top-k changed nothing but the units (46 for
both models' top-2); top-3 matched the exhaustive build with 36 units, top-1 scored 2.2% /
7.8% with 20; 12 points instead of 14 lost 10-15% p95, so no level thins below 14.

The unit caps: with its two ``gemm_residual`` signatures the Conformer census's top-2 sets
need 30 units, and on the H200 host (16 cores, 15 nvcc slots beside the measuring thread) 30
units compile in about 100 s however they are bundled, where 15 compile in one wave of single
units. Capped at 15 (:func:`census_sets`), its log's 7 signatures scored 2.0% / 6.9%
in-sample and 1.9% / 6.9% held-out offline, 12 units 2.0% / 6.9% both (20 units: 1.0% / 5.0%
in-sample); built live on the H200, 70 s wall and 1.7% / 5.1% against the exhaustive log.
A 14-signature census of other widths lost more to a cap of 15 (2.1% / 7.9% live, 2.6% /
9.7% replayed, against 1.6% / 7.6% for its uncapped 17 units, which compiled in 164 s), so
the cap grows with the census: 2.5 units per signature. Without a calibrated prior the
structure ranks alone, with ``top_k``."""


def level(name: str) -> Effort:
    """The level called ``name``; a clear error naming the choices otherwise."""
    try:
        return LEVELS[name]
    except KeyError:
        raise ConfigurationError(f"--effort {name!r} is not one of "
                                 f"{', '.join(LEVELS)}") from None


Ranker = Callable[[Sequence[Config], Any], Sequence[Config]]
"""A cost model's ``(configs, problem) -> configs best first``."""

STRUCTURE = "cost_model.structure"
"""The name (``__qualname__``) :func:`oasr_core.cost_model.config_ranker` gives the
uncalibrated structure's ranking."""


def ranker_ks(rankers: Sequence[Any], top_k: int, structure_k: int | None) -> list[int]:
    """How many configs each ranker keeps: ``structure_k`` for the structure beside other
    rankers (when set), ``top_k`` for every other."""
    alone = len(rankers) == 1
    return [structure_k if structure_k is not None and not alone
            and getattr(r, "__qualname__", "") == STRUCTURE else top_k for r in rankers]


def signature_set(sig: Signature, family: Family, lane: Lane,
                  usable: Callable[[Any], Sequence[Config]],
                  stands_for: Callable[[Any], Iterable[Config]],
                  rankers: Sequence[Callable[[Sequence[Config], Any], Sequence[Config]]],
                  top_k: int | None, structure_k: int | None = None) -> tuple[Config, ...]:
    """The candidate set of ``sig`` (module docstring), in the lane's order.

    ``usable(problem)`` are the configs that may run there (forced sentinels' stand-ins
    excluded), ``stands_for(problem)`` the configs the forced sentinels launch there (they are
    compiled, since the sentinel arms run them). Without rankers, or with ``top_k=None``,
    every usable config is a candidate; ``structure_k`` see :func:`ranker_ks`.
    """
    picked: set[str] = set()
    ks = ranker_ks(rankers, top_k, structure_k) if top_k is not None else []
    for pp in sig.points:
        problem = sig.problem(family, pp.m, pp.point)
        configs = list(usable(problem))
        if top_k is None or not rankers:
            picked.update(c.id for c in configs)
        else:
            for rank, k in zip(rankers, ks, strict=True):
                if k:
                    picked.update(c.id for c in list(rank(configs, problem))[:k])
        picked.update(c.id for c in stands_for(problem))
        if pp.incumbent is not None and lane.config(pp.incumbent) is not None:
            picked.add(pp.incumbent)
    return tuple(c for c in lane.config_space if c.id in picked)


def unit_cap(max_units: int | None, units_per_signature: float | None,
             signatures: int) -> int | None:
    """The compile-unit cap of a census of ``signatures`` signatures: ``max_units``, or
    ``units_per_signature`` each where that is more (None: no cap)."""
    if max_units is None:
        return None
    if units_per_signature is None:
        return max_units
    return max(max_units, math.ceil(units_per_signature * signatures))


def census_sets(signatures: Sequence[Signature], family: Family, lane: Lane,
                usable: Callable[[Any], Sequence[Config]],
                stands_for: Callable[[Any], Iterable[Config]],
                rankers: Sequence[Ranker] | Callable[[str], Sequence[Ranker]],
                top_k: int | None, structure_k: int | None = None,
                max_units: int | None = None) -> dict[str, tuple[Config, ...]]:
    """Each signature's candidate set (key -> configs in the lane's order) under a census-wide
    cap of ``max_units`` compile units (a config's ``unit`` param, else its id).

    ``rankers`` is one list for every signature or ``rankers(signature key)`` (models held
    out per signature, for offline scoring). Without a cap (or ``top_k=None``) each set is
    :func:`signature_set`'s. With one, the sets are a subset of those:

    - the forced sentinels' stand-ins are kept (they are compiled anyway), and the
      incumbents, outside the cap and the choice (a resumed build finds its finished
      signatures' choices as incumbents and must plan what it planned before);
    - then configs of the uncapped sets are added greedily, each time the one that most
      lowers the sum over the census's points of the log of the best predicted time among
      what is kept there (a point with nothing kept counts its stand-ins' prediction, or
      twice its best; ties go to the better best rank), one whose unit is in already before
      any new unit, until the next would need a unit over the cap or none gains.

    Each point thus keeps what serves it and its neighbours best rather than its own top-1:
    one config second-best at many points beats several points' favourites. Where the
    uncapped sets fit under the cap, they are the sets. A ranker's predictions are its
    ``scored(configs, problem)`` (the cost models'); one without it counts rank r as 1.1**r.
    """
    of = rankers if callable(rankers) else (lambda _key: rankers)
    uncapped = {sig.key: signature_set(sig, family, lane, usable, stands_for, of(sig.key),
                                       top_k, structure_k) for sig in signatures}
    if max_units is None or top_k is None or len(
            {c.params.get("unit", c.id) for cs in uncapped.values() for c in cs}) <= max_units:
        return uncapped

    def unit(config: Config) -> str:
        return str(config.params.get("unit", config.id))

    kept: dict[str, set[str]] = {sig.key: set() for sig in signatures}
    units: set[str] = set()
    points: list[tuple[str, float, dict[str, float]]] = []  # (key, baseline, config -> us)
    pool: dict[str, Config] = {}
    place: dict[str, int] = {}  # config -> its best rank at any point
    for sig in signatures:
        ranks = of(sig.key)
        ks = ranker_ks(ranks, top_k, structure_k)
        for pp in sig.points:
            problem = sig.problem(family, pp.m, pp.point)
            always = list(stands_for(problem))
            incumbent = lane.config(pp.incumbent) if pp.incumbent is not None else None
            always += [incumbent] if incumbent is not None else []
            kept[sig.key].update(c.id for c in always)
            units.update(unit(c) for c in always)
            configs = list(usable(problem))
            times: dict[str, float] = {}
            base = math.inf
            for rank, k in zip(ranks, ks, strict=True) if ranks else [(None, top_k)]:
                if not k:
                    continue
                # Ranked together, so the stand-ins' times compare with the candidates'.
                scored = _scored(rank, [*configs, *always], problem)
                standing = {c.id for c in always}
                ranked = [(c, t) for c, t in scored if c.id not in standing]
                for pos, (config, t) in enumerate(ranked[:k]):
                    times[config.id] = min(t, times.get(config.id, math.inf))
                    pool[config.id] = config
                    place[config.id] = min(pos, place.get(config.id, pos))
                base = min([base, *(t for c, t in scored if c.id in standing)])
            if not times:
                continue
            best = min(times.values())
            points.append((sig.key, base if math.isfinite(base) else 2 * best, times))

    def cost(chosen: set[str]) -> float:
        total = 0.0
        for _key, base, times in points:
            have = [t for cid, t in times.items() if cid in chosen]
            total += math.log(min([base, *have]))
        return total

    order = {c.id: i for i, c in enumerate(lane.config_space)}
    chosen: set[str] = set()
    current = cost(chosen)
    while True:
        free = [cid for cid in pool if cid not in chosen and unit(pool[cid]) in units]
        fits = free or ([cid for cid in pool if cid not in chosen]
                        if len(units) < max_units else [])
        if not fits:
            break
        gains = {cid: current - cost(chosen | {cid}) for cid in fits}
        pick = min(fits, key=lambda cid: (-round(gains[cid], 12), place[cid],
                                          order.get(cid, 0)))
        if not free and gains[pick] <= 0:
            break
        chosen.add(pick)
        units.add(unit(pool[pick]))
        current -= gains[pick]
    for key, _base, times in points:
        kept[key].update(cid for cid in times if cid in chosen)
    return {sig.key: tuple(c for c in lane.config_space if c.id in kept[sig.key])
            for sig in signatures}


def _scored(rank: Any, configs: Sequence[Config], problem: Any) -> list[tuple[Config, float]]:
    """``rank``'s predictions for ``configs`` at ``problem``, fastest first (its ``scored``;
    else 1.1**position in its ranking; ``rank`` None: the lane's order)."""
    scored = getattr(rank, "scored", None)
    if scored is not None:
        return list(scored(configs, problem))
    ordered = list(rank(configs, problem)) if rank is not None else list(configs)
    return [(c, 1.1 ** i) for i, c in enumerate(ordered)]


def thin_points(sig: Signature, max_points: int) -> Signature:
    """``sig`` with at most ``max_points`` points (the census thinning rule: the smallest and
    largest stay, each log-M bin keeps its heaviest, a dropped point's weight moves to the
    next kept point above it)."""
    if len(sig.points) <= max_points or sig.exact:
        return sig
    return attrs.evolve(sig, points=_thin(list(sig.points), max_points))


def restrict_rows(rows: Sequence[Mapping[str, Any]], allowed: Iterable[str]
                  ) -> list[Mapping[str, Any]]:
    """The rows of one point a level would have measured: sentinel arms and ``allowed``."""
    keep = set(allowed)
    return [r for r in rows if Sentinel.parse(str(r.get("config"))) is not None
            or r.get("config") in keep]

