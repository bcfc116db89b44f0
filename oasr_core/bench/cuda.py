"""The CUDA timer: arms as ``torch.cuda.CUDAGraph`` replays timed with CUDA events.

Every graph is warmed up and captured on one side stream (one stream, because libraries
such as cuBLAS cache a workspace per stream: warming up on many streams strands memory),
with ``CUDAGraph.capture_begin``/``capture_end`` directly: ``torch.cuda.graph`` would
synchronise and empty the allocator cache around every one of the thousands of captures a
build makes. Replays run on the current stream. Before a batch of replays a short spin
kernel (``torch.cuda._sleep``) keeps the device busy while the host enqueues the events
and graph launches, so a replay's time is the device's, never the host's launch latency.
The separator is an in-place add on a one-element buffer of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .conditions import default_probe
from .records import BenchError, Conditions, DeviceFault

SPIN_CYCLES = 200_000
"""About 100 us at H200 clocks: longer than the host needs to enqueue a batch's first replay."""


class _Graph:
    """A captured graph and the label of the arm it holds."""

    __slots__ = ("graph", "label", "calls")

    def __init__(self, graph: Any, label: str, calls: int) -> None:
        self.graph, self.label, self.calls = graph, label, calls


class CudaGraphTimer:
    """A :class:`~oasr_core.bench.Timer` on a CUDA device (default: the current one)."""

    def __init__(self, device: Any = None, *, warmup_rounds: int = 3, warmup_calls: int = 4,
                 issue_warmup: int = 4, probe: Any = None) -> None:
        import torch

        if not torch.cuda.is_available():
            raise BenchError("no CUDA device: live measurement needs a GPU (rebuild from a "
                             "measurement log with --from-log instead)")
        self._torch = torch
        index = torch.cuda.current_device() if device is None else torch.device(device).index
        self.device = torch.device("cuda", index or 0)
        props = torch.cuda.get_device_properties(self.device)
        self.l2_bytes: int | None = getattr(props, "L2_cache_size", None) or None
        self.name = props.name
        self._stream = torch.cuda.Stream(device=self.device)
        self._sep_buf = torch.zeros(1, device=self.device, dtype=torch.float32)
        self._warmup_rounds, self._warmup_calls = warmup_rounds, warmup_calls
        self._issue_warmup = issue_warmup
        self._events: list[tuple[Any, Any]] = []
        self._probe = probe if probe is not None else default_probe(self.device)

    def _separator(self) -> None:
        self._sep_buf.add_(1.0)

    def _capture(self, label: str, body: Callable[[], None], warm: Callable[[], None],
                 calls: int) -> _Graph:
        torch = self._torch
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            for _ in range(self._warmup_rounds):
                warm()
        self._stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self._stream):
            graph.capture_begin()
            try:
                body()
            finally:
                graph.capture_end()
        current.wait_stream(self._stream)
        return _Graph(graph, label, calls)

    def capture(self, label: str, calls: Sequence[Callable[[], Any]], *,
                separate: bool) -> _Graph:
        seq = list(calls)
        sep = self._separator

        def body() -> None:
            for call in seq:
                call()
                if separate:
                    sep()

        def warm() -> None:
            for call in seq[: self._warmup_calls]:
                call()
                if separate:
                    sep()

        return self._capture(label, body, warm, len(seq))

    def capture_separators(self, n: int) -> _Graph:
        sep = self._separator

        def body() -> None:
            for _ in range(n):
                sep()

        return self._capture("_separator", body, sep, n)

    def _event_pairs(self, n: int) -> list[tuple[Any, Any]]:
        Event = self._torch.cuda.Event
        while len(self._events) < n:
            self._events.append((Event(enable_timing=True), Event(enable_timing=True)))
        return self._events[:n]

    def replay(self, graphs: Sequence[_Graph]) -> list[float]:
        if not graphs:
            return []
        torch = self._torch
        pairs = self._event_pairs(len(graphs))
        with torch.cuda.device(self.device):
            if hasattr(torch.cuda, "_sleep"):
                torch.cuda._sleep(SPIN_CYCLES)
            for graph, (start, end) in zip(graphs, pairs, strict=True):
                start.record()
                graph.graph.replay()
                end.record()
            try:
                pairs[len(graphs) - 1][1].synchronize()
            except RuntimeError as exc:
                raise DeviceFault(f"device error during replay of {graphs[-1].label}: "
                                  f"{exc}") from exc
            return [start.elapsed_time(end) for start, end in pairs[: len(graphs)]]

    def issue_us(self, label: str, calls: Sequence[Callable[[], Any]]) -> float:
        if not calls:
            return 0.0
        for call in calls[: self._issue_warmup]:
            call()
        self.synchronize()
        t0 = time.perf_counter()
        for call in calls:
            call()
        t1 = time.perf_counter()
        self.synchronize()
        return (t1 - t0) * 1e6 / len(calls)

    def synchronize(self) -> None:
        try:
            self._torch.cuda.synchronize(self.device)
        except RuntimeError as exc:
            raise DeviceFault(f"the device reported an error ({' '.join(str(exc).split())}); "
                              "measurements after it cannot be trusted") from exc

    def conditions(self) -> Conditions:
        return self._probe.read()

    def release(self, graph: _Graph) -> None:
        try:
            graph.graph.reset()
        except (AttributeError, RuntimeError):
            pass
