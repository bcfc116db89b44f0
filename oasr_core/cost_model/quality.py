"""Held-out quality of the cost model, and the model ``oasr tune build`` writes.

Leave-one-signature-out: for every signature (op, dtype, N, K) of a log, fit on the rows of
all *other* signatures and score on the held-out one, point by point (each measured M).
At a point the candidates are the lane configs measured there; per ranker:

- **top-1 regret**: measured time of the ranker's first choice over the best measured lane
  config, minus 1 (geomean over points of ``1 + regret``, minus 1; p95; max);
- **recall@k**: whether the ranker's top-k holds a config within 1 % of that best;
- **pruned hit** (structure's and calibrated model's top-k, plus the forced arms, sentinel
  arms and configs the model cannot describe): whether the set holds an arm within 1 % of
  the best of *all* arms measured at the point (what ``oasr tune build`` would find).

A ranker is any ``Callable[[Point], Sequence[str]]`` returning arm ids best first; the
built-in ones are the structure, the group-calibrated and the calibrated model, and the
lane default. External ones (nvMatmulHeuristics) plug in through ``extra``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core.arch import ArchProfile
from oasr_core.cost_model.calibrate import DesignRow, LogRow, design, fit, parse_rows
from oasr_core.cost_model.fallback import fit_fallbacks
from oasr_core.cost_model.features import CostFeatures, FeatureSource
from oasr_core.cost_model.model import SERVE_MODES, CostModel
from oasr_core.cost_model.structure import DEFAULT_KNOBS, Knobs

NEAR = 0.01
"""A config "within 1 %" of the best counts as finding it."""


@attrs.frozen
class Point:
    """One measured point: every arm's time and the describable configs' features."""

    signature: tuple[str, str, int, int]
    m: int
    times: Mapping[str, float]
    features: Mapping[str, CostFeatures]
    sentinels: frozenset[str]

    @property
    def lane_best(self) -> float:
        return min((t for c, t in self.times.items() if c not in self.sentinels), default=math.inf)


Ranker = Callable[[Point], Sequence[str]]


def points_of(rows: Iterable[LogRow]) -> list[Point]:
    """Group rows into points, sorted by signature then M."""
    times: dict[tuple, dict[str, float]] = defaultdict(dict)
    feats: dict[tuple, dict[str, CostFeatures]] = defaultdict(dict)
    sentinels: dict[tuple, set[str]] = defaultdict(set)
    for r in rows:
        key = (r.signature, r.m)
        times[key][r.config] = r.t_us
        if r.features is not None:
            feats[key][r.config] = r.features
        if r.sentinel:
            sentinels[key].add(r.config)
    return [Point(signature=s, m=m, times=times[(s, m)], features=feats[(s, m)],
                  sentinels=frozenset(sentinels[(s, m)])) for s, m in sorted(times)]


def model_ranker(model: CostModel) -> Ranker:
    """Rank a point's describable configs by ``model``'s predictions."""
    def ranked(point: Point) -> list[str]:
        _, dtype, n, k = point.signature
        preds = [(model.predict(c, f, point.m, n, k, dtype), c) for c, f in point.features.items()]
        return [c for t, c in sorted(preds) if math.isfinite(t)]
    return ranked


def default_ranker(default_id: str) -> Ranker:
    """The lane default: config ``default_id``, else the point's ``default`` sentinel arm."""
    def ranked(point: Point) -> list[str]:
        return [c for c in (default_id, "default") if c in point.times][:1]
    return ranked


@attrs.frozen
class Summary:
    """One ranker's held-out figures."""

    points: int
    answered: int
    regret_geomean: float
    regret_p95: float
    regret_max: float
    recall: Mapping[int, float]

    def to_json(self) -> dict[str, Any]:
        return {"points": self.points, "answered": self.answered,
                "regret_geomean": _num(self.regret_geomean),
                "regret_p95": _num(self.regret_p95), "regret_max": _num(self.regret_max),
                "recall": {str(k): _num(v) for k, v in self.recall.items()}}


def summarise(regrets: Sequence[float | None], hits: Mapping[int, Sequence[bool]]) -> Summary:
    """Aggregate per-point regrets (None: no answer) and recall hits."""
    got = sorted(r for r in regrets if r is not None)
    if got:
        geo = math.exp(sum(math.log1p(r) for r in got) / len(got)) - 1
        p95 = got[min(len(got) - 1, math.ceil(0.95 * len(got)) - 1)]
        worst = got[-1]
    else:
        geo = p95 = worst = math.nan
    recall = {k: (sum(v) / len(v) if v else math.nan) for k, v in hits.items()}
    return Summary(points=len(regrets), answered=len(got), regret_geomean=geo, regret_p95=p95,
                   regret_max=worst, recall=recall)


@attrs.frozen
class QualityReport:
    """Held-out figures per ranker (overall and per signature), plus the pruned set's hit rate."""

    rankers: Mapping[str, Summary]
    per_signature: Mapping[tuple[str, str, int, int], Mapping[str, Summary]]
    pruned_hit: float
    pruned_size: float
    signatures: int
    points: int
    prune_k: int

    def to_json(self) -> dict[str, Any]:
        return {"held_out": {k: v.to_json() for k, v in self.rankers.items()},
                "pruned_hit": _num(self.pruned_hit), "pruned_size": _num(self.pruned_size),
                "prune_k": self.prune_k, "signatures": self.signatures, "points": self.points}

    def to_markdown(self) -> str:
        """The overall table, the pruned-set line and a per-signature regret table."""
        ks = sorted({k for s in self.rankers.values() for k in s.recall})
        lines = ["| ranker | points answered | top-1 regret geomean | p95 | max | "
                 + " | ".join(f"recall@{k}" for k in ks) + " |",
                 "|" + "---|" * (5 + len(ks))]
        for name, s in self.rankers.items():
            cells = [name, f"{s.answered}/{s.points}", _pct(s.regret_geomean),
                     _pct(s.regret_p95), _pct(s.regret_max)]
            cells += [_pct(s.recall.get(k, math.nan)) for k in ks]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", f"Pruned set (structure top-{self.prune_k} ∪ calibrated top-{self.prune_k} "
                  f"∪ forced): within 1 % of the exhaustive best at {_pct(self.pruned_hit)} "
                  f"of {self.points} points, {self.pruned_size:.1f} arms on average "
                  f"({self.signatures} signatures, leave-one-signature-out).", "",
                  "Top-1 geomean regret per held-out signature:", "",
                  "| op | dtype | N | K | points | " + " | ".join(self.rankers) + " |",
                  "|" + "---|" * (5 + len(self.rankers))]
        for (op, dtype, n, k), by_ranker in self.per_signature.items():
            points = max(s.points for s in by_ranker.values())
            cells = [op, dtype, str(n), str(k), str(points)]
            cells += [_pct(by_ranker[r].regret_geomean) if r in by_ranker else "n/a"
                      for r in self.rankers]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def _num(x: float) -> float | None:
    """JSON-safe: NaN (no data) becomes null."""
    return None if math.isnan(x) else round(x, 5)


def _pct(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:.1f}%"


def evaluate_loso(rows: Sequence[LogRow], profile: ArchProfile, *, knobs: Knobs = DEFAULT_KNOBS,
                  default_id: str | None = None, extra: Mapping[str, Ranker] | None = None,
                  ks: Sequence[int] = (1, 4, 8, 16), prune_k: int = 20,
                  forced: Iterable[str] = (), fit_options: Mapping[str, Any] | None = None
                  ) -> QualityReport:
    """Leave-one-signature-out quality of the models on ``rows`` (see the module doc).

    ``default_id`` names the lane default (a config id, or the ``default`` sentinel arm);
    ``extra`` adds rankers that need no fitting; ``forced`` ids join every pruned set.
    """
    designed = design(rows, profile, knobs)
    by_sig: dict[tuple, list[DesignRow]] = defaultdict(list)
    for d in designed:
        by_sig[d.row.signature].append(d)
    forced = set(forced) | ({default_id} if default_id else set())
    regrets: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    hits: dict[tuple, dict[str, dict[int, list[bool]]]] = defaultdict(
        lambda: defaultdict(lambda: {k: [] for k in ks}))
    pruned_hits, pruned_sizes = [], []
    models: dict[tuple, CostModel] = {}
    for point in points_of(rows):
        sig, best = point.signature, point.lane_best
        if not math.isfinite(best):
            continue
        if sig not in models:
            train = [d for s, ds in by_sig.items() if s != sig for d in ds]
            models[sig] = fit(train, profile, knobs=knobs, **(fit_options or {}))
        rankers: dict[str, Ranker] = {m: model_ranker(models[sig].using(m)) for m in SERVE_MODES}
        if default_id:
            rankers["default"] = default_ranker(default_id)
        rankers.update(extra or {})
        orders = {}
        for name, ranker in rankers.items():
            order = [c for c in ranker(point) if c in point.times
                     and (c not in point.sentinels or name == "default")]
            orders[name] = order
            regrets[sig][name].append(point.times[order[0]] / best - 1 if order else None)
            for k in ks:
                hits[sig][name][k].append(any(point.times[c] <= best * (1 + NEAR)
                                              for c in order[:k]))
        pruned = set(orders["structure"][:prune_k]) | set(orders["calibrated"][:prune_k])
        pruned |= {c for c in point.times if c in forced or c in point.sentinels
                   or c not in point.features}
        pruned_hits.append(min(point.times[c] for c in pruned)
                           <= min(point.times.values()) * (1 + NEAR))
        pruned_sizes.append(len(pruned))
    names = list(dict.fromkeys(n for by in regrets.values() for n in by))
    overall = {n: summarise([r for by in regrets.values() for r in by[n]],
                            {k: [h for by in hits.values() for h in by[n][k]] for k in ks})
               for n in names}
    per_sig = {s: {n: summarise(regrets[s][n], hits[s][n]) for n in regrets[s]}
               for s in sorted(regrets)}
    n = len(pruned_hits)
    return QualityReport(rankers=overall, per_signature=per_sig,
                         pruned_hit=sum(pruned_hits) / n if n else math.nan,
                         pruned_size=sum(pruned_sizes) / n if n else math.nan,
                         signatures=len(per_sig), points=n, prune_k=prune_k)


def build_model(log_rows: Iterable[Mapping[str, Any]], profile: ArchProfile, *,
                ops: Sequence[str], lane: str | None = None,
                features: FeatureSource | None = None, knobs: Knobs = DEFAULT_KNOBS,
                min_signatures: int = 3, margin: float = 0.005) -> CostModel:
    """The model ``oasr tune build`` writes: calibrated on every row of ``log_rows``, serving
    with whichever of structure / group / calibrated had the lowest held-out geomean regret
    (a fitted mode must beat the structure by ``margin``; with fewer than
    ``min_signatures`` signatures there is no held-out evidence and the structure serves).

    ``ops`` are the family's ops the payload serves (the runtime tier answers only for
    them), ``lane`` the lane it describes; ``features`` is the lane's ``cost_features``.
    """
    rows, skipped = parse_rows(log_rows, arch=profile.arch, lane=lane, features=features)
    model = fit(design(rows, profile, knobs), profile, knobs=knobs, lane=lane, ops=ops)
    evidence = dict(model.evidence, skipped=dict(skipped))
    serve = "structure"
    if len({r.signature for r in rows}) >= min_signatures:
        report = evaluate_loso(rows, profile, knobs=knobs)
        evidence.update(report.to_json())
        held = report.rankers
        best = held["structure"].regret_geomean
        for mode in ("group", "calibrated"):
            if held[mode].regret_geomean < best - margin:
                serve, best = mode, held[mode].regret_geomean
    fallbacks = fit_fallbacks(rows, profile)
    if fallbacks.arms:
        evidence["fallbacks_held_out"] = fallback_loso(rows, profile)
    return CostModel(profile=profile, knobs=knobs, lane=lane, ops=tuple(ops), serve=serve,
                     groups=model.groups, configs=model.configs, evidence=evidence,
                     fallbacks=fallbacks)


def fallback_loso(rows: Sequence[LogRow], profile: ArchProfile) -> dict[str, Any]:
    """Leave-one-signature-out error of the sentinel arms' rooflines, per arm and op:
    points predicted, geomean and max of ``|log(predicted / measured)|`` (as a fraction)."""
    by: dict[tuple[str, str], list[LogRow]] = defaultdict(list)
    for r in rows:
        if r.sentinel:
            by[(r.config, r.op)].append(r)
    out: dict[str, Any] = {}
    for (arm, op), rs in sorted(by.items()):
        errs = []
        for sig in sorted({r.signature for r in rs}):
            fitted = fit_fallbacks([r for r in rs if r.signature != sig], profile)
            for r in rs:
                if r.signature != sig:
                    continue
                t = fitted.predict(arm, op, r.m, r.n, r.k, r.dtype, profile)
                if t is not None and t > 0:
                    errs.append(abs(math.log(t / r.t_us)))
        if errs:
            out.setdefault(arm, {})[op] = {
                "points": len(errs),
                "error_geomean": round(math.expm1(sum(errs) / len(errs)), 5),
                "error_max": round(math.expm1(max(errs)), 5)}
    return out
