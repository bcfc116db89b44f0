"""Entry point of the conv1d plugin (``[project.entry-points.oasr] conv1d = "oasr_conv1d.hooks"``).

Only imports and returns records; the work lives in the sibling modules.
"""

from __future__ import annotations

import functools

from oasr_core import hookimpl
from oasr_core.kit.lazy import lazy_layer_hooks


@hookimpl
def oasr_register_families():
    from oasr_core.types import Family, Sentinel

    from oasr_conv1d import bench, jit, lanes, numerics, recorder
    from oasr_conv1d.geometry import FAMILY
    from oasr_conv1d.ops_names import OPS

    return [Family(
        name=FAMILY, ops=OPS, dims=recorder.DIMS, zero_dims={"pad"},
        dtypes=("fp16", "bf16"),
        dtype_classes={"half": ("fp16", "bf16")}, dynamic_axis="M", exact_points=True,
        sentinels={Sentinel.DEFAULT, Sentinel.HEURISTIC, Sentinel.TORCH},
        fallback=Sentinel.HEURISTIC, sentinel_heuristic=lanes.heuristic,
        untuned=Sentinel.HEURISTIC, untuned_gate=lanes.untuned_gate,
        numerics_gate=numerics.numerics_gate,
        soft_validators=jit.soft_validators, recorder_patches=recorder.recorder_patches,
        make_bench=bench.make_bench,
        description="fp16/bf16 channels-last conv1d, dense and depthwise (+bias, +act)")]


@hookimpl
def oasr_register_lanes():
    from oasr_core.types import Lane

    from oasr_conv1d import jit, lanes, launch
    from oasr_conv1d.geometry import FAMILY, LANE_SM80, LANE_SM90

    # No cost_features: the lanes are measured (dense and depthwise kernels in one space have
    # no common cost structure yet); uncovered shapes run the heuristic's config where the
    # untuned gate says it beats torch, else torch (Family.untuned, Family.untuned_gate).
    common = dict(family=FAMILY, is_feasible=lanes.is_feasible, supports=lanes.supports,
                  is_available=launch.is_available, jit_module=jit.Conv1dKernelModule)
    return [Lane(name=lane, arch_families=lanes.ARCHES[lane], default_on=lanes.DEFAULT_ON[lane],
                 config_space=lanes.space(lane), default_config=lanes.DEFAULTS[lane],
                 jit_specs=functools.partial(jit.lane_specs, lane),
                 production=functools.partial(jit.PRODUCTION.configs, lane),
                 description=text, **common)
            for lane, text in ((LANE_SM80, "CUTLASS 2.x implicit GEMM + direct depthwise"),
                               (LANE_SM90, "CUTLASS 3.x/2.x implicit GEMM + direct depthwise"))]


oasr_layer, oasr_compile_patterns = (hookimpl(hook)
                                     for hook in lazy_layer_hooks("oasr_conv1d"))
"""The layer and compile-pattern hooks, answered by :mod:`oasr_conv1d.layer` and
:mod:`oasr_conv1d.compiled` (imported on the first call)."""
