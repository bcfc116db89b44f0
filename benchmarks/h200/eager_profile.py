"""Where an eager forward's host time goes: oasr's ops against torch's, no_grad vs inference_mode.

Builds the reference model pair of ``oasr tune bench`` (``oasr_core.bench.e2e.build_pair``),
times eager forwards from an idle device under ``torch.no_grad()`` and under
``torch.inference_mode()`` (the two models and the two modes interleaved, medians), then
profiles a few forwards of each model under inference mode: with ``torch.profiler`` (CPU and
CUDA activities, operators by self CPU time), or with ``--cprofile`` with Python's cProfile
(functions by time spent in them, the view of what oasr's ops add on the host).

What it times is whole eager forwards (host issue plus the GPU behind it), not kernels one by
one, so there is no separator: each forward starts from an idle device. Run on a GPU::

    python benchmarks/h200/eager_profile.py --workload conformer --batch 8 --frames 1024
    python benchmarks/h200/eager_profile.py --cprofile --forwards 10
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time


def _torch_profile(models, inputs, top: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]):
        models["torch"](*inputs)  # the first profiler session pays its own start-up
        torch.cuda.synchronize()
    for name, model in models.items():
        with torch.inference_mode(), profile(
                activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                model(*inputs)
            torch.cuda.synchronize()
        print(f"\n## {name} under inference_mode, 3 forwards, by self CPU time\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top,
                                        max_name_column_width=60))


def _cprofile(models, inputs, top: int, forwards: int) -> None:
    import torch

    for name, model in models.items():
        with torch.inference_mode():
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            for _ in range(forwards):
                model(*inputs)
            prof.disable()
            host = (time.perf_counter() - t0) * 1000 / forwards
            torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
        print(f"\n## {name}: {host:.2f} ms of host time per forward under cProfile\n")
        print("\n".join(line[:150] for line in out.getvalue().splitlines()[4:]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="conformer")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--frames", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cprofile", action="store_true",
                    help="profile with cProfile (Python functions) instead of torch.profiler")
    ap.add_argument("--forwards", type=int, default=10, help="forwards per model for --cprofile")
    args = ap.parse_args(argv)

    import torch

    from oasr_core.bench import e2e
    from oasr_core.census.workloads import find_workload, make_inputs
    from oasr_core.plugins import make_plugin_manager

    if not torch.cuda.is_available():
        print("eager_profile.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    pm = make_plugin_manager()
    options = e2e.E2EOptions(batch=args.batch, frames=args.frames)
    workload = find_workload(pm, args.workload)
    oasr, twin, _ = e2e.build_pair(workload, pm, options)
    inputs = make_inputs(workload, args.batch, args.frames, dtype=torch.float16, device="cuda")
    models = {"oasr": oasr, "torch": twin}
    modes = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def once(model) -> float:
        torch.cuda.synchronize()
        start.record()
        model(*inputs)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    for model in models.values():
        for mode in modes.values():
            with mode():
                for _ in range(3):
                    model(*inputs)
    samples = {(m, g): [] for m in models for g in modes}
    for r in range(args.rounds):
        for mode_name, mode in (list(modes.items()) if r % 2 == 0 else
                                list(modes.items())[::-1]):
            with mode():
                for name in (("oasr", "torch") if r % 2 == 0 else ("torch", "oasr")):
                    samples[(name, mode_name)].append(once(models[name]))
    print(f"# eager forwards of {args.workload} batch {args.batch} x {args.frames}, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}, medians of "
          f"{args.rounds}, each from an idle device\n")
    print("| model | mode | ms |\n|---|---|---:|")
    for (name, mode_name), v in samples.items():
        print(f"| {name} | {mode_name} | {statistics.median(v):.3f} |")
    if args.cprofile:
        _cprofile({"torch": twin, "oasr": oasr}, inputs, args.top, args.forwards)
    else:
        _torch_profile(models, inputs, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
