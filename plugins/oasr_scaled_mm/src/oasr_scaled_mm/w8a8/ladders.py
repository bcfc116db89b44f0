"""Tile ladders: a family's untuned selector as data, fitted on measured sweeps.

A :class:`Ladder` lists a lane's data-parallel configs from the largest tile to the smallest
with a fill threshold per rung and K band: the first rung whose CTA count
``ceil(M / TM) * ceil(N / TN)`` reaches ``fill * SM count`` serves (:func:`pick_config`), the
last (fill 0) catches everything. The unfitted rule is half a wave for every rung
(:func:`half_wave_ladder`); :func:`fit_ladder` searches the thresholds that minimise the
geomean regret over measured rows (``(N, K, M, {config: time})``, every rung timed), and
:func:`ladder_regret` scores a table on rows it was not fitted on. Fitted tables ship as JSON
beside a family's heuristic module (:func:`write_fitted` / :func:`read_fitted` /
:func:`load_fitted`: per ``(lane, arch)``, with the evidence behind each), and
:func:`digest` names the tables a heuristic reads, for the tuning files' soft stamp.

The int8 and fp8 families keep their tables and lane checks; the mechanism is here. Importing
this module imports no torch.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from oasr_core.errors import OasrWarning
from oasr_core.types import Config, Lane, Problem, Sentinel

HALF_WAVE = 0.5
"""The unfitted rule's fill: every rung needs half a wave of CTAs."""
FILL_GRID = (0.0, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, math.inf)
"""Threshold values :func:`fit_ladder` searches (``inf`` takes a rung off the ladder)."""
MISSING_PENALTY = 10.0
"""Regret charged when a table picks a config a row did not measure."""
INF = math.inf
FITTED_SCHEMA_VERSION = 1
_ARCH_RE = re.compile(r"^sm[0-9]+$")


def _tuple2(value: Iterable[Iterable[float]]) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in value)


@attrs.frozen
class Ladder:
    """A lane's tile ladder: rungs from largest to smallest and their fill thresholds.

    ``fill[r][b]`` is the fraction of the SM count rung ``r`` needs in K band ``b``; band
    ``b`` holds ``k_bounds[b-1] < K <= k_bounds[b]`` (the last band everything above the last
    bound). The last rung's thresholds are 0 so that every shape gets a tile.
    """

    lane: str
    rungs: tuple[str, ...] = attrs.field(converter=tuple)
    k_bounds: tuple[int, ...] = attrs.field(converter=tuple)
    fill: tuple[tuple[float, ...], ...] = attrs.field(converter=_tuple2)
    fitted: bool = False
    """False for a hand-written table, True for one :func:`fit_ladder` produced."""

    def __attrs_post_init__(self) -> None:
        if not self.rungs:
            raise ValueError(f"ladder of {self.lane}: no rungs")
        if list(self.k_bounds) != sorted(set(self.k_bounds)):
            raise ValueError(f"ladder of {self.lane}: k_bounds {self.k_bounds} must increase")
        bands = len(self.k_bounds) + 1
        if len(self.fill) != len(self.rungs) or any(len(r) != bands for r in self.fill):
            raise ValueError(f"ladder of {self.lane}: fill must be {len(self.rungs)} rungs x "
                             f"{bands} K bands")
        if any(v != 0.0 for v in self.fill[-1]):
            raise ValueError(f"ladder of {self.lane}: the last rung must have fill 0")
        if any(v < 0 or math.isnan(v) for row in self.fill for v in row):
            raise ValueError(f"ladder of {self.lane}: fill values must be >= 0")

    def band(self, k: int) -> int:
        """The K band of ``k``."""
        for i, bound in enumerate(self.k_bounds):
            if k <= bound:
                return i
        return len(self.k_bounds)

    def pick(self, n: int, k: int, m: int, sm_count: int,
             tiles: Mapping[str, Sequence[int]]) -> int:
        """Index of the rung serving ``(N, K, M)``; ``tiles`` maps a rung id to its tile."""
        b = self.band(k)
        for i, rung in enumerate(self.rungs):
            tm, tn = tiles[rung][:2]
            ctas = -(-m // tm) * -(-n // tn)
            if ctas >= self.fill[i][b] * sm_count:
                return i
        return len(self.rungs) - 1

    def to_json(self) -> dict[str, Any]:
        """The table as JSON data (an infinite fill is the string ``"inf"``)."""
        return {"lane": self.lane, "rungs": list(self.rungs), "k_bounds": list(self.k_bounds),
                "fill": [[_json_fill(v) for v in row] for row in self.fill],
                "fitted": self.fitted}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ladder:
        """The table of :meth:`to_json` data; ``ValueError`` naming what is wrong.

        Keys other than the table's own (``arch``, ``evidence`` of a fitted-file entry) are
        ignored; ``fitted`` defaults to False.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a ladder must be a JSON object, got {type(data).__name__}")
        missing = [key for key in ("lane", "rungs", "k_bounds", "fill") if key not in data]
        if missing:
            raise ValueError(f"ladder lacks {', '.join(missing)}")
        lane, rungs, bounds, fill = (data[key] for key in ("lane", "rungs", "k_bounds", "fill"))
        if not isinstance(lane, str) or not lane:
            raise ValueError(f"ladder lane must be a name, got {lane!r}")
        if not isinstance(rungs, list) or not all(isinstance(r, str) for r in rungs):
            raise ValueError(f"ladder of {lane}: rungs must be a list of config ids")
        if not isinstance(bounds, list) or not all(
                isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            raise ValueError(f"ladder of {lane}: k_bounds must be a list of integers")
        if not isinstance(fill, list) or not all(isinstance(row, list) for row in fill):
            raise ValueError(f"ladder of {lane}: fill must be a list of lists")
        fitted = data.get("fitted", False)
        if not isinstance(fitted, bool):
            raise ValueError(f"ladder of {lane}: fitted must be true or false")
        values = [[_parse_fill(v, lane) for v in row] for row in fill]
        return cls(lane=lane, rungs=rungs, k_bounds=bounds, fill=values, fitted=fitted)

    def to_source(self) -> str:
        """The table as a Python literal (for reading; fitted tables ship as JSON, see
        :func:`write_fitted`)."""
        def num(v: float) -> str:
            return "INF" if math.isinf(v) else repr(v)

        rows = "\n".join(f"        ({', '.join(num(v) for v in row)},),  # {rung}"
                         for rung, row in zip(self.rungs, self.fill, strict=True))
        return (f"Ladder(\n    lane={self.lane!r},\n    rungs={self.rungs!r},\n"
                f"    k_bounds={self.k_bounds!r},\n    fill=(\n{rows}\n    ),\n"
                f"    fitted={self.fitted!r},\n)")


def _json_fill(value: float) -> float | str:
    return "inf" if math.isinf(value) else value


def _parse_fill(value: Any, lane: str) -> float:
    if value == "inf":
        return INF
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"ladder of {lane}: fill value {value!r} is not a number or \"inf\"")
    return float(value)


@attrs.frozen
class FittedLadder:
    """One entry of a fitted-ladder file: a table, the arch family it was fitted on, and the
    evidence behind it (free-form JSON: rows, regrets, GPU, log)."""

    arch: str
    ladder: Ladder
    evidence: Mapping[str, Any] = attrs.field(factory=dict, eq=False)

    @property
    def key(self) -> tuple[str, str]:
        """``(lane, arch)``, the key of a family's fitted tables."""
        return self.ladder.lane, self.arch

    def to_json(self) -> dict[str, Any]:
        """The file entry: the table's keys plus ``arch`` and ``evidence``."""
        data = self.ladder.to_json()
        return {"lane": data.pop("lane"), "arch": self.arch, **data,
                "evidence": dict(self.evidence)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FittedLadder:
        """An entry of :meth:`to_json`; ``ValueError`` naming what is wrong."""
        ladder = Ladder.from_json(data)
        arch = data.get("arch")
        if not isinstance(arch, str) or not _ARCH_RE.match(arch):
            raise ValueError(f"ladder of {ladder.lane}: arch must be an arch family like "
                             f"'sm90', got {arch!r}")
        evidence = data.get("evidence", {})
        if not isinstance(evidence, Mapping):
            raise ValueError(f"ladder of {ladder.lane} on {arch}: evidence must be an object")
        return cls(arch=arch, ladder=ladder, evidence=evidence)


def read_fitted(path: str | os.PathLike[str],
                check_rungs: Callable[[Ladder], None]) -> list[FittedLadder]:
    """The entries of a fitted-ladder file; raises ``OSError`` (unreadable) or ``ValueError``
    (not JSON, wrong schema, a bad table, a duplicate key, or a table ``check_rungs`` refuses:
    a family's check that the lane is its own and the rungs are data-parallel configs)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise ValueError("the file must hold a JSON object")
    version = data.get("schema_version")
    if version != FITTED_SCHEMA_VERSION:
        raise ValueError(f"schema_version {version!r} (expected {FITTED_SCHEMA_VERSION})")
    entries = data.get("ladders")
    if not isinstance(entries, list):
        raise ValueError("'ladders' must be a list")
    out: list[FittedLadder] = []
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(entries):
        try:
            fitted = FittedLadder.from_json(entry)
            check_rungs(fitted.ladder)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"ladders[{i}]: {exc}") from None
        if fitted.key in seen:
            raise ValueError(f"ladders[{i}]: a second table for {fitted.key}")
        seen.add(fitted.key)
        out.append(fitted)
    return out


def write_fitted(path: str | os.PathLike[str],
                 ladders: Iterable[FittedLadder] | Mapping[tuple[str, str], Ladder],
                 check_rungs: Callable[[Ladder], None]) -> Path:
    """Write a fitted-ladder file (atomically; entries sorted by lane and arch).

    ``ladders`` are :class:`FittedLadder` entries, or a mapping shaped like
    a family's fitted tables (``(lane, arch) -> Ladder``, no evidence). Every table is checked
    as :func:`read_fitted` checks it before anything is written.
    """
    if isinstance(ladders, Mapping):
        entries = []
        for (lane, arch), ladder in ladders.items():
            if ladder.lane != lane:
                raise ValueError(f"write_fitted: key lane {lane!r} holds a table of "
                                 f"{ladder.lane!r}")
            entries.append(FittedLadder(arch=arch, ladder=ladder))
    else:
        entries = list(ladders)
    keys = [e.key for e in entries]
    if len(set(keys)) != len(keys):
        raise ValueError(f"write_fitted: duplicate (lane, arch) in {keys}")
    for e in entries:
        check_rungs(e.ladder)
        if not _ARCH_RE.match(e.arch):
            raise ValueError(f"write_fitted: arch {e.arch!r} is not like 'sm90'")
    body = {"schema_version": FITTED_SCHEMA_VERSION,
            "ladders": [e.to_json() for e in sorted(entries, key=lambda e: e.key)]}
    text = json.dumps(body, indent=1, allow_nan=False) + "\n"
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    return target


def load_fitted(path: str | os.PathLike[str], check_rungs: Callable[[Ladder], None], *,
                label: str) -> dict[tuple[str, str], Ladder]:
    """The tables of a fitted-ladder file by ``(lane, arch)`` (a family's per-arch overrides).

    A missing file is no tables. An unreadable or malformed one is one
    :class:`~oasr_core.errors.OasrWarning` naming the file and the problem, and no tables:
    the unfitted ones serve (a file is used whole or not at all).
    """
    try:
        entries = read_fitted(path, check_rungs)
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        warnings.warn(f"{label}: fitted ladder file {path} is not usable ({exc}); the "
                      "unfitted ladder tables serve", OasrWarning, stacklevel=2)
        return {}
    return {e.key: e.ladder for e in entries}


def half_wave_ladder(lane: Lane, k_bounds: Sequence[int]) -> Ladder:
    """The unfitted rule for any lane: its data-parallel configs by tile area, half a wave."""
    dp = [c for c in lane.config_space if not c.params.get("stream_k", False)
          and lane.is_feasible(c)]
    by_tile: dict[tuple[int, int], Config] = {}
    for c in dp:
        by_tile.setdefault(tuple(c.params["tile"][:2]), c)
    rungs = sorted(by_tile.items(), key=lambda kv: -kv[0][0] * kv[0][1])
    bands = len(k_bounds) + 1
    fill = [(HALF_WAVE,) * bands for _ in rungs[:-1]] + [(0.0,) * bands]
    return Ladder(lane=lane.name, rungs=[c.id for _, c in rungs], k_bounds=k_bounds, fill=fill)


def check_ladder(ladder: Ladder, lane: Lane) -> None:
    """Raise ``ValueError`` unless every rung is a data-parallel, feasible config of ``lane``."""
    for rung in ladder.rungs:
        config = lane.config(rung)
        if config is None:
            raise ValueError(f"ladder of {lane.name}: {rung!r} is not in the lane's space")
        if config.params.get("stream_k", False):
            raise ValueError(f"ladder of {lane.name}: {rung!r} is a Stream-K config")
        if not lane.is_feasible(config):
            raise ValueError(f"ladder of {lane.name}: {rung!r} is infeasible")


def tiles_of(lane: Lane, ladder: Ladder) -> dict[str, Sequence[int]]:
    """Each rung's tile (the lane's configs)."""
    return {r: lane.config(r).params["tile"] for r in ladder.rungs}


def pick_config(ladder: Ladder, problem: Problem, lane: Lane, sm_count: int) -> Config | None:
    """The config ``ladder`` serves ``problem`` with on ``lane`` with ``sm_count`` SMs.

    The rung the fill rule picks serves only if the lane can run the shape with it
    (``Lane.supports``); else the next smaller rung that can, and None (the torch path) when
    none can, as for a width that is not 16-byte aligned. A table naming configs the lane
    lacks is replaced by the half-wave ladder over the same K bands.
    """
    tiles = {r: c.params["tile"] for r in ladder.rungs if (c := lane.config(r)) is not None}
    if len(tiles) != len(ladder.rungs):
        ladder = half_wave_ladder(lane, ladder.k_bounds)
        tiles = tiles_of(lane, ladder)
    i = ladder.pick(problem.dim("N"), problem.dim("K"), problem.m, sm_count, tiles)
    for rung in ladder.rungs[i:]:
        config = lane.config(rung)
        if lane.supports(config, problem):
            return config
    return None


def ladder_heuristic(ladder_for: Callable[[Lane, str | None], Ladder],
                     device: Callable[[Lane], tuple[str, int]]) -> dict[str, Callable[..., Any]]:
    """A format's ``heuristic_config`` and ``sentinel_heuristic`` over its tile ladders:
    ``ladder_for(lane, arch)`` the ladder, ``device(lane)`` the ``(arch family, SM count)`` of
    this process's device for the lane (the lane's default arch where the device is not one
    of its arches)."""

    def heuristic_config(problem: Problem, lane: Lane, *, sm_count: int | None = None,
                         arch: str | None = None) -> Config | None:
        """The ladder's config for ``problem`` on ``lane`` with ``sm_count`` SMs on ``arch``
        (both default to this process's device, else the lane's default arch). The rung the
        fill rule picks serves only if the lane can run the shape with it (``Lane.supports``);
        else the next smaller rung that can, and None (the torch path) when none can, as for
        a width that is not 16-byte aligned (:func:`pick_config`)."""
        if sm_count is None or arch is None:
            found_arch, found_sms = device(lane)
            arch = arch or found_arch
            sm_count = sm_count or found_sms
        return pick_config(ladder_for(lane, arch), problem, lane, sm_count)

    def sentinel_heuristic(problem: Problem, lane: Lane) -> Config | None:
        """``Family.sentinel_heuristic``: :func:`heuristic_config` on this process's device."""
        return heuristic_config(problem, lane)

    return {"heuristic_config": heuristic_config, "sentinel_heuristic": sentinel_heuristic}


def data_parallel_check(lanes: Sequence[str],
                        space: Callable[[str], Iterable[Config]]) -> Callable[[Ladder], None]:
    """A ``check_rungs`` for :func:`read_fitted`: ``ValueError`` unless the table is one of
    ``lanes`` and its rungs are data-parallel configs of ``space(lane)`` (checked without
    building the lane records)."""
    def check(ladder: Ladder) -> None:
        if ladder.lane not in lanes:
            raise ValueError(f"lane {ladder.lane!r} is not one of {', '.join(lanes)}")
        data_parallel = {c.id for c in space(ladder.lane) if not c.params.get("stream_k", False)}
        unknown = [r for r in ladder.rungs if r not in data_parallel]
        if unknown:
            raise ValueError(f"ladder of {ladder.lane}: {', '.join(unknown)} not data-parallel "
                             "configs of the lane")

    return check


def digest(unfitted: Mapping[str, Ladder], fitted: Mapping[tuple[str, str], Ladder]) -> str:
    """16 hex digits naming every table a heuristic reads: its unfitted tables by lane and
    its fitted ones by ``(lane, arch)`` (a family's ``heuristic`` soft stamp)."""
    tables = {"unfitted": {name: ladder.to_json() for name, ladder in sorted(unfitted.items())},
              "fitted": [{"arch": arch, **ladder.to_json()}
                         for (_lane, arch), ladder in sorted(fitted.items())]}
    text = json.dumps(tables, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- fitting ---------------------------------------------------------------------------------

Row = tuple[int, int, int, Mapping[str, float]]
"""A measured row: ``(N, K, M, {config_id: time})`` (sentinel arms such as ``torch`` ignored)."""


@attrs.frozen
class LadderFit:
    """What :func:`fit_ladder` found: the table and its geomean regret before and after."""

    ladder: Ladder
    regret: float
    """Geomean over the rows of time(picked) / time(best measured config)."""
    start_regret: float
    """The same for the starting table."""
    rows: int
    """Rows used (those with at least one ladder rung measured)."""


def _best(times: Mapping[str, float]) -> float:
    values = [t for c, t in times.items() if Sentinel.parse(c) is None and t > 0
              and math.isfinite(t)]
    return min(values) if values else math.nan


def fit_ladder(rows: Iterable[Row], *, lane: Lane, sm_count: int, start: Ladder,
               rungs: Sequence[str] | None = None, k_bounds: Sequence[int] | None = None,
               grid: Sequence[float] = FILL_GRID, exhaustive_limit: int = 20000) -> LadderFit:
    """Fit a ladder's thresholds to measured rows by grid search (min geomean regret).

    Every K band is fitted on its own rows. With few enough combinations
    (``len(grid) ** (rungs - 1) <= exhaustive_limit``) the search is exhaustive; otherwise it
    is coordinate descent over the grid from the starting table and from the half-wave table,
    sweeping until no threshold moves. Among equal regrets the earlier candidate (nearest the
    start for descent, smallest grid values for exhaustive search) is kept. ``start`` is the
    table to start from (a family passes its lane's current one); ``rungs``/``k_bounds``
    override its rungs and bands.
    """
    rung_ids = tuple(rungs) if rungs is not None else start.rungs
    bounds = tuple(k_bounds) if k_bounds is not None else start.k_bounds
    probe = Ladder(lane=lane.name, rungs=rung_ids, k_bounds=bounds,
                   fill=[_zeros(len(bounds) + 1)] * len(rung_ids))
    check_ladder(probe, lane)
    tiles = tiles_of(lane, probe)
    if (start.rungs, start.k_bounds) == (rung_ids, bounds):
        start_fill = start.fill
    else:
        start_fill = tuple(tuple(HALF_WAVE if i < len(rung_ids) - 1 else 0.0
                                 for _ in range(len(bounds) + 1)) for i in range(len(rung_ids)))
    by_band: dict[int, list[tuple[list[float], list[float]]]] = {}
    used = 0
    for k, fills, logs in _row_terms(rows, rung_ids, tiles, sm_count):
        by_band.setdefault(probe.band(k), []).append((fills, logs))
        used += 1
    if not used:
        raise ValueError("fit_ladder: no row measured any rung of the ladder")
    columns = [list(col) for col in zip(*start_fill, strict=True)]
    start_total = fitted_total = 0.0
    for b, band_rows in by_band.items():
        start_t = columns[b][:-1]
        start_total += _cost(band_rows, start_t)
        best_t = _search(band_rows, start_t, list(grid), exhaustive_limit)
        fitted_total += _cost(band_rows, best_t)
        columns[b] = [*best_t, 0.0]
    fill = [tuple(columns[b][i] for b in range(len(bounds) + 1)) for i in range(len(rung_ids))]
    ladder = Ladder(lane=lane.name, rungs=rung_ids, k_bounds=bounds, fill=fill, fitted=True)
    return LadderFit(ladder=ladder, regret=math.exp(fitted_total / used),
                     start_regret=math.exp(start_total / used), rows=used)


def ladder_regret(ladder: Ladder, rows: Iterable[Row], *, lane: Lane,
                  sm_count: int) -> tuple[float, int]:
    """``(geomean regret, rows used)`` of ``ladder`` on measured rows, costed as
    :func:`fit_ladder` costs a table: time(picked) / time(best measured config), a pick the
    row did not measure charged :data:`MISSING_PENALTY`; rows that measured no rung are
    skipped (``(nan, 0)`` when none is left). For held-out evaluation of a fitted table.
    """
    check_ladder(ladder, lane)
    tiles = tiles_of(lane, ladder)
    total, used = 0.0, 0
    for k, fills, logs in _row_terms(rows, ladder.rungs, tiles, sm_count):
        b = ladder.band(k)
        total += _cost([(fills, logs)], [row[b] for row in ladder.fill[:-1]])
        used += 1
    return (math.exp(total / used), used) if used else (math.nan, 0)


def _row_terms(rows: Iterable[Row], rung_ids: Sequence[str], tiles: Mapping[str, Sequence[int]],
               sm_count: int) -> Iterable[tuple[int, list[float], list[float]]]:
    """``(K, fill per rung, log regret per rung)`` of each row that measured some rung."""
    for n, k, m, times in rows:
        best = _best(times)
        if not math.isfinite(best) or not any(r in times for r in rung_ids):
            continue
        fills = [(-(-m // tiles[r][0]) * -(-n // tiles[r][1])) / sm_count for r in rung_ids]
        logs = [math.log(times[r] / best) if r in times and times[r] > 0
                else math.log(MISSING_PENALTY) for r in rung_ids]
        yield k, fills, logs


def _zeros(n: int) -> tuple[float, ...]:
    return (0.0,) * n


def _cost(rows: list[tuple[list[float], list[float]]], thresholds: Sequence[float]) -> float:
    """Sum of log regrets when rung ``i`` needs ``fill >= thresholds[i]`` (last rung: always)."""
    total = 0.0
    for fills, logs in rows:
        for i, t in enumerate(thresholds):
            if fills[i] >= t:
                total += logs[i]
                break
        else:
            total += logs[-1]
    return total


def _search(rows: list[tuple[list[float], list[float]]], start: list[float],
            grid: list[float], exhaustive_limit: int) -> list[float]:
    free = len(start)
    if free == 0:
        return []
    if len(grid) ** free <= exhaustive_limit:
        best, best_cost = None, math.inf
        for combo in itertools.product(grid, repeat=free):
            cost = _cost(rows, combo)
            if cost < best_cost - 1e-12:
                best, best_cost = list(combo), cost
        return best
    candidates = []
    for seed in (list(start), [HALF_WAVE] * free):
        current, cost = list(seed), _cost(rows, seed)
        moved = True
        while moved:
            moved = False
            for i in range(free):
                for value in grid:
                    trial = current[:i] + [value] + current[i + 1:]
                    trial_cost = _cost(rows, trial)
                    if trial_cost < cost - 1e-12:
                        current, cost, moved = trial, trial_cost, True
        candidates.append((cost, current))
    return min(candidates, key=lambda c: c[0])[1]


def describe(ladder: Ladder) -> list[dict[str, Any]]:
    """The table as rows (rung, fill per band), for reports."""
    return [{"rung": r, "fill": list(f)} for r, f in zip(ladder.rungs, ladder.fill, strict=True)]
