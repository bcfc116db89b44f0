"""The W8A8 activation quantizers against their bandwidth bound, graph-timed in one run.

At every (M, K) and input dtype it times, as arms of one protocol run:

- ``int8`` / ``fp8``: the one-pass row quantizer of each W8A8 family (the kit's
  :mod:`oasr_scaled_mm.w8a8.row_quantizer`, through its C ABI into fixed buffers): reads ``2 M K``
  bytes, writes ``M K + 4 M``;
- ``int8_torch`` / ``fp8_torch``: each family's torch definition of the same quantization (what
  serves without the kernel);
- ``copy``: ``torch.Tensor.copy_`` of the activation (``4 M K`` bytes), what this device's
  memory system sustains for a plain stream.

Every kernel's output is first checked against its torch definition (int8 bit for bit, e4m3 bit
for bit up to NaN encodings); an arm that fails is reported, never timed. Per point the report
gives microseconds, the achieved bandwidth (bytes moved / time, GB/s), its fraction of the
copy's and of ``--peak-gbps`` (the bound: 4800 GB/s, the H200's HBM3e), and the speed-up over
torch. The activations rotate through enough copies to span three times the L2 (cold, as a
model's activations arrive), unless ``--warm``.

Timing is the house protocol (:func:`oasr_core.bench.measure` with
:class:`oasr_core.bench.CudaGraphTimer`, no halving): each arm a CUDA graph of N calls, each
call followed by the tiny separator kernel whose separately measured cost is subtracted
(``--back-to-back`` credits the launch overlap instead, and the report says so).

Usage (a CUDA GPU; the quantizer modules compile on first use, seconds)::

    python3 benchmarks/quantizer_bandwidth.py --out-dir $OUT [--ms 1024,4096,16384]
        [--ks 256,...] [--dtypes bf16,fp16]

writes ``quantizer_bandwidth.md`` and ``quantizer_bandwidth.json`` into ``--out-dir``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from graph_timing import add_mode_argument, mode_line, mode_name  # noqa: E402
from scaled_mm_vs_torch import (  # noqa: E402
    bench_options,
    cuda_problem,
    device_info,
    fmt,
    geomean,
    make_timer,
    measure_case,
    timed,
)

PROG = "quantizer_bandwidth"
MS = (1024, 4096, 16384)
KS = (256, 512, 1024, 2048, 4096, 8192)
PEAK_GBPS = 4800.0
"""The H200's HBM3e bandwidth (4.8 TB/s), the bound the quantizers are held to."""
KERNELS = ("int8", "fp8")
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def moved_bytes(arm: str, m: int, k: int) -> int:
    """Bytes an arm moves at its minimum: the quantizers read 2 M K and write M K + 4 M."""
    return 4 * m * k if arm == "copy" else 3 * m * k + 4 * m


def families() -> dict[str, tuple[Any, Any, Any]]:
    """Per quantizer: (its HelperKernel, its torch definition, its output dtype)."""
    import torch
    from oasr_scaled_mm import quantize as int8_quantize
    from oasr_scaled_mm import quantize_kernel as int8_kernel
    from oasr_scaled_mm_fp8 import numerics as fp8_numerics
    from oasr_scaled_mm_fp8 import quantize_kernel as fp8_kernel

    return {"int8": (int8_kernel.KERNEL, int8_quantize.quantize_rows_reference, torch.int8),
            "fp8": (fp8_kernel.KERNEL, fp8_numerics.quantize_rows, torch.float8_e4m3fn)}


def same(got: tuple[Any, Any], want: tuple[Any, Any]) -> str | None:
    """Why the kernel's ``(q, scale)`` differs from the definition's, or None (NaN encodings
    of e4m3 and NaN scales match each other)."""
    import torch

    (q, s), (wq, ws) = got, want
    s_ok = torch.equal(s.isnan(), ws.isnan()) and torch.equal(s.nan_to_num(), ws.nan_to_num())
    bits, want_bits = q.view(torch.uint8), wq.view(torch.uint8)
    nan = (bits & 0x7F) == 0x7F if q.dtype == torch.float8_e4m3fn else torch.zeros_like(
        bits, dtype=torch.bool)
    bad = int(((bits != want_bits) & ~(nan & ((want_bits & 0x7F) == 0x7F))).sum())
    if not s_ok:
        return "scales differ from the torch definition"
    return f"{bad} values differ from the torch definition" if bad else None


def make_case(m: int, k: int, dtype: Any, options: Any, arch: str, *, warm: bool):
    """The :class:`oasr_core.bench.BenchCase` of one point (arms named as in the docstring)
    and the reasons of the arms it could not build."""
    import torch

    from oasr_core.bench import BenchCase

    dev = torch.device("cuda", torch.cuda.current_device())
    index = dev.index
    copies = 1 if warm else options.copies_for(moved_bytes("int8", m, k))
    gen = torch.Generator(device=dev).manual_seed(options.seed + m + k)
    xs = [(torch.randn(m, k, device=dev, generator=gen) * 3).to(dtype) for _ in range(copies)]
    arms: dict[str, Any] = {}
    rejected: dict[str, str] = {}
    stream_of = torch._C._cuda_getCurrentRawStream
    code = 0 if dtype == torch.float16 else 1
    for name, (kernel, reference, q_dtype) in families().items():
        fn = kernel.get(arch)
        if fn is None:
            rejected[name] = "the quantizer module did not load"
            continue
        qs = [torch.empty(m, k, dtype=q_dtype, device=dev) for _ in range(copies)]
        ss = [torch.empty(m, dtype=torch.float32, device=dev) for _ in range(copies)]
        calls = [(x.data_ptr(), code, m, k, q.data_ptr(), s.data_ptr())
                 for x, q, s in zip(xs, qs, ss, strict=True)]

        def run(i: int, fn=fn, calls=calls, qs=qs) -> Any:
            status = fn(*calls[i], stream_of(index))
            if status:
                raise RuntimeError(f"the quantizer refused M={m} K={k} (status {status})")
            return qs[i]

        try:
            run(0)
            torch.cuda.synchronize(dev)
            why = same((qs[0], ss[0]), reference(xs[0]))
        except RuntimeError as exc:
            why = str(exc)
        if why is not None:
            rejected[name] = why
        else:
            arms[name] = run
        arms[f"{name}_torch"] = lambda i, reference=reference: reference(xs[i])
    outs = [torch.empty_like(x) for x in xs]
    arms["copy"] = lambda i: outs[i].copy_(xs[i])
    return BenchCase(arms=arms, gate=lambda _out: True, copies=copies,
                     weight_bytes=moved_bytes("int8", m, k), rejected=rejected), copies


def summarise(m: int, k: int, dtype: str, arms: dict, copies: int, peak: float) -> dict:
    """One point's numbers: per arm us and GB/s, the quantizers' fraction of copy and peak."""
    point: dict[str, Any] = {"M": m, "K": k, "dtype": dtype, "copies": copies}
    for name, arm in arms.items():
        us = arm["us"]
        base = name.removesuffix("_torch")
        gbps = moved_bytes(base, m, k) / (us * 1e3) if us else None
        point[name] = {"us": us, "gbps": gbps, "status": arm["status"],
                       "reason": arm.get("reason", "")}
    copy_gbps = point.get("copy", {}).get("gbps")
    for name in KERNELS:
        mine = point.get(name, {})
        if mine.get("gbps"):
            mine["of_copy"] = mine["gbps"] / copy_gbps if copy_gbps else None
            mine["of_peak"] = mine["gbps"] / peak
            torch_us = point.get(f"{name}_torch", {}).get("us")
            mine["vs_torch"] = torch_us / mine["us"] if torch_us else None
    return point


def times(value: Any) -> str:
    """A speed-up for a table cell (``n/a`` without one)."""
    text = fmt(value)
    return text if text == "n/a" else f"{text}x"


def report(points: list[dict], header: list[str], gpu: str, peak: float) -> str:
    """The markdown report."""
    lines = [f"# Activation quantizers vs their bandwidth bound on {gpu}", "", *header, "",
             "| dtype | M | K | int8 us | GB/s | of copy | of peak | vs torch | fp8 us | GB/s | "
             "of copy | of peak | vs torch | copy GB/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        cells = [p["dtype"], str(p["M"]), str(p["K"])]
        for name in KERNELS:
            a = p.get(name, {})
            cells += [fmt(a.get("us")), fmt(a.get("gbps"), 0), fmt(a.get("of_copy")),
                      fmt(a.get("of_peak")), times(a.get("vs_torch"))]
        cells.append(fmt(p.get("copy", {}).get("gbps"), 0))
        lines.append("| " + " | ".join(cells) + " |")
    big = [p for p in points if p["M"] * p["K"] >= 4096 * 1024]
    lines += ["", f"## Summary (M K >= 4096 x 1024: {len(big)} points)", ""]
    for name in KERNELS:
        of_peak = [p[name]["of_peak"] for p in big if p.get(name, {}).get("of_peak")]
        of_copy = [p[name]["of_copy"] for p in big if p.get(name, {}).get("of_copy")]
        vs = [p[name]["vs_torch"] for p in big if p.get(name, {}).get("vs_torch")]
        lines.append(f"- {name}: geomean {fmt(geomean(of_peak))} of the {peak:.0f} GB/s bound, "
                     f"{fmt(geomean(of_copy))} of `copy_`'s bandwidth, {times(geomean(vs))} its "
                     f"torch definition; slowest {fmt(min(of_peak, default=None))} of the bound")
    failed = [(p, name, p[name]["reason"]) for p in points for name in p
              if isinstance(p[name], dict) and p[name].get("us") is None]
    if failed:
        lines += ["", "## Arms not timed", ""]
        lines += [f"- {p['dtype']} M={p['M']} K={p['K']} `{name}`: {why}"
                  for p, name, why in failed]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True,
                        help="directory for quantizer_bandwidth.md and .json")
    parser.add_argument("--ms", default=",".join(map(str, MS)), help="rows (M)")
    parser.add_argument("--ks", default=",".join(map(str, KS)), help="row lengths (K)")
    parser.add_argument("--dtypes", default="bf16", help="input dtypes: bf16, fp16")
    parser.add_argument("--peak-gbps", type=float, default=PEAK_GBPS,
                        help="the bandwidth bound, GB/s (default: the H200's 4800)")
    parser.add_argument("--warm", action="store_true",
                        help="one activation copy (L2-warm) instead of rotating cold copies")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--target-us", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=0)
    add_mode_argument(parser)
    args = parser.parse_args(argv)
    try:
        ms = [int(v) for v in args.ms.split(",") if v]
        ks = [int(v) for v in args.ks.split(",") if v]
    except ValueError:
        print(f"{PROG}: --ms and --ks take comma lists of integers", file=sys.stderr)
        return 2
    dtypes = [d for d in args.dtypes.split(",") if d]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown or not dtypes or not ms or not ks or min(ms + ks) < 1:
        print(f"{PROG}: --dtypes takes bf16/fp16 (got {args.dtypes!r}); --ms and --ks "
              "positive integers", file=sys.stderr)
        return 2
    if cuda_problem():
        print(f"{PROG}: no CUDA device: the benchmark times on a GPU", file=sys.stderr)
        return 2
    import torch

    args.out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    info = device_info()
    timer = make_timer(args.back_to_back)
    options = bench_options(args.seed, args.rounds, args.target_us, info["l2_bytes"], None)
    points = []
    for dtype_name in dtypes:
        dtype = getattr(torch, DTYPES[dtype_name])
        for m in ms:
            for k in ks:
                case, copies = make_case(m, k, dtype, options, info["arch"], warm=args.warm)
                arms = timed(measure_case(case, timer, options))
                for name, why in case.rejected.items():
                    arms[name] = {"us": None, "status": "rejected", "reason": why}
                del case
                torch.cuda.empty_cache()
                point = summarise(m, k, dtype_name, arms, copies, args.peak_gbps)
                points.append(point)
                print(f"{dtype_name} M={m} K={k}: " + ", ".join(
                    f"{n} {fmt(point.get(n, {}).get('us'))} us "
                    f"{fmt(point.get(n, {}).get('gbps'), 0)} GB/s" for n in (*KERNELS, "copy"))
                    + f" ({time.perf_counter() - started:.0f} s)", flush=True)
    header = [f"- torch {info['torch']} (CUDA {info['cuda']}); {info['sm_count']} SMs; L2 "
              f"{(info['l2_bytes'] or 0) >> 20} MiB",
              mode_line(args.back_to_back),
              f"- timing: oasr_core.bench.measure without halving, {args.rounds} rounds at most, "
              f"median; target {args.target_us:.0f} us per replay; activations "
              f"{'warm (one copy)' if args.warm else 'cold (copies spanning 3x L2)'}",
              "- bytes moved: a quantizer reads 2 M K and writes M K + 4 M; `copy` reads and "
              "writes 2 M K; GB/s = bytes / time; the bound is "
              f"{args.peak_gbps:.0f} GB/s",
              f"- wall time {time.perf_counter() - started:.0f} s"]
    text = report(points, header, info["gpu"], args.peak_gbps)
    (args.out_dir / "quantizer_bandwidth.md").write_text(text)
    (args.out_dir / "quantizer_bandwidth.json").write_text(json.dumps(
        {"gpu": info["gpu"], "sm_count": info["sm_count"], "torch": info["torch"],
         "timing": mode_name(args.back_to_back), "peak_gbps": args.peak_gbps,
         "warm": args.warm, "points": points}, indent=1, allow_nan=False) + "\n")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
