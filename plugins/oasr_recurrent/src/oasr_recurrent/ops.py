"""The recurrent family's LSTM step, eager and as a torch custom op, and the serving path of
every cell op (:func:`serve`: also the RNN and GRU steps', :mod:`oasr_recurrent.rnn`,
:mod:`oasr_recurrent.gru`).

``lstm_step(x, h, c, w_ih, w_hh, b_ih=None, b_hh=None) -> (h1, c1)`` is one step of one LSTM
layer, ``torch.lstm_cell``'s semantics: ``x (B, I)``, ``h, c (B, H)``, ``w_ih (4H, I)``,
``w_hh (4H, H)``, biases ``(4H,)`` or None; gates ``x w_ih^T + b_ih + h w_hh^T + b_hh``
chunked i, f, g, o; ``c1 = sigmoid(f) c + sigmoid(i) tanh(g)``, ``h1 = sigmoid(o) tanh(c1)``.
Arguments whose sizes disagree raise one ``ValueError`` line naming the argument.

A call shape resolves once per tuning epoch through ``oasr_core.select("recurrent", op,
dtype, (I, H), B)``; the plan (a prepared launcher of the config's unit for the op, or the
torch path) is memoised per (op, dtype, B, I, H, device) by the kit's
:class:`~oasr_core.kit.Serving` (:data:`oasr_recurrent.launch.SERVING`). A served step is one
kernel launch writing fresh ``h1`` (and ``c1`` for the LSTM).

The torch path is the op's torch cell (``torch.lstm_cell`` here). It serves what the kernels
do not take (CPU tensors, fp32, mixed dtypes or devices, non-contiguous or misaligned
tensors, widths not a multiple of 8, autograd) and every shape no tuning entry covers
(``Family.untuned`` is torch: never slower than not installing oasr), counted by reason
(:func:`stats`); a module that cannot be built, or a launcher that refuses, is warned about
once per epoch and torch serves: slower, never wrong.

``torch.ops.oasr.lstm_step`` is the same op registered with ``torch.library`` (with a fake
implementation), so it traces under ``torch.compile`` and runs in CUDA graphs; the Python
function routes to it while compiling.
"""

from __future__ import annotations

from typing import Any

import torch
from oasr_core.kit import TORCH
from oasr_core.kit.ops import HALF_DTYPES, custom_op, resolve, torch_path
from oasr_core.runtime import device_arch_of

from oasr_recurrent.launch import SERVING, LaunchError, status_text
from oasr_recurrent.numerics import torch_step
from oasr_recurrent.ops_names import FAMILY, GATES
from oasr_recurrent.space import VECTOR

__all__ = ["lstm_step", "stats", "reset_stats", "clear_memo", "check_arguments", "serve"]

_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_PLANS = SERVING.plans
stats, reset_stats, clear_memo = SERVING.stats, SERVING.reset_stats, SERVING.clear
_torch_path = torch_path(SERVING, torch_step)
"""``_torch_path(reason, x, h, c, w_ih, w_hh, b_ih, b_hh)``: ``torch.lstm_cell``, counted."""


def lstm_step(x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w_ih: torch.Tensor,
              w_hh: torch.Tensor, b_ih: torch.Tensor | None = None,
              b_hh: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step: ``(h1, c1)`` (see the module docstring)."""
    if _compiling():
        return torch.ops.oasr.lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh)
    return _run(x, h, c, w_ih, w_hh, b_ih, b_hh)


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(t.shape)


def check_arguments(x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any,
                    b_hh: Any) -> None:
    """Raise one ``ValueError`` line naming the first argument whose size disagrees with
    ``x (B, I)`` / ``h (B, H)`` (``torch.lstm_cell`` takes batched operands only)."""
    where = "oasr_recurrent.lstm_step"
    for name, t in (("x", x), ("h", h), ("c", c), ("w_ih", w_ih), ("w_hh", w_hh)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{where}: {name} must be a tensor; got {type(t).__name__}")
    if x.dim() != 2 or h.dim() != 2:
        raise ValueError(f"{where}: x and h must be (B, I) and (B, H); got x {_shape(x)} and "
                         f"h {_shape(h)}")
    hidden, input_size = h.shape[1], x.shape[1]
    if x.shape[0] != h.shape[0]:
        raise ValueError(f"{where}: x {_shape(x)} and h {_shape(h)} disagree on the batch")
    expected = (("c", c, _shape(h)), ("w_ih", w_ih, (GATES * hidden, input_size)),
                ("w_hh", w_hh, (GATES * hidden, hidden)),
                ("b_ih", b_ih, (GATES * hidden,)), ("b_hh", b_hh, (GATES * hidden,)))
    for name, t, shape in expected:
        if t is not None and (not isinstance(t, torch.Tensor) or _shape(t) != shape):
            got = _shape(t) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{where}: {name} must be of shape {shape} for I={input_size} "
                             f"H={hidden}; got {got}")


def _unsupported(x: torch.Tensor, h: torch.Tensor, c: torch.Tensor | None,
                 w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor | None,
                 b_hh: torch.Tensor | None) -> str | None:
    """Why the kernels cannot take these operands (None: they can), as the torch path's
    reason. ``x`` is on a CUDA device (the caller checked); ``c`` is None for a cell without
    a cell state."""
    dtype = x.dtype
    if dtype not in HALF_DTYPES:
        return "dtype"
    operands = (h, w_ih, w_hh) + tuple(t for t in (c, b_ih, b_hh) if t is not None)
    dev = x.get_device()
    for t in operands:
        if t.dtype != dtype:
            return "dtype"
        if t.get_device() != dev:
            return "device"
    if not all(t.is_contiguous() for t in (x, *operands)):
        return "noncontiguous"
    if x.shape[1] % VECTOR or h.shape[1] % VECTOR:
        return "unaligned"
    if (x.data_ptr() | h.data_ptr() | w_ih.data_ptr() | w_hh.data_ptr()) & 15:
        return "misaligned"
    if _grad_enabled() and any(t.requires_grad for t in (x, *operands)):
        return "autograd"
    return None


def _run(x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w_ih: torch.Tensor,
         w_hh: torch.Tensor, b_ih: torch.Tensor | None,
         b_hh: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    check_arguments(x, h, c, w_ih, w_hh, b_ih, b_hh)
    return serve("lstm_step", _torch_path, x, h, c, w_ih, w_hh, b_ih, b_hh)


def serve(op: str, torch_path: Any, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor | None,
          w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor | None,
          b_hh: torch.Tensor | None) -> Any:
    """One step of the cell ``op`` on checked operands: the tiers' kernel, or
    ``torch_path(reason, x, h, c, w_ih, w_hh, b_ih, b_hh)`` (the kit's counted torch path)
    where it cannot or need not serve (module docstring). Returns the op's output: ``(h1,
    c1)`` for ``lstm_step``, ``h1`` for a cell without a cell state (``c`` None)."""
    dev = x.get_device()
    if dev < 0:
        return torch_path("cpu", x, h, c, w_ih, w_hh, b_ih, b_hh)
    batch, input_size = x.shape
    hidden = h.shape[1]
    key = (op, x.dtype, batch, input_size, hidden, dev)
    plan = _PLANS.table.get(key)
    if plan is TORCH:
        return torch_path("selected", x, h, c, w_ih, w_hh, b_ih, b_hh)
    reason = _unsupported(x, h, c, w_ih, w_hh, b_ih, b_hh)
    if reason is not None:
        return torch_path(reason, x, h, c, w_ih, w_hh, b_ih, b_hh)
    if plan is None:
        plan = resolve(dev, _plan, key)
        if plan is TORCH:
            return torch_path("selected", x, h, c, w_ih, w_hh, b_ih, b_hh)
    h1 = plan.output(x, hidden)
    c1 = None if c is None else plan.output(x, hidden)
    status = plan(dev, x.data_ptr(), h.data_ptr(), 0 if c is None else c.data_ptr(),
                  w_ih.data_ptr(), w_hh.data_ptr(), 0 if b_ih is None else b_ih.data_ptr(),
                  0 if b_hh is None else b_hh.data_ptr(), h1.data_ptr(),
                  0 if c1 is None else c1.data_ptr())
    if status:
        return torch_path.refused(key, plan.config, status_text(status),
                                  f"op={op} B={batch} I={input_size} H={hidden}",
                                  x, h, c, w_ih, w_hh, b_ih, b_hh)
    return h1 if c1 is None else (h1, c1)


def _plan(key: tuple) -> Any:
    """Resolve one call shape: select a config, bind its launcher for the op, prepare the
    call (the miss path, :func:`oasr_core.kit.ops.resolve`)."""
    import oasr_core

    op, tdtype, batch, input_size, hidden, dev = key
    dtype, arch = HALF_DTYPES[tdtype], device_arch_of(dev)

    def prepare(cells: Any) -> Any:
        kernel = cells.get(op)
        if kernel is None:
            raise LaunchError(f"the loaded module has no {op} unit of this config")
        return kernel.prepare(batch, input_size, hidden, dtype)

    return SERVING.plan(
        key, arch,
        select=lambda: oasr_core.select(FAMILY, op, dtype, (input_size, hidden),
                                        batch, arch).config,
        kernel_key=lambda config: config.id, prepare=prepare,
        what=f"op={op} {dtype} I={input_size} H={hidden}")


def _fake(x, h, c, w_ih, w_hh, b_ih, b_hh):
    return h.new_empty(h.shape), c.new_empty(c.shape)


_lstm_step_op = custom_op(
    "lstm_step",
    "(Tensor x, Tensor h, Tensor c, Tensor w_ih, Tensor w_hh, Tensor? b_ih, Tensor? b_hh) "
    "-> (Tensor, Tensor)",
    _run, _fake)
