"""Running a dense unit on torch tensors: the bound launcher, the weight packing, a reference.

:func:`bind` looks a (config, op)'s launcher up in a loaded module and returns a
:class:`DenseKernel`, whose call runs the kernel on channels-last tensors on torch's current
stream (tests, benchmarks, and the plugin's serving path, which keeps one per config). It
checks nothing the kernel checks itself: a refused call raises
:class:`~oasr_core.kit.LaunchError` with the launcher's status.

Importing this module imports no torch.
"""

from __future__ import annotations

import ctypes
from typing import Any

import attrs
from oasr_core.types import Config

from oasr_conv1d import geometry as abi
from oasr_conv1d.dense import codegen

_TORCH_DTYPE_NAME = {"torch.float16": "fp16", "torch.bfloat16": "bf16"}
_LAUNCH_ARGTYPES = (ctypes.c_void_p,) * 7
_WORKSPACE_ARGTYPES = (ctypes.c_void_p, ctypes.c_int32)
"""Addresses for the records, as the plugin's serving binding declares them (one ctypes
function object per symbol is shared by every binder in a process, so they must agree)."""


def pack_weight(weight: Any) -> Any:
    """nn.Conv1d's weight ``(Cout, Cin, k)`` as the dense units read it: ``(Cout, k, Cin)``
    contiguous (CUTLASS's KRSC filter with R = 1). Pack once per layer, not per call."""
    if weight.dim() != 3:
        raise ValueError(f"oasr_conv1d.dense.pack_weight: weight of shape {tuple(weight.shape)} "
                         f"is not (Cout, Cin, k)")
    return weight.permute(0, 2, 1).contiguous()


def reference(x: Any, weight: Any, bias: Any = None, *, stride: int = 1, padding: int = 0,
              dilation: int = 1, activation: str | None = None) -> Any:
    """The fp32 result the kernels approximate: ``act(conv1d(x, w) + bias)`` on channels-last
    ``x (B, T, Cin)`` with nn.Conv1d's ``weight (Cout, Cin, k)``, returned ``(B, T_out, Cout)``
    in float32."""
    import torch.nn.functional as F

    y = F.conv1d(x.float().transpose(1, 2), weight.float(),
                 None if bias is None else bias.float(), stride, padding, dilation)
    y = y.transpose(1, 2)
    if activation == "relu":
        y = F.relu(y)
    elif activation == "gelu":
        y = F.gelu(y)
    elif activation == "silu":
        y = F.silu(y)
    elif activation is not None:
        raise ValueError(f"oasr_conv1d.dense.reference: unknown activation {activation!r}")
    return y


@attrs.define(eq=False)
class DenseKernel:
    """One (config, op)'s launcher and workspace query in a loaded module."""

    config: Config
    op: str
    fn: Any
    workspace_fn: Any

    @property
    def activation(self) -> str | None:
        """The activation the op applies (None for ``conv1d``)."""
        return codegen.ACTIVATION_OF_OP[self.op]

    def workspace(self, geo: abi.Geometry, dtype: str) -> int:
        """Scratch bytes of one call (-1: the unit cannot run this geometry or dtype)."""
        return int(self.workspace_fn(ctypes.addressof(geo), abi.DTYPE_CODE[dtype]))

    def status(self, x: Any, packed_weight: Any, bias: Any = None, *, stride: int = 1,
               padding: int = 0, dilation: int = 1, out: Any = None,
               flags: int = 0) -> tuple[int, Any]:
        """Launch on channels-last ``x (B, T, Cin)`` with a packed weight ``(Cout, k, Cin)``;
        returns ``(status, out)`` without raising (refusal tests read the status)."""
        import torch

        batch, t_in, c_in = x.shape
        c_out, kernel, _ = packed_weight.shape
        geo = abi.geometry(batch, t_in, c_in, c_out, kernel, stride, padding, dilation)
        dtype = _TORCH_DTYPE_NAME[str(x.dtype)]
        call = abi.call_args(geo, dtype, self.activation, flags)
        if out is None:
            out = torch.empty((batch, geo.t_out, c_out), dtype=x.dtype, device=x.device)
        scratch = self.workspace(geo, dtype)
        buffer = None
        if scratch > 0:
            buffer = torch.empty(scratch, dtype=torch.uint8, device=x.device)
            call.workspace, call.workspace_bytes = buffer.data_ptr(), scratch
        stream = torch.cuda.current_stream(x.device).cuda_stream
        status = self.fn(ctypes.addressof(call), ctypes.addressof(geo), x.data_ptr(),
                         packed_weight.data_ptr(), 0 if bias is None else bias.data_ptr(),
                         out.data_ptr(), stream)
        del buffer  # the caching allocator keeps it alive for work queued on the stream
        return int(status), out

    def __call__(self, x: Any, packed_weight: Any, bias: Any = None, *, stride: int = 1,
                 padding: int = 0, dilation: int = 1, out: Any = None, flags: int = 0) -> Any:
        """Run the kernel (see :meth:`status`); :class:`~oasr_core.kit.LaunchError` when the
        launcher refuses."""
        from oasr_core.kit import LaunchError

        status, out = self.status(x, packed_weight, bias, stride=stride, padding=padding,
                                  dilation=dilation, out=out, flags=flags)
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} ({self.op}) refused "
                              f"x{tuple(x.shape)} w{tuple(packed_weight.shape)} "
                              f"stride={stride} pad={padding} dil={dilation}: "
                              f"{codegen.kit.STATUS.get(status, status)}")
        return out


def bind(module: Any, config: Config, op: str = "conv1d") -> DenseKernel:
    """The :class:`DenseKernel` of (``config``, ``op``) in a loaded module (``JitBuildError``
    from the module when the unit is missing)."""
    from oasr_core.kit.binding import bind_launcher

    return DenseKernel(config, op, *bind_launcher(module, codegen.symbol(config, op),
                                                  _LAUNCH_ARGTYPES, _WORKSPACE_ARGTYPES))
