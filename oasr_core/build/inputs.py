"""What a build measures: census input, and the per-signature plan of points.

**Census.** The build reads the ShapeSet ``oasr tune census`` writes, through the one reader
of :mod:`oasr_core.census.shapeset` (:func:`~oasr_core.census.shapeset.load_all`: validated,
migrated, a newer ``schema_version`` refused, several files merged). :func:`census_of` takes
the points of one family from it, normalised for the build: dtype spellings folded
(``float16`` -> ``fp16``), dims in the family's key order, an exact ``point`` kept only for a
family with exact points. Points of another op, of a dtype the family does not serve, or with
``batch`` > 1 for a family without a batch dim are skipped and counted. Without a census,
``--widths`` and ``--m-ladder`` make one (:func:`census_from_widths`).

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
from collections.abc import Iterable, Sequence

import attrs

from oasr_core import shapes
from oasr_core.census import shapeset
from oasr_core.census.shapeset import ShapePoint, ShapeSet
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
class Census:
    """The census points of one family (the ShapeSet's :class:`ShapePoint`, normalised: see
    the module docstring), the weight working set, and what was skipped."""

    points: tuple[ShapePoint, ...] = attrs.field(converter=tuple)
    working_set_bytes: int | None = None
    skipped: tuple[str, ...] = attrs.field(default=(), converter=tuple)


def normalise_dtype(dtype: str) -> str:
    """``float16`` -> ``fp16``, ``bfloat16`` -> ``bf16``; other spellings unchanged."""
    return DTYPE_ALIASES.get(str(dtype).lower(), str(dtype).lower())


def census_families(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The family names the points of the ShapeSet files at ``paths`` carry, sorted."""
    return sorted({p.family for p in shapeset.load_all(list(paths)).points})


def read_census(path: str | os.PathLike[str], family: Family) -> Census:
    """The points of ``family`` in the ShapeSet file at ``path``."""
    return read_censuses([path], family)


def read_censuses(paths: Iterable[str | os.PathLike[str]], family: Family) -> Census:
    """The points of ``family`` in the ShapeSet files at ``paths``, merged
    (:func:`oasr_core.census.shapeset.load_all`)."""
    paths = list(paths)
    return census_of(shapeset.load_all(paths), family, origin=", ".join(map(str, paths)))


def census_of(shapes: ShapeSet, family: Family, *, origin: str = "<census>") -> Census:
    """The points of ``family`` in ``shapes``, normalised for the build (module docstring);
    ``origin`` names the file(s) in the one-line error for a point missing a dim."""
    points, skipped = [], {}
    for p in shapes.points:
        why = _skip_reason(p, family)
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        missing = [d for d in family.dims if d not in p.dims]
        if missing:
            raise ConfigurationError(
                f"{origin}: point {p.signature} M={p.m}: missing dim {missing[0]!r} (family "
                f"{family.name} is keyed by {', '.join(family.dims)})")
        bad = family.dims_problem(tuple((d, p.dims[d]) for d in family.dims))
        if bad is not None:  # a 0 where the family's dim must be positive
            why = f"{bad.split('=')[0]} is not a valid {family.name} dim value"
            skipped[why] = skipped.get(why, 0) + 1
            continue
        points.append(attrs.evolve(p, dtype=normalise_dtype(p.dtype),
                                   dims={d: p.dims[d] for d in family.dims},
                                   point=p.point if family.exact_points else None))
    notes = [f"{n} census point(s) skipped: {why}" for why, n in sorted(skipped.items())]
    return Census(points, shapes.working_set_bytes or None, notes)


def _skip_reason(p: ShapePoint, family: Family) -> str | None:
    if p.family != family.name:
        return f"family {p.family}"
    if p.op not in family.ops:
        return f"op {p.op!r} is not an op of {family.name}"
    if normalise_dtype(p.dtype) not in family.dtypes:
        return f"dtype {p.dtype!r} is not served by {family.name}"
    if "batch" not in family.dims and p.batch != 1 and not (family.exact_points and p.point):
        return "batched (batch > 1) calls are keyed without the batch count"
    return None


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
    points = [ShapePoint(family=family.name, op=op, dtype=dtype,
                         dims=dict(zip(family.dims, d, strict=True)), m=m, calls=1.0,
                         weight=1.0, eager_fraction=alpha) for d in sigs for m in ms]
    return Census(points, working_set_bytes)


def merge_censuses(censuses: Sequence[Census]) -> Census:
    """One census: the points merged as :func:`oasr_core.census.shapeset.merge` merges
    ShapeSets (calls and weights add, ``must`` ors, the eager fraction is calls-weighted)."""
    merged = shapeset.merge([ShapeSet(points=c.points, working_set_bytes=c.working_set_bytes
                                      or 0) for c in censuses])
    return Census(merged.points, merged.working_set_bytes or None,
                  [s for c in censuses for s in c.skipped])


def _fold(into: PlannedPoint | None, p: PlannedPoint) -> PlannedPoint:
    """``into`` with ``p`` folded in: calls-weighted alpha, summed calls and weight."""
    if into is None:
        return p
    calls = into.calls + p.calls
    alpha = ((into.calls * into.alpha + p.calls * p.alpha) / calls) if calls else max(
        into.alpha, p.alpha)
    return attrs.evolve(into, calls=calls, weight=into.weight + p.weight,
                        must=into.must or p.must, alpha=alpha,
                        points=tuple(dict.fromkeys((*into.points, *p.points))))


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
        dims = tuple(p.dims[d] for d in family.dims)
        groups.setdefault((p.op, key_dtype(family, p.dtype, exact_dtype), dims), []).append(p)
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
