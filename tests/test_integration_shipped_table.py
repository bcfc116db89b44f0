"""Integration: the shipped sm90 tables are what their committed H200 measurement logs rebuild
to, with the real gemm, scaled_mm and conv1d plugins.

`oasr tune build --from-log` runs the same decision code as the live build on the H200, so a
CPU machine can reproduce (and re-score) the shipped table byte for byte.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "db" / "sm90" / "gemm.json"
LOG = REPO / "db" / "sm90" / "measurements" / "gemm.jsonl"
KNOBS = ("--thin", "--max-points", "14")
"""The knobs the shipped tables were built with (``benchmarks/h200/run.sh build-table`` and
``bench-scaled-mm``)."""
SHIPPED = ("gemm", "scaled_mm", "conv1d", "scaled_mm_fp8")
"""The families with a shipped table and log (their plugins are in the setup command)."""


def _oasr(*args: str, cwd: Path, **extra_env: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OASR_")}
    env.update(OASR_TUNE_USER_DB="off", OASR_TUNE_SYSTEM_DB="off", **extra_env)
    return subprocess.run([sys.executable, "-m", "oasr_core.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("family", ["conv1d"])
def test_committed_log_rebuilds_the_committed_table(tmp_path, family):
    """conv1d's replay; the README's first block replays and ``cmp``s the other three, and
    ``tests/test_readme_commands.py`` runs it."""
    out = tmp_path / f"{family}.json"
    log = REPO / "db" / "sm90" / "measurements" / f"{family}.jsonl"
    res = _oasr("tune", "build", "--from-log", str(log), "--out", str(out), "--fresh", *KNOBS,
                cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == (REPO / "db" / "sm90" / f"{family}.json").read_bytes()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="OPENBLAS_CORETYPE names x86-64 kernels")
@pytest.mark.parametrize("coretype", ["Haswell", "Prescott"])
def test_the_replay_is_the_same_bytes_under_every_blas_kernel(tmp_path, coretype):
    """The cost model's fits and held-out figures do not depend on the BLAS kernel numpy runs:
    before its sums were exact, SkylakeX, Sandybridge and Prescott kernels rebuilt a
    ``gemm.json`` whose held-out group figures differed from Haswell's (a ranking near-tie
    flipped). Haswell needs AVX2, Prescott only SSE3: both run on any x86-64 CI machine."""
    out = tmp_path / "gemm.json"
    res = _oasr("tune", "build", "--from-log", str(LOG), "--out", str(out), "--fresh",
                cwd=tmp_path, OPENBLAS_CORETYPE=coretype, OPENBLAS_VERBOSE="2")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == TABLE.read_bytes()


@pytest.mark.parametrize("family", SHIPPED)
def test_shipped_table_is_current_for_the_installed_kernels(family):
    """The shipped tables' soft stamps match the installed plugins' (an implementation recorded
    as compiling to the same machine code keeps the earlier hash), so ``tune status`` shows them
    fresh; a plugin edit that changes a unit, flag or header fails this until the table is
    rebuilt or the equivalence is checked and recorded."""
    from oasr_core import database, stamps
    from oasr_core.plugins import make_plugin_manager
    from oasr_core.registry import Registry

    registry = Registry.from_plugin_manager(make_plugin_manager())
    current = stamps.current_soft_validators(registry.family(family))
    stamped = json.loads((REPO / "db" / "sm90" / f"{family}.json").read_text())
    soft = stamped["validators"]["soft"]
    assert soft["impl_hash"] == current["impl_hash"]
    assert database.validators.stale_reasons(soft, {
        k: v for k, v in current.items() if k not in ("sku", "nvcc")}) == []


def test_shipped_int8_table_beats_its_heuristic(tmp_path):
    table = REPO / "db" / "sm90" / "scaled_mm.json"
    log = REPO / "db" / "sm90" / "measurements" / "scaled_mm.jsonl"
    res = _oasr("tune", "evaluate", "--log", str(log), "--db", f"shipped={table}", "--json",
                cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    by_name = {s["name"]: s for s in json.loads(res.stdout)["selectors"]}
    shipped, heuristic = by_name["shipped"]["overall"], by_name["heuristic"]["overall"]
    assert shipped["n"] >= 50 and shipped["missing"] == 0
    assert shipped["geomean"] <= heuristic["geomean"] and shipped["max"] <= heuristic["max"]
    assert shipped["geomean"] <= 0.02


def test_shipped_table_scores_within_the_targets(tmp_path):
    res = _oasr("tune", "evaluate", "--log", str(LOG), "--db", f"shipped={TABLE}", "--json",
                cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    overall = next(s for s in report["selectors"] if s["name"] == "shipped")["overall"]
    assert overall["n"] >= 60 and overall["missing"] == 0
    assert overall["geomean"] <= 0.02 and overall["p95"] <= 0.08


def test_status_reports_the_int8_census_covered_by_the_shipped_table(tmp_path):
    census = REPO / "benchmarks" / "census" / "conformer_offline_int8.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OASR_")}
    env.update(OASR_TUNE_USER_DB="off", OASR_TUNE_SYSTEM_DB=str(REPO / "db"))
    res = subprocess.run([sys.executable, "-m", "oasr_core.cli", "tune", "status", "--arch",
                          "sm90", "--census", str(census)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("scaled_mm:"))
    assert "over 4 signature(s)" in line and "0 on the shape heuristic" in line, line
    assert "(system=" in line


def test_shipped_conv1d_table_serves_its_exact_points_and_regions(tmp_path):
    """Scored on its H200 log, the conv1d table is the oracle at the Whisper front end's exact
    points (no regions there) and within the targets on the Conformer depthwise regions."""
    table = REPO / "db" / "sm90" / "conv1d.json"
    log = REPO / "db" / "sm90" / "measurements" / "conv1d.jsonl"
    res = _oasr("tune", "evaluate", "--log", str(log), "--db", f"shipped={table}", "--json",
                cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    by_name = {s["name"]: s for s in json.loads(res.stdout)["selectors"]}
    shipped, torch = by_name["shipped"], by_name["torch"]
    assert shipped["overall"]["missing"] == 0
    assert shipped["overall"]["geomean"] <= 0.02 and shipped["overall"]["p95"] <= 0.08
    assert torch["overall"]["geomean"] > 1.0, "the build measured torch several times slower"
    entries = json.loads(table.read_text())["entries"]
    front = [k for k in entries if "op=conv1d_gelu" in k]
    assert front and all(entries[k].get("points") and not entries[k].get("regions")
                         for k in front)
    assert sorted(entries[front[0]]["points"]) == ["16x3000", "1x3000", "4x3000", "8x3000"]
