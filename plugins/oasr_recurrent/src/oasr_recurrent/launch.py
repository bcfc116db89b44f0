"""ctypes binding of the recurrent launchers: loaded lane libraries, prepared calls.

Every unit exports the family ABI (``csrc/oasr_recurrent/lstm_step.cuh``): the kit's call
record (m = B, n = H, k = I, the dtype code) and nine operand pointers. A call shape's plan is
the kit's :class:`~oasr_core.kit.calls.PreparedCall`; a served step costs one Python frame,
one ctypes call and the launch, on torch's current stream. The kernels need no workspace.
Production libraries and call plans are the kit's :class:`~oasr_core.kit.Serving`
(:data:`SERVING`).
"""

from __future__ import annotations

import ctypes
from typing import Any

import attrs
from oasr_core.jit.kit import CallArgs
from oasr_core.kit.binding import BoundKernel, status_text
from oasr_core.kit.calls import PreparedCall
from oasr_core.kit.records import availability, module_serving
from oasr_core.kit.serving import LaunchError
from oasr_core.types import Config

from oasr_recurrent.codegen import DTYPE_CODE
from oasr_recurrent.lanes import fits_arch, symbol
from oasr_recurrent.ops_names import FAMILY

__all__ = ["Kernel", "SERVING", "call_args", "is_available", "status_text"]


def call_args(batch: int, input_size: int, hidden: int, dtype: str) -> CallArgs:
    """The kit's call record of one step: m = B, n = H, k = I, the dtype's code."""
    return CallArgs(m=batch, n=hidden, k=input_size, dtype=DTYPE_CODE[dtype], act=0, split=1,
                    flags=0)


@attrs.define(eq=False)
class Kernel(BoundKernel):
    """One config's launcher and workspace query in a loaded library."""

    LAUNCH = (ctypes.c_void_p,) * 11
    """The call record, x, h, c0, w_ih, w_hh, b_ih, b_hh, h1, c1, the stream."""
    WORKSPACE = (ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32)
    """batch, input, hidden, the dtype code."""

    symbol_of = staticmethod(symbol)

    @classmethod
    def bind(cls, module: Any, config: Config) -> Kernel:
        """Bind ``config``'s symbols in a :class:`oasr_core.jit.LoadedModule` (raises if
        absent)."""
        return cls.bind_symbol(module, config, symbol(config))

    def prepare(self, batch: int, input_size: int, hidden: int, dtype: str) -> PreparedCall:
        """The per-shape call; a :class:`LaunchError` when the unit cannot run the shape."""
        if self.workspace_fn(batch, input_size, hidden, DTYPE_CODE[dtype]) < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id}: cannot run B={batch} "
                              f"I={input_size} H={hidden} {dtype}")
        return PreparedCall(self.fn, call_args(batch, input_size, hidden, dtype), self.config)

    def run(self, x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any = None,
            b_hh: Any = None) -> tuple[Any, Any]:
        """Run this config on torch tensors (no selection, no memo): tests and benchmarks.
        Operands contiguous fp16/bf16 on the current device; raises :class:`LaunchError` when
        the launcher refuses."""
        import torch

        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}[x.dtype]
        batch, input_size = x.shape
        hidden = h.shape[1]
        h1, c1 = torch.empty_like(h), torch.empty_like(c)
        plan = self.prepare(batch, input_size, hidden, dtype)
        status = plan(x.get_device(), *pointers(x, h, c, w_ih, w_hh, b_ih, b_hh, h1, c1))
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} refused B={batch} "
                              f"I={input_size} H={hidden} {dtype}: {status_text(status)}")
        return h1, c1


def pointers(*tensors: Any) -> tuple[int, ...]:
    """The launcher's operand pointers (0 for None)."""
    return tuple(0 if t is None else t.data_ptr() for t in tensors)


SERVING = module_serving(FAMILY, modules="oasr_recurrent.jit", kernel=Kernel,
                         category=RuntimeWarning)
"""The recurrent op's plans per epoch, fallback counters, warnings and production libraries."""
is_available = availability(SERVING, fits_arch)
"""``Lane.is_available``: False only for a config this process's loaded module lacks."""
LIBRARIES = SERVING.libraries
