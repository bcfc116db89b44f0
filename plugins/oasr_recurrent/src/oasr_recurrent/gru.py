"""The GRU cell step, eager and as a torch custom op: ``torch.gru_cell`` exactly.

``gru_step(x, h, w_ih, w_hh, b_ih=None, b_hh=None) -> h1`` is one step of one ``nn.GRU``
layer: ``x (B, I)``, ``h (B, H)``, ``w_ih (3H, I)``, ``w_hh (3H, H)``, biases ``(3H,)`` or
None, gate rows r, z, n (torch's order); ``r = sigmoid(x W_ir + b_ir + h W_hr + b_hr)``, ``z``
likewise, ``n = tanh(x W_in + b_in + r * (h W_hn + b_hn))``, ``h1 = (1 - z) * n + z * h``.
Arguments whose sizes disagree raise one ``ValueError`` line naming the argument.

The step is the family's op ``gru_step`` (dims ``I``, ``H``, ``M`` = the batch), served as
``lstm_step`` is (:func:`oasr_recurrent.ops.serve`): a call shape resolves once per tuning
epoch through ``oasr_core.select`` to a config of the lane (one launch of its GRU unit: the
r and z gates and the n gate's input and hidden parts accumulated apart, then the update) or
to ``torch.gru_cell``: every shape no tuning entry covers, and what the kernels do not take
(CPU tensors, fp32, ..., autograd), counted on the family's counters
(:func:`oasr_recurrent.ops.stats`) by reason. ``torch.ops.oasr.gru_step`` is the same step
registered with ``torch.library`` (with a fake implementation), so it traces under
``torch.compile`` and runs in CUDA graphs; the Python function routes to it while
compiling.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from oasr_core.kit.ops import custom_op, torch_path

from oasr_recurrent import numerics
from oasr_recurrent.launch import SERVING
from oasr_recurrent.ops import serve
from oasr_recurrent.ops_names import CELL_GATES
from oasr_recurrent.rnn import check_arguments

__all__ = ["GATES", "gru_step", "torch_cell"]

GATES = CELL_GATES["gru_step"]
"""Gate rows per hidden unit (r, z, n: torch's order in ``w_ih`` / ``w_hh``)."""
_compiling = torch.compiler.is_compiling


def torch_cell(x: Any, h: Any, w_ih: Any, w_hh: Any, b_ih: Any = None, b_hh: Any = None) -> Any:
    """``h1`` of ``torch.gru_cell`` (the step's torch path)."""
    return torch.gru_cell(x, h, w_ih, w_hh, b_ih, b_hh)


_torch_path = torch_path(SERVING, functools.partial(numerics.torch_cell, "gru_step"))
"""``_torch_path(reason, x, h, None, w_ih, w_hh, b_ih, b_hh)``: ``torch.gru_cell``, counted."""


def gru_step(x: torch.Tensor, h: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor,
             b_ih: torch.Tensor | None = None, b_hh: torch.Tensor | None = None) -> torch.Tensor:
    """One GRU step: ``h1`` (see the module docstring)."""
    if _compiling():
        return torch.ops.oasr.gru_step(x, h, w_ih, w_hh, b_ih, b_hh)
    return _run(x, h, w_ih, w_hh, b_ih, b_hh)


def _run(x: torch.Tensor, h: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor,
         b_ih: torch.Tensor | None, b_hh: torch.Tensor | None) -> torch.Tensor:
    check_arguments(x, h, w_ih, w_hh, b_ih, b_hh, gates=GATES,
                    where="oasr_recurrent.gru_step")
    return serve("gru_step", _torch_path, x, h, None, w_ih, w_hh, b_ih, b_hh)


def _fake(x, h, w_ih, w_hh, b_ih, b_hh):
    return h.new_empty(h.shape)


_gru_step_op = custom_op(
    "gru_step",
    "(Tensor x, Tensor h, Tensor w_ih, Tensor w_hh, Tensor? b_ih, Tensor? b_hh) -> Tensor",
    _run, _fake)
