"""The W8A8 code base: what a scaled GEMM with 8-bit operands and per-row / per-channel scales
needs beyond the core's kit, shared by every number format (int8 here, fp8 e4m3 in
``oasr_scaled_mm_fp8``, which depends on this package).

- :mod:`~oasr_scaled_mm.w8a8.row_quantizer`: the per-row activation quantizer and the fused
  layer norm, as CUDA templates (``templates/*.cuh.in``) a format's numerics fill in;
  :mod:`~oasr_scaled_mm.w8a8.rows` calls them;
- :mod:`~oasr_scaled_mm.w8a8.ladders`: the shape heuristic's tile ladder, its file and fitter;
- :mod:`~oasr_scaled_mm.w8a8.scaled`: the ctypes side of the scaled GEMM's C ABI;
  :mod:`~oasr_scaled_mm.w8a8.scaled_ops` the ops' shape resolution, the quantized linear's route
  and the torch custom ops;
- :mod:`~oasr_scaled_mm.w8a8.weights`: the quantized linear's weight cache on its layer;
- :mod:`~oasr_scaled_mm.w8a8.devices`: the arch and SM count a shape heuristic reads.

Importing this package imports nothing else.
"""
