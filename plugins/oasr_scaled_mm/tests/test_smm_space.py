"""The config spaces as data, and what the feasibility predicates keep in and out."""

from __future__ import annotations

import json

import pytest
from oasr_core.types import Config, Problem

from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm import feasibility as fe


def _problem(n: int, k: int, m: int, op: str = cs.OP_MM) -> Problem:
    return Problem(cs.FAMILY, op, "int8", (("N", n), ("K", k)), m)


def test_sm80_space_is_seven_data_parallel_tiles_and_two_stream_k():
    configs = cs.space(cs.LANE_SM80)
    assert len(configs) == 9 and configs == cs.full_space(cs.LANE_SM80)
    dp = [c for c in configs if not c.params["stream_k"]]
    sk = [c for c in configs if c.params["stream_k"]]
    assert len(dp) == 7 and len(sk) == 2
    assert {c.id.removesuffix("_sk") for c in sk} <= {c.id for c in dp}
    assert cs.SM80_DEFAULT in {c.id for c in dp}
    for c in configs:
        p = c.params
        assert set(p) == {"tile", "warp", "stages", "stream_k", "schedule", "unit"}
        assert c.id == p["unit"] == "b{}x{}x{}_w{}x{}x{}_s{}".format(
            *p["tile"], *p["warp"], p["stages"]) + ("_sk" if p["stream_k"] else "")


def test_sm90_space_holds_the_study_winners_and_stays_small():
    ids = {c.id for c in cs.space(cs.LANE_SM90)}
    assert 8 <= len(ids) <= 14
    for winner in ("ws_64x32x128_c1x1", "ws_64x64x128_c1x1", "ws_64x128x128_c1x1",
                   "ws_128x64x128_c1x1", "ws_128x128x128_c1x1", "pp_128x128x128_c1x1",
                   "pp_128x128x128_c1x2", "pp_128x128x128_c2x1", "co_128x128x128_c1x1",
                   "co_256x128x128_c1x1"):
        assert winner in ids
    assert cs.SM90_DEFAULT in ids
    schedules = {(c.params["schedule"], c.params["stream_k"]) for c in cs.space(cs.LANE_SM90)}
    assert schedules == {("ws", False), ("pingpong", False), ("cooperative", False),
                         ("cooperative", True)}


def test_configs_round_trip_through_json():
    for lane in cs.LANES:
        for c in cs.space(lane):
            back = Config.from_json(c.id, json.loads(json.dumps(c.to_json())))
            assert back == c and dict(back.params) == dict(c.params)


def test_units_per_op_and_no_quantizing_stream_k():
    sk = cs.config(cs.LANE_SM90, "sk_128x128x128_c1x1")
    dp = cs.config(cs.LANE_SM90, "ws_64x32x128_c1x1")
    assert cs.units_of(dp) == ((cs.OP_MM, "ws_64x32x128_c1x1"),
                               (cs.OP_QUANT, "ws_64x32x128_c1x1_quant"))
    assert cs.units_of(sk) == ((cs.OP_MM, "sk_128x128x128_c1x1"),)
    assert not cs.serves(sk, cs.OP_QUANT) and cs.serves(sk, cs.OP_MM)
    with pytest.raises(ValueError, match="not one of"):
        cs.serves(dp, "gemm")


@pytest.mark.parametrize(("params", "ok"), [
    ({}, True),
    ({"warp": [64, 64, 64]}, False),            # warp K must be the whole K tile
    ({"warp": [48, 32, 128]}, False),           # does not divide the tile
    ({"tile": [64, 48, 128], "warp": [32, 16, 128]}, False),  # N not a multiple of 32
    ({"stages": 2}, False),                     # sm80 multistage needs >= 3
    ({"tile": [256, 256, 128], "warp": [64, 64, 128], "stages": 3}, False),  # 192 KiB smem
])
def test_sm80_static_rules(params, ok):
    base = dict(cs.config(cs.LANE_SM80, "b64x64x128_w32x32x128_s5").params)
    base.update(params)
    assert fe.is_feasible(Config(id="probe", lane=cs.LANE_SM80, params=base)) is ok


@pytest.mark.parametrize(("params", "ok"), [
    ({}, True),
    ({"tile": [256, 128, 128]}, False),                       # ws holds <= 128 rows
    ({"tile": [64, 40, 128]}, False),                         # N not a multiple of 16
    ({"tile": [64, 64, 32]}, False),                          # K tile 64 or 128
    ({"cluster": [2, 2]}, False),
    ({"stream_k": True}, False),                              # Stream-K needs cooperative
    ({"tile": [128, 256, 128]}, False),                       # 256 accumulators per thread
    ({"schedule": "cooperative", "tile": [64, 64, 128]}, False),
    ({"schedule": "cooperative", "tile": [256, 128, 128]}, True),
])
def test_sm90_static_rules(params, ok):
    base = dict(cs.config(cs.LANE_SM90, "ws_64x64x128_c1x1").params)
    base.update(params)
    assert fe.is_feasible(Config(id="probe", lane=cs.LANE_SM90, params=base)) is ok


def test_arch_fit_by_shared_memory():
    for c in cs.space(cs.LANE_SM80):
        assert fe.sm80_smem(c) <= fe.SMEM_LIMIT["sm86"], c.id  # the list fits every arch
        assert all(fe.fits_arch(c, a) for a in fe.SM80_ARCHES)
        assert not fe.fits_arch(c, "sm75")
    big = Config(id="big", lane=cs.LANE_SM80, params={
        **cs.config(cs.LANE_SM80, "b128x128x128_w64x64x128_s3").params, "stages": 4})
    assert fe.fits_arch(big, "sm80") and not fe.fits_arch(big, "sm86")
    assert all(fe.fits_arch(c, "sm90") and not fe.fits_arch(c, "sm80")
               for c in cs.space(cs.LANE_SM90))


def test_supports_alignment_stream_k_and_the_quant_op():
    dp = cs.config(cs.LANE_SM80, "b64x64x128_w32x32x128_s5")
    sk = cs.config(cs.LANE_SM80, "b64x64x128_w32x32x128_s5_sk")
    assert fe.supports(dp, _problem(768, 256, 1))
    assert fe.supports(dp, _problem(768, 256, 100, cs.OP_QUANT))
    assert not fe.supports(dp, _problem(760, 256, 100))       # N % 16
    assert not fe.supports(dp, _problem(768, 264, 100))       # K % 16
    assert fe.supports(sk, _problem(768, 4096, 16))
    assert not fe.supports(sk, _problem(768, 4096, 16, cs.OP_QUANT))
    assert not fe.supports(sk, _problem(768, 128, 16))        # one K tile: nothing to split

