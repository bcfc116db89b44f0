"""The tile ladder: its tables, its picks, and fit_ladder recovering a known table."""

from __future__ import annotations

import math

import pytest
from oasr_core.types import Problem

import oasr_scaled_mm.hooks
from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm import heuristic as hz


def _lanes():
    return {lane.name: lane for lane in oasr_scaled_mm.hooks.oasr_register_lanes()}


def _problem(n, k, m, op=cs.OP_MM):
    return Problem(cs.FAMILY, op, "int8", (("N", n), ("K", k)), m)


@pytest.mark.parametrize("lane_name", cs.LANES)
def test_ladders_are_data_parallel_largest_first(lane_name):
    lane = _lanes()[lane_name]
    ladder = hz.ladder_for(lane)
    hz.check_ladder(ladder, lane)
    areas = [math.prod(lane.config(r).params["tile"][:2]) for r in ladder.rungs]
    assert areas == sorted(areas, reverse=True)
    assert ladder.fill[-1] == (0.0,) * (len(ladder.k_bounds) + 1)
    assert not ladder.fitted


def test_half_wave_rule_on_the_h200():
    lane = _lanes()[cs.LANE_SM90]

    def pick(n, k, m):
        return hz.heuristic_config(_problem(n, k, m), lane, sm_count=132, arch="sm90").id

    # 768 wide: 6 tiles of 128 across N; half a wave is 66 CTAs.
    assert pick(768, 256, 1) == "ws_64x32x128_c1x1"
    assert pick(768, 256, 16 * 64) == "ws_128x64x128_c1x1"       # 8 x 12 = 96 CTAs >= 66
    assert pick(768, 256, 11 * 128) == "ws_128x128x128_c1x1"     # 66 CTAs: half a wave
    assert pick(768, 256, 10 * 128) == "ws_128x64x128_c1x1"      # 60 x 128x128 is not enough
    assert pick(768, 256, 44 * 128) == "pp_128x128x128_c1x1"     # 264 CTAs: two waves
    assert pick(3072, 768, 8192) == "pp_128x128x128_c1x1"
    assert pick(256, 256, 64) == "ws_64x32x128_c1x1"


def test_sm80_ladder_uses_the_deep_k_tile_only_for_deep_k():
    lane = _lanes()[cs.LANE_SM80]

    def pick(n, k, m):
        return hz.heuristic_config(_problem(n, k, m), lane, sm_count=108, arch="sm80").id

    assert pick(1024, 512, 1024) == "b128x128x64_w64x64x64_s5"   # 64 CTAs, K shallow
    assert pick(1024, 2048, 1024) == "b128x128x128_w64x64x128_s3"
    assert pick(2048, 512, 4096) == "b256x128x64_w64x64x64_s3"
    assert pick(256, 512, 8) == "b64x64x128_w32x32x128_s5"


def test_sentinel_heuristic_without_a_device_uses_the_arch_default(monkeypatch):
    lanes = _lanes()
    monkeypatch.setattr(hz, "_device_index", lambda: None)
    arch, sms = hz.device_sms(cs.LANE_SM90, ("sm90",))
    assert (arch, sms) == ("sm90", 132)
    assert hz.device_sms(cs.LANE_SM80, ("sm80", "sm86", "sm89", "sm90"),
                         ("sm80", "sm86", "sm89")) == ("sm80", 108)
    got = hz.sentinel_heuristic(_problem(768, 256, 11 * 128), lanes[cs.LANE_SM90])
    assert got.id == "ws_128x128x128_c1x1"
    for m in (1, 16, 100, 2152, 32768):
        for op in cs.OPS:
            cfg = hz.sentinel_heuristic(_problem(768, 256, m, op), lanes[cs.LANE_SM80])
            assert not cfg.params["stream_k"]


def test_a_lane_without_a_table_gets_a_half_wave_ladder():
    import attrs
    from oasr_core.types import Config

    base = _lanes()[cs.LANE_SM80]
    space = [Config(id=c.id, lane="third_party_int8", params=c.params)
             for c in base.config_space]
    lane = attrs.evolve(base, name="third_party_int8", config_space=space,
                        is_feasible=lambda c: True)
    ladder = hz.ladder_for(lane)
    assert not any(lane.config(r).params["stream_k"] for r in ladder.rungs)
    assert ladder.fill[0] == (hz.HALF_WAVE,) * 3
    with pytest.raises(KeyError):
        hz.ladder_for("third_party_int8")


def test_ladder_validation():
    with pytest.raises(ValueError, match="last rung"):
        hz.Ladder(lane="x", rungs=("a", "b"), k_bounds=(), fill=((0.5,), (0.5,)))
    with pytest.raises(ValueError, match="rungs x"):
        hz.Ladder(lane="x", rungs=("a", "b"), k_bounds=(1024,), fill=((0.5,), (0.0,)))
    lane = _lanes()[cs.LANE_SM90]
    bad = hz.Ladder(lane=lane.name, rungs=("sk_128x128x128_c1x1", "ws_64x32x128_c1x1"),
                    k_bounds=(), fill=((0.5,), (0.0,)))
    with pytest.raises(ValueError, match="Stream-K"):
        hz.check_ladder(bad, lane)


def _synthetic_rows(truth: hz.Ladder, lane, sm_count: int, ns=(256, 768, 1024),
                    ks=(256, 2048, 8192)):
    """Rows whose fastest config is exactly what ``truth`` picks, covering every grid fill."""
    tiles = {r: lane.config(r).params["tile"] for r in truth.rungs}
    rows = []
    for n in ns:
        for k in ks:
            for m in sorted({1, 2, 5, 16, 33, 64, 100, 128, 250, 416, 512, 700, 1000, 1500,
                             2152, 3000, 4096, 6000, 8192, 16384, 32768}):
                best = truth.rungs[truth.pick(n, k, m, sm_count, tiles)]
                rows.append((n, k, m, {r: (1.0 if r == best else 1.3 + 0.1 * i)
                                       for i, r in enumerate(truth.rungs)} | {"torch": 0.5}))
    return rows


def test_fit_ladder_recovers_a_known_table():
    lane = _lanes()[cs.LANE_SM90]
    rungs = ("ws_128x128x128_c1x1", "ws_64x64x128_c1x1", "ws_64x32x128_c1x1")
    truth = hz.Ladder(lane=lane.name, rungs=rungs, k_bounds=(1024,),
                      fill=((1.0, 0.25), (0.5, 2.0), (0.0, 0.0)))
    rows = _synthetic_rows(truth, lane, 132)
    fit = hz.fit_ladder(rows, lane=lane, sm_count=132, rungs=rungs, k_bounds=(1024,))
    tiles = {r: lane.config(r).params["tile"] for r in rungs}
    assert fit.regret == pytest.approx(1.0)
    assert fit.start_regret > 1.0 and fit.rows == len(rows)
    for n, k, m, _ in rows:
        assert fit.ladder.pick(n, k, m, 132, tiles) == truth.pick(n, k, m, 132, tiles)
    assert fit.ladder.fitted and fit.ladder.fill[-1] == (0.0, 0.0)
    # Identified up to the fills the rows cover: the first rung exactly, the rest by picks.
    assert fit.ladder.fill[0] == truth.fill[0]


def test_fit_ladder_by_coordinate_descent_on_the_full_ladder():
    lane = _lanes()[cs.LANE_SM90]
    start = hz.ladder_for(lane)
    truth = hz.Ladder(lane=lane.name, rungs=start.rungs, k_bounds=start.k_bounds,
                      fill=((4.0,) * 3, (1.0,) * 3, (0.75,) * 3, (0.5,) * 3, (0.25,) * 3,
                            (0.0,) * 3))
    rows = _synthetic_rows(truth, lane, 132, ns=(256, 512, 768, 1024, 1536, 3072))
    fit = hz.fit_ladder(rows, lane=lane, sm_count=132, start=start, exhaustive_limit=0)
    assert fit.regret < fit.start_regret
    assert fit.regret == pytest.approx(1.0)
    assert fit.ladder.fill == truth.fill
    source = fit.ladder.to_source()
    assert "fitted=True" in source and "pp_128x128x128_c1x1" in source
    assert eval(source, {"Ladder": hz.Ladder, "INF": math.inf}) == fit.ladder


def test_fit_ladder_needs_measured_rungs():
    lane = _lanes()[cs.LANE_SM90]
    with pytest.raises(ValueError, match="no row"):
        hz.fit_ladder([(768, 256, 64, {"torch": 1.0})], lane=lane, sm_count=132)
