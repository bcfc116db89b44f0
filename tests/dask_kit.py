"""A scripted GPU for the sharded build's tests: what each Dask worker process measures with.

:class:`ScriptedDevice` pickles as a few fields; on a worker it makes the ``fake`` family with a
:class:`~oasr_core.testing.ScriptedBench` (noise-free, so every worker times an arm alike) and
the modelled fake lane. Every arm measured costs ``arm_s`` seconds of wall time, every bench
made is recorded in ``record`` (one line: pid, N, K, M), and the worker kills itself (SIGKILL)
the first time it measures size ``kill_m`` of the signature of width ``kill_n`` (``marker``
says it happened).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import attrs
from build_speed_kit import modelled_lane

from oasr_core.testing import ScriptedBench, fake_family_record

_OPEN: dict = {}


@attrs.frozen
class ScriptedDevice:
    """A worker's scripted GPU (module docstring)."""

    family_arch: str = "sm90"
    arm_s: float = 0.0
    record: str | None = None
    kill_n: int | None = None
    kill_m: int | None = None
    marker: str | None = None

    def records(self):
        return attrs.evolve(fake_family_record(), make_bench=self._bench().make_bench), \
            modelled_lane()

    def _bench(self) -> ScriptedBench:
        if self not in _OPEN:
            _OPEN[self] = ScriptedBench(sigma_rel=0.0)
            inner = _OPEN[self].make_bench

            def make_bench(problem, choices, options):
                n, k = problem.dim("N"), problem.dim("K")
                if self.record is not None:
                    with open(self.record, "a", encoding="utf-8") as handle:
                        handle.write(f"{os.getpid()} {n} {k} {problem.m}\n")
                if (n, problem.m) == (self.kill_n, self.kill_m) and not Path(
                        self.marker).exists():
                    Path(self.marker).write_text(str(os.getpid()))
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(self.arm_s * len(choices))
                return inner(problem, choices, options)

            _OPEN[self].make_bench = make_bench
        return _OPEN[self]

    def open(self):
        family, lane = self.records()
        return family, lane, self._bench().timer

    def arch(self) -> str:
        return self.family_arch


def benched(record: Path) -> list[tuple[int, int, int, int]]:
    """The (pid, N, K, M) of every bench made, in order."""
    if not record.exists():
        return []
    return [tuple(int(x) for x in line.split()) for line in record.read_text().splitlines()]
