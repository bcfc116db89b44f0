"""Atomic file replacement, the one way oasr writes a file that others read while it runs.

Tuning files, autotune caches, JIT sources and manifests, and ArchProfile caches are read by
other processes (or a GPU machine the directory was copied to) while a writer replaces them.
:func:`atomic_write` writes a temporary file in the target's own directory (``.<name>.*.tmp``,
so ``os.replace`` never crosses a file system), optionally fsyncs it, and replaces the target:
a reader sees the old file or the new one, never a torn one, even when the writer is killed.
A killed writer can leave its temporary behind; a writer that holds the target's lock removes
them with :func:`sweep_temps`.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def temp_prefix(path: Path) -> str:
    """The name prefix of ``path``'s temporary files (``.<name>.``)."""
    return f".{path.name}."


def atomic_write(path: str | os.PathLike[str], data: bytes | str, *, mode: int | None = None,
                 fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) atomically.

    ``mode`` defaults to the replaced file's permissions, or ``0o644`` for a new file.
    ``fsync`` makes the new content durable before the rename (files that must survive a
    crash: tuning files, caches); scratch a build can redo skips it. Parent directories are
    created. The temporary file is removed when anything fails.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def sweep_temps(path: str | os.PathLike[str]) -> None:
    """Remove temporary files a killed :func:`atomic_write` of ``path`` left behind.

    Call it only while holding ``path``'s lock: then no live writer owns one of them.
    """
    path = Path(path)
    prefix = temp_prefix(path)
    try:
        leftovers = [p for p in path.parent.iterdir()
                     if p.name.startswith(prefix) and p.name.endswith(TEMP_SUFFIX)]
    except FileNotFoundError:
        return
    for leftover in leftovers:
        with contextlib.suppress(OSError):
            leftover.unlink()


def temp_beside(final: str | os.PathLike[str]) -> Path:
    """A fresh, empty file beside ``final``, with its suffix (tools such as nvcc judge a file
    by it), for a tool to write; move it onto ``final`` with ``os.replace`` once the tool
    succeeded."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=temp_prefix(final), suffix=final.suffix)
    os.close(fd)
    return Path(tmp)


def move_aside(path: str | os.PathLike[str], why: str = "corrupt") -> Path:
    """Rename ``path`` to ``<name>.<why>-<UTC time>`` (never over another such file) so a
    writer can start afresh without losing it; returns the new path. ``why`` is ``corrupt``
    for a file that could not be used, ``replaced`` for one a fresh write replaces."""
    path = Path(path)
    aside = _aside_name(path, why)
    os.rename(path, aside)
    return aside


def _aside_name(path: Path, why: str) -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    aside = path.with_name(f"{path.name}.{why}-{stamp}")
    n = 1
    while aside.exists():
        aside = path.with_name(f"{path.name}.{why}-{stamp}-{n}")
        n += 1
    return aside


def keep_aside(path: str | os.PathLike[str], why: str) -> Path | None:
    """Keep ``path``'s current content as ``<name>.<why>-<UTC time>`` (as :func:`move_aside`
    names it) while ``path`` itself stays in place, for a writer about to replace it
    atomically: readers never see it missing. A hard link where the file system has them,
    else a copy. None when there is no file."""
    path = Path(path)
    if not path.exists():
        return None
    aside = _aside_name(path, why)
    try:
        os.link(path, aside)
    except OSError:
        shutil.copy2(path, aside)
    return aside


LOCK_DIR = ".locks"
"""The directory, beside the files it guards, that holds their lock files."""


def lock_beside(path: str | os.PathLike[str]) -> Path:
    """The lock file guarding ``path``: ``<dir>/.locks/<name>.lock`` (the directory created),
    so locks gather in one hidden directory instead of one empty file beside each file.

    Raises ``OSError`` (ELOOP, naming the link) when the lock directory or the lock file is a
    symbolic link: locking opens the file for writing, and a link planted there would make
    oasr create or truncate a file elsewhere."""
    path = Path(path)
    locks = path.parent / LOCK_DIR
    locks.mkdir(parents=True, exist_ok=True)
    lock = locks / f"{path.name}.lock"
    refuse_link(locks)
    refuse_link(lock)
    return lock


def refuse_link(path: Path) -> None:
    """Raise ``OSError(ELOOP)`` naming ``path`` when it is a symbolic link."""
    import errno

    if path.is_symlink():
        raise OSError(errno.ELOOP, "a symbolic link, not followed by a writer", str(path))
