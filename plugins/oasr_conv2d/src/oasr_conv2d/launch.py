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

from oasr_core.kit.binding import status_text as status_text
from oasr_core.kit.records import (
    RecordKernel,
    RecordPlan,
    availability,
    module_serving,
    scratch_pool,
)

from oasr_conv2d import geometry as geo_mod
from oasr_conv2d.lanes import fits_arch, symbol

ConvPlan = RecordPlan


class Kernel(RecordKernel):
    """One config's launcher and workspace query in a loaded library; ``run`` takes NHWC
    ``x (B, H, W, Cin)`` and the weight as :func:`oasr_conv2d.weights.pack` makes it."""

    ABI = geo_mod
    pool = staticmethod(lambda: WORKSPACES)
    symbol_of = staticmethod(symbol)


SERVING = module_serving("conv2d", modules="oasr_conv2d.jit", kernel=Kernel,
                         category=RuntimeWarning)
"""The conv2d ops' plans per epoch, fallback counters, warnings and production libraries."""
WORKSPACES = scratch_pool(SERVING, "oasr_conv2d")
"""Scratch per (device, stream) (the 2.x kernels ask none; kept for the prepared-call ABI)."""
is_available = availability(SERVING, fits_arch)
"""``Lane.is_available``: False only for a config this process's loaded module lacks."""
LIBRARIES = SERVING.libraries
