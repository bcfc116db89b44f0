"""The tile ladder: its tables, its picks, fit_ladder recovering a known table, and the
fitted-ladder file (JSON round trip, loading over the unfitted tables, malformed files)."""

from __future__ import annotations

import json
import math

import pytest
from oasr_core.errors import OasrWarning
from oasr_core.types import Problem

import oasr_scaled_mm.hooks
from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm import heuristic as hz


def _lanes():
    return {lane.name: lane for lane in oasr_scaled_mm.hooks.oasr_register_lanes()}


def _problem(n, k, m, op=cs.OP_MM):
    return Problem(cs.FAMILY, op, "int8", (("N", n), ("K", k)), m)


@pytest.fixture
def unfitted(monkeypatch):
    """The unfitted tables on every arch, whatever fitted_ladders.json ships."""
    monkeypatch.setattr(hz, "ARCH_LADDERS", {})


@pytest.mark.parametrize("lane_name", cs.LANES)
def test_ladders_are_data_parallel_largest_first(lane_name):
    lane = _lanes()[lane_name]
    ladder = hz.ladder_for(lane)
    hz.check_ladder(ladder, lane)
    areas = [math.prod(lane.config(r).params["tile"][:2]) for r in ladder.rungs]
    assert areas == sorted(areas, reverse=True)
    assert ladder.fill[-1] == (0.0,) * (len(ladder.k_bounds) + 1)
    assert not ladder.fitted


def test_half_wave_rule_on_the_h200(unfitted):
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


def test_sm80_ladder_uses_the_deep_k_tile_only_for_deep_k(unfitted):
    lane = _lanes()[cs.LANE_SM80]

    def pick(n, k, m):
        return hz.heuristic_config(_problem(n, k, m), lane, sm_count=108, arch="sm80").id

    assert pick(1024, 512, 1024) == "b128x128x64_w64x64x64_s5"   # 64 CTAs, K shallow
    assert pick(1024, 2048, 1024) == "b128x128x128_w64x64x128_s3"
    assert pick(2048, 512, 4096) == "b256x128x64_w64x64x64_s3"
    assert pick(256, 512, 8) == "b64x64x128_w32x32x128_s5"


def test_sentinel_heuristic_without_a_device_uses_the_arch_default(monkeypatch, unfitted):
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


def test_ladder_regret_costs_a_table_as_the_fit_does():
    lane = _lanes()[cs.LANE_SM90]
    rungs = ("ws_128x128x128_c1x1", "ws_64x64x128_c1x1", "ws_64x32x128_c1x1")
    truth = hz.Ladder(lane=lane.name, rungs=rungs, k_bounds=(1024,),
                      fill=((1.0, 0.25), (0.5, 2.0), (0.0, 0.0)))
    rows = _synthetic_rows(truth, lane, 132)
    start = hz.Ladder(lane=lane.name, rungs=rungs, k_bounds=(1024,),
                      fill=((0.5, 0.5), (0.5, 0.5), (0.0, 0.0)))
    fit = hz.fit_ladder(rows, lane=lane, sm_count=132, start=start)
    assert hz.ladder_regret(fit.ladder, rows, lane=lane, sm_count=132) == \
        (pytest.approx(fit.regret), len(rows))
    assert hz.ladder_regret(start, rows, lane=lane, sm_count=132)[0] == \
        pytest.approx(fit.start_regret)
    assert hz.ladder_regret(truth, rows, lane=lane, sm_count=132)[0] == pytest.approx(1.0)
    assert math.isnan(hz.ladder_regret(truth, [], lane=lane, sm_count=132)[0])


# --- the fitted-ladder file -------------------------------------------------------------------

def _fitted_sm90(**evidence):
    """A fitted sm90 table that differs from the unfitted one (and holds an inf)."""
    base = hz.LADDERS[cs.LANE_SM90]
    fill = ((hz.INF, 8.0, 8.0), (4.0, 4.0, 4.0), (2.0, 2.0, 2.0), (1.0, 1.0, 1.0),
            (0.25, 0.25, 0.25), (0.0, 0.0, 0.0))
    ladder = hz.Ladder(lane=base.lane, rungs=base.rungs, k_bounds=base.k_bounds, fill=fill,
                       fitted=True)
    return hz.FittedLadder(arch="sm90", ladder=ladder, evidence=evidence)


@pytest.mark.parametrize("ladder", [*hz.LADDERS.values(), _fitted_sm90().ladder])
def test_ladder_json_round_trip(ladder):
    text = json.dumps(ladder.to_json(), allow_nan=False)   # inf travels as "inf"
    assert hz.Ladder.from_json(json.loads(text)) == ladder
    if any(math.isinf(v) for row in ladder.fill for v in row):
        assert '"inf"' in text


def test_fitted_file_round_trip(tmp_path):
    entry = _fitted_sm90(regret=1.02, rows=270, gpu="NVIDIA H200")
    path = hz.write_fitted(tmp_path / "fitted_ladders.json", [entry])
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1
    (raw,) = data["ladders"]
    assert (raw["lane"], raw["arch"], raw["fitted"]) == (cs.LANE_SM90, "sm90", True)
    assert raw["fill"][0][0] == "inf" and raw["evidence"]["rows"] == 270
    (back,) = hz.read_fitted(path)
    assert back == entry and back.evidence == entry.evidence
    assert hz.load_fitted(path) == {(cs.LANE_SM90, "sm90"): entry.ladder}
    # the ARCH_LADDERS-shaped form writes the same tables (without evidence)
    again = hz.write_fitted(tmp_path / "again.json", {entry.key: entry.ladder})
    assert hz.load_fitted(again) == hz.load_fitted(path)
    with pytest.raises(ValueError, match="holds a table of"):
        hz.write_fitted(tmp_path / "bad.json", {(cs.LANE_SM80, "sm90"): entry.ladder})
    with pytest.raises(ValueError, match="duplicate"):
        hz.write_fitted(tmp_path / "bad.json", [entry, entry])


def test_loading_a_fitted_file_overrides_the_unfitted_table(tmp_path, monkeypatch):
    lane = _lanes()[cs.LANE_SM90]
    entry = _fitted_sm90()
    path = hz.write_fitted(tmp_path / "fitted_ladders.json", [entry])
    monkeypatch.setattr(hz, "ARCH_LADDERS", {})

    def pick(m, arch="sm90"):
        return hz.heuristic_config(_problem(768, 256, m), lane, sm_count=132, arch=arch).id

    assert pick(11 * 128) == "ws_128x128x128_c1x1"       # half a wave: 66 CTAs
    monkeypatch.setattr(hz, "ARCH_LADDERS", hz.load_fitted(path))
    assert hz.ladder_for(lane, "sm90") == entry.ladder and hz.ladder_for(lane, "sm90").fitted
    assert hz.ladder_for(lane) == hz.LADDERS[cs.LANE_SM90]   # no arch: the unfitted table
    assert hz.ladder_for(cs.LANE_SM80, "sm90") == hz.LADDERS[cs.LANE_SM80]
    # fitted: 128x128 needs 4 waves, 128x64 two, 64x128 one, 64x64 a quarter; pp never at K<=1024
    assert pick(11 * 128) == "ws_64x128x128_c1x1"         # 22 x 6 = 132 CTAs: one wave
    assert pick(44 * 128) == "ws_128x64x128_c1x1"         # 128x128: 264 CTAs, not 528
    assert pick(88 * 128) == "ws_128x128x128_c1x1"        # 528 CTAs: four waves
    assert pick(10 * 64) == "ws_64x64x128_c1x1"           # 120 CTAs < 132
    assert pick(32768) == "ws_128x128x128_c1x1"           # the ping-pong rung is off (inf)


@pytest.mark.parametrize(("text", "problem"), [
    ("{not json", "not JSON"),
    ('{"schema_version": 2, "ladders": []}', "schema_version 2"),
    ('{"schema_version": 1}', "'ladders' must be a list"),
    ('[]', "JSON object"),
    ('{"schema_version": 1, "ladders": [{"lane": "sm90_int8_wgmma", "arch": "sm90"}]}',
     "lacks rungs, k_bounds, fill"),
])
def test_a_malformed_fitted_file_warns_and_the_unfitted_tables_serve(tmp_path, text, problem):
    path = tmp_path / "fitted_ladders.json"
    path.write_text(text)
    with pytest.warns(OasrWarning, match=rf"fitted_ladders\.json .*{problem}"):
        assert hz.load_fitted(path) == {}


def _entry_with(**changes):
    data = _fitted_sm90().to_json()
    data.update(changes)
    return data


@pytest.mark.parametrize(("entry", "problem"), [
    (_entry_with(fill=[["x"] * 3] * 6), "is not a number"),
    (_entry_with(fill=[[0.5] * 3] * 6), "last rung must have fill 0"),
    (_entry_with(arch="hopper"), "arch must be an arch family"),
    (_entry_with(lane="sm99_int8"), "not one of"),
    (_entry_with(rungs=["sk_128x128x128_c1x1", *_fitted_sm90().ladder.rungs[1:]]),
     "not data-parallel"),
    (_entry_with(fitted="yes"), "fitted must be true or false"),
    (_entry_with(evidence=[]), "evidence must be an object"),
])
def test_a_bad_table_rejects_the_whole_file(tmp_path, entry, problem):
    good = _fitted_sm90().to_json() | {"arch": "sm80", "lane": cs.LANE_SM90}
    path = tmp_path / "fitted_ladders.json"
    path.write_text(json.dumps({"schema_version": 1, "ladders": [good, entry]}))
    with pytest.warns(OasrWarning, match=rf"ladders\[1\]: .*{problem}"):
        assert hz.load_fitted(path) == {}


def test_a_duplicate_table_rejects_the_file(tmp_path):
    entry = _fitted_sm90().to_json()
    path = tmp_path / "fitted_ladders.json"
    path.write_text(json.dumps({"schema_version": 1, "ladders": [entry, entry]}))
    with pytest.warns(OasrWarning, match="a second table"):
        assert hz.load_fitted(path) == {}


def test_a_missing_file_is_no_fitted_tables(tmp_path, recwarn):
    assert hz.load_fitted(tmp_path / "absent.json") == {}
    assert not [w for w in recwarn if issubclass(w.category, OasrWarning)]


def test_the_shipped_file_is_what_arch_ladders_holds(recwarn, monkeypatch):
    monkeypatch.undo()  # the suite's fixture blanks ARCH_LADDERS; this test reads the import's
    assert hz.FITTED_FILE.name == "fitted_ladders.json" and hz.FITTED_FILE.exists()
    shipped = hz.load_fitted()
    assert shipped == hz.ARCH_LADDERS
    assert ("sm90_int8_wgmma", "sm90") in shipped  # fitted on the H200 sweep
    assert not [w for w in recwarn if issubclass(w.category, OasrWarning)]
    lanes = _lanes()
    for (lane, _arch), ladder in shipped.items():
        hz.check_ladder(ladder, lanes[lane])
        assert ladder.fitted
