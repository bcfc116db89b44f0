"""Progress of long commands (``oasr tune prebuild``, ``oasr tune build``) on stderr.

Three modes: a live ``rich`` bar (done / total, built / cached / failed, elapsed, ETA) when
stdout is a terminal; plain lines when it is not (a log file, CI), one per ``every`` units and
at least one a minute, so a log still shows the job moving; nothing with ``--no-progress``.
The caller prints the summary line itself, in every mode.
"""

from __future__ import annotations

import contextlib
import enum
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import IO, Any

import attrs


class ProgressMode(enum.Enum):
    """How a command shows its progress."""

    BAR = "bar"
    """A live rich bar on stderr."""
    LINES = "lines"
    """One plain line on stderr per few units (for logs)."""
    OFF = "off"
    """Nothing."""

    @classmethod
    def choose(cls, flag: bool | None, stdout: IO[str] | None = None) -> ProgressMode:
        """``--progress/--no-progress`` (None: not given) and whether stdout is a terminal."""
        if flag is False:
            return cls.OFF
        stream = stdout if stdout is not None else sys.stdout
        tty = bool(getattr(stream, "isatty", lambda: False)())
        return cls.BAR if tty or flag is True else cls.LINES


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.5))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


@attrs.define(eq=False)
class Tracker:
    """Counts units by outcome and shows them in the chosen mode (thread-safe)."""

    what: str
    total: int
    mode: ProgressMode
    every: int = 10
    interval_s: float = 60.0
    stream: Any = None
    quiet_s: float = 2.0
    """No plain line before this many seconds but the last: a job done in a blink (a log
    replay) prints its one summary line, not ten."""
    counts: Counter = attrs.field(factory=Counter)
    started: float = attrs.field(factory=time.monotonic)
    _bar: Any = None
    _task: Any = None
    _last_line: tuple[int, float] = (0, 0.0)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def __attrs_post_init__(self) -> None:
        self._last_line = (0, self.started)

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    def eta_s(self) -> float | None:
        """Seconds left at the rate of the units done so far by work (cached units are free,
        so they do not count toward the rate); None before the first such unit."""
        worked = self.done - self.counts["cached"]
        if worked <= 0:
            return None
        elapsed = time.monotonic() - self.started
        return elapsed / worked * max(0, self.total - self.done)

    def summary(self) -> str:
        """``40/185 units (12 built, 25 cached, 3 failed), 2m10s``."""
        parts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items())
                          if n and k != "done")
        return (f"{self.done}/{self.total} {self.what}" + (f" ({parts})" if parts else "")
                + f", {_clock(time.monotonic() - self.started)}")

    def describe(self, text: str) -> None:
        """Name what is being worked on (the bar's label)."""
        if self._bar is not None:
            self._bar.update(self._task, description=text)

    def advance(self, outcome: str, n: int = 1) -> None:
        """Count ``n`` units that ended as ``outcome`` (``built``, ``cached``, ``failed``...)."""
        if n <= 0:
            return
        with self._lock:
            self.counts[outcome] += n
            if self._bar is not None:
                self._bar.update(self._task, advance=n, outcome=self._outcomes())
            elif self.mode is ProgressMode.LINES:
                self._maybe_line()

    def _outcomes(self) -> str:
        return " ".join(f"{n} {k}" for k, n in sorted(self.counts.items())
                        if n and k != "done")

    def _maybe_line(self) -> None:
        done, now = self.done, time.monotonic()
        last_done, last_t = self._last_line
        if done < self.total and (now - self.started < self.quiet_s or (
                done - last_done < self.every and now - last_t < self.interval_s)):
            return
        self._last_line = (done, now)
        eta = self.eta_s()
        tail = f", ~{_clock(eta)} left" if eta is not None and done < self.total else ""
        print(f"progress: {self.summary()}{tail}", file=self.stream or sys.stderr, flush=True)


@contextlib.contextmanager
def track(what: str, total: int, mode: ProgressMode, *, every: int | None = None,
          stream: Any = None, quiet_s: float = 2.0) -> Iterator[Tracker]:
    """A :class:`Tracker` for ``total`` units of ``what``, shown in ``mode`` while the block
    runs (``every``: units per plain line, default a tenth of the total, at least 1; no
    plain line but the last in the first ``quiet_s`` seconds)."""
    tracker = Tracker(what, total, mode, every or max(1, total // 10), stream=stream,
                      quiet_s=quiet_s)
    if mode is not ProgressMode.BAR:
        yield tracker
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn(what), TextColumn("{task.fields[outcome]}"), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=stream or sys.stderr),
                  transient=False) as bar:
        tracker._bar = bar
        tracker._task = bar.add_task(what, total=total, outcome="")
        yield tracker


@contextlib.contextmanager
def signature_ticks(mode: ProgressMode | bool, total: int
                    ) -> Iterator[Callable[[str], Callable[[], None]]]:
    """The build pipeline's progress: ``for_signature(key)`` names the signature being built
    and returns the tick to call once per point (``mode`` True / False: bar / nothing)."""
    if isinstance(mode, bool):
        mode = ProgressMode.BAR if mode else ProgressMode.OFF
    with track("points", total, mode) as tracker:
        def for_signature(key: str) -> Callable[[], None]:
            tracker.describe(key)
            return lambda: tracker.advance("done")

        yield for_signature
