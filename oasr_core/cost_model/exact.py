"""Least squares whose answer does not depend on the machine's BLAS kernel.

The cost model's fits are small (three or four coefficients over a few thousand rows), and
their results are stored in the shipped tuning files, which a replay of the committed log
must rebuild byte for byte on any CPU. ``numpy.linalg.solve``/``lstsq`` and ``@`` go through
OpenBLAS, whose kernels (picked per CPU: Haswell, SkylakeX, ...; ``OPENBLAS_CORETYPE``)
sum in different orders and use fused multiply-adds differently, so the last bits of a fit
differ between machines, and a held-out ranking that sits on a near-tie flips.

Here every sum is :func:`math.fsum` (exactly rounded, so independent of order), every
product an element-wise IEEE multiplication (numpy ufuncs, which never fuse), and the small
solve a Gaussian elimination in plain Python floats. The same inputs give the same bits on
every x86-64 and arm64 machine, whatever numpy links.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def total(values: Any) -> float:
    """The exactly rounded sum of an array or iterable of floats."""
    return math.fsum(values.tolist() if hasattr(values, "tolist") else values)


def normal_equations(columns: Sequence[Any], y: Any, w: Any | None = None
                     ) -> tuple[list[list[float]], list[float]]:
    """``(X^T W X, X^T W y)`` of the design whose columns are ``columns`` (numpy arrays of
    one length) and row weights ``w`` (None: all 1), each entry summed exactly. The matrix
    is built from its upper triangle, so it is exactly symmetric."""
    weighted = [c if w is None else w * c for c in columns]
    p = len(columns)
    gram = [[0.0] * p for _ in range(p)]
    for i in range(p):
        for j in range(i, p):
            gram[i][j] = gram[j][i] = total(weighted[i] * columns[j])
    return gram, [total(weighted[i] * y) for i in range(p)]


def solve(a: Sequence[Sequence[float]], b: Sequence[float]) -> list[float] | None:
    """``x`` with ``a x = b`` by Gaussian elimination with partial pivoting (ties broken by
    the lower row), in plain floats; None when a pivot is zero (``a`` is singular) or the
    answer is not finite."""
    n = len(b)
    m = [[float(v) for v in row] + [float(rhs)] for row, rhs in zip(a, b, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: (abs(m[r][col]), -r))
        if m[pivot][col] == 0.0:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                m[r] = [v - f * p for v, p in zip(m[r], m[col], strict=True)]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - math.fsum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x if all(math.isfinite(v) for v in x) else None


def lstsq(columns: Sequence[Any], y: Any) -> list[float] | None:
    """``argmin |X c - y|`` for the design whose columns are ``columns``; None when they are
    linearly dependent. Columns are scaled to unit norm before the normal equations are
    formed, so coefficients of very different sizes keep their precision."""
    norms = [math.sqrt(total(c * c)) for c in columns]
    if not all(n > 0 for n in norms):
        return None
    scaled = [c / n for c, n in zip(columns, norms, strict=True)]
    gram, rhs = normal_equations(scaled, y)
    x = solve(gram, rhs)
    return None if x is None else [v / n for v, n in zip(x, norms, strict=True)]


def combine(columns: Sequence[Any], coeffs: Sequence[float]) -> Any:
    """``X c`` element-wise, columns added in order (no BLAS)."""
    out = columns[0] * coeffs[0]
    for c, v in zip(columns[1:], coeffs[1:], strict=True):
        out = out + c * v
    return out
