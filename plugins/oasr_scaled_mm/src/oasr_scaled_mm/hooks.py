"""Entry point of the scaled_mm plugin (``[project.entry-points.oasr] scaled_mm =
"oasr_scaled_mm.hooks"``): the W8A8 code base's hook implementations
(:class:`oasr_scaled_mm.w8a8.plugin.Hooks`) for this package's format
(:data:`oasr_scaled_mm.format.INT8`). Only records and answers; importing it imports no torch.
"""

from __future__ import annotations

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8.plugin import Hooks

HOOKS = Hooks(INT8)
globals().update(HOOKS.implementations())  # oasr_register_families, ..., oasr_compile_patterns
