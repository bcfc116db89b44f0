"""The index of tuning-file contents already checked in full, so later reads may be lazy.

A mark is a 64-hex name derived from the file's bytes (sha256), the family's record as it
shapes the checks (name, schema version, ops, dims, keying, sentinels, exact points), the
file schema and the checks' own version. :func:`record` creates an empty file of that name
under ``<user tier>/.validated/``; :func:`is_marked` asks for it. With the user tier
disabled there is no index and every read checks every entry.

A mark only lets a reader defer checks, never skip them: an entry is still structured and
checked when it is looked up, so a forged mark can cost a lookup, never a wrong answer.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from oasr_core.types import Family

from .paths import user_root
from .schema import SCHEMA_VERSION

CHECKS_VERSION = 1
"""Bump when what the loader checks per entry changes: old marks then mean nothing."""
DIR_NAME = ".validated"


def mark_for(data: bytes, family: Family) -> str:
    """The mark of file content ``data`` read for ``family``."""
    shape = repr((CHECKS_VERSION, SCHEMA_VERSION, family.name, family.schema_version,
                  tuple(family.ops), tuple(family.dims), bool(family.key_dtype),
                  sorted(s.value for s in family.sentinels), family.fallback.value,
                  bool(family.exact_points)))
    digest = hashlib.sha256(data)
    digest.update(b"\0" + shape.encode())
    return digest.hexdigest()


def _index() -> Path | None:
    try:
        root = user_root()
    except Exception:  # a bad OASR_TUNE_USER_DB is reported where the tier is read
        return None
    return None if root is None else root / DIR_NAME


def is_marked(mark: str) -> bool:
    """Whether content with ``mark`` was checked in full before."""
    index = _index()
    return index is not None and (index / mark[:2] / mark).is_file()


def record(mark: str) -> None:
    """Remember that content with ``mark`` passed every check (best effort)."""
    index = _index()
    if index is None:
        return
    try:
        where = index / mark[:2]
        where.mkdir(parents=True, exist_ok=True)
        (where / mark).touch()
    except OSError:
        pass  # a read-only cache only costs the next reader a full check
