"""The recurrent family's bench adapter: ``Family.make_bench`` for ``oasr tune build``.

For one problem (``I``, ``H``, ``M`` = the batch) it allocates the step's operands once (the
weights' copies as the protocol's L2 policy asks: an LSTM step reads its ``4H (I + H)``
weights once, so a cold step is what a decoder whose model outgrows L2 runs), the fp32
reference and torch's own output (the gate's yardstick), and returns one arm per choice: a
config of the lane, launched through its prepared call as the served op launches it into
preallocated ``h1`` / ``c1``, or ``torch``: what the op's torch path runs, ``torch.lstm_cell``.
(The same step through ``nn.LSTM``'s forward is compared in ``benchmarks/recurrent_vs_torch.py``;
it is not a choice the op can serve.)

The arms come from the lane's whole-space module (``oasr_recurrent.jit.MODULES.full_spec``),
loaded once per process; a config whose unit failed to compile is reported as rejected,
never timed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oasr_core.kit.records import module_full
from oasr_core.types import Config, Problem, Sentinel

FULL = module_full(modules="oasr_recurrent.jit", kernel="oasr_recurrent.launch:Kernel")
"""Every compiled config of the lane's full module by id, loaded once per (lane, arch)."""


def make_bench(problem: Problem, choices: Sequence[Config | Sentinel], options: Any):
    """The :class:`oasr_core.bench.BenchCase` of ``problem`` (see the module docstring)."""
    import torch
    from oasr_core.bench import BenchCase
    from oasr_core.kit import LaunchError, benching

    from oasr_recurrent import numerics
    from oasr_recurrent.launch import pointers

    input_size, hidden, batch = problem.dim("I"), problem.dim("H"), problem.m
    where = benching.bench_device(options, FULL)
    x, h, c, w_ih, w_hh, b_ih, b_hh = numerics.make_operands(
        batch, input_size, hidden, problem.dtype, device=where.device, seed=options.seed)
    weight_bytes = (w_ih.numel() + w_hh.numel()) * w_ih.element_size()
    copies = options.copies_for(weight_bytes)
    w_ihs = [w_ih] + [w_ih.clone() for _ in range(copies - 1)]
    w_hhs = [w_hh] + [w_hh.clone() for _ in range(copies - 1)]
    out = torch.empty((2, batch, hidden), dtype=x.dtype, device=where.device)
    torch_out = numerics.stacked(*numerics.torch_step(x, h, c, w_ih, w_hh, b_ih, b_hh))
    reference = numerics.reference(x, h, c, w_ih, w_hh, b_ih, b_hh)
    what = f"B={batch} I={input_size} H={hidden}"

    def torch_arm(i: int) -> Any:
        return numerics.torch_step(x, h, c, w_ihs[i], w_hhs[i], b_ih, b_hh)

    def kernel_arm(cfg: Config) -> Any:
        kernel = where.kernels.get(cfg.id)
        if kernel is None:
            raise LaunchError(f"{cfg.id} is not compiled in the {options.lane} module")
        prepared = kernel.prepare(batch, input_size, hidden, problem.dtype)
        operands = [pointers(x, h, c, w_ihs[i], w_hhs[i], b_ih, b_hh, out[0], out[1])
                    for i in range(copies)]
        return benching.kernel_arm(prepared, where.index, operands, out,
                                   f"{options.lane}/{cfg.id} refused lstm_step at {what}")

    def gate(output: Any) -> Any:
        got = output if isinstance(output, torch.Tensor) else numerics.stacked(*output)
        return numerics.numerics_gate(got, torch_out, reference, dtype=problem.dtype)

    arms, rejected = benching.choice_arms(problem, choices, options, family="recurrent",
                                          torch_arm=lambda: torch_arm, kernel_arm=kernel_arm)
    return BenchCase(arms=arms, copies=copies, weight_bytes=weight_bytes, rejected=rejected,
                     gate=gate)
