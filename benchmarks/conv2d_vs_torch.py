"""Every compiled conv2d config and the served choice against torch's conv, in one run.

At the speech front end's shapes (sets, ``--sets``), NHWC fp16:

- ``conformer``: the subsampling's 1 -> C 3x3 stride 2 on 80 mel bins and its C -> C 3x3
  stride 2 (on 39 bins), ReLU fused, at C = 144, 256, 512 (Conformer S, M, L), B x T of
  1 x 256, 8 x 1024, 16 x 1024 and 32 x 512 frames;
- ``fastconformer``: a depthwise-separable front end's depthwise 3x3 stride 2 (padding 1,
  groups = C: torch's, the family has no depthwise config) and the pointwise 1x1 after it;
- ``sweep``: widths no issue names (C = 96, 176, 320, 384, 768) at 4 x 512 and 16 x 1024.

Per point every config of the lane that supports the problem is first run once and checked
by the family's numerics gate (a failing config is reported and dropped), then timed as a
CUDA graph of ``--graph-calls`` launches next to three arms in the same process: ``torch``
is the op's torch path (``F.conv2d`` on the NHWC data's channels-last view: cuDNN's NHWC
kernels, no copy), ``torch_nchw`` is what the reference models run (``F.conv2d`` on NCHW data,
then the activation), and ``served`` is the op ``oasr_conv2d.conv2d_activation`` as the
loaded tiers serve it (torch when no entry covers the shape). A screening round over all
arms, then ``--reps`` interleaved, shuffled rounds of the ``--top`` fastest configs and the
torch arms; medians per call. Each launch is followed by a tiny unrelated kernel whose
separately measured cost is subtracted (``graph_timing.py``). Ratios are torch / x (> 1:
faster than torch).

Usage (H200)::

    python benchmarks/conv2d_vs_torch.py --prebuild-only --arch sm90 --jobs 16   # no GPU needed
    python benchmarks/conv2d_vs_torch.py --out $OUT/conv2d_vs_torch.md

The report is markdown; every point is also a JSON line beside it (``.jsonl``).
"""

from __future__ import annotations

import argparse
import sys
import time

import vs_torch
from graph_timing import GraphArms, mode_line

BATCHES = ((1, 256), (8, 1024), (16, 1024), (32, 512))


def _front(sset, c, b, t):
    """The two convs of a Conformer front end of width ``c`` on ``b`` x ``t`` frames."""
    h1 = (t - 3) // 2 + 1
    yield (sset, "conv2d_relu", 1, c, 80, b, t, (3, 3), (2, 2), (0, 0), 1)
    yield (sset, "conv2d_relu", c, c, 39, b, h1, (3, 3), (2, 2), (0, 0), 1)


def _conformer():
    for c in (144, 256, 512):
        for b, t in BATCHES:
            yield from _front("conformer", c, b, t)


def _fastconformer():
    for b, t in ((8, 1024), (16, 1024)):
        h1 = (t + 2 - 3) // 2 + 1
        yield ("fastconformer", "conv2d", 256, 256, 40, b, h1, (3, 3), (2, 2), (1, 1), 256)
        yield ("fastconformer", "conv2d_relu", 256, 256, 20, b, (h1 - 1) // 2 + 1, (1, 1),
               (1, 1), (0, 0), 1)


def _sweep():
    for c in (96, 176, 320, 384, 768):
        for b, t in ((4, 512), (16, 1024)):
            yield from _front("sweep", c, b, t)


SETS = {"conformer": _conformer, "fastconformer": _fastconformer, "sweep": _sweep}


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vs_torch.add_run_arguments(p, reps=5)
    p.add_argument("--sets", default="conformer,fastconformer,sweep")
    return p.parse_args(argv)


def _kernels(spec, arch):
    """Every compiled config; installed as the ops' library so ``served`` runs from it."""
    from oasr_conv2d import jit, launch
    from oasr_conv2d.geometry import LANE
    from oasr_conv2d.lanes import symbol

    kernels = vs_torch.bind_compiled(spec, jit.lane_configs(LANE, arch), launch.Kernel.bind, symbol)
    launch.LIBRARIES.install(LANE, arch, kernels)
    return kernels


def _point(kernels, shape, args, rng, timer):
    import oasr_conv2d
    import torch
    import torch.nn.functional as F
    from oasr_conv2d import launch, numerics, ops, space, weights
    from oasr_conv2d.bench import activation_of
    from oasr_conv2d.geometry import geometry

    import oasr_core

    sset, op, cin, cout, width, b, h, k, s, p, g = shape
    act = activation_of(op)
    problem = space.make_problem(op, cin, cout, width, b, h, kernel=k, stride=s, padding=p,
                                 groups=g, dtype=args.dtype)
    x, w, bias = numerics.make_operands(b, h, width, cin, cout, *k, g, args.dtype,
                                        device="cuda", seed=args.seed + b * h + cin)
    geo = geometry(b, h, width, cin, cout, *k, *s, *p, 1, 1, g)
    ref = numerics.reference(x, w, bias, s, p, 1, g, act)
    base = numerics.torch_conv(x, w, bias, s, p, 1, g, act)
    dev = torch.cuda.current_device()
    out = torch.empty(b, geo.h_out, geo.w_out, cout, dtype=x.dtype, device="cuda")
    arms, failed = {}, []
    packed = weights.pack(w)
    for cid, kernel in kernels.items():
        if not space.supports(kernel.config, problem):
            continue
        try:
            kernel.run(x, packed, bias, geo, act, out=out)
            torch.cuda.synchronize()
        except launch.LaunchError as exc:
            failed.append(f"{cid}: {exc}")
            continue
        verdict = numerics.numerics_gate(out, base, ref, dtype=args.dtype)
        if not verdict:
            failed.append(f"{cid}: {verdict.reason}")
            continue
        plan = kernel.prepare(geo, args.dtype, act)
        operands = plan.operands(x.data_ptr(), packed.data_ptr(), bias.data_ptr(),
                                 out.data_ptr())
        arms[cid] = (lambda pl=plan, q=operands: pl.prepared.launch(
            dev, torch._C._cuda_getCurrentRawStream(dev), *q))
    x_nchw = x.permute(0, 3, 1, 2).contiguous()
    activate = {None: lambda y: y, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[act]
    ops.reset_stats()
    served_out = oasr_conv2d.conv2d_activation(x, w, bias, act, s, p, 1, g)  # plan + pack
    served_gate = numerics.numerics_gate(served_out, base, ref, dtype=args.dtype)
    served_on = "torch" if ops.stats() else oasr_core.select(
        "conv2d", op, args.dtype, tuple(v for _, v in problem.dims), problem.m,
        point=problem.point).choice_id
    graphs = GraphArms(args.graph_calls, back_to_back=args.back_to_back, timer=timer)
    graphs.add("torch", lambda: numerics.torch_conv(x, w, bias, s, p, 1, g, act))
    graphs.add("torch_nchw", lambda: activate(F.conv2d(x_nchw, w, bias, s, p, 1, g)))
    graphs.add("served", lambda: oasr_conv2d.conv2d_activation(x, w, bias, act, s, p, 1, g))
    for cid, fn in arms.items():
        graphs.add(cid, fn)
    screen, per_call, best = graphs.screened(("torch", "torch_nchw", "served"), args.top,
                                             args.reps, rng)
    graphs.release()
    return {
        "set": sset, "op": op, "Cin": cin, "Cout": cout, "W": width, "B": b, "H": h,
        "k": list(k), "stride": list(s), "pad": list(p), "groups": g, "dtype": args.dtype,
        "M": problem.m, "torch_us": per_call["torch"], "torch_nchw_us": per_call["torch_nchw"],
        "served_us": per_call["served"], "served": served_on, "served_gate": bool(served_gate),
        "best": best, "best_us": per_call.get(best) if best else None,
        "candidates": len(arms), "failed": failed, "screen_us": screen,
        "timing": "back_to_back" if args.back_to_back else "separated",
    }


def _report(points, header, build_lines, gpu):
    lines = [f"# conv2d vs torch ({gpu})", "", *header, "", "## Build", "", *build_lines, ""]
    lines += ["## Summary", "", "| set | points | best / torch (geomean, min, max) | "
              "served / torch (geomean, min) | torch_nchw / torch (geomean) |",
              "|---|---|---|---|---|"]
    for sset in dict.fromkeys(p["set"] for p in points):
        rows = [p for p in points if p["set"] == sset]
        best = [p["torch_us"] / p["best_us"] for p in rows if p["best_us"]]
        served = [p["torch_us"] / p["served_us"] for p in rows]
        nchw = [p["torch_us"] / p["torch_nchw_us"] for p in rows]
        lines.append(f"| {sset} | {len(rows)} | {vs_torch.geomean(best):.3f}x, "
                     f"{min(best, default=float('nan')):.3f}x, "
                     f"{max(best, default=float('nan')):.3f}x | {vs_torch.geomean(served):.3f}x, "
                     f"{min(served, default=float('nan')):.3f}x | {vs_torch.geomean(nchw):.3f}x |")
    lines += ["", "## Points", "", "| set | op | Cin->Cout W k s p g | B x H | M | torch us | "
              "torch_nchw us | best | best us | best/torch | served | served us | "
              "served/torch | gated out |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        best_us = p["best_us"] or float("nan")
        k, s, pad = (f"{v[0]}x{v[1]}" for v in (p["k"], p["stride"], p["pad"]))
        lines.append(
            f"| {p['set']} | {p['op']} | {p['Cin']}->{p['Cout']} W{p['W']} k{k} s{s} p{pad} "
            f"g{p['groups']} | {p['B']}x{p['H']} | {p['M']} | {p['torch_us']:.2f} | "
            f"{p['torch_nchw_us']:.2f} | {p['best']} | {best_us:.2f} | "
            f"{vs_torch.ratio(p['torch_us'], p['best_us']):.3f}x | {p['served']}"
            f"{'' if p['served_gate'] else ' (GATE FAILED)'} | {p['served_us']:.2f} | "
            f"{p['torch_us'] / p['served_us']:.3f}x | {len(p['failed'])} |")
    lines += vs_torch.refused_section(
        points, lambda p: f"{p['set']} {p['Cin']}->{p['Cout']} {p['B']}x{p['H']}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = _args(argv)
    import torch
    from oasr_conv2d import jit
    from oasr_conv2d.geometry import LANE

    run = vs_torch.start(args, lambda arch: [jit.MODULES.full_spec(LANE, arch)],
                         lambda specs, arch: _kernels(specs[0], arch))
    if isinstance(run, int):
        return run
    points = []
    with torch.no_grad():
        for name in args.sets.split(","):
            for shape in SETS[name]():
                p = _point(run.kernels, shape, args, run.rng, run.timer)
                points.append(p)
                print(f"{shape}: torch {p['torch_us']:.2f} us, best {p['best']} "
                      f"{p['best_us'] or float('nan'):.2f} us, served {p['served']} "
                      f"{p['served_us']:.2f} us", flush=True)
                run.jsonl.add(p)
    header = [mode_line(args.back_to_back),
              f"- lane sm80_conv2d on {run.arch}; dtype {args.dtype}; graph of {args.graph_calls} "
              f"calls; {args.reps} rounds for the top {args.top} + torch, torch_nchw, served",
              f"- torch {torch.__version__}; timing wall {time.perf_counter() - run.started:.0f} s"]
    text = _report(points, header, run.build_lines, torch.cuda.get_device_name())
    vs_torch.write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
