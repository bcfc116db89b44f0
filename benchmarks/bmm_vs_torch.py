"""bmm (batched GEMMs) against torch.bmm, graph-timed, both layouts of the second operand.

For each batched shape ``(L, M, N, K)`` and layout (``tn``: ``q @ k^T``, the second operand
the transposed view of a contiguous ``[L, N, K]`` tensor; ``nn``: ``probs @ v``, a contiguous
``[L, K, N]``), every split-free config of the lane, launched through its batched launcher
(:class:`oasr_gemm.launch.BmmKernel`, the op's kernel plan), is first checked by the family's
numerics gate (the fp32 ``bmm``, within 4x of torch's error), then timed as a CUDA graph of
``--graph-calls`` calls next to ``torch.bmm`` in the same process: a screening round over all
configs, then ``--reps`` interleaved, shuffled rounds of the ``--top`` fastest, torch and the
lane default; the estimate is the median per call, the ratio torch / best (> 1: oasr is
faster). Each call is followed by the protocol's tiny unrelated kernel, whose separately
measured cost is subtracted (``graph_timing.py``; ``--back-to-back`` credits the launch
overlap instead, and the report says so).

Shapes: attention's products (``ATTENTION``: scores ``T x T`` over ``d_head`` and context
``T x d_head`` over ``T``, with ``L = batch x heads``, at T = 1504, the 16-byte-aligned
neighbour of Whisper's 1500 frames, and 256 and 512, d_head 64 and 128) and a sweep no model
names (``SWEEP``: other batch counts, square and skinny products). Shapes whose N or K is not
a multiple of 8 are not timed: the kernels refuse them and the op serves ``torch.bmm``.

Usage (H200; the lane's batched modules come from the carried JIT cache, or compile them
first with ``--prebuild-only``, which also works without a GPU given ``--arch``)::

    python benchmarks/bmm_vs_torch.py --out $OUT/h200_bmm.md
    python benchmarks/bmm_vs_torch.py --prebuild-only --arch sm90 --jobs 16
"""

from __future__ import annotations

import argparse
import sys
import time

import vs_torch
from graph_timing import GraphArms, mode_line

LAYOUTS = ("tn", "nn")
ATTENTION = tuple(
    shape for t in (1504, 512, 256) for d in (64, 128) for shape in
    (("tn", 64, t, t, d), ("nn", 64, t, d, t)))
"""``(layout, L, M, N, K)``: scores (TN, N = T, K = d_head) and context (NN, N = d_head,
K = T) of 64 heads x batches at T frames."""
SWEEP = (("tn", 8, 1024, 1024, 128), ("nn", 8, 1024, 1024, 128), ("tn", 256, 128, 128, 64),
         ("nn", 256, 128, 64, 128), ("tn", 16, 2048, 256, 512), ("nn", 16, 2048, 256, 512),
         ("tn", 4, 4096, 96, 1024), ("nn", 512, 64, 64, 64))
"""``(layout, L, M, N, K)`` no reference model names: few large and many small products,
wide and skinny."""


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vs_torch.add_run_arguments(p, top=6)
    p.add_argument("--lane", default=None, help="gemm lane (default: the device's)")
    p.add_argument("--shapes", default=None,
                   help="comma list of LAYOUTxLxMxNxK (e.g. tnx64x1504x1504x64) replacing "
                        "the attention shapes and the sweep")
    p.add_argument("--no-sweep", action="store_true", help="the attention shapes only")
    p.add_argument("--configs", default=None,
                   help="comma list of config-id globs to compile and time (default: every "
                        "split-free config)")
    return p.parse_args(argv)


def shapes(args: argparse.Namespace) -> list[tuple[str, int, int, int, int, str]]:
    """``(layout, L, M, N, K, kind)`` to time: ``attention``, then the ``sweep``; a shape the
    kernels cannot take (N or K not a multiple of 8) is a ``SystemExit`` naming it."""
    if args.shapes:
        out = []
        for text in args.shapes.split(","):
            layout, *dims = text.split("x")
            if layout not in LAYOUTS or len(dims) != 4:
                raise SystemExit(f"--shapes: {text!r} is not LAYOUTxLxMxNxK with LAYOUT tn "
                                 "or nn")
            out.append((layout, *map(int, dims), "given"))
    else:
        out = [(*s, "attention") for s in ATTENTION]
        if not args.no_sweep:
            out += [(*s, "sweep") for s in SWEEP]
    for layout, _, _, n, k, _ in out:
        if n % 8 or k % 8:
            raise SystemExit(f"--shapes: N={n} K={k} ({layout}) is not 16-byte aligned: the "
                             "kernels refuse it and the op serves torch.bmm")
    return out


def _specs(lane: str, arch: str, patterns: list[str] | None) -> list:
    """Per layout, the module of the lane's split-free configs' batched units (or those of
    the configs matching ``patterns``)."""
    from oasr_gemm import jit
    from oasr_gemm.config_space import has_bmm

    from oasr_core.kit.production import matching

    if not patterns:
        return [jit.bmm_full_spec(lane, arch, layout) for layout in LAYOUTS]
    try:
        chosen = matching([c for c in jit.lane_configs(lane, arch) if has_bmm(c)], patterns,
                          lane, arch)
    except ValueError as exc:
        raise SystemExit(f"--configs: {exc}") from None
    return [jit.module_spec(lane, arch, (), name=f"{jit.MODULE_PREFIX[lane]}_bmm_{layout}_subset",
                            bmm=[(c, layout) for c in chosen]) for layout in LAYOUTS]


def _bind(specs: list, lane: str, arch: str) -> dict[str, dict]:
    """Per layout, the batched launchers the prebuilt modules ``specs`` export, by config."""
    from oasr_gemm import codegen, jit, launch
    from oasr_gemm.config_space import has_bmm

    configs = [c for c in jit.lane_configs(lane, arch) if has_bmm(c)]
    return {layout: vs_torch.bind_compiled(
        spec, configs, lambda module, c, layout=layout: launch.BmmKernel.bind(module, c, layout),
        lambda c, layout=layout: codegen.bmm_symbol(c, layout))
        for layout, spec in zip(LAYOUTS, specs, strict=True)}


def _point(kernels, lane, layout, batch, m, n, k, kind, args, rng, timer) -> dict:
    import torch
    from oasr_gemm import launch, numerics
    from oasr_gemm.config_space import BMM_OPS, DEFAULTS
    from oasr_gemm.feasibility import supports

    from oasr_core.types import Problem

    a, b = numerics.make_bmm_operands(batch, m, n, k, layout, args.dtype, device="cuda",
                                      seed=args.seed + m + n)
    store = b.transpose(1, 2) if layout == "tn" else b
    ref = numerics.bmm_reference(a, b)
    base = torch.bmm(a, b)
    problem = Problem("gemm", BMM_OPS[layout], args.dtype, (("N", n), ("K", k)), batch * m)
    dev = torch.cuda.current_device()
    out = torch.empty(batch, m, n, dtype=a.dtype, device="cuda")
    ptrs = (a.data_ptr(), store.data_ptr(), out.data_ptr(), batch)
    stream = torch._C._cuda_getCurrentRawStream
    calls, failed = {}, []
    for cid, kernel in kernels.items():
        if not supports(kernel.config, problem):
            continue
        try:
            call = kernel.prepare(args.dtype, batch, m, n, k)
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
    graphs.add("torch", lambda: torch.bmm(a, b, out=out))
    for cid, call in calls.items():
        graphs.add(cid, lambda c=call: c.launch(dev, stream(dev), *ptrs))
    screen, per_call, best = graphs.screened(("torch",), args.top, args.reps, rng,
                                             also=(DEFAULTS[lane],))
    graphs.release()
    return {"layout": layout, "L": batch, "M": m, "N": n, "K": k, "kind": kind,
            "dtype": args.dtype, "lane": lane, "torch_us": per_call["torch"], "best": best,
            "best_us": per_call.get(best) if best else None,
            "default_us": per_call.get(DEFAULTS[lane]), "candidates": len(calls),
            "failed": failed, "screen_us": screen,
            "timing": "back_to_back" if args.back_to_back else "separated"}


def report(points: list[dict], header: list[str], gpu: str, back_to_back: bool = False) -> str:
    """The markdown report: environment and protocol first, then per kind of shape a table
    and a summary line (``- <kind>: ...``)."""
    nan = float("nan")

    def row(p: dict, r: float, d: float) -> str:
        flops = 2 * p["L"] * p["M"] * p["N"] * p["K"]
        tflops = flops / (p["best_us"] * 1e6) if p["best_us"] else nan
        return (f"| {p['layout']} | {p['L']} | {p['M']} | {p['N']} | {p['K']} | "
                f"{p['torch_us']:.2f} | {p['best']} | {(p['best_us'] or nan):.2f} | {r:.3f} | "
                f"{d:.3f} | {tflops:.1f} |")

    return vs_torch.kind_report(
        points, title=f"bmm vs torch.bmm on {gpu}", header=header, back_to_back=back_to_back,
        heading=lambda kind: f"{kind} shapes",
        columns=("| layout | L | M | N | K | torch us | best config | best us | torch/best "
                 "| torch/default | TFLOP/s best |",
                 "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"), row=row)



def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    todo = shapes(args)
    from oasr_gemm.config_space import LANE_SM80, LANE_SM90

    lane = args.lane
    patterns = args.configs.split(",") if args.configs else None

    def specs(arch: str) -> list:
        return _specs(lane or (LANE_SM90 if arch == "sm90" else LANE_SM80), arch, patterns)

    def bind(built: list, arch: str) -> dict[str, dict]:
        return _bind(built, lane or (LANE_SM90 if arch == "sm90" else LANE_SM80), arch)

    run = vs_torch.start(args, specs, bind)
    if isinstance(run, int):
        return run
    import torch

    lane = lane or (LANE_SM90 if run.arch == "sm90" else LANE_SM80)
    kernels = run.kernels
    points = []
    for layout, batch, m, n, k, kind in todo:
        p = _point(kernels[layout], lane, layout, batch, m, n, k, kind, args, run.rng,
                   run.timer)
        points.append(p)
        run.jsonl.add(p)
        print(f"{layout} L={batch} M={m} N={n} K={k}: torch {p['torch_us']:.2f} us, best "
              f"{p['best']} {p['best_us'] or float('nan'):.2f} us", flush=True)
    header = [mode_line(args.back_to_back),
              f"- lane {lane} ({len(kernels['tn'])} TN and {len(kernels['nn'])} NN batched "
              f"configs compiled); dtype {args.dtype}; graphs of {args.graph_calls} calls; "
              f"screening, then {args.reps} rounds of the top {args.top}, torch and the "
              "default; L2 warm (one copy of each operand)",
              "- oasr: the config's batched launcher (the batch as CUTLASS's L mode / batched "
              "grid); torch: torch.bmm into the same output",
              f"- GPU {torch.cuda.get_device_name()}; torch {torch.__version__}; CUDA "
              f"{torch.version.cuda}; timing wall {time.perf_counter() - run.started:.0f} s",
              "", "## Build", "", *run.build_lines]
    vs_torch.write_report(report(points, header, torch.cuda.get_device_name(),
                                 args.back_to_back), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
