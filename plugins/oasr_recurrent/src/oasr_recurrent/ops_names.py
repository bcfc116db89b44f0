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
