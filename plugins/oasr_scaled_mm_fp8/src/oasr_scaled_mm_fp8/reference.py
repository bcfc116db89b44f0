"""The scaled_mm_fp8 computation in torch: the fp32 reference and the torch (``_scaled_mm``) path.

:func:`scaled_mm_value` is the reference every kernel is gated against: the fp8 operands'
exact products summed in float64 (``torch.mm`` of the upcast operands; every product of two
e4m3 values is exact), rounded once to fp32, then the kernels' epilogue ops in their order::

    v = ((acc * a_scale[m]) * w_scale[n]) + bias_or_0[n]
    scaled_mm_fp8:        out_dtype(v)                         round to nearest even
    scaled_mm_fp8_quant:  e4m3(clamp(v / out_scale, -448, 448))

The quant output saturates: a finite value beyond e4m3's largest (448) and an infinity become
+-448, a NaN stays NaN (the kernels' ``cvt.rn.satfinite``; ``torch.clamp`` propagates NaN and
torch's float8 cast rounds to nearest even). ``out_scale`` is divided as a tensor on the
output's device (torch turns a division by a CPU scalar into a reciprocal multiplication).

:func:`torch_scaled_mm` is what serves a call the kernels do not take on a CUDA device
(``torch._scaled_mm`` with row-wise scales and fast accumulation, bf16 out, where torch accepts
the shape); elsewhere the reference serves.
"""

from __future__ import annotations

from typing import Any

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
"""The largest finite e4m3fn value."""


def exact_acc(a2: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``a2 [M, K] @ w [N, K].T`` of fp8 operands, summed in float64, as float32."""
    return torch.mm(a2.to(torch.float64), w.to(torch.float64).t()).to(torch.float32)


def scale(acc: torch.Tensor, a_scale: torch.Tensor, w_scale: torch.Tensor,
          bias: torch.Tensor | None) -> torch.Tensor:
    """``((acc * a_scale[:, None]) * w_scale[None, :]) + bias_or_0`` in fp32."""
    y = acc.to(torch.float32) * a_scale.reshape(-1, 1).to(torch.float32)
    y = y * w_scale.reshape(1, -1).to(torch.float32)
    return y + (0.0 if bias is None else bias.reshape(1, -1).to(torch.float32))


def quantize_output(y: torch.Tensor, out_scale: Any) -> torch.Tensor:
    """``e4m3(clamp(y / out_scale, -448, 448))``: saturating, NaN kept (the quant epilogue)."""
    s = torch.as_tensor(out_scale, dtype=torch.float32).to(y.device).reshape(1, 1)
    return (y / s.expand(y.shape).contiguous()).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def scaled_mm_value(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
                    w_scale: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The fp32 value ``v`` ``[M, N]`` before the output rounding (the gates' reference)."""
    return scale(exact_acc(a.reshape(-1, a.shape[-1]), w), a_scale, w_scale, bias)


def scaled_mm(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor, w_scale: torch.Tensor,
              bias: torch.Tensor | None = None,
              out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """The reference ``scaled_mm_fp8`` result, ``[..., N]`` in ``out_dtype``."""
    v = scaled_mm_value(a, w, a_scale, w_scale, bias)
    return v.to(out_dtype).reshape(*a.shape[:-1], w.shape[0])


def scaled_mm_quant(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
                    w_scale: torch.Tensor, out_scale: Any,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """The reference ``scaled_mm_fp8_quant`` result, ``[..., N]`` e4m3."""
    v = scaled_mm_value(a, w, a_scale, w_scale, bias)
    return quantize_output(v, out_scale).reshape(*a.shape[:-1], w.shape[0])


def rowwise(a2: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor, w_scale: torch.Tensor,
            bias: torch.Tensor | None = None, *, fast_accum: bool = True) -> torch.Tensor:
    """``torch._scaled_mm`` with row-wise scales, bf16 out (bias added by torch in bf16)."""
    return torch._scaled_mm(a2, w.t(), scale_a=a_scale.reshape(-1, 1).float(),
                            scale_b=w_scale.reshape(1, -1).float(),
                            bias=None if bias is None else bias.to(torch.bfloat16),
                            out_dtype=torch.bfloat16, use_fast_accum=fast_accum)


def torch_scaled_mm(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
                    w_scale: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype,
                    out_scale: Any = None) -> torch.Tensor:
    """The torch path of either op: :func:`rowwise` on CUDA where torch takes it (converted to
    ``out_dtype``, or quantized by :func:`quantize_output` when ``out_scale`` is given), else
    the reference."""
    k, n = a.shape[-1], w.shape[0]
    if a.is_cuda:
        try:
            y = rowwise(a.reshape(-1, k).contiguous(), w.contiguous(), a_scale, w_scale, bias)
        except RuntimeError:
            y = None
        if y is not None:
            y = quantize_output(y.float(), out_scale) if out_scale is not None \
                else y.to(out_dtype)
            return y.reshape(*a.shape[:-1], n)
    if out_scale is not None:
        return scaled_mm_quant(a, w, a_scale, w_scale, out_scale, bias)
    return scaled_mm(a, w, a_scale, w_scale, bias, out_dtype)
