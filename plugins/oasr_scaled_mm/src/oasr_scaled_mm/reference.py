"""The scaled_mm computation in torch, with the kernels' exact op order (the torch path).

Every kernel computes the int32 accumulator exactly and then, per element, these fp32 ops in
this order (``csrc/oasr_scaled_mm/common.cuh``; units compile with ``--fmad=false``)::

    v = ((float(acc) * a_scale[m]) * w_scale[n]) + bias_or_0[n]
    scaled_mm:        out_dtype(v)                              round to nearest even
    scaled_mm_quant:  int8(saturate(round_half_even(v / out_scale)))   NaN -> 0

The functions here do the same ops, one torch op each (no op of torch fuses a multiply and an
add), so their results are bit-identical to every kernel's. Two details keep it so: the bias
is added even when absent (``+ 0.0``, as the kernels' null bias reads 0, turning a -0 into +0),
and ``out_scale`` is divided as a tensor on the output's device (torch multiplies by the
reciprocal when a CUDA tensor is divided by a CPU scalar, which rounds differently).

The accumulator is exact on every path: int32 matmul on the CPU, ``torch._int_mm`` on CUDA
where it accepts the shape, else a float64 matmul (exact: every partial sum of int8 products
is an integer far below 2**53).
"""

from __future__ import annotations

from typing import Any

import torch

OUT_DTYPES = (torch.float16, torch.bfloat16)


def exact_acc(a2: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``a2 [M, K] @ w [N, K].T`` as int32, exactly (int8 operands)."""
    if a2.device.type == "cpu":
        return torch.mm(a2.to(torch.int32), w.to(torch.int32).t())
    m, k = a2.shape
    n = w.shape[0]
    if m > 16 and k % 8 == 0 and n % 8 == 0 and k >= 16:
        try:
            return torch._int_mm(a2.contiguous(), w.contiguous().t())
        except RuntimeError:
            pass
    return torch.mm(a2.to(torch.float64), w.to(torch.float64).t()).to(torch.int32)


def scale(acc: torch.Tensor, a_scale: torch.Tensor, w_scale: torch.Tensor,
          bias: torch.Tensor | None) -> torch.Tensor:
    """``((acc.float() * a_scale[:, None]) * w_scale[None, :]) + bias_or_0`` in fp32."""
    y = acc.to(torch.float32) * a_scale.reshape(-1, 1).to(torch.float32)
    y = y * w_scale.reshape(1, -1).to(torch.float32)
    if bias is None:
        return y + 0.0
    return y + bias.reshape(1, -1).to(torch.float32)


def quantize_output(y: torch.Tensor, out_scale: Any) -> torch.Tensor:
    """``int8(saturate(rne(y / out_scale)))``, NaN to 0: the quant epilogue."""
    s = torch.as_tensor(out_scale, dtype=torch.float32).to(y.device).reshape(1, 1)
    q = torch.nan_to_num(y / s.expand(y.shape).contiguous(), nan=0.0)
    return torch.round(q).clamp_(-128.0, 127.0).to(torch.int8)


def scaled_mm(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor, w_scale: torch.Tensor,
              bias: torch.Tensor | None = None,
              out_dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """The scaled_mm result, ``[..., N]`` in ``out_dtype``, bit-identical to the kernels."""
    k = a.shape[-1]
    n = w.shape[0]
    acc = exact_acc(a.reshape(-1, k), w)
    return scale(acc, a_scale, w_scale, bias).to(out_dtype).reshape(*a.shape[:-1], n)


def scaled_mm_quant(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
                    w_scale: torch.Tensor, out_scale: Any,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """The scaled_mm_quant result, ``[..., N]`` int8, bit-identical to the kernels."""
    k = a.shape[-1]
    n = w.shape[0]
    acc = exact_acc(a.reshape(-1, k), w)
    y = scale(acc, a_scale, w_scale, bias)
    return quantize_output(y, out_scale).reshape(*a.shape[:-1], n)


def torch_scaled_mm(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
                    w_scale: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype,
                    out_scale: Any = None) -> torch.Tensor:
    """The torch path of either op: :func:`scaled_mm_quant` when ``out_scale`` is given, else
    :func:`scaled_mm` (the kernels' bits, computed by torch)."""
    if out_scale is not None:
        return scaled_mm_quant(a, w, a_scale, w_scale, out_scale, bias)
    return scaled_mm(a, w, a_scale, w_scale, bias, out_dtype)
