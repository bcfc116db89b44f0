"""The timing source of the protocol: the :class:`Timer` interface and a scripted one.

The protocol (:func:`oasr_core.bench.measure`) decides what to capture, replay and compare;
a timer only captures graphs and reports how long replays took. That split lets the
protocol's logic be tested on a CPU with :class:`ScriptedTimer`, whose times come from a
script, and run on a GPU with :class:`oasr_core.bench.cuda.CudaGraphTimer`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from .records import BenchError, Conditions

SEPARATOR = "_separator"
"""The label of graphs holding only the separator kernel."""


@runtime_checkable
class Timer(Protocol):
    """What the protocol needs from a device.

    ``capture`` builds a graph of ``calls`` (each followed by the separator kernel when
    ``separate``); ``capture_separators(n)`` a graph of ``n`` separator kernels alone;
    ``replay(graphs)`` replays each graph once, in order, and returns the milliseconds each
    replay took; ``issue_us`` times eager ``calls`` on the host and returns microseconds per
    call; ``synchronize`` waits for the device and raises :class:`DeviceFault` on a device
    error; ``conditions`` reads SM clock and other compute processes; ``release`` frees a
    graph. ``label`` names the arm a graph belongs to (:data:`SEPARATOR` for separators).
    """

    l2_bytes: int | None

    def capture(self, label: str, calls: Sequence[Callable[[], Any]], *, separate: bool) -> Any:
        """A graph of ``calls``, each followed by the separator when ``separate``."""

    def capture_separators(self, n: int) -> Any:
        """A graph of ``n`` separator kernels."""

    def replay(self, graphs: Sequence[Any]) -> list[float]:
        """Replay each graph once, in order; milliseconds per replay."""

    def issue_us(self, label: str, calls: Sequence[Callable[[], Any]]) -> float:
        """Host microseconds to issue one eager call (``calls`` run back to back)."""

    def synchronize(self) -> None:
        """Wait for the device; raise :class:`DeviceFault` if it reports an error."""

    def conditions(self) -> Conditions:
        """The device's state now."""

    def release(self, graph: Any) -> None:
        """Free ``graph``."""


@attrs.frozen
class ScriptedArm:
    """How :class:`ScriptedTimer` times one arm.

    ``ms`` is the per-call time inside a separated loop; each replay draws its per-call
    time from a normal distribution with relative sigma ``sigma_rel``. ``solo_ms`` is the
    per-call time of a one-call graph (default ``ms``): set it above ``ms`` to script an arm
    that only looks fast because its back-to-back calls overlap.
    """

    ms: float
    sigma_rel: float = 0.0
    solo_ms: float | None = None
    issue_us: float = 6.0
    fail_capture: bool = False


@attrs.frozen
class ScriptedGraph:
    """A graph :class:`ScriptedTimer` pretends to have captured."""

    label: str
    calls: int
    separate: bool


ArmScript = Mapping[str, "ScriptedArm | float"] | Callable[[str], "ScriptedArm | float"]


class ScriptedTimer:
    """A :class:`Timer` whose times come from a script, for testing the protocol on a CPU.

    A replay of a graph of ``n`` calls of arm ``a`` takes ``launch_ms + n * (t + s)`` where
    ``t`` is drawn per replay around ``a``'s scripted time and ``s`` is ``separator_ms``
    when the graph is separated; a one-call graph uses the arm's ``solo_ms``. The calls
    handed to it are never run. Every capture, replay and issue timing is appended to
    ``events`` (``("capture", label, n)``, ``("replay", label, n)``, ``("issue", label)``),
    and ``replays`` counts replays per label. ``on_replay(label)`` is called before each.
    """

    def __init__(self, arms: ArmScript, *, separator_ms: float = 0.0008,
                 launch_ms: float = 0.004, seed: int = 0, l2_bytes: int | None = 50 << 20,
                 conditions: Conditions | Sequence[Conditions] | None = None,
                 on_replay: Callable[[str], None] | None = None) -> None:
        self._arms = arms
        self.separator_ms = separator_ms
        self.launch_ms = launch_ms
        self.l2_bytes = l2_bytes
        self._rng = random.Random(seed)
        if conditions is None:
            conditions = Conditions(sm_clock_mhz=1980, max_sm_clock_mhz=1980,
                                    other_processes=0, source="scripted")
        self._conditions = [conditions] if isinstance(conditions, Conditions) else list(
            conditions)
        self._reads = 0
        self.on_replay = on_replay
        self.events: list[tuple[Any, ...]] = []
        self.replays: Counter[str] = Counter()
        self.released = 0

    def arm(self, label: str) -> ScriptedArm:
        """The script of arm ``label``."""
        spec = self._arms(label) if callable(self._arms) else self._arms.get(label)
        if spec is None:
            raise KeyError(f"ScriptedTimer has no script for arm {label!r}")
        return spec if isinstance(spec, ScriptedArm) else ScriptedArm(ms=float(spec))

    def capture(self, label: str, calls: Sequence[Callable[[], Any]], *,
                separate: bool) -> ScriptedGraph:
        self.events.append(("capture", label, len(calls)))
        if self.arm(label).fail_capture:
            raise RuntimeError(f"scripted capture failure of {label}")
        return ScriptedGraph(label, len(calls), separate)

    def capture_separators(self, n: int) -> ScriptedGraph:
        self.events.append(("capture", SEPARATOR, n))
        return ScriptedGraph(SEPARATOR, n, True)

    def _per_call(self, graph: ScriptedGraph) -> float:
        if graph.label == SEPARATOR:
            return 0.0
        spec = self.arm(graph.label)
        base = spec.solo_ms if graph.calls == 1 and spec.solo_ms is not None else spec.ms
        if spec.sigma_rel:
            base *= max(0.05, 1.0 + self._rng.gauss(0.0, spec.sigma_rel))
        return base

    def replay(self, graphs: Sequence[ScriptedGraph]) -> list[float]:
        out = []
        for graph in graphs:
            if self.on_replay is not None:
                self.on_replay(graph.label)
            self.events.append(("replay", graph.label, graph.calls))
            self.replays[graph.label] += 1
            sep = self.separator_ms if graph.separate else 0.0
            out.append(self.launch_ms + graph.calls * (self._per_call(graph) + sep))
        return out

    def issue_us(self, label: str, calls: Sequence[Callable[[], Any]]) -> float:
        self.events.append(("issue", label))
        return self.arm(label).issue_us

    def synchronize(self) -> None:
        """Nothing to wait for."""

    def conditions(self) -> Conditions:
        read = self._conditions[min(self._reads, len(self._conditions) - 1)]
        self._reads += 1
        return read

    def release(self, graph: ScriptedGraph) -> None:
        self.released += 1


def check_timer(timer: object) -> Timer:
    """``timer`` when it implements :class:`Timer`; :class:`BenchError` otherwise."""
    if not isinstance(timer, Timer):
        missing = [m for m in ("capture", "capture_separators", "replay", "issue_us",
                               "synchronize", "conditions", "release")
                   if not callable(getattr(timer, m, None))]
        raise BenchError(f"{type(timer).__name__} is not a bench Timer (missing "
                         f"{', '.join(missing) or 'l2_bytes'})")
    return timer

