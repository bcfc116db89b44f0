"""What a build measures: census input, and the per-signature plan of points.

**Census JSON** (the ShapeSet ``oasr tune census`` writes; read tolerantly)::

    {"schema_version": 1,                  # or "version"; any integer is accepted
     "working_set_bytes": 123456789,       # the served model's weight bytes (0/absent: unknown)
     "points": [{"op": "gemm", "dtype": "float16",          # fp16/float16/half, bf16/bfloat16
                 "N": 512, "K": 256,                        # each family dim, or "dims": {...}
                 "M": 416, "batch": 1, "calls": 3.0, "weight": 0.12,
                 "must": true, "eager_fraction": 0.0}, ...]}

Required per point: ``op``, ``dtype``, ``M`` (or ``m``) and every static dim of the family
(top-level fields or a ``dims`` object). Optional: ``batch`` (1), ``calls`` (1),
``weight`` (= calls), ``must`` (false), ``eager_fraction`` (0; also ``alpha``), ``family``,
and for a family with exact points ``point`` (``"8x3000"``: the census writes one only for a
fixed-window workload). Other fields (``keys``, top-level ``signatures``, ``provenance``)
are ignored.
This is the ShapeSet of :mod:`oasr_core.census` (schema_version 1).
Points of another family or op, of a dtype the family does not serve, or with ``batch`` > 1
for a family without a batch dim are skipped and counted. Without a census, ``--widths``
and ``--m-ladder`` make one (:func:`census_from_widths`).

**Plan.** Points group into signatures (op, key dtype, static dims): fp16 and bf16 share a
``dt=half`` key unless the build keys by exact dtype, measured in the dtype carrying more
weight. Each signature measures its census sizes (thinned to ``max_points`` with ``thin``)
plus ladder fill points up to ``max_points`` in all. A signature of an exact-point family
whose census points all carry exact points is an **exact signature**: it measures exactly
those points (no fill) and its entry serves them by point (see :mod:`oasr_core.build.pipeline`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core import shapes
from oasr_core.database import signature_key
from oasr_core.errors import ConfigurationError
from oasr_core.types import Family, Problem

DTYPE_ALIASES = {
    "float16": "fp16", "half": "fp16", "torch.float16": "fp16", "f16": "fp16",
    "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "torch.int8": "int8", "torch.float8_e4m3fn": "float8_e4m3fn",
}
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "int8": 1, "float8_e4m3fn": 1, "fp8": 1, "fp32": 4}


@attrs.frozen
class ShapePoint:
    """One census point of the family, normalised."""

    op: str
    dtype: str
    dims: tuple[int, ...]
    m: int
    calls: float = 1.0
    weight: float = 1.0
    must: bool = False
    eager_fraction: float = 0.0
    point: str | None = None
    """The exact point (exact-point families only)."""


@attrs.frozen
class Census:
    """The family's census points, the weight working set, and what was skipped."""

    points: tuple[ShapePoint, ...] = attrs.field(converter=tuple)
    working_set_bytes: int | None = None
    skipped: tuple[str, ...] = attrs.field(default=(), converter=tuple)


def _bad(origin: str, where: str, message: str) -> ConfigurationError:
    return ConfigurationError(f"{origin}: {where}: {message}")


def _int(value: Any, origin: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise _bad(origin, where, f"{value!r} is not an integer")
    return int(value)


def _num(value: Any, origin: str, where: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value) or value < 0:
        raise _bad(origin, where, f"{value!r} is not a non-negative number")
    return float(value)


def normalise_dtype(dtype: str) -> str:
    """``float16`` -> ``fp16``, ``bfloat16`` -> ``bf16``; other spellings unchanged."""
    return DTYPE_ALIASES.get(str(dtype).lower(), str(dtype).lower())


def _read_raw(path: str | os.PathLike[str]) -> dict[str, Any]:
    from oasr_core.database.codec import read_document

    origin = str(path)
    raw = read_document(path, error=ConfigurationError)
    if not isinstance(raw, dict) or not isinstance(raw.get("points"), list):
        raise ConfigurationError(f"{origin}: expected an object with a 'points' list")
    return raw


def census_families(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[str], int]:
    """The family names the census files' points carry, sorted, and how many points name
    none (an older census format: the build then needs ``--family``)."""
    names: set[str] = set()
    unnamed = 0
    for path in paths:
        for p in _read_raw(path)["points"]:
            family = p.get("family") if isinstance(p, dict) else None
            if isinstance(family, str) and family:
                names.add(family)
            else:
                unnamed += 1
    return sorted(names), unnamed


def read_census(path: str | os.PathLike[str], family: Family) -> Census:
    """The points of ``family`` in the census JSON at ``path`` (format: module docstring)."""
    origin = str(path)
    raw = _read_raw(path)
    version = raw.get("schema_version", raw.get("version"))
    if version is not None:
        _int(version, origin, "schema_version")
    ws = raw.get("working_set_bytes")
    working_set = None if ws in (None, 0) else _int(ws, origin, "working_set_bytes")
    points, skipped = [], {}
    for i, p in enumerate(raw["points"]):
        where = f"points[{i}]"
        if not isinstance(p, dict):
            raise _bad(origin, where, "not an object")
        why = _skip_reason(p, family)
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        points.append(_point(p, family, origin, where))
    notes = [f"{n} census point(s) skipped: {why}" for why, n in sorted(skipped.items())]
    return Census(points, working_set, notes)


def _skip_reason(p: Mapping[str, Any], family: Family) -> str | None:
    if p.get("family") not in (None, family.name):
        return f"family {p['family']}"
    if p.get("op") not in family.ops:
        return f"op {p.get('op')!r} is not an op of {family.name}"
    if normalise_dtype(p.get("dtype", "")) not in family.dtypes:
        return f"dtype {p.get('dtype')!r} is not served by {family.name}"
    if "batch" not in family.dims and p.get("batch", 1) not in (1, None) and not (
            family.exact_points and p.get("point")):
        return "batched (batch > 1) calls are keyed without the batch count"
    return None


def _point(p: Mapping[str, Any], family: Family, origin: str, where: str) -> ShapePoint:
    dims_src = p.get("dims") if isinstance(p.get("dims"), dict) else p
    dims = []
    for d in family.dims:
        if d not in dims_src:
            raise _bad(origin, where, f"missing dim {d!r} (family {family.name} is keyed by "
                       f"{', '.join(family.dims)})")
        dims.append(_int(dims_src[d], origin, f"{where}.{d}"))
    m = p.get("M", p.get("m"))
    if m is None:
        raise _bad(origin, where, "missing M")
    m = _int(m, origin, f"{where}.M")
    if m < 1:
        raise _bad(origin, f"{where}.M", f"{m} is not positive")
    calls = _num(p.get("calls"), origin, f"{where}.calls", 1.0)
    eager = _num(p.get("eager_fraction", p.get("alpha")), origin, f"{where}.eager_fraction",
                 0.0)
    point = p.get("point") if family.exact_points else None
    if point is not None and (not isinstance(point, str) or not point or "|" in point):
        raise _bad(origin, f"{where}.point", f"{point!r} is not an exact point like '1x3000'")
    return ShapePoint(op=p["op"], dtype=normalise_dtype(p["dtype"]), dims=tuple(dims), m=m,
                      calls=calls, weight=_num(p.get("weight"), origin, f"{where}.weight", calls),
                      must=bool(p.get("must", False)), eager_fraction=min(eager, 1.0),
                      point=point)


def _int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise ConfigurationError(f"{what} {text!r}: expected integers separated by ','") from None
    if not values or any(v < 1 for v in values):
        raise ConfigurationError(f"{what} {text!r}: expected positive integers")
    return values


def census_from_widths(family: Family, widths: str, m_ladder: str, *, op: str | None = None,
                       dtype: str | None = None, alpha: float = 0.0,
                       working_set_bytes: int | None = None) -> Census:
    """A census of ``widths`` (``"N,K;N,K"``, the family's dims in order) x ``m_ladder``.

    Every point weighs 1. The working set defaults to the product of each width's dims
    times the dtype's bytes, summed (a GEMM's weight bytes).
    """
    op = op or family.ops[0]
    if op not in family.ops:
        raise ConfigurationError(f"--op {op!r} is not an op of {family.name} "
                                 f"({', '.join(family.ops)})")
    dtype = normalise_dtype(dtype or family.dtypes[0])
    if dtype not in family.dtypes:
        raise ConfigurationError(f"--dtype {dtype!r} is not served by {family.name} "
                                 f"({', '.join(family.dtypes)})")
    ms = _int_list(m_ladder, "--m-ladder")
    sigs = []
    for part in (w for w in widths.split(";") if w.strip()):
        dims = _int_list(part, "--widths")
        if len(dims) != len(family.dims):
            raise ConfigurationError(f"--widths {part!r}: family {family.name} has "
                                     f"{len(family.dims)} dims ({', '.join(family.dims)})")
        sigs.append(tuple(dims))
    if not sigs:
        raise ConfigurationError("--widths: no width given (expected e.g. '512,256;2048,512')")
    if working_set_bytes is None:
        working_set_bytes = sum(math.prod(d) * DTYPE_BYTES.get(dtype, 2) for d in set(sigs))
    points = [ShapePoint(op, dtype, d, m, eager_fraction=alpha) for d in sigs for m in ms]
    return Census(points, working_set_bytes)


def merge_censuses(censuses: Sequence[Census]) -> Census:
    """One census: calls and weights add per (op, dtype, dims, M), must ORs, alpha averages."""
    merged: dict[tuple, ShapePoint] = {}
    for census in censuses:
        for p in census.points:
            key = (p.op, p.dtype, p.dims, p.m, p.point)
            merged[key] = _fold(merged.get(key), p)
    sets = [c.working_set_bytes for c in censuses if c.working_set_bytes is not None]
    return Census(sorted(merged.values(),
                         key=lambda p: (p.op, p.dims, p.dtype, p.m, p.point or "")),
                  max(sets) if sets else None, [s for c in censuses for s in c.skipped])


def _fold(into: Any, p: Any) -> Any:
    """``into`` with ``p`` folded in: calls-weighted alpha, summed calls and weight."""
    if into is None:
        return p
    calls = into.calls + p.calls
    alpha = ((into.calls * _alpha(into) + p.calls * _alpha(p)) / calls) if calls else max(
        _alpha(into), _alpha(p))
    fields = {"calls": calls, "weight": into.weight + p.weight, "must": into.must or p.must}
    if hasattr(into, "points"):
        fields["points"] = tuple(dict.fromkeys((*into.points, *p.points)))
    fields["eager_fraction" if hasattr(into, "eager_fraction") else "alpha"] = alpha
    return attrs.evolve(into, **fields)


def _alpha(p: Any) -> float:
    return p.eager_fraction if hasattr(p, "eager_fraction") else p.alpha


@attrs.frozen
class PlannedPoint:
    """One size a build measures for a signature, with what the decisions need of it."""

    m: int
    weight: float
    calls: float = 0.0
    must: bool = False
    alpha: float = 0.0
    fill: bool = False
    incumbent: str | None = None
    points: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    """The census's exact points at this size, heaviest first (exact-point families)."""

    @property
    def point(self) -> str | None:
        """The exact point this size is measured at (None: the family picks a shape)."""
        return self.points[0] if self.points else None


@attrs.frozen
class Signature:
    """One tuning entry to build: its key, the measurement dtype and the planned points."""

    key: str
    op: str
    dtype: str
    """The dtype the points are measured in."""
    dims: tuple[tuple[str, int], ...] = attrs.field(converter=tuple)
    points: tuple[PlannedPoint, ...] = attrs.field(converter=tuple)
    census_max: int
    """The largest census size (the catch-all may extend only a point measured there)."""

    @property
    def exact(self) -> bool:
        """Whether every point is an exact one: the entry then serves them by point."""
        return bool(self.points) and all(p.points for p in self.points)

    @property
    def weight(self) -> float:
        """Total weight of the points."""
        return sum(p.weight for p in self.points)

    def problem(self, family: Family, m: int, point: str | None = None) -> Problem:
        """The :class:`Problem` of this signature at size ``m`` (exact ``point`` if any)."""
        return Problem(family=family.name, op=self.op, dtype=self.dtype, dims=self.dims, m=m,
                       point=point)


def key_dtype(family: Family, dtype: str, exact: bool) -> str | None:
    """The ``dt=`` of a signature measured in ``dtype`` (a class such as ``half`` unless exact)."""
    if not family.key_dtype:
        return None
    if not exact:
        for cls, members in family.dtype_classes.items():
            if dtype in members:
                return cls
    return dtype


def plan(census: Census, family: Family, *, max_points: int = 24, thin: bool = False,
         fill: bool = True, exact_dtype: bool = False) -> list[Signature]:
    """The signatures of ``census``, heaviest first (a time budget spends itself where it
    matters), each with its census points (thinned with ``thin``) and fill points."""
    groups: dict[tuple, list[ShapePoint]] = {}
    for p in census.points:
        groups.setdefault((p.op, key_dtype(family, p.dtype, exact_dtype), p.dims), []).append(p)
    out = []
    for (op, kdt, dims), pts in groups.items():
        per_dtype: dict[str, float] = {}
        for p in pts:
            per_dtype[p.dtype] = per_dtype.get(p.dtype, 0.0) + p.weight
        dtype = max(family.dtypes, key=lambda d: (per_dtype.get(d, -1.0),
                                                  -family.dtypes.index(d)))
        by_m: dict[int, PlannedPoint] = {}
        for p in sorted(pts, key=lambda p: -p.weight):
            pp = PlannedPoint(p.m, p.weight, p.calls, p.must, p.eager_fraction,
                              points=(p.point,) if p.point else ())
            by_m[p.m] = _fold(by_m.get(p.m), pp)
        exact = all(pp.points for pp in by_m.values())
        points = _thin([by_m[m] for m in sorted(by_m)], max_points) if thin and not exact else [
            by_m[m] for m in sorted(by_m)]
        room = max(0, max_points - len(points)) if fill and not exact else 0
        out.append(Signature(signature_key(family, op, kdt, dims), op, dtype,
                             tuple(zip(family.dims, dims, strict=True)),
                             _with_fill(points, room), census_max=max(by_m)))
    return sorted(out, key=lambda s: (-s.weight, s.key))


def _thin(points: list[PlannedPoint], cap: int) -> list[PlannedPoint]:
    kept, targets = shapes.thin([p.m for p in points], [p.weight for p in points], cap,
                                [p.must for p in points])
    folded = {k: points[k] for k in kept}
    for dropped, into in sorted(targets.items()):
        folded[into] = _fold(folded[into], points[dropped])
    return [folded[k] for k in kept]


def _with_fill(points: list[PlannedPoint], room: int) -> list[PlannedPoint]:
    census_ms = [p.m for p in points]
    fills = shapes.fill_points(census_ms, room)
    if not fills:
        return points
    w = 0.25 * min(p.weight for p in points)
    logs = [(math.log(p.m), p.alpha) for p in points]
    extra = [PlannedPoint(m, w, alpha=min(logs, key=lambda la: abs(la[0] - math.log(m)))[1],
                          fill=True) for m in fills]
    return sorted(points + extra, key=lambda p: p.m)


def read_censuses(paths: Iterable[str | os.PathLike[str]], family: Family) -> Census:
    """:func:`read_census` of every path, merged."""
    return merge_censuses([read_census(p, family) for p in paths])
