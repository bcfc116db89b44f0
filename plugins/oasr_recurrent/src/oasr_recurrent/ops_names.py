"""The recurrent family's names (importable without torch): its one op and its key.

``lstm_step`` is one step of one LSTM layer; a tuning entry is keyed by the layer's input
width ``I`` and hidden width ``H`` (``recurrent|op=lstm_step|dt=half|I=640|H=640``) and
indexed by ``M`` = the batch (the hypotheses a transducer decodes together).
"""

from __future__ import annotations

FAMILY = "recurrent"
OPS = ("lstm_step",)
DIMS = ("I", "H")
LANE = "sm80_recurrent"
"""The family's one lane: CUDA-core LSTM step kernels (16-byte loads, fp32 FMA), sm80..sm90."""
LANES = (LANE,)
GATES = 4
"""Gate rows per hidden unit (i, f, g, o: torch's order in ``w_ih`` / ``w_hh``)."""
CELL_OPS = ("lstm_step", "rnn_tanh_step", "rnn_relu_step")
"""The cells the lane's kernel template computes (``csrc/oasr_recurrent/lstm_step.cuh``); the
Elman RNN steps have kernels and units but are not yet ops of :data:`OPS`."""
CELL_GATES = {"lstm_step": GATES, "rnn_tanh_step": 1, "rnn_relu_step": 1}
"""Gate rows per hidden unit of each cell."""
