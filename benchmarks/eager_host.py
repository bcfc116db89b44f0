"""Host time of eager forwards of the held-out encoders: torch's model against the routed one.

Three arms of each model of ``benchmarks/heldout_encoders.py``, the same weights, in one
process, timed in turn over rounds (the order rotating each round) so that a host whose
speed drifts slows every arm alike:

- ``torch``: the model's own layers;
- ``oasr``: the model routed by :func:`oasr_core.route` as it serves now: a layer whose
  answer is torch at every call (no tier can serve a kernel at its width at any M) keeps its
  module's own forward, every other layer runs the family's forward with its per-M plan;
- ``oasr per-M``: the model routed with every layer on its answer's forward and per-M plan
  (each answer's ``torch_only`` answering False while it is routed: how :func:`route`
  served every layer before layers could keep their own forward).

Per arm: the best and the median host time of one forward, the median over the rounds of
its difference to ``torch``'s forward in the same round, and the Python function calls one
forward makes (``sys.setprofile``), with how many routed layers keep their own forward.

With CUDA: the models at their own widths on the GPU (by default the batch and frames of
``benchmarks/h200/heldout.sh``'s e2e runs; ``--batch``, ``--frames``), fp16,
``torch.inference_mode()``; a forward's host time is from the call to its return, from an
idle device (the GPU's time is not the subject; ``benchmarks/e2e.py`` times whole forwards).
No kernel is timed here, so the spec's separator kernel does not apply: each figure is the
host's wall time of one forward call (forwards run one after another, each starting from an
idle device), labelled host time in the report.
Without CUDA: the same code at small widths (d 32, feed-forward 64; host time dominates a
CPU forward there, as it does a small model's on a GPU), fp16 CPU tensors that report CUDA
device 0 and a runtime that takes an sm90 device as current, so the ops file their plans
and routing decides as on an H200 (the plans' decisions read the tiers, not the math).
At those widths no tier covers any linear, so every linear of the ``oasr`` arm keeps its
own forward; the model census at the models' own widths (which of their layers would) is
printed first. Run::

    python benchmarks/eager_host.py                    # without CUDA: small widths
    python benchmarks/eager_host.py                    # with CUDA: the models' widths
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import heldout_encoders as H  # noqa: E402

INPUTS = {"whisper_like": lambda b, t: (b, 80, t), "zipformer_like": lambda b, t: (b, t, 80),
          "wav2vec2_like": lambda b, t: (b, t, 512)}
"""Input shape by model, batch and frames, at the models' own widths."""
CUDA_SIZES = {"whisper_like": (8, 1000), "zipformer_like": (32, 256), "wav2vec2_like": (8, 500)}
"""Batch and frames by model with CUDA: those of ``benchmarks/h200/heldout.sh``'s e2e runs."""
SMALL = {
    "whisper_like": (lambda: H.WhisperLikeEncoder(H.WhisperLikeConfig(
        num_mel_bins=16, d_model=32, encoder_attention_heads=2, encoder_ffn_dim=64)),
        lambda b, t: (b, 16, t)),
    "zipformer_like": (lambda: H.ZipformerLikeEncoder(H.ZipformerLikeConfig(
        feature_dim=16, encoder_dims=(32, 64), feedforward_dims=(64, 128),
        num_heads=(2, 2))), lambda b, t: (b, t, 16)),
    "wav2vec2_like": (lambda: H.Wav2Vec2LikeEncoder(H.Wav2Vec2LikeConfig(
        conv_dim_last=16, hidden_size=32, num_attention_heads=2, intermediate_size=64,
        num_hidden_layers=4, num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4)),
        lambda b, t: (b, t, 16)),
}
"""The CPU runs' models (the held-out models' classes at small widths) and input shapes."""
ARMS = ("torch", "oasr", "oasr per-M")


@contextlib.contextmanager
def _per_m_answers() -> Iterator[None]:
    """While entered, the routed answers' ``torch_only`` says False (every layer routed
    then keeps its answer's forward and per-M plan, whatever the tiers say)."""
    from oasr_conv1d.layer import conv_layer
    from oasr_gemm.linear import linear

    saved = [(a, a.torch_only) for a in (linear, conv_layer)]
    for answer, _ in saved:
        answer.torch_only = lambda layer, dtype: False
    try:
        yield
    finally:
        for answer, fn in saved:
            answer.torch_only = fn


def _arms(build: Callable[[], Any], device: str) -> dict[str, Any]:
    from oasr_core.routing import route

    torch.manual_seed(0)
    models = {name: build() for name in ARMS}
    route(models["oasr"], dtype="fp16")
    with _per_m_answers():
        route(models["oasr per-M"], dtype="fp16")
    for name in ARMS[1:]:
        models[name].load_state_dict(models["torch"].state_dict())
    return {n: m.to(device=device, dtype=torch.float16).eval() for n, m in models.items()}


def _python_calls(fn: Callable[[], Any]) -> int:
    count = [0]

    def profile(_frame: Any, event: str, _arg: Any) -> None:
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


def _forward_us(model: Any, x: Any, number: int, cuda: bool) -> float:
    """Host microseconds per forward over ``number`` forwards (with CUDA: each from an idle
    device, the time to the call's return)."""
    total = 0.0
    for _ in range(number):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        model(x)
        total += time.perf_counter() - start
    if cuda:
        torch.cuda.synchronize()
    return total / number * 1e6


def _census(names: list[str]) -> list[str]:
    """Per model at its own widths: routed layers, and those keeping their own forward."""
    from oasr_core.routing import own_forwards, route, unroute

    lines = []
    for name in names:
        model = getattr(H, name)()
        counts = route(model, dtype="fp16")
        lines.append(f"- {name} at its own widths: {own_forwards(model)} of "
                     f"{sum(counts.values())} routed layers ({counts}) keep their own forward")
        unroute(model)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", choices=sorted(INPUTS), default=None)
    ap.add_argument("--batch", type=int, default=None,
                    help="default: with CUDA, heldout.sh's e2e batch of each model; 1 on a CPU")
    ap.add_argument("--frames", type=int, default=None,
                    help="default: with CUDA, heldout.sh's e2e frames of each model; 16 on a "
                         "CPU")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--number", type=int, default=None,
                    help="forwards per arm and round (default 10 with CUDA, 20 on a CPU)")
    args = ap.parse_args(argv)
    names = args.model or sorted(INPUTS)
    cuda = torch.cuda.is_available()
    number = args.number or (10 if cuda else 20)
    torch.set_num_threads(1)
    from oasr_core.runtime import DeviceFacts, get_runtime

    if not cuda:  # an sm90 device as current: routing decides as on an H200
        rt = get_runtime()
        rt.devices[None] = rt.devices[0] = DeviceFacts(index=0, arch="sm90", sm_count=132)
    where = torch.cuda.get_device_name() if cuda else \
        "CPU only: small widths, tensors reporting CUDA device 0, an sm90 device as current"
    print(f"# eager forward host time, held-out encoders ({platform.python_implementation()} "
          f"{platform.python_version()}, torch {torch.__version__}, {platform.machine()}, "
          f"{where}; {args.rounds} rounds of {number} forwards per arm, the arms in turn)\n")
    print("\n".join(_census(names)) + "\n")
    print("| model | batch x frames | arm | layers on own forward | Python calls per forward "
          "| best us | median us | median of the rounds' differences to torch, us |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name in names:
        batch = args.batch or (CUDA_SIZES[name][0] if cuda else 1)
        frames = args.frames or (CUDA_SIZES[name][1] if cuda else 16)
        if cuda:
            models = _arms(getattr(H, name), "cuda")
            shape = INPUTS[name](batch, frames)
        else:
            build, shape_of = SMALL[name]
            models = _arms(build, "cpu")
            shape = shape_of(batch, frames)
        x = torch.randn(*shape, device="cuda" if cuda else "cpu", dtype=torch.float16)
        context = contextlib.nullcontext() if cuda else _cuda_like()
        with context, torch.inference_mode():
            ref = models["torch"](x)
            for arm in ARMS[1:]:  # torch serves every call: equal (with CUDA, within fp16)
                torch.testing.assert_close(models[arm](x), ref, rtol=1e-2 if cuda else 0,
                                           atol=1e-2 if cuda else 0)
            for model in models.values():
                _forward_us(model, x, number, cuda)
            calls = {arm: _python_calls(lambda m=models[arm], x=x: m(x)) for arm in ARMS}
            times: dict[str, list[float]] = {arm: [] for arm in ARMS}
            for r in range(args.rounds):
                order = ARMS[r % 3:] + ARMS[:r % 3]
                for arm in order:
                    times[arm].append(_forward_us(models[arm], x, number, cuda))
        from oasr_core.routing import own_forwards

        for arm in ARMS:
            diff = statistics.median(a - b for a, b in zip(times[arm], times["torch"],
                                                           strict=True))
            own = own_forwards(models[arm]) if arm != "torch" else "-"
            print(f"| {name} | {batch} x {frames} | {arm} | {own} | {calls[arm]} | "
                  f"{min(times[arm]):.1f} | {statistics.median(times[arm]):.1f} | {diff:+.1f} |")
    return 0


@contextlib.contextmanager
def _cuda_like() -> Iterator[None]:
    """CPU tensors report CUDA device 0 to ``is_cuda`` and ``get_device`` (Python attributes
    torch's own code never reads), so the ops file their plans as on a GPU."""
    torch.Tensor.is_cuda = property(lambda self: True)
    torch.Tensor.get_device = lambda self: 0
    try:
        yield
    finally:
        del torch.Tensor.is_cuda
        del torch.Tensor.get_device


if __name__ == "__main__":
    sys.exit(main())
