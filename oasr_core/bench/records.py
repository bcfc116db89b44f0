"""The records of the bench protocol: options, the case a family builds, and results.

A family measures through one function it puts on its :class:`~oasr_core.types.Family`
record, ``make_bench(problem, choices, options) -> BenchCase``. It allocates the operands of
``problem`` once (``options.copies_for(weight_bytes)`` weight copies, so that rotating through
them keeps the weights as cold in L2 as they are in the served model), and returns a
:class:`BenchCase`: one ``run(copy_index)`` callable per choice it can launch, plus the
numerics gate bound to its reference. The protocol (:func:`oasr_core.bench.measure`) does
everything else: gate, issue cost, CUDA graphs, separator, rounds, halving, solo gate.

A GEMM implementation is about twenty lines (``launcher_for`` stands for the family's own
prepared-launcher lookup; arms are named ``choice.id`` or the sentinel's value)::

    def make_bench(problem, choices, options):
        n, k, m = problem.dim("N"), problem.dim("K"), problem.m
        copies = options.copies_for(n * k * 2)
        a, w, bias = numerics.make_operands(m, n, k, problem.dtype, device=options.device)
        ws = [w] + [w.clone() for _ in range(copies - 1)]
        out = a.new_empty(m, n)
        ref, torch_out = numerics.reference(a, w, bias), numerics.torch_output(a, w, bias)
        arms = {}
        for choice in choices:
            name = choice.value if isinstance(choice, Sentinel) else choice.id
            cfg = options.config_of(choice, problem)      # DEFAULT -> the lane's default
            if cfg is None:                               # TORCH
                arms[name] = lambda i: torch.addmm(bias, a, ws[i].t(), out=out)
            else:
                launch = launcher_for(cfg, m, n, k)
                arms[name] = lambda i, f=launch: f(a, ws[i], bias, out)
        return BenchCase(arms=arms, copies=copies, weight_bytes=n * k * 2,
                         gate=lambda o: numerics.numerics_gate(o, torch_out, ref))

An int8 family gates bitwise instead: ``gate=lambda o: torch.equal(o, heuristic_out)``.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core.errors import OasrError

PROTOCOL_VERSION = 1
"""Bumped whenever a change to the protocol changes what a measurement means."""

MAD_TO_SIGMA = 1.4826
"""sigma of a normal distribution per unit of median absolute deviation."""


class BenchError(OasrError):
    """The protocol refused to run (inside a capture, no device) or cannot go on."""


class DeviceFault(BenchError):
    """The device reported an error after a launch; later numbers would be untrustworthy."""


class ArmStatus(enum.Enum):
    """What became of one arm."""

    OK = "ok"
    """Passed the numerics gate and was timed."""
    REJECTED = "rejected"
    """Ran, but failed the numerics gate: never timed."""
    ERROR = "error"
    """Raised when run, gated or captured."""
    UNBUILT = "unbuilt"
    """The family could not build it for this problem (``BenchCase.rejected``)."""


def median(values: Sequence[float]) -> float:
    """The median; inf for no values."""
    return statistics.median(values) if values else math.inf


def mad_sigma(values: Sequence[float]) -> float:
    """A robust sigma: 1.4826 x the median absolute deviation (inf for no values)."""
    if not values:
        return math.inf
    mid = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median(abs(v - mid) for v in values)


@attrs.frozen
class BenchOptions:
    """Knobs of one measurement: operands (device, seed, L2 policy) and the protocol.

    Passed to ``Family.make_bench`` (which needs ``device``, ``seed`` and
    :meth:`copies_for`) and to :func:`oasr_core.bench.measure`.
    """

    device: str = "cuda"
    """Device the operands live on."""
    seed: int = 0
    """Seeds operand generation and the round shuffles."""
    working_set_bytes: int | None = None
    """The served model's weight working set (from the census); None: unknown (cold)."""
    l2_bytes: int | None = None
    """The device's L2 size; None: unknown (one copy, L2 state ``unknown``)."""
    warm_fraction: float = 1.0
    """Weights stay warm when the working set is at most this fraction of L2."""
    cold_factor: float = 3.0
    """Cold rotation: copies x weight bytes >= this x L2."""
    max_copies: int = 256
    max_copy_bytes: int = 1 << 30
    """Rotation never allocates more than this many bytes of weight copies."""
    target_graph_us: float = 200.0
    """Calls per graph are chosen so one replay takes about this long."""
    min_calls: int = 8
    """At least this many calls per graph (one call per replay ranks worse than eager)."""
    max_calls: int = 64
    max_rotation_calls: int = 256
    """A graph may grow up to this many calls so that one replay visits every copy."""
    stage_rounds: tuple[int, ...] = attrs.field(default=(3, 6, 15), converter=tuple)
    """Rounds per halving stage; every arm is replayed once per round."""
    finalists: int = 3
    """Arms kept after the second stage (besides the kept arms)."""
    stop_stdrel: float = 0.01
    """The last stage stops early once every arm's sigma/median is at most this ..."""
    stop_min_rounds: int = 9
    """... and every arm has at least this many samples (a MAD of 3 samples means little)."""
    probe_reps: int = 3
    separator_reps: int = 7
    solo_reps: int = 7
    issue_reps: int = 64
    """Eager calls timed on the host for the issue cost."""
    overlap_tolerance: float = 0.2
    """An arm whose loop time is below (1 - this) x its single-call time is marked overlap."""
    lane: str | None = None
    """The lane whose configs are measured."""
    resolve: Callable[[Any, Any], Any] | None = attrs.field(default=None, eq=False, repr=False)
    """``resolve(choice, problem) -> Config | None`` behind :meth:`config_of` (set by the build)."""

    def config_of(self, choice: Any, problem: Any) -> Any:
        """The lane config ``choice`` launches at ``problem``: a config itself, ``DEFAULT`` as
        the lane's default, ``HEURISTIC`` as the family heuristic's pick; None for ``TORCH``
        and ``FUSED`` (the family's own non-lane paths)."""
        if self.resolve is not None:
            return self.resolve(choice, problem)
        return None if isinstance(choice, enum.Enum) else choice

    def to_json(self) -> dict[str, Any]:
        """The options as JSON (for a log's run header)."""
        return attrs.asdict(self, filter=lambda a, _v: a.name != "resolve")

    def warm(self) -> bool:
        """Whether the served model's weights fit in L2 (then they are benchmarked warm)."""
        if self.working_set_bytes is None or self.l2_bytes is None:
            return self.l2_bytes is None
        return self.working_set_bytes <= self.warm_fraction * self.l2_bytes

    def copies_for(self, weight_bytes: int) -> int:
        """Weight copies to rotate through for a weight of ``weight_bytes`` (1 when warm)."""
        if weight_bytes <= 0 or self.warm() or self.l2_bytes is None:
            return 1
        wanted = math.ceil(self.cold_factor * self.l2_bytes / weight_bytes)
        affordable = max(1, self.max_copy_bytes // weight_bytes)
        return max(1, min(wanted, self.max_copies, affordable))

    def l2_state(self, copies: int, weight_bytes: int) -> str:
        """``warm``, ``cold`` (copies span cold_factor x L2), ``cold-partial``, ``unknown``."""
        if self.l2_bytes is None:
            return "unknown"
        if self.warm():
            return "warm"
        if copies * weight_bytes >= self.cold_factor * self.l2_bytes:
            return "cold"
        return "cold-partial"


@attrs.frozen
class BenchCase:
    """What ``Family.make_bench`` returns: the arms of one problem and how to judge them.

    ``arms`` maps an arm name (a config id, or a sentinel's value such as ``torch``) to
    ``run(copy_index) -> output``: one call on the current CUDA stream using weight copy
    ``copy_index`` (0 <= index < ``copies``), writing into preallocated outputs (allocating
    inside a capture costs graph memory) and returning the output. It is the call the served
    op makes, so its host issue time is representative. ``gate(output)`` is truthy when the
    output passes the family's numerics gate against the reference (copy 0's); a result with
    ``reason``/``error`` attributes explains itself.
    """

    arms: Mapping[str, Callable[[int], Any]] = attrs.field(converter=dict)
    gate: Callable[[Any], Any]
    copies: int = attrs.field(default=1)
    """Weight copies allocated (every copy holds the same values)."""
    weight_bytes: int = 0
    """Bytes of one weight copy (for the L2 state recorded with the result)."""
    rejected: Mapping[str, str] = attrs.field(factory=dict, converter=dict)
    """Choices the family could not build for this problem, with the reason."""
    release: Callable[[], None] | None = None
    """Frees the operands once the problem is measured."""

    @copies.validator
    def _check_copies(self, _attribute: attrs.Attribute, value: int) -> None:
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"BenchCase.copies must be a positive integer, got {value!r}")


@attrs.frozen
class Conditions:
    """The device's state when a measurement started or ended (None: not observable)."""

    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    power_w: float | None = None
    other_processes: int | None = None
    """Other compute processes on the device (ours excluded)."""
    source: str = "none"
    """``nvml``, ``nvidia-smi``, ``scripted`` or ``none``."""

    @property
    def contended(self) -> bool:
        """Whether another compute process shared the device."""
        return bool(self.other_processes)


@attrs.frozen
class ArmResult:
    """One arm's measurement at one problem. Times are per call, separator subtracted."""

    name: str
    status: ArmStatus
    reason: str = ""
    median_ms: float = math.inf
    sigma_ms: float = math.inf
    rounds: int = 0
    stage: int | None = None
    """Halving stage it was eliminated after (None: it survived to the end)."""
    solo_ms: float | None = None
    """Time of the call alone in a one-call graph (survivors only)."""
    issue_us: float | None = None
    """Host time to issue one eager call."""
    overlap: bool = False
    """Its loop time is far below its single-call time: it wins through self-overlap."""
    gate_error: float | None = None

    @property
    def ok(self) -> bool:
        """Timed successfully."""
        return self.status is ArmStatus.OK and math.isfinite(self.median_ms)

    @property
    def sigma_rel(self) -> float:
        """sigma / median (inf when not timed)."""
        if not self.ok or self.median_ms <= 0:
            return math.inf
        return self.sigma_ms / self.median_ms

    def objective_ms(self, alpha: float) -> float:
        """GPU time + alpha x host issue time, in ms (alpha: the shape's eager fraction)."""
        if not self.ok:
            return math.inf
        return self.median_ms + alpha * (self.issue_us or 0.0) / 1000.0


@attrs.frozen
class BenchResult:
    """Every arm's result at one problem, with the conditions it was measured under."""

    arms: tuple[ArmResult, ...] = attrs.field(converter=tuple)
    alpha: float = 0.0
    calls: int = 0
    """Calls per graph (the same for every arm of the problem)."""
    copies: int = 1
    weight_bytes: int = 0
    l2: str = "unknown"
    separator_ms: float = 0.0
    start: Conditions = Conditions()
    end: Conditions = Conditions()
    protocol: int = PROTOCOL_VERSION

    @property
    def contended(self) -> bool:
        """Another compute process was seen at the start or the end."""
        return self.start.contended or self.end.contended

    def arm(self, name: str) -> ArmResult | None:
        """The result of arm ``name``, or None."""
        return next((a for a in self.arms if a.name == name), None)

    def ranked(self) -> list[ArmResult]:
        """Timed arms, best objective first (ties by name)."""
        ok = [a for a in self.arms if a.ok]
        return sorted(ok, key=lambda a: (a.objective_ms(self.alpha), a.name))
