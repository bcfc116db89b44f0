"""The dense conv1d config spaces: invariants, feasibility, per-problem support, features."""

from __future__ import annotations

import json

import pytest
from oasr_core.cost_model.features import FEATURE_KEYS
from oasr_core.types import Config, Problem

from oasr_conv1d import dense
from oasr_conv1d.dense import config_space as space
from oasr_conv1d.dense import feasibility
from oasr_conv1d.geometry import out_length


def problem(cin: int, cout: int, k: int, *, stride: int = 1, pad: int = 0, dil: int = 1,
            groups: int = 1, batch: int = 1, t_in: int = 3000, dtype: str = "fp16") -> Problem:
    t_out = out_length(t_in, k, stride, pad, dil)
    return Problem(family="conv1d", op="conv1d", dtype=dtype,
                   dims={"Cin": cin, "Cout": cout, "k": k, "stride": stride, "pad": pad,
                         "dil": dil, "groups": groups}, m=batch * t_out)


WHISPER_CONV1 = problem(80, 512, 3, pad=1)
WHISPER_CONV2 = problem(512, 512, 3, stride=2, pad=1)
WAV2VEC2_STEM = problem(1, 512, 10, stride=5, t_in=16000)
WAV2VEC2_STACK = [problem(512, 512, 3, stride=2, t_in=3199), problem(512, 512, 2, stride=2,
                                                                      t_in=199)]


@pytest.mark.parametrize("lane", dense.LANES)
def test_every_listed_config_is_feasible_and_ids_are_unique(lane):
    listed = dense.listed(lane)
    assert dense.space(lane) == listed
    ids = [c.id for c in listed]
    assert len(ids) == len(set(ids))
    assert all(c.lane == lane and c.params["unit"] == c.id for c in listed)
    assert 8 <= len(listed) <= 14


@pytest.mark.parametrize("lane", dense.LANES)
def test_configs_are_json_data_that_round_trip(lane):
    for config in dense.space(lane):
        raw = json.loads(json.dumps(config.to_json()))
        back = Config.from_json(config.id, raw)
        assert back == config and dict(back.params) == dict(config.params)


@pytest.mark.parametrize("lane", dense.LANES)
def test_the_default_is_in_the_space_and_runs_the_common_widths(lane):
    default = dense.config(lane, dense.default_id(lane))
    assert dense.supports(default, WHISPER_CONV1) and dense.supports(default, WHISPER_CONV2)
    assert dense.fits_arch(default, "sm90")


def test_unknown_lanes_are_refused_by_name():
    with pytest.raises(KeyError, match="not a dense conv1d lane"):
        dense.listed("sm80_mma")
    with pytest.raises(KeyError, match="not a dense conv1d lane"):
        dense.default_id("sm80_mma")
    assert not dense.is_feasible(Config(id="x", lane="sm80_mma", params={"cutlass": 2}))


def test_static_rules_reject_what_would_not_build_or_would_be_wrong():
    good = space.sm80_config((128, 128, 32), (64, 64, 32), 3)
    assert dense.is_feasible(good)
    # One 16-bit element per access is 2 bytes: cp.async cannot move it.
    assert not dense.is_feasible(space.sm80_config((128, 64, 32), (64, 32, 32), 3,
                                                   "few_channels", 1, 8))
    assert dense.is_feasible(space.sm80_config((128, 64, 32), (64, 32, 32), 2,
                                               "few_channels", 1, 8))
    assert not dense.is_feasible(space.sm80_config((128, 16, 32), (32, 16, 32), 3))
    assert not dense.is_feasible(space.sm80_config((128, 128, 32), (64, 64, 32), 3,
                                                   "few_channels", 8, 8))
    assert not dense.is_feasible(space.sm80_config((256, 256, 64), (64, 64, 64), 4))
    assert not dense.is_feasible(space.sm90_config((256, 128, 64)))
    assert not dense.is_feasible(space.sm90_config((128, 128, 64), (2, 2)))
    assert not dense.is_feasible(space.sm90_config((128, 256, 64)))
    with pytest.raises(ValueError, match="schedule 'cooperative'"):
        space.sm90_config((128, 128, 64), schedule="cooperative")
    # A 3.x config is only a Hopper-lane config.
    moved = Config(id="x", lane=dense.LANE_SM80, params=dict(space.sm90_config((128, 128, 64))
                                                             .params))
    assert not dense.is_feasible(moved)


def test_the_hopper_lane_runs_only_on_sm90_and_the_2x_lane_everywhere():
    for config in dense.space(dense.LANE_SM90):
        assert dense.fits_arch(config, "sm90") and not dense.fits_arch(config, "sm80")
    for config in dense.space(dense.LANE_SM80):
        assert dense.fits_arch(config, "sm80") and dense.fits_arch(config, "sm90")
    big = dense.config(dense.LANE_SM80, "ig_b128x256x32_w64x64x32_s3")
    assert feasibility.sm80_smem(big) <= feasibility.SMEM_LIMIT["sm86"]


@pytest.mark.parametrize("lane", dense.LANES)
def test_whisper_front_end_is_served_by_the_16_byte_kernels(lane):
    for prob in (WHISPER_CONV1, WHISPER_CONV2, *WAV2VEC2_STACK):
        ok = [c for c in dense.space(lane) if dense.supports(c, prob)]
        assert all(c.params["align_in"] in (1, 2, 4, 8) for c in ok)
        assert any(c.params["align_in"] == 8 and c.params["align_out"] == 8 for c in ok)
        if lane == dense.LANE_SM90:
            assert any(c.params["cutlass"] == 3 for c in ok)


@pytest.mark.parametrize("lane", dense.LANES)
def test_raw_audio_input_runs_on_the_narrow_kernels_only(lane):
    ok = {c.id for c in dense.space(lane) if dense.supports(c, WAV2VEC2_STEM)}
    assert ok == {"ig_b128x64x32_w64x32x32_s2_fc_a1x8", "ig_b64x64x32_w32x32x32_s2_an_a1x1"}
    two = {c.id for c in dense.space(lane) if dense.supports(c, problem(2, 64, 3))}
    assert "ig_b128x64x32_w64x32x32_s3_fc_a2x8" in two
    wide = {c.params.get("algorithm") for c in dense.space(lane)
            if dense.supports(c, WHISPER_CONV1)}
    assert "few_channels" not in wide


@pytest.mark.parametrize("lane", dense.LANES)
def test_odd_widths_fall_to_the_element_wise_kernel(lane):
    odd = problem(7, 13, 3, pad=1, batch=2, t_in=50)
    assert {c.id for c in dense.space(lane) if dense.supports(c, odd)} == {
        "ig_b64x64x32_w32x32x32_s2_an_a1x1"}


def test_strides_past_the_tma_limit_leave_the_hopper_kernels():
    strided = problem(512, 512, 16, stride=10, t_in=16000)
    kinds = {c.params["cutlass"] for c in dense.space(dense.LANE_SM90)
             if dense.supports(c, strided)}
    assert kinds == {2}


def test_long_windows_leave_the_optimized_iterator():
    long = problem(512, 512, 40, pad=20)
    ok = {c.params["algorithm"] for c in dense.space(dense.LANE_SM80) if dense.supports(c, long)}
    assert "optimized" not in ok and "analytic" in ok


@pytest.mark.parametrize("lane", dense.LANES)
def test_grouped_problems_and_oversized_tensors_are_not_dense(lane):
    grouped = problem(512, 512, 3, pad=1, groups=512)
    huge = problem(512, 512, 3, pad=1, batch=1024, t_in=3000)
    for config in dense.space(lane):
        assert not dense.supports(config, grouped)
        if config.params["cutlass"] == 2:
            assert not dense.supports(config, huge)


@pytest.mark.parametrize("lane", dense.LANES)
def test_cost_features_follow_the_models_contract(lane):
    kinds = set()
    for config in dense.space(lane):
        features = dense.cost_features(config)
        assert set(features) <= set(FEATURE_KEYS)
        assert features["tile"] == list(config.params["tile"])
        json.dumps(features)
        kinds.add(features["kind"])
        assert features.get("sync_mma", False) == (config.params["cutlass"] == 2)
    assert len(kinds) >= 2
