"""The ShapeSet: what to tune, as a versioned JSON document (``oasr tune census --out``).

Schema version 1::

    {"schema_version": 1,
     "working_set_bytes": 61341696,
     "signatures": {"gemm|op=gemm|dt=fp16|N=256|K=1024":
                        {"weight_bytes": 524288, "calls_per_step": 32}},
     "points": [{"family": "gemm", "op": "gemm", "dtype": "fp16",
                 "dims": {"N": 256, "K": 1024}, "M": 3552, "batch": 1, "point": null,
                 "calls": 12.5, "weight": 0.41, "must": true, "eager_fraction": 0.0,
                 "keys": ["offline:B32xT448"]}],
     "provenance": {...}}

Fields (names are stable; adding one bumps no version, changing one does):

``points[]``
    ``family``, ``op``, ``dtype`` (operand dtype: ``fp16``, ``bf16``, ``int8``, ...),
    ``dims`` (static signature dims in the family's key order: integers >= 0, 0 only where
    the family says it means something, ``Family.zero_dims``: conv1d's ``pad=0``),
    ``M`` (dynamic axis value),
    ``batch`` (independent problems per call; 1 for a plain GEMM), ``point`` (exact point key
    such as conv1d's ``"1x3000"``, else null), ``calls`` (calls per unit of traffic: one
    micro-batch offline, one chunk step streaming), ``weight`` (``calls`` times an estimated
    cost in ms: what tuning this point is worth), ``must`` (a captured graph reaches it: it
    must be tuned), ``eager_fraction`` (share of its calls that run eagerly, outside any
    graph: the bench's alpha), ``keys`` (at most 8 engine-key labels that produce it,
    heaviest first, ``":eager"`` suffixed when not captured; ``"capture"`` for a recording).
``signatures``
    per signature label (``family|op=..|dt=..|dims``, dims in order): ``weight_bytes`` of one
    weight operand and ``calls_per_step`` (calls of one forward pass, about the number of
    layers sharing it). A label always names the operand dtype, even for a family whose
    tuning keys carry no ``dt=`` (``Family.key_dtype`` false, an int8 GEMM's): the build
    derives the tuning key from the family.
``working_set_bytes``
    the served model's whole weight working set at the deployment dtype (every parameter);
    the bench keeps weights L2-cold when it exceeds L2. 0 when unknown (a capture alone).
``provenance``
    free JSON: tool, workload, engine configuration, traffic source, per-key probabilities,
    coverage, points seen and kept; a merge lists its inputs under ``merged``.

A document with a newer ``schema_version`` is refused; older ones are migrated on the raw
mapping before structuring by :data:`MIGRATIONS` (the shared :mod:`oasr_core.versions`
mechanism; no step exists yet). Files are written with :func:`oasr_core.files.atomic_write`.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from oasr_core.database.codec import read_document
from oasr_core.errors import OasrError
from oasr_core.files import atomic_write
from oasr_core.serialization import (
    Invalid,
    JsonObject,
    check_json,
    describe_structure_error,
    make_converter,
)
from oasr_core.types import NAME_RE, POINT_RE, freeze, thaw
from oasr_core.versions import Migrations

SCHEMA_VERSION = 1
"""The ``schema_version`` this code writes."""
MAX_KEYS = 8


class ShapeSetError(OasrError):
    """A ShapeSet file that is malformed, too new, or cannot be written."""


MIGRATIONS = Migrations(kind="ShapeSet", current=SCHEMA_VERSION, steps=(), error=ShapeSetError,
                        too_new=ShapeSetError)
"""The ShapeSet's version history (:mod:`oasr_core.versions`): no step yet, version 1 is the
first; a later version registers its step here."""


def _name(_inst: object, attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise Invalid(f"{attribute.name} {value!r} is not a valid name")


def _positive(_inst: object, attribute: attrs.Attribute, value: int) -> None:
    if type(value) is not int or value < 1:
        name = "M" if attribute.name == "m" else attribute.name
        raise Invalid(f"{name} {value!r} is not a positive integer")


def _non_negative(_inst: object, attribute: attrs.Attribute, value: float) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise Invalid(f"{attribute.name} {value!r} is not a finite number >= 0")


def _dims(value: Mapping[str, int] | Iterable[tuple[str, int]]) -> Mapping[str, int]:
    return freeze(dict(value.items() if isinstance(value, Mapping) else value))


@attrs.frozen
class ShapePoint:
    """One call shape to tune, with its traffic (see the module docstring for each field)."""

    family: str = attrs.field(validator=_name)
    op: str = attrs.field(validator=_name)
    dtype: str = attrs.field()
    dims: Mapping[str, int] = attrs.field(converter=_dims, hash=False)
    m: int = attrs.field(validator=_positive)
    """The dynamic axis value (``M`` in JSON)."""
    batch: int = attrs.field(default=1, validator=_positive)
    point: str | None = attrs.field(default=None)
    calls: float = attrs.field(default=0.0, validator=_non_negative)
    weight: float = attrs.field(default=0.0, validator=_non_negative)
    must: bool = False
    eager_fraction: float = attrs.field(default=0.0)
    keys: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    @dtype.validator
    def _check_dtype(self, _attribute: attrs.Attribute, value: str) -> None:
        if not isinstance(value, str) or not value or "|" in value:
            raise Invalid(f"dtype {value!r} is not a dtype name")

    @dims.validator
    def _check_dims(self, _attribute: attrs.Attribute, value: Mapping[str, int]) -> None:
        for name, v in value.items():
            if not name or "|" in name or "=" in name or type(v) is not int or v < 0:
                raise Invalid(f"dim {name}={v!r} is not NAME=non-negative integer")

    @point.validator
    def _check_point(self, _attribute: attrs.Attribute, value: str | None) -> None:
        if value is not None and (not isinstance(value, str) or not POINT_RE.fullmatch(value)):
            raise Invalid(f"point {value!r} is not an exact point key (positive integers "
                          "joined by 'x', such as 1x3000)")

    @eager_fraction.validator
    def _check_eager(self, _attribute: attrs.Attribute, value: float) -> None:
        if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0 + 1e-9:
            raise Invalid(f"eager_fraction {value!r} is not in [0, 1]")

    @property
    def signature(self) -> str:
        """``family|op=..|dt=..|N=..|K=..``: the static signature label."""
        return signature_label(self.family, self.op, self.dtype, self.dims.items())

    @property
    def identity(self) -> tuple:
        """What makes two points the same point (everything but the traffic)."""
        return (self.family, self.op, self.dtype, tuple(self.dims.items()), self.m,
                self.batch, self.point)


def signature_label(family: str, op: str, dtype: str, dims: Iterable[tuple[str, int]]) -> str:
    """The ShapeSet's signature label (the operand dtype, never a dtype class)."""
    return f"{family}|op={op}|dt={dtype}" + "".join(f"|{k}={v}" for k, v in dims)


@attrs.frozen
class SignatureInfo:
    """Per-signature working-set facts."""

    weight_bytes: int = attrs.field(default=0)
    """Bytes of one weight operand at the deployment dtype."""
    calls_per_step: int = attrs.field(default=0)
    """Calls of this signature in one forward pass (the largest seen in a probe)."""


def _order(p: ShapePoint) -> tuple:
    return (p.family, p.op, p.dtype, tuple(p.dims.items()), p.m, p.batch, p.point or "")


def _sorted_points(points: Iterable[ShapePoint]) -> tuple[ShapePoint, ...]:
    return tuple(sorted(points, key=_order))


def _check_json_object(value: Any) -> Any:
    check_json(value)
    return freeze(value)


@attrs.frozen
class ShapeSet:
    """A census result: points, working set, per-signature facts and provenance."""

    points: tuple[ShapePoint, ...] = attrs.field(converter=_sorted_points)
    """In a stable order (family, op, dtype, dims, M, batch, point)."""
    working_set_bytes: int = 0
    signatures: Mapping[str, SignatureInfo] = attrs.field(factory=dict, converter=freeze,
                                                          hash=False)
    provenance: JsonObject = attrs.field(factory=dict, converter=_check_json_object,
                                         hash=False)

    @property
    def total_weight(self) -> float:
        return sum(p.weight for p in self.points)

    @property
    def total_calls(self) -> float:
        return sum(p.calls for p in self.points)

    def with_provenance(self, **fields: Any) -> ShapeSet:
        """This ShapeSet with ``fields`` added to its provenance."""
        return attrs.evolve(self, provenance={**thaw(self.provenance), **fields})

    def select(self, coverage: float) -> ShapeSet:
        """Keep must-tune points and the heaviest points covering ``coverage`` of the weight
        and of the calls; record what was kept in the provenance."""
        if not 0.0 < coverage <= 1.0:
            raise ValueError(f"coverage {coverage} is not in (0, 1]")
        kept = {id(p) for p in self.points if p.must}
        for measure in (lambda p: p.weight, lambda p: p.calls):
            total = sum(map(measure, self.points))
            running = 0.0
            for p in sorted(self.points, key=lambda p: (-measure(p), _order(p))):
                if total <= 0 or running >= coverage * total:
                    break
                kept.add(id(p))
                running += measure(p)
        points = [p for p in self.points if id(p) in kept]
        total_w = self.total_weight
        covered = sum(p.weight for p in points) / total_w if total_w > 0 else 1.0
        return attrs.evolve(self, points=points).with_provenance(
            coverage=coverage, points_seen=len(self.points), points_kept=len(points),
            weight_covered=round(covered, 6))


def scale(shapeset: ShapeSet, factor: float) -> ShapeSet:
    """Every point's calls and weight times ``factor`` (traffic shares before a merge)."""
    return attrs.evolve(shapeset, points=[
        attrs.evolve(p, calls=p.calls * factor, weight=p.weight * factor)
        for p in shapeset.points])


def merge(shapesets: Sequence[ShapeSet]) -> ShapeSet:
    """One ShapeSet from several censuses, each counting as an equal share of traffic.

    Equal points add their calls and weights; ``must`` is or-ed, ``eager_fraction`` is the
    calls-weighted mean, ``keys`` keep the heaviest eight. Signatures and the working set
    take the largest value seen; the provenance lists every input under ``merged``.
    """
    if not shapesets:
        raise ValueError("nothing to merge")
    acc: dict[tuple, dict[str, Any]] = {}
    for s in shapesets:
        for p in s.points:
            a = acc.setdefault(p.identity, {"point": p, "calls": 0.0, "weight": 0.0,
                                            "eager": 0.0, "must": False, "keys": {}})
            a["calls"] += p.calls
            a["weight"] += p.weight
            a["eager"] += p.calls * p.eager_fraction
            a["must"] = a["must"] or p.must
            for rank, key in enumerate(p.keys):
                a["keys"][key] = a["keys"].get(key, 0.0) + p.calls / (rank + 1)
    points = [attrs.evolve(a["point"], calls=a["calls"], weight=a["weight"], must=a["must"],
                           eager_fraction=min(1.0, a["eager"] / a["calls"]) if a["calls"] else 0.0,
                           keys=top_keys(a["keys"])) for a in acc.values()]
    signatures: dict[str, SignatureInfo] = {}
    for s in shapesets:
        for label, info in s.signatures.items():
            old = signatures.get(label, SignatureInfo())
            signatures[label] = SignatureInfo(max(old.weight_bytes, info.weight_bytes),
                                              max(old.calls_per_step, info.calls_per_step))
    return ShapeSet(points=points, signatures=signatures,
                    working_set_bytes=max(s.working_set_bytes for s in shapesets),
                    provenance={"tool": "merge",
                                "merged": [thaw(s.provenance) for s in shapesets]})


def top_keys(contributions: Mapping[str, float]) -> tuple[str, ...]:
    """The heaviest :data:`MAX_KEYS` key labels, ties broken by name."""
    ranked = sorted(contributions.items(), key=lambda kv: (-kv[1], kv[0]))
    return tuple(k for k, _ in ranked[:MAX_KEYS])


def _configure(converter: cattrs.Converter) -> cattrs.Converter:
    converter.register_structure_hook(
        ShapePoint, make_dict_structure_fn(ShapePoint, converter, m=override(rename="M")))
    converter.register_unstructure_hook(
        ShapePoint, make_dict_unstructure_fn(ShapePoint, converter, m=override(rename="M")))
    return converter


@functools.cache
def _converter() -> cattrs.Converter:
    return _configure(make_converter())


def to_json(shapeset: ShapeSet) -> dict[str, Any]:
    """The JSON document, ``schema_version`` first, points in a stable order."""
    doc = _converter().unstructure(shapeset)
    return {"schema_version": SCHEMA_VERSION, **doc}


def from_json(raw: Any, *, origin: str = "<shapeset>") -> ShapeSet:
    """Check the version, migrate, and structure a parsed document."""
    if not isinstance(raw, dict):
        raise ShapeSetError(f"{origin}: expected a JSON object, got {type(raw).__name__}")
    if "points" not in raw and "entries" in raw and "family" in raw:
        raise ShapeSetError(f"{origin}: this is a tuning file (family {raw.get('family')!r}), "
                            "not a census; a census is what `oasr tune census` writes")
    version = raw.get("schema_version")
    if type(version) is not int or version < 1:
        raise ShapeSetError(f"{origin}: no valid schema_version; not an oasr ShapeSet "
                            "(write one with `oasr tune census`)")
    doc = MIGRATIONS.migrate(raw, version, origin)
    try:
        return _converter().structure(doc, ShapeSet)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        problems = describe_structure_error(exc)
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ShapeSetError(f"{origin}: malformed ShapeSet: {'; '.join(problems[:3])}{more}") \
            from None


def load(path: str | os.PathLike[str]) -> ShapeSet:
    """Read a ShapeSet file; :class:`ShapeSetError` says what is wrong and where."""
    return from_json(read_document(path, error=ShapeSetError), origin=str(path))


def dump(shapeset: ShapeSet, path: str | os.PathLike[str]) -> Path:
    """Write ``shapeset`` atomically (temporary file, then rename); returns the path."""
    target = Path(path)
    text = json.dumps(to_json(shapeset), indent=1, sort_keys=False) + "\n"
    try:
        atomic_write(target, text)
    except OSError as exc:
        raise ShapeSetError(f"{target}: cannot write ({exc.strerror or exc})") from None
    return target


def load_all(paths: Sequence[str | os.PathLike[str]]) -> ShapeSet:
    """Read several ShapeSets and :func:`merge` them (``oasr tune build --census A --census B``);
    one path is returned as read."""
    shapesets = [load(path) for path in paths]
    if not shapesets:
        raise ShapeSetError("no ShapeSet given (pass --census FILE)")
    return shapesets[0] if len(shapesets) == 1 else merge(shapesets)
