"""The int8 scaled GEMM (scaled_mm) against torch's int8 path, graph-timed in one run.

Three subcommands, each printing a markdown report (GPU and torch named) and writing JSONL
beside it:

``sweep``   every config of the lane (data-parallel and Stream-K) that supports the shape, at
            every width (N, K) x M of a ladder, next to ``torch`` (``torch._int_mm`` then the
            scaling in torch, in the kernels' op order: :mod:`oasr_scaled_mm.reference`),
            ``int_mm`` (``torch._int_mm`` alone) and ``fp16`` (``F.linear`` on fp16 operands
            of the same shape, a baseline). Every config's output is first checked bitwise
            against the reference; a failing or refusing config is reported, never timed.
            The heuristic's config is timed a second time as the arm ``repeat`` (the noise
            line of the report). The JSONL rows (one per arm and point) are what ``fit``
            reads.
``fit``     fits the lane's heuristic ladder (:func:`oasr_scaled_mm.heuristic.fit_ladder`) on
            a sweep log: in-sample regret of the unfitted and the fitted table, held-out
            regret by leaving one width out, the Conformer widths alone; writes the fitted
            ladder file (``fitted_ladders.json`` format) with that evidence. CPU only.
``served``  at every scaled_mm point of one or more censuses: the config a tuning file
            serves there (oasr_core selection with the file as the system tier; "heuristic"
            regions and uncovered points resolve to the heuristic), the heuristic's own
            config, ``torch`` and ``int_mm``; speedups per point and geomeans against the
            goals (tuned >= 5.5x torch's int8 path, >= 1.5x ``_int_mm`` alone).

``--ladders FILE`` (sweep, served) makes the heuristic, and so a tuning file's "heuristic"
regions, use the tables of a fitted-ladder file in that run instead of the package's own.

Timing (sweep, served) is the house protocol, :func:`oasr_core.bench.measure` with
:class:`oasr_core.bench.CudaGraphTimer`, without successive halving: each arm is a CUDA graph
of N calls (N >= 8, about ``--target-us`` per replay, the same N for every arm of a point),
each call followed by a tiny separator kernel whose separately measured cost is subtracted
(back-to-back copies of one kernel cannot overlap, as inside a model; ``--back-to-back``
drops the separator, crediting the launch overlap, and the report says so); every arm is replayed
in each of ``--rounds`` shuffled, interleaved rounds (stopping early once every arm's
sigma/median is <= 1 %); the estimate is the median per call. Weights are warm (one copy)
in the sweep; ``served`` rotates copies only when the census's weight working set exceeds
L2 (the Conformer's, 29 MB, does not: warm, as ``oasr tune build`` measures it). ``_int_mm``
refuses M <= 16: there ``torch`` and ``int_mm`` run on A padded to 17 rows outside the graph
(they pay for the padded GEMM, not for the padding), as the build's torch arm does. Operands
are quantized random normals (per-token / per-channel scales, a float32 bias), never zeros.

Usage (H200; the JIT cache prebuilt in $OASR_JIT_DIR, e.g. by
``oasr tune prebuild --family scaled_mm --arch 9.0a --all``; packages on PYTHONPATH)::

    python3 benchmarks/scaled_mm_vs_torch.py sweep --out $OUT/scaled_mm_sweep.md
    python3 benchmarks/scaled_mm_vs_torch.py fit --log $OUT/scaled_mm_sweep.jsonl \\
        --out-ladders $OUT/fitted_ladders.json --out $OUT/scaled_mm_fit.md
    python3 benchmarks/scaled_mm_vs_torch.py served \\
        --census benchmarks/census/conformer_offline_int8.json \\
        --census benchmarks/census/conformer_streaming_int8.json \\
        --db $OUT/scaled_mm.json --out $OUT/scaled_mm_served.md

``fit`` also runs on a machine without a GPU (``--out-ladders`` at
``plugins/oasr_scaled_mm/src/oasr_scaled_mm/fitted_ladders.json`` updates the shipped file,
keeping its other tables).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # graph_timing.py, when imported

from graph_timing import BackToBackTimer, add_mode_argument, mode_line  # noqa: E402

PROG = "scaled_mm_vs_torch"
CONFORMER_WIDTHS = ((256, 256), (1024, 256), (256, 1024), (512, 256))
TRANSFER_WIDTHS = ((384, 384), (1536, 384), (384, 1536), (512, 512), (2048, 512), (512, 2048),
                   (768, 768), (3072, 768), (768, 3072), (1280, 1280), (5120, 1280))
WIDTHS = CONFORMER_WIDTHS + TRANSFER_WIDTHS
M_LADDER = (16, 32, 64, 128, 256, 416, 512, 1000, 1500, 2152, 3000, 4096, 6000, 8192, 12000,
            16384, 24032, 32768)
BASELINES = ("torch", "int_mm", "fp16")
REPEAT = "repeat"
"""A second, independently captured arm of the heuristic's config (the noise of a point)."""
NOT_CONFIGS = (*BASELINES, REPEAT)
MIN_INT_MM_ROWS = 17
"""``torch._int_mm`` needs more than 16 rows."""
GOAL_TORCH, GOAL_INT_MM = 5.5, 1.5


# --- shared pieces -------------------------------------------------------------------------

def geomean(values: Any) -> float:
    """Geometric mean of the positive finite values (nan for none)."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else math.nan


def weighted_geomean(pairs: Any) -> float:
    """Geometric mean of ``(value, weight)`` pairs (positive finite values, weights > 0)."""
    pairs = [(v, w) for v, w in pairs if v and v > 0 and math.isfinite(v) and w and w > 0]
    total = sum(w for _, w in pairs)
    return math.exp(sum(w * math.log(v) for v, w in pairs) / total) if total else math.nan


def fmt(value: Any, digits: int = 2) -> str:
    """A number for a table cell (``n/a`` for None/nan)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def finite(value: Any) -> Any:
    """``value`` with nan/inf as None (JSON without NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def parse_widths(text: str | None) -> tuple[tuple[int, int], ...]:
    """``"256,256;1024,256"`` (or ``256x256;...``) as ((N, K), ...); None: the default set."""
    if not text:
        return WIDTHS
    out = []
    for part in text.replace(" ", "").split(";"):
        if part:
            n, k = part.replace("x", ",").split(",")
            out.append((int(n), int(k)))
    return tuple(out)


def parse_ms(text: str | None) -> tuple[int, ...]:
    """``"16,64,1000"`` as (16, 64, 1000); None: the default ladder."""
    return tuple(int(m) for m in text.split(",") if m) if text else M_LADDER


def fail(message: str) -> int:
    """Print a one-line error and return the exit status."""
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def cuda_problem() -> str | None:
    """Why this process cannot time on a GPU (one line), or None."""
    try:
        import torch
    except ImportError as exc:
        return f"torch is not importable ({exc}); sweep and served need a CUDA GPU"
    if not torch.cuda.is_available():
        return "no CUDA device: sweep and served need a GPU (fit runs anywhere)"
    return None


def lanes() -> dict[str, Any]:
    """The plugin's lane records by name."""
    from oasr_scaled_mm import hooks

    return {lane.name: lane for lane in hooks.oasr_register_lanes()}


def device_info() -> dict[str, Any]:
    """Name, arch family, SM count and L2 bytes of the current CUDA device; torch version."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"gpu": props.name, "arch": f"sm{props.major}{props.minor}",
            "sm_count": int(props.multi_processor_count),
            "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0) or None,
            "torch": torch.__version__, "cuda": torch.version.cuda}


def default_lane(arch: str, lane_records: dict[str, Any]) -> str:
    """The lane a build on ``arch`` measures (the one whose ``default_on`` names it)."""
    for name, lane in lane_records.items():
        if arch in lane.default_on:
            return name
    raise SystemExit(f"{PROG}: no scaled_mm lane is the default on {arch}; pass --lane")


def load_kernels(lane: str, arch: str) -> tuple[dict, list[str]]:
    """Every compiled (op, config) of ``lane`` on ``arch`` (its full module), and report lines."""
    from oasr_scaled_mm import jit
    from oasr_scaled_mm.launch import bind_all

    from oasr_core import jit as core_jit

    started = time.perf_counter()
    spec = jit.full_spec(lane, arch)
    module = core_jit.load(spec)
    kernels = bind_all(module, jit.lane_configs(lane, arch))
    lines = [f"- module `{spec.name}` ({spec.arch}): {len(kernels)} launchers bound, "
             f"{len(module.failed)} unit(s) failed; load {time.perf_counter() - started:.1f} s"]
    lines += [f"  - failed `{name}`" for name in sorted(module.failed)]
    return kernels, lines


def use_ladders(path: Path | None) -> str | None:
    """Serve the heuristic from the fitted tables of ``path`` in this process (over the
    package's own); the problem in one line, or None."""
    if path is None:
        return None
    from oasr_scaled_mm import heuristic

    try:
        entries = heuristic.read_fitted(path)
    except (OSError, ValueError) as exc:
        return f"--ladders {path}: {exc}"
    heuristic.ARCH_LADDERS = {**heuristic.ARCH_LADDERS, **{e.key: e.ladder for e in entries}}
    return None


def bench_options(seed: int, rounds: int, target_us: float, l2_bytes: int | None,
                  working_set: int | None):
    """The protocol's options: one stage of ``rounds`` (no halving), few issue calls."""
    from oasr_core.bench import BenchOptions

    return BenchOptions(seed=seed, l2_bytes=l2_bytes, working_set_bytes=working_set,
                        stage_rounds=(rounds,), target_graph_us=target_us, issue_reps=8,
                        solo_reps=3)


def make_case(kernels: dict, configs: list, op: str, n: int, k: int, m: int, *, seed: int,
              copies: int = 1, baselines: tuple[str, ...] = BASELINES, arms_first: tuple = (),
              repeat: str | None = None, device: Any = None):
    """A :class:`oasr_core.bench.BenchCase` of one point and its bitwise check.

    Arms: each config in ``configs`` (launched through its prepared call, as the served op
    launches it), then ``baselines`` (``torch``, ``int_mm``, ``fp16``). Every config and
    ``torch`` is run once first and compared bitwise with the exact reference; one that
    refuses or differs goes to ``rejected`` with the reason (never timed). Weights rotate
    through ``copies`` copies (1: warm). ``arms_first`` names arms to order first (the
    protocol's calls-per-graph probe uses the first). ``repeat`` names a config to time a
    second time as the arm :data:`REPEAT` (its own output buffer and graph): the two
    estimates of one kernel show the point's noise. ``device`` defaults to the current CUDA
    device.
    """
    import torch
    import torch.nn.functional as F
    from oasr_scaled_mm import numerics, reference
    from oasr_scaled_mm.config_space import OP_QUANT
    from oasr_scaled_mm.launch import LaunchError, status_text

    from oasr_core.bench import BenchCase

    dev = torch.device(device) if device is not None else \
        torch.device("cuda", torch.cuda.current_device())
    index = dev.index or 0
    gen = torch.Generator(device=dev).manual_seed(seed)
    a, a_scale = numerics.quantize_rows(torch.randn(m, k, device=dev, generator=gen))
    w, w_scale = numerics.quantize_rows(torch.randn(n, k, device=dev, generator=gen) / k ** 0.5)
    bias = torch.randn(n, device=dev, generator=gen)
    weights = [w] + [w.clone() for _ in range(copies - 1)]
    quant = op == OP_QUANT
    acc = reference.exact_acc(a, w)
    value = reference.scale(acc, a_scale, w_scale, bias)
    out_scale = numerics.out_scale_for(value) if quant else 1.0
    out_scale_t = torch.tensor([out_scale], dtype=torch.float32, device=dev)
    ref = reference.quantize_output(value, out_scale_t) if quant else value.to(torch.float16)
    out_dtype, out_name = (torch.int8, "int8") if quant else (torch.float16, "fp16")
    stream_of = torch._C._cuda_getCurrentRawStream
    arms: dict[str, Any] = {}
    rejected: dict[str, str] = {}

    def config_arm(cfg: Any) -> Any:
        kernel = kernels.get((op, cfg.id))
        if kernel is None:
            raise LaunchError(f"{cfg.id} is not compiled for {op} in the module")
        prepared = kernel.prepare(out_name, m, n, k)
        out = torch.empty(m, n, dtype=out_dtype, device=dev)

        def run(i: int) -> Any:
            status = prepared.launch(a.data_ptr(), weights[i].data_ptr(), a_scale.data_ptr(),
                                     w_scale.data_ptr(), bias.data_ptr(), 0, out_scale,
                                     out.data_ptr(), index, stream_of(index))
            if status:
                raise LaunchError(f"{cfg.id} refused m={m} n={n} k={k}: {status_text(status)}")
            return out
        return run

    padded = a if m >= MIN_INT_MM_ROWS else torch.cat([a, a.new_zeros(MIN_INT_MM_ROWS - m, k)])

    def torch_arm(i: int) -> Any:
        got = torch._int_mm(padded, weights[i].t())
        got = got if padded is a else got[:m]
        y = reference.scale(got, a_scale, w_scale, bias)
        return reference.quantize_output(y, out_scale_t) if quant else y.to(torch.float16)

    def int_mm_arm(i: int) -> Any:
        return torch._int_mm(padded, weights[i].t())

    def checked(name: str, run: Any) -> None:
        try:
            got = run(0)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
        except (LaunchError, RuntimeError) as exc:
            rejected[name] = f"refused: {' '.join(str(exc).split())[:200]}"
            return
        verdict = numerics.numerics_gate(got, ref)
        if not verdict:
            rejected[name] = f"not bitwise equal to the reference: {verdict.reason}"
            return
        arms[name] = run

    for cfg in configs:
        try:
            checked(cfg.id, config_arm(cfg))
        except LaunchError as exc:
            rejected[cfg.id] = f"refused: {exc}"
    again = next((c for c in configs if c.id == repeat), None)
    if again is not None and again.id in arms:
        checked(REPEAT, config_arm(again))
    if "torch" in baselines:
        checked("torch", torch_arm)
    if "int_mm" in baselines:
        try:
            if not torch.equal(int_mm_arm(0), acc if padded is a else
                               torch.cat([acc, acc.new_zeros(MIN_INT_MM_ROWS - m, n)])):
                rejected["int_mm"] = "torch._int_mm is not exact here"
            else:
                arms["int_mm"] = int_mm_arm
        except RuntimeError as exc:
            rejected["int_mm"] = f"torch._int_mm refused the shape: {exc}"
    if "fp16" in baselines:
        x16 = torch.randn(m, k, device=dev, generator=gen, dtype=torch.float16)
        w16 = [(torch.randn(n, k, device=dev, generator=gen) / k ** 0.5).half()
               for _ in range(copies)]
        b16 = torch.randn(n, device=dev, generator=gen, dtype=torch.float16)
        arms["fp16"] = lambda i: F.linear(x16, w16[i], b16)
    order = [nm for nm in arms_first if nm in arms] + [nm for nm in arms if nm not in arms_first]
    return BenchCase(arms={nm: arms[nm] for nm in order}, gate=lambda _out: True,
                     copies=copies, weight_bytes=n * k + 4 * n, rejected=rejected)


def timed(result: Any) -> dict[str, dict[str, Any]]:
    """Per arm of a BenchResult: us per call, sigma, rounds, status, reason."""
    out = {}
    for arm in result.arms:
        out[arm.name] = {
            "us": finite(arm.median_ms * 1000.0) if arm.ok else None,
            "sigma_us": finite(arm.sigma_ms * 1000.0) if arm.ok else None,
            "rounds": arm.rounds, "status": arm.status.value, "reason": arm.reason,
            "overlap": arm.overlap,
            "solo_us": finite(arm.solo_ms * 1000.0) if arm.solo_ms is not None else None}
    return out


def make_timer(back_to_back: bool) -> Any:
    """The protocol's CUDA timer; back to back, one that drops the separator."""
    from oasr_core.bench import CudaGraphTimer

    timer = CudaGraphTimer()
    return BackToBackTimer(timer) if back_to_back else timer


def measure_case(case: Any, timer: Any, options: Any) -> Any:
    """Every arm of ``case`` timed under the protocol, for all rounds (no halving)."""
    from oasr_core.bench import measure

    return measure(case, timer, options, halving=False)


def write_jsonl(path: Path, rows: list[dict], mode: str = "a") -> None:
    with path.open(mode) as f:
        for row in rows:
            f.write(json.dumps(row, allow_nan=False) + "\n")


# --- sweep ---------------------------------------------------------------------------------

def cmd_sweep(args: argparse.Namespace) -> int:
    problem = cuda_problem()
    if problem:
        return fail(problem)
    import torch
    from oasr_scaled_mm import heuristic, jit
    from oasr_scaled_mm.config_space import FAMILY, OP_MM
    from oasr_scaled_mm.feasibility import supports

    from oasr_core.types import Problem

    bad = use_ladders(args.ladders)
    if bad:
        return fail(bad)
    started = time.perf_counter()
    info = device_info()
    arch = info["arch"]
    records = lanes()
    lane = args.lane or default_lane(arch, records)
    lane_rec = records[lane]
    widths, ms = parse_widths(args.widths), parse_ms(args.ms)
    kernels, build_lines = load_kernels(lane, arch)
    print("\n".join(build_lines), flush=True)
    configs = list(jit.lane_configs(lane, arch))
    ladder = heuristic.ladder_for(lane_rec, arch)
    timer = make_timer(args.back_to_back)
    options = bench_options(args.seed, args.rounds, args.target_us, timer.l2_bytes, 0)
    jsonl = args.out.with_suffix(".jsonl")
    jsonl.write_text("")
    base = {"lane": lane, "gpu": info["gpu"], "arch": arch, "sm_count": info["sm_count"],
            "torch": info["torch"]}
    points = []
    for n, k in widths:
        for m in ms:
            prob = Problem(FAMILY, OP_MM, "int8", (("N", n), ("K", k)), m)
            heur = heuristic.heuristic_config(prob, lane_rec, sm_count=info["sm_count"],
                                              arch=arch).id
            todo = [c for c in configs if supports(c, prob)]
            case = make_case(kernels, todo, OP_MM, n, k, m, seed=args.seed + m,
                             arms_first=(heur,), repeat=heur)
            result = measure_case(case, timer, options)
            arms = timed(result)
            del case
            torch.cuda.empty_cache()
            clock = result.start.sm_clock_mhz
            rows = [{**base, "config": name, "kind": "baseline" if name in BASELINES
                     else REPEAT if name == REPEAT else "config", "N": n, "K": k, "M": m,
                     **arm, "calls": result.calls,
                     "heuristic": heur, "padded": name in ("torch", "int_mm")
                     and m < MIN_INT_MM_ROWS, "sm_clock_mhz": clock,
                     "contended": result.contended} for name, arm in arms.items()]
            write_jsonl(jsonl, rows)
            point = summarise_point(n, k, m, arms, heur)
            point["calls"], point["clock"] = result.calls, clock
            point["contended"] = result.contended
            points.append(point)
            print(f"N={n} K={k} M={m}: best {point['best']} {fmt(point['best_us'])} us, "
                  f"heuristic {heur} {fmt(point['heur_us'])} us, torch "
                  f"{fmt(point['torch_us'])} us, int_mm {fmt(point['int_mm_us'])} us "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
    elapsed = time.perf_counter() - started
    header = [
        f"- lane `{lane}` ({len(configs)} configs: every data-parallel and Stream-K config "
        "that supports the shape); op scaled_mm, fp16 out, float32 bias",
        f"- torch {info['torch']} (CUDA {info['cuda']}); {info['sm_count']} SMs; L2 "
        f"{(info['l2_bytes'] or 0) >> 20} MiB",
        f"- heuristic: the {'fitted' if ladder.fitted else 'unfitted'} ladder of `{lane}` on "
        f"{arch}" + (f" (from `{args.ladders}`)" if args.ladders else ""),
        mode_line(args.back_to_back),
        "- timing: oasr_core.bench.measure without halving (CUDA graph of N calls, "
        f"{args.rounds} shuffled interleaved rounds at most, median); "
        f"warm weights (one copy); target {args.target_us:.0f} us per replay",
        "- torch = `torch._int_mm` + the scaling in torch (bitwise equal to the kernels); "
        "int_mm = `torch._int_mm` alone; fp16 = `F.linear` on fp16 operands; at M <= 16 "
        "torch/int_mm run on A padded to 17 rows",
        f"- wall time {elapsed:.0f} s (all {len(points)} points, build and load included)",
        f"- JSONL: `{jsonl.name}`"]
    text = sweep_report(points, header, build_lines, info["gpu"])
    sys.stdout.write(text)
    args.out.write_text(text)
    return 0


def summarise_point(n: int, k: int, m: int, arms: dict, heur: str) -> dict[str, Any]:
    """Best config, heuristic, baselines and failures of one sweep point."""
    us = {name: arm["us"] for name, arm in arms.items() if arm["us"] is not None}
    cfg_us = {name: t for name, t in us.items() if name not in NOT_CONFIGS}
    best = min(cfg_us, key=cfg_us.get) if cfg_us else None
    return {"N": n, "K": k, "M": m, "best": best, "best_us": cfg_us.get(best),
            "heur": heur, "heur_us": us.get(heur), "torch_us": us.get("torch"),
            "int_mm_us": us.get("int_mm"), "fp16_us": us.get("fp16"),
            "repeat_us": us.get(REPEAT), "configs": len(cfg_us),
            "failed": {name: arm["reason"] for name, arm in arms.items()
                       if arm["us"] is None}}


def _ratio(num: Any, den: Any) -> float:
    return num / den if num and den else math.nan


def sweep_report(points: list[dict], header: list[str], build_lines: list[str],
                 gpu: str) -> str:
    lines = [f"# scaled_mm (int8 W8A8) vs torch on {gpu}", "", *header, "", "## Build", "",
             *build_lines, "", "## Per point (us per call; X/best = X us / best config us, "
             "> 1: the best config is faster)", "",
             "| N | K | M | best config | best us | heuristic | heur/best | torch us | "
             "torch/best | int_mm/best | fp16/best | configs |",
             "|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        lines.append(
            f"| {p['N']} | {p['K']} | {p['M']} | {p['best']} | {fmt(p['best_us'])} | "
            f"{p['heur']} | {fmt(_ratio(p['heur_us'], p['best_us']), 3)} | "
            f"{fmt(p['torch_us'])} | {fmt(_ratio(p['torch_us'], p['best_us']), 3)} | "
            f"{fmt(_ratio(p['int_mm_us'], p['best_us']), 3)} | "
            f"{fmt(_ratio(p['fp16_us'], p['best_us']), 3)} | {p['configs']} |")
    lines += ["", "## Summary (geomeans over points)", "",
              "| widths | points | torch/best | int_mm/best | fp16/best | torch/heuristic | "
              "int_mm/heuristic | heuristic/best (regret) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, subset in (("all", points),
                          ("Conformer", [p for p in points
                                         if (p["N"], p["K"]) in CONFORMER_WIDTHS]),
                          ("others", [p for p in points
                                      if (p["N"], p["K"]) not in CONFORMER_WIDTHS])):
        if not subset:
            continue
        lines.append(
            f"| {label} | {len(subset)} | "
            f"{fmt(geomean(_ratio(p['torch_us'], p['best_us']) for p in subset), 3)} | "
            f"{fmt(geomean(_ratio(p['int_mm_us'], p['best_us']) for p in subset), 3)} | "
            f"{fmt(geomean(_ratio(p['fp16_us'], p['best_us']) for p in subset), 3)} | "
            f"{fmt(geomean(_ratio(p['torch_us'], p['heur_us']) for p in subset), 3)} | "
            f"{fmt(geomean(_ratio(p['int_mm_us'], p['heur_us']) for p in subset), 3)} | "
            f"{fmt(geomean(_ratio(p['heur_us'], p['best_us']) for p in subset), 3)} |")
    noise = sorted(abs(math.log(p["repeat_us"] / p["heur_us"])) for p in points
                   if p["repeat_us"] and p["heur_us"])
    clocks = [p["clock"] for p in points if p["clock"]]
    lines += ["", "## Noise and conditions", "",
              "- the heuristic's config timed twice per point (two graphs, same rounds): "
              + (f"median |difference| {100 * (math.exp(noise[len(noise) // 2]) - 1):.2f} %, "
                 f"90th percentile {100 * (math.exp(noise[int(0.9 * (len(noise) - 1))]) - 1):.2f}"
                 f" %, worst {100 * (math.exp(noise[-1]) - 1):.2f} % over {len(noise)} points"
                 if noise else "n/a"),
              f"- SM clock at point start: {min(clocks)}-{max(clocks)} MHz" if clocks
              else "- SM clock: not observable",
              f"- points with another compute process on the GPU: "
              f"{sum(1 for p in points if p.get('contended'))}"]
    wins = Counter(p["best"] for p in points if p["best"])
    lines += ["", "## Wins per config", "", "| config | points won |", "|---|---:|"]
    lines += [f"| {c} | {w} |" for c, w in wins.most_common()]
    lines += ["", "## Not timed (refused, or not bitwise equal to the reference)", ""]
    lines += failure_lines(points) or ["- none"]
    return "\n".join(lines) + "\n"


def failure_lines(points: list[dict]) -> list[str]:
    """One line per arm that was not timed somewhere: how often, and the first reason."""
    fails: dict[str, list] = defaultdict(list)
    for p in points:
        for name, why in p["failed"].items():
            fails[name].append((p, why))
    lines = []
    for name, hits in sorted(fails.items()):
        p, why = hits[0]
        lines.append(f"- `{name}`: {len(hits)} point(s); first at N={p['N']} K={p['K']} "
                     f"M={p['M']}: {why}")
    return lines


# --- fit -----------------------------------------------------------------------------------

def read_sweep(path: Path) -> list[dict]:
    """The JSON rows of a sweep log (blank and non-object lines skipped)."""
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        row = json.loads(line)
        if isinstance(row, dict):
            rows.append(row)
    return rows


def fit_rows(rows: list[dict], lane: str, config_ids: set[str]) -> dict[tuple[int, int], list]:
    """Rows for :func:`fit_ladder` by width: ``(N, K, M, {config: us})``, configs of
    ``lane`` that were timed (baselines and failed configs left out)."""
    points: dict[tuple[int, int, int], dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row.get("lane") != lane or row.get("config") not in config_ids:
            continue
        us = row.get("us")
        if isinstance(us, (int, float)) and us > 0 and math.isfinite(us):
            points[(int(row["N"]), int(row["K"]), int(row["M"]))][row["config"]] = float(us)
    by_width: dict[tuple[int, int], list] = {}
    for (n, k, m), times in points.items():  # widths in the log's order, M ascending
        by_width.setdefault((n, k), []).append((n, k, m, times))
    return {w: sorted(rs, key=lambda r: r[2]) for w, rs in by_width.items()}


def rung_floor(rows: list, rungs: tuple[str, ...]) -> float:
    """Geomean over rows of the best rung's time / the best config's time (a ladder of
    these rungs can do no better)."""
    ratios = []
    for _n, _k, _m, times in rows:
        on = [times[r] for r in rungs if r in times]
        if on:
            ratios.append(min(on) / min(times.values()))
    return geomean(ratios)


def cmd_fit(args: argparse.Namespace) -> int:
    from oasr_scaled_mm import heuristic as hz

    if not args.log.exists():
        return fail(f"no sweep log at {args.log}")
    rows = read_sweep(args.log)
    records = lanes()
    lane_names = sorted({r.get("lane") for r in rows if r.get("lane")})
    lane = args.lane or (lane_names[0] if len(lane_names) == 1 else None)
    if lane is None:
        return fail(f"the log holds lanes {lane_names}: pass --lane")
    if lane not in records:
        return fail(f"lane {lane!r} is not a scaled_mm lane ({', '.join(records)})")
    lane_rec = records[lane]
    own = [r for r in rows if r.get("lane") == lane]
    sm_count = args.sm_count or next((int(r["sm_count"]) for r in own if r.get("sm_count")), 132)
    gpu = next((r["gpu"] for r in own if r.get("gpu")), "unknown GPU")
    torch_version = next((r["torch"] for r in own if r.get("torch")), "unknown")
    by_width = fit_rows(rows, lane, {c.id for c in lane_rec.config_space})
    if not by_width:
        return fail(f"{args.log} holds no timed config rows of lane {lane}")
    start = hz.LADDERS[lane]
    all_rows = [row for width in by_width.values() for row in width]
    try:
        fit = hz.fit_ladder(all_rows, lane=lane_rec, sm_count=sm_count, start=start)
    except ValueError as exc:
        return fail(f"fit failed: {exc}")

    def regret(ladder: Any, subset: list) -> float:
        return hz.ladder_regret(ladder, subset, lane=lane_rec, sm_count=sm_count)[0]

    held: dict[str, dict[str, Any]] = {}
    for width, subset in by_width.items():
        rest = [row for w, rs in by_width.items() if w != width for row in rs]
        entry = {"points": len(subset), "start": regret(start, subset),
                 "insample": regret(fit.ladder, subset), "heldout": math.nan}
        if rest:
            try:
                out = hz.fit_ladder(rest, lane=lane_rec, sm_count=sm_count, start=start)
                entry["heldout"] = regret(out.ladder, subset)
            except ValueError:
                pass
        held[f"{width[0]}x{width[1]}"] = entry
    heldout = weighted_geomean((e["heldout"], e["points"]) for e in held.values())
    conf_rows = [row for w in CONFORMER_WIDTHS for row in by_width.get(w, [])]
    conformer = {"widths": [f"{n}x{k}" for n, k in CONFORMER_WIDTHS if (n, k) in by_width],
                 "points": len(conf_rows),
                 "start": regret(start, conf_rows) if conf_rows else math.nan,
                 "fitted": regret(fit.ladder, conf_rows) if conf_rows else math.nan}
    floor = rung_floor(all_rows, fit.ladder.rungs)
    evidence = {
        "tool": "benchmarks/scaled_mm_vs_torch.py fit", "log": args.log.name, "gpu": gpu,
        "torch": torch_version, "sm_count": sm_count,
        "fitted_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "points": fit.rows, "widths": [f"{n}x{k}" for n, k in by_width],
        "ms": sorted({row[2] for row in all_rows}),
        "regret": finite(fit.regret), "start_regret": finite(fit.start_regret),
        "rung_floor": finite(floor), "heldout_regret": finite(heldout),
        "heldout_by_width": {w: {key: finite(v) for key, v in e.items()}
                             for w, e in held.items()},
        "conformer": {key: finite(v) for key, v in conformer.items()},
        "regret_definition": "geomean over points of time(table's pick) / time(best "
                             "measured config of the lane, Stream-K included)",
    }
    entry = hz.FittedLadder(arch=args.arch, ladder=fit.ladder, evidence=evidence)
    kept: list[Any] = []
    note = ""
    if args.out_ladders.exists():
        try:
            kept = [e for e in hz.read_fitted(args.out_ladders) if e.key != entry.key]
        except (OSError, ValueError) as exc:
            note = f" (the existing file was not usable and is replaced: {exc})"
    hz.write_fitted(args.out_ladders, [*kept, entry])
    text = fit_report(lane, args.arch, gpu, torch_version, sm_count, args.log, fit, start,
                      held, heldout, conformer, floor, args.out_ladders, len(kept), note)
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    return 0


def fit_report(lane, arch, gpu, torch_version, sm_count, log, fit, start, held, heldout,
               conformer, floor, path, kept, note) -> str:
    bounds = fit.ladder.k_bounds
    bands = [f"K <= {bounds[0]}"] if bounds else ["all K"]
    bands += [f"{lo} < K <= {hi}" for lo, hi in zip(bounds, bounds[1:], strict=False)]
    if bounds:
        bands.append(f"K > {bounds[-1]}")
    lines = [f"# scaled_mm ladder fit: `{lane}` on {arch} ({gpu}, {sm_count} SMs)", "",
             f"- sweep log `{log}`; torch {torch_version}; {fit.rows} points over "
             f"{len(held)} widths",
             "- regret: geomean over points of time(table's pick) / time(best measured config "
             "of the lane, Stream-K included); a pick the point did not time costs "
             "10x", "",
             "## In sample", "",
             "| table | all widths | Conformer widths |", "|---|---:|---:|",
             f"| unfitted (start) | {fmt(fit.start_regret, 4)} | {fmt(conformer['start'], 4)} |",
             f"| fitted | {fmt(fit.regret, 4)} | {fmt(conformer['fitted'], 4)} |",
             f"| best rung per point (floor of any table on these rungs) | {fmt(floor, 4)} "
             "| |", "",
             "## Held out: leave one width out (fit without the width, evaluate on it)", "",
             "| width N x K | points | unfitted | fitted without it | fitted with it |",
             "|---|---:|---:|---:|---:|"]
    for width, e in held.items():
        mark = " (Conformer)" if tuple(map(int, width.split("x"))) in CONFORMER_WIDTHS else ""
        lines.append(f"| {width}{mark} | {e['points']} | {fmt(e['start'], 4)} | "
                     f"{fmt(e['heldout'], 4)} | {fmt(e['insample'], 4)} |")
    lines += [f"| **all (pooled over points)** | {sum(e['points'] for e in held.values())} | "
              f"{fmt(fit.start_regret, 4)} | **{fmt(heldout, 4)}** | {fmt(fit.regret, 4)} |",
              "", f"Conformer widths ({', '.join(conformer['widths']) or 'none measured'}): "
              f"unfitted {fmt(conformer['start'], 4)}, fitted {fmt(conformer['fitted'], 4)} "
              f"over {conformer['points']} points.", "",
              "## Fitted table (fill = CTAs needed / SM count; inf: off the ladder)", "",
              "| rung | " + " | ".join(bands) + " | unfitted |",
              "|---|" + "---:|" * (len(bands) + 1)]
    for rung, row, old in zip(fit.ladder.rungs, fit.ladder.fill, start.fill, strict=True):
        lines.append(f"| {rung} | " + " | ".join(fmt(v, 3) for v in row) + " | "
                     + "/".join(fmt(v, 3) for v in old) + " |")
    lines.append("")
    covered = {fit.ladder.band(int(w.split("x")[1])) for w in held}
    idle = [bands[b] for b in range(len(bands)) if b not in covered]
    if idle:
        lines.append(f"- K bands without measured points keep the unfitted fills: "
                     f"{', '.join(idle)}")
    lines += [f"- written: `{path}` (this table for ({lane}, {arch}); {kept} other "
              f"table(s) kept){note}"]
    return "\n".join(lines) + "\n"


# --- served --------------------------------------------------------------------------------

def census_points(paths: list[Path]) -> tuple[list[dict], int | None]:
    """The scaled_mm points of the censuses (merged by op, N, K, M; weights summed per
    census) and the largest weight working set they declare."""
    merged: dict[tuple[str, int, int, int], dict] = {}
    working = None
    for path in paths:
        data = json.loads(path.read_text())
        ws = data.get("working_set_bytes")
        if isinstance(ws, int):
            working = max(working or 0, ws)
        for p in data.get("points", []):
            if p.get("family") != "scaled_mm":
                continue
            key = (p["op"], int(p["dims"]["N"]), int(p["dims"]["K"]), int(p["M"]))
            point = merged.setdefault(key, {"op": key[0], "N": key[1], "K": key[2],
                                            "M": key[3], "weights": {}})
            point["weights"][path.name] = point["weights"].get(path.name, 0.0) + \
                float(p.get("weight") or 0.0)
    return sorted(merged.values(), key=lambda p: (p["op"], p["N"], p["K"], p["M"])), working


def install_system_tier(db: Path, arch: str) -> Path:
    """A temporary system tier holding ``db`` as ``<arch>/scaled_mm.json``; the user tier off."""
    root = Path(tempfile.mkdtemp(prefix="oasr-served-"))
    (root / arch).mkdir()
    shutil.copyfile(db, root / arch / "scaled_mm.json")
    os.environ["OASR_TUNE_SYSTEM_DB"] = str(root)
    os.environ["OASR_TUNE_USER_DB"] = "off"
    from oasr_core import runtime

    runtime.install_runtime(None)
    return root


def cmd_served(args: argparse.Namespace) -> int:
    problem = cuda_problem()
    if problem:
        return fail(problem)
    for path in [*args.census, args.db]:
        if not path.exists():
            return fail(f"no such file: {path}")
    import torch
    from oasr_scaled_mm import heuristic, ops
    from oasr_scaled_mm.config_space import FAMILY, OP_QUANT

    import oasr_core
    from oasr_core.runtime import get_runtime
    from oasr_core.types import Problem

    bad = use_ladders(args.ladders)
    if bad:
        return fail(bad)
    started = time.perf_counter()
    info = device_info()
    arch = info["arch"]
    points, working = census_points(args.census)
    if not points:
        return fail("the census(es) hold no scaled_mm point")
    working_note = "" if working is not None else " (not declared: taken as warm)"
    working = working if working is not None else 0
    root = install_system_tier(args.db, arch)
    rt = get_runtime()
    family = rt.registry.family(FAMILY)
    tiers = rt.tiers(family, arch)
    if tiers.system is None:
        why = "; ".join(tiers.problems) or "not found"
        return fail(f"the tuning file {args.db} was not loaded as the {arch} system tier: {why}")
    lane_rec = rt.registry.active_lane(FAMILY, arch)
    lane = args.lane or lane_rec.name
    lane_rec = rt.registry.lane(lane)
    ladder = heuristic.ladder_for(lane_rec, arch)
    kernels, build_lines = load_kernels(lane, arch)
    print("\n".join(build_lines), flush=True)
    timer = make_timer(args.back_to_back)
    options = bench_options(args.seed, args.rounds, args.target_us, timer.l2_bytes, working)
    jsonl = args.out.with_suffix(".jsonl") if args.out else None
    if jsonl:
        jsonl.write_text("")
    results = []
    for p in points:
        op, n, k, m = p["op"], p["N"], p["K"], p["M"]
        prob = Problem(FAMILY, op, "int8", (("N", n), ("K", k)), m)
        sel = oasr_core.select(FAMILY, op, "int8", (n, k), m, arch, lane=lane)
        tuned_cfg = (ops.select_quant_config(n, k, m, arch) if op == OP_QUANT
                     else sel.config)
        heur_cfg = heuristic.heuristic_config(prob, lane_rec, sm_count=info["sm_count"],
                                              arch=arch)
        tuned = tuned_cfg.id if tuned_cfg is not None else "torch"
        configs = list({c.id: c for c in (tuned_cfg, heur_cfg) if c is not None}.values())
        copies = options.copies_for(n * k + 4 * n)
        case = make_case(kernels, configs, op, n, k, m, seed=args.seed + m, copies=copies,
                         baselines=("torch", "int_mm"), arms_first=(heur_cfg.id,))
        result = measure_case(case, timer, options)
        arms = timed(result)
        del case
        torch.cuda.empty_cache()
        us = {name: arm["us"] for name, arm in arms.items()}
        row = {"op": op, "N": n, "K": k, "M": m, "weights": p["weights"],
               "tier": sel.tier.value, "choice": getattr(sel.choice, "value", None)
               or getattr(sel.choice, "id", None), "tuned": tuned, "heuristic": heur_cfg.id,
               "tuned_us": us.get(tuned), "heuristic_us": us.get(heur_cfg.id),
               "torch_us": us.get("torch"), "int_mm_us": us.get("int_mm"),
               "calls": result.calls, "copies": result.copies, "l2": result.l2,
               "sm_clock_mhz": result.start.sm_clock_mhz, "contended": result.contended,
               "failed": {name: arm["reason"] for name, arm in arms.items()
                          if arm["us"] is None},
               "gpu": info["gpu"], "torch": info["torch"], "lane": lane}
        results.append(row)
        if jsonl:
            write_jsonl(jsonl, [row])
        print(f"{op} N={n} K={k} M={m}: tuned {tuned} ({sel.tier.value}) "
              f"{fmt(row['tuned_us'])} us, heuristic {heur_cfg.id} {fmt(row['heuristic_us'])}"
              f" us, torch {fmt(row['torch_us'])} us, int_mm {fmt(row['int_mm_us'])} us",
              flush=True)
    shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    header = [
        f"- tuning file `{args.db}` as the {arch} system tier (user tier off); lane `{lane}`; "
        f"heuristic = the {'fitted' if ladder.fitted else 'unfitted'} ladder"
        + (f" (from `{args.ladders}`)" if args.ladders else ""),
        f"- censuses: {', '.join(f'`{c}`' for c in args.census)}; {len(points)} scaled_mm "
        f"points; weight working set {fmt(working / 2 ** 20, 1)} MiB{working_note} vs L2 "
        f"{(info['l2_bytes'] or 0) >> 20} MiB -> weights "
        f"{'warm (one copy)' if options.warm() else 'rotated through copies'}",
        f"- torch {info['torch']} (CUDA {info['cuda']}); {info['sm_count']} SMs",
        mode_line(args.back_to_back),
        "- timing: oasr_core.bench.measure without halving (CUDA graph of N calls, "
        f"{args.rounds} shuffled interleaved rounds at most, median); "
        "torch = `_int_mm` + scaling in torch, int_mm = `_int_mm` alone (A padded to 17 "
        "rows at M <= 16)",
        f"- wall time {elapsed:.0f} s"]
    text = served_report(results, header, build_lines, info["gpu"])
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    return 0


def served_report(rows: list[dict], header: list[str], build_lines: list[str],
                  gpu: str) -> str:
    lines = [f"# scaled_mm as served vs torch on {gpu}", "", *header, "", "## Build", "",
             *build_lines, "",
             "## Per point (us per call; speedups X/tuned = X us / tuned us, > 1: tuned is "
             "faster)", "",
             "| op | N | K | M | tier | tuned | heuristic | tuned us | heur us | torch us | "
             "int_mm us | heur/tuned | torch/tuned | int_mm/tuned |",
             "|---|---:|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['op']} | {r['N']} | {r['K']} | {r['M']} | {r['tier']} | {r['tuned']} | "
            f"{r['heuristic']} | {fmt(r['tuned_us'])} | {fmt(r['heuristic_us'])} | "
            f"{fmt(r['torch_us'])} | {fmt(r['int_mm_us'])} | "
            f"{fmt(_ratio(r['heuristic_us'], r['tuned_us']), 3)} | "
            f"{fmt(_ratio(r['torch_us'], r['tuned_us']), 3)} | "
            f"{fmt(_ratio(r['int_mm_us'], r['tuned_us']), 3)} |")
    censuses = sorted({c for r in rows for c in r["weights"]})
    lines += ["", "## Geomeans", "",
              "| points | count | heur/tuned | torch/tuned | int_mm/tuned | torch/heuristic | "
              "int_mm/heuristic |", "|---|---:|---:|---:|---:|---:|---:|"]
    groups = [("all", rows, None)] + [(c, [r for r in rows if c in r["weights"]], c)
                                      for c in censuses]
    for label, subset, census in groups:
        lines.append(
            f"| {label} | {len(subset)} | "
            f"{fmt(geomean(_ratio(r['heuristic_us'], r['tuned_us']) for r in subset), 3)} | "
            f"{fmt(geomean(_ratio(r['torch_us'], r['tuned_us']) for r in subset), 3)} | "
            f"{fmt(geomean(_ratio(r['int_mm_us'], r['tuned_us']) for r in subset), 3)} | "
            f"{fmt(geomean(_ratio(r['torch_us'], r['heuristic_us']) for r in subset), 3)} | "
            f"{fmt(geomean(_ratio(r['int_mm_us'], r['heuristic_us']) for r in subset), 3)} |")
        if census is not None:
            pairs = [(_ratio(r["torch_us"], r["tuned_us"]), r["weights"][census])
                     for r in subset]
            pairs_i = [(_ratio(r["int_mm_us"], r["tuned_us"]), r["weights"][census])
                       for r in subset]
            lines.append(f"| {label}, traffic-weighted | {len(subset)} | | "
                         f"{fmt(weighted_geomean(pairs), 3)} | "
                         f"{fmt(weighted_geomean(pairs_i), 3)} | | |")
    t_torch = geomean(_ratio(r["torch_us"], r["tuned_us"]) for r in rows)
    t_int = geomean(_ratio(r["int_mm_us"], r["tuned_us"]) for r in rows)
    tiers = Counter(r["tier"] for r in rows)
    lines += ["", "## Goals (geomean over all points)", "",
              f"- tuned vs torch's int8 path: {fmt(t_torch, 3)}x (goal >= {GOAL_TORCH}x): "
              f"{'met' if t_torch >= GOAL_TORCH else 'NOT met'}",
              f"- tuned vs `_int_mm` alone: {fmt(t_int, 3)}x (goal >= {GOAL_INT_MM}x): "
              f"{'met' if t_int >= GOAL_INT_MM else 'NOT met'}",
              f"- tiers serving the points: {dict(tiers)}"]
    failed = failure_lines(rows)
    if failed:
        lines += ["", "## Not timed (refused, or not bitwise equal to the reference)", "",
                  *failed]
    return "\n".join(lines) + "\n"


# --- main ----------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def timing(s: argparse.ArgumentParser) -> None:
        s.add_argument("--rounds", type=int, default=12,
                       help="interleaved rounds per point (stops early at 1%% sigma)")
        s.add_argument("--target-us", type=float, default=100.0,
                       help="about this long per graph replay (>= 8 calls)")
        s.add_argument("--seed", type=int, default=0)
        add_mode_argument(s)
        s.add_argument("--ladders", type=Path, default=None,
                       help="a fitted-ladder file the heuristic uses in this run (default: "
                            "the package's fitted_ladders.json)")

    s = sub.add_parser("sweep", help="every config and torch at widths x M (GPU)")
    s.add_argument("--out", type=Path, required=True, help="markdown report; JSONL beside it")
    s.add_argument("--widths", default=None, help="N,K;N,K;... (default: Conformer + 11 more)")
    s.add_argument("--ms", default=None, help="M ladder, comma list (default 16..32768)")
    s.add_argument("--lane", default=None, help="default: the device's default lane")
    timing(s)
    s.set_defaults(func=cmd_sweep)

    f = sub.add_parser("fit", help="fit the lane's ladder on a sweep log (CPU)")
    f.add_argument("--log", type=Path, required=True, help="the sweep's JSONL")
    f.add_argument("--out-ladders", type=Path, required=True,
                   help="fitted ladder file to write (other tables in it are kept)")
    f.add_argument("--out", type=Path, default=None, help="markdown report")
    f.add_argument("--lane", default=None, help="default: the log's lane")
    f.add_argument("--arch", default="sm90")
    f.add_argument("--sm-count", type=int, default=None, help="default: the log's (else 132)")
    f.set_defaults(func=cmd_fit)

    v = sub.add_parser("served", help="tuned selection vs heuristic vs torch at census points")
    v.add_argument("--census", type=Path, action="append", required=True)
    v.add_argument("--db", type=Path, required=True, help="a scaled_mm.json tuning file")
    v.add_argument("--out", type=Path, default=None, help="markdown report; JSONL beside it")
    v.add_argument("--lane", default=None, help="default: the device's active lane")
    timing(v)
    v.set_defaults(func=cmd_served)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
