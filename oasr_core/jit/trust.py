"""Whether a cached library may be loaded: who can write where it lives, and its content.

Loading a shared library runs its code in the process, so the JIT cache is trusted only as
far as the people who can write to it. :func:`check_library` refuses, with one line naming
the path and the remedy:

* a library, or any directory from it up to the file system root (the cache's own ``obj/``
  included, whose objects a rebuild links), that a user other than this one (or root) owns,
  or that group or others may write, unless the directory is sticky (``/tmp``: others may
  not replace what this user put there) or the group is this user's private group (a group
  no other user belongs to: Debian and Ubuntu give each user one and a umask of 002, so
  directories other tools make in the home directory are group-writable by that group only).
  The cache's own directories are made without group or other write permission whatever
  the umask (:func:`oasr_core.jit.cache.make_dirs`), so what oasr writes always passes;
* a library whose bytes differ from the sha256 its build recorded in the module's manifest
  (``library_sha256``): a library is filed under the key of what it was built from, and the
  hash ties the file to that build, so a swapped or torn copy is never opened (``dlopen`` of
  a truncated file can kill the process with SIGBUS; checking the bytes first means it never
  sees one). The hash is written by the build, never recorded on a first load: a manifest
  without it is treated as an incomplete build, which the loader rebuilds.

Each library is hashed once per process (by path, inode, size and modification time), so a
process loading its modules pays one read per library, not one per call.
"""

from __future__ import annotations

import functools
import grp
import hashlib
import os
import pwd
import re
import stat
import threading
from pathlib import Path

from oasr_core.errors import JitBuildError

HASH_FIELD = "library_sha256"
"""The manifest field holding the library's sha256 (hex), written when it is linked."""
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
"""What a recorded hash looks like."""

_hashed: dict[tuple[str, int, int, int], str] = {}
_lock = threading.Lock()


def file_sha256(path: Path) -> str:
    """The sha256 (hex) of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached_sha256(path: Path) -> str:
    """:func:`file_sha256`, computed once per process for one (path, inode, size, mtime)."""
    st = os.stat(path)
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    with _lock:
        actual = _hashed.get(key)
    if actual is None:
        actual = file_sha256(path)
        with _lock:
            _hashed[key] = actual
    return actual


@functools.cache
def private_group(gid: int) -> bool:
    """Whether group ``gid`` is this user's own: this user's primary group, with no other
    user as a member or having it as primary group (a "user private group")."""
    uid = os.getuid()
    try:
        me = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    if me.pw_gid != gid or any(m != me.pw_name for m in group.gr_mem):
        return False
    return not any(p.pw_gid == gid and p.pw_uid != uid for p in pwd.getpwall())


def _unsafe(st: os.stat_result) -> str | None:
    if st.st_uid not in (os.getuid(), 0):
        return f"is owned by uid {st.st_uid}, not this user ({os.getuid()}) or root"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        return None
    if writable == stat.S_IWGRP and st.st_uid == os.getuid() and private_group(st.st_gid):
        return None
    if writable:
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


def content_problem(library: Path, manifest: dict) -> str | None:
    """Why ``library`` is not the file its build recorded in ``manifest`` (None when it is)."""
    expected = manifest.get(HASH_FIELD)
    if not isinstance(expected, str) or not SHA256_HEX.fullmatch(expected):
        return f"its manifest records no sha256 for {library.name}"
    try:
        actual = cached_sha256(library)
    except OSError as exc:
        return f"cannot read {library} ({exc.strerror or exc})"
    if actual != expected:
        return f"its sha256 {actual[:16]}... is not the {expected[:16]}... its build recorded"
    return None


def check_content(library: Path, manifest: dict) -> None:
    """Raise :class:`JitBuildError` unless ``library``'s sha256 is the manifest's."""
    problem = content_problem(library, manifest)
    if problem is not None:
        raise JitBuildError(f"refusing to load {library}: {problem}; delete {library.parent} "
                            "or run `oasr tune prebuild` to rebuild it")


def check_library(library: Path, root: Path, manifest: dict) -> None:
    """:func:`check_place` then :func:`check_content`: what :func:`oasr_core.jit.load` asks
    before it opens ``library``."""
    check_place(library, root)
    check_content(library, manifest)
