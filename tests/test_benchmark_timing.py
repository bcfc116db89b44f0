"""The kernel benchmarks' timing modes on a CPU: separated by default (the separator's cost
subtracted), back to back only when asked and labelled so; the scripts' options and headers
(their GPU parts not run), and ``run.sh``'s end-to-end phases."""

from __future__ import annotations

import random
import subprocess

import pytest
from bench_scripts import ROOT, script

from oasr_core.bench import ScriptedArm, ScriptedGraph, ScriptedTimer

LABEL = "back to back (launch overlap credited)"


@pytest.fixture(scope="module")
def scripts():
    return {name: script(name) for name in
            ("graph_timing", "gemm_vs_torch", "scaled_mm_vs_torch", "epilogue_variants",
             "gemm_log_softmax_vs_torch", "bmm_vs_torch", "group_gemm_vs_torch")}


def _timer():
    return ScriptedTimer({"torch": 0.010, "oasr": ScriptedArm(ms=0.008)}, separator_ms=0.002,
                         launch_ms=0.004)


def test_separated_rounds_subtract_the_separator_and_the_launch(scripts):
    timer = _timer()
    arms = scripts["graph_timing"].GraphArms(8, timer=timer)
    arms.add("torch", lambda: None)
    arms.add("oasr", lambda: None)
    got = arms.rounds(arms.names, 5, random.Random(0))
    assert got == pytest.approx({"torch": 10.0, "oasr": 8.0})
    assert ("capture", "_separator", 8) in timer.events
    assert timer.replays["_separator"] == 5
    arms.release()
    assert timer.released == 3


def test_back_to_back_rounds_have_no_separator(scripts):
    timer = _timer()
    arms = scripts["graph_timing"].GraphArms(8, back_to_back=True, timer=timer)
    arms.add("oasr", lambda: None)
    got = arms.rounds(["oasr"], 3, random.Random(0))
    # The launch is no longer cancelled: 8 us a call plus a share of the replay launch.
    assert got["oasr"] == pytest.approx(8.0 + 4.0 / 8)
    assert not [e for e in timer.events if e[1] == "_separator"]


def test_back_to_back_timer_drops_separators_for_the_protocol(scripts):
    inner = _timer()
    timer = scripts["graph_timing"].BackToBackTimer(inner)
    graph = timer.capture("oasr", [lambda: None] * 4, separate=True)
    assert graph == ScriptedGraph("oasr", 4, False)
    seps = timer.capture_separators(4)
    assert timer.replay([seps, graph, seps]) == [0.0, pytest.approx(0.004 + 4 * 0.008), 0.0]
    timer.release(seps)
    timer.release(graph)
    assert inner.released == 1 and inner.replays == {"oasr": 1}


def test_mode_lines(scripts):
    gt = scripts["graph_timing"]
    assert gt.mode_line(True) == f"- timing mode: {LABEL}"
    assert "separately measured cost is subtracted" in gt.mode_line(False)


def test_gemm_vs_torch_options_and_report_header(scripts):
    mod = scripts["gemm_vs_torch"]
    assert mod._args([]).back_to_back is False
    args = mod._args(["--back-to-back", "--ms", "16,64", "--no-eager", "--bias"])
    assert (args.back_to_back, args.ms, args.no_eager, args.bias) == (True, "16,64", True, True)
    text = mod._report([], [], [scripts["graph_timing"].mode_line(True)], [], "GPU",
                       back_to_back=True)
    assert f"- timing mode: {LABEL}" in text
    assert f"## Graph-timed (us per call, median, {LABEL}; ratio = torch / best)" in text
    plain = mod._report([], [], [], [], "GPU")
    assert "separated (separator cost subtracted)" in plain and LABEL not in plain


def test_gemm_vs_torch_launches_a_prepared_call_with_device_and_stream_first(scripts,
                                                                            monkeypatch):
    import torch

    calls = []

    class Prepared:
        def launch(self, device, stream, *operands):
            calls.append((device, stream, operands))
            return 0

    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda dev: 70 + dev,
                        raising=False)
    assert scripts["gemm_vs_torch"]._launcher(Prepared(), (16, 32, 0, 48), None, 1)() == 0
    assert calls == [(1, 71, (16, 32, 0, 48))]


def test_gemm_log_softmax_vs_torch_shapes_rounds_and_report(scripts):
    mod = scripts["gemm_log_softmax_vs_torch"]
    args = mod._args([])
    assert args.back_to_back is False
    points = mod.shapes(args)
    assert (5008, 256, 2040, "reference") in points
    assert {p[3] for p in points} == {"reference", "sweep"}
    assert all(v % 8 == 0 for v, *_ in points), "every vocabulary is one the kernels take"
    assert {p[3] for p in mod.shapes(mod._args(["--no-sweep"]))} == {"reference"}
    assert mod.shapes(mod._args(["--heads", "264x384", "--ms", "7,9"])) == [
        (264, 384, 7, "given"), (264, 384, 9, "given")]
    timer = ScriptedTimer({"torch": 0.010, "a": 0.006, "b": 0.007, "c": 0.012},
                          separator_ms=0.002, launch_ms=0.0)
    graphs = scripts["graph_timing"].GraphArms(4, timer=timer)
    for name in ("torch", "a", "b", "c"):
        graphs.add(name, lambda: None)
    screen, per_call = mod.time_arms(graphs, "c", mod._args(["--top", "1", "--reps", "3"]),
                                     random.Random(0))
    assert set(screen) == {"torch", "a", "b", "c"}
    assert per_call == pytest.approx({"torch": 10.0, "a": 6.0, "c": 12.0})
    point = {"V": 5008, "K": 256, "M": 2040, "kind": "reference", "torch_us": 30.0,
             "best": "a", "best_us": 20.0, "default_us": 40.0,
             "split_us": {"gemm": 14.0, "rows": 6.0, "addmm": 15.0, "log_softmax": 12.0},
             "failed": ["b: relative error 1 > 4 x torch's 0.001"]}
    text = mod.report([point], [scripts["graph_timing"].mode_line(False)], "GPU")
    assert "| 5008 | 256 | 2040 | 30.00 | a | 20.00 | 1.500 | 0.750 | 14.00 + 6.00 | " \
        "15.00 + 12.00 |" in text
    assert "## reference heads (us per call, median, separated" in text
    assert "geomean torch/best 1.500" in text and "  - b: relative error" in text


def test_bmm_vs_torch_shapes_rounds_and_report(scripts):
    mod = scripts["bmm_vs_torch"]
    args = mod._args([])
    assert args.back_to_back is False
    points = mod.shapes(args)
    assert ("tn", 64, 1504, 1504, 64, "attention") in points
    assert ("nn", 64, 1504, 64, 1504, "attention") in points
    assert {p[5] for p in points} == {"attention", "sweep"}
    assert {p[0] for p in points} == {"tn", "nn"}
    assert all(n % 8 == 0 and k % 8 == 0 for _, _, _, n, k, _ in points)
    assert {p[5] for p in mod.shapes(mod._args(["--no-sweep"]))} == {"attention"}
    assert mod.shapes(mod._args(["--shapes", "nnx8x100x8x16"])) == [
        ("nn", 8, 100, 8, 16, "given")]
    with pytest.raises(SystemExit, match="N=1500 K=64 .* not 16-byte aligned"):
        mod.shapes(mod._args(["--shapes", "tnx64x1500x1500x64"]))
    with pytest.raises(SystemExit, match="is not LAYOUTxLxMxNxK"):
        mod.shapes(mod._args(["--shapes", "ntx1x2x8x8"]))
    assert (args.top, args.graph_calls, args.configs) == (6, 8, None)
    point = {"layout": "tn", "L": 64, "M": 1504, "N": 1504, "K": 64, "kind": "attention",
             "torch_us": 60.0, "best": "a", "best_us": 50.0, "default_us": 75.0,
             "failed": ["b: relative error 1 > 4 x torch's 0.001"]}
    text = mod.report([point], [scripts["graph_timing"].mode_line(False)], "GPU")
    assert "| tn | 64 | 1504 | 1504 | 64 | 60.00 | a | 50.00 | 1.200 | 0.800 | 370.6 |" in text
    assert "## attention shapes (us per call, median, separated" in text
    assert "- attention: 1 points" in text and "geomean torch/best 1.200" in text
    assert "  - b: relative error" in text


def test_scaled_mm_vs_torch_options(scripts):
    mod = scripts["scaled_mm_vs_torch"]
    sweep = mod.parse_args(["sweep", "--out", "x.md", "--rounds", "4"])
    assert (sweep.back_to_back, sweep.rounds) == (False, 4)
    served = mod.parse_args(["served", "--census", "c.json", "--db", "d.json",
                             "--back-to-back"])
    assert served.back_to_back is True
    with pytest.raises(SystemExit):
        mod.parse_args(["fit", "--log", "l", "--out-ladders", "o", "--back-to-back"])


def test_epilogue_variants_options_and_header(scripts):
    mod = scripts["epilogue_variants"]
    args = mod.parse_args(["--calls", "4", "--back-to-back"])
    assert mod.header(args)[0] == f"- timing mode: {LABEL}"
    assert "graphs of 4 calls" in mod.header(args)[1]
    assert "subtracted" in mod.header(mod.parse_args([]))[0]


def test_group_gemm_vs_torch_shapes_and_report(scripts):
    mod = scripts["group_gemm_vs_torch"]
    args = mod._args([])
    points = mod.shapes(args)
    assert (256, 256, (100, 100, 100, 199), "projections") in points
    assert {p[3] for p in points} == {"projections", "experts"}
    assert any(0 in p[2] and 1 in p[2] for p in points), "empty and one-row problems"
    assert mod.shapes(mod._args(["--shapes", "256x256x5-0-1"])) == [(256, 256, (5, 0, 1),
                                                                      "given")]
    with pytest.raises(SystemExit, match="N=250 K=256 G=1 is not a group the kernels take"):
        mod.shapes(mod._args(["--shapes", "250x256x10"]))
    with pytest.raises(SystemExit, match="is not NxKxROWS"):
        mod.shapes(mod._args(["--shapes", "256x256"]))
    point = {"N": 256, "K": 256, "G": 4, "rows": [100, 100, 100, 199], "M": 499,
             "kind": "projections", "torch_us": 20.0, "best": "a", "best_us": 16.0,
             "default_us": 25.0, "failed": ["b: relative error 1 > 4 x torch's 0.001"]}
    text = mod.report([point], [scripts["graph_timing"].mode_line(False)], "GPU")
    assert "| 256 | 256 | 4 | 100-100-100-199 | 20.00 | a | 16.00 | 1.250 | 0.800 | 4.1 |" \
        in text
    assert "- projections: 1 points" in text and "geomean torch/best 1.250" in text
    assert "  - b: relative error" in text


def test_run_sh_knows_the_e2e_phases():
    run_sh = ROOT / "benchmarks" / "h200" / "run.sh"
    help_text = subprocess.run(["bash", str(run_sh), "--help"], capture_output=True,
                               text=True, check=True).stdout
    assert "e2e-tuned" in help_text and "--e2e-replays N" in help_text
    assert "gpu-tests-logsoftmax" in help_text and "bench-logsoftmax" in help_text
    assert "gpu-tests-bmm" in help_text and "bench-bmm" in help_text
    assert "gpu-tests-group" in help_text
    bad = subprocess.run(["bash", str(run_sh), "--e2e-replays", "0", "e2e"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--e2e-replays 0 is not a positive count" in bad.stderr
