"""The recurrent family's bench adapter: ``Family.make_bench`` for ``oasr tune build``.

For one problem (its op a cell, ``I``, ``H``, ``M`` = the batch) it allocates the step's
operands once (the weights' copies as the protocol's L2 policy asks: a step reads its
``G H (I + H)`` weights once, so a cold step is what a decoder whose model outgrows L2 runs),
the fp32 reference and torch's own output (the gate's yardstick), and returns one arm per
choice: a config of the lane, launched through its prepared call for the op as the served op
launches it into preallocated outputs, or ``torch``: what the op's torch path runs, torch's
cell (``torch.lstm_cell``, ``torch.rnn_tanh_cell``, ``torch.rnn_relu_cell``). (The same step
through ``nn.LSTM``'s forward is compared in ``benchmarks/recurrent_vs_torch.py``; it is not
a choice the op can serve.)

The arms come from the lane's whole-space module (``oasr_recurrent.jit.MODULES.full_spec``:
every cell's units), loaded once per process; a config whose unit for the op failed to
compile, or that does not build for the cell, is reported as rejected, never timed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oasr_core.jit.libraries import Libraries
from oasr_core.types import Config, Problem, Sentinel


def _load_full(lane: str, arch: str) -> Any:
    from oasr_core import jit as core_jit

    from oasr_recurrent import jit
    from oasr_recurrent.launch import bind_module

    return bind_module(core_jit.load(jit.MODULES.full_spec(lane, arch)),
                       jit.lane_configs(lane, arch))


FULL = Libraries(load=_load_full)
"""Every compiled config of the lane's full module by id, its launchers per cell op
(:func:`oasr_recurrent.launch.bind_cells`), loaded once per (lane, arch)."""


def make_bench(problem: Problem, choices: Sequence[Config | Sentinel], options: Any):
    """The :class:`oasr_core.bench.BenchCase` of ``problem`` (see the module docstring)."""
    import torch
    from oasr_core.bench import BenchCase
    from oasr_core.kit import LaunchError, benching

    from oasr_recurrent import numerics
    from oasr_recurrent.launch import pointers

    op = problem.op
    input_size, hidden, batch = problem.dim("I"), problem.dim("H"), problem.m
    where = benching.bench_device(options, FULL)
    x, h, c, w_ih, w_hh, b_ih, b_hh = numerics.make_operands(
        batch, input_size, hidden, problem.dtype, device=where.device, seed=options.seed,
        op=op)
    weight_bytes = (w_ih.numel() + w_hh.numel()) * w_ih.element_size()
    copies = options.copies_for(weight_bytes)
    w_ihs = [w_ih] + [w_ih.clone() for _ in range(copies - 1)]
    w_hhs = [w_hh] + [w_hh.clone() for _ in range(copies - 1)]
    stateful = c is not None
    out = torch.empty((2 if stateful else 1, batch, hidden), dtype=x.dtype,
                      device=where.device)
    result = out if stateful else out[0]
    torch_out = numerics.judged(numerics.torch_cell(op, x, h, c, w_ih, w_hh, b_ih, b_hh))
    reference = numerics.reference(x, h, c, w_ih, w_hh, b_ih, b_hh, op=op)
    what = f"B={batch} I={input_size} H={hidden}"

    def torch_arm(i: int) -> Any:
        return numerics.torch_cell(op, x, h, c, w_ihs[i], w_hhs[i], b_ih, b_hh)

    def kernel_arm(cfg: Config) -> Any:
        kernel = where.kernels.get(cfg.id, {}).get(op)
        if kernel is None:
            raise LaunchError(f"{cfg.id} has no {op} unit in the {options.lane} module")
        prepared = kernel.prepare(batch, input_size, hidden, problem.dtype)
        operands = [pointers(x, h, c, w_ihs[i], w_hhs[i], b_ih, b_hh, out[0],
                             out[1] if stateful else None) for i in range(copies)]
        return benching.kernel_arm(prepared, where.index, operands, result,
                                   f"{options.lane}/{cfg.id} refused {op} at {what}")

    def gate(output: Any) -> Any:
        return numerics.numerics_gate(numerics.judged(output), torch_out, reference,
                                      dtype=problem.dtype)

    arms, rejected = benching.choice_arms(problem, choices, options, family="recurrent",
                                          torch_arm=lambda: torch_arm, kernel_arm=kernel_arm)
    return BenchCase(arms=arms, copies=copies, weight_bytes=weight_bytes, rejected=rejected,
                     gate=gate)
