"""``oasr_core.autotune()``: measure the shapes a process calls, while it calls them.

::

    with oasr_core.autotune(cache="oasr_tune.json"):
        out = oasr_gemm.gemm(a, w)   # the first call of a shape with no result measures it

Inside the context, every op resolution that misses the selection memo asks the session
(one mechanism: :func:`oasr_core.selection.set_session`). The session serves a result it
holds for the call's shape, under the measured-shape rule of
:class:`~oasr_core.autotuning.cache.ResultIndex` (a result serves sizes of its bucket at or
below the one it was measured at); otherwise it measures the call's own shape, every
candidate of the family's active lane through the bench protocol
(:mod:`oasr_core.autotuning.measure`), and serves the winner. Selections it serves are counted
under the user tier, where they are published. Outside the context nothing is ever
benchmarked; a shape that cannot be measured (no GPU, no ``make_bench``, inside a graph
capture) is warned about once and served by the tiers.

Entering starts a new epoch (so shapes an op memoised earlier are resolved, and measured,
again); leaving merges the results into the cache file (locked, atomic), publishes the
winners measured in this session to the user tier (``publish=True``), and starts another
epoch, so the production path serves them from then on.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from typing import Any

from oasr_core import selection
from oasr_core.bench import BenchError, BenchOptions, DeviceFault, Timer
from oasr_core.database import parse_signature_key
from oasr_core.errors import ConfigurationError, OasrError, UnknownFamilyError
from oasr_core.runtime import get_runtime
from oasr_core.types import Family, Lane, Problem, Selection

from .cache import (
    AutotuneWarning,
    CacheArchError,
    CacheFileError,
    CacheTooNewError,
    Result,
    ResultIndex,
    env_differences,
    load_cache,
    write_cache,
)
from .measure import Measurer, result_key, selection_of
from .publish import PublishReport, publish


def _warn(message: str) -> None:
    warnings.warn(message, AutotuneWarning, stacklevel=4)


class AutotuneSession:
    """The state of one ``with oasr_core.autotune(...)`` block (see the module docstring).

    ``results`` are this session's measurements, ``index`` every result it serves (the
    cache file's and its own), ``published`` what leaving the context published.
    """

    def __init__(self, cache: str | os.PathLike[str] | None = None, publish: bool = True, *,
                 arch: str | None = None, timer: Timer | None = None,
                 eager_timer: Timer | None = None, bench_options: BenchOptions | None = None,
                 tie: float = 0.01) -> None:
        self.cache_path = Path(cache) if cache is not None else None
        self.publish = publish
        self.arch = arch
        self.measurer = Measurer(timer=timer, eager_timer=eager_timer, options=bench_options,
                                 tie=tie)
        self.index = ResultIndex()
        self._measured: dict[tuple, Result] = {}
        self._failed: dict[tuple, str] = {}
        self._warned: set[str] = set()
        self._lock = threading.RLock()
        self._local = threading.local()
        self._active = False
        self._writable = True
        self.published: PublishReport | None = None

    @property
    def results(self) -> tuple[Result, ...]:
        """The results measured in this session, in measurement order."""
        return tuple(self._measured.values())

    def __enter__(self) -> AutotuneSession:
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop(failed=exc_type is not None)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _warn(message)

    def start(self) -> None:
        """Load the cache, start a new epoch and install the session."""
        if selection.active_session() is not None:
            raise ConfigurationError("oasr_core.autotune() is already active in this process; "
                                     "sessions do not nest")
        rt = get_runtime()
        if self.arch is None:
            self.arch = rt.device_arch()
        if self.arch is None:
            _warn("oasr: autotune() found no CUDA device and was given no arch: it measures "
                  "nothing, the tiers serve every call")
        elif self.cache_path is not None:
            self._load(rt)
        # Installed before the new epoch starts, so what a reload re-plans (the routed
        # layers, oasr_core.routing) sees the session.
        selection.set_session(self)
        rt.reload()
        self._active = True

    def _load(self, rt: Any) -> None:
        path = self.cache_path
        if not path.exists():
            return
        try:
            cache = load_cache(path, self.arch)
        except (CacheArchError, CacheTooNewError) as exc:
            self._writable = False
            _warn(f"oasr: autotune cache skipped: {exc}; its results are kept and this "
                  "session's are not written to it")
            return
        except CacheFileError as exc:
            _warn(f"oasr: autotune cache skipped: {exc}; it is moved aside if this session "
                  "writes results")
            return
        differences: set[str] = set()
        current: dict[str, dict[str, Any]] = {}
        for result in cache.results:
            self.index.add(result)
            if result.env:
                family = parse_signature_key(result.key).family
                if family not in current:
                    current[family] = self._current_env(rt, family)
                differences.update(env_differences(result.env, current[family]))
        if differences:
            _warn(f"oasr: autotune cache {path}: results measured under another environment "
                  f"({'; '.join(sorted(differences))}); they are used, re-tune to refresh")

    def _current_env(self, rt: Any, name: str) -> dict[str, Any]:
        try:
            family = rt.registry.family(name)
        except UnknownFamilyError:
            return {}
        return self.measurer.env(family)

    def stop(self, *, failed: bool = False) -> None:
        """Uninstall the session, write the cache, publish, and start a new epoch.

        When the block raised (``failed``), a write or publish error is a warning so it
        does not hide the block's own exception.
        """
        if not self._active:
            return
        self._active = False
        if selection.active_session() is self:
            selection.set_session(None)
        try:
            errors = self._finish()
        finally:
            get_runtime().reload()
        for exc in errors[0 if failed else 1:]:
            _warn(f"oasr: autotune could not save its results: {exc}")
        if errors and not failed:
            raise errors[0]

    def _finish(self) -> list[OasrError]:
        errors: list[OasrError] = []
        results = self.results
        if self.cache_path is not None and self._writable and results:
            try:
                write_cache(self.cache_path, arch=self.arch, results=results)
            except (CacheArchError, CacheTooNewError) as exc:
                _warn(f"oasr: autotune cache not written: {exc}")
            except OasrError as exc:
                errors.append(exc)
        if self.publish and results:
            try:
                self.published = publish(results, arch=self.arch,
                                         registry=get_runtime().registry)
            except OasrError as exc:
                errors.append(exc)
        return errors

    def resolve(self, rt: Any, family: Family, lane: Lane | None, arch: str | None,
                problem: Problem) -> Selection | None:
        """The selection-hook: a held result, else a fresh measurement; None: tiers serve."""
        if lane is None or arch is None or arch != self.arch \
                or getattr(self._local, "busy", False):
            return None
        key = result_key(family, problem)
        held = self.index.lookup(key, problem.m, problem.point)
        if held is not None:
            sel = selection_of(held, family, lane, problem)
            if sel is not None:
                return sel
        slot = (key, problem.m, problem.point)
        if slot in self._failed:
            return None
        with self._lock:
            return self._measure(family, lane, arch, problem, key, slot)

    def _measure(self, family: Family, lane: Lane, arch: str, problem: Problem, key: str,
                 slot: tuple) -> Selection | None:
        where = f"{key} {family.dynamic_axis}={problem.m}"
        self._local.busy = True  # the arms' own op calls resolve through the tiers
        try:
            incumbent = selection.resolve_tiers(family, lane, arch, problem)
            measurement = self.measurer.measure(family, lane, problem, incumbent=incumbent)
        except DeviceFault:
            raise
        except BenchError as exc:
            self._failed[slot] = str(exc)
            self._warn_once(f"bench:{family.name}:{type(exc).__name__}",
                            f"oasr: autotune cannot measure {where}: {exc}; the tiers serve it")
            return None
        finally:
            self._local.busy = False
        result = measurement.result
        if result is None:
            self._failed[slot] = measurement.reason
            self._warn_once(f"none:{slot}", f"oasr: autotune timed no candidate at {where} "
                            f"({measurement.reason}); the tiers serve it")
            return None
        self.index.add(result)
        self._measured[result.identity] = result
        return selection_of(result, family, lane, problem)


def autotune(cache: str | os.PathLike[str] | None = None, publish: bool = True, *,
             arch: str | None = None, timer: Timer | None = None,
             eager_timer: Timer | None = None, bench_options: BenchOptions | None = None,
             tie: float = 0.01) -> AutotuneSession:
    """A context manager measuring, inside it, every op call shape that has no result.

    ``cache``: a cache file to read results from and merge this session's into (None: keep
    them in memory only); ``publish``: write the winners into the user tier when leaving, at
    the sizes they were measured at, so the production path serves them afterwards.
    ``arch`` defaults to the current CUDA device's arch family; ``timer`` /
    ``eager_timer`` default to the CUDA-graph and eager CUDA timers (tests pass scripted
    ones); ``bench_options`` tune the protocol; ``tie`` is the margin within which the
    incumbent keeps its place. See :mod:`oasr_core.autotuning.session`.
    """
    return AutotuneSession(cache, publish, arch=arch, timer=timer, eager_timer=eager_timer,
                           bench_options=bench_options, tie=tie)
