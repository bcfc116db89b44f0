"""The oasr CLI: select, status, diff, plugins, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from oasr_test_plugins import ARCH, write

from oasr_core import cli, runtime


@pytest.fixture
def env(tiers, tmp_path):
    """The ``tiers`` runtime (tests/conftest.py) driven through the CLI."""
    state = cli.CliState(plugin_manager=tiers["rt"].pm)

    def run(*args):
        return CliRunner().invoke(cli.main, list(args), obj=state)

    return {"run": run, "user": tiers["user"], "system": tiers["system"], "tmp": tmp_path}


SELECT = ("tune", "select", "--family", "tg", "--op", "gemm", "--dtype", "fp16",
          "--dim", "N=512", "--dim", "K=256", "--arch", ARCH)


def test_select_prints_config_and_tier(env):
    write(env["system"], "tg", {("gemm", "half", (512, 256)): [[512, "a"], [None, "torch"]]})
    res = env["run"](*SELECT, "--m", "416", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert (data["choice"], data["tier"], data["lane"]) == ("a", "system", "tg_main")
    assert data["params"]["tile"] == [32, 64]
    assert data["reason"] == "system tier entry tg|op=gemm|dt=half|N=512|K=256"
    res = env["run"](*SELECT, "--m", "4096")
    assert res.stdout.strip().splitlines() == [
        "torch  (tier system, lane tg_main)",
        "  why: system tier entry tg|op=gemm|dt=half|N=512|K=256"]


def test_select_default_names_the_config_it_runs(env):
    res = env["run"](*SELECT, "--m", "16")
    assert res.exit_code == 0
    assert res.stdout.strip().splitlines() == [
        "default  (tier default, lane tg_main, runs d)",
        "  why: no user or system entry covers it; the family's untuned selector is default; "
        "cost model: no tuning file ships a cost model for this lane"]


@pytest.mark.parametrize("args, needle", [
    (("tune", "select", "--family", "nope", "--op", "gemm", "--dtype", "fp16", "--m", "4"),
     "nope"),
    ((*SELECT, "--m", "4", "--lane", "zzz"), "zzz"),
    (("tune", "select", "--family", "tg", "--op", "gemm", "--dtype", "fp16", "--dim", "N512",
      "--m", "4"), "NAME=INT"),
    ((*SELECT[:-1], "sm9x", "--m", "4"), "arch family"),
    (("-p", "oops", "plugins"), "no:NAME"),
])
def test_bad_input_is_one_line_and_exit_2(env, args, needle):
    res = env["run"](*args)
    assert res.exit_code == 2
    assert needle in res.output
    assert "Traceback" not in res.output


def test_status_shows_tiers_and_staleness(env):
    write(env["user"], "tg", {("gemm", "half", (512, 256)): [[None, "a"]]})
    res = env["run"]("tune", "status", "--arch", ARCH, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    fam = next(f for f in data["families"] if f["family"] == "tg")
    user = next(t for t in fam["tiers"] if t["tier"] == "user")
    system = next(t for t in fam["tiers"] if t["tier"] == "system")
    assert user["loaded"] and user["entries"] == 1 and not system["loaded"]
    res = env["run"]("tune", "status", "--arch", ARCH)
    assert "sm90/tg (lane tg_main)" in res.output and "1 entries" in res.output


def test_diff_reports_region_changes(env):
    write(env["user"], "tg", {("gemm", "half", (512, 256)): [[512, "a"], [None, "torch"]]})
    a = env["tmp"] / "a.json"
    a.write_bytes((env["user"] / ARCH / "tg.json").read_bytes())
    write(env["user"], "tg", {("gemm", "half", (512, 256)): [[1024, "b"], [None, "torch"]],
                              ("gemm", "half", (256, 256)): [[None, "a"]]})
    res = env["run"]("tune", "diff", str(a), str(env["user"] / ARCH / "tg.json"))
    assert res.exit_code == 0, res.output
    assert "N=256" in res.output and "N=512" in res.output
    res = env["run"]("tune", "diff", str(a), str(env["tmp"] / "missing.json"))
    assert res.exit_code == 2 and "missing.json" in res.output


def test_console_script_exit_code_in_a_real_process(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "oasr_core.cli", "tune", "select", "--family", "no_such_family",
         "--op", "gemm", "--dtype", "fp16", "--m", "4"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and "no_such_family" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_runtime_is_built_lazily():
    runtime.install_runtime(None)
    assert runtime._RUNTIME is None
