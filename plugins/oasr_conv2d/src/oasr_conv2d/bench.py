"""The conv2d family's bench adapter: ``Family.make_bench`` for ``oasr tune build``.

For one problem it allocates NHWC operands once (the packed weight's copies as the protocol's
L2 policy asks), the fp32 reference and torch's own output (the gate's yardstick), and
returns one arm per choice: a config of the lane, launched through its prepared call as the
served op launches it, or ``torch``: what the op's torch path runs (``F.conv2d`` on the NHWC
data's channels-last view, cuDNN's NHWC kernels, the activation).

The problem's exact point ``"<B>x<H>"`` gives the batch and input height; a problem without
one (a region point) is measured as one image whose output has at least M pixels. The op's
activation is measured as keyed. The arms come from the lane's whole-space module
(``oasr_conv2d.jit.MODULES.full_spec``), loaded once per process; a config whose unit failed to
compile is reported as rejected, never timed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from oasr_core.kit.records import module_full
from oasr_core.types import Config, Problem, Sentinel

from oasr_conv2d.geometry import geometry, out_length
from oasr_conv2d.ops_names import DIMS

FULL = module_full(modules="oasr_conv2d.jit", kernel="oasr_conv2d.launch:Kernel")
"""Every compiled config of the lane's full module by id, loaded once per (lane, arch)."""


def batch_and_height(problem: Problem) -> tuple[int, int]:
    """``(B, H_in)`` of a problem: its exact point, else one image of at least M pixels out."""
    if problem.point:
        batch, height = (int(v) for v in problem.point.split("x"))
        return batch, height
    d = {name: problem.dim(name) for name in DIMS}
    w_out = max(1, out_length(d["W"], d["kw"], d["sw"], d["pw"], d["dw"]))
    h_out = -(-problem.m // w_out)
    return 1, max(1, (h_out - 1) * d["sh"] + d["dh"] * (d["kh"] - 1) + 1 - 2 * d["ph"])


def activation_of(op: str) -> str | None:
    """The activation an op is keyed by (None for ``conv2d``)."""
    from oasr_core.kit.benching import activation_of as of

    return of(op, "conv2d")


def make_bench(problem: Problem, choices: Sequence[Config | Sentinel], options: Any):
    """The :class:`oasr_core.bench.BenchCase` of ``problem`` (see the module docstring)."""
    from oasr_core.kit import benching

    from oasr_conv2d import numerics, weights

    d = {name: problem.dim(name) for name in DIMS}
    batch, height = batch_and_height(problem)
    geo = geometry(batch, height, d["W"], d["Cin"], d["Cout"], d["kh"], d["kw"], d["sh"],
                   d["sw"], d["ph"], d["pw"], d["dh"], d["dw"], d["groups"])
    stride, pad, dil = (d["sh"], d["sw"]), (d["ph"], d["pw"]), (d["dh"], d["dw"])
    groups, act = d["groups"], activation_of(problem.op)
    where = benching.bench_device(options, FULL)
    x, w, bias = numerics.make_operands(batch, height, d["W"], d["Cin"], d["Cout"], d["kh"],
                                        d["kw"], groups, problem.dtype, device=where.device,
                                        seed=options.seed)
    conv = functools.partial(numerics.torch_conv, x, stride=stride, padding=pad,
                             dilation=dil, groups=groups, activation=act)
    return benching.record_case(
        problem, choices, options, family="conv2d", where=where, record=geo,
        out_shape=(batch, geo.h_out, geo.w_out, d["Cout"]), operands=(x, w, bias),
        pack=weights.pack if groups == 1 else None, torch_fn=lambda wi: conv(wi, bias),
        reference=numerics.reference(x, w, bias, stride, pad, dil, groups, act),
        gate=numerics.numerics_gate, what=f"B={batch} H={height}")
