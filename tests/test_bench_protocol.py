"""The bench protocol's logic, driven through a scripted timer on the CPU."""

from __future__ import annotations

import math

import attrs
import pytest

from oasr_core.bench import (
    ArmStatus,
    BenchCase,
    BenchError,
    BenchOptions,
    Conditions,
    DeviceFault,
    ScriptedArm,
    ScriptedTimer,
    bench_problem,
    mad_sigma,
    measure,
)
from oasr_core.testing import fake_family_record
from oasr_core.types import Problem

NO_L2 = BenchOptions(l2_bytes=None)


@attrs.frozen
class Verdict:
    passed: bool
    reason: str = ""
    error: float | None = None

    def __bool__(self) -> bool:
        return self.passed


def case(names, *, bad=(), raising=(), copies=1, weight_bytes=0, ran=None):
    """Arms returning their own name; ``bad`` fail the gate, ``raising`` raise when run."""
    ran = ran if ran is not None else []

    def arm(name):
        def run(i):
            ran.append((name, i))
            if name in raising:
                raise RuntimeError(f"{name} exploded")
            return name
        return run

    return BenchCase(arms={n: arm(n) for n in names},
                     gate=lambda out: Verdict(out not in bad, "wrong numbers", 0.5),
                     copies=copies, weight_bytes=weight_bytes)


def test_mad_sigma_is_scaled_median_absolute_deviation():
    assert mad_sigma([1.0, 2.0, 3.0, 4.0, 100.0]) == pytest.approx(1.4826)
    assert mad_sigma([5.0] * 7) == 0.0
    assert math.isinf(mad_sigma([]))


def test_median_and_sigma_of_scripted_samples():
    timer = ScriptedTimer({"a": ScriptedArm(0.010, sigma_rel=0.02)}, separator_ms=0.0)
    arm = measure(case(["a"]), timer, NO_L2, halving=False).arm("a")
    assert arm.status is ArmStatus.OK and arm.rounds >= 3
    assert arm.median_ms == pytest.approx(0.010, rel=0.02)
    assert arm.sigma_ms == pytest.approx(0.0002, rel=0.6)


def test_separator_cost_is_subtracted():
    timer = ScriptedTimer({"a": 0.005, "b": 0.0021}, separator_ms=0.001, launch_ms=0.004)
    result = measure(case(["a", "b"]), timer, NO_L2)
    assert result.separator_ms == pytest.approx(0.001 + 0.004 / result.calls)
    assert result.arm("a").median_ms == pytest.approx(0.005)
    assert result.arm("b").median_ms == pytest.approx(0.0021)
    assert ("capture", "_separator", result.calls) in timer.events


def test_every_graph_holds_at_least_eight_calls_and_the_same_n_for_all_arms():
    timer = ScriptedTimer({n: 0.050 for n in "abc"})
    result = measure(case(list("abc")), timer, NO_L2)
    loops = {e[2] for e in timer.events if e[0] == "capture" and e[1] != "_separator"
             and e[2] > 1}
    assert result.calls >= 8
    assert loops <= {8, result.calls}


def test_rotation_makes_graphs_visit_every_weight_copy():
    opts = BenchOptions(l2_bytes=50 << 20, working_set_bytes=1 << 30)
    copies = opts.copies_for(4 << 20)
    assert copies == math.ceil(3 * (50 << 20) / (4 << 20))
    ran = []
    timer = ScriptedTimer({"a": 0.002})
    result = measure(case(["a"], copies=copies, weight_bytes=4 << 20, ran=ran), timer, opts)
    assert result.calls >= copies and result.l2 == "cold"
    assert result.copies == copies


def test_l2_policy_warm_when_the_model_fits_and_cold_otherwise():
    warm = BenchOptions(l2_bytes=60 << 20, working_set_bytes=40 << 20)
    assert warm.copies_for(1 << 20) == 1 and warm.l2_state(1, 1 << 20) == "warm"
    cold = BenchOptions(l2_bytes=60 << 20, working_set_bytes=200 << 20, max_copies=8)
    assert cold.copies_for(1 << 20) == 8
    assert cold.l2_state(8, 1 << 20) == "cold-partial"
    assert cold.l2_state(180, 1 << 20) == "cold"
    capped = BenchOptions(l2_bytes=60 << 20, working_set_bytes=None, max_copy_bytes=64 << 20)
    assert capped.copies_for(32 << 20) == 2
    assert BenchOptions(l2_bytes=None).l2_state(1, 10) == "unknown"


def test_halving_keeps_the_default_and_the_incumbent_to_the_end():
    times = {f"c{i}": 0.002 + 0.0001 * i for i in range(10)}
    times.update(default=0.009, incumbent=0.008)
    timer = ScriptedTimer(times)
    result = measure(case(list(times)), timer, NO_L2, keep={"default", "incumbent"})
    survivors = {a.name for a in result.arms if a.stage is None}
    assert survivors == {"c0", "c1", "c2", "default", "incumbent"}
    assert result.arm("c9").stage == 0 and result.arm("c5").stage == 1
    assert result.arm("default").rounds > result.arm("c9").rounds
    assert math.isfinite(result.arm("c9").median_ms)
    assert result.arm("default").solo_ms is not None and result.arm("c9").solo_ms is None
    assert timer.replays["default"] > timer.replays["c9"]


def test_without_halving_every_arm_runs_every_round():
    timer = ScriptedTimer({f"c{i}": 0.002 + 0.0003 * i for i in range(6)})
    result = measure(case([f"c{i}" for i in range(6)]), timer, NO_L2, halving=False)
    assert {a.stage for a in result.arms} == {None}
    assert len({a.rounds for a in result.arms}) == 1


def test_numerics_gate_rejects_before_timing():
    ran = []
    timer = ScriptedTimer({"good": 0.002, "wrong": 0.001, "boom": 0.001})
    result = measure(case(["good", "wrong", "boom"], bad={"wrong"}, raising={"boom"}, ran=ran),
                     timer, NO_L2)
    wrong, boom = result.arm("wrong"), result.arm("boom")
    assert wrong.status is ArmStatus.REJECTED and wrong.reason == "wrong numbers"
    assert wrong.gate_error == 0.5 and not wrong.ok
    assert boom.status is ArmStatus.ERROR and "exploded" in boom.reason
    timed = {e[1] for e in timer.events}
    assert "wrong" not in timed and "boom" not in timed
    assert ("wrong", 0) in ran and result.arm("good").ok


@pytest.mark.parametrize("keep", [(), ("b",)], ids=["timed", "probe"])
def test_a_failed_capture_marks_only_that_arm(keep):
    timer = ScriptedTimer({"a": 0.002, "b": ScriptedArm(0.001, fail_capture=True)})
    result = measure(case(["a", "b"]), timer, NO_L2, keep=keep)
    assert result.arm("b").status is ArmStatus.ERROR and "capture" in result.arm("b").reason
    assert result.arm("a").ok and result.calls >= 8


def test_self_overlap_is_marked_from_the_single_call_graph():
    timer = ScriptedTimer({"pdl": ScriptedArm(0.003, solo_ms=0.006),
                           "plain": ScriptedArm(0.004, solo_ms=0.0041)})
    result = measure(case(["pdl", "plain"]), timer, NO_L2)
    assert result.arm("pdl").overlap and result.arm("pdl").solo_ms == pytest.approx(0.006)
    assert not result.arm("plain").overlap


def test_refuses_inside_a_cuda_graph_capture(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    timer = ScriptedTimer({"a": 0.001})
    with pytest.raises(BenchError, match="inside a CUDA graph capture"):
        measure(case(["a"]), timer, NO_L2)
    assert timer.events == []


def test_contended_runs_are_marked_and_clocks_recorded():
    busy = Conditions(sm_clock_mhz=1500, max_sm_clock_mhz=1980, other_processes=1,
                      source="scripted")
    idle = Conditions(sm_clock_mhz=1980, max_sm_clock_mhz=1980, other_processes=0,
                      source="scripted")
    result = measure(case(["a"]), ScriptedTimer({"a": 0.001}, conditions=[idle, busy]), NO_L2)
    assert result.contended
    assert (result.start.sm_clock_mhz, result.end.sm_clock_mhz) == (1980, 1500)
    quiet = measure(case(["a"]), ScriptedTimer({"a": 0.001}, conditions=idle), NO_L2)
    assert not quiet.contended


def test_objective_adds_alpha_times_issue_cost():
    arms = {"torch": ScriptedArm(0.0180, issue_us=14.0),
            "tile": ScriptedArm(0.0184, issue_us=9.0),
            "slow": ScriptedArm(0.0300, issue_us=9.0), "slower": ScriptedArm(0.031)}
    opts = attrs.evolve(NO_L2, finalists=1, stage_rounds=(2, 2, 3))
    eager = measure(case(list(arms)), ScriptedTimer(arms), opts, alpha=1.0)
    assert eager.ranked()[0].name == "tile"
    assert eager.arm("tile").objective_ms(1.0) == pytest.approx(0.0184 + 0.009)
    assert eager.arm("torch").stage is not None
    graphed = measure(case(list(arms)), ScriptedTimer(arms), opts, alpha=0.0)
    assert graphed.ranked()[0].name == "torch" and graphed.arm("tile").stage is not None


def test_a_device_fault_aborts_the_measurement():
    class Faulty(ScriptedTimer):
        def synchronize(self):
            raise DeviceFault("illegal address")

    with pytest.raises(DeviceFault):
        measure(case(["a"], raising={"a"}), Faulty({"a": 0.001}), NO_L2)


def test_bench_problem_needs_make_bench_and_releases_operands():
    problem = Problem("fake", "fake", "fp16", (("N", 64), ("K", 64)), 16)
    with pytest.raises(BenchError, match="no make_bench"):
        bench_problem(fake_family_record(), problem, [], ScriptedTimer({}), NO_L2)
    released = []

    def make_bench(p, choices, options):
        return attrs.evolve(case(["a"]), release=lambda: released.append(p.m))

    fam = attrs.evolve(fake_family_record(), make_bench=make_bench)
    result = bench_problem(fam, problem, [], ScriptedTimer({"a": 0.001}), NO_L2)
    assert result.arm("a").ok and released == [16]


def test_cuda_timer_refuses_without_a_device():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    from oasr_core.bench import CudaGraphTimer

    with pytest.raises(BenchError, match="no CUDA device"):
        CudaGraphTimer()
