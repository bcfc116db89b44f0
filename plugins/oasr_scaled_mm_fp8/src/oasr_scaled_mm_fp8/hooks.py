"""Entry point of the scaled_mm_fp8 plugin (``[project.entry-points.oasr] scaled_mm_fp8 =
"oasr_scaled_mm_fp8.hooks"``).

Only imports and returns records: they are the W8A8 code base's
(:mod:`oasr_scaled_mm.w8a8.plugin`) for this package's format
(:data:`oasr_scaled_mm_fp8.format.E4M3`).
"""

from __future__ import annotations

from oasr_core import hookimpl


@hookimpl
def oasr_register_families():
    from oasr_scaled_mm.w8a8 import plugin

    from oasr_scaled_mm_fp8.format import E4M3

    return plugin.families(E4M3)


@hookimpl
def oasr_register_lanes():
    from oasr_scaled_mm.w8a8 import plugin

    from oasr_scaled_mm_fp8.format import E4M3

    return plugin.lanes(E4M3)


@hookimpl
def oasr_linear(dtype, quantization):
    from oasr_scaled_mm_fp8 import linear

    return linear.linear_for(dtype, quantization)


@hookimpl
def oasr_layer(kind, dtype, quantization):
    from oasr_scaled_mm_fp8 import linear

    return linear.layer_for(kind, dtype, quantization)
