"""The Elman RNN cell steps, eager and as torch custom ops: ``torch.rnn_tanh_cell`` and
``torch.rnn_relu_cell`` exactly.

``rnn_step(x, h, w_ih, w_hh, b_ih=None, b_hh=None, nonlinearity="tanh") -> h1`` is one step of
one ``nn.RNN`` layer: ``x (B, I)``, ``h (B, H)``, ``w_ih (H, I)``, ``w_hh (H, H)``, biases
``(H,)`` or None; ``h1 = act(x w_ih^T + b_ih + h w_hh^T + b_hh)`` with ``act`` tanh or relu.
Arguments whose sizes disagree raise one ``ValueError`` line naming the argument; a
nonlinearity other than ``tanh`` / ``relu`` raises one naming it.

The steps are the family's ops ``rnn_tanh_step`` and ``rnn_relu_step`` (:data:`OPS`, dims
``I``, ``H``, ``M`` = the batch), served as ``lstm_step`` is (:func:`oasr_recurrent.ops.
serve`): a call shape resolves once per tuning epoch through ``oasr_core.select`` to a config
of the lane (one launch of its RNN unit) or to torch's cell: every shape no tuning entry
covers, and what the kernels do not take (CPU tensors, fp32, ..., autograd), counted on the
family's counters (:func:`oasr_recurrent.ops.stats`) by reason.

``torch.ops.oasr.rnn_tanh_step`` and ``torch.ops.oasr.rnn_relu_step`` are the same steps
registered with ``torch.library`` (with fake implementations), so they trace under
``torch.compile``; the Python function routes to them while compiling.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from oasr_core.kit.ops import custom_op, torch_path

from oasr_recurrent import numerics
from oasr_recurrent.launch import SERVING
from oasr_recurrent.ops import serve

__all__ = ["NONLINEARITIES", "OPS", "check_arguments", "op_of", "rnn_step", "torch_cell"]

NONLINEARITIES = ("tanh", "relu")
"""``nn.RNN``'s nonlinearities, in the order of :data:`OPS`."""
OPS = ("rnn_tanh_step", "rnn_relu_step")
"""The op each nonlinearity's step is keyed under."""
_CELLS = {"tanh": torch.rnn_tanh_cell, "relu": torch.rnn_relu_cell}
_compiling = torch.compiler.is_compiling


def op_of(nonlinearity: str) -> str:
    """The op ``nonlinearity``'s step is keyed under; one ``ValueError`` line for another."""
    if nonlinearity not in NONLINEARITIES:
        raise ValueError(f"oasr_recurrent.rnn_step: nonlinearity must be one of "
                         f"{NONLINEARITIES}; got {nonlinearity!r}")
    return OPS[NONLINEARITIES.index(nonlinearity)]


def torch_cell(nonlinearity: str, x: Any, h: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
               b_hh: Any = None) -> Any:
    """``h1`` of ``torch.rnn_<nonlinearity>_cell`` (the steps' torch path)."""
    return _CELLS[nonlinearity](x, h, w_ih, w_hh, b_ih, b_hh)


_TORCH_PATHS = {op: torch_path(SERVING, functools.partial(numerics.torch_cell, op))
                for op in OPS}
"""Per op, ``path(reason, x, h, None, w_ih, w_hh, b_ih, b_hh)``: the torch cell, counted."""


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(t.shape)


def check_arguments(x: Any, h: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any, *,
                    gates: int = 1, where: str = "oasr_recurrent.rnn_step") -> None:
    """Raise one ``ValueError`` line, headed ``where``, naming the first argument whose size
    disagrees with ``x (B, I)`` / ``h (B, H)`` and ``gates`` gate rows per hidden unit (the
    torch cells take batched operands here, as ``lstm_step`` does)."""
    for name, t in (("x", x), ("h", h), ("w_ih", w_ih), ("w_hh", w_hh)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{where}: {name} must be a tensor; got {type(t).__name__}")
    if x.dim() != 2 or h.dim() != 2:
        raise ValueError(f"{where}: x and h must be (B, I) and (B, H); got x {_shape(x)} and "
                         f"h {_shape(h)}")
    hidden, input_size = h.shape[1], x.shape[1]
    if x.shape[0] != h.shape[0]:
        raise ValueError(f"{where}: x {_shape(x)} and h {_shape(h)} disagree on the batch")
    rows = gates * hidden
    expected = (("w_ih", w_ih, (rows, input_size)), ("w_hh", w_hh, (rows, hidden)),
                ("b_ih", b_ih, (rows,)), ("b_hh", b_hh, (rows,)))
    for name, t, shape in expected:
        if t is not None and (not isinstance(t, torch.Tensor) or _shape(t) != shape):
            got = _shape(t) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{where}: {name} must be of shape {shape} for I={input_size} "
                             f"H={hidden}; got {got}")


def rnn_step(x: torch.Tensor, h: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor,
             b_ih: torch.Tensor | None = None, b_hh: torch.Tensor | None = None,
             nonlinearity: str = "tanh") -> torch.Tensor:
    """One Elman RNN step: ``h1`` (see the module docstring)."""
    op = op_of(nonlinearity)
    if _compiling():
        return getattr(torch.ops.oasr, op)(x, h, w_ih, w_hh, b_ih, b_hh)
    return _run(nonlinearity, x, h, w_ih, w_hh, b_ih, b_hh)


def _run(nonlinearity: str, x: torch.Tensor, h: torch.Tensor, w_ih: torch.Tensor,
         w_hh: torch.Tensor, b_ih: torch.Tensor | None,
         b_hh: torch.Tensor | None) -> torch.Tensor:
    check_arguments(x, h, w_ih, w_hh, b_ih, b_hh)
    op = op_of(nonlinearity)
    return serve(op, _TORCH_PATHS[op], x, h, None, w_ih, w_hh, b_ih, b_hh)


def _fake(x, h, w_ih, w_hh, b_ih, b_hh):
    return h.new_empty(h.shape)


_SCHEMA = ("(Tensor x, Tensor h, Tensor w_ih, Tensor w_hh, Tensor? b_ih, Tensor? b_hh) "
           "-> Tensor")
_rnn_tanh_step_op = custom_op("rnn_tanh_step", _SCHEMA,
                              lambda *args: _run("tanh", *args), _fake)
_rnn_relu_step_op = custom_op("rnn_relu_step", _SCHEMA,
                              lambda *args: _run("relu", *args), _fake)
