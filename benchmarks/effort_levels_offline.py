"""Score `oasr tune build --effort` levels offline against exhaustive H200 build logs.

What it measures: for each exhaustive measurement log (every config timed at every point) and
each effort level (``oasr_core.build.effort.LEVELS``, plus a grid around them: the
calibrated model's top-k ``kN``, the structure's beside it ``sN`` (``s=``: the same k) and the
points ``pN``), the table the level would have built, replayed from only the
rows it would have measured (``build_from_log(..., options=BuildOptions(effort=...))``), and:

- regret against the log's oracle at every point of the log (`oasr tune evaluate`'s
  geomean / p95 / max), with the candidate sets ranked by the shipped calibrated model (fitted
  on log a itself: in-sample) and by models refitted with the scored signature held out
  (``held-out``: what a build at new widths sees);
- agreement between the level's tables replayed from two exhaustive builds of one census
  (weighted census points with the same choice or choices measured within 1%);
- cost: compile units (the distinct units of the candidate sets), arm rows measured, the
  GPU time the protocol's halving schedule would have spent on them (per arm: the log's
  median x calls per graph x its rounds under the level's ``stage_rounds``, ranked by the
  log's medians) and an estimated measuring wall time
  (``PER_POINT_S`` x points + ``PER_ARM_S`` x arm rows, fitted on the H200's exhaustive and
  pruned builds of this census: 95 s for 70 x 134, 50 s for 70 x 41).

No GPU. Run from the repository root::

    python3 benchmarks/effort_levels_offline.py --out benchmarks/results/effort_levels_offline.md
"""

from __future__ import annotations

import argparse
import gzip
import math
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oasr_core import build  # noqa: E402
from oasr_core.build import effort, model  # noqa: E402
from oasr_core.database import read_tuning_file  # noqa: E402
from oasr_core.evaluate import FixedSelector, TableSelector, agreement, evaluate  # noqa: E402
from oasr_core.measurements import read_logs, rows_by_run  # noqa: E402

PER_POINT_S = 0.43
"""Measuring seconds per point besides its arms (operands, reference, probes, separator,
cross-evaluation), from the two H200 builds of the Conformer census."""
PER_ARM_S = 0.0069
"""Measuring seconds per arm row (gate, issue timing, capture, rounds)."""

LOGS = [
    ("gemm", "gemm", [("a", ROOT / "db/sm90/measurements/gemm.jsonl"),
                      ("b", ROOT / "benchmarks/results/h200_gemm_build_b.jsonl.gz")]),
    ("gemm, 14 signatures of other widths", "gemm",
     [("a", ROOT / "benchmarks/results/h200_build_speed_speed14_reference.jsonl.gz")]),
    ("scaled_mm", "scaled_mm", [("a", ROOT / "db/sm90/measurements/scaled_mm.jsonl")]),
]
"""(section, family, exhaustive logs): the Conformer census's two gemm builds, the
14-signature census's exhaustive reference (``build_speed.py``), the int8 Conformer log."""
NAMED = tuple(effort.LEVELS)
"""The levels users pick (the grid's are added to ``effort.LEVELS`` for the replays only)."""
GRID = [(kc, ks, 14, None) for kc in (1, 2, 3, 4) for ks in (0, 1, None)] + [
    (2, 0, 12, None), (3, 0, 12, None), (2, None, 12, None), (3, None, 10, None),
    (3, None, 8, None)] + [(kc, 0, 14, u) for kc in (2, 3, 4) for u in (12, 15, 16, 20, 24)]
"""(calibrated top-k, structure top-k (None: the same), points, compile-unit cap of the
census (None: none)) around the levels."""


def plain(path: Path, scratch: Path) -> Path:
    """``path``, gunzipped into ``scratch`` when it is a ``.gz``."""
    if path.suffix != ".gz":
        return path
    out = scratch / path.stem
    with gzip.open(path, "rb") as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def held_out_rankers(arms: Sequence[Mapping[str, Any]], family: Any, lane: Any,
                     profile: Any) -> dict[str, Any]:
    """Per signature key: the rankers of a model refitted on the log without that signature."""
    from oasr_core.cost_model.quality import build_model

    out = {}
    for key in sorted({str(r["key"]) for r in arms}):
        rows = [r for r in arms if r.get("key") != key]
        fitted = build_model(rows, profile, ops=family.ops, lane=lane.name,
                             features=lane.cost_features)
        out[key] = model.rankers(fitted, lane)
    return out


def halving_rounds(n: int, stages: Sequence[int], finalists: int = 3) -> list[int]:
    """Rounds each of ``n`` arms (ranked best first) gets under successive halving."""
    if n == 0:
        return []
    keep1 = max(finalists, math.ceil(n / 2))
    rounds = []
    for rank in range(n):
        r = stages[0]
        if len(stages) > 1 and rank < keep1:
            r += stages[1]
        if len(stages) > 2 and rank < finalists:
            r += sum(stages[2:])
        rounds.append(r)
    return rounds


def cost(arms: Sequence[Mapping[str, Any]], sigs: Sequence[Any],
         allowed: Mapping[str, frozenset[str]] | None, lvl: Any,
         lane: Any) -> dict[str, float]:
    """Arm rows, halving GPU seconds, estimated measuring wall and compile units of a level."""
    from oasr_core.build.sources import LogSource

    src = LogSource(arms)
    rows = gpu_ms = 0.0
    points = 0
    units: set[str] = set()
    for sig in sigs:
        keep = allowed.get(sig.key) if allowed is not None else None
        for pp in sig.points:
            main = src.groups.get((sig.key, pp.m, "main"), [])
            if keep is not None:
                main = effort.restrict_rows(main, keep)
            ok = sorted((r for r in main if r.get("status") == "ok" and r.get("median_ms")),
                        key=lambda r: r["median_ms"])
            points += 1
            rows += len(main)
            for r, n in zip(ok, halving_rounds(len(ok), lvl.stage_rounds), strict=True):
                gpu_ms += r["median_ms"] * int(r.get("graph_calls") or 1) * n
            for r in main:
                cfg = lane.config(str(r.get("config"))) if lane is not None else None
                if cfg is not None:
                    units.add(cfg.params.get("unit", cfg.id))
                stood = (r.get("params") or {}).get("config")
                if stood and lane is not None and lane.config(stood) is not None:
                    units.add(lane.config(stood).params.get("unit", stood))
    return {"points": points, "rows": rows, "gpu_s": gpu_ms / 1000.0,
            "wall_s": PER_POINT_S * points + PER_ARM_S * rows, "units": len(units)}


def replay(log: Path, registry: Any, family: str, out: Path, options: Any,
           rankers: Any) -> Any:
    out.unlink(missing_ok=True)
    build.build_from_log([log], registry=registry, out=str(out), family=family,
                         options=options, rankers=rankers)
    return read_tuning_file(out)


def score(log: Path, fam: Any, tables: Mapping[str, Any]) -> Any:
    _runs, arms, _bad = read_logs([log])
    arms = [r for r in arms if r.get("family") == fam.name]
    sels = [FixedSelector("default", fam.fallback.value)]
    sels += [TableSelector(name, t, fam) for name, t in tables.items()]
    return evaluate(arms, fam, sels)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="markdown report to write")
    ap.add_argument("--no-grid", action="store_true", help="score the named levels only")
    ap.add_argument("--only", nargs="+", default=None, metavar="LEVEL",
                    help="score only these levels (named or grid names, e.g. k2+s0/p14/u16)")
    args = ap.parse_args(argv)

    from oasr_core.runtime import get_runtime

    registry = get_runtime().registry
    lines = ["# Effort levels scored offline against exhaustive H200 build logs", "",
             "`python3 benchmarks/effort_levels_offline.py` (no GPU). Each level's table is "
             "replayed from only the rows it would have measured of an exhaustive log "
             "(`oasr tune build --from-log LOG --effort LEVEL`); regret is against that log's "
             "oracle at every point it holds. `in-sample`: candidates ranked by the shipped "
             "model (fitted on log a); `held-out`: by a model refitted without the scored "
             "signature. Cost: compile units, arm rows, the GPU time of the halving schedule "
             "on those rows, and measuring wall estimated as "
             f"{PER_POINT_S} s/point + {PER_ARM_S} s/arm row (fitted on the H200 builds). "
             "Levels: `quick`, `default`, `exhaustive` as `oasr_core.build.effort.LEVELS` "
             "defines them (their compile-unit caps included); `kN+sM/pP[/uU]`: the "
             "calibration's top-N per point pooled per signature, the structure's top-M beside "
             "it (`s=`: N), P points, at most U compile units for the census.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for label, fam_name, logs in LOGS:
            fam = registry.family(fam_name)
            logs = [(n, plain(p, scratch)) for n, p in logs if p.exists()]
            if not logs:
                continue
            runs, arms, _bad = read_logs([logs[0][1]])
            arms = [r for r in arms if r.get("family") == fam_name]
            lane = registry.lane(str(arms[0]["lane"]))
            profile = model.profile_of(rows_by_run(runs).values())
            modelled = model.modelled(lane)
            variants = [(name, effort.LEVELS[name]) for name in NAMED]
            if modelled and not args.no_grid:
                for kc, ks, p, u in GRID:
                    name = f"k{kc}+s{'=' if ks is None else ks}/p{p}" + (f"/u{u}" if u else "")
                    effort.LEVELS[name] = effort.Effort(name, kc, structure_k=ks, max_points=p,
                                                        stage_rounds=(3, 6, 15), max_units=u)
                    variants.append((name, effort.LEVELS[name]))
            rank_modes = {"in-sample": None}
            if modelled:
                rank_modes["held-out"] = held_out_rankers(arms, fam, lane, profile)
            lines += [f"## {label} ({', '.join(f'{n}: {p.name}' for n, p in logs)})", "",
                      "| level | ranking | geo% | p95% | max% | agree a/b | units | points | "
                      "arm rows | halving GPU s | est. measure s |",
                      "|---|---|---|---|---|---|---|---|---|---|---|"]
            if args.only is not None:
                variants = [(n, lv) for n, lv in variants if n in args.only]
            for vname, lvl in variants:
                for mode, held in rank_modes.items():
                    if lvl.top_k is None and mode != "in-sample":
                        continue
                    rankers = (lambda key, h=held: h[key]) if held is not None else None
                    tables = {}
                    for run_name, path in logs:
                        out = scratch / f"{fam_name}_{run_name}_{vname.replace('/', '_')}.json"
                        opts = build.BuildOptions(fresh=True, effort=vname)
                        tables[run_name] = replay(path, registry, fam_name, out, opts, rankers)
                    report = score(logs[0][1], fam, tables)
                    stats = next(r for r in report.selectors if r.name == "a").overall
                    agree = agreement(report, "a", "b") if "b" in tables else math.nan
                    sigs = build.LogSource(arms).signatures(fam)
                    opts = opts.resolved()
                    sigs_l, allowed = build._replayed_level(
                        sigs, fam, lane, str(arms[0]["arch"]), opts, profile, rankers,
                        scratch / "none.json")
                    c = cost(arms, sigs_l, allowed, lvl, lane)
                    lines.append(
                        f"| {vname} | {mode} | {100 * stats.geomean:.1f} | "
                        f"{100 * stats.p95:.1f} | {100 * stats.max:.1f} | "
                        f"{'-' if math.isnan(agree) else f'{100 * agree:.1f}%'} | "
                        f"{c['units']} | {c['points']} | {c['rows']:.0f} | {c['gpu_s']:.1f} | "
                        f"{c['wall_s']:.0f} |")
                    print(lines[-1], flush=True)
            lines.append("")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
