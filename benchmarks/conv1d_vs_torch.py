"""Every compiled conv1d config and the served choice against torch's conv, in one run.

At the reference models' convolution shapes (sets, ``--sets``):

- ``conformer``: the depthwise kernel-31 conv (pad 15) at C = 144, 256, 512, B 1..32,
  T 64..1024 after subsampling, op ``conv1d_silu`` (BatchNorm folded, SiLU fused);
- ``whisper``: the front end, 80 -> 512 k3 p1 and 512 -> 512 k3 s2 p1 at T = 3000, B 1..16,
  op ``conv1d_gelu``;
- ``wav2vec2``: the feature extractor, 1 -> 512 k10 s5 on 1 s of 16 kHz audio, then
  512 -> 512 k3 s2 four times and k2 s2 twice, op ``conv1d_gelu``;
- ``sweep``: around them (depthwise C 192..1024 at k 15 and 31, a general depthwise
  k 7 stride 2, dense 256 -> 256 k3 and 384 -> 768 k3 s2).

Per point every config of the lane that supports the problem is first run once and checked
by the family's numerics gate (a failing config is reported and dropped), then timed as a
CUDA graph of ``--graph-calls`` launches next to three torch arms in the same process:
``torch`` is what a model does on channels-last data (transpose, ``F.conv1d`` on cuDNN, the
activation, transpose back to contiguous), ``torch_bct`` is ``F.conv1d`` + activation on
``(B, C, T)`` data with no transposes (cuDNN's best case), and ``served`` is the op
``oasr_conv1d.conv1d_activation`` as the loaded tuning tiers serve it (torch when no entry
covers the shape). A screening round over all arms, then ``--reps`` interleaved, shuffled
rounds of the ``--top`` fastest configs and the torch arms; medians per call. Each launch is
followed by a tiny unrelated kernel whose separately measured cost is subtracted
(``graph_timing.py``); ``--back-to-back`` credits launch overlap instead and says so.
Ratios are torch / x (> 1: faster than torch).

Usage (H200)::

    OASR_JIT_DIR=$PWD/build/jit python benchmarks/conv1d_vs_torch.py --prebuild-only --jobs 16
    OASR_JIT_DIR=$PWD/build/jit python benchmarks/conv1d_vs_torch.py --out $OUT/conv1d_vs_torch.md

``--prebuild-only --arch sm90`` works without a GPU. The report is markdown; every point is
also a JSON line beside it (``.jsonl``).
"""

from __future__ import annotations

import argparse
import sys
import time

import vs_torch
from graph_timing import GraphArms, mode_line


def _conformer():
    for c in (144, 256, 512):
        for b, t in ((1, 64), (1, 256), (4, 128), (8, 256), (16, 256), (16, 512), (32, 64),
                     (32, 256), (32, 1024)):
            yield ("conformer", "conv1d_silu", c, c, 31, 1, 15, 1, c, b, t)


def _whisper():
    for b in (1, 4, 8, 16):
        yield ("whisper", "conv1d_gelu", 80, 512, 3, 1, 1, 1, 1, b, 3000)
        yield ("whisper", "conv1d_gelu", 512, 512, 3, 2, 1, 1, 1, b, 3000)


def _wav2vec2():
    for b in (1, 4):
        t = 16000
        yield ("wav2vec2", "conv1d_gelu", 1, 512, 10, 5, 0, 1, 1, b, t)
        t = (t - 10) // 5 + 1
        for k in (3, 3, 3, 3, 2, 2):
            yield ("wav2vec2", "conv1d_gelu", 512, 512, k, 2, 0, 1, 1, b, t)
            t = (t - k) // 2 + 1


def _sweep():
    for c in (192, 384, 768, 1024):
        for k in (15, 31):
            for b, t in ((1, 100), (8, 400), (32, 200)):
                yield ("sweep", "conv1d_silu", c, c, k, 1, k // 2, 1, c, b, t)
    for b, t in ((4, 500), (16, 1000)):
        yield ("sweep", "conv1d_relu", 256, 256, 7, 2, 3, 1, 256, b, t)
        yield ("sweep", "conv1d", 256, 256, 3, 1, 1, 1, 1, b, t)
        yield ("sweep", "conv1d_gelu", 384, 768, 3, 2, 1, 1, 1, b, t)


SETS = {"conformer": _conformer, "whisper": _whisper, "wav2vec2": _wav2vec2, "sweep": _sweep}


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vs_torch.add_run_arguments(p, lanes=True, top=6)
    p.add_argument("--sets", default="conformer,whisper,wav2vec2,sweep")
    return p.parse_args(argv)


def _kernels(specs, lanes, arch):
    """Every compiled config per lane; installed as the ops' library so ``served`` runs from
    the same module."""
    from oasr_conv1d import jit, launch
    from oasr_conv1d.lanes import symbol

    out = {}
    for spec, lane in zip(specs, lanes, strict=True):
        kernels = vs_torch.bind_compiled(spec, jit.lane_configs(lane, arch), launch.Kernel.bind,
                                         symbol)
        launch.LIBRARIES.install(lane, arch, kernels)
        out[lane] = kernels
    return out


def _problem(op, cin, cout, k, s, p, d, g, b, t, dtype):
    from oasr_core.types import Problem

    t_out = (t + 2 * p - d * (k - 1) - 1) // s + 1
    dims = (("Cin", cin), ("Cout", cout), ("k", k), ("stride", s), ("pad", p), ("dil", d),
            ("groups", g))
    return Problem("conv1d", op, dtype, dims, b * t_out, point=f"{b}x{t}")


def _point(kernels, lane, shape, args, rng, timer):
    import oasr_conv1d
    import torch
    import torch.nn.functional as F
    from oasr_conv1d import lanes, launch, numerics, ops, weights
    from oasr_conv1d.bench import activation_of
    from oasr_conv1d.geometry import geometry

    sset, op, cin, cout, k, s, p, d, g, b, t = shape
    act = activation_of(op)
    problem = _problem(op, cin, cout, k, s, p, d, g, b, t, args.dtype)
    x, w, bias = numerics.make_operands(b, t, cin, cout, k, g, args.dtype, device="cuda",
                                        seed=args.seed + b * t)
    geo = geometry(b, t, cin, cout, k, s, p, d, g)
    kind = weights.kind_of(cin, cout, g)
    packed = weights.pack(w, kind)
    ref = numerics.reference(x, w, bias, s, p, d, g, act)
    base = numerics.torch_conv(x, w, bias, s, p, d, g, act)
    dev = torch.cuda.current_device()
    out = torch.empty(b, geo.t_out, cout, dtype=x.dtype, device="cuda")
    arms, failed = {}, []
    for cid, kernel in kernels.items():
        if not lanes.supports(kernel.config, problem):
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
    x_bct = x.transpose(1, 2).contiguous()
    activate = {None: lambda y: y, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[act]
    ops.reset_stats()
    served_out = oasr_conv1d.conv1d_activation(x, w, bias, act, s, p, d, g)  # plan + pack
    served_gate = numerics.numerics_gate(served_out, base, ref, dtype=args.dtype)
    served_on = "torch" if ops.stats() else _served_choice(op, problem, lane)
    graphs = GraphArms(args.graph_calls, back_to_back=args.back_to_back, timer=timer)
    graphs.add("torch", lambda: numerics.torch_conv(x, w, bias, s, p, d, g, act))
    graphs.add("torch_bct", lambda: activate(F.conv1d(x_bct, w, bias, s, p, d, g)))
    graphs.add("served", lambda: oasr_conv1d.conv1d_activation(x, w, bias, act, s, p, d, g))
    for cid, fn in arms.items():
        graphs.add(cid, fn)
    screen, per_call, best = graphs.screened(("torch", "torch_bct", "served"), args.top,
                                             args.reps, rng)
    graphs.release()
    return {
        "set": sset, "op": op, "Cin": cin, "Cout": cout, "k": k, "stride": s, "pad": p,
        "dil": d, "groups": g, "B": b, "T": t, "dtype": args.dtype, "lane": lane,
        "torch_us": per_call["torch"], "torch_bct_us": per_call["torch_bct"],
        "served_us": per_call["served"], "served": served_on, "served_gate": bool(served_gate),
        "best": best, "best_us": per_call.get(best) if best else None,
        "candidates": len(arms), "failed": failed, "screen_us": screen,
        "timing": "back_to_back" if args.back_to_back else "separated",
    }


def _served_choice(op, problem, lane):
    import oasr_core

    return oasr_core.select("conv1d", op, problem.dtype, tuple(v for _, v in problem.dims),
                            problem.m, point=problem.point).choice_id


def _report(points, header, build_lines, gpu):
    lines = [f"# conv1d vs torch ({gpu})", "", *header, "", "## Build", "", *build_lines, ""]
    lines += ["## Summary", "", "| set | points | best / torch (geomean, min) | served / torch "
              "(geomean, min) | best / torch_bct (geomean) |", "|---|---|---|---|---|"]
    for sset in dict.fromkeys(p["set"] for p in points):
        rows = [p for p in points if p["set"] == sset]
        best = [p["torch_us"] / p["best_us"] for p in rows if p["best_us"]]
        served = [p["torch_us"] / p["served_us"] for p in rows]
        bct = [p["torch_bct_us"] / p["best_us"] for p in rows if p["best_us"]]
        lines.append(f"| {sset} | {len(rows)} | {vs_torch.geomean(best):.3f}x, "
                     f"{min(best, default=float('nan')):.3f}x | {vs_torch.geomean(served):.3f}x, "
                     f"{min(served, default=float('nan')):.3f}x | {vs_torch.geomean(bct):.3f}x |")
    lines += ["", "## Points", "", "| set | op | Cin->Cout k s p d g | B x T | torch us | "
              "torch_bct us | best | best us | best/torch | served | served us | "
              "served/torch | gated out |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        best_us = p["best_us"] or float("nan")
        lines.append(
            f"| {p['set']} | {p['op']} | {p['Cin']}->{p['Cout']} k{p['k']} s{p['stride']} "
            f"p{p['pad']} d{p['dil']} g{p['groups']} | {p['B']}x{p['T']} | {p['torch_us']:.2f} | "
            f"{p['torch_bct_us']:.2f} | {p['best']} | {best_us:.2f} | "
            f"{p['torch_us'] / best_us:.3f}x | {p['served']}"
            f"{'' if p['served_gate'] else ' (GATE FAILED)'} | "
            f"{p['served_us']:.2f} | {p['torch_us'] / p['served_us']:.3f}x | {len(p['failed'])} |")
    lines += vs_torch.refused_section(
        points, lambda p: f"{p['set']} {p['Cin']}->{p['Cout']} k{p['k']} {p['B']}x{p['T']}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = _args(argv)
    import torch
    from oasr_conv1d import jit
    from oasr_conv1d.geometry import LANE_SM80, LANE_SM90

    def lanes_of(arch):
        return vs_torch.lanes_for(args.lanes, arch, LANE_SM80, LANE_SM90)

    run = vs_torch.start(args, lambda arch: [jit.full_spec(lane, arch) for lane in lanes_of(arch)],
                         lambda specs, arch: _kernels(specs, lanes_of(arch), arch))
    if isinstance(run, int):
        return run
    lanes, points = lanes_of(run.arch), []
    with torch.no_grad():
        for lane in lanes:
            for name in args.sets.split(","):
                for shape in SETS[name]():
                    p = _point(run.kernels[lane], lane, shape, args, run.rng, run.timer)
                    points.append(p)
                    print(f"{lane} {shape}: torch {p['torch_us']:.2f} us, best {p['best']} "
                          f"{p['best_us'] or float('nan'):.2f} us, served {p['served']} "
                          f"{p['served_us']:.2f} us", flush=True)
                    run.jsonl.add(p)
    header = [mode_line(args.back_to_back),
              f"- lanes {', '.join(lanes)}; dtype {args.dtype}; graph of {args.graph_calls} "
              f"calls; {args.reps} rounds for the top {args.top} + torch, torch_bct, served",
              f"- torch {torch.__version__}; timing wall {time.perf_counter() - run.started:.0f} s"]
    text = _report(points, header, run.build_lines, torch.cuda.get_device_name())
    vs_torch.write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
