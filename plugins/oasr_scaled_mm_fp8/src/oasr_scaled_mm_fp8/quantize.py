"""W8A8 fp8 quantized linear layers for the census and for engines (``fp8_w8a8``).

:func:`quantized_linear` runs ``layer(x)`` as an fp8 e4m3 GEMM: the activation is quantized
dynamically per token (:func:`quantize_rows`: absmax / 448, float32 scales), the weight once
per output channel, cached on the layer (:data:`CACHE_ATTR`) with a float32 copy of the bias
and recomputed only when the layer's weight or bias changes. The layer keeps its own
high-precision weight, which serves the shapes whose tuning entry says
``Sentinel.UNQUANTIZED`` (``F.linear`` measured faster than every fp8 arm there) and the
uncovered shapes where fp8 is not predicted to win (:mod:`oasr_scaled_mm_fp8.untuned`): the
route is :func:`oasr_scaled_mm_fp8.ops.unquantized`. The GEMM is ``oasr_scaled_mm_fp8.ops.
scaled_mm_fp8``, called through the module attribute so the census recorder sees every call.

On the meta device (how the census probes a model) everything stays on meta and the GEMM is
always the fp8 one (the census records it).
"""

from __future__ import annotations

from typing import Any

from oasr_core.kit.normed import (
    NormedRows,
    fused_kernel,
    layer_norm_answer,
    quantize_after_norm,
    quantized_rows,
)
from oasr_scaled_mm.w8a8.scaled_ops import add_residual, linear_in_dtype
from oasr_scaled_mm.w8a8.weights import QuantizedWeight, cached_weight

CACHE_ATTR = "_oasr_fp8_w8a8"
"""The attribute of an ``nn.Linear`` holding its :class:`QuantizedWeight`."""
QUANTIZATION = "fp8_w8a8"


def quantize_rows(x: Any) -> tuple[Any, Any]:
    """Per-token e4m3 quantization: ``(q [..., K], scale float32 [...])``.

    A contiguous fp16/bf16 CUDA tensor (outside ``torch.compile`` tracing) takes the
    one-kernel quantizer (:mod:`oasr_scaled_mm_fp8.quantize_kernel`), bit for bit the torch
    definition :func:`oasr_scaled_mm_fp8.numerics.quantize_rows`, which serves everything else.
    """
    import torch

    from oasr_scaled_mm_fp8 import numerics

    if (x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and x.is_contiguous()
            and x.dim() >= 1 and not torch.compiler.is_compiling()):
        from oasr_core.runtime import device_arch_of

        from oasr_scaled_mm_fp8.quantize_kernel import quantize_rows_cuda

        got = quantize_rows_cuda(x.detach(), device_arch_of(x.device.index))
        if got is not None:
            return got
    return numerics.quantize_rows(x)


def quantized_weight(layer: Any) -> QuantizedWeight:
    """The cached e4m3 copy of ``layer.weight`` (computed on first use and on change)."""
    from oasr_scaled_mm_fp8 import numerics

    return cached_weight(layer, CACHE_ATTR, numerics.quantize_rows)


def quantized_linear(x: Any, layer: Any, activation: str | None = None, *,
                     residual: Any = None, alpha: float = 1.0) -> Any:
    """``activation(layer(x))`` with the layer a W8A8 fp8 GEMM and the activation in torch,
    or, where the table or the untuned route says unquantized, the layer in ``x``'s dtype
    through the installed unquantized linear with the activation fused
    (:func:`oasr_scaled_mm.w8a8.scaled_ops.linear_in_dtype`); with ``residual``, ``residual + alpha
    * layer(x)`` (fused there where the unquantized linear fuses it, else added in torch). The
    output has ``x``'s dtype (an fp32 input computes with a bf16 output).

    ``x`` may be the family's :class:`~oasr_core.kit.normed.NormedRows` (its layer norm
    deferred): the GEMM then takes the rows the fused norm quantized, shared with the other
    linears after that norm, and the unquantized path its dense rows.
    """
    from oasr_scaled_mm_fp8 import ops

    n, k = layer.weight.shape
    normed = isinstance(x, NormedRows) and x.scheme == QUANTIZATION
    if x.is_cuda and ops.unquantized(n, k, x.numel() // k if k else 0, x.device.index,
                                     normed=normed):
        return linear_in_dtype(x, layer, activation, serving=ops.SERVING, residual=residual,
                               alpha=alpha)
    import torch
    from oasr_core.census.models import activate

    state = quantized_weight(layer)
    q, a_scale = quantized_rows(x, QUANTIZATION, quantize_rows)
    out_dtype = x.dtype if x.dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
    y = ops.scaled_mm_fp8(q, state.weight, a_scale, state.scale, state.bias,
                          out_dtype=out_dtype)
    y = activate(y if y.dtype == x.dtype else y.to(x.dtype), activation)
    return y if residual is None else add_residual(y, residual, alpha)


norm_quantize_rows = fused_kernel("oasr_scaled_mm_fp8.quantize_kernel")
"""``(x, norm) -> (q, scale) | None``: this family's fused layer norm and quantizer
(:func:`oasr_core.kit.normed.fused_kernel`)."""

# quantize_rows is looked up at call time (the census recorder and tests rebind it).
layer_norm = layer_norm_answer(QUANTIZATION, quantize_after_norm(norm_quantize_rows,
                                                                 lambda x: quantize_rows(x)))
"""``oasr_layer("LayerNorm", dtype, QUANTIZATION)``'s answer: the norm deferred for the linears
after it (:func:`oasr_core.kit.normed.layer_norm_answer`)."""
