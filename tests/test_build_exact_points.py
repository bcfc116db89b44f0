"""Building an exact-point family: fixed-window census points become exact points.

The fake family with ``exact_points`` on stands for conv1d: a census point that carries an
exact point (a fixed window's ``"BxT"``) is measured at that shape and served by it; a
signature measured at enough sizes also gets regions, and keeps only the points where they
differ. A live build and the replay of its log write the same file.
"""

from __future__ import annotations

import json

import attrs
import pytest

from oasr_core import build, hookimpl
from oasr_core.census.probe import _exact_points
from oasr_core.census.recorder import Call
from oasr_core.census.shapeset import ShapeSetError
from oasr_core.census.workloads import builtin_workloads
from oasr_core.database import read_tuning_file
from oasr_core.measurements import read_logs
from oasr_core.registry import Registry
from oasr_core.testing import (
    FAKE_FAMILY,
    FAKE_OP,
    ScriptedBench,
    fake_family_record,
    fake_lane_record,
)

LANE = fake_lane_record()
OTHERS = [c.id for c in LANE.config_space if c.id != LANE.default_config]
SOFT = {"impl_hash": "exact-1"}
KEY = f"{FAKE_FAMILY}|op={FAKE_OP}|dt=half|N=512|K=256"


def family(bench=None):
    return attrs.evolve(fake_family_record(), exact_points=True,
                        make_bench=None if bench is None else bench.make_bench)


def census_file(tmp_path, points):
    path = tmp_path / "census.json"
    rows = [{"family": FAKE_FAMILY, "op": FAKE_OP, "dtype": "fp16", "dims": {"N": 512, "K": 256},
             "M": m, "batch": b, "calls": 1.0, "weight": 1.0, **({"point": pt} if pt else {})}
            for m, b, pt in points]
    path.write_text(json.dumps({"schema_version": 1, "points": rows}))
    return path


def fast_at(winner_ms):
    """Config ``winner`` is 1.5x faster than everything at the M values given."""
    def time_us(name, config, problem):
        best = winner_ms.get(problem.m)
        return 6.0 if config is not None and config.id == best else 9.0
    return time_us


def live(tmp_path, bench, census, **opts):
    return build.build_live(census, family=family(bench), lane=LANE, arch="sm90",
                            out=tmp_path / "sm90" / "fake.json", timer=bench.timer, soft=SOFT,
                            options=build.BuildOptions(**opts))


def test_fixed_window_points_are_measured_at_their_shape_and_served_exactly(tmp_path):
    winner = OTHERS[0]
    bench = ScriptedBench(fast_at({1500: winner}))
    path = census_file(tmp_path, [(1500, 1, "1x3000"), (12000, 8, "8x3000")])
    census = build.read_censuses([path], family())
    assert {p.point for p in census.points} == {"1x3000", "8x3000"}
    live(tmp_path, bench, census)
    measured = {(p.m, p.point) for p, _ in bench.benched}
    assert measured == {(1500, "1x3000"), (12000, "8x3000")}, "no fill point, each at its shape"
    entry = read_tuning_file(tmp_path / "sm90" / "fake.json").entries[KEY]
    assert entry.regions == ()
    assert entry.points["1x3000"] == winner
    assert entry.points["8x3000"] == "default"
    assert entry.lookup(1500, "1x3000") == winner
    assert entry.lookup(1500, "2x1500") is None, "an unmeasured shape falls to the next tier"
    rows = read_logs([tmp_path / "sm90" / "measurements" / "fake.jsonl"])[1]
    assert {tuple(r["points"]) for r in rows} == {("1x3000",), ("8x3000",)}


class ExactFamilyPlugin:
    @hookimpl
    def oasr_register_families(self):
        return [family()]

    @hookimpl
    def oasr_register_lanes(self):
        return [LANE]


def test_the_replay_of_an_exact_build_writes_the_same_file(tmp_path, plugin_manager,
                                                         register_plugin):
    bench = ScriptedBench(fast_at({1500: OTHERS[0]}))
    census = build.read_censuses([census_file(tmp_path, [(1500, 1, "1x3000"),
                                                         (12000, 8, "8x3000")])], family())
    live(tmp_path, bench, census)
    register_plugin(ExactFamilyPlugin(), name="fake_exact")
    out = tmp_path / "replay" / "sm90" / "fake.json"
    build.build_from_log([tmp_path / "sm90" / "measurements" / "fake.jsonl"],
                         registry=Registry.from_plugin_manager(plugin_manager), out=str(out))
    assert out.read_bytes() == (tmp_path / "sm90" / "fake.json").read_bytes()


def test_enough_sizes_give_regions_and_points_only_where_they_differ(tmp_path):
    ms = [1500 * b for b in (1, 2, 3, 4, 6, 8)]
    odd = OTHERS[1]
    bench = ScriptedBench(fast_at({6000: odd}))
    points = [(m, m // 1500, f"{m // 1500}x3000") for m in ms]
    census = build.read_censuses([census_file(tmp_path, points)], family())
    live(tmp_path, bench, census)
    entry = read_tuning_file(tmp_path / "sm90" / "fake.json").entries[KEY]
    assert entry.regions, "measured at six sizes: regions over M as well"
    assert entry.lookup(6000, "4x3000") == odd
    assert set(entry.points) <= {"4x3000"}, "points only where the regions would be slower"


def test_points_without_an_exact_point_build_regions_as_before(tmp_path):
    bench = ScriptedBench(fast_at({}))
    census = build.read_censuses([census_file(tmp_path, [(512, 1, None), (4096, 1, None)])],
                                 family())
    live(tmp_path, bench, census, max_points=4)
    entry = read_tuning_file(tmp_path / "sm90" / "fake.json").entries[KEY]
    assert entry.regions and not entry.points
    assert any(p.fill for p in build.plan(census, family(), max_points=4)[0].points)


def test_a_batched_exact_point_is_kept_and_a_bad_point_is_one_line(tmp_path):
    census = build.read_censuses([census_file(tmp_path, [(12000, 8, "8x3000")])], family())
    assert len(census.points) == 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "points": [
        {"family": FAKE_FAMILY, "op": FAKE_OP, "dtype": "fp16", "dims": {"N": 512, "K": 256},
         "M": 8, "point": 3}]}))


    with pytest.raises(ShapeSetError, match=r"bad\.json: malformed ShapeSet: .*points\.point"):
        build.read_censuses([bad], family())


def test_the_census_keeps_exact_points_only_for_a_fixed_window_workload():
    workloads = {w.name: w for w in builtin_workloads()}
    conformer, whisper = workloads["conformer"], workloads["whisper_encoder"]
    calls = {Call(family="conv1d", op="conv1d", dtype="fp16", dims={"C": 8}, m=128,
                  point="2x64"): 3,
             Call(family="conv1d", op="conv1d", dtype="fp16", dims={"C": 8}, m=128,
                  point="1x128"): 1}
    assert _exact_points(calls, whisper) == calls
    plain, = _exact_points(calls, conformer).items()
    assert plain[0].point is None and plain[1] == 4
