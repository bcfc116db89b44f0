"""The scaled_mm_fp8 numerics: a stated tolerance against the fp32 reference, and operands.

The claim is **not** bitwise. Variants of one lane do not compute the same bits: the Hopper
``FP8FastAccum`` main loops leave the wgmma accumulators unpromoted (the tensor core keeps
partial sums of fp8 products with fewer mantissa bits than fp32; the promoted schedules add
them into fp32 registers every few instructions), and Ada's staged (``OpMultiplyAdd``) kernels
round once per K tile, so the rounding depends on the tile. A bitwise gate against the
heuristic's variant would reject every fast-accumulation tile -- the only ones competitive
with ``torch._scaled_mm`` on Hopper -- so the gate is a tolerance against the fp32 reference
(:func:`oasr_scaled_mm_fp8.reference.scaled_mm_value`: exact products, float64 sums), the
same reference for every variant:

    |out - ref| <= ROUND[out dtype] * |ref| + ACC_TOL * max|ref| (+ FP8_FLOOR for e4m3 out)

``ROUND`` is one rounding step of the output dtype (bf16 2^-8, fp16 2^-11, e4m3 2^-3 of the
value); ``ACC_TOL = 2^-6`` of the output's largest magnitude bounds the accumulation error
(measured published fast-accumulation errors at K = 4096 reach ~1 % of the result's scale;
the margin keeps deep-K tiles in); ``FP8_FLOOR`` is e4m3's subnormal step. The quant op is
compared in its own units (``ref / out_scale`` saturated to +-448). A NaN or infinity where the
reference is finite fails. The GPU tests check the claim for every tile of both lanes.

Operands are realistic: a float activation and weight quantized per token and per channel
(absmax / 448), so outputs are O(1).
"""

from __future__ import annotations

from typing import Any

from oasr_core.kit.gates import Verdict, within_limit
from oasr_scaled_mm.w8a8.numerics import operand_helpers

ACC_TOL = 2.0 ** -6
ROUND = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float8_e4m3fn": 2.0 ** -3,
         "float32": 2.0 ** -23}
FP8_FLOOR = 2.0 ** -9
GateResult = Verdict


def bound(reference: Any, dtype: Any) -> Any:
    """The per-element error bound of an output of ``dtype`` against fp32 ``reference``."""
    name = str(dtype).removeprefix("torch.")
    ref = reference.float()
    scale = float(ref.abs().amax()) if ref.numel() else 0.0
    floor = FP8_FLOOR if name == "float8_e4m3fn" else 0.0
    return ROUND[name] * ref.abs() + (ACC_TOL * scale + floor)


def within(candidate: Any, reference: Any) -> GateResult:
    """Whether ``candidate`` is within :func:`bound` of the fp32 ``reference`` (same units)."""
    import torch

    if tuple(candidate.shape) != tuple(reference.shape):
        return within_limit(candidate, reference, reference)
    ref = reference.detach().float()
    finite = torch.isfinite(ref)
    return within_limit(candidate, reference,
                        bound(ref.where(finite, torch.zeros_like(ref)), candidate.dtype))


def numerics_gate(candidate: Any, reference: Any) -> GateResult:
    """``Family.numerics_gate``: :func:`within` the stated bound of the fp32 reference
    (for an e4m3 candidate, ``reference`` is already in output units)."""
    return within(candidate, reference)


def quantize_rows(x: Any) -> tuple[Any, Any]:
    """Per-row e4m3 quantization in torch: ``(q [..., K] e4m3, scale float32 [...])``.

    ``scale = absmax / 448`` (IEEE division by a tensor of 448s; 1 for an all-zero row),
    ``q = e4m3(clamp(x / scale, -448, 448))`` rounded to nearest even. A row holding a NaN
    gets a NaN scale (absmax propagates it) and NaN values; an infinity gives an infinite
    scale (its finite values quantize to 0, the infinity to NaN).
    """
    import torch

    x32 = x.detach().to(torch.float32)
    amax = x32.abs().amax(dim=-1)
    scale = amax / torch.full_like(amax, 448.0)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = (x32 / scale.unsqueeze(-1)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, scale


globals().update(operand_helpers(quantize_rows, 448.0, "e4m3"))  # make_operands, out_scale_for
