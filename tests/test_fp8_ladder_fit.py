"""The fp8 heuristic's fitted ladder off the GPU: ``benchmarks/fp8_ladder_fit.py`` replayed on
the committed H200 sweep reproduces the table the plugin ships and the committed report."""

from __future__ import annotations

import json

from bench_scripts import RESULTS
from bench_scripts import script as bench_script
from oasr_scaled_mm_fp8 import heuristic


def script():
    return bench_script("fp8_ladder_fit")


def test_the_shipped_table_and_report_are_the_fit_of_the_committed_sweep(tmp_path):
    out, report = tmp_path / "fitted.json", tmp_path / "fit.md"
    assert script().main(["--out", str(report), "--out-ladders", str(out)]) == 0
    assert out.read_text() == heuristic.FITTED_FILE.read_text()
    assert report.read_text() == (RESULTS / "fp8_ladder_fit.md").read_text()
    evidence = json.loads(out.read_text())["ladders"][0]["evidence"]
    assert evidence["points"] == 220 and evidence["regret"] < evidence["unfitted_regret"]
    assert evidence["held_out_regret"] < 1.01


def test_the_fit_refuses_a_log_without_the_lane(tmp_path, capsys):
    import pytest

    log = tmp_path / "empty.jsonl"
    log.write_text(json.dumps({"lane": "other", "status": "ok"}) + "\n")
    with pytest.raises(SystemExit) as exc:
        script().main([str(log), "--out", str(tmp_path / "x.md")])
    assert exc.value.code == 2
    assert "no sm90_fp8_wgmma rows" in capsys.readouterr().err
