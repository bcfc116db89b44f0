"""How the census sees int8 GEMM calls: the scaled_mm family's recorder patches, the W8A8 code
base's (:mod:`oasr_scaled_mm.w8a8.recorder`) for :data:`oasr_scaled_mm.format.INT8`.

``recorder_patches()`` is the family's ``Family.recorder_patches``: it observes
``oasr_scaled_mm.ops:scaled_mm`` and ``oasr_scaled_mm.ops:scaled_mm_quant``. Importing this
module imports neither torch nor the ops.
"""

from __future__ import annotations

from typing import Any

from oasr_core.census.recorder import RecorderPatch

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8 import recorder

record_scaled_mm, record_scaled_mm_quant = recorder.records(INT8)
"""The record functions of ``scaled_mm`` and ``scaled_mm_quant`` (each takes its op\'s
arguments)."""


def call_of(op: str, a: Any, w: Any) -> Any:
    """The census ``Call`` of ``a [..., K] x w [N, K]^T`` for ``op``; None if not this family's."""
    return recorder.call_of(INT8, op, a, w)


def recorder_patches() -> list[RecorderPatch]:
    """The scaled_mm family's patches (``Family.recorder_patches``)."""
    return recorder.recorder_patches(INT8, record_scaled_mm, record_scaled_mm_quant)
