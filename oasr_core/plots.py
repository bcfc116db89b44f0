"""Pictures of tuning results: what a table serves against torch and the oracle, the regret
of each selector, and whole-model speed.

- :func:`served_figure`: per signature of a measurement log, time per call against M for
  torch, the oracle (the best arm measured at each point) and the choice a table serves,
  the spread of the measured configs (best to median) behind them, the table's regions
  shaded and named.
- :func:`regret_figure`: per selector, the fraction of measured points served within a regret
  (a CDF: the higher and further left, the better).
- :func:`e2e_figure`: per model of ``oasr tune bench`` results, oasr against torch in a CUDA
  graph and eagerly (ms per forward, the speedup on each pair of bars).

Drawn with matplotlib's Agg backend (no display). ``python -m oasr_core.plots e2e A.json
B.json --out e2e.png`` draws the e2e chart from saved results.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ORACLE, TORCH, SERVED = "#1b9e77", "#444444", "#d95f02"
PALETTE = ("#fdd0a2", "#c6dbef", "#d9f0a3", "#fcc5c0", "#dadaeb", "#fee391", "#ccebc5",
           "#f2f2c0")
"""Region colours of configs (torch's regions are grey)."""


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def _us(seconds_ms: float) -> float:
    return 1000.0 * seconds_ms


def _selector(report: Any, name: str | None) -> Any:
    return next((r for r in report.selectors if r.name == name and r.overall is not None),
                None)


def served_figure(report: Any, path: str | Path, *, table: str | None,
                  title: str = "") -> Path:
    """Per signature: time per call against M (log-log) for torch, the oracle and the choice
    of selector ``table`` (None: no served line), its regions shaded; the measured configs'
    spread (best to median) in grey. Returns the path written."""
    plt = _pyplot()
    sigs = [s for s in report.signatures if report.points.get(s.key)]
    cols = 2 if len(sigs) > 1 else 1
    rows = max(1, math.ceil(len(sigs) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 * cols, 4.2 * rows), squeeze=False)
    for ax in axes.flat[len(sigs):]:
        ax.set_visible(False)
    served = _selector(report, table)
    ids = sorted({str(c) for c in served.choices.values() if c != "torch"}) if served else []
    colors = {c: PALETTE[k % len(PALETTE)] for k, c in enumerate(ids)}
    for ax, sig in zip(axes.flat, sigs, strict=False):
        pts = sorted(report.points[sig.key], key=lambda p: p.m)
        arms = sorted({a for p in pts for a in p.cells})
        others = [a for a in arms if a != "torch"]
        spread = [(p.m, [_us(t) for a in others if math.isfinite(t := p.time(a))])
                  for p in pts]
        spread = [(m, min(ts), sorted(ts)[len(ts) // 2]) for m, ts in spread if ts]
        if spread and len(others) == 1:
            ax.plot([m for m, _, _ in spread], [lo for _, lo, _ in spread], color="#8c96c6",
                    linewidth=1.2, linestyle=":", zorder=1,
                    label=f"the one measured config ({others[0]})")
        elif spread:
            ax.fill_between([m for m, _, _ in spread], [lo for _, lo, _ in spread],
                            [hi for _, _, hi in spread], color="#8c96c6", alpha=0.3,
                            linewidth=0, zorder=1,
                            label=f"the {len(others)} measured configs: best to median")
        if "torch" in arms:
            xs, ys = _series(pts, lambda p: p.time("torch"))
            # Above the served line: where torch serves, the two coincide and the dashes
            # show it.
            ax.plot(xs, ys, color=TORCH, linestyle="--", linewidth=1.6, zorder=6,
                    label="torch")
        xs, ys = _series(pts, lambda p: p.best())
        ax.plot(xs, ys, color=ORACLE, linewidth=2.4, alpha=0.8, zorder=4,
                label="oracle (best measured)")
        if served is not None:
            def chosen(p: Any, key: str = sig.key) -> float:
                c = served.choices.get((key, p.m))
                return p.time(c) if c is not None else math.inf

            xs, ys = _series(pts, chosen)
            ax.plot(xs, ys, color=SERVED, marker="o", markersize=3.5, linewidth=1.4, zorder=5,
                    label=f"served by {served.name}")
            _shade(ax, pts, served.choices, sig.key, colors)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(*_focus(pts, served, sig.key))
        _plain_ticks(ax)
        stats = served.per_signature.get(sig.key) if served is not None else None
        extra = (f"\n{served.name}: {100 * stats.geomean:.1f}% geomean regret, "
                 f"{100 * stats.max:.1f}% max" if stats is not None and stats.n else "")
        ax.set_title(sig.key + extra, fontsize=8)
        ax.set_xlabel("M (rows of the call: tokens in the batch)")
        ax.set_ylabel("time per call (us)")
        ax.grid(True, which="both", alpha=0.2)
        ax.legend(fontsize=7, loc="lower right", framealpha=0.85)
    bottom = 0.0
    if served is not None:
        from matplotlib.patches import Patch

        handles = [Patch(color=colors[c], alpha=0.45, label=c) for c in ids]
        handles.append(Patch(color="#ececec", alpha=0.45, label="torch (or not served)"))
        ncol = 4 if cols > 1 else 2
        fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=7,
                   title=f"regions of {served.name}", title_fontsize=8, frameon=False)
        bottom = (0.35 + 0.17 * math.ceil(len(handles) / ncol)) / fig.get_figheight()
    top = 1.0
    if title or served is not None:
        fig.suptitle(title or f"measured time per call; shaded: the regions of {table}",
                     fontsize=10)
        # Keep the top half inch for the figure's title, off the first panels' titles.
        top = 1 - 0.5 / fig.get_figheight()
    fig.tight_layout(rect=(0, bottom, 1, top))
    return _save(fig, path)


def _plain_ticks(ax: Any) -> None:
    """Log axes labelled 3, 10, 30 (and 2000, 3000, 5000) rather than 3x10^0 or 2x10^3."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    fmt = FuncFormatter(lambda v, _pos: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(fmt)
        axis.set_minor_locator(LogLocator(subs=(2.0, 3.0, 5.0)))
        axis.set_minor_formatter(fmt)


def _focus(pts: Sequence[Any], served: Any, key: str) -> tuple[float, float]:
    """The y range (us) that holds the oracle, torch and the served choice with room for the
    legend: the other configs, often 10x slower, are cut off rather than squashing them."""
    wanted = [p.best() for p in pts] + [p.time("torch") for p in pts]
    if served is not None:
        wanted += [p.time(c) for p in pts
                   if (c := served.choices.get((key, p.m))) is not None]
    finite = [_us(v) for v in wanted if math.isfinite(v) and v > 0]
    if not finite:
        return (1.0, 10.0)
    lo, hi = min(finite), max(finite)
    return (lo / 1.3, hi * 1.5)


def _series(pts: Sequence[Any], value: Any) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for p in pts:
        v = value(p)
        if math.isfinite(v):
            xs.append(p.m)
            ys.append(_us(v))
    return xs, ys


def _shade(ax: Any, pts: Sequence[Any], choices: Mapping[tuple[str, int], str | None],
           key: str, colors: Mapping[str, str]) -> None:
    """One band per run of points served by the same choice, named at the top (torch grey,
    each config its colour in ``colors``, the same in every panel)."""
    spans: list[list[Any]] = []
    for p in pts:
        c = choices.get((key, p.m))
        if spans and spans[-1][2] == c:
            spans[-1][1] = p.m
        else:
            spans.append([p.m, p.m, c])
    bounds = [math.sqrt(a[1] * b[0]) for a, b in zip(spans, spans[1:], strict=False)]
    whole = max(spans[-1][1] * 1.15 / (spans[0][0] / 1.15), 1.0 + 1e-9) if spans else 2.0
    for k, (lo, hi, c) in enumerate(spans):
        left = bounds[k - 1] if k else lo / 1.15
        right = bounds[k] if k < len(bounds) else hi * 1.15
        color = colors.get(str(c), "#ececec")
        ax.axvspan(left, right, alpha=0.45, color=color, zorder=0, linewidth=0)
        if math.log(right / left) >= LABEL_MIN_WIDTH * math.log(whole):
            ax.text(math.sqrt(left * right), 0.97, str(c), transform=ax.get_xaxis_transform(),
                    fontsize=7, ha="center", va="top", rotation=90, color="#333333",
                    zorder=7, bbox={"facecolor": "white", "alpha": 0.6, "linewidth": 0,
                                    "pad": 1})


LABEL_MIN_WIDTH = 0.035
"""A region is named in its panel when it spans at least this fraction of the panel's
measured range of M (room for one 7 pt line of vertical text); every region's colour is
named in the figure's legend below the panels."""



def regrets(report: Any, name: str) -> list[float]:
    """Selector ``name``'s regret (fraction) at every scored point it served a measured
    choice at."""
    rep = _selector(report, name)
    out = []
    for sig in report.signatures:
        for p in report.points.get(sig.key, ()):
            if (sig.key, p.m) not in rep.choices:
                continue
            c = rep.choices[(sig.key, p.m)]
            t = p.time(c) if c is not None else math.inf
            if math.isfinite(t):
                out.append(t / p.best() - 1.0)
    return out


def regret_figure(report: Any, path: str | Path, *, title: str = "") -> Path:
    """The CDF of each scored selector's regret over the points (x: regret %, log scale from
    0.1 %; a point at 0 regret sits at the left edge)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    floor = 0.1
    for k, rep in enumerate(r for r in report.selectors if r.overall is not None):
        values = sorted(max(floor, 100 * r) for r in regrets(report, rep.name))
        if not values:
            continue
        ys = [(i + 1) / len(values) for i in range(len(values))]
        s = rep.overall
        ax.step([floor, *values], [0.0, *ys], where="post", linewidth=1.8, color=f"C{k % 10}",
                label=f"{rep.name}: geomean {100 * s.geomean:.1f}%, p95 {100 * s.p95:.1f}%, "
                      f"max {100 * s.max:.1f}% (n={s.n})")
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}%"))
    ax.set_xlabel("regret: time of the choice / best measured - 1 (%, log; <= 0.1% at left)")
    ax.set_ylabel("fraction of measured points")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(title or "regret per selector (higher and further left is better)",
                 fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def e2e_label(result: Mapping[str, Any]) -> str:
    """A model's bar-group label: workload, batch x frames, dtype or quantization."""
    scheme = result.get("quantization") or "none"
    kind = result.get("dtype", "") if scheme == "none" else scheme
    return f"{result.get('model')}\nbatch {result.get('batch')} x {result.get('frames')} " \
           f"frames, {kind}"


def e2e_figure(results: Sequence[Mapping[str, Any]], path: str | Path, *,
               labels: Sequence[str] | None = None, title: str = "") -> Path:
    """Per result (the JSON ``oasr tune bench --json`` prints and ``benchmarks/e2e.py``
    writes): ms per forward of torch and oasr, in a CUDA graph and eagerly, one panel per
    mode, the speedup (torch / oasr) above each pair."""
    plt = _pyplot()
    modes = [m for m in ("CUDA graph", "eager")
             if any(r.get("mode") == m for res in results for r in res.get("rows", ()))]
    if not modes:
        raise ValueError("no result holds a timed row (CUDA graph or eager)")
    names = list(labels) if labels is not None else [e2e_label(r) for r in results]
    fig, axes = plt.subplots(1, len(modes), figsize=(max(6.0, 2.2 * len(results)) * len(modes)
                                                     / 1.4, 4.8), squeeze=False)
    width = 0.38
    for ax, mode in zip(axes.flat, modes, strict=True):
        for i, res in enumerate(results):
            row = next((r for r in res.get("rows", ()) if r.get("mode") == mode), None)
            if row is None:
                continue
            t, o = row["torch_ms"], row["oasr_ms"]
            ax.bar(i - width / 2, t, width, color="#9e9e9e", label="torch" if i == 0 else None)
            ax.bar(i + width / 2, o, width, color=SERVED, label="oasr" if i == 0 else None)
            ax.text(i, max(t, o) * 1.02, f"{t / o:.3f}x", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(results)), names, fontsize=7)
        ax.set_ylabel("ms per forward (median)")
        ax.set_title(f"{mode}: torch vs oasr (speedup = torch / oasr)", fontsize=9)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
        ax.legend(fontsize=8, loc="upper left", ncol=2)
        ax.grid(True, axis="y", alpha=0.25)
    devices = sorted({str(r.get("device")) for r in results})
    torches = sorted({str(r.get("torch")) for r in results})
    idle = [str(r.get("model")) for r in results if r.get("oasr_kernel_calls") == 0]
    note = (f"\nno oasr kernel ran in {', '.join(idle)}: its speedup compares torch with "
            "itself (noise)") if idle else ""
    fig.suptitle((title or f"whole models, {', '.join(devices)}, torch {', '.join(torches)}")
                 + note, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m oasr_core.plots e2e RESULT.json ... --out PNG``."""
    parser = argparse.ArgumentParser(prog="python -m oasr_core.plots",
                                     description="Draw saved oasr results.")
    sub = parser.add_subparsers(dest="what", required=True)
    e2e = sub.add_parser("e2e", help="bar chart of oasr tune bench / benchmarks/e2e.py JSON")
    e2e.add_argument("results", nargs="+", type=Path)
    e2e.add_argument("--label", action="append", default=None,
                     help="bar-group label per result, in order (default: model, shape)")
    e2e.add_argument("--title", default="")
    e2e.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    docs = []
    for p in args.results:
        try:
            docs.append(json.loads(p.read_text()))
        except (OSError, ValueError) as exc:
            parser.error(f"{p}: {exc}")
    if args.label is not None and len(args.label) != len(docs):
        parser.error(f"--label given {len(args.label)} time(s) for {len(docs)} result(s)")
    print(f"wrote {e2e_figure(docs, args.out, labels=args.label, title=args.title)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
