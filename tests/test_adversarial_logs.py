"""Measurement logs and exact points a build or a census reader must refuse or survive: a log
row without ``dims`` (the long fuzz found it), a log naming configs the lane does not have,
and exact point keys that are not ``BxT``. Real inputs: the shipped sm90 gemm log and
conv1d table, the installed plugins, the CLI in-process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from oasr_core import database, runtime
from oasr_core.census import shapeset as ss
from oasr_core.cli import CliState, main
from oasr_core.errors import DatabaseError

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "db/sm90/measurements/gemm.jsonl"
CONV = ROOT / "db/sm90/conv1d.json"
KEY = "gemm|op=gemm|dt=half|N=256|K=1024"


@pytest.fixture(autouse=True)
def _no_user_tier(monkeypatch):
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")


def _invoke(*args):
    runtime.install_runtime(None)
    return CliRunner().invoke(main, [str(a) for a in args], obj=CliState())


def _rows():
    return [json.loads(line) for line in LOG.read_text().splitlines() if line.strip()]


@pytest.fixture
def no_dims(tmp_path):
    rows = _rows()[:120]
    arms = [r for r in rows if r.get("row") == "arm"]
    for r in arms[:2]:
        del r["dims"]
    path = tmp_path / "nodims.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_row_without_dims_builds_and_evaluates(no_dims, tmp_path):
    full = tmp_path / "full.jsonl"
    full.write_text("".join(json.dumps(r) + "\n" for r in _rows()[:120]))
    expected = _invoke("tune", "build", "--from-log", full, "--out", tmp_path / "a.json")
    got = _invoke("tune", "build", "--from-log", no_dims, "--out", tmp_path / "b.json")
    assert got.exit_code == 0 and expected.exit_code == 0, got.output
    a = json.loads((tmp_path / "a.json").read_text())["entries"]
    b = json.loads((tmp_path / "b.json").read_text())["entries"]
    assert a == b and a
    scored = _invoke("tune", "evaluate", "--log", no_dims, "--db", f"x={ROOT}/db/sm90/gemm.json")
    assert scored.exit_code == 0, scored.output


def test_a_log_naming_configs_the_lane_lacks_is_refused(tmp_path):
    keep = [r for r in _rows() if r.get("row") == "run" or r.get("key") == KEY]
    for r in keep:
        if r.get("row") == "arm" and r.get("config") not in ("default", "torch"):
            r["config"] = "renamed_" + r["config"]
    log = tmp_path / "renamed.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in keep))
    out = tmp_path / "renamed" / "sm90" / "gemm.json"
    out.parent.mkdir(parents=True)
    got = _invoke("tune", "build", "--from-log", log, "--out", out)
    assert got.exit_code == 2, got.output
    [line] = [x for x in got.stderr.splitlines() if x.startswith("error:")]
    assert str(log) in line and "sm90_wgmma" in line and "renamed_" in line
    assert not out.exists()


@pytest.mark.parametrize("point", ["x", "1x", "-1x3000", "../1x3000", "\uff11x3000", "0x3000",
                                   "1x3000|", "1 x 3000", "1x03000"])
def test_a_point_key_that_is_not_bxt_is_refused(tmp_path, point):
    doc = json.loads(CONV.read_text())
    entry = next(e for e in doc["entries"].values() if e.get("points"))
    entry["points"][point] = "heuristic"
    path = tmp_path / "conv1d.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DatabaseError, match="not an exact point key"):
        database.read_tuning_file(path)


@pytest.mark.parametrize("point", ["../../x", "1x", "x3000"])
def test_a_census_point_that_is_not_bxt_is_one_line(tmp_path, point):
    good = ss.ShapePoint(family="conv1d", op="conv1d", dtype="fp16",
                         dims={"Cin": 80, "Cout": 512, "k": 3, "stride": 1, "pad": 1, "dil": 1,
                               "groups": 1}, m=3000, calls=1.0, weight=0.01, point="1x3000")
    path = ss.dump(ss.ShapeSet(points=(good,)), tmp_path / "c.json")
    raw = json.loads(path.read_text())
    raw["points"][0]["point"] = point
    path.write_text(json.dumps(raw))
    got = _invoke("tune", "status", "--arch", "sm90", "--census", path)
    assert got.exit_code == 2, got.output
    assert "Traceback" not in got.output
    [line] = [x for x in got.stderr.splitlines() if x.startswith("error:")]
    assert str(path) in line and "exact point key" in line
