"""The measurement protocol: how arms are gated, timed and compared at one problem.

:func:`measure` runs, in order:

1. refuse inside a CUDA graph capture (measuring there would record, not run, the arms);
2. run every arm once and pass its output through the family's numerics gate: a tile can
   launch cleanly and still be wrong, and a wrong arm is never timed;
3. time each passing arm's host issue cost (eager calls on the host): the objective is
   GPU time + alpha x issue time, alpha being the shape's eager fraction from the census;
4. choose N calls per graph (N >= 8, about ``target_graph_us`` per replay, more when weight
   copies rotate) from a probe of the first arm, the same N for every arm;
5. time the separator (a tiny unrelated kernel placed after every call, so back-to-back
   copies of one kernel cannot overlap as they never do inside a model) and subtract it;
6. capture each arm as a graph of N separated calls rotating through the weight copies, and
   replay the arms in shuffled rounds (seeded); after each halving stage keep the best half,
   then the best ``finalists``, always with the ``keep`` arms (default, incumbent);
7. per arm: median and sigma = 1.4826 x MAD of the per-call samples; for survivors, the
   single-call graph time, and the overlap mark when the loop is far faster than one call;
8. record SM clock and other compute processes at the start and end (contended runs marked).
"""

from __future__ import annotations

import functools
import math
import random
import sys
from collections.abc import Callable, Collection, Sequence
from typing import Any

import attrs

from .records import (
    PROTOCOL_VERSION,
    ArmResult,
    ArmStatus,
    BenchCase,
    BenchError,
    BenchOptions,
    BenchResult,
    DeviceFault,
    mad_sigma,
    median,
)
from .timer import Timer, check_timer


def refuse_inside_capture() -> None:
    """Raise :class:`BenchError` when the current CUDA stream is capturing a graph.

    Without torch imported nothing can be capturing, so torch is not imported to ask.
    """
    torch = sys.modules.get("torch")
    try:
        capturing = torch is not None and bool(torch.cuda.is_current_stream_capturing())
    except (RuntimeError, AssertionError, AttributeError):
        capturing = False
    if capturing:
        raise BenchError("refusing to benchmark inside a CUDA graph capture: the arms would be "
                         "recorded into the graph, not run; measure before capturing")


def _reason(verdict: Any) -> tuple[str, float | None]:
    reason = getattr(verdict, "reason", "") or "failed the numerics gate"
    error = getattr(verdict, "error", None)
    return str(reason), (float(error) if isinstance(error, (int, float)) else None)


@attrs.define
class _Arm:
    """Mutable bookkeeping of one arm during a measurement."""

    name: str
    run: Callable[[int], Any]
    samples: list[float] = attrs.Factory(list)
    graph: Any = None
    issue_us: float | None = None
    stage: int | None = None
    solo_ms: float | None = None
    gate_error: float | None = None

    def objective(self, alpha: float) -> float:
        return median(self.samples) + alpha * (self.issue_us or 0.0) / 1000.0

    def stdrel(self) -> float:
        mid = median(self.samples)
        return mad_sigma(self.samples) / mid if mid > 0 and math.isfinite(mid) else math.inf


def _calls(arm: _Arm, n: int, copies: int) -> list[Callable[[], Any]]:
    return [functools.partial(arm.run, i % copies) for i in range(n)]


class _Measurement:
    """One run of the protocol over one :class:`BenchCase`."""

    def __init__(self, case: BenchCase, timer: Timer, options: BenchOptions, alpha: float,
                 keep: Collection[str]) -> None:
        self.case, self.timer, self.opt, self.alpha = case, timer, options, alpha
        self.keep = set(keep)
        self.failed: dict[str, ArmResult] = {}
        self.rng = random.Random(options.seed)

    def fail(self, name: str, status: ArmStatus, reason: str, **kw: Any) -> None:
        self.failed[name] = ArmResult(name=name, status=status, reason=reason, **kw)

    def _checked(self, name: str, exc: BaseException) -> None:
        """Record an arm's exception, unless the device itself is now broken."""
        self.fail(name, ArmStatus.ERROR, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
        self.timer.synchronize()

    def gate(self, names: Sequence[str]) -> list[_Arm]:
        alive = []
        for name in names:
            run = self.case.arms[name]
            try:
                output = run(0)
                self.timer.synchronize()
                verdict = self.case.gate(output)
            except DeviceFault:
                raise
            except Exception as exc:
                self._checked(name, exc)
                continue
            if not verdict:
                reason, error = _reason(verdict)
                self.fail(name, ArmStatus.REJECTED, reason, gate_error=error)
                continue
            alive.append(_Arm(name, run, gate_error=_reason(verdict)[1]))
        return alive

    def issue(self, alive: list[_Arm]) -> list[_Arm]:
        kept = []
        for arm in alive:
            try:
                arm.issue_us = self.timer.issue_us(
                    arm.name, _calls(arm, self.opt.issue_reps, self.case.copies))
            except DeviceFault:
                raise
            except Exception as exc:
                self._checked(arm.name, exc)
                continue
            kept.append(arm)
        return kept

    def calls_per_graph(self, alive: list[_Arm]) -> int:
        """N from a probe graph of the first arm that captures (arms that fail are dropped)."""
        opt = self.opt
        while alive:
            probe = alive[0]
            try:
                graph = self.timer.capture(probe.name, _calls(probe, opt.min_calls,
                                                              self.case.copies), separate=True)
            except DeviceFault:
                raise
            except Exception as exc:
                self._checked(probe.name, exc)
                alive.pop(0)
                continue
            try:
                times = self.timer.replay([graph] * opt.probe_reps)
            finally:
                self.timer.release(graph)
            break
        else:
            return 0
        est_us = 1000.0 * min(times) / opt.min_calls
        n = opt.max_calls if est_us <= 0 else math.ceil(opt.target_graph_us / est_us)
        n = min(max(n, opt.min_calls), opt.max_calls)
        if self.case.copies > 1:
            n = max(n, min(self.case.copies, opt.max_rotation_calls))
        return n

    def separator_ms(self, n: int, reps: int, pick: Callable[[list[float]], float]) -> float:
        graph = self.timer.capture_separators(n)
        try:
            return pick(self.timer.replay([graph] * reps)) / n
        finally:
            self.timer.release(graph)

    def capture(self, arms: list[_Arm], n: int) -> list[_Arm]:
        captured = []
        for arm in arms:
            try:
                arm.graph = self.timer.capture(arm.name, _calls(arm, n, self.case.copies),
                                               separate=True)
            except DeviceFault:
                raise
            except Exception as exc:
                self._checked(arm.name, exc)
                continue
            captured.append(arm)
        return captured

    def rounds(self, alive: list[_Arm], n: int, sep: float, halving: bool) -> None:
        opt = self.opt
        stages = opt.stage_rounds if halving else (sum(opt.stage_rounds),)
        for stage, rounds in enumerate(stages):
            last = stage == len(stages) - 1
            for r in range(rounds):
                order = sorted(alive, key=lambda a: a.name)
                self.rng.shuffle(order)
                for arm, ms in zip(order, self.timer.replay([a.graph for a in order]),
                                   strict=True):
                    arm.samples.append(ms / n - sep)
                if last and r + 1 >= 3 and all(len(a.samples) >= opt.stop_min_rounds
                                               and a.stdrel() <= opt.stop_stdrel
                                               for a in alive):
                    break
            if halving and not last:
                alive[:] = self._halve(alive, stage)

    def _halve(self, alive: list[_Arm], stage: int) -> list[_Arm]:
        keep_n = max(self.opt.finalists, math.ceil(len(alive) / 2)) if stage == 0 \
            else self.opt.finalists
        ranked = sorted(alive, key=lambda a: (a.objective(self.alpha), a.name))
        survivors = ranked[:keep_n] + [a for a in ranked[keep_n:] if a.name in self.keep]
        for arm in ranked:
            if arm not in survivors:
                arm.stage = stage
                self.timer.release(arm.graph)
                arm.graph = None
        return survivors

    def solo(self, survivors: list[_Arm]) -> None:
        if not survivors:
            return
        sep = self.separator_ms(1, self.opt.solo_reps, min)
        for arm in survivors:
            try:
                graph = self.timer.capture(arm.name, _calls(arm, 1, 1), separate=True)
            except DeviceFault:
                raise
            except Exception:
                self.timer.synchronize()
                continue
            try:
                arm.solo_ms = min(self.timer.replay([graph] * self.opt.solo_reps)) - sep
            finally:
                self.timer.release(graph)

    def result(self, arm: _Arm) -> ArmResult:
        mid = median(arm.samples)
        overlap = (arm.stage is None and arm.solo_ms is not None and arm.solo_ms > 0
                   and mid < (1.0 - self.opt.overlap_tolerance) * arm.solo_ms)
        return ArmResult(name=arm.name, status=ArmStatus.OK, median_ms=mid,
                         sigma_ms=mad_sigma(arm.samples), rounds=len(arm.samples),
                         stage=arm.stage, solo_ms=arm.solo_ms, issue_us=arm.issue_us,
                         overlap=overlap, gate_error=arm.gate_error)


def measure(case: BenchCase, timer: Timer, options: BenchOptions | None = None, *,
            alpha: float = 0.0, keep: Collection[str] = (), halving: bool = True) -> BenchResult:
    """Measure every arm of ``case`` under the protocol (see the module docstring).

    ``alpha`` weighs host issue time into the objective that halving ranks by; ``keep``
    names arms that survive every halving stage (the fallback and the incumbent);
    ``halving=False`` times every arm for all rounds (cross-evaluation). Arms are probed in
    the order of ``case.arms`` with the ``keep`` arms first. Raises :class:`BenchError`
    inside a capture and :class:`DeviceFault` when the device reports an error.
    """
    refuse_inside_capture()
    timer = check_timer(timer)
    options = options or BenchOptions()
    m = _Measurement(case, timer, options, alpha, keep)
    start = timer.conditions()
    names = sorted(case.arms, key=lambda nm: nm not in m.keep)
    for name, why in case.rejected.items():
        m.fail(name, ArmStatus.UNBUILT, why)
    alive = m.issue(m.gate(names))
    n = m.calls_per_graph(alive) if alive else 0
    sep = 0.0
    arms: list[_Arm] = []
    if alive:
        sep = m.separator_ms(n, options.separator_reps, median)
        arms = m.capture(alive, n)
        alive_now = list(arms)
        try:
            m.rounds(alive_now, n, sep, halving)
            m.solo(alive_now)
        finally:
            for arm in arms:
                if arm.graph is not None:
                    timer.release(arm.graph)
                    arm.graph = None
    timed = {a.name: m.result(a) for a in arms}
    order = [*case.rejected, *case.arms]
    results = [timed.get(nm) or m.failed[nm] for nm in dict.fromkeys(order)
               if nm in timed or nm in m.failed]
    return BenchResult(arms=results, alpha=alpha, calls=n, copies=case.copies,
                       weight_bytes=case.weight_bytes,
                       l2=options.l2_state(case.copies, case.weight_bytes),
                       separator_ms=sep, start=start, end=timer.conditions(),
                       protocol=PROTOCOL_VERSION)


def bench_problem(family: Any, problem: Any, choices: Sequence[Any], timer: Timer,
                  options: BenchOptions, *, alpha: float = 0.0, keep: Collection[str] = (),
                  halving: bool = True) -> BenchResult:
    """``family.make_bench`` for ``problem`` then :func:`measure`; operands released after."""
    if family.make_bench is None:
        raise BenchError(f"family {family.name} has no make_bench: it cannot be measured "
                         "(a build can still replay a measurement log with --from-log)")
    refuse_inside_capture()
    try:
        case = family.make_bench(problem, tuple(choices), options)
    except BenchError:
        raise
    except Exception as exc:
        raise BenchError(f"family {family.name}: make_bench failed at {problem.op} "
                         f"{dict(problem.dims)} {family.dynamic_axis}={problem.m}: "
                         f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc
    if not isinstance(case, BenchCase):
        raise BenchError(f"family {family.name}: make_bench returned a {type(case).__name__}, "
                         "expected an oasr_core.bench.BenchCase")
    try:
        return measure(case, timer, options, alpha=alpha, keep=keep, halving=halving)
    finally:
        if case.release is not None:
            case.release()
