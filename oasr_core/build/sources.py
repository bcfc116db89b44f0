"""Where a build's measurements come from: the GPU now, or a measurement log.

Both sources answer the same two questions for a signature's point: ``main`` (the point's
own run over its candidates, with successive halving) and ``cross`` (named arms timed
fully, for cross-evaluation). :class:`LiveSource` measures with the bench protocol, appends
the rows to the log as it goes and returns them parsed back from the rows, so its decisions
are exactly those a :class:`LogSource` replay of the same log takes.

What a point's main run measures follows the family's and the lane's records, never their
names:

* the forced sentinels (the family's fallback, then default, torch, fused where the family
  names them) are arms of their own, launched through ``make_bench`` as the sentinel; the
  config a sentinel stands for at the point (the lane default, the heuristic's pick) is not
  measured a second time there, and the log records it (``params.config``);
* every other config of the lane that is feasible, compiled and supports the problem
  (``Lane.supports`` sees the op: a config an op cannot serve is never a candidate of it);
* a lane with a cost model (``Lane.cost_features``) is measured with successive halving; a
  lane without one is measured exhaustively: every candidate is timed through every round
  at every point, so the partition sees the whole matrix. Rankers (cost models the caller
  passes to :func:`oasr_core.build.build_live`; the CLI passes none) cut the candidates to
  their top-k union.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

import attrs

from oasr_core.bench import (
    ArmResult,
    ArmStatus,
    BenchError,
    BenchOptions,
    BenchResult,
    DeviceFault,
    Timer,
    bench_problem,
)
from oasr_core.database.keys import check_key
from oasr_core.errors import DatabaseError
from oasr_core.measurements import MeasurementLog, arm_row, latest_groups, utc_now
from oasr_core.sentinels import choice_config
from oasr_core.types import Config, Family, Lane, Sentinel

from .decide import Measured
from .inputs import PlannedPoint, Signature

Ranker = Callable[[Sequence[Config], Any], Sequence[Config]]
"""A cost model's ranking: ``rank(candidates, problem)`` -> configs, best first."""


class MeasurementSource(Protocol):
    """What the build pipeline asks of a measurement source."""

    def main(self, sig: Signature, point: PlannedPoint, keep: Collection[str]) -> Measured:
        """The point's own run over its candidates, keeping ``keep`` to the end."""

    def cross(self, sig: Signature, point: PlannedPoint, arms: Sequence[str]) -> Measured:
        """``arms`` timed fully at the point."""


def choice_name(choice: Config | Sentinel) -> str:
    """A choice as tuning files and logs spell it."""
    return choice.value if isinstance(choice, Sentinel) else choice.id


def resolve_choice(family: Family, lane: Lane, choice: Any, problem: Any) -> Any:
    """The config of ``lane`` a choice launches at ``problem`` (None: torch, fused); see
    :func:`oasr_core.sentinels.choice_config`."""
    return choice_config(family, lane, choice, problem)


def exhaustive(lane: Lane) -> bool:
    """Whether a build times every candidate of ``lane`` fully at every point (no successive
    halving): true for a lane without a cost model (no ``cost_features``), whose small,
    unranked space is measured whole.
    """
    return lane.cost_features is None


@attrs.define
class LiveSource:
    """Measures on the device through ``family.make_bench`` and the bench protocol."""

    family: Family
    lane: Lane
    timer: Timer
    options: BenchOptions
    log: MeasurementLog
    run: str
    arch: str
    soft: Mapping[str, Any]
    rankers: Sequence[Ranker] = ()
    top_k: int = 16
    measured: int = 0
    sets: Mapping[str, frozenset[str]] | None = None
    """Each signature's candidate set (:func:`oasr_core.build.effort.signature_set`): when
    it names a signature, every point of it measures the forced arms and that set (the
    rankers have chosen it already); None: each point's own top-k, as rankers give it."""

    @classmethod
    def planner(cls, family: Family, lane: Lane, arch: str,
                rankers: Sequence[Ranker]) -> LiveSource:
        """A source that only plans candidates (a replay's effort level): it never measures."""
        return cls(family=family, lane=lane, timer=None, options=BenchOptions(), log=None,
                   run="", arch=arch, soft={}, rankers=tuple(rankers))

    def forced(self) -> list[Sentinel]:
        """Sentinel arms always measured: the fallback, default, torch, fused, unquantized."""
        wanted = [self.family.fallback, Sentinel.DEFAULT, Sentinel.TORCH, Sentinel.FUSED,
                  Sentinel.UNQUANTIZED]
        return [s for s in dict.fromkeys(wanted)
                if s is self.family.fallback or s in self.family.sentinels]

    def stands_for(self, sentinel: Sentinel, problem: Any) -> Config | None:
        """The lane config ``sentinel`` launches at ``problem`` (None: none of the lane's)."""
        config = resolve_choice(self.family, self.lane, sentinel, problem)
        return config if isinstance(config, Config) else None

    def usable(self, problem: Any) -> list[Config]:
        """Configs of the lane that are feasible, compiled and run this shape, except those
        a forced sentinel stands for here (measured once, as the sentinel)."""
        skip = {c.id for c in (self.stands_for(s, problem) for s in self.forced())
                if c is not None}
        return [c for c in self.lane.config_space
                if c.id not in skip and self.lane.unusable_reason(c, problem) is None]

    @property
    def exhaustive(self) -> bool:
        """Every candidate timed fully at every point (:func:`exhaustive`)."""
        return exhaustive(self.lane)

    def candidates(self, sig: Signature, point: PlannedPoint) -> list[Config | Sentinel]:
        """Forced sentinels, plus the usable configs (pruned to the rankers' top-k union
        when the caller gives rankers, which are cost models of the lane)."""
        problem = sig.problem(self.family, point.m, point.point)
        configs = self.usable(problem)
        if self.sets is not None and sig.key in self.sets:
            chosen = self.sets[sig.key]
            configs = [c for c in configs if c.id in chosen]
        elif self.rankers:
            picked: set[str] = set()
            for rank in self.rankers:
                picked.update(c.id for c in list(rank(configs, problem))[: self.top_k])
            if point.incumbent is not None:
                picked.add(point.incumbent)
            configs = [c for c in configs if c.id in picked]
        return [*self.forced(), *configs]

    def signature_set(self, sig: Signature, top_k: int | None,
                      structure_k: int | None = None) -> tuple[Config, ...]:
        """The configs ``sig`` compiles and measures at a level's ``top_k`` / ``structure_k``
        (:func:`oasr_core.build.effort.signature_set` over this source's rankers)."""
        from .effort import signature_set

        def stands_for(problem: Any) -> list[Config]:
            return [c for c in (self.stands_for(s, problem) for s in self.forced())
                    if c is not None]

        return signature_set(sig, self.family, self.lane, self.usable, stands_for,
                             self.rankers, top_k, structure_k)

    def census_sets(self, signatures: Sequence[Signature], top_k: int | None,
                    structure_k: int | None = None, max_units: int | None = None,
                    rankers: Any = None) -> dict[str, tuple[Config, ...]]:
        """Every signature's candidate set under a census-wide cap of ``max_units`` compile
        units (:func:`oasr_core.build.effort.census_sets`; None: :meth:`signature_set`'s),
        ranked by this source's rankers (``rankers``: others, or a callable per key)."""
        from .effort import census_sets

        def stands_for(problem: Any) -> list[Config]:
            return [c for c in (self.stands_for(s, problem) for s in self.forced())
                    if c is not None]

        return census_sets(signatures, self.family, self.lane, self.usable, stands_for,
                           self.rankers if rankers is None else rankers, top_k, structure_k,
                           max_units)

    def fingerprint(self) -> list[str]:
        """What decides the candidates, for the checkpoint digest."""
        ids = [c.id for c in self.lane.config_space if self.lane.is_feasible(c) and (
            self.lane.is_available is None or self.lane.is_available(c))]
        names = [getattr(r, "__qualname__", type(r).__name__) for r in self.rankers]
        marks = ["exhaustive"] if self.exhaustive else []
        return [self.lane.name, *ids, f"top_k={self.top_k}", *names, *marks]

    def main(self, sig: Signature, point: PlannedPoint, keep: Collection[str]) -> Measured:
        return self._bench(sig, point, self.candidates(sig, point), "main", keep,
                           not self.exhaustive)

    def cross(self, sig: Signature, point: PlannedPoint, arms: Sequence[str]) -> Measured:
        problem = sig.problem(self.family, point.m, point.point)
        choices: list[Config | Sentinel] = []
        unbuilt: dict[str, str] = {}
        for name in arms:
            sentinel = Sentinel.parse(name)
            config = self.lane.config(name) if sentinel is None else None
            why = None if sentinel is not None else (
                "is not a config of the lane" if config is None
                else self.lane.unusable_reason(config, problem))
            if why is None:
                choices.append(sentinel if sentinel is not None else config)
            else:
                unbuilt[name] = why
        return self._bench(sig, point, choices, "cross", arms, False, unbuilt)

    def _params(self, name: str, problem: Any) -> dict[str, Any]:
        sentinel = Sentinel.parse(name)
        if sentinel is None:
            config = self.lane.config(name)
            return config.to_json() if config is not None else {}
        params: dict[str, Any] = {"kind": sentinel.value}
        config = self.stands_for(sentinel, problem)
        if config is not None:
            params["config"] = config.id
        return params

    def _bench(self, sig: Signature, point: PlannedPoint, choices: list[Config | Sentinel],
               phase: str, keep: Collection[str], halving: bool,
               unbuilt: Mapping[str, str] | None = None) -> Measured:
        problem = sig.problem(self.family, point.m, point.point)
        try:
            result = bench_problem(self.family, problem, choices, self.timer, self.options,
                                   alpha=point.alpha, keep=keep, halving=halving)
        except DeviceFault:
            raise
        except BenchError as exc:
            self.timer.synchronize()
            result = BenchResult(arms=[ArmResult(choice_name(c), ArmStatus.ERROR, str(exc))
                                       for c in choices], alpha=point.alpha)
        arms = list(result.arms) + [ArmResult(n, ArmStatus.UNBUILT, why)
                                    for n, why in (unbuilt or {}).items()]
        rows = [arm_row(a, self._context(sig, point, phase, result, a.name)) for a in arms]
        self.log.append(rows)
        self.measured += 1
        return Measured.from_rows(phase, rows)

    def _context(self, sig: Signature, point: PlannedPoint, phase: str, result: BenchResult,
                 name: str) -> dict[str, Any]:
        start, end = result.start, result.end
        return {
            "run": self.run, "protocol": result.protocol, "phase": phase,
            "family": self.family.name, "arch": self.arch, "lane": self.lane.name,
            "impl_hash": self.soft.get("impl_hash"), "sku": self.soft.get("sku"),
            "key": sig.key, "op": sig.op, "dtype": sig.dtype, "dims": dict(sig.dims),
            "M": point.m, "batch": 1, "weight": point.weight, "calls": point.calls,
            "must": point.must, "alpha": point.alpha, "fill": point.fill,
            "incumbent": point.incumbent, "census_max": sig.census_max,
            **({"points": list(point.points)} if point.points else {}),
            "fallback": self.family.fallback.value,
            "params": self._params(name, sig.problem(self.family, point.m, point.point)),
            "l2": result.l2, "copies": result.copies, "graph_calls": result.calls,
            "separator_ms": round(result.separator_ms, 8), "contended": result.contended,
            "sm_clock_mhz": [start.sm_clock_mhz, end.sm_clock_mhz],
            "max_sm_clock_mhz": start.max_sm_clock_mhz,
            "other_processes": max((c.other_processes for c in (start, end)
                                    if c.other_processes is not None), default=None),
            "power_w": end.power_w, "time": utc_now(),
        }


class LogSource:
    """Answers from a measurement log: the latest run's rows for each point and phase.

    ``allowed`` (signature key -> config ids) replays an effort level from a fuller log: a
    point's main run then holds only its sentinel arms and the signature's allowed configs,
    the rows the level would have measured (:func:`oasr_core.build.effort.restrict_rows`).
    """

    def __init__(self, arm_rows: Sequence[Mapping[str, Any]],
                 allowed: Mapping[str, Collection[str]] | None = None) -> None:
        self.groups = latest_groups(arm_rows)
        self.allowed = allowed

    def main(self, sig: Signature, point: PlannedPoint, keep: Collection[str]) -> Measured:
        rows = self.groups.get((sig.key, point.m, "main"), [])
        if self.allowed is not None and sig.key in self.allowed:
            from .effort import restrict_rows

            rows = restrict_rows(rows, self.allowed[sig.key])
        return Measured.from_rows("main", rows)

    def cross(self, sig: Signature, point: PlannedPoint, arms: Sequence[str]) -> Measured:
        wanted = set(arms)
        rows = [r for r in self.groups.get((sig.key, point.m, "cross"), [])
                if r["config"] in wanted]
        return Measured.from_rows("cross", rows)

    def signatures(self, family: Family) -> list[Signature]:
        """The signatures and points the log's main runs measured, heaviest first."""
        points: dict[str, list[PlannedPoint]] = {}
        first: dict[str, list[Mapping[str, Any]]] = {}
        for (key, m, phase), rows in self.groups.items():
            if phase != "main" or not rows or rows[0].get("family") != family.name:
                continue
            r = rows[0]
            first.setdefault(key, []).extend(rows)
            points.setdefault(key, []).append(PlannedPoint(
                m=m, weight=float(r.get("weight") or 0.0), calls=float(r.get("calls") or 0.0),
                must=bool(r.get("must")), alpha=float(r.get("alpha") or 0.0),
                fill=bool(r.get("fill")), incumbent=r.get("incumbent"),
                points=tuple(str(p) for p in r.get("points") or () if isinstance(p, str))))
        sigs = []
        for key, pts in points.items():
            r = first[key][0]
            op, dtype, dims = _signature_fields(family, key, first[key])
            pts.sort(key=lambda p: p.m)
            census = [p.m for p in pts if not p.fill]
            sigs.append(Signature(key, op, dtype, dims, pts,
                                  census_max=int(r.get("census_max") or max(census or [0]))))
        return sorted(sigs, key=lambda s: (-s.weight, s.key))


def _signature_fields(family: Family, key: str, rows: Sequence[Mapping[str, Any]]
                      ) -> tuple[str, str, tuple[tuple[str, int], ...]]:
    """A logged signature's op, dtype and static dims: from the first of its rows that has
    them (``dims``, or the flat ``N``/``K`` of older logs), else from its key, which names
    them all. A row without ``dims`` (a torn or hand-edited log) costs nothing."""
    for r in rows:
        dims_of = r.get("dims") if isinstance(r.get("dims"), Mapping) else r
        if all(isinstance(dims_of.get(d), int) and not isinstance(dims_of.get(d), bool)
               for d in family.dims) and isinstance(r.get("op"), str) \
                and isinstance(r.get("dtype"), str):
            return str(r["op"]), str(r["dtype"]), tuple((d, int(dims_of[d]))
                                                         for d in family.dims)
    try:
        parsed = check_key(family, key)
        dims = tuple((d, int(parsed.dim(d))) for d in family.dims)
    except (ValueError, KeyError, DatabaseError) as exc:
        raise DatabaseError(f"measurement log: signature {key!r} has no row with its dims "
                            f"and its key does not name them ({exc})") from None
    dtype = next((str(r["dtype"]) for r in rows if isinstance(r.get("dtype"), str)),
                 parsed.dtype or "")
    return parsed.op, dtype, dims
