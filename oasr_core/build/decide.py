"""From logged measurements to a signature's matrix, partition and tuning entry.

Everything here works on what the measurement log holds, so a live build and a replay of
its log (``--from-log``) take the same decisions: the live build parses its own rows back
before deciding. The matrix a partition sees is built from full measurements only: at each
point, the arms that survived the halving there, plus the cross-evaluated finalists of the
other points. An arm eliminated early keeps only a coarse estimate and enters the matrix
only through cross-evaluation. Cross-evaluation runs later than the point's own run, so its
times are rescaled by the anchors measured in both runs (the fallback and the point's best),
which cancels drift of clocks and power between the two.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core.bench.records import ArmResult, ArmStatus
from oasr_core.database import Entry, Source
from oasr_core.measurements import arm_result, number
from oasr_core.partition import Cell, Partition, Point
from oasr_core.types import Sentinel

from .inputs import PlannedPoint


@attrs.frozen
class Measured:
    """The logged result of one point in one phase (``main`` or ``cross``)."""

    phase: str
    arms: tuple[ArmResult, ...] = attrs.field(converter=tuple)
    l2: str = "unknown"
    contended: bool = False
    run: str | None = None
    params: Mapping[str, Any] = attrs.field(factory=dict)
    """Logged params of each arm (``{"lane": ..., ...}`` for a config)."""

    @classmethod
    def from_rows(cls, phase: str, rows: Sequence[Mapping[str, Any]]) -> Measured:
        """The measurement the arm ``rows`` of one point and phase record."""
        first = rows[0] if rows else {}
        return cls(phase, [arm_result(r) for r in rows], l2=str(first.get("l2") or "unknown"),
                   contended=any(bool(r.get("contended")) for r in rows),
                   run=first.get("run"),
                   params={str(r["config"]): r.get("params") or {} for r in rows})

    def ok(self) -> dict[str, ArmResult]:
        """Timed arms by name."""
        return {a.name: a for a in self.arms if a.ok}

    def survivors(self) -> dict[str, ArmResult]:
        """Arms timed through every round (not eliminated by halving)."""
        return {a.name: a for a in self.arms if a.ok and a.stage is None}

    def ranked(self, alpha: float) -> list[ArmResult]:
        """Survivors, best objective first (ties by name)."""
        return sorted(self.survivors().values(), key=lambda a: (a.objective_ms(alpha), a.name))


def stand_ins(measured: Measured) -> dict[str, str]:
    """The configs a point's sentinel arms stood for there: config id -> sentinel arm.

    A sentinel arm's logged ``params.config`` names the lane config it launched (the lane
    default, the heuristic's pick at that size). That arm *is* the config's measurement at
    the point: the build does not time the config again there.
    """
    out: dict[str, str] = {}
    for name, params in sorted(measured.params.items()):
        if Sentinel.parse(name) is not None and isinstance(params, Mapping) and \
                params.get("config"):
            out.setdefault(str(params["config"]), name)
    return out


def finalists(mains: Mapping[int, Measured], alphas: Mapping[int, float], k: int,
              extra: Iterable[str] = ()) -> list[str]:
    """Each point's top ``k`` survivors, plus ``extra`` (the incumbents), sorted."""
    names = set(extra)
    for m, measured in mains.items():
        names.update(a.name for a in measured.ranked(alphas[m])[:k])
    return sorted(names)


def anchors(main: Measured, alpha: float, fallback: str) -> list[str]:
    """Arms re-measured in a point's cross run to rescale it: the fallback and the best."""
    ranked = main.ranked(alpha)
    names = [fallback] if fallback in main.survivors() else []
    if ranked and ranked[0].name not in names:
        names.append(ranked[0].name)
    return names


def _cell(arm: ArmResult, scale: float = 1.0) -> Cell:
    return Cell(gpu_ms=arm.median_ms * scale, sigma_ms=arm.sigma_ms * scale,
                issue_us=arm.issue_us,
                solo_ms=None if arm.solo_ms is None else arm.solo_ms * scale,
                overlap=arm.overlap, rounds=arm.rounds)


def cells(main: Measured, cross: Measured | None, anchor_names: Sequence[str]) -> dict[str, Cell]:
    """The matrix row of one point: its survivors, then rescaled cross-evaluated arms."""
    row = {name: _cell(a) for name, a in main.survivors().items()}
    if cross is None:
        return row
    got = cross.survivors()
    logs = [math.log(row[n].gpu_ms / got[n].median_ms) for n in anchor_names
            if n in row and n in got and row[n].gpu_ms > 0 and got[n].median_ms > 0]
    scale = math.exp(sum(logs) / len(logs)) if logs else 1.0
    for name, arm in got.items():
        if name not in row:
            row[name] = _cell(arm, scale)
    return row


def to_point(pp: PlannedPoint, row: Mapping[str, Cell]) -> Point:
    """The partition's view of a planned point and its matrix row."""
    return Point(m=pp.m, weight=pp.weight, cells=row, alpha=pp.alpha, must=pp.must,
                 incumbent=pp.incumbent, fill=pp.fill)


def point_json(p: Point) -> dict[str, Any]:
    """A point of the matrix as JSON (kept in the checkpoint for the coverage basis)."""
    return {"m": p.m, "weight": p.weight, "alpha": p.alpha, "must": p.must,
            "incumbent": p.incumbent, "fill": p.fill,
            "cells": {n: [c.gpu_ms, c.sigma_ms, c.issue_us, c.solo_ms, c.overlap, c.rounds]
                      for n, c in sorted(p.cells.items())}}


def point_from_json(raw: Mapping[str, Any]) -> Point:
    """Inverse of :func:`point_json`."""
    return Point(m=int(raw["m"]), weight=float(raw["weight"]), alpha=float(raw["alpha"]),
                 must=bool(raw["must"]), incumbent=raw.get("incumbent"),
                 fill=bool(raw.get("fill")),
                 cells={n: Cell(*v) for n, v in raw["cells"].items()})


def _evidence(p: Point, measured: Measured, fallback: str, chosen: str) -> dict[str, Any]:
    order = sorted(p.cells, key=lambda n: (p.time(n), n))
    shown = dict.fromkeys([*order[:4], fallback, chosen, "torch"])
    out: dict[str, Any] = {n: [number(p.cells[n].gpu_ms, 7), number(p.cells[n].sigma_ms, 7),
                               p.cells[n].rounds] for n in shown if n in p.cells}
    out["_l2"] = measured.l2
    if p.alpha:
        out["_alpha"] = round(p.alpha, 4)
    if measured.contended:
        out["_contended"] = True
    return out


def _point_note(axis: str, p: Point, choice: str, fallback: str, contended: bool) -> str:
    star = "*" if p.must else ""
    t_fb, t_ch = p.time(fallback), p.time(choice)
    if choice != fallback:
        why = f"{t_fb / t_ch:.2f}x vs {fallback}" if math.isfinite(t_fb) else \
            f"{fallback} not measured"
    else:
        best = min(p.cells, key=lambda n: (p.time(n), n))
        why = "best" if best == fallback else f"best {best} {t_fb / p.time(best):.2f}x"
    return f"{axis}={p.m}{star}: {choice} ({why})" + (" [contended]" if contended else "")


def make_entry(axis: str, points: Sequence[Point], measured: Mapping[int, Measured],
               part: Partition, fallback: str, failures: Sequence[str] = (),
               exact: Mapping[str, str] | None = None) -> Entry | None:
    """The tuning entry of a partition, with evidence and per-point notes (None: no region
    and no exact point).

    ``axis`` names the dynamic axis in notes (``M``); ``failures`` are notes on points
    that could not be measured; ``exact`` the entry's exact points (point key -> choice).
    """
    if not part.regions and not exact:
        return None
    pts = sorted(points, key=lambda p: p.m)
    evidence = {}
    notes = list(part.notes)
    for p, choice in zip(pts, part.choices, strict=True):
        evidence[f"{axis}={p.m}"] = _evidence(p, measured[p.m], fallback, choice)
        notes.append(_point_note(axis, p, choice, fallback, measured[p.m].contended))
    notes.extend(failures)
    return Entry(regions=part.regions, points=dict(exact or {}), evidence=evidence,
                 source=Source.AOT, notes=notes)


def failure_note(axis: str, m: int, main: Measured) -> str:
    """Why nothing was timed at a point: the first failure reasons of its arms."""
    reasons = sorted({f"{a.status.value}: {a.reason}" for a in main.arms
                      if a.status is not ArmStatus.OK and a.reason})
    what = "; ".join(reasons[:2]) or "no arm"
    return f"{axis}={m}: not measured ({what})"
