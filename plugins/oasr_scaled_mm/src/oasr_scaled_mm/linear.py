"""The scaled_mm family's linear layer for the census's reference models (``oasr_linear``): the
W8A8 code base's (:mod:`oasr_scaled_mm.w8a8.plugin`) for :data:`oasr_scaled_mm.format.INT8`.

:data:`linear` runs each linear layer as :func:`oasr_scaled_mm.quantize.quantized_linear` (the
W8A8 GEMM, its activation in torch) or, where the table or the untuned route says unquantized,
through the installed unquantized linear with the activation or the residual add fused.
Importing this module imports neither torch nor the ops.
"""

from __future__ import annotations

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8 import plugin

globals().update(plugin.linear_names(INT8))  # QUANTIZATION, DTYPES, linear, linear_for, layer_for
