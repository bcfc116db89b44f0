"""The index of tuning-file contents already checked in full, so later reads may be lazy.

A mark is a 64-hex name derived from the file's bytes (sha256), the family's record as it
shapes the checks (name, schema version, ops, dims, keying, sentinels, exact points), the
file schema and the checks' own version. Only a writer records one (:func:`record`: an
empty file of that name under ``<user tier>/.validated/``), for the content it checked in
full and wrote; readers only ask (:func:`is_marked`), so a read-only command writes nothing.
A file nobody marked (the shipped system tier, a file copied in by hand) is checked in full
on every read. With the user tier disabled there is no index.

The index is bounded: a writer removes the mark of the content it replaced
(:func:`forget`), and :func:`record` keeps at most :data:`MAX_MARKS`, oldest dropped (a
dropped mark costs the next reader a full check, nothing else). The index never follows a
symbolic link: a ``.validated`` (or subdirectory, or mark) that is a link is not used, so a
link planted in the tier cannot make oasr create files elsewhere.

A mark only lets a reader defer checks, never skip them: an entry is still structured and
checked when it is looked up, so a forged mark can cost a lookup, never a wrong answer.
Whoever can write a mark can write the tier's files themselves, so a mark grants nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from pathlib import Path

from oasr_core.types import Family

from .paths import user_root
from .schema import SCHEMA_VERSION

CHECKS_VERSION = 1
"""Bump when what the loader checks per entry changes: old marks then mean nothing."""
DIR_NAME = ".validated"
MAX_MARKS = 256
"""Most marks kept: each is one tuning file's content for one family, and a user tier holds
a handful of files per arch."""


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


def _real_dir(path: Path) -> bool:
    """Whether ``path`` is a directory and not a symbolic link."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_marked(mark: str) -> bool:
    """Whether content with ``mark`` was checked in full before."""
    index = _index()
    if index is None or not _real_dir(index) or not _real_dir(index / mark[:2]):
        return False
    try:
        return stat.S_ISREG(os.lstat(index / mark[:2] / mark).st_mode)
    except OSError:
        return False


def _private_dir(path: Path) -> bool:
    """Make ``path`` (one level) unless it exists; True when it is a real directory."""
    with contextlib.suppress(FileExistsError):
        path.mkdir()
    return _real_dir(path)


def record(mark: str) -> None:
    """Remember that content with ``mark`` passed every check (best effort; writers only)."""
    index = _index()
    if index is None or not index.parent.is_dir():
        return
    try:
        where = index / mark[:2]
        if not (_private_dir(index) and _private_dir(where)):
            return  # a link planted in the tier: not followed
        fd = os.open(where / mark, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        os.close(fd)
        os.utime(where / mark, follow_symlinks=False)
        _bound(index)
    except OSError:
        pass  # a read-only or full cache only costs the next reader a full check


def forget(mark: str) -> None:
    """Drop the mark of content a writer just replaced (best effort)."""
    index = _index()
    if index is None or not _real_dir(index) or not _real_dir(index / mark[:2]):
        return
    with contextlib.suppress(OSError):
        os.unlink(index / mark[:2] / mark)


def _bound(index: Path) -> None:
    marks = [p for sub in index.iterdir() if _real_dir(sub) for p in sub.iterdir()]
    if len(marks) <= MAX_MARKS:
        return
    aged = sorted(marks, key=lambda p: p.lstat().st_mtime_ns)
    for old in aged[: len(marks) - MAX_MARKS]:
        with contextlib.suppress(OSError):
            os.unlink(old)
