"""What oasr serves out of the box against torch at GEMM widths no shipped table covers.

For each (N, K) of ``--widths`` and each M of ``--ms``, the op a model calls
(``oasr_gemm.gemm(a, w, bias)``, resolved through the tiers: user, system, the cost-model
tier, then the family's untuned fallback) and ``F.linear`` are captured as CUDA graphs of
``--graph-calls`` calls, separated by default (each call followed by a tiny unrelated kernel
whose separately measured cost is subtracted; ``--back-to-back`` credits launch overlap) and
replayed in interleaved shuffled rounds, on one GPU in one process. The report lists, per
point, the tier and config that served it and torch / oasr; the summary gives the geomean,
the worst point and the points below 0.97x and 0.98x, overall and by serving tier.

Run on a GPU::

    OASR_TUNE_USER_DB=off python benchmarks/served_vs_torch.py --out served.md
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import graph_timing  # noqa: E402

WIDTHS = "384x1536,1536x384,640x640,768x3072,3072x768,1280x1280,1152x4608,4608x1152,2816x704," \
         "704x2816,896x3584"
"""(N, K) pairs no shipped table or issue names (the shipped tables cover the reference
Conformer's and Whisper-base's widths)."""
MS = "16,48,96,200,416,640,1000,1500,2152,3000,4500,8192,12000,24000"


def _parse_widths(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        n, _, k = item.strip().partition("x")
        out.append((int(n), int(k)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default=WIDTHS, help="comma list of NxK")
    ap.add_argument("--ms", default=MS, help="comma list of M")
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    ap.add_argument("--no-bias", action="store_true", help="time without a bias")
    ap.add_argument("--activation", choices=("relu", "gelu", "silu"),
                    help="time gemm_activation (fused) against F.linear then the activation")
    ap.add_argument("--graph-calls", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="markdown report (JSON beside it)")
    graph_timing.add_mode_argument(ap)
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("served_vs_torch.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    import oasr_gemm

    from oasr_core import select, tuning_report

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    rng = random.Random(args.seed)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    rows = []
    for n, k in _parse_widths(args.widths):
        w = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) * k ** -0.5
        b = None if args.no_bias else torch.randn(n, device="cuda", dtype=dtype, generator=gen)
        for m in (int(x) for x in args.ms.split(",")):
            a = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
            if args.activation:
                act = getattr(F, args.activation)

                def ours(a=a, w=w, b=b):
                    return oasr_gemm.gemm_activation(a, w, b, args.activation)

                def theirs(a=a, w=w, b=b, act=act):
                    return act(F.linear(a, w, b))
            else:
                def ours(a=a, w=w, b=b):
                    return oasr_gemm.gemm(a, w, b)

                def theirs(a=a, w=w, b=b):
                    return F.linear(a, w, b)
            got, want = ours(), theirs()
            err = ((got.float() - want.float()).abs().max() /
                   want.float().abs().max().clamp_min(1e-6)).item()
            op = "gemm_activation" if args.activation else "gemm"
            sel = select("gemm", op, args.dtype, {"N": n, "K": k}, m)
            arms = graph_timing.GraphArms(args.graph_calls, back_to_back=args.back_to_back)
            arms.add("oasr", ours)
            arms.add("torch", theirs)
            us = arms.rounds(arms.names, args.rounds, rng)
            arms.release()
            rows.append({"n": n, "k": k, "m": m, "tier": sel.tier.value,
                "config": sel.config.id if sel.config is not None else sel.choice.value,
                "oasr_us": us["oasr"], "torch_us": us["torch"],
                "speedup": us["torch"] / us["oasr"], "max_rel_err": err})
            print(f"N={n:5d} K={k:5d} M={m:6d} {rows[-1]['tier']:8s} {rows[-1]['config']:30s} "
                  f"{us['oasr']:8.2f} {us['torch']:8.2f} us  {rows[-1]['speedup']:.3f}x",
                  flush=True)

    def summary(sel_rows):
        s = [r["speedup"] for r in sel_rows]
        return (math.exp(sum(math.log(x) for x in s) / len(s)), min(s),
                sum(x < 0.97 for x in s), sum(x < 0.98 for x in s), len(s))

    by_tier = defaultdict(list)
    for r in rows:
        by_tier[r["tier"]].append(r)
    lines = [f"# oasr served vs torch at widths no table covers ({torch.cuda.get_device_name()})",
             "", graph_timing.mode_line(args.back_to_back),
             f"- torch {torch.__version__}, {args.dtype}, {'no bias' if args.no_bias else 'bias'}, "
             f"{'gemm_activation ' + args.activation if args.activation else 'gemm'}"
             f", graphs of {args.graph_calls} calls, {args.rounds} rounds, medians",
             *(f"- tier file: {line.strip()}" for line in str(tuning_report()).splitlines()
               if line.strip().startswith(("user ", "system "))), ""]
    g, worst, b97, b98, total = summary(rows)
    lines.append(f"- **all {total} points: {g:.3f}x torch geomean, worst {worst:.3f}x, "
                 f"{b97} below 0.97x, {b98} below 0.98x**")
    for tier, rs in sorted(by_tier.items()):
        g, worst, b97, b98, total = summary(rs)
        lines.append(f"- served by {tier}: {total} points, {g:.3f}x geomean, worst "
                     f"{worst:.3f}x, {b97} below 0.97x")
    lines += ["", "| N | K | M | tier | config | oasr us | torch us | torch/oasr | max rel err |",
              "|---:|---:|---:|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['k']} | {r['m']} | {r['tier']} | {r['config']} | "
                     f"{r['oasr_us']:.2f} | {r['torch_us']:.2f} | {r['speedup']:.3f} | "
                     f"{r['max_rel_err']:.1e} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
