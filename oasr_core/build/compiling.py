"""Compiling what a build measures, while it measures.

A pruned build knows each signature's candidate set before it measures anything
(:func:`oasr_core.build.effort.signature_set`). For a lane that can link a module of exactly
some of its configs (``Lane.bench_modules``, see :class:`oasr_core.kit.bench_modules.BenchModules`),
:class:`CompileQueue` compiles those sets in the background with at most ``jobs`` nvcc
processes in all, the heaviest signature's units first (a :class:`PriorityGate` hands out the
nvcc slots in signature order). One builder thread per signature links that signature's small
module as soon as its own units are compiled; the JIT cache keys objects per unit, so a unit
two signatures share compiles once and the second link only reads it. The measuring thread
waits only for the signature it is about to measure (:meth:`CompileQueue.ready`), then the
lane installs that module for ``make_bench``.

A lane without ``bench_modules`` (or an exhaustive build) is compiled as one whole-space
module (``jit_specs(arch, "all")``) before measuring, as ``make_bench`` then loads it; the queue
still reports progress per unit.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import attrs

from oasr_core import runtime
from oasr_core.errors import OasrError
from oasr_core.jit.builder import build_plan, default_jobs
from oasr_core.jit.bundles import Group, plan_groups
from oasr_core.jit.spec import plan
from oasr_core.progress import ProgressMode, track
from oasr_core.types import Config, Lane


class PriorityGate:
    """At most ``slots`` holders at a time; waiters are served lowest priority first.

    :meth:`view` gives a context manager acquiring at one priority, which is what the JIT
    builder's ``limiter`` argument takes.
    """

    def __init__(self, slots: int) -> None:
        self._free = max(1, slots)
        self._cond = threading.Condition()
        self._waiting: list[tuple[int, int]] = []
        self._ticket = 0

    def acquire(self, priority: int) -> None:
        with self._cond:
            self._ticket += 1
            me = (priority, self._ticket)
            heapq.heappush(self._waiting, me)
            while not (self._free > 0 and self._waiting[0] == me):
                self._cond.wait()
            heapq.heappop(self._waiting)
            self._free -= 1
            self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()

    def view(self, priority: int) -> _GateView:
        """A context manager holding one slot at ``priority``."""
        return _GateView(self, priority)


@attrs.frozen
class _GateView:
    gate: PriorityGate
    priority: int

    def __enter__(self) -> None:
        self.gate.acquire(self.priority)

    def __exit__(self, *exc: object) -> None:
        self.gate.release()


@attrs.frozen
class Compiled:
    """One signature's module, once built."""

    key: str
    configs: tuple[Config, ...]
    status: str
    """``built``, ``cached`` or ``failed`` (the JIT builder's module status)."""
    error: str | None = None
    failed_units: tuple[str, ...] = ()
    seconds: float = 0.0


Builder = Callable[..., Any]
"""``build(spec, priority, on_unit) -> ModuleBuild`` (tests script it)."""


def jit_builder(gate: PriorityGate, jobs: int) -> Builder:
    """A :data:`Builder` compiling through :mod:`oasr_core.jit` under ``gate``."""

    def build(spec: Any, priority: int, on_unit: Callable[[str, Any], None]) -> Any:
        return build_plan(plan(spec), jobs=jobs, limiter=gate.view(priority), on_unit=on_unit)

    return build


@attrs.frozen(eq=False)
class CompileItem:
    """One module to build: a signature's (or, keyed ``*``, the whole space's)."""

    key: str
    configs: tuple[Config, ...] = attrs.field(converter=tuple)
    spec: Callable[[], Any]
    """The module's ``JitSpec`` (made in the builder thread)."""
    install: Callable[[], str | None] | None = None
    """Makes ``make_bench`` measure from the module; None or why it could not."""
    units: tuple[str, ...] | None = attrs.field(default=None)
    """The module's compile units (None: those of ``configs``), for progress."""

    def unit_names(self) -> tuple[str, ...]:
        """The compile units progress counts for this module."""
        if self.units is not None:
            return self.units
        return tuple(dict.fromkeys(c.params.get("unit", c.id) for c in self.configs))


class CompileQueue:
    """Builds each item's module in the background (module docstring).

    ``items`` are in measuring order (the whole space, keyed ``*``, serves every signature);
    ``build`` compiles one spec (:func:`jit_builder`); ``tracker`` an
    :class:`oasr_core.progress.Tracker` of units, or None. :meth:`start` begins compiling,
    :meth:`prepare` (the build pipeline's hook) waits for a signature's module and installs
    it, :meth:`close` waits for the rest.
    """

    def __init__(self, items: Sequence[CompileItem], build: Builder, tracker: Any = None,
                 clock: Callable[[], float] = time.monotonic, workers: int | None = None
                 ) -> None:
        self.items = list(items)
        self._workers = workers
        self._build = build
        self.tracker = tracker
        self._clock = clock
        self._seen: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._futures: dict[str, Future[Compiled]] = {}
        self.started: float | None = None
        self.finished: float | None = None
        self.waited_s = 0.0
        """Seconds the measuring thread spent waiting for modules."""
        self.problems: list[str] = []
        self.on_close: list[Callable[[], None]] = []
        self._whole_ready = False

    def units(self) -> list[str]:
        """The distinct compile units of every item (what the progress counts)."""
        return list(dict.fromkeys(u for item in self.items for u in item.unit_names()))

    def _count(self, name: str, outcome: str) -> None:
        with self._lock:
            if name in self._seen:
                return
            self._seen[name] = outcome
        if self.tracker is not None:
            self.tracker.advance(outcome)

    def _on_unit(self, name: str, status: Any, cached: set[str] | None = None) -> None:
        value = getattr(getattr(status, "status", None), "value", "built")
        if value == "cached" and cached is not None:
            # Another signature's builder may have compiled it a moment ago and not yet said
            # so: counted when this module is done, if nobody reported it built by then.
            cached.add(name)
            return
        self._count(name, value if value in ("failed", "cached") else "built")

    def _one(self, priority: int, item: CompileItem) -> Compiled:
        started = self._clock()
        cached: set[str] = set()
        try:
            report = self._build(item.spec(), priority,
                                 lambda name, status: self._on_unit(name, status, cached))
        except Exception as exc:  # noqa: BLE001 - a toolchain problem fails this module only
            for name in item.unit_names():
                self._count(name, "failed")
            return Compiled(item.key, item.configs, "failed", f"{type(exc).__name__}: {exc}",
                            seconds=self._clock() - started)
        for name, unit in report.units.items():
            self._on_unit(name, unit, cached)
        for name in sorted(cached):
            self._count(name, "cached")
        status = getattr(report.status, "value", str(report.status))
        return Compiled(item.key, item.configs, status, report.error,
                        tuple(sorted(report.failed)), self._clock() - started)

    def start(self) -> CompileQueue:
        """Begin compiling every item (returns self); :meth:`submit` adds more."""
        self.started = self._clock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, self._workers or len(self.items)),
                                        thread_name_prefix="oasr-build-compile")
        for priority, item in enumerate(self.items):
            self._futures[item.key] = self._pool.submit(self._one, priority, item)
        return self

    def submit(self, item: CompileItem) -> None:
        """Queue one more module, behind every earlier one (the queue must be started)."""
        assert self._pool is not None, "submit() before start()"
        known = set(self.units())
        new = [u for u in item.unit_names() if u not in known]
        self.items.append(item)
        if self.tracker is not None and new:
            self.tracker.total += len(new)
        self._futures[item.key] = self._pool.submit(self._one, len(self.items) - 1, item)

    def ready(self, key: str) -> Compiled | None:
        """Wait until ``key``'s module is built (None: no item has that key)."""
        future = self._futures.get(key)
        if future is None:
            return None
        waited = self._clock()
        result = future.result()
        self.waited_s += self._clock() - waited
        if result.status == "failed":
            self.problems.append(f"{key}: no module ({result.error or 'every unit failed'})")
        return result

    def prepare(self, sig: Any) -> None:
        """Before ``sig`` is measured: its module built and installed (the whole space's, the
        first time, when the build measures from it)."""
        whole = [key for key in self._futures if key.startswith("*")]
        if whole:
            if not self._whole_ready:
                for key in whole:
                    self.ready(key)
                self._whole_ready = True
            return
        compiled = self.ready(sig.key)
        item = next((i for i in self.items if i.key == sig.key), None)
        if compiled is None or item is None or item.install is None:
            return
        why = item.install()
        if why is not None:
            self.problems.append(f"{sig.key}: its module did not load ({why}); its arms are "
                                 "rejected")

    def close(self) -> None:
        """Wait for every module, then run the ``on_close`` callbacks (the lane's reset)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.finished is None and self.started is not None:
            self.finished = self._clock()
        for fn in self.on_close:
            fn()
        self.on_close.clear()

    def counts(self) -> dict[str, int]:
        """Units by outcome so far (``built``, ``cached``, ``failed``)."""
        with self._lock:
            out: dict[str, int] = {}
            for outcome in self._seen.values():
                out[outcome] = out.get(outcome, 0) + 1
            return out

    def note(self) -> str:
        """One line for the build's messages: units, compile wall time, measuring's wait."""
        end = self.finished if self.finished is not None else self._clock()
        wall = end - self.started if self.started is not None else 0.0
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts().items()))
        line = (f"compile: {len(self.units())} unit(s) ({counts or 'none'}) in {wall:.1f} s "
                f"over {len(self.items)} module(s); measuring waited {self.waited_s:.1f} s "
                "for them")
        return "; ".join([line, *self.problems])


def production_items(family: Any, lane: Lane, arch: str, out: Any
                     ) -> tuple[list[CompileItem], str | None]:
    """The production modules of ``lane`` on ``arch`` as the next process will load them,
    after the build wrote ``out``: compiled by the build's own queue, so that the first
    process serving the new table compiles nothing.

    The runtime starts a new epoch first (the tiers are read again, the new entries
    included), and the lane's production specs then name every config the tiers serve
    (:mod:`oasr_core.tier_configs`). Returns the items and a note when ``out`` is not a tier
    this process loads (its configs are then not in the modules: prebuild where it is).
    """
    if lane.jit_specs is None:
        return [], None
    from pathlib import Path

    runtime.reload()
    try:
        tiers = runtime.get_runtime().tiers(family, arch)
        loaded = {Path(p).resolve() for p in (tiers.user_path, tiers.system_path)
                  if p is not None}
    except OasrError:  # a family the process's plugins do not register (a test's record)
        loaded = None
    note = None
    if loaded is not None and Path(out).resolve() not in loaded:
        note = (f"{out} is not a tier this process loads: the production modules compiled "
                "here hold the loaded tiers' configs; run `oasr tune prebuild` where the "
                "table is installed")
    try:
        specs = list(lane.jit_specs(arch, "production"))
    except Exception as exc:  # noqa: BLE001 - the module then compiles on first use
        return [], f"production modules not compiled ({type(exc).__name__}: {exc})"
    return [CompileItem(f"production:{getattr(spec, 'name', i)}", (), spec=lambda sp=spec: sp,
                        units=tuple(getattr(u, "name", str(u)) for u in getattr(spec, "units",
                                                                                 spec)))
            for i, spec in enumerate(specs)], note


def whole_space_items(lane: Lane, arch: str, signatures: Sequence[Any], done: Collection[str]
                      ) -> list[CompileItem]:
    """What a build measuring from the whole space compiles: the lane's whole-space modules
    (``jit_specs(arch, "all")``), nothing for a lane without JIT modules or when the
    checkpoint finished every signature (``done``)."""
    if lane.jit_specs is None or all(s.key in done for s in signatures):
        return []
    try:
        specs = list(lane.jit_specs(arch, "all"))
    except Exception:  # noqa: BLE001 - make_bench then loads (and reports) the module itself
        return []
    return [CompileItem("*" if i == 0 else f"*{i}", (), spec=lambda sp=sp: sp,
                        units=tuple(getattr(u, "name", str(u)) for u in getattr(sp, "units", sp)))
            for i, sp in enumerate(specs)]


def stream(lane: Lane, arch: str, signatures: Sequence[Any], done: Collection[str],
           set_of: Callable[[Any], Sequence[Config]], *, measured_dtypes: bool = False,
           **start_kw: Any) -> tuple[CompileQueue | None, dict[str, frozenset[str]]]:
    """Each signature's candidate set (``set_of(sig)``) and a queue compiling them, one module
    per signature still to measure (``done``: the checkpoint's), in measuring order.

    ``measured_dtypes`` compiles only the signatures' dtypes; those objects are the build's
    own, so the units are bundled too: every set's configs (the finished signatures' included,
    so a resumed build plans the same bundles and finds them compiled), whichever op times
    them, are cut into one group per nvcc slot (:func:`oasr_core.jit.bundles.plan_groups`),
    and each module links the bundles holding its units. A family whose ops compile different
    units answers per op (``BenchModules.for_op``); every op's modules get the same groups
    (:class:`oasr_core.jit.bundles.Group`, each naming the ops that time any of its configs),
    so a family can compile one config's units of several ops in one file (gemm does: they
    share the main loop) and leave out the kernels of ops no signature times there.
    ``start_kw`` goes to :func:`start`.
    """
    modules = lane.bench_modules
    mods_of = {sig.key: modules_for(lane, sig.op) for sig in signatures}
    dtypes = tuple(sorted({s.dtype for s in signatures})) if measured_dtypes else None
    all_sets = {sig.key: tuple(set_of(sig)) for sig in signatures}
    groups = None
    if dtypes is not None:
        groups = bench_groups(signatures, all_sets,
                              start_kw.get("jobs") or max(1, default_jobs() - 1))
    queue: CompileQueue | None = None
    sets: dict[str, frozenset[str]] = {}
    for sig in signatures:
        if sig.key in done:
            continue
        configs = all_sets[sig.key]
        sets[sig.key] = frozenset(c.id for c in configs)
        if not configs:
            continue
        mods, gs = mods_of[sig.key], groups
        spec = functools.cache(lambda cs=configs, m=mods, g=gs: m.spec(arch, cs, dtypes, g))
        item = CompileItem(sig.key, configs, units=_unit_names(spec), spec=spec,
                           install=lambda cs=configs, m=mods, g=gs: m.install(arch, cs, dtypes,
                                                                              g))
        if queue is None:
            queue = start([item], workers=len(signatures), reset=modules.reset, **start_kw)
        else:
            queue.submit(item)
    return queue, sets


def modules_for(lane: Lane, op: str) -> Any:
    """The ``bench_modules`` object a signature of ``op`` compiles and installs from."""
    modules = lane.bench_modules
    return modules.for_op(op) if hasattr(modules, "for_op") else modules


def bench_groups(signatures: Sequence[Any], all_sets: Mapping[str, Sequence[Config]],
                 slots: int) -> list[Any]:
    """Every set's configs cut into one bundle group per nvcc slot
    (:func:`oasr_core.jit.bundles.plan_groups`), each naming the ops that time any of its
    configs (see :func:`stream`)."""
    by_unit = {c.params.get("unit", c.id): c for cs in all_sets.values() for c in cs}
    timed_by = {sig.key: {c.id for c in all_sets[sig.key]} for sig in signatures}
    return [Group(g, {sig.op for sig in signatures if timed_by[sig.key] & {c.id for c in g}})
            for g in plan_groups(list(by_unit.values()), slots)]


def _unit_names(spec: Callable[[], Any]) -> tuple[str, ...] | None:
    """The compile units (bundles included) of a signature's module ``spec()`` (made once, the
    builder reuses it), for progress; None (count the configs' units) when it cannot be made
    here: the builder thread makes it again and reports why."""
    try:
        return tuple(u.name for u in spec().units)
    except Exception:  # noqa: BLE001 - reported by the builder thread
        return None


def start(items: Sequence[CompileItem], *, compiler: Builder | None = None,
          jobs: int | None = None, progress: Any = False, reset: Callable[[], None] | None = None,
          workers: int | None = None) -> CompileQueue | None:
    """A started :class:`CompileQueue` of ``items`` (None when there is nothing to compile),
    showing units in ``progress``'s mode (a bar becomes plain lines: the build's point bar
    is the one live display); ``workers``: modules built at once (default: every item)."""
    if not items:
        return None
    # One core stays with the measuring thread while signatures compile behind it.
    jobs = jobs or max(1, default_jobs() - (1 if (workers or len(items)) > 1 else 0))
    build = compiler or jit_builder(PriorityGate(jobs), jobs)
    stack = contextlib.ExitStack()
    tracker = None
    mode = _mode(progress)
    if mode is not None:
        queue_units = len(dict.fromkeys(u for i in items for u in i.unit_names()))
        shown = ProgressMode.LINES if mode is ProgressMode.BAR else mode
        tracker = stack.enter_context(track("units compiled", queue_units, shown))
    queue = CompileQueue(items, build, tracker, workers=workers)
    if reset is not None:
        queue.on_close.append(reset)
    queue.on_close.append(stack.close)
    return queue.start()


def _mode(progress: Any) -> Any:
    """The progress mode of ``progress`` (a bool or a ProgressMode); None: off."""
    if progress is False or progress is None:
        return None
    if progress is True:
        return ProgressMode.BAR
    return None if progress is ProgressMode.OFF else progress
