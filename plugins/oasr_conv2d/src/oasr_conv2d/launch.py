"""ctypes binding of the conv2d launchers: loaded lane libraries, prepared calls.

Every unit exports the family ABI (``csrc/oasr_conv2d/geometry.cuh``). A call shape's plan
(:class:`ConvPlan`) holds the kit's :class:`~oasr_core.kit.calls.PreparedCall` (launcher,
call record) and the shape's :class:`~oasr_conv2d.geometry.Geometry` record, whose address it
passes; a call costs one Python frame, one ctypes call and the launch, on torch's current
stream. The 2.x kernels need no workspace (their queries answer 0 or refuse the shape).
Production libraries and call plans are the kit's :class:`~oasr_core.kit.Serving`
(:data:`SERVING`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

import attrs
from oasr_core.jit import kit
from oasr_core.kit import BufferKind, LaunchError, Serving, WorkspacePool
from oasr_core.kit.calls import PreparedCall
from oasr_core.types import Config

from oasr_conv2d import geometry as geo_mod
from oasr_conv2d.geometry import DTYPE_CODE, Geometry, describe
from oasr_conv2d.lanes import fits_arch, symbol

_LAUNCH_ARGTYPES = (ctypes.c_void_p,) * 7
_WORKSPACE_ARGTYPES = (ctypes.c_void_p, ctypes.c_int32)


@attrs.define(slots=True, eq=False)
class ConvPlan:
    """One call shape's launch: the prepared call and the geometry record it points at."""

    prepared: PreparedCall
    geometry: Geometry
    address: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.address = ctypes.addressof(self.geometry)

    @property
    def config(self) -> Config:
        return self.prepared.config

    def __call__(self, device: int, x: int, w: int, bias: int, out: int) -> int:
        """Launch on ``device``'s current stream; the launcher's status (0 = ok)."""
        return self.prepared(device, self.address, x, w, bias, out)

    def operands(self, x: int, w: int, bias: int, out: int) -> tuple[int, ...]:
        """The launcher's operands after the call record (for ``PreparedCall.launch``)."""
        return (self.address, x, w, bias, out)


@attrs.define(eq=False)
class Kernel:
    """One config's launcher and workspace query in a loaded library."""

    config: Config
    fn: Any
    workspace_fn: Any

    @classmethod
    def bind(cls, module: Any, config: Config) -> Kernel:
        """Bind ``config``'s symbols in a :class:`oasr_core.jit.LoadedModule` (raises if absent)."""
        name = symbol(config)
        fn = module.function(name)
        fn.argtypes, fn.restype = _LAUNCH_ARGTYPES, ctypes.c_int32
        ws = module.function(name + "_workspace")
        ws.argtypes, ws.restype = _WORKSPACE_ARGTYPES, ctypes.c_int64
        return cls(config, fn, ws)

    def prepare(self, geometry: Geometry, dtype: str, activation: str | None) -> ConvPlan:
        """The per-shape plan (asks once whether the unit runs this shape); a
        :class:`LaunchError` when it cannot."""
        geometry = Geometry.from_buffer_copy(geometry)
        scratch = self.workspace_fn(ctypes.addressof(geometry), DTYPE_CODE[dtype])
        if scratch < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id}: workspace query refused "
                              f"{describe(geometry)} {dtype}")
        args = geo_mod.call_args(geometry, dtype, activation)
        prepared = PreparedCall(self.fn, args, self.config,
                                (int(scratch),) if scratch else (), WORKSPACES)
        return ConvPlan(prepared, geometry)

    def run(self, x: Any, w_packed: Any, bias: Any, geometry: Geometry,
            activation: str | None = None, out: Any = None) -> Any:
        """Run this config on torch tensors (no selection, no memo): tests and benchmarks.

        ``x`` is NHWC ``(B, H, W, Cin)`` contiguous fp16/bf16 on the current device,
        ``w_packed`` the weight as :func:`oasr_conv2d.weights.pack` makes it; raises
        :class:`LaunchError` when the launcher refuses.
        """
        import torch

        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}[x.dtype]
        if out is None:
            out = torch.empty((geometry.batch, geometry.h_out, geometry.w_out, geometry.c_out),
                              dtype=x.dtype, device=x.device)
        plan = self.prepare(geometry, dtype, activation)
        status = plan(x.get_device(), x.data_ptr(), w_packed.data_ptr(),
                      bias.data_ptr() if bias is not None else 0, out.data_ptr())
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} refused "
                              f"{describe(geometry)} {dtype} {activation}: {status_text(status)}")
        return out


def status_text(status: int) -> str:
    """What a launcher status code means."""
    return kit.STATUS.get(status, f"unknown status {status}")


def _load(lane: str, arch: str) -> Mapping[str, Kernel] | None:
    from oasr_conv2d import jit

    def bind(module: Any) -> dict[str, Kernel]:
        return {c.id: Kernel.bind(module, c) for c in jit.PRODUCTION.lane_configs(lane, arch)
                if symbol(c) in module.exports}

    return SERVING.load(lane, arch, jit.production_spec, bind)


def _wanted(lane: str, arch: str) -> tuple[str, ...]:
    from oasr_conv2d import jit

    return jit.PRODUCTION.wanted(lane, arch)


def is_available(config: Config) -> bool:
    """``Lane.is_available``: False only for a config this process's loaded module lacks."""
    return SERVING.holds(config, config.id, fits_arch)


SERVING = Serving("conv2d", load=_load, ids=lambda kernels: kernels.keys(), wanted=_wanted,
                  category=RuntimeWarning)
"""The conv2d ops' plans per epoch, fallback counters, warnings and production libraries."""
WORKSPACES = WorkspacePool(
    (BufferKind("scratch", 1 << 20),),
    warn=lambda message: SERVING.warn_once("capture-alloc", f"oasr_conv2d: {message}"))
"""Scratch per (device, stream) (the 2.x kernels ask none; kept for the prepared-call ABI)."""
LIBRARIES = SERVING.libraries
