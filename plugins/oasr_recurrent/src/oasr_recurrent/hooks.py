"""Entry point of the recurrent plugin (``[project.entry-points.oasr] recurrent =
"oasr_recurrent.hooks"``).

Only imports and returns records; the work lives in the sibling modules.
"""

from __future__ import annotations

from oasr_core import hookimpl


@hookimpl
def oasr_register_lanes():
    from oasr_core.kit.registration import lane_records

    from oasr_recurrent import jit, lanes, launch
    from oasr_recurrent.ops_names import FAMILY, LANES

    return lane_records(FAMILY, LANES, lanes, jit_module=jit.RecurrentKernelModule,
                        is_available=launch.is_available,
                        description="recurrent cell step: gates and update in one launch")


@hookimpl
def oasr_register_families():
    from oasr_core.kit.registration import HALF_DTYPES, family_record
    from oasr_core.types import Sentinel

    from oasr_recurrent.ops_names import DIMS, FAMILY, OPS

    # Untuned shapes serve torch (torch's cell through the op's torch path): nothing
    # measured yet says where the lane default beats it, so an uncovered shape is never
    # slower than not installing oasr. Builds partition against the lane default.
    return [family_record(
        "oasr_recurrent", name=FAMILY, ops=OPS, dims=DIMS, **HALF_DTYPES, dynamic_axis="M",
        sentinels={Sentinel.DEFAULT, Sentinel.TORCH}, fallback=Sentinel.DEFAULT,
        untuned=Sentinel.TORCH,
        description="fp16/bf16 LSTM / RNN / GRU cell step (the RNN-T prediction network while "
                    "decoding)")]


@hookimpl
def oasr_layer(kind, dtype, quantization):
    """``nn.LSTM``, ``nn.RNN`` and ``nn.GRU`` (kinds ``LSTM``, ``RNN``, ``GRU``) one time step
    at a time
    through the family's cell ops (:mod:`oasr_recurrent.layer`, imported on the first
    call)."""
    if kind not in ("LSTM", "RNN", "GRU"):
        return None
    from oasr_recurrent.layer import layer_for

    return layer_for(kind, dtype, quantization)
