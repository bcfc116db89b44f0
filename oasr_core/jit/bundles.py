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
the first declaration: the prelude and the ``#include`` of its lane header) must be the same
for every member (:func:`head_of`), and its *body* (the rest) must declare nothing that clashes
when each body is wrapped in its own namespace (the C-ABI units of :mod:`oasr_core.jit.kit`
qualify every name they use and export ``extern "C"`` launchers, which a namespace does not
rename).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    """The preprocessor lines that must be the same for every unit of one bundle."""
    head, _ = _split(unit.source)
    return "\n".join(line for line in head if line.strip().startswith("#"))


def bundle(name: str, units: Sequence[TranslationUnit]) -> TranslationUnit:
    """One translation unit called ``name`` holding every unit of ``units`` (module
    docstring); a single unit is returned as it is."""
    if not units:
        raise ValueError(f"bundle {name!r} has no units")
    if len(units) == 1:
        return units[0]
    heads = {head_of(u) for u in units}
    if len(heads) != 1:
        raise ValueError(f"bundle {name!r}: units {', '.join(u.name for u in units)} have "
                         "different preprocessor heads and cannot share one file")
    parts = [f"// bundle of {len(units)} units: {', '.join(u.name for u in units)}",
             heads.pop(), ""]
    for i, unit in enumerate(units):
        _, body = _split(unit.source)
        parts += [f"namespace oasr_bundle_{i} {{  // unit {unit.name}", *body,
                  f"}}  // namespace oasr_bundle_{i}", ""]
    return TranslationUnit(name=name, source="\n".join(parts),
                           exports=tuple(s for u in units for s in u.exports))


def bundles_of(units: Sequence[TranslationUnit]) -> dict[str, TranslationUnit]:
    """Each of ``units`` by name -> its bundle: one bundle per preprocessor head
    (:func:`head_of`), named after its first unit; a unit alone under its head is itself."""
    by_head: dict[str, list[TranslationUnit]] = {}
    for unit in units:
        by_head.setdefault(head_of(unit), []).append(unit)
    out: dict[str, TranslationUnit] = {}
    for same in by_head.values():
        tu = bundle(f"{same[0].name}+{len(same) - 1}", same)
        out.update(dict.fromkeys((u.name for u in same), tu))
    return out


def plan_groups(items: Sequence[T], slots: int, max_size: int = MAX_BUNDLE
                ) -> list[tuple[T, ...]]:
    """``items`` (in compile priority order) cut into consecutive groups of near-equal size,
    ``slots`` of them where none exceeds ``max_size`` (more otherwise): one group per nvcc
    slot, so a build compiles in one wave where it can. Fewer items than slots: one each.
    A family bundles a group's units whose heads match (:func:`head_of`)."""
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
