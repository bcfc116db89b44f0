"""Effort levels: a pooled candidate set per signature, found before measuring, measured at
every point; a level replayed from an exhaustive log keeps only the rows it would have
measured; the CLI's --effort."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import attrs
import pytest
from build_speed_kit import by_size, modelled_lane

from oasr_core import build
from oasr_core.arch import ArchProfile
from oasr_core.build import effort
from oasr_core.errors import ConfigurationError
from oasr_core.measurements import read_logs
from oasr_core.testing import (
    FakeFamilyPlugin,
    ScriptedBench,
    fake_family_record,
)

SOFT = {"impl_hash": "effort-1"}
PROFILE = ArchProfile.synthetic("sm90")
LANE = modelled_lane()


class Registry:
    def family(self, name):
        return fake_family_record()

    def lane(self, name):
        assert name == LANE.name
        return LANE


def live(tmp_path, bench, *, name="live", rankers=(by_size,), **opts):
    fam = attrs.evolve(fake_family_record(), make_bench=bench.make_bench)
    census = build.census_from_widths(fam, "512,256;1024,512", "16,256,4096")
    out = tmp_path / name / "sm90" / "fake.json"
    result = build.build_live(census, family=fam, lane=LANE, arch="sm90", out=out,
                              timer=bench.timer, soft=SOFT, profile=PROFILE, rankers=rankers,
                              options=build.BuildOptions(fresh=True, **opts))
    return out, result


def main_arms(bench):
    """The arms of each point's first (main) measurement, by (N, M)."""
    seen = {}
    for problem, arms in bench.benched:
        seen.setdefault((problem.dim("N"), problem.m), set(arms))
    return seen


def test_each_point_measures_its_signature_s_pooled_set_and_a_replay_reproduces_it(tmp_path):
    bench = ScriptedBench()
    out, result = live(tmp_path, bench, effort="default", top_k=1)
    assert result.points == 2 * effort.LEVELS["default"].max_points
    measured = main_arms(bench)
    by_n = defaultdict(set)
    for (n, _m), arms in measured.items():
        by_n[n].add(frozenset(arms))
    # one set per signature, the same at every point, pooled from the small and large M
    # favourites (narrowest and widest tile), smaller than the lane's space
    for n, sets in by_n.items():
        assert len(sets) == 1, n
        arms, = sets
        widths = {LANE.config(a).params["tile_n"] for a in arms if LANE.config(a)}
        assert len(widths) >= 2
        assert {"default", "torch"} <= arms
        assert len(arms) < len(LANE.config_space) + 1
    # coarse cells: every finalist was timed at every point, so no cross-evaluation ran
    runs = Counter((p.dim("N"), p.m) for p, _arms in bench.benched)
    assert set(runs.values()) == {1}
    again = tmp_path / "again" / "sm90" / "fake.json"
    build.build_from_log([out.parent / "measurements" / "fake.jsonl"], registry=Registry(),
                         out=str(again), options=build.BuildOptions(fresh=True, effort="default",
                                                                    top_k=1),
                         rankers=(by_size,))
    assert again.read_bytes() == out.read_bytes()


def test_a_level_replayed_from_an_exhaustive_log_uses_only_its_rows(tmp_path, monkeypatch):
    bench = ScriptedBench()
    out, exhaustive = live(tmp_path, bench, rankers=(), prune=False)  # every config, every point
    log = out.parent / "measurements" / "fake.jsonl"
    total = sum(1 for r in read_logs([log])[1] if r["phase"] == "main")
    used = []

    class Counting(build.LogSource):
        def main(self, sig, point, keep):
            got = super().main(sig, point, keep)
            used.append((sig.key, point.m, {a.name for a in got.arms}))
            return got

    monkeypatch.setattr(build, "LogSource", Counting)
    quick = build.build_from_log([log], registry=Registry(), out=str(tmp_path / "q.json"),
                                 options=build.BuildOptions(fresh=True, effort="quick", top_k=1),
                                 rankers=(by_size,))
    monkeypatch.undo()
    assert quick.points == 2 * effort.LEVELS["quick"].max_points < exhaustive.points
    rows = sum(len(arms) for _k, _m, arms in used)
    assert rows < total
    for _key, _m, arms in used:
        assert {"default", "torch"} <= arms
    # without --effort a replay takes every row, as before
    full = build.build_from_log([log], registry=Registry(), out=str(tmp_path / "f.json"),
                                options=build.BuildOptions(fresh=True))
    assert full.points == exhaustive.points


def test_without_coarse_cells_halving_s_dropped_finalists_are_cross_evaluated(tmp_path):
    bench = ScriptedBench()
    live(tmp_path, bench, effort="default", top_k=2, coarse_cells=False)
    runs = Counter((p.dim("N"), p.m) for p, _arms in bench.benched)
    assert max(runs.values()) == 2  # main, then cross for the finalists dropped there


def test_levels_resolve_their_knobs_and_explicit_ones_win():
    opts = build.BuildOptions(effort="quick").resolved()
    assert (opts.top_k, opts.max_points) == (effort.LEVELS["quick"].top_k,
                                             effort.LEVELS["quick"].max_points)
    assert build.BuildOptions(effort="quick", top_k=7, max_points=5).resolved().top_k == 7
    assert build.BuildOptions(effort="exhaustive").resolved().prune is False
    legacy = build.BuildOptions().resolved()
    assert (legacy.top_k, legacy.max_points, legacy.prune) == (28, 24, True)
    assert "effort" not in build.BuildOptions().knobs()
    assert build.BuildOptions(effort="default").knobs()["effort"] == "default"
    with pytest.raises(ConfigurationError, match="quick, default, exhaustive"):
        build.BuildOptions(effort="fast").resolved()


def test_signature_set_keeps_stand_ins_and_incumbents():
    fam = fake_family_record()
    census = build.census_from_widths(fam, "512,256", "16,4096")
    sig, = build.plan(census, fam, max_points=2)
    sig = attrs.evolve(sig, points=[attrs.evolve(p, incumbent="n128_k64_s2")
                                    for p in sig.points])
    chosen = effort.signature_set(sig, fam, LANE, lambda _p: [c for c in LANE.config_space
                                                              if c.id != LANE.default_config],
                                  lambda _p: [LANE.default], (by_size,), 1)
    ids = {c.id for c in chosen}
    assert LANE.default_config in ids and "n128_k64_s2" in ids
    assert len(ids) <= 4
    every = effort.signature_set(sig, fam, LANE, lambda _p: list(LANE.config_space),
                                 lambda _p: [], (by_size,), None)
    assert len(every) == len(LANE.config_space)


def test_cli_replays_a_level_from_a_log(tmp_path, cli_runner, register_plugin):
    register_plugin(FakeFamilyPlugin())
    bench = ScriptedBench()
    out, _ = live(tmp_path, bench, rankers=(), prune=False)
    log = out.parent / "measurements" / "fake.jsonl"
    res = cli_runner("tune", "build", "--from-log", log, "--effort", "quick", "--fresh",
                     "--out", tmp_path / "q.json", "--json", "--no-progress")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["points"] == 2 * effort.LEVELS["quick"].max_points
    bad = cli_runner("tune", "build", "--from-log", log, "--effort", "fast")
    assert bad.exit_code == 2 and "fast" in bad.output


def test_structure_k_limits_the_structure_beside_a_calibration():
    def structure(configs, problem):
        return sorted(configs, key=lambda c: c.id, reverse=True)

    structure.__qualname__ = effort.STRUCTURE
    assert effort.ranker_ks([structure, by_size], 3, 0) == [0, 3]
    assert effort.ranker_ks([structure, by_size], 3, None) == [3, 3]
    assert effort.ranker_ks([structure], 3, 0) == [3]  # alone, the structure ranks
    fam = fake_family_record()
    sig, = build.plan(build.census_from_widths(fam, "512,256", "16"), fam, max_points=1)
    every = list(LANE.config_space)
    both = effort.signature_set(sig, fam, LANE, lambda _p: every, lambda _p: [],
                                (structure, by_size), 1, None)
    calibrated = effort.signature_set(sig, fam, LANE, lambda _p: every, lambda _p: [],
                                      (structure, by_size), 1, 0)
    assert len(both) == 2 and len(calibrated) == 1
    assert [c.id for c in calibrated] == [by_size(every, sig.problem(fam, 16))[0].id]


def test_a_unit_cap_keeps_a_subset_of_the_pooled_sets_within_the_cap():
    fam = fake_family_record()
    census = build.census_from_widths(fam, "512,256;1024,512", "16,256,4096")
    sigs = build.plan(census, fam, max_points=3)
    every = [c for c in LANE.config_space if c.id != LANE.default_config]

    def sets(cap, top_k=3):
        return effort.census_sets(sigs, fam, LANE, lambda _p: every, lambda _p: [LANE.default],
                                  (by_size,), top_k, None, cap)

    uncapped = sets(None)
    assert uncapped == {s.key: effort.signature_set(s, fam, LANE, lambda _p: every,
                                                    lambda _p: [LANE.default], (by_size,), 3)
                        for s in sigs}
    for cap in (1, 3, 5):
        got = sets(cap)
        chosen = {c.id for cs in got.values() for c in cs}
        assert LANE.default_config in chosen  # the stand-in is kept, and counts
        assert len(chosen) <= cap
        for key, configs in got.items():
            assert {c.id for c in configs} <= {c.id for c in uncapped[key]}
    # Under a cap of the distinct top-1s plus the stand-in, every point keeps its top-1.
    top1 = {s.key: {by_size(every, s.problem(fam, p.m, p.point))[0].id for p in s.points}
            for s in sigs}
    cap = len(set().union(*top1.values()) | {LANE.default_config})
    for s in sigs:
        assert top1[s.key] <= {c.id for c in sets(cap)[s.key]}


def test_a_capped_set_prefers_one_config_good_everywhere_to_each_point_s_favourite():
    fam = fake_family_record()
    sig, = build.plan(build.census_from_widths(fam, "512,256", "16,256,4096"), fam,
                      max_points=3)
    configs = [c for c in LANE.config_space if c.id != LANE.default_config][:4]
    shared, favourites = configs[0], configs[1:]
    ms = [p.m for p in sig.points]

    def predicted(problem):
        # Each M has its own favourite (1.0 us); the shared config is 1.02 us everywhere, the
        # stand-in 2 us.
        fav = favourites[ms.index(problem.m)]
        return {shared.id: 1.02, fav.id: 1.0, LANE.default_config: 2.0}

    def ranker(cs, problem):
        return [c for c, _t in ranker.scored(cs, problem)]

    def scored(cs, problem):
        times = predicted(problem)
        return sorted(((c, times.get(c.id, 3.0)) for c in cs), key=lambda row: row[1])

    ranker.scored = scored
    got = effort.census_sets([sig], fam, LANE, lambda _p: configs, lambda _p: [LANE.default],
                             (ranker,), 2, None, 2)
    assert {c.id for c in got[sig.key]} == {LANE.default_config, shared.id}
    # With room for every favourite, they are kept as well.
    roomy = effort.census_sets([sig], fam, LANE, lambda _p: configs, lambda _p: [LANE.default],
                               (ranker,), 2, None, 5)
    assert {c.id for c in roomy[sig.key]} == {LANE.default_config, *(c.id for c in configs)}


def test_a_capped_level_is_replayed_with_the_same_sets_as_a_live_build(tmp_path):
    bench = ScriptedBench()
    out, result = live(tmp_path, bench, effort="default", top_k=3, max_units=3)
    assert result.points == 2 * effort.LEVELS["default"].max_points
    timed = {a for arms in main_arms(bench).values() for a in arms
             if not a.startswith(("torch", "default", "fallback", "fused", "unquantized"))}
    assert 0 < len(timed) <= 3
    opts = build.BuildOptions(fresh=True, effort="default", top_k=3, max_units=3)
    again = tmp_path / "again" / "sm90" / "fake.json"
    build.build_from_log([out.parent / "measurements" / "fake.jsonl"], registry=Registry(),
                         out=str(again), options=opts, rankers=(by_size,))
    assert again.read_bytes() == out.read_bytes()
    # Replayed from an exhaustive log, the cap keeps the table to as few configs.
    full, _ = live(tmp_path, ScriptedBench(), name="full", rankers=(), prune=False)
    capped = tmp_path / "capped" / "sm90" / "fake.json"
    build.build_from_log([full.parent / "measurements" / "fake.jsonl"], registry=Registry(),
                         out=str(capped), options=opts, rankers=(by_size,))
    seen = {arm for entry in json.loads(capped.read_text())["entries"].values()
            for cell in entry["evidence"].values() for arm in cell if LANE.config(arm)}
    assert 0 < len(seen) <= 3
    knobs = build.BuildOptions(effort="default", max_units=3).knobs()
    assert knobs["max_units"] == 3
    assert build.BuildOptions(effort="default").knobs()["max_units"] == \
        effort.LEVELS["default"].max_units
    assert "max_units" not in build.BuildOptions().knobs()  # a legacy build's digest as before
    assert build.BuildOptions(effort="default", max_units=0).resolved().max_units is None


def test_the_unit_cap_grows_with_the_census_past_the_level_s_floor():
    assert effort.unit_cap(15, 2.5, 6) == 15
    assert effort.unit_cap(15, 2.5, 14) == 35
    assert effort.unit_cap(15, None, 14) == 15
    assert effort.unit_cap(None, 2.5, 14) is None
    default = build.BuildOptions(effort="default").resolved()
    assert default.unit_cap(14) == math.ceil(effort.LEVELS["default"].units_per_signature * 14)
    # --max-units fixes the cap whatever the census; 0 lifts it
    assert build.BuildOptions(effort="default", max_units=9).resolved().unit_cap(14) == 9
    assert build.BuildOptions(effort="default", max_units=0).resolved().unit_cap(14) is None
