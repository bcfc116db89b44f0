"""``oasr tune census --param``: every bad value is one line and exit 2 before anything is
probed: too deep, zero or far beyond the workload's integer defaults, the dtype parameter
(``--dtype`` owns it), and whatever a model factory raises on its arguments."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from oasr_core import runtime
from oasr_core.cli import CliState, main

CENSUS = ["tune", "census", "--workload", "conformer", "--service-mode", "offline",
          "--max-batch-size", "2", "--max-frames", "128"]


def _census(tmp_path, *args):
    runtime.install_runtime(None)
    got = CliRunner().invoke(main, [*CENSUS, "--out", str(tmp_path / "c.json"), *args],
                             obj=CliState())
    assert "Traceback" not in got.output
    assert got.exception is None or isinstance(got.exception, SystemExit), got.exception
    return got


@pytest.mark.parametrize("value, needle", [
    ("heads=0", "integer from 1 to 64"), ("input_dim=0", "integer from 1 to 1280"),
    ("d_model=1099511627776", "integer from 1 to 4096"), ("layers=20000", "1 to 256"),
    ("layers=0", "1 to 256"), ("layers=-1", "1 to 256"), ("layers=true", "1 to 256"),
    ("layers=\"16\"", "1 to 256"), ("layers=1e400", "1 to 256"),
    ("layers=" + "[" * 5000 + "]" * 5000, "nests deeper than"),
    ("dtype=\"int8\"", "set it with --dtype"),
])
def test_a_bad_param_is_one_line_exit_2(tmp_path, value, needle):
    got = _census(tmp_path, "--param", value)
    assert got.exit_code == 2, got.output
    [line] = [x for x in got.stderr.splitlines() if x.startswith("error:")]
    assert needle in line and len(line) < 400, line
    assert not (tmp_path / "c.json").exists()


def test_a_factory_raising_on_its_arguments_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "adv_factory.py").write_text(
        "def make(width=4):\n    return 1 // (width - width)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "adv_factory", raising=False)
    runtime.install_runtime(None)
    got = CliRunner().invoke(main, ["tune", "census", "--model", "adv_factory:make",
                                    "--service-mode", "offline", "--max-batch-size", "2",
                                    "--max-frames", "128", "--out", str(tmp_path / "c.json")],
                             obj=CliState())
    assert got.exit_code == 2, got.output
    [line] = [x for x in got.stderr.splitlines() if x.startswith("error:")]
    assert "ZeroDivisionError" in line and "Traceback" not in got.output
