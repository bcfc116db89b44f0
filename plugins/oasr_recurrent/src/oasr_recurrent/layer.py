"""An ``nn.LSTM`` one token step at a time through :func:`oasr_recurrent.ops.lstm_step`, and
the family's answer to ``oasr_layer("LSTM", ...)`` (:func:`oasr_core.route`).

:func:`lstm_layer_step` is ``lstm(x_t, state)`` for an input of one time step: each layer's
step is one ``lstm_step`` call (the kernel where the tiers choose one, ``torch.lstm_cell``
otherwise), the layers chained through their hidden state. It takes what ``nn.LSTM`` takes for
such a step: ``x_t`` batch-first ``(B, 1, I)``, sequence-first ``(1, B, I)`` or unbatched
``(1, I)``, ``state`` None (zeros) or ``(h0, c0)`` each ``(L, B, H)`` (unbatched ``(L, H)``),
and returns ``(output, (h_n, c_n))`` shaped as the module's own forward returns them.

:func:`lstm_forward` is a routed module's forward (``lstm_layer.forward``): an input of one
time step on a module the step serves (unidirectional, no projection, in eval mode) goes
through :func:`lstm_layer_step`; any other call (a sequence, a ``PackedSequence``, a
bidirectional or projected LSTM, training mode) runs the module's own forward, unchanged.
:func:`torch_only` tells the router when every call of a module is torch's anyway (no tier
can serve a kernel at any batch for one of its layers' widths, or the module is not one the
step serves): the module then keeps its own forward, and a routed LSTM costs nothing.
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


def steps(lstm: Any) -> bool:
    """Whether :func:`lstm_layer_step` serves ``lstm`` (in eval mode): a unidirectional
    ``nn.LSTM`` without projection."""
    import torch.nn as nn

    return (isinstance(lstm, nn.LSTM) and not lstm.bidirectional
            and getattr(lstm, "proj_size", 0) == 0 and lstm.mode == "LSTM")


def _seq_dim(lstm: Any, x: Any) -> int:
    return 1 if lstm.batch_first and x.dim() == 3 else 0


def lstm_layer_step(lstm: Any, x_t: Any, state: tuple[Any, Any] | None = None) -> Any:
    """``lstm(x_t, state)`` for one time step, each layer through ``lstm_step`` (module
    docstring). A ``ValueError`` names an input that is not one step of what ``lstm`` takes;
    an LSTM the step does not serve (:func:`steps`) or one in training mode runs its own
    forward."""
    if not steps(lstm) or lstm.training:
        return type(lstm).forward(lstm, x_t, state)
    if x_t.dim() not in (2, 3) or x_t.shape[_seq_dim(lstm, x_t)] != 1 \
            or x_t.shape[-1] != lstm.input_size:
        raise ValueError(f"lstm_layer_step: x_t of shape {tuple(x_t.shape)} is not one step "
                         f"of input size {lstm.input_size} (batch_first={lstm.batch_first})")
    unbatched = x_t.dim() == 2
    x = x_t.reshape(-1, lstm.input_size)
    batch = x.shape[0]
    layers, hidden = lstm.num_layers, lstm.hidden_size
    if state is None:
        zeros = x.new_zeros((batch, hidden))
        h0 = c0 = [zeros] * layers
    else:
        h_in, c_in = state
        h0 = h_in.reshape(layers, batch, hidden)
        c0 = c_in.reshape(layers, batch, hidden)
    step = _ops().lstm_step
    p = lstm._parameters
    hs, cs = [], []
    for layer in range(layers):
        x, c = step(x, h0[layer], c0[layer], p[f"weight_ih_l{layer}"], p[f"weight_hh_l{layer}"],
                    p.get(f"bias_ih_l{layer}"), p.get(f"bias_hh_l{layer}"))
        hs.append(x)
        cs.append(c)
    if layers == 1:
        h_n, c_n = hs[0].unsqueeze(0), cs[0].unsqueeze(0)
    else:
        import torch

        h_n, c_n = torch.stack(hs), torch.stack(cs)
    if unbatched:
        return x, (h_n.squeeze(1), c_n.squeeze(1))
    return x.unsqueeze(_seq_dim(lstm, x_t)), (h_n, c_n)


def lstm_forward(lstm: Any, input: Any, hx: Any = None) -> Any:
    """A routed ``nn.LSTM``'s forward: one time step through :func:`lstm_layer_step`, every
    other call the module's own forward (module docstring)."""
    import torch

    if (isinstance(input, torch.Tensor) and not lstm.training and steps(lstm)
            and input.dim() in (2, 3) and input.shape[_seq_dim(lstm, input)] == 1):
        return lstm_layer_step(lstm, input, hx)
    return type(lstm).forward(lstm, input, hx)


def layer_widths(lstm: Any) -> tuple[tuple[int, int], ...]:
    """``(I, H)`` of each layer: the signatures its steps are keyed by."""
    hidden = lstm.hidden_size
    return tuple((lstm.input_size if i == 0 else hidden, hidden) for i in range(lstm.num_layers))


def torch_only(lstm: Any, dtype: str) -> bool:
    """Whether every call of the routed ``lstm`` is torch's whatever its input: the step does
    not serve the module (:func:`steps`), or no tier can serve a kernel at any batch for any
    of its layers' widths (:func:`oasr_core.selection.torch_at_every_m`). :func:`oasr_core.
    route` then leaves the module its own forward (``lstm_layer.torch_only``) until a reload;
    a module one of whose layers a tier serves steps through the op, layer by layer."""
    from oasr_core.selection import torch_at_every_m

    from oasr_recurrent.ops_names import FAMILY

    if not steps(lstm):
        return True
    return all(torch_at_every_m(FAMILY, "lstm_step", dtype, dims)
               for dims in layer_widths(lstm))


def lstm_layer(x: Any, layer: Any, activation: str | None = None) -> Any:
    """``layer(x)`` for an ``nn.LSTM`` ``layer`` (the ``oasr_layer`` protocol's form): its
    output sequence; ``activation`` must be None (an LSTM's own nonlinearities are its
    gates')."""
    if activation is not None:
        raise ValueError(f"lstm_layer: an LSTM takes no activation after it; got "
                         f"{activation!r}")
    return lstm_forward(layer, x)[0]


lstm_layer.forward = lstm_forward  # type: ignore[attr-defined]
lstm_layer.torch_only = torch_only  # type: ignore[attr-defined]


def layer_for(kind: str, dtype: str, quantization: str) -> Any:
    """``oasr_layer``'s answer: :func:`lstm_layer` for ``LSTM`` in fp16/bf16, else None."""
    if kind == "LSTM" and dtype in DTYPES and quantization == "none":
        return lstm_layer
    return None
