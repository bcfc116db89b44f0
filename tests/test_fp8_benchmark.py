"""benchmarks/fp8_vs_torch.py off the GPU: its widths, its per-point summary and the report's
lines against the goals (the timing itself runs on the H200)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from bench_scripts import BENCH, script


def module():
    return script("fp8_vs_torch")


def arm(us):
    return {"us": us, "status": "ok" if us is not None else "rejected"}


def test_census_widths_are_the_conformer_fp8_widths():
    fp8 = module()
    assert sorted(fp8.census_widths(fp8.CENSUSES)) == [(256, 256), (256, 1024), (512, 256),
                                                       (1024, 256)]


def test_summary_and_report_say_where_the_goals_stand():
    fp8 = module()
    fast = {"pp_a": arm(10.0), "ws_b": arm(12.0), "served": arm(14.0), "quantize": arm(2.0),
            "torch_rowwise": arm(15.0), "torch_tensor": arm(14.0), "bf16": arm(24.0),
            "co_c": arm(None)}
    slow = {**fast, "served": arm(30.0)}
    points = [fp8.summarise(4096, 4096, 8192, fast, "ws_b", "heuristic:ws_b"),
              fp8.summarise(1024, 1024, 4096, slow, "ws_b", "pp_a")]
    assert points[0]["best"] == "pp_a" and points[0]["best_vs_rowwise"] == 1.5
    assert points[0]["best_linear_vs_bf16"] == 2.0 and points[0]["failed"] == ["co_c"]
    text = fp8.report(points, ["- header"], "GPU")
    assert "best tile vs `torch._scaled_mm` row-wise, geomean over 2 points: 1.50x (goal >= " \
           "1.4x: met)" in text
    assert "points where the served linear runs fp8 and is slower than bf16: 1" in text
    assert "N=1024 K=1024 M=4096: 0.80x (`pp_a`)" in text
    assert "- N=4096 K=4096 M=8192: `co_c`" in text


def test_without_a_gpu_it_says_so_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU answer")
    got = subprocess.run([sys.executable, str(BENCH / "fp8_vs_torch.py"), "--out",
                          str(tmp_path / "x.md")], capture_output=True, text=True)
    assert got.returncode == 2
    assert got.stderr.strip() == "fp8_vs_torch: no CUDA device: the benchmark times on a GPU"
