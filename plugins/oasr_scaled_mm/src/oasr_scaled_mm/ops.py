"""The scaled_mm family's ops: ``scaled_mm`` and ``scaled_mm_quant``, eager and as custom ops.

``scaled_mm(a, w, a_scale, w_scale, bias=None, out_dtype=torch.float16, out=None)``: ``a`` is
int8 ``[..., K]`` (leading dims flatten into M), ``w`` int8 ``[N, K]`` (``nn.Linear``
layout), ``a_scale`` float32 per token (M values), ``w_scale`` float32 per output channel (N
values), ``bias`` fp16/bf16/fp32 ``[N]`` or None. The result, in ``out_dtype`` (fp16 or
bf16), is ``((float(acc) * a_scale[m]) * w_scale[n]) + bias[n]`` with ``acc`` the exact
int32 dot product, each op one fp32 rounding in that order, rounded to nearest even at the end.

``scaled_mm_quant(a, w, a_scale, w_scale, out_scale, bias=None, out=None)`` is the same GEMM
writing int8 for the next GEMM: the same fp32 value **divided** by the per-tensor
``out_scale`` (an IEEE fp32 division, not a multiplication by a reciprocal), rounded to
nearest even and saturated to [-128, 127] (NaN to 0). ``out_scale`` is a float or a one-element
float32 tensor on the operands' device (read by the kernel at run time: a captured CUDA graph
follows its updates).

A call shape resolves once per tuning epoch through ``oasr_core.select("scaled_mm", op,
"int8", (N, K), M)`` (:func:`select_config`, :func:`select_quant_config`); the answer (a
prepared launcher, or the torch path) is memoised per (op, out dtype, N, K, M, device) in the
current epoch (the kit's :class:`oasr_core.kit.Serving`, :data:`oasr_scaled_mm.launch.SERVING`),
so a repeated call is one dict lookup, the tensor checks, one ctypes call and the launch on
torch's current stream (CUDA-graph capturable). The quant op never serves a Stream-K config:
such a selection is warned about once and the shape heuristic's config serves.

Inputs the kernels do not take (CPU tensors, N or K not a multiple of 16, non-contiguous or
misaligned tensors, an out_scale tensor on another device) take the torch path
(:mod:`oasr_scaled_mm.reference`: the same bits, computed by torch) and are counted
(:func:`stats`); on the meta device the ops return an empty tensor of the right shape. Bad
inputs (wrong dtypes or shapes, mixed devices) raise ``TypeError``/``ValueError``. A bias that
is not float32 is converted per call (exact); pass a float32 bias to avoid the extra kernel.

``torch.ops.oasr.scaled_mm`` / ``torch.ops.oasr.scaled_mm_quant`` are the same ops registered
with ``torch.library`` (with fake implementations), so they trace under ``torch.compile``; the
Python functions route to them while compiling.
"""

from __future__ import annotations

from oasr_scaled_mm.format import INT8
from oasr_scaled_mm.w8a8.ops import make_ops

# The two ops, selection, the route, the counters, the call path's pieces, __all__.
globals().update(make_ops(__name__, INT8, operand_name="int8").names())
