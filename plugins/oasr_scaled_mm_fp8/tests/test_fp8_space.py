"""The fp8 lanes' config spaces, feasibility, shape heuristic and generated C++."""

from __future__ import annotations

import pytest
from oasr_core.types import Problem

from oasr_scaled_mm_fp8 import codegen, feasibility, heuristic, hooks, jit
from oasr_scaled_mm_fp8 import config_space as cs

LANES = {lane.name: lane for lane in hooks.oasr_register_lanes()}


def problem(n: int, k: int, m: int, op: str = cs.OP_MM) -> Problem:
    return Problem(cs.FAMILY, op, cs.DTYPE, (("N", n), ("K", k)), m)


def test_spaces_are_small_and_all_feasible():
    for lane in cs.LANES:
        full = cs.full_space(lane)
        assert 8 <= len(full) <= 16
        assert cs.space(lane) == full
        assert len({c.id for c in full}) == len(full)
        assert cs.DEFAULTS[lane] in {c.id for c in full}


def test_sm90_space_is_mostly_fast_accumulation_over_every_schedule():
    space = cs.space(cs.LANE_SM90)
    assert {c.params["schedule"] for c in space} == {"ws", "pingpong", "cooperative"}
    fast = [c for c in space if c.params["fast_accum"]]
    assert len(fast) == len(space) - 2 and all(c.id.endswith("_fa") for c in fast)
    assert {tuple(c.params["cluster"]) for c in space} == {(1, 1), (1, 2), (2, 1)}
    assert all(c.params["tile"][2] == 128 for c in space)


def test_static_rules_reject_what_cannot_build():
    assert not feasibility.is_feasible(cs.sm90_config((128, 128, 64)))        # K tile 64
    assert not feasibility.is_feasible(cs.sm90_config((256, 128, 128)))       # 256 not coop
    assert not feasibility.is_feasible(cs.sm90_config((128, 256, 128), (1, 1), "pingpong"))
    assert not feasibility.is_feasible(cs.sm90_config((128, 128, 128), (2, 2), "pingpong"))
    assert not feasibility.is_feasible(cs.sm89_config((64, 64, 128), (32, 32, 64), 5))
    big = cs.sm89_config((128, 256, 128), (64, 64, 128), 3)    # 144 KiB of shared memory
    assert feasibility.fits_arch(big, "sm90") and not feasibility.fits_arch(big, "sm89")
    assert not feasibility.is_feasible(cs.sm89_config((64, 64, 128), (32, 32, 128), 2))


def test_supports_needs_16_byte_rows():
    config = cs.config(cs.LANE_SM90, cs.SM90_DEFAULT)
    assert feasibility.supports(config, problem(768, 256, 1))
    assert not feasibility.supports(config, problem(760, 256, 64))
    assert not feasibility.supports(config, problem(768, 264, 64))
    assert not feasibility.supports(config, problem(768, 256, 0))


def test_sm89_lane_fits_its_arches_only():
    for config in cs.space(cs.LANE_SM89):
        assert feasibility.fits_arch(config, "sm89") and feasibility.fits_arch(config, "sm90")
        assert not feasibility.fits_arch(config, "sm80")


def test_heuristic_rungs_one_config_per_tile_largest_first():
    rungs = heuristic.rungs(cs.space(cs.LANE_SM90))
    assert [c.id for c in rungs] == [
        "co_256x128x128_c1x1_fa", "co_128x256x128_c1x1_fa", "ws_128x128x128_c1x1_fa",
        "ws_128x64x128_c1x1_fa", "ws_64x128x128_c1x1_fa", "ws_64x64x128_c1x1_fa",
        "ws_64x32x128_c1x1_fa"]
    assert all(c.params["fast_accum"] for c in heuristic.rungs(cs.space(cs.LANE_SM89)))


@pytest.mark.parametrize(("n", "m", "want"), [
    (4096, 16384, "co_256x128x128_c1x1_fa"),    # 64 x 32 CTAs
    (256, 8192, "ws_128x128x128_c1x1_fa"),      # 256x128: 32 x 2 = 64 < 66
    (256, 4096, "ws_128x64x128_c1x1_fa"),       # 128x128: 32 x 2 = 64; 128x64: 128
    (256, 64, "ws_64x32x128_c1x1_fa"),          # nothing fills half a wave
])
def test_the_unfitted_ladder_picks_the_largest_tile_launching_half_a_wave(n, m, want,
                                                                           monkeypatch):
    monkeypatch.setattr(heuristic, "ARCH_LADDERS", {})
    lane = LANES[cs.LANE_SM90]
    assert heuristic.heuristic_config(problem(n, 1024, m), lane, sm_count=132).id == want


@pytest.mark.parametrize(("n", "k", "m", "want"), [
    (4096, 1024, 16384, "pp_128x128x128_c2x1_fa"),   # 4096 CTAs of 128x128 >= 6 waves
    (4096, 2048, 16384, "pp_128x128x128_c1x1_fa"),   # no 2x1 cluster above K = 1024
    (1024, 1024, 4096, "pp_128x128x128_c1x1_fa"),    # 256 CTAs: one wave and more
    (512, 1024, 4096, "ws_128x128x128_c1x1_fa"),     # 128 CTAs: half a wave, not one
    (256, 1024, 64, "ws_64x32x128_c1x1_fa"),
    (4096, 8192, 4096, "pp_128x128x128_c1x1_fa"),    # K > 4096: the deep band's thresholds
])
def test_the_shipped_fitted_ladder_serves_sm90(n, k, m, want):
    lane = LANES[cs.LANE_SM90]
    assert heuristic.ladder_for(lane, "sm90").fitted
    assert heuristic.heuristic_config(problem(n, k, m), lane, sm_count=132,
                                      arch="sm90").id == want


def test_a_malformed_fitted_file_is_one_warning_and_the_unfitted_tables(tmp_path):
    from oasr_core.errors import OasrWarning

    bad = tmp_path / "fitted_ladders.json"
    bad.write_text('{"schema_version": 1, "ladders": [{"lane": "sm90_fp8_wgmma"}]}')
    with pytest.warns(OasrWarning, match=r"oasr_scaled_mm_fp8: fitted ladder file .* lacks"):
        assert heuristic.load_fitted(bad) == {}
    assert heuristic.load_fitted(tmp_path / "missing.json") == {}


def test_the_heuristic_stamp_names_the_tables(monkeypatch):
    shipped = heuristic.ladder_digest()
    assert heuristic.soft_validators()["heuristic"] == shipped
    monkeypatch.setattr(heuristic, "ARCH_LADDERS", {})
    assert heuristic.ladder_digest() != shipped


def test_heuristic_without_a_device_uses_the_lanes_stated_sms():
    lane = LANES[cs.LANE_SM90]
    assert heuristic.sentinel_heuristic(problem(256, 1024, 4096), lane) == \
        heuristic.heuristic_config(problem(256, 1024, 4096), lane, sm_count=132)


def test_production_set_holds_default_and_heuristic_tiles():
    ids = jit.PRODUCTION.ids(cs.LANE_SM90, "sm90")
    assert cs.SM90_DEFAULT in ids
    assert set(heuristic.ladder_for(cs.LANE_SM90, "sm90").rungs) <= set(ids)


def test_units_name_their_kernels_schedules_and_symbols():
    fast = cs.config(cs.LANE_SM90, "pp_128x128x128_c1x2_fa")
    text = codegen.unit_source(fast, cs.OP_MM)
    assert "KernelTmaWarpSpecializedPingpongFP8FastAccum" in text
    assert "oasr_fp8::sm90::Kernel<cutlass::bfloat16_t, 128, 128, 128, 1, 2, 0" in text
    assert "cutlass::half_t" in text and "float_e4m3_t" not in text.split("namespace {")[1][:40]
    assert f"OASR_EXPORT int32_t {codegen.symbol(fast)}(" in text
    promoted = codegen.unit_source(cs.config(cs.LANE_SM90, "co_128x128x128_c1x1"), cs.OP_QUANT)
    assert "KernelTmaWarpSpecializedCooperative," in promoted and "FastAccum" not in promoted
    assert "Kernel<cutlass::float_e4m3_t," in promoted
    staged = codegen.unit_source(cs.config(cs.LANE_SM89, "b128x128x64_w64x64x64_s5_st"),
                                 cs.OP_MM, ("bf16",))
    assert "oasr_fp8::sm89::Kernel<cutlass::bfloat16_t, 128, 128, 64, 64, 64, 64, 5, false>" \
        in staged
    with pytest.raises(ValueError, match="subset"):
        codegen.unit_source(fast, cs.OP_QUANT, ("bf16",))


def test_every_unit_has_its_own_symbols():
    symbols = [codegen.symbol(c, op) for lane in cs.LANES for c in cs.space(lane)
               for op in cs.OPS]
    assert len(set(symbols)) == len(symbols)


def test_impl_hash_is_stable_and_covers_the_headers():
    assert codegen.impl_hash() == codegen.impl_hash()
    assert (codegen.csrc_dir() / "oasr_scaled_mm_fp8" / "sm90.cuh").is_file()
