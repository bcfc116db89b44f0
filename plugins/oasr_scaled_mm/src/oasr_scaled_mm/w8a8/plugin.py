"""A W8A8 format's plugin records: its ``Family`` and ``Lane`` s, and its answers to
``oasr_linear`` / ``oasr_layer`` / ``oasr_compile_patterns``, built from the
:class:`~oasr_scaled_mm.w8a8.formats.Format` and the family's modules
(``<package>.config_space``, ``.feasibility``, ``.jit``, ``.launch``, ``.heuristic``,
``.numerics``, ``.recorder``, ``.bench``, ``.quantize``, and :mod:`oasr_scaled_mm.w8a8.compiled`
for the compile pattern). A family's
``hooks.py`` names the hook implementations of its :class:`Hooks`; importing this module
imports nothing else.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from oasr_core import hookimpl

from oasr_scaled_mm.w8a8.formats import Format


def families(fmt: Format) -> list[Any]:
    """``oasr_register_families``: the format's one family (dims ``(N, K)``, no dtype in the
    key, served user > system > heuristic, ``unquantized`` a sentinel its builds measure)."""
    from oasr_core.types import Family, Sentinel

    heuristic, numerics = fmt.module("heuristic"), fmt.module("numerics")
    return [Family(
        name=fmt.family, ops=fmt.ops, dims=("N", "K"), dtypes=(fmt.dtype,), key_dtype=False,
        sentinels={Sentinel.HEURISTIC, Sentinel.TORCH, Sentinel.UNQUANTIZED},
        fallback=Sentinel.HEURISTIC, sentinel_heuristic=heuristic.sentinel_heuristic,
        numerics_gate=numerics.numerics_gate, soft_validators=heuristic.soft_validators,
        recorder_patches=fmt.module("recorder").recorder_patches,
        make_bench=fmt.module("bench").make_bench,
        quantizations={fmt.quantization: fmt.linear_dtypes}, description=fmt.description)]


def lanes(fmt: Format) -> list[Any]:
    """``oasr_register_lanes``: one ``Lane`` per :class:`~oasr_scaled_mm.w8a8.formats.LaneFormat`.

    No cost_features: the W8A8 lanes are measured exhaustively and served user > system >
    heuristic (the spec's scaled_mm rules); the core's model tier and pruning skip them.
    """
    from oasr_core.types import Lane

    cs, fe, jit = fmt.module("config_space"), fmt.module("feasibility"), fmt.module("jit")
    common = dict(family=fmt.family, is_feasible=fe.is_feasible, supports=fe.supports,
                  is_available=fmt.module("launch").is_available, jit_module=jit.KernelModule)
    return [Lane(name=lf.name, arch_families=lf.arch_families, default_on=lf.default_on,
                 config_space=cs.space(lf.name), default_config=cs.DEFAULTS[lf.name],
                 jit_specs=functools.partial(jit.lane_specs, lf.name),
                 description=lf.description, **common) for lf in fmt.lanes]


@functools.cache
def linear(fmt: Format) -> Callable[..., Any]:
    """The format's quantized linear as ``oasr_linear`` hands it out: ``linear(x, layer,
    activation=None, *, residual=None, alpha=1.0)`` calling ``<package>.quantize.
    quantized_linear`` (looked up on every call, so a recorder that rebinds it is seen)."""
    from oasr_scaled_mm.w8a8.scaled_ops import layer_linear

    return layer_linear(f"{fmt.package}.quantize", fmt.element)


def linear_for(fmt: Format, dtype: str, quantization: str) -> Callable[..., Any] | None:
    """``oasr_linear``: :func:`linear` for the format's scheme at a dtype it takes, else None."""
    if quantization == fmt.quantization and dtype in fmt.linear_dtypes:
        return linear(fmt)
    return None


def layer_for(fmt: Format, kind: str, dtype: str, quantization: str) -> Callable[..., Any] | None:
    """``oasr_layer``: for ``LayerNorm`` under the format's scheme at a dtype it takes,
    ``<package>.quantize.layer_norm`` (the norm deferred for the linears after it, which share
    one fused norm-and-quantize pass); else None."""
    if kind != "LayerNorm" or linear_for(fmt, dtype, quantization) is None:
        return None
    return fmt.module("quantize").layer_norm


class Hooks:
    """The hook implementations of one format's plugin (its ``hooks`` module binds them to
    module names, the entry point's target): only records and answers, built on first call."""

    def __init__(self, fmt: Format) -> None:
        self.format = fmt

    def implementations(self) -> dict[str, Any]:
        """The bound hook implementations by hook name (what the ``hooks`` module binds)."""
        return {name: getattr(self, name) for name in (
            "oasr_register_families", "oasr_register_lanes", "oasr_linear", "oasr_layer",
            "oasr_compile_patterns")}

    @hookimpl
    def oasr_register_families(self) -> list[Any]:
        return families(self.format)

    @hookimpl
    def oasr_register_lanes(self) -> list[Any]:
        return lanes(self.format)

    @hookimpl
    def oasr_linear(self, dtype: str, quantization: str) -> Callable[..., Any] | None:
        return linear_for(self.format, dtype, quantization)

    @hookimpl
    def oasr_layer(self, kind: str, dtype: str, quantization: str) -> Callable[..., Any] | None:
        return layer_for(self.format, kind, dtype, quantization)

    @hookimpl
    def oasr_compile_patterns(self, quantization: str) -> list[Any]:
        from oasr_scaled_mm.w8a8.compiled import patterns_for

        return patterns_for(self.format, quantization)


def linear_names(fmt: Format) -> dict[str, Any]:
    """What a format's ``linear`` module names: ``QUANTIZATION`` (its scheme), ``DTYPES`` (the
    activation dtypes the quantized linear takes and returns), ``linear`` (``linear(x, layer,
    activation=None, *, residual=None, alpha=1.0)``), ``linear_for(dtype, quantization)``
    (``linear`` for the scheme at one of ``DTYPES``, else None) and ``layer_for(kind, dtype,
    quantization)`` (``oasr_layer``'s answer: the deferred layer norm for ``LayerNorm`` under
    the scheme, else None)."""

    def linear_of(dtype: str, quantization: str) -> Callable[..., Any] | None:
        return linear_for(fmt, dtype, quantization)

    def layer_of(kind: str, dtype: str, quantization: str) -> Callable[..., Any] | None:
        return layer_for(fmt, kind, dtype, quantization)

    return {"QUANTIZATION": fmt.quantization, "DTYPES": fmt.linear_dtypes,
            "linear": linear(fmt), "linear_for": linear_of, "layer_for": layer_of}
