"""How the census sees recurrent calls: the recurrent family's recorder patches.

``recorder_patches()`` is the family's ``Family.recorder_patches``. It observes

- ``torch.lstm`` (what ``nn.LSTM``'s forward calls, seen at dispatch), ``torch.rnn_tanh`` /
  ``torch.rnn_relu`` (``nn.RNN``'s) and ``torch.gru`` (``nn.GRU``'s): a call over one time
  step of a unidirectional layer (an LSTM without projection) is one point of the cell's op
  per layer (``lstm_step``, ``rnn_tanh_step``, ``rnn_relu_step``, ``gru_step``), dims
  ``(I, H)`` (``I`` the input size for the first layer, ``H`` for the others) and ``M`` =
  the batch; any other call (a sequence, a packed sequence, a bidirectional or projected
  layer) is a counted
  :class:`~oasr_core.census.recorder.Skip`, since the module's own forward serves it;
- torch's cells (``torch.lstm_cell``, ``torch.rnn_tanh_cell``, ``torch.rnn_relu_cell``,
  ``torch.gru_cell``: an ``nn.LSTMCell`` / ``nn.RNNCell`` / ``nn.GRUCell``, and the ops' torch
  paths) and the family's ops ``oasr_recurrent.ops.lstm_step``,
  ``oasr_recurrent.rnn.rnn_step`` and ``oasr_recurrent.gru.gru_step``: one point each.

Only floating-point operands are recorded (an fp32 CPU probe is recorded as the deployment
dtype by the census). Importing this module imports neither torch nor the ops; the functions
only read shapes.
"""

from __future__ import annotations

from typing import Any

from oasr_core.census.recorder import Call, RecorderPatch, Skip, dtype_name

from oasr_recurrent.ops_names import CELL_GATES, CELL_STATE, DIMS, FAMILY

_FLOAT = frozenset({"fp16", "bf16", "fp32"})
_LAYERS = {"lstm_step": ("an", "LSTM"), "rnn_tanh_step": ("an", "RNN"),
           "rnn_relu_step": ("an", "RNN"), "gru_step": ("a", "GRU")}
"""Each op's layer, with its article, as the skip reasons name it."""


def step_call(dtype: Any, batch: int, input_size: int, hidden: int,
              op: str = "lstm_step") -> Call | None:
    """The :class:`Call` of one step of ``op`` (None when it is not floating point)."""
    dt = dtype_name(dtype)
    if dt not in _FLOAT or min(batch, input_size, hidden) < 1:
        return None
    gates, states = CELL_GATES[op], 2 if CELL_STATE[op] else 1
    weights = gates * hidden * (input_size + hidden)
    return Call(family=FAMILY, op=op, dtype=dt,
                dims=tuple(zip(DIMS, (input_size, hidden), strict=True)), m=batch,
                elements=batch * (input_size + states * hidden) + weights + 2 * gates * hidden
                + states * batch * hidden,
                flops=2 * batch * weights, weight_elements=weights + 2 * gates * hidden)


def record_layer(op: str, args: Any, kwargs: Any) -> list[Call] | Skip | None:
    """A recurrent layer's call of ``op``'s cell (``torch.lstm``, ``torch.rnn_tanh``,
    ``torch.rnn_relu``, ``torch.gru``): its dense form ``(input, hx, params, has_biases, num_layers,
    dropout, train, bidirectional, batch_first)`` or packed form ``(data, batch_sizes, hx,
    params, ...)``; ``hx`` is ``(h0, c0)`` for the LSTM, ``h0`` for the others."""
    if len(args) < 3 or not hasattr(args[0], "dim"):
        return None
    x, (article, name) = args[0], _LAYERS[op]
    layer = f"{article} {name}"
    stateful = CELL_STATE[op]
    if hasattr(args[1], "dim") and (stateful or hasattr(args[2], "dim")):
        return Skip(f"{layer} over a packed sequence", f"data {tuple(x.shape)}")
    hx, params = args[1], args[2]
    layers, bidirectional = int(args[4]), bool(args[7])
    batch_first = bool(args[8]) if len(args) > 8 else bool(kwargs.get("batch_first", False))
    h0 = hx[0] if stateful else hx
    example = f"input {tuple(x.shape)} h0 {tuple(h0.shape)}"
    if bidirectional:
        return Skip(f"a bidirectional {name}", example)
    hidden = int(hx[1].shape[-1]) if stateful else int(h0.shape[-1])
    if stateful and h0.shape[-1] != hidden:
        return Skip("an LSTM with a projection (proj_size)", example)
    seq_dim = 1 if batch_first and x.dim() == 3 else 0
    if x.dim() not in (2, 3) or int(x.shape[seq_dim]) != 1:
        return Skip(f"{layer} over more than one time step (its own forward serves it)",
                    example)
    batch = int(x.shape[1 - seq_dim]) if x.dim() == 3 else 1
    per_layer = len(params) // max(layers, 1)
    calls = []
    for index in range(layers):
        w_ih = params[index * per_layer]
        call = step_call(x.dtype, batch, int(w_ih.shape[1]), hidden, op)
        if call is None:
            return None
        calls.append(call)
    return calls


def layer_recorder(op: str) -> Any:
    """The record of a layer call of ``op``'s cell (``torch.lstm``, ``torch.rnn_tanh``,
    ``torch.rnn_relu``, ``torch.gru``: :func:`record_layer`)."""

    def record(*args: Any, **kwargs: Any) -> list[Call] | Skip | None:
        return record_layer(op, args, kwargs)

    record.__doc__ = f"A recurrent layer's call, recorded as {op} points (record_layer)."
    return record


def _cell_call(op: str, input: Any, w_hh: Any) -> Call | None:
    if not hasattr(input, "dim") or input.dim() not in (1, 2) or not hasattr(w_hh, "dim"):
        return None
    batch = int(input.shape[0]) if input.dim() == 2 else 1
    return step_call(input.dtype, batch, int(input.shape[-1]), int(w_hh.shape[-1]), op)


def cell_recorder(op: str) -> Any:
    """The record of torch's cell of ``op`` (``torch.lstm_cell(input (B, I) or (I,), (h, c),
    w_ih, w_hh, b_ih, b_hh)``, ``torch.rnn_tanh_cell`` / ``torch.rnn_relu_cell`` /
    ``torch.gru_cell(input, h, ...)``): one point."""

    def record(input: Any, hx: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
               b_hh: Any = None) -> Call | None:
        return _cell_call(op, input, w_hh)

    record.__doc__ = f"torch's {op} cell, recorded as one {op} point."
    return record


def record_lstm_step(x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
                     b_hh: Any = None) -> Call | None:
    """``oasr_recurrent.ops.lstm_step``: the same point as the cell it computes."""
    return _cell_call("lstm_step", x, w_hh)


def record_rnn_step(x: Any, h: Any, w_ih: Any, w_hh: Any, b_ih: Any = None, b_hh: Any = None,
                    nonlinearity: str = "tanh") -> Call | None:
    """``oasr_recurrent.rnn.rnn_step``: a point of ``rnn_<nonlinearity>_step`` (None for a
    nonlinearity it refuses)."""
    op = f"rnn_{nonlinearity}_step"
    return _cell_call(op, x, w_hh) if op in CELL_GATES else None


def record_gru_step(x: Any, h: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
                    b_hh: Any = None) -> Call | None:
    """``oasr_recurrent.gru.gru_step``: the same point as the cell it computes."""
    return _cell_call("gru_step", x, w_hh)


_TORCH = (("lstm", "lstm_step", "nn.LSTM"), ("rnn_tanh", "rnn_tanh_step", "nn.RNN (tanh)"),
          ("rnn_relu", "rnn_relu_step", "nn.RNN (relu)"), ("gru", "gru_step", "nn.GRU"))
"""torch's layer function (``torch.<name>``, its cell ``torch.<name>_cell``), the op and the
module calling it."""


def recorder_patches() -> list[RecorderPatch]:
    """The recurrent family's patches (``Family.recorder_patches``)."""
    layers = [RecorderPatch(family=FAMILY, target=f"torch:{name}", record=layer_recorder(op),
                            description=f"{module} over one time step: one {op} per layer")
              for name, op, module in _TORCH]
    cells = [RecorderPatch(family=FAMILY, target=f"torch:{name}_cell", record=cell_recorder(op),
                           description=f"torch.{name}_cell: one {op}")
             for name, op, _module in _TORCH]
    return [*layers, *cells,
            RecorderPatch(family=FAMILY, target="oasr_recurrent.ops:lstm_step",
                          record=record_lstm_step, description="oasr_recurrent.lstm_step"),
            RecorderPatch(family=FAMILY, target="oasr_recurrent.rnn:rnn_step",
                          record=record_rnn_step, description="oasr_recurrent.rnn_step"),
            RecorderPatch(family=FAMILY, target="oasr_recurrent.gru:gru_step",
                          record=record_gru_step, description="oasr_recurrent.gru_step")]
