"""The one-kernel activation quantizer of the scaled_mm_fp8 family: the W8A8 code base's
(:class:`oasr_scaled_mm.w8a8.quantizer.ActivationQuantizer`) for
:data:`oasr_scaled_mm_fp8.format.E4M3`.

:func:`quantize_rows_cuda` quantizes a ``[..., K]`` fp16/bf16 CUDA tensor per row in one
bandwidth-bound pass, bit for bit the format's torch reference; :func:`norm_quantize_rows_cuda`
quantizes the rows of a layer norm's output in the same pass. Their JIT module (:func:`spec`, no
CUTLASS) is part of both lanes' prebuild (:func:`oasr_scaled_mm_fp8.jit.lane_specs`) and loads
once per arch; where it cannot load, torch quantizes.
"""

from __future__ import annotations

from oasr_scaled_mm.w8a8.quantizer import ActivationQuantizer

from oasr_scaled_mm_fp8.format import E4M3

globals().update(ActivationQuantizer(E4M3).names())
