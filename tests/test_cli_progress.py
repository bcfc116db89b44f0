"""Progress of ``oasr tune prebuild`` and ``oasr tune build``: a bar on a terminal, plain lines
in a log, nothing with --no-progress; the summary line always; the CPU machine's arch hint."""

from __future__ import annotations

import io
import json

import pytest
from click.testing import CliRunner
from test_build_offline import synthetic_rows, write_log
from test_prebuild_cmd import TinyLanePlugin

from oasr_core import cli, jit
from oasr_core.jit import cache
from oasr_core.jit.builder import BuildStatus, ModuleBuild, UnitStatus
from oasr_core.jit.spec import plan
from oasr_core.plugins import make_plugin_manager
from oasr_core.progress import ProgressMode, Tracker, track
from oasr_core.testing import FakeFamilyPlugin


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_job_done_in_a_blink_prints_one_line():
    out = io.StringIO()
    with track("points", 98, ProgressMode.LINES, stream=out) as t:
        for _ in range(98):
            t.advance("done")
    assert out.getvalue().splitlines() == [line for line in out.getvalue().splitlines()
                                           if line.startswith("progress: 98/98 points")]
    assert len(out.getvalue().splitlines()) == 1


def test_mode_follows_the_flag_and_the_terminal():
    assert ProgressMode.choose(False, Tty()) is ProgressMode.OFF
    assert ProgressMode.choose(None, Tty()) is ProgressMode.BAR
    assert ProgressMode.choose(None, io.StringIO()) is ProgressMode.LINES
    assert ProgressMode.choose(True, io.StringIO()) is ProgressMode.BAR


def test_plain_lines_every_tenth_and_a_summary():
    out = io.StringIO()
    with track("units", 20, ProgressMode.LINES, stream=out, quiet_s=0) as t:
        t.advance("cached", 4)
        for _ in range(16):
            t.advance("built")
    lines = out.getvalue().splitlines()
    assert 2 <= len(lines) <= 10
    assert lines[-1].startswith("progress: 20/20 units (16 built, 4 cached)")
    assert any("left" in line for line in lines) and "left" not in lines[-1]
    assert t.summary().startswith("20/20 units (16 built, 4 cached), ")


def test_eta_ignores_cached_units():
    t = Tracker("units", 10, ProgressMode.OFF)
    t.advance("cached", 5)
    assert t.eta_s() is None
    t.advance("built")
    assert t.eta_s() is not None and t.eta_s() >= 0


def test_bar_mode_draws_with_rich():
    out = Tty()
    with track("units", 3, ProgressMode.BAR, stream=out) as t:
        t.describe("gemm_sm90")
        t.advance("built", 2)
        t.advance("failed")
    text = out.getvalue()
    assert "3/3" in text and "2 built" in text and "1 failed" in text


@pytest.fixture
def fake_prebuild(tmp_path, monkeypatch):
    """``jit.prebuild`` that 'compiles' by writing each unit's object into the cache."""
    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path / "jit"))
    root = cache.cache_dir()

    def prebuild(specs, jobs=None):
        builds = []
        for spec in specs:
            p = plan(spec)
            units = {}
            for pu in p.units:
                obj = cache.object_path(root, pu.key)
                status = BuildStatus.CACHED if obj.is_file() else BuildStatus.BUILT
                obj.parent.mkdir(parents=True, exist_ok=True)
                obj.write_bytes(b"\0")
                units[pu.unit.name] = UnitStatus(status, pu.key)
            builds.append(ModuleBuild(name=spec.name, key=p.key, arch=spec.arch, path=None,
                                      status=BuildStatus.BUILT, units=units, seconds=0.0))
        return builds

    monkeypatch.setattr(jit, "prebuild", prebuild)
    monkeypatch.setattr(jit.Toolchain, "check_arch", lambda self, arch: None)
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(TinyLanePlugin())
    state = cli.CliState(plugin_manager=pm)
    return lambda *args: CliRunner().invoke(cli.main, ["tune", "prebuild", *args], obj=state)


def test_prebuild_counts_built_then_cached_units(fake_prebuild):
    first = fake_prebuild("--family", "tp", "--arch", "9.0a", "--all")
    assert first.exit_code == 0, first.output
    assert "prebuilt 1 module(s) for 90a: 2 units (2 built, 0 cached, 0 failed)" in first.stdout
    assert "progress: 2/2 units (2 built)" in first.stderr
    second = fake_prebuild("--family", "tp", "--arch", "9.0a", "--all")
    assert "(0 built, 2 cached, 0 failed)" in second.stdout
    assert "progress: 2/2 units (2 cached)" in second.stderr
    quiet = fake_prebuild("--family", "tp", "--arch", "9.0a", "--all", "--no-progress")
    assert "progress:" not in quiet.stderr and "prebuilt 1 module(s)" in quiet.stdout
    data = json.loads(fake_prebuild("--family", "tp", "--arch", "9.0a", "--json",
                                    "--no-progress").stdout)
    assert data["units"] == {"cached": 1}


def test_prebuild_on_a_machine_without_gpu_asks_for_arch(fake_prebuild, monkeypatch):
    monkeypatch.delenv("OASR_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    res = fake_prebuild("--family", "tp")
    assert res.exit_code == 2
    assert "no GPU seen and no target given: pass --arch, e.g. --arch 9.0a" in res.output
    assert len(res.output.strip().splitlines()) == 1


def _build(*args):
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeFamilyPlugin(), name="fake")
    return CliRunner().invoke(cli.main, ["tune", "build", *map(str, args)],
                              obj=cli.CliState(plugin_manager=pm))


def test_build_replay_shows_plain_progress_and_says_replayed(tmp_path):
    log = write_log(tmp_path / "log.jsonl", synthetic_rows())
    res = _build("--from-log", log, "--out", tmp_path / "t.json")
    assert res.exit_code == 0, res.output
    assert "progress: 4/4 points" in res.stderr
    assert "4 point(s) replayed from the log" in res.stdout
    assert res.stdout.startswith("regions: BOUND:CHOICE serves sizes M <= BOUND")
    quiet = _build("--from-log", log, "--out", tmp_path / "u.json", "--no-progress")
    assert "progress:" not in quiet.stderr and "note:" not in quiet.stderr


def test_replay_names_the_live_only_options_it_ignores(tmp_path):
    log = write_log(tmp_path / "log.jsonl", synthetic_rows())
    res = _build("--from-log", log, "--thin", "--max-points", "3", "--out", tmp_path / "t.json",
                 "--no-progress")
    assert res.exit_code == 0, res.output
    assert ("note: --max-points, --thin choose what a live build measures; a replay "
            "(--from-log) takes the points the log holds") in res.stderr


@pytest.mark.parametrize("content, needle", [
    ("", "no measurement row (it is empty)"),
    ("garbage\n{not json\n[1, 2]\n", "no measurement row (3 line(s) skipped)"),
])
def test_empty_or_garbage_log_is_one_clear_line(tmp_path, content, needle):
    log = tmp_path / "bad.jsonl"
    log.write_text(content)
    res = _build("--from-log", log, "--out", tmp_path / "t.json", "--no-progress")
    assert res.exit_code == 2
    assert needle in res.stderr and "pass --family" not in res.stderr


def test_skipped_lines_of_a_good_log_are_counted(tmp_path):
    log = write_log(tmp_path / "log.jsonl", synthetic_rows())
    log.write_text(log.read_text() + "truncated {\n")
    res = _build("--from-log", log, "--out", tmp_path / "t.json", "--no-progress")
    assert res.exit_code == 0, res.output
    assert f"note: {log}: 1 line(s) skipped (not JSON, or not a run or measurement row)" \
        in res.stderr


def test_replay_with_effort_takes_the_points_options_without_a_note(tmp_path):
    log = write_log(tmp_path / "log.jsonl", synthetic_rows())
    res = _build("--from-log", log, "--effort", "exhaustive", "--max-points", "3",
                 "--out", tmp_path / "t.json", "--no-progress")
    assert res.exit_code == 0, res.output
    assert "note: --max-points" not in res.stderr
