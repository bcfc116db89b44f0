"""conv1d's untuned selector replayed offline on an H200 benchmark log.

For every shape of ``conv1d_vs_torch.py``'s JSONL (every config screened once, torch timed
the way a model runs it), the family's untuned answer is what :func:`oasr_core.select` serves
with no tuning entry: the shape heuristic's config where ``Family.untuned_gate`` admits it,
torch elsewhere. Its screened time against torch's, per set, is what a user gets at widths no
table covers. It times nothing itself: the times are the log's, which ``conv1d_vs_torch.py``
measures with the spec's separator protocol by default (each call followed by a tiny unrelated
kernel whose cost is subtracted); the report states the log's timing mode, and a log timed
back to back (``--back-to-back``) is labelled so. Run:
``python3 benchmarks/conv1d_untuned_offline.py [LOG] --out MD``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "benchmarks" / "results" / "conv1d_vs_torch_tuned.jsonl"


def problem_of(row):
    from oasr_core.types import Problem

    t_out = (row["T"] + 2 * row["pad"] - row["dil"] * (row["k"] - 1) - 1) // row["stride"] + 1
    dims = tuple((d, row[d]) for d in ("Cin", "Cout", "k", "stride", "pad", "dil", "groups"))
    return Problem("conv1d", row["op"], row["dtype"], dims, row["B"] * t_out,
                   point=f'{row["B"]}x{row["T"]}')


def replay(rows, arch="sm90"):
    """Per row: (set, shape text, untuned choice, untuned / torch) from the screened times."""
    from oasr_core.plugins import make_plugin_manager
    from oasr_core.registry import Registry

    registry = Registry.from_plugin_manager(make_plugin_manager())
    family = registry.family("conv1d")
    lane = registry.active_lane("conv1d", arch)
    out = []
    for row in rows:
        problem = problem_of(row)
        config = family.sentinel_heuristic(problem, lane)
        screened = row["screen_us"]
        if config is None or not lane.supports(config, problem) or not family.untuned_gate(
                config, problem) or config.id not in screened:
            choice, ratio = "torch", 1.0
        else:
            choice, ratio = config.id, screened["torch"] / screened[config.id]
        shape = (f'{row["Cin"]}->{row["Cout"]} k{row["k"]} s{row["stride"]} g{row["groups"]} '
                 f'{row["B"]}x{row["T"]}')
        out.append((row["set"], shape, choice, ratio))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", nargs="?", default=str(LOG))
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.log).read_text().splitlines() if line]
    results = replay(rows)
    modes = sorted({row.get("timing", "separated") for row in rows})
    timing = ("separated: each call followed by a separator kernel, its cost subtracted"
              if modes == ["separated"] else
              f"{', '.join(modes)} (back-to-back times credit launch overlap a model never gives)")
    lines = ["# conv1d untuned selector, replayed offline on an H200 log", "",
             f"- timing of the log: {timing}",
             f"- log: `{Path(args.log).name}` (every config screened once per shape, torch as a "
             "model runs it: transpose, cuDNN, activation, transpose back)",
             "- untuned: the heuristic's config where `Family.untuned_gate` admits it, else torch",
             "", "| set | shapes | on a config | untuned / torch geomean | min |",
             "|---|---:|---:|---:|---:|"]
    for name in dict.fromkeys(r[0] for r in results):
        mine = [r for r in results if r[0] == name]
        geo = math.exp(sum(math.log(r[3]) for r in mine) / len(mine))
        lines.append(f"| {name} | {len(mine)} | {sum(r[2] != 'torch' for r in mine)} | "
                     f"{geo:.3f}x | {min(r[3] for r in mine):.3f}x |")
    lines += ["", "| set | shape | untuned | untuned / torch |", "|---|---|---|---:|"]
    lines += [f"| {s} | {shape} | `{c}` | {r:.3f}x |" for s, shape, c, r in results]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))


if __name__ == "__main__":
    main()
