"""ctypes binding of the scaled_mm_fp8 launchers: the W8A8 code base's
(:func:`oasr_scaled_mm.w8a8.launch.binding`) for :data:`oasr_scaled_mm_fp8.format.E4M3`.

:data:`SERVING` holds the loaded lane libraries and the call plans per epoch, :class:`Kernel`
binds one (config, op)'s launcher, :data:`WORKSPACES` is the scratch pool (a persistent 3.x
kernel's scheduler scratch (the lanes have no Stream-K)); :func:`reserve_workspace` grows it
before graph capture.
"""

from __future__ import annotations

from oasr_scaled_mm.w8a8.launch import binding

from oasr_scaled_mm_fp8.format import E4M3

BINDING = binding(E4M3, default_out="bfloat16", scratch_bytes=1 << 16, reserve_bytes=1 << 20)
NAMES = BINDING.names()
"""The module's names (:meth:`oasr_scaled_mm.w8a8.launch.Binding.names`)."""
globals().update(NAMES)
__all__ = sorted(NAMES)
