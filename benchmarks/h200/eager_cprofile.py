"""Python-level host time of eager forwards: cProfile of oasr's model and torch's, side by side.

Builds the reference pair of ``oasr tune bench`` and profiles ``--forwards`` eager forwards of
each under ``torch.inference_mode()`` (after a warm-up), printing the functions by total time
spent in them (``tottime``); the difference between the two tables is what oasr's ops add on
the host. Run on a GPU::

    python benchmarks/h200/eager_cprofile.py --workload conformer --batch 8 --frames 1024
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="conformer")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--frames", type=int, default=1024)
    ap.add_argument("--forwards", type=int, default=10)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)

    import torch

    from oasr_core.bench import e2e
    from oasr_core.census.workloads import make_inputs
    from oasr_core.plugins import make_plugin_manager

    if not torch.cuda.is_available():
        print("eager_cprofile.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    pm = make_plugin_manager()
    options = e2e.E2EOptions(batch=args.batch, frames=args.frames)
    workload = e2e.find_workload(pm, args.workload)
    oasr, twin, _ = e2e.build_pair(workload, pm, options)
    inputs = make_inputs(workload, args.batch, args.frames, dtype=torch.float16, device="cuda")
    for name, model in (("torch", twin), ("oasr", oasr)):
        with torch.inference_mode():
            for _ in range(5):
                model(*inputs)
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            for _ in range(args.forwards):
                model(*inputs)
            prof.disable()
            host = (time.perf_counter() - t0) * 1000 / args.forwards
            torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
        print(f"\n## {name}: {host:.2f} ms of host time per forward under cProfile\n")
        print("\n".join(line[:150] for line in out.getvalue().splitlines()[4:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
