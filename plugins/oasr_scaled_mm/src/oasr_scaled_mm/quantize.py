"""W8A8 int8 quantized linear layers for the census and for engines (``int8_w8a8``).

:func:`quantized_linear` is what the ``oasr_quantized_linear("int8_w8a8")`` hook returns: it
runs ``layer(x)`` as an int8 GEMM. The activation is quantized dynamically per token
(symmetric, absmax / 127, float32 scales); the weight once per output channel, cached on the
layer (:data:`CACHE_ATTR`) together with a float32 copy of the bias, and recomputed only when
the layer's weight or bias changes (a new tensor, device, or in-place update). The GEMM is
``oasr_scaled_mm.ops.scaled_mm``, called through the module attribute so that the census
recorder, which rebinds that attribute, sees every call.

On the meta device (how the census probes a model) everything stays on meta: the int8 copies
are meta tensors and the GEMM returns an empty meta tensor of the right shape.
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

CACHE_ATTR = "_oasr_int8_w8a8"
"""The attribute of an ``nn.Linear`` holding its :class:`QuantizedWeight`."""
QUANTIZATION = "int8_w8a8"


def quantize_rows(x: Any) -> tuple[Any, Any]:
    """Symmetric int8 per row of the last dim: ``(q int8 [..., K], scale float32 [...])``.

    ``scale = absmax / 127`` (1 for an all-zero row), ``q = round_half_even(x / scale)``
    clamped to [-127, 127], both divisions IEEE. A contiguous fp16/bf16 CUDA tensor (outside
    ``torch.compile`` tracing) takes the one-kernel quantizer
    (:mod:`oasr_scaled_mm.quantize_kernel`), bit for bit :func:`quantize_rows_reference`;
    anything else, or a quantizer that cannot be loaded, takes the reference.
    """
    import torch

    if (x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and x.is_contiguous()
            and x.dim() >= 1 and not torch.compiler.is_compiling()):
        from oasr_core.runtime import device_arch_of

        from oasr_scaled_mm.quantize_kernel import quantize_rows_cuda

        got = quantize_rows_cuda(x.detach(), device_arch_of(x.device.index))
        if got is not None:
            return got
    return quantize_rows_reference(x)


def quantize_rows_reference(x: Any) -> tuple[Any, Any]:
    """:func:`quantize_rows` in torch ops (any device): the definition the kernel matches.

    The scale divides by a tensor of 127s rather than the scalar 127: torch turns a division
    by a CPU scalar into a multiplication by its reciprocal on CUDA, which is not the IEEE
    quotient the kernel computes.
    """
    import torch

    x32 = x.detach().to(torch.float32)
    amax = x32.abs().amax(dim=-1)
    scale = amax / torch.full_like(amax, 127.0)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(x32 / scale.unsqueeze(-1)).clamp_(-127.0, 127.0).to(torch.int8)
    return q, scale


def quantized_weight(layer: Any) -> QuantizedWeight:
    """The cached int8 copy of ``layer.weight`` (computed on first use and on change)."""
    return cached_weight(layer, CACHE_ATTR, quantize_rows)


def quantized_linear(x: Any, layer: Any, activation: str | None = None, *,
                     residual: Any = None, alpha: float = 1.0) -> Any:
    """``activation(layer(x))`` with the layer a W8A8 int8 GEMM and the activation in torch,
    or, where the table or the untuned route says unquantized
    (:func:`oasr_scaled_mm.ops.unquantized`), the layer in ``x``'s dtype through the installed
    unquantized linear with the activation fused
    (:func:`oasr_scaled_mm.w8a8.scaled_ops.linear_in_dtype`); with ``residual``, ``residual +
    alpha * layer(x)`` (fused there where the unquantized linear fuses it, else added in torch). The
    output has ``x``'s dtype.

    fp16/bf16 inputs get their own dtype from the kernel; an fp32 input (a CPU probe) is
    computed with a bf16 output and converted back.

    ``x`` may be the family's :class:`~oasr_core.kit.normed.NormedRows` (its layer norm
    deferred): the GEMM then takes the rows the fused norm quantized, shared with the other
    linears after that norm, and the unquantized path its dense rows.
    """
    from oasr_scaled_mm import ops

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
    y = ops.scaled_mm(q, state.weight, a_scale, state.scale, state.bias, out_dtype=out_dtype)
    y = activate(y if y.dtype == x.dtype else y.to(x.dtype), activation)
    return y if residual is None else add_residual(y, residual, alpha)


norm_quantize_rows = fused_kernel("oasr_scaled_mm.quantize_kernel")
"""``(x, norm) -> (q, scale) | None``: this family's fused layer norm and quantizer
(:func:`oasr_core.kit.normed.fused_kernel`)."""

# quantize_rows is looked up at call time (the census recorder and tests rebind it).
layer_norm = layer_norm_answer(QUANTIZATION, quantize_after_norm(norm_quantize_rows,
                                                                 lambda x: quantize_rows(x)))
"""``oasr_layer("LayerNorm", dtype, QUANTIZATION)``'s answer: the norm deferred for the linears
after it (:func:`oasr_core.kit.normed.layer_norm_answer`)."""
