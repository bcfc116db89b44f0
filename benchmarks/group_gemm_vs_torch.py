"""group_gemm (a group of equal-shaped linears in one launch) against the loop of torch
linears, graph-timed.

For each group ``(N, K, rows)`` (G problems of weight ``[N, K]`` with the listed rows), every
grouped config of the 2.x lane (the split-free ``sm80_mma`` configs, CUTLASS 2.x
``GemmGrouped``, which runs on sm80..sm90), launched through its grouped launcher
(:class:`oasr_gemm.launch.GroupKernel`, the op's kernel plan), is first checked by the
family's numerics gate (the fp32 linears, within 4x of torch's error), then timed as a CUDA
graph of ``--graph-calls`` calls next to the loop of ``addmm`` (the op's torch path) in the
same process: a screening round over all configs, then ``--reps`` interleaved, shuffled
rounds of the ``--top`` fastest, torch and the lane default; the estimate is the median per
call, the ratio torch / best (> 1: oasr is faster). Each call is followed by the protocol's
tiny unrelated kernel, whose separately measured cost is subtracted (``graph_timing.py``;
``--back-to-back`` credits the launch overlap instead, and the report says so). A grouped
call is two kernels (the records' copy, then the grouped GEMM): both are in the timed call.

Shapes: the attention projections of different inputs (``PROJECTIONS``: x W_q, x W_k, x W_v
and p W_pos at d x d, the positions 2T - 1 rows, d 256 and 512 at T = 100 and 375 frames) and
expert-style groups with uneven rows, 1 and 0 included (``EXPERTS``).

Usage (H200; the grouped module comes from the carried JIT cache, or compile it first with
``--prebuild-only``, which also works without a GPU given ``--arch``)::

    python benchmarks/group_gemm_vs_torch.py --out $OUT/h200_group_gemm.md
    python benchmarks/group_gemm_vs_torch.py --prebuild-only --arch sm90 --jobs 16
"""

from __future__ import annotations

import argparse
import sys
import time

import vs_torch
from graph_timing import GraphArms, mode_line

PROJECTIONS = tuple((d, d, (t, t, t, 2 * t - 1)) for d in (256, 512) for t in (100, 375))
"""``(N, K, rows)``: q, k, v of T frames and the relative positions' 2T - 1 rows at d x d."""
EXPERTS = ((1024, 256, (300, 1, 0, 77, 512, 9, 130, 47)), (256, 1024, (64, 64, 1, 0, 500)),
           (1024, 256, (1000, 1000, 1000)))
"""``(N, K, rows)``: groups of uneven rows, empty and one-row problems among them."""
LANE = "sm80_mma"
"""The lane with grouped units (on every arch it runs on)."""


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vs_torch.add_run_arguments(p, top=6)
    p.add_argument("--shapes", default=None,
                   help="semicolon list of NxKxROWS with ROWS a dash list (e.g. "
                        "256x256x100-100-100-199) replacing the default groups")
    p.add_argument("--configs", default=None,
                   help="comma list of config-id globs to compile and time (default: every "
                        "grouped config)")
    return p.parse_args(argv)


def shapes(args: argparse.Namespace) -> list[tuple[int, int, tuple[int, ...], str]]:
    """``(N, K, rows, kind)`` to time: ``projections``, then ``experts``; a group the kernels
    cannot take (N or K not a multiple of 8, more than 32 problems) is a ``SystemExit``."""
    if args.shapes:
        out = []
        for text in args.shapes.split(";"):
            try:
                n, k, rows = text.split("x")
                out.append((int(n), int(k), tuple(int(r) for r in rows.split("-")), "given"))
            except ValueError:
                raise SystemExit(f"--shapes: {text!r} is not NxKxROWS with ROWS a dash list "
                                 "of row counts") from None
    else:
        out = [(*s, "projections") for s in PROJECTIONS] + [(*s, "experts") for s in EXPERTS]
    for n, k, rows, _ in out:
        if n % 8 or k % 8 or not 0 < len(rows) <= 32 or sum(rows) < 1:
            raise SystemExit(f"--shapes: N={n} K={k} G={len(rows)} is not a group the "
                             "kernels take (N, K multiples of 8, 1..32 problems, rows)")
    return out


def _spec(arch: str, patterns: list[str] | None):
    from oasr_gemm import jit
    from oasr_gemm.config_space import has_group

    from oasr_core.kit.production import matching

    if not patterns:
        return jit.group_full_spec(LANE, arch)
    try:
        chosen = matching([c for c in jit.lane_configs(LANE, arch) if has_group(c)], patterns,
                          LANE, arch)
    except ValueError as exc:
        raise SystemExit(f"--configs: {exc}") from None
    return jit.module_spec(LANE, arch, (), name=f"{jit.MODULE_PREFIX[LANE]}_group_subset",
                           group=chosen)


def _bind(spec, arch: str) -> dict:
    from oasr_gemm import codegen, jit, launch
    from oasr_gemm.config_space import has_group

    configs = [c for c in jit.lane_configs(LANE, arch) if has_group(c)]
    return vs_torch.bind_compiled(spec, configs, launch.GroupKernel.bind, codegen.group_symbol)


def _point(kernels, n, k, rows, kind, args, rng, timer) -> dict:
    import torch
    from oasr_gemm import launch, numerics
    from oasr_gemm.config_space import DEFAULTS

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    gen = torch.Generator(device="cuda").manual_seed(args.seed + n + sum(rows))
    total = sum(rows)
    a = torch.randn(total, k, generator=gen, device="cuda", dtype=dtype)
    w = torch.randn(len(rows), n, k, generator=gen, device="cuda", dtype=dtype).mul_(k ** -0.5)
    bias = torch.randn(len(rows), n, generator=gen, device="cuda", dtype=dtype)
    xs, ws, bs = list(a.split(rows)), list(w.unbind(0)), list(bias.unbind(0))
    out = torch.empty(total, n, dtype=dtype, device="cuda")
    outs = list(out.split(rows))
    ref = torch.cat([numerics.reference(x, wg, b) for x, wg, b in zip(xs, ws, bs, strict=True)])
    base = torch.cat([numerics.torch_output(x, wg, b)
                      for x, wg, b in zip(xs, ws, bs, strict=True)])
    dev = torch.cuda.current_device()
    stream = torch._C._cuda_getCurrentRawStream
    launch.reserve_workspace()
    calls, failed = {}, []
    for cid, kernel in kernels.items():
        try:
            call = kernel.prepare(args.dtype, rows, n, k)
        except launch.LaunchError as exc:
            failed.append(f"{cid}: {exc}")
            continue
        status = call(dev, xs, ws, bs, outs)
        torch.cuda.synchronize()
        verdict = numerics.numerics_gate(out, base, ref) if not status else None
        if status or not verdict:
            failed.append(f"{cid}: {launch.status_text(status) if status else verdict.reason}")
            continue
        calls[cid] = call

    def loop() -> None:
        for x, wg, b, o in zip(xs, ws, bs, outs, strict=True):
            torch.addmm(b, x, wg.t(), out=o)

    graphs = GraphArms(args.graph_calls, back_to_back=args.back_to_back, timer=timer)
    graphs.add("torch", loop)
    for cid, call in calls.items():
        graphs.add(cid, lambda c=call: c.launch(dev, stream(dev), xs, ws, bs, outs))
    screen, per_call, best = graphs.screened(("torch",), args.top, args.reps, rng,
                                             also=(DEFAULTS[LANE],))
    graphs.release()
    return {"N": n, "K": k, "rows": list(rows), "G": len(rows), "M": total, "kind": kind,
            "dtype": args.dtype, "lane": LANE, "torch_us": per_call["torch"], "best": best,
            "best_us": per_call.get(best) if best else None,
            "default_us": per_call.get(DEFAULTS[LANE]), "candidates": len(calls),
            "failed": failed, "screen_us": screen,
            "timing": "back_to_back" if args.back_to_back else "separated"}


def report(points: list[dict], header: list[str], gpu: str, back_to_back: bool = False) -> str:
    """The markdown report: environment and protocol first, then per kind of group a table
    and a summary line (``- <kind>: ...``)."""
    nan = float("nan")

    def row(p: dict, r: float, d: float) -> str:
        tflops = 2 * p["M"] * p["N"] * p["K"] / (p["best_us"] * 1e6) if p["best_us"] else nan
        return (f"| {p['N']} | {p['K']} | {p['G']} | {'-'.join(map(str, p['rows']))} | "
                f"{p['torch_us']:.2f} | {p['best']} | {(p['best_us'] or nan):.2f} | {r:.3f} | "
                f"{d:.3f} | {tflops:.1f} |")

    return vs_torch.kind_report(
        points, title=f"group_gemm vs the loop of torch linears on {gpu}", header=header,
        back_to_back=back_to_back, heading=lambda kind: kind,
        columns=("| N | K | G | rows | torch us | best config | best us | torch/best | "
                 "torch/default | TFLOP/s best |",
                 "|---:|---:|---:|---|---:|---|---:|---:|---:|---:|"), row=row)



def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    todo = shapes(args)
    patterns = args.configs.split(",") if args.configs else None
    run = vs_torch.start(args, lambda arch: [_spec(arch, patterns)],
                         lambda built, arch: _bind(built[0], arch))
    if isinstance(run, int):
        return run
    import torch

    kernels = run.kernels
    points = []
    for n, k, rows, kind in todo:
        p = _point(kernels, n, k, rows, kind, args, run.rng, run.timer)
        points.append(p)
        run.jsonl.add(p)
        print(f"N={n} K={k} G={len(rows)} M={sum(rows)}: torch {p['torch_us']:.2f} us, best "
              f"{p['best']} {p['best_us'] or float('nan'):.2f} us", flush=True)
    header = [mode_line(args.back_to_back),
              f"- lane {LANE} ({len(kernels)} grouped configs compiled); dtype {args.dtype}; "
              f"graphs of {args.graph_calls} calls; screening, then {args.reps} rounds of the "
              f"top {args.top}, torch and the default; L2 warm (one copy of each operand)",
              "- oasr: the config's grouped launcher (the records' copy kernel, then CUTLASS "
              "2.x GemmGrouped); torch: one addmm per problem into the same outputs",
              f"- GPU {torch.cuda.get_device_name()}; torch {torch.__version__}; CUDA "
              f"{torch.version.cuda}; timing wall {time.perf_counter() - run.started:.0f} s",
              "", "## Build", "", *run.build_lines]
    vs_torch.write_report(report(points, header, torch.cuda.get_device_name(),
                                 args.back_to_back), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
