"""A build leaves the process ready: after ``build_live`` writes the user tier, its compile
queue builds the production module the next process loads, with every config the new table
serves (a scripted device and compiler: no GPU, no nvcc)."""

from __future__ import annotations

import attrs
import pytest
from oasr_core import build, hookimpl, runtime
from oasr_core.arch import ArchProfile
from oasr_core.jit.builder import BuildStatus
from oasr_core.jit.bundles import members_of
from oasr_core.plugins import make_plugin_manager
from oasr_core.testing import ScriptedBench

from oasr_gemm import codegen, hooks, jit, log_softmax
from oasr_gemm import config_space as cs

ARCH = "sm90"


@attrs.frozen
class _Unit:
    status: BuildStatus


@attrs.define
class _Report:
    units: dict
    status: BuildStatus = BuildStatus.BUILT
    error: str | None = None
    failed: dict = attrs.Factory(dict)


class _Plugin:
    """The real gemm family and lanes (JIT specs kept), measured by a scripted device."""

    def __init__(self, bench: ScriptedBench) -> None:
        self.bench = bench

    @hookimpl
    def oasr_register_families(self):
        return [attrs.evolve(f, make_bench=self.bench.make_bench)
                for f in hooks.oasr_register_families()]

    @hookimpl
    def oasr_register_lanes(self):
        return hooks.oasr_register_lanes()


@pytest.fixture
def scripted(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path / "user"))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", "off")
    monkeypatch.delenv(jit.COMPILE_SET_ENV, raising=False)
    always = set(jit.production_ids(cs.LANE_SM90, ARCH))
    winner = next(c.id for c in jit.lane_configs(cs.LANE_SM90, ARCH)
                  if c.id not in always and codegen.has_residual(c))

    def time_us(name, config, problem):
        if problem.op == cs.RESIDUAL_OP:
            return 4.0 if name == "default" else 9.0
        return 3.0 if name == winner else 9.0

    bench = ScriptedBench(time_us, sigma_rel=0.001)
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(_Plugin(bench), name="gemm")
    runtime.install_runtime(runtime.Runtime(pm=pm))
    yield runtime.get_runtime(), winner, tmp_path / "user" / ARCH / "gemm.json"
    runtime.install_runtime(None)


def test_the_build_compiles_the_production_module_of_its_table(scripted):
    rt, winner, out = scripted
    family = rt.registry.family(cs.FAMILY)
    lane = rt.registry.lane(cs.LANE_SM90)
    specs = []

    def compiler(spec, priority, on_unit):
        specs.append(spec)
        units = {u.name: _Unit(BuildStatus.BUILT) for u in spec.units}
        for name, unit in units.items():
            on_unit(name, unit)
        return _Report(units)

    census = build.merge_censuses([
        build.census_from_widths(family, "256,1024", "64,512", op=op)
        for op in ("gemm", cs.RESIDUAL_OP)])
    result = build.build_live(census, family=family, lane=lane, arch=ARCH, out=out,
                              timer=scripted_timer(rt), options=build.BuildOptions(fill=False),
                              rankers=(), profile=ArchProfile.synthetic(ARCH),
                              compiler=compiler)
    # The whole space first (what this build measures from), then the production module; each
    # scope with the row log-softmax op gemm_log_softmax launches after a config's GEMM (the
    # second a cache hit).
    whole, rows, production, rows_again = specs
    assert rows == rows_again == log_softmax.spec(ARCH)
    assert whole == jit.full_spec(cs.LANE_SM90, ARCH)
    names = {name for u in production.units for name in members_of(u)}
    assert winner in names, "the config the table names for gemm"
    assert f"{lane.default_config}_res" in names, "gemm_residual's default regions"
    assert any(m.startswith("production modules for the next process: gemm_sm90_wgmma built")
               for m in result.messages), result.messages
    # The next process's production spec is the one the build compiled: nothing new.
    runtime.reload()
    assert lane.jit_specs(ARCH, "production") == [production, rows]
    assert f"{lane.default_config}+1" in {u.name for u in production.units}, \
        "the default and its fused-residual variant: one file"


def scripted_timer(rt):
    family = rt.registry.family(cs.FAMILY)
    return family.make_bench.__self__.timer


def test_a_ctc_head_census_builds_an_entry_the_op_serves(scripted, monkeypatch):
    """Census -> build -> table -> production set -> plan, for op gemm_log_softmax: the
    build keys the head's signature under its op, the production module links the config it
    names (the config's own GEMM unit: the op has none of its own), and after the reload the
    op's plan is that config's GEMM composed with the row log-softmax."""
    import torch
    from oasr_core.testing import pretend_cuda_device

    from oasr_gemm import launch, ops

    rt, winner, out = scripted
    family = rt.registry.family(cs.FAMILY)
    lane = rt.registry.lane(cs.LANE_SM90)
    census = build.census_from_widths(family, "5008,256", "64,512", op=cs.LOG_SOFTMAX_OP)
    specs = []

    def compiler(spec, priority, on_unit):
        specs.append(spec)
        units = {u.name: _Unit(BuildStatus.BUILT) for u in spec.units}
        for name, unit in units.items():
            on_unit(name, unit)
        return _Report(units)

    build.build_live(census, family=family, lane=lane, arch=ARCH, out=out,
                     timer=scripted_timer(rt), options=build.BuildOptions(fill=False),
                     rankers=(), profile=ArchProfile.synthetic(ARCH), compiler=compiler)
    runtime.reload()
    tiers = rt.tiers(family, ARCH)
    ((key, entry),) = tiers.user.entries.items()
    assert key == f"gemm|op={cs.LOG_SOFTMAX_OP}|dt=half|N=5008|K=256"
    assert winner in entry.choices()
    production = specs[2]
    assert winner in {name for u in production.units for name in members_of(u)}
    pretend_cuda_device()
    launch.install_library(cs.LANE_SM90, ARCH, {
        c.id: launch.Kernel(c, lambda *a: 0, lambda *a: 0) for c in cs.space(cs.LANE_SM90)})
    monkeypatch.setattr(log_softmax.KERNEL, "get", lambda arch: lambda *args: 0)
    plan = ops._plan((cs.LOG_SOFTMAX_OP, None, torch.float16, 5008, 256, 64, 0))
    assert isinstance(plan, log_softmax.LogSoftmaxCall) and plan.config.id == winner


def test_an_attention_census_builds_a_bmm_entry_the_op_serves(scripted):
    """Census -> build -> table -> production set -> plan, for op bmm: the build keys the
    scores' signature under bmm_tn with M the rows across the batch, the production module
    links the batched unit of the config it names, and after the reload the op's plan is that
    config's batched launcher, prepared for the batch's M."""
    import torch
    from oasr_core.testing import pretend_cuda_device

    from oasr_gemm import launch, ops

    rt, winner, out = scripted
    assert cs.has_bmm(cs.config(cs.LANE_SM90, winner))
    family = rt.registry.family(cs.FAMILY)
    lane = rt.registry.lane(cs.LANE_SM90)
    op = cs.BMM_OPS["tn"]
    census = build.census_from_widths(family, "1504,64", f"{8 * 1504},{64 * 1504}", op=op)
    specs = []

    def compiler(spec, priority, on_unit):
        specs.append(spec)
        units = {u.name: _Unit(BuildStatus.BUILT) for u in spec.units}
        for name, unit in units.items():
            on_unit(name, unit)
        return _Report(units)

    build.build_live(census, family=family, lane=lane, arch=ARCH, out=out,
                     timer=scripted_timer(rt), options=build.BuildOptions(fill=False),
                     rankers=(), profile=ArchProfile.synthetic(ARCH), compiler=compiler)
    runtime.reload()
    tiers = rt.tiers(family, ARCH)
    ((key, entry),) = tiers.user.entries.items()
    assert key == f"gemm|op={op}|dt=half|N=1504|K=64"
    assert winner in entry.choices()
    whole, _, production, _ = specs
    assert whole == jit.full_spec(cs.LANE_SM90, ARCH), "the whole space: no batched unit"
    assert f"{winner}_bmm_tn" in {name for u in production.units for name in members_of(u)}
    assert not any(name.endswith("_bmm_nn") for u in production.units
                   for name in members_of(u))
    pretend_cuda_device()
    kernels = {c.id: launch.Kernel(c, lambda *a: 0, lambda *a: 0) for c in cs.space(cs.LANE_SM90)}
    kernels.update({launch.bmm_key("tn", c.id): launch.BmmKernel(c, lambda *a: 0,
                                                                 lambda *a: 0, "tn")
                    for c in cs.space(cs.LANE_SM90) if cs.has_bmm(c)})
    launch.install_library(cs.LANE_SM90, ARCH, kernels)
    plan = ops._plan_bmm((op, None, torch.float16, 1504, 64, 64 * 1504, 0, 64))
    assert plan.config.id == winner and plan.args.m == 1504
