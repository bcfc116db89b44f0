"""The quantizer and untuned-route benchmarks off the GPU: ``fp8_untuned_offline.py`` replayed
on the committed H200 log (its figures and the shipped constants it reproduces, the committed
report current) and ``quantizer_bandwidth.py``'s summary, report and no-GPU answer."""

from __future__ import annotations

import subprocess
import sys

import pytest
from bench_scripts import BENCH, RESULTS, script


@pytest.fixture(scope="module")
def points():
    offline = script("fp8_untuned_offline")
    import json

    rows = [json.loads(line) for line in offline.LOG.read_text().splitlines() if line]
    return offline.read_points(rows)


def test_the_log_replays_to_no_point_slower_than_bf16(points):
    offline = script("fp8_untuned_offline")
    picks = offline.rules(points, None)
    uncovered = [p for p in points if p.uncovered]
    assert len(points) == 220 and len(uncovered) == 196
    old = offline.score(uncovered, [True] * len(uncovered))
    assert old["slower"] == 114 and 0.58 < old["worst"] < 0.59
    new = offline.score(points, picks["new: fp8 where the shipped route predicts it wins"])
    assert new["slower"] == 0 and new["geomean"] > 1.05
    held_out = offline.score(points, picks["new, leave one width out"])
    assert held_out["slower"] == 0


def test_the_shipped_constants_are_the_fit_of_the_committed_log(points):
    import attrs
    from oasr_scaled_mm_fp8 import untuned

    fitted = attrs.asdict(script("fp8_untuned_offline").fit(points))
    shipped = attrs.asdict(untuned.MODELS["sm90_fp8_wgmma"])
    assert fitted.keys() == shipped.keys()
    for name, value in shipped.items():
        assert fitted[name] == pytest.approx(value, rel=2e-3), name


def test_the_committed_report_is_current(tmp_path):
    offline = script("fp8_untuned_offline")
    out = tmp_path / "fp8_untuned_offline.md"
    assert offline.main(["--out", str(out), "--fit"]) == 0
    assert out.read_text() == (RESULTS / "fp8_untuned_offline.md").read_text()
    assert out.with_suffix(".json").read_text() == \
        (RESULTS / "fp8_untuned_offline.json").read_text()


NORM_FIELDS = ("norm_quantizer_launch_us", "norm_quantizer_bytes_per_us", "layer_norm_launch_us",
               "layer_norm_bytes_per_us", "norm_extra_floor_us")


@pytest.fixture(scope="module")
def normed_points():
    import json

    offline = script("fp8_untuned_offline")
    log = RESULTS / "h200_fp8_normed.jsonl"
    return offline.read_points([json.loads(line) for line in log.read_text().splitlines()
                                if line])


def test_the_norm_constants_are_the_fit_of_the_log_with_norm_arms(normed_points):
    import attrs
    from oasr_scaled_mm_fp8 import untuned

    offline = script("fp8_untuned_offline")
    assert offline.has_norm_arms(normed_points) and len(normed_points) == 220
    fitted = attrs.asdict(offline.fit(normed_points))
    shipped = attrs.asdict(untuned.MODELS["sm90_fp8_wgmma"])
    for name in NORM_FIELDS:
        assert fitted[name] == pytest.approx(shipped[name], rel=2e-3), name


def test_after_a_norm_the_route_leaves_no_point_slower_than_bf16(normed_points):
    from oasr_scaled_mm_fp8 import untuned

    offline = script("fp8_untuned_offline")
    model = untuned.MODELS["sm90_fp8_wgmma"]
    picks = [model.quantized_wins(p.m, p.n, p.k, quantizer=False) for p in normed_points]
    got = offline.score(normed_points, picks, quantizer=False)
    assert got["slower"] == 0 and got["fp8"] > 100 and got["geomean"] > 1.2
    # Counting no norm cost at all (the fit's floor off) picks fp8 where it loses.
    bare = [(model.gemm_us(p.m, p.n, p.k)) * model.margin < model.dense_us(p.m, p.n, p.k)
            for p in normed_points]
    assert offline.score(normed_points, bare, quantizer=False)["slower"] > 0


def test_the_committed_normed_report_is_current(tmp_path):
    offline = script("fp8_untuned_offline")
    out = tmp_path / "fp8_untuned_offline_normed.md"
    assert offline.main([str(RESULTS / "h200_fp8_normed.jsonl"), "--out", str(out),
                         "--fit"]) == 0
    assert out.read_text() == (RESULTS / "fp8_untuned_offline_normed.md").read_text()


def test_the_bandwidth_report_states_bytes_and_fractions():
    qb = script("quantizer_bandwidth")

    def arm(us):
        return {"us": us, "status": "ok" if us else "rejected", "reason": "" if us else "no"}

    arms = {"int8": arm(12.0), "fp8": arm(15.0), "int8_torch": arm(60.0),
            "fp8_torch": arm(75.0), "copy": arm(16.0)}
    point = qb.summarise(16384, 1024, "bf16", arms, 3, 4800.0)
    moved = 3 * 16384 * 1024 + 4 * 16384
    assert point["int8"]["gbps"] == pytest.approx(moved / 12e3)
    assert point["fp8"]["of_peak"] == pytest.approx(moved / 15e3 / 4800.0)
    assert point["copy"]["gbps"] == pytest.approx(4 * 16384 * 1024 / 16e3)
    assert point["int8"]["vs_torch"] == pytest.approx(5.0)
    small = qb.summarise(1024, 256, "bf16", {**arms, "fp8": arm(None)}, 9, 4800.0)
    text = qb.report([point, small], ["- header"], "GPU", 4800.0)
    assert "| bf16 | 16384 | 1024 | 12.00 | 4200 |" in text
    assert "## Summary (M K >= 4096 x 1024: 1 points)" in text
    assert "- bf16 M=1024 K=256 `fp8`: no" in text


def test_the_bandwidth_benchmark_without_a_gpu_says_so_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU answer")
    got = subprocess.run([sys.executable, str(BENCH / "quantizer_bandwidth.py"), "--out-dir",
                          str(tmp_path)], capture_output=True, text=True)
    assert got.returncode == 2
    assert got.stderr.strip() == "quantizer_bandwidth: no CUDA device: the benchmark times on a GPU"
    bad = subprocess.run([sys.executable, str(BENCH / "quantizer_bandwidth.py"), "--out-dir",
                          str(tmp_path), "--ks", "x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "comma lists of integers" in bad.stderr


def test_the_int8_route_is_the_fit_of_the_committed_sweep_and_its_report_is_current(tmp_path):
    import attrs
    from oasr_scaled_mm import untuned

    offline = script("int8_untuned_offline")
    sweep = offline.sweep_points()
    assert len(sweep) == 270
    fitted = attrs.asdict(offline.fit(sweep))
    for name, value in attrs.asdict(untuned.MODELS["sm90_int8_wgmma"]).items():
        assert fitted[name] == pytest.approx(value, rel=2e-3), name
    out = tmp_path / "int8_untuned_offline.md"
    assert offline.main(["--out", str(out)]) == 0
    assert out.read_text() == (RESULTS / "int8_untuned_offline.md").read_text()
    assert out.with_suffix(".json").read_text() == \
        (RESULTS / "int8_untuned_offline.json").read_text()


def test_the_int8_route_leaves_no_point_slower_than_fp16_also_held_out():
    from oasr_scaled_mm import untuned

    offline = script("int8_untuned_offline")
    model = untuned.MODELS["sm90_int8_wgmma"]
    sweep, layers = offline.sweep_points(), offline.layer_points()
    new = offline.score(sweep, [model.quantized_wins(p.m, p.n, p.k) for p in sweep], model)
    old = offline.score(sweep, [True] * len(sweep), model)
    held = offline.score(sweep, offline.leave_one_width_out(sweep), model)
    assert new["slower"] == 0 and held["slower"] == 0 and new["int8"] > 0
    assert new["geomean"] > 1.0 > old["geomean"]
    # The layers the shipped table's build measured with the real int8 quantizer: all fp16.
    measured = offline.score(layers, [model.quantized_wins(p.m, p.n, p.k) for p in layers],
                             model)
    assert measured["slower"] == 0 and len(layers) == 56
