"""The conv2d family's numerics gate, operands and fp32 reference (pure torch, CPU-testable).

The gate is the kit's :func:`oasr_core.kit.gates.relative_to_torch`: a candidate's error against
the fp32 reference (here ``F.conv2d`` on the NHWC input's channels-last view) is bounded by
multiples of cuDNN's own error on the same half-precision operands.
"""

from __future__ import annotations

from typing import Any

from oasr_core.kit.gates import RelativeVerdict as GateResult
from oasr_core.kit.gates import apply_activation
from oasr_core.kit.gates import relative_to_torch as numerics_gate

__all__ = ["GateResult", "apply_activation", "make_operands", "numerics_gate", "reference",
           "torch_conv"]


def torch_conv(x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
               groups: int, activation: str | None) -> Any:
    """torch's conv on NHWC ``x (B, H, W, Cin)``: ``F.conv2d`` on the channels-last view (no
    copy; cuDNN runs its NHWC kernels and returns a channels-last result), the activation, and
    the result viewed back as contiguous NHWC ``(B, H_out, W_out, Cout)``."""
    import torch
    import torch.nn.functional as F

    y = F.conv2d(x.permute(0, 3, 1, 2), weight, bias, stride, padding, dilation, groups)
    y = apply_activation(y, activation).permute(0, 2, 3, 1)
    return y if y.is_contiguous() else y.contiguous(memory_format=torch.contiguous_format)


def reference(x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
              groups: int, activation: str | None) -> Any:
    """The fp32 result from the same half-precision operands."""
    b32 = bias.float() if bias is not None else None
    return torch_conv(x.float(), weight.float(), b32, stride, padding, dilation, groups,
                      activation)


def make_operands(batch: int, height: int, width: int, cin: int, cout: int, kh: int, kw: int,
                  groups: int = 1, dtype: str = "fp16", *, bias: bool = True,
                  device: Any = "cpu", seed: int = 0) -> tuple[Any, Any, Any]:
    """Random ``(x (B, H, W, Cin), weight (Cout, Cin/groups, kh, kw), bias (Cout) | None)``,
    scaled so outputs stay O(1); never zeros or constants."""
    import torch

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    fan_in = cin // groups * kh * kw
    x = torch.randn(batch, height, width, cin, generator=gen).to(device=device, dtype=tdtype)
    w = (torch.randn(cout, cin // groups, kh, kw, generator=gen) / fan_in ** 0.5).to(
        device=device, dtype=tdtype)
    b = torch.randn(cout, generator=gen).to(device=device, dtype=tdtype) if bias else None
    return x, w, b
