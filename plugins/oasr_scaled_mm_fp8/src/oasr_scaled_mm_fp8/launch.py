"""ctypes binding of the scaled_mm_fp8 launchers: the W8A8 code base's
(:func:`oasr_scaled_mm.w8a8.launch.binding`) for :data:`oasr_scaled_mm_fp8.format.E4M3`.

:data:`SERVING` holds the loaded lane libraries and the call plans per epoch, :class:`Kernel`
binds one (config, op)'s launcher, :data:`WORKSPACES` is the scratch pool (a persistent 3.x
kernel's scheduler scratch (the lanes have no Stream-K)); :func:`reserve_workspace` grows it
before graph capture.
"""

from __future__ import annotations

from collections.abc import Mapping

from oasr_core.jit.kit import CallArgs
from oasr_core.kit import LaunchError
from oasr_scaled_mm.w8a8.launch import binding
from oasr_scaled_mm.w8a8.scaled import out_scale_args, status_text

from oasr_scaled_mm_fp8.format import E4M3

__all__ = ["CallArgs", "Kernel", "LaunchError", "SERVING", "WORKSPACES", "bind_all",
           "out_scale_args", "reserve_workspace", "status_text"]

BINDING = binding(E4M3, default_out="bfloat16", scratch_bytes=1 << 16, reserve_bytes=1 << 20)
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
