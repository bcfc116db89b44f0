"""The records of a tuning file: :class:`TuningFile`, :class:`Entry` and their parts.

A tuning file holds the measured choices of one kernel family on one arch family. Its JSON
form (``schema_version`` 2) is::

    {"schema_version": 2, "family": "gemm", "family_schema_version": 1,
     "arch": {"family": "sm90", "lane": "sm90_wgmma"},
     "validators": {"soft": {"impl_hash": "...", "sku": {...}, "nvcc": "13.0.88",
                             "default": "<the lane's default config id>"}},
     "provenance": {...}, "configs": {"<id>": {"lane": "sm90_wgmma", ...params}},
     "coverage_basis": ["<id>", ...], "model": {...},            # model: optional
     "entries": {"gemm|op=gemm|dt=half|N=512|K=256": {
         "regions": [[512, "<id>"], [2152, "<id>"], [null, "torch"]],
         "points": {"1x3000": "<id>"}, "evidence": {...}, "source": "aot",
         "notes": ["..."], "soft": {...}}}}                     # soft: the entry's own stamp

Every record validates itself when built, so a :class:`TuningFile` in memory is always
structurally sound: regions strictly ascending with at most one trailing catch-all, every
choice a config of the file or a sentinel. Checks that need the :class:`~oasr_core.types.Family`
(its sentinels, ops, exact points) happen when a file is loaded for that family.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from oasr_core.serialization import Invalid, JsonObject, JsonValue, check_json
from oasr_core.types import ARCH_RE, NAME_RE, POINT_RE, Config, Sentinel, freeze, thaw

SCHEMA_VERSION = 2
"""The ``schema_version`` this code writes; older versions are migrated on load
(:mod:`oasr_core.database.migrations` says what each changed)."""


class Source(enum.Enum):
    """Who produced an entry."""

    AOT = "aot"
    """``oasr tune build`` (offline measurement)."""
    JIT = "jit"
    """``oasr_core.autotune()`` publishing a runtime measurement."""
    CONVERTED = "converted"
    """Converted from an older table format."""
    PRIOR = "prior"
    """A prior (model or hand-written guess), not a measurement."""
    MANUAL = "manual"
    """Edited by hand."""


def _frozen_json(value: Any) -> Any:
    if isinstance(value, MappingProxyType):
        return value
    check_json(value)
    return freeze(value)


def _optional_frozen_json(value: Any) -> Any:
    return None if value is None else _frozen_json(value)


@attrs.frozen
class Region:
    """One region of an entry: sizes up to ``m_hi`` (None: every size) run ``choice``."""

    m_hi: int | None = attrs.field()
    """Largest dynamic size served (inclusive), or None for the catch-all."""
    choice: str = attrs.field()
    """A config id of the file, or a sentinel's value (``torch``)."""

    @m_hi.validator
    def _check_m_hi(self, _attribute: attrs.Attribute, value: int | None) -> None:
        if value is not None and (type(value) is not int or value < 1):
            raise Invalid(f"region bound {value!r} is not a positive integer or null")

    @choice.validator
    def _check_choice(self, _attribute: attrs.Attribute, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise Invalid(f"region choice {value!r} is not a non-empty string")

    def __iter__(self) -> Iterator[Any]:
        """Unpack as the JSON pair: ``m_hi, choice = region``."""
        return iter((self.m_hi, self.choice))


def _to_regions(value: Any) -> tuple[Region, ...]:
    return tuple(r if isinstance(r, Region) else Region(*r) for r in value)


@attrs.frozen
class Entry:
    """The measured choices for one signature key.

    Lookup takes the exact point first (when the caller has one and the entry holds it),
    then the first region whose ``m_hi`` is null or at least M. Regions round up: a choice
    serves only sizes at or below the largest it was measured at.
    """

    regions: tuple[Region, ...] = attrs.field(default=(), converter=_to_regions)
    """Strictly ascending by ``m_hi``; at most one null bound, and only last."""
    points: Mapping[str, str] = attrs.field(factory=dict, converter=freeze)
    """Exact dynamic points (``"1x3000"`` -> choice); only for exact-point families."""
    evidence: JsonValue = attrs.field(factory=dict, converter=_frozen_json)
    """Free JSON: the measurements behind the choices."""
    source: Source = attrs.field(default=Source.MANUAL, converter=Source)
    """Who produced the entry (``manual`` unless a tool says otherwise)."""
    notes: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    """Human-readable notes (per-point decisions, provenance)."""
    soft: JsonObject | None = attrs.field(default=None, converter=_optional_frozen_json)
    """The soft validators this entry was measured under, when they differ from the file's."""

    @regions.validator
    def _check_regions(self, _attribute: attrs.Attribute, value: tuple[Region, ...]) -> None:
        previous = 0
        for i, region in enumerate(value):
            if region.m_hi is None:
                if i != len(value) - 1:
                    raise Invalid("regions: the null (catch-all) bound must be the last one")
            elif region.m_hi <= previous:
                raise Invalid(f"regions: bounds must be strictly ascending "
                              f"({previous} then {region.m_hi})")
            else:
                previous = region.m_hi

    @points.validator
    def _check_points(self, _attribute: attrs.Attribute, value: Mapping[str, str]) -> None:
        for point, choice in value.items():
            if not isinstance(point, str) or not POINT_RE.fullmatch(point):
                raise Invalid(f"point {point!r} is not an exact point key (positive integers "
                              "joined by 'x', such as 1x3000)")
            if not isinstance(choice, str) or not choice:
                raise Invalid(f"point {point!r}: choice {choice!r} is not a non-empty string")
        if not value and not self.regions:
            raise Invalid("entry has neither regions nor points")

    @notes.validator
    def _check_notes(self, _attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
        if not all(isinstance(n, str) for n in value):
            raise Invalid("notes must be strings")

    @soft.validator
    def _check_soft(self, _attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and not isinstance(value, Mapping):
            raise Invalid("an entry's soft stamp must be an object")

    def lookup(self, m: int, point: str | None = None) -> str | None:
        """The choice id serving dynamic size ``m`` (or exact ``point``); None is a miss."""
        if point is not None:
            hit = self.points.get(point)
            if hit is not None:
                return hit
        for region in self.regions:
            if region.m_hi is None or m <= region.m_hi:
                return region.choice
        return None

    def choices(self) -> frozenset[str]:
        """Every choice id the entry names (regions and points)."""
        return frozenset({r.choice for r in self.regions} | set(self.points.values()))

    def with_region(self, m_hi: int | None, choice: str) -> Entry:
        """This entry with ``choice`` serving up to ``m_hi``, replacing a region of that bound.

        Other regions, the stamp and the evidence are kept, so an entry extended this way
        under newer validators stays stale until it is rebuilt.
        """
        kept = [r for r in self.regions if r.m_hi != m_hi]
        kept.append(Region(m_hi, choice))
        kept.sort(key=lambda r: (r.m_hi is None, r.m_hi or 0))
        return attrs.evolve(self, regions=tuple(kept))

    def with_point(self, point: str, choice: str) -> Entry:
        """This entry with exact ``point`` served by ``choice`` (stamp and evidence kept)."""
        return attrs.evolve(self, points={**self.points, point: choice})


@attrs.frozen
class ArchStamp:
    """The hardware a file was measured on: arch family and MMA lane (hard validators)."""

    family: str = attrs.field()
    """Arch family, e.g. ``sm90``."""
    lane: str = attrs.field()
    """The lane the entries' configs run on, e.g. ``sm90_wgmma``."""

    @family.validator
    def _check_family(self, _attribute: attrs.Attribute, value: str) -> None:
        if not ARCH_RE.match(value):
            raise Invalid(f"arch family {value!r} is not like 'sm90'")

    @lane.validator
    def _check_lane(self, _attribute: attrs.Attribute, value: str) -> None:
        if not value:
            raise Invalid("arch lane is empty")


@attrs.frozen
class Validators:
    """The file-wide stamp: the soft validators of the last writer."""

    soft: JsonObject = attrs.field(factory=dict, converter=_frozen_json)
    """``impl_hash``, ``sku``, ``nvcc``, ``cutlass`` ...: a mismatch marks entries stale."""


class LazyEntries(Mapping[str, Entry]):
    """The entries of a file read for serving: kept as parsed JSON, each structured into an
    :class:`Entry` (and checked) the first time it is looked up.

    A process serving shapes from a large user tier looks up a handful of its entries, so it
    pays for those only (:func:`oasr_core.database.open_tuning_file`). ``make(key, raw)``
    structures and checks one entry, raising ``DatabaseError`` naming the file and key when
    it is malformed; a lookup of that key raises it again every time (the caller skips it).
    """

    def __init__(self, raw: Mapping[str, Any], make: Callable[[str, Any], Entry]) -> None:
        self._raw = raw
        self._make = make
        self._made: dict[str, Entry] = {}

    def __getitem__(self, key: str) -> Entry:
        try:
            return self._made[key]
        except KeyError:
            pass
        entry = self._make(key, self._raw[key])
        self._made[key] = entry
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._raw

    def check_all(self) -> None:
        """Structure and check every entry (``DatabaseError`` on the first bad one)."""
        for key in self._raw:
            self[key]

    def choices_of(self, key: str) -> frozenset[str]:
        """The choice ids entry ``key`` names, read from its JSON without structuring it
        (anything that is not a choice string is ignored)."""
        raw = self._raw[key]
        if key in self._made:
            return self._made[key].choices()
        if not isinstance(raw, Mapping):
            return frozenset()
        found = set()
        regions, points = raw.get("regions", ()), raw.get("points", {})
        for region in regions if isinstance(regions, list) else ():
            if isinstance(region, list) and len(region) == 2 and isinstance(region[1], str):
                found.add(region[1])
        if isinstance(points, Mapping):
            found.update(c for c in points.values() if isinstance(c, str))
        return frozenset(found)

    def soft_of(self, key: str) -> Mapping[str, Any] | None:
        """Entry ``key``'s own soft stamp, read from its JSON (None: none, or not an object)."""
        if key in self._made:
            return self._made[key].soft
        raw = self._raw[key]
        soft = raw.get("soft") if isinstance(raw, Mapping) else None
        return soft if isinstance(soft, Mapping) else None


def _to_entries(value: Any) -> Mapping[str, Entry]:
    return value if isinstance(value, LazyEntries) else freeze(value)


def _check_configs(_inst: Any, _attribute: attrs.Attribute, value: Mapping[str, Any]) -> None:
    for config_id, config in value.items():
        if not isinstance(config, Config) or config.id != config_id:
            raise Invalid(f"configs: {config_id!r} is not a Config with that id")


@attrs.frozen
class TuningFile:
    """One tuning file: a family's entries on one arch family and lane."""

    family: str = attrs.field()
    """Kernel family name (hard validator)."""
    arch: ArchStamp = attrs.field(validator=attrs.validators.instance_of(ArchStamp))
    """Arch family and lane (hard validators)."""
    family_schema_version: int = attrs.field(default=1)
    """Version of the family's own payloads, owned by its plugin."""
    validators: Validators = attrs.field(factory=Validators)
    """The file's soft stamp."""
    provenance: JsonObject = attrs.field(factory=dict, converter=_frozen_json)
    """Free JSON: who wrote the file, when, with what."""
    configs: Mapping[str, Config] = attrs.field(factory=dict, converter=freeze,
                                                validator=_check_configs)
    """Every config an entry or the coverage basis names, by id."""
    coverage_basis: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    """Config ids the model tier and the compile set draw on."""
    model: JsonValue | None = attrs.field(default=None, converter=_optional_frozen_json)
    """Optional cost-model payload (free JSON, read by the model tier)."""
    entries: Mapping[str, Entry] = attrs.field(factory=dict, converter=_to_entries)
    """Entries by signature key (a :class:`LazyEntries` when read for serving)."""

    @family.validator
    def _check_family(self, _attribute: attrs.Attribute, value: str) -> None:
        if not isinstance(value, str) or not NAME_RE.match(value):
            raise Invalid(f"family {value!r} is not a family name")

    @family_schema_version.validator
    def _check_family_schema(self, _attribute: attrs.Attribute, value: int) -> None:
        if type(value) is not int or value < 1:
            raise Invalid(f"family_schema_version {value!r} is not a positive integer")

    def __attrs_post_init__(self) -> None:
        for config_id in self.coverage_basis:
            if config_id not in self.configs:
                raise Invalid(f"coverage_basis names {config_id!r}, which is not in configs")
        if isinstance(self.entries, LazyEntries):
            return  # each entry is checked when it is structured
        for key, entry in self.entries.items():
            if not isinstance(entry, Entry):
                raise Invalid(f"entries[{key!r}] is not an Entry")
            for choice in sorted(entry.choices()):
                if choice not in self.configs and Sentinel.parse(choice) is None:
                    raise Invalid(f"entries[{key!r}] names {choice!r}, which is neither a "
                                  "config of this file nor a sentinel")

    @property
    def lane(self) -> str:
        """The lane the file was measured on (``arch.lane``)."""
        return self.arch.lane

    @property
    def soft(self) -> Mapping[str, Any]:
        """The file's soft stamp (``validators.soft``)."""
        return self.validators.soft

    def entry_soft(self, key: str) -> Mapping[str, Any]:
        """The stamp entry ``key`` was measured under: its own, else the file's."""
        entries = self.entries
        own = entries.soft_of(key) if isinstance(entries, LazyEntries) else entries[key].soft
        return self.soft if own is None else own

    def entry_choices(self, key: str) -> frozenset[str]:
        """The choice ids entry ``key`` names (without structuring a lazy entry)."""
        entries = self.entries
        if isinstance(entries, LazyEntries):
            return entries.choices_of(key)
        return entries[key].choices()

    def lookup(self, key: str, m: int, point: str | None = None) -> str | None:
        """The choice id for ``key`` at ``m`` (or exact ``point``); None when nothing serves."""
        entry = self.entries.get(key)
        return None if entry is None else entry.lookup(m, point)

    def referenced_configs(self) -> frozenset[str]:
        """Config ids named by an entry or the coverage basis (sentinels excluded)."""
        names = set(self.coverage_basis)
        for key in self.entries:
            names.update(self.entry_choices(key))
        return frozenset(n for n in names if n in self.configs)

    def to_json(self) -> dict[str, Any]:
        """The JSON document, ``schema_version`` included."""
        from oasr_core.database.codec import encode

        return encode(self)

    @classmethod
    def from_json(cls, raw: Any, *, origin: str = "<memory>") -> TuningFile:
        """Migrate and structure a parsed document; ``DatabaseError`` naming ``origin``."""
        from oasr_core.database.codec import decode

        return decode(raw, origin=origin)

    def dumps(self) -> str:
        """The canonical text: sorted keys, ``indent=1``, trailing newline; deterministic."""
        return _render(self.to_json())

    def digest(self) -> str:
        """16 hex digits identifying the content (identical files, identical digests)."""
        return hashlib.sha256(self.dumps().encode()).hexdigest()[:16]


_EXPANDED_DEPTH = 4
"""Containers nested this deep are written on one line (a region, one evidence point)."""


_COMPACT = json.JSONEncoder(sort_keys=True, ensure_ascii=False, allow_nan=False,
                            separators=(", ", ": "))
_compact = _COMPACT.encode


def _expands(value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value)
    return isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value)


def _emit(value: dict | list, depth: int, out: list[str]) -> None:
    pad = " " * (depth + 1)
    deeper = depth + 1 < _EXPANDED_DEPTH
    if isinstance(value, dict):
        out.append("{\n")
        items = [(_compact(k), v) for k, v in sorted(value.items())]
    else:
        out.append("[\n")
        items = [(None, v) for v in value]
    last = len(items) - 1
    for i, (key, item) in enumerate(items):
        out.append(pad if key is None else f"{pad}{key}: ")
        if deeper and _expands(item):
            _emit(item, depth + 1, out)
        else:
            out.append(_compact(item))
        out.append(",\n" if i < last else "\n")
    out.append(" " * depth + ("}" if isinstance(value, dict) else "]"))


def _render(doc: Any) -> str:
    if not _expands(doc):
        return _compact(doc) + "\n"
    out: list[str] = []
    _emit(doc, 0, out)
    out.append("\n")
    return "".join(out)


def canonical_json(doc: Any) -> str:
    """``doc`` as oasr writes every JSON document; deterministic, one final newline.

    Keys sorted at every level, ``indent=1`` for the document's structure (file, entries,
    entry fields, evidence points), and one line for what is deeper and for a list of plain
    values, so a diff shows one line per region, note, config or evidence point:
    ``[512, "b32x64x64_s3"]``. Deep values go through the C encoder, which keeps writes of
    large user-tier files fast.
    """
    return _render(thaw(doc))
