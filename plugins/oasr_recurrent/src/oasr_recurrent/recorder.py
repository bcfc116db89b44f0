"""How the census sees recurrent calls: the recurrent family's recorder patches.

``recorder_patches()`` is the family's ``Family.recorder_patches``. It observes

- ``torch.lstm`` (what ``nn.LSTM``'s forward calls, seen at dispatch): a call over one time
  step of a unidirectional LSTM without projection is one ``lstm_step`` point per layer, dims
  ``(I, H)`` (``I`` the input size for the first layer, ``H`` for the others) and ``M`` = the
  batch; any other call (a sequence, a packed sequence, a bidirectional or projected LSTM) is
  a counted :class:`~oasr_core.census.recorder.Skip`, since the module's own forward serves it;
- ``torch.lstm_cell`` (an LSTM cell, and the op's torch path) and the family's op
  ``oasr_recurrent.ops.lstm_step``: one point each.

Only floating-point operands are recorded (an fp32 CPU probe is recorded as the deployment
dtype by the census). Importing this module imports neither torch nor the ops; the functions
only read shapes.
"""

from __future__ import annotations

from typing import Any

from oasr_core.census.recorder import Call, RecorderPatch, Skip, dtype_name

from oasr_recurrent.ops_names import DIMS, FAMILY, GATES

_FLOAT = frozenset({"fp16", "bf16", "fp32"})


def step_call(dtype: Any, batch: int, input_size: int, hidden: int) -> Call | None:
    """The :class:`Call` of one ``lstm_step`` (None when it is not floating point)."""
    dt = dtype_name(dtype)
    if dt not in _FLOAT or min(batch, input_size, hidden) < 1:
        return None
    weights = GATES * hidden * (input_size + hidden)
    return Call(family=FAMILY, op="lstm_step", dtype=dt,
                dims=tuple(zip(DIMS, (input_size, hidden), strict=True)), m=batch,
                elements=batch * (input_size + 2 * hidden) + weights + 2 * GATES * hidden
                + 2 * batch * hidden,
                flops=2 * batch * weights, weight_elements=weights + 2 * GATES * hidden)


def record_lstm(*args: Any, **kwargs: Any) -> list[Call] | Skip | None:
    """``torch.lstm``: its dense form ``(input, hx, params, has_biases, num_layers, dropout,
    train, bidirectional, batch_first)`` or packed form ``(data, batch_sizes, hx, params,
    ...)``."""
    if len(args) < 2 or not hasattr(args[0], "dim"):
        return None
    x = args[0]
    if hasattr(args[1], "dim"):
        return Skip("an LSTM over a packed sequence", f"data {tuple(x.shape)}")
    hx, params = args[1], args[2]
    layers, bidirectional = int(args[4]), bool(args[7])
    batch_first = bool(args[8]) if len(args) > 8 else bool(kwargs.get("batch_first", False))
    h0, c0 = hx[0], hx[1]
    example = f"input {tuple(x.shape)} h0 {tuple(h0.shape)}"
    if bidirectional:
        return Skip("a bidirectional LSTM", example)
    if h0.shape[-1] != c0.shape[-1]:
        return Skip("an LSTM with a projection (proj_size)", example)
    seq_dim = 1 if batch_first and x.dim() == 3 else 0
    if x.dim() not in (2, 3) or int(x.shape[seq_dim]) != 1:
        return Skip("an LSTM over more than one time step (its own forward serves it)",
                    example)
    batch = int(x.shape[1 - seq_dim]) if x.dim() == 3 else 1
    hidden = int(c0.shape[-1])
    per_layer = len(params) // max(layers, 1)
    calls = []
    for layer in range(layers):
        w_ih = params[layer * per_layer]
        call = step_call(x.dtype, batch, int(w_ih.shape[1]), hidden)
        if call is None:
            return None
        calls.append(call)
    return calls


def record_lstm_cell(input: Any, hx: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
                     b_hh: Any = None) -> Call | None:
    """``torch.lstm_cell(input (B, I) or (I,), (h, c), w_ih, w_hh, b_ih, b_hh)``."""
    if not hasattr(input, "dim") or input.dim() not in (1, 2) or not hasattr(w_hh, "dim"):
        return None
    batch = int(input.shape[0]) if input.dim() == 2 else 1
    return step_call(input.dtype, batch, int(input.shape[-1]), int(w_hh.shape[-1]))


def record_lstm_step(x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
                     b_hh: Any = None) -> Call | None:
    """``oasr_recurrent.ops.lstm_step``: the same point as the cell it computes."""
    return record_lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)


def recorder_patches() -> list[RecorderPatch]:
    """The recurrent family's patches (``Family.recorder_patches``)."""
    return [
        RecorderPatch(family=FAMILY, target="torch:lstm", record=record_lstm,
                      description="nn.LSTM over one time step: one lstm_step per layer"),
        RecorderPatch(family=FAMILY, target="torch:lstm_cell", record=record_lstm_cell,
                      description="torch.lstm_cell (nn.LSTMCell)"),
        RecorderPatch(family=FAMILY, target="oasr_recurrent.ops:lstm_step",
                      record=record_lstm_step, description="oasr_recurrent.lstm_step"),
    ]
