"""Entry point of the gemm plugin (``[project.entry-points.oasr] gemm = "oasr_gemm.hooks"``).

Only imports and returns records; the work lives in the sibling modules.
"""

from __future__ import annotations

import functools

from oasr_core import hookimpl


@hookimpl
def oasr_register_families():
    from oasr_core.kit.registration import HALF_DTYPES, family_record
    from oasr_core.types import Sentinel

    from oasr_gemm.config_space import OPS

    return [family_record(
        "oasr_gemm", name="gemm", ops=OPS, dims=("N", "K"), **HALF_DTYPES,
        sentinels={Sentinel.DEFAULT, Sentinel.TORCH},
        fallback=Sentinel.DEFAULT, untuned=Sentinel.TORCH,
        description="fp16/bf16 A W^T (+bias, +act, + alpha-scaled residual, or a row "
                    "log-softmax), and batched A B (bmm)")]


@hookimpl
def oasr_register_lanes():
    from oasr_core.types import Lane

    from oasr_gemm import bench, cost, jit, launch
    from oasr_gemm import config_space as cs
    from oasr_gemm import feasibility as fe

    common = dict(family="gemm", is_feasible=fe.is_feasible, supports=fe.supports,
                  is_available=launch.is_available, jit_module=jit.GemmKernelModule,
                  cost_features=cost.cost_features)
    return [Lane(name=cs.LANE_SM80, arch_families=fe.SM80_ARCHES, default_on=fe.SM80_DEFAULT_ON,
                 config_space=cs.space(cs.LANE_SM80), default_config=cs.SM80_DEFAULT,
                 jit_specs=functools.partial(jit.lane_specs, cs.LANE_SM80),
                 production=functools.partial(jit.PRODUCTION.configs, cs.LANE_SM80),
                 bench_modules=bench.bench_modules(cs.LANE_SM80), **common),
            Lane(name=cs.LANE_SM90, arch_families=fe.SM90_ARCHES, default_on=fe.SM90_ARCHES,
                 config_space=cs.space(cs.LANE_SM90), default_config=cs.SM90_DEFAULT,
                 jit_specs=functools.partial(jit.lane_specs, cs.LANE_SM90),
                 production=functools.partial(jit.PRODUCTION.configs, cs.LANE_SM90),
                 bench_modules=bench.bench_modules(cs.LANE_SM90), **common)]


@hookimpl
def oasr_linear(dtype, quantization):
    from oasr_gemm import linear

    return linear.linear_for(dtype, quantization)


@hookimpl
def oasr_compile_patterns(quantization):
    from oasr_gemm import compiled

    return compiled.patterns_for(quantization)
