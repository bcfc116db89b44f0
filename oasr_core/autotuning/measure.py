"""Measuring one problem at run time: the candidates, the bench protocol, the winner.

Shared by ``oasr_core.autotune()`` (a call's own shape) and the engine tuner's prewarm (a
census's must-tune points). The candidates are every config of the active lane that is
statically feasible, supports the problem and is in this process's compiled set
(``Lane.is_available``), plus the family's sentinels that run without a lane config
(``torch``, ``fused``, ``unquantized``) and the shape heuristic when it is the family's
fallback. They are measured through the family's ``make_bench`` and
:func:`oasr_core.bench.bench_problem` with CUDA-graph replays; when no arm could be timed
that way and some raised (the op cannot be captured), the problem is measured again with an
eager timer
(:class:`~oasr_core.autotuning.eager.EagerTimer`).

The winner is the best objective, unless the incumbent (what the tiers serve now) is within
``tie`` of it: a tie goes to the incumbent, so re-tuning an already tuned shape changes
nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import attrs

from oasr_core.bench import (
    ArmStatus,
    BenchOptions,
    BenchResult,
    CudaGraphTimer,
    Timer,
    bench_problem,
)
from oasr_core.database import signature_key
from oasr_core.sentinels import choice_config, sentinel_config
from oasr_core.shapes import bucket
from oasr_core.types import Config, Family, Lane, Problem, Selection, Sentinel, Tier, thaw

from .cache import Result, Timing, base_env

EVIDENCE_ARMS = 4
"""Arms kept as a result's evidence (the best ones, plus the incumbent and the winner)."""


def arm_name(choice: Config | Sentinel) -> str:
    """A choice as the bench and tuning files spell it."""
    return choice.value if isinstance(choice, Sentinel) else choice.id


def result_key(family: Family, problem: Problem) -> str:
    """The signature key a result of ``problem`` is filed under (the exact operand dtype)."""
    dtype = problem.dtype if family.key_dtype else None
    return signature_key(family, problem.op, dtype, tuple(v for _, v in problem.dims))


def candidates(family: Family, lane: Lane, problem: Problem) -> list[Config | Sentinel]:
    """What is measured at ``problem`` (see the module docstring), sentinels first."""
    sentinels = [s for s in (Sentinel.TORCH, Sentinel.FUSED, Sentinel.UNQUANTIZED)
                 if s in family.sentinels]
    if family.fallback is Sentinel.HEURISTIC:
        sentinels.insert(0, Sentinel.HEURISTIC)
    configs = [c for c in lane.config_space if lane.unusable_reason(c, problem) is None]
    return [*sentinels, *configs]


def incumbent_arm(incumbent: Selection | None) -> str | None:
    """The arm name of what the tiers serve now (DEFAULT measured as the config it means)."""
    if incumbent is None:
        return None
    if incumbent.choice is Sentinel.DEFAULT:
        return incumbent.config.id if incumbent.config is not None else None
    return incumbent.choice_id


def selection_of(result: Result, family: Family, lane: Lane, problem: Problem) -> Selection | None:
    """The selection ``result`` stands for on ``lane`` at ``problem``; None when it cannot
    serve there (another lane, a config gone or changed, infeasible, not compiled)."""
    sentinel = Sentinel.parse(result.choice)
    if sentinel is not None:
        if sentinel is Sentinel.HEURISTIC and family.sentinel_heuristic is None:
            return None
        if sentinel not in (Sentinel.DEFAULT, Sentinel.HEURISTIC) \
                and sentinel not in family.sentinels:
            return None
        return Selection(choice=sentinel, tier=Tier.USER, lane=lane.name,
                         config=sentinel_config(family, lane, sentinel, problem))
    if result.lane != lane.name:
        return None
    config = lane.config(result.choice)
    if config is None or (result.config is not None
                          and thaw(result.config) != config.to_json()):
        return None
    if lane.unusable_reason(config, problem) is not None:
        return None
    return Selection(choice=config, tier=Tier.USER, lane=lane.name, config=config)


@attrs.frozen
class Measurement:
    """What measuring one problem gave: a result, or why there is none."""

    result: Result | None
    bench: BenchResult | None
    timing: Timing
    reason: str = ""
    """Why no arm could be timed (empty when there is a result)."""


def _failure(bench: BenchResult) -> str:
    reasons = sorted({f"{a.status.value}: {a.reason}" for a in bench.arms
                      if a.status is not ArmStatus.OK and a.reason})
    return "; ".join(reasons[:2]) or "no arm to measure"


@attrs.define
class Measurer:
    """Measures problems with a graph timer (an eager one for ops that cannot be captured).

    The timers default to :class:`~oasr_core.bench.CudaGraphTimer` and
    :meth:`EagerTimer.cuda <oasr_core.autotuning.eager.EagerTimer.cuda>`, made on first use;
    tests pass scripted ones.
    """

    timer: Timer | None = None
    eager_timer: Timer | None = None
    options: BenchOptions | None = None
    tie: float = 0.01
    """The incumbent keeps its place when within this fraction of the best."""
    _env: dict[str, Any] | None = None

    def graph_timer(self) -> Timer:
        """The CUDA-graph timer (made on first use)."""
        if self.timer is None:
            self.timer = CudaGraphTimer()
        return self.timer

    def eager(self) -> Timer:
        """The eager timer (made on first use)."""
        if self.eager_timer is None:
            from .eager import EagerTimer

            self.eager_timer = EagerTimer.cuda()
        return self.eager_timer

    def env(self, family: Family) -> dict[str, Any]:
        """The environment stamp of a result of ``family``: the process's and the family's."""
        if self._env is None:
            self._env = base_env()
        own = thaw(family.soft_validators()) if family.soft_validators is not None else {}
        return {**self._env, **own}

    def _bench(self, timer: Timer, family: Family, lane: Lane, problem: Problem,
               choices: Sequence[Config | Sentinel], keep: Sequence[str], alpha: float,
               working_set_bytes: int | None) -> BenchResult:
        options = attrs.evolve(self.options or BenchOptions(), l2_bytes=timer.l2_bytes,
                               lane=lane.name, working_set_bytes=working_set_bytes,
                               resolve=functools.partial(choice_config, family, lane))
        return bench_problem(family, problem, choices, timer, options, alpha=alpha, keep=keep)

    def measure(self, family: Family, lane: Lane, problem: Problem, *,
                incumbent: Selection | None = None, alpha: float = 0.0,
                working_set_bytes: int | None = None) -> Measurement:
        """Measure every candidate at ``problem`` and pick the winner.

        Raises :class:`~oasr_core.bench.BenchError` when the family cannot be measured here
        (no ``make_bench``, no device, inside a capture) and
        :class:`~oasr_core.bench.DeviceFault` when the device broke.
        """
        choices = candidates(family, lane, problem)
        keep_name = incumbent_arm(incumbent)
        names = {arm_name(c) for c in choices}
        if keep_name == Sentinel.HEURISTIC.value and keep_name not in names \
                and family.sentinel_heuristic is not None:
            choices.insert(0, Sentinel.HEURISTIC)
        keep = [keep_name] if keep_name is not None else []
        timing = Timing.GRAPH
        bench = self._bench(self.graph_timer(), family, lane, problem, choices, keep, alpha,
                            working_set_bytes)
        if not bench.ranked() and any(a.status is ArmStatus.ERROR for a in bench.arms):
            # Nothing could be captured: the op runs eagerly in the model, so time it so (#8).
            timing = Timing.EAGER
            bench = self._bench(self.eager(), family, lane, problem, choices, keep, alpha,
                                working_set_bytes)
        ranked = bench.ranked()
        if not ranked:
            return Measurement(None, bench, timing, _failure(bench))
        winner = ranked[0]
        held = bench.arm(keep_name) if keep_name is not None else None
        if held is not None and held.ok and held.objective_ms(alpha) <= \
                winner.objective_ms(alpha) * (1.0 + self.tie):
            winner = held
        shown = dict.fromkeys([*(a.name for a in ranked[:EVIDENCE_ARMS]), winner.name,
                               *([held.name] if held is not None and held.ok else [])])
        evidence = {n: [round(a.median_ms, 7), round(a.sigma_ms, 7), a.rounds]
                    for n in shown if (a := bench.arm(n)) is not None}
        config = lane.config(winner.name) if Sentinel.parse(winner.name) is None else None
        result = Result(key=result_key(family, problem),
                        bucket=problem.m if problem.point is not None else bucket(problem.m),
                        m=problem.m, choice=winner.name, lane=lane.name, point=problem.point,
                        config=config.to_json() if config is not None else None,
                        ms=round(winner.median_ms, 7), timing=timing, evidence=evidence,
                        env=self.env(family))
        return Measurement(result, bench, timing)
