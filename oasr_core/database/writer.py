"""Writing tuning files: lock, re-read, merge only the caller's changes, atomic replace.

Three kinds of writer share the user tier (the autotune flush, ``oasr tune build --out
user``, the engine's prewarm), each in its own process. :func:`write_entries` takes the
file's lock, re-reads the file, applies only the caller's changes so an entry another
process wrote meanwhile survives, re-stamps it and replaces it atomically (temp file in the
same directory, fsync, ``os.replace``). Readers never lock: they see the old file or the new
one, never a torn one, even when a writer is killed mid-write. The lock is held only for
the merge and the write, never while measuring.
"""

from __future__ import annotations

import enum
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import filelock

from oasr_core import files
from oasr_core.environment import MAX_FILE_ENV, max_file_bytes
from oasr_core.errors import DatabaseError, OasrWarning
from oasr_core.serialization import Invalid, check_json
from oasr_core.types import Config, Family, Lane, freeze, thaw

from . import validated
from .codec import decode, parse_text
from .keys import check_key
from .loader import check_tuning_file
from .migrations import SchemaTooNewError
from .paths import lock_path
from .schema import ArchStamp, Entry, TuningFile, Validators

_LOCK_POLL_S = 0.002
"""How often a waiting writer retries the lock; filelock's 50 ms default idles the file."""


class Keep(enum.Enum):
    """Typed sentinel: leave this part of the file as it is."""

    KEEP = "keep"


KEEP: Literal[Keep.KEEP] = Keep.KEEP
"""Pass as ``coverage_basis`` or ``model`` to keep the file's current value."""


class TuningDatabaseWarning(OasrWarning):
    """A tuning file was set aside (corrupt or of another arch/lane) when writing."""


EntryUpdate = Callable[[Entry | None], Entry | None]
"""A change computed from the entry on disk under the lock (None: there is none)."""

EntryChange = Entry | EntryUpdate | None
"""What a writer does to one key: replace it, update it from the current entry, delete it."""


def _merge_configs(current: TuningFile | None, entries: Mapping[str, Entry],
                   replaced: Iterable[str], basis: tuple[str, ...], *, kept_basis: bool,
                   configs: Mapping[str, Config]) -> dict[str, Config]:
    """Exactly the configs the entries and basis name: the caller's definition, else the file's.

    A caller redefining an id that an entry it did not replace still names (an update
    function keeps old regions) would silently change what was measured, so that is refused.
    """
    replaced = set(replaced)
    untouched = set(basis) if kept_basis else set()
    for key, entry in entries.items():
        if key not in replaced:
            untouched.update(entry.choices())
    referenced = set(basis)
    for entry in entries.values():
        referenced.update(entry.choices())
    old = current.configs if current is not None else {}
    merged = {}
    for cid in sorted(referenced):
        mine, theirs = configs.get(cid), old.get(cid)
        if mine is not None and theirs is not None and cid in untouched \
                and mine.to_json() != theirs.to_json():
            raise Invalid(f"config {cid!r} is in the file with other parameters "
                          f"({theirs.to_json()} vs {mine.to_json()}) and entries this write "
                          "leaves alone name it; rewrite with fresh=True")
        found = mine if mine is not None else theirs
        if found is not None:
            merged[cid] = found
    return merged


def _merge(current: TuningFile | None, *, family: Family, arch: str, lane: str,
           changes: Mapping[str, EntryChange], configs: Mapping[str, Config],
           stamp: Mapping[str, Any], provenance: Mapping[str, Any] | None,
           coverage_basis: Sequence[str] | Keep, model: Any) -> TuningFile:
    plain_stamp = thaw(stamp)
    entries = dict(current.entries) if current is not None else {}
    if current is not None and thaw(current.soft) != plain_stamp:
        for key, entry in entries.items():
            if entry.soft is None:
                entries[key] = attrs.evolve(entry, soft=current.soft)
    for key, change in changes.items():
        result = change(entries.get(key)) if callable(change) else change
        if result is None:
            entries.pop(key, None)
        elif isinstance(result, Entry):
            entries[key] = result
        else:
            raise Invalid(f"the change to {key!r} produced a {type(result).__name__}, "
                          "expected an Entry or None")
    for key, entry in entries.items():
        if entry.soft is not None and thaw(entry.soft) == plain_stamp:
            entries[key] = attrs.evolve(entry, soft=None)

    if coverage_basis is KEEP:
        basis = current.coverage_basis if current is not None else ()
    else:
        basis = tuple(coverage_basis)
    replaced = [key for key, change in changes.items() if not callable(change)]
    merged = _merge_configs(current, entries, replaced, basis,
                            kept_basis=coverage_basis is KEEP, configs=configs)
    if provenance is None:
        provenance = current.provenance if current is not None else {}
    if model is KEEP:
        model = current.model if current is not None else None
    return TuningFile(family=family.name, arch=ArchStamp(arch, lane),
                      family_schema_version=family.schema_version,
                      validators=Validators(soft=stamp), provenance=provenance,
                      configs=merged, coverage_basis=basis,
                      model=model, entries=dict(sorted(entries.items())))


def _move_aside(path: Path, reason: str) -> Path:
    aside = files.move_aside(path)
    warnings.warn(f"{reason}; moved it aside to {aside.name} and started a fresh file",
                  TuningDatabaseWarning, stacklevel=4)
    return aside


KEEP_REPLACED = 3
"""How many files a fresh write replaced are kept beside each tuning file (newest first)."""


def _keep_replaced(path: Path) -> None:
    """Move the file a fresh write replaces aside (``<name>.replaced-<time>``), so replacing
    a file never loses it; only the newest :data:`KEEP_REPLACED` such copies are kept."""
    aside = files.keep_aside(path, "replaced")
    if aside is None:
        return
    prefix = f"{path.name}.replaced-"
    kept = sorted((p for p in path.parent.iterdir() if p.name.startswith(prefix)
                   and not p.is_symlink() and p.is_file()), key=lambda p: p.name)
    dropped = kept[:-KEEP_REPLACED]
    for old in dropped:
        old.unlink(missing_ok=True)
    more = f"; {len(dropped)} older cop{'y' if len(dropped) == 1 else 'ies'} removed (the " \
        f"newest {KEEP_REPLACED} are kept)" if dropped else ""
    warnings.warn(f"{path}: a fresh write replaces it; the old file is kept as "
                  f"{aside.name}{more}", TuningDatabaseWarning, stacklevel=4)


def _reread(path: Path, *, family: Family, arch: str, lane: str,
            replaced: list[bytes] | None = None) -> TuningFile | None:
    """The file on disk, checked (None when missing, or corrupt and moved aside); its bytes
    are appended to ``replaced`` when given."""
    try:
        size, limit = path.stat().st_size, max_file_bytes()
        if size > limit:  # refused, not moved aside: it may be a good file, only large
            raise DatabaseError(f"{path}: not written: {size / 2**20:.1f} MiB is over the "
                                f"{limit / 2**20:g} MiB limit on files oasr reads "
                                f"({MAX_FILE_ENV})")
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DatabaseError(f"{path}: cannot read ({exc.strerror or exc})") from None
    origin = str(path)
    if replaced is not None:
        replaced.append(data)
    try:
        if not data.strip():
            raise DatabaseError(f"{origin}: empty file")
        current = decode(parse_text(data, origin=origin), origin=origin)
        check_tuning_file(current, family=family, arch=arch, lanes=None, origin=origin)
        if current.arch.lane != lane:
            raise DatabaseError(f"{origin}: measured on lane {current.arch.lane}, this writer "
                                f"measures on {lane}")
    except SchemaTooNewError:
        raise
    except DatabaseError as exc:
        _move_aside(path, str(exc))
        return None
    return current


def _check_arguments(family: Family, lane: str | Lane,
                     entries: Mapping[str, EntryChange], configs: Mapping[str, Config],
                     soft: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    if isinstance(lane, Lane):
        if lane.family != family.name:
            raise Invalid(f"lane {lane.name} is a lane of {lane.family}, not {family.name}")
        lane = lane.name
    if not isinstance(lane, str) or not lane:
        raise Invalid(f"lane {lane!r} is not a lane name")
    for key, change in entries.items():
        check_key(family, key)
        if not (change is None or isinstance(change, Entry) or callable(change)):
            raise Invalid(f"the change to {key!r} is a {type(change).__name__}, expected an "
                          "Entry, an update function or None")
    for cid, cfg in configs.items():
        if not isinstance(cfg, Config) or cfg.id != cid:
            raise Invalid(f"configs[{cid!r}] is not a Config with that id")
    if not isinstance(soft, Mapping):
        raise Invalid("soft must be a mapping of validator name -> value")
    check_json(soft, "soft")
    return lane, freeze(soft)


def write_entries(path: str | os.PathLike[str], *, family: Family, arch: str,
                  lane: str | Lane, entries: Mapping[str, EntryChange],
                  configs: Mapping[str, Config], soft: Mapping[str, Any],
                  provenance: Mapping[str, Any] | None = None,
                  coverage_basis: Sequence[str] | Keep = KEEP, model: Any = KEEP,
                  fresh: bool = False, lock_timeout: float = 120.0) -> TuningFile:
    """Apply ``entries`` to the tuning file at ``path`` and return the file as written.

    ``entries`` maps signature keys to a new :class:`Entry` (replace), None (delete) or an
    update function called under the lock with the entry on disk (e.g. ``lambda e:
    e.with_region(416, "cfg")``); every other key on disk is kept. ``configs`` defines the
    ids the changes name (passing a lane's whole space is fine): the file keeps exactly the
    configs its entries and coverage basis name, and redefining one that an untouched entry
    names is an error. ``soft`` (usually :func:`current_soft_validators`) becomes the file's
    stamp; entries measured under another stamp keep theirs as their own ``soft``.
    ``provenance`` None keeps the file's; ``coverage_basis`` and ``model`` default to
    :data:`KEEP`. ``fresh=True`` replaces the whole file, moving the old one aside to
    ``<name>.replaced-<time>`` first. A file that is corrupt, or of
    another family, arch family or lane, is moved aside to ``<name>.corrupt-<time>`` with a
    :class:`TuningDatabaseWarning`; one written by a newer oasr is left alone and refused
    (:class:`SchemaTooNewError`). Raises ``DatabaseError`` (nothing written) on a bad change
    or when the lock is not obtained within ``lock_timeout`` seconds.
    """
    path = Path(path)
    try:
        lane_name, stamp = _check_arguments(family, lane, entries, configs, soft)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(lock_path(path)), timeout=lock_timeout)
        with lock.acquire(poll_interval=_LOCK_POLL_S):
            files.sweep_temps(path)
            replaced: list[bytes] = []
            current = None if fresh else _reread(path, family=family, arch=arch,
                                                 lane=lane_name, replaced=replaced)
            new = _merge(current, family=family, arch=arch, lane=lane_name, changes=entries,
                         configs=configs, stamp=stamp, provenance=provenance,
                         coverage_basis=coverage_basis, model=model)
            check_tuning_file(new, family=family, arch=arch, lanes=None, origin=str(path),
                              keys=None if current is None else entries.keys())
            text = new.dumps()
            if fresh:
                _keep_replaced(path)
            files.atomic_write(path, text)
        for old in replaced:
            validated.forget(validated.mark_for(old, family))
        validated.record(validated.mark_for(text.encode(), family))  # checked in full
    except filelock.Timeout:
        raise DatabaseError(f"{path}: another writer has held its lock for over "
                            f"{lock_timeout:g} s; is an oasr process stuck?") from None
    except (ValueError, TypeError) as exc:
        raise DatabaseError(f"{path}: not written: {exc}") from None
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename and str(exc.filename) != str(path) else ""
        raise DatabaseError(f"{path}: cannot write{where} ({exc.strerror or exc})") from None
    return new
