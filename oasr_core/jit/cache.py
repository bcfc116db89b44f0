"""The on-disk JIT cache: where objects and libraries live, atomic writes, locks, manifests.

Layout under :func:`cache_dir`::

    obj/<key[:2]>/<key>.cu            the text a unit compiled (for reading errors and reruns)
    obj/<key[:2]>/<key>.o             its object
    obj/<key[:2]>/<key>.o.sha256      the object's sha256, written after it (a different
                                      hash means a damaged object: recompiled)
    obj/<key[:2]>/<key>.failed.json   or why it failed to compile (not retried unless asked)
    lib/<name>/<key>/<name>.so        a module's library
    lib/<name>/<key>/manifest.json    what it holds; written last, so it marks a complete module

Every file is written to a temporary name in its own directory and moved into place with
``os.replace``, so a reader (another process, or a GPU machine the cache was copied to) sees a
file whole or not at all, and a library another process has loaded is never truncated.
Builders of one object or one module exclude each other with a ``filelock.FileLock`` beside it;
the lock dies with its process, so a killed build never leaves a stale one. Directories are
made without group or other write permission whatever the umask (:func:`make_dirs`), so the
loader's trust check (:mod:`oasr_core.jit.trust`) accepts what oasr itself wrote.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import filelock

from oasr_core import files
from oasr_core.database.codec import read_document
from oasr_core.errors import DatabaseError, JitBuildError

LOCK_TIMEOUT_S = 1800.0
"""How long a builder waits for another process building the same object or module."""
MANIFEST_SCHEMA_VERSION = 1


def cache_dir() -> Path:
    """``$OASR_JIT_DIR``, else ``platformdirs.user_cache_path("oasr") / "jit"``.

    Without platformdirs (a bare GPU machine), ``$XDG_CACHE_HOME/oasr/jit`` or
    ``~/.cache/oasr/jit``, which is where platformdirs points on Linux anyway.
    """
    configured = os.environ.get("OASR_JIT_DIR")
    if configured:
        return Path(configured).expanduser().absolute()
    try:
        import platformdirs
    except ImportError:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "oasr"
    else:
        base = platformdirs.user_cache_path("oasr")
    return base / "jit"


def object_path(root: Path, key: str) -> Path:
    """The object file of the unit with object key ``key``."""
    return root / "obj" / key[:2] / f"{key}.o"


def source_path(root: Path, key: str) -> Path:
    """The compiled text of the unit with object key ``key``."""
    return root / "obj" / key[:2] / f"{key}.cu"


def failure_path(root: Path, key: str) -> Path:
    """The failure marker of the unit with object key ``key``."""
    return root / "obj" / key[:2] / f"{key}.failed.json"


def object_hash_path(root: Path, key: str) -> Path:
    """The recorded sha256 of the object of the unit with object key ``key``."""
    return root / "obj" / key[:2] / f"{key}.o.sha256"


def make_dirs(path: Path) -> None:
    """Create directory ``path`` and its missing parents, each without group or other write
    permission (``chmod go-w`` after ``mkdir``, so a umask of 002 does not make the cache
    look shared to the loader's trust check). Existing directories are left as they are."""
    missing = []
    here = Path(path)
    while not here.is_dir():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue
        mode = stat.S_IMODE(os.stat(directory).st_mode)
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            os.chmod(directory, mode & ~(stat.S_IWGRP | stat.S_IWOTH))


def library_path(root: Path, name: str, key: str) -> Path:
    """The shared library of module ``name`` with module key ``key``."""
    return root / "lib" / name / key / f"{name}.so"


def manifest_path(root: Path, name: str, key: str) -> Path:
    """The manifest of module ``name`` with module key ``key``."""
    return root / "lib" / name / key / "manifest.json"


def atomic_write(path: Path, data: bytes | str, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically (:func:`oasr_core.files.atomic_write`; no fsync:
    a lost cache file is rebuilt)."""
    make_dirs(path.parent)
    files.atomic_write(path, data, mode=mode, fsync=False)


def temp_path(final: Path) -> Path:
    """A fresh file beside ``final`` for a tool to write (:func:`oasr_core.files.temp_beside`),
    its directory made private (:func:`make_dirs`)."""
    make_dirs(final.parent)
    return files.temp_beside(final)


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Atomically write ``document`` as indented JSON."""
    atomic_write(path, json.dumps(document, indent=1, sort_keys=True) + "\n")


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``, or None when it is missing or unreadable.

    Writes are atomic, so an unreadable file was damaged outside oasr; treating it as missing
    rebuilds what it described.
    """
    try:
        document = read_document(path)
    except DatabaseError:
        return None
    return document if isinstance(document, dict) else None


def manifest_problem(manifest: Any) -> str | None:
    """Why ``manifest`` is not one a complete build wrote (None when it is): an object with
    an integer ``schema_version``, the library's sha256, and ``units`` mapping each unit name
    to an object with a ``status`` of ``linked`` or ``failed`` and a list of ``exports``."""
    from oasr_core.jit import trust

    if not isinstance(manifest, dict):
        return f"it is {type(manifest).__name__}, not an object"
    version = manifest.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        return f"schema_version is {version!r}"
    recorded = manifest.get(trust.HASH_FIELD)
    if not isinstance(recorded, str) or not trust.SHA256_HEX.fullmatch(recorded):
        return f"it records no library sha256 ({trust.HASH_FIELD})"
    units = manifest.get("units")
    if not isinstance(units, dict) or not units:
        return "units is not a non-empty object"
    for unit_name, unit in units.items():
        if not isinstance(unit, dict) or unit.get("status") not in ("linked", "failed"):
            return f"unit {unit_name!r} is not a record with status linked or failed"
        exports = unit.get("exports")
        if not isinstance(exports, list) or not all(isinstance(e, str) for e in exports):
            return f"unit {unit_name!r} has no list of exports"
        if not isinstance(unit.get("error"), (str, type(None))):
            return f"unit {unit_name!r} has a malformed error"
    return None


def read_manifest(root: Path, name: str, key: str) -> dict[str, Any] | None:
    """The manifest of a complete module (its library present too), or None.

    A manifest that is unreadable or malformed (:func:`manifest_problem`, one from before
    builds recorded the library's hash included) counts as missing: the module is rebuilt.
    Raises :class:`JitBuildError` for a manifest written by a newer oasr.
    """
    path = manifest_path(root, name, key)
    manifest = read_json(path)
    if manifest is None or not library_path(root, name, key).is_file():
        return None
    version = manifest.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) \
            and version > MANIFEST_SCHEMA_VERSION:
        raise JitBuildError(
            f"{path} has schema_version {version!r}, newer than this oasr understands "
            f"({MANIFEST_SCHEMA_VERSION}); upgrade oasr or use another OASR_JIT_DIR"
        )
    if manifest_problem(manifest) is not None:
        return None
    return manifest


@contextlib.contextmanager
def locked(path: Path, what: str) -> Iterator[None]:
    """Hold the file lock ``path`` (created with its directory) while building ``what``."""
    make_dirs(path.parent)
    lock = filelock.FileLock(str(path), timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise JitBuildError(
            f"waited {LOCK_TIMEOUT_S:.0f} s for another process building {what} "
            f"(lock {path}); is a build hung?"
        ) from None
    try:
        yield
    finally:
        lock.release()
