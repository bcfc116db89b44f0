"""The recurrent family's torch path, fp32 reference, operands and numerics gate (pure torch,
CPU-testable).

The torch path is ``torch.lstm_cell`` (what an LSTM cell runs without oasr). The gate is the
kit's :func:`oasr_core.kit.gates.relative_to_torch` on the step's two outputs stacked
``(2, B, H)`` (``h1`` then ``c1``): a candidate's error against the fp32 reference (the same
half-precision operands, every op in fp32) is bounded by multiples of torch's own error.
"""

from __future__ import annotations

from typing import Any

from oasr_core.kit.gates import RelativeVerdict as GateResult
from oasr_core.kit.gates import relative_to_torch as numerics_gate

__all__ = ["GateResult", "make_operands", "numerics_gate", "reference", "stacked", "torch_step"]


def torch_step(x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
               b_hh: Any = None) -> tuple[Any, Any]:
    """``(h1, c1)`` of ``torch.lstm_cell`` (the op's torch path)."""
    import torch

    return torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)


def reference(x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
              b_hh: Any = None) -> Any:
    """The fp32 step from the same operands, stacked ``(2, B, H)`` (:func:`stacked`)."""

    def f32(t: Any) -> Any:
        return None if t is None else t.float()

    return stacked(*torch_step(f32(x), f32(h), f32(c), f32(w_ih), f32(w_hh), f32(b_ih),
                               f32(b_hh)))


def stacked(h1: Any, c1: Any) -> Any:
    """A step's outputs as one ``(2, B, H)`` tensor: what the gate judges."""
    import torch

    return torch.stack((h1, c1))


def make_operands(batch: int, input_size: int, hidden: int, dtype: str = "fp16", *,
                  bias: bool = True, device: Any = "cpu", seed: int = 0) -> tuple[Any, ...]:
    """Random ``(x (B, I), h (B, H), c (B, H), w_ih (4H, I), w_hh (4H, H), b_ih, b_hh)``, as
    ``nn.LSTM`` initialises its weights (uniform in +-1/sqrt(H)) and with states in (-1, 1),
    so gates stay in the range where every nonlinearity matters; ``bias`` False gives None
    biases."""
    import torch

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    bound = hidden ** -0.5

    def uniform(*shape: int, scale: float = 1.0) -> Any:
        t = (torch.rand(*shape, generator=gen) * 2 - 1) * scale
        return t.to(device=device, dtype=tdtype)

    x = uniform(batch, input_size)
    h, c = uniform(batch, hidden), uniform(batch, hidden)
    w_ih = uniform(4 * hidden, input_size, scale=bound)
    w_hh = uniform(4 * hidden, hidden, scale=bound)
    b_ih = uniform(4 * hidden, scale=bound) if bias else None
    b_hh = uniform(4 * hidden, scale=bound) if bias else None
    return x, h, c, w_ih, w_hh, b_ih, b_hh
