"""A scripted device for the autotune and tuner tests, and their subprocess writers.

``ScriptedDevice`` plays a GPU for family ``fake`` (``oasr_core.testing``): its ``make_bench``
records which problem is being measured and its :class:`ScriptedTimer` times each arm by a
cost model of that problem, so winners depend on the shape the way they do on a device.
``TunePlugin(device)`` registers the family with that ``make_bench`` and the fake lane.

Run as a script it is a writer process for the concurrency tests::

    python autotune_kit.py publish USER_DIR WRITER N   # autotune() publishing N shapes
    python autotune_kit.py cache CACHE_FILE WRITER N   # N results merged into a cache file
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import attrs

from oasr_core import hookimpl, runtime
from oasr_core.bench import BenchCase, ScriptedArm, ScriptedTimer
from oasr_core.plugins import make_plugin_manager
from oasr_core.testing import fake_family_record, fake_lane_record
from oasr_core.types import Problem, Sentinel

ARCH = "sm90"
LANE = fake_lane_record()
N, K = 512, 256


def default_cost_ms(label: str, problem: Problem) -> float:
    """Waves of 128-row CTAs and a K loop per config; torch a flat launch plus flops."""
    m, n, k = problem.m, problem.dim("N"), problem.dim("K")
    if label == "torch":
        return (3.0 + 2 * m * n * k / 250e12 * 1e6) / 1000
    p = LANE.config(label).params
    ctas = math.ceil(m / 128) * math.ceil(n / p["tile_n"]) * p["split_k"]
    k_iters = math.ceil(k / p["split_k"] / p["tile_k"])
    per_wave = 0.3 + k_iters * 0.05 * p["tile_n"] / 64 * p["tile_k"] / 64
    return (2.0 + math.ceil(ctas / 132) * per_wave + 0.5 * (p["split_k"] > 1)) / 1000


class ScriptedDevice:
    """A scripted GPU (see the module docstring); ``benched`` lists ((N, K), M) measured."""

    def __init__(self, cost: Callable[[str, Problem], float] = default_cost_ms, *,
                 uncapturable: bool = False, broken: bool = False) -> None:
        self.cost = cost
        self.problem: Problem | None = None
        self.benched: list[tuple[tuple[int, ...], int]] = []
        self.uncapturable, self.broken = uncapturable, broken
        self.timer = ScriptedTimer(self.script)
        self.eager_timer = ScriptedTimer(self.eager_script)

    def script(self, label: str) -> ScriptedArm:
        return ScriptedArm(ms=self.cost(label, self.problem), issue_us=8.0,
                           fail_capture=self.uncapturable)

    def eager_script(self, label: str) -> ScriptedArm:
        return ScriptedArm(ms=self.cost(label, self.problem) + 0.004, issue_us=8.0)

    def make_bench(self, problem, choices, options):
        if self.broken:
            raise RuntimeError("no operands on this device")
        self.problem = problem
        self.benched.append((tuple(v for _, v in problem.dims), problem.m))
        names = [c.value if isinstance(c, Sentinel) else c.id for c in choices]
        return BenchCase(arms={n: (lambda i, n=n: n) for n in names}, gate=lambda out: True)

    def family(self):
        return attrs.evolve(fake_family_record(), make_bench=self.make_bench)


class TunePlugin:
    """Family ``fake`` measured by a :class:`ScriptedDevice`, and its lane."""

    def __init__(self, device: ScriptedDevice) -> None:
        self.device = device

    @hookimpl
    def oasr_register_families(self):
        return [self.device.family()]

    @hookimpl
    def oasr_register_lanes(self):
        return [fake_lane_record()]


def install(device: ScriptedDevice, *extra: object) -> runtime.Runtime:
    """A fresh process runtime with ``TunePlugin(device)`` and ``extra`` plugins."""
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(TunePlugin(device))
    for plugin in extra:
        pm.register(plugin)
    rt = runtime.Runtime(pm=pm)
    runtime.install_runtime(rt)
    return rt


def _publish_writer(user: str, writer: int, n: int) -> None:
    """Autotune ``n`` widths of its own plus one shared width at its own M, publishing."""
    import os

    import oasr_core

    os.environ["OASR_TUNE_USER_DB"] = user
    os.environ["OASR_TUNE_SYSTEM_DB"] = "off"
    device = ScriptedDevice()
    install(device)
    with oasr_core.autotune(arch=ARCH, timer=device.timer):
        for i in range(n):
            oasr_core.select("fake", "fake", "fp16", (8 * (100 * writer + i + 1), K), 64, ARCH)
        oasr_core.select("fake", "fake", "fp16", (N, K), 8 * (writer + 1), ARCH)


def _cache_writer(path: str, writer: int, n: int) -> None:
    """Merge ``n`` results of its own into the cache file, one write each."""
    from oasr_core.autotuning import Result, write_cache

    for i in range(n):
        m = 8 * (i + 1)
        write_cache(path, arch=ARCH, results=[Result(
            key=f"fake|op=fake|dt=fp16|N={8 * (writer + 1)}|K={K}", bucket=m, m=m,
            choice="torch", lane=LANE.name, ms=0.001 * (writer + 1), env={"writer": writer})])


if __name__ == "__main__":
    command, target, who, count = sys.argv[1:5]
    {"publish": _publish_writer, "cache": _cache_writer}[command](target, int(who), int(count))
