"""Finding a module's library by its key and loading it with ctypes.

On a GPU machine the library is normally already in the cache (``oasr tune prebuild`` ran on
this machine or on a CPU machine with the same toolchain, and the cache was copied). When it is
not, :func:`load` says so once and builds it under the module's lock; if it cannot be built it
raises, so the caller falls back to the next tier instead of running something else silently.
Before opening a library it checks that no other user can change it and that its bytes are
the ones its build recorded (:mod:`oasr_core.jit.trust`); a refusal raises the same way.
"""

from __future__ import annotations

import ctypes
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import attrs

from oasr_core.errors import JitBuildError
from oasr_core.jit import cache, trust
from oasr_core.jit.builder import BuildStatus, build_plan, first_error
from oasr_core.jit.compiler import Toolchain
from oasr_core.jit.spec import JitSpec, plan


class NotPrebuiltWarning(UserWarning):
    """A module had to be compiled at load time (slow); prebuild it instead."""


@attrs.frozen(eq=False)
class LoadedModule:
    """A loaded library and what it holds, from its manifest."""

    name: str
    key: str
    path: Path
    cdll: ctypes.CDLL
    exports: frozenset[str]
    """Launchers present in the library (those of units that compiled)."""
    failed: Mapping[str, str] = attrs.field(converter=lambda m: MappingProxyType(dict(m)))
    """Error text of each unit that did not make it into the library, by unit name."""
    missing: Mapping[str, str] = attrs.field(converter=lambda m: MappingProxyType(dict(m)))
    """For each export of a failed unit, the unit's name."""

    def function(self, export: str) -> ctypes._CFuncPtr:
        """The launcher ``export``; set its ``argtypes``/``restype`` before calling.

        Raises :class:`JitBuildError` naming the unit when its unit failed to compile, so a
        caller can fall back for that config alone.
        """
        if export in self.exports:
            return getattr(self.cdll, export)
        unit = self.missing.get(export)
        if unit is not None:
            raise JitBuildError(
                f"{export} is not in module {self.name}: unit {unit} failed "
                f"({first_error(self.failed[unit])}); "
                f"see {self.path.parent / 'manifest.json'}"
            )
        raise JitBuildError(f"module {self.name} has no export {export!r}")


def is_prebuilt(spec: JitSpec, tc: Toolchain | None = None) -> bool:
    """Whether the library of ``spec`` is in the cache (``load(spec, build_missing=False)``
    would find it); raises :class:`~oasr_core.errors.ToolchainError` without nvcc, whose
    identity is part of the key. ``tc``: the toolchain to key it for (default: probed)."""
    return cache.read_manifest(cache.cache_dir(), spec.name, plan(spec, tc).key) is not None


def load(spec: JitSpec, *, build_missing: bool = True, jobs: int | None = None) -> LoadedModule:
    """Load the library of ``spec`` from the cache, building it first if it is missing.

    With ``build_missing=False`` a missing library raises :class:`JitBuildError`. Building here
    warns once with :class:`NotPrebuiltWarning`. Raises :class:`ToolchainError` when it must
    build and cannot (no nvcc/CUTLASS, unsupported arch) and :class:`JitBuildError` when no
    library could be made or it does not load.
    """
    p = plan(spec)
    root = cache.cache_dir()
    path = cache.library_path(root, spec.name, p.key)
    manifest = cache.read_manifest(root, spec.name, p.key)
    damage = None if manifest is None else trust.content_problem(path, manifest)
    if damage is not None:
        manifest = None  # a damaged library is never opened: rebuilt, or refused
    if manifest is None:
        if not build_missing:
            if damage is not None:
                raise JitBuildError(
                    f"refusing to load {path}: {damage}; run `oasr tune prebuild` to rebuild "
                    "it")
            raise JitBuildError(
                f"module {spec.name} (key {p.key}, arch {spec.arch}) is not built in {root}; "
                "run `oasr tune prebuild` (or copy a prebuilt OASR_JIT_DIR made with the same "
                "toolchain)"
            )
        what = f"was damaged ({damage})" if damage else "was not prebuilt"
        warnings.warn(
            f"module {spec.name} {what}; building it now (run `oasr tune prebuild`)",
            NotPrebuiltWarning, stacklevel=2,
        )
        result = build_plan(p, jobs=jobs)
        if result.status is BuildStatus.FAILED:
            reasons = [result.error or ""] + [
                f"{name}: {first_error(err)}" for name, err in list(result.failed.items())[:5]
            ]
            raise JitBuildError(
                f"module {spec.name} could not be built: " + "; ".join(r for r in reasons if r))
        manifest = cache.read_manifest(root, spec.name, p.key)
        if manifest is None:
            raise JitBuildError(f"module {spec.name} was built but its manifest is missing")
    trust.check_library(path, root, manifest)
    try:
        cdll = ctypes.CDLL(str(path))
    except OSError as exc:
        raise JitBuildError(f"cannot load {path}: {exc}") from exc
    units = manifest.get("units", {})
    failed = {n: u.get("error") or "" for n, u in units.items() if u.get("status") == "failed"}
    return LoadedModule(
        name=spec.name, key=p.key, path=path, cdll=cdll,
        exports=frozenset(s for n, u in units.items() if n not in failed
                          for s in u.get("exports", ())),
        failed=failed,
        missing={s: n for n in failed for s in units[n].get("exports", ())},
    )
