"""Entry point of the scaled_mm_fp8 plugin (``[project.entry-points.oasr] scaled_mm_fp8 =
"oasr_scaled_mm_fp8.hooks"``).

Only imports and returns records; the work lives in the sibling modules.
"""

from __future__ import annotations

import functools

from oasr_core import hookimpl


@hookimpl
def oasr_register_families():
    from oasr_core.types import Family, Sentinel

    from oasr_scaled_mm_fp8 import bench, heuristic, linear, numerics, recorder
    from oasr_scaled_mm_fp8.config_space import DTYPE, FAMILY, OPS

    return [Family(
        name=FAMILY, ops=OPS, dims=("N", "K"), dtypes=(DTYPE,), key_dtype=False,
        sentinels={Sentinel.HEURISTIC, Sentinel.TORCH, Sentinel.UNQUANTIZED},
        fallback=Sentinel.HEURISTIC, sentinel_heuristic=heuristic.sentinel_heuristic,
        numerics_gate=numerics.numerics_gate, soft_validators=heuristic.soft_validators,
        recorder_patches=recorder.recorder_patches, make_bench=bench.make_bench,
        quantizations={linear.QUANTIZATION: linear.DTYPES},
        description="fp8 e4m3 W8A8 A W^T with per-token / per-channel scales (+bias, +fp8 out)")]


@hookimpl
def oasr_register_lanes():
    from oasr_core.types import Lane

    from oasr_scaled_mm_fp8 import config_space as cs
    from oasr_scaled_mm_fp8 import feasibility as fe
    from oasr_scaled_mm_fp8 import jit, launch

    # No cost_features: measured exhaustively, served user > system > heuristic.
    common = dict(family=cs.FAMILY, is_feasible=fe.is_feasible, supports=fe.supports,
                  is_available=launch.is_available, jit_module=jit.Fp8KernelModule)
    return [Lane(name=cs.LANE_SM89, arch_families=fe.SM89_ARCHES, default_on=fe.SM89_DEFAULT_ON,
                 config_space=cs.space(cs.LANE_SM89), default_config=cs.SM89_DEFAULT,
                 jit_specs=functools.partial(jit.lane_specs, cs.LANE_SM89),
                 description="CUTLASS 2.x fp8 e4m3 mma.sync, fused scale EVT", **common),
            Lane(name=cs.LANE_SM90, arch_families=fe.SM90_ARCHES, default_on=fe.SM90_ARCHES,
                 config_space=cs.space(cs.LANE_SM90), default_config=cs.SM90_DEFAULT,
                 jit_specs=functools.partial(jit.lane_specs, cs.LANE_SM90),
                 description="CUTLASS 3.x fp8 e4m3 TMA + wgmma, fused scale EVT", **common)]


@hookimpl
def oasr_linear(dtype, quantization):
    from oasr_scaled_mm_fp8 import linear

    return linear.linear_for(dtype, quantization)


@hookimpl
def oasr_layer(kind, dtype, quantization):
    from oasr_scaled_mm_fp8 import linear

    return linear.layer_for(kind, dtype, quantization)
