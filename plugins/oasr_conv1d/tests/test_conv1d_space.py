"""The lanes' spaces: dense and depthwise configs, routing by problem kind, the heuristic,
the units and the signature keys."""

from __future__ import annotations

import pytest
from oasr_core.types import Problem

from oasr_conv1d import depthwise as dw
from oasr_conv1d import jit, lanes
from oasr_conv1d.depthwise import codegen as dw_codegen
from oasr_conv1d.geometry import LANE_SM80, LANE_SM90, LANES
from oasr_conv1d.recorder import DIMS


def problem(cin, cout, k, stride=1, pad=0, dil=1, groups=1, batch=2, t_in=100, op="conv1d"):
    t_out = (t_in + 2 * pad - dil * (k - 1) - 1) // stride + 1
    return Problem(family="conv1d", op=op, dtype="fp16",
                   dims=tuple(zip(DIMS, (cin, cout, k, stride, pad, dil, groups), strict=True)),
                   m=batch * t_out, point=f"{batch}x{t_in}")


CONFORMER = problem(256, 256, 31, pad=15, groups=256, batch=16, t_in=256, op="conv1d_silu")
WHISPER = problem(80, 512, 3, pad=1, batch=8, t_in=3000, op="conv1d_gelu")


@pytest.mark.parametrize("lane", LANES)
def test_each_kind_is_offered_only_its_problems(lane):
    space = lanes.space(lane)
    depthwise = [c for c in space if dw.is_depthwise(c)]
    dense = [c for c in space if not dw.is_depthwise(c)]
    assert depthwise and dense
    assert all(not lanes.supports(c, WHISPER) for c in depthwise)
    assert all(not lanes.supports(c, CONFORMER) for c in dense)
    assert any(lanes.supports(c, CONFORMER) for c in depthwise)
    assert any(lanes.supports(c, WHISPER) for c in dense)
    grouped = problem(768, 768, 128, pad=64, groups=16)
    assert not any(lanes.supports(c, grouped) for c in space), "neither kind takes it"


def test_depthwise_predicates_follow_the_kernels_rules():
    c31 = lanes.config(LANE_SM90, "dw31_v8_8x16_tp8_smem")
    general = lanes.config(LANE_SM90, "dwg_v2_32x4_tp4_reg")
    assert dw.supports(c31, CONFORMER)
    assert not dw.supports(c31, problem(256, 256, 15, pad=7, groups=256)), "fixed taps"
    assert not dw.supports(c31, problem(256, 256, 31, pad=15, groups=256, stride=2))
    assert not dw.supports(c31, problem(148, 148, 31, pad=15, groups=148)), "148 % 8"
    assert dw.supports(general, problem(6, 6, 5, stride=2, pad=2, dil=3, groups=6))
    assert dw.space.smem_bytes(c31, 31) == 31 * 64 * 4 + (127 + 30 + 1) * 64 * 2
    big = problem(256, 256, 1025, pad=512, groups=256)
    assert not any(dw.supports(c, big) for c in lanes.space(LANE_SM80) if dw.is_depthwise(c))
    assert not dw.supports(c31, problem(256, 256, 31, pad=15, groups=256, batch=70000)), "grid z"


def test_the_static_rule_rejects_a_register_hungry_tile():
    fat = dw.space.config(LANE_SM90, taps=31, vec=8, cv=8, ty=16, tp=16, stage="reg")
    assert not dw.is_feasible(fat)
    assert not lanes.is_feasible(dw.space.config("gemm_lane", taps=31, vec=8, cv=8, ty=16, tp=4,
                                                 stage="reg"))


@pytest.mark.parametrize("lane", LANES)
def test_the_heuristic_names_a_config_that_runs_the_problem(lane):
    record = type("L", (), {"name": lane})()
    assert lanes.heuristic(CONFORMER, record).id == dw.DEFAULT
    odd = problem(6, 6, 5, stride=2, pad=2, groups=6)
    assert lanes.heuristic(odd, record).id == dw.space.NARROW_DEFAULT
    assert lanes.supports(lanes.heuristic(WHISPER, record), WHISPER)


def test_production_links_the_default_and_the_heuristics_picks():
    ids = jit.PRODUCTION.ids(LANE_SM90, "sm90")
    assert ids[0] == lanes.DEFAULTS[LANE_SM90]
    assert set(lanes.DEPTHWISE_ALWAYS) <= set(ids)
    spec = jit.production_spec(LANE_SM90, "sm90", referenced=("dw31_v4_16x8_tp8_smem",))
    names = [u.name for u in spec.units]
    assert "dw31_v4_16x8_tp8_smem" in names and len(names) == len(set(names))
    assert spec.arch == "90a"
    assert jit.lane_specs(LANE_SM80, "sm80", "all")[0].name == "conv1d_sm80"


def test_a_depthwise_unit_exports_the_family_abi():
    config = lanes.config(LANE_SM80, dw.DEFAULT)
    text = dw_codegen.unit_source(config)
    symbol = dw_codegen.symbol(config)
    assert symbol == "oasr_conv1d_sm80_dw31_v8_8x16_tp8_reg" == lanes.symbol(config)
    assert f"OASR_EXPORT int32_t {symbol}(const oasr_kit::CallArgs* c, " \
           "const oasr_conv1d::Geometry* geo" in text
    assert f"OASR_EXPORT int64_t {symbol}_workspace(const oasr_conv1d::Geometry* geo, " \
           "int32_t dtype)" in text
    assert "Kernel<__half, 8, 8, 16, 8, 31, oasr_conv1d::depthwise::kStageReg>" in text
    assert "Kernel<__nv_bfloat16," in text
    with pytest.raises(ValueError, match="dtypes"):
        dw_codegen.unit_source(config, ("fp32",))


def test_signature_keys_name_the_op_and_every_dim():
    from oasr_core.database.keys import signature_key

    (family,) = __import__("oasr_conv1d.hooks").hooks.oasr_register_families()
    key = signature_key(family, "conv1d", "half", (80, 512, 3, 1, 1, 1, 1))
    assert key == "conv1d|op=conv1d|dt=half|Cin=80|Cout=512|k=3|stride=1|pad=1|dil=1|groups=1"
