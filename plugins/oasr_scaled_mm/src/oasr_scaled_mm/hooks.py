"""Entry point of the scaled_mm plugin (``[project.entry-points.oasr] scaled_mm =
"oasr_scaled_mm.hooks"``).

Only imports and returns records: they are the W8A8 code base's
(:mod:`oasr_scaled_mm.w8a8.plugin`) for this package's format
(:data:`oasr_scaled_mm.format.INT8`).
"""

from __future__ import annotations

from oasr_core import hookimpl


@hookimpl
def oasr_register_families():
    from oasr_scaled_mm.format import INT8
    from oasr_scaled_mm.w8a8 import plugin

    return plugin.families(INT8)


@hookimpl
def oasr_register_lanes():
    from oasr_scaled_mm.format import INT8
    from oasr_scaled_mm.w8a8 import plugin

    return plugin.lanes(INT8)


@hookimpl
def oasr_linear(dtype, quantization):
    from oasr_scaled_mm import linear

    return linear.linear_for(dtype, quantization)


@hookimpl
def oasr_layer(kind, dtype, quantization):
    from oasr_scaled_mm import linear

    return linear.layer_for(kind, dtype, quantization)
