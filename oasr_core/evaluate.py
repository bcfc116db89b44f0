"""``oasr tune evaluate``: the regret of selectors against the measured oracle of a log.

The oracle of a point is the best arm measured there, by the objective the build optimises
(GPU time + alpha x issue time, alpha being the point's eager fraction), on the same matrix
the build partitions (survivors and rescaled cross-evaluations; an arm the halving
eliminated counts with its coarse estimate). A selector's regret at a point is
``T(choice) / T(best) - 1``; a choice never measured at the point is counted as *missing*,
not as an infinite regret. Per selector, overall and per signature: geomean regret
(``exp(mean(log(1 + r))) - 1``), p95, max, weight-averaged regret, and missing.

Selectors: ``default`` (the family's fallback), ``torch`` when measured, the system tier,
each ``--db NAME=PATH`` (a miss falls to the family's untuned choice, as at runtime), and
cost models. A model is scored only on a log it was provably not calibrated on: its
provenance must list the runs it was calibrated on, and none may be a run of this log.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

import attrs

from oasr_core.build.decide import Measured, anchors, cells, stand_ins, to_point
from oasr_core.build.inputs import Signature
from oasr_core.build.sources import LogSource
from oasr_core.database import signature_key
from oasr_core.partition import Cell, Point
from oasr_core.types import Family, Problem

LEGEND = [
    "regret at a point = time of the choice / best time measured there - 1 (0% = the oracle)",
    "n: points scored; miss: points whose choice was never measured there (not counted in the "
    "regret); geo%: geometric mean; p95%: 95th percentile; max%: worst; wtd%: mean weighted "
    "by census traffic",
]
"""The lines :meth:`EvalReport.lines` ends with: what each column means."""


def exact_point(sig: Signature, m: int) -> str | None:
    """The exact point a signature's size ``m`` was measured at (exact-point families)."""
    return next((p.point for p in sig.points if p.m == m), None)


class Selector(Protocol):
    """Something that names a choice for a signature's point."""

    name: str

    def choose(self, sig: Signature, m: int, measured: Sequence[str]) -> str | None:
        """The choice id at size ``m`` (``measured``: the arms timed there), or None."""


@attrs.frozen
class FixedSelector:
    """Always the same choice (``default``, ``torch``)."""

    name: str
    choice: str

    def choose(self, sig: Signature, m: int, measured: Sequence[str]) -> str | None:
        return self.choice


@attrs.frozen
class TableSelector:
    """A tuning file, looked up as the runtime does: exact dtype key, then its class."""

    name: str
    table: Any
    family: Family

    def choose(self, sig: Signature, m: int, measured: Sequence[str]) -> str | None:
        dims = tuple(v for _, v in sig.dims)
        point = exact_point(sig, m)
        for dt in self.family.key_dtypes(sig.dtype):
            entry = self.table.entries.get(signature_key(self.family, sig.op, dt, dims))
            if entry is not None:
                hit = entry.lookup(m, point)
                if hit is not None:
                    return hit
        return self.family.untuned_choice.value


@attrs.frozen
class ModelSelector:
    """A cost model: ``pick(problem, measured) -> choice``; ``calibrated_on`` lists run ids."""

    name: str
    pick: Callable[[Problem, Sequence[str]], str | None]
    family: Family
    calibrated_on: frozenset[str] | None = None

    def choose(self, sig: Signature, m: int, measured: Sequence[str]) -> str | None:
        return self.pick(sig.problem(self.family, m, exact_point(sig, m)), measured)


@attrs.frozen
class Stats:
    """Regret statistics over a set of points (fractions, not percent)."""

    n: int
    missing: int
    geomean: float
    p95: float
    max: float
    weighted: float

    @classmethod
    def of(cls, regrets: Sequence[float | None], weights: Sequence[float]) -> Stats:
        """Statistics of ``regrets`` (None: missing) with their point weights."""
        pairs = [(r, w) for r, w in zip(regrets, weights, strict=True) if r is not None]
        got = sorted(r for r, _ in pairs)
        missing = len(regrets) - len(got)
        if not got:
            return cls(0, missing, math.nan, math.nan, math.nan, math.nan)
        geo = math.exp(sum(math.log1p(r) for r in got) / len(got)) - 1.0
        p95 = got[max(0, math.ceil(0.95 * len(got)) - 1)]
        total = sum(w for _, w in pairs)
        weighted = sum(r * w for r, w in pairs) / total if total else math.nan
        return cls(len(got), missing, geo, p95, got[-1], weighted)


@attrs.frozen
class SelectorReport:
    """One selector's scores, overall and per signature (``excluded``: why not scored)."""

    name: str
    overall: Stats | None
    per_signature: Mapping[str, Stats] = attrs.field(factory=dict)
    choices: Mapping[tuple[str, int], str | None] = attrs.field(factory=dict)
    excluded: str | None = None


@attrs.frozen
class EvalReport:
    """Every selector's report over the log's points."""

    selectors: tuple[SelectorReport, ...]
    signatures: tuple[Signature, ...]
    points: Mapping[str, tuple[Point, ...]]
    runs: frozenset[str]

    def lines(self) -> list[str]:
        """A readable table: overall per selector, then per signature."""
        def pct(x: float) -> str:
            return "    -" if math.isnan(x) else f"{100 * x:5.1f}"

        out = [f"{'selector':<16} {'n':>5} {'miss':>5} {'geo%':>6} {'p95%':>6} {'max%':>6} "
               f"{'wtd%':>6}"]
        for rep in self.selectors:
            if rep.overall is None:
                out.append(f"{rep.name:<16} {rep.excluded}")
                continue
            s = rep.overall
            out.append(f"{rep.name:<16} {s.n:>5} {s.missing:>5} {pct(s.geomean):>6} "
                       f"{pct(s.p95):>6} {pct(s.max):>6} {pct(s.weighted):>6}")
        for sig in self.signatures:
            out.append(sig.key)
            for rep in self.selectors:
                s = rep.per_signature.get(sig.key)
                if s is not None:
                    out.append(f"  {rep.name:<14} {s.n:>5} {s.missing:>5} {pct(s.geomean):>6} "
                               f"{pct(s.p95):>6} {pct(s.max):>6} {pct(s.weighted):>6}")
        return out + LEGEND

    def to_json(self) -> dict[str, Any]:
        """JSON-ready report (NaN as null)."""
        def stats(s: Stats | None) -> Any:
            if s is None:
                return None
            return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                    for k, v in attrs.asdict(s).items()}

        return {"runs": sorted(self.runs), "selectors": [
            {"name": r.name, "excluded": r.excluded, "overall": stats(r.overall),
             "per_signature": {k: stats(v) for k, v in r.per_signature.items()}}
            for r in self.selectors]}


def agreement(report: EvalReport, a: str, b: str, *, tol: float = 0.01,
              census_only: bool = True) -> float:
    """The weighted fraction of points where selectors ``a`` and ``b`` serve the same choice,
    or choices measured within ``tol`` of each other (two builds of one census agree?)."""
    ra, rb = (next(r for r in report.selectors if r.name == n) for n in (a, b))
    agree = total = 0.0
    for sig in report.signatures:
        for p in report.points[sig.key]:
            if census_only and p.fill:
                continue
            ca, cb = ra.choices.get((sig.key, p.m)), rb.choices.get((sig.key, p.m))
            ta, tb = (p.time(c) if c is not None else math.inf for c in (ca, cb))
            same = ca == cb or (math.isfinite(ta) and math.isfinite(tb)
                                and abs(ta - tb) <= tol * min(ta, tb))
            total += p.weight
            agree += p.weight if same else 0.0
    return agree / total if total else math.nan


def _matrix(arm_rows: Sequence[Mapping[str, Any]], family: Family
            ) -> tuple[list[Signature], dict[str, tuple[Point, ...]],
                       dict[tuple[str, int], dict[str, str]]]:
    source = LogSource(arm_rows)
    fallback = family.fallback.value
    sigs = source.signatures(family)
    matrix, aliases = {}, {}
    for sig in sigs:
        pts = []
        for pp in sig.points:
            main = source.main(sig, pp, ())
            cross = Measured.from_rows("cross", source.groups.get((sig.key, pp.m, "cross"), []))
            if not main.survivors():
                continue
            row = cells(main, cross if cross.arms else None, anchors(main, pp.alpha, fallback))
            for name, arm in main.ok().items():
                row.setdefault(name, Cell(arm.median_ms, arm.sigma_ms, arm.issue_us,
                                          arm.solo_ms, arm.overlap, arm.rounds))
            aliases[(sig.key, pp.m)] = stand_ins(main)
            pts.append(to_point(pp, row))
        matrix[sig.key] = tuple(pts)
    return sigs, matrix, aliases


def log_matrix(arm_rows: Sequence[Mapping[str, Any]], family: Family
               ) -> tuple[list[Signature], dict[str, tuple[Point, ...]], dict[str, str]]:
    """The signatures of a log, each point's matrix row (coarse estimates included), and
    aliases: the configs a sentinel stands for at every point (the default config's id ->
    ``default``). A config a sentinel stands for at some points only (the heuristic's pick)
    is aliased per point by :func:`evaluate`."""
    sigs, matrix, per_point = _matrix(arm_rows, family)
    common: dict[str, str] | None = None
    for found in per_point.values():
        common = dict(found) if common is None else {
            c: s for c, s in common.items() if found.get(c) == s}
    return sigs, matrix, common or {}


def evaluate(arm_rows: Sequence[Mapping[str, Any]], family: Family,
             selectors: Sequence[Selector], *, census_only: bool = False) -> EvalReport:
    """Score ``selectors`` on the points of ``arm_rows`` (see the module docstring)."""
    sigs, matrix, aliases = _matrix(arm_rows, family)
    runs = frozenset(str(r.get("run")) for r in arm_rows)
    reports = []
    for sel in selectors:
        why = _excluded(sel, runs)
        if why is not None:
            reports.append(SelectorReport(sel.name, None, excluded=why))
            continue
        per_sig, choices, all_r, all_w = {}, {}, [], []
        for sig in sigs:
            regrets, weights = [], []
            for p in matrix[sig.key]:
                if census_only and p.fill:
                    continue
                choice = sel.choose(sig, p.m, sorted(p.cells))
                if choice not in p.cells:
                    choice = aliases.get((sig.key, p.m), {}).get(choice, choice)
                choices[(sig.key, p.m)] = choice
                t = p.time(choice) if choice is not None else math.inf
                regrets.append(t / p.best() - 1.0 if math.isfinite(t) else None)
                weights.append(p.weight)
            if regrets:
                per_sig[sig.key] = Stats.of(regrets, weights)
            all_r += regrets
            all_w += weights
        reports.append(SelectorReport(sel.name, Stats.of(all_r, all_w), per_sig, choices))
    return EvalReport(tuple(reports), tuple(sigs), matrix, runs)


def hook_model_selector(pm: Any, family: Family, lane: Any, model: Mapping[str, Any] | None,
                        name: str = "model") -> ModelSelector:
    """The runtime model tier (``oasr_model_select``) as a selector over measured configs.

    Its calibration provenance is ``model["calibrated_on"]["runs"]`` (the measurement runs
    its coefficients were fitted on); a payload without it that serves the uncalibrated
    structure (``"serve": "structure"``) used no log; any other is of unknown provenance.
    """
    payload = model or {}
    runs = (payload.get("calibrated_on") or {}).get("runs")
    if runs is None and payload.get("serve") == "structure":
        runs = ()

    def pick(problem: Problem, measured: Sequence[str]) -> str | None:
        candidates = tuple(c for c in (lane.config(n) for n in measured) if c is not None)
        if not candidates:
            return None
        got = pm.hook.oasr_model_select(family=family, lane=lane, problem=problem,
                                        candidates=candidates, model=model)
        return got.id if got is not None and got in candidates else None

    return ModelSelector(name, pick, family, None if runs is None else frozenset(runs))


def _excluded(sel: Selector, runs: Collection[str]) -> str | None:
    if not isinstance(sel, ModelSelector):
        return None
    if sel.calibrated_on is None:
        return ("not scored: its provenance does not record which measurement runs it was "
                "fitted on, so it may have been fitted on this log")
    shared = sorted(set(sel.calibrated_on) & set(runs))
    if shared:
        return (f"not scored: fitted on this log's run(s) {', '.join(shared[:3])}, and a "
                "model scored on its own training data flatters itself; score it with "
                "--log of another run")
    return None
