"""The scaled_mm_fp8 family's ops: ``scaled_mm_fp8`` and ``scaled_mm_fp8_quant``, eager and as
custom ops, and the quantized linear's route (:func:`unquantized`).

``scaled_mm_fp8(a, w, a_scale, w_scale, bias=None, out_dtype=torch.bfloat16, out=None)``:
``a`` e4m3 ``[..., K]`` (leading dims flatten into M), ``w`` e4m3 ``[N, K]``, ``a_scale``
float32 per token (M values), ``w_scale`` float32 per output channel (N values), ``bias``
fp16/bf16/fp32 ``[N]`` or None; the result in ``out_dtype`` (bf16 or fp16) is
``((acc * a_scale[m]) * w_scale[n]) + bias[n]``, ``acc`` the tensor cores' fp32 sum of the
fp8 products (see :mod:`oasr_scaled_mm_fp8.numerics` for how close to exact it is).

``scaled_mm_fp8_quant(a, w, a_scale, w_scale, out_scale, bias=None, out=None)`` writes the same
value divided by ``out_scale`` (IEEE fp32 division) as e4m3, rounded to nearest even and
**saturated**: a finite value beyond +-448 and an infinity become +-448; a NaN stays NaN.
``out_scale`` is a float or a one-element float32 tensor on the operands' device (read at run
time: a captured graph follows its updates).

A call shape resolves once per tuning epoch through ``oasr_core.select("scaled_mm_fp8", op,
"float8_e4m3fn", (N, K), M)`` to a prepared launcher or the torch path, memoised per (op, out
dtype, N, K, M, device) in the current epoch (the kit's :class:`oasr_core.kit.Serving`): a
repeated call is one dict lookup, the checks, one ctypes call and the launch on torch's current
stream (CUDA-graph capturable). The torch path (``torch._scaled_mm`` with row-wise scales on
CUDA, the fp32 reference elsewhere: :func:`oasr_scaled_mm_fp8.reference.torch_scaled_mm`)
serves what the kernels do not take -- CPU tensors, N or K not a multiple of 16,
non-contiguous or misaligned tensors, a ``torch`` or ``unquantized`` selection -- counted by
reason (:func:`stats`). On the meta device the ops return an empty tensor of the right shape;
bad inputs raise ``TypeError``/``ValueError``.

``torch.ops.oasr.scaled_mm_fp8`` / ``torch.ops.oasr.scaled_mm_fp8_quant`` are the same ops
registered with ``torch.library`` (fake implementations included), so they trace under
``torch.compile``; the Python functions route to them while compiling.
"""

from __future__ import annotations

from oasr_scaled_mm.w8a8.ops import make_ops

from oasr_scaled_mm_fp8.format import E4M3

globals().update(make_ops(__name__, E4M3, operand_name="torch.float8_e4m3fn").names())
