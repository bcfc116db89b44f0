"""The conv1d family's bench adapter: ``Family.make_bench`` for ``oasr tune build``.

For one problem it allocates channels-last operands once (the packed weight's copies as the
protocol's L2 policy asks), the fp32 reference and torch's own output (the gate's yardstick),
and returns one arm per choice: a config of the lane, launched through its prepared call as
the served op launches it, or ``torch``: what the op's torch path and a model run
(transpose, ``F.conv1d`` on cuDNN, the activation, transpose back to contiguous).

The problem's exact point ``"<B>x<T_in>"`` gives the batch and input length; a problem
without one (a region point) is measured as one sequence of ``T_out = M``. The op's
activation is measured as keyed (``conv1d_silu`` with SiLU, ...). The arms come from the
lane's whole-space module (``oasr_conv1d.jit.full_spec``), loaded once per process; a config
whose unit failed to compile is reported as rejected, never timed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oasr_core.kit.records import module_full
from oasr_core.types import Config, Problem, Sentinel

from oasr_conv1d.geometry import geometry

FULL = module_full(modules="oasr_conv1d.jit", kernel="oasr_conv1d.launch:Kernel")
"""Every compiled config of a lane's full module by id, loaded once per (lane, arch)."""


def batch_and_length(problem: Problem) -> tuple[int, int]:
    """``(B, T_in)`` of a problem: its exact point, else one sequence whose output is M long."""
    if problem.point:
        batch, t_in = (int(v) for v in problem.point.split("x"))
        return batch, t_in
    k, stride = problem.dim("k"), problem.dim("stride")
    pad, dil = problem.dim("pad"), problem.dim("dil")
    return 1, max(1, (problem.m - 1) * stride + dil * (k - 1) + 1 - 2 * pad)


def activation_of(op: str) -> str | None:
    """The activation an op is keyed by (None for ``conv1d``)."""
    from oasr_core.kit.benching import activation_of as of

    return of(op, "conv1d")


def make_bench(problem: Problem, choices: Sequence[Config | Sentinel], options: Any):
    """The :class:`oasr_core.bench.BenchCase` of ``problem`` (see the module docstring)."""
    from oasr_core.kit import benching

    from oasr_conv1d import numerics, weights

    cin, cout, k = problem.dim("Cin"), problem.dim("Cout"), problem.dim("k")
    stride, pad = problem.dim("stride"), problem.dim("pad")
    dil, groups = problem.dim("dil"), problem.dim("groups")
    batch, t_in = batch_and_length(problem)
    geo = geometry(batch, t_in, cin, cout, k, stride, pad, dil, groups)
    act = activation_of(problem.op)
    kind = weights.kind_of(cin, cout, groups)
    where = benching.bench_device(options, FULL)
    x, w, bias = numerics.make_operands(batch, t_in, cin, cout, k, groups, problem.dtype,
                                        device=where.device, seed=options.seed)
    return benching.record_case(
        problem, choices, options, family="conv1d", where=where, record=geo,
        out_shape=(batch, geo.t_out, cout), operands=(x, w, bias),
        pack=(lambda wi: weights.pack(wi, kind)) if kind else None,
        torch_fn=lambda wi: numerics.torch_conv(x, wi, bias, stride, pad, dil, groups, act),
        reference=numerics.reference(x, w, bias, stride, pad, dil, groups, act),
        gate=numerics.numerics_gate, what=f"B={batch} T={t_in}")
