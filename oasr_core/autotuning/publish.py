"""Publishing run-time winners to the user tier, at the size each was measured at.

A result measured at ``M`` becomes the region ``[M, choice]`` of its signature's entry in
the user tier file (an exact-point result becomes that point), merged into the entry on disk
through the core's locked writer (:func:`oasr_core.database.write_entries`): the entry's
other regions, its catch-all if a build wrote one, and every other entry are kept; a region
of the same bound is replaced. Nothing published has a catch-all, so a size above the largest
measured one falls through to the next tier: a winner never serves a size it was not
measured at or above. Legacy results (no measured shape) are never published.

Only results of the arch's active lane are published (a file records one lane; writing
another lane's would set the user's file aside). With the user tier disabled
(``OASR_TUNE_USER_DB=off``) nothing is published and a warning says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core import database, stamps
from oasr_core.database import Entry, Region, Source
from oasr_core.errors import UnknownFamilyError
from oasr_core.sentinels import stamp_sentinels
from oasr_core.types import Config, Family, Sentinel, thaw

from .cache import AutotuneWarning, Result


@attrs.frozen
class PublishReport:
    """What a publish wrote and what it left out."""

    written: tuple[tuple[str, int], ...] = ()
    """(tuning file, results published into it)."""
    skipped: tuple[str, ...] = ()
    """One line per result (or group) not published, with the reason."""

    @property
    def published(self) -> int:
        """Results published."""
        return sum(n for _, n in self.written)


def _where(family: Family, result: Result) -> str:
    if result.point is not None:
        return f"point={result.point}"
    return f"{family.dynamic_axis}={result.m}"


def _collapse(regions: Mapping[int | None, str]) -> list[Region]:
    """Ascending regions, a run of one choice kept as its largest bound (same meaning)."""
    ordered = sorted(regions.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    out: list[Region] = []
    for m_hi, choice in ordered:
        if out and out[-1].choice == choice:
            out.pop()
        out.append(Region(m_hi, choice))
    return out


def entry_update(family: Family, results: Sequence[Result]):
    """The update function merging ``results`` (one signature) into the entry on disk."""

    def update(entry: Entry | None) -> Entry:
        regions = {r.m_hi: r.choice for r in entry.regions} if entry is not None else {}
        points = dict(entry.points) if entry is not None else {}
        old = thaw(entry.evidence) if entry is not None else {}
        evidence = dict(old) if isinstance(old, Mapping) else {"_before_autotune": old}
        notes = list(entry.notes) if entry is not None else []
        for r in sorted(results, key=lambda r: (r.point or "", r.m or 0)):
            where = _where(family, r)
            if r.point is not None:
                points[r.point] = r.choice
            else:
                regions[r.m] = r.choice
            evidence[where] = {**thaw(r.evidence), "_timing": r.timing.value}
            notes = [n for n in notes if not n.startswith((f"{where}: ", f"{where}*: "))]
            notes.append(f"{where}: {r.choice} (autotune, {r.timing.value}, "
                         f"{r.ms if r.ms is not None else '?'} ms)")
        return Entry(regions=_collapse(regions), points=points,
                     evidence=evidence,
                     source=entry.source if entry is not None else Source.JIT,
                     notes=notes, soft=entry.soft if entry is not None else None)

    return update


def _warn(message: str) -> None:
    warnings.warn(message, AutotuneWarning, stacklevel=3)


def _publishable(family: Family, lane_name: str, results: Iterable[Result],
                 skipped: list[str]) -> list[Result]:
    out = []
    for r in results:
        if r.m is None:
            continue  # a legacy whole-bucket result: its measured size is unknown
        if r.lane is not None and r.lane != lane_name:
            skipped.append(f"{r.key} {_where(family, r)}: measured on lane {r.lane}, the "
                           f"user tier file is {lane_name}'s")
        elif r.point is not None and not family.exact_points:
            skipped.append(f"{r.key} {_where(family, r)}: family {family.name} has no exact "
                           "points")
        elif (s := Sentinel.parse(r.choice)) is not None and s not in family.sentinels \
                and s is not family.fallback:
            skipped.append(f"{r.key} {_where(family, r)}: {r.choice} is not a sentinel of "
                           f"family {family.name}")
        else:
            out.append(r)
    return out


def _configs(lane: Any, results: Iterable[Result], skipped: list[str]) -> tuple[
        dict[str, Config], list[Result]]:
    configs: dict[str, Config] = {}
    kept = []
    for r in results:
        if Sentinel.parse(r.choice) is None:
            config = lane.config(r.choice)
            if config is None or (r.config is not None and thaw(r.config) != config.to_json()):
                skipped.append(f"{r.key} M={r.m}: config {r.choice!r} is no longer in lane "
                               f"{lane.name} as measured")
                continue
            configs[config.id] = config
        kept.append(r)
    return configs, kept


def publish(results: Iterable[Result], *, arch: str, registry: Any) -> PublishReport:
    """Publish ``results`` (measured on ``arch``) into the user tier (module docstring).

    Raises :class:`~oasr_core.errors.DatabaseError` when a tier file cannot be written (a
    lock held too long, a file from a newer oasr); results already written stay written.
    """
    results = [r for r in results if r.m is not None]
    if not results:
        return PublishReport()
    root = database.user_root()
    if root is None:
        _warn(f"oasr: the user tier is disabled ({database.USER_ENV}=off): {len(results)} "
              "autotune result(s) not published; the production path keeps serving the "
              "other tiers")
        return PublishReport(skipped=(f"user tier disabled ({database.USER_ENV})",))
    by_family: dict[str, dict[str, list[Result]]] = {}
    for r in results:
        family_name = database.parse_signature_key(r.key).family
        by_family.setdefault(family_name, {}).setdefault(r.key, []).append(r)
    written: list[tuple[str, int]] = []
    skipped: list[str] = []
    for family_name, by_key in sorted(by_family.items()):
        try:
            family = registry.family(family_name)
        except UnknownFamilyError:
            skipped.append(f"family {family_name}: not installed")
            continue
        lane = registry.active_lane(family_name, arch)
        if lane is None:
            skipped.append(f"family {family_name}: no lane runs on {arch}")
            continue
        changes: dict[str, Any] = {}
        configs: dict[str, Config] = {}
        count = 0
        for key, group in sorted(by_key.items()):
            usable = _publishable(family, lane.name, group, skipped)
            found, usable = _configs(lane, usable, skipped)
            if usable:
                configs.update(found)
                changes[key] = entry_update(family, usable)
                count += len(usable)
        if not changes:
            continue
        path = database.tier_path(root, arch, family)
        try:
            database.write_entries(path, family=family, arch=arch, lane=lane, entries=changes,
                                   configs=configs,
                                   soft=stamp_sentinels(
                                       stamps.current_soft_validators(family), lane))
        except database.SchemaTooNewError as exc:
            skipped.append(f"{path}: {exc}")
            continue
        written.append((str(path), count))
    for line in skipped:
        _warn(f"oasr: autotune result not published: {line}")
    return PublishReport(written=tuple(written), skipped=tuple(skipped))
