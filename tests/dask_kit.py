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
    salt: str | None = None
    """With a salt, the lane compiles a real host-only unit per config (:class:`HostModules`)."""

    def records(self):
        lane = modelled_lane() if self.salt is None else modelled_lane(
            bench_modules=HostModules(self.salt))
        return attrs.evolve(fake_family_record(), make_bench=self._bench().make_bench), lane

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


@attrs.frozen
class HostModules:
    """A lane's ``bench_modules``: one host-only unit per config (its id and ``salt`` in the
    source, so a new salt compiles anew), bundled by the build's groups, really compiled by
    nvcc through the JIT; installing loads the module without building it."""

    salt: str

    def spec(self, arch, configs, dtypes=None, groups=None):
        from oasr_core import jit
        from oasr_core.jit import bundles

        def unit(c):
            return jit.TranslationUnit(
                c.id, f"// {self.salt}\nOASR_EXPORT int {c.id}_value(void) "
                f"{{ return {len(c.id)}; }}\n", (f"{c.id}_value",))

        wanted = {c.id for c in configs}
        units = {}
        for group in groups or [(c,) for c in configs]:
            if wanted & {c.id for c in group}:
                tu = bundles.bundle(f"{group[0].id}+{len(group) - 1}", [unit(c) for c in group])
                units[tu.name] = tu
        return jit.JitSpec(name=f"dask_{self.salt}", arch="90a", cutlass=False,
                           units=tuple(units.values()))

    def install(self, arch, configs, dtypes=None, groups=None):
        from oasr_core import jit

        module = jit.load(self.spec(arch, configs, dtypes, groups), build_missing=False)
        return None if module.exports else "empty module"

    def reset(self):
        pass


def benched(record: Path) -> list[tuple[int, int, int, int]]:
    """The (pid, N, K, M) of every bench made, in order."""
    if not record.exists():
        return []
    return [tuple(int(x) for x in line.split()) for line in record.read_text().splitlines()]
