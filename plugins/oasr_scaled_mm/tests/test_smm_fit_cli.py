"""benchmarks/scaled_mm_vs_torch.py on a CPU: ``fit`` on a synthetic sweep log writes a ladder
file that loads and reports held-out regret; ``sweep``/``served`` refuse in one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import oasr_scaled_mm.hooks
from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm import heuristic as hz

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "scaled_mm_vs_torch.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="needs the repository checkout")

WIDTHS = ((256, 256), (1024, 256), (256, 1024), (512, 256), (2048, 512), (768, 3072))
MS = (16, 64, 128, 256, 416, 1000, 2152, 4096, 8192, 16384, 32768)


def _lane():
    return {lane.name: lane for lane in oasr_scaled_mm.hooks.oasr_register_lanes()}[cs.LANE_SM90]


def _truth(lane):
    start = hz.LADDERS[lane.name]
    return hz.Ladder(lane=lane.name, rungs=start.rungs, k_bounds=start.k_bounds,
                     fill=((4.0,) * 3, (1.0,) * 3, (0.75,) * 3, (0.5,) * 3, (0.25,) * 3,
                           (0.0,) * 3))


def _sweep_log(path: Path) -> Path:
    """Rows as ``sweep`` writes them: every rung (the truth's pick fastest), a Stream-K config,
    a refused config (us null), and the three baselines."""
    lane = _lane()
    truth = _truth(lane)
    tiles = {r: lane.config(r).params["tile"] for r in truth.rungs}
    rows = []
    for n, k in WIDTHS:
        for m in MS:
            best = truth.rungs[truth.pick(n, k, m, 132, tiles)]
            base = {"lane": lane.name, "gpu": "NVIDIA H200", "arch": "sm90", "sm_count": 132,
                    "torch": "2.11.0+cu130", "N": n, "K": k, "M": m}
            for i, rung in enumerate(truth.rungs):
                rows.append(base | {"config": rung, "kind": "config", "status": "ok",
                                    "us": 10.0 if rung == best else 13.0 + i})
            rows.append(base | {"config": "sk_128x128x128_c1x1", "kind": "config",
                                "status": "ok", "us": 16.0})
            rows.append(base | {"config": "co_256x128x128_c1x1", "kind": "config",
                                "status": "unbuilt", "us": None, "reason": "refused"})
            for name, us in (("torch", 55.0), ("int_mm", 14.0), ("fp16", 12.0)):
                rows.append(base | {"config": name, "kind": "baseline", "status": "ok",
                                    "us": us})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=300)


def test_fit_writes_a_loadable_ladder_and_reports_held_out_regret(tmp_path):
    log = _sweep_log(tmp_path / "sweep.jsonl")
    out = tmp_path / "fitted_ladders.json"
    # an existing file: its other tables are kept, this (lane, arch) is replaced
    sm80 = hz.FittedLadder(arch="sm86", ladder=hz.LADDERS[cs.LANE_SM80], evidence={"x": 1})
    hz.write_fitted(out, [sm80])
    proc = _run("fit", "--log", str(log), "--out-ladders", str(out),
                "--out", str(tmp_path / "fit.md"))
    assert proc.returncode == 0, proc.stderr
    report = proc.stdout
    assert report == (tmp_path / "fit.md").read_text()
    assert "Held out: leave one width out" in report and "NVIDIA H200" in report
    for n, k in WIDTHS:
        assert f"| {n}x{k}" in report
    assert "all (pooled over points)" in report and "1 other table(s) kept" in report

    loaded = hz.load_fitted(out)
    assert set(loaded) == {(cs.LANE_SM90, "sm90"), (cs.LANE_SM80, "sm86")}
    ladder = loaded[(cs.LANE_SM90, "sm90")]
    assert ladder.fitted and ladder.rungs == hz.LADDERS[cs.LANE_SM90].rungs
    hz.check_ladder(ladder, _lane())
    entry = next(e for e in hz.read_fitted(out) if e.key == (cs.LANE_SM90, "sm90"))
    ev = entry.evidence
    assert ev["points"] == len(WIDTHS) * len(MS) and ev["sm_count"] == 132
    assert ev["regret"] == pytest.approx(1.0) and ev["start_regret"] > 1.0
    assert set(ev["heldout_by_width"]) == {f"{n}x{k}" for n, k in WIDTHS}
    assert all(e["heldout"] >= 1.0 for e in ev["heldout_by_width"].values())
    assert 1.0 <= ev["heldout_regret"] < ev["start_regret"]
    assert ev["conformer"]["fitted"] == pytest.approx(1.0)
    assert ev["conformer"]["points"] == 4 * len(MS)
    # the K bands the rows cover are fitted; K > 4096 has no rows and keeps the start's fills
    assert ladder.fill[0][0] == 4.0 and ladder.fill[0][2] == hz.LADDERS[cs.LANE_SM90].fill[0][2]
    assert "K > 4096" in report.split("K bands without measured points")[1]


def test_fit_replaces_an_unusable_existing_file(tmp_path):
    log = _sweep_log(tmp_path / "sweep.jsonl")
    out = tmp_path / "fitted_ladders.json"
    out.write_text("{broken")
    proc = _run("fit", "--log", str(log), "--out-ladders", str(out), "--lane", cs.LANE_SM90)
    assert proc.returncode == 0, proc.stderr
    assert "was not usable and is replaced" in proc.stdout
    assert set(hz.load_fitted(out)) == {(cs.LANE_SM90, "sm90")}


def test_fit_without_timed_rows_fails_in_one_line(tmp_path):
    log = tmp_path / "sweep.jsonl"
    log.write_text(json.dumps({"lane": cs.LANE_SM90, "config": "torch", "N": 256, "K": 256,
                               "M": 64, "us": 5.0}) + "\n")
    proc = _run("fit", "--log", str(log), "--out-ladders", str(tmp_path / "f.json"))
    assert proc.returncode == 2 and not (tmp_path / "f.json").exists()
    assert len(proc.stderr.strip().splitlines()) == 1 and "no timed config rows" in proc.stderr


def test_gpu_subcommands_fail_in_one_line_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    census = SCRIPT.parent / "census" / "conformer_offline_int8.json"
    for args in (("sweep", "--out", str(tmp_path / "s.md")),
                 ("served", "--census", str(census), "--db", str(tmp_path / "none.json"))):
        proc = _run(*args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "no CUDA device" in lines[0], proc.stderr
    assert not (tmp_path / "s.md").exists() and not (tmp_path / "s.jsonl").exists()


def test_regret_numbers_are_finite_json(tmp_path):
    """The evidence is strict JSON (no NaN), even for a width whose held-out fit had no data."""
    log = tmp_path / "sweep.jsonl"
    lines = [line for line in _sweep_log(log).read_text().splitlines()
             if json.loads(line)["N"] == 256 and json.loads(line)["K"] == 256]
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "f.json"
    proc = _run("fit", "--log", str(log), "--out-ladders", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    ev = data["ladders"][0]["evidence"]
    assert ev["heldout_by_width"]["256x256"]["heldout"] is None   # nothing left to fit on
    assert ev["heldout_regret"] is None
    assert math.isfinite(ev["regret"]) and ev["regret"] <= ev["start_regret"]
