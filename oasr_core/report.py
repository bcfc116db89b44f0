"""What the process serves and from where: tiers loaded, stale files, tier counts.

:func:`tuning_report` is the engine-facing summary (``oasr tune status`` prints the same
record). Staleness is computed here, lazily, never on the selection path.

Given the census of a deployment, the report also says how the layers of every family whose
untuned calls run a shape heuristic (``Family.fallback`` is ``HEURISTIC``: today the
quantized GEMMs) are served, one line per family::

    scaled_mm: 96 quantized layer(s) over 5 signature(s): 96 with a tuning entry
    (system=96), 0 on the shape heuristic

A signature's layers are its ``calls_per_step`` in the census (the calls of one forward
pass). They count "with a tuning entry" when the user or system tier serves every census
point of the signature, as runtime selection would (an entry of only ``[[null,
"heuristic"]]`` counts: it says measured), under the tier serving most of those points;
otherwise they count on the heuristic. A family's layers are "quantized" when none of its
census dtypes is a floating half/single/double precision one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from oasr_core import database, selection, stamps
from oasr_core.census import shapeset as ss
from oasr_core.errors import ConfigurationError
from oasr_core.runtime import get_runtime
from oasr_core.types import ARCH_RE, Problem, Sentinel

if TYPE_CHECKING:
    from oasr_core.census.shapeset import ShapeSet

_FULL_PRECISION = frozenset({"fp16", "bf16", "fp32", "fp64"})


@attrs.frozen
class TierState:
    """One tier file of one (arch, family)."""

    tier: str
    path: str | None
    loaded: bool
    entries: int = 0
    configs: int = 0
    lane: str | None = None
    stale: tuple[str, ...] = ()
    """Why the file's own stamp is stale against this process (empty: fresh)."""
    stale_entries: tuple[str, ...] = ()
    """Signature keys whose own stamp is stale."""
    problem: str | None = None
    """Why an existing file was skipped; for a loaded one, which part of it is unusable."""


@attrs.frozen
class FamilyState:
    """The tiers of one family on one arch."""

    family: str
    arch: str
    lane: str | None
    tiers: tuple[TierState, ...]


@attrs.frozen
class Coverage:
    """How the census layers of one heuristic-fallback family are served on one arch."""

    family: str
    arch: str
    layers: int
    """Layers of the census (each signature's calls per forward pass, summed)."""
    signatures: int
    """Distinct signatures (op, dtype, static dims) of the census."""
    tiers: tuple[tuple[str, int], ...]
    """Layers with a tuning entry, per serving tier (``user``, ``system``), nonzero only."""
    fallback: int
    """Layers on the family's shape heuristic."""
    quantized: bool = True
    """Whether the layers run a quantized dtype (the line says "quantized layer(s)")."""

    @property
    def tuned(self) -> int:
        """Layers with a tuning entry."""
        return sum(n for _, n in self.tiers)

    def line(self, *, with_arch: bool = False) -> str:
        """``scaled_mm: 96 quantized layer(s) over 5 signature(s): 96 with a tuning entry
        (system=96), 0 on the shape heuristic``."""
        name = f"{self.arch}/{self.family}" if with_arch else self.family
        kind = "quantized layer(s)" if self.quantized else "layer(s)"
        by_tier = f" ({', '.join(f'{t}={n}' for t, n in self.tiers)})" if self.tiers else ""
        return (f"{name}: {self.layers} {kind} over {self.signatures} signature(s): "
                f"{self.tuned} with a tuning entry{by_tier}, {self.fallback} on the shape "
                "heuristic")


@attrs.frozen
class TuningReport:
    """Tier files and per-tier resolution counts of this process's epoch."""

    epoch: int
    families: tuple[FamilyState, ...]
    counts: tuple[tuple[str, str, str, int], ...]
    """(family, op, tier, resolutions), sorted."""
    coverage: tuple[Coverage, ...] = ()
    """Per heuristic-fallback family and arch, how a census's layers are served (empty
    without a census)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form (``oasr tune status --json``)."""
        return {
            "epoch": self.epoch,
            "families": [attrs.asdict(f) for f in self.families],
            "counts": [{"family": f, "op": o, "tier": t, "resolutions": n}
                       for f, o, t, n in self.counts],
            "coverage": [{**attrs.asdict(c), "tiers": dict(c.tiers), "line": c.line()}
                         for c in self.coverage],
        }

    def coverage_lines(self) -> list[str]:
        """One line per heuristic-fallback family of the census (arch-prefixed when the
        report spans several arches)."""
        with_arch = len({c.arch for c in self.coverage}) > 1
        return [c.line(with_arch=with_arch) for c in self.coverage]

    def lines(self) -> list[str]:
        """Human-readable lines."""
        out = [f"epoch {self.epoch}"]
        for fs in self.families:
            out.append(f"{fs.arch}/{fs.family} (lane {fs.lane or '-'})")
            for t in fs.tiers:
                if t.problem and not t.loaded:
                    # "SKIPPED: user tier skipped: ..." said it twice
                    state = "SKIPPED: " + t.problem.split(" tier skipped: ", 1)[-1]
                elif not t.loaded:
                    state = "absent" if t.path else "disabled"
                else:
                    state = f"{t.entries} entries, {t.configs} configs"
                    if t.stale:
                        state += f", STALE ({'; '.join(t.stale)})"
                    if t.stale_entries:
                        state += f", {len(t.stale_entries)} stale entr(y/ies)"
                    if t.problem:
                        state += f", UNHEALTHY: {t.problem}"
                out.append(f"  {t.tier:<6} {t.path or '-'}: {state}")
        if self.counts:
            out.append("resolutions per tier:")
            by_op: dict[tuple[str, str], list[str]] = {}
            for f, o, t, n in self.counts:
                by_op.setdefault((f, o), []).append(f"{t}={n}")
            out.extend(f"  {f}/{o}: {', '.join(v)}" for (f, o), v in sorted(by_op.items()))
        else:
            out.append("resolutions per tier: none yet in this process")
        out.extend(self.coverage_lines())
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _tier_state(tier: str, path: Path | None, tf, problems: Iterable[str], current,
                lane=None) -> TierState:
    problem = next((p for p in problems if p.startswith(f"{tier} tier")), None)
    if tf is None:
        return TierState(tier=tier, path=str(path) if path else None, loaded=False,
                         problem=problem)
    return TierState(
        tier=tier, path=str(path), loaded=True, entries=len(tf.entries), configs=len(tf.configs),
        lane=tf.lane, stale=tuple(database.stale_reasons(tf.soft, current)),
        stale_entries=tuple(sorted(database.stale_entries(tf, current, lane=lane))),
        problem=problem)


def tier_arches() -> list[str]:
    """Arch families that have a directory in the user or system tier."""
    found: set[str] = set()
    for root in (database.user_root(), database.system_root()):
        if root is not None and root.is_dir():
            found.update(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("sm"))
    return sorted(found)


def tuning_report(arch: str | None = None, families: Iterable[str] | None = None, *,
                  census: ShapeSet | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
                  | None = None) -> TuningReport:
    """Summarise the process runtime: every family's tiers on ``arch`` and the tier counts.

    ``arch`` defaults to the current device's arch family, else every arch the tiers hold.
    ``census`` (a :class:`~oasr_core.census.ShapeSet`, or the path of one or several census
    files, merged) adds the coverage of its heuristic-fallback families
    (:attr:`TuningReport.coverage`, see the module docstring).
    """
    rt = get_runtime()
    registry = rt.registry
    if arch is not None and not ARCH_RE.match(arch):
        raise ConfigurationError(f"--arch {arch!r} is not an arch family like 'sm90'")
    arches = [arch] if arch else ([rt.device_arch()] if rt.device_arch() else tier_arches())
    names = sorted(families) if families is not None else sorted(registry.families)
    states = []
    for a in arches:
        for name in names:
            fam = registry.family(name)
            tiers = rt.tiers(fam, a)
            current = stamps.current_soft_validators(fam, probe=False)
            lane = registry.active_lane(name, a)
            states.append(FamilyState(
                family=name, arch=a, lane=lane.name if lane else None,
                tiers=(_tier_state("user", tiers.user_path, tiers.user, tiers.problems, current,
                                   lane),
                       _tier_state("system", tiers.system_path, tiers.system, tiers.problems,
                                   current, lane))))
    coverage: tuple[Coverage, ...] = ()
    if census is not None:
        shapeset = _shapeset(census)
        coverage = tuple(c for a in arches for name in names
                         if (c := census_coverage(shapeset, name, a)) is not None)
    counts = tuple(sorted((f, o, t, n) for (f, o, t), n in rt.counts.items()))
    return TuningReport(epoch=rt.epoch, families=tuple(states), counts=counts,
                        coverage=coverage)


def _shapeset(census: Any) -> ShapeSet:
    if isinstance(census, ss.ShapeSet):
        return census
    paths = [census] if isinstance(census, (str, os.PathLike)) else list(census)
    return ss.load_all(paths)


def census_coverage(shapeset: ShapeSet, family: str, arch: str) -> Coverage | None:
    """How the census layers of ``family`` are served on ``arch`` (module docstring); None
    when the family's fallback is not the shape heuristic or the census has none of it."""
    registry = get_runtime().registry
    fam = registry.family(family)
    if fam.fallback is not Sentinel.HEURISTIC:
        return None
    groups: dict[str, list[Any]] = {}
    for p in shapeset.points:
        if p.family == family:
            groups.setdefault(p.signature, []).append(p)
    if not groups:
        return None
    lane = registry.active_lane(family, arch)
    layers = fallback = 0
    per_tier: dict[str, int] = {}
    for label, points in groups.items():
        info = shapeset.signatures.get(label)
        n = max(1, info.calls_per_step if info is not None else 0)
        layers += n
        served: list[str] = []
        for p in points:
            problem = Problem(family=family, op=p.op, dtype=p.dtype,
                              dims=tuple((d, p.dims[d]) for d in fam.dims), m=p.m,
                              point=p.point)
            sel = selection.from_tiers(fam, lane, arch, problem)
            if sel is None:
                break
            served.append(sel.tier.value)
        if len(served) < len(points):
            fallback += n
            continue
        order = ("user", "system")
        tier = max(order, key=lambda t: (served.count(t), -order.index(t)))
        per_tier[tier] = per_tier.get(tier, 0) + n
    dtypes = {p.dtype for ps in groups.values() for p in ps}
    tiers = tuple((t, per_tier[t]) for t in ("user", "system") if per_tier.get(t))
    return Coverage(family=family, arch=arch, layers=layers, signatures=len(groups),
                    tiers=tiers, fallback=fallback, quantized=not dtypes & _FULL_PRECISION)
