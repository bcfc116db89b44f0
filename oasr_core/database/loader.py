"""Reading tuning files and checking their hard validators.

:func:`read_tuning_file` checks only the file itself (JSON, schema, structure, references);
:func:`load_tuning_file` also checks it against the family, arch family and lanes of this
process. Both raise :class:`~oasr_core.errors.DatabaseError` with one line naming the file
and what is wrong, and no other exception type, whatever the bytes on disk are; the runtime
skips such a file with one warning.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from oasr_core.errors import DatabaseError
from oasr_core.types import Family, Lane, Sentinel

from .codec import decode, decode_lazy, parse_text, read_bytes, read_document
from .keys import check_key
from .migrations import SchemaTooNewError
from .schema import Entry, LazyEntries, TuningFile


def read_tuning_file(path: str | os.PathLike[str]) -> TuningFile:
    """Parse, migrate and structure the file at ``path``, without family or arch checks.

    For tools that look at any tuning file (``oasr tune diff``); the runtime uses
    :func:`load_tuning_file`.
    """
    return decode(read_document(path), origin=str(path))


def load_tuning_file(path: str | os.PathLike[str], *, family: Family, arch: str,
                     lanes: Mapping[str, Lane] | None) -> TuningFile:
    """Read the file at ``path`` and check it is usable for ``family`` on ``arch``.

    Hard validators: schema (too new or unmigratable), family name and family schema,
    arch family, and the lane: ``arch.lane`` must be a lane in ``lanes`` registered for
    ``family`` that runs on ``arch`` (``lanes=None`` skips only this check, for writers and
    tools without a registry). Content checks for the family: every key is one the family
    can produce, every sentinel named is one it allows, exact points only where it uses
    them. Configs of another lane than the file's are kept: the runtime warns and skips them.
    """
    tuning_file = read_tuning_file(path)
    check_tuning_file(tuning_file, family=family, arch=arch, lanes=lanes, origin=str(path))
    return tuning_file


def check_tuning_file(tuning_file: TuningFile, *, family: Family, arch: str,
                      lanes: Mapping[str, Lane] | None, origin: str,
                      keys: Iterable[str] | None = None) -> None:
    """Raise ``DatabaseError`` unless ``tuning_file`` passes :func:`load_tuning_file`'s checks.

    ``keys`` limits the per-entry checks to those entries (a writer re-checks only what it
    changed in a file that passed them when it was read).
    """
    check_hard_validators(tuning_file, family=family, arch=arch, lanes=lanes, origin=origin)
    entries = tuning_file.entries
    selected = entries.items() if keys is None else ((k, entries[k]) for k in keys
                                                     if k in entries)
    for key, entry in selected:
        check_entry(family, key, entry, origin=origin)


def check_entry(family: Family, key: str, entry: Entry, *, origin: str) -> None:
    """Raise ``DatabaseError`` unless entry ``key`` is one ``family`` can have: a key it can
    produce, exact points only where it uses them, only sentinels it allows."""
    try:
        check_key(family, key)
    except ValueError as exc:
        raise DatabaseError(f"{origin}: {exc}") from None
    if entry.points and not family.exact_points:
        raise DatabaseError(f"{origin}: entry {key!r} has exact points, but family "
                            f"{family.name} does not use them")
    allowed = set(family.sentinels) | {family.fallback}
    for choice in sorted(entry.choices()):
        sentinel = Sentinel.parse(choice)
        if sentinel is not None and sentinel not in allowed:
            names = ", ".join(sorted(s.value for s in allowed))
            raise DatabaseError(f"{origin}: entry {key!r} names sentinel {choice!r}, "
                                f"which family {family.name} does not allow ({names})")


def open_tuning_file(path: str | os.PathLike[str], *, family: Family, arch: str,
                     lanes: Mapping[str, Lane] | None) -> TuningFile:
    """:func:`load_tuning_file` for serving: the same checks, but entries are structured when
    first looked up (:class:`~oasr_core.database.schema.LazyEntries`).

    Content a writer checked in full and marked in the user tier's ``.validated/`` index
    (:mod:`.validated`) has only the entries a process looks up checked, so a large user
    tier costs a parse and a hash, not a structuring of every entry; other content (the
    shipped system tier, a file copied in) has every entry checked now (a malformed one
    makes the file unusable, as :func:`load_tuning_file` does). Reading records nothing. A
    malformed entry found at lookup (a mark forged or stale) raises ``DatabaseError`` for
    that key only.
    """
    from . import validated

    origin = str(path)
    data = read_bytes(path)
    if not data.strip():
        raise DatabaseError(f"{origin}: empty file")
    tuning_file = decode_lazy(parse_text(data, origin=origin), origin=origin,
                              check=lambda key, entry: check_entry(family, key, entry,
                                                                   origin=origin))
    check_hard_validators(tuning_file, family=family, arch=arch, lanes=lanes, origin=origin)
    entries = tuning_file.entries
    if isinstance(entries, LazyEntries):
        mark = validated.mark_for(data, family)
        if not validated.is_marked(mark):
            entries.check_all()
    return tuning_file


def check_hard_validators(tuning_file: TuningFile, *, family: Family, arch: str,
                          lanes: Mapping[str, Lane] | None, origin: str) -> None:
    """Raise ``DatabaseError`` on a family, family-schema, arch family or lane mismatch.

    A family schema newer than the plugin's raises :class:`SchemaTooNewError`.
    """
    if tuning_file.family != family.name:
        raise DatabaseError(f"{origin}: a {tuning_file.family!r} file, expected family "
                            f"{family.name!r}")
    version = tuning_file.family_schema_version
    if version > family.schema_version:
        raise SchemaTooNewError(
            f"{origin}: family_schema_version {version} was written by a newer {family.name} "
            f"plugin (this one reads {family.schema_version}); upgrade the plugin")
    if version != family.schema_version:
        raise DatabaseError(f"{origin}: family_schema_version {version}, but the "
                            f"{family.name} plugin reads {family.schema_version}; rebuild it")
    if tuning_file.arch.family != arch:
        raise DatabaseError(f"{origin}: measured on arch family {tuning_file.arch.family}, "
                            f"this is {arch}")
    if lanes is None:
        return
    lane_name = tuning_file.arch.lane
    runnable = sorted(name for name, lane in lanes.items()
                      if lane.family == family.name and arch in lane.arch_families)
    lane = lanes.get(lane_name)
    if lane is None or lane.family != family.name or arch not in lane.arch_families:
        if lane is None:
            why = "is not a registered lane"
        elif lane.family != family.name:
            why = f"is a lane of family {lane.family}"
        else:
            why = f"does not run on {arch}"
        raise DatabaseError(f"{origin}: lane {lane_name!r} {why} (lanes of {family.name} on "
                            f"{arch}: {', '.join(runnable) or 'none'})")
