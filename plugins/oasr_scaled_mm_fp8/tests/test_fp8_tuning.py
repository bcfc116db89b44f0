"""The fp8 family through the generic tuning machinery, on a scripted device: the replay of a
build's log, the coverage report, strict and prewarm, autotune's candidates, and the census of
the quantized reference Conformer through the CLI. (The build's ``unquantized`` regions and
the quantized linear's route, int8's and fp8's alike: oasr_scaled_mm's
``test_w8a8_unquantized.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import oasr_core
import pytest
from oasr_core import runtime
from oasr_core.autotuning import measure
from oasr_core.census import shapeset
from oasr_core.census.shapeset import ShapeSet
from oasr_core.errors import UncoveredShapesError
from oasr_core.plugins import make_plugin_manager
from oasr_core.report import tuning_report
from oasr_core.tuner import TuningConfig
from oasr_core.types import Problem, Sentinel, Tier
from oasr_scaled_mm.w8a8.testing import ScriptedFormat

from oasr_scaled_mm_fp8 import config_space as cs
from oasr_scaled_mm_fp8 import hooks

ARCH = "sm90"
KEY = "scaled_mm_fp8|op=scaled_mm_fp8|N=256|K=1024"
CENSUS = Path(__file__).parents[3] / "benchmarks" / "census" / "conformer_offline_fp8.json"


@pytest.fixture
def scripted(tmp_path, monkeypatch):
    """The fp8 family on the scripted device (:class:`ScriptedFormat`), not built yet."""
    scripted = ScriptedFormat("oasr_scaled_mm_fp8", "pp_128x128x128_c1x1_fa", tmp_path,
                              monkeypatch)
    yield scripted.bench, scripted.rt, scripted
    runtime.install_runtime(None)


def test_the_log_replays_offline_to_the_same_file(tmp_path, scripted, cli_runner):
    *_, fp8 = scripted
    fp8.build()
    out = fp8.out
    log = out.parent / "measurements" / "scaled_mm_fp8.jsonl"
    replay = tmp_path / "replay.json"
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(hooks, name="scaled_mm_fp8")
    run = cli_runner("tune", "build", "--from-log", log, "--family", cs.FAMILY, "--fresh",
                     "--out", replay, plugin_manager=pm)
    assert run.exit_code == 0, run.output
    assert replay.read_bytes() == out.read_bytes()


def test_coverage_strict_and_prewarm_cover_fp8_points(tmp_path, scripted):
    bench, rt, _ = scripted
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
    _, rt, _ = scripted
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
