"""Fit the scaled_mm_fp8 sm90 lane's heuristic ladder on an H200 ``fp8_vs_torch.py`` log.

The log times every tile of the lane at every point (the fp8 Conformer widths and a sweep of
N 512..4096, K 256..4096, M 256..16384), each call followed by a tiny unrelated kernel whose
separately measured cost is subtracted. This fits the fill thresholds of a ladder
(:func:`oasr_scaled_mm.w8a8.ladders.fit_ladder`: minimum geomean regret against the best tile) over
:data:`RUNGS`, scores it in sample and with each (N, K) width left out of the fit, and writes
the fitted table (``--out-ladders``, the file the package ships as
``oasr_scaled_mm_fp8/fitted_ladders.json``) and a report (``--out``). Every figure is a replay
of the log's measured times: the ladder picks a tile, the log says how long that tile took.

The report also gives, for the unfitted rule and the fitted table, the picked tile against
``torch._scaled_mm`` row-wise (geomean over all points) and, at M >= 4096 on widths >= 1024,
the picked tile plus the activation quantizer against bf16 ``F.linear``. Run::

    python3 benchmarks/fp8_ladder_fit.py [LOG] --out MD [--out-ladders JSON]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fp8_vs_torch import BASELINES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "benchmarks" / "results" / "h200_fp8.jsonl"
LANE = "sm90_fp8_wgmma"
ARCH = "sm90"
SM_COUNT = 132
RUNGS = ("co_256x128x128_c1x1_fa", "pp_128x128x128_c2x1_fa", "pp_128x128x128_c1x1_fa",
         "ws_128x128x128_c1x1_fa", "ws_128x64x128_c1x1_fa", "ws_64x128x128_c1x1_fa",
         "ws_64x64x128_c1x1_fa", "ws_64x32x128_c1x1_fa")
"""The candidate rungs, largest tile first: the unfitted ladder's tiles (one fast-accumulation
config per tile shape) with the persistent ping-pong 128x128 kernels (2x1 and 1x1 clusters)
above the non-persistent 128x128, the configs that won most of the sweep's large points. The
fit may take a rung off (an infinite fill). The cooperative 128x256 is not a candidate: it
was the best tile at no point of the sweep, and beside the 256x128 one it leaves the fit's
coordinate descent no single threshold whose move lowers the regret (taking one of the two
large tiles off hands its points to the other)."""
SENTINELS = BASELINES
"""The log's arms that are not tiles (the benchmark's baselines)."""


def read_rows(path: Path) -> tuple[dict[tuple[int, int, int], dict[str, float]], str]:
    """``{(N, K, M): {arm: us}}`` of the log's successful rows, and its GPU."""
    arms: dict[tuple[int, int, int], dict[str, float]] = defaultdict(dict)
    gpu = "?"
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("lane") != LANE or row.get("status") != "ok":
            continue
        gpu = row.get("gpu", gpu)
        arms[(row["N"], row["K"], row["M"])][row["config"]] = row["us"]
    return dict(arms), gpu


def tile_rows(arms: dict) -> list[tuple[int, int, int, dict[str, float]]]:
    """The fitting rows: each point's tile times (the sentinel arms left out)."""
    return [(n, k, m, {c: t for c, t in times.items() if c not in SENTINELS})
            for (n, k, m), times in sorted(arms.items())]


def unmeasured_bands_as_nearest(ladder, rows: list) -> object:
    """``ladder`` with each K band that holds none of ``rows`` given the thresholds of the
    nearest band that holds some (a fit leaves such a band at its starting values)."""
    import attrs

    measured = sorted({ladder.band(k) for _n, k, _m, _t in rows})
    bands = len(ladder.k_bounds) + 1
    source = [min(measured, key=lambda m: (abs(m - b), -m)) for b in range(bands)]
    fill = [tuple(row[source[b]] for b in range(bands)) for row in ladder.fill]
    return attrs.evolve(ladder, fill=fill)


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def picks(ladder, arms: dict, lane) -> dict[tuple[int, int, int], str]:
    """The config ``ladder`` picks at each point of the log."""
    from oasr_scaled_mm.w8a8 import ladders

    from oasr_core.types import Problem

    out = {}
    for n, k, m in arms:
        problem = Problem("scaled_mm_fp8", "scaled_mm_fp8", "float8_e4m3fn",
                          (("N", n), ("K", k)), m)
        out[(n, k, m)] = ladders.pick_config(ladder, problem, lane, SM_COUNT).id
    return out


def score(ladder, arms: dict, lane) -> dict[str, float]:
    """Replayed figures of ``ladder`` on the log (see the module docstring)."""
    chosen = picks(ladder, arms, lane)
    regret, rowwise, layer = [], [], []
    for p, times in arms.items():
        tiles = {c: t for c, t in times.items() if c not in SENTINELS}
        t = times[chosen[p]]
        regret.append(t / min(tiles.values()))
        rowwise.append(times["torch_rowwise"] / t)
        n, k, m = p
        if m >= 4096 and n >= 1024 and k >= 1024:
            layer.append(times["bf16"] / (t + times["quantize"]))
    return {"regret": geomean(regret), "vs_rowwise": geomean(rowwise),
            "layer_vs_bf16": geomean(layer), "layer_points": len(layer)}


def main(argv: list[str] | None = None) -> int:
    from oasr_scaled_mm.w8a8 import ladders
    from oasr_scaled_mm_fp8 import heuristic, hooks

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", nargs="?", type=Path, default=LOG)
    ap.add_argument("--out", type=Path, required=True, help="the report (markdown)")
    ap.add_argument("--out-ladders", type=Path, default=None,
                    help="write the fitted table here (the package's fitted_ladders.json)")
    args = ap.parse_args(argv)
    arms, gpu = read_rows(args.log)
    if not arms:
        ap.error(f"{args.log}: no {LANE} rows")
    lane = next(lane for lane in hooks.oasr_register_lanes() if lane.name == LANE)
    unfitted = heuristic.LADDERS[LANE]
    start = ladders.Ladder(lane=LANE, rungs=RUNGS, k_bounds=heuristic.K_BOUNDS,
                           fill=[(ladders.HALF_WAVE,) * 3] * (len(RUNGS) - 1) + [(0.0,) * 3])
    rows = tile_rows(arms)
    fit = ladders.fit_ladder(rows, lane=lane, sm_count=SM_COUNT, start=start)
    fitted = unmeasured_bands_as_nearest(fit.ladder, rows)
    widths = sorted({(n, k) for n, k, _m, _t in rows})
    held_logs: list[float] = []
    for width in widths:
        train = [r for r in rows if (r[0], r[1]) != width]
        test = [r for r in rows if (r[0], r[1]) == width]
        held = ladders.fit_ladder(train, lane=lane, sm_count=SM_COUNT, start=start).ladder
        held = unmeasured_bands_as_nearest(held, train)
        regret, used = ladders.ladder_regret(held, test, lane=lane, sm_count=SM_COUNT)
        held_logs += [math.log(regret)] * used
    held_out = math.exp(sum(held_logs) / len(held_logs))
    before, after = score(unfitted, arms, lane), score(fitted, arms, lane)
    evidence = {"tool": "benchmarks/fp8_ladder_fit.py", "log": args.log.name, "gpu": gpu,
                "sm_count": SM_COUNT, "points": fit.rows, "widths": len(widths),
                "regret": round(after["regret"], 5), "held_out_regret": round(held_out, 5),
                "unfitted_regret": round(before["regret"], 5)}
    if args.out_ladders is not None:
        heuristic.write_fitted(args.out_ladders,
                               [ladders.FittedLadder(arch=ARCH, ladder=fitted,
                                                     evidence=evidence)])
    lines = [f"# scaled_mm_fp8 ladder fit: `{LANE}` on {ARCH} ({gpu}, {SM_COUNT} SMs)", "",
             f"- log `{args.log.name}`: {fit.rows} points over {len(widths)} widths, every tile "
             "timed with the separator (a tiny unrelated kernel after every call, its cost "
             "subtracted); every figure below replays those times",
             "- regret: geomean over the points of time(picked tile) / time(best tile)",
             "- held out: each width's points picked by a table fitted on the other widths",
             "", "| table | regret | held out | picked tile vs `_scaled_mm` row-wise | "
             f"picked tile + quantizer vs bf16, M >= 4096, widths >= 1024 "
             f"({after['layer_points']} points) |", "|---|---:|---:|---:|---:|",
             f"| unfitted (half a wave) | {before['regret']:.4f} | | "
             f"{before['vs_rowwise']:.3f}x | {before['layer_vs_bf16']:.3f}x |",
             f"| fitted | {after['regret']:.4f} | {held_out:.4f} | {after['vs_rowwise']:.3f}x | "
             f"{after['layer_vs_bf16']:.3f}x |", "", "## The fitted table", "",
             "| rung | fill K <= 1024 | 1024 < K <= 4096 | K > 4096 |", "|---|---:|---:|---:|"]
    for rung, fill in zip(fitted.rungs, fitted.fill, strict=True):
        lines.append(f"| `{rung}` | " + " | ".join("off" if math.isinf(v) else f"{v:g}"
                                                    for v in fill) + " |")
    lines += ["", "A fill is the fraction of the SM count a rung's CTA count must reach; `off`: "
              "the rung never serves that band. A band with no points in the log (above "
              "K = 4096) takes the thresholds of the nearest band that has some: deep K is "
              "nearer the measured deep band than the unfitted half-wave guess."]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
