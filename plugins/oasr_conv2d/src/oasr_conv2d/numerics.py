"""The conv2d family's numerics gate, operands and fp32 reference (pure torch, CPU-testable).

Every candidate is checked against an fp32 reference computed from the same half-precision
operands before it is timed, on two measures, each relative to what torch's own conv (the
``torch`` arm, cuDNN in the operands' dtype) gets on the same inputs:

- the relative Frobenius error ``||out - ref|| / ||ref||`` (fp64) at most :data:`FACTOR` x
  torch's, floored at one unit roundoff of the dtype;
- the largest element-wise error at most :data:`MAX_FACTOR` x torch's largest, floored at
  :data:`MAX_FLOOR_ULPS` units in the last place of the reference's largest magnitude.

The second catches what a norm over a whole tensor can hide in a convolution: a wrong halo
or padding row touches only a few output rows per tile, a fraction of a percent of the
tensor. No NaN or Inf passes. The bounds are stated in the verdict.
"""

from __future__ import annotations

from typing import Any

import attrs
from oasr_core.kit.gates import Verdict

from oasr_conv2d.ops_names import ACTIVATIONS

FACTOR = 4.0
MAX_FACTOR = 8.0
MAX_FLOOR_ULPS = 4.0
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}


@attrs.frozen
class GateResult(Verdict):
    """The verdict on one candidate output (truthy when it passes), with its bounds."""

    max_error: float = attrs.field(kw_only=True)
    bound: float = attrs.field(kw_only=True)
    max_bound: float = attrs.field(kw_only=True)


def _errors(output: Any, reference: Any) -> tuple[float, float]:
    import torch

    ref = reference.detach().to(torch.float64)
    diff = output.detach().to(device=ref.device, dtype=torch.float64) - ref
    denom = float(ref.norm())
    rel = float(diff.norm()) / denom if denom else (0.0 if float(diff.norm()) == 0 else 1e30)
    return rel, float(diff.abs().max()) if diff.numel() else 0.0


def numerics_gate(candidate: Any, torch_output: Any, reference: Any, *,
                  dtype: str | None = None) -> GateResult:
    """Judge ``candidate`` against the fp32 ``reference``, relative to ``torch_output``."""
    import torch

    if dtype is None:
        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(candidate.dtype, "fp16")
    u = UNIT_ROUNDOFF.get(dtype, 2.0 ** -11)
    torch_rel, torch_max = _errors(torch_output, reference)
    bound = max(FACTOR * torch_rel, u)
    scale = float(reference.detach().abs().max()) if reference.numel() else 0.0
    max_bound = max(MAX_FACTOR * torch_max, MAX_FLOOR_ULPS * 2 * u * scale)
    if tuple(candidate.shape) != tuple(reference.shape):
        return GateResult(False, float("inf"),
                          f"shape {tuple(candidate.shape)} != {tuple(reference.shape)}",
                          max_error=float("inf"), bound=bound, max_bound=max_bound)
    if not bool(torch.isfinite(candidate.detach().float()).all()):
        return GateResult(False, float("inf"), "NaN or Inf in the output",
                          max_error=float("inf"), bound=bound, max_bound=max_bound)
    rel, worst = _errors(candidate, reference)
    if rel > bound:
        return GateResult(False, rel, f"relative error {rel:.3g} > {FACTOR:g} x torch's "
                          f"{torch_rel:.3g}", max_error=worst, bound=bound, max_bound=max_bound)
    if worst > max_bound:
        return GateResult(False, rel, f"largest error {worst:.3g} > {max_bound:.3g} "
                          f"({MAX_FACTOR:g} x torch's {torch_max:.3g})", max_error=worst,
                          bound=bound, max_bound=max_bound)
    return GateResult(True, rel, max_error=worst, bound=bound, max_bound=max_bound)


def apply_activation(y: Any, activation: str | None) -> Any:
    """``y`` through the named activation, torch's definitions (GELU: the erf form)."""
    import torch.nn.functional as F

    if activation is None:
        return y
    if activation == "relu":
        return F.relu(y)
    if activation == "gelu":
        return F.gelu(y)
    if activation == "silu":
        return F.silu(y)
    raise ValueError(f"activation {activation!r} is not one of {ACTIVATIONS}")


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
