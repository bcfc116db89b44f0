"""Engine integration: tune a Conformer's GEMMs before capturing it in a CUDA graph.

What an inference engine built on oasr does at construction, end to end, on one GPU:

1. **census**: the core's reference Conformer encoder (``oasr_core.census.models``, GEMMs
   through ``oasr_gemm``) is probed on the meta device for every graph key of an offline
   engine (``--batch``, ``--frames``): the ShapeSet of its GEMM calls, must-tune where a
   captured graph reaches them;
2. **prewarm**: ``oasr_core.Tuner(TuningConfig(mode="prewarm", budget_s=60), census,
   on_reload=engine.release_graphs).prepare()`` measures every must-tune point no user or
   system tier entry covers and publishes the winners to the user tier, heaviest first,
   within the budget;
3. **capture**: the fp16 encoder runs eagerly once per shape (so every selection and
   workspace is settled), then is captured in a CUDA graph and replayed;
4. **report**: the tuning report (tier counts per family and op, stale files, uncovered
   points) and the timings, eager vs graph, against the same model with plain torch linears.

It writes nothing outside a temporary directory (deleted at exit) unless told: the user tier
goes to ``--user-db DIR`` or ``$OASR_TUNE_USER_DB`` when given; the JIT cache to
``$OASR_JIT_DIR`` when set. Point ``OASR_JIT_DIR`` at a prebuilt cache (``oasr tune
prebuild`` with ``OASR_CUDA_ARCH_LIST=9.0``): without one, the first measurement compiles the
gemm lane's modules, which takes minutes. ``--no-system-tier`` ignores the shipped tier, so
prewarm has every must-tune point to measure. Needs a CUDA GPU; without one it says so in one
line and exits with status 2.

    python examples/engine_integration.py --budget 60 --batch 8 --frames 1024
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--user-db", type=Path, default=None,
                    help="user tier directory to keep (default: $OASR_TUNE_USER_DB, else a "
                         "temporary one)")
    ap.add_argument("--budget", type=float, default=60.0, help="prewarm budget, seconds")
    ap.add_argument("--batch", type=int, default=8, help="largest batch (and the one run)")
    ap.add_argument("--frames", type=int, default=1024,
                    help="longest captured key in feature frames (and the one run)")
    ap.add_argument("--layers", type=int, default=16, help="Conformer layers")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations")
    ap.add_argument("--strict", action="store_true",
                    help="fail when a must-tune point is left uncovered")
    ap.add_argument("--no-system-tier", action="store_true",
                    help="ignore the shipped system tier (prewarm measures everything)")
    return ap.parse_args(argv)


class Engine:
    """The smallest engine: one model, its captured graphs, and a tuner."""

    def __init__(self, model: Any, example: Any) -> None:
        self.model, self.example = model, example
        self.graphs: dict[tuple, tuple[Any, Any]] = {}
        self.released = 0

    def release_graphs(self, epoch: int) -> None:
        """The tuner's release callback: a new epoch may choose other kernels."""
        self.released += len(self.graphs)
        self.graphs.clear()

    def capture(self, x: Any) -> Any:
        """Warm up on a side stream (settles selections and workspaces), then capture."""
        import oasr_gemm
        import torch

        stream = torch.cuda.Stream()
        oasr_gemm.reserve_workspace(stream=stream)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                self.model(x)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = self.model(x)
        self.graphs[tuple(x.shape)] = (graph, out)
        return graph, out


def _time_ms(fn: Any, iters: int) -> float:
    import torch

    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def census(batch: int, frames: int, layers: int) -> Any:
    """The offline Conformer's ShapeSet, as ``oasr tune census --workload conformer`` makes."""
    from oasr_core.census.engine import EngineConfig, Traffic
    from oasr_core.census.probe import run_census
    from oasr_core.census.recorder import patches_of
    from oasr_core.census.workloads import collect_workloads
    from oasr_core.runtime import get_runtime

    rt = get_runtime()
    workload = collect_workloads(rt.pm)["conformer"][0]
    config = EngineConfig(service_mode="offline", max_batch_size=batch,
                          max_graph_frames=frames)
    shapes = run_census(workload, config, Traffic(), patches_of(rt.registry), dtype="fp16",
                        params={"family_ops": True, "layers": layers})
    return shapes.select(0.97)


def run(args: argparse.Namespace) -> int:
    import torch

    import oasr_core
    from oasr_core.census.models import ConformerEncoder
    from oasr_core.census.workloads import served_linear
    from oasr_core.errors import OasrError
    from oasr_core.runtime import get_runtime

    t0 = time.monotonic()
    shapes = census(args.batch, args.frames, args.layers)
    must = sum(p.must for p in shapes.points)
    print(f"census: {len(shapes.points)} GEMM points, {must} must-tune "
          f"({time.monotonic() - t0:.1f} s)")

    torch.manual_seed(0)
    # The linears the gemm plugin serves (its oasr_linear answer), and a torch twin.
    served = served_linear(get_runtime().pm, dtype="fp16", required=True)
    model = ConformerEncoder(layers=args.layers, linear=served).cuda().half().eval()
    twin = ConformerEncoder(layers=args.layers).cuda().half().eval()
    twin.load_state_dict(model.state_dict())
    x = torch.randn(args.batch, args.frames, 80, device="cuda", dtype=torch.float16)
    engine = Engine(model, x)

    tuner = oasr_core.Tuner(
        oasr_core.TuningConfig(mode="prewarm", budget_s=args.budget, strict=args.strict),
        shapes, on_reload=engine.release_graphs)
    t1 = time.monotonic()
    try:
        tuner.prepare()  # before any graph is captured
    except OasrError as exc:
        print(f"engine_integration: {exc}", file=sys.stderr)
        return 2
    done = tuner.prewarmed
    if done is not None and not (done.measured or done.failed or done.left or done.skipped):
        print("prewarm: every must-tune point is already covered by a tier (run with "
              "--no-system-tier to watch prewarm measure them)")
    else:
        print(f"{done.line()} (wall {time.monotonic() - t1:.1f} s)")

    with torch.inference_mode():
        eager_oasr = _time_ms(lambda: model(x), args.iters)
        eager_torch = _time_ms(lambda: twin(x), args.iters)
        graph, out = engine.capture(x)
        graph_oasr = _time_ms(graph.replay, args.iters)
        twin_engine = Engine(twin, x)
        twin_graph, twin_out = twin_engine.capture(x)
        graph_torch = _time_ms(twin_graph.replay, args.iters)
        graph.replay()
        twin_graph.replay()
        torch.cuda.synchronize()
        diff = (out.float() - twin_out.float()).abs().max().item()
        scale = twin_out.float().abs().max().item()

    print()
    print(tuner.report())
    print()
    print(f"Conformer x{args.layers} fp16, batch {args.batch} x {args.frames} frames:")
    print("| path | oasr_gemm (ms) | torch linears (ms) | speedup |")
    print("|---|---|---|---|")
    for name, ours, theirs in (("eager", eager_oasr, eager_torch),
                               ("CUDA graph", graph_oasr, graph_torch)):
        print(f"| {name} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f}x |")
    print(f"graph vs eager (oasr_gemm): {eager_oasr / graph_oasr:.2f}x; max |oasr - torch| "
          f"{diff:.3g} (output max {scale:.3g})")
    epoch = tuner.reload()
    print(f"tuner.reload(): epoch {epoch}, {engine.released} captured graph(s) released")
    print(f"total {time.monotonic() - t0:.1f} s")
    tuner.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    try:
        import torch
    except ImportError:
        print("engine_integration: needs torch with CUDA; torch is not installed",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("engine_integration: needs a CUDA GPU (torch.cuda.is_available() is False); "
              "nothing was run", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        # Nothing is written outside this scratch directory unless a location is given.
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="oasr-")))
        user = args.user_db or os.environ.get("OASR_TUNE_USER_DB") or scratch / "user"
        os.environ["OASR_TUNE_USER_DB"] = str(user)
        os.environ.setdefault("OASR_JIT_DIR", str(scratch / "jit"))
        if args.no_system_tier:
            os.environ["OASR_TUNE_SYSTEM_DB"] = "off"
        print(f"user tier: {os.environ['OASR_TUNE_USER_DB']}; JIT cache: "
              f"{os.environ['OASR_JIT_DIR']}")
        return run(args)


if __name__ == "__main__":
    sys.exit(main())
