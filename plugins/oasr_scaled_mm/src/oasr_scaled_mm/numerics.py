"""The scaled_mm family's numerics gate and test operands.

Every variant computes the same bits (exact int32 accumulator, one fixed order of fp32 epilogue
ops; see :mod:`oasr_scaled_mm.reference`), so the gate is bitwise: a candidate passes only if
its output equals the reference output element for element (``torch.equal``). The build's
reference is the heuristic variant's output (what serves when no entry exists).

Operands are realistic rather than full range: a float activation and weight quantized per
token and per channel (absmax / 127), so outputs are O(1). Full-range int8 with unit scales
overflows fp16 in 45-79% of the outputs (GPU.md), which would hide wrong kernels behind inf.
"""

from __future__ import annotations

from typing import Any

from oasr_core.kit.gates import Verdict

from oasr_scaled_mm.w8a8.numerics import operand_helpers

GateResult = Verdict
"""The gate's verdict: ``error`` is the fraction of elements that differ (0.0 on a pass)."""


def numerics_gate(candidate: Any, reference: Any) -> GateResult:
    """``Family.numerics_gate``: bitwise equality with ``reference`` (shape and dtype too)."""
    import torch

    if tuple(candidate.shape) != tuple(reference.shape):
        return GateResult(False, 1.0, f"shape {tuple(candidate.shape)} != "
                                      f"{tuple(reference.shape)}")
    if candidate.dtype != reference.dtype:
        return GateResult(False, 1.0, f"dtype {candidate.dtype} != {reference.dtype}")
    got = candidate.detach()
    want = reference.detach().to(got.device)
    if torch.equal(got, want):
        return GateResult(True, 0.0)
    differ = got.ne(want)
    if got.is_floating_point():  # NaN != NaN: a NaN in both places is not a difference
        differ &= ~(got.isnan() & want.isnan())
        if not bool(differ.any()):
            return GateResult(True, 0.0)
    count = int(differ.sum())
    first = tuple(int(i) for i in differ.nonzero()[0].tolist())
    return GateResult(False, count / max(1, got.numel()),
                      f"{count} of {got.numel()} elements differ (first at {first}: "
                      f"{got[first].item()} vs {want[first].item()})")


def quantize_rows(x: Any) -> tuple[Any, Any]:
    """Per-row symmetric int8 quantization: ``(q int8, scale float32 [rows])``, absmax / 127.

    A zero row gets scale 1 (its values quantize to 0 either way).
    """
    import torch

    x32 = x.to(torch.float32)
    scale = x32.abs().amax(dim=-1) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(x32 / scale.unsqueeze(-1)).clamp_(-127.0, 127.0).to(torch.int8)
    return q, scale


globals().update(operand_helpers(quantize_rows, 127.0, "int8"))  # make_operands, out_scale_for
