"""Generated translation units, symbols and JIT specs (no compiler needed)."""

from __future__ import annotations

import pytest

from oasr_scaled_mm import codegen, jit
from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm.heuristic import ladder_for


def test_sm80_unit_names_kernels_per_output_dtype():
    c = cs.config(cs.LANE_SM80, "b128x128x64_w64x64x64_s5_sk")
    text = codegen.unit_source(c, cs.OP_MM)
    assert '#include "oasr_scaled_mm/sm80.cuh"' in text
    assert "using K0 = oasr_smm::sm80::Kernel<cutlass::half_t, 128, 128, 64, 64, 64, 64, 5, " \
           "true>;" in text
    assert "using K1 = oasr_smm::sm80::Kernel<cutlass::bfloat16_t," in text
    assert "OASR_EXPORT int32_t oasr_smm_sm80_b128x128x64_w64x64x64_s5_sk(" in text
    assert "OASR_EXPORT int64_t oasr_smm_sm80_b128x128x64_w64x64x64_s5_sk_workspace(" in text
    assert "float out_scale" in text and "K2" not in text


def test_sm90_quant_unit_and_schedules():
    c = cs.config(cs.LANE_SM90, "pp_128x128x128_c1x2")
    text = codegen.unit_source(c, cs.OP_QUANT)
    assert ("using K2 = oasr_smm::sm90::Kernel<int8_t, 128, 128, 128, 1, 2, 0, "
            "cutlass::gemm::KernelTmaWarpSpecializedPingpong, "
            "cutlass::epilogue::TmaWarpSpecialized, void>;") in text
    assert codegen.symbol(c, cs.OP_QUANT) == "oasr_smm_sm90_pp_128x128x128_c1x2_quant"
    sk = cs.config(cs.LANE_SM90, "sk_128x128x128_c1x1")
    assert "cutlass::gemm::StreamKScheduler" in codegen.unit_source(sk)
    assert "KernelTmaWarpSpecializedCooperative" in codegen.unit_source(sk)
    with pytest.raises(ValueError, match="no scaled_mm_quant launcher"):
        codegen.unit_source(sk, cs.OP_QUANT)
    with pytest.raises(ValueError, match="subset"):
        codegen.unit_source(c, cs.OP_MM, ("int8",))


def test_out_dtype_subsets():
    c = cs.config(cs.LANE_SM90, "ws_64x32x128_c1x1")
    text = codegen.unit_source(c, cs.OP_MM, ("bf16",))
    assert "using K1 =" in text and "using K0 =" not in text
    assert "case 1: return K1::run(o, *c, static_cast<cudaStream_t>(stream));" in text


def test_module_spec_units_flags_and_exports():
    configs = [cs.config(cs.LANE_SM90, i) for i in ("ws_64x32x128_c1x1", "sk_128x128x128_c1x1")]
    spec = jit.module_spec(cs.LANE_SM90, "sm90", configs)
    assert spec.arch == "90a" and spec.name == "scaled_mm_sm90_int8_wgmma"
    assert [u.name for u in spec.units] == ["ws_64x32x128_c1x1", "ws_64x32x128_c1x1_quant",
                                            "sk_128x128x128_c1x1"]
    assert "--fmad=false" in spec.extra_flags
    assert spec.units[1].exports == ("oasr_smm_sm90_ws_64x32x128_c1x1_quant",
                                     "oasr_smm_sm90_ws_64x32x128_c1x1_quant_workspace")
    assert jit.module_spec(cs.LANE_SM80, "sm86", configs[:1]).arch == "86"


def test_production_set_is_default_ladder_and_referenced():
    for lane, arch in ((cs.LANE_SM90, "sm90"), (cs.LANE_SM80, "sm80"), (cs.LANE_SM80, "sm90")):
        ids = jit.production_ids(lane, arch)
        assert ids[0] == cs.DEFAULTS[lane]
        assert set(ids) == {cs.DEFAULTS[lane], *ladder_for(lane, arch).rungs}
    ids = jit.production_ids(cs.LANE_SM90, "sm90", {"sk_128x128x128_c1x1", "nonexistent"})
    assert "sk_128x128x128_c1x1" in ids and "nonexistent" not in ids


def test_compile_set_switch(monkeypatch):
    monkeypatch.setenv(jit.COMPILE_SET_ENV, "all")
    spec = jit.production_spec(cs.LANE_SM80, "sm80")
    assert len(spec.units) == 9 + 7
    assert jit.lane_specs(cs.LANE_SM90, "sm90", "all")[0].name.endswith("_all")
    assert jit.lane_specs(cs.LANE_SM90, "sm80", "production") == []
    monkeypatch.setenv(jit.COMPILE_SET_ENV, "bogus")
    from oasr_core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="tuned"):
        jit.compile_set()


def test_kernel_module_class_builds_nothing_and_names_its_units():
    c = cs.config(cs.LANE_SM80, "b64x64x128_w32x32x128_s5")
    module = jit.ScaledMmKernelModule(c)
    assert module.ops == (cs.OP_MM, cs.OP_QUANT)
    spec = module.spec(ops=(cs.OP_MM,), out_dtypes=("fp16",))
    assert [u.name for u in spec.units] == ["b64x64x128_w32x32x128_s5"]
    assert module.exports(cs.OP_QUANT)[0].endswith("_quant")


def test_impl_hash_is_stable_and_short():
    assert codegen.impl_hash() == codegen.impl_hash() and len(codegen.impl_hash()) == 16
