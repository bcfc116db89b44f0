"""An ``nn.LSTM``, ``nn.RNN`` or ``nn.GRU`` one token step at a time through the family's
cell ops, and the family's answer to ``oasr_layer("LSTM" | "RNN" | "GRU", ...)``
(:func:`oasr_core.route`).

:func:`layer_step` (also named :func:`lstm_layer_step`) is ``module(x_t, state)`` for an input
of one time step: each layer's step is one call of the module's cell op (:func:`op_of`:
``lstm_step``, ``rnn_tanh_step`` / ``rnn_relu_step`` for an ``nn.RNN``, ``gru_step`` for an
``nn.GRU``; the kernel where
the tiers choose one, torch's cell otherwise), the layers chained through their hidden state.
It takes what the module takes for such a step: ``x_t`` batch-first ``(B, 1, I)``,
sequence-first ``(1, B, I)`` or unbatched ``(1, I)``, ``state`` None (zeros), ``(h0, c0)``
(an LSTM) or ``h0`` (an RNN, a GRU), each ``(L, B, H)`` (unbatched ``(L, H)``), and returns
``(output, state)`` shaped as the module's own forward returns them.

:func:`layer_forward` is a routed module's forward (``recurrent_layer.forward``): an input of
one time step on a module the step serves (unidirectional, an LSTM without projection, in eval
mode) goes through :func:`layer_step`; any other call (a sequence, a ``PackedSequence``, a
bidirectional or projected layer, training mode) runs the module's own forward, unchanged.
:func:`torch_only` tells the router when every call of a module is torch's anyway (no tier
can serve a kernel at any batch for one of its layers' widths, or the module is not one the
step serves): the module then keeps its own forward, and a routed layer costs nothing.
"""

from __future__ import annotations

from typing import Any

DTYPES = ("fp16", "bf16")
_OPS: Any = None


def _ops() -> Any:
    global _OPS
    if _OPS is None:
        from oasr_recurrent import ops

        _OPS = ops
    return _OPS


KINDS = {"LSTM": "LSTM", "RNN_TANH": "RNN", "RNN_RELU": "RNN", "GRU": "GRU"}
"""The ``oasr_layer`` kind of each ``nn.RNNBase`` mode the step serves."""
_OPS_OF_MODE = {"LSTM": "lstm_step", "RNN_TANH": "rnn_tanh_step", "RNN_RELU": "rnn_relu_step",
                "GRU": "gru_step"}


def steps(module: Any) -> bool:
    """Whether :func:`layer_step` serves ``module`` (in eval mode): a unidirectional
    ``nn.LSTM`` without projection, or a unidirectional ``nn.RNN`` or ``nn.GRU``."""
    import torch.nn as nn

    return (isinstance(module, (nn.LSTM, nn.RNN, nn.GRU)) and module.mode in _OPS_OF_MODE
            and not module.bidirectional and getattr(module, "proj_size", 0) == 0)


def op_of(module: Any) -> str:
    """The cell op a layer of ``module`` steps through (``lstm_step``, ``rnn_tanh_step``,
    ``rnn_relu_step``, ``gru_step``)."""
    return _OPS_OF_MODE[module.mode]


def _seq_dim(module: Any, x: Any) -> int:
    return 1 if module.batch_first and x.dim() == 3 else 0


def _cell_step(op: str) -> Any:
    """``step(x, h, c, w_ih, w_hh, b_ih, b_hh) -> (h1, c1 or None)`` of ``op``; the op
    functions are looked up when called, so the census's patches of them see a routed step."""
    ops = _ops()
    if op == "lstm_step":
        return ops.lstm_step
    from oasr_recurrent import gru, rnn

    if op == "gru_step":
        return lambda x, h, _c, *weights: (gru.gru_step(x, h, *weights), None)
    nonlinearity = op.split("_")[1]
    return lambda x, h, _c, *weights: (rnn.rnn_step(x, h, *weights, nonlinearity=nonlinearity),
                                       None)


def layer_step(module: Any, x_t: Any, state: Any = None) -> Any:
    """``module(x_t, state)`` for one time step, each layer through its cell op (module
    docstring). A ``ValueError`` names an input that is not one step of what ``module``
    takes; a module the step does not serve (:func:`steps`) or one in training mode runs its
    own forward."""
    if not steps(module) or module.training:
        return type(module).forward(module, x_t, state)
    if x_t.dim() not in (2, 3) or x_t.shape[_seq_dim(module, x_t)] != 1 \
            or x_t.shape[-1] != module.input_size:
        raise ValueError(f"layer_step: x_t of shape {tuple(x_t.shape)} is not one step "
                         f"of input size {module.input_size} (batch_first={module.batch_first})")
    op = op_of(module)
    stateful = op == "lstm_step"
    unbatched = x_t.dim() == 2
    x = x_t.reshape(-1, module.input_size)
    batch = x.shape[0]
    layers, hidden = module.num_layers, module.hidden_size
    if state is None:
        zeros = x.new_zeros((batch, hidden))
        h0 = c0 = [zeros] * layers
    elif stateful:
        h0 = state[0].reshape(layers, batch, hidden)
        c0 = state[1].reshape(layers, batch, hidden)
    else:
        h0 = state.reshape(layers, batch, hidden)
        c0 = [None] * layers
    step = _cell_step(op)
    p = module._parameters
    hs, cs = [], []
    for layer in range(layers):
        x, c = step(x, h0[layer], c0[layer] if stateful else None, p[f"weight_ih_l{layer}"],
                    p[f"weight_hh_l{layer}"], p.get(f"bias_ih_l{layer}"),
                    p.get(f"bias_hh_l{layer}"))
        hs.append(x)
        cs.append(c)
    h_n = _stacked(hs)
    c_n = _stacked(cs) if stateful else None
    if unbatched:
        h_n, c_n = h_n.squeeze(1), None if c_n is None else c_n.squeeze(1)
        out = x
    else:
        out = x.unsqueeze(_seq_dim(module, x_t))
    return out, ((h_n, c_n) if stateful else h_n)


lstm_layer_step = layer_step
"""The name :func:`layer_step` had when it stepped ``nn.LSTM`` alone."""


def _stacked(states: list[Any]) -> Any:
    """``(L, B, H)`` of the layers' states: a view of a single layer's, else a stack."""
    if len(states) == 1:
        return states[0].unsqueeze(0)
    import torch

    return torch.stack(states)


def layer_forward(module: Any, input: Any, hx: Any = None) -> Any:
    """A routed ``nn.LSTM`` / ``nn.RNN`` / ``nn.GRU``'s forward: one time step through
    :func:`layer_step`, every other call the module's own forward (module docstring)."""
    import torch

    if (isinstance(input, torch.Tensor) and not module.training and steps(module)
            and input.dim() in (2, 3) and input.shape[_seq_dim(module, input)] == 1):
        return layer_step(module, input, hx)
    return type(module).forward(module, input, hx)


def layer_widths(module: Any) -> tuple[tuple[int, int], ...]:
    """``(I, H)`` of each layer: the signatures its steps are keyed by."""
    hidden = module.hidden_size
    return tuple((module.input_size if i == 0 else hidden, hidden)
                 for i in range(module.num_layers))


def torch_only(module: Any, dtype: str) -> bool:
    """Whether every call of the routed ``module`` is torch's whatever its input: the step
    does not serve the module (:func:`steps`), or no tier can serve a kernel at any batch for
    any of its layers' widths (:func:`oasr_core.selection.torch_at_every_m`). :func:`oasr_core.
    route` then leaves the module its own forward (``recurrent_layer.torch_only``) until a
    reload; a module one of whose layers a tier serves steps through the op, layer by layer."""
    from oasr_core.selection import torch_at_every_m

    from oasr_recurrent.ops_names import FAMILY

    if not steps(module):
        return True
    op = op_of(module)
    return all(torch_at_every_m(FAMILY, op, dtype, dims) for dims in layer_widths(module))


def recurrent_layer(x: Any, layer: Any, activation: str | None = None) -> Any:
    """``layer(x)`` for an ``nn.LSTM``, ``nn.RNN`` or ``nn.GRU`` ``layer`` (the
    ``oasr_layer`` protocol's form): its output sequence; ``activation`` must be None (a
    recurrent layer's own nonlinearities are its cell's)."""
    if activation is not None:
        raise ValueError(f"recurrent_layer: a recurrent layer takes no activation after it; "
                         f"got {activation!r}")
    return layer_forward(layer, x)[0]


recurrent_layer.forward = layer_forward  # type: ignore[attr-defined]
recurrent_layer.torch_only = torch_only  # type: ignore[attr-defined]


def layer_for(kind: str, dtype: str, quantization: str) -> Any:
    """``oasr_layer``'s answer: :func:`recurrent_layer` for ``LSTM``, ``RNN`` and ``GRU`` in
    fp16/bf16, else None."""
    if kind in set(KINDS.values()) and dtype in DTYPES and quantization == "none":
        return recurrent_layer
    return None
