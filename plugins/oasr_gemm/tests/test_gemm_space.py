"""The config spaces as data: what they contain, and what the predicates keep out."""

from __future__ import annotations

import json

import pytest
from oasr_core.types import Problem

from oasr_gemm import config_space as cs
from oasr_gemm import feasibility as fe


def _ids(lane: str) -> set[str]:
    return {c.id for c in cs.space(lane)}


def _problem(n: int, k: int, m: int, op: str = "gemm") -> Problem:
    return Problem("gemm", op, "fp16", (("N", n), ("K", k)), m)


def test_gpu_md_winners_are_in_the_sm90_space():
    ids = _ids(cs.LANE_SM90)
    for winner in ("ws_64x32x64_c1x1", "ws_64x64x128_c1x1", "pp_128x128x64_c1x1",
                   "pp_128x128x64_c1x2", "pp_128x128x64_c2x1"):
        assert winner in ids


def test_sm90_space_looks_beyond_the_winners():
    configs = cs.space(cs.LANE_SM90)
    widths = {tuple(c.params["tile"][:2]) for c in configs}
    for wanted in ((64, 96), (64, 80), (128, 80), (128, 96), (128, 112), (128, 144),
                   (128, 160), (128, 192)):
        assert wanted in widths, wanted
    schedules = {(c.params["schedule"], c.params["stream_k"]) for c in configs}
    assert schedules == {("ws", False), ("pingpong", False), ("cooperative", False),
                         ("cooperative", True)}
    assert {tuple(c.params["cluster"]) for c in configs} == {(1, 1), (1, 2), (2, 1), (4, 1)}
    assert any(c.params["swap_ab"] for c in configs)
    assert any(c.params["stages"] for c in configs)
    assert 60 <= len(configs) <= 140


def test_sm80_space_size_and_shared_units():
    configs = cs.space(cs.LANE_SM80)
    units = cs.units(configs)
    assert 40 <= len(units) <= 80
    by_unit: dict[str, list[str]] = {}
    for c in configs:
        by_unit.setdefault(c.params["unit"], []).append(c.id)
    assert set(by_unit["b64x64x64_w32x32x64_s3"]) >= {
        "b64x64x64_w32x32x64_s3", "b64x64x64_w32x32x64_s3_spk2", "b64x64x64_w32x32x64_s3_spk8"}
    assert set(by_unit["b32x64x64_w16x32x64_s3_pk"]) == {
        f"b32x64x64_w16x32x64_s3_pk{s}" for s in (2, 4, 8)}
    assert any(c.params["stream_k"] for c in configs)


def test_no_block_n_16_tile_survives_on_the_2x_lane():
    listed = [c for c in cs.full_space(cs.LANE_SM80) if c.params["tile"][1] == 16]
    assert listed, "the space lists a block_n=16 tile so that the predicate is exercised"
    assert not any(fe.is_feasible(c) for c in listed)
    assert all(c.params["tile"][1] >= 32 for c in cs.space(cs.LANE_SM80))


@pytest.mark.parametrize(("block_n", "warps_m", "warps_n", "warp_m", "ok"), [
    (16, 4, 1, 32, False),    # 128x16 / 32x16: 16 lanes of 32 mapped (the production bug)
    (16, 4, 1, 64, False),    # 256x16 / 64x16
    (32, 2, 1, 32, True),     # 64x32 / 32x32
    (32, 2, 2, 32, False),    # 64x32 / 32x16: zero row iterations (static_assert)
    (64, 2, 2, 32, True),     # 64x64 / 32x32
    (128, 2, 2, 64, True),    # 128x128 / 64x64
    (256, 2, 4, 64, True),    # 128x256 / 64x64
])
def test_epilogue_thread_map_predicate(block_n, warps_m, warps_n, warp_m, ok):
    assert fe.epilogue_covers_warp(block_n, warps_m, warps_n, 1, warp_m, 8, 16) is ok


def test_shared_memory_rule_per_arch():
    big = cs.sm80_config((128, 256, 64), (64, 64, 64), 4)
    assert fe.sm80_smem(big) == 4 * (128 + 256) * 64 * 2
    assert fe.is_feasible(big) and fe.fits_arch(big, "sm90")
    assert not fe.fits_arch(big, "sm80") and not fe.fits_arch(big, "sm86")
    small = cs.sm80_config((64, 64, 64), (32, 32, 64), 3)
    assert all(fe.fits_arch(small, a) for a in fe.SM80_ARCHES)
    too_deep = cs.sm80_config((256, 128, 64), (64, 64, 64), 8)
    assert not fe.is_feasible(too_deep)
    hopper = cs.sm90_config((128, 128, 128), stages=7)
    assert not fe.is_feasible(hopper)
    assert not fe.fits_arch(cs.sm90_config((64, 64, 64)), "sm80")


def test_hopper_register_and_schedule_rules():
    assert not fe.is_feasible(cs.sm90_config((128, 256, 64), schedule="pingpong"))
    assert fe.is_feasible(cs.sm90_config((128, 256, 64), schedule="cooperative"))
    assert not fe.is_feasible(cs.sm90_config((64, 128, 64), schedule="cooperative"))
    assert not fe.is_feasible(cs.sm90_config((128, 128, 64), schedule="pingpong",
                                             stream_k=True))
    assert not fe.is_feasible(cs.sm90_config((128, 100, 64)))
    assert not fe.is_feasible(cs.sm90_config((128, 72, 64)))  # 8-column epilogue tile
    assert fe.is_feasible(cs.sm90_config((128, 80, 64)))


def test_hopper_cluster_rule():
    assert fe.is_feasible(cs.sm90_config((128, 80, 64), (4, 1), swap_ab=True))
    assert fe.is_feasible(cs.sm90_config((128, 128, 64), (2, 2)))
    assert not fe.is_feasible(cs.sm90_config((128, 80, 64), (8, 1), swap_ab=True))
    assert not fe.is_feasible(cs.sm90_config((128, 128, 64), (2, 4)))
    assert not fe.is_feasible(cs.sm90_config((128, 128, 64), (0, 1)))


def test_hopper_epilogue_subtile_rules():
    wide = cs.sm90_config((128, 128, 64), schedule="pingpong", epilogue=(64, 64))
    assert wide.id == "pp_128x128x64_c1x1_e64x64" and tuple(wide.params["epilogue"]) == (64, 64)
    assert fe.is_feasible(wide)
    assert "epilogue" not in cs.sm90_config((128, 128, 64), schedule="pingpong").params
    # CUTLASS's static_assert: 64 rows for ws/ping-pong, 128 for cooperative
    assert not fe.is_feasible(cs.sm90_config((128, 128, 64), schedule="pingpong",
                                             epilogue=(128, 64)))
    assert not fe.is_feasible(cs.sm90_config((128, 128, 64), schedule="cooperative",
                                             epilogue=(64, 64)))
    assert fe.is_feasible(cs.sm90_config((256, 128, 64), schedule="cooperative",
                                         epilogue=(128, 128)))
    assert not fe.is_feasible(cs.sm90_config((128, 96, 64), epilogue=(64, 64)))  # 96 % 64
    assert not fe.is_feasible(cs.sm90_config((128, 160, 64), epilogue=(64, 80)))  # 80 % 32
    # the subtile is double-buffered in shared memory: 2 x 64 x 128 x 2 bytes
    assert fe.sm90_smem(cs.sm90_config((64, 128, 64), stages=4, epilogue=(64, 128))) == \
        4 * (64 + 128) * 64 * 2 + 2 * 64 * 128 * 2
    assert fe.sm90_smem(cs.sm90_config((64, 128, 64), stages=4)) == 4 * 192 * 64 * 2 + 8192


def test_short_k_probes_are_in_the_sm90_space():
    ids = _ids(cs.LANE_SM90)
    for probe in ("pp_128x128x64_c1x1_e64x64", "co_256x128x64_c1x1_e128x64",
                  "ws_64x128x64_c1x1_s4_e64x128", "ws_128x128x64_c1x1_s2",
                  "ws_64x128x128_c1x1_s2"):
        assert probe in ids


def test_split_k_rules_per_problem():
    spk8 = cs.config(cs.LANE_SM80, "b64x64x64_w32x32x64_s3_spk8")
    assert fe.supports(spk8, _problem(256, 512, 64))       # 8 K tiles of 64
    assert not fe.supports(spk8, _problem(256, 256, 64))   # 4 K tiles < 8
    pk8 = cs.config(cs.LANE_SM80, "b64x64x64_w32x32x64_s3_pk8")
    assert fe.supports(pk8, _problem(512, 1024, 1024))
    assert not fe.supports(pk8, _problem(4096, 1024, 4096))  # 512 MiB of partials
    plain = cs.config(cs.LANE_SM80, cs.SM80_DEFAULT)
    assert fe.supports(plain, _problem(256, 64, 1))


def test_alignment_rule():
    default = cs.config(cs.LANE_SM90, cs.SM90_DEFAULT)
    assert fe.supports(default, _problem(1024, 256, 7))
    assert not fe.supports(default, _problem(1020, 256, 7))
    assert not fe.supports(default, _problem(1024, 250, 7))


def test_defaults_and_basis_are_feasible_members():
    for lane in (cs.LANE_SM80, cs.LANE_SM90):
        ids = _ids(lane)
        assert cs.DEFAULTS[lane] in ids
        assert set(cs.BASIS[lane]) <= ids


def test_params_are_explicit_json():
    for lane in (cs.LANE_SM80, cs.LANE_SM90):
        for c in cs.space(lane):
            raw = json.loads(json.dumps(c.to_json()))
            assert raw["lane"] == lane and raw["tile"] == list(c.params["tile"])
            assert {"tile", "stages", "split_k", "stream_k", "unit"} <= set(raw)
            assert ("warp" in raw) == (lane == cs.LANE_SM80)
            assert ("cluster" in raw and "schedule" in raw) == (lane == cs.LANE_SM90)


def test_cost_features_describe_each_config():
    f80 = fe.cost_features(cs.config(cs.LANE_SM80, cs.SM80_DEFAULT))
    assert f80["warps"] == 4 and f80["smem"] == 3 * 256 * 64 * 2
    f90 = fe.cost_features(cs.config(cs.LANE_SM90, "pp_128x128x64_c1x2"))
    assert f90["cluster"] == [1, 2] and f90["schedule"] == "pingpong"
