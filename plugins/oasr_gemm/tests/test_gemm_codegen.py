"""Generated translation units and module specs (no compiler runs here)."""

from __future__ import annotations

import re

import pytest

from oasr_gemm import codegen, jit, log_softmax
from oasr_gemm import config_space as cs


def test_sm90_unit_names_schedule_tile_cluster_and_exports():
    c = cs.config(cs.LANE_SM90, "pp_128x128x64_c1x2")
    src = codegen.unit_source(c)
    assert '#include "oasr_gemm/sm90.cuh"' in src
    assert ("oasr_gemm::sm90::Kernel<cutlass::half_t, 128, 128, 64, 1, 2, 0, "
            "cutlass::gemm::KernelTmaWarpSpecializedPingpong, "
            "cutlass::epilogue::TmaWarpSpecialized, void, false>") in src
    assert "cutlass::bfloat16_t, 128, 128, 64, 1, 2" in src
    assert f"OASR_EXPORT int32_t {codegen.symbol(c)}(" in src
    assert f"OASR_EXPORT int64_t {codegen.workspace_symbol(c)}(" in src
    assert codegen.symbol(c) == "oasr_gemm_sm90_pp_128x128x64_c1x2"


@pytest.mark.parametrize(("cid", "needle"), [
    ("ws_64x32x64_c1x1", "64, 32, 64, 1, 1, 0, cutlass::gemm::KernelTmaWarpSpecialized, "
                         "cutlass::epilogue::TmaWarpSpecialized, void, false"),
    ("co_128x256x64_c1x1", "KernelTmaWarpSpecializedCooperative, "
                           "cutlass::epilogue::TmaWarpSpecializedCooperative, void"),
    ("sk_128x128x64_c1x1", "cutlass::gemm::StreamKScheduler, false"),
    ("ws_64x64x64_c1x1_s4", "64, 64, 64, 1, 1, 4, cutlass::gemm::KernelTmaWarpSpecialized,"),
    ("ws_64x16x128_c1x1_swap", "64, 16, 128, 1, 1, 0, cutlass::gemm::KernelTmaWarpSpecialized, "
                               "cutlass::epilogue::TmaWarpSpecialized, void, true>"),
    ("pp_128x128x64_c1x1_e64x64", "cutlass::epilogue::TmaWarpSpecialized, void, false, 64, 64>"),
    ("co_256x128x64_c1x1_e128x64", "TmaWarpSpecializedCooperative, void, false, 128, 64>"),
])
def test_sm90_variants(cid, needle):
    assert needle in codegen.unit_source(cs.config(cs.LANE_SM90, cid))


@pytest.mark.parametrize(("cid", "decomp"), [
    ("b64x64x64_w32x32x64_s3", 0), ("b64x64x64_w32x32x64_s3_spk4", 0),
    ("b64x128x64_w32x64x64_s3_sk", 1), ("b32x64x64_w16x32x64_s3_pk4", 2),
])
def test_sm80_units_share_binaries_across_split_factors(cid, decomp):
    c = cs.config(cs.LANE_SM80, cid)
    src = codegen.unit_source(c, ("fp16",))
    tile = ", ".join(map(str, (*c.params["tile"], *c.params["warp"], c.params["stages"])))
    assert f"oasr_gemm::sm80::Kernel<cutlass::half_t, {tile}, {decomp}>" in src
    assert "bfloat16" not in src
    assert "_spk" not in codegen.symbol(c) and not re.search(r"_pk\d", codegen.symbol(c))


def test_launch_flags_reach_the_3x_kernels_only():
    sm90 = codegen.unit_source(cs.config(cs.LANE_SM90, cs.SM90_DEFAULT))
    assert "c->semaphore_bytes, c->flags, static_cast<cudaStream_t>(stream)" in sm90
    sm80 = codegen.unit_source(cs.config(cs.LANE_SM80, cs.SM80_DEFAULT))
    assert "c->flags" not in sm80
    assert "#undef CUTLASS_ENABLE_GDC_FOR_SM90" not in sm90
    stream_k = codegen.unit_source(cs.config(cs.LANE_SM90, "sk_128x128x64_c1x1"))
    assert stream_k.index("#undef CUTLASS_ENABLE_GDC_FOR_SM90") < stream_k.index("#include")
    assert "c->semaphore_bytes, 0, static_cast<cudaStream_t>(stream)" in stream_k
    spec90 = jit.module_spec(cs.LANE_SM90, "sm90", [cs.config(cs.LANE_SM90, cs.SM90_DEFAULT)])
    spec80 = jit.module_spec(cs.LANE_SM80, "sm80", [cs.config(cs.LANE_SM80, cs.SM80_DEFAULT)])
    assert "-DCUTLASS_ENABLE_GDC_FOR_SM90" in spec90.extra_flags
    assert "-DCUTLASS_ENABLE_GDC_FOR_SM90" not in spec80.extra_flags


def test_dtype_subset_and_validation():
    c = cs.config(cs.LANE_SM90, cs.SM90_DEFAULT)
    src = codegen.unit_source(c, ("bf16",))
    assert "case 1: return K1::run" in src and "case 0:" not in src
    with pytest.raises(ValueError):
        codegen.unit_source(c, ("fp32",))


def test_one_unit_per_compiled_config_in_a_module_spec():
    spec = jit.full_spec(cs.LANE_SM80, "sm90")
    assert len(spec.units) == len(cs.units(jit.lane_configs(cs.LANE_SM80, "sm90")))
    assert len({u.name for u in spec.units}) == len(spec.units)
    for unit in spec.units:
        assert len(unit.exports) == 2 and unit.exports[1] == unit.exports[0] + "_workspace"
    assert spec.arch == "90a" and spec.name == "gemm_sm80_mma"
    assert jit.module_spec(cs.LANE_SM80, "sm80", cs.space(cs.LANE_SM80)[:1]).arch == "80"


def test_production_set_and_compile_set(monkeypatch):
    ids = jit.production_ids(cs.LANE_SM90, "sm90", ["co_128x256x64_c1x1", "not_a_config"])
    assert ids[0] == cs.SM90_DEFAULT
    assert "co_128x256x64_c1x1" in ids and "not_a_config" not in ids
    assert set(cs.BASIS[cs.LANE_SM90]) <= set(ids)
    spec = jit.production_spec(cs.LANE_SM90, "sm90", referenced=["co_128x256x64_c1x1"])
    assert {u.name for u in spec.units} == set(ids)
    monkeypatch.setenv(jit.COMPILE_SET_ENV, "all")
    assert len(jit.production_spec(cs.LANE_SM90, "sm90", ()).units) == len(
        cs.space(cs.LANE_SM90))
    monkeypatch.setenv(jit.COMPILE_SET_ENV, "most")
    with pytest.raises(Exception, match="OASR_GEMM_COMPILE_SET"):
        jit.compile_set()


def test_production_set_drops_configs_that_do_not_fit_the_arch():
    big = "b128x256x64_w64x64x64_s4"
    assert big in jit.production_ids(cs.LANE_SM80, "sm90", [big])
    assert big not in jit.production_ids(cs.LANE_SM80, "sm86", [big])


def test_production_set_from_runtime_tiers_is_default_and_basis_when_empty():
    spec = jit.production_spec(cs.LANE_SM80, "sm80")
    assert {u.name for u in spec.units} == set(
        cs.units(cs.config(cs.LANE_SM80, i) for i in jit.production_ids(cs.LANE_SM80, "sm80")))


def test_impl_hash_is_stable_and_short():
    assert codegen.impl_hash() == codegen.impl_hash()
    assert re.fullmatch(r"[0-9a-f]{16}", codegen.impl_hash())


def test_impl_hash_follows_the_generated_units_and_flags(monkeypatch):
    """The stamp hashes what decides the binaries (each unit's source, the compile flags), so a
    changed unit marks tables stale and an edit of the generator's prose does not."""
    before = codegen.impl_hash()
    real = codegen.unit_source
    try:
        codegen.impl_hash.cache_clear()
        monkeypatch.setattr(codegen, "unit_source",
                            lambda c, dtypes=jit.ALL_DTYPES: real(c, dtypes) + "// edited\n")
        changed_unit = codegen.impl_hash()
        monkeypatch.setattr(codegen, "unit_source", real)
        monkeypatch.setitem(jit.LANE_FLAGS, cs.LANE_SM90, ("-DOASR_SOMETHING_ELSE",))
        codegen.impl_hash.cache_clear()
        changed_flags = codegen.impl_hash()
    finally:
        monkeypatch.undo()
        codegen.impl_hash.cache_clear()
    assert len({before, changed_unit, changed_flags}) == 3
    assert codegen.impl_hash() == before


def test_kernel_module_class_is_lazy_and_knows_its_unit():
    c = cs.config(cs.LANE_SM90, "ws_64x32x64_c1x1")
    module = jit.GemmKernelModule(c)
    assert module.exports == (codegen.symbol(c), codegen.workspace_symbol(c))
    spec = module.spec(("fp16",))
    assert [u.name for u in spec.units] == ["ws_64x32x64_c1x1"] and spec.arch == "90a"


def test_lane_jit_specs_for_oasr_tune_prebuild():
    import oasr_gemm.hooks

    lanes = {lane.name: lane for lane in oasr_gemm.hooks.oasr_register_lanes()}
    # Each lane's module, then the row log-softmax of op gemm_log_softmax (both scopes).
    prod, rows = lanes[cs.LANE_SM90].jit_specs("sm90", "production")
    assert {u.name for u in prod.units} == set(jit.production_ids(cs.LANE_SM90, "sm90"))
    assert rows == log_softmax.spec("sm90")
    whole, rows = lanes[cs.LANE_SM80].jit_specs("sm86", "all")
    assert rows == log_softmax.spec("sm86") and rows.arch == "86"
    assert whole.arch == "86" and len(whole.units) == len(
        cs.units(jit.lane_configs(cs.LANE_SM80, "sm86")))
    assert lanes[cs.LANE_SM90].jit_specs("sm80", "production") == []
    with pytest.raises(ValueError):
        jit.lane_specs(cs.LANE_SM90, "sm90", "some")


def test_subset_spec_links_the_matching_configs_with_the_whole_space_objects():
    spec = jit.subset_spec(cs.LANE_SM90, "sm90", ["co_*_swap", "ws_64x16x128_c1x1"])
    names = [u.name for u in spec.units]
    assert "ws_64x16x128_c1x1" in names and "co_128x144x64_c1x1_swap" in names
    assert all(n.startswith("co_") and n.endswith("_swap") or n == "ws_64x16x128_c1x1"
               for n in names)
    whole = {u.name: u for u in jit.full_spec(cs.LANE_SM90, "sm90").units}
    assert all(u.source == whole[u.name].source for u in spec.units)
    assert spec.name == "gemm_sm90_wgmma_subset"
    with pytest.raises(ValueError, match="no sm90_wgmma config"):
        jit.subset_spec(cs.LANE_SM90, "sm90", ["nothing_*"])
