"""Every compiled gemm config against torch's F.linear (cuBLAS), graph-timed in one run.

For each width (N, K) and each M of a ladder from 16 to 32768, every config of the lane that
can run the shape is first checked by the family's numerics gate (within 4x of torch's error
against fp32; a failing config is reported and dropped), then timed as a CUDA graph of
``--graph-calls`` launches (default 8) next to torch in the same process: a screening round
over all configs, then ``--reps`` interleaved, shuffled rounds of the ``--top`` fastest and
torch; the estimate is the median per call. Ratios are torch/best (> 1: oasr is faster).
Each launch is followed by a tiny unrelated kernel whose separately measured cost is
subtracted, as inside a model (``graph_timing.py``); ``--back-to-back`` times the launches
with nothing between them instead, crediting the launch overlap, and says so in the report.

A second, eager section times host issue and wall time per call of ``oasr_gemm.gemm`` (the
full op: checks, memo, ctypes, launch; the config the tuning tiers select, served from the
benchmark's module) against ``F.linear`` at M <= 1000.

Usage (H200; prebuild first in a separate call if the 10-minute limit is tight)::

    OASR_JIT_DIR=$PWD/build/jit python benchmarks/gemm_vs_torch.py --prebuild-only --jobs 16
    OASR_JIT_DIR=$PWD/build/jit python benchmarks/gemm_vs_torch.py --out $OUT/gemm_vs_torch.md

``--prebuild-only --arch sm90`` also works on a machine without a GPU (compile here, carry
the ``OASR_JIT_DIR`` folder).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import vs_torch
from graph_timing import GraphArms, mode_line

WIDTHS = ((256, 256), (1024, 256), (256, 1024), (768, 256), (512, 512), (2048, 512), (512, 2048))
M_LADDER = (16, 32, 64, 128, 256, 416, 512, 1000, 1500, 2152, 4096, 8192, 16384, 32768)
EAGER_MS = (16, 64, 256, 1000)


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vs_torch.add_run_arguments(p, lanes=True, top=8)
    p.add_argument("--bias", action="store_true", help="time gemm with a bias")
    p.add_argument("--widths", default=None, help="e.g. 256x256,2048x512 (default: seven)")
    p.add_argument("--ms", default=None, help="M ladder, comma list (default 16..32768)")
    p.add_argument("--no-eager", action="store_true")
    p.add_argument("--no-pdl", dest="pdl", action="store_false",
                   help="launch without programmatic dependent launch (default: with, as the "
                        "ops do; the best config is then also timed without)")
    p.add_argument("--fused-epilogue", action="store_true",
                   help="3.x kernels run their bias/activation epilogue even without bias "
                        "(default: the plain epilogue the ops take for such calls)")
    p.add_argument("--configs", default=None,
                   help="comma list of config-id globs to compile and time (default: all)")
    return p.parse_args(argv)


def _specs(lanes, arch, patterns=None):
    """Whole-space modules with both dtypes: the same objects the GPU tests, the production
    modules and ``OASR_GEMM_COMPILE_SET=all`` use, so one prebuilt cache serves them all.
    ``patterns`` (config-id globs) narrows each to the matching configs (same objects)."""
    from oasr_gemm import jit

    if not patterns:
        return [jit.full_spec(lane, arch) for lane in lanes]
    try:
        return [jit.subset_spec(lane, arch, patterns) for lane in lanes]
    except ValueError as exc:
        raise SystemExit(f"--configs: {exc}") from None


def _kernels(specs, lanes, arch):
    from oasr_gemm import codegen, jit, launch

    out = {}
    for spec, lane in zip(specs, lanes, strict=True):
        kernels = vs_torch.bind_compiled(spec, jit.lane_configs(lane, arch), launch.Kernel.bind,
                                codegen.symbol)
        launch.install_library(lane, arch, kernels)
        out[lane] = kernels
    return out


def _point(kernels, lane, n, k, m, args, rng, timer):
    import torch
    import torch.nn.functional as F
    from oasr_gemm import launch, numerics
    from oasr_gemm.config_space import DEFAULTS
    from oasr_gemm.feasibility import supports

    from oasr_core.types import Problem

    a, w, b = numerics.make_operands(m, n, k, args.dtype, bias=args.bias, device="cuda",
                                     seed=args.seed + m)
    ref = numerics.reference(a, w, b)
    base = numerics.torch_output(a, w, b)
    problem = Problem("gemm", "gemm", args.dtype, (("N", n), ("K", k)), m)
    dev = torch.cuda.current_device()
    arms, no_pdl, failed = {}, {}, []
    for cid, kernel in kernels.items():
        if not supports(kernel.config, problem):
            continue
        out = torch.empty(m, n, dtype=a.dtype, device="cuda")
        try:
            kernel.run(a, w, b, out)
        except launch.LaunchError as exc:
            failed.append(f"{cid}: {exc}")
            continue
        torch.cuda.synchronize()
        verdict = numerics.numerics_gate(out, base, ref)
        if not verdict:
            failed.append(f"{cid}: {verdict.reason}")
            continue
        ptrs = (a.data_ptr(), w.data_ptr(), b.data_ptr() if b is not None else 0, out.data_ptr())
        fused = args.fused_epilogue
        arms[cid] = _launcher(kernel.prepare(args.dtype, m, n, k, None, pdl=args.pdl,
                                             fused=fused), ptrs, out, dev)
        if args.pdl:
            no_pdl[cid] = _launcher(kernel.prepare(args.dtype, m, n, k, None, pdl=False,
                                                   fused=fused), ptrs, out, dev)
    graphs = GraphArms(args.graph_calls, back_to_back=args.back_to_back, timer=timer)
    graphs.add("torch", lambda: F.linear(a, w, b))
    for cid, fn in arms.items():
        graphs.add(cid, fn)
    default = DEFAULTS[lane]
    screen, per_call, best = graphs.screened(("torch",), args.top, args.reps, rng,
                                             also=(default,))
    best_no_pdl = None
    if best in no_pdl:
        # The same kernel launched without programmatic dependent launch, next to the PDL
        # launch and torch: how much of the margin is the launch overlap between calls.
        graphs.add("_no_pdl", no_pdl[best])
        again = graphs.rounds(["torch", best, "_no_pdl"], args.reps, rng)
        best_no_pdl = again["_no_pdl"] / again["torch"] * per_call["torch"]
    graphs.release()
    return {
        "N": n, "K": k, "M": m, "dtype": args.dtype, "bias": args.bias, "lane": lane,
        "torch_us": per_call["torch"], "best": best,
        "best_us": per_call.get(best) if best else None, "best_no_pdl_us": best_no_pdl,
        "default_us": per_call.get(default), "candidates": len(arms), "failed": failed,
        "screen_us": screen, "timing": "back_to_back" if args.back_to_back else "separated",
    }


def _launcher(prepared, ptrs, out, dev):
    """A no-argument launch of ``prepared`` on the current stream (``out`` kept alive)."""
    import torch

    return lambda p=prepared, q=ptrs, o=out: p.launch(
        dev, torch._C._cuda_getCurrentRawStream(dev), *q)


def _eager(n, k, m, dtype, back_to_back, calls=200):
    """Host issue and wall us per eager call of torch and the op; separated (the default),
    each call is followed by a one-element add whose own issue and wall cost, timed the same
    way, is subtracted."""
    import oasr_gemm
    import torch
    import torch.nn.functional as F
    from oasr_gemm import numerics

    a, w, b = numerics.make_operands(m, n, k, dtype, device="cuda", seed=m)
    sep_buf = torch.zeros(1, device="cuda")
    rows = {}
    arms = [("torch", lambda: F.linear(a, w, b)), ("oasr", lambda: oasr_gemm.gemm(a, w, b))]
    if not back_to_back:
        arms.append(("_separator", lambda: None))
    for name, fn in arms:
        def step(fn=fn):
            fn()
            if not back_to_back:
                sep_buf.add_(1.0)
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        for _ in range(calls):
            step()
        issue = (time.perf_counter() - t0) / calls * 1e6
        end.record()
        torch.cuda.synchronize()
        rows[name] = (issue, start.elapsed_time(end) * 1000.0 / calls)
    si, sw = rows.pop("_separator", (0.0, 0.0))
    return {name: (issue - si, wall - sw) for name, (issue, wall) in rows.items()}


def _report(points, eager, header, build_lines, gpu, back_to_back=False):
    """The markdown report; its graph and eager sections name the timing mode."""
    mode = ", back to back (launch overlap credited)" if back_to_back else \
        ", separated (separator cost subtracted)"
    lines = [f"# gemm vs torch F.linear on {gpu}", "", *header, "", "## Build", "", *build_lines,
             "", f"## Graph-timed (us per call, median{mode}; ratio = torch / best)", "",
             "| N | K | M | torch us | best config | best us | torch/best | torch/default "
             "| best no-PDL us | torch/best no-PDL |",
             "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    ratios, plain = [], []
    nan = float("nan")
    for p in points:
        r = p["torch_us"] / p["best_us"] if p["best_us"] else nan
        d = p["torch_us"] / p["default_us"] if p["default_us"] else nan
        q = p.get("best_no_pdl_us")
        rq = p["torch_us"] / q if q else nan
        ratios.append(r)
        plain.append(rq)
        lines.append(f"| {p['N']} | {p['K']} | {p['M']} | {p['torch_us']:.2f} | {p['best']} | "
                     f"{(p['best_us'] or nan):.2f} | {r:.3f} | {d:.3f} | {(q or nan):.2f} | "
                     f"{rq:.3f} |")
    ok = [r for r in ratios if not math.isnan(r)]
    ok_plain = [r for r in plain if not math.isnan(r)]
    lines += ["", "## Summary", "",
              f"- points: {len(points)}; faster than torch: {sum(r > 1 for r in ok)}; "
              f">= 5% faster: {sum(r >= 1.05 for r in ok)}",
              f"- geomean torch/best: {vs_torch.geomean(ok):.3f}; with torch as an arm "
              f"(max(1, r)): "
              f"{vs_torch.geomean([max(1.0, r) for r in ok]):.3f}",
              f"- best: {max(ok, default=math.nan):.3f}; worst: {min(ok, default=math.nan):.3f}",
              f"- points below 0.98: {sum(r < 0.98 for r in ok)}"]
    if ok_plain:
        lines.append(f"- the same best configs launched without PDL: geomean "
                     f"{vs_torch.geomean(ok_plain):.3f}, worst {min(ok_plain):.3f}, below 0.98: "
                     f"{sum(r < 0.98 for r in ok_plain)}")
    failed = sorted({f for p in points for f in p["failed"]})
    lines.append(f"- configs failing the numerics gate or refusing somewhere: {len(failed)}")
    lines += [f"  - {f}" for f in failed[:40]]
    if eager:
        lines += ["", f"## Eager (us per call: host issue / wall, 200 calls, with bias{mode})",
                  "",
                  "| N | K | M | torch issue | torch wall | oasr issue | oasr wall "
                  "| wall torch/oasr |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for (n, k, m), rows in eager:
            (ti, tw), (oi, ow) = rows["torch"], rows["oasr"]
            lines.append(f"| {n} | {k} | {m} | {ti:.2f} | {tw:.2f} | {oi:.2f} | {ow:.2f} | "
                         f"{tw / ow:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    import torch
    from oasr_gemm.config_space import LANE_SM80, LANE_SM90

    def lanes_of(arch):
        return vs_torch.lanes_for(args.lanes, arch, LANE_SM80, LANE_SM90)

    patterns = args.configs.split(",") if args.configs else None
    run = vs_torch.start(args, lambda arch: _specs(lanes_of(arch), arch, patterns),
                         lambda specs, arch: _kernels(specs, lanes_of(arch), arch))
    if isinstance(run, int):
        return run
    widths = [tuple(map(int, w.split("x"))) for w in args.widths.split(",")] \
        if args.widths else WIDTHS
    ms = [int(m) for m in args.ms.split(",")] if args.ms else M_LADDER
    lanes, gpu, points = lanes_of(run.arch), torch.cuda.get_device_name(), []
    for lane in lanes:
        for n, k in widths:
            for m in ms:
                p = _point(run.kernels[lane], lane, n, k, m, args, run.rng, run.timer)
                points.append(p)
                print(f"{lane} N={n} K={k} M={m}: torch {p['torch_us']:.2f} us, best "
                      f"{p['best']} {p['best_us'] or float('nan'):.2f} us", flush=True)
                run.jsonl.add(p)
    eager = []
    if not args.no_eager:
        with torch.no_grad():
            for n, k in widths:
                for m in EAGER_MS:
                    eager.append(((n, k, m), _eager(n, k, m, args.dtype, args.back_to_back)))
    import oasr_gemm

    epilogue = "fused (bias/activation EVT)" if args.fused_epilogue else "plain without bias"
    header = [mode_line(args.back_to_back),
              f"- lanes {', '.join(lanes)}; dtype {args.dtype}; bias {args.bias}; graph of "
              f"{args.graph_calls} calls; {args.reps} rounds for the top {args.top} + torch",
              f"- PDL {'on' if args.pdl else 'off'}; 3.x epilogue {epilogue}; configs "
              f"{args.configs or 'all'}",
              f"- torch {torch.__version__}; timing wall {time.perf_counter() - run.started:.0f} s",
              f"- torch-path counts in the eager section: {oasr_gemm.stats() or 'none'}"]
    text = _report(points, eager, header, run.build_lines, gpu, args.back_to_back)
    vs_torch.write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
