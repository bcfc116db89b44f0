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

from collections.abc import Mapping, Sequence
from typing import Any

from oasr_core.jit.libraries import Libraries
from oasr_core.kit.serving import LaunchError
from oasr_core.types import Config, Problem, Sentinel

from oasr_conv1d.geometry import geometry


def _load_full(lane: str, arch: str) -> Mapping[str, Any]:
    from oasr_core import jit as core_jit

    from oasr_conv1d import jit
    from oasr_conv1d.lanes import symbol
    from oasr_conv1d.launch import Kernel

    module = core_jit.load(jit.full_spec(lane, arch))
    return {c.id: Kernel.bind(module, c) for c in jit.lane_configs(lane, arch)
            if symbol(c) in module.exports}


FULL = Libraries(load=_load_full)
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
    return None if op == "conv1d" else op.removeprefix("conv1d_")


def make_bench(problem: Problem, choices: Sequence[Config | Sentinel], options: Any):
    """The :class:`oasr_core.bench.BenchCase` of ``problem`` (see the module docstring)."""
    import torch
    from oasr_core.bench import BenchCase
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
    weight_bytes = w.numel() * w.element_size()
    copies, torch_weights = benching.weight_copies(w, options, weight_bytes)
    packed = [weights.pack(wi, kind) for wi in torch_weights] if kind else []
    out = torch.empty(batch, geo.t_out, cout, dtype=x.dtype, device=where.device)
    ref = numerics.reference(x, w, bias, stride, pad, dil, groups, act)
    torch_out = numerics.torch_conv(x, w, bias, stride, pad, dil, groups, act)
    plans: list[Any] = []

    def torch_arm(i: int) -> Any:
        return numerics.torch_conv(x, torch_weights[i], bias, stride, pad, dil, groups, act)

    def kernel_arm(cfg: Config) -> benching.Arm:
        kernel = where.kernels.get(cfg.id)
        if kernel is None:
            raise LaunchError(f"{cfg.id} is not compiled in the {options.lane} module")
        plan = kernel.prepare(geo, problem.dtype, act)
        plans.append(plan)
        operands = [plan.operands(x.data_ptr(), wi.data_ptr(), bias.data_ptr(), out.data_ptr())
                    for wi in packed]
        return benching.kernel_arm(plan.prepared, where.index, operands, out,
                                   f"{options.lane}/{cfg.id} refused {problem.op} at "
                                   f"B={batch} T={t_in}")

    arms, rejected = benching.choice_arms(problem, choices, options, family="conv1d",
                                          torch_arm=lambda: torch_arm, kernel_arm=kernel_arm)
    return BenchCase(arms=arms, copies=copies, weight_bytes=weight_bytes, rejected=rejected,
                     gate=lambda o, _plans=plans: numerics.numerics_gate(
                         o, torch_out, ref, dtype=problem.dtype))
