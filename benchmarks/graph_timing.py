"""How the kernel benchmarks time GPU calls: separated by default, back to back on request.

Inside a model a GEMM sits between other kernels (a norm, an activation), so the next GEMM's
prologue never overlaps its tail. Timing copies of one call back to back credits that launch
overlap (programmatic dependent launch hides ~0.4-0.6 us a call), so by default every call is
followed by the protocol's tiny unrelated kernel (:class:`oasr_core.bench.CudaGraphTimer`'s
separator) and the separator's own cost, timed in the same rounds, is subtracted.
``--back-to-back`` is the explicit other mode; reports say which one ran
(:func:`mode_line`).

:class:`GraphArms` is the scripts' "graphs of N calls, interleaved shuffled rounds" on that
timer (:meth:`GraphArms.screened`: their screening and timed rounds);
:class:`BackToBackTimer` makes the protocol (:func:`oasr_core.bench.measure`) time back to
back, for the scripts built on it.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Callable, Sequence
from typing import Any

SEPARATED = ("separated: each call followed by a tiny unrelated kernel whose separately "
             "measured cost is subtracted (no launch overlap between calls)")
BACK_TO_BACK = "back to back (launch overlap credited)"


def add_mode_argument(parser: argparse.ArgumentParser) -> None:
    """``--back-to-back``: time calls with nothing between them (default: separated)."""
    parser.add_argument("--back-to-back", action="store_true",
                        help="time calls back to back, crediting the launch overlap between "
                             "them (default: each call followed by a separator kernel whose "
                             "cost is subtracted)")


def mode_name(back_to_back: bool) -> str:
    """The timing mode in words."""
    return BACK_TO_BACK if back_to_back else SEPARATED


def mode_line(back_to_back: bool) -> str:
    """The report's header line naming the timing mode."""
    return f"- timing mode: {mode_name(back_to_back)}"


class GraphArms:
    """Arms captured as CUDA graphs of ``calls`` launches, replayed in interleaved rounds.

    Separated (the default), each launch is followed by the timer's separator and a graph of
    ``calls`` separators is replayed in every round; its median is subtracted from each arm's.
    """

    SEPARATOR = "_separator"

    def __init__(self, calls: int, *, back_to_back: bool = False, timer: Any = None) -> None:
        if timer is None:
            from oasr_core.bench import CudaGraphTimer

            timer = CudaGraphTimer()
        self.timer, self.calls, self.back_to_back = timer, calls, back_to_back
        self.graphs: dict[str, Any] = {}
        if not back_to_back:
            self.graphs[self.SEPARATOR] = timer.capture_separators(calls)

    def add(self, name: str, fn: Callable[[], Any]) -> None:
        """Capture ``fn`` as a graph of ``calls`` launches (separated unless back to back)."""
        self.graphs[name] = self.timer.capture(name, [fn] * self.calls,
                                               separate=not self.back_to_back)

    @property
    def names(self) -> list[str]:
        """The arms, in the order added."""
        return [n for n in self.graphs if n != self.SEPARATOR]

    def rounds(self, names: Sequence[str], rounds: int, rng: random.Random) -> dict[str, float]:
        """Median microseconds per call of each arm of ``names`` over ``rounds`` shuffled
        rounds (the separator's cost per call subtracted when separated)."""
        order = list(names)
        if not self.back_to_back:
            order.append(self.SEPARATOR)
        samples: dict[str, list[float]] = {n: [] for n in order}
        for _ in range(rounds):
            rng.shuffle(order)
            for name, ms in zip(order, self.timer.replay([self.graphs[n] for n in order]),
                                strict=True):
                samples[name].append(ms * 1000.0 / self.calls)
        sep = statistics.median(samples.pop(self.SEPARATOR)) if not self.back_to_back else 0.0
        return {n: statistics.median(v) - sep for n, v in samples.items()}

    def screened(self, fixed: Sequence[str], top: int, reps: int, rng: random.Random,
                 also: Sequence[str] = ()) -> tuple[dict[str, float], dict[str, float], str | None]:
        """The kernel scripts' protocol: two screening rounds of every arm, then ``reps``
        rounds of the ``fixed`` arms (torch, the served op), the ``top`` fastest others and
        any of ``also`` (a lane default) that was screened. ``(screen, per_call, best)``:
        median microseconds per call of each round, and the fastest arm of ``per_call`` not
        in ``fixed`` (None without one)."""
        screen = self.rounds(self.names, 2, rng)
        ranked = sorted((n for n in screen if n not in fixed), key=screen.get)
        keep = dict.fromkeys([*fixed, *ranked[:top], *(n for n in also if n in screen)])
        per_call = self.rounds(list(keep), reps, rng)
        best = min((n for n in per_call if n not in fixed), key=per_call.get, default=None)
        return screen, per_call, best

    def release(self) -> None:
        """Free every graph."""
        for graph in self.graphs.values():
            self.timer.release(graph)
        self.graphs.clear()


class BackToBackTimer:
    """A protocol :class:`~oasr_core.bench.Timer` that captures every arm without the
    separator and reports separators as free, so :func:`oasr_core.bench.measure` times calls
    back to back (``--back-to-back``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.l2_bytes = inner.l2_bytes

    def capture(self, label: str, calls: Sequence[Callable[[], Any]], *,
                separate: bool) -> Any:
        return self.inner.capture(label, calls, separate=False)

    def capture_separators(self, n: int) -> Any:
        return _NoSeparators(n)

    def replay(self, graphs: Sequence[Any]) -> list[float]:
        real = [g for g in graphs if not isinstance(g, _NoSeparators)]
        times = iter(self.inner.replay(real))
        return [0.0 if isinstance(g, _NoSeparators) else next(times) for g in graphs]

    def issue_us(self, label: str, calls: Sequence[Callable[[], Any]]) -> float:
        return self.inner.issue_us(label, calls)

    def synchronize(self) -> None:
        self.inner.synchronize()

    def conditions(self) -> Any:
        return self.inner.conditions()

    def release(self, graph: Any) -> None:
        if not isinstance(graph, _NoSeparators):
            self.inner.release(graph)


class _NoSeparators:
    """The separator graph of :class:`BackToBackTimer`: nothing to replay."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
