"""int8's untuned route fitted and replayed offline on the committed H200 int8 logs.

At a shape no tuning entry covers, the int8 quantized linear used to run the shape
heuristic's tile everywhere (the old rule); it now runs it only where
:mod:`oasr_scaled_mm.untuned` predicts the tile plus the activation quantizer to beat fp16
``F.linear`` (the new rule), the same route as fp8's (:mod:`oasr_scaled_mm.w8a8.untuned`).

Two committed H200 logs, both timed by the bench protocol with the separator (a tiny unrelated
kernel after every call, its separately measured cost subtracted):

- ``benchmarks/results/h200_scaled_mm_sweep.jsonl`` (15 widths, N 256..5120, K 256..1536, M
  16..32768): every tile of ``sm90_int8_wgmma`` and ``F.linear`` in fp16 (the ``fp16`` arm).
  The dense and GEMM rooflines are fitted here, on the tile the shipped heuristic picks now
  (the plugin's fitted ladder; the log times every tile). The log has no quantizer arm: the
  quantizer is the W8A8 row quantizer's fit (``oasr_scaled_mm.w8a8.untuned``, the same CUDA
  skeleton, fitted on the fp8 log's ``quantize`` arm; int8 and e4m3 move the same bytes);
- ``db/sm90/measurements/scaled_mm.jsonl`` (the shipped table's build, 4 widths, M 16..24032):
  the whole layer measured, the ``heuristic`` arm (quantizer + tile) against ``unquantized``
  (fp16 ``F.linear``). Not used for fitting: it checks the route against layers measured with
  their real int8 quantizer.

Reported per rule: the geomean of fp16 / chosen, the points slower than fp16 and the worst
ratio; "leave one width out" fits the rooflines without each width and decides its points with
that fit; the margins table is how the shipped margin was chosen (the smallest leaving no
sweep point slower, with and without each width in the fit). Run::

    python3 benchmarks/int8_untuned_offline.py --out MD

writes ``MD`` and its JSON beside it. It times nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs
from fp8_untuned_offline import model_text, roofline_fit

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "benchmarks" / "results" / "h200_scaled_mm_sweep.jsonl"
LAYERS = ROOT / "db" / "sm90" / "measurements" / "scaled_mm.jsonl"
LANE = "sm90_int8_wgmma"
MARGINS = (1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3)


@attrs.frozen
class Point:
    """One (N, K, M): the int8 layer (tile + quantizer) and fp16 ``F.linear``, microseconds."""

    n: int
    k: int
    m: int
    heuristic: str
    tile_us: float
    """The heuristic's tile (sweep), or the whole measured layer (``measured_layer``)."""
    fp16_us: float
    measured_layer: bool = False

    def int8_us(self, quantizer_us: float) -> float:
        """The int8 layer: the measured layer, or the tile plus ``quantizer_us``."""
        return self.tile_us if self.measured_layer else self.tile_us + quantizer_us

    @property
    def width(self) -> tuple[int, int]:
        return self.n, self.k


@functools.cache
def _lane() -> Any:
    from oasr_scaled_mm import hooks

    return next(lane for lane in hooks.oasr_register_lanes() if lane.name == LANE)


def heuristic_tile(n: int, k: int, m: int, sm_count: int = 132) -> str:
    """The tile the shipped heuristic (the plugin's fitted ladder for sm90) picks on the
    H200's 132 SMs."""
    from oasr_scaled_mm import heuristic

    from oasr_core.types import Problem

    problem = Problem("scaled_mm", "scaled_mm", "int8", (("N", n), ("K", k)), m)
    return heuristic.heuristic_config(problem, _lane(), sm_count=sm_count, arch="sm90").id


def sweep_points(path: Path = SWEEP) -> list[Point]:
    """The sweep's points with the heuristic's tile and the fp16 arm timed."""
    arms: dict[tuple[int, int, int], dict[str, float]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("lane") == LANE and row.get("status") == "ok" and \
                row["kind"] in ("config", "baseline"):
            arms[(row["N"], row["K"], row["M"])][row["config"]] = row["us"]
    points = []
    for (n, k, m), got in sorted(arms.items()):
        heur = heuristic_tile(n, k, m)
        if heur in got and "fp16" in got:
            points.append(Point(n, k, m, heur, got[heur], got["fp16"]))
    return points


def layer_points(path: Path = LAYERS) -> list[Point]:
    """The build log's whole layers: its ``heuristic`` arm against ``unquantized``."""
    arms: dict[tuple[int, int, int], dict[str, float]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("row") == "arm" and row.get("phase") == "main" and row.get("op") == "scaled_mm":
            arms[(row["dims"]["N"], row["dims"]["K"], row["M"])][row["config"]] = \
                row["median_ms"] * 1e3
    return [Point(n, k, m, "heuristic", got["heuristic"], got["unquantized"], True)
            for (n, k, m), got in sorted(arms.items())
            if "heuristic" in got and "unquantized" in got]


def fit(points: list[Point], margin: float | None = None) -> Any:
    """The :class:`~oasr_scaled_mm.w8a8.untuned.RouteModel` whose dense and GEMM rooflines are
    fitted on ``points`` (quantizer, norm and HBM constants: the W8A8 route's)."""
    from oasr_scaled_mm import untuned
    from oasr_scaled_mm.w8a8 import untuned as w8a8_untuned

    hbm = w8a8_untuned.HBM_BYTES_PER_US
    d_launch, d_flops = roofline_fit(
        [(2.0 * p.m * p.n * p.k, 2.0 * (p.m * p.k + p.n * p.k + p.m * p.n), p.fp16_us)
         for p in points], hbm)
    g_launch, g_flops = roofline_fit(
        [(2.0 * p.m * p.n * p.k, p.m * p.k + p.n * p.k + 2.0 * p.m * p.n, p.tile_us)
         for p in points], hbm)
    return w8a8_untuned.RouteModel(
        dense_launch_us=d_launch, dense_flops_per_us=d_flops, gemm_launch_us=g_launch,
        gemm_flops_per_us=g_flops, margin=untuned.MARGIN if margin is None else margin)


def score(points: list[Point], int8: list[bool], model: Any) -> dict[str, Any]:
    """Geomean of fp16 / chosen, points slower than fp16, the worst ratio, int8 picks (a sweep
    point's quantizer: ``model``'s)."""
    ratios = [p.fp16_us / (p.int8_us(model.quantizer_us(p.m, p.k)) if pick else p.fp16_us)
              for p, pick in zip(points, int8, strict=True)]
    if not ratios:
        return {"points": 0, "geomean": None, "slower": 0, "worst": None, "int8": 0}
    return {"points": len(ratios), "geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "slower": sum(r < 1.0 for r in ratios), "worst": min(ratios), "int8": sum(int8)}


def leave_one_width_out(points: list[Point], margin: float | None = None) -> list[bool]:
    """Each point decided by the rooflines fitted on the other widths' points."""
    fits = {w: fit([q for q in points if q.width != w], margin) for w in {p.width for p in points}}
    return [fits[p.width].quantized_wins(p.m, p.n, p.k) for p in points]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="markdown (JSON beside)")
    args = parser.parse_args(argv)
    from oasr_scaled_mm import untuned

    sweep, layers = sweep_points(), layer_points()
    shipped = untuned.MODELS[LANE]
    refit = fit(sweep)
    lines = ["# int8 untuned route, fitted and replayed offline on the H200 int8 logs", "",
             f"- fit: `{SWEEP.name}` ({len(sweep)} points, {len({p.width for p in sweep})} "
             "widths; timing: separated): the heuristic's tile and the `fp16` arm "
             "(`F.linear`); the quantizer: the W8A8 row quantizer's fit",
             f"- check: `{LAYERS.relative_to(ROOT)}` ({len(layers)} points): whole layers, "
             "the `heuristic` arm (int8 quantizer + tile) against `unquantized` (fp16)",
             f"- shipped route ({LANE}): `{model_text(shipped)}`",
             f"- refitted on the sweep: `{model_text(refit)}`", "",
             "Ratios are fp16 / chosen.", "",
             "| points | rule | int8 picks | geomean vs fp16 | slower than fp16 | worst |",
             "|---|---|---:|---:|---:|---:|"]
    summary: dict[str, Any] = {}
    for name, points in (("sweep, tile + quantizer", sweep),
                         ("build log, measured layers", layers)):
        rules = {"old: the heuristic's tile everywhere": [True] * len(points),
                 "new: int8 where the shipped route predicts it wins":
                     [shipped.quantized_wins(p.m, p.n, p.k) for p in points],
                 "oracle: the faster of int8 and fp16":
                     [p.int8_us(shipped.quantizer_us(p.m, p.k)) < p.fp16_us for p in points]}
        if points is sweep:
            rules["new, leave one width out"] = leave_one_width_out(sweep)
        for rule, picks in rules.items():
            got = score(points, picks, shipped)
            summary.setdefault(name, {})[rule] = got
            lines.append(f"| {name} ({got['points']}) | {rule} | {got['int8']} | "
                         f"{got['geomean']:.3f}x | {got['slower']} | {got['worst']:.3f}x |")
    lines += ["", "Margins (shipped: " f"{shipped.margin:g}), the sweep:", "",
              "| margin | int8 picks | geomean vs fp16 | slower | worst | held out: picks | "
              "slower | worst |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for margin in MARGINS:
        model = attrs.evolve(shipped, margin=margin)
        got = score(sweep, [model.quantized_wins(p.m, p.n, p.k) for p in sweep], model)
        held = score(sweep, leave_one_width_out(sweep, margin), model)
        summary.setdefault("margins", {})[f"{margin:g}"] = {"all": got, "held_out": held}
        lines.append(f"| {margin:g} | {got['int8']} | {got['geomean']:.3f}x | {got['slower']} | "
                     f"{got['worst']:.3f}x | {held['int8']} | {held['slower']} | "
                     f"{held['worst']:.3f}x |")
    lines += ["", "| N | K | M | heuristic | int8 us | fp16 us | fp16 / int8 | predicted | "
              "new rule |", "|---|---|---|---|---:|---:|---:|---:|---|"]
    for p in sweep:
        int8_us = p.int8_us(shipped.quantizer_us(p.m, p.k))
        predicted = shipped.dense_us(p.m, p.n, p.k) / (shipped.gemm_us(p.m, p.n, p.k)
                                                       + shipped.quantizer_us(p.m, p.k))
        pick = "int8" if shipped.quantized_wins(p.m, p.n, p.k) else "fp16"
        lines.append(f"| {p.n} | {p.k} | {p.m} | `{p.heuristic}` | {int8_us:.2f} | "
                     f"{p.fp16_us:.2f} | {p.fp16_us / int8_us:.2f}x | {predicted:.2f}x | {pick} |")
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(
        {"shipped": attrs.asdict(shipped), "refit": attrs.asdict(refit), "summary": summary},
        indent=1) + "\n")
    print("\n".join(lines[:lines.index("| N | K | M | heuristic | int8 us | fp16 us | "
                                        "fp16 / int8 | predicted | new rule |")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
