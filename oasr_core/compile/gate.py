"""The measured gate of a compiled graph: oasr's rewrite is kept only where it runs faster.

The tiers' entries were measured against torch as eager code runs it: a GEMM with its bias,
activation or residual as separate kernels, a channels-first convolution with its transposes.
Inductor fuses those epilogues and copies into the kernels around them, so a win in the tiers
can vanish inside a compiled graph. On the H200 (benchmarks/results/h200_compile_*.md,
2026-12-03) the reference Conformer under ``backend="oasr"`` ran at 0.982x of torch.compile
alone out of the box and 0.951x after a build of its compile census, while the Whisper-base
encoder after its build ran at 1.085x. Neither the tiers nor a per-site model predicts that.

So when the pass moved any site of a graph and the graph runs on a CUDA device, the backend
also compiles the graph as Inductor alone would, captures each in a CUDA graph, replays them
in alternating rounds on the graph's own example inputs, checks that their outputs agree,
and keeps the rewrite only when it is faster by more than :data:`MARGIN`; otherwise the
graph is Inductor's, exactly as ``torch.compile`` alone would have built it. The decision is
stored (:func:`decisions_path`) under a key of the graph's code, its inputs' shapes, strides
and dtypes, the device and the pass's own key (its source, options and the tier files in
force), so a later compile of the same graph compiles once, the chosen way.

``OASR_COMPILE_GATE=0`` turns the gate off (every rewrite is kept, as the tiers chose).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median
from typing import Any

import attrs
import filelock

from oasr_core import files
from oasr_core.bench.cuda import CudaGraphTimer
from oasr_core.environment import parse_bool

GATE_ENV = "OASR_COMPILE_GATE"

MARGIN = 0.005
"""The rewrite must be this much faster (a share of Inductor's time) to be kept: a tie is
Inductor's, which is what the user would have run without oasr."""

AGREEMENT = 2e-2
"""Largest max |rewritten - inductor| / max |inductor| over the outputs of a full-precision
rewrite; above it the rewrite is dropped with a warning (the families' ops are checked far
tighter than this)."""

QUANTIZED_AGREEMENT = 0.15
"""The same bound under a quantization scheme (``backend(quantization=...)``): Inductor's
graph is the unquantized model, so the two differ by the scheme's quantization error (e4m3:
3.4-3.7% on the Whisper-base encoder and a wide Conformer on the H200, 2026-12-03,
h200_compile_*_fp8.md), which the user asked for; the end-to-end bench bounds a quantized
model against its unquantized self the same way."""


def agreement(quantization: str) -> float:
    """The outputs' agreement bound of a gate under ``quantization`` (``"none"``: full
    precision)."""
    return AGREEMENT if quantization == "none" else QUANTIZED_AGREEMENT

BUDGET_S = 0.5
"""About how long the replays of one gate may take, both arms together."""

SCHEMA_VERSION = 2
"""2 since verdicts under a quantization scheme are judged by :data:`QUANTIZED_AGREEMENT`: a
verdict stored before reads as unknown and is measured again."""

KEEP_OASR, KEEP_INDUCTOR = "oasr", "inductor"


@attrs.frozen
class Verdict:
    """One gate's outcome: which graph is kept, both arms' median replay milliseconds,
    the rounds replayed and the sites the rewrite moved."""

    keep: str
    oasr_ms: float | None = None
    inductor_ms: float | None = None
    rounds: int = 0
    sites: int = 0
    why: str = ""


def enabled() -> bool:
    """Whether ``OASR_COMPILE_GATE`` leaves the gate on (unset: on)."""
    value = os.environ.get(GATE_ENV, "")
    return True if not value.strip() else parse_bool(GATE_ENV, value)


def decisions_path() -> Path:
    """Where verdicts are kept: ``compile-gate.json`` in oasr's user cache directory
    (``platformdirs.user_cache_path("oasr")``, ``~/.cache/oasr`` on Linux)."""
    try:
        import platformdirs
    except ImportError:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "oasr"
    else:
        base = platformdirs.user_cache_path("oasr")
    return base / "compile-gate.json"


def graph_key(code: str, example_inputs: Sequence[Any], pass_key: Any) -> str:
    """The key of a verdict: the graph's code, each input's shape, stride, dtype and device
    (a device by its name, so another GPU model measures anew) and the pass's key."""
    import torch

    h = hashlib.sha256(code.encode())
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            device = value.device
            name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
            h.update(repr((tuple(value.shape), tuple(value.stride()), str(value.dtype),
                           name)).encode())
        else:
            h.update(repr(value).encode())
    h.update(repr(pass_key).encode())
    return h.hexdigest()


def recall(key: str, path: Path | None = None) -> str | None:
    """The stored choice for ``key`` (:data:`KEEP_OASR` or :data:`KEEP_INDUCTOR`), or None:
    never stored, or the file unreadable (then it is measured again)."""
    document = _read(path or decisions_path())
    entry = document.get("decisions", {}).get(key)
    keep = entry.get("keep") if isinstance(entry, dict) else None
    return keep if keep in (KEEP_OASR, KEEP_INDUCTOR) else None


def remember(key: str, verdict: Verdict, path: Path | None = None) -> None:
    """Store ``verdict`` under ``key`` (a locked read-merge-write; a failure to write only
    means the next compile measures again, so it is warned about, never raised)."""
    path = path or decisions_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(path) + ".lock", timeout=30):
            document = _read(path)
            decisions = document.get("decisions")
            if not isinstance(decisions, dict):
                decisions = {}
            decisions[key] = attrs.asdict(verdict)
            files.atomic_write(path, json.dumps({"schema_version": SCHEMA_VERSION,
                                                 "decisions": decisions}, indent=1) + "\n",
                               fsync=False)
    except (OSError, filelock.Timeout) as exc:
        warnings.warn(f"oasr compile gate: could not store the verdict in {path}: {exc}",
                      RuntimeWarning, stacklevel=2)


def _read(path: Path) -> dict:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict) or document.get("schema_version") != SCHEMA_VERSION:
        return {}
    return document


def measurable(example_inputs: Sequence[Any]) -> bool:
    """Whether a graph can be gated: CUDA is available and some input lives on it."""
    import torch

    return torch.cuda.is_available() and any(
        isinstance(v, torch.Tensor) and v.device.type == "cuda" for v in example_inputs)


def choose(rewritten: Callable[..., Any], inductor: Callable[..., Any],
           example_inputs: Sequence[Any], sites: int, *, bound: float = AGREEMENT) -> Verdict:
    """Replay both compiled graphs on ``example_inputs`` in CUDA graphs, alternating, and
    say which to keep (see the module docstring). A graph that cannot be captured is timed
    by eager calls; outputs that disagree by more than ``bound`` (:func:`agreement`) keep
    Inductor's."""
    import torch

    inputs = list(example_inputs)
    arms = {KEEP_OASR: lambda: rewritten(*inputs), KEEP_INDUCTOR: lambda: inductor(*inputs)}
    with torch.no_grad():
        try:
            times, outs = _replayed(arms)
        except Exception as exc:  # capture refused (e.g. a host sync): eager timing
            times, outs = _eager(arms), {k: f() for k, f in arms.items()}
            why = f"timed eagerly ({type(exc).__name__})"
        else:
            why = "CUDA graph replays"
    error = _relative_error(outs[KEEP_OASR], outs[KEEP_INDUCTOR])
    t_oasr, t_ind = median(times[KEEP_OASR]), median(times[KEEP_INDUCTOR])
    rounds = len(times[KEEP_OASR])
    if not error <= bound:
        warnings.warn(f"oasr compile gate: the rewritten graph's outputs differ from "
                      f"Inductor's (relative error {error:.3g}); Inductor's graph is kept",
                      RuntimeWarning, stacklevel=2)
        return Verdict(KEEP_INDUCTOR, t_oasr, t_ind, rounds, sites, f"outputs differ {error:.3g}")
    keep = KEEP_OASR if t_oasr < t_ind * (1.0 - MARGIN) else KEEP_INDUCTOR
    return Verdict(keep, t_oasr, t_ind, rounds, sites, why)


def _relative_error(out: Any, ref: Any) -> float:
    """``max |out - ref| / max |ref|`` over the tensors of two compiled graphs' outputs
    (lists of tensors and None, in the same order); inf when they do not line up."""
    import torch

    out, ref = ([v] if isinstance(v, torch.Tensor) else list(v) for v in (out, ref))
    outs = [o for o in out if isinstance(o, torch.Tensor)]
    refs = [r for r in ref if isinstance(r, torch.Tensor)]
    if len(outs) != len(refs) or any(a.shape != b.shape
                                     for a, b in zip(outs, refs, strict=True)):
        return float("inf")
    worst = 0.0
    for a, b in zip(outs, refs, strict=True):
        if a.numel() == 0:
            continue
        a32, b32 = a.detach().float(), b.detach().float()
        scale = float(b32.abs().max())
        diff = float((a32 - b32).abs().max())
        if diff != diff:
            return float("inf")
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def _rounds(first: dict[str, float]) -> int:
    per_round = max(sum(first.values()), 1e-3)
    return max(5, min(50, int(BUDGET_S * 1000.0 / per_round)))


def _replayed(arms: dict[str, Callable[[], Any]]) -> tuple[dict[str, list[float]], dict]:
    timer = CudaGraphTimer(warmup_rounds=2)
    graphs: dict[str, Any] = {}
    try:
        for name, fn in arms.items():
            graphs[name] = timer.capture(name, [fn], separate=False)
        names = list(arms)
        first = dict(zip(names, timer.replay([graphs[n] for n in names]), strict=True))
        times: dict[str, list[float]] = {n: [] for n in names}
        for r in range(_rounds(first)):
            order = names if r % 2 == 0 else names[::-1]
            for n, ms in zip(order, timer.replay([graphs[n] for n in order]), strict=True):
                times[n].append(ms)
        timer.synchronize()
        outs = {n: arms[n]() for n in names}
    finally:
        for graph in graphs.values():
            timer.release(graph)
    return times, outs


def _eager(arms: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def once(fn: Callable[[], Any]) -> float:
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    for fn in arms.values():
        fn()
    names = list(arms)
    first = {n: once(arms[n]) for n in names}
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(_rounds(first)):
        for n in (names if r % 2 == 0 else names[::-1]):
            times[n].append(once(arms[n]))
    return times
