"""The CLI as a user meets it: version, -h, -v anywhere, one-line usage errors, help text on
every option, arch checks in select and status, diff --json, plugins' columns, completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from oasr_test_plugins import ARCH, write

from oasr_core import cli
from oasr_core.commands import complete


@pytest.fixture
def run(tiers):
    state = cli.CliState(plugin_manager=tiers["rt"].pm)

    def invoke(*args):
        return CliRunner().invoke(cli.main, list(args), obj=state)

    invoke.tiers = tiers
    return invoke


def _walk(cmd: click.Command, path: str = "oasr"):
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _walk(cmd.get_command(ctx, name), f"{path} {name}")


def test_every_option_of_every_command_has_help_text():
    bare = [f"{path} {opt.opts[-1]}" for path, cmd in _walk(cli.main)
            for opt in cmd.params if isinstance(opt, click.Option) and not opt.hidden
            and not opt.help and opt.name not in ("help", "version")]
    assert bare == []


def test_every_command_shows_examples_in_its_help():
    missing = [path for path, cmd in _walk(cli.main)
               if not isinstance(cmd, click.Group) and "Example" not in (cmd.epilog or "")
               + (cmd.help or "")]
    assert missing == []


def test_version_and_short_help(run):
    res = run("--version")
    assert res.exit_code == 0 and "oasr-core" in res.output and "0." in res.output
    for args in (("-h",), ("tune", "-h"), ("tune", "select", "-h"), ("doctor", "-h")):
        res = run(*args)
        assert res.exit_code == 0 and "Usage:" in res.output, args


def test_verbose_after_the_subcommand(run, monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "_plugin_lines", lambda rows, failures, verbose: seen.setdefault(
        "verbose", verbose) and [])
    res = run("plugins", "-v")
    assert res.exit_code == 0 and seen["verbose"] is True


def test_usage_errors_are_one_line_in_a_real_process():
    for args in (["tune", "select", "--bogus"], ["tune", "build", "--max-points", "x"],
                 ["tune", "nope"]):
        proc = subprocess.run([sys.executable, "-m", "oasr_core.cli", *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, args
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: oasr tune"), proc.stderr
        assert "-h)" in lines[0]


SELECT = ("tune", "select", "--family", "tg", "--op", "gemm", "--dtype", "fp16",
          "--dim", "N=512", "--dim", "K=256", "--m", "64")


@pytest.mark.parametrize("arch", ["sm999", "sm100"])
def test_select_on_an_arch_no_lane_runs_on_is_an_error(run, arch):
    res = run(*SELECT, "--arch", arch)
    assert res.exit_code == 2
    assert f"no installed lane of family tg runs on {arch}" in res.output
    assert "tg_main on sm80/sm90" in res.output


def test_select_without_a_gpu_asks_for_arch(run, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    write(run.tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "a"]]})
    res = run(*SELECT)
    assert res.exit_code == 2
    assert "no GPU seen: pass --arch, e.g. --arch sm90 (the tiers hold sm90)" in res.output


def test_status_without_a_gpu_says_so(run, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    write(run.tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "a"]]})
    res = run("tune", "status")
    assert res.exit_code == 0
    assert res.output.splitlines()[0].startswith(
        "no GPU seen: showing every arch the tiers hold (sm90)")
    data = json.loads(run("tune", "status", "--json").output)
    assert data["device_arch"] is None


def test_status_imports_no_torch_without_a_gpu():
    code = ("import sys; from oasr_core import cli\n"
            "try: cli.main(['tune', 'status'], obj=cli.CliState())\n"
            "except SystemExit: pass\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "False"


def test_diff_json(run):
    user = run.tiers["user"]
    write(user, "tg", {("gemm", "half", (512, 256)): [[512, "a"], [None, "torch"]]})
    a = user.parent / "a.json"
    a.write_bytes((user / ARCH / "tg.json").read_bytes())
    write(user, "tg", {("gemm", "half", (512, 256)): [[1024, "b"], [None, "torch"]]})
    res = run("tune", "diff", str(a), str(user / ARCH / "tg.json"), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["identical"] is False and data["a"] == str(a)
    assert any(line.startswith("~ tg|op=gemm|dt=half|N=512|K=256") for line in data["changes"])
    same = json.loads(run("tune", "diff", str(a), str(a), "--json").output)
    assert same["identical"] is True and same["changes"] == []


def test_plugins_columns_align_and_blocked_plugins_are_marked():
    rows = [{"name": "gemm", "distribution": "oasr-gemm", "version": "0.1.0",
             "status": "loaded", "families": ["gemm"], "lanes": ["sm80_mma", "sm90_wgmma"]},
            {"name": "oasr_core.model_tier", "distribution": None, "version": None,
             "status": "loaded", "families": [], "lanes": []},
            {"name": "scaled_mm", "distribution": None, "version": None, "status": "blocked",
             "families": [], "lanes": []}]
    lines = cli._plugin_lines(rows, [])
    assert lines[0].split() == ["plugin", "distribution", "families", "lanes"]
    starts = {line.index(word) for line, word in zip(lines[:3], ("distribution", "oasr-gemm",
                                                                 "oasr-core"), strict=True)}
    assert len(starts) == 1, lines
    assert "oasr-core (built in)" in lines[2]
    assert lines[3] == "blocked: scaled_mm (-p no:scaled_mm)"
    assert not any(line.startswith("scaled_mm") for line in lines)
    rows[0]["hooks"] = ["oasr_linear", "oasr_register_lanes"]
    verbose = cli._plugin_lines(rows, [], verbose=True)
    assert verbose[:5] == [lines[0], lines[1], "    hooks: oasr_linear, oasr_register_lanes",
                           lines[2], "    hooks: none"]


def test_completion_of_families_lanes_and_arches(run):
    ctx = click.Context(cli.main, obj=cli.CliState(plugin_manager=run.tiers["rt"].pm))
    with ctx:
        assert [c.value for c in complete.families(ctx, None, "tg")] == ["tg"]
        assert [c.value for c in complete.lanes(ctx, None, "tg_")] == ["tg_main", "tg_other"]
        assert "sm90" in [c.value for c in complete.arch_families(ctx, None, "sm")]
        assert "9.0a" in [c.value for c in complete.targets(ctx, None, "9")]
        assert {"conformer", "whisper_encoder"} <= {
            c.value for c in complete.workloads(ctx, None, "")}


def test_shell_completion_through_click(run, monkeypatch):
    monkeypatch.setenv("COMP_WORDS", "oasr tune select --family ")
    monkeypatch.setenv("COMP_CWORD", "4")
    monkeypatch.setenv("_OASR_COMPLETE", "bash_complete")
    res = CliRunner().invoke(cli.main, [], prog_name="oasr",
                             obj=cli.CliState(plugin_manager=run.tiers["rt"].pm))
    assert "plain,tg" in res.output.split()


def test_selecting_another_lane_by_name_is_a_note_not_a_warning(run):
    write(run.tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "a"]]})
    res = run(*SELECT, "--arch", ARCH, "--lane", "tg_other")
    assert res.exit_code == 0, res.output
    assert "warning" not in res.stderr
    assert ("  note: the tier entries here were tuned for another lane, so they do not apply "
            "to lane tg_other; the next tier answers") in res.stdout.splitlines()


def test_select_names_an_unknown_lane_before_the_arch(run):
    res = run(*SELECT, "--arch", "sm100", "--lane", "tg_nope")
    assert res.exit_code == 2 and "no plugin registers lane 'tg_nope'" in res.output
    res = run(*SELECT, "--arch", "sm100", "--lane", "tg_other")
    assert res.exit_code == 2 and "lane tg_other runs on" in res.output


# --- the newcomer trial's mistakes: one line, non-zero exit -------------------------------

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("args", "message"), [
    (("tune", "select", "--family", "gemm", "--op", "gemm", "--dtype", "fp16", "--dim",
      "N=-256", "--dim", "K=256", "--m", "16", "--arch", "sm90"), "a dim is never negative"),
    (("tune", "status", "--arch", "sm999"), "no installed lane runs on sm999"),
    (("tune", "prebuild", "--family", "gemm", "--arch", "99.9"),
     "no lane of family 'gemm' runs on sm999 (nvcc target 999a); its lanes run on sm80, sm86, "
     "sm89, sm90, e.g. --arch 90a"),
    (("tune", "status", "--census", "db/sm90/gemm.json"), "this is a tuning file"),
    (("tune", "build", "--family", "scaled_mm", "--from-log",
      "db/sm90/measurements/gemm.jsonl", "--out", "{tmp}/x.json"),
     "the log holds rows of family gemm, none of scaled_mm"),
    (("tune", "evaluate", "--log", "db/sm90/measurements/gemm.jsonl", "--db",
      "s=db/sm90/scaled_mm.json"), "a scaled_mm file for sm90; the log measured gemm"),
    (("tune", "build", "--from-log", "db/sm90/measurements/gemm.jsonl", "--out",
      "{tmp}/missing/x.json"), "no directory"),
    (("tune", "census", "--workload", "conformer", "--service-mode", "offline",
      "--max-batch-size", "4", "--out", "{tmp}/missing/c.json"), "no directory"),
    (("tune", "census", "--workload", "conformer", "--service-mode", "offline",
      "--max-batch-size", "4", "--chunk-size", "16", "--out", "{tmp}/c.json"),
     "an offline census has no chunks"),
    (("-p", "no:gemmm", "plugins"), "no installed plugin is named 'gemmm' (did you mean 'gemm'?)"),
    (("tune", "select", "--family", "gemm", "--op", "gemm", "--dtype", "fp16", "--dim", "N",
      "256", "--dim", "K=256", "--m", "16", "--arch", "sm90"),
     "Invalid value for --dim: 'N': expected NAME=INT as one argument, e.g. --dim N=256"),
    (("tune", "census", "--workload", "conformer", "--service-mode", "offline",
      "--max-batch-size", "4", "--out", "{tmp}/c.json", "--param", "layers", "2"),
     "'layers': expected NAME=VALUE as one argument, e.g. --param layers=4"),
    (("tune", "evaluate", "--log", "db/sm90/measurements/gemm.jsonl", "--db", "x",
      "db/sm90/gemm.json"), "'x': expected NAME=PATH as one argument"),
    (("tune", "diff", "nope1.json", "nope2.json"),
     "nope1.json: no such file; nope2.json: no such file"),
    (("tune", "evaluate", "--log", "nope1.jsonl", "--log", "db/sm90/measurements/gemm.jsonl",
      "--log", "nope2.jsonl"), "nope1.jsonl: no such file; nope2.jsonl: no such file"),
    (("tune", "evaluate", "--log", "db/sm90/measurements/gemm.jsonl", "--db", "a=nope1.json",
      "--db", "b=nope2.json"), "--db a=nope1.json, --db b=nope2.json: no such file"),
    (("tune", "status", "--census", "nope1.json", "--census", "nope2.json"),
     "nope1.json: no such file; nope2.json: no such file"),
])
def test_each_trial_mistake_is_one_line_and_exit_2(tmp_path, monkeypatch, args, message):
    """With the installed plugins, in process (the real process's exit code and one-line
    stderr are checked once in ``test_cli.py``)."""
    monkeypatch.chdir(REPO)
    res = CliRunner().invoke(cli.main, [a.replace("{tmp}", str(tmp_path)) for a in args],
                             obj=cli.CliState())
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1 and message in res.stderr, res.stderr
    assert not (tmp_path / "missing").exists()
