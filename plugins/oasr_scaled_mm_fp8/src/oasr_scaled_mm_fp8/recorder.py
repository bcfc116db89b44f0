"""How the census sees fp8 GEMM calls: the scaled_mm_fp8 family's recorder patches, the W8A8 code
base's (:mod:`oasr_scaled_mm.w8a8.recorder`) for :data:`oasr_scaled_mm_fp8.format.E4M3`.

``recorder_patches()`` is the family's ``Family.recorder_patches``: it observes
``oasr_scaled_mm_fp8.ops:scaled_mm_fp8`` and ``oasr_scaled_mm_fp8.ops:scaled_mm_fp8_quant``.
Importing this module imports neither torch nor the ops.
"""

from __future__ import annotations

from oasr_scaled_mm.w8a8 import recorder

from oasr_scaled_mm_fp8.format import E4M3

globals().update(recorder.names(E4M3))  # record_<op> of both ops, call_of, recorder_patches
