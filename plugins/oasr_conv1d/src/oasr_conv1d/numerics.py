"""The conv1d family's numerics gate, operands and fp32 reference (pure torch, CPU-testable).

The gate is the kit's :func:`oasr_core.kit.gates.relative_to_torch`: a candidate's error against
the fp32 reference (here ``F.conv1d`` on the transposed ``(B, T, Cin)`` input) is bounded by
multiples of cuDNN's own error on the same half-precision operands.
"""

from __future__ import annotations

from typing import Any

from oasr_core.kit.gates import RelativeVerdict as GateResult
from oasr_core.kit.gates import apply_activation
from oasr_core.kit.gates import relative_to_torch as numerics_gate

__all__ = ["GateResult", "apply_activation", "make_operands", "numerics_gate", "reference",
           "torch_conv"]


def torch_conv(x: Any, weight: Any, bias: Any, stride: int, padding: int, dilation: int,
               groups: int, activation: str | None) -> Any:
    """What a model does on channels-last ``x (B, T, Cin)``: transpose, ``F.conv1d``, the
    activation, transpose back; contiguous ``(B, T_out, Cout)``."""
    import torch.nn.functional as F

    y = F.conv1d(x.transpose(1, 2), weight, bias, stride, padding, dilation, groups)
    return apply_activation(y, activation).transpose(1, 2).contiguous()


def reference(x: Any, weight: Any, bias: Any, stride: int, padding: int, dilation: int,
              groups: int, activation: str | None) -> Any:
    """The fp32 result from the same half-precision operands."""
    b32 = bias.float() if bias is not None else None
    return torch_conv(x.float(), weight.float(), b32, stride, padding, dilation, groups,
                      activation)


def make_operands(batch: int, t_in: int, cin: int, cout: int, kernel: int, groups: int,
                  dtype: str = "fp16", *, bias: bool = True, device: Any = "cpu",
                  seed: int = 0) -> tuple[Any, Any, Any]:
    """Random ``(x (B, T, Cin), weight (Cout, Cin/groups, k), bias (Cout) | None)``, scaled
    so outputs stay O(1); never zeros or constants."""
    import torch

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    fan_in = cin // groups * kernel
    x = torch.randn(batch, t_in, cin, generator=gen).to(device=device, dtype=tdtype)
    w = (torch.randn(cout, cin // groups, kernel, generator=gen) / fan_in ** 0.5).to(
        device=device, dtype=tdtype)
    b = torch.randn(cout, generator=gen).to(device=device, dtype=tdtype) if bias else None
    return x, w, b
