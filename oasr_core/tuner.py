"""The engine's tuning API: :class:`TuningConfig` and the :class:`Tuner` an engine holds.

An engine knows, before a request arrives, which shapes its captured graphs will run (its
census, or a list of shapes). It builds a ``Tuner(config, census, on_reload=release)`` and
calls :meth:`Tuner.prepare` once, before it captures any graph:

- ``TuningConfig(mode="prewarm", budget_s=...)`` measures every must-tune point that no user
  or system tier entry covers, through the same machinery as ``oasr_core.autotune()``, and
  publishes each winner to the user tier at the size it was measured at, heaviest points
  first, until the one budget shared by every family is spent; then it starts a new epoch;
- ``strict=True`` then raises :class:`~oasr_core.errors.UncoveredShapesError` naming every
  must-tune point still uncovered.

:meth:`Tuner.reload` starts a new epoch, and every epoch change (this one, the end of an
``autotune()`` block, anyone's ``oasr_core.reload()``) calls the engine's release callbacks,
since a graph captured in the old epoch may run kernels the new one would not choose.
:meth:`Tuner.report` is the tuning report plus the uncovered must-tune points and one line
per quantized family of the census (the coverage lines of
:func:`oasr_core.report.tuning_report`).

A tier *covers* a point when its entry serves the point's size with a choice this process
can run (:func:`oasr_core.selection.from_tiers` answers).
"""

from __future__ import annotations

import enum
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from oasr_core import database
from oasr_core.autotuning.cache import AutotuneWarning
from oasr_core.autotuning.measure import Measurer
from oasr_core.autotuning.publish import publish
from oasr_core.bench import BenchError, DeviceFault
from oasr_core.census import shapeset
from oasr_core.census.shapeset import ShapePoint, ShapeSet
from oasr_core.database import signature_key
from oasr_core.errors import ConfigurationError, UncoveredShapesError, UnknownFamilyError
from oasr_core.report import tuning_report
from oasr_core.runtime import get_runtime
from oasr_core.selection import from_tiers, resolve_tiers
from oasr_core.types import Problem


class TuningMode(enum.Enum):
    """What the engine does about tuning before it captures graphs."""

    OFF = "off"
    """Nothing is measured; the tiers serve."""
    PREWARM = "prewarm"
    """Measure every uncovered must-tune point into the user tier, within the budget."""


def _mode(value: Any) -> TuningMode:
    try:
        return TuningMode(value.value if isinstance(value, TuningMode) else value)
    except ValueError:
        raise ConfigurationError(f"TuningConfig mode {value!r} is not 'off' or "
                                 "'prewarm'") from None


def _budget(_inst: Any, _attribute: attrs.Attribute, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(f"TuningConfig budget_s={value!r} must be a positive number "
                                 "of seconds")


@attrs.frozen
class TuningConfig:
    """How an engine tunes before capturing graphs (see the module docstring)."""

    mode: TuningMode = attrs.field(default=TuningMode.OFF, converter=_mode)
    """``"off"`` or ``"prewarm"``."""
    budget_s: float = attrs.field(default=120.0, validator=_budget)
    """Seconds prewarm may spend measuring, for every family together."""
    strict: bool = False
    """Raise when a must-tune point is left uncovered."""


@attrs.frozen
class UncoveredPoint:
    """A must-tune point no user or system entry covers."""

    family: str
    op: str
    key: str
    """The signature key (exact operand dtype), or the census label when it has none."""
    m: int
    axis: str = "M"
    point: str | None = None
    weight: float = 0.0
    reason: str = "no user or system entry covers it"

    def __str__(self) -> str:
        where = f"point={self.point}" if self.point is not None else f"{self.axis}={self.m}"
        return f"{self.family}/{self.op} {self.key} {where}"


@attrs.frozen
class PrewarmResult:
    """What :meth:`Tuner.prewarm` did."""

    measured: tuple[UncoveredPoint, ...] = ()
    """Points measured and published to the user tier."""
    failed: tuple[tuple[UncoveredPoint, str], ...] = ()
    """Points that could not be measured, with the reason."""
    left: tuple[UncoveredPoint, ...] = ()
    """Points not measured because the budget was spent."""
    elapsed_s: float = 0.0
    skipped: str = ""
    """Why prewarm measured nothing at all (empty when it ran)."""

    def line(self) -> str:
        """One summary line."""
        if self.skipped:
            return f"prewarm skipped: {self.skipped}"
        return (f"prewarm: {len(self.measured)} point(s) measured into the user tier in "
                f"{self.elapsed_s:.1f} s, {len(self.failed)} failed, {len(self.left)} left "
                "when the budget ran out")


@attrs.frozen
class EngineReport:
    """The engine's tuning report: :class:`~oasr_core.report.TuningReport` and more."""

    tuning: Any
    """The process's :class:`~oasr_core.report.TuningReport` (tier files, counts, staleness)."""
    uncovered: tuple[UncoveredPoint, ...]
    prewarm: PrewarmResult | None
    quantized: tuple[str, ...]
    """One line per quantized (heuristic-fallback) family of the census; also among the
    tuning report's own lines."""

    def lines(self) -> list[str]:
        """Human-readable lines."""
        out = list(self.tuning.lines())
        if self.prewarm is not None:
            out.append(self.prewarm.line())
            out.extend(f"  not measured: {u}: {why}" for u, why in self.prewarm.failed)
        if self.uncovered:
            out.append(f"uncovered must-tune points: {len(self.uncovered)}")
            out.extend(f"  {u} ({u.reason})" for u in self.uncovered)
        else:
            out.append("uncovered must-tune points: none")
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {**self.tuning.to_json(),
                "uncovered": [attrs.asdict(u) for u in self.uncovered],
                "prewarm": None if self.prewarm is None else {
                    "measured": [str(u) for u in self.prewarm.measured],
                    "failed": [[str(u), why] for u, why in self.prewarm.failed],
                    "left": [str(u) for u in self.prewarm.left],
                    "elapsed_s": self.prewarm.elapsed_s, "skipped": self.prewarm.skipped},
                "quantized": list(self.quantized)}

    def __str__(self) -> str:
        return "\n".join(self.lines())


Shapes = Any
"""A ShapeSet, a path to one, or an iterable of ShapePoints or ``(family, op, dtype, dims,
m)`` tuples (``dims`` a mapping by name or a sequence in the family's order)."""


class Tuner:
    """What an engine holds to tune before capturing graphs (see the module docstring).

    ``shapes``: a census (:class:`~oasr_core.census.ShapeSet`, or its path): its must-tune
    points; or a list of shapes, every one must-tune. ``on_reload(epoch)`` is called after
    every epoch change (more with :meth:`add_release_callback`). ``arch`` defaults to the
    current CUDA device's; ``timer``, ``eager_timer`` and ``bench_options`` are passed to the
    measurer (tests script them); ``clock`` measures the budget.
    """

    def __init__(self, config: TuningConfig, shapes: Shapes, *,
                 on_reload: Callable[[int], Any] | None = None, arch: str | None = None,
                 timer: Any = None, eager_timer: Any = None, bench_options: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(config, TuningConfig):
            raise ConfigurationError(f"Tuner expects a TuningConfig, got "
                                     f"{type(config).__name__}")
        self.config = config
        self.census = _as_shapeset(shapes)
        self.points = _must_tune(self.census, shapes)
        self._arch = arch
        self.measurer = Measurer(timer=timer, eager_timer=eager_timer, options=bench_options)
        self._clock = clock
        self._callbacks: list[Callable[[int], Any]] = [on_reload] if on_reload else []
        self.prewarmed: PrewarmResult | None = None
        self._runtime = get_runtime()
        self._runtime.add_reload_listener(self._on_epoch)

    # -- epochs -------------------------------------------------------------------------

    def add_release_callback(self, callback: Callable[[int], Any]) -> None:
        """Call ``callback(new_epoch)`` after every epoch change (release captured graphs)."""
        if not callable(callback):
            raise ConfigurationError(f"release callback {callback!r} is not callable")
        self._callbacks.append(callback)

    def remove_release_callback(self, callback: Callable[[int], Any]) -> None:
        """Undo :meth:`add_release_callback`."""
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def _on_epoch(self, epoch: int) -> None:
        for callback in list(self._callbacks):
            callback(epoch)

    def reload(self) -> int:
        """Start a new epoch (tier files re-read); the release callbacks run. Returns it."""
        rt = get_runtime()
        if rt is not self._runtime:  # a test or tool installed another runtime
            self._runtime.remove_reload_listener(self._on_epoch)
            rt.add_reload_listener(self._on_epoch)
            self._runtime = rt
        return rt.reload()

    def close(self) -> None:
        """Stop listening to epoch changes."""
        self._runtime.remove_reload_listener(self._on_epoch)

    # -- coverage -----------------------------------------------------------------------

    @property
    def arch(self) -> str:
        """The arch family tuned for; ``ConfigurationError`` without a device or an arch."""
        arch = self._arch or self._runtime.device_arch()
        if arch is None:
            raise ConfigurationError("the tuner found no CUDA device and was given no arch: "
                                     "it cannot tell which tier files apply; pass arch=")
        return arch

    def _check(self, p: Any) -> tuple[UncoveredPoint | None, Any]:
        """(None, problem) when a tier covers ``p``; else (why not, problem or None)."""
        registry = self._runtime.registry
        label = p.signature

        def miss(reason: str, key: str = label, axis: str = "M") -> UncoveredPoint:
            return UncoveredPoint(family=p.family, op=p.op, key=key, m=p.m, axis=axis,
                                  point=p.point, weight=p.weight, reason=reason)

        try:
            family = registry.family(p.family)
        except UnknownFamilyError:
            return miss(f"family {p.family} is not installed"), None
        try:
            dims = tuple(p.dims[d] for d in family.dims)
            key = signature_key(family, p.op, p.dtype if family.key_dtype else None, dims)
        except (KeyError, ValueError) as exc:
            return miss(f"not a shape of family {family.name} ({exc})"), None
        lane = registry.active_lane(family.name, self.arch)
        if lane is None:
            return miss(f"no lane of {family.name} runs on {self.arch}", key,
                        family.dynamic_axis), None
        problem = Problem(family=family.name, op=p.op, dtype=p.dtype,
                          dims=tuple(zip(family.dims, dims, strict=True)), m=p.m,
                          point=p.point)
        if from_tiers(family, lane, self.arch, problem) is not None:
            return None, problem
        return miss("no user or system entry covers it", key, family.dynamic_axis), problem

    def uncovered(self) -> tuple[UncoveredPoint, ...]:
        """Every must-tune point no user or system entry covers, in this epoch."""
        return tuple(u for u, _ in map(self._check, self.points) if u is not None)

    def check(self) -> None:
        """Raise :class:`UncoveredShapesError` naming every uncovered must-tune point."""
        missing = self.uncovered()
        if missing:
            names = "; ".join(str(u) for u in missing)
            raise UncoveredShapesError(
                f"{len(missing)} must-tune point(s) have no user or system tuning entry on "
                f"{self.arch}: {names}; cover them with TuningConfig(mode=\"prewarm\") or "
                "`oasr tune build`, or set strict=False", tuple(missing))

    # -- prewarm ------------------------------------------------------------------------

    def prepare(self) -> PrewarmResult | None:
        """What the engine calls before capturing any graph: prewarm, then the strict check."""
        if self.config.mode is TuningMode.PREWARM:
            self.prewarmed = self.prewarm()
        if self.config.strict:
            self.check()
        return self.prewarmed

    def prewarm(self, budget_s: float | None = None) -> PrewarmResult:
        """Measure the uncovered must-tune points into the user tier (module docstring)."""
        budget = self.config.budget_s if budget_s is None else budget_s
        todo: list[tuple[UncoveredPoint, Any, Any]] = []
        seen: set[tuple] = set()
        for p in sorted(self.points, key=lambda p: -p.weight):
            miss, problem = self._check(p)
            if miss is not None and (miss.key, miss.m, miss.point) not in seen:
                seen.add((miss.key, miss.m, miss.point))
                todo.append((miss, problem, p))
        if not todo:
            return PrewarmResult()
        if database.user_root() is None:
            warnings.warn(f"oasr: prewarm skipped: the user tier is disabled "
                          f"({database.USER_ENV}=off), so nothing measured could be served; "
                          f"{len(todo)} must-tune point(s) stay uncovered", AutotuneWarning,
                          stacklevel=2)
            return PrewarmResult(left=tuple(u for u, _, _ in todo),
                                 skipped=f"user tier disabled ({database.USER_ENV})")
        start = self._clock()
        measured, failed, left = [], [], []
        for miss, problem, p in todo:
            if problem is None:
                failed.append((miss, miss.reason))
            elif self._clock() - start >= budget:
                left.append(miss)
            else:
                why = self._measure_one(problem, p.eager_fraction)
                if why is None:
                    measured.append(miss)
                else:
                    failed.append((miss, why))
        result = PrewarmResult(measured=tuple(measured), failed=tuple(failed), left=tuple(left),
                               elapsed_s=self._clock() - start)
        if measured:
            self.reload()
        return result

    def _measure_one(self, problem: Any, alpha: float) -> str | None:
        """Measure and publish one point; the reason it could not be, or None."""
        registry = self._runtime.registry
        family = registry.family(problem.family)
        lane = registry.active_lane(family.name, self.arch)
        try:
            measurement = self.measurer.measure(
                family, lane, problem, incumbent=resolve_tiers(family, lane, self.arch, problem),
                alpha=alpha,
                working_set_bytes=(self.census.working_set_bytes or None)
                if self.census is not None else None)
        except DeviceFault:
            raise
        except BenchError as exc:
            return str(exc)
        if measurement.result is None:
            return measurement.reason
        # One locked write per point: an engine killed mid-prewarm keeps what it measured.
        report = publish([measurement.result], arch=self.arch, registry=registry)
        return None if report.published else "; ".join(report.skipped) or "not published"

    # -- report -------------------------------------------------------------------------

    def report(self) -> EngineReport:
        """The tuning report (with the census's heuristic-family coverage lines), the
        prewarm summary and the uncovered must-tune points."""
        families = {p.family for p in self.points} & set(self._runtime.registry.families)
        census = self.census if self.census is not None else ShapeSet(points=self.points)
        tuning = tuning_report(arch=self.arch, families=sorted(families), census=census)
        return EngineReport(tuning=tuning, uncovered=self.uncovered(), prewarm=self.prewarmed,
                            quantized=tuple(tuning.coverage_lines()))


def _as_shapeset(shapes: Shapes) -> Any:
    if isinstance(shapes, (str, os.PathLike)):
        return shapeset.load(Path(shapes))
    return shapes if isinstance(shapes, shapeset.ShapeSet) else None


def _must_tune(census: Any, shapes: Shapes) -> tuple[Any, ...]:
    if census is not None:
        return tuple(p for p in census.points if p.must)
    if isinstance(shapes, (Mapping, str, bytes)) or not isinstance(shapes, Iterable):
        raise ConfigurationError(f"Tuner shapes must be a ShapeSet, a path to one, or a list "
                                 f"of shapes; got {type(shapes).__name__}")
    points = []
    for item in shapes:
        if isinstance(item, ShapePoint):
            points.append(attrs.evolve(item, must=True))
        elif isinstance(item, Sequence) and len(item) == 5:
            points.append(_tuple_point(item))
        else:
            raise ConfigurationError(f"Tuner shape {item!r} is not a ShapePoint or a "
                                     "(family, op, dtype, dims, m) tuple")
    return tuple(points)


def _tuple_point(item: Sequence[Any]) -> Any:
    family, op, dtype, dims, m = item
    if not isinstance(dims, Mapping):
        try:
            names = get_runtime().registry.family(family).dims
        except UnknownFamilyError:
            raise ConfigurationError(f"Tuner shape {tuple(item)!r}: family {family!r} is not "
                                     "installed, so its dims cannot be named") from None
        if len(names) != len(dims):
            raise ConfigurationError(f"Tuner shape {tuple(item)!r}: family {family} has dims "
                                     f"{', '.join(names)}")
        dims = dict(zip(names, dims, strict=True))
    try:
        return ShapePoint(family=family, op=op, dtype=dtype, dims=dims, m=m, must=True)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"Tuner shape {tuple(item)!r}: {exc}") from None
