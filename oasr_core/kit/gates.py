"""The verdict of a family's numerics gate on one candidate output.

``Family.numerics_gate`` returns something truthy when a candidate passes; the bench protocol
reads ``reason`` (and ``error``) of a failure into the measurement log. :class:`Verdict` is
that record; a family whose gate has more to say (a bound, the reference's own error)
subclasses it with keyword-only fields.
"""

from __future__ import annotations

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
