"""Bundles: several generated translation units compiled as one ``.cu`` file.

Most of what nvcc spends on one CUTLASS unit is shared with its neighbours: parsing the
headers and instantiating the collective templates every config of a lane uses. Measured with
nvcc 13.0 on one core here (2026-12-01), one sm90 gemm unit (fp16) took 30-34 s, three of them
as one file 49 s. A build that compiles more units than it has nvcc slots therefore compiles
them as bundles (:func:`plan_groups`), one file per slot: the same kernels for about half the
CPU time, in one wave instead of two or three.

A bundle is only for objects a build compiles for itself: its object key is its own text's, so
no production module reuses it (a production module links one object per unit, as before).

The units must come from the same generator: a unit's *head* (its preprocessor lines before
the first declaration: the prelude and the ``#include`` of its lane header) may differ between
members only in ``#include`` lines (:func:`head_of`, :func:`prelude_of`; the bundle includes
every member's headers, which are include-guarded), and its *body* (the rest) must declare
nothing that clashes when each body is wrapped in its own namespace (the C-ABI units of
:mod:`oasr_core.jit.kit` qualify every name they use and export ``extern "C"`` launchers,
which a namespace does not rename). A unit of another op over the same main loop (gemm's
fused-residual kernel of a config beside the config's own unit) thus shares a file with it:
measured with nvcc 13.0 here (2026-12-01), one sm90 config's unit with its fused-residual
kernel took 52.9 s of CPU, the unit alone 53.9 s.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypeVar

from .spec import TranslationUnit

MAX_BUNDLE = 4
"""Units per bundle at most: nvcc's memory and a bundle's wall time grow with its kernels, and a
build waits for the whole bundle of the signature it measures first."""

T = TypeVar("T")


def _split(text: str) -> tuple[list[str], list[str]]:
    """``text``'s head (comment and preprocessor lines up to the first other line) and body."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped and not stripped.startswith(("//", "#")):
            return lines[:i], lines[i:]
    return lines, []


def head_of(unit: TranslationUnit) -> str:
    """``unit``'s preprocessor lines before its first declaration."""
    head, _ = _split(unit.source)
    return "\n".join(line for line in head if line.strip().startswith("#"))


def _is_include(line: str) -> bool:
    return line.strip().replace(" ", "").startswith("#include")


def prelude_of(unit: TranslationUnit) -> str:
    """``unit``'s head less its ``#include`` lines: what must be the same for every unit of
    one bundle (a ``#define`` or ``#undef`` would change its neighbours' headers)."""
    return "\n".join(line for line in head_of(unit).splitlines() if not _is_include(line))


def _merged_head(units: Sequence[TranslationUnit]) -> str:
    """The first unit's head, then every other member's ``#include`` lines it lacks."""
    lines = head_of(units[0]).splitlines()
    for unit in units[1:]:
        lines += [line for line in head_of(unit).splitlines()
                  if _is_include(line) and line not in lines]
    return "\n".join(lines)


def bundle(name: str, units: Sequence[TranslationUnit]) -> TranslationUnit:
    """One translation unit called ``name`` holding every unit of ``units`` (module
    docstring); a single unit is returned as it is."""
    if not units:
        raise ValueError(f"bundle {name!r} has no units")
    if len(units) == 1:
        return units[0]
    if len({prelude_of(u) for u in units}) != 1:
        raise ValueError(f"bundle {name!r}: units {', '.join(u.name for u in units)} have "
                         "different preprocessor preludes and cannot share one file")
    parts = [f"// bundle of {len(units)} units: {', '.join(u.name for u in units)}",
             _merged_head(units), ""]
    for i, unit in enumerate(units):
        _, body = _split(unit.source)
        parts += [f"namespace oasr_bundle_{i} {{  // unit {unit.name}", *body,
                  f"}}  // namespace oasr_bundle_{i}", ""]
    return TranslationUnit(name=name, source="\n".join(parts),
                           exports=tuple(s for u in units for s in u.exports))


def members_of(unit: TranslationUnit) -> tuple[str, ...]:
    """The names of the units :func:`bundle` put in ``unit`` (``(unit.name,)`` for a unit
    that is not a bundle), read back from the first line it writes."""
    first = unit.source.split("\n", 1)[0]
    prefix = "// bundle of "
    if first.startswith(prefix) and " units: " in first:
        return tuple(first.split(" units: ", 1)[1].split(", "))
    return (unit.name,)


def bundles_of(units: Sequence[TranslationUnit]) -> dict[str, TranslationUnit]:
    """Each of ``units`` by name -> its bundle: one bundle per preprocessor prelude
    (:func:`prelude_of`), named after its first unit; a unit alone under its prelude is
    itself."""
    by_head: dict[str, list[TranslationUnit]] = {}
    for unit in units:
        by_head.setdefault(prelude_of(unit), []).append(unit)
    out: dict[str, TranslationUnit] = {}
    for same in by_head.values():
        tu = bundle(f"{same[0].name}+{len(same) - 1}", same)
        out.update(dict.fromkeys((u.name for u in same), tu))
    return out


def variant_bundles(units: Sequence[TranslationUnit], primaries: Collection[str]
                    ) -> tuple[TranslationUnit, ...]:
    """``units`` with every primary unit and its *variants* compiled as one file (:func:`bundle`).

    ``primaries`` names the units that compile a config of their own (a lane's configs'
    ``unit`` parameters). A variant is any other unit named ``<primary>_<suffix>`` after a
    primary in ``units``: by the naming every family's generator follows, another epilogue
    over that config's main loop (gemm's fused-residual ``X_res``, a W8A8 family's
    fused-quantize ``X_quant``). nvcc spends a unit's time on the main loop, so a variant
    beside it costs little (gemm: 52.9 s of CPU for the pair, 53.9 s for the unit alone, nvcc
    13.0, 2026-12-01): a module of ``n`` configs with their variants compiles ``n`` files
    instead of ``2n``. Units whose preludes differ (:func:`prelude_of`) stay apart. The
    order is kept (a bundle takes its primary's place); a unit without variants is returned
    as it is.
    """
    names = {u.name for u in units}
    owner: dict[str, str] = {}
    for unit in units:
        if unit.name in primaries:
            continue
        stem = unit.name
        while "_" in stem:
            stem = stem.rsplit("_", 1)[0]
            if stem in names and stem in primaries:
                owner[unit.name] = stem
                break
    members: dict[str, list[TranslationUnit]] = {}
    for unit in units:
        members.setdefault(owner.get(unit.name, unit.name), []).append(unit)
    out: list[TranslationUnit] = []
    for unit in units:
        if unit.name in owner:
            continue
        group = members[unit.name]
        try:
            out.append(bundle(f"{unit.name}+{len(group) - 1}", group) if len(group) > 1
                       else unit)
        except ValueError:  # different preludes: compiled apart, as before
            out.extend(group)
    return tuple(out)


class Group(tuple):
    """One group of :func:`plan_groups` (a tuple of its items) that also says which ops of the
    build time any of them (``ops``), so a family compiles into the group's bundle only the
    kernels those ops need. A plain tuple says nothing: every op's kernels."""

    ops: frozenset[str]

    def __new__(cls, items: Sequence[object], ops: frozenset[str] | set[str]) -> Group:
        group = super().__new__(cls, items)
        group.ops = frozenset(ops)
        return group

    def __reduce__(self) -> tuple:
        return (Group, (tuple(self), self.ops))


def ops_of(group: Sequence[object]) -> frozenset[str] | None:
    """The ops a group's bundle serves (None: any, for a plain tuple)."""
    return getattr(group, "ops", None)


def plan_groups(items: Sequence[T], slots: int, max_size: int = MAX_BUNDLE
                ) -> list[tuple[T, ...]]:
    """``items`` (in compile priority order) cut into consecutive groups of near-equal size,
    ``slots`` of them where none exceeds ``max_size`` (more otherwise): one group per nvcc
    slot, so a build compiles in one wave where it can. Fewer items than slots: one each.
    A family bundles a group's units whose preludes match (:func:`prelude_of`)."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, not {slots}")
    if not items:
        return []
    count = min(len(items), max(slots, -(-len(items) // max_size)))
    size, extra = divmod(len(items), count)
    groups, start = [], 0
    for g in range(count):
        end = start + size + (1 if g < extra else 0)
        groups.append(tuple(items[start:end]))
        start = end
    return groups
