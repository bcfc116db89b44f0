"""The scaled_mm family's bench adapter: ``Family.make_bench`` for ``oasr tune build``.

What is timed is what the engine's quantized linear runs. For ``scaled_mm`` that is the
per-token activation quantization (the one-kernel quantizer, into fixed buffers) followed by
the GEMM, so the arms compare honestly with ``unquantized``, the layer in fp16 with
``F.linear``, which needs no quantization. ``scaled_mm_quant`` reads an int8 activation the
previous GEMM wrote, so its arms are the GEMM alone (and ``unquantized`` is rejected: its
consumer needs int8). For one problem it allocates realistic operands once (a float activation
and weight, quantized per token / per channel, so outputs are O(1); weight copies as the
protocol's L2 policy asks), a float32 bias, and for ``scaled_mm_quant`` an out_scale mapping
the output's absmax to 127. The arms:

- a config of the lane (or ``heuristic``, which the build resolves to the ladder's config),
  launched through its prepared call exactly as the served op launches it (fp16 output for
  ``scaled_mm``, int8 for ``scaled_mm_quant``);
- ``torch``: ``torch._int_mm`` then the same scaling in torch (what an engine without these
  kernels runs). ``_int_mm`` refuses M <= 16, so small M is padded to 17 rows (the arm pays for
  the padded GEMM, as a torch engine would);
- ``unquantized``: ``F.linear`` of the fp16 activation and weight (with the bias in fp16).

The gate is bitwise (``torch.equal``) against the heuristic variant's output; without a
launchable heuristic config, against the exact torch reference (the same bits by construction:
the device quantizer is bit for bit the reference's). ``unquantized`` is held to an fp16
tolerance (:data:`UNQUANTIZED_ROUND` of each element plus :data:`UNQUANTIZED_ACC` of the
output's absmax) against the fp32 product of the fp16 operands.
Operands are drawn on the host and copied (``numerics.make_operands``'s draw; for
``scaled_mm`` the activation in fp16, quantized on the device as the layer quantizes it): with
operands drawn and quantized on the GPU, the H200 saw ``scaled_mm_quant`` tiles disagree
bitwise (2026-12-01), and its host draw is the path every GPU run before had passed.
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
UNQUANTIZED_ROUND = 2.0 ** -11
"""The ``unquantized`` arm's tolerance per element, relative: fp16's rounding."""
UNQUANTIZED_ACC = 2.0 ** -8
"""The ``unquantized`` arm's tolerance relative to the output's absmax: fp16 products summed
in fp32 over K (cuBLAS may split K)."""


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
    from oasr_core.kit.gates import within_limit

    from oasr_scaled_mm import numerics, reference
    from oasr_scaled_mm.quantize import quantize_rows_reference
    from oasr_scaled_mm.quantize_kernel import KERNEL
    from oasr_scaled_mm.w8a8.rows import quantize_step
    from oasr_scaled_mm.w8a8.scaled import scaled_kernel_arm

    n, k, m = problem.dim("N"), problem.dim("K"), problem.m
    quant = problem.op == OP_QUANT
    out_dtype = torch.int8 if quant else torch.float16
    out_name = "int8" if quant else "fp16"
    where = benching.bench_device(options, FULL)
    dev = where.device
    x, wf, b = benching.float_operands(m, n, k, seed=options.seed)
    x_hp = x.to(dev, torch.float16)
    # scaled_mm's arms quantize the fp16 activation (below) to exactly these bits;
    # scaled_mm_quant takes the host draw's int8 activation, as before.
    a, a_scale = (quantize_rows_reference(x_hp) if not quant
                  else (t.to(dev) for t in numerics.quantize_rows(x)))
    w, w_scale = (t.to(dev) for t in numerics.quantize_rows(wf))
    bias = b.to(dev)
    weight_bytes = n * k + 4 * n
    copies, weights = benching.weight_copies(w, options, weight_bytes)
    y = reference.scale(reference.exact_acc(a, w), a_scale, w_scale, bias)
    out_scale = numerics.out_scale_for(y) if quant else 1.0
    out_scale_t = torch.tensor([out_scale], dtype=torch.float32, device=dev)
    exact = reference.quantize_output(y, out_scale_t) if quant else y.to(out_dtype)
    out = torch.empty(m, n, dtype=out_dtype, device=dev)
    # scaled_mm: each arm quantizes the fp16 activation into fixed buffers first, as the
    # quantized linear does (the same bits as `a`); scaled_mm_quant's input is int8 already.
    q_buf, s_buf = torch.empty_like(a), torch.empty_like(a_scale)
    quantize = (lambda: None) if quant else quantize_step(
        KERNEL, x_hp, q_buf, s_buf, where.index, quantize_rows_reference)
    a_in, s_in = (a, a_scale) if quant else (q_buf, s_buf)
    if not quant:
        quantize()  # the buffers hold the activation before any arm reads them
    arm_of: dict[str, benching.Arm] = {}

    def kernel_arm(cfg: Config) -> benching.Arm:
        if cfg.id not in arm_of:
            kernel = where.kernels.get((problem.op, cfg.id))
            if kernel is None:
                why = ("has no quantizing launcher (Stream-K)" if quant
                       and cfg.params.get("stream_k")
                       else f"is not compiled in the {options.lane} module")
                raise LaunchError(f"{cfg.id} {why}")
            arm_of[cfg.id] = scaled_kernel_arm(
                kernel.prepare(out_name, m, n, k), where.index, a_in, weights, s_in, w_scale,
                bias, out_scale, out, f"{options.lane}/{cfg.id} refused m={m} n={n} k={k}",
                None if quant else quantize)
        return arm_of[cfg.id]

    def torch_arm(i: int) -> Any:
        quantize()
        padded = a_in if m >= MIN_INT_MM_ROWS else torch.cat(
            [a_in, a_in.new_zeros(MIN_INT_MM_ROWS - m, k)])
        acc = torch._int_mm(padded, weights[i].t())[:m]
        value = reference.scale(acc, s_in, w_scale, bias)
        out.copy_(reference.quantize_output(value, out_scale_t) if quant else value)
        return out

    def checked_torch_arm() -> benching.Arm:
        try:
            torch_arm(0)
        except RuntimeError as exc:
            raise LaunchError(f"torch._int_mm refused the shape: {exc}") from exc
        return torch_arm

    hp_weights = [wf.to(dev, torch.float16)]
    hp_weights += [hp_weights[0].clone() for _ in range(copies - 1)]
    bias_hp = b.to(dev, torch.float16)
    out_hp = torch.empty(m, n, dtype=torch.float16, device=dev)

    arms, rejected = benching.choice_arms(
        problem, choices, options, family="scaled_mm", torch_arm=checked_torch_arm,
        kernel_arm=kernel_arm, sentinel_arms={Sentinel.UNQUANTIZED: benching.unquantized_arm(
            x_hp, hp_weights, bias_hp, out_hp, "scaled_mm_quant has no unquantized path (its "
            "consumer reads int8)" if quant else None)})
    gate_ref = exact
    heuristic = options.config_of(Sentinel.HEURISTIC, problem) \
        if options.resolve is not None else None
    if heuristic is not None:
        try:
            kernel_arm(heuristic)(0)
            torch.cuda.synchronize(dev)
            gate_ref = out.clone()
        except Exception:  # an unlaunchable heuristic: the exact reference is the same bits
            gate_ref = exact
    hp_ref = None

    def gate(output: Any) -> Any:
        nonlocal hp_ref
        if output is out_hp:
            if hp_ref is None:
                ref = (torch.mm(x_hp.double(), hp_weights[0].double().t())
                       + bias_hp.double()).float()
                limit = UNQUANTIZED_ROUND * ref.abs() + UNQUANTIZED_ACC * float(
                    ref.abs().amax())
                hp_ref = (ref, limit)
            return within_limit(output, *hp_ref)
        return numerics.numerics_gate(output, gate_ref)

    return BenchCase(arms=arms, copies=copies, weight_bytes=weight_bytes, rejected=rejected,
                     gate=gate)
