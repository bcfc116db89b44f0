"""gemm_log_softmax (a CTC head) against torch's F.linear then log_softmax, graph-timed.

For each head (vocabulary V = N, encoder width K) and each M (frames x batch after
subsampling), every config of the lane that can run the shape, composed with the row
log-softmax (:class:`oasr_gemm.log_softmax.LogSoftmaxCall`, the op's kernel plan), is first
checked by the family's numerics gate (the fp32 log-softmax of fp32 logits, within 4x of
torch's error), then timed as a CUDA graph of ``--graph-calls`` calls next to torch in the
same process: a screening round over all configs, then ``--reps`` interleaved, shuffled
rounds of the ``--top`` fastest, torch and the lane default; the estimate is the median per
call, the ratio torch / best (> 1: oasr is faster). Each call is followed by the protocol's
tiny unrelated kernel, whose separately measured cost is subtracted (``graph_timing.py``;
``--back-to-back`` credits the launch overlap instead, and the report says so). The best
config's split is reported too: its GEMM alone and the row log-softmax alone, against
torch's ``addmm`` and ``log_softmax`` alone.

Shapes: the reference CTC heads (``REFERENCE``: the shipped example N=5008 K=256, the e2e
bench's 1024-class Conformer head, a 1024-class head on a 512-wide encoder) at the rows of the
reference batches, and a sweep of vocabularies and widths no reference model names
(``SWEEP``).

Usage (H200; the lane's whole-space module comes from the carried JIT cache, or compile it
first with ``--prebuild-only``, which also works without a GPU given ``--arch``)::

    python benchmarks/gemm_log_softmax_vs_torch.py --out $OUT/h200_gemm_log_softmax.md
    python benchmarks/gemm_log_softmax_vs_torch.py --prebuild-only --arch sm90 --jobs 16
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import vs_torch
from graph_timing import GraphArms, add_mode_argument, mode_line

REFERENCE = ((5008, 256), (1024, 256), (1024, 512))
"""(V, K) of the reference CTC heads."""
REFERENCE_MS = (64, 255, 1000, 2040, 4096, 8160)
"""Rows: streaming chunks, one utterance, and batches of 8 and 32 x 1024 frames after the
Conformer's 4x subsampling (255 frames each)."""
SWEEP = ((40, 144), (136, 320), (520, 384), (2056, 640), (3000, 768), (7000, 1024),
         (12000, 256))
"""(V, K) no reference model names: character, small and large BPE vocabularies (padded to a
multiple of 8) over other encoder widths."""
SWEEP_MS = (128, 1500, 6000)


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="markdown report path (JSONL beside it)")
    p.add_argument("--jobs", type=int, default=None, help="nvcc processes (default: all CPUs)")
    p.add_argument("--lane", default=None, help="gemm lane (default: the device's)")
    p.add_argument("--arch", default=None, help="arch family for --prebuild-only without a GPU")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    p.add_argument("--heads", default=None,
                   help="VxK comma list replacing the reference heads and the sweep")
    p.add_argument("--ms", default=None, help="M list for --heads (default: the reference Ms)")
    p.add_argument("--no-sweep", action="store_true", help="the reference heads only")
    p.add_argument("--graph-calls", type=int, default=8)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--top", type=int, default=6)
    p.add_argument("--configs", default=None,
                   help="comma list of config-id globs to compile and time (default: all)")
    p.add_argument("--prebuild-only", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    add_mode_argument(p)
    return p.parse_args(argv)


def shapes(args: argparse.Namespace) -> list[tuple[int, int, int, str]]:
    """``(V, K, M, kind)`` to time: ``reference`` heads at their rows, then the ``sweep``."""
    if args.heads:
        ms = [int(m) for m in args.ms.split(",")] if args.ms else list(REFERENCE_MS)
        heads = [tuple(map(int, h.split("x"))) for h in args.heads.split(",")]
        return [(v, k, m, "given") for v, k in heads for m in ms]
    out = [(v, k, m, "reference") for v, k in REFERENCE for m in REFERENCE_MS]
    if not args.no_sweep:
        out += [(v, k, m, "sweep") for v, k in SWEEP for m in SWEEP_MS]
    return out


def _specs(lane: str, arch: str, patterns: list[str] | None) -> list:
    """The lane's whole-space module (or the configs matching ``patterns``) and the row
    log-softmax's module."""
    from oasr_gemm import jit, log_softmax

    try:
        gemm = jit.subset_spec(lane, arch, patterns) if patterns else jit.full_spec(lane, arch)
    except ValueError as exc:
        raise SystemExit(f"--configs: {exc}") from None
    return [gemm, log_softmax.spec(arch)]


def time_arms(graphs: GraphArms, default: str | None, args: argparse.Namespace,
              rng: random.Random) -> tuple[dict[str, float], dict[str, float]]:
    """``(screen, per_call)``: one screening round of every arm, then ``args.reps`` rounds of
    torch, the ``args.top`` fastest configs and ``default``; microseconds per call."""
    screen = graphs.rounds(graphs.names, 2, rng)
    ranked = sorted((c for c in screen if c != "torch"), key=screen.get)
    keep = ["torch", *ranked[: args.top]]
    if default in screen and default not in keep:
        keep.append(default)
    return screen, graphs.rounds(keep, args.reps, rng)


def _point(kernels, lane, v, k, m, kind, args, rng, timer) -> dict:
    import torch
    import torch.nn.functional as F
    from oasr_gemm import codegen, launch, log_softmax, numerics
    from oasr_gemm.config_space import DEFAULTS, LOG_SOFTMAX_OP
    from oasr_gemm.feasibility import supports

    from oasr_core.types import Problem

    a, w, b = numerics.make_operands(m, v, k, args.dtype, device="cuda", seed=args.seed + m)
    ref = numerics.reference(a, w, b, log_softmax=True)
    base = numerics.torch_output(a, w, b, log_softmax=True)
    problem = Problem("gemm", LOG_SOFTMAX_OP, args.dtype, (("N", v), ("K", k)), m)
    dev, arch = torch.cuda.current_device(), _arch()
    code = codegen.DTYPE_CODES[args.dtype]
    out = torch.empty(m, v, dtype=a.dtype, device="cuda")
    ptrs = (a.data_ptr(), w.data_ptr(), b.data_ptr(), out.data_ptr())
    stream = torch._C._cuda_getCurrentRawStream
    calls, failed = {}, []
    for cid, kernel in kernels.items():
        if not supports(kernel.config, problem):
            continue
        try:
            call = log_softmax.compose(kernel.prepare(args.dtype, m, v, k, None), arch, code,
                                       m, v)
        except launch.LaunchError as exc:
            failed.append(f"{cid}: {exc}")
            continue
        status = call(dev, *ptrs)
        torch.cuda.synchronize()
        verdict = numerics.numerics_gate(out, base, ref) if not status else None
        if status or not verdict:
            failed.append(f"{cid}: {launch.status_text(status) if status else verdict.reason}")
            continue
        calls[cid] = call
    graphs = GraphArms(args.graph_calls, back_to_back=args.back_to_back, timer=timer)
    graphs.add("torch", lambda: torch.log_softmax(F.linear(a, w, b), dim=-1))
    for cid, call in calls.items():
        graphs.add(cid, lambda c=call: c.launch(dev, stream(dev), *ptrs))
    screen, per_call = time_arms(graphs, DEFAULTS[lane], args, rng)
    best = min((c for c in per_call if c != "torch"), key=per_call.get, default=None)
    split = {}
    if best is not None:
        # Where the time goes: the best config's GEMM and the row kernel, each alone, next to
        # torch's addmm and log_softmax alone.
        logits = torch.empty_like(out)
        torch.addmm(b, a, w.t(), out=logits)
        rows_fn, gemm = calls[best].rows_fn, calls[best].gemm
        graphs.add("_gemm", lambda: gemm.launch(dev, stream(dev), *ptrs))
        graphs.add("_rows", lambda: rows_fn(out.data_ptr(), code, m, v, stream(dev)))
        graphs.add("_addmm", lambda: torch.addmm(b, a, w.t(), out=out))
        graphs.add("_log_softmax", lambda: torch.log_softmax(logits, -1, out=out))
        split = graphs.rounds(["_gemm", "_rows", "_addmm", "_log_softmax"], args.reps, rng)
    graphs.release()
    return {"V": v, "K": k, "M": m, "kind": kind, "dtype": args.dtype, "lane": lane,
            "torch_us": per_call["torch"], "best": best,
            "best_us": per_call.get(best) if best else None,
            "default_us": per_call.get(DEFAULTS[lane]), "candidates": len(calls),
            "split_us": {n.lstrip("_"): t for n, t in split.items()}, "failed": failed,
            "screen_us": screen, "timing": "back_to_back" if args.back_to_back else "separated"}


def _arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm{major}{minor}"


def report(points: list[dict], header: list[str], gpu: str, back_to_back: bool = False) -> str:
    """The markdown report: environment and protocol first, then per kind of head a table
    and a summary."""
    nan = float("nan")

    def row(p: dict, r: float, d: float) -> str:
        s = p["split_us"]
        return (f"| {p['V']} | {p['K']} | {p['M']} | {p['torch_us']:.2f} | {p['best']} | "
                f"{(p['best_us'] or nan):.2f} | {r:.3f} | {d:.3f} | "
                f"{s.get('gemm', nan):.2f} + {s.get('rows', nan):.2f} | "
                f"{s.get('addmm', nan):.2f} + {s.get('log_softmax', nan):.2f} |")

    return vs_torch.kind_report(
        points, title=f"gemm_log_softmax vs torch (F.linear + log_softmax) on {gpu}",
        header=header, back_to_back=back_to_back, heading=lambda kind: f"{kind} heads",
        columns=("| V | K | M | torch us | best config | best us | torch/best "
                 "| torch/default | best: gemm + rows us | torch: addmm + log_softmax us |",
                 "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"), row=row)



def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    import torch
    from oasr_gemm.config_space import LANE_SM80, LANE_SM90

    from oasr_core import jit as core_jit

    have_gpu = torch.cuda.is_available()
    if have_gpu:
        arch = _arch()
    elif args.arch:
        arch = args.arch
    else:
        print("no CUDA device: pass --arch with --prebuild-only", file=sys.stderr)
        return 2
    lane = args.lane or (LANE_SM90 if arch == "sm90" else LANE_SM80)
    specs = _specs(lane, arch, args.configs.split(",") if args.configs else None)
    started = time.perf_counter()
    build = []
    for r in core_jit.prebuild(specs, jobs=args.jobs):
        failed = sum(1 for u in r.units.values() if u.status.value == "failed")
        build.append(f"- module `{r.name}` ({r.arch}): {r.status.value}, {len(r.units)} units, "
                     f"{failed} failed, {r.seconds:.0f} s")
    print("\n".join(build), flush=True)
    if args.prebuild_only or not have_gpu:
        return 0
    from oasr_gemm import codegen, jit, launch

    from oasr_core.bench import CudaGraphTimer

    module = core_jit.load(specs[0], build_missing=False)
    kernels = {c.id: launch.Kernel.bind(module, c) for c in jit.lane_configs(lane, arch)
               if codegen.symbol(c) in module.exports}
    timer, rng = CudaGraphTimer(), random.Random(args.seed)
    jsonl = args.out.with_suffix(".jsonl") if args.out else None
    points = []
    for v, k, m, kind in shapes(args):
        p = _point(kernels, lane, v, k, m, kind, args, rng, timer)
        points.append(p)
        print(f"V={v} K={k} M={m}: torch {p['torch_us']:.2f} us, best {p['best']} "
              f"{p['best_us'] or float('nan'):.2f} us", flush=True)
        if jsonl:
            with jsonl.open("a") as f:
                f.write(json.dumps(p) + "\n")
    header = [mode_line(args.back_to_back),
              f"- lane {lane} ({len(kernels)} configs compiled); dtype {args.dtype}; with bias; "
              f"graphs of {args.graph_calls} calls; screening, then {args.reps} rounds of the "
              f"top {args.top}, torch and the default; L2 warm (one weight copy)",
              "- oasr: the config's GEMM writing the logits, then the row log-softmax in place "
              "(two launches, one call); torch: F.linear then log_softmax",
              f"- GPU {torch.cuda.get_device_name()}; torch {torch.__version__}; CUDA "
              f"{torch.version.cuda}; timing wall {time.perf_counter() - started:.0f} s",
              "", "## Build", "", *build]
    text = report(points, header, torch.cuda.get_device_name(), args.back_to_back)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
