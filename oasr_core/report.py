"""What the process serves and from where: tiers loaded, stale files, tier counts.

:func:`tuning_report` is the engine-facing summary (``oasr tune status`` prints the same
record). Staleness is computed here, lazily, never on the selection path.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from oasr_core.errors import ConfigurationError


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
    """Why an existing file was skipped."""


@attrs.frozen
class FamilyState:
    """The tiers of one family on one arch."""

    family: str
    arch: str
    lane: str | None
    tiers: tuple[TierState, ...]


@attrs.frozen
class TuningReport:
    """Tier files and per-tier resolution counts of this process's epoch."""

    epoch: int
    families: tuple[FamilyState, ...]
    counts: tuple[tuple[str, str, str, int], ...]
    """(family, op, tier, resolutions), sorted."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form (``oasr tune status --json``)."""
        return {
            "epoch": self.epoch,
            "families": [attrs.asdict(f) for f in self.families],
            "counts": [{"family": f, "op": o, "tier": t, "resolutions": n}
                       for f, o, t, n in self.counts],
        }

    def lines(self) -> list[str]:
        """Human-readable lines."""
        out = [f"epoch {self.epoch}"]
        for fs in self.families:
            out.append(f"{fs.arch}/{fs.family} (lane {fs.lane or '-'})")
            for t in fs.tiers:
                if t.problem:
                    state = f"SKIPPED: {t.problem}"
                elif not t.loaded:
                    state = "absent" if t.path else "disabled"
                else:
                    state = f"{t.entries} entries, {t.configs} configs"
                    if t.stale:
                        state += f", STALE ({'; '.join(t.stale)})"
                    if t.stale_entries:
                        state += f", {len(t.stale_entries)} stale entr(y/ies)"
                out.append(f"  {t.tier:<6} {t.path or '-'}: {state}")
        if self.counts:
            out.append("resolutions per tier:")
            by_op: dict[tuple[str, str], list[str]] = {}
            for f, o, t, n in self.counts:
                by_op.setdefault((f, o), []).append(f"{t}={n}")
            out.extend(f"  {f}/{o}: {', '.join(v)}" for (f, o), v in sorted(by_op.items()))
        else:
            out.append("resolutions per tier: none yet in this process")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _tier_state(tier: str, path: Path | None, tf, problems: Iterable[str], current) -> TierState:
    from oasr_core import database

    problem = next((p for p in problems if p.startswith(f"{tier} tier")), None)
    if tf is None:
        return TierState(tier=tier, path=str(path) if path else None, loaded=False,
                         problem=problem)
    return TierState(
        tier=tier, path=str(path), loaded=True, entries=len(tf.entries), configs=len(tf.configs),
        lane=tf.lane, stale=tuple(database.stale_reasons(tf.soft, current)),
        stale_entries=tuple(sorted(database.stale_entries(tf, current))))


def tier_arches() -> list[str]:
    """Arch families that have a directory in the user or system tier."""
    from oasr_core import database

    found: set[str] = set()
    for root in (database.user_root(), database.system_root()):
        if root is not None and root.is_dir():
            found.update(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("sm"))
    return sorted(found)


def tuning_report(arch: str | None = None, families: Iterable[str] | None = None) -> TuningReport:
    """Summarise the process runtime: every family's tiers on ``arch`` and the tier counts.

    ``arch`` defaults to the current device's arch family, else every arch the tiers hold.
    """
    from oasr_core import database
    from oasr_core.runtime import get_runtime
    from oasr_core.types import ARCH_RE

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
            current = database.current_soft_validators(fam)
            lane = registry.active_lane(name, a)
            states.append(FamilyState(
                family=name, arch=a, lane=lane.name if lane else None,
                tiers=(_tier_state("user", tiers.user_path, tiers.user, tiers.problems, current),
                       _tier_state("system", tiers.system_path, tiers.system, tiers.problems,
                                   current))))
    counts = tuple(sorted((f, o, t, n) for (f, o, t), n in rt.counts.items()))
    return TuningReport(epoch=rt.epoch, families=tuple(states), counts=counts)
