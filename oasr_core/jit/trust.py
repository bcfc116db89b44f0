"""Whether a cached library may be loaded: who can write where it lives, and its content.

Loading a shared library runs its code in the process, so the JIT cache is trusted only as
far as the people who can write to it. :func:`check_library` refuses, with one line naming
the path and the remedy:

* a library, or any directory from it up to the file system root (the cache's own ``obj/``
  included, whose objects a rebuild links), that a user other than this one (or root) owns,
  or that group or others may write without the sticky bit (``/tmp`` has it: others may
  not replace what this user put there);
* a library whose bytes differ from the sha256 its build recorded in the module's manifest
  (``library_sha256``): a library is filed under the key of what it was built from, and the
  hash ties the file to that build, so a swapped or torn copy is never loaded. A manifest
  from before the hash was recorded gets it on first load (:func:`check_library`).

Each library is hashed once per process (by path, inode, size and modification time), so a
process loading its modules pays one read per library, not one per call.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path

from oasr_core.errors import JitBuildError

HASH_FIELD = "library_sha256"
"""The manifest field holding the library's sha256 (hex), written when it is linked."""

_hashed: dict[tuple[str, int, int, int], str] = {}
_lock = threading.Lock()


def file_sha256(path: Path) -> str:
    """The sha256 (hex) of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _unsafe(st: os.stat_result) -> str | None:
    if st.st_uid not in (os.getuid(), 0):
        return f"is owned by uid {st.st_uid}, not this user ({os.getuid()}) or root"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        who = "group and others" if writable == stat.S_IWGRP | stat.S_IWOTH else (
            "its group" if writable == stat.S_IWGRP else "others")
        return f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def check_place(library: Path, root: Path) -> None:
    """Raise :class:`JitBuildError` unless only this user (or root) can change ``library``
    or any directory above it, and ``root``'s ``obj/`` (see the module docstring)."""
    # Both the path as named and as resolved: a link in it must not hide a writable parent.
    places = list(dict.fromkeys([library, *library.absolute().parents,
                                 *library.resolve().parents]))
    obj = root / "obj"
    if obj.is_dir():
        places.append(obj)
    for place in places:
        try:
            st = os.stat(place)
        except OSError as exc:
            raise JitBuildError(f"refusing to load {library}: cannot inspect {place} "
                                f"({exc.strerror or exc})") from None
        why = _unsafe(st)
        if why is not None:
            raise JitBuildError(
                f"refusing to load {library}: {place} {why}, so another user could put code "
                "into this process; make it private (chmod go-w, chown) or point OASR_JIT_DIR "
                "at a directory only you can write")


def check_content(library: Path, manifest: dict) -> None:
    """Raise :class:`JitBuildError` unless ``library``'s sha256 is the manifest's."""
    expected = manifest.get(HASH_FIELD)
    st = os.stat(library)
    key = (str(library), st.st_ino, st.st_size, st.st_mtime_ns)
    with _lock:
        actual = _hashed.get(key)
    if actual is None:
        actual = file_sha256(library)
        with _lock:
            _hashed[key] = actual
    if actual != expected:
        raise JitBuildError(
            f"refusing to load {library}: its sha256 {actual[:16]}... is not the "
            f"{str(expected)[:16]}... its build recorded; delete {library.parent} to rebuild it")


def check_library(library: Path, root: Path, manifest: dict, manifest_path: Path) -> None:
    """:func:`check_place` then :func:`check_content`: what :func:`oasr_core.jit.load` asks
    before it opens ``library``.

    A manifest written before builds recorded the hash gets it now, once its place passed:
    only this user (or root) can have put the library there, so it is trusted as its own
    build would be, and every later load checks the bytes against it.
    """
    check_place(library, root)
    if not isinstance(manifest.get(HASH_FIELD), str):
        from oasr_core.jit import cache

        manifest[HASH_FIELD] = file_sha256(library)
        try:
            cache.write_json(manifest_path, manifest)
        except OSError:
            pass  # a read-only cache: this process checked the place; the next one will too
    check_content(library, manifest)
