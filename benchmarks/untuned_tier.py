"""Offline score of the untuned gemm tier (cost model vs the calibrated torch arm), by margin.

What it answers: at widths no tuning entry covers, with gemm's untuned selector torch, the
model tier serves a compiled config c only where ``t_pred(c) * margin <= t_pred(torch)``.
Which margin keeps the served points at or above torch, measured?

Two held-out sets, both scored with the configs the production module compiles (the lane
default, the coverage basis and what the shipped ``db/sm90/gemm.json`` references):

1. **Leave-one-signature-out over the shipped log** (``db/sm90/measurements/gemm.jsonl``,
   H200, the build's separator protocol: a tiny unrelated kernel after every call, its cost
   subtracted). For each signature the configs' model and the torch roofline are fitted on
   the other signatures' rows, exactly as ``oasr tune build`` fits them on all.
2. **``benchmarks/results/h200_gemm_nopdl.jsonl``** (H200, 133 configs x 98 points at 7
   widths, PDL off, no bias): scored with the model fitted on the whole log, i.e. the
   shipped payload, at its widths the log does not hold. Its calls ran back to back in a
   graph of 8 (no separator), so absolute times are lower than the log's and each ratio is
   kernel-for-kernel; configs were timed once in a screening pass and the best and torch in
   7 rounds, so a config's screening time is rescaled by the point's best (measured both
   ways), the way the build rescales cross runs by anchors.

A point's ratio is torch's measured time over the served arm's measured time (1.0 where
torch serves). Writes ``benchmarks/results/untuned_tier_offline.md``::

    python benchmarks/untuned_tier.py [--out PATH] [--margins 1.0,1.05,...]
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "db/sm90/measurements/gemm.jsonl"
TABLE = ROOT / "db/sm90/gemm.json"
NOPDL = ROOT / "benchmarks/results/h200_gemm_nopdl.jsonl"
OUT = ROOT / "benchmarks/results/untuned_tier_offline.md"
MARGINS = (1.0, 1.02, 1.05, 1.08, 1.10, 1.15, 1.20, 1.30)


def production_ids(lane: str) -> set[str]:
    """The production module's configs with the shipped table loaded."""
    from oasr_gemm import jit

    from oasr_core import database

    referenced = database.read_tuning_file(TABLE).referenced_configs()
    return set(jit.PRODUCTION.ids(lane, "sm90", referenced))


def decide(model, fallbacks, profile, op, dtype, m, n, k, candidates, margin):
    """The tier's pick at one point (None: torch serves), as ``ModelTier.decide`` makes it."""
    t_fb = fallbacks.predict("torch", op, m, n, k, dtype, profile)
    if t_fb is None:
        return None
    best, t_best = None, math.inf
    for cid, f in candidates.items():
        t = model.predict(cid, f, m, n, k, dtype)
        if t < t_best:
            best, t_best = cid, t
    return best if best is not None and t_best * margin <= t_fb else None


def score(points, margin):
    """Figures of the served arms at ``points``: (ratio per point, served by the model)."""
    out = []
    for p in points:
        pick = decide(p["model"], p["fallbacks"], p["profile"], p["op"], p["dtype"], p["m"],
                      p["n"], p["k"], p["candidates"], margin)
        t = p["times"][pick] if pick is not None else p["torch"]
        out.append((p["torch"] / t, pick is not None))
    return out


def log_points(lane: str, compiled: set[str]):
    """Held-out points of the log, leave one signature out."""
    from oasr_gemm import cost

    from oasr_core.build.model import profile_of
    from oasr_core.cost_model import design, fit, parse_rows, read_log
    from oasr_core.cost_model.fallback import fit_fallbacks

    raw = list(read_log(LOG))
    profile = profile_of(r for r in raw if r.get("row") == "run")
    rows, _ = parse_rows(raw, arch=profile.arch, lane=lane, features=cost.cost_features)
    designed = design(rows, profile)
    by_point = defaultdict(dict)
    feats = {}
    for r in rows:
        by_point[(r.signature, r.m)][r.config] = r.t_us
        if r.features is not None:
            feats[r.config] = r.features
    points = []
    for sig in sorted({r.signature for r in rows}):
        model = fit([d for d in designed if d.row.signature != sig], profile)
        fallbacks = fit_fallbacks([r for r in rows if r.signature != sig], profile)
        for (s, m), times in sorted(by_point.items()):
            if s != sig or "torch" not in times:
                continue
            cands = {c: feats[c] for c in times if c in compiled and c in feats}
            points.append(dict(model=model, fallbacks=fallbacks, profile=profile, op=s[0],
                               dtype=s[1], n=s[2], k=s[3], m=m, candidates=cands, times=times,
                               torch=times["torch"], width=(s[0], s[2], s[3])))
    return points, profile, rows


def nopdl_points(lane: str, compiled: set[str], profile, rows):
    """The nopdl benchmark's points at widths the log lacks, scored with the full fit."""
    from oasr_gemm import cost
    from oasr_gemm.config_space import space

    from oasr_core.cost_model import design, fit
    from oasr_core.cost_model.fallback import fit_fallbacks

    model = fit(design(rows, profile), profile)
    fallbacks = fit_fallbacks(rows, profile)
    seen = {(r.n, r.k) for r in rows if r.op == "gemm"}
    by_id = {c.id: c for c in space(lane)}
    points = []
    for line in NOPDL.read_text().splitlines():
        r = json.loads(line)
        if (r["N"], r["K"]) in seen or r["lane"] != lane:
            continue
        scale = r["best_us"] / r["screen_us"][r["best"]]
        times = {c: t * scale for c, t in r["screen_us"].items() if c != "torch" and t}
        cands = {}
        for c in times:
            if c in compiled and c in by_id:
                from oasr_core.cost_model import features_of

                cands[c] = features_of(by_id[c], cost.cost_features, lane)
        points.append(dict(model=model, fallbacks=fallbacks, profile=profile, op="gemm",
                           dtype=r["dtype"], n=r["N"], k=r["K"], m=r["M"], candidates=cands,
                           times=times, torch=r["torch_us"], width=("gemm", r["N"], r["K"])))
    return points


def figures(results):
    ratios = [x for x, _ in results]
    served = [x for x, s in results if s]

    def geo(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan

    return dict(points=len(ratios), served=len(served), geo_all=geo(ratios),
                geo_served=geo(served), worst=min(served) if served else math.nan,
                below97=sum(x < 0.97 for x in served), below98=sum(x < 0.98 for x in served),
                oracle=None)


def _x(v):
    return "-" if math.isnan(v) else f"{v:.3f}x"


def table(title, points, margins):
    lines = [f"### {title}", "",
             "| margin | points | served by model | geomean all points | geomean model-served "
             "| worst model-served | model-served < 0.97 | < 0.98 |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = {}
    for margin in margins:
        f = figures(score(points, margin))
        rows[margin] = f
        lines.append(f"| {margin:.2f} | {f['points']} | {f['served']} "
                     f"({100 * f['served'] / max(1, f['points']):.0f} %) | {_x(f['geo_all'])} | "
                     f"{_x(f['geo_served'])} | {_x(f['worst'])} | {f['below97']} | "
                     f"{f['below98']} |")
    best_possible = [max(1.0, p["torch"] / min((p["times"][c] for c in p["candidates"]),
                                               default=math.inf)) for p in points]
    geo = math.exp(sum(map(math.log, best_possible)) / len(best_possible))
    lines += ["", f"Oracle over the compiled configs (best of torch and them, measured): "
              f"{geo:.3f}x geomean.", ""]
    return lines, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--margins", default=",".join(str(m) for m in MARGINS))
    args = ap.parse_args()
    margins = [float(x) for x in args.margins.split(",")]
    from oasr_gemm.config_space import LANE_SM90

    from oasr_core.cost_model.tier import MARGIN

    compiled = production_ids(LANE_SM90)
    log_pts, profile, rows = log_points(LANE_SM90, compiled)
    nopdl_pts = nopdl_points(LANE_SM90, compiled, profile, rows)
    lines = ["# Untuned gemm tier: cost model vs calibrated torch, offline", "",
             "> Produced by `python benchmarks/untuned_tier.py` from the committed H200 data "
             "(no GPU). Ratios are torch's measured time over the served arm's (1.0 where "
             "torch serves); the candidates are the production module's "
             f"{len(compiled)} configs (default, coverage basis, the shipped table's). "
             "See the script's docstring for the protocols.", "",
             f"The tier's margin (`oasr_core.cost_model.tier.MARGIN`) is **{MARGIN:.2f}**.", ""]
    widths = sorted({p["width"] for p in log_pts})
    part, by_log = table(f"Leave-one-signature-out over `db/sm90/measurements/gemm.jsonl` "
                    f"({len(widths)} signatures, separator protocol)", log_pts, margins)
    lines += part
    nw = sorted({p["width"] for p in nopdl_pts})
    part, by_nopdl = table(f"`h200_gemm_nopdl.jsonl` at the {len(nw)} widths the log lacks "
                    f"({', '.join(f'{n}x{k}' for _, n, k in nw)}; back to back, PDL off), "
                    "model fitted on the whole log", nopdl_pts, margins)
    lines += part
    ok = [m for m in margins if all(
        rows[m]["below97"] == 0 and (rows[m]["served"] == 0 or rows[m]["geo_served"] >= 1.0)
        for rows in (by_log, by_nopdl))]
    lines += [f"Rule: the smallest margin with no model-served point below 0.97x and the "
              f"model-served points at >= 1.00x torch (geomean) on both sets: "
              f"{f'{min(ok):.2f}' if ok else 'none of these'}.", ""]
    lines += ["Per held-out width at the chosen margin (geomean of model-served points, "
              "served / points):", "", "| set | op | N | K | served | geomean served | worst |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for name, pts in (("log", log_pts), ("nopdl", nopdl_pts)):
        for w in sorted({p["width"] for p in pts}):
            f = figures(score([p for p in pts if p["width"] == w], MARGIN))
            lines.append(f"| {name} | {w[0]} | {w[1]} | {w[2]} | {f['served']}/{f['points']} "
                         f"| {_x(f['geo_served'])} | {_x(f['worst'])} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
