"""How long `oasr tune build` takes from a fresh GPU machine, and what its tables are worth.

What it times: whole `oasr tune build` processes (wall, from a cold JIT cache so the compile
is counted), split into compile (the build's own note: units, compile wall, measuring's wait
for modules) and measuring (the build's elapsed time less that wait). No separator applies:
these are whole commands, not kernels. Then the regret of each table against the oracle of
an exhaustive build's log of the same census (`oasr tune evaluate`'s geomean / p95), and the
agreement of the default build with the exhaustive one (weighted census points with the same
choice or choices measured within 1%).

Two censuses:

- ``conformer``: the reference Conformer census (benchmarks/census/conformer_*.json, 5
  signatures, thinned to 14 points); its exhaustive log is the committed one
  (db/sm90/measurements/gemm.jsonl), so no exhaustive run is needed here;
- ``conformer_again``: a second default build of it (seed 1, its own empty JIT cache), for
  the agreement of two builds;
- ``speed14``: 14 signatures (Conformer-L d=512 / FFN 2048 and Zipformer widths, none of the
  reference's) x 11 sizes (benchmarks/census/build_speed_14.json, written by ``census``);
  its reference (``speed14_reference``) is a build that measures every config of the lane at
  every census point (``--top-k`` past the space, ``--no-fill``, bounded by ``--budget-s``),
  compiled like the default build (the measured dtype's kernels, bundled) from its own empty
  JIT cache; it can run in another process than the default build (``score`` joins them).

Usage (the H200 phase ``benchmarks/h200/run.sh build-speed``)::

    python3 benchmarks/build_speed.py census --out benchmarks/census/build_speed_14.json
    python3 benchmarks/build_speed.py run --out-dir OUT [--fresh-jit DIR] [--exhaustive-budget S]
        [--census conformer speed14 speed14_reference]
    python3 benchmarks/build_speed.py score --out-dir OUT RUN_DIR [RUN_DIR...]

``run`` writes OUT/build_speed.md, OUT/build_speed.json (the figures and the tables) and the
builds' measurement logs; ``score`` merges the build_speed.json of several run directories
(their logs beside them, .jsonl or .jsonl.gz) and scores again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's oasr_core, as `python3 -m oasr_core.cli` sees it
CONFORMER = [ROOT / "benchmarks/census/conformer_offline.json",
             ROOT / "benchmarks/census/conformer_streaming.json"]
SPEED14 = ROOT / "benchmarks/census/build_speed_14.json"
CONFORMER_LOG = ROOT / "db/sm90/measurements/gemm.jsonl"

SIGNATURES = (
    # Conformer-L (d_model 512, FFN 2048, conv expansion 2): FFN in/out, fused QKV, attention
    # out and conv pointwise out, conv pointwise in (GLU), the subsampling projection.
    ("gemm_activation", 2048, 512), ("gemm", 512, 2048), ("gemm", 1536, 512),
    ("gemm", 512, 512), ("gemm", 1024, 512), ("gemm", 512, 9728),
    # Zipformer stacks (encoder dims 192/256/384/512, FFN 3-4x): FFN in/out, QKV at 192.
    ("gemm_activation", 768, 256), ("gemm", 256, 768), ("gemm_activation", 1024, 384),
    ("gemm", 384, 1024), ("gemm_activation", 1536, 512), ("gemm", 512, 1536),
    ("gemm", 576, 192), ("gemm", 192, 192),
)
SIZES = (64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 8192, 16384)
TARGETS = {"conformer": {"measure_s": 30.0, "wall_s": 90.0},
           "speed14": {"wall_s": 180.0}}
REGRET_TARGET = {"geomean": 0.02, "p95": 0.08}
AGREEMENT_TARGET = 0.95


def write_census(out: Path) -> None:
    """The 14-signature census: every size weighted alike, must-tune, captured (alpha 0)."""
    points = [{"family": "gemm", "op": op, "dtype": "fp16", "dims": {"N": n, "K": k}, "M": m,
               "batch": 1, "point": None, "calls": 1.0,
               "weight": 1.0 / (len(SIGNATURES) * len(SIZES)), "must": True,
               "eager_fraction": 0.0, "keys": [f"speed14:M{m}"]}
              for op, n, k in SIGNATURES for m in SIZES]
    weights = sum(2 * n * k for _op, n, k in SIGNATURES)
    doc = {"schema_version": 1, "points": points, "working_set_bytes": weights,
           "provenance": {"tool": "benchmarks/build_speed.py census",
                          "note": "Conformer-L d=512 FFN 2048 and Zipformer widths x 11 sizes"}}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")


NOTE_RE = re.compile(r"compile: (\d+) unit\(s\) \(([^)]*)\) in ([\d.]+) s over (\d+) module\(s\); "
                     r"measuring waited ([\d.]+) s")


def run_build(name: str, censuses: Sequence[Path], out_dir: Path, scratch: Path,
              extra: Sequence[str], env: dict[str, str]) -> dict[str, Any]:
    """One `oasr tune build` process: its wall time, compile note and summary (the table
    and checkpoint go to ``scratch``, the log to ``out_dir``)."""
    table, log = scratch / f"{name}.json", out_dir / f"{name}.jsonl"
    cmd = [sys.executable, "-m", "oasr_core.cli", "tune", "build", "--family", "gemm",
           *[a for c in censuses for a in ("--census", str(c))], "--fresh", "--no-progress",
           "--out", str(table), "--log", str(log),
           "--checkpoint", str(scratch / f"{name}.checkpoint.jsonl"), "--json", *extra]
    print(f"[build_speed] {name}: {' '.join(cmd[3:])}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=ROOT)
    wall = time.monotonic() - started
    (scratch / f"{name}.stderr.txt").write_text(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: oasr tune build exited {proc.returncode}:\n"
                         f"{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout)
    note = next((NOTE_RE.search(m) for m in summary["messages"] if NOTE_RE.search(m)), None)
    compile_s = float(note.group(3)) if note else 0.0
    waited = float(note.group(5)) if note else 0.0
    row = {"name": name, "wall_s": round(wall, 1), "build_elapsed_s": summary["elapsed_s"],
           "compile_s": compile_s, "waited_s": waited,
           "measure_s": round(summary["elapsed_s"] - waited, 1),
           "units": int(note.group(1)) if note else None,
           "unit_outcomes": note.group(2) if note else None,
           "points": summary["points"], "table": str(table), "log": str(log),
           "messages": summary["messages"], "file": json.loads(table.read_text())}
    row["phases"] = phase_seconds(log)
    print(f"[build_speed] {name}: wall {row['wall_s']} s, compile {compile_s} s, "
          f"measure {row['measure_s']} s, {row['units']} units", flush=True)
    return row


def phase_seconds(log: Path) -> dict[str, Any]:
    """Where a build's measuring went, from its log's row stamps (seconds resolution: each
    point's run is the time since the previous one; the sum is exact, the split by phase
    only as good as the stamps): seconds and runs of main and cross phases, arm rows."""
    import datetime

    from oasr_core.measurements import read_logs

    _runs, arms, _bad = read_logs([log])
    groups: list[tuple[float, str]] = []
    seen: set[tuple[str, int, str]] = set()
    for r in arms:
        key = (str(r.get("key")), int(r.get("M") or 0), str(r.get("phase")))
        if key not in seen:
            seen.add(key)
            stamp = datetime.datetime.fromisoformat(str(r["time"])).timestamp()
            groups.append((stamp, key[2]))
    out: dict[str, Any] = {"rows": len(arms)}
    for (t0, _), (t1, phase) in zip(groups, groups[1:], strict=False):
        out[f"{phase}_s"] = out.get(f"{phase}_s", 0.0) + (t1 - t0)
        out[f"{phase}_runs"] = out.get(f"{phase}_runs", 0) + 1
    return out


def score(log: Path, tables: dict[str, Path], pair: tuple[str, str]) -> dict[str, Any]:
    """Regret of each table on ``log`` (its oracle) and the agreement of ``pair``."""
    from oasr_core.database import read_tuning_file
    from oasr_core.evaluate import TableSelector, agreement, evaluate
    from oasr_core.measurements import read_logs
    from oasr_core.runtime import get_runtime

    fam = get_runtime().registry.family("gemm")
    _runs, arms, _bad = read_logs([log])
    read = {n: read_tuning_file(p) for n, p in tables.items()}
    # Only the signatures the census (its default build's table) holds: the reference log
    # may hold others, e.g. a signature an earlier census had.
    keys = set(read[pair[0]].entries)
    arms = [r for r in arms if r.get("family") == "gemm" and r.get("key") in keys]
    sels = [TableSelector(n, t, fam) for n, t in read.items()]
    report = evaluate(arms, fam, sels)
    out: dict[str, Any] = {"log": str(log), "lines": report.lines()}
    for rep in report.selectors:
        s = rep.overall
        out[rep.name] = {"geomean": s.geomean, "p95": s.p95, "max": s.max, "n": s.n,
                         "missing": s.missing}
    out["agreement"] = agreement(report, *pair)
    return out


def passed(value: float, limit: float) -> str:
    """``pass`` when ``value`` is at most ``limit``."""
    return "pass" if math.isfinite(value) and value <= limit else "FAIL"


def reached(value: float, floor: float) -> str:
    """``pass`` when ``value`` is at least ``floor``."""
    return "pass" if math.isfinite(value) and value >= floor else "FAIL"


def report_md(rows: dict[str, dict[str, Any]], scores: dict[str, dict[str, Any]]) -> str:
    lines = ["# `oasr tune build` from a fresh JIT cache on this GPU", "",
             "`benchmarks/h200/run.sh build-speed` (benchmarks/build_speed.py). Default builds "
             "start from an empty JIT cache (compile counted), the 14-signature reference "
             "(every config at every census point) from its own. Measure = the build's "
             "elapsed time less its wait for compiled modules.", "",
             "| build | wall s | compile s | measure s | waited s | units | points | target |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        census = name.split("_")[0]
        tgt = TARGETS.get(census, {}) if name.endswith(("default", "again")) else {}
        checks = [f"wall <= {tgt['wall_s']:g}: {passed(r['wall_s'], tgt['wall_s'])}"
                  if "wall_s" in tgt else "",
                  f"measure <= {tgt['measure_s']:g}: {passed(r['measure_s'], tgt['measure_s'])}"
                  if "measure_s" in tgt else ""]
        lines.append(f"| {name} | {r['wall_s']} | {r['compile_s']} | {r['measure_s']} | "
                     f"{r['waited_s']} | {r['units']} ({r['unit_outcomes']}) | {r['points']} | "
                     f"{'; '.join(c for c in checks if c) or '-'} |")
    lines += ["", "Measuring by phase (from the logs' row stamps, seconds resolution):", "",
              "| build | arm rows | main runs | main s | cross runs | cross s |",
              "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        ph = r.get("phases", {})
        lines.append(f"| {name} | {ph.get('rows', 0)} | {ph.get('main_runs', 0)} | "
                     f"{ph.get('main_s', 0.0):.0f} | {ph.get('cross_runs', 0)} | "
                     f"{ph.get('cross_s', 0.0):.0f} |")
    lines += ["", "| census | table | geo% | p95% | max% | n | miss | agreement with the "
              "exhaustive table |", "|---|---|---|---|---|---|---|---|"]
    for census, sc in scores.items():
        for name in (n for n in sc if isinstance(sc[n], dict)):
            s = sc[name]
            ok = (f" ({passed(s['geomean'], REGRET_TARGET['geomean'])} / "
                  f"{passed(s['p95'], REGRET_TARGET['p95'])})") if name == "default" else ""
            agree = (f"{100 * sc['agreement']:.1f}% "
                     f"({reached(sc['agreement'], AGREEMENT_TARGET)})"
                     if name == "default" else "")
            if name == "default" and "two_builds" in sc:
                agree += (f"; with a second default build (seed 1): "
                          f"{100 * sc['two_builds']:.1f}% "
                          f"({reached(sc['two_builds'], AGREEMENT_TARGET)})")
            lines.append(f"| {census} | {name} | {100 * s['geomean']:.1f}{ok} | "
                         f"{100 * s['p95']:.1f} | {100 * s['max']:.1f} | {s['n']} | "
                         f"{s['missing']} | {agree} |")
    for census, sc in scores.items():
        lines += ["", f"## {census}: `oasr tune evaluate` on {Path(sc['log']).name}", "", "```",
                  *sc["lines"], "```"]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    out, scratch = args.out_dir, args.fresh_jit
    out.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    if not SPEED14.exists():
        write_census(SPEED14)
    base = dict(os.environ)
    base.pop("OASR_TUNE_SYSTEM_DB", None)  # the prior model is the shipped system tier's
    rows: dict[str, dict[str, Any]] = {}
    scores: dict[str, dict[str, Any]] = {}
    fresh = scratch
    conformer_knobs = ["--thin", "--max-points", "14"]
    if "conformer" in args.census:
        env = {**base, "OASR_JIT_DIR": str(fresh / "conformer")}
        rows["conformer_default"] = run_build("conformer_default", CONFORMER, out, scratch,
                                              ["--effort", "default", *conformer_knobs], env)
    if "conformer_again" in args.census:
        env = {**base, "OASR_JIT_DIR": str(fresh / "conformer_again")}
        rows["conformer_again"] = run_build("conformer_again", CONFORMER, out, scratch,
                                            ["--effort", "default", "--seed", "1",
                                             *conformer_knobs], env)
    if "speed14" in args.census:
        env = {**base, "OASR_JIT_DIR": str(fresh / "speed14")}
        rows["speed14_default"] = run_build("speed14_default", [SPEED14], out, scratch,
                                            ["--effort", "default"], env)
    if "speed14_reference" in args.census:
        env = {**base, "OASR_JIT_DIR": str(fresh / "speed14_reference")}
        rows["speed14_reference"] = run_build(
            "speed14_reference", [SPEED14], out, scratch,
            ["--effort", "default", "--top-k", "100000", "--max-units", "0", "--no-fill",
             "--budget-s",
             str(args.exhaustive_budget)], env)
    scores.update(score_rows(rows, out))
    write_report(rows, scores, out)
    return 0


def score_rows(rows: dict[str, dict[str, Any]], logs: Path) -> dict[str, dict[str, Any]]:
    """Regret and agreement of each census whose default and reference builds are in
    ``rows`` (the tables from the rows, the reference logs from ``logs``)."""
    import tempfile

    scores: dict[str, dict[str, Any]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="oasr-build-speed-score-"))

    def table(name: str) -> Path:
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(rows[name]["file"]))
        return path

    if "conformer_default" in rows:
        tables = {"default": table("conformer_default"),
                  "exhaustive": ROOT / "db/sm90/gemm.json"}
        if "conformer_again" in rows:
            tables["again"] = table("conformer_again")
        scores["conformer"] = score(CONFORMER_LOG, tables, ("default", "exhaustive"))
        if "conformer_again" in rows:
            scores["conformer"]["two_builds"] = score(CONFORMER_LOG, tables,
                                                      ("default", "again"))["agreement"]
    if "speed14_default" in rows and "speed14_reference" in rows:
        log = _log(logs, "speed14_reference")
        scores["speed14"] = score(log, {"default": table("speed14_default"),
                                        "exhaustive": table("speed14_reference")},
                                  ("default", "exhaustive"))
    return scores


def _log(where: Path, name: str) -> Path:
    """``name``'s measurement log in ``where`` (gunzipped beside itself when only .gz is)."""
    import gzip
    import shutil

    plain, packed = where / f"{name}.jsonl", where / f"{name}.jsonl.gz"
    if not plain.exists() and packed.exists():
        with gzip.open(packed, "rb") as src, plain.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return plain


def write_report(rows: dict[str, dict[str, Any]], scores: dict[str, dict[str, Any]],
                 out: Path) -> None:
    (out / "build_speed.json").write_text(json.dumps(
        {"builds": rows, "scores": {c: {k: v for k, v in s.items() if k != "lines"}
                                    for c, s in scores.items()}}, indent=1) + "\n")
    text = report_md(rows, scores)
    (out / "build_speed.md").write_text(text)
    print(text)


def rescore(args: argparse.Namespace) -> int:
    """``score``: merge the rows of several run directories, copy their logs into
    ``--out-dir`` and score again."""
    import shutil

    rows: dict[str, dict[str, Any]] = {}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for run_dir in args.runs:
        rows.update(json.loads((run_dir / "build_speed.json").read_text())["builds"])
        for log in run_dir.glob("*.jsonl*"):
            if log.parent.resolve() != args.out_dir.resolve():
                shutil.copy(log, args.out_dir / log.name)
    write_report(rows, score_rows(rows, args.out_dir), args.out_dir)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("census", help="write the 14-signature census")
    c.add_argument("--out", type=Path, default=SPEED14)
    r = sub.add_parser("run", help="time the builds and score them (needs the GPU)")
    r.add_argument("--out-dir", type=Path, required=True)
    r.add_argument("--fresh-jit", type=Path, default=None,
                   help="scratch: the empty JIT caches of the default builds (never the "
                   "carried cache), tables, checkpoints and stderr (default: a new /tmp dir)")
    r.add_argument("--exhaustive-budget", type=float, default=170.0,
                   help="measuring budget of the 14-signature reference build, seconds")
    r.add_argument("--census", nargs="+", default=["conformer", "speed14", "speed14_reference"],
                   choices=["conformer", "conformer_again", "speed14", "speed14_reference"])
    sc = sub.add_parser("score", help="merge run directories and score again (no GPU)")
    sc.add_argument("--out-dir", type=Path, required=True)
    sc.add_argument("runs", type=Path, nargs="+", help="directories holding build_speed.json")
    args = ap.parse_args(argv)
    if args.cmd == "score":
        return rescore(args)
    if args.cmd == "census":
        write_census(args.out)
        print(f"wrote {args.out}")
        return 0
    if args.fresh_jit is None:
        import tempfile

        args.fresh_jit = Path(tempfile.mkdtemp(prefix="oasr-build-speed-"))
    for name in args.census:
        if (args.fresh_jit / name).exists():
            raise SystemExit(f"{args.fresh_jit / name} exists: the default builds need an empty "
                             "JIT cache so their compile is counted")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
