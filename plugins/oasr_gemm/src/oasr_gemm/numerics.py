"""The gemm family's numerics gate, operands and fp32 reference (pure torch, CPU-testable).

A candidate kernel can launch cleanly and still be wrong (a 128x16 tile once returned values
100-170x off and reached production), so every candidate is checked before it is timed: its
relative error against an fp32 reference may be at most :data:`FACTOR` times torch's own error
on the same inputs, and it may hold no NaN or Inf. Relative error is the Frobenius norm of the
difference over the norm of the reference, computed in fp64 so the measure adds no error.
Torch's error at these sizes is half-precision rounding of the output; a floor of one unit
roundoff of the dtype keeps the bound meaningful should torch's error ever come out near 0.
"""

from __future__ import annotations

from typing import Any

import attrs
from oasr_core.kit.gates import Verdict

FACTOR = 4.0
"""A candidate passes within this multiple of torch's relative error."""
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
ACTIVATIONS = ("relu", "gelu", "silu")


@attrs.frozen
class GateResult(Verdict):
    """The verdict on one candidate output (truthy when it passes), with the bound it met."""

    torch_error: float = attrs.field(kw_only=True)
    """torch's relative error against the same reference."""
    bound: float = attrs.field(kw_only=True)
    """The largest relative error that passes."""


def relative_error(output: Any, reference: Any) -> float:
    """``||output - reference|| / ||reference||`` in fp64 on the reference's device.

    inf when the shapes differ.
    """
    if tuple(output.shape) != tuple(reference.shape):
        return float("inf")
    ref64 = reference.detach().to(dtype=_float64())
    out64 = output.detach().to(device=ref64.device, dtype=_float64())
    denom = float(ref64.norm())
    diff = float((out64 - ref64).norm())
    if denom == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / denom


def _float64() -> Any:
    import torch

    return torch.float64


def numerics_gate(candidate: Any, torch_output: Any, reference: Any, *, dtype: str | None = None,
                  factor: float = FACTOR) -> GateResult:
    """Judge ``candidate`` against the fp32 ``reference``, relative to ``torch_output``'s error.

    ``dtype`` (``fp16``/``bf16``, default: the candidate's) sets the floor of the bound.
    """
    import torch

    if dtype is None:
        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(candidate.dtype, "fp16")
    torch_err = relative_error(torch_output, reference)
    bound = max(factor * torch_err, UNIT_ROUNDOFF.get(dtype, 2.0 ** -11))
    if tuple(candidate.shape) != tuple(reference.shape):
        return GateResult(False, float("inf"),
                          f"shape {tuple(candidate.shape)} != {tuple(reference.shape)}",
                          torch_error=torch_err, bound=bound)
    finite = bool(torch.isfinite(candidate.detach().float()).all())
    if not finite:
        return GateResult(False, float("inf"), "NaN or Inf in the output",
                          torch_error=torch_err, bound=bound)
    err = relative_error(candidate, reference)
    if err > bound:
        return GateResult(False, err,
                          f"relative error {err:.3g} > {factor:g} x torch's {torch_err:.3g}",
                          torch_error=torch_err, bound=bound)
    return GateResult(True, err, torch_error=torch_err, bound=bound)


def apply_activation(x: Any, activation: str | None) -> Any:
    """``x`` through the named activation, torch's definitions (GELU: exact erf form)."""
    import torch.nn.functional as F

    if activation in (None, "none"):
        return x
    if activation == "relu":
        return F.relu(x)
    if activation == "gelu":
        return F.gelu(x)
    if activation == "silu":
        return F.silu(x)
    raise ValueError(f"activation {activation!r} is not one of {ACTIVATIONS}")


def reference(a: Any, w: Any, bias: Any = None, activation: str | None = None,
              residual: Any = None, alpha: float = 1.0, *, log_softmax: bool = False) -> Any:
    """The fp32 result ``act(a @ w.T + bias)`` computed from the same half-precision operands;
    with ``residual``, ``residual + alpha * (a @ w.T + bias)`` (op ``gemm_residual``); with
    ``log_softmax``, ``log_softmax(a @ w.T + bias, dim=-1)`` (op ``gemm_log_softmax``)."""
    import torch.nn.functional as F

    b32 = bias.float() if bias is not None else None
    y = apply_activation(F.linear(a.float(), w.float(), b32), activation)
    if log_softmax:
        y = F.log_softmax(y, dim=-1)
    return y if residual is None else residual.float().add(y, alpha=alpha)


def torch_output(a: Any, w: Any, bias: Any = None, activation: str | None = None,
                 residual: Any = None, alpha: float = 1.0, *, log_softmax: bool = False) -> Any:
    """What the torch path computes (cuBLAS through ``F.linear``), in the operands' dtype;
    with ``residual``, the op's torch path: that output added to it, ``alpha``-scaled; with
    ``log_softmax``, torch's log-softmax of that output over its last dim."""
    import torch.nn.functional as F

    y = apply_activation(F.linear(a, w, bias), activation)
    if log_softmax:
        y = F.log_softmax(y, dim=-1)
    return y if residual is None else residual.add(y, alpha=alpha)


def bmm_reference(a: Any, b: Any) -> Any:
    """The fp32 ``torch.bmm(a, b)`` of the same half-precision operands (op ``bmm``)."""
    import torch

    return torch.bmm(a.float(), b.float())


def make_bmm_operands(batch: int, m: int, n: int, k: int, layout: str, dtype: str = "fp16", *,
                      device: Any = "cpu", seed: int = 0) -> tuple[Any, Any]:
    """Random ``(a [batch, m, k], b)`` of op ``bmm``, scaled so outputs stay O(1): ``b`` is
    the ``[batch, k, n]`` operand, the transposed view of a contiguous ``[batch, n, k]``
    tensor for ``layout="tn"`` and contiguous for ``"nn"``."""
    import torch

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(batch, m, k, generator=gen).to(device=device, dtype=tdtype)
    shape = (batch, n, k) if layout == "tn" else (batch, k, n)
    b = (torch.randn(*shape, generator=gen) / k ** 0.5).to(device=device, dtype=tdtype)
    return a, (b.transpose(1, 2) if layout == "tn" else b)


def make_residual(m: int, n: int, dtype: str = "fp16", *, device: Any = "cpu",
                  seed: int = 0) -> Any:
    """A random residual ``[m, n]`` (std 1, never zeros: a kernel that drops it must show)."""
    import torch

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    return torch.randn(m, n, generator=gen).to(device=device, dtype=tdtype)


def make_operands(m: int, n: int, k: int, dtype: str = "fp16", *, bias: bool = True,
                  device: Any = "cpu", seed: int = 0) -> tuple[Any, Any, Any]:
    """Random ``(a [m, k], w [n, k], bias [n] | None)``, scaled so outputs stay O(1).

    Never zeros or constants: a kernel that skips work must show up as an error.
    """
    import torch

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(device=device, dtype=tdtype)
    w = (torch.randn(n, k, generator=gen) / k ** 0.5).to(device=device, dtype=tdtype)
    b = torch.randn(n, generator=gen).to(device=device, dtype=tdtype) if bias else None
    return a, w, b
