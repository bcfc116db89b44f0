"""The fp8 scaled GEMM (scaled_mm_fp8) against torch's fp8 and bf16 paths, graph-timed in one run.

At every width (N, K) x M it times, as arms of one protocol run:

- every config of the device's fp8 lane (the GEMM alone, through its prepared call, bf16 out);
- ``served``: the quantized linear as an engine runs it (``quantize.quantized_linear``: the
  one-kernel activation quantizer and the GEMM the tiers serve, or ``F.linear`` where the
  table says ``unquantized`` or, at a shape no entry covers, where the untuned route of
  :mod:`oasr_scaled_mm_fp8.untuned` does not predict fp8 to win), with the tuning file of
  ``--db`` as the system tier (the shipped one without it);
- ``quantize``: the activation quantizer alone;
- ``torch_rowwise`` / ``torch_tensor``: ``torch._scaled_mm`` with row-wise or per-tensor
  scales, fast accumulation, bf16 out (the GEMM alone);
- ``bf16``: ``F.linear`` of the bf16 activation and weight (with the bias);
- after a layer norm (the pre-norm block's ``h = norm(x)`` then the linear, what the reference
  encoders run before their feed-forward, attention and pointwise layers):
  ``norm_served`` is the family's deferred norm handed to the quantized linear
  (``quantize.layer_norm`` then ``quantize.quantized_linear``: one fused norm-and-quantize
  kernel and the served GEMM, or torch's norm and the unquantized linear where the route says
  so), ``norm_bf16`` torch's ``F.layer_norm`` then ``F.linear``, ``norm_quantize`` the fused
  kernel alone, ``layer_norm`` torch's norm alone.

Every config's output is first checked against the family's numerics bound
(:func:`oasr_scaled_mm_fp8.numerics.within`); one that refuses or fails is reported, never
timed. The report gives per point the best tile, the heuristic's tile, the served choice and
their ratios, then the geomeans against the goals: tuned (the best tile) >= 1.4x
``torch._scaled_mm`` row-wise; at M >= 4096 on widths >= 1024 the served linear (quantization
included) >= 1.5x bf16 ``F.linear``, both alone and after a layer norm (the norm included on
both sides, the quantization fused into it on the fp8 side); and the served linear nowhere
slower than bf16 where it runs fp8 (a point where it is slower says the table should name
``unquantized`` there).

Timing is the house protocol (:func:`oasr_core.bench.measure` with
:class:`oasr_core.bench.CudaGraphTimer`, no halving): each arm a CUDA graph of N calls, each
call followed by the tiny separator kernel whose separately measured cost is subtracted
(``--back-to-back`` credits the launch overlap instead, and the report says so); shuffled
interleaved rounds, median per call; warm weights (one copy).

Widths: the reference Conformer's fp8 census widths (``benchmarks/census/
conformer_*_fp8.json``) x ``--census-ms``, then every (N, K) pair of ``--sweep`` x ``--ms``.

Usage (H200; the JIT cache prebuilt, e.g. ``oasr tune prebuild --family scaled_mm_fp8 --arch
9.0a --all``)::

    python3 benchmarks/fp8_vs_torch.py --out $OUT/h200_fp8.md [--db $OUT/scaled_mm_fp8.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from oasr_core.census import shapeset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from graph_timing import add_mode_argument, mode_line  # noqa: E402
from scaled_mm_vs_torch import (  # noqa: E402
    bench_options,
    cuda_problem,
    device_info,
    fmt,
    geomean,
    make_timer,
    measure_case,
    timed,
    write_jsonl,
)

PROG = "fp8_vs_torch"
ROOT = Path(__file__).resolve().parents[1]
CENSUSES = (ROOT / "benchmarks" / "census" / "conformer_offline_fp8.json",
            ROOT / "benchmarks" / "census" / "conformer_streaming_fp8.json")
SWEEP = (512, 768, 1024, 1536, 2048, 3072, 4096)
CENSUS_MS = (256, 1024, 2528, 4096, 8160, 16384)
MS = (256, 1024, 4096, 16384)
BASELINES = ("served", "quantize", "torch_rowwise", "torch_tensor", "bf16", "norm_served",
             "norm_bf16", "norm_quantize", "layer_norm")
GOAL_ROWWISE, GOAL_BF16 = 1.4, 1.5


def census_widths(paths: tuple[Path, ...]) -> list[tuple[int, int]]:
    """The (N, K) of every scaled_mm_fp8 point of the censuses, in first-seen order."""
    seen: dict[tuple[int, int], None] = {}
    for path in paths:
        for p in shapeset.load(path).points:
            if p.family == "scaled_mm_fp8":
                seen[(p.dims["N"], p.dims["K"])] = None
    return list(seen)


def install_system_tier(db: Path | None, arch: str) -> str:
    """Serve ``db`` as the system tier of this process (the shipped tier without it)."""
    if db is None:
        return "the shipped system tier"
    root = Path(tempfile.mkdtemp(prefix="oasr-fp8-db-"))
    (root / arch).mkdir()
    shutil.copy(db, root / arch / "scaled_mm_fp8.json")
    os.environ["OASR_TUNE_SYSTEM_DB"] = str(root)
    return f"`{db}` as the system tier"


def make_case(kernels: dict, configs: list, n: int, k: int, m: int, *, seed: int, arch: str):
    """The :class:`oasr_core.bench.BenchCase` of one point; the served choice in words."""
    import torch
    import torch.nn.functional as F
    from oasr_scaled_mm_fp8 import numerics, ops, quantize, reference
    from oasr_scaled_mm_fp8.config_space import DTYPE, FAMILY, OP_MM
    from oasr_scaled_mm_fp8.launch import LaunchError, status_text

    import oasr_core
    from oasr_core.bench import BenchCase

    dev = torch.device("cuda", torch.cuda.current_device())
    index = dev.index
    gen = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)
    layer = torch.nn.Linear(k, n, device=dev, dtype=torch.bfloat16)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n, k, device=dev, generator=gen) / k ** 0.5)
    a, a_scale = numerics.quantize_rows(x)
    state = quantize.quantized_weight(layer)
    w, w_scale, bias = state.weight, state.scale, state.bias
    ref = reference.scaled_mm_value(a, w, a_scale, w_scale, bias)
    one = torch.ones((), device=dev)
    a_tensor_scale, w_tensor_scale = a_scale.amax() * one, w_scale.amax() * one
    a_t = (a.float() * (a_scale[:, None] / a_tensor_scale)).to(reference.FP8)
    w_t = (w.float() * (w_scale[:, None] / w_tensor_scale)).to(reference.FP8)
    stream_of = torch._C._cuda_getCurrentRawStream
    arms: dict[str, Any] = {}
    rejected: dict[str, str] = {}

    def config_arm(cfg: Any) -> Any:
        kernel = kernels.get((OP_MM, cfg.id))
        if kernel is None:
            raise LaunchError(f"{cfg.id} is not compiled in the module")
        prepared = kernel.prepare("bf16", m, n, k)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        ptrs = (a.data_ptr(), w.data_ptr(), a_scale.data_ptr(), w_scale.data_ptr(),
                bias.data_ptr(), 0, 1.0, out.data_ptr())

        def run(_i: int) -> Any:
            status = prepared.launch(index, stream_of(index), *ptrs)
            if status:
                raise LaunchError(f"{cfg.id} refused m={m} n={n} k={k}: {status_text(status)}")
            return out
        return run

    def checked(name: str, run: Any, want: Any = ref) -> None:
        try:
            got = run(0)
            torch.cuda.synchronize(dev)
        except (LaunchError, RuntimeError) as exc:
            rejected[name] = f"refused: {' '.join(str(exc).split())[:200]}"
            return
        verdict = numerics.within(got, want)
        if not verdict:
            rejected[name] = f"outside the numerics bound: {verdict.reason}"
            return
        arms[name] = run

    for cfg in configs:
        try:
            checked(cfg.id, config_arm(cfg))
        except LaunchError as exc:
            rejected[cfg.id] = f"refused: {exc}"
    hp_ref = (x.double() @ layer.weight.double().t() + layer.bias.double()).float()
    quantize.quantized_linear(x, layer)   # resolve the plan, outside the capture
    checked("served", lambda _i: quantize.quantized_linear(x, layer),
            hp_ref if ops.unquantized(n, k, m, index) else ref)
    arms["quantize"] = lambda _i: quantize.quantize_rows(x)
    checked("torch_rowwise", lambda _i: reference.rowwise(a, w, a_scale, w_scale, bias))
    checked("torch_tensor", lambda _i: torch._scaled_mm(
        a_t, w_t.t(), scale_a=a_tensor_scale, scale_b=w_tensor_scale,
        bias=bias.to(torch.bfloat16), out_dtype=torch.bfloat16, use_fast_accum=True),
        reference.scaled_mm_value(a_t, w_t, a_tensor_scale.expand(m),
                                  w_tensor_scale.expand(n), bias))
    checked("bf16", lambda _i: F.linear(x, layer.weight, layer.bias), hp_ref)
    norm = torch.nn.LayerNorm(k, device=dev, dtype=torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.1 * torch.randn(k, device=dev, generator=gen))
        norm.bias.copy_(0.1 * torch.randn(k, device=dev, generator=gen))
    h = F.layer_norm(x, (k,), norm.weight, norm.bias, norm.eps)
    norm_hp_ref = (h.double() @ layer.weight.double().t() + layer.bias.double()).float()
    h_q, h_scale = numerics.quantize_rows(h)
    norm_ref = reference.scaled_mm_value(h_q, w, h_scale, w_scale, bias)
    normed_unquantized = ops.unquantized(n, k, m, index, normed=True)
    quantize.quantized_linear(quantize.layer_norm(x, norm), layer)   # resolve the route
    checked("norm_served", lambda _i: quantize.quantized_linear(quantize.layer_norm(x, norm),
                                                                layer),
            norm_hp_ref if normed_unquantized else norm_ref)
    checked("norm_bf16", lambda _i: F.linear(F.layer_norm(x, (k,), norm.weight, norm.bias,
                                                          norm.eps), layer.weight, layer.bias),
            norm_hp_ref)
    arms["norm_quantize"] = lambda _i: quantize.norm_quantize_rows(x, norm)
    arms["layer_norm"] = lambda _i: F.layer_norm(x, (k,), norm.weight, norm.bias, norm.eps)
    sel = oasr_core.select(FAMILY, OP_MM, DTYPE, (n, k), m, arch)
    served = sel.choice_id if sel.config is None or sel.choice_id == sel.config.id \
        else f"{sel.choice_id}:{sel.config.id}"
    normed = "unquantized" if normed_unquantized else served
    if ops.unquantized(n, k, m, index) and sel.choice_id != "unquantized":
        served = f"unquantized (untuned route; the op: {served})"
    case = BenchCase(arms=arms, gate=lambda _out: True, copies=1, weight_bytes=n * k + 4 * n,
                     rejected=rejected)
    return case, (served, normed), sel.tier.value


def summarise(n: int, k: int, m: int, arms: dict, heur: str, served: str,
              normed: str = "") -> dict[str, Any]:
    """One point's numbers: the best tile, the heuristic's, the served linear, baselines,
    and the same after a layer norm (``normed``: what serves the linear there)."""
    us = {name: arm["us"] for name, arm in arms.items() if arm["us"] is not None}
    tiles = {name: t for name, t in us.items() if name not in BASELINES}
    best = min(tiles, key=tiles.get) if tiles else None
    get = us.get
    ratio = (lambda a, b: b / a if a and b else None)  # noqa: E731 - speedup of a over b
    linear_fp8 = (get(best) or 0) + (get("quantize") or 0) if best else None
    return {"N": n, "K": k, "M": m, "best": best, "best_us": get(best), "heuristic": heur,
            "heur_us": get(heur), "served": served, "served_us": get("served"),
            "quantize_us": get("quantize"), "rowwise_us": get("torch_rowwise"),
            "tensor_us": get("torch_tensor"), "bf16_us": get("bf16"),
            "best_vs_rowwise": ratio(get(best), get("torch_rowwise")),
            "served_vs_bf16": ratio(get("served"), get("bf16")),
            "best_linear_vs_bf16": ratio(linear_fp8, get("bf16")),
            "unquantized": served.startswith("unquantized"),
            "normed": normed, "norm_served_us": get("norm_served"),
            "norm_bf16_us": get("norm_bf16"), "norm_quantize_us": get("norm_quantize"),
            "layer_norm_us": get("layer_norm"),
            "norm_served_vs_bf16": ratio(get("norm_served"), get("norm_bf16")),
            "best_norm_vs_bf16": ratio((get(best) or 0) + (get("norm_quantize") or 0)
                                       if best and get("norm_quantize") else None,
                                       get("norm_bf16")),
            "failed": sorted(name for name, arm in arms.items() if arm["us"] is None)}


def report(points: list[dict], header: list[str], gpu: str) -> str:
    """The markdown report."""
    lines = [f"# scaled_mm_fp8 vs torch on {gpu}", "", *header, "",
             "| N | K | M | best tile | us | heuristic | us | served | us | quantize us | "
             "_scaled_mm rowwise us | per-tensor us | bf16 us | best/rowwise | served/bf16 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        lines.append(
            f"| {p['N']} | {p['K']} | {p['M']} | `{p['best']}` | {fmt(p['best_us'])} | "
            f"`{p['heuristic']}` | {fmt(p['heur_us'])} | `{p['served']}` | "
            f"{fmt(p['served_us'])} | {fmt(p['quantize_us'])} | {fmt(p['rowwise_us'])} | "
            f"{fmt(p['tensor_us'])} | {fmt(p['bf16_us'])} | {fmt(p['best_vs_rowwise'])}x | "
            f"{fmt(p['served_vs_bf16'])}x |")
    big = [p for p in points if p["M"] >= 4096 and min(p["N"], p["K"]) >= 1024]
    slower = [p for p in points if not p["unquantized"] and p["served_vs_bf16"] is not None
              and p["served_vs_bf16"] < 1.0]
    tuned = geomean(p["best_vs_rowwise"] for p in points)
    big_served = geomean(p["served_vs_bf16"] for p in big)
    heur = geomean(p["rowwise_us"] / p["heur_us"] for p in points
                   if p["heur_us"] and p["rowwise_us"])
    lines += ["", "## Against the goals", "",
              f"- best tile vs `torch._scaled_mm` row-wise, geomean over {len(points)} points: "
              f"{fmt(tuned)}x (goal >= {GOAL_ROWWISE}x: "
              f"{'met' if tuned >= GOAL_ROWWISE else 'not met'})",
              f"- heuristic tile vs row-wise: {fmt(heur)}x",
              f"- served linear (quantization included) vs bf16 `F.linear` at M >= 4096, widths "
              f">= 1024 ({len(big)} points): {fmt(big_served)}x (goal >= {GOAL_BF16}x: "
              f"{'met' if big_served >= GOAL_BF16 else 'not met'}); best tile + quantizer: "
              f"{fmt(geomean(p['best_linear_vs_bf16'] for p in big))}x",
              f"- points where the served linear runs fp8 and is slower than bf16: {len(slower)}"]
    lines += [f"  - N={p['N']} K={p['K']} M={p['M']}: {fmt(p['served_vs_bf16'])}x "
              f"(`{p['served']}`)" for p in slower]
    lines += normed_section(points, big)
    failed = [(p, name) for p in points for name in p["failed"]]
    if failed:
        lines += ["", "## Arms not timed", ""]
        lines += [f"- N={p['N']} K={p['K']} M={p['M']}: `{name}`" for p, name in failed]
    return "\n".join(lines) + "\n"


def normed_section(points: list[dict], big: list[dict]) -> list[str]:
    """The report's lines for the linear after a layer norm (nothing for a log without it)."""
    timed_points = [p for p in points if p.get("norm_served_us")]
    if not timed_points:
        return []
    lines = ["", "## After a layer norm", "",
             "`norm(x)` then the linear. fp8: the family's deferred norm (one fused "
             "norm-and-quantize kernel, then the GEMM); bf16: `F.layer_norm` then `F.linear`.",
             "", "| N | K | M | served | us | fused norm+quantize us | torch norm us | "
             "bf16 norm+linear us | served/bf16 | best tile/bf16 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in timed_points:
        lines.append(
            f"| {p['N']} | {p['K']} | {p['M']} | `{p['normed']}` | {fmt(p['norm_served_us'])} | "
            f"{fmt(p['norm_quantize_us'])} | {fmt(p['layer_norm_us'])} | "
            f"{fmt(p['norm_bf16_us'])} | {fmt(p['norm_served_vs_bf16'])}x | "
            f"{fmt(p['best_norm_vs_bf16'])}x |")
    big_normed = [p for p in big if p.get("norm_served_us")]
    served = geomean(p["norm_served_vs_bf16"] for p in big_normed)
    slower = [p for p in timed_points if p["normed"] != "unquantized"
              and p["norm_served_vs_bf16"] is not None and p["norm_served_vs_bf16"] < 1.0]
    lines += ["", f"- served linear after its norm vs bf16 norm + `F.linear` at M >= 4096, "
              f"widths >= 1024 ({len(big_normed)} points): {fmt(served)}x (goal >= "
              f"{GOAL_BF16}x: {'met' if served >= GOAL_BF16 else 'not met'}); best tile + "
              f"fused norm-quantize: {fmt(geomean(p['best_norm_vs_bf16'] for p in big_normed))}x",
              f"- over all {len(timed_points)} points: "
              f"{fmt(geomean(p['norm_served_vs_bf16'] for p in timed_points))}x",
              f"- points where it runs fp8 and is slower than bf16: {len(slower)}"]
    lines += [f"  - N={p['N']} K={p['K']} M={p['M']}: {fmt(p['norm_served_vs_bf16'])}x "
              f"(`{p['normed']}`)" for p in slower]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="markdown report (JSONL beside)")
    parser.add_argument("--db", type=Path, help="scaled_mm_fp8 tuning file to serve from")
    parser.add_argument("--sweep", default=",".join(map(str, SWEEP)),
                        help="N and K values whose every pair is swept")
    parser.add_argument("--ms", default=",".join(map(str, MS)), help="M of the sweep widths")
    parser.add_argument("--census-ms", default=",".join(map(str, CENSUS_MS)),
                        help="M of the census widths")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--target-us", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=0)
    add_mode_argument(parser)
    args = parser.parse_args(argv)
    if cuda_problem():
        print(f"{PROG}: no CUDA device: the benchmark times on a GPU", file=sys.stderr)
        return 2
    import torch
    from oasr_scaled_mm_fp8 import heuristic, jit
    from oasr_scaled_mm_fp8.config_space import DTYPE, FAMILY, OP_MM
    from oasr_scaled_mm_fp8.launch import bind_all

    from oasr_core import jit as core_jit
    from oasr_core.runtime import get_runtime
    from oasr_core.types import Problem

    started = time.perf_counter()
    info = device_info()
    arch = info["arch"]
    served_from = install_system_tier(args.db, arch)
    lane = get_runtime().registry.active_lane(FAMILY, arch)
    spec = jit.full_spec(lane.name, arch)
    module = core_jit.load(spec)
    kernels = bind_all(module, jit.lane_configs(lane.name, arch))
    configs = list(jit.lane_configs(lane.name, arch))
    sweep = [int(v) for v in args.sweep.split(",") if v]
    points_todo = [(n, k, int(m)) for n, k in census_widths(CENSUSES)
                   for m in args.census_ms.split(",") if m]
    points_todo += [(n, k, int(m)) for n in sweep for k in sweep for m in args.ms.split(",")
                    if m]
    timer = make_timer(args.back_to_back)
    options = bench_options(args.seed, args.rounds, args.target_us, timer.l2_bytes, 0)
    jsonl = args.out.with_suffix(".jsonl")
    jsonl.write_text("")
    points = []
    for n, k, m in points_todo:
        prob = Problem(FAMILY, OP_MM, DTYPE, (("N", n), ("K", k)), m)
        heur = heuristic.heuristic_config(prob, lane, sm_count=info["sm_count"]).id
        todo = [c for c in configs if lane.supports(c, prob)]
        case, (served, normed), tier = make_case(kernels, todo, n, k, m, seed=args.seed + m,
                                                 arch=arch)
        result = measure_case(case, timer, options)
        arms = timed(result)
        for name, why in case.rejected.items():
            arms[name] = {"us": None, "status": "rejected", "reason": why}
        del case
        torch.cuda.empty_cache()
        write_jsonl(jsonl, [{"gpu": info["gpu"], "lane": lane.name, "N": n, "K": k, "M": m,
                             "config": name, "heuristic": heur, "served": served,
                             "normed": normed, "tier": tier, **arm}
                            for name, arm in arms.items()])
        point = summarise(n, k, m, arms, heur, served, normed)
        points.append(point)
        print(f"N={n} K={k} M={m}: best {point['best']} {fmt(point['best_us'])} us, served "
              f"{served} {fmt(point['served_us'])} us, rowwise {fmt(point['rowwise_us'])} us, "
              f"bf16 {fmt(point['bf16_us'])} us ({time.perf_counter() - started:.0f} s)",
              flush=True)
    header = [
        f"- lane `{lane.name}` ({len(configs)} configs), module `{spec.name}`: "
        f"{len(kernels)} launchers, {len(module.failed)} unit(s) failed",
        f"- torch {info['torch']} (CUDA {info['cuda']}); {info['sm_count']} SMs",
        f"- served: {served_from}; the heuristic is the half-wave rule on {info['sm_count']} SMs",
        mode_line(args.back_to_back),
        f"- timing: oasr_core.bench.measure without halving, {args.rounds} rounds at most, "
        f"median; warm weights; target {args.target_us:.0f} us per replay",
        "- tiles, torch_rowwise and torch_tensor time the GEMM alone (bf16 out, fp32 bias); "
        "served and bf16 time the layer (served includes the activation quantizer); the "
        "norm_* arms time norm(x) then the layer",
        f"- wall time {time.perf_counter() - started:.0f} s; JSONL `{jsonl.name}`"]
    text = report(points, header, info["gpu"])
    sys.stdout.write(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
