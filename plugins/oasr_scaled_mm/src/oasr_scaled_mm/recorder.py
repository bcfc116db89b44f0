"""How the census sees int8 GEMM calls: the scaled_mm family's recorder patches, the W8A8 code
base's (:mod:`oasr_scaled_mm.w8a8.recorder`) for :data:`oasr_scaled_mm.format.INT8`.

``recorder_patches()`` is the family's ``Family.recorder_patches``: it observes
``oasr_scaled_mm.ops:scaled_mm`` and ``oasr_scaled_mm.ops:scaled_mm_quant``. Importing this
module imports neither torch nor the ops.
"""

from __future__ import annotations

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8 import recorder

globals().update(recorder.names(INT8))  # record_<op> of both ops, call_of, recorder_patches
