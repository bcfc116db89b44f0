"""Where the fused-residual units of op ``gemm_residual`` are compiled (no compiler runs
here): the production module (only the configs the tiers name under that op, in both compile
sets), the whole-space module (none), and a build's modules (only a ``gemm_residual``
signature's, and only its fused-residual units)."""

from __future__ import annotations

import attrs
import pytest
from oasr_core import database, stamps
from oasr_core.build import compiling
from oasr_core.runtime import get_runtime

from oasr_gemm import codegen, jit
from oasr_gemm import config_space as cs


def _unit_names(spec):
    return [u.name for u in spec.units]


def test_production_and_whole_space_modules_hold_no_residual_unit_by_default():
    whole = jit.full_spec(cs.LANE_SM90, "sm90")
    assert not [n for n in _unit_names(whole) if n.endswith("_res")]
    production = jit.production_spec(cs.LANE_SM90, "sm90", referenced=())
    assert _unit_names(production) == list(jit.production_ids(cs.LANE_SM90, "sm90"))


def test_residual_units_follow_the_gemm_residual_references_in_both_compile_sets(monkeypatch):
    ids = ["pp_128x96x64_c1x1", "ws_128x80x64_c1x1"]
    tuned = jit.production_spec(cs.LANE_SM90, "sm90", referenced=(), residual=ids)
    assert sorted(n for n in _unit_names(tuned) if n.endswith("_res")) == [
        "pp_128x96x64_c1x1_res", "ws_128x80x64_c1x1_res"]
    monkeypatch.setenv(jit.COMPILE_SET_ENV, "all")
    assert jit.production_spec(cs.LANE_SM90, "sm90", residual=()) == \
        jit.full_spec(cs.LANE_SM90, "sm90"), "all without residual entries is the whole space"
    widened = jit.production_spec(cs.LANE_SM90, "sm90", residual=ids[:1])
    assert _unit_names(widened) == [*_unit_names(jit.full_spec(cs.LANE_SM90, "sm90")),
                                    "pp_128x96x64_c1x1_res"]
    assert not jit.residual_configs(cs.LANE_SM80, "sm90", [cs.SM80_DEFAULT])


def test_the_tiers_gemm_residual_entries_name_the_residual_units(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.lane(cs.LANE_SM90)
    entries = {
        database.signature_key(family, "gemm", "half", (256, 1024)):
            database.Entry(regions=((None, "ws_128x80x64_c1x1"),)),
        database.signature_key(family, "gemm_residual", "half", (256, 1024)):
            database.Entry(regions=((512, "pp_128x96x64_c1x1"), (None, "torch"))),
    }
    database.write_entries(database.tier_path(tmp_path, "sm90", family), family=family,
                           arch="sm90", lane=lane, entries=entries,
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    rt.reload()
    assert jit.residual_referenced(cs.LANE_SM90, "sm90") == {"pp_128x96x64_c1x1"}
    names = _unit_names(jit.production_spec(cs.LANE_SM90, "sm90"))
    assert [n for n in names if n.endswith("_res")] == ["pp_128x96x64_c1x1_res"]
    assert "ws_128x80x64_c1x1" in names


def test_the_residual_whole_space_module_is_its_own():
    spec = jit.residual_full_spec(cs.LANE_SM90, "sm90")
    configs = jit.lane_configs(cs.LANE_SM90, "sm90")
    assert spec.name == "gemm_sm90_wgmma_residual"
    assert _unit_names(spec) == [codegen.residual_unit(c) for c in
                                 {c.params["unit"]: c for c in configs}.values()]
    with pytest.raises(ValueError, match="sm80_mma has no fused-residual kernel"):
        jit.residual_full_spec(cs.LANE_SM80, "sm90")


def test_build_modules_of_a_residual_signature_link_only_residual_units():
    lane = get_runtime().registry.lane(cs.LANE_SM90)
    configs = [lane.default, lane.config("pp_128x128x64_c1x1")]
    modules = lane.bench_modules
    residual = modules.for_op("gemm_residual")
    assert modules.for_op("gemm") is modules and modules.for_op("gemm_activation") is modules
    spec = residual.spec("sm90", configs, ("fp16",))
    assert spec.name == "gemm_sm90_wgmma_residual_bench"
    assert _unit_names(spec) == [codegen.residual_unit(c) for c in configs]
    assert all("bfloat16" not in u.source for u in spec.units)
    assert not [n for n in _unit_names(modules.spec("sm90", configs)) if n.endswith("_res")]


@attrs.frozen
class _Sig:
    key: str
    op: str
    dtype: str = "fp16"


def test_a_pruned_build_compiles_residual_units_only_for_residual_signatures():
    lane = get_runtime().registry.lane(cs.LANE_SM90)
    chosen = [lane.default, lane.config("ws_128x80x64_c1x1")]
    built: dict[str, list[str]] = {}

    def compiler(spec, priority, on_unit):
        built[spec.name] = built.get(spec.name, []) + _unit_names(spec)
        return attrs.make_class("Report", {"units": attrs.field(factory=dict),
                                           "status": attrs.field(default="built"),
                                           "error": attrs.field(default=None),
                                           "failed": attrs.field(factory=dict)})()

    sigs = [_Sig("gemm|op=gemm|dt=fp16|N=256|K=256", "gemm"),
            _Sig("gemm|op=gemm_residual|dt=fp16|N=256|K=1024", "gemm_residual")]
    queue, sets = compiling.stream(lane, "sm90", sigs, set(), lambda sig: chosen,
                                   compiler=compiler, jobs=1)
    queue.close()
    assert set(sets) == {s.key for s in sigs}
    assert built["gemm_sm90_wgmma_bench"] == [c.params["unit"] for c in chosen]
    assert built["gemm_sm90_wgmma_residual_bench"] == [codegen.residual_unit(c) for c in chosen]
