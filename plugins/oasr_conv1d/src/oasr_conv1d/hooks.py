"""Entry point of the conv1d plugin (``[project.entry-points.oasr] conv1d = "oasr_conv1d.hooks"``).

Only imports and returns records; the work lives in the sibling modules.
"""

from __future__ import annotations

from oasr_core import hookimpl
from oasr_core.kit.lazy import lazy_layer_hooks


@hookimpl
def oasr_register_families():
    from oasr_core.kit.registration import HALF_DTYPES, family_record
    from oasr_core.types import Sentinel

    from oasr_conv1d import lanes, recorder
    from oasr_conv1d.geometry import FAMILY
    from oasr_conv1d.ops_names import OPS

    return [family_record(
        "oasr_conv1d", name=FAMILY, ops=OPS, dims=recorder.DIMS, zero_dims={"pad"},
        **HALF_DTYPES, dynamic_axis="M", exact_points=True,
        sentinels={Sentinel.DEFAULT, Sentinel.HEURISTIC, Sentinel.TORCH},
        fallback=Sentinel.HEURISTIC, sentinel_heuristic=lanes.heuristic,
        untuned=Sentinel.HEURISTIC, untuned_gate=lanes.untuned_gate,
        description="fp16/bf16 channels-last conv1d, dense and depthwise (+bias, +act)")]


@hookimpl
def oasr_register_lanes():
    from oasr_core.kit.registration import lane_records

    from oasr_conv1d import jit, lanes, launch
    from oasr_conv1d.geometry import FAMILY, LANE_SM80, LANE_SM90

    # No cost_features: the lanes are measured (dense and depthwise kernels in one space have
    # no common cost structure yet); uncovered shapes run the heuristic's config where the
    # untuned gate says it beats torch, else torch (Family.untuned, Family.untuned_gate).
    texts = {LANE_SM80: "CUTLASS 2.x implicit GEMM + direct depthwise",
             LANE_SM90: "CUTLASS 3.x/2.x implicit GEMM + direct depthwise"}
    return lane_records(FAMILY, texts, lanes, jit_module=jit.Conv1dKernelModule,
                        is_available=launch.is_available, description=texts)


oasr_layer, oasr_compile_patterns = (hookimpl(hook)
                                     for hook in lazy_layer_hooks("oasr_conv1d"))
"""The layer and compile-pattern hooks, answered by :mod:`oasr_conv1d.layer` and
:mod:`oasr_conv1d.compiled` (imported on the first call)."""
