"""The recurrent family's names (importable without torch): its ops and their key.

Each op is one step of one recurrent layer, a cell of the lane's kernel template
(``csrc/oasr_recurrent/lstm_step.cuh``): ``lstm_step`` (``torch.lstm_cell``),
``rnn_tanh_step`` / ``rnn_relu_step`` (``torch.rnn_tanh_cell`` / ``torch.rnn_relu_cell``),
``gru_step`` (``torch.gru_cell``).
A tuning entry is keyed by the layer's input width ``I`` and hidden width ``H``
(``recurrent|op=lstm_step|dt=half|I=640|H=640``) and indexed by ``M`` = the batch (the
hypotheses a transducer decodes together).
"""

from __future__ import annotations

FAMILY = "recurrent"
OPS = ("lstm_step", "rnn_tanh_step", "rnn_relu_step", "gru_step")
"""The family's ops: every cell the lane's kernel template computes."""
DIMS = ("I", "H")
LANE = "sm80_recurrent"
"""The family's one lane: CUDA-core recurrent step kernels (16-byte loads, fp32 FMA),
sm80..sm90."""
LANES = (LANE,)
GATES = 4
"""Gate rows per hidden unit of the LSTM (i, f, g, o: torch's order in ``w_ih`` / ``w_hh``)."""
CELL_OPS = OPS
"""The cells the lane's kernel template computes, one op each."""
CELL_GATES = {"lstm_step": GATES, "rnn_tanh_step": 1, "rnn_relu_step": 1, "gru_step": 3}
"""Weight rows per hidden unit of each cell (``w_ih`` is ``(gates * H, I)``)."""
CELL_ROWS = {**CELL_GATES, "gru_step": 4}
"""Dot products a CTA accumulates per hidden unit of each cell (its warp groups' rows): one
per gate row, the GRU's n gate two (its input and hidden parts apart)."""
CELL_STATE = {"lstm_step": True, "rnn_tanh_step": False, "rnn_relu_step": False,
              "gru_step": False}
"""Whether the cell carries a cell state ``c`` beside ``h`` (the LSTM's)."""
