"""What the kernel-against-torch scripts share (``gemm_vs_torch.py``, ``conv1d_vs_torch.py``,
``conv2d_vs_torch.py``, ``recurrent_vs_torch.py``): their common options, the arch they build
for, the prebuild and its report lines, binding a compiled module's configs, the JSONL beside
the report, and the summary arithmetic.

A script prebuilds a lane's whole space (``--prebuild-only`` stops there, and is what runs
without a GPU for ``--arch``) and binds every config the module exports (:func:`start`), times
its points (the timing itself is :mod:`graph_timing`'s) and writes a markdown report with every
point also a JSON line beside it. Importing this module imports neither torch nor a plugin.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from graph_timing import add_mode_argument


def add_run_arguments(parser: argparse.ArgumentParser, *, lanes: bool = False,
                      graph_calls: int = 8, reps: int = 7, top: int = 4) -> None:
    """The options every script takes: ``--out``, ``--jobs``, ``--arch``, ``--dtype``,
    ``--graph-calls``, ``--reps``, ``--top``, ``--prebuild-only``, ``--seed``, the timing mode
    (``--back-to-back``) and, for a family of several lanes, ``--lanes``."""
    parser.add_argument("--out", type=Path, help="markdown report path (JSONL beside it)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="nvcc processes (default: all CPUs)")
    if lanes:
        parser.add_argument("--lanes", default=None,
                            help="comma list (default: the device's lane)")
    parser.add_argument("--arch", default=None,
                        help="arch family for --prebuild-only without a GPU")
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("--graph-calls", type=int, default=graph_calls)
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--top", type=int, default=top)
    parser.add_argument("--prebuild-only", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    add_mode_argument(parser)


@dataclasses.dataclass
class Run:
    """A script's run once its modules are built and their configs bound (:func:`start`)."""

    arch: str
    """The device's arch family (``sm90``)."""
    kernels: Any
    """What the script's ``bind`` returned."""
    build_lines: list[str]
    """The prebuild's report lines (:func:`prebuild`)."""
    timer: Any
    """A :class:`oasr_core.bench.CudaGraphTimer`."""
    rng: random.Random
    """Seeded by ``--seed``: the rounds' order."""
    jsonl: JsonLines
    started: float = dataclasses.field(default_factory=time.perf_counter)
    """When timing began (``time.perf_counter``)."""


def start(args: argparse.Namespace, specs: Callable[[str], Sequence[Any]],
          bind: Callable[[Sequence[Any], str], Any]) -> Run | int:
    """Build ``specs(arch)`` for the target arch (:func:`target_arch`, :func:`prebuild`,
    printing the report lines) and, on a GPU, ``bind(specs, arch)`` them: the :class:`Run`,
    or the exit status where nothing is timed (2: no device and no ``--arch``; 0: the
    prebuild was all, ``--prebuild-only`` or no device)."""
    arch, have_gpu = target_arch(args.arch)
    if arch is None:
        return 2
    built = list(specs(arch))
    _reports, lines = prebuild(built, args.jobs)
    print("\n".join(lines), flush=True)
    if args.prebuild_only or not have_gpu:
        return 0
    kernels = bind(built, arch)
    from oasr_core.bench import CudaGraphTimer

    return Run(arch=arch, kernels=kernels, build_lines=lines, timer=CudaGraphTimer(),
               rng=random.Random(args.seed), jsonl=JsonLines(args.out))


def target_arch(arch: str | None) -> tuple[str | None, bool]:
    """``(arch family, whether a GPU is here)``: the device's family (``sm90``), else
    ``arch`` (``--arch``, for ``--prebuild-only``); ``(None, False)``, with the reason on
    stderr, when there is neither (the script then exits 2)."""
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"sm{major}{minor}", True
    if arch is None:
        print("no CUDA device: pass --arch with --prebuild-only", file=sys.stderr)
    return arch, False


def lanes_for(option: str | None, arch: str, sm80_lane: str, sm90_lane: str) -> list[str]:
    """The lanes a run times: ``--lanes`` (a comma list), else the lane of ``arch`` (the 3.x
    lane on sm90, the 2.x lane elsewhere)."""
    return option.split(",") if option else [sm90_lane if arch == "sm90" else sm80_lane]


def prebuild(specs: Sequence[Any], jobs: int | None) -> tuple[list[Any], list[str]]:
    """Build ``specs`` with the core JIT (``jobs`` nvcc processes); ``(reports, report
    lines)``: per module its status, unit counts and seconds, each failed unit's last error
    line, and the wall time."""
    from oasr_core import jit as core_jit

    started = time.perf_counter()
    reports = core_jit.prebuild(list(specs), jobs=jobs)
    lines = []
    for r in reports:
        counts = {s: sum(1 for u in r.units.values() if u.status.value == s)
                  for s in ("built", "cached", "failed")}
        lines.append(f"- module `{r.name}` ({r.arch}): {r.status.value}; units {counts}; "
                     f"{r.seconds:.0f} s")
        for name, err in r.failed.items():
            lines.append(f"  - failed `{name}`: {(err.strip().splitlines() or ['?'])[-1][:160]}")
    lines.append(f"- prebuild wall time {time.perf_counter() - started:.0f} s")
    return reports, lines


def bind_compiled(spec: Any, configs: Iterable[Any], bind: Callable[[Any, Any], Any],
                  symbol: Callable[[Any], str]) -> dict[str, Any]:
    """The prebuilt module of ``spec`` loaded, and ``bind(module, config)`` of each of
    ``configs`` whose launcher ``symbol(config)`` it exports, by config id."""
    from oasr_core import jit as core_jit

    module = core_jit.load(spec, build_missing=False)
    return {c.id: bind(module, c) for c in configs if symbol(c) in module.exports}


class JsonLines:
    """The JSONL beside a report (``<out>.jsonl``; nothing without ``--out``), emptied when
    made and appended to one row at a time, so a run cut short keeps its points."""

    def __init__(self, out: Path | None) -> None:
        self.path = out.with_suffix(".jsonl") if out else None
        if self.path and self.path.exists():
            self.path.unlink()

    def add(self, row: dict[str, Any]) -> None:
        """Append ``row`` as one JSON line."""
        if self.path:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")


def refused_section(points: Sequence[dict[str, Any]],
                    where: Callable[[dict[str, Any]], str]) -> list[str]:
    """The report's "Gated out or refused" section: each config a point's numerics gate or
    launcher turned away (``point["failed"]``), labelled ``where(point)``, at most 200 lines;
    none where nothing was."""
    failed = [(p, f) for p in points for f in p["failed"]]
    if not failed:
        return []
    return ["", "## Gated out or refused", "", *(f"- {where(p)}: {f}" for p, f in failed[:200])]


def write_report(text: str, out: Path | None) -> None:
    """Print the report and write it to ``out`` (``--out``) when given."""
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)


def geomean(values: Iterable[float | None]) -> float:
    """Geometric mean of the positive finite ``values`` (NaN when there are none)."""
    kept = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in kept) / len(kept)) if kept else float("nan")


def summary_lines(kind: str, count: int, ratios: Iterable[float]) -> list[str]:
    """A report's closing line of one kind of point: how many, how many faster than torch and
    by 5 %, the geomean, worst and best of torch / best (NaN ratios left out)."""
    nan = float("nan")
    ok = [r for r in ratios if not math.isnan(r)]
    return ["", f"- {kind}: {count} points; faster than torch: "
            f"{sum(r > 1 for r in ok)}; >= 5% faster: {sum(r >= 1.05 for r in ok)}; "
            f"geomean torch/best {geomean(ok):.3f}; "
            f"worst {min(ok, default=nan):.3f}; best {max(ok, default=nan):.3f}"]


def failed_lines(points: Iterable[dict[str, Any]], most: int = 40) -> list[str]:
    """The configs that failed the numerics gate or refused at any point (``failed`` of each
    point), the first ``most`` named."""
    failed = sorted({f for p in points for f in p["failed"]})
    return ["", f"- configs failing the numerics gate or refusing somewhere: {len(failed)}",
            *(f"  - {f}" for f in failed[:most])]


def ratio(a: float | None, b: float | None) -> float:
    """``a / b``, NaN where either is missing or zero."""
    return a / b if a and b else float("nan")


def kind_report(points: Sequence[dict[str, Any]], *, title: str, header: Sequence[str],
                back_to_back: bool, heading: Callable[[str], str], columns: tuple[str, str],
                row: Callable[[dict[str, Any], float, float], str]) -> str:
    """The markdown report of a kernel-vs-torch script: ``# title``, the environment and
    protocol lines ``header``, then per kind of point (in order of first appearance) a section
    ``## heading(kind)`` with the timing mode, a table (``columns``: its header and alignment
    rows) of one ``row(point, torch / best, torch / default)`` a point and the kind's
    :func:`summary_lines`; last, :func:`failed_lines`."""
    mode = ("back to back (launch overlap credited)" if back_to_back
            else "separated (separator cost subtracted)")
    lines = [f"# {title}", "", *header]
    for kind in dict.fromkeys(p["kind"] for p in points):
        rows = [p for p in points if p["kind"] == kind]
        lines += ["", f"## {heading(kind)} (us per call, median, {mode}; ratio = torch / best)",
                  "", *columns]
        ratios = []
        for p in rows:
            r = ratio(p["torch_us"], p["best_us"])
            ratios.append(r)
            lines.append(row(p, r, ratio(p["torch_us"], p["default_us"])))
        lines += summary_lines(kind, len(rows), ratios)
    lines += failed_lines(points)
    return "\n".join(lines) + "\n"
