"""Building a family whose fallback is a shape heuristic, on a scripted device.

The fake int8 family of :mod:`oasr_core.testing` has the scaled_mm family's rules: a
heuristic fallback, keys without ``dt=``, bitwise numerics, a lane without a cost model,
and Stream-K tiles its quantizing op cannot serve. The core builds it with the same
pipeline as any family; these tests pin what the records make it do.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

import oasr_core
from oasr_core import build, runtime
from oasr_core.census import shapeset
from oasr_core.database import read_tuning_file
from oasr_core.measurements import read_logs
from oasr_core.plugins import make_plugin_manager
from oasr_core.registry import Registry
from oasr_core.report import tuning_report
from oasr_core.testing import (
    FAKE_INT8_FAMILY,
    FakeFamilyPlugin,
    FakeInt8Plugin,
    ScriptedBench,
    fake_family_record,
    fake_int8_family_record,
    fake_int8_heuristic,
    fake_int8_lane_record,
    fake_int8_time_us,
    fake_lane_record,
)
from oasr_core.types import Problem, Sentinel, Tier

LANE = fake_int8_lane_record()
SOFT = {"impl_hash": "int8-1"}
KEY = f"{FAKE_INT8_FAMILY}|op=scaled_mm|N=768|K=256"
QUANT_KEY = f"{FAKE_INT8_FAMILY}|op=scaled_mm_quant|N=768|K=256"
STREAM_K = {c.id for c in LANE.config_space if c.params["stream_k"]}

# Per M, the time (us) of each tile at N=768, K=256. The heuristic picks m64_n64 at M=16 and
# 256, m64_n128 at 1024 and m128_n256 at 4096 (the largest tile filling half a wave).
TABLE = {
    16: {"m64_n64": 10.0, "m64_n128": 11.0, "m128_n64": 11.0, "m128_n128": 12.0,
         "m128_n256": 13.0, "sk_m128_n128": 20.0, "sk_m128_n256": 20.0},
    256: {"m64_n64": 10.0, "m64_n128": 11.0, "m128_n64": 11.0, "m128_n128": 12.0,
          "m128_n256": 13.0, "sk_m128_n128": 20.0, "sk_m128_n256": 20.0},
    1024: {"m64_n64": 12.0, "m64_n128": 10.0, "m128_n64": 9.8, "m128_n128": 11.0,
           "m128_n256": 12.0, "sk_m128_n128": 20.0, "sk_m128_n256": 20.0},
    4096: {"m64_n64": 16.0, "m64_n128": 15.0, "m128_n64": 15.0, "m128_n128": 10.0,
           "m128_n256": 13.0, "sk_m128_n128": 20.0, "sk_m128_n256": 20.0},
}
MS = "16,256,1024,4096"


def table_us(name, config, problem):
    return TABLE[problem.m][config.id]


def heuristic_best_us(name, config, problem):
    """The heuristic's pick is the fastest tile everywhere."""
    pick = fake_int8_heuristic(problem, LANE)
    return 10.0 if config.id == pick.id else 12.0


def stream_k_best_us(name, config, problem):
    """A Stream-K tile is 1.5x faster than anything else, wherever it may run."""
    return 8.0 if config.id == "sk_m128_n256" else 12.0


def census(widths="768,256", ms=MS, ops=("scaled_mm",)):
    fam = fake_int8_family_record()
    return build.merge_censuses([build.census_from_widths(fam, widths, ms, op=op)
                                 for op in ops])


def live(tmp: Path, bench: ScriptedBench, cen=None, **opts) -> build.BuildResult:
    fam = fake_int8_family_record(bench.make_bench)
    return build.build_live(cen or census(), family=fam, lane=LANE, arch="sm90",
                            out=tmp / "sm90" / "fake_int8.json", timer=bench.timer, soft=SOFT,
                            options=build.BuildOptions(**{"fill": False, **opts}))


def log_of(tmp: Path) -> Path:
    return tmp / "sm90" / "measurements" / "fake_int8.jsonl"


def main_rows(tmp: Path) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for row in read_logs([log_of(tmp)])[1]:
        if row["phase"] == "main":
            out.setdefault((row["key"], row["M"]), []).append(row)
    return out


def entry(tmp: Path, key: str = KEY):
    return read_tuning_file(tmp / "sm90" / "fake_int8.json").entries[key]


def problem(op: str, m: int, n: int = 768, k: int = 256) -> Problem:
    return Problem(FAKE_INT8_FAMILY, op, "int8", (("N", n), ("K", k)), m)


def test_every_eligible_variant_is_timed_fully_at_every_point(tmp_path):
    """No pruning without a cost model: no ranker cut, no halving, no cross-evaluation."""
    bench = ScriptedBench(fake_int8_time_us)
    result = live(tmp_path, bench, census("768,256;768,16384", ops=("scaled_mm",
                                                                    "scaled_mm_quant")))
    assert result.points == 16 and len(result.entries) == 4
    rows = read_logs([log_of(tmp_path)])[1]
    assert {r["phase"] for r in rows} == {"main"}
    for (key, m), group in main_rows(tmp_path).items():
        op = key.split("|")[1].removeprefix("op=")
        k = int(key.rpartition("K=")[2])
        prob = problem(op, m, k=k)
        pick = fake_int8_heuristic(prob, LANE)
        eligible = {c.id for c in LANE.config_space if LANE.supports(c, prob)}
        assert {r["config"] for r in group} == {"heuristic"} | (eligible - {pick.id})
        assert all(r["status"] == "ok" and r["stage"] is None for r in group)
        assert len({r["n"] for r in group}) == 1
        heuristic, = (r for r in group if r["config"] == "heuristic")
        assert heuristic["params"] == {"kind": "heuristic", "config": pick.id}
        assert heuristic["fallback"] == "heuristic"
    assert STREAM_K <= {r["config"] for r in rows if r["op"] == "scaled_mm"}


def test_the_partition_is_against_the_heuristic_pseudo_arm(tmp_path):
    bench = ScriptedBench(table_us, sigma_rel=0.002)
    live(tmp_path, bench)
    e = entry(tmp_path)
    # m128_n64 wins at M=1024 by only 1.02x (below the gate): the heuristic stays there.
    assert [tuple(r) for r in e.regions] == [(1024, "heuristic"), (4096, "m128_n128")]
    assert any(n.startswith("M=4096: m128_n128 (1.30x vs heuristic)") for n in e.notes)
    assert any(n.startswith("M=1024: heuristic (best m128_n64 1.02x)") for n in e.notes)
    # The heuristic arm's time is that of the tile it picks there, measured once, as it.
    assert e.evidence["M=4096"]["heuristic"][0] == pytest.approx(0.013, rel=0.02)
    assert e.evidence["M=16"]["heuristic"][0] == pytest.approx(0.010, rel=0.02)
    assert "m128_n256" not in {r["config"] for r in main_rows(tmp_path)[(KEY, 4096)]}
    tf = read_tuning_file(tmp_path / "sm90" / "fake_int8.json")
    assert set(tf.configs) >= {"m128_n128"} and tf.arch.lane == LANE.name


def test_an_entry_whose_every_region_is_the_heuristic_is_kept(tmp_path):
    bench = ScriptedBench(heuristic_best_us)
    result = live(tmp_path, bench, census(ops=("scaled_mm", "scaled_mm_quant")))
    for key in (KEY, QUANT_KEY):
        assert [tuple(r) for r in entry(tmp_path, key).regions] == [(None, "heuristic")]
        assert result.entries[key] is not None
    assert not read_tuning_file(tmp_path / "sm90" / "fake_int8.json").configs


def test_the_default_family_keeps_an_all_default_entry_by_the_same_rule(tmp_path):
    """One rule for every fallback: a measured entry is written even when it changes
    nothing, so [[null, fallback]] says measured where an absent entry says never looked."""
    lane = fake_lane_record()
    bench = ScriptedBench(lambda name, config, prob: 10.0 if name == "default" else 12.0)
    fam = attrs.evolve(fake_family_record(), make_bench=bench.make_bench)
    build.build_live(build.census_from_widths(fam, "512,256", "16,4096"), family=fam,
                     lane=lane, arch="sm90", out=tmp_path / "fake.json", timer=bench.timer,
                     soft=SOFT, options=build.BuildOptions(fill=False))
    regions = read_tuning_file(tmp_path / "fake.json").entries[
        "fake|op=fake|dt=half|N=512|K=256"].regions
    assert [tuple(r) for r in regions] == [(None, "default")]


def test_the_bitwise_gate_keeps_a_wrong_tile_out_even_when_fastest(tmp_path):
    bench = ScriptedBench(table_us, broken=["m128_n128"], sigma_rel=0.002)
    live(tmp_path, bench)
    for group in main_rows(tmp_path).values():
        wrong, = (r for r in group if r["config"] == "m128_n128")
        assert wrong["status"] == "rejected" and wrong["median_ms"] is None
        assert "differs bitwise" in wrong["reason"]
    assert "m128_n128" not in entry(tmp_path).choices()
    assert [tuple(r) for r in entry(tmp_path).regions] == [(None, "heuristic")]


def test_a_tile_the_op_cannot_serve_is_never_measured_or_chosen_for_it(tmp_path):
    """Stream-K only by measurement, and never for the quantizing op (Lane.supports)."""
    bench = ScriptedBench(stream_k_best_us)
    live(tmp_path, bench, census(ops=("scaled_mm", "scaled_mm_quant")))
    assert [tuple(r) for r in entry(tmp_path).regions] == [(4096, "sk_m128_n256")]
    assert [tuple(r) for r in entry(tmp_path, QUANT_KEY).regions] == [(None, "heuristic")]
    quant = [r for r in read_logs([log_of(tmp_path)])[1] if r["key"] == QUANT_KEY]
    assert quant and not {r["config"] for r in quant} & STREAM_K
    assert not fake_int8_heuristic(problem("scaled_mm", 1 << 20, k=1 << 16),
                                   LANE).params["stream_k"]


def test_stream_k_wins_by_measurement_at_deep_k(tmp_path):
    bench = ScriptedBench(fake_int8_time_us)
    live(tmp_path, bench, census("768,256;768,16384", ms="16,64,256"))
    deep = entry(tmp_path, f"{FAKE_INT8_FAMILY}|op=scaled_mm|N=768|K=16384")
    shallow = entry(tmp_path)
    assert {c for _, c in deep.regions} & STREAM_K
    assert not {c for _, c in shallow.regions} & STREAM_K


def test_replay_from_the_log_is_byte_identical(tmp_path, plugin_manager, register_plugin):
    bench = ScriptedBench(fake_int8_time_us, sigma_rel=0.02, seed=7)
    live(tmp_path / "live", bench, census("768,256;768,16384;1024,4096",
                                          ops=("scaled_mm", "scaled_mm_quant")),
         fill=True, max_points=6)
    out = tmp_path / "live" / "sm90" / "fake_int8.json"
    register_plugin(FakeInt8Plugin(), name="fake_int8")
    registry = Registry.from_plugin_manager(plugin_manager)
    build.build_from_log([log_of(tmp_path / "live")], registry=registry,
                         out=str(tmp_path / "replay.json"),
                         options=build.BuildOptions(max_points=6))
    assert (tmp_path / "replay.json").read_bytes() == out.read_bytes()
    assert len(read_tuning_file(out).entries) == 6


def test_evaluate_scores_a_config_the_heuristic_stood_for(tmp_path):
    """A config measured only as the heuristic arm at a point is scored by that arm."""
    from oasr_core import evaluate

    bench = ScriptedBench(table_us, sigma_rel=0.002)
    live(tmp_path, bench)
    rows = read_logs([log_of(tmp_path)])[1]
    fam = fake_int8_family_record()
    pick = evaluate.FixedSelector("m128_n256", "m128_n256")
    table = evaluate.TableSelector("built", read_tuning_file(tmp_path / "sm90" /
                                                             "fake_int8.json"), fam)
    report = evaluate.evaluate(rows, fam, [pick, table])
    by = {r.name: r for r in report.selectors}
    assert by["m128_n256"].overall.missing == 0
    assert by["m128_n256"].choices[(KEY, 4096)] == "heuristic"
    assert by["built"].overall.missing == 0 and by["built"].overall.max < 0.03
    _, _, aliases = evaluate.log_matrix(rows, fam)
    assert aliases == {}  # the heuristic picks differ per point: no global alias


# -- the CLI: a census of two families, --family, --from-log ------------------------------

def _shapeset(path: Path) -> Path:
    points = [shapeset.ShapePoint(family="fake", op="fake", dtype="fp16",
                                  dims={"N": 512, "K": 256}, m=m, calls=1.0, weight=1.0,
                                  must=True) for m in (64, 1024)]
    for op in ("scaled_mm", "scaled_mm_quant"):
        points += [shapeset.ShapePoint(family=FAKE_INT8_FAMILY, op=op, dtype="int8",
                                       dims={"N": 768, "K": 256}, m=m, calls=1.0,
                                       weight=1.0, must=True) for m in (16, 4096)]
    points.append(shapeset.ShapePoint(family="absent", op="x", dtype="fp16",
                                      dims={"N": 8, "K": 8}, m=8, calls=1.0, weight=0.1))
    return shapeset.dump(shapeset.ShapeSet(points=points, working_set_bytes=1 << 20), path)


@pytest.fixture
def device(monkeypatch, register_plugin):
    """Both fake families, measurable on one scripted GPU the CLI believes is an sm90."""
    bench = ScriptedBench()
    register_plugin(FakeFamilyPlugin(bench.make_bench), name="fake")
    register_plugin(FakeInt8Plugin(bench.make_bench), name="fake_int8")
    monkeypatch.setattr(runtime.Runtime, "device_arch", lambda self: "sm90")
    monkeypatch.setattr("oasr_core.build.CudaGraphTimer", lambda: bench.timer)
    return bench


def _ok(result):
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_a_plain_build_measures_every_family_the_census_holds(device, cli_runner, tmp_path):
    census_path = _shapeset(tmp_path / "census.json")
    result = _ok(cli_runner("tune", "build", "--census", census_path, "--out", tmp_path / "db",
                            "--no-fill", "--no-progress", "--json"))
    builds = {b["family"]: b for b in json.loads(result.stdout)["builds"]}
    assert set(builds) == {"fake", FAKE_INT8_FAMILY}
    assert "census points of family absent skipped" in result.stderr
    gemm = read_tuning_file(tmp_path / "db" / "sm90" / "fake.json")
    int8 = read_tuning_file(tmp_path / "db" / "sm90" / "fake_int8.json")
    assert list(gemm.entries) == ["fake|op=fake|dt=half|N=512|K=256"]
    assert set(int8.entries) == {KEY, QUANT_KEY}
    assert builds[FAKE_INT8_FAMILY]["entries"] == sorted([KEY, QUANT_KEY])
    measured = {(p.family, p.op) for p, _arms in device.benched}
    assert measured == {("fake", "fake"), (FAKE_INT8_FAMILY, "scaled_mm"),
                        (FAKE_INT8_FAMILY, "scaled_mm_quant")}


def test_family_restricts_the_build_and_one_file_needs_one_family(device, cli_runner,
                                                                   tmp_path):
    census_path = _shapeset(tmp_path / "census.json")
    result = _ok(cli_runner("tune", "build", "--family", FAKE_INT8_FAMILY, "--census",
                            census_path, "--out", tmp_path / "db", "--no-fill",
                            "--no-progress"))
    assert f"{KEY}  " in result.stdout and "wrote 2 entries" in result.stdout
    assert not (tmp_path / "db" / "sm90" / "fake.json").exists()
    assert {p.family for p, _arms in device.benched} == {FAKE_INT8_FAMILY}
    bad = cli_runner("tune", "build", "--census", census_path, "--out", tmp_path / "x.json")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1
    assert "--out" in bad.stderr and "fake, fake_int8" in bad.stderr
    lane = cli_runner("tune", "build", "--census", census_path, "--lane", LANE.name,
                      "--out", tmp_path / "db")
    assert lane.exit_code == 2 and "pass --family too" in lane.stderr


def test_from_log_rebuilds_every_family_of_a_shared_log(device, cli_runner, tmp_path):
    census_path = _shapeset(tmp_path / "census.json")
    log = tmp_path / "shared.jsonl"
    _ok(cli_runner("tune", "build", "--census", census_path, "--out", tmp_path / "live",
                   "--log", log, "--no-progress"))
    _ok(cli_runner("tune", "build", "--from-log", log, "--out", tmp_path / "replay",
                   "--no-progress"))
    for stem in ("fake", "fake_int8"):
        live_file = tmp_path / "live" / "sm90" / f"{stem}.json"
        replayed = tmp_path / "replay" / "sm90" / f"{stem}.json"
        assert replayed.read_bytes() == live_file.read_bytes()
    one = _ok(cli_runner("tune", "build", "--from-log", log, "--family", FAKE_INT8_FAMILY,
                         "--out", tmp_path / "one.json", "--no-progress"))
    assert "wrote 2 entries" in one.stdout
    assert (tmp_path / "one.json").read_bytes() == \
        (tmp_path / "live" / "sm90" / "fake_int8.json").read_bytes()


def test_a_heuristic_entry_serves_through_the_heuristic_at_runtime(device, cli_runner,
                                                                   tmp_path, monkeypatch):
    """What the build wrote is what selection serves: a region naming the heuristic runs
    the heuristic's pick for the call's own size, from the system tier."""
    census_path = _shapeset(tmp_path / "census.json")
    _ok(cli_runner("tune", "build", "--family", FAKE_INT8_FAMILY, "--census", census_path,
                   "--out", tmp_path / "db", "--no-progress"))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path / "db"))
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeInt8Plugin(), name="fake_int8")
    runtime.install_runtime(runtime.Runtime(pm=pm))
    e = read_tuning_file(tmp_path / "db" / "sm90" / "fake_int8.json").entries[QUANT_KEY]
    sel = oasr_core.select(FAKE_INT8_FAMILY, "scaled_mm_quant", "int8", (768, 256), 100,
                           "sm90")
    hit = e.lookup(100)
    assert sel.tier is Tier.SYSTEM and sel.choice_id == hit
    expected = fake_int8_heuristic(problem("scaled_mm_quant", 100), LANE) \
        if Sentinel.parse(hit) is Sentinel.HEURISTIC else LANE.config(hit)
    assert sel.config == expected


def test_census_build_and_report_of_a_quantized_model(device, cli_runner, tmp_path,
                                                      monkeypatch):
    """The whole loop: a quantized census, a plain build of it, and the report's line."""
    census_path = tmp_path / "int8.json"
    _ok(cli_runner("tune", "census", "--workload", "conformer", "--param", "layers=2",
                   "--param", "family_ops=false", "--quantization", "int8_w8a8",
                   "--service-mode", "offline", "--max-batch-size", 2, "--out", census_path))
    result = _ok(cli_runner("tune", "build", "--census", census_path, "--out",
                            tmp_path / "db", "--no-progress", "--json"))
    assert json.loads(result.stdout)["family"] == FAKE_INT8_FAMILY
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path / "db"))
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeInt8Plugin(), name="fake_int8")
    runtime.install_runtime(runtime.Runtime(pm=pm))
    report = tuning_report(arch="sm90", census=census_path)
    assert report.coverage_lines() == [
        "fake_int8: 22 quantized layer(s) over 4 signature(s): 22 with a tuning entry "
        "(system=22), 0 on the shape heuristic"]


def test_the_fake_int8_plugin_passes_the_family_contract():
    from oasr_core.testing import check_family_contract

    contract = check_family_contract(FakeInt8Plugin())
    assert [f.name for f in contract.families] == [FAKE_INT8_FAMILY]
    assert [lane.name for lane in contract.lanes] == [LANE.name]
