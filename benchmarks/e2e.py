"""End to end: a whole model with oasr's ops against the same model in torch, in one run.

The machinery of ``oasr tune bench`` (:mod:`oasr_core.bench.e2e`): the model is built twice
(oasr's linears, torch's ``F.linear``; the same weights), both outputs must agree, then both
are timed in CUDA graphs and eagerly under ``torch.inference_mode()``, alternating; the
report names the GPU, torch, the tuning files in use, and which tier served how many calls.
``--out X.md`` writes the markdown report and ``X.json`` beside it (``results/h200_e2e_*``).
Exit status: 0, 1 when the outputs disagree, 2 for bad input or no CUDA device.

It times whole forwards, not kernels: a captured forward replayed (its GEMMs sit between the
model's other kernels, as in service, so there is no separator to add) and eager forwards
each from an idle device.

    python benchmarks/e2e.py --workload conformer --batch 8 --frames 1024 --out e2e.md
    python benchmarks/e2e.py --workload conformer --batch 8 --frames 1024 \\
        --quantization int8_w8a8 --out e2e_int8.md     # int8 against its fp16 self
    python benchmarks/e2e.py --workload conformer --batch 8 --frames 1024 --compile \\
        --profile --out e2e_compile.md   # + torch.compile and backend="oasr" arms
    python benchmarks/e2e.py --workload conformer --batch 8 --frames 1024 --ctc-vocab 5008 \\
        --out e2e_ctc.md                 # + a CTC head (linear + log-softmax, gemm_log_softmax)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--workload", help="registered workload (conformer, whisper_encoder)")
    which.add_argument("--model", help="package.module:factory of any torch module")
    p.add_argument("--input", dest="inputs", action="append", default=[],
                   help="--model input dims per positional argument (default B,T,80)")
    p.add_argument("--param", dest="params", action="append", default=[],
                   metavar="NAME=VALUE", help="factory keyword argument (JSON value)")
    p.add_argument("--ctc-vocab", type=int, default=None, metavar="V",
                   help="add the reference encoder's CTC head over V classes (blank "
                        "included): --param ctc_vocab=V")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--frames", type=int, default=None,
                   help="frames per utterance (default: a fixed-window workload's own)")
    p.add_argument("--dtype", default="fp16")
    p.add_argument("--quantization", default="none")
    p.add_argument("--no-graph", dest="graph", action="store_false")
    p.add_argument("--no-eager", dest="eager", action="store_false")
    p.add_argument("--replays", type=int, default=200, help="CUDA graph rounds")
    p.add_argument("--iters", type=int, default=30, help="eager rounds")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--tolerance", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true",
                   help="also torch.compile and torch.compile(backend='oasr') of the torch "
                        "model, in CUDA graphs, with compile times")
    p.add_argument("--profile", action="store_true",
                   help="with --compile: GPU time by kernel class of each compiled forward")
    p.add_argument("--cpu", action="store_true",
                   help="tests: eager only, on the CPU in fp32 (the ops take their torch path)")
    p.add_argument("--out", type=Path, default=None,
                   help="markdown report path (the JSON result beside it)")
    p.add_argument("--plot", type=Path, default=None,
                   help="bar chart of torch vs oasr, graph and eager (PNG)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    from oasr_core.bench.e2e import (
        E2EOptions,
        MismatchError,
        check_scheme,
        run_e2e,
    )
    from oasr_core.census.workloads import find_workload
    from oasr_core.commands.census import _params
    from oasr_core.errors import OasrError
    from oasr_core.runtime import get_runtime

    try:
        rt = get_runtime()
        workload = find_workload(rt.pm, args.workload, args.model, tuple(args.inputs))
        check_scheme(rt.registry, args.dtype, args.quantization)
        params = _params(tuple(args.params))
        if args.ctc_vocab is not None:
            if args.workload is None:
                raise OasrError("--ctc-vocab: only a registered --workload has a CTC head "
                                "option (give --model's factory its own parameter)")
            params = {**params, "ctc_vocab": args.ctc_vocab}
        frames = args.frames if args.frames is not None else workload.fixed_frames
        if frames is None:
            raise OasrError(f"--frames: workload {workload.name!r} has no fixed window; give "
                            "the frames per utterance")
        options = E2EOptions(
            batch=args.batch, frames=frames, dtype=args.dtype, quantization=args.quantization,
            graph=args.graph and not args.cpu, eager=args.eager or args.cpu,
            replays=args.replays, iters=args.iters, warmup=args.warmup,
            tolerance=args.tolerance, device="cpu" if args.cpu else "cuda",
            params=params, seed=args.seed, compile=args.compile,
            profile=args.profile)
        result = run_e2e(workload, options, name=args.workload or args.model)
    except MismatchError as exc:
        print(f"e2e: {exc}", file=sys.stderr)
        return 1
    except OasrError as exc:
        print(f"e2e: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    text = result.markdown()
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(result.to_json(), indent=1) + "\n")
    if args.plot is not None:
        from oasr_core.plots import e2e_figure

        print(f"wrote {e2e_figure([result.to_json()], args.plot)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
