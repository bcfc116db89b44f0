"""The verdict of a family's numerics gate on one candidate output.

``Family.numerics_gate`` returns something truthy when a candidate passes; the bench protocol
reads ``reason`` (and ``error``) of a failure into the measurement log. :class:`Verdict` is
that record; a family whose gate has more to say (a bound, the reference's own error)
subclasses it with keyword-only fields.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class Verdict:
    """The verdict on one candidate output; truthy when it passes."""

    passed: bool
    error: float
    """The family's error measure of the candidate (0.0 for an exact match)."""
    reason: str = ""
    """Why it failed (empty when it passed)."""

    def __bool__(self) -> bool:
        return self.passed


def within_limit(candidate: Any, reference: Any, limit: Any) -> Verdict:
    """Whether ``candidate`` is within the per-element ``limit`` of the fp32 ``reference``
    (a tolerance gate; an output that is NaN or infinite where the reference is finite fails,
    and where the reference is not finite the candidate must equal it, NaN matching NaN).
    ``error`` is the worst absolute error over the reference's absmax."""
    import torch

    if tuple(candidate.shape) != tuple(reference.shape):
        return Verdict(False, 1.0, f"shape {tuple(candidate.shape)} != "
                                   f"{tuple(reference.shape)}")
    got = candidate.detach().float()
    ref = reference.detach().float().to(got.device)
    finite = torch.isfinite(ref)
    err = (got - ref).abs()
    bad = finite & ~(err <= limit.to(got.device))  # a NaN err (NaN or inf output) is bad
    bad |= ~finite & ~(got.isnan() & ref.isnan()) & (got != ref)
    scale = float(ref[finite].abs().amax()) if bool(finite.any()) else 1.0
    worst = float(err[finite].nan_to_num(float("inf")).amax()) / max(scale, 1e-30) \
        if bool(finite.any()) else 0.0
    if not bool(bad.any()):
        return Verdict(True, worst)
    count = int(bad.sum())
    first = tuple(int(i) for i in bad.nonzero()[0].tolist())
    return Verdict(False, worst, f"{count} of {got.numel()} elements outside the bound "
                                 f"(first at {first}: {got[first].item()} vs "
                                 f"{ref[first].item()})")


TORCH_FACTOR = 4.0
""":func:`relative_to_torch`: the candidate's relative error may be this many times torch's."""
TORCH_MAX_FACTOR = 8.0
""":func:`relative_to_torch`: its largest element-wise error this many times torch's largest."""
MAX_FLOOR_ULPS = 4.0
""":func:`relative_to_torch`: the floor of the largest-error bound, in units in the last place
of the reference's largest magnitude."""
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}


@attrs.frozen
class RelativeVerdict(Verdict):
    """A :func:`relative_to_torch` verdict (truthy when it passes), with its bounds."""

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


def relative_to_torch(candidate: Any, torch_output: Any, reference: Any, *,
                      dtype: str | None = None) -> RelativeVerdict:
    """Judge ``candidate`` against the fp32 ``reference``, relative to what torch's own kernel
    (``torch_output``, same half-precision operands) gets, on two measures:

    - the relative Frobenius error ``||out - ref|| / ||ref||`` (fp64) at most
      :data:`TORCH_FACTOR` x torch's, floored at one unit roundoff of the dtype;
    - the largest element-wise error at most :data:`TORCH_MAX_FACTOR` x torch's largest,
      floored at :data:`MAX_FLOOR_ULPS` ulps of the reference's largest magnitude.

    The second catches what a norm over a whole tensor hides (a wrong halo or padding row
    touches a fraction of a percent of the output). No NaN or Inf passes; the bounds are
    stated in the verdict."""
    import torch

    if dtype is None:
        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(candidate.dtype, "fp16")
    u = UNIT_ROUNDOFF.get(dtype, 2.0 ** -11)
    torch_rel, torch_max = _errors(torch_output, reference)
    bound = max(TORCH_FACTOR * torch_rel, u)
    scale = float(reference.detach().abs().max()) if reference.numel() else 0.0
    max_bound = max(TORCH_MAX_FACTOR * torch_max, MAX_FLOOR_ULPS * 2 * u * scale)
    if tuple(candidate.shape) != tuple(reference.shape):
        return RelativeVerdict(False, float("inf"),
                               f"shape {tuple(candidate.shape)} != {tuple(reference.shape)}",
                               max_error=float("inf"), bound=bound, max_bound=max_bound)
    if not bool(torch.isfinite(candidate.detach().float()).all()):
        return RelativeVerdict(False, float("inf"), "NaN or Inf in the output",
                               max_error=float("inf"), bound=bound, max_bound=max_bound)
    rel, worst = _errors(candidate, reference)
    if rel > bound:
        return RelativeVerdict(False, rel, f"relative error {rel:.3g} > {TORCH_FACTOR:g} x "
                               f"torch's {torch_rel:.3g}", max_error=worst, bound=bound,
                               max_bound=max_bound)
    if worst > max_bound:
        return RelativeVerdict(False, rel, f"largest error {worst:.3g} > {max_bound:.3g} "
                               f"({TORCH_MAX_FACTOR:g} x torch's {torch_max:.3g})",
                               max_error=worst, bound=bound, max_bound=max_bound)
    return RelativeVerdict(True, rel, max_error=worst, bound=bound, max_bound=max_bound)


def apply_activation(y: Any, activation: str | None) -> Any:
    """``y`` through the named activation (``relu``, ``gelu``, ``silu``), torch's definitions
    (GELU: the erf form); a plain if-chain so ``torch.compile`` traces it without a break."""
    import torch.nn.functional as F

    if activation is None:
        return y
    if activation == "relu":
        return F.relu(y)
    if activation == "gelu":
        return F.gelu(y)
    if activation == "silu":
        return F.silu(y)
    raise ValueError(f"activation {activation!r} is not one of ('relu', 'gelu', 'silu')")
