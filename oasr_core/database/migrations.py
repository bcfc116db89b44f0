"""The migration chain of tuning files, run on the raw mapping before structuring (STYLE 16).

Each step ``_migrate_vN_to_vN1(raw) -> raw`` rewrites one version's document into the next
one's; :func:`migrate` runs every step from the document's version up to
:data:`~oasr_core.database.schema.SCHEMA_VERSION`. A document newer than this code is refused
with :class:`SchemaTooNewError`, which writers honour by not touching the file.

Versions:

- **0**: the original OASR tuning file (top-level ``"schema": 2``). Arch family is an int
  (``120``), validators carry a ``hard`` section, sentinel choices are configs of kind
  ``default``/``torch``/``fused``, entries may hold an unused ``valid_m`` envelope.
- **1**: this package's format (see :mod:`oasr_core.database.schema`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oasr_core.errors import DatabaseError
from oasr_core.types import Sentinel

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


def _migrate_v0_to_v1(raw: dict[str, Any]) -> dict[str, Any]:
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


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _migrate_v0_to_v1}
"""Step from version N to N+1, keyed by N; one per version below SCHEMA_VERSION."""


def migrate(raw: dict[str, Any], origin: str) -> dict[str, Any]:
    """``raw`` rewritten to the current schema, without its ``schema_version`` key.

    Raises :class:`SchemaTooNewError` for a newer document and ``DatabaseError`` for one
    with no usable version.
    """
    version = document_version(raw, origin)
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"{origin}: schema_version {version} was written by a newer oasr (this one reads "
            f"up to {SCHEMA_VERSION}); upgrade oasr-core")
    doc = raw
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise DatabaseError(f"{origin}: schema_version {version} has no migration to "
                                f"{version + 1}; rebuild the file")
        doc = step(doc)
        version += 1
    return {k: v for k, v in doc.items() if k != "schema_version"}
