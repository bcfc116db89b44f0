"""A tuning table's served choice against torch at every census point of a measurement log.

Both times come from the same build run (the log's main-phase rows at each point), so the
ratio is measured on one GPU in one process. Prints a markdown table per signature and the
summary (geomean, worst, best) over census points; fill points are left out.

Run: ``python benchmarks/table_vs_torch.py --log db/sm90/measurements/gemm.jsonl
--table db/sm90/gemm.json``.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path


def _rows(path: Path):
    with path.open() as fh:
        for line in fh:
            line = line.strip()
            if line:
                row = json.loads(line)
                if row.get("row") == "arm" and row.get("status") == "ok":
                    yield row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--table", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    args = ap.parse_args()
    from oasr_core.database import read_tuning_file

    table = read_tuning_file(args.table)
    times: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    fill: dict[tuple[str, int], bool] = {}
    for row in _rows(args.log):
        point = (row["key"], int(row["M"]))
        arm = row["config"]
        t = float(row["median_ms"])
        if row.get("phase", "main") == "main" or arm not in times[point]:
            times[point][arm] = t
        fill[point] = bool(row.get("fill"))
    lines, ratios = [], []
    by_key: dict[str, list[int]] = defaultdict(list)
    for key, m in sorted(times):
        if not fill[(key, m)]:
            by_key[key].append(m)
    for key, ms in by_key.items():
        entry = table.entries.get(key)
        lines += [f"\n### {key}\n", "| M | served | served us | torch us | torch/served |",
                  "|---:|---|---:|---:|---:|"]
        for m in ms:
            arms = times[(key, m)]
            choice = entry.lookup(m) if entry is not None else None
            if choice is None or choice not in arms or "torch" not in arms:
                lines.append(f"| {m} | {choice} | - | - | - |")
                continue
            ratio = arms["torch"] / arms[choice]
            ratios.append(ratio)
            lines.append(f"| {m} | {choice} | {1e3 * arms[choice]:.2f} | "
                         f"{1e3 * arms['torch']:.2f} | {ratio:.3f} |")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
    summary = (f"\n{len(ratios)} census points: served/torch speedup geomean {geo:.3f}x, "
               f"worst {min(ratios):.3f}x, best {max(ratios):.3f}x; "
               f"{sum(r >= 0.99 for r in ratios)} at or within 1% of torch or faster")
    text = "\n".join(lines) + "\n" + summary + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
