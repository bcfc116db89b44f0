"""ctypes binding of the scaled_mm launchers: the W8A8 code base's
(:func:`oasr_scaled_mm.w8a8.launch.binding`) for :data:`oasr_scaled_mm.format.INT8`.

:data:`SERVING` holds the loaded lane libraries and the call plans per epoch, :class:`Kernel`
binds one (config, op)'s launcher, :data:`WORKSPACES` is the scratch pool (Stream-K scratch
(int32 partials and barrier flags, zeroed by the launcher before each launch));
:func:`reserve_workspace` grows it before graph capture.
"""

from __future__ import annotations

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8.launch import binding

BINDING = binding(INT8, default_out="float16", scratch_bytes=1 << 20, reserve_bytes=64 << 20)
NAMES = BINDING.names()
"""The module's names (:meth:`oasr_scaled_mm.w8a8.launch.Binding.names`)."""
globals().update(NAMES)
__all__ = sorted(NAMES)
