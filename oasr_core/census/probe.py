"""Probing: run a workload once per engine key under the shape recorder, and weigh the calls.

Each key's probe builds inputs of exactly the key's batch and frame count (padded as the
captured path pads them) and runs the model eagerly. Its recorded calls are weighted by the
key's traffic probability ``P = weight / total``: a point's ``calls`` add ``P * count``, its
``weight`` adds ``P * count * estimated ms`` (:func:`estimate_ms`), it becomes must-tune when a
captured key reaches it, and calls from uncaptured keys count toward its eager fraction.

The model is built on the meta device by default: shapes propagate through every op with no
memory and no arithmetic, so the full reference Conformer probes in well under a second per
key, in the deployment dtype. ``probe_device="cpu"`` runs real fp32 arithmetic instead (for a
model whose forward depends on values); its fp32 calls are recorded as the deployment dtype.
The working set counts every parameter at the deployment dtype, except the weights of layers
a family records in a narrower dtype (a quantized model's int8 linears): those at their own.

Every call the recorder sees is a point or is skipped and counted under its reason (the
recorder's :attr:`~oasr_core.census.recorder.ShapeRecorder.skipped`; provenance
``skipped``, one line each in the summary). With the registry, a call no config of any of its
family's lanes supports (a grouped convolution between dense and depthwise) is counted as
torch's there rather than kept as a point to tune: the family's op serves it from torch.

A streaming key is probed as one chunk of ``width`` lockstep streams through the whole model,
without an attention cache: projections of the new frames (``M = width * C``) are exact, while
a projection over cached positions (the Conformer's ``linear_pos``) is keyed at the chunk's
own positions. A capture of the live engine (``--capture``) adds the cache-length shapes.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

import oasr_core.compile as oc
from oasr_core.census.engine import (
    EngineConfig,
    EngineKey,
    ServiceMode,
    Traffic,
    default_concurrency,
    default_durations,
    engine_keys,
)
from oasr_core.census.recorder import ITEMSIZE, Call, RecorderPatch, ShapeRecorder
from oasr_core.census.shapeset import ShapePoint, ShapeSet, SignatureInfo, top_keys
from oasr_core.census.workloads import ReferenceFactory, Workload, make_inputs, parse_input
from oasr_core.errors import ConfigurationError
from oasr_core.routing import route
from oasr_core.types import Problem

PEAK_FLOPS = 100e12
"""Tensor throughput of the cost estimate (flop/s); only relative weights matter."""
PEAK_BYTES = 1e12
"""Memory bandwidth of the cost estimate (byte/s)."""
LAUNCH_MS = 0.004
"""Per-call overhead of the cost estimate (ms)."""
DEPLOY_DTYPES = ("fp16", "bf16")
"""The torch dtypes the probe can build a model in (the ``--dtype`` values the families'
``dtypes`` and ``quantizations`` may offer)."""
PROBE_DEVICES = ("meta", "cpu")


def estimate_ms(call: Call) -> float:
    """A roofline guess of one call's time: ``max(flops / peak, bytes / bandwidth) + launch``."""
    itemsize = ITEMSIZE.get(call.dtype, 2)
    return max(call.flops / PEAK_FLOPS, call.elements * itemsize / PEAK_BYTES) * 1e3 \
        + LAUNCH_MS


@attrs.define
class PointBuilder:
    """Accumulates recorded counts of weighted keys into :class:`ShapePoint` s."""

    acc: dict[Call, dict[str, Any]] = attrs.Factory(dict)
    per_step: dict[str, int] = attrs.Factory(dict)
    weight_bytes: dict[str, int] = attrs.Factory(dict)

    def add(self, counts: Mapping[Call, int], *, share: float, captured: bool,
            label: str) -> None:
        """Count ``counts`` (one probe's calls) at traffic ``share`` under key ``label``."""
        per_signature: Counter[str] = Counter()
        for call, count in counts.items():
            calls = share * count
            a = self.acc.setdefault(call, {"calls": 0.0, "weight": 0.0, "eager": 0.0,
                                           "must": False, "keys": {}})
            a["calls"] += calls
            a["weight"] += calls * estimate_ms(call)
            if captured:
                a["must"] = True
            else:
                a["eager"] += calls
            a["keys"][label] = a["keys"].get(label, 0.0) + calls
            per_signature[call.label] += count
            self.weight_bytes[call.label] = call.weight_elements * ITEMSIZE.get(call.dtype, 2)
        for sig, n in per_signature.items():
            self.per_step[sig] = max(self.per_step.get(sig, 0), n)

    def points(self) -> list[ShapePoint]:
        out = []
        for call, a in self.acc.items():
            if a["calls"] <= 0:
                continue
            out.append(ShapePoint(
                family=call.family, op=call.op, dtype=call.dtype, dims=call.dims, m=call.m,
                batch=call.batch, point=call.point, calls=a["calls"], weight=a["weight"],
                must=a["must"], eager_fraction=min(1.0, a["eager"] / a["calls"]),
                keys=top_keys(a["keys"])))
        return out

    def signatures(self) -> dict[str, SignatureInfo]:
        return {sig: SignatureInfo(self.weight_bytes[sig], n) for sig, n in self.per_step.items()}

    def narrower_weight_bytes(self, dtype: str) -> int:
        """Bytes the model's weights hold less than at ``dtype``, because a family records
        their calls in a narrower dtype (a quantized layer's int8 weight): per signature,
        its layers (calls per step) times its weight elements times the itemsize saved."""
        deploy = ITEMSIZE[dtype]
        calls = {call.label: call for call in self.acc}
        return sum(self.per_step.get(label, 0) * call.weight_elements
                   * max(0, deploy - ITEMSIZE.get(call.dtype, deploy))
                   for label, call in calls.items())


class LaneSupport:
    """Whether any lane config of a call's family can run it (``Lane.supports``), memoised.

    A family without lanes (an in-test family, a plugin of records only) has no opinion: its
    calls are kept."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self.memo: dict[Call, bool] = {}

    def torch_only(self, call: Call) -> bool:
        """True when the family has lanes and none of their configs supports ``call``."""
        known = self.memo.get(call)
        if known is None:
            known = self.memo[call] = self._torch_only(call)
        return known

    def _torch_only(self, call: Call) -> bool:
        try:
            lanes = self.registry.lanes_of(call.family)
        except Exception:  # an unknown family: no opinion
            return False
        if not lanes:
            return False
        problem = Problem(family=call.family, op=call.op, dtype=call.dtype, dims=call.dims,
                          m=call.m, point=call.point)
        for lane in lanes:
            for config in lane.config_space:
                try:
                    if lane.supports(config, problem):
                        return False
                except Exception:  # a predicate that cannot judge this problem: not it
                    continue
        return True

    def split(self, counts: Mapping[Call, int], recorder: ShapeRecorder) -> dict[Call, int]:
        """``counts`` less the calls only torch can run, which ``recorder`` counts as
        skipped."""
        out = {}
        for call, n in counts.items():
            if self.torch_only(call):
                recorder.skip(call.family, "no lane config runs the shape; torch serves it",
                              call.label, count=n)
            else:
                out[call] = n
        return out


def build_model(workload: Workload, params: Mapping[str, Any], *, device: str,
                dtype: str) -> tuple[Any, int]:
    """The workload's module in eval mode on ``device``, and its weight bytes at ``dtype``."""
    import torch

    kwargs = {**workload.params, **params}
    if workload.dtype_param is not None:
        kwargs[workload.dtype_param] = dtype
    try:
        if device == "meta":
            with torch.device("meta"):
                model = workload.factory(**kwargs)
        else:
            model = workload.factory(**kwargs)
    except (TypeError, ValueError, ArithmeticError, RuntimeError, AssertionError) as exc:
        # A factory's own check of its arguments (or torch's, on a zero or huge size).
        text = " ".join(str(exc).split())[:200]
        raise ConfigurationError(f"workload {workload.name!r}: cannot build it with "
                                 f"{str(kwargs)[:300]} ({type(exc).__name__}: {text})") from None
    if not isinstance(model, torch.nn.Module):
        raise ConfigurationError(f"workload {workload.name!r}: the factory returned a "
                                 f"{type(model).__name__}, not a torch.nn.Module")
    model.eval()
    if device == "meta":
        model.to(_torch_dtype(dtype))
    elements = sum(p.numel() for p in model.parameters())
    return model, elements * ITEMSIZE[dtype]


def _torch_dtype(name: str) -> Any:
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}[name]


def _exact_points(counts: Mapping[Call, int], workload: Workload) -> dict[Call, int]:
    """``counts`` with exact points kept only for a fixed-window workload.

    An exact point (conv1d's ``"BxT"``) says the engine runs that shape and no other near it:
    true of a fixed window (Whisper's 3000 frames), not of bucketed frame counts, whose
    calls are served as regions over the dynamic axis like every other family's.
    """
    if workload.fixed_frames is not None:
        return dict(counts)
    out: dict[Call, int] = {}
    for call, n in counts.items():
        plain = call if call.point is None else attrs.evolve(call, point=None)
        out[plain] = out.get(plain, 0) + n
    return out


def run_census(workload: Workload, config: EngineConfig, traffic: Traffic,
               patches: Sequence[RecorderPatch], *, dtype: str = "fp16",
               params: Mapping[str, Any] | None = None, probe_device: str = "meta",
               probe_limit: int | None = None, strict: bool = False,
               progress: Callable[[EngineKey, int, int], None] | None = None,
               registry: Any = None, route_quantization: str = "none",
               compiled: bool = False, compile_quantization: str = "none") -> ShapeSet:
    """Probe every engine key of ``workload`` and return the (unselected) ShapeSet.

    ``route_quantization`` (a scheme, for a model whose factory does not quantize itself:
    ``--model``) routes the model's ``nn.Linear`` layers through the plugins' quantized
    linear (:func:`oasr_core.routing.route`), so the census records the calls the quantized
    model makes, as ``oasr tune bench --quantization`` runs it.

    ``probe_limit`` probes only the heaviest keys (their probability is renormalised).
    ``progress(key, done, total)`` is called after each probe. ``registry`` (the installed
    families and lanes) checks each call against its family and its lanes (module
    docstring); without it only the ShapeSet's own rules apply.

    ``compiled``: record what ``torch.compile(model, backend="oasr")`` would serve instead
    of the families' op calls: for each key the model is compiled at that key's static
    shapes with the backend in record-only mode (:func:`compiled_calls`), so every
    GEMM/conv site of each compiled graph is recorded as its family would call it. The
    model is the one a user compiles (a reference workload without the families' ops) and
    is probed on the CPU (Inductor has nothing to trace on the meta device).
    ``compile_quantization``: the scheme the compile backend is asked for (its families'
    quantized linears recorded where they would serve).
    """
    import torch

    if dtype not in DEPLOY_DTYPES:
        raise ConfigurationError(f"--dtype {dtype!r}: expected one of {', '.join(DEPLOY_DTYPES)}")
    if probe_device not in PROBE_DEVICES:
        raise ConfigurationError(f"probe device {probe_device!r}: expected meta or cpu")
    keys = sorted(engine_keys(config, workload, traffic), key=lambda k: (-k.weight, k.label))
    if probe_limit is not None:
        keys = keys[:probe_limit]
    total = sum(k.weight for k in keys)
    params = dict(params or {})
    if compiled:
        probe_device = "cpu"
        if isinstance(workload.factory, ReferenceFactory):
            params["family_ops"] = False
    model, working_set = build_model(workload, params, device=probe_device, dtype=dtype)
    if route_quantization != "none":
        route(model, dtype=dtype, quantization=route_quantization, conv1d=False,
              pm=getattr(registry, "pm", None))
    input_dtype = _torch_dtype(dtype) if probe_device == "meta" else torch.float32
    builder = PointBuilder()
    started = time.monotonic()
    families = registry.families if registry is not None else None
    support = LaneSupport(registry) if registry is not None else None
    recorder = ShapeRecorder(patches, deploy_dtype=dtype, strict=strict, families=families)
    # A compiled census records the compiled graphs, not op calls: no recorder is entered
    # (Dynamo would trace its torch-function mode).
    probe = CompiledProbe(model, dtype, compile_quantization, dynamic=[
        (0,) if parsed == "lengths" else tuple(i for i, d in enumerate(parsed) if d in ("B", "T"))
        for parsed in map(parse_input, workload.inputs)]) if compiled else None
    with contextlib.nullcontext() if compiled else recorder, torch.inference_mode():
        for done, key in enumerate(keys, 1):
            inputs = make_inputs(workload, key.batch, key.frames, dtype=input_dtype,
                                 device=probe_device)
            try:
                calls = probe.calls(inputs) if probe is not None else None
                if calls is None:
                    model(*inputs)
            except Exception as exc:  # the model's own error, reported as bad input (-v: cause)
                shapes = ", ".join(workload.inputs)
                hint = (f" (inputs given as {shapes}: if that is not what the model takes, fix "
                        "--input; if the model reads tensor values, pass --probe-device cpu)"
                        if probe_device == "meta" else f" (inputs given as {shapes})")
                raise ConfigurationError(f"workload {workload.name!r} failed at {key.label} on "
                                         f"{probe_device}: {type(exc).__name__}: "
                                         f"{' '.join(str(exc).split())[:300]}{hint}") from exc
            counts = calls if compiled else recorder.take()
            if support is not None:
                counts = support.split(counts, recorder)
            builder.add(_exact_points(counts, workload), share=key.weight / total,
                        captured=key.captured, label=key.label)
            if progress is not None:
                progress(key, done, len(keys))
    provenance = {
        "tool": "oasr tune census", "workload": workload.name,
        "params": {**workload.params, **params}, "dtype": dtype,
        "service_mode": config.service_mode.value, "max_batch_size": config.max_batch_size,
        "engine": _engine_json(config), "traffic": _traffic_json(config, traffic),
        "keys": {k.label: round(k.weight / total, 9) for k in keys},
        "probe": {"device": probe_device, "keys": len(keys), "compiled": compiled,
                  "seconds": round(time.monotonic() - started, 3),
                  "unresolved_patches": list(recorder.unresolved)},
        "skipped": recorder.skipped_json(),
    }
    working_set = max(0, working_set - builder.narrower_weight_bytes(dtype))
    return ShapeSet(points=builder.points(), working_set_bytes=working_set,
                    signatures=builder.signatures(), provenance=provenance)


class CompiledProbe:
    """``model`` compiled by the oasr backend in record-only mode, probed key after key.

    One ``torch.compile`` serves every key: Dynamo compiles the first key's shapes, and the
    first key that differs recompiles with those dimensions dynamic (its automatic dynamic
    shapes), so the later keys of that shape class run the same graph with no new trace. The
    pass records each site's sizes as the graph has them (ints, or expressions of the size
    symbols) and every call counts the sites at its own sizes. Nothing is generated and no
    arithmetic runs: Inductor stops after its post-grad passes and each call returns zeros of
    the graph's output shapes (:func:`oasr_core.compile.backend`, ``rewrite=False``). The
    fp32 CPU graph stands for ``dtype``; ``quantization`` asks that scheme's patterns first.
    ``dynamic``: per input, the dimensions that vary between keys (batch, frames), marked
    dynamic from the first key on (``maybe_mark_dynamic``: a dimension the model needs
    static stays static), so that one trace serves every key of more than one row.
    """

    def __init__(self, model: Any, dtype: str, quantization: str = "none",
                 dynamic: Sequence[Sequence[int]] = ()) -> None:
        import torch

        torch._dynamo.reset()
        self.dynamic = [tuple(d) for d in dynamic]
        self.backend = oc.backend(record=True, rewrite=False, deploy_dtype=dtype,
                                  quantization=quantization)
        self.compiled = torch.compile(model, backend=self.backend)

    def calls(self, inputs: Sequence[Any]) -> dict[Call, int]:
        """The family op calls of one forward at ``inputs``' shapes."""
        import torch

        for tensor, dims in zip(inputs, self.dynamic, strict=False):
            for d in dims:
                torch._dynamo.maybe_mark_dynamic(tensor, d)
        self.backend.recorded.clear()
        self.compiled(*inputs)
        return dict(self.backend.recorded)


def compiled_calls(model: Any, inputs: Sequence[Any], dtype: str,
                   quantization: str = "none") -> dict[Call, int]:
    """The family op calls of ``model`` compiled at ``inputs``' shapes by the oasr backend in
    record-only mode (:class:`CompiledProbe` of one key)."""
    return CompiledProbe(model, dtype, quantization).calls(inputs)


def _engine_json(config: EngineConfig) -> dict[str, Any]:
    ladder = config.width_ladder
    return {"preferred_batch_size": config.preferred_batch_size,
            "batch_buckets": list(config.buckets()),
            "frame_granularity": config.frame_granularity,
            "max_graph_frames": config.max_graph_frames, "use_graphs": config.use_graphs,
            "chunk_size": config.chunk_size,
            "width_ladder": list(ladder) if isinstance(ladder, tuple) else ladder.value,
            "widths": list(config.widths())}


def _traffic_json(config: EngineConfig, traffic: Traffic) -> dict[str, Any]:
    out: dict[str, Any] = {"source": traffic.source}
    if config.service_mode is ServiceMode.OFFLINE:
        durations = traffic.durations_s or default_durations(config)
        out.update(utterances=len(durations), seconds=round(sum(durations), 3))
        if not traffic.durations_s:
            out["profile"] = "declared default: durations evenly spread over 1..30 s"
    else:
        histogram = traffic.concurrency or default_concurrency(config)
        out["concurrency"] = {str(k): v for k, v in sorted(histogram.items())}
        if not traffic.concurrency:
            out["profile"] = "declared default: every cohort size equally often"
    return out
