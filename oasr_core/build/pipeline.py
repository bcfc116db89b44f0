"""The build pipeline: per signature, measure, cross-evaluate, partition, write.

:func:`run_build` takes planned signatures and a measurement source (live or a log) and,
heaviest signature first:

1. reuses a signature the checkpoint finished with the same digest (points, knobs,
   candidates, protocol), arch, lane and implementation hash: nothing is re-measured;
2. otherwise, unless the time budget is spent, measures every point (its candidates with
   successive halving, keeping the fallback, torch and the incumbent to the end; every
   candidate fully when the lane has no cost model), then cross-evaluates each point's top
   finalists at every other point (a finalist a sentinel arm stood for at a point, such as
   the heuristic's pick there, takes that arm's measurement), partitions the M axis
   against the family's fallback (:mod:`oasr_core.partition`) and makes the entry. An
   entry is written whenever a point was measured, even when every region is the
   fallback: ``[[null, "heuristic"]]`` says measured, where an absent entry says never
   looked. An **exact signature** (an exact-point family's, every census point carrying
   its exact point, e.g. a fixed window's ``"8x3000"``) is measured at exactly those shapes
   and its entry serves them by point; with :data:`EXACT_REGION_SIZES` sizes or more it
   gets regions over the dynamic axis too (:func:`exact_decisions`);
3. writes the entry through the core's locked merge (:func:`oasr_core.database.write_entries`)
   and checkpoints the signature (fsync'ed), so a killed build loses at most the signature it
   was measuring.

Finally the coverage basis (configs covering every point of every signature) and the
provenance are written. Provenance and stamps come from the measurements, never from the
clock, so replaying a build's log writes the same file.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from oasr_core.bench import PROTOCOL_VERSION
from oasr_core.database import Entry, write_entries
from oasr_core.measurements import Checkpoint, digest, reusable
from oasr_core.partition import PartitionOptions, Point, coverage_basis, partition
from oasr_core.progress import signature_ticks
from oasr_core.types import Config, Family, Sentinel, thaw

from .decide import (
    Measured,
    anchors,
    cells,
    failure_note,
    finalists,
    make_entry,
    point_from_json,
    point_json,
    stand_ins,
    to_point,
)
from .inputs import Signature
from .sources import MeasurementSource


@attrs.frozen
class BuildOptions(PartitionOptions):
    """The build's knobs (``oasr tune build`` flags of the same names): the partition's
    (inherited, in the same order) and the build's own."""

    top_k: int | None = None
    """Configs each cost model keeps per point when pruning (None: the effort level's, else
    28). Measured on the H200 log of the 111-config sm90 gemm space
    (benchmarks/results/h200_cost_model.md): the union of both models' top-28 held the
    exhaustive best within 1% at 70/70 points (top-20: 68/70)."""
    finalists: int = 3
    max_points: int | None = None
    """Points per signature, fill included (None: the effort level's, else 24)."""
    thin: bool = False
    fill: bool = True
    exact_dtype: bool = False
    keep_torch: bool = True
    basis_size: int = 8
    budget_s: float | None = None
    fresh: bool = False
    resume: bool = True
    """Reuse signatures the checkpoint finished (False: measure everything anew)."""
    prune: bool = True
    """Prune with the calibrated model an earlier build shipped, when there is one (the
    rankers it adds are part of the source's fingerprint, hence of each digest)."""
    effort: str | None = None
    """An effort level of :mod:`oasr_core.build.effort` (``quick``, ``default``,
    ``exhaustive``): each signature compiles and measures its pooled candidate set, with the
    level's points and rounds; ``top_k`` / ``max_points`` given here override the level's.
    None: each point measures its own top-k (a replay: every row of the log)."""
    coarse_cells: bool | None = None
    """Matrix rows take arms halving dropped early too (``Effort.coarse_cells``; None: the
    level's, else off)."""
    max_units: int | None = None
    """Compile units the census's candidate sets may need at most (None: the level's cap,
    :func:`oasr_core.build.effort.unit_cap`; 0: no cap). Only with an effort level."""
    units_per_signature: float | None = None
    """The level's cap per signature (``Effort.units_per_signature``), filled in by
    :meth:`resolved` when ``max_units`` is not given."""

    def resolved(self) -> BuildOptions:
        """These options with ``top_k`` and ``max_points`` filled in from the level (or the
        defaults, 28 and 24); ``exhaustive`` also turns pruning off."""
        from .effort import level

        lvl = level(self.effort) if self.effort is not None else None
        top_k = self.top_k if self.top_k is not None else (
            lvl.top_k if lvl is not None and lvl.top_k is not None else 28)
        points = self.max_points if self.max_points is not None else (
            lvl.max_points if lvl is not None else 24)
        prune = self.prune and not (lvl is not None and lvl.top_k is None)
        coarse = self.coarse_cells if self.coarse_cells is not None else (
            lvl is not None and lvl.coarse_cells)
        given = self.max_units is not None
        units = self.max_units if given else (lvl.max_units if lvl is not None else None)
        per_sig = self.units_per_signature if given or lvl is None else (
            lvl.units_per_signature)
        return attrs.evolve(self, top_k=top_k, max_points=points, prune=prune,
                            coarse_cells=coarse, max_units=units or None,
                            units_per_signature=per_sig if units else None)

    def unit_cap(self, signatures: int) -> int | None:
        """The compile-unit cap of a census of ``signatures`` signatures (resolved knobs)."""
        from .effort import unit_cap

        return unit_cap(self.max_units, self.units_per_signature, signatures)

    def partition_options(self) -> PartitionOptions:
        """The partition's share of the knobs."""
        return PartitionOptions(**{f.name: getattr(self, f.name)
                                   for f in attrs.fields(PartitionOptions)})

    def knobs(self) -> dict[str, Any]:
        """The knobs that change what a signature measures or decides (for its digest); the
        effort level only where one is set, so a legacy build's knobs read as before."""
        skip = ("budget_s", "fresh", "resume", "prune") + (
            ("effort", "coarse_cells") if self.effort is None and not self.coarse_cells else ()
        ) + (("max_units", "units_per_signature")
             if self.effort is None or self.resolved().max_units is None else ())
        return attrs.asdict(self.resolved(), filter=lambda a, _v: a.name not in skip)


@attrs.frozen
class Outcome:
    """One finished signature."""

    key: str
    entry: Entry | None
    configs: Mapping[str, Config]
    points: tuple[Point, ...]
    runs: tuple[str, ...]
    contended: bool
    reused: bool = False


@attrs.frozen
class BuildResult:
    """What a build did."""

    out: Path
    entries: Mapping[str, Entry | None]
    reused: tuple[str, ...]
    skipped: tuple[str, ...]
    """Signatures not measured because the time budget was spent."""
    points: int
    """Points measured (each signature's own runs; cross-evaluation not counted)."""
    elapsed_s: float
    runs: tuple[str, ...]
    messages: tuple[str, ...] = ()
    family: str | None = None
    """The family built."""


def tune_signature(sig: Signature, source: MeasurementSource, family: Family,
                   options: BuildOptions, tick: Callable[[], None] = lambda: None) -> Outcome:
    """Measure, cross-evaluate and partition one signature (see the module docstring)."""
    fallback = family.fallback.value
    always = {fallback}
    if options.keep_torch and Sentinel.TORCH in family.sentinels:
        always.add(Sentinel.TORCH.value)
    mains: dict[int, Measured] = {}
    for pp in sig.points:
        keep = always | ({pp.incumbent} if pp.incumbent else set())
        main = source.main(sig, pp, sorted(keep))
        mains[pp.m] = every_timed(main) if options.coarse_cells else main
        tick()
    alphas = {pp.m: pp.alpha for pp in sig.points}
    timed = [pp for pp in sig.points if mains[pp.m].survivors()]
    failures = [failure_note(family.dynamic_axis, pp.m, mains[pp.m]) for pp in sig.points
                if not mains[pp.m].survivors()]
    incumbents = {pp.incumbent for pp in timed if pp.incumbent}
    fin = finalists({pp.m: mains[pp.m] for pp in timed}, alphas, options.finalists, incumbents)
    points, measured = [], {}
    for pp in timed:
        main = mains[pp.m]
        survivors = main.survivors()
        # A finalist a sentinel arm stood for here is already timed, as that arm
        # (the heuristic's pick at this size is measured once, as "heuristic").
        stood = {c: s for c, s in stand_ins(main).items() if c in fin and s in survivors}
        missing = [n for n in fin if n not in survivors and n not in stood]
        cross, anchor = None, []
        if missing:
            anchor = anchors(main, pp.alpha, fallback)
            cross = source.cross(sig, pp, [*missing, *(a for a in anchor if a not in missing)])
        row = cells(main, cross, anchor)
        for config, sentinel in stood.items():
            row.setdefault(config, row[sentinel])
        points.append(to_point(pp, row))
        measured[pp.m] = main if cross is None else attrs.evolve(
            main, contended=main.contended or cross.contended,
            params={**cross.params, **main.params})
    part = partition(points, fallback, options.partition_options(), census_max=sig.census_max)
    exact: dict[str, str] = {}
    if sig.exact and timed:
        part, exact = exact_decisions(timed, points, part, fallback, options)
    entry = make_entry(family.dynamic_axis, points, measured, part, fallback, failures, exact)
    params = {}
    for m in measured.values():
        params.update(m.params)
    used = {n for p in points for n in p.cells} | set(entry.choices() if entry else ())
    configs = {n: Config.from_json(n, params[n]) for n in sorted(used)
               if Sentinel.parse(n) is None and params.get(n, {}).get("lane")}
    runs = sorted({m.run for m in mains.values() if m.run})
    return Outcome(sig.key, entry, configs, tuple(points), tuple(runs),
                   any(m.contended for m in measured.values()))


def every_timed(main: Measured) -> Measured:
    """``main`` with every timed arm a survivor: the arms halving dropped enter the matrix
    with their coarse medians (``BuildOptions.coarse_cells``)."""
    return attrs.evolve(main, arms=[attrs.evolve(a, stage=None) if a.ok else a
                                    for a in main.arms])


EXACT_REGION_SIZES = 6
"""An exact signature measured at this many sizes or more also gets regions over the dynamic
axis (its points then stay only where they differ from the region's choice)."""


def exact_decisions(timed: Sequence[Any], points: Sequence[Point], part: Any, fallback: str,
                    options: BuildOptions) -> tuple[Any, dict[str, str]]:
    """An exact signature's partition and its exact points (point key -> choice).

    Each point's own choice is the partition of that point alone (the same gate against the
    fallback). Below :data:`EXACT_REGION_SIZES` sizes the entry has no regions: it serves
    exactly its points, and every other shape falls to the next tier, as an unmeasured one.
    """
    opts = options.partition_options()
    by_m = {p.m: p for p in points}
    own = {m: partition([p], fallback, opts, census_max=m).choices[0] for m, p in by_m.items()}
    ms = sorted(by_m)
    if len(ms) >= EXACT_REGION_SIZES:
        served = dict(zip(ms, part.choices, strict=True))
        slower = {m for m in ms if by_m[m].time(served[m]) > by_m[m].time(own[m]) * (1 + opts.tie)}
        exact = {key: own[pp.m] for pp in timed for key in pp.points if pp.m in slower}
        return part, exact
    exact = {key: own[pp.m] for pp in timed for key in pp.points}
    return attrs.evolve(part, regions=(), choices=tuple(own[m] for m in ms)), exact


def signature_digest(sig: Signature, options: BuildOptions, fingerprint: Sequence[str]) -> str:
    """What a signature measures and how it decides: a checkpoint record is reused iff equal.

    Incumbents are left out: the entries a killed build already wrote become the incumbents
    of its restart, which must still reuse them.
    """
    return digest({"key": sig.key, "dtype": sig.dtype, "census_max": sig.census_max,
                   "points": [[p.m, round(p.weight, 9), round(p.calls, 9), p.must,
                               round(p.alpha, 6), p.fill, *([list(p.points)] if p.points else [])]
                              for p in sig.points],
                   "knobs": options.knobs(), "candidates": list(fingerprint),
                   "protocol": PROTOCOL_VERSION})


def _record(out: Outcome, dg: str, arch: str, lane: str, impl_hash: Any) -> dict[str, Any]:
    return {"key": out.key, "digest": dg, "arch": arch, "lane": lane, "impl_hash": impl_hash,
            "entry": None if out.entry is None else _entry_json(out.entry),
            "configs": {k: c.to_json() for k, c in sorted(out.configs.items())},
            "points": [point_json(p) for p in out.points], "runs": list(out.runs),
            "contended": out.contended}


def _entry_json(entry: Entry) -> dict[str, Any]:
    out = {"regions": [list(r) for r in entry.regions], "evidence": thaw(entry.evidence),
           "source": entry.source.value, "notes": list(entry.notes)}
    if entry.points:
        out["points"] = dict(entry.points)
    return out


def _from_record(rec: Mapping[str, Any]) -> Outcome:
    raw = rec.get("entry")
    entry = None if raw is None else Entry(regions=[tuple(r) for r in raw["regions"]],
                                           points=raw.get("points") or {},
                                           evidence=raw["evidence"], source=raw["source"],
                                           notes=raw["notes"])
    return Outcome(str(rec["key"]), entry,
                   {k: Config.from_json(k, v) for k, v in rec.get("configs", {}).items()},
                   tuple(point_from_json(p) for p in rec.get("points", ())),
                   tuple(rec.get("runs", ())), bool(rec.get("contended")), reused=True)


@contextlib.contextmanager
def _progress(enabled: Any, total: int) -> Iterator[Callable[[str], Callable[[], None]]]:
    # enabled: a bool or an oasr_core.progress.ProgressMode (bar, plain lines, off)
    with signature_ticks(enabled, total) as bar:
        yield bar


def run_build(signatures: Sequence[Signature], source: MeasurementSource, *, family: Family,
              arch: str, lane: str, out: Path, soft: Mapping[str, Any],
              options: BuildOptions | None = None, checkpoint: Checkpoint | None = None,
              fingerprint: Sequence[str] = (), progress: bool = False,
              clock: Callable[[], float] = time.monotonic,
              fit_model: Callable[[], Mapping[str, Any] | None] | None = None,
              prepare: Callable[[Signature], None] | None = None) -> BuildResult:
    """Build every signature into the tuning file ``out`` (see the module docstring).

    ``fit_model`` returns the cost-model payload the file carries (called once, after the
    last signature; None keeps the file's payload as it is). ``prepare(sig)`` runs before a
    signature is measured (a live build waits there for its compiled module).
    """
    options = (options or BuildOptions()).resolved()
    start = clock()
    records = checkpoint.load() if checkpoint is not None else {}
    impl = soft.get("impl_hash")
    outcomes: list[Outcome] = []
    skipped: list[str] = []
    messages: list[str] = []
    first = True
    with _progress(progress, sum(len(s.points) for s in signatures)) as bar:
        for sig in signatures:
            dg = signature_digest(sig, options, fingerprint)
            rec = records.get(sig.key)
            tick = bar(sig.key)
            if checkpoint is not None and reusable(rec, digest=dg, arch=arch, lane=lane,
                                                   impl_hash=impl):
                outcome = _from_record(rec)
                for _ in sig.points:
                    tick()
            elif options.budget_s is not None and clock() - start >= options.budget_s:
                skipped.append(sig.key)
                continue
            else:
                if prepare is not None:
                    prepare(sig)
                outcome = tune_signature(sig, source, family, options, tick)
                if checkpoint is not None:
                    checkpoint.append(_record(outcome, dg, arch, lane, impl))
            outcomes.append(outcome)
            if outcome.entry is None:
                messages.append(f"{sig.key}: no point could be measured; its entry, if any, "
                                "is left as it was")
            else:
                write_entries(out, family=family, arch=arch, lane=lane,
                              entries={sig.key: outcome.entry}, configs=outcome.configs,
                              soft=soft, provenance=_provenance(outcomes),
                              fresh=options.fresh and first)
                first = False
    basis = coverage_basis([o.points for o in outcomes], options.cover_eps, options.basis_size)
    configs = {k: c for o in outcomes for k, c in o.configs.items()}
    if not first:
        payload = fit_model() if fit_model is not None else None
        write_entries(out, family=family, arch=arch, lane=lane, entries={},
                      configs={k: configs[k] for k in basis if k in configs}, soft=soft,
                      provenance=_provenance(outcomes),
                      coverage_basis=[k for k in basis if k in configs],
                      **({"model": payload} if payload is not None else {}))
    if skipped:
        messages.append(f"time budget of {options.budget_s:g} s spent: {len(skipped)} "
                        f"signature(s) not measured: {', '.join(skipped)}")
    return BuildResult(out=out, entries={o.key: o.entry for o in outcomes},
                       reused=tuple(o.key for o in outcomes if o.reused),
                       skipped=tuple(skipped),
                       points=sum(len(o.points) for o in outcomes if not o.reused),
                       elapsed_s=clock() - start,
                       runs=tuple(sorted({r for o in outcomes for r in o.runs})),
                       messages=tuple(messages), family=family.name)


def _provenance(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    return {"tool": "oasr tune build", "bench_protocol": PROTOCOL_VERSION,
            "runs": sorted({r for o in outcomes for r in o.runs}),
            "contended": any(o.contended for o in outcomes)}
