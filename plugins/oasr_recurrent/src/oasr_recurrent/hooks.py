"""Entry point of the recurrent plugin (``[project.entry-points.oasr] recurrent =
"oasr_recurrent.hooks"``).

Only imports and returns records; the work lives in the sibling modules.
"""

from __future__ import annotations

import functools

from oasr_core import hookimpl


@hookimpl
def oasr_register_families():
    from oasr_core.types import Family, Sentinel

    from oasr_recurrent import bench, jit, numerics, recorder
    from oasr_recurrent.ops_names import DIMS, FAMILY, OPS

    # Untuned shapes serve torch (torch.lstm_cell through the op's torch path): nothing
    # measured yet says where the lane default beats it, so an uncovered shape is never
    # slower than not installing oasr. Builds partition against the lane default.
    return [Family(
        name=FAMILY, ops=OPS, dims=DIMS, dtypes=("fp16", "bf16"),
        dtype_classes={"half": ("fp16", "bf16")}, dynamic_axis="M",
        sentinels={Sentinel.DEFAULT, Sentinel.TORCH}, fallback=Sentinel.DEFAULT,
        untuned=Sentinel.TORCH, numerics_gate=numerics.numerics_gate,
        soft_validators=jit.soft_validators, recorder_patches=recorder.recorder_patches,
        make_bench=bench.make_bench,
        description="fp16/bf16 LSTM step (the RNN-T prediction network while decoding)")]


@hookimpl
def oasr_register_lanes():
    from oasr_core.types import Lane

    from oasr_recurrent import jit, lanes, launch
    from oasr_recurrent.ops_names import FAMILY, LANES

    return [Lane(name=lane, family=FAMILY, arch_families=lanes.ARCHES[lane],
                 default_on=lanes.DEFAULT_ON[lane], config_space=lanes.space(lane),
                 default_config=lanes.DEFAULTS[lane], is_feasible=lanes.is_feasible,
                 supports=lanes.supports, is_available=launch.is_available,
                 jit_module=jit.RecurrentKernelModule,
                 jit_specs=functools.partial(jit.MODULES.lane_specs, lane),
                 production=functools.partial(jit.PRODUCTION.configs, lane),
                 description="LSTM step: four gates and the update in one launch")
            for lane in LANES]


@hookimpl
def oasr_layer(kind, dtype, quantization):
    """``nn.LSTM`` (kind ``LSTM``) one time step at a time through the family's op
    (:mod:`oasr_recurrent.layer`, imported on the first call)."""
    if kind != "LSTM":
        return None
    from oasr_recurrent.layer import layer_for

    return layer_for(kind, dtype, quantization)
