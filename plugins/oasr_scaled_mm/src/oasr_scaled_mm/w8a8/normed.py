"""A layer norm's output handed, deferred, to the linears after it (a W8A8 family's norm).

A pre-norm encoder block runs ``h = norm(x)`` and hands ``h`` to linears only (the Conformer's
feed-forward, attention Q/K/V and pointwise convolution; Whisper's Q/K/V and MLP). A quantized
linear then quantizes ``h`` again per row: a second pass over the activation, once per linear.
:class:`~oasr_core.layers.NormedRows` (the core's layer protocol) stands for ``h`` without
computing it: each linear asks for the form it
runs on, and each form is computed once per handle, whoever asks first:

- :meth:`NormedRows.quantized`: the family's quantized rows ``(q, scale)``, from one fused
  kernel reading ``x`` (layer norm, absmax, quantization: the family's fused
  norm-and-quantize kernel) where it applies, else the norm in torch and the family's
  quantizer;
- :meth:`NormedRows.dense`: ``h`` itself (``F.layer_norm``), for a linear whose route says
  unquantized, or any consumer that is not the family's.

So Q, K and V share one quantization, and a linear that runs unquantized pays the torch norm
the model would have run anyway. A family answers ``oasr_layer("LayerNorm", dtype, scheme)``
with a callable returning one (:func:`layer_norm_answer`); its quantized linear takes it in
place of a tensor (:func:`dense`: everything else takes the tensor). Importing this module
imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oasr_core.layers import NormedRows, Quantize, activate, dense
from oasr_core.runtime import device_arch_of, get_runtime

__all__ = ["NormedRows", "Quantize", "dense", "fusable", "fused_kernel", "layer_norm_answer",
           "quantize_after_norm", "quantized_rows"]
def quantized_rows(x: Any, scheme: str, quantize_rows: Callable[[Any], tuple[Any, Any]]
                   ) -> tuple[Any, Any]:
    """The rows a ``scheme`` linear quantizes: a :class:`NormedRows` of ``scheme``'s own
    (shared by every linear after its norm), else ``quantize_rows`` of the dense rows."""
    if isinstance(x, NormedRows) and x.scheme == scheme:
        return x.quantized()
    return quantize_rows(dense(x))


def fusable(x: Any, norm: Any) -> bool:
    """Whether ``norm`` (an ``nn.LayerNorm``) over ``x`` is what the fused kernel computes: a
    norm over the last dimension only, its weight and bias (if any) in ``x``'s dtype, fp16 or
    bf16 contiguous CUDA rows, outside ``torch.compile`` tracing. The kernel may still refuse
    a call (a row too long to hold in registers, a misaligned pointer); the caller then
    normalizes and quantizes apart."""
    import torch

    return (x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and x.is_contiguous()
            and x.dim() >= 1 and tuple(norm.normalized_shape) == (x.shape[-1],)
            and all(p is None or (p.dtype == x.dtype and p.is_contiguous() and p.is_cuda)
                    for p in (norm.weight, norm.bias))
            and not torch.compiler.is_compiling())


def quantize_after_norm(fused: Callable[[Any, Any], tuple[Any, Any] | None],
                        quantize_rows: Callable[[Any], tuple[Any, Any]]) -> Quantize:
    """A family's :data:`Quantize`: ``fused(x, norm)`` (its fused kernel, None where it cannot
    serve) where :func:`fusable`, else ``quantize_rows(handle.dense())``."""

    def quantize(rows: NormedRows) -> tuple[Any, Any]:
        if fusable(rows.x, rows.norm):
            got = fused(rows.x.detach(), rows.norm)
            if got is not None:
                return got
        return quantize_rows(rows.dense())

    return quantize


def fused_kernel(module: str) -> Callable[[Any, Any], tuple[Any, Any] | None]:
    """A family's fused norm-and-quantize call ``(x, norm) -> (q, scale) | None``:
    ``<module>.norm_quantize_rows_cuda(x, norm, arch)`` on ``x``'s device's arch (``module``
    imported, and the function looked up, at call time); None where the kernel does not
    serve (the caller runs the norm and the quantizer apart: :func:`quantize_after_norm`).

    It matches those two to the norm's rounding: the kernel sums the mean and variance in
    another order than torch, which can move a normalized value by an ulp of its dtype and so
    a quantized value by one step."""
    import importlib

    def fused(x: Any, norm: Any) -> tuple[Any, Any] | None:
        kernel = importlib.import_module(module)
        return kernel.norm_quantize_rows_cuda(x, norm, device_arch_of(x.device.index))

    fused.__doc__ = (f"The quantized rows of ``norm(x)`` by the fused kernel of ``{module}``, "
                     "or None where it does not serve.")
    return fused


DENSE = "dense"
"""A norm's plan where every linear after it took its dense rows: torch's layer norm."""
ROWS = "rows"
"""A norm's plan where a linear after it took the quantized rows: a :class:`NormedRows`."""


def layer_norm_answer(scheme: str, quantize: Quantize) -> Callable[..., Any]:
    """A family's answer to ``oasr_layer("LayerNorm", dtype, scheme)``: ``norm(x, layer,
    activation=None)`` returning ``NormedRows(x, layer, scheme, quantize)`` (an activation
    after a layer norm has no deferred form: it is applied in torch to the dense output).

    Each norm has a plan per epoch (a memo of the runtime's epoch, keyed by the layer's
    ``id`` and the input's shape and dtype): its first call's handle notes which forms the
    linears after it ask for, and the next call reads the note. Where they took the dense
    rows only (every linear after it runs unquantized at that shape), the norm is from then
    on ``F.layer_norm`` on the layer's parameter dict, returned as a tensor, which the
    linears take as they took the dense rows, so the norm costs what torch's does; where one
    took the quantized rows, every call returns a handle. A layer whose ``weight`` and
    ``bias`` are not both in its parameter dict, and any call while compiling, always get a
    handle.
    """
    from oasr_core.epoch import EpochMemo

    memo = EpochMemo(f"{scheme}:norms")
    bound: list[Any] = []

    def load() -> list[Any]:
        import torch
        from torch.nn import functional as F

        bound.extend((F.layer_norm, torch.compiler.is_compiling))
        return bound

    def norm(x: Any, layer: Any, activation: str | None = None) -> Any:
        if activation is not None:
            return activate(layer(x), activation)
        layer_norm, compiling = bound or load()
        if compiling():
            return NormedRows(x, layer, scheme, quantize)
        key = (id(layer), x.shape, x.dtype)
        plan = memo.table.get(key)
        if plan is DENSE:
            p = layer._parameters
            return layer_norm(x, layer.normalized_shape, p["weight"], p["bias"], layer.eps)
        if plan is ROWS:
            return NormedRows(x, layer, scheme, quantize)
        if plan is not None:  # the note of the previous call's handle
            plan = ROWS if plan[1] or not _plain(layer) else DENSE if plan[0] else None
            if plan is not None:
                memo.store(key, plan, get_runtime().state)
                return norm(x, layer)
        note = [False, False]
        memo.store(key, note, get_runtime().state)
        return NormedRows(x, layer, scheme, quantize, note)

    norm.__doc__ = (f"``layer(x)`` deferred for the {scheme} linears after it "
                    "(:class:`oasr_core.layers.NormedRows`), or torch's layer norm where they "
                    "all take its dense rows.")
    return norm


def _plain(layer: Any) -> bool:
    """Whether ``layer``'s ``weight`` and ``bias`` are both in its parameter dict."""
    params = getattr(layer, "_parameters", None)
    return isinstance(params, dict) and "weight" in params and "bias" in params \
        and params["weight"] is layer.weight
