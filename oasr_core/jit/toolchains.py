"""The nvcc a build used, recorded in the JIT cache, so read-only commands report the
toolchain without running it.

``oasr doctor`` and ``oasr tune status`` read and write nothing but what they report, and
start no subprocess: ``nvcc --version`` is a compiler start (tens of milliseconds here,
seconds behind a cold wrapper or a network file system), and the nvcc a user's ``PATH``
names may be anything. What they need of the toolchain (its build version, the soft stamp
staleness compares; its identity, part of every JIT cache key) comes from, in order:

1. ``<cache>/toolchain.json``, which every module link and every ``oasr tune prebuild``
   (even one that finds every module built) writes (:func:`record`): per nvcc
   path, the identity its build probed and the fingerprint (size, mtime, inode) of the file
   the path names and of the file it resolves to; used while both fingerprints match;
2. the CUDA toolkit's ``version.json`` beside the resolved binary's ``bin/`` (``cuda_nvcc``'s
   version): the build version, not the identity;
3. the path alone (:func:`oasr_core.jit.compiler.find_nvcc` finds it as a build would).

Builds and loads still probe nvcc themselves (:func:`oasr_core.jit.compiler.toolchain`): a
record only ever informs a report.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from oasr_core.database.codec import read_document
from oasr_core.errors import DatabaseError
from oasr_core.jit import cache
from oasr_core.jit.compiler import Toolchain, find_nvcc

RECORD_NAME = "toolchain.json"
RECORD_SCHEMA_VERSION = 1


@attrs.frozen
class KnownToolchain:
    """What is known of the nvcc a build would use, without running it."""

    nvcc: Path
    build_version: str | None
    """``13.0.88``, or None when neither a record nor the toolkit says."""
    toolchain: Toolchain | None
    """The identity a build probed (:class:`Toolchain`), when recorded for this very file."""
    source: str
    """Where the version came from: ``recorded by a build``, a ``version.json`` path, or
    ``not probed``."""


def _fingerprint(path: Path) -> list[list[int]] | None:
    """(size, mtime_ns, inode) of the file ``path`` names and of the file it resolves to."""
    try:
        named, resolved = os.stat(path), os.stat(path.resolve())
    except OSError:
        return None
    return [[s.st_size, s.st_mtime_ns, s.st_ino] for s in (named, resolved)]


def record_path(root: Path) -> Path:
    """The toolchain record of the JIT cache at ``root``."""
    return root / RECORD_NAME


def _read(root: Path) -> dict[str, Any]:
    try:
        doc = read_document(record_path(root))
    except DatabaseError:
        return {}
    if not isinstance(doc, dict) or doc.get("schema_version") != RECORD_SCHEMA_VERSION:
        return {}
    entries = doc.get("nvcc")
    return entries if isinstance(entries, dict) else {}


def record(root: Path, tc: Toolchain) -> None:
    """Remember ``tc`` (probed by a build into the cache at ``root``) under its nvcc's path;
    nothing is written when the record already says so. Best effort: a cache that cannot
    take the record still builds (a report then says less)."""
    entry = {"fingerprint": _fingerprint(tc.nvcc), "version": tc.version,
             "release": tc.release}
    if entry["fingerprint"] is None:
        return
    entries = _read(root)
    if entries.get(str(tc.nvcc)) == entry:
        return
    entries = {k: v for k, v in entries.items() if isinstance(v, dict)}
    entries[str(tc.nvcc)] = entry
    try:
        cache.write_json(record_path(root), {"schema_version": RECORD_SCHEMA_VERSION,
                                             "nvcc": entries})
    except OSError:
        pass


def _toolkit_version(nvcc: Path) -> tuple[str, Path] | None:
    """``cuda_nvcc``'s version in the toolkit's ``version.json`` (``<root>/bin/nvcc``)."""
    path = nvcc.resolve().parent.parent / "version.json"
    try:
        doc = read_document(path)
    except DatabaseError:
        return None
    part = doc.get("cuda_nvcc") if isinstance(doc, dict) else None
    version = part.get("version") if isinstance(part, dict) else None
    return (version, path) if isinstance(version, str) and version else None


def known() -> KnownToolchain:
    """The nvcc a build would use and what is known of it without running it (see the
    module docstring). Raises :class:`~oasr_core.errors.ToolchainError` when there is no
    nvcc to find, as a build would."""
    nvcc = find_nvcc()
    entry = _read(cache.cache_dir()).get(str(nvcc))
    if (isinstance(entry, dict) and isinstance(entry.get("version"), str)
            and isinstance(entry.get("release"), str)
            and entry.get("fingerprint") == _fingerprint(nvcc)):
        tc = Toolchain(nvcc=nvcc, version=entry["version"], release=entry["release"])
        return KnownToolchain(nvcc=nvcc, build_version=tc.build_version, toolchain=tc,
                              source="recorded by a build")
    found = _toolkit_version(nvcc)
    if found is not None:
        return KnownToolchain(nvcc=nvcc, build_version=found[0], toolchain=None,
                              source=str(found[1]))
    return KnownToolchain(nvcc=nvcc, build_version=None, toolchain=None, source="not probed")
