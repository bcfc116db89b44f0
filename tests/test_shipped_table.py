"""The shipped sm90 gemm table is what its committed H200 measurement log rebuilds to.

`oasr tune build --from-log` runs the same decision code as the live build on the H200, so a
CPU machine can reproduce (and re-score) the shipped table byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "db" / "sm90" / "gemm.json"
LOG = REPO / "db" / "sm90" / "measurements" / "gemm.jsonl"
KNOBS = ("--thin", "--max-points", "14")
"""The knobs the shipped table was built with (benchmarks/h200/build_session.sh)."""

pytest.importorskip("oasr_gemm", reason="the gemm family plugin is part of the setup command")


def _oasr(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OASR_")}
    env.update(OASR_TUNE_USER_DB="off", OASR_TUNE_SYSTEM_DB="off")
    return subprocess.run([sys.executable, "-m", "oasr_core.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_committed_log_rebuilds_the_committed_table(tmp_path):
    out = tmp_path / "gemm.json"
    res = _oasr("tune", "build", "--from-log", str(LOG), "--out", str(out), "--fresh", *KNOBS,
                cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == TABLE.read_bytes()


def test_shipped_table_scores_within_the_targets(tmp_path):
    res = _oasr("tune", "evaluate", "--log", str(LOG), "--db", f"shipped={TABLE}", "--json",
                cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    overall = next(s for s in report["selectors"] if s["name"] == "shipped")["overall"]
    assert overall["n"] >= 60 and overall["missing"] == 0
    assert overall["geomean"] <= 0.02 and overall["p95"] <= 0.08
