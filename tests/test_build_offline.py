"""Builds without a GPU: a scripted device, log replay, checkpoint resume after SIGKILL."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

import oasr_core
from oasr_core import build
from oasr_core.bench import ArmResult, ArmStatus, BenchCase, ScriptedArm, ScriptedTimer
from oasr_core.cli import CliState
from oasr_core.commands.build import build_cmd
from oasr_core.database import read_tuning_file
from oasr_core.measurements import arm_row, read_logs
from oasr_core.plugins import make_plugin_manager
from oasr_core.testing import fake_family_record, fake_lane_record
from oasr_core.types import Sentinel

LANE = fake_lane_record()
SOFT = {"impl_hash": "fake-1"}
KEY = "fake|op=fake|dt=half|N=512|K=256"


def cost_us(label: str, problem) -> float:
    """A plausible GPU time: waves of 128-row CTAs, K loop, split-K overhead; torch's flops."""
    m, n, k = problem.m, problem.dim("N"), problem.dim("K")
    if label == "torch":
        return 2.7 + 2 * m * n * k / 250e12 * 1e6
    p = (LANE.default if label == "default" else LANE.config(label)).params
    ctas = math.ceil(m / 128) * math.ceil(n / p["tile_n"]) * p["split_k"]
    k_iters = math.ceil(k / p["split_k"] / p["tile_k"])
    per_wave = 0.3 + k_iters * 0.05 * p["tile_n"] / 64 * p["tile_k"] / 64
    return 2.0 + math.ceil(ctas / 132) * per_wave + 0.5 * (p["split_k"] > 1)


class Device:
    """A scripted GPU: ``make_bench`` tells the timer which problem its arms run."""

    def __init__(self, seed: int = 0, block_on: tuple | None = None,
                 marker: Path | None = None) -> None:
        self.problem = None
        self.benched: list[tuple] = []
        self.block_on, self.marker = block_on, marker
        self.timer = ScriptedTimer(self.script, seed=seed)

    def script(self, label: str) -> ScriptedArm:
        return ScriptedArm(ms=cost_us(label, self.problem) / 1000, sigma_rel=0.01,
                           issue_us=14.0 if label == "torch" else 8.0)

    def make_bench(self, problem, choices, options):
        dims = tuple(v for _, v in problem.dims)
        if self.block_on is not None and dims == self.block_on:
            self.marker.write_text("measuring")
            time.sleep(120)
        self.problem = problem
        self.benched.append((dims, problem.m))
        self.resolved = {c: options.config_of(c, problem) for c in choices}
        names = [c.value if isinstance(c, Sentinel) else c.id for c in choices]
        return BenchCase(arms={n: (lambda i, n=n: n) for n in names}, gate=lambda out: True)

    def family(self):
        return attrs.evolve(fake_family_record(), make_bench=self.make_bench)


class Registry:
    def __init__(self, family) -> None:
        self._family = family

    def family(self, name):
        assert name == self._family.name
        return self._family


def live(tmp: Path, device: Device, widths: str, ladder: str, **opts) -> build.BuildResult:
    fam = device.family()
    census = build.census_from_widths(fam, widths, ladder)
    out = tmp / "sm90" / "fake.json"
    return build.build_live(census, family=fam, lane=LANE, arch="sm90", out=out,
                            timer=device.timer, soft=SOFT, options=build.BuildOptions(**opts))


def replay(log: Path, out: Path, **opts) -> build.BuildResult:
    return build.build_from_log([log], registry=Registry(fake_family_record()), out=str(out),
                                options=build.BuildOptions(**opts))


def synthetic_rows() -> list[dict]:
    """One signature as an H200 log would hold it: times in us per arm and M."""
    table = {16: dict(default=10.0, torch=8.0, n64_k32_s1=4.0, n64_k64_s1=9.0),
             64: dict(default=10.0, torch=8.5, n64_k32_s1=4.2, n64_k64_s1=9.0),
             256: dict(default=12.0, torch=9.0, n64_k32_s1=11.0, n64_k64_s1=7.0),
             1024: dict(default=20.0, torch=14.0, n64_k32_s1=30.0, n64_k64_s1=15.0)}
    rows = []
    for m, arms in table.items():
        ctx = {"run": "r1", "protocol": 1, "phase": "main", "family": "fake", "arch": "sm90",
               "lane": "fake_lane", "impl_hash": "fake-1", "key": KEY, "op": "fake",
               "dtype": "fp16", "dims": {"N": 512, "K": 256}, "M": m, "batch": 1,
               "weight": 1.0, "calls": 1.0, "must": m == 16, "alpha": 0.0, "fill": False,
               "incumbent": None, "census_max": 1024, "fallback": "default", "l2": "cold",
               "copies": 4, "graph_calls": 32, "contended": False}
        for name, us in arms.items():
            params = LANE.config(name).to_json() if LANE.config(name) else {"kind": name}
            arm = ArmResult(name, ArmStatus.OK, median_ms=us / 1000, sigma_ms=us / 1e5,
                            rounds=24, solo_ms=us / 1000, issue_us=8.0)
            rows.append(arm_row(arm, {**ctx, "params": params}))
    return rows


def write_log(path: Path, rows: list[dict]) -> Path:
    header = {"row": "run", "run": "r1", "family": "fake", "arch": "sm90", "lane": "fake_lane",
              "soft": SOFT, "protocol": 1}
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *rows]))
    return path


def test_a_synthetic_log_builds_the_expected_entry(tmp_path):
    log = write_log(tmp_path / "log.jsonl", synthetic_rows())
    result = replay(log, tmp_path / "out.json")
    tf = read_tuning_file(tmp_path / "out.json")
    entry = tf.entries[KEY]
    assert [tuple(r) for r in entry.regions] == [(64, "n64_k32_s1"), (256, "n64_k64_s1"),
                                                 (None, "torch")]
    assert "M=16*: n64_k32_s1 (2.50x vs default)" in entry.notes
    assert "M=1024: torch (1.43x vs default)" in entry.notes
    assert tuple(entry.evidence["M=16"]["n64_k32_s1"]) == (0.004, 4e-05, 24)
    assert entry.evidence["M=16"]["_l2"] == "cold"
    assert entry.source.value == "aot"
    assert set(tf.configs) == {"n64_k32_s1", "n64_k64_s1"}
    assert tf.soft["impl_hash"] == "fake-1" and tuple(tf.provenance["runs"]) == ("r1",)
    assert result.points == 4 and tf.arch.lane == "fake_lane"


def test_knobs_change_the_replayed_decisions(tmp_path):
    log = write_log(tmp_path / "log.jsonl", synthetic_rows())
    replay(log, tmp_path / "strict.json", min_speedup=3.0)
    regions = read_tuning_file(tmp_path / "strict.json").entries[KEY].regions
    assert [tuple(r) for r in regions] == [(None, "default")]


def test_from_log_reproduces_the_live_build_file(tmp_path):
    device = Device()
    result = live(tmp_path / "live", device, "512,256;2048,512", "16,128,1024,8192",
                  max_points=8)
    out = tmp_path / "live" / "sm90" / "fake.json"
    log = out.parent / "measurements" / "fake.jsonl"
    _, arms, bad = read_logs([log])
    assert bad == 0 and {r["phase"] for r in arms} <= {"main", "cross"}
    assert len({(r["key"], r["M"]) for r in arms}) == result.points == 16
    replay(log, tmp_path / "replay.json", max_points=8)
    assert (tmp_path / "replay.json").read_text() == out.read_text()
    tf = read_tuning_file(out)
    assert len(tf.entries) == 2 and tf.coverage_basis
    for entry in tf.entries.values():
        last_hi, last = entry.regions[-1]
        assert last_hi is not None or Sentinel.parse(last) is not None


def test_live_build_keeps_default_torch_and_incumbent_and_logs_every_arm(tmp_path):
    device = Device()
    live(tmp_path, device, "512,256", "64,4096", fill=False)
    log = tmp_path / "sm90" / "measurements" / "fake.jsonl"
    _, arms, _ = read_logs([log])
    main = [r for r in arms if r["phase"] == "main" and r["M"] == 64]
    assert {r["config"] for r in main} >= {"default", "torch", "n64_k32_s1"}
    survivors = {r["config"] for r in main if r["stage"] is None}
    assert {"default", "torch"} <= survivors
    assert all(r["config"] != LANE.default_config for r in main)
    assert device.resolved[Sentinel.DEFAULT] == LANE.default
    assert device.resolved[Sentinel.TORCH] is None
    assert device.resolved[LANE.config("n64_k32_s1")] == LANE.config("n64_k32_s1")
    device2 = Device(seed=3)
    live(tmp_path, device2, "512,256", "64,4096", fill=False, resume=False)
    _, arms, _ = read_logs([log])
    rerun = [r for r in arms if r["run"] != main[0]["run"] and r["M"] == 64]
    incumbent = rerun[0]["incumbent"]
    assert incumbent is not None
    assert incumbent in {r["config"] for r in rerun if r["stage"] is None}


def test_rankers_prune_to_their_top_k_plus_the_forced_arms(tmp_path):
    device = Device()
    fam = device.family()
    census = build.census_from_widths(fam, "512,256", "64")

    def by_name(configs, problem):
        return sorted(configs, key=lambda c: c.id, reverse=True)

    build.build_live(census, family=fam, lane=LANE, arch="sm90", out=tmp_path / "o.json",
                     timer=device.timer, soft=SOFT, rankers=[by_name],
                     options=build.BuildOptions(top_k=2, fill=False))
    _, arms, _ = read_logs([tmp_path / "measurements" / "fake.jsonl"])
    assert {r["config"] for r in arms} == {"default", "torch", "n64_k32_s1", "n64_k64_s1"}


def test_budget_stops_starting_new_signatures(tmp_path):
    log = write_log(tmp_path / "log.jsonl", synthetic_rows())
    source = build.LogSource(read_logs([log])[1])
    sigs = source.signatures(fake_family_record())
    other = attrs.evolve(sigs[0], key=KEY.replace("N=512", "N=1024"))
    ticks = iter([0.0, 0.0, 100.0, 100.0, 100.0])
    result = build.run_build([sigs[0], other], source, family=fake_family_record(),
                             arch="sm90", lane="fake_lane", out=tmp_path / "b.json", soft=SOFT,
                             options=build.BuildOptions(budget_s=10.0),
                             clock=lambda: next(ticks))
    assert result.skipped == (other.key,) and "budget of 10 s spent" in result.messages[0]


def _shapeset_file(path, points, **top):
    doc = {"schema_version": 1, **top, "points": [
        {"family": "fake", "op": "fake", "dtype": "fp16", "dims": {"N": 512, "K": 256},
         "M": 416, **p} for p in points]}
    path.write_text(json.dumps(doc))
    return path


def test_census_json_reader(tmp_path):
    fam = fake_family_record()
    path = _shapeset_file(tmp_path / "census.json", [
        {"dtype": "float16", "calls": 2.0, "weight": 0.5, "must": True, "eager_fraction": 0.25},
        {"dtype": "bfloat16", "weight": 0.25},
        {"op": "other", "dims": {"N": 1, "K": 1}, "M": 1},
        {"dtype": "int8", "dims": {"N": 1, "K": 1}, "M": 1},
        {"family": "gemm"}], working_set_bytes=123)
    census = build.read_census(path, fam)
    assert census.working_set_bytes == 123 and len(census.points) == 2
    assert len(census.skipped) == 3
    sig, = build.plan(census, fam, fill=False)
    assert sig.key == KEY and sig.dtype == "fp16" and sig.census_max == 416
    point, = sig.points
    assert (point.weight, point.calls, point.must) == (0.75, 2.0, True)
    assert point.alpha == pytest.approx(0.25)
    _shapeset_file(path, [{"dims": {"N": 512}, "M": 4}])
    with pytest.raises(oasr_core.errors.ConfigurationError,
                       match=r"census\.json: point fake\|op=fake\|dt=fp16\|N=512 M=4: "
                             r"missing dim 'K'"):
        build.read_census(path, fam)


@pytest.mark.parametrize(("doc", "message"), [
    ({"schema_version": 2, "points": []},
     r"s\.json: ShapeSet schema_version 2 was written by a newer oasr \(this one reads up to "
     r"1\)"),
    ({"points": [{"op": "fake", "dtype": "fp16", "N": 512, "K": 256, "M": 4}]},
     r"s\.json: no valid schema_version; not an oasr ShapeSet"),
    ({"schema_version": 1, "points": [{"family": "fake", "op": "fake", "dtype": "fp16",
                                       "N": 512, "K": 256, "M": 4}]},
     r"s\.json: malformed ShapeSet: required field missing @ \$\.points\.dims"),
])
def test_tune_build_reads_the_census_as_a_shapeset_and_refuses_others_in_one_line(
        tmp_path, cli_runner, doc, message):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    result = cli_runner("tune", "build", "--census", path, "--family", "gemm",
                        "--out", tmp_path / "t.json")
    assert result.exit_code == 2
    line, = result.output.strip().splitlines()
    assert re.match(r"error: .*" + message, line), line


def test_plan_adds_fill_points_and_thins_dense_censuses():
    fam = fake_family_record()
    census = build.census_from_widths(fam, "512,256", ",".join(str(m) for m in range(8, 520, 8)))
    dense, = build.plan(census, fam, max_points=10)
    assert len(dense.points) == 64
    thinned, = build.plan(census, fam, max_points=10, thin=True)
    assert len(thinned.points) == 10
    assert sum(p.weight for p in thinned.points) == pytest.approx(64.0)
    sparse, = build.plan(build.census_from_widths(fam, "512,256", "16,4096"), fam, max_points=6)
    fills = [p for p in sparse.points if p.fill]
    assert len(fills) == 4 and all(p.weight == 0.25 for p in fills)


def _cli(args, tmp_path, pm=None):
    pm = pm or make_plugin_manager(load_entrypoints=False)
    return CliRunner().invoke(build_cmd, [str(a) for a in args], obj=CliState(plugin_manager=pm))


def test_cli_from_log_and_bad_input(tmp_path):
    from oasr_core.testing import FakeFamilyPlugin

    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeFamilyPlugin(), name="fake")
    log = write_log(tmp_path / "log.jsonl", synthetic_rows())
    ok = _cli(["--from-log", log, "--out", tmp_path / "cli.json"], tmp_path, pm)
    assert ok.exit_code == 0, ok.output
    assert f"{KEY}  64:n64_k32_s1 256:n64_k64_s1 *:torch" in ok.output
    assert read_tuning_file(tmp_path / "cli.json").entries[KEY]
    bad = _cli(["--family", "fake", "--widths", "512,256"], tmp_path, pm)
    assert bad.exit_code == 2 and bad.output.strip().count("\n") == 0
    assert "--m-ladder" in bad.output
    unknown = _cli(["--family", "nope", "--widths", "1,2", "--m-ladder", "4"], tmp_path, pm)
    assert unknown.exit_code == 2 and "nope" in unknown.output


CHILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("build_child", {path!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
mod.child_main(sys.argv[1:])
"""
WIDTHS, LADDER = "512,256;1024,256;2048,512", "64,512,4096"


def child_main(argv: list[str]) -> None:
    """Run a scripted build; ``block`` hangs when the third signature starts measuring."""
    out, mode, report = Path(argv[0]), argv[1], Path(argv[2])
    device = Device(block_on=(512, 256) if mode == "block" else None,
                    marker=report.with_suffix(".marker"))
    result = live(out, device, WIDTHS, LADDER, fill=False)
    report.write_text(json.dumps({"benched": device.benched, "reused": list(result.reused),
                                  "replays": sum(device.timer.replays.values())}))


def _spawn(tmp_path: Path, mode: str, report: Path) -> subprocess.Popen:
    env = {**os.environ, "OASR_TUNE_USER_DB": "off",
           "OASR_TUNE_SYSTEM_DB": str(tmp_path / "no-system"),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    (tmp_path / "no-system").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-c", CHILD.format(path=__file__),
                             str(tmp_path / "db"), mode, str(report)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_killed_build_resumes_without_remeasuring_finished_signatures(tmp_path):
    first = tmp_path / "first.json"
    proc = _spawn(tmp_path, "block", first)
    marker = first.with_suffix(".marker")
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        assert time.monotonic() < deadline, "the child never reached the third signature"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    out = tmp_path / "db" / "sm90" / "fake.json"
    log = out.parent / "measurements" / "fake.jsonl"
    ckpt = out.parent / "measurements" / "fake.checkpoint.jsonl"
    finished = [json.loads(line)["key"] for line in ckpt.read_text().splitlines()]
    assert len(finished) == 2
    before = Counter(r["key"] for r in read_logs([log])[1])

    second = tmp_path / "second.json"
    proc = _spawn(tmp_path, "resume", second)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    report = json.loads(second.read_text())
    assert sorted(report["reused"]) == sorted(finished)
    assert {tuple(d) for d, _m in report["benched"]} == {(512, 256)}
    after = Counter(r["key"] for r in read_logs([log])[1])
    assert all(after[k] == before[k] for k in finished)
    assert len(read_tuning_file(out).entries) == 3
    replay(log, tmp_path / "replay.json", fill=False)
    assert (tmp_path / "replay.json").read_text() == out.read_text()


def test_reads_the_census_shapeset(tmp_path):
    from oasr_core.census import shapeset

    points = [shapeset.ShapePoint(family="fake", op="fake", dtype="fp16",
                                  dims={"N": 512, "K": 256}, m=m, calls=2.0, weight=m / 64,
                                  must=True, eager_fraction=0.5) for m in (64, 416)]
    shapeset.dump(shapeset.ShapeSet(points=points, working_set_bytes=0), tmp_path / "s.json")
    census = build.read_census(tmp_path / "s.json", fake_family_record())
    assert census.working_set_bytes is None
    assert [(p.m, p.weight, p.eager_fraction) for p in census.points] == [(64, 1.0, 0.5),
                                                                          (416, 6.5, 0.5)]
