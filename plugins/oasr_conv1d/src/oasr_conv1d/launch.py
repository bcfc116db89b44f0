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

import os
from typing import Any

from oasr_core.jit import kit
from oasr_core.kit.binding import status_text as status_text
from oasr_core.kit.records import (
    RecordKernel,
    RecordPlan,
    availability,
    module_serving,
    scratch_pool,
)

from oasr_conv1d import geometry as geo_mod
from oasr_conv1d.geometry import describe as describe
from oasr_conv1d.lanes import fits_arch, pdl_capable, symbol

PDL_ENV = "OASR_CONV1D_PDL"
ConvPlan = RecordPlan


def pdl_enabled() -> bool:
    """Whether Hopper kernels launch with programmatic dependent launch (``OASR_CONV1D_PDL``,
    default on; ``0`` turns it off). Results are the same either way."""
    from oasr_core.plugins import env_flag

    return os.environ.get(PDL_ENV) is None or env_flag(PDL_ENV)


class Kernel(RecordKernel):
    """One config's launcher and workspace query in a loaded library (dense or depthwise);
    ``run`` takes ``x (B, T_in, Cin)`` and the weight packed for the config's kind
    (:func:`oasr_conv1d.weights.pack`)."""

    ABI = geo_mod
    symbol_of = staticmethod(symbol)
    pool = staticmethod(lambda: WORKSPACES)

    def launch_flags(self, pdl: bool | None) -> int:
        """Hopper units launch with PDL unless ``OASR_CONV1D_PDL=0`` (or ``pdl=False``)."""
        pdl = (pdl_enabled() if pdl is None else pdl) and pdl_capable(self.config)
        return kit.FLAG_PDL if pdl else 0


def reserve_workspace(scratch_bytes: int = 16 << 20, device: int | None = None,
                      stream: Any = None) -> None:
    """Grow the workspace of ``device``/``stream`` (default: current) ahead of graph capture."""
    WORKSPACES.reserve((scratch_bytes,), device, stream)


SERVING = module_serving("conv1d", modules="oasr_conv1d.jit", kernel=Kernel,
                         category=RuntimeWarning)
"""The conv1d ops' plans per epoch, fallback counters, warnings and production libraries."""
WORKSPACES = scratch_pool(SERVING, "oasr_conv1d", hint="oasr_conv1d.launch.reserve_workspace()")
"""Scratch per (device, stream)."""
is_available = availability(SERVING, fits_arch)
"""``Lane.is_available``: False only for a config this process's loaded module lacks."""
LIBRARIES = SERVING.libraries
