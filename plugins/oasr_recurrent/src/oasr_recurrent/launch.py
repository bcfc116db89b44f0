"""ctypes binding of the recurrent launchers: loaded lane libraries, prepared calls.

Every unit exports the family ABI (``csrc/oasr_recurrent/lstm_step.cuh``): the kit's call
record (m = B, n = H, k = I, the dtype code) and nine operand pointers. A call shape's plan is
the kit's :class:`~oasr_core.kit.calls.PreparedCall`; a served step costs one Python frame,
one ctypes call and the launch, on torch's current stream. The kernels need no workspace.
Production libraries and call plans are the kit's :class:`~oasr_core.kit.Serving`
(:data:`SERVING`).

A loaded module's kernels are, per config id, its launchers per cell op (:func:`bind_cells`:
``{"lstm_step": Kernel, "rnn_tanh_step": Kernel, ...}``, the cells whose units the module
links); the libraries compare what a module holds with what an epoch wants as ``(op, config
id)`` pairs (:func:`oasr_recurrent.jit.wanted`).
"""

from __future__ import annotations

import ctypes
from typing import Any

import attrs
from oasr_core.jit.kit import CallArgs
from oasr_core.kit.binding import BoundKernel, status_text
from oasr_core.kit.calls import PreparedCall
from oasr_core.kit.serving import LaunchError, Serving
from oasr_core.types import Config

from oasr_recurrent.codegen import DTYPE_CODE
from oasr_recurrent.lanes import fits_arch, symbol
from oasr_recurrent.ops_names import CELL_OPS, CELL_STATE, FAMILY

__all__ = ["Kernel", "SERVING", "bind_cells", "call_args", "is_available", "status_text"]


def call_args(batch: int, input_size: int, hidden: int, dtype: str) -> CallArgs:
    """The kit's call record of one step: m = B, n = H, k = I, the dtype's code."""
    return CallArgs(m=batch, n=hidden, k=input_size, dtype=DTYPE_CODE[dtype], act=0, split=1,
                    flags=0)


@attrs.define(eq=False)
class Kernel(BoundKernel):
    """One config's launcher and workspace query for one cell op in a loaded library."""

    LAUNCH = (ctypes.c_void_p,) * 11
    """The call record, x, h, c0, w_ih, w_hh, b_ih, b_hh, h1, c1, the stream."""
    WORKSPACE = (ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32)
    """batch, input, hidden, the dtype code."""

    symbol_of = staticmethod(symbol)
    cell: str = "lstm_step"
    """The cell op the launcher computes (one of ``CELL_OPS``)."""

    @classmethod
    def bind(cls, module: Any, config: Config, cell: str = "lstm_step") -> Kernel:
        """Bind ``config``'s symbols for ``cell`` in a :class:`oasr_core.jit.LoadedModule`
        (raises if absent)."""
        return attrs.evolve(cls.bind_symbol(module, config, symbol(config, cell)), cell=cell)

    def prepare(self, batch: int, input_size: int, hidden: int, dtype: str) -> PreparedCall:
        """The per-shape call; a :class:`LaunchError` when the unit cannot run the shape."""
        if self.workspace_fn(batch, input_size, hidden, DTYPE_CODE[dtype]) < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id}: cannot run B={batch} "
                              f"I={input_size} H={hidden} {dtype}")
        return PreparedCall(self.fn, call_args(batch, input_size, hidden, dtype), self.config)

    def run(self, x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
            b_hh: Any = None) -> Any:
        """Run this config's cell on torch tensors (no selection, no memo): tests and
        benchmarks. Operands contiguous fp16/bf16 on the current device (``c`` None for a
        cell without a cell state); returns the op's output (``(h1, c1)`` for the LSTM, ``h1``
        for the others); raises :class:`LaunchError` when the launcher refuses."""
        import torch

        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}[x.dtype]
        batch, input_size = x.shape
        hidden = h.shape[1]
        state = CELL_STATE[self.cell]
        h1, c1 = torch.empty_like(h), (torch.empty_like(h) if state else None)
        plan = self.prepare(batch, input_size, hidden, dtype)
        status = plan(x.get_device(), *pointers(x, h, c if state else None, w_ih, w_hh, b_ih,
                                                b_hh, h1, c1))
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} refused {self.cell} "
                              f"B={batch} I={input_size} H={hidden} {dtype}: "
                              f"{status_text(status)}")
        return (h1, c1) if state else h1


def pointers(*tensors: Any) -> tuple[int, ...]:
    """The launcher's operand pointers (0 for None)."""
    return tuple(0 if t is None else t.data_ptr() for t in tensors)


def bind_cells(module: Any, config: Config) -> dict[str, Kernel]:
    """``config``'s launcher per cell op whose unit ``module`` exports."""
    return {cell: Kernel.bind(module, config, cell) for cell in CELL_OPS
            if symbol(config, cell) in module.exports}


def bind_module(module: Any, configs: Any) -> dict[str, dict[str, Kernel]]:
    """Per config id of ``configs``, its launchers in ``module`` (:func:`bind_cells`); a
    config none of whose units the module exports is absent."""
    bound = {c.id: bind_cells(module, c) for c in configs}
    return {cid: cells for cid, cells in bound.items() if cells}


def held(kernels: Any) -> set[tuple[str, str]]:
    """``(op, config id)`` of every launcher a loaded module's kernels hold."""
    return {(cell, cid) for cid, cells in kernels.items() for cell in cells}


def _load(lane: str, arch: str) -> Any:
    from oasr_recurrent import jit

    return SERVING.load(lane, arch, jit.MODULES.production_spec,
                        lambda module: bind_module(module, jit.lane_configs(lane, arch)))


def _wanted(lane: str, arch: str) -> Any:
    from oasr_recurrent import jit

    return jit.wanted(lane, arch)


SERVING = Serving(FAMILY, load=_load, ids=held, wanted=_wanted, category=RuntimeWarning)
"""The recurrent ops' plans per epoch, fallback counters, warnings and production
libraries."""
LIBRARIES = SERVING.libraries


def is_available(config: Config) -> bool:
    """``Lane.is_available``: False only for a config of which this process's loaded module
    holds no unit."""
    return SERVING.holds(config, config.id, fits_arch)
