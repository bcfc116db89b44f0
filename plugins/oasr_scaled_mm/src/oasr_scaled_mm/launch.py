"""ctypes binding of the scaled_mm launchers: the W8A8 code base's
(:func:`oasr_scaled_mm.w8a8.launch.binding`) for :data:`oasr_scaled_mm.format.INT8`.

:data:`SERVING` holds the loaded lane libraries and the call plans per epoch, :class:`Kernel`
binds one (config, op)'s launcher, :data:`WORKSPACES` is the scratch pool (Stream-K scratch
(int32 partials and barrier flags, zeroed by the launcher before each launch));
:func:`reserve_workspace` grows it before graph capture.
"""

from __future__ import annotations

from collections.abc import Mapping

from oasr_core.jit.kit import CallArgs
from oasr_core.kit import LaunchError

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8.launch import binding
from oasr_scaled_mm.w8a8.scaled import out_scale_args, status_text

__all__ = ["CallArgs", "Kernel", "LaunchError", "SERVING", "WORKSPACES", "bind_all",
           "out_scale_args", "reserve_workspace", "status_text"]

BINDING = binding(INT8, default_out="float16", scratch_bytes=1 << 20, reserve_bytes=64 << 20)
Kernel = BINDING.kernel
SERVING = BINDING.serving
"""The ops' plans per epoch, fallback counters, warnings and production libraries."""
WORKSPACES = BINDING.workspaces
"""Scratch per (device, stream)."""
LIBRARIES = SERVING.libraries
"""This process's kernel libraries by (lane, arch) (production modules, or a harness's:
``install``; ``forget`` drops them all)."""
bind_all, is_available = BINDING.bind_all, BINDING.is_available
reserve_workspace = BINDING.reserve_workspace
Kernels = Mapping[tuple[str, str], Kernel]
"""Loaded kernels by ``(op, config id)``."""
