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
