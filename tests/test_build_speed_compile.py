"""Compiling what a build measures: the priority gate, the per-signature compile queue, and a
live scripted build that compiles only its candidate sets, heaviest signature first, waiting
for each signature's module only when it is about to measure it."""

from __future__ import annotations

import threading
import time

import attrs
from build_speed_kit import by_size, modelled_lane

from oasr_core import build
from oasr_core.arch import ArchProfile
from oasr_core.build import compiling
from oasr_core.jit.builder import BuildStatus
from oasr_core.testing import ScriptedBench, fake_family_record, fake_lane_record

SOFT = {"impl_hash": "compile-1"}


@attrs.frozen
class Unit:
    status: BuildStatus


@attrs.define
class Report:
    units: dict
    status: BuildStatus = BuildStatus.BUILT
    error: str | None = None
    failed: dict = attrs.Factory(dict)


class ScriptedCompiler:
    """A :data:`compiling.Builder` that 'compiles' each unit once (a shared object cache)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.cache: set[str] = set()
        self.compiled: list[str] = []
        self.specs: list[tuple[str, ...]] = []
        self.delay_s = delay_s
        self.locks: dict[str, threading.Lock] = {}
        self.lock = threading.Lock()

    def __call__(self, spec, priority, on_unit):
        self.specs.append(spec)
        units = {}
        for name in spec:
            with self.lock:
                unit_lock = self.locks.setdefault(name, threading.Lock())
            with unit_lock:  # as the JIT's per-object file lock
                fresh = name not in self.cache
                if fresh:
                    time.sleep(self.delay_s)
                    self.cache.add(name)
                    self.compiled.append(name)
            units[name] = Unit(BuildStatus.BUILT if fresh else BuildStatus.CACHED)
            on_unit(name, units[name])
        return Report(units)


class Modules:
    """A ``Lane.bench_modules`` recording what the build asked of it."""

    def __init__(self) -> None:
        self.installed: list[tuple[str, ...]] = []
        self.dtypes: set = set()
        self.resets = 0

    def spec(self, arch, configs, dtypes=None, groups=None):
        self.dtypes.add(dtypes)
        self.groups = groups
        return tuple(c.params.get("unit", c.id) for c in configs)

    def install(self, arch, configs, dtypes=None, groups=None):
        self.installed.append(tuple(c.id for c in configs))

    def reset(self):
        self.resets += 1


class Tracker:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def advance(self, outcome, n=1):
        self.counts[outcome] = self.counts.get(outcome, 0) + n


def test_the_gate_serves_waiters_lowest_priority_first():
    gate = compiling.PriorityGate(1)
    gate.acquire(0)
    order, threads = [], []
    for prio in (3, 1, 2):
        t = threading.Thread(target=lambda p=prio: (gate.acquire(p), order.append(p),
                                                    gate.release()))
        t.start()
        threads.append(t)
        time.sleep(0.05)
    gate.release()
    for t in threads:
        t.join(timeout=5)
    assert order == [1, 2, 3]


def test_the_queue_builds_each_set_once_per_unit_and_installs_on_prepare():
    lane = fake_lane_record()
    a, b, c = lane.config_space[:3]
    compiler, modules, tracker = ScriptedCompiler(delay_s=0.01), Modules(), Tracker()
    items = [compiling.CompileItem(key, configs, spec=lambda cs=configs: modules.spec("", cs),
                                   install=lambda cs=configs: modules.install("", cs))
             for key, configs in (("heavy", (a, b)), ("light", (b, c)))]
    queue = compiling.CompileQueue(items, compiler, tracker).start()
    queue.prepare(attrs.make_class("S", ["key"])("heavy"))
    assert modules.installed == [(a.id, b.id)]
    queue.prepare(attrs.make_class("S", ["key"])("light"))
    queue.close()
    assert modules.installed == [(a.id, b.id), (b.id, c.id)]
    assert sorted(compiler.compiled) == sorted({a.id, b.id, c.id})
    assert tracker.counts == {"built": 3}
    assert "3 unit(s) (3 built)" in queue.note()


def test_a_failed_module_is_reported_and_the_build_goes_on():
    lane = fake_lane_record()

    def broken(spec, priority, on_unit):
        raise RuntimeError("nvcc is gone")

    items = [compiling.CompileItem("sig", lane.config_space[:2], spec=lambda: ("x",))]
    queue = compiling.CompileQueue(items, broken, Tracker()).start()
    assert queue.ready("sig").status == "failed"
    queue.close()
    assert "nvcc is gone" in queue.note()


def test_a_pruned_live_build_compiles_only_its_sets_heaviest_first(tmp_path):
    modules = Modules()
    lane = modelled_lane(bench_modules=modules)
    bench = ScriptedBench()
    fam = attrs.evolve(fake_family_record(), make_bench=bench.make_bench)
    census = build.census_from_widths(fam, "512,256;1024,512;256,1024", "16,256,4096")
    compiler = ScriptedCompiler()
    out = tmp_path / "sm90" / "fake.json"
    result = build.build_live(census, family=fam, lane=lane, arch="sm90", out=out,
                              timer=bench.timer, soft=SOFT,
                              profile=ArchProfile.synthetic("sm90"), rankers=(by_size,),
                              options=build.BuildOptions(fresh=True, effort="default",
                                                         top_k=1),
                              compiler=compiler)
    planned = build.plan(census, fam, max_points=14)
    # one module per signature, in measuring order, each of its candidate set only
    assert len(compiler.specs) == len(modules.installed) == len(planned)
    assert all(len(s) < len(lane.config_space) for s in compiler.specs)
    measured = {a for _p, arms in bench.benched for a in arms}
    installed = {c for ids in modules.installed for c in ids}
    assert measured - {"default", "torch"} <= installed
    assert len(set(compiler.compiled)) == len(compiler.compiled)  # each unit once
    assert modules.resets == 1
    assert modules.dtypes == {("fp16",)}  # the default level compiles the measured dtype
    assert any(m.startswith("compile: ") for m in result.messages)


def test_an_exhaustive_build_compiles_the_whole_space_module_first(tmp_path):
    seen = []
    production = ("default_unit", "named_unit")
    lane = attrs.evolve(fake_lane_record(), jit_specs=lambda arch, scope: (
        seen.append(scope) or [tuple(c.id for c in fake_lane_record().config_space)
                               if scope == "all" else production]))
    bench = ScriptedBench()
    fam = attrs.evolve(fake_family_record(), make_bench=bench.make_bench)
    compiler = ScriptedCompiler()
    result = build.build_live(build.census_from_widths(fam, "512,256", "16,256"), family=fam,
                              lane=lane, arch="sm90", out=tmp_path / "o.json",
                              timer=bench.timer, soft=SOFT,
                              options=build.BuildOptions(fresh=True, effort="exhaustive"),
                              compiler=compiler)
    # The whole space first (what it measures from), then, once the table is written, the
    # production module the next process loads, in the same compile queue.
    assert seen == ["all", "production"]
    assert compiler.specs == [tuple(c.id for c in lane.config_space), production]
    assert any(m.startswith("production modules for the next process: ")
               for m in result.messages), result.messages


def test_whole_space_progress_counts_the_spec_s_units():
    sigs = [attrs.make_class("Sig", ["key", "dtype"])("k", "fp16")]
    item, = compiling.whole_space_items(
        attrs.evolve(fake_lane_record(), jit_specs=lambda arch, scope: [
            attrs.make_class("Spec", ["units"])((attrs.make_class("U", ["name"])("u1"),
                                                 attrs.make_class("U", ["name"])("u2")))]),
        "sm90", sigs, set())
    assert item.key == "*" and item.unit_names() == ("u1", "u2")
    broken = attrs.evolve(fake_lane_record(), jit_specs=lambda arch, scope: 1 / 0)
    assert compiling.whole_space_items(broken, "sm90", sigs, set()) == []
    assert compiling.whole_space_items(broken, "sm90", sigs, {"k"}) == []  # all finished
