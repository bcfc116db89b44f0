"""The end-to-end benchmark: a whole model with oasr's ops against the same model in torch.

What a user runs to see whether oasr makes *their* model faster (``oasr tune bench``,
``benchmarks/e2e.py``). One process builds the model twice from its workload's factory:

* **oasr**: every linear layer through the plugins' linear for the dtype and quantization
  (``oasr_linear``; a reference workload builds it so itself, any other model has its
  ``nn.Linear`` and ``nn.Conv1d`` layers routed to the plugins' ops by
  :func:`oasr_core.route`);
* **torch**: the same model with plain ``F.linear`` at the same dtype, unquantized (the
  baseline of an int8-quantized model is that model in fp16), loaded with the oasr model's
  state dict so both hold the same weights.

Both run on the same random inputs. The outputs must agree: ``max |oasr - torch| /
max |torch| <= tolerance`` (:data:`TOLERANCES`), checked eagerly and after the graph replays;
otherwise :class:`MismatchError`. Then each model is timed

* in a CUDA graph (one forward captured, replayed; :class:`~oasr_core.bench.CudaGraphTimer`,
  the protocol's timer: warm-up and capture on a side stream, a spin kernel before each
  batch of replays so the host never shows), and
* eagerly under ``torch.inference_mode()`` (what engines use), after a warm-up, each forward
  from an idle device to its end (CUDA events), so the host's launch cost counts,

the two models alternating in rounds (the order flipping each round) and the median of
the rounds reported. Finally one recorded eager forward of the oasr model
(:class:`~oasr_core.census.recorder.ShapeRecorder` on the families' own ops) says which
tier served how many calls. On a CPU (tests only) just the eager mode runs and the ops take
their torch path.
"""

from __future__ import annotations

import math
import platform
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import attrs

import oasr_core.compile as oc
from oasr_core.bench.kernel_profile import profile_kernels
from oasr_core.census.choices import describe, offered
from oasr_core.census.recorder import ShapeRecorder, _is_torch_function, patches_of
from oasr_core.census.workloads import ReferenceFactory, make_inputs
from oasr_core.errors import ConfigurationError, OasrError
from oasr_core.progress import ProgressMode, track
from oasr_core.report import tuning_report
from oasr_core.routing import own_forwards, route, through_ops
from oasr_core.runtime import get_runtime
from oasr_core.selection import select

from .cuda import CudaGraphTimer
from .records import BenchError, median

TOLERANCES: Mapping[tuple[str, str], float] = {
    ("fp16", "none"): 1e-2, ("bf16", "none"): 5e-2,
    ("fp16", "int8_w8a8"): 5e-2, ("bf16", "int8_w8a8"): 8e-2,
    ("fp16", "fp8_w8a8"): 0.15, ("bf16", "fp8_w8a8"): 0.15,
}
"""Default bound of ``max |oasr - torch| / max |torch|`` by (dtype, quantization): both
sides accumulate in fp32, so full precision differs by rounding order alone; a quantized
model is compared against its unquantized self, so its bound is the quantization error's (per
token and channel absmax int8: 1.4% at the reference Conformer and Whisper encoder in fp32;
e4m3, three mantissa bits: 7.1% at the reference Conformer in fp32)."""
CPU_TOLERANCE = 1e-4
"""The bound of a full-precision model on a CPU, where oasr's ops take torch's path in fp32."""
_TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


COMPILED = "compiled, CUDA graph"
"""The mode of the row comparing ``backend="oasr"`` with Inductor alone."""


class MismatchError(OasrError):
    """The oasr model's output does not agree with the torch model's."""


@attrs.frozen
class E2EOptions:
    """What to run: the shape, dtype and scheme, which modes, how many rounds.

    ``device`` is ``"cuda"``, or ``"cpu"`` for tests (eager only, fp32).
    """

    batch: int
    frames: int
    dtype: str = "fp16"
    quantization: str = "none"
    graph: bool = True
    eager: bool = True
    replays: int = 200
    """Graph rounds (one replay of each model per round)."""
    iters: int = 30
    """Eager rounds (one forward of each model per round)."""
    warmup: int = 3
    tolerance: float | None = None
    """None: :data:`TOLERANCES` (:data:`CPU_TOLERANCE` on a CPU)."""
    device: str = "cuda"
    params: Mapping[str, Any] = attrs.field(factory=dict)
    seed: int = 0
    compile: bool = False
    """Also time the torch model under ``torch.compile`` (Inductor, default mode) and under
    ``torch.compile(backend="oasr")``, in CUDA graphs, with their compile times."""
    profile: bool = False
    """With ``compile``: GPU time by kernel class of one forward of each compiled arm
    (:mod:`oasr_core.bench.kernel_profile`)."""

    def __attrs_post_init__(self) -> None:
        for name in ("batch", "frames", "replays", "iters"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ConfigurationError(f"--{name} {value!r}: expected a positive integer")
        if self.warmup < 0:
            raise ConfigurationError(f"--warmup {self.warmup!r}: expected an integer >= 0")
        if self.device not in ("cuda", "cpu"):
            raise ConfigurationError(f"device {self.device!r} is not cuda or cpu")
        if not (self.graph or self.eager):
            raise ConfigurationError("--no-graph with --no-eager leaves nothing to time")
        if self.compile and self.device != "cuda":
            raise ConfigurationError("--compile times compiled models in CUDA graphs: it needs "
                                     "a CUDA device")
        if self.tolerance is not None and not self.tolerance > 0:
            raise ConfigurationError(f"--tolerance {self.tolerance!r}: expected a positive "
                                     "number")

    @property
    def compute_dtype(self) -> str:
        """The dtype the models run in: the requested one, fp32 on a CPU."""
        return "fp32" if self.device == "cpu" else self.dtype

    def bound(self) -> float:
        """The agreement bound in force."""
        if self.tolerance is not None:
            return self.tolerance
        if self.device == "cpu" and self.quantization == "none":
            return CPU_TOLERANCE
        return TOLERANCES.get((self.dtype, self.quantization), 0.1)


@attrs.frozen
class Row:
    """One line of the table: a mode's medians (milliseconds per forward)."""

    mode: str
    oasr_ms: float
    torch_ms: float
    rounds: int

    @property
    def speedup(self) -> float:
        """torch / oasr (> 1: oasr is faster)."""
        return self.torch_ms / self.oasr_ms if self.oasr_ms > 0 else math.nan


@attrs.frozen
class E2EResult:
    """A run's table, agreement, per-call tiers and the environment that produced them."""

    model: str
    description: str
    options: E2EOptions
    rows: tuple[Row, ...]
    error: float
    """``max |oasr - torch| / max |torch|`` (the worst of the checks)."""
    calls: tuple[tuple[str, str, str, int], ...]
    """(family, op, served by, calls) of one forward of the oasr model."""
    resolutions: tuple[tuple[str, str, str, int], ...]
    """(family, op, tier, resolutions) the runtime counted while the models ran."""
    device_name: str
    torch_version: str
    tuning_files: tuple[str, ...]
    baseline: str
    compile_seconds: tuple[tuple[str, float], ...] = ()
    """(arm, seconds of its first call: Dynamo, Inductor and the first run) with --compile."""
    rewritten: tuple[tuple[str, str, int], ...] = ()
    """(family, op, sites) the oasr backend sent to the families' ops, with --compile."""
    gate: tuple[Any, ...] = ()
    """The compile gate's verdicts (:class:`oasr_core.compile.gate.Verdict`), one per graph
    whose rewrite was measured against Inductor alone, with --compile."""
    profiles: tuple[tuple[str, Any], ...] = ()
    """(arm, :class:`~oasr_core.bench.kernel_profile.KernelProfile`) with --profile."""
    own_forwards: int = 0
    """Routed layers of the oasr model that ran their module's own forward (their answer
    torch at every call under the tiers in force, :func:`oasr_core.route`); the tally counts
    them through the ops, as the tiers serve them."""

    @property
    def scheme(self) -> str:
        """``fp16``, or ``int8_w8a8 (fp16 activations)``."""
        o = self.options
        dtype = o.compute_dtype
        return dtype if o.quantization == "none" else f"{o.quantization} ({dtype} activations)"

    @property
    def kernel_calls(self) -> int:
        """Calls of one forward an oasr kernel served (:func:`tally_calls` names a call that
        took torch's path with its reason in brackets: ``torch (cpu)``, ``system (torch)``)."""
        return sum(n for *_, who, n in self.calls if "(" not in who)

    def no_kernel_line(self) -> list[str]:
        """The plain statement a report starts with when no oasr kernel ran: its ratio then
        compares torch with torch (or oasr's CPU emulation), which is noise, not a result."""
        if self.kernel_calls:
            return []
        where = "on the CPU oasr's ops take their torch path" if self.options.device == "cpu" \
            else "every call was served by torch"
        return [f"**No oasr kernel ran** ({where}): the speedup below compares torch with "
                "itself and is noise, not a result.", ""]

    def header(self) -> list[str]:
        """The lines naming what ran where."""
        o = self.options
        params = ", ".join(f"{k}={v}" for k, v in sorted(o.params.items()))
        return [f"- model: {self.model} ({self.description}), batch {o.batch} x {o.frames} "
                f"frames, {self.scheme}" + (f"; parameters {params}" if params else ""),
                f"- baseline: {self.baseline}",
                f"- device: {self.device_name}; torch {self.torch_version}",
                f"- tuning files: {'; '.join(self.tuning_files) or 'none loaded'}",
                f"- agreement: max |oasr - torch| / max |torch| = {self.error:.3g} "
                f"(bound {o.bound():.3g})",
                f"- timing: {'; '.join(self._modes())}; the two models alternating, "
                f"{o.warmup} warm-up forwards each"]

    def _modes(self) -> list[str]:
        o, ran = self.options, {r.mode for r in self.rows}
        out = []
        if "CUDA graph" in ran:
            out.append(f"CUDA graph: median of {o.replays} replays of one captured forward")
        if "eager" in ran:
            out.append(f"eager under torch.inference_mode(): median of {o.iters} forwards, "
                       "each from an idle device")
        if COMPILED in ran:
            out.append(f"{COMPILED}: the torch model under torch.compile (oasr column: "
                       "backend=\"oasr\"; torch column: Inductor alone, default mode), median "
                       f"of {o.replays} replays of one captured forward")
        return out

    def table(self) -> list[str]:
        """The markdown table: model, mode, oasr ms, torch ms, speedup."""
        o = self.options
        torch_col = f"torch {o.compute_dtype} ms" if o.quantization != "none" else "torch ms"
        lines = [f"| model | mode | oasr ms | {torch_col} | speedup |",
                 "|---|---|---:|---:|---:|"]
        lines += [f"| {self.model} | {r.mode} | {r.oasr_ms:.3f} | {r.torch_ms:.3f} | "
                  f"{r.speedup:.3f}x |" for r in self.rows]
        return lines

    def compile_lines(self) -> list[str]:
        """Compile times, what the backend rewrote, the kernel-class profiles."""
        if not self.compile_seconds:
            return []
        lines = ["compile time (first call, s): " + "; ".join(
            f"{arm} {s:.1f}" for arm, s in self.compile_seconds)]
        lines.append("sites the oasr backend sent to oasr's ops: " + (", ".join(
            f"{f}/{op} x{n}" for f, op, n in self.rewritten) or "none"))
        for i, v in enumerate(self.gate, 1):
            timing = (f": {v.oasr_ms:.3f} ms rewritten vs {v.inductor_ms:.3f} ms Inductor "
                      f"alone, median of {v.rounds} ({v.why})" if v.oasr_ms is not None
                      else f" ({v.why})")
            lines.append(f"compile gate, graph {i} ({v.sites} sites): kept {v.keep}{timing}")
        for arm, profile in self.profiles:
            lines += ["", f"GPU time by kernel class, one forward, {arm}:", "",
                      *profile.table()]
        return lines

    def tier_lines(self) -> list[str]:
        """Which tier served how many calls of one forward, then the runtime's resolutions."""
        total = sum(n for *_, n in self.calls)
        lines = [f"calls of one forward served by oasr's ops: {total}"]
        lines += [f"  {f}/{op}: {who} x{n}" for f, op, who, n in self.calls]
        if self.own_forwards:
            lines.append(f"  routed layers timed on their module's own forward (torch at "
                         f"every call under these tiers): {self.own_forwards}")
        if self.resolutions:
            by: dict[tuple[str, str], list[str]] = {}
            for f, op, tier, n in self.resolutions:
                by.setdefault((f, op), []).append(f"{tier}={n}")
            lines.append("resolutions per tier (distinct shapes): " + "; ".join(
                f"{f}/{op} {', '.join(v)}" for (f, op), v in sorted(by.items())))
        return lines

    def lines(self) -> list[str]:
        """The report printed by the command."""
        title = "end to end" + (f", {self.options.quantization} vs torch "
                                f"{self.options.compute_dtype}"
                                if self.options.quantization != "none" else "")
        compiled = self.compile_lines()
        return [f"# {title}: {self.model} on {self.device_name}", "", *self.no_kernel_line(),
                *self.header(), "",
                *self.table(), "", *self.tier_lines(), *([""] + compiled if compiled else [])]

    def markdown(self) -> str:
        """:meth:`lines` as a markdown document."""
        return "\n".join(self.lines()) + "\n"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form."""
        o = self.options
        return {
            "model": self.model, "description": self.description, "batch": o.batch,
            "frames": o.frames, "dtype": o.compute_dtype, "quantization": o.quantization,
            "baseline": self.baseline, "device": self.device_name, "torch": self.torch_version,
            "tuning_files": list(self.tuning_files), "error": self.error, "bound": o.bound(),
            "oasr_kernel_calls": self.kernel_calls, "own_forwards": self.own_forwards,
            "replays": o.replays, "iters": o.iters,
            "rows": [{"mode": r.mode, "oasr_ms": r.oasr_ms, "torch_ms": r.torch_ms,
                      "speedup": r.speedup, "rounds": r.rounds} for r in self.rows],
            "calls": [{"family": f, "op": op, "served_by": w, "calls": n}
                      for f, op, w, n in self.calls],
            "resolutions": [{"family": f, "op": op, "tier": t, "resolutions": n}
                            for f, op, t, n in self.resolutions],
            "compile_seconds": dict(self.compile_seconds),
            "rewritten": [{"family": f, "op": op, "sites": n} for f, op, n in self.rewritten],
            "gate": [attrs.asdict(v) for v in self.gate],
            "profiles": {arm: p.to_json() for arm, p in self.profiles},
        }


def check_scheme(registry: Any, dtype: str, quantization: str) -> None:
    """:class:`~oasr_core.errors.ConfigurationError` unless an installed family serves
    ``quantization`` at ``dtype`` (:mod:`oasr_core.census.choices`), naming what is offered."""
    choices = offered(registry.families.values())
    if quantization not in choices:
        raise ConfigurationError(f"--quantization {quantization!r} is not a scheme an "
                                 f"installed plugin serves; offered: {describe(choices)}")
    if dtype not in choices[quantization]:
        raise ConfigurationError(f"--dtype {dtype!r} is not served with --quantization "
                                 f"{quantization}; offered: {describe(choices)}")


def build_pair(workload: Any, pm: Any, options: E2EOptions) -> tuple[Any, Any, str]:
    """``(oasr model, torch model, baseline description)`` on the options' device and dtype,
    the torch model holding the oasr model's state dict."""
    import torch

    params = dict(workload.params)
    params.update(options.params)
    if workload.dtype_param is not None:
        params[workload.dtype_param] = options.dtype
    reference = isinstance(workload.factory, ReferenceFactory)
    torch.manual_seed(options.seed)
    if reference:
        oasr = workload.factory(family_ops=True, quantization=options.quantization, **params)
        twin = workload.factory(family_ops=False, quantization="none", **params)
    else:
        oasr, twin = workload.factory(**params), workload.factory(**params)
        if not any(route(oasr, dtype=options.dtype, quantization=options.quantization,
                         pm=pm).values()):
            raise ConfigurationError(f"model {workload.description or workload.name!r} has "
                                     "no nn.Linear or nn.Conv1d layer for oasr's ops to serve")
    dtype = getattr(torch, _TORCH_DTYPES[options.compute_dtype])
    oasr = oasr.to(device=options.device, dtype=dtype).eval()
    twin = twin.to(device=options.device, dtype=dtype).eval()
    twin.load_state_dict(oasr.state_dict(), strict=True)
    baseline = f"the same model on torch alone (its own layers) in {options.compute_dtype}" + (
        f" (unquantized: the {options.quantization} model against its "
        f"{options.compute_dtype} self)" if options.quantization != "none" else "")
    return oasr, twin, baseline


def torch_copy(workload: Any, options: E2EOptions, twin: Any) -> Any:
    """Another torch model like ``twin`` (built by the workload's factory, its layers
    torch's) holding ``twin``'s state dict: what a compiled arm compiles, so each arm has
    a module of its own (a reference model holds read-only mappings deepcopy refuses)."""
    import torch

    params = dict(workload.params)
    params.update(options.params)
    if workload.dtype_param is not None:
        params[workload.dtype_param] = options.dtype
    if isinstance(workload.factory, ReferenceFactory):
        model = workload.factory(family_ops=False, quantization="none", **params)
    else:
        model = workload.factory(**params)
    dtype = getattr(torch, _TORCH_DTYPES[options.compute_dtype])
    model = model.to(device=options.device, dtype=dtype).eval()
    model.load_state_dict(twin.state_dict(), strict=True)
    return model


def relative_error(out: Any, ref: Any) -> float:
    """``max |out - ref| / max |ref|`` over every tensor of two outputs (inf when a shape
    differs or a value is not finite)."""
    import torch

    outs, refs = _tensors(out), _tensors(ref)
    if len(outs) != len(refs):
        return math.inf
    worst = 0.0
    for a, b in zip(outs, refs, strict=True):
        if a.shape != b.shape:
            return math.inf
        a32, b32 = a.detach().float(), b.detach().float()
        if not bool(torch.isfinite(a32).all()):
            return math.inf
        scale = float(b32.abs().max()) if b32.numel() else 0.0
        diff = float((a32 - b32).abs().max()) if a32.numel() else 0.0
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, Mapping):
        return [t for k in sorted(value) for t in _tensors(value[k])]
    return []


def check_agreement(out: Any, ref: Any, bound: float, where: str) -> float:
    """The relative error of ``out``; :class:`MismatchError` above ``bound``."""
    error = relative_error(out, ref)
    if not error <= bound:
        raise MismatchError(f"oasr and torch outputs disagree ({where}): max |oasr - torch| / "
                            f"max |torch| = {error:.3g} > {bound:.3g}")
    return error


class _Clock:
    """Milliseconds of one eager call from an idle device: CUDA events, or the host clock."""

    def __init__(self, cuda: bool) -> None:
        import torch

        self._torch, self.cuda = torch, cuda
        if cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)

    def time(self, fn: Callable[[], Any]) -> float:
        if not self.cuda:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1000.0
        self._torch.cuda.synchronize()
        self._start.record()
        fn()
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end)


def _alternating(rounds: int, measure: Callable[[list[str]], dict[str, float]]) -> dict:
    samples: dict[str, list[float]] = {"oasr": [], "torch": []}
    for r in range(rounds):
        order = ["oasr", "torch"] if r % 2 == 0 else ["torch", "oasr"]
        for name, ms in measure(order).items():
            samples[name].append(ms)
    return {name: median(v) for name, v in samples.items()}


def time_eager(fns: Mapping[str, Callable[[], Any]], options: E2EOptions) -> Row:
    """Median eager milliseconds per forward of ``fns["oasr"]`` and ``fns["torch"]``.

    On the CPU, where a reference model's forwards take seconds each, the forwards done so
    far show on stderr (a bar on a terminal, else a line per tenth), so a minutes-long run
    does not look hung."""
    clock = _Clock(options.device == "cuda")
    mode = ProgressMode.choose(None) if options.device == "cpu" else ProgressMode.OFF
    with track("forwards", len(fns) * (options.warmup + options.iters), mode) as tracker:
        for fn in fns.values():
            for _ in range(options.warmup):
                fn()
                tracker.advance("done")

        def measure(order: list[str]) -> dict[str, float]:
            times = {n: clock.time(fns[n]) for n in order}
            tracker.advance("done", len(order))
            return times

        got = _alternating(options.iters, measure)
    return Row("eager", got["oasr"], got["torch"], options.iters)


def time_graphs(fns: Mapping[str, Callable[[], Any]], options: E2EOptions,
                check: Callable[[], float]) -> tuple[Row, float]:
    """Median replay milliseconds of one captured forward of each; ``check()`` runs after
    the replays (the captured outputs hold the last replay's values)."""
    timer = CudaGraphTimer(warmup_rounds=max(1, options.warmup))
    graphs = {name: timer.capture(name, [fn], separate=False) for name, fn in fns.items()}
    try:
        got = _alternating(options.replays, lambda order: dict(
            zip(order, timer.replay([graphs[n] for n in order]), strict=True)))
        timer.synchronize()
        error = check()
    finally:
        for graph in graphs.values():
            timer.release(graph)
    return Row("CUDA graph", got["oasr"], got["torch"], options.replays), error


def time_compiled(make: Callable[[], Any], inputs: tuple, ref: Any, options: E2EOptions
                  ) -> tuple[Row, dict[str, Any]]:
    """The torch model under ``torch.compile`` (Inductor alone) against it under
    ``torch.compile(backend="oasr")``: each arm a model of its own from ``make()`` (the
    same weights), compiled
    by its first call (timed), checked against ``ref``, then both captured and replayed
    alternating as :func:`time_graphs` does. Returns the row and ``{"seconds", "rewritten",
    "error", "profiles"}``."""
    import torch

    backend = oc.backend(quantization=options.quantization)
    arms = {"torch": torch.compile(make()), "oasr": torch.compile(make(), backend=backend)}
    bound, seconds, error = options.bound(), {}, 0.0
    for name in ("torch", "oasr"):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = arms[name](*inputs)
        torch.cuda.synchronize()
        seconds["torch.compile" if name == "torch" else "backend=oasr"] = \
            time.perf_counter() - start
        error = max(error, check_agreement(out, ref, bound, f"{name} compiled, first call"))
    profiles: dict[str, Any] = {}
    if options.profile:
        for name, label in (("torch", "torch.compile"), ("oasr", "backend=oasr")):
            profiles[label] = profile_kernels(lambda name=name: arms[name](*inputs))
    captured: dict[str, Any] = {}

    def keep(label: str) -> Callable[[], None]:
        def forward() -> None:
            captured[label] = arms[label](*inputs)
        return forward

    row, graph_error = time_graphs(
        {"oasr": keep("oasr"), "torch": keep("torch")}, options,
        lambda: max(check_agreement(captured["oasr"], ref, bound, "backend=oasr replay"),
                    check_agreement(captured["torch"], ref, bound, "torch.compile replay")))
    rewritten = sorted((f, op, n) for (f, op), n in backend.rewritten.items())
    # The sites are those the pass moved; the gate may then have kept Inductor's graph.
    return attrs.evolve(row, mode=COMPILED), {
        "seconds": seconds, "rewritten": rewritten, "error": max(error, graph_error),
        "profiles": profiles, "gate": tuple(backend.verdicts)}


def _family_op_patches(registry: Any) -> list[Any]:
    """The recorder patches of the families' own ops (not the torch functions they stand for:
    those are the calls oasr does not serve)."""
    out = []
    for patch in patches_of(registry):
        try:
            original = patch.resolve()[2]
        except (ImportError, AttributeError):
            continue
        if not _is_torch_function(original):
            out.append(patch)
    return out


def tally_calls(fn: Callable[[], Any], registry: Any, options: E2EOptions,
                arch: str | None) -> tuple[tuple[str, str, str, int], ...]:
    """Run ``fn`` once under the shape recorder; (family, op, served by, calls) per tier."""
    with ShapeRecorder(_family_op_patches(registry)) as recorder:
        fn()
    served: Counter[tuple[str, str, str]] = Counter()
    for call, n in recorder.counts.items():
        if options.device == "cpu":
            who = "torch (cpu)"
        else:
            sel = select(call.family, call.op, call.dtype, tuple(v for _, v in call.dims),
                         call.m, arch, point=call.point)
            who = sel.tier.value + (f" ({sel.choice_id})" if sel.config is None else "")
        served[(call.family, call.op, who)] += n
    return tuple((f, op, who, n) for (f, op, who), n in sorted(served.items()))


def _tuning_files(arch: str | None) -> tuple[str, ...]:
    if arch is None:
        return ()
    files = []
    for state in tuning_report(arch=arch).families:
        for tier in state.tiers:
            if tier.loaded:
                files.append(f"{tier.tier} {tier.path} ({tier.entries} entries)")
    return tuple(files)


def run_e2e(workload: Any, options: E2EOptions, *, name: str | None = None) -> E2EResult:
    """Build, check, time and tally ``workload`` as the module docstring says."""
    import torch

    if options.device == "cuda" and not torch.cuda.is_available():
        raise BenchError("no CUDA device: the end-to-end benchmark times models on a GPU "
                         "(torch.cuda.is_available() is False); --cpu runs it eagerly on the "
                         "CPU, where no oasr kernel runs (a check that it works, not a speed)")
    if workload.fixed_frames is not None and options.frames != workload.fixed_frames:
        raise ConfigurationError(f"--frames {options.frames}: workload {workload.name!r} takes "
                                 f"exactly {workload.fixed_frames} frames")
    rt = get_runtime()
    arch = rt.device_arch() if options.device == "cuda" else None
    before = Counter(rt.counts)
    oasr, twin, baseline = build_pair(workload, rt.pm, options)
    inputs = make_inputs(workload, options.batch, options.frames,
                         dtype=getattr(torch, _TORCH_DTYPES[options.compute_dtype]),
                         device=options.device)
    bound = options.bound()
    rows: list[Row] = []
    with torch.inference_mode():
        ref = twin(*inputs)
        error = check_agreement(oasr(*inputs), ref, bound, "eager")
        fns = {"oasr": lambda: oasr(*inputs), "torch": lambda: twin(*inputs)}
        if options.graph and options.device == "cuda":
            captured: dict[str, Any] = {}

            def keep(label: str, model: Any) -> Callable[[], None]:
                def forward() -> None:
                    captured[label] = model(*inputs)
                return forward

            row, graph_error = time_graphs(
                {"oasr": keep("oasr", oasr), "torch": keep("torch", twin)}, options,
                lambda: check_agreement(captured["oasr"], captured["torch"], bound,
                                        "CUDA graph replay"))
            rows.append(row)
            error = max(error, graph_error)
        if options.eager:
            rows.append(time_eager(fns, options))
        compiled: dict[str, Any] = {}
        if options.compile:
            row, compiled = time_compiled(lambda: torch_copy(workload, options, twin), inputs,
                                          ref, options)
            rows.append(row)
            error = max(error, compiled["error"])
        resolutions = tuple(sorted((f, o, t, n - before.get((f, o, t), 0))
                                   for (f, o, t), n in rt.counts.items()
                                   if n > before.get((f, o, t), 0)))
        own = own_forwards(oasr)
        with through_ops():
            calls = tally_calls(fns["oasr"], rt.registry, options, arch)
    device_name = torch.cuda.get_device_name() if options.device == "cuda" else \
        f"CPU ({platform.machine() or 'unknown'})"
    return E2EResult(model=name or workload.name, description=workload.description,
                     options=options, rows=tuple(rows), error=error, calls=calls,
                     resolutions=resolutions, device_name=device_name,
                     torch_version=torch.__version__, tuning_files=_tuning_files(arch),
                     baseline=baseline,
                     compile_seconds=tuple(compiled.get("seconds", {}).items()),
                     rewritten=tuple(compiled.get("rewritten", ())),
                     gate=tuple(compiled.get("gate", ())),
                     profiles=tuple(compiled.get("profiles", {}).items()),
                     own_forwards=own)
