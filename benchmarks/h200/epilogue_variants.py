"""Which epilogue the sm90 gemm kernels should fuse bias and activation with (H200 probe).

The whole-space benchmark of 2026-11-29 found that the kernels ran 8% faster over the 98
reference points when a call without bias took a plain ``D = acc`` epilogue instead of CUTLASS's
``LinCombPer{Col,Row}BiasEltAct`` EVT (``benchmarks/results/h200_gemm_subset_*.md``). Calls
with a bias (every Conformer linear) still need a fused epilogue; this probe times, on a few
configs that win somewhere, the candidate fused epilogues of ``csrc/oasr_gemm/sm90.cuh``
(selected at compile time by ``-DOASR_GEMM_SM90_FUSED=E``):

* 1 ``kBiasAct``: ``act(acc + bias)``, a three-node tree (no alpha, beta, C);
* 2 ``kLibraryBiasAct``: CUTLASS's ``act(alpha * acc + beta * C + bias)``;
* 3 ``kBiasOnly``: ``acc + bias`` (no activation node: what the activation costs);

each with a bias and no activation, and variant 1 also with GELU, against torch's
``F.linear`` with a bias (and ``gelu(F.linear)``), graphs of 8 calls, arms interleaved, each
call followed by a tiny unrelated kernel whose cost is subtracted (``--back-to-back``: none,
the launch overlap credited; the report says which). Prints one table per variant: the best
config's time over torch's per point.

    python3 benchmarks/h200/epilogue_variants.py --prebuild-only --arch sm90 --jobs 16
    python3 benchmarks/h200/epilogue_variants.py --out results.md
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/graph_timing.py

from graph_timing import GraphArms, add_mode_argument, mode_line  # noqa: E402

CONFIGS = ("ws_64x16x128_c1x1_swap", "ws_64x32x128_c1x1_swap", "ws_64x32x64_c1x1_s4",
           "ws_64x64x128_c1x1", "ws_64x128x64_c1x1_s4_e64x64", "ws_128x64x64_c1x1_s4_e64x64",
           "ws_128x96x64_c1x1_swap", "ws_128x128x64_c1x1_s3_e64x64", "pp_128x128x64_c1x1_e64x128",
           "pp_128x96x64_c1x1_swap", "co_128x144x64_c1x1_swap", "co_128x192x64_c1x1_swap")
VARIANTS = {1: "act(acc + bias)", 2: "CUTLASS LinCombPerColBiasEltAct", 3: "acc + bias"}
WIDTHS = ((256, 256), (1024, 256), (256, 1024), (768, 256), (512, 512), (2048, 512), (512, 2048))
MS = (16, 64, 256, 1000, 2152, 4096, 8192, 32768)


def _specs():
    import attrs
    from oasr_gemm import jit
    from oasr_gemm.config_space import LANE_SM90, config

    configs = [config(LANE_SM90, i) for i in CONFIGS]
    out = {}
    for v in VARIANTS:
        spec = jit.module_spec(LANE_SM90, "sm90", configs, name=f"gemm_sm90_epilogue{v}",
                               dtypes=("fp16",))
        out[v] = attrs.evolve(spec, extra_flags=(*spec.extra_flags,
                                                 f"-DOASR_GEMM_SM90_FUSED={v}"))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (no GPU needed)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prebuild-only", action="store_true")
    p.add_argument("--arch", default="sm90")
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--out", type=Path)
    p.add_argument("--calls", type=int, default=8)
    p.add_argument("--reps", type=int, default=7)
    add_mode_argument(p)
    return p.parse_args(argv)


def header(args: argparse.Namespace) -> list[str]:
    """The report's header lines."""
    return [mode_line(args.back_to_back),
            f"- {len(CONFIGS)} configs, fp16, graphs of {args.calls} calls, {args.reps} "
            "interleaved rounds, PDL off; ratio = torch / best config"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from oasr_core import jit as core_jit

    specs = _specs()
    for r in core_jit.prebuild(list(specs.values()), jobs=args.jobs):
        print(f"- module {r.name}: {r.status.value}, {len(r.failed)} failed, {r.seconds:.0f} s")
        for name, err in r.failed.items():
            print(f"  - {name}: {(err.strip().splitlines() or ['?'])[-1][:200]}")
    if args.prebuild_only:
        return 0
    import torch
    import torch.nn.functional as F
    from oasr_gemm import launch, numerics
    from oasr_gemm.config_space import LANE_SM90, config
    from oasr_gemm.feasibility import supports

    from oasr_core.types import Problem

    kernels = {v: {i: launch.Kernel.bind(core_jit.load(s, build_missing=False),
                                         config(LANE_SM90, i)) for i in CONFIGS}
               for v, s in specs.items()}
    from oasr_core.bench import CudaGraphTimer

    rng, timer = random.Random(0), CudaGraphTimer()
    dev = torch.cuda.current_device()
    arms_of = {"plain (no bias) vs F.linear without bias": ("plain", None, False)}
    arms_of.update({f"E={v} {name}, bias": (v, None, True) for v, name in VARIANTS.items()})
    arms_of["E=1 act(acc + bias), bias + gelu"] = (1, "gelu", True)
    rows = {k: [] for k in arms_of}
    for n, k in WIDTHS:
        for m in MS:
            a, w, b = numerics.make_operands(m, n, k, "fp16", bias=True, device="cuda", seed=m)
            out = torch.empty(m, n, dtype=a.dtype, device="cuda")
            graphs = GraphArms(args.calls, back_to_back=args.back_to_back, timer=timer)
            graphs.add("torch", lambda a=a, w=w: F.linear(a, w))
            graphs.add("torch_bias", lambda a=a, w=w, b=b: F.linear(a, w, b))
            graphs.add("torch_gelu", lambda a=a, w=w, b=b: F.gelu(F.linear(a, w, b)))
            owner = {}
            for label, (v, act, bias) in arms_of.items():
                op = "gemm_activation" if act else "gemm"
                problem = Problem("gemm", op, "fp16", (("N", n), ("K", k)), m)
                variant = 1 if v == "plain" else v
                for cid, kernel in kernels[variant].items():
                    if not supports(kernel.config, problem):
                        continue
                    bb = b if bias else None
                    kernel.run(a, w, bb, out, act)
                    torch.cuda.synchronize()
                    if v != 3:
                        verdict = numerics.numerics_gate(out, numerics.torch_output(a, w, bb, act),
                                                         numerics.reference(a, w, bb, act))
                        assert verdict, f"{label} {cid} m={m} n={n} k={k}: {verdict.reason}"
                    prep = kernel.prepare("fp16", m, n, k, act, pdl=False)
                    ptrs = (a.data_ptr(), w.data_ptr(), bb.data_ptr() if bias else 0,
                            out.data_ptr())
                    fn = lambda p=prep, q=ptrs: p.launch(  # noqa: E731
                        *q, dev, torch._C._cuda_getCurrentRawStream(dev))
                    key = f"{label}|{cid}"
                    graphs.add(key, fn)
                    owner[key] = label
            t = graphs.rounds(graphs.names, args.reps, rng)
            graphs.release()
            for label, (_, act, bias) in arms_of.items():
                base = t["torch_gelu"] if act else t["torch_bias"] if bias else t["torch"]
                mine = {key.split("|")[1]: us for key, us in t.items() if owner.get(key) == label}
                best = min(mine, key=mine.get)
                rows[label].append((n, k, m, base, best, mine[best]))
            print(f"N={n} K={k} M={m} done", flush=True)
    lines = [f"# sm90 gemm epilogue variants on {torch.cuda.get_device_name()}", "",
             *header(args), ""]
    for label, pts in rows.items():
        ratios = [t_ / o for *_, t_, _, o in pts]
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        lines.append(f"- {label}: geomean {geo:.3f}, worst {min(ratios):.3f}, below 0.98: "
                     f"{sum(r < 0.98 for r in ratios)} of {len(ratios)}")
    for label, pts in rows.items():
        lines += ["", f"## {label}", "", "| N | K | M | torch us | best | us | ratio |",
                  "|---:|---:|---:|---:|---|---:|---:|"]
        lines += [f"| {n} | {k} | {m} | {t_:.2f} | {c} | {o:.2f} | {t_ / o:.3f} |"
                  for n, k, m, t_, c, o in pts]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
