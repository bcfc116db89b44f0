"""ctypes binding of the conv1d launchers: loaded lane libraries, prepared calls, workspaces.

Every unit, dense or depthwise, exports the family ABI (``csrc/oasr_conv1d/geometry.cuh``),
so one :class:`Kernel` binds either. A call shape's plan (:class:`ConvPlan`) holds the
kit's :class:`~oasr_core.kit.calls.PreparedCall` (launcher, call record, workspace sizes) and
the shape's :class:`~oasr_conv1d.geometry.Geometry` record, whose address it passes; a call
costs one Python frame, one ctypes call and the launch, on torch's current stream.

Workspaces come from the kit's grow-only pool per (device, stream) (:data:`WORKSPACES`; the
depthwise kernels need none, dense ones as their query says); call
:func:`reserve_workspace` before capturing graphs. Production libraries and call plans are
the kit's :class:`~oasr_core.kit.Serving` (:data:`SERVING`).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from typing import Any

import attrs
from oasr_core.jit import kit
from oasr_core.kit import BufferKind, LaunchError, Serving, WorkspacePool
from oasr_core.kit.binding import BoundKernel, status_text
from oasr_core.kit.calls import PreparedCall
from oasr_core.types import Config

from oasr_conv1d import geometry as geo_mod
from oasr_conv1d.geometry import DTYPE_CODE, Geometry
from oasr_conv1d.lanes import fits_arch, pdl_capable, symbol

PDL_ENV = "OASR_CONV1D_PDL"
_LAUNCH_ARGTYPES = (ctypes.c_void_p,) * 7
_WORKSPACE_ARGTYPES = (ctypes.c_void_p, ctypes.c_int32)


def pdl_enabled() -> bool:
    """Whether Hopper kernels launch with programmatic dependent launch (``OASR_CONV1D_PDL``,
    default on; ``0`` turns it off). Results are the same either way."""
    from oasr_core.plugins import env_flag

    return os.environ.get(PDL_ENV) is None or env_flag(PDL_ENV)


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
class Kernel(BoundKernel):
    """One config's launcher and workspace query in a loaded library."""

    LAUNCH = _LAUNCH_ARGTYPES
    WORKSPACE = _WORKSPACE_ARGTYPES

    @classmethod
    def bind(cls, module: Any, config: Config) -> Kernel:
        """Bind ``config``'s symbols in a :class:`oasr_core.jit.LoadedModule` (raises if absent)."""
        return cls.bind_symbol(module, config, symbol(config))

    def prepare(self, geometry: Geometry, dtype: str, activation: str | None, *,
                pdl: bool | None = None) -> ConvPlan:
        """The per-shape plan (asks the workspace this shape needs, once); a
        :class:`LaunchError` when the unit cannot run ``geometry``."""
        pdl = (pdl_enabled() if pdl is None else pdl) and pdl_capable(self.config)
        geometry = Geometry.from_buffer_copy(geometry)
        scratch = self.workspace_fn(ctypes.addressof(geometry), DTYPE_CODE[dtype])
        if scratch < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id}: workspace query refused "
                              f"{describe(geometry)} {dtype}")
        args = geo_mod.call_args(geometry, dtype, activation, kit.FLAG_PDL if pdl else 0)
        prepared = PreparedCall(self.fn, args, self.config,
                                (int(scratch),) if scratch else (), WORKSPACES)
        return ConvPlan(prepared, geometry)

    def run(self, x: Any, w_packed: Any, bias: Any, geometry: Geometry,
            activation: str | None = None, out: Any = None) -> Any:
        """Run this config on torch tensors (no selection, no memo): tests and benchmarks.

        ``x`` is ``(B, T_in, Cin)`` contiguous fp16/bf16 on the current device, ``w_packed``
        the weight in this kind's layout (:func:`oasr_conv1d.weights.pack`); raises
        :class:`LaunchError` when the launcher refuses.
        """
        import torch

        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}[x.dtype]
        if out is None:
            out = torch.empty((geometry.batch, geometry.t_out, geometry.c_out), dtype=x.dtype,
                              device=x.device)
        plan = self.prepare(geometry, dtype, activation)
        status = plan(x.get_device(), x.data_ptr(), w_packed.data_ptr(),
                      bias.data_ptr() if bias is not None else 0, out.data_ptr())
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} refused "
                              f"{describe(geometry)} {dtype} {activation}: {status_text(status)}")
        return out


def describe(g: Geometry) -> str:
    """``B=8 T=3000 Cin=80 Cout=512 k=3 stride=1 pad=1 dil=1 groups=1``."""
    return (f"B={g.batch} T={g.t_in} Cin={g.c_in} Cout={g.c_out} k={g.kernel} "
            f"stride={g.stride} pad={g.pad} dil={g.dilation} groups={g.groups}")


def reserve_workspace(scratch_bytes: int = 16 << 20, device: int | None = None,
                      stream: Any = None) -> None:
    """Grow the workspace of ``device``/``stream`` (default: current) ahead of graph capture."""
    WORKSPACES.reserve((scratch_bytes,), device, stream)


def _load(lane: str, arch: str) -> Mapping[str, Kernel] | None:
    from oasr_conv1d import jit

    def bind(module: Any) -> dict[str, Kernel]:
        return {c.id: Kernel.bind(module, c) for c in jit.PRODUCTION.lane_configs(lane, arch)
                if symbol(c) in module.exports}

    return SERVING.load(lane, arch, jit.production_spec, bind)


def _wanted(lane: str, arch: str) -> tuple[str, ...]:
    from oasr_conv1d import jit

    return jit.PRODUCTION.wanted(lane, arch)


def is_available(config: Config) -> bool:
    """``Lane.is_available``: False only for a config this process's loaded module lacks."""
    return SERVING.holds(config, config.id, fits_arch)


SERVING = Serving("conv1d", load=_load, ids=lambda kernels: kernels.keys(), wanted=_wanted,
                  category=RuntimeWarning)
"""The conv1d ops' plans per epoch, fallback counters, warnings and production libraries."""
WORKSPACES = WorkspacePool(
    (BufferKind("scratch", 1 << 20),),
    warn=lambda message: SERVING.warn_once("capture-alloc", f"oasr_conv1d: {message} "
                                           "(oasr_conv1d.launch.reserve_workspace())"))
"""Scratch per (device, stream)."""
LIBRARIES = SERVING.libraries
