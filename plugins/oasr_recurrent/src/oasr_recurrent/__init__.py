"""oasr_recurrent: the recurrent family of oasr (one LSTM, RNN or GRU cell step) and its lane.

``oasr_recurrent.lstm_step(x, h, c, w_ih, w_hh, b_ih=None, b_hh=None)`` is one step of one
LSTM layer, exactly ``torch.lstm_cell``: ``x (B, I)``, ``h, c (B, H)`` in, ``(h1, c1)``
out. On CUDA in fp16/bf16 one kernel launch computes the four gates of every hidden unit and
the pointwise update (fp32 math). ``oasr_recurrent.rnn_step(x, h, w_ih, w_hh, b_ih=None,
b_hh=None, nonlinearity="tanh")`` is one step of one ``nn.RNN`` layer, exactly
``torch.rnn_tanh_cell`` / ``torch.rnn_relu_cell`` (ops ``rnn_tanh_step``, ``rnn_relu_step``),
and ``oasr_recurrent.gru_step(x, h, w_ih, w_hh, b_ih=None, b_hh=None)`` one ``nn.GRU`` step,
exactly ``torch.gru_cell``; each is one kernel launch where it serves.
``oasr_recurrent.lstm_layer_step(module, x_t, state)`` runs an ``nn.LSTM``, ``nn.RNN`` or
``nn.GRU`` one token step through its cell's op (the RNN-T prediction network while
decoding). Each op's call shape resolves once per tuning epoch, through
``oasr_core.select``, to a config of the device's lane or to torch (every shape no tuning
entry covers).

Importing this package is cheap: it imports no torch and compiles nothing; the ops module
loads on first attribute access.
"""

from __future__ import annotations

from oasr_core.kit.lazy import lazy_attributes

__version__ = "0.1.0"

_OPS = {"lstm_step", "stats", "reset_stats"}
_LAYER = {"lstm_layer_step"}
_RNN = {"rnn_step"}
_GRU = {"gru_step"}

__all__ = ["__version__", *sorted(_OPS | _LAYER | _RNN | _GRU)]

_from_ops = lazy_attributes(__name__, "ops", _OPS)
_from_layer = lazy_attributes(__name__, "layer", _LAYER)
_from_rnn = lazy_attributes(__name__, "rnn", _RNN)
_from_gru = lazy_attributes(__name__, "gru", _GRU)


def __getattr__(name: str):
    if name in _RNN:
        return _from_rnn(name)
    if name in _GRU:
        return _from_gru(name)
    return (_from_layer if name in _LAYER else _from_ops)(name)
