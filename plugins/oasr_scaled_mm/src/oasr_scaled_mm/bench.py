"""The scaled_mm family's bench adapter: ``Family.make_bench`` for ``oasr tune build``.

For one problem it allocates realistic int8 operands once (a float activation and weight
quantized per token / per channel, so outputs are O(1); weight copies as the protocol's L2
policy asks), a float32 bias, and for ``scaled_mm_quant`` an out_scale mapping the output's
absmax to 127. It returns one arm per choice:

- a config of the lane (or ``heuristic``, which the build resolves to the ladder's config),
  launched through its prepared call exactly as the served op launches it (fp16 output for
  ``scaled_mm``, int8 for ``scaled_mm_quant``);
- ``torch``: ``torch._int_mm`` then the same scaling in torch (what an engine without these
  kernels runs). ``_int_mm`` refuses M <= 16, so small M is padded to 17 rows (the arm pays for
  the padded GEMM, as a torch engine would).

The gate is bitwise (``torch.equal``) against the heuristic variant's output; without a
launchable heuristic config, against the exact torch reference (the same bits by construction).
Operands are drawn on the host and copied (``numerics.make_operands``): with operands drawn and
quantized on the GPU, the H200 saw ``scaled_mm_quant`` tiles disagree bitwise (2026-12-01), and
the host draw is the path every GPU run before had passed.
A build measures the lane's whole space, so the arms come from the lane's full module
(:func:`oasr_scaled_mm.jit.full_spec`), loaded once per process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oasr_core.jit.libraries import Libraries
from oasr_core.kit.serving import LaunchError
from oasr_core.types import Config, Problem, Sentinel

from oasr_scaled_mm.config_space import OP_QUANT

MIN_INT_MM_ROWS = 17
"""``torch._int_mm`` needs more than 16 rows."""


def _load_full(lane: str, arch: str) -> Any:
    from oasr_core import jit as core_jit

    from oasr_scaled_mm import jit
    from oasr_scaled_mm.launch import bind_all

    return bind_all(core_jit.load(jit.full_spec(lane, arch)), jit.lane_configs(lane, arch))


FULL = Libraries(load=_load_full)
"""Every compiled (op, config) of a lane's full module, loaded once per (lane, arch)."""


def make_bench(problem: Problem, choices: Sequence[Config | Sentinel], options: Any):
    """The :class:`oasr_core.bench.BenchCase` of ``problem`` (see the module docstring)."""
    import torch
    from oasr_core.bench import BenchCase
    from oasr_core.kit import benching

    from oasr_scaled_mm import numerics, reference

    n, k, m = problem.dim("N"), problem.dim("K"), problem.m
    quant = problem.op == OP_QUANT
    out_dtype = torch.int8 if quant else torch.float16
    out_name = "int8" if quant else "fp16"
    where = benching.bench_device(options, FULL)
    a, a_scale, w, w_scale, bias = numerics.make_operands(m, n, k, device=where.device,
                                                          seed=options.seed)
    weight_bytes = n * k + 4 * n
    copies, weights = benching.weight_copies(w, options, weight_bytes)
    y = reference.scale(reference.exact_acc(a, w), a_scale, w_scale, bias)
    out_scale = numerics.out_scale_for(y) if quant else 1.0
    out_scale_t = torch.tensor([out_scale], dtype=torch.float32, device=where.device)
    exact = reference.quantize_output(y, out_scale_t) if quant else y.to(out_dtype)
    out = torch.empty(m, n, dtype=out_dtype, device=where.device)
    arm_of: dict[str, benching.Arm] = {}

    def kernel_arm(cfg: Config) -> benching.Arm:
        if cfg.id not in arm_of:
            kernel = where.kernels.get((problem.op, cfg.id))
            if kernel is None:
                why = ("has no quantizing launcher (Stream-K)" if quant
                       and cfg.params.get("stream_k")
                       else f"is not compiled in the {options.lane} module")
                raise LaunchError(f"{cfg.id} {why}")
            operands = [(a.data_ptr(), wi.data_ptr(), a_scale.data_ptr(), w_scale.data_ptr(),
                         bias.data_ptr(), 0, out_scale, out.data_ptr()) for wi in weights]
            arm_of[cfg.id] = benching.kernel_arm(
                kernel.prepare(out_name, m, n, k), where.index, operands, out,
                f"{options.lane}/{cfg.id} refused m={m} n={n} k={k}")
        return arm_of[cfg.id]

    padded = a if m >= MIN_INT_MM_ROWS else torch.cat([a, a.new_zeros(MIN_INT_MM_ROWS - m, k)])

    def torch_arm(i: int) -> Any:
        acc = torch._int_mm(padded, weights[i].t())[:m]
        value = reference.scale(acc, a_scale, w_scale, bias)
        out.copy_(reference.quantize_output(value, out_scale_t) if quant else value)
        return out

    def checked_torch_arm() -> benching.Arm:
        try:
            torch_arm(0)
        except RuntimeError as exc:
            raise LaunchError(f"torch._int_mm refused the shape: {exc}") from exc
        return torch_arm

    arms, rejected = benching.choice_arms(problem, choices, options, family="scaled_mm",
                                          torch_arm=checked_torch_arm, kernel_arm=kernel_arm)
    gate_ref = exact
    heuristic = options.config_of(Sentinel.HEURISTIC, problem) \
        if options.resolve is not None else None
    if heuristic is not None:
        try:
            kernel_arm(heuristic)(0)
            torch.cuda.synchronize(where.device)
            gate_ref = out.clone()
        except Exception:  # an unlaunchable heuristic: the exact reference is the same bits
            gate_ref = exact

    def gate(output: Any) -> Any:
        return numerics.numerics_gate(output, gate_ref)

    return BenchCase(arms=arms, copies=copies, weight_bytes=weight_bytes, rejected=rejected,
                     gate=gate)
