"""Entry point of the scaled_mm_fp8 plugin (``[project.entry-points.oasr] scaled_mm_fp8 =
"oasr_scaled_mm_fp8.hooks"``): the W8A8 code base's hook implementations
(:class:`oasr_scaled_mm.w8a8.plugin.Hooks`) for this package's format
(:data:`oasr_scaled_mm_fp8.format.E4M3`). Only records and answers; importing it imports no torch.
"""

from __future__ import annotations

from oasr_scaled_mm.w8a8.plugin import Hooks

from oasr_scaled_mm_fp8.format import E4M3

HOOKS = Hooks(E4M3)
globals().update(HOOKS.implementations())  # oasr_register_families, ..., oasr_compile_patterns
