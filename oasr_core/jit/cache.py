"""The on-disk JIT cache: where objects and libraries live, atomic writes, locks, manifests.

Layout under :func:`cache_dir`::

    obj/<key[:2]>/<key>.cu            the text a unit compiled (for reading errors and reruns)
    obj/<key[:2]>/<key>.o             its object
    obj/<key[:2]>/<key>.failed.json   or why it failed to compile (not retried unless asked)
    lib/<name>/<key>/<name>.so        a module's library
    lib/<name>/<key>/manifest.json    what it holds; written last, so it marks a complete module

Every file is written to a temporary name in its own directory and moved into place with
``os.replace``, so a reader (another process, or a GPU machine the cache was copied to) sees a
file whole or not at all, and a library another process has loaded is never truncated.
Builders of one object or one module exclude each other with a ``filelock.FileLock`` beside it;
the lock dies with its process, so a killed build never leaves a stale one.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import filelock

from oasr_core import files
from oasr_core.errors import JitBuildError

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


def library_path(root: Path, name: str, key: str) -> Path:
    """The shared library of module ``name`` with module key ``key``."""
    return root / "lib" / name / key / f"{name}.so"


def manifest_path(root: Path, name: str, key: str) -> Path:
    """The manifest of module ``name`` with module key ``key``."""
    return root / "lib" / name / key / "manifest.json"


def atomic_write(path: Path, data: bytes | str, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically (:func:`oasr_core.files.atomic_write`; no fsync:
    a lost cache file is rebuilt)."""
    files.atomic_write(path, data, mode=mode, fsync=False)


temp_path = files.temp_beside


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Atomically write ``document`` as indented JSON."""
    atomic_write(path, json.dumps(document, indent=1, sort_keys=True) + "\n")


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``, or None when it is missing or unreadable.

    Writes are atomic, so an unreadable file was damaged outside oasr; treating it as missing
    rebuilds what it described.
    """
    from oasr_core.database.codec import read_document
    from oasr_core.errors import DatabaseError

    try:
        document = read_document(path)
    except DatabaseError:
        return None
    return document if isinstance(document, dict) else None


def read_manifest(root: Path, name: str, key: str) -> dict[str, Any] | None:
    """The manifest of a complete module (its library present too), or None.

    Raises :class:`JitBuildError` for a manifest written by a newer oasr.
    """
    path = manifest_path(root, name, key)
    manifest = read_json(path)
    if manifest is None or not library_path(root, name, key).is_file():
        return None
    version = manifest.get("schema_version")
    if not isinstance(version, int) or version > MANIFEST_SCHEMA_VERSION:
        raise JitBuildError(
            f"{path} has schema_version {version!r}, newer than this oasr understands "
            f"({MANIFEST_SCHEMA_VERSION}); upgrade oasr or use another OASR_JIT_DIR"
        )
    return manifest


@contextlib.contextmanager
def locked(path: Path, what: str) -> Iterator[None]:
    """Hold the file lock ``path`` (created with its directory) while building ``what``."""
    path.parent.mkdir(parents=True, exist_ok=True)
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
