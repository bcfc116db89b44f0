"""The recurrent family's torch path, fp32 reference, operands and numerics gate (pure torch,
CPU-testable).

Each op's torch path is torch's cell (:func:`torch_cell`: ``torch.lstm_cell`` for
``lstm_step``, what an LSTM cell runs without oasr; ``torch.rnn_tanh_cell`` /
``torch.rnn_relu_cell`` for the RNN steps, ``torch.gru_cell`` for ``gru_step``). The gate is
the kit's :func:`oasr_core.kit.gates.relative_to_torch` on the step's outputs as one tensor
(:func:`judged`: an LSTM's two stacked ``(2, B, H)``, ``h1`` then ``c1``; an RNN or GRU
step's ``h1``): a candidate's error against the fp32 reference (the same half-precision
operands, every op in fp32) is bounded by multiples of torch's own error.
"""

from __future__ import annotations

from typing import Any

from oasr_core.kit.gates import RelativeVerdict as GateResult
from oasr_core.kit.gates import relative_to_torch as numerics_gate

from oasr_recurrent.ops_names import CELL_GATES, CELL_STATE

__all__ = ["GateResult", "judged", "make_operands", "numerics_gate", "reference", "stacked",
           "torch_cell", "torch_step"]


def torch_step(x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
               b_hh: Any = None) -> tuple[Any, Any]:
    """``(h1, c1)`` of ``torch.lstm_cell`` (the op's torch path)."""
    import torch

    return torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)


def torch_cell(op: str, x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
               b_hh: Any = None) -> Any:
    """The output of ``op``'s step by torch's cell (its torch path): ``(h1, c1)`` for
    ``lstm_step``, ``h1`` for the others (``c`` unused, None)."""
    import torch

    if op == "lstm_step":
        return torch_step(x, h, c, w_ih, w_hh, b_ih, b_hh)
    cell = {"rnn_tanh_step": torch.rnn_tanh_cell, "rnn_relu_step": torch.rnn_relu_cell,
            "gru_step": torch.gru_cell}[op]
    return cell(x, h, w_ih, w_hh, b_ih, b_hh)


def reference(x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
              b_hh: Any = None, *, op: str = "lstm_step") -> Any:
    """``op``'s fp32 step from the same operands, as the gate judges it (:func:`judged`)."""

    def f32(t: Any) -> Any:
        return None if t is None else t.float()

    return judged(torch_cell(op, f32(x), f32(h), f32(c), f32(w_ih), f32(w_hh), f32(b_ih),
                             f32(b_hh)))


def judged(output: Any) -> Any:
    """A step's output as one tensor: the LSTM's ``(h1, c1)`` stacked (:func:`stacked`), a
    single ``h1`` as it is."""
    return output if hasattr(output, "dim") else stacked(*output)


def stacked(h1: Any, c1: Any) -> Any:
    """A step's outputs as one ``(2, B, H)`` tensor: what the gate judges."""
    import torch

    return torch.stack((h1, c1))


def make_operands(batch: int, input_size: int, hidden: int, dtype: str = "fp16", *,
                  bias: bool = True, device: Any = "cpu", seed: int = 0,
                  op: str = "lstm_step") -> tuple[Any, ...]:
    """Random ``(x (B, I), h (B, H), c (B, H), w_ih (G H, I), w_hh (G H, H), b_ih, b_hh)`` of
    ``op`` (``G`` its gate rows per unit, ``CELL_GATES``; ``c`` None without a cell state),
    as ``nn.LSTM`` / ``nn.RNN`` / ``nn.GRU`` initialise their weights (uniform in
    +-1/sqrt(H)) and with states in (-1, 1), so gates stay in the range where every
    nonlinearity matters; ``bias`` False gives None biases."""
    import torch

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    bound = hidden ** -0.5

    def uniform(*shape: int, scale: float = 1.0) -> Any:
        t = (torch.rand(*shape, generator=gen) * 2 - 1) * scale
        return t.to(device=device, dtype=tdtype)

    rows = CELL_GATES[op] * hidden
    x = uniform(batch, input_size)
    h = uniform(batch, hidden)
    c = uniform(batch, hidden) if CELL_STATE[op] else None
    w_ih = uniform(rows, input_size, scale=bound)
    w_hh = uniform(rows, hidden, scale=bound)
    b_ih = uniform(rows, scale=bound) if bias else None
    b_hh = uniform(rows, scale=bound) if bias else None
    return x, h, c, w_ih, w_hh, b_ih, b_hh
