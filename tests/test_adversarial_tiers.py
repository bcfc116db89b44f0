"""Tier files that name configs the lane knows with other parameters: selection serves the
lane's own record, and ``oasr tune status`` reports the entry stale.

Real inputs: the shipped sm90 gemm table and the installed gemm plugin.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from oasr_core import runtime
from oasr_core.cli import CliState, main
from oasr_core.selection import clear_memo, select
from oasr_core.types import Tier

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "db/sm90/gemm.json"
KEY = "gemm|op=gemm_activation|dt=half|N=1024|K=256"
CID = "ws_64x16x128_c1x1_swap"
"""The config serving ``KEY`` up to M=128 in the shipped table."""


@pytest.fixture(params=["user", "system"])
def forged(request, tmp_path, monkeypatch):
    """The shipped table with ``CID``'s parameters forged, as the ``param`` tier's file."""
    doc = json.loads(SHIPPED.read_text())
    doc["configs"][CID].update(tile=[999, 7, 3], unit="../../../x")
    roots = {t: tmp_path / t for t in ("user", "system")}
    for root in roots.values():
        (root / "sm90").mkdir(parents=True)
    path = roots[request.param] / "sm90" / "gemm.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(roots["system"]))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(roots["user"]))
    runtime.install_runtime(None)
    clear_memo()
    return request.param, path


def test_selection_serves_the_lanes_record(forged):
    tier, _ = forged
    sel = select("gemm", "gemm_activation", "fp16", (1024, 256), 64, "sm90")
    lane = runtime.get_runtime().registry.lane("sm90_wgmma")
    assert sel.tier is Tier(tier) and sel.config.id == CID
    assert sel.config.to_json() == lane.config(CID).to_json()
    assert list(sel.config.params["tile"]) == [64, 16, 128]


def test_cli_reports_the_lanes_record_and_status_the_stale_entry(forged):
    _, path = forged
    runner = CliRunner()
    got = runner.invoke(main, ["tune", "select", "--family", "gemm", "--op", "gemm_activation",
                               "--dtype", "fp16", "--dim", "N=1024", "--dim", "K=256",
                               "--m", "64", "--arch", "sm90", "--json"], obj=CliState())
    assert got.exit_code == 0, got.output
    params = json.loads(got.stdout)["params"]
    assert params["tile"] == [64, 16, 128] and params["unit"] == CID
    status = runner.invoke(main, ["tune", "status", "--arch", "sm90", "--json"], obj=CliState())
    assert status.exit_code == 0, status.output
    tiers = [t for fs in json.loads(status.stdout)["families"] for t in fs["tiers"]
             if t["path"] == str(path)]
    assert tiers and KEY in tiers[0]["stale_entries"]
