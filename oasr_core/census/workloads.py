"""Workloads: the models a census probes, registered through ``oasr_register_workloads``.

A :class:`Workload` says how to build a torch module (a factory and its default keyword
parameters), what its inputs look like (``"B,T,80"``: batch, frames, 80 features), whether
its front end has a fixed window (Whisper's 3000 frames) and how many input frames a streaming
chunk of ``C`` encoder frames takes. The core ships its reference workloads (``conformer``,
``whisper_encoder`` and two RNN-T prediction networks, :mod:`oasr_core.census.models`);
:func:`collect_workloads` adds them to whatever the installed plugins register (the core
does not register a plugin of its own for them, so they are listed whatever plugins are
blocked). A reference workload runs its linear
layers through the linear a plugin serves for the census's dtype and quantization
(``oasr_linear``, asked on the manager that collected the workload), or through torch when
none answers a full-precision model; built with a ``quantization`` (``--quantization
int8_w8a8``) it is quantized online that way. Any importable factory can be censused as
well: :func:`model_workload` (``--model package.module:factory``).
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core.errors import ConfigurationError, PluginError
from oasr_core.layers import LAYER_KINDS, served_layers, served_linear
from oasr_core.registry import provider_of
from oasr_core.types import NAME_RE, freeze

BUILTIN = "oasr_core (built-in)"
"""How messages name the provider of the core's reference workloads."""

_LENGTHS = "lengths"
_MODEL_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def parse_input(spec: str) -> tuple[str | int, ...] | str:
    """Validate one input description: ``"B,T,80"`` (dims: ``B``, ``T`` or an integer) or
    ``"lengths"`` (an int64 ``[B]`` tensor of frame counts). Raises ``ValueError``."""
    text = spec.strip()
    if text == _LENGTHS:
        return _LENGTHS
    dims: list[str | int] = []
    for token in (t.strip() for t in text.split(",")):
        if token in ("B", "T"):
            if token in dims:
                raise ValueError(f"input {spec!r}: {token} appears twice")
            dims.append(token)
        elif token.isdigit() and int(token) > 0:
            dims.append(int(token))
        else:
            raise ValueError(f"input {spec!r}: {token!r} is not B, T or a positive integer "
                             "(or write 'lengths')")
    return tuple(dims)


def _check_inputs(_inst: object, _attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
    if not value:
        raise ValueError("a workload needs at least one input")
    for spec in value:
        parse_input(spec)


def _check_name(_inst: object, _attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ValueError(f"workload name {value!r} is not lower case, digits and '_'")


def _check_callable(_inst: object, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"workload {attribute.name} must be callable")


def _positive(_inst: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 1):
        raise ValueError(f"workload {attribute.name}={value!r} is not a positive integer")


@attrs.frozen
class Workload:
    """A model the census can probe; returned by ``oasr_register_workloads``.

    The census builds ``factory(**params)`` (defaults here, overridden by ``--param``), on the
    meta device unless told otherwise, and runs it in eval mode under the shape recorder once
    per engine key, with inputs of exactly that key's batch and frame count.
    """

    name: str = attrs.field(validator=_check_name)
    """``--workload`` name."""
    factory: Callable[..., Any] = attrs.field(validator=_check_callable)
    """Builds the ``torch.nn.Module`` from keyword parameters; called only when probed."""
    inputs: tuple[str, ...] = attrs.field(default=("B,T,80",), converter=tuple,
                                          validator=_check_inputs)
    """Positional inputs, each ``"B,T,80"``-style dims or ``"lengths"`` (see parse_input)."""
    params: Mapping[str, Any] = attrs.field(factory=dict, converter=freeze)
    """Default factory keyword arguments (JSON values)."""
    fixed_frames: int | None = attrs.field(default=None, validator=_positive)
    """A fixed-window front end's frame count (Whisper: 3000); keys use exactly this."""
    streaming: bool = True
    """Whether chunked streaming probes make sense (False for a fixed window)."""
    chunk_frames: Callable[[int], int] | None = attrs.field(default=None,
                                                            validator=_check_callable)
    """Input frames of a streaming chunk of ``C`` encoder frames (None: ``C``)."""
    sample_rate: int = attrs.field(default=16000, validator=_positive)
    hop_length: int = attrs.field(default=160, validator=_positive)
    """Samples per feature frame shift (10 ms at 16 kHz)."""
    win_length: int = attrs.field(default=400, validator=_positive)
    """Samples per feature window (25 ms at 16 kHz)."""
    frames_per_second: float | None = attrs.field(default=None)
    """The rate of the inputs' ``T`` axis when it is not feature frames of :attr:`hop_length`:
    ``16000`` for a model that takes raw 16 kHz audio ``[B, samples]`` (``T`` is samples);
    ``frames(d)`` is then ``round(d * rate)``. None: windowed feature frames."""
    description: str = ""
    dtype_param: str | None = None
    """The factory keyword the census passes its ``--dtype`` as (the reference workloads:
    ``dtype``), so the model can ask for linears of that dtype; None: not passed."""

    @frames_per_second.validator
    def _check_rate(self, _attribute: attrs.Attribute, value: float | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 < value < float("inf")):
            raise ValueError(f"workload frames_per_second={value!r} is not a positive number")

    @property
    def time_scale(self) -> float:
        """Input ``T`` steps per 10 ms feature frame: 1 for feature frames, 160 for raw
        16 kHz audio (the engine's frame counts, given in feature frames, scale by it)."""
        if self.frames_per_second is None:
            return 1.0
        return self.frames_per_second / 100.0

    def frames(self, duration_s: float) -> int:
        """Input ``T`` of an utterance: ``round(d * frames_per_second)`` when that is set,
        else feature frames ``1 + (samples - window) // hop`` (at least 1)."""
        if self.frames_per_second is not None:
            return max(1, round(duration_s * self.frames_per_second))
        samples = round(duration_s * self.sample_rate)
        return max(1, 1 + (samples - self.win_length) // self.hop_length)

    def chunk_input_frames(self, chunk: int) -> int:
        """Input frames one streaming step of ``chunk`` encoder frames feeds the model."""
        return self.chunk_frames(chunk) if self.chunk_frames is not None else chunk


@attrs.frozen
class ReferenceFactory:
    """The factory of a reference encoder of :mod:`oasr_core.census.models`.

    Called as a workload factory, ``(*, family_ops=None, quantization="none", dtype="fp16",
    **params)``: the model's linear layers run through what the plugins of ``pm`` answer
    to ``oasr_linear`` for ``dtype`` and ``quantization`` (:func:`served_linear`).
    ``family_ops`` None takes that answer when there is one and torch's ``F.linear``
    otherwise; ``True`` requires an answer; ``False`` keeps full-precision linears in torch
    (a quantized scheme is served by its plugin all the same). ``torch_layers`` names layer
    kinds of :data:`LAYER_KINDS` left to torch although a plugin serves them (``["LayerNorm"]``:
    a W8A8 model without its fused norm, to measure what the fusion is worth). The census
    passes its ``--dtype`` as ``dtype`` (:attr:`Workload.dtype_param`).
    """

    model: str
    """Class name in :mod:`oasr_core.census.models`."""
    pm: Any = attrs.field(default=None, eq=False, repr=False)
    """The plugin manager asked for ``oasr_linear`` (None: no plugin)."""

    def __call__(self, *, family_ops: bool | None = None, quantization: str = "none",
                 dtype: str = "fp16", torch_layers: Sequence[str] = (), **params: Any) -> Any:
        unknown = sorted(set(torch_layers) - set(LAYER_KINDS))
        if isinstance(torch_layers, str) or unknown:
            raise ConfigurationError(f"torch_layers: {torch_layers!r} is not a list of layer "
                                     f"kinds of {', '.join(LAYER_KINDS)}")
        linear, layers = None, {}
        if quantization != "none" or family_ops is not False:
            linear = served_linear(self.pm, dtype=dtype, quantization=quantization,
                                   required=family_ops is True)
        if family_ops is not False:
            kinds = tuple(k for k in LAYER_KINDS if k not in torch_layers)
            layers = served_layers(self.pm, dtype=dtype, quantization=quantization,
                                   kinds=kinds)
        from oasr_core.census import models

        return getattr(models, self.model)(linear=linear, served=layers, **params)


def _conformer_chunk_frames(chunk: int) -> int:
    return 4 * chunk + 3


def _one_step(_chunk: int) -> int:
    return 1


def _rnnt_predictor(name: str, width: int, layers: int, pm: Any, description: str) -> Workload:
    """A transducer prediction network of vocabulary 1024 whose embedding, LSTM layers and
    joint projection are ``width`` wide: one decoding step of ``B`` hypotheses per probe."""
    return Workload(name=name, factory=ReferenceFactory("RnntPredictor", pm), inputs=("B,T",),
                    params={"vocab": 1024, "embed_dim": width, "hidden": width,
                            "layers": layers, "joint_dim": width},
                    chunk_frames=_one_step, dtype_param="dtype", description=description)


def builtin_workloads(pm: Any = None) -> tuple[Workload, ...]:
    """The core's reference workloads: ``conformer``, ``whisper_encoder``, and the transducer
    prediction networks ``rnnt_predictor`` (the reference Conformer's: vocabulary 1024, one
    LSTM layer of 640) and ``rnnt_predictor_2x320`` (two layers of 320), one decoding step of
    ``B`` hypotheses per probe (census them with ``--service-mode streaming`` and the
    decoder's batch sizes as cohort widths, ``--ladder 1,4,16,64``).

    ``pm`` is the plugin manager their factories ask for the linear of a dtype and
    quantization (``oasr_linear``; without one, their linears are torch's and only
    ``quantization="none"`` builds).
    """
    return (
        Workload(name="conformer", factory=ReferenceFactory("ConformerEncoder", pm),
                 inputs=("B,T,80",),
                 params={"input_dim": 80, "d_model": 256, "heads": 4, "ffn_dim": 1024,
                         "kernel_size": 31, "layers": 16},
                 chunk_frames=_conformer_chunk_frames, dtype_param="dtype",
                 description="Conformer (M) encoder: conv2d subsampling x4, d 256, 4 heads, "
                             "FFN 1024, depthwise kernel 31, 16 layers"),
        Workload(name="whisper_encoder", factory=ReferenceFactory("WhisperEncoder", pm),
                 inputs=("B,80,T",),
                 params={"n_mels": 80, "d_model": 512, "heads": 8, "layers": 6,
                         "ffn_dim": 2048},
                 fixed_frames=3000, streaming=False, dtype_param="dtype",
                 description="Whisper base encoder: conv1d front end on 80 mel x 3000 frames, "
                             "d 512, 8 heads, FFN 2048, 6 layers"),
        _rnnt_predictor("rnnt_predictor", 640, 1, pm, "RNN-T prediction network of the "
                        "reference Conformer: vocabulary 1024, embedding 640, LSTM 1 x 640, "
                        "joint 640; one decoding step"),
        _rnnt_predictor("rnnt_predictor_2x320", 320, 2, pm, "RNN-T prediction network: "
                        "vocabulary 1024, embedding 320, LSTM 2 x 320, joint 320; one decoding "
                        "step"),
    )


def collect_workloads(pm: Any = None) -> dict[str, tuple[Workload, str]]:
    """Built-in and plugin workloads by name, each with who provides it.

    Each ``oasr_register_workloads`` implementation is called on its own: one that raises or
    returns something other than :class:`Workload` instances is reported and skipped. A name
    provided twice (a built-in's included) drops every workload of that name, with an error
    line asking the user to report the conflict (never "last wins"). With ``pm.strict`` those
    problems raise :class:`~oasr_core.errors.PluginError`.
    """
    found: list[tuple[Workload, str]] = [(w, BUILTIN) for w in builtin_workloads(pm)]
    hook = getattr(getattr(pm, "hook", None), "oasr_register_workloads", None)
    for impl in hook.get_hookimpls() if hook is not None else ():
        if impl.wrapper or impl.hookwrapper:
            continue
        provider = str(provider_of(pm, impl.plugin))
        try:
            result = impl.function()
            items = [] if result is None else list(result)
        except Exception as exc:
            _report(pm, f"{provider} hook oasr_register_workloads raised "
                    f"{type(exc).__name__}: {exc}; none of its workloads are used", exc)
            continue
        for i, item in enumerate(items):
            if isinstance(item, Workload):
                found.append((item, provider))
            else:
                hint = " Have you forgotten the `()`?" if isinstance(item, type) else ""
                _report(pm, f"{provider} hook oasr_register_workloads: item {i} is a "
                        f"{type(item).__name__}, not an oasr_core.census.Workload instance; "
                        f"it is ignored.{hint}")
    by_name: dict[str, list[tuple[Workload, str]]] = {}
    for workload, provider in found:
        by_name.setdefault(workload.name, []).append((workload, provider))
    out = {}
    for name, entries in by_name.items():
        if len(entries) == 1:
            out[name] = entries[0]
            continue
        who = " and ".join(p for _, p in entries)
        _report(pm, f"workload {name!r} is registered by {who}; all are dropped. Please report "
                "this conflict to the plugin author(s)", level=logging.ERROR)
    return out


def _report(pm: Any, message: str, exc: BaseException | None = None,
            level: int = logging.WARNING) -> None:
    if getattr(pm, "strict", False):
        raise PluginError(message) from exc
    if pm is not None:
        pm.report(message, exc=exc, level=level)


def _importable_cwd() -> None:
    """Put the current directory first on ``sys.path`` (what ``python -m`` does), so
    ``--model mypkg.asr:build`` run from the folder holding ``mypkg`` imports it."""
    import os
    import sys

    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def model_workload(spec: str, *, inputs: Sequence[str] = ("B,T,80",),
                   fixed_frames: int | None = None, params: Mapping[str, Any] | None = None,
                   frames_per_second: float | None = None) -> Workload:
    """A :class:`Workload` around ``package.module:factory`` (``--model``); its inputs'
    ``T`` runs at ``frames_per_second`` (``--frames-per-second``: 16000 for raw audio).

    Raises :class:`~oasr_core.errors.ConfigurationError` naming what cannot be imported.
    """
    if not _MODEL_RE.match(spec):
        raise ConfigurationError(f"--model {spec!r}: expected package.module:factory")
    module_name, _, attr = spec.partition(":")
    _importable_cwd()
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        raise ConfigurationError(f"--model {spec!r}: cannot import {module_name!r} "
                                 f"({type(exc).__name__}: {exc}); it is looked up in the "
                                 "current directory and on PYTHONPATH") from None
    except AttributeError:
        raise ConfigurationError(f"--model {spec!r}: module {module_name!r} has no "
                                 f"{attr!r}") from None
    if not callable(factory):
        raise ConfigurationError(f"--model {spec!r}: {attr!r} is not callable")
    try:
        return Workload(name="model", factory=factory, inputs=tuple(inputs),
                        params=params or {}, fixed_frames=fixed_frames,
                        streaming=fixed_frames is None, description=spec,
                        frames_per_second=frames_per_second)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"--model {spec!r}: {exc}") from None


def find_workload(pm: Any, name: str | None = None, model: str | None = None,
                  inputs: Sequence[str] = (), fixed_frames: int | None = None,
                  frames_per_second: float | None = None) -> Workload:
    """The workload ``name`` (registered) or around ``model`` (``package.module:factory``,
    with ``inputs`` and ``fixed_frames``): what ``--workload`` / ``--model`` name on the
    command line. :class:`~oasr_core.errors.ConfigurationError` unless exactly one is given,
    for an unknown name (with the closest registered one), or for ``inputs`` /
    ``fixed_frames`` given with a registered workload (it declares its own)."""
    if (name is None) == (model is None):
        raise ConfigurationError("give exactly one of --workload NAME and --model "
                                 "package.module:factory")
    if model is not None:
        return model_workload(model, inputs=tuple(inputs) or ("B,T,80",),
                              fixed_frames=fixed_frames, frames_per_second=frames_per_second)
    if inputs or fixed_frames is not None or frames_per_second is not None:
        raise ConfigurationError("--input, --fixed-frames and --frames-per-second describe a "
                                 "--model; a registered workload declares its own")
    available = collect_workloads(pm)
    if name not in available:
        import difflib

        close = difflib.get_close_matches(name, list(available), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigurationError(f"unknown workload {name!r}{hint}; available: "
                                 f"{', '.join(sorted(available)) or 'none'}; or any module "
                                 "with --model package.module:factory")
    return available[name][0]


def make_inputs(workload: Workload, batch: int, frames: int, *, dtype: Any,
                device: Any) -> tuple[Any, ...]:
    """The workload's inputs for ``batch`` utterances of ``frames`` frames each."""
    import torch

    generator = None if str(device) == "meta" else torch.Generator().manual_seed(0)
    out = []
    for spec in workload.inputs:
        parsed = parse_input(spec)
        if parsed == _LENGTHS:
            out.append(torch.full((batch,), frames, dtype=torch.int64, device=device))
            continue
        shape = [batch if d == "B" else frames if d == "T" else d for d in parsed]
        if generator is None:
            out.append(torch.empty(shape, dtype=dtype, device=device))
        else:
            out.append(torch.randn(shape, generator=generator, dtype=dtype).to(device))
    return tuple(out)
