"""How the census sees fp8 GEMM calls: the scaled_mm_fp8 family's recorder patches, the W8A8 code
base's (:mod:`oasr_scaled_mm.w8a8.recorder`) for :data:`oasr_scaled_mm_fp8.format.E4M3`.

``recorder_patches()`` is the family's ``Family.recorder_patches``: it observes
``oasr_scaled_mm_fp8.ops:scaled_mm_fp8`` and ``oasr_scaled_mm_fp8.ops:scaled_mm_fp8_quant``.
Importing this module imports neither torch nor the ops.
"""

from __future__ import annotations

from typing import Any

from oasr_core.census.recorder import RecorderPatch
from oasr_scaled_mm.w8a8 import recorder

from oasr_scaled_mm_fp8.format import E4M3

record_mm, record_quant = recorder.records(E4M3)
"""The record functions of ``scaled_mm_fp8`` and ``scaled_mm_fp8_quant`` (each takes its op\'s
arguments)."""


def call_of(op: str, a: Any, w: Any) -> Any:
    """The census ``Call`` of ``a [..., K] x w [N, K]^T`` for ``op``; None if not this family's."""
    return recorder.call_of(E4M3, op, a, w)


def recorder_patches() -> list[RecorderPatch]:
    """The scaled_mm_fp8 family's patches (``Family.recorder_patches``)."""
    return recorder.recorder_patches(E4M3, record_mm, record_quant)
