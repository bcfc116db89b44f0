"""The gemm lane's build modules (``Lane.bench_modules``): a module of both dtypes reuses the
whole-space and production modules' objects (one JIT cache serves all three); a module of the
measured dtype alone compiles other objects, with half the kernels."""

from __future__ import annotations

import shutil

import pytest

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")


def test_bench_modules_share_objects_with_the_whole_space_unless_one_dtype():
    from oasr_gemm import jit
    from oasr_gemm.config_space import LANE_SM90

    from oasr_core.jit.spec import plan
    from oasr_core.runtime import get_runtime

    lane = get_runtime().registry.lane(LANE_SM90)
    configs = [lane.default, lane.config("pp_128x128x64_c1x1")]
    both = plan(lane.bench_modules.spec("sm90", configs))
    whole = {u.unit.name: u.key for u in plan(jit.full_spec(LANE_SM90, "sm90")).units}
    assert {u.unit.name: u.key for u in both.units} == {
        c.params["unit"]: whole[c.params["unit"]] for c in configs}
    half = plan(lane.bench_modules.spec("sm90", configs, ("fp16",)))
    assert not {u.key for u in half.units} & set(whole.values())
    assert all("bfloat16" not in u.text and "half_t" in u.text for u in half.units)
    assert both.spec.name == half.spec.name == "gemm_sm90_wgmma_bench"


def test_a_cached_production_object_is_reused_instead_of_a_one_dtype_unit(tmp_path,
                                                                          monkeypatch):
    from oasr_gemm import jit
    from oasr_gemm.config_space import LANE_SM90

    from oasr_core.jit import cache
    from oasr_core.jit.spec import plan
    from oasr_core.runtime import get_runtime

    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path / "jit"))
    monkeypatch.setattr(jit, "_BENCH_DTYPES", {})
    lane = get_runtime().registry.lane(LANE_SM90)
    prebuilt, fresh = lane.default, lane.config("pp_128x128x64_c1x1")
    key = plan(jit.module_spec(LANE_SM90, "sm90", [prebuilt])).units[0].key
    obj = cache.object_path(cache.cache_dir(), key)
    obj.parent.mkdir(parents=True)
    obj.write_bytes(b"\0")  # stands for the production object a prebuild left
    units = {u.unit.name: u for u in plan(lane.bench_modules.spec("sm90", [prebuilt, fresh],
                                                                  ("fp16",))).units}
    assert units[prebuilt.params["unit"]].key == key  # reused: nothing to compile
    assert "bfloat16" not in units[fresh.params["unit"]].text  # compiled for fp16 only


def test_a_build_module_links_the_bundles_holding_its_configs(tmp_path, monkeypatch):
    from oasr_gemm import jit
    from oasr_gemm.config_space import LANE_SM90

    from oasr_core.jit.bundles import plan_groups
    from oasr_core.jit.spec import plan
    from oasr_core.runtime import get_runtime

    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path / "jit"))
    monkeypatch.setattr(jit, "_BENCH_DTYPES", {})
    lane = get_runtime().registry.lane(LANE_SM90)
    configs = [c for c in lane.config_space if not c.params["stream_k"]][:6]
    groups = plan_groups(configs, 3)
    spec = plan(lane.bench_modules.spec("sm90", configs[:1], ("fp16",), groups))
    tu, = spec.units  # the first config's group, bundled whole
    # Each member's own unit and its fused-residual unit: one file for both ops.
    assert tu.unit.name == f"{configs[0].params['unit']}+3"
    assert tu.text.count("namespace oasr_bundle_") == 8  # four units, each opened and closed
    assert '#include "oasr_gemm/sm90_residual.cuh"' in tu.text
    assert "bfloat16" not in tu.text
    residual = plan(lane.bench_modules.for_op("gemm_residual").spec(
        "sm90", configs[1:2], ("fp16",), groups))
    assert [u.key for u in residual.units] == [tu.key]  # the same object, compiled once


def test_a_group_s_bundle_holds_the_kernels_of_the_ops_that_time_it(tmp_path, monkeypatch):
    from oasr_gemm import jit
    from oasr_gemm.config_space import LANE_SM90

    from oasr_core.jit.bundles import Group, plan_groups
    from oasr_core.jit.spec import plan
    from oasr_core.runtime import get_runtime

    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path / "jit"))
    monkeypatch.setattr(jit, "_BENCH_DTYPES", {})
    lane = get_runtime().registry.lane(LANE_SM90)
    configs = [c for c in lane.config_space if not c.params["stream_k"]][:6]

    def first_bundle(ops, op="gemm"):
        groups = [Group(g, ops) for g in plan_groups(configs, 3)]
        tu, = plan(lane.bench_modules.for_op(op).spec("sm90", configs[:1], ("fp16",),
                                                      groups)).units
        return tu

    plain = first_bundle({"gemm", "gemm_activation"})
    assert plain.unit.name.endswith("+1") and "sm90_residual.cuh" not in plain.text
    residual = first_bundle({"gemm_residual"}, op="gemm_residual")
    assert residual.unit.name.endswith("+1") and "sm90_residual.cuh" in residual.text
    both = first_bundle({"gemm", "gemm_residual"})
    assert both.unit.name.endswith("+3")
    assert plan(lane.bench_modules.for_op("gemm_residual").spec(
        "sm90", configs[:1], ("fp16",), [Group(g, {"gemm", "gemm_residual"})
                                          for g in plan_groups(configs, 3)])).units[0].key \
        == both.key
