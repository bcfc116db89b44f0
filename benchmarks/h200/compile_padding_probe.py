"""Whether padding a compiled model's unaligned batched GEMMs pays, model first, then per GEMM.

The reference Conformer's relative-position attention multiplies ``[B*H, T, 64]`` by
``[B*H, 64, T]`` and ``[B*H, 64, 2T-1]``, then ``[B*H, T, T]`` by ``[B*H, T, 64]``; after the
4x subsampling of 1024 frames T is 255, so no row is 16-byte aligned and cuBLAS picks an
``align1`` kernel (the largest single GEMM kernel in the compiled model's profile, 0.31 ms of
2.2 ms, benchmarks/results/h200_compile_conformer_tuned.json). Inductor's own padding pass
pads only GEMMs it deems compute bound, which these are not.

Arms, the same weights and inputs, each captured in a CUDA graph and replayed alternating:

- ``inductor``: ``torch.compile(model)`` (default mode);
- ``inductor, padded``: ``torch.compile(model, options={"force_shape_pad": True})``: every
  GEMM with an unaligned dim padded to the alignment (the model's linears are aligned, so
  only the attention's batched GEMMs change);

then each batched GEMM alone, the arms ``torch.bmm`` on the unaligned operands and the same
product on operands padded to a multiple of 8 (the pad copies included in its time), timed
the measurement protocol's way: a CUDA graph of N calls each followed by a tiny unrelated
kernel, the separator's own graph subtracted. Run on a GPU::

    python benchmarks/h200/compile_padding_probe.py --batch 8 --frames 1024 --out probe.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from statistics import median


def _pad_to(n: int, multiple: int = 8) -> int:
    return -(-n // multiple) * multiple


def _bmm_cases(batch_heads: int, t: int, d_head: int) -> list[tuple[str, tuple, tuple]]:
    """(name, A shape, B shape) of the attention's three batched GEMMs."""
    return [("content  q @ k^T", (batch_heads, t, d_head), (batch_heads, d_head, t)),
            ("position q @ p^T", (batch_heads, t, d_head), (batch_heads, d_head, 2 * t - 1)),
            ("attn @ v", (batch_heads, t, t), (batch_heads, t, d_head))]


def _time_calls(timer, label: str, call, n: int, rounds: int) -> float:
    """Microseconds of one call: a graph of ``n`` separated calls minus ``n`` separators."""
    calls = timer.capture(label, [call] * n, separate=True)
    seps = timer.capture_separators(n)
    samples = []
    for _ in range(rounds):
        got, sep = timer.replay([calls, seps])
        samples.append((got - sep) * 1000.0 / n)
    timer.release(calls)
    timer.release(seps)
    return median(samples)


def bmm_rows(batch_heads: int, t: int, d_head: int, rounds: int) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from oasr_core.bench.cuda import CudaGraphTimer

    timer = CudaGraphTimer()
    rows = []
    for name, sa, sb in _bmm_cases(batch_heads, t, d_head):
        a = torch.randn(sa, device="cuda", dtype=torch.half)
        b = torch.randn(sb, device="cuda", dtype=torch.half)
        k, n = sa[2], sb[2]
        pk, pn = _pad_to(k), _pad_to(n)

        def plain(a=a, b=b):
            return torch.bmm(a, b)

        def padded(a=a, b=b, k=k, n=n, pk=pk, pn=pn):
            ap = F.pad(a, (0, pk - k)) if pk != k else a
            bp = F.pad(b, (0, pn - n, 0, pk - k)) if (pk, pn) != (k, n) else b
            return torch.bmm(ap, bp)[..., :n]

        error = (plain() - padded()).abs().max().item() / plain().abs().max().item()
        us = {arm: _time_calls(timer, arm, fn, 20, rounds)
              for arm, fn in (("bmm", plain), ("padded bmm", padded))}
        rows.append({"gemm": name, "A": list(sa), "B": list(sb), "bmm_us": us["bmm"],
                     "padded_us": us["padded bmm"], "padded_speedup": us["bmm"] / us["padded bmm"],
                     "max_rel_diff": error})
    return rows


def model_rows(batch: int, frames: int, replays: int) -> dict:
    import torch

    from oasr_core.bench.e2e import E2EOptions, check_agreement, time_graphs
    from oasr_core.bench.kernel_profile import profile_kernels
    from oasr_core.census.workloads import find_workload, make_inputs
    from oasr_core.runtime import get_runtime

    rt = get_runtime()
    workload = find_workload(rt.pm, "conformer", None, ())
    options = E2EOptions(batch=batch, frames=frames, replays=replays, compile=True)

    def make():
        torch.manual_seed(0)
        params = dict(workload.params)
        if workload.dtype_param is not None:
            params[workload.dtype_param] = "fp16"
        model = workload.factory(family_ops=False, quantization="none", **params)
        return model.to(device="cuda", dtype=torch.half).eval()

    inputs = make_inputs(workload, batch, frames, dtype=torch.half, device="cuda")
    eager = make()
    with torch.inference_mode():
        ref = eager(*inputs)
    arms = {"torch": torch.compile(make()),
            "oasr": torch.compile(make(), options={"force_shape_pad": True})}
    seconds = {}
    with torch.inference_mode():
        for name, fn in arms.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn(*inputs)
            torch.cuda.synchronize()
            seconds[name] = time.perf_counter() - t0
            check_agreement(out, ref, options.bound(), f"{name} compiled")
        captured = {}

        def keep(name):
            def forward():
                captured[name] = arms[name](*inputs)
            return forward

        row, error = time_graphs({"oasr": keep("oasr"), "torch": keep("torch")}, options,
                                 lambda: max(check_agreement(captured[n], ref, options.bound(),
                                                             n) for n in captured))
        profiles = {label: profile_kernels(lambda n=n: arms[n](*inputs))
                    for n, label in (("torch", "inductor"), ("oasr", "inductor, padded"))}
    return {"inductor_ms": row.torch_ms, "padded_ms": row.oasr_ms,
            "speedup": row.torch_ms / row.oasr_ms, "max_rel_error": error,
            "compile_s": {"inductor": seconds["torch"], "inductor, padded": seconds["oasr"]},
            "profiles": {k: v.to_json()
                         for k, v in profiles.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--frames", type=int, default=1024)
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import torch

    t = ((args.frames - 1) // 2 - 1) // 2  # the Conformer's two stride-2 3x3 convolutions
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "batch": args.batch, "frames": args.frames, "T": t}
    result["bmm"] = bmm_rows(args.batch * 4, t, 64, args.rounds)
    result["model"] = model_rows(args.batch, args.frames, args.replays)
    lines = [f"# Padding unaligned batched GEMMs under torch.compile ({time.strftime('%Y-%m-%d')})",
             "", f"- device: {result['gpu']}; torch {result['torch']}; reference Conformer "
             f"(d 256, 4 heads, 16 layers), batch {args.batch} x {args.frames} frames, fp16, "
             f"T = {t} after subsampling", "",
             "Whole model, CUDA graph replays of one forward, alternating, medians:", "",
             "| arm | ms | speedup |", "|---|---:|---:|"]
    m = result["model"]
    lines += [f"| torch.compile (Inductor) | {m['inductor_ms']:.3f} | 1.000x |",
              f"| torch.compile, force_shape_pad | {m['padded_ms']:.3f} | {m['speedup']:.3f}x |",
              "", f"compile s: {m['compile_s']}; max rel error {m['max_rel_error']:.2g}", "",
              "Each batched GEMM alone (separated: a tiny kernel after every call, its cost "
              "subtracted; 20 calls a graph, median of rounds):", "",
              "| GEMM | A | B | bmm us | padded us (pads included) | speedup |",
              "|---|---|---|---:|---:|---:|"]
    for r in result["bmm"]:
        lines.append(f"| {r['gemm']} | {r['A']} | {r['B']} | {r['bmm_us']:.2f} | "
                     f"{r['padded_us']:.2f} | {r['padded_speedup']:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out, "w") as f:
        f.write(text)
    with open(args.out.rsplit(".", 1)[0] + ".json", "w") as f:
        json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
