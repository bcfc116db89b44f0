"""W8A8 fp8 e4m3 quantized linear layers for the census and for engines (``fp8_w8a8``): the W8A8
code base's (:mod:`oasr_scaled_mm.w8a8.linear`) for :data:`oasr_scaled_mm_fp8.format.E4M3`.

:func:`quantized_linear` is what ``oasr_quantized_linear("fp8_w8a8")`` returns: ``layer(x)`` as
the fp8 e4m3 GEMM ``oasr_scaled_mm_fp8.ops.scaled_mm_fp8``, the activation quantized per token
(:func:`quantize_rows`), the weight once per output channel and cached on the layer
(:data:`CACHE_ATTR`); or, where the family's route says unquantized
(:func:`oasr_scaled_mm_fp8.ops.unquantized`: the table, or the untuned route at a shape no entry
covers), the layer in its own dtype. The torch definition of the quantizer is
:func:`oasr_scaled_mm_fp8.numerics.quantize_rows`.
"""

from __future__ import annotations

from oasr_scaled_mm.w8a8.linear import quantize_names

from oasr_scaled_mm_fp8.format import E4M3

globals().update(quantize_names(E4M3))  # CACHE_ATTR, QUANTIZATION, quantize_rows, ..., layer_norm
