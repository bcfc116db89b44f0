"""fp8's untuned route replayed offline on an H200 ``fp8_vs_torch.py`` log.

At a shape no tuning entry covers, the quantized fp8 linear used to run the shape heuristic's
tile everywhere (the old rule); it now runs it only where :mod:`oasr_scaled_mm_fp8.untuned`
predicts the tile plus the activation quantizer to beat bf16 ``F.linear``, else ``F.linear``
(the new rule). For every point of the log (every tile, the quantizer and bf16 timed as arms of
one protocol run) this scores both rules, and the per-point oracle, against the log's measured
arms: the fp8 layer is the tile the shipped heuristic picks (the plugin's fitted ladder; the
log times every tile, so the pick's time is in it) plus the ``quantize`` arm, bf16 is the
``bf16`` arm. Reported: the geomean of bf16 / chosen, the number
of points slower than bf16 and the worst ratio, over all points and over the points no shipped
table entry covered when the log was measured (its ``tier`` is ``heuristic``: the untuned
population). "Leave one width out" fits the rooflines on the other widths and decides each
width's points with that fit: how the rule does at widths it was not fitted on.

``--fit`` also fits the rooflines on this log (:func:`fit`, what the shipped constants came
from) and prints them as a :class:`~oasr_scaled_mm_fp8.untuned.RouteModel`: refit after an
H200 run with the new quantizer (``benchmarks/h200/run.sh bench-fp8`` writes the log). It
times nothing itself: the log's arms were timed by the bench protocol with the separator (a
tiny unrelated kernel after every call, its separately measured cost subtracted), and the
report states the log's timing mode. Run::

    python3 benchmarks/fp8_untuned_offline.py [LOG] --out MD [--fit]

writes ``MD`` and its JSON beside it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "benchmarks" / "results" / "h200_fp8.jsonl"
LANE = "sm90_fp8_wgmma"
FLOPS_GRID = [10.0 ** (8 + j / 400) for j in range(801)]
"""Throughputs a roofline fit tries, flops per microsecond (1e8 .. 1e10, 0.6 % apart)."""
MARGINS = (1.0, 1.05, 1.1, 1.15, 1.2)


@attrs.frozen
class Point:
    """One (N, K, M) of the log: the measured arms the rules choose between."""

    n: int
    k: int
    m: int
    heuristic: str
    tile_us: float
    quantize_us: float
    bf16_us: float
    uncovered: bool
    norm_quantize_us: float | None = None
    """The fused layer norm + quantizer (a log with the benchmark's norm arms), else None."""
    layer_norm_us: float | None = None
    """torch's layer norm alone (the same logs)."""

    @property
    def fp8_us(self) -> float:
        """The fp8 layer: the heuristic's tile plus the activation quantizer."""
        return self.tile_us + self.quantize_us

    @property
    def width(self) -> tuple[int, int]:
        return self.n, self.k


@functools.cache
def _lane() -> Any:
    from oasr_scaled_mm_fp8 import hooks

    return next(lane for lane in hooks.oasr_register_lanes() if lane.name == LANE)


def heuristic_tile(n: int, k: int, m: int, sm_count: int = 132) -> str:
    """The tile the shipped heuristic (the plugin's ladder for sm90) picks at ``(N, K, M)`` on
    a ``sm_count``-SM device (the H200's 132)."""
    from oasr_scaled_mm_fp8 import heuristic

    from oasr_core.types import Problem

    lane = _lane()
    problem = Problem("scaled_mm_fp8", "scaled_mm_fp8", "float8_e4m3fn", (("N", n), ("K", k)), m)
    return heuristic.heuristic_config(problem, lane, sm_count=sm_count, arch="sm90").id


def read_points(rows: list[dict]) -> list[Point]:
    """The log's points that have the heuristic's tile, the quantizer and bf16 timed (the
    tile the shipped heuristic picks now: the log times every tile)."""
    arms: dict[tuple[int, int, int], dict[str, dict]] = defaultdict(dict)
    for row in rows:
        arms[(row["N"], row["K"], row["M"])][row["config"]] = row
    points = []
    for (n, k, m), got in sorted(arms.items()):
        heur = heuristic_tile(n, k, m)
        need = [got.get(name, {}).get("us") for name in (heur, "quantize", "bf16")]
        if all(v is not None for v in need):
            tier = next(iter(got.values())).get("tier")
            norm = [got.get(name, {}).get("us") for name in ("norm_quantize", "layer_norm")]
            points.append(Point(n, k, m, heur, *need, uncovered=tier == "heuristic",
                                norm_quantize_us=norm[0], layer_norm_us=norm[1]))
    return points


def roofline_fit(samples: list[tuple[float, float, float]], hbm: float) -> tuple[float, float]:
    """``(launch_us, flops_per_us)`` minimising the squared relative error of
    ``launch + max(flops / F, bytes / hbm)`` over ``(flops, bytes, us)`` samples."""
    # What does not depend on the grid's F is computed once, and max(a, b) is written as the
    # comparison it makes (the same floats, summed in the same order: the fit is bit for bit
    # the plain one; the committed reports' tests replay it).
    flops = [fl for fl, _, _ in samples]
    memory = [by / hbm for _, by, _ in samples]
    times = [t for _, _, t in samples]
    weights = [1.0 / t ** 2 for t in times]
    total = sum(weights)
    best = None
    for f in FLOPS_GRID:
        roof = [c if (c := fl / f) >= mem else mem
                for fl, mem in zip(flops, memory, strict=True)]
        launch = max(0.0, sum((t - r) * w for r, t, w in zip(roof, times, weights, strict=True))
                     / total)
        err = sum(((launch + r - t) / t) ** 2 for r, t in zip(roof, times, strict=True))
        if best is None or err < best[0]:
            best = (err, launch, f)
    return best[1], best[2]


def linear_fit(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """``(launch_us, bytes_per_us)`` minimising the squared relative error of
    ``launch + bytes / B`` over ``(bytes, us)`` samples."""
    w = [1.0 / t ** 2 for _, t in samples]
    s00 = sum(w)
    s01 = sum(wi * b for wi, (b, _) in zip(w, samples, strict=True))
    s11 = sum(wi * b * b for wi, (b, _) in zip(w, samples, strict=True))
    r0 = sum(wi * t for wi, (_, t) in zip(w, samples, strict=True))
    r1 = sum(wi * b * t for wi, (b, t) in zip(w, samples, strict=True))
    det = s00 * s11 - s01 * s01
    launch, per_byte = (r0 * s11 - r1 * s01) / det, (s00 * r1 - s01 * r0) / det
    return launch, 1.0 / per_byte


def fit(points: list[Point], margin: float | None = None) -> Any:
    """The :class:`~oasr_scaled_mm_fp8.untuned.RouteModel` fitted on ``points``' bf16, tile
    and quantize arms (the shipped margin and HBM bandwidth unless given)."""
    from oasr_scaled_mm.w8a8 import untuned as w8a8_untuned
    from oasr_scaled_mm_fp8 import untuned

    hbm = w8a8_untuned.HBM_BYTES_PER_US
    b_launch, b_flops = roofline_fit(
        [(2.0 * p.m * p.n * p.k, 2.0 * (p.m * p.k + p.n * p.k + p.m * p.n), p.bf16_us)
         for p in points], hbm)
    f_launch, f_flops = roofline_fit(
        [(2.0 * p.m * p.n * p.k, p.m * p.k + p.n * p.k + 2.0 * p.m * p.n, p.tile_us)
         for p in points], hbm)
    q_launch, q_bw = linear_fit([(3.0 * p.m * p.k + 4.0 * p.m, p.quantize_us) for p in points])
    norm = {}
    if has_norm_arms(points):
        nq_launch, nq_bw = linear_fit([(3.0 * p.m * p.k + 4.0 * p.m, p.norm_quantize_us)
                                       for p in points])
        ln_launch, ln_bw = linear_fit([(4.0 * p.m * p.k, p.layer_norm_us) for p in points])
        excess = sorted(p.norm_quantize_us - p.layer_norm_us for p in points
                        if p.norm_quantize_us > p.layer_norm_us)
        floor = (excess[(len(excess) - 1) // 2] + excess[len(excess) // 2]) / 2 if excess else 0.0
        norm = dict(norm_quantizer_launch_us=nq_launch, norm_quantizer_bytes_per_us=nq_bw,
                    layer_norm_launch_us=ln_launch, layer_norm_bytes_per_us=ln_bw,
                    norm_extra_floor_us=floor)
    return w8a8_untuned.RouteModel(
        dense_launch_us=b_launch, dense_flops_per_us=b_flops, gemm_launch_us=f_launch,
        gemm_flops_per_us=f_flops, quantizer_launch_us=q_launch, quantizer_bytes_per_us=q_bw,
        hbm_bytes_per_us=hbm, margin=untuned.MARGIN if margin is None else margin, **norm)


def has_norm_arms(points: list[Point]) -> bool:
    """Whether every point has the fused norm and torch's norm timed."""
    return bool(points) and all(p.norm_quantize_us is not None and p.layer_norm_us is not None
                                for p in points)


def normed_us(p: Point) -> tuple[float, float]:
    """``(fp8, bf16)`` of the layer after a layer norm, the norm included: the tile plus the
    fused norm + quantizer against torch's norm plus ``F.linear`` where the log timed them,
    else the tile against ``F.linear`` (the norms taken as costing the same)."""
    if p.norm_quantize_us is not None and p.layer_norm_us is not None:
        return p.tile_us + p.norm_quantize_us, p.bf16_us + p.layer_norm_us
    return p.tile_us, p.bf16_us


def score(points: list[Point], fp8: list[bool], *, quantizer: bool = True) -> dict[str, Any]:
    """Geomean of bf16 / chosen, points slower than bf16, the worst ratio, fp8 picks (without
    ``quantizer``, the layer after a layer norm that quantizes: :func:`normed_us`)."""
    ratios = []
    for p, pick in zip(points, fp8, strict=True):
        fp8_us, bf16_us = (p.fp8_us, p.bf16_us) if quantizer else normed_us(p)
        ratios.append(bf16_us / (fp8_us if pick else bf16_us))
    if not ratios:
        return {"points": 0, "geomean": None, "slower": 0, "worst": None, "fp8": 0}
    return {"points": len(ratios),
            "geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "slower": sum(r < 1.0 for r in ratios), "worst": min(ratios),
            "fp8": sum(fp8)}


def leave_one_width_out(points: list[Point]) -> list[bool]:
    """Each point decided by the rooflines fitted on the other widths' points."""
    picks = []
    fits = {w: fit([q for q in points if q.width != w]) for w in {p.width for p in points}}
    for p in points:
        picks.append(fits[p.width].quantized_wins(p.m, p.n, p.k))
    return picks


def rules(points: list[Point], refit: Any | None) -> dict[str, list[bool]]:
    """Per rule, its fp8 pick at every point."""
    from oasr_scaled_mm_fp8 import untuned

    shipped = untuned.MODELS[LANE]
    out = {"old: the heuristic's tile everywhere": [True] * len(points),
           "new: fp8 where the shipped route predicts it wins":
               [shipped.quantized_wins(p.m, p.n, p.k) for p in points],
           "new, leave one width out": leave_one_width_out(points)}
    if refit is not None:
        out["new, refitted on this log"] = [refit.quantized_wins(p.m, p.n, p.k) for p in points]
    out["oracle: the faster of fp8 and bf16"] = [p.fp8_us < p.bf16_us for p in points]
    return out


def model_text(model: Any) -> str:
    """``model`` as the Python that would ship it."""
    fields = attrs.asdict(model)
    return "RouteModel(" + ", ".join(f"{k}={v:.4g}" for k, v in fields.items()) + ")"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", nargs="?", default=str(LOG))
    parser.add_argument("--out", type=Path, required=True, help="markdown (JSON beside)")
    parser.add_argument("--fit", action="store_true",
                        help="also fit the rooflines on this log and score that fit")
    args = parser.parse_args(argv)
    from oasr_scaled_mm_fp8 import untuned

    rows = [json.loads(line) for line in Path(args.log).read_text().splitlines() if line]
    points = read_points([r for r in rows if r.get("lane", LANE) == LANE])
    if not points:
        parser.error(f"{args.log}: no {LANE} point with the heuristic's tile, quantize and "
                     "bf16 timed")
    refit = fit(points) if args.fit else None
    picks = rules(points, refit)
    sets = {"all points": [True] * len(points),
            "uncovered when measured (tier heuristic)": [p.uncovered for p in points]}
    modes = sorted({r.get("timing", "separated") for r in rows})
    shipped = untuned.MODELS[LANE]
    lines = ["# fp8 untuned route, replayed offline on an H200 log", "",
             f"- log: `{Path(args.log).name}` ({len(points)} points; timing: "
             f"{', '.join(modes)})",
             "- fp8 layer = the heuristic's tile + the `quantize` arm; bf16 = the `bf16` arm "
             "(`F.linear`); ratios are bf16 / chosen",
             f"- shipped route ({LANE}): `{model_text(shipped)}`"]
    if refit is not None:
        lines.append(f"- refitted on this log: `{model_text(refit)}`")
    lines += ["", "| points | rule | fp8 picks | geomean vs bf16 | slower than bf16 | worst |",
              "|---|---|---:|---:|---:|---:|"]
    summary: dict[str, dict[str, Any]] = {}
    for set_name, member in sets.items():
        chosen = [p for p, inside in zip(points, member, strict=True) if inside]
        for rule, fp8 in picks.items():
            got = score(chosen, [f for f, inside in zip(fp8, member, strict=True) if inside])
            summary.setdefault(set_name, {})[rule] = got
            lines.append(f"| {set_name} ({got['points']}) | {rule} | {got['fp8']} | "
                         f"{got['geomean']:.3f}x | {got['slower']} | {got['worst']:.3f}x |")
    lines += ["", f"Margins of the shipped rooflines (shipped: {shipped.margin}), all points:", "",
              "| margin | fp8 picks | geomean vs bf16 | slower than bf16 | worst |",
              "|---:|---:|---:|---:|---:|"]
    for margin in MARGINS:
        model = attrs.evolve(shipped, margin=margin)
        got = score(points, [model.quantized_wins(p.m, p.n, p.k) for p in points])
        summary.setdefault("margins", {})[f"{margin:g}"] = got
        lines.append(f"| {margin:g} | {got['fp8']} | {got['geomean']:.3f}x | {got['slower']} | "
                     f"{got['worst']:.3f}x |")
    measured = has_norm_arms(points)
    lines += ["", "After a layer norm that quantizes (the route's `quantizer=False`): " + (
              "the tile plus the log's fused norm + quantizer against torch's norm plus "
              "`F.linear`" if measured else "the log has no norm arms: the norm's cost taken "
              "as torch's on both sides, so the GEMMs alone are compared") + ", all points:",
              "",
              "| margin | fp8 picks | geomean vs bf16 | slower than bf16 | worst |",
              "|---:|---:|---:|---:|---:|"]
    for margin in MARGINS:
        model = attrs.evolve(shipped, margin=margin)
        got = score(points, [model.quantized_wins(p.m, p.n, p.k, quantizer=False) for p in points],
                    quantizer=False)
        summary.setdefault("normed margins", {})[f"{margin:g}"] = got
        lines.append(f"| {margin:g} | {got['fp8']} | {got['geomean']:.3f}x | {got['slower']} | "
                     f"{got['worst']:.3f}x |")
    oracle = score(points, [normed_us(p)[0] < normed_us(p)[1] for p in points],
                   quantizer=False)
    summary["normed oracle"] = oracle
    lines.append(f"| oracle | {oracle['fp8']} | {oracle['geomean']:.3f}x | {oracle['slower']} "
                 f"| {oracle['worst']:.3f}x |")
    lines += ["", "| N | K | M | uncovered | heuristic | fp8 us | bf16 us | bf16 / fp8 | "
              "predicted | new rule |", "|---|---|---|---|---|---:|---:|---:|---:|---|"]
    for p in points:
        predicted = shipped.dense_us(p.m, p.n, p.k) / (shipped.gemm_us(p.m, p.n, p.k)
                                                      + shipped.quantizer_us(p.m, p.k))
        pick = "fp8" if shipped.quantized_wins(p.m, p.n, p.k) else "bf16"
        lines.append(f"| {p.n} | {p.k} | {p.m} | {'yes' if p.uncovered else 'no'} | "
                     f"`{p.heuristic}` | {p.fp8_us:.2f} | {p.bf16_us:.2f} | "
                     f"{p.bf16_us / p.fp8_us:.2f}x | {predicted:.2f}x | {pick} |")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(
        {"log": Path(args.log).name, "timing": modes, "shipped": attrs.asdict(shipped),
         "refit": attrs.asdict(refit) if refit is not None else None, "summary": summary,
         "points": [{**attrs.asdict(p), "new_rule_fp8": shipped.quantized_wins(p.m, p.n, p.k)}
                    for p in points]}, indent=1) + "\n")
    print("\n".join(lines[:len(lines) - len(points) - 2]))
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
