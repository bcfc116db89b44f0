"""The fp8 family through the generic tuning machinery, on a scripted device: a build whose
regions name ``unquantized`` where F.linear is faster, the quantized linear's route, the
replay of the build's log, the coverage report, strict and prewarm, autotune's candidates,
and the census of the quantized reference Conformer through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import oasr_core
import pytest
from oasr_core import build, runtime
from oasr_core.autotuning import measure
from oasr_core.census import shapeset
from oasr_core.census.shapeset import ShapeSet
from oasr_core.database import read_tuning_file
from oasr_core.errors import UncoveredShapesError
from oasr_core.plugins import make_plugin_manager
from oasr_core.report import tuning_report
from oasr_core.testing import ScriptedBench, install_scripted, pretend_cuda_device
from oasr_core.tuner import TuningConfig
from oasr_core.types import Problem, Sentinel, Tier

from oasr_scaled_mm_fp8 import config_space as cs
from oasr_scaled_mm_fp8 import hooks, ops

ARCH = "sm90"
KEY = "scaled_mm_fp8|op=scaled_mm_fp8|N=256|K=1024"
CENSUS = Path(__file__).parents[3] / "benchmarks" / "census" / "conformer_offline_fp8.json"


def time_us(name, config, problem):
    """F.linear wins below M=1024; above, the fp8 kernels, ping-pong 128x128 the most."""
    if name == Sentinel.UNQUANTIZED.value:
        return 5.0 if problem.m < 1024 else 60.0
    if name == Sentinel.TORCH.value:
        return 9.0 if problem.m < 1024 else 30.0
    if config is not None and config.id == "pp_128x128x128_c1x1_fa" and problem.m >= 1024:
        return 15.0
    return 8.0 if problem.m < 1024 else 25.0


@pytest.fixture
def scripted(tmp_path, monkeypatch):
    bench = ScriptedBench(time_us, sigma_rel=0.002)
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path / "user"))
    rt = install_scripted(hooks, bench, "scaled_mm_fp8")
    yield bench, rt
    runtime.install_runtime(None)


def built(tmp_path, rt, bench):
    family = rt.registry.family(cs.FAMILY)
    lane = rt.registry.lane(cs.LANE_SM90)
    census = build.census_from_widths(family, "256,1024", "64,512,4096", op=cs.OP_MM)
    out = tmp_path / "user" / ARCH / "scaled_mm_fp8.json"
    result = build.build_live(census, family=family, lane=lane, arch=ARCH, out=out,
                              timer=bench.timer, soft={"impl_hash": "fp8-test"},
                              options=build.BuildOptions(fill=False))
    return result, out


def test_the_build_measures_unquantized_and_names_it_where_f_linear_wins(tmp_path, scripted):
    bench, rt = scripted
    _, out = built(tmp_path, rt, bench)
    lane = rt.registry.lane(cs.LANE_SM90)
    for problem, names in bench.benched:
        pick = rt.registry.family(cs.FAMILY).sentinel_heuristic(problem, lane)
        assert set(names) == {"heuristic", "torch", "unquantized"} | {
            c.id for c in lane.config_space if c.id != pick.id}
    entry = read_tuning_file(out).entries[KEY]
    assert [tuple(r) for r in entry.regions] == [(512, "unquantized"),
                                                 (4096, "pp_128x128x128_c1x1_fa")]


def test_the_quantized_linear_routes_unquantized_regions_to_f_linear(tmp_path, scripted):
    bench, rt = scripted
    built(tmp_path, rt, bench)
    rt.reload()
    pretend_cuda_device(0, ARCH)
    assert ops.unquantized(256, 1024, 300, 0) is True
    assert ops.unquantized(256, 1024, 4000, 0) is False
    sel = oasr_core.select(cs.FAMILY, cs.OP_MM, cs.DTYPE, (256, 1024), 64, ARCH)
    assert (sel.choice, sel.tier, sel.config) == (Sentinel.UNQUANTIZED, Tier.USER, None)
    assert ops.select_config(256, 1024, 64, ARCH) is None     # the op itself serves torch


def test_uncovered_shapes_run_fp8_only_where_the_untuned_route_predicts_a_win(tmp_path,
                                                                               scripted):
    from oasr_scaled_mm_fp8 import untuned

    bench, rt = scripted
    built(tmp_path, rt, bench)
    rt.reload()
    pretend_cuda_device(0, ARCH)
    model = untuned.MODELS[cs.LANE_SM90]
    for n, k, m in ((512, 1024, 64), (1024, 1024, 16384), (4096, 4096, 4096)):
        sel = oasr_core.select(cs.FAMILY, cs.OP_MM, cs.DTYPE, (n, k), m, ARCH)
        assert sel.tier is Tier.HEURISTIC and sel.config is not None  # the op keeps its tile
        assert ops.unquantized(n, k, m, 0) is not model.quantized_wins(m, n, k)
    assert ops.unquantized(512, 1024, 64, 0) and ops.unquantized(1024, 1024, 16384, 0)
    assert not ops.unquantized(4096, 4096, 4096, 0)
    assert ops.unquantized(256, 1024, 4000, 0) is False      # a tuned entry is not second-guessed
    assert ops.unquantized(520, 1000, 4096, 0) is False      # no tile runs it: as before


def test_the_log_replays_offline_to_the_same_file(tmp_path, scripted, cli_runner):
    bench, rt = scripted
    result, out = built(tmp_path, rt, bench)
    log = out.parent / "measurements" / "scaled_mm_fp8.jsonl"
    replay = tmp_path / "replay.json"
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(hooks, name="scaled_mm_fp8")
    run = cli_runner("tune", "build", "--from-log", log, "--family", cs.FAMILY, "--fresh",
                     "--out", replay, plugin_manager=pm)
    assert run.exit_code == 0, run.output
    assert replay.read_bytes() == out.read_bytes()


def test_coverage_strict_and_prewarm_cover_fp8_points(tmp_path, scripted):
    bench, rt = scripted
    census = shapeset.load(CENSUS)
    fp8 = [p for p in census.points if p.family == cs.FAMILY]
    report = tuning_report(ARCH, census=census)
    line, = (ln for ln in report.coverage_lines() if ln.startswith(cs.FAMILY))
    assert line == (f"{cs.FAMILY}: 176 quantized layer(s) over 4 signature(s): 0 with a tuning "
                    "entry, 176 on the shape heuristic")
    shapes = ShapeSet(points=tuple(fp8[:3]), signatures={}, working_set_bytes=1 << 20)
    tuner = oasr_core.Tuner(TuningConfig(strict=True), shapes, arch=ARCH)
    assert len(tuner.uncovered()) == 3
    with pytest.raises(UncoveredShapesError, match="3 must-tune point"):
        tuner.prepare()
    warm = oasr_core.Tuner(TuningConfig(mode="prewarm", budget_s=60, strict=True), shapes,
                           arch=ARCH, timer=bench.timer)
    warm.prepare()
    assert warm.uncovered() == ()
    p = fp8[0]
    assert oasr_core.select(cs.FAMILY, p.op, p.dtype, tuple(p.dims.values()), p.m,
                            ARCH).tier is Tier.USER


def test_autotune_measures_the_heuristic_torch_and_unquantized_arms(scripted):
    _, rt = scripted
    family, lane = rt.registry.family(cs.FAMILY), rt.registry.lane(cs.LANE_SM90)
    problem = Problem(cs.FAMILY, cs.OP_MM, cs.DTYPE, (("N", 256), ("K", 1024)), 512)
    got = measure.candidates(family, lane, problem)
    assert got[:3] == [Sentinel.HEURISTIC, Sentinel.TORCH, Sentinel.UNQUANTIZED]
    assert {c.id for c in got[3:]} == {c.id for c in cs.space(cs.LANE_SM90)}


def test_census_of_the_fp8_conformer_through_the_cli(tmp_path, cli_runner, register_plugin):
    register_plugin(hooks, name="scaled_mm_fp8")
    out = tmp_path / "fp8.json"
    run = cli_runner("tune", "census", "--workload", "conformer", "--param", "layers=1",
                     "--param", "family_ops=false", "--service-mode", "offline",
                     "--max-batch-size", 2, "--dtype", "bf16", "--quantization", "fp8_w8a8",
                     "--probe-device", "meta", "--out", out)
    assert run.exit_code == 0, run.output
    points = json.loads(out.read_text())["points"]
    fp8 = {(p["op"], p["dtype"], p["dims"]["N"], p["dims"]["K"]) for p in points
           if p["family"] == cs.FAMILY}
    assert fp8 == {(cs.OP_MM, cs.DTYPE, n, k)
                   for n, k in ((1024, 256), (256, 1024), (256, 256), (512, 256))}
    status = cli_runner("tune", "status", "--arch", ARCH, "--census", out)
    assert status.exit_code == 0, status.output
    assert (f"{cs.FAMILY}: 11 quantized layer(s) over 4 signature(s): 0 with a tuning entry, "
            "11 on the shape heuristic") in status.output
