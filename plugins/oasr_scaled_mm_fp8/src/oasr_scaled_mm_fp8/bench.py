"""The scaled_mm_fp8 family's bench adapter: ``Family.make_bench`` for ``oasr tune build``.

What is timed is what the engine's quantized linear runs. For ``scaled_mm_fp8`` that is the
per-token activation quantization (the one-kernel quantizer, into fixed buffers) followed by
the GEMM -- so the arms compare honestly with ``unquantized``, the layer in bf16 with
``F.linear``, which needs no quantization. ``scaled_mm_fp8_quant`` reads an fp8 activation the
previous GEMM wrote, so its arms are the GEMM alone (and ``unquantized`` is rejected: its
consumer needs fp8). The arms:

- a config of the lane (or ``heuristic``, resolved by the build to its config), launched
  through its prepared call as the served op launches it (bf16 output for ``scaled_mm_fp8``,
  e4m3 for the quant op);
- ``torch``: ``torch._scaled_mm`` with row-wise scales and fast accumulation (bf16 out; the
  quant op then divides and casts in torch), what an engine without these kernels runs;
- ``unquantized``: ``F.linear`` of the bf16 activation and weight (with the bias).

Operands: a float activation and weight (std 1 and 1/sqrt(K)) in bf16, their per-row e4m3
quantization, a float32 bias; weight copies as the protocol's L2 policy asks. The gate
(:func:`oasr_scaled_mm_fp8.numerics.within`) holds every fp8 arm to the stated bound against
the fp32 reference of the quantized operands, and ``unquantized`` to the same bound against
the fp32 reference of the bf16 operands. A build measures the lane's whole space, so the arms
come from its full module (:func:`oasr_scaled_mm_fp8.jit.full_spec`), loaded once per process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oasr_core.jit.libraries import Libraries
from oasr_core.kit.serving import LaunchError
from oasr_core.types import Config, Problem, Sentinel

from oasr_scaled_mm_fp8.config_space import OP_QUANT


def _load_full(lane: str, arch: str) -> Any:
    from oasr_core import jit as core_jit

    from oasr_scaled_mm_fp8 import jit
    from oasr_scaled_mm_fp8.launch import bind_all

    return bind_all(core_jit.load(jit.full_spec(lane, arch)), jit.lane_configs(lane, arch))


FULL = Libraries(load=_load_full)
"""Every compiled (op, config) of a lane's full module, loaded once per (lane, arch)."""


def quantizer(x: Any, q: Any, scale: Any, index: int) -> Any:
    """``quantize()``: per-token e4m3 quantization of ``x`` into ``q``/``scale`` on device
    ``index``'s current stream (the one-kernel quantizer; torch when it cannot load)."""
    from oasr_scaled_mm.w8a8.rows import quantize_step

    from oasr_scaled_mm_fp8 import numerics
    from oasr_scaled_mm_fp8.quantize_kernel import KERNEL

    return quantize_step(KERNEL, x, q, scale, index, numerics.quantize_rows)


def make_bench(problem: Problem, choices: Sequence[Config | Sentinel], options: Any):
    """The :class:`oasr_core.bench.BenchCase` of ``problem`` (see the module docstring)."""
    import torch
    from oasr_core.bench import BenchCase
    from oasr_core.kit import benching
    from oasr_scaled_mm.w8a8.scaled import scaled_kernel_arm

    from oasr_scaled_mm_fp8 import numerics, reference

    n, k, m = problem.dim("N"), problem.dim("K"), problem.m
    quant = problem.op == OP_QUANT
    where = benching.bench_device(options, FULL)
    dev = where.device
    gen = torch.Generator(device="cpu").manual_seed(options.seed)
    x = torch.randn(m, k, generator=gen).to(dev, torch.bfloat16)
    w_hp = (torch.randn(n, k, generator=gen) / k ** 0.5).to(dev, torch.bfloat16)
    bias = torch.randn(n, generator=gen).to(dev)
    a, a_scale = numerics.quantize_rows(x)
    w, w_scale = numerics.quantize_rows(w_hp)
    copies, weights = benching.weight_copies(w, options, n * k + 4 * n)
    hp_weights = [w_hp] + [w_hp.clone() for _ in range(copies - 1)]
    bias_hp = bias.to(torch.bfloat16)
    value = reference.scaled_mm_value(a, w, a_scale, w_scale, bias)
    out_scale = numerics.out_scale_for(value) if quant else 1.0
    out_scale_t = torch.tensor([out_scale], dtype=torch.float32, device=dev)
    target = (value / out_scale_t).clamp(-reference.FP8_MAX, reference.FP8_MAX) if quant \
        else value
    out = torch.empty(m, n, dtype=reference.FP8 if quant else torch.bfloat16, device=dev)
    out_hp = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    q_buf, s_buf = torch.empty_like(a), torch.empty_like(a_scale)
    quantize = (lambda: None) if quant else quantizer(x, q_buf, s_buf, where.index)
    a_in, s_in = (a, a_scale) if quant else (q_buf, s_buf)
    arm_of: dict[str, benching.Arm] = {}

    def kernel_arm(cfg: Config) -> benching.Arm:
        if cfg.id not in arm_of:
            kernel = where.kernels.get((problem.op, cfg.id))
            if kernel is None:
                raise LaunchError(f"{cfg.id} is not compiled in the {options.lane} module")
            arm_of[cfg.id] = scaled_kernel_arm(
                kernel.prepare("fp8" if quant else "bf16", m, n, k), where.index, a_in,
                weights, s_in, w_scale, bias, out_scale, out,
                f"{options.lane}/{cfg.id} refused m={m} n={n} k={k}", None if quant else quantize)
        return arm_of[cfg.id]

    def torch_arm() -> benching.Arm:
        def run(i: int) -> Any:
            quantize()
            y = reference.rowwise(a_in, weights[i], s_in, w_scale, bias)
            out.copy_(reference.quantize_output(y.float(), out_scale_t) if quant else y)
            return out

        try:
            run(0)
        except RuntimeError as exc:
            raise LaunchError(f"torch._scaled_mm refused the shape: {exc}") from exc
        return run

    arms, rejected = benching.choice_arms(
        problem, choices, options, family="scaled_mm_fp8", torch_arm=torch_arm,
        kernel_arm=kernel_arm, sentinel_arms={Sentinel.UNQUANTIZED: benching.unquantized_arm(
            x, hp_weights, bias_hp, out_hp, "scaled_mm_fp8_quant has no unquantized path (its "
            "consumer reads fp8)" if quant else None)})
    hp_target = reference.scale(torch.mm(x.double(), w_hp.double().t()).float(),
                                torch.ones(m, device=dev), torch.ones(n, device=dev), bias_hp)

    def gate(output: Any) -> Any:
        return numerics.within(output, hp_target if output is out_hp else target)

    return BenchCase(arms=arms, copies=copies, weight_bytes=n * k + 4 * n, rejected=rejected,
                     gate=gate)
