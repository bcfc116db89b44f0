"""A bench :class:`~oasr_core.bench.Timer` that runs arms eagerly, for ops no graph can hold.

Some ops cannot be captured in a CUDA graph (host synchronisation, data-dependent shapes,
a library that refuses capture). They run eagerly in the served model too, so they are timed
eagerly: a "graph" here is just the list of calls, and a replay runs them ``rep`` times
between two device synchronisations, timed on the host clock. ``warmup`` passes run once when
the "graph" is made. Warmup and repetitions apply only here; the graph timer's warmup is its
own. The separator is not needed (eager calls serialise on the stream anyway), so separator
graphs time as zero.

The clock and the synchronisation are parameters, so the logic is tested on a CPU with
plain callables and a scripted clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from oasr_core.bench import SEPARATOR, BenchError, Conditions, DeviceFault, default_probe


class _Calls:
    """The eager stand-in for a captured graph."""

    __slots__ = ("label", "calls")

    def __init__(self, label: str, calls: Sequence[Callable[[], Any]]) -> None:
        self.label, self.calls = label, tuple(calls)


def _no_sync() -> None:
    """Nothing to wait for (a CPU test)."""


class EagerTimer:
    """Times arms as eager calls (see the module docstring)."""

    def __init__(self, *, warmup: int = 3, rep: int = 10,
                 sync: Callable[[], None] = _no_sync,
                 clock: Callable[[], float] = time.perf_counter, l2_bytes: int | None = None,
                 probe: Any = None) -> None:
        if warmup < 0 or rep < 1:
            raise ValueError(f"EagerTimer: warmup={warmup} must be >= 0 and rep={rep} >= 1")
        self.warmup, self.rep = warmup, rep
        self._sync, self._clock = sync, clock
        self.l2_bytes = l2_bytes
        self._probe = probe

    @classmethod
    def cuda(cls, device: Any = None, **kwargs: Any) -> EagerTimer:
        """An eager timer on a CUDA device (default: the current one)."""
        import torch

        if not torch.cuda.is_available():
            raise BenchError("no CUDA device: live measurement needs a GPU")
        index = torch.cuda.current_device() if device is None else torch.device(device).index
        dev = torch.device("cuda", index or 0)
        props = torch.cuda.get_device_properties(dev)
        kwargs.setdefault("l2_bytes", getattr(props, "L2_cache_size", None) or None)
        kwargs.setdefault("probe", default_probe(dev))
        return cls(sync=lambda: torch.cuda.synchronize(dev), **kwargs)

    def capture(self, label: str, calls: Sequence[Callable[[], Any]], *,
                separate: bool) -> _Calls:
        graph = _Calls(label, calls)
        for _ in range(self.warmup):
            for call in graph.calls:
                call()
        self.synchronize()
        return graph

    def capture_separators(self, n: int) -> _Calls:
        return _Calls(SEPARATOR, ())

    def replay(self, graphs: Sequence[_Calls]) -> list[float]:
        out = []
        for graph in graphs:
            if not graph.calls:
                out.append(0.0)
                continue
            self.synchronize()
            start = self._clock()
            for _ in range(self.rep):
                for call in graph.calls:
                    call()
            self.synchronize()
            out.append((self._clock() - start) * 1e3 / self.rep)
        return out

    def issue_us(self, label: str, calls: Sequence[Callable[[], Any]]) -> float:
        if not calls:
            return 0.0
        self.synchronize()
        start = self._clock()
        for call in calls:
            call()
        elapsed = self._clock() - start
        self.synchronize()
        return elapsed * 1e6 / len(calls)

    def synchronize(self) -> None:
        try:
            self._sync()
        except RuntimeError as exc:
            raise DeviceFault(f"the device reported an error ({' '.join(str(exc).split())}); "
                              "measurements after it cannot be trusted") from exc

    def conditions(self) -> Conditions:
        return self._probe.read() if self._probe is not None else Conditions()

    def release(self, graph: _Calls) -> None:
        """Nothing to free."""
