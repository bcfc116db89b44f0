"""Entry point of the conv2d plugin (``[project.entry-points.oasr] conv2d = "oasr_conv2d.hooks"``).

Only imports and returns records; the work lives in the sibling modules.
"""

from __future__ import annotations

from oasr_core import hookimpl
from oasr_core.kit.lazy import lazy_layer_hooks


@hookimpl
def oasr_register_families():
    from oasr_core.kit.registration import HALF_DTYPES, family_record
    from oasr_core.types import Sentinel

    from oasr_conv2d import lanes
    from oasr_conv2d.geometry import FAMILY
    from oasr_conv2d.ops_names import DIMS, OPS

    # Untuned shapes serve torch (cuDNN's NHWC kernels through the op's torch path): nothing
    # measured yet says where the heuristic's tile beats it, so an uncovered shape is never
    # slower than not installing oasr. Builds partition against the heuristic (fallback).
    return [family_record(
        "oasr_conv2d", name=FAMILY, ops=OPS, dims=DIMS, zero_dims={"ph", "pw"},
        **HALF_DTYPES, dynamic_axis="M", exact_points=True,
        sentinels={Sentinel.DEFAULT, Sentinel.HEURISTIC, Sentinel.TORCH},
        fallback=Sentinel.HEURISTIC, sentinel_heuristic=lanes.heuristic,
        untuned=Sentinel.TORCH,
        description="fp16/bf16 NHWC conv2d (the speech front end's subsampling; +bias, +act)")]


@hookimpl
def oasr_register_lanes():
    from oasr_core.kit.registration import lane_records

    from oasr_conv2d import jit, lanes, launch
    from oasr_conv2d.geometry import FAMILY, LANES

    return lane_records(FAMILY, LANES, lanes, jit_module=jit.Conv2dKernelModule,
                        is_available=launch.is_available,
                        description="CUTLASS 2.x implicit GEMM, NHWC")


oasr_layer, oasr_compile_patterns = (hookimpl(hook)
                                     for hook in lazy_layer_hooks("oasr_conv2d"))
"""The layer and compile-pattern hooks, answered by :mod:`oasr_conv2d.layer` and
:mod:`oasr_conv2d.compiled` (imported on the first call)."""
