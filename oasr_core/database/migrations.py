"""The migration chain of tuning files, run on the raw mapping before structuring.

The steps are registered in :data:`MIGRATIONS`, an :class:`oasr_core.versions.Migrations`
(the mechanism every versioned oasr document uses); :func:`migrate` runs every step from the
document's version up to :data:`~oasr_core.database.schema.SCHEMA_VERSION`. A document newer
than this code is refused with :class:`SchemaTooNewError`, which writers honour by not
touching the file.

Versions:

- **0**: the original OASR tuning file (top-level ``"schema": 2``). Arch family is an int
  (``120``), validators carry a ``hard`` section, sentinel choices are configs of kind
  ``default``/``torch``/``fused``, entries may hold an unused ``valid_m`` envelope.
- **1**: this package's format, sentinels unstamped: a ``default`` region meant whatever the
  serving process's lane default was.
- **2**: the soft stamp may say what the sentinels meant when the entries were measured
  (``default``: the file lane's default config id; a family's own stamps such as
  ``heuristic``), and a ``default`` region means the file lane's stamped default (see
  :mod:`oasr_core.sentinels`). A version-1 file has no such stamp, so its ``default`` means
  the file lane's current default: the step only changes the version, and it is there so
  that an oasr reading up to version 1 refuses a version-2 file instead of serving its
  ``default`` regions with another kernel than the one measured.
"""

from __future__ import annotations

from typing import Any

from oasr_core.errors import DatabaseError
from oasr_core.types import Sentinel
from oasr_core.versions import Migrations, Step

from .schema import SCHEMA_VERSION

LEGACY_SCHEMA = 2
"""The ``schema`` value of the original OASR files this code converts (our version 0)."""


class SchemaTooNewError(DatabaseError):
    """The file was written by a newer oasr (or a newer family plugin) than this one."""


def document_version(raw: dict[str, Any], origin: str) -> int:
    """The schema version of a parsed document; ``DatabaseError`` when it has none."""
    if "schema_version" in raw:
        version = raw["schema_version"]
        if type(version) is not int or version < 1:
            raise DatabaseError(f"{origin}: schema_version {version!r} is not a positive "
                                "integer")
        return version
    if raw.get("schema") == LEGACY_SCHEMA:
        return 0
    if "schema" in raw:
        raise DatabaseError(f"{origin}: legacy schema {raw['schema']!r} is not supported "
                            f"(only OASR schema {LEGACY_SCHEMA} files convert); rebuild it")
    raise DatabaseError(f"{origin}: no schema_version; not an oasr tuning file")


def _sentinel_kind(params: Any) -> str | None:
    if isinstance(params, dict):
        kind = params.get("kind")
        if isinstance(kind, str) and Sentinel.parse(kind) is not None:
            return kind
    return None


def _migrate_v0_to_v1(raw: dict[str, Any], _origin: str) -> dict[str, Any]:
    """OASR schema 2 -> 1: sm ints become ``smNN``, sentinel configs become sentinel names."""
    doc = {k: v for k, v in raw.items() if k != "schema"}
    arch = doc.get("arch")
    if isinstance(arch, dict) and type(arch.get("family")) is int:
        doc["arch"] = {**arch, "family": f"sm{arch['family']}"}
    validators = doc.get("validators")
    if isinstance(validators, dict):
        doc["validators"] = {"soft": validators.get("soft", {})}
    doc.setdefault("family_schema_version", 1)
    provenance = doc.get("provenance", {})
    if isinstance(provenance, dict):
        doc["provenance"] = {**provenance, "migrated_from": f"oasr schema {LEGACY_SCHEMA}"}

    renamed: dict[str, str] = {}
    configs = doc.get("configs")
    if isinstance(configs, dict):
        kept = {}
        for config_id, params in configs.items():
            kind = _sentinel_kind(params)
            if kind is not None:
                renamed[config_id] = kind
            elif isinstance(params, dict):
                kept[config_id] = {k: v for k, v in params.items() if k != "kind"}
            else:
                kept[config_id] = params
        doc["configs"] = kept

    def rename(choice: Any) -> Any:
        return renamed.get(choice, choice) if isinstance(choice, str) else choice

    basis = doc.get("coverage_basis")
    if isinstance(basis, list):
        doc["coverage_basis"] = [c for c in basis if not (isinstance(c, str) and c in renamed)]
    entries = doc.get("entries")
    if isinstance(entries, dict):
        new_entries = {}
        for key, entry in entries.items():
            if isinstance(entry, dict):
                entry = {k: v for k, v in entry.items() if k != "valid_m"}
                if isinstance(entry.get("regions"), list):
                    entry["regions"] = [
                        [r[0], rename(r[1])] if isinstance(r, list) and len(r) == 2 else r
                        for r in entry["regions"]]
                if isinstance(entry.get("points"), dict):
                    entry["points"] = {p: rename(c) for p, c in entry["points"].items()}
            new_entries[key] = entry
        doc["entries"] = new_entries
    return doc


def _migrate_v1_to_v2(raw: dict[str, Any], _origin: str) -> dict[str, Any]:
    """1 -> 2: no sentinel stamp is known for a version-1 file, so none is added (its
    ``default`` keeps meaning the file lane's current default)."""
    return {**raw, "schema_version": 2}


MIGRATIONS = Migrations(kind="tuning file", current=SCHEMA_VERSION,
                        steps=(Step(0, 1, _migrate_v0_to_v1), Step(1, 2, _migrate_v1_to_v2)),
                        error=DatabaseError, too_new=SchemaTooNewError, hint="upgrade oasr-core")
"""The tuning file's steps, one per version below SCHEMA_VERSION."""


def migrate(raw: dict[str, Any], origin: str,
            migrations: Migrations | None = None) -> dict[str, Any]:
    """``raw`` rewritten to the current schema, without its ``schema_version`` key.

    Raises :class:`SchemaTooNewError` for a newer document and ``DatabaseError`` for one
    with no usable version. ``migrations`` defaults to :data:`MIGRATIONS`.
    """
    return (migrations or MIGRATIONS).migrate(raw, document_version(raw, origin), origin)
