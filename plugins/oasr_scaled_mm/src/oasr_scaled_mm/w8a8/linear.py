"""A W8A8 format's quantized linear layer (``oasr_quantized_linear`` / ``oasr_linear``).

:func:`quantized_linear` runs ``layer(x)`` as the format's GEMM: the activation quantized
dynamically per token (:func:`quantize_rows`: the family's one-kernel quantizer, bit for bit
its torch reference, which serves everything else), the weight once per output channel, cached
on the layer (:attr:`Format.cache_attr`) with a float32 copy of the bias and recomputed only
when the layer's weight or bias changes. The layer keeps its own high-precision weight, which
serves where the family's route (``<package>.ops.unquantized``) says unquantized: a tuning
entry's ``Sentinel.UNQUANTIZED``, or an uncovered shape its untuned route does not predict the
quantized layer to win. The GEMM is ``<package>.ops.<op>``, looked up on the module at call
time so the census recorder, which rebinds it, sees every call; on the meta device (how the
census probes a model) everything stays on meta. Importing this module imports no torch.
"""

from __future__ import annotations

from typing import Any

from oasr_core.layers import activate
from oasr_core.runtime import device_arch_of

from oasr_scaled_mm.w8a8.formats import Format
from oasr_scaled_mm.w8a8.normed import NormedRows, quantized_rows
from oasr_scaled_mm.w8a8.scaled_ops import add_residual, full_precision_linear, linear_in_dtype
from oasr_scaled_mm.w8a8.weights import QuantizedWeight, cached_weight

_HALF: tuple[Any, ...] = ()
"""``(torch.float16, torch.bfloat16)``, bound with :data:`_compiling` on the first quantized
call (importing this module imports no torch; an import statement per call costs about
1 us)."""
_compiling: Any = None
"""``torch.compiler.is_compiling``."""


def _half() -> tuple[Any, ...]:
    global _HALF, _compiling
    import torch

    _HALF, _compiling = (torch.float16, torch.bfloat16), torch.compiler.is_compiling
    return _HALF


def reference_rows(fmt: Format, x: Any) -> tuple[Any, Any]:
    """The format's torch definition of the per-row quantizer (``Format.reference``)."""
    module, function = fmt.reference
    return getattr(fmt.module(module), function)(x)


def quantize_rows(fmt: Format, x: Any) -> tuple[Any, Any]:
    """``(q [..., K] in the format, scale float32 [...])``, one scale per row of the last dim.

    A contiguous fp16/bf16 CUDA tensor (outside ``torch.compile`` tracing) takes the one-kernel
    quantizer (``<package>.quantize_kernel``); anything else, or a quantizer that cannot be
    loaded, takes the torch reference (:func:`reference_rows`).
    """
    half = _HALF or _half()
    if (x.is_cuda and x.dtype in half and x.is_contiguous() and x.dim() >= 1
            and not _compiling()):
        got = fmt.module("quantize_kernel").quantize_rows_cuda(
            x.detach(), device_arch_of(x.device.index))
        if got is not None:
            return got
    return reference_rows(fmt, x)


def quantized_weight(fmt: Format, layer: Any) -> QuantizedWeight:
    """The cached quantized copy of ``layer.weight`` (computed on first use and on change)."""
    return cached_weight(layer, fmt.cache_attr, lambda w: reference_rows(fmt, w))


def quantized_linear(fmt: Format, x: Any, layer: Any, activation: str | None = None, *,
                     residual: Any = None, alpha: float = 1.0) -> Any:
    """``activation(layer(x))`` with the layer the format's W8A8 GEMM and the activation in
    torch, or, where the family's route says unquantized, the layer in ``x``'s dtype through
    the installed unquantized linear with the activation fused
    (:func:`~oasr_scaled_mm.w8a8.scaled_ops.linear_in_dtype`); with ``residual``,
    ``residual + alpha * layer(x)`` (fused there where the unquantized linear fuses it, else
    added in torch). The output has ``x``'s dtype (an fp32 input, a CPU probe, computes with a
    bf16 output and is converted back).

    ``x`` may be the family's :class:`~oasr_core.layers.NormedRows` (its layer norm deferred):
    the GEMM then takes the rows the fused norm quantized, shared with the other linears after
    that norm (the untuned route then counts no quantizer), and the unquantized path its dense
    rows.
    """
    ops, quantize = fmt.module("ops"), fmt.module("quantize")
    n, k = layer.weight.shape
    normed = isinstance(x, NormedRows) and x.scheme == fmt.quantization
    if x.is_cuda and ops.unquantized(n, k, x.numel() // k if k else 0, x.device.index,
                                     normed=normed):
        return linear_in_dtype(x, layer, activation, serving=ops.SERVING, residual=residual,
                               alpha=alpha)
    half = _HALF or _half()
    state = quantize.quantized_weight(layer)
    q, a_scale = quantized_rows(x, fmt.quantization, quantize.quantize_rows)
    out_dtype = x.dtype if x.dtype in half else half[1]
    y = getattr(ops, fmt.op_mm)(q, state.weight, a_scale, state.scale, state.bias,
                                out_dtype=out_dtype)
    y = activate(y if y.dtype == x.dtype else y.to(x.dtype), activation)
    return y if residual is None else add_residual(y, residual, alpha)


def layer_plan(fmt: Format, key: tuple, x: Any, layer: Any) -> Any:
    """Memoise, for this epoch, how the layer call ``key`` (its layer, activation and input
    shape, dtype and type: :func:`~oasr_scaled_mm.w8a8.scaled_ops.layer_linear`) that just
    ran :func:`quantized_linear` on ``x`` is served from now on; returns the plan.

    Where it ran unquantized (a CUDA input, the family's route unquantized at its shape, the
    layer's weight in ``x``'s dtype), the plan is the unquantized call itself,
    ``(x, layer, activation) -> activation(layer(x))``: the installed unquantized linear (the
    gemm family's, whose own per-layer plan then serves) or, without one, ``F.linear`` and the
    activation on the layer's parameter dict; on a :class:`NormedRows` input, on its dense
    rows. Only a layer whose ``weight`` and ``bias`` are both in its parameter dict gets one;
    every other call plans ``OP`` (:func:`quantized_linear` with all its checks). The plan is
    right for any operands a later call under the same key brings (the unquantized linear
    checks its own), at worst unquantized where the route would say quantized on another
    device, until the epoch ends.
    """
    from oasr_core.kit.serving import OP

    ops = fmt.module("ops")
    plan = _unquantized_plan(fmt, ops, x, layer) or OP
    return ops.SERVING.layers.store(key, plan, ops.SERVING.bind())


def _unquantized_plan(fmt: Format, ops: Any, x: Any, layer: Any) -> Any:
    params = getattr(layer, "_parameters", None)
    if not (isinstance(params, dict) and "bias" in params and x.is_cuda):
        return None
    weight = params.get("weight")
    if weight is None or weight is not layer.weight or weight.dtype != x.dtype \
            or weight.dim() != 2:
        return None
    n, k = weight.shape
    normed = isinstance(x, NormedRows) and x.scheme == fmt.quantization
    if not ops.unquantized(n, k, x.numel() // k if k else 0, x.device.index, normed=normed):
        return None
    served = full_precision_linear(ops.SERVING, x.dtype)
    if served is None:
        served = _torch_linear
    if isinstance(x, NormedRows):
        def plan(x: Any, layer: Any, activation: str | None) -> Any:
            return served(x.dense(), layer, activation)

        return plan
    return served


def _torch_linear(x: Any, layer: Any, activation: str | None) -> Any:
    """``activation(F.linear(x, weight, bias))`` on the layer's parameter dict (``F.linear``
    bound on the first call: an import statement per call costs about 1 us)."""
    global _f_linear
    if _f_linear is None:
        import torch.nn.functional as F

        _f_linear = F.linear
    p = layer._parameters
    y = _f_linear(x, p["weight"], p["bias"])
    return y if activation is None else activate(y, activation)


_f_linear: Any = None


def quantize_names(fmt: Format) -> dict[str, Any]:
    """What a format's ``quantize`` module names, each the function above for ``fmt``:
    ``CACHE_ATTR`` (the attribute of an ``nn.Linear`` holding its :class:`QuantizedWeight`),
    ``QUANTIZATION``, ``quantize_rows(x)`` (per-token quantization ``(q [..., K], scale
    float32 [...])``, the one-kernel quantizer on CUDA), ``quantized_weight(layer)`` (the
    cached quantized copy of ``layer.weight``), ``quantized_linear(x, layer, activation=None,
    *, residual=None, alpha=1.0)``, ``layer_plan(key, x, layer)``, ``norm_quantize_rows``
    (``(x, norm) -> (q, scale) | None``: the fused layer norm and quantizer) and ``layer_norm``
    (``oasr_layer("LayerNorm", dtype, QUANTIZATION)``'s answer: the norm deferred for the
    linears after it). The deferred norm looks ``<package>.quantize.quantize_rows`` up at call
    time (the census recorder and tests rebind it)."""
    from oasr_scaled_mm.w8a8.normed import fused_kernel, layer_norm_answer, quantize_after_norm

    def rows(x: Any) -> tuple[Any, Any]:
        return quantize_rows(fmt, x)

    def weight(layer: Any) -> QuantizedWeight:
        return quantized_weight(fmt, layer)

    def linear(x: Any, layer: Any, activation: str | None = None, *, residual: Any = None,
               alpha: float = 1.0) -> Any:
        return quantized_linear(fmt, x, layer, activation, residual=residual, alpha=alpha)

    def plan(key: tuple, x: Any, layer: Any) -> Any:
        return layer_plan(fmt, key, x, layer)

    fused = fused_kernel(f"{fmt.package}.quantize_kernel")
    norm = layer_norm_answer(fmt.quantization, quantize_after_norm(
        fused, lambda x: fmt.module("quantize").quantize_rows(x)))
    return {"CACHE_ATTR": fmt.cache_attr, "QUANTIZATION": fmt.quantization,
            "quantize_rows": rows, "quantized_weight": weight, "quantized_linear": linear,
            "layer_plan": plan, "norm_quantize_rows": fused, "layer_norm": norm}
