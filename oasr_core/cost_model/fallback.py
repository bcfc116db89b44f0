"""Calibrated times of a family's untuned fallback arm (torch), next to the configs' model.

A family whose untuned selector is ``torch`` (``Family.untuned``) lets the model tier serve a
config only where it predicts a win over torch, so the model needs torch's time at shapes
nobody measured. The shipped measurement logs hold a ``torch`` arm at every point, measured
with the same protocol as every config; this module fits a small roofline to those rows::

    t = c0 + c1 · K/64 + c2 · 2MNK / P + c3 · bytes / BW      (us; every c >= 0)

``P`` is the profile's tensor rate, ``BW`` its DRAM bandwidth, ``bytes`` the operands and the
output once each. ``c0`` is the launch and fixed cost, ``c1`` the serial cost of one 64-deep
main-loop step (what dominates skinny problems with long K), ``c2`` and ``c3`` the compute
and traffic the library achieves. One fit per (arm, op): an op whose torch path is more than
one kernel (``gemm_activation`` runs the activation separately) has its own fixed and
traffic costs, and an op no row measured gets no fit, so the tier does not answer for it.
A fit predicts only inside the widths it was fitted on (N and K between the lowest and the
highest its rows measured): outside, neither it nor the configs' model has evidence, and on
the held-out log that is where served configs lost to torch.

Why not a pseudo-config of the structural model: cuBLAS picks a different kernel per shape,
so no single tile describes it; a pseudo-config at "the best of the space times a factor"
tracks the space, not the library. The roofline's four terms are what varies with (M, N, K)
in the rows; held out per signature its error is ~10 % rms on the H200 log, and the tier's
margin absorbs it (``benchmarks/results/untuned_tier_offline.md``).

The fit is non-negative least squares on relative error (rows weighted by ``1/t``), so the
terms stay physical and the fit is deterministic for a replayed log.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from oasr_core.arch import ArchProfile
from oasr_core.cost_model.features import OUT_BYTES, dtype_class, operand_bytes
from oasr_core.errors import ConfigurationError

if TYPE_CHECKING:
    from oasr_core.cost_model.calibrate import LogRow

TERMS = ("fixed_us", "us_per_k64", "compute", "traffic")
"""The roofline's coefficients, in the order of :func:`terms`."""
MIN_ROWS = 6
"""Fewest rows of an op that get a fit (fewer: no prediction for that op)."""
MIN_SIGNATURES = 2
"""Fewest signatures (N, K) of an op that get a fit: one width cannot tell what scales with
N from what scales with K, so its fit would extrapolate blind to other widths."""


def terms(m: int, n: int, k: int, dtype: str, profile: ArchProfile) -> tuple[float, ...] | None:
    """The roofline's regressors at (m, n, k) in us; None for a dtype the profile has no
    tensor rate for."""
    rate = profile.tensor_tflops.get(dtype_class(dtype))
    if rate is None:
        return None
    elem = operand_bytes(dtype)
    flops_us = 2.0 * m * n * k / (rate * 1e12) * 1e6
    bytes_us = ((m * k + n * k) * elem + m * n * OUT_BYTES) / (profile.dram_gbps * 1e3)
    return (1.0, k / 64.0, flops_us, bytes_us)


@attrs.frozen
class ArmFit:
    """The roofline of one arm for one op: coefficients (``TERMS`` order), its rows, and the
    widths they span (``n`` and ``k`` as ``(lowest, highest)``)."""

    coeffs: tuple[float, ...] = attrs.field(converter=tuple)
    rows: int
    signatures: int
    n: tuple[int, int] = attrs.field(converter=tuple)
    k: tuple[int, int] = attrs.field(converter=tuple)

    def covers(self, n: int, k: int) -> bool:
        """Whether (n, k) lies within the measured widths: the fit does not extrapolate."""
        return self.n[0] <= n <= self.n[1] and self.k[0] <= k <= self.k[1]

    def to_json(self) -> dict[str, Any]:
        return {**{t: round(c, 6) for t, c in zip(TERMS, self.coeffs, strict=True)},
                "rows": self.rows, "signatures": self.signatures, "N": list(self.n),
                "K": list(self.k)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ArmFit:
        """Inverse of :meth:`to_json`; ``ConfigurationError`` unless every coefficient is a
        finite non-negative number and ``N`` and ``K`` are ``[lowest, highest]`` integers."""
        from oasr_core.cost_model.model import count, number

        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"an arm fit must be an object, not {type(raw).__name__}")
        spans = []
        for axis in ("N", "K"):
            span = raw.get(axis)
            pair = isinstance(span, list) and len(span) == 2 and all(type(v) is int for v in span)
            if not pair or span[0] > span[1]:
                raise ConfigurationError(f"{axis}={span!r} is not a [lowest, highest] pair of "
                                         "integers")
            spans.append(tuple(span))
        return cls(coeffs=tuple(number(raw.get(t), t) for t in TERMS),
                   rows=count(raw.get("rows", 0), "rows"),
                   signatures=count(raw.get("signatures", 0), "signatures"),
                   n=spans[0], k=spans[1])


@attrs.frozen
class FallbackModel:
    """Calibrated rooflines of the sentinel arms a log measured, by arm then op."""

    arms: Mapping[str, Mapping[str, ArmFit]] = attrs.field(factory=dict)

    def predict(self, arm: str, op: str, m: int, n: int, k: int, dtype: str,
                profile: ArchProfile) -> float | None:
        """Predicted time in us of ``arm`` for ``op`` at (m, n, k); None when uncalibrated
        there (no fit of the arm and op, or (n, k) outside the widths it was fitted on)."""
        fitted = self.arms.get(arm, {}).get(op)
        x = terms(m, n, k, dtype, profile) if fitted is not None and fitted.covers(n, k) \
            else None
        if x is None:
            return None
        return sum(c * v for c, v in zip(fitted.coeffs, x, strict=True))

    def to_json(self) -> dict[str, Any]:
        return {arm: {op: f.to_json() for op, f in sorted(ops.items())}
                for arm, ops in sorted(self.arms.items())}

    @classmethod
    def from_json(cls, raw: Any) -> FallbackModel:
        """Inverse of :meth:`to_json` (None or absent: no arm is calibrated)."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping) or not all(isinstance(ops, Mapping)
                                                   for ops in raw.values()):
            raise ConfigurationError("malformed fallback calibration: expected an object of "
                                     "arm -> op -> fit")
        try:
            return cls(arms={str(arm): {str(op): ArmFit.from_json(f) for op, f in ops.items()}
                             for arm, ops in raw.items()})
        except ConfigurationError as exc:
            raise ConfigurationError(f"malformed fallback calibration: {exc}") from None
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"malformed fallback calibration: {exc!r}") from None


def fit_fallbacks(rows: Iterable[LogRow], profile: ArchProfile, *, min_rows: int = MIN_ROWS,
                  min_signatures: int = MIN_SIGNATURES) -> FallbackModel:
    """Fit every sentinel arm of ``rows`` (per op) that has ``min_rows`` rows over
    ``min_signatures`` signatures."""
    import numpy as np

    by: dict[tuple[str, str], list[LogRow]] = defaultdict(list)
    for r in rows:
        if r.sentinel:
            by[(r.config, r.op)].append(r)
    arms: dict[str, dict[str, ArmFit]] = defaultdict(dict)
    for (arm, op), rs in sorted(by.items()):
        xs = [(terms(r.m, r.n, r.k, r.dtype, profile), r.t_us) for r in rs]
        xs = [(x, t) for x, t in xs if x is not None and math.isfinite(t) and t > 0]
        if len(xs) < min_rows or len({r.signature for r in rs}) < min_signatures:
            continue
        x = np.array([x for x, _ in xs])
        y = np.array([t for _, t in xs])
        coeffs = _nnls(x / y[:, None], np.ones(len(y)))
        arms[arm][op] = ArmFit(coeffs=tuple(float(c) for c in coeffs), rows=len(xs),
                               signatures=len({r.signature for r in rs}),
                               n=(min(r.n for r in rs), max(r.n for r in rs)),
                               k=(min(r.k for r in rs), max(r.k for r in rs)))
    return FallbackModel(arms=dict(arms))


def _nnls(a: Any, b: Any) -> list[float]:
    """``argmin |a c - b|`` over ``c >= 0``, exactly: the best of the unconstrained fits on
    every subset of the columns whose solution is non-negative (four columns: 15 subsets).
    Solved and summed with :mod:`.exact`, so the same bits whatever BLAS kernel numpy runs."""
    import itertools

    from oasr_core.cost_model.exact import combine, lstsq, total

    cols = a.shape[1]
    best, best_res = [0.0] * cols, total(b * b)
    for size in range(1, cols + 1):
        for subset in itertools.combinations(range(cols), size):
            columns = [a[:, j] for j in subset]
            sol = lstsq(columns, b)
            if sol is None or any(v < 0 for v in sol):
                continue
            r = combine(columns, sol) - b
            res = total(r * r)
            if res < best_res - 1e-12:
                best = [0.0] * cols
                for i, v in zip(subset, sol, strict=True):
                    best[i] = float(v)
                best_res = res
    return best
