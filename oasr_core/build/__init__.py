"""``oasr tune build``: measure a census on this GPU, or replay a measurement log, into a
tuning file.

:func:`build_live` plans the census (:mod:`.inputs`), measures through the family's
``make_bench`` and the bench protocol (:class:`.sources.LiveSource`), logging every
measurement as it is made and checkpointing every finished signature; :func:`build_from_log`
takes the same decisions from a log on any machine (:class:`.sources.LogSource`). Both go
through :func:`.pipeline.run_build` after measurement.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from oasr_core import database, stamps
from oasr_core.bench import PROTOCOL_VERSION, BenchOptions, CudaGraphTimer, Timer
from oasr_core.errors import ConfigurationError, DatabaseError
from oasr_core.measurements import (
    LOG_SCHEMA_VERSION,
    Checkpoint,
    MeasurementLog,
    new_run_id,
    read_logs,
    reusable,
    rows_by_run,
    utc_now,
)
from oasr_core.sentinels import DEFAULT_STAMP, stamp_sentinels
from oasr_core.types import Family, Lane, Sentinel

from . import compiling, effort, model
from .inputs import (
    Census,
    PlannedPoint,
    Signature,
    census_families,
    census_from_widths,
    census_of,
    merge_censuses,
    plan,
    read_census,
    read_censuses,
)
from .pipeline import BuildOptions, BuildResult, Outcome, run_build, tune_signature
from .sources import LiveSource, LogSource, MeasurementSource, Ranker, exhaustive, resolve_choice

__all__ = [
    "BuildOptions",
    "BuildResult",
    "Census",
    "LivePlan",
    "LiveSource",
    "LogSource",
    "MeasurementSource",
    "Outcome",
    "PlannedPoint",
    "Ranker",
    "Signature",
    "build_from_log",
    "build_live",
    "census_families",
    "census_from_widths",
    "census_of",
    "default_paths",
    "exhaustive",
    "log_families",
    "logged_default",
    "merge_censuses",
    "plan",
    "plan_live",
    "read_census",
    "read_censuses",
    "resolve_choice",
    "resolve_out",
    "run_build",
    "tune_signature",
    "with_incumbents",
]


def resolve_out(out: str | os.PathLike[str], arch: str, family: Family) -> Path:
    """``user`` / ``system`` tier file of ``family`` on ``arch``, a ``.json`` file, or a root."""
    if out == "user":
        root = database.user_root()
        if root is None:
            raise ConfigurationError("--out user: the user tier is disabled "
                                     f"({database.USER_ENV}); pass --out PATH")
        return database.tier_path(root, arch, family)
    if out == "system":
        root = database.system_root() or database.default_system_root()
        if root is None:
            raise ConfigurationError("--out system: no system tier directory found; set "
                                     f"{database.SYSTEM_ENV} or pass --out PATH")
        return database.tier_path(root, arch, family)
    path = Path(out)
    return path if path.suffix == ".json" else database.tier_path(path, arch, family)


def default_paths(out: Path, family: Family) -> tuple[Path, Path]:
    """The measurement log and checkpoint beside a tuning file (``measurements/``)."""
    folder = out.parent / "measurements"
    return folder / f"{family.stem}.jsonl", folder / f"{family.stem}.checkpoint.jsonl"


def _incumbent(entry: Any, m: int, family: Family, lane: Lane, problem: Any) -> str | None:
    choice = entry.lookup(m, problem.point) if entry is not None else None
    if choice is None:
        return None
    sentinel = Sentinel.parse(choice)
    if sentinel is not None:
        return choice if sentinel in family.sentinels or sentinel is family.fallback else None
    config = lane.config(choice)
    return choice if config is not None and lane.unusable_reason(config, problem) is None \
        else None


def _readable(path: Path, family: Family, lane: Lane) -> Any:
    try:
        current = database.read_tuning_file(path)
    except database.SchemaTooNewError:
        raise
    except Exception:
        return None
    return current if (current.family, current.lane) == (family.name, lane.name) else None


def with_incumbents(signatures: Sequence[Signature], files: Sequence[Path], family: Family,
                    lane: Lane) -> list[Signature]:
    """``signatures`` with each point's incumbent: what serves it now.

    ``files`` are tuning files in precedence order (the file being rebuilt, then the system
    tier); a signature's incumbents come from the first holding its key. A choice the lane
    can no longer run there is no incumbent.
    """
    tables = [t for t in (_readable(f, family, lane) for f in dict.fromkeys(files)
                          if f.exists()) if t is not None]
    result = []
    for sig in signatures:
        entry = next((t.entries[sig.key] for t in tables if sig.key in t.entries), None)
        points = [attrs.evolve(p, incumbent=_incumbent(entry, p.m, family, lane,
                                                       sig.problem(family, p.m, p.point)))
                  for p in sig.points]
        result.append(attrs.evolve(sig, points=points))
    return result


@attrs.define
class LivePlan:
    """What a live build settled before measuring: the run (its header already in the log),
    the planned signatures with their incumbents, the measuring source, the checkpoint and
    the signatures it finished, and each signature's pooled candidate set.

    :func:`build_live` measures it on this device; :mod:`oasr_core.build.distributed` shards
    its signatures over workers, with the same digests and sets.
    """

    census: Census
    family: Family
    lane: Lane
    arch: str
    out: Path
    options: BuildOptions
    level: Any
    """The effort level (:class:`~oasr_core.build.effort.Effort`), or None."""
    log: MeasurementLog
    run: str
    soft: dict[str, Any]
    profile: Any
    signatures: list[Signature]
    source: LiveSource
    checkpoint: Checkpoint | None
    done: set[str]
    """Signatures the checkpoint finished (reused, never measured)."""
    pooled: bool
    """Each signature measures one pooled candidate set (:attr:`planned`)."""
    planned: dict[str, tuple[Any, ...]]

    @property
    def fingerprint(self) -> list[str]:
        return self.source.fingerprint()

    def fit_model(self) -> dict[str, Any] | None:
        """The cost-model payload fitted on every row of the log for this lane and arch."""
        return _fit_from(self.log.path, self.family, self.lane, self.arch, self.profile,
                         self.soft.get("impl_hash"))


def plan_live(census: Census, *, family: Family, lane: Lane, arch: str, out: Path,
              timer: Timer | None, options: BuildOptions | None = None,
              log_path: Path | None = None, checkpoint_path: Path | None = None,
              rankers: Sequence[Ranker] | None = None,
              bench_options: BenchOptions | None = None, soft: dict[str, Any] | None = None,
              profile: Any = None, run: str | None = None, device_name: str | None = None,
              l2_bytes: int | None = None, write_header: bool = True) -> LivePlan:
    """Plan a live build (see :func:`build_live` for the arguments) and log its run header.

    ``run`` continues a run of that id (its header is written once); ``device_name`` and
    ``l2_bytes`` describe the measuring device when ``timer`` is None (it lives elsewhere);
    ``write_header=False`` plans without writing anything (a plan shown, not run).
    """
    options = (options or BuildOptions()).resolved()
    if family.make_bench is None:
        raise ConfigurationError(f"family {family.name} has no make_bench: it cannot be "
                                 "measured here; rebuild from a measurement log (--from-log)")
    if timer is not None:
        device_name, l2_bytes = getattr(timer, "name", None), timer.l2_bytes
    lvl = effort.level(options.effort) if options.effort is not None else None
    bench = bench_options or BenchOptions()
    if lvl is not None:
        bench = attrs.evolve(bench, stage_rounds=lvl.stage_rounds)
    bench = attrs.evolve(bench, working_set_bytes=census.working_set_bytes,
                         l2_bytes=l2_bytes, lane=lane.name,
                         resolve=functools.partial(resolve_choice, family, lane))
    soft = stamp_sentinels(stamps.current_soft_validators(family) if soft is None else soft,
                           lane)
    default_log, default_ckpt = default_paths(out, family)
    log = MeasurementLog(log_path or default_log)
    continued = run is not None and log.path.exists() and any(
        r.get("run") == run for r in read_logs([log.path])[0])
    run = run or new_run_id()
    system = database.system_root()
    tier_files = [out] + ([database.tier_path(system, arch, family)] if system else [])
    if model.modelled(lane) and profile is None:
        profile = model.build_profile(arch)
    if rankers is None:
        prior = (model.prior_model(lane, profile, tier_files)
                 if options.prune and profile is not None and model.modelled(lane) else None)
        rankers = model.rankers(prior, lane) if prior is not None else ()
    if write_header and not continued:
        log.append([{"row": "run", "schema_version": LOG_SCHEMA_VERSION, "run": run,
                     "protocol": PROTOCOL_VERSION, "family": family.name, "arch": arch,
                     "lane": lane.name, "soft": soft, "device": device_name,
                     "started": utc_now(), "knobs": options.knobs(),
                     "bench": bench.to_json(),
                     "working_set_bytes": census.working_set_bytes,
                     "profile": profile.to_json() if profile is not None else None}])
    signatures = plan(census, family, max_points=options.max_points, thin=options.thin,
                      fill=options.fill, exact_dtype=options.exact_dtype)
    if not options.fresh:
        signatures = with_incumbents(signatures, tier_files, family, lane)
    source = LiveSource(family=family, lane=lane, timer=timer, options=bench, log=log,
                        run=run, arch=arch, soft=soft, rankers=tuple(rankers),
                        top_k=options.top_k)
    checkpoint = Checkpoint(checkpoint_path or default_ckpt) if options.resume else None
    done = _finished(signatures, checkpoint, options, source.fingerprint(), arch, lane,
                     soft.get("impl_hash"))
    pooled = lvl is not None and options.prune and bool(source.rankers)
    # A finished signature's set only shapes the bundles now; planned without the incumbents
    # its own entry gave it, a resumed build plans the sets (and bundles) the killed one did.
    planning = [s if s.key not in done else attrs.evolve(
        s, points=[attrs.evolve(p, incumbent=None) for p in s.points]) for s in signatures]
    planned = source.census_sets(planning, options.top_k, lvl.structure_k,
                                 options.unit_cap(len(signatures))) if pooled else {}
    return LivePlan(census=census, family=family, lane=lane, arch=arch, out=out,
                    options=options, level=lvl, log=log, run=run, soft=soft, profile=profile,
                    signatures=signatures, source=source, checkpoint=checkpoint, done=done,
                    pooled=pooled, planned=planned)


def build_live(census: Census, *, family: Family, lane: Lane, arch: str, out: Path,
               timer: Timer | None = None, options: BuildOptions | None = None,
               log_path: Path | None = None, checkpoint_path: Path | None = None,
               rankers: Sequence[Ranker] | None = None,
               bench_options: BenchOptions | None = None, soft: dict[str, Any] | None = None,
               profile: Any = None, progress: Any = False, compiler: Any = None,
               jobs: int | None = None) -> BuildResult:
    """Measure ``census`` on this device and write the entries into ``out``.

    ``timer`` defaults to a :class:`~oasr_core.bench.CudaGraphTimer`; ``rankers`` are cost
    models whose top-``options.top_k`` union (plus the forced arms) prunes the candidates
    (None: the calibrated model an earlier build shipped, when ``options.prune`` allows and
    there is one; see :mod:`.model`); ``soft`` defaults to
    :func:`oasr_core.stamps.current_soft_validators`; ``profile`` (an ``ArchProfile``,
    default: this device's) is what the file's cost model is fitted on.

    With an effort level (``options.effort``) each signature's candidate set is found before
    measuring and compiled in the background, heaviest signature first (``jobs`` nvcc
    processes; ``compiler`` replaces the JIT, for tests): see :mod:`.compiling`.
    """
    if family.make_bench is None:
        raise ConfigurationError(f"family {family.name} has no make_bench: it cannot be "
                                 "measured here; rebuild from a measurement log (--from-log)")
    if timer is None:
        timer = CudaGraphTimer()
    lp = plan_live(census, family=family, lane=lane, arch=arch, out=out, timer=timer,
                   options=options, log_path=log_path, checkpoint_path=checkpoint_path,
                   rankers=rankers, bench_options=bench_options, soft=soft, profile=profile)
    options, lvl, signatures, done, source = lp.options, lp.level, lp.signatures, lp.done, \
        lp.source
    pooled, planned = lp.pooled, lp.planned
    start_kw = {"compiler": compiler, "jobs": jobs, "progress": progress}
    if pooled and lane.bench_modules is not None:
        queue, source.sets = compiling.stream(
            lane, arch, signatures, done, lambda sig: planned[sig.key],
            measured_dtypes=lvl.measured_dtypes, **start_kw)
    else:
        if pooled:
            source.sets = {key: frozenset(c.id for c in configs)
                           for key, configs in planned.items() if key not in done}
        queue = compiling.start(compiling.whole_space_items(lane, arch, signatures, done),
                                **start_kw)
    try:
        result = run_build(signatures, source, family=family, arch=arch, lane=lane.name,
                           out=out, soft=lp.soft, options=options, checkpoint=lp.checkpoint,
                           fingerprint=source.fingerprint(), progress=progress,
                           fit_model=lp.fit_model,
                           prepare=None if queue is None else queue.prepare)
        production, production_note = compiling.production_items(family, lane, arch, out)
        if production and queue is None:
            queue = compiling.start(production, **start_kw)
        else:
            for item in production:
                queue.submit(item)
    finally:
        if queue is not None:
            queue.close()
    notes = [*finish_notes(lp, result, queue),
             *_production_notes(queue, production, production_note)]
    return attrs.evolve(result, messages=tuple(notes))


def finish_notes(lp: LivePlan, result: BuildResult, queue: Any) -> list[str]:
    """The build's messages: the census's skipped points, the pipeline's notes and the
    compile queue's line."""
    return [*lp.census.skipped, *result.messages, *([queue.note()] if queue is not None else [])]


def _production_notes(queue: Any, items: Sequence[Any], note: str | None) -> list[str]:
    """One line on the production modules the build compiled for the next process."""
    out = [note] if note else []
    done = [queue.ready(item.key) for item in items] if queue is not None else []
    if done:
        text = ", ".join(f"{c.key.removeprefix('production:')} {c.status}" for c in done
                         if c is not None)
        out.append(f"production modules for the next process: {text}")
    return out


def _finished(signatures: Sequence[Signature], checkpoint: Checkpoint | None,
              options: BuildOptions, fingerprint: Sequence[str], arch: str, lane: Lane,
              impl_hash: Any) -> set[str]:
    """The signatures the checkpoint finished (reused, never measured: nothing to compile)."""
    if checkpoint is None:
        return set()
    from .pipeline import signature_digest

    records = checkpoint.load()
    return {sig.key for sig in signatures
            if reusable(records.get(sig.key), digest=signature_digest(sig, options, fingerprint),
                        arch=arch, lane=lane.name, impl_hash=impl_hash)}


def _fit_from(path: Path, family: Family, lane: Lane, arch: str, profile: Any,
              impl_hash: Any) -> dict[str, Any] | None:
    """The payload fitted on every row of ``lane`` on ``arch`` in the log at ``path``."""
    _runs, arms, _bad = read_logs([path])
    rows = [r for r in arms if r.get("family") == family.name and r.get("arch") == arch]
    return model.fit_payload(rows, profile, family, lane, impl_hash)


def log_families(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The families whose measurements the logs hold, sorted (``--from-log`` without
    ``--family`` rebuilds each)."""
    _runs, arms, _bad = read_logs(paths)
    families = sorted({str(r.get("family")) for r in arms})
    if not families:
        raise ConfigurationError(f"{', '.join(map(str, paths))}: the log holds no measurement")
    return families


def build_from_log(paths: Sequence[str | os.PathLike[str]], *, registry: Any, out: str,
                   family: str | None = None, arch: str | None = None,
                   options: BuildOptions | None = None, progress: Any = False,
                   rankers: Sequence[Ranker] | Callable[[str], Sequence[Ranker]] | None = None
                   ) -> BuildResult:
    """Rebuild the entries a measurement log supports, without a GPU, into ``out``.

    The log's rows carry every point's context, so no census is needed; ``family`` and
    ``arch`` select rows when the log holds several. The knobs in ``options`` apply, so a
    change to the decision rules can be scored offline. With an effort level
    (``options.effort``) the replay takes only what that level would have measured of a
    fuller log: each signature's points thinned to the level's ``max_points`` and, at each
    point, the sentinel arms and the signature's candidate set (ranked by ``rankers``, or
    ``rankers(signature key)`` for models held out per signature; None: the calibrated model
    of ``out``'s file or the system tier, as a live build prunes).
    """
    runs, arms, _bad = read_logs(paths)
    fams = sorted({str(r.get("family")) for r in arms})
    if family is None:
        if len(fams) != 1:
            raise ConfigurationError(f"the log holds families {', '.join(fams) or 'none'}; "
                                     "pass --family")
        family = fams[0]
    fam = registry.family(family)
    arms = [r for r in arms if r.get("family") == fam.name and (arch is None
                                                                or r.get("arch") == arch)]
    pairs = sorted({(str(r.get("arch")), str(r.get("lane"))) for r in arms})
    if len(pairs) != 1:
        raise ConfigurationError(f"the log holds {len(pairs)} (arch, lane) pairs for family "
                                 f"{fam.name} ({pairs or 'none'}); pass --arch")
    arch_name, lane_name = pairs[0]
    headers = rows_by_run(runs)
    used_runs = [str(r.get("run")) for r in arms]
    soft = dict(headers.get(used_runs[-1], {}).get("soft") or {})
    logged = logged_default(arms)
    if logged is not None:
        soft.setdefault(DEFAULT_STAMP, logged)
    lane_rec = _registered_lane(registry, lane_name)
    if lane_rec is not None:
        _check_logged_configs(paths, arms, lane_rec)
    source = LogSource(arms)
    profile = model.profile_of(headers[r] for r in dict.fromkeys(used_runs) if r in headers)
    options = (options or BuildOptions()).resolved()
    target = resolve_out(out, arch_name, fam)
    signatures = source.signatures(fam)
    if options.effort is not None:
        signatures, source.allowed = _replayed_level(signatures, fam, lane_rec, arch_name,
                                                     options, profile, rankers, target)
    return run_build(signatures, source, family=fam, arch=arch_name,
                     lane=lane_name, out=target, soft=soft,
                     options=options, progress=progress,
                     fit_model=lambda: model.fit_payload(arms, profile, fam, lane_rec,
                                                         soft.get("impl_hash")))


def _check_logged_configs(paths: Sequence[str | os.PathLike[str]], arms: Sequence[Any],
                          lane: Lane) -> None:
    """Refuse a log whose arm rows name configs ``lane`` does not have (renamed ids, a log
    from another version of the plugin): the table built from it would name configs the
    runtime then skips, entry by entry. One line naming the log, the lane and the ids."""
    known = {c.id for c in lane.config_space}
    unknown = sorted({str(r.get("config")) for r in arms
                      if str(r.get("config")) not in known
                      and Sentinel.parse(str(r.get("config"))) is None})
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" (+{len(unknown) - 5} more)" if len(unknown) > 5
                                          else "")
        raise DatabaseError(
            f"{', '.join(map(str, paths))}: arm rows name {len(unknown)} config(s) lane "
            f"{lane.name!r} does not have ({shown}); the log was measured with another "
            "version of the plugin: measure again, or build from a log of this version")


def _replayed_level(signatures: Sequence[Signature], family: Family, lane: Lane | None,
                    arch: str, options: BuildOptions, profile: Any,
                    rankers: Any, out: Path
                    ) -> tuple[list[Signature], dict[str, frozenset[str]] | None]:
    """The points and candidate sets an effort level would have measured (see
    :func:`build_from_log`); sets are None when the level measures every config."""
    thinned = [effort.thin_points(sig, options.max_points) for sig in signatures]
    if lane is None or not options.prune or not model.modelled(lane):
        return thinned, None
    if rankers is None:
        system = database.system_root()
        files = [out] + ([database.tier_path(system, arch, family)] if system else [])
        prior = model.prior_model(lane, profile, files) if profile is not None else None
        rankers = model.rankers(prior, lane) if prior is not None else ()
    if not rankers:
        return thinned, None
    structure_k = effort.level(options.effort).structure_k
    sets = LiveSource.planner(family, lane, arch, ()).census_sets(
        thinned, options.top_k, structure_k, options.unit_cap(len(thinned)), rankers=rankers)
    return thinned, {key: frozenset(c.id for c in cs) for key, cs in sets.items()}


def logged_default(arm_rows: Sequence[Any]) -> str | None:
    """The config the ``default`` arms of a log's rows launched (their ``params.config``),
    when they all name the same one: the evidence of what ``default`` meant when measured,
    for a log whose run header predates the sentinel stamps. None when no row says or the
    rows disagree."""
    seen = {r["params"].get("config") for r in arm_rows
            if isinstance(r.get("params"), dict)
            and r["params"].get("kind") == Sentinel.DEFAULT.value}
    seen.discard(None)
    return next(iter(seen)) if len(seen) == 1 else None


def _registered_lane(registry: Any, name: str) -> Lane | None:
    """The registered lane ``name`` (None when no installed plugin provides it: the rebuilt
    file then carries no model)."""
    try:
        return registry.lane(name)
    except Exception:
        return None
