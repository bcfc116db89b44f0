"""``benchmarks/vs_torch.py``, what the kernel-against-torch scripts share, and
``GraphArms.screened``, their timing protocol, on a CPU (a scripted timer; nothing compiled)."""

from __future__ import annotations

import argparse
import json
import math
import random

import pytest
from bench_scripts import script

from oasr_core.bench import ScriptedArm, ScriptedTimer


@pytest.fixture(scope="module")
def vs_torch():
    return script("vs_torch")


def test_run_arguments_are_the_scripts_common_options(vs_torch):
    parser = argparse.ArgumentParser()
    vs_torch.add_run_arguments(parser, lanes=True, graph_calls=16, top=6)
    args = parser.parse_args(["--arch", "sm90", "--prebuild-only", "--lanes", "a,b"])
    assert (args.arch, args.prebuild_only, args.lanes, args.graph_calls, args.reps,
            args.top, args.dtype, args.seed, args.back_to_back, args.out, args.jobs) == (
        "sm90", True, "a,b", 16, 7, 6, "fp16", 0, False, None, None)
    plain = argparse.ArgumentParser()
    vs_torch.add_run_arguments(plain)
    with pytest.raises(SystemExit):
        plain.parse_args(["--lanes", "a"])


def test_lanes_default_to_the_arch_lane(vs_torch):
    assert vs_torch.lanes_for(None, "sm90", "l80", "l90") == ["l90"]
    assert vs_torch.lanes_for(None, "sm89", "l80", "l90") == ["l80"]
    assert vs_torch.lanes_for("l80,l90", "sm90", "l80", "l90") == ["l80", "l90"]


def test_without_a_device_start_refuses_or_stops_after_the_prebuild(vs_torch, capsys,
                                                                    monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the answers without a device")
    args = argparse.Namespace(arch=None, jobs=1, prebuild_only=False, seed=0, out=None)
    assert vs_torch.start(args, lambda arch: pytest.fail("built"), None) == 2
    assert "pass --arch with --prebuild-only" in capsys.readouterr().err
    built = []
    monkeypatch.setattr(vs_torch, "prebuild", lambda specs, jobs: (built.extend(specs),
                                                                   ["- built"]))
    args.arch = "sm90"
    assert vs_torch.start(args, lambda arch: [f"spec@{arch}"],
                          lambda specs, arch: pytest.fail("bound")) == 0
    assert built == ["spec@sm90"] and capsys.readouterr().out == "- built\n"


def test_jsonl_beside_the_report_starts_empty_and_keeps_each_row(vs_torch, tmp_path):
    out = tmp_path / "report.md"
    (tmp_path / "report.jsonl").write_text('{"old": 1}\n')
    jsonl = vs_torch.JsonLines(out)
    jsonl.add({"a": 1})
    jsonl.add({"host": {"b": 2}})
    rows = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text().splitlines()]
    assert rows == [{"a": 1}, {"host": {"b": 2}}]
    vs_torch.JsonLines(None).add({"a": 1})  # no --out: nothing written
    vs_torch.write_report("# report\n", tmp_path / "sub" / "r.md")
    assert (tmp_path / "sub" / "r.md").read_text() == "# report\n"


def test_summary_arithmetic_and_the_refused_section(vs_torch):
    assert vs_torch.geomean([2.0, 8.0, None, 0.0, math.inf]) == pytest.approx(4.0)
    assert math.isnan(vs_torch.geomean([])) and math.isnan(vs_torch.ratio(1.0, None))
    assert vs_torch.ratio(3.0, 2.0) == 1.5
    points = [{"n": 1, "failed": []}, {"n": 2, "failed": ["c1: refused", "c2: gate"]}]
    assert vs_torch.refused_section(points, lambda p: f"n={p['n']}") == [
        "", "## Gated out or refused", "", "- n=2: c1: refused", "- n=2: c2: gate"]
    assert vs_torch.refused_section(points[:1], str) == []


def test_screened_times_the_fixed_arms_the_top_others_and_a_named_default():
    graph_timing = script("graph_timing")
    timer = ScriptedTimer({"torch": 0.010, "fast": ScriptedArm(ms=0.004),
                           "mid": ScriptedArm(ms=0.006), "slow": ScriptedArm(ms=0.012),
                           "default": ScriptedArm(ms=0.020)}, separator_ms=0.002)
    arms = graph_timing.GraphArms(8, timer=timer)
    for name in ("torch", "fast", "mid", "slow", "default"):
        arms.add(name, lambda: None)
    screen, per_call, best = arms.screened(("torch",), 2, 3, random.Random(0),
                                           also=("default", "absent"))
    assert set(screen) == {"torch", "fast", "mid", "slow", "default"}
    assert set(per_call) == {"torch", "fast", "mid", "default"}
    assert best == "fast" and per_call["fast"] == pytest.approx(4.0)
