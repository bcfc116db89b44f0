"""Calling a W8A8 format's row quantizer and its fused layer norm (the modules
:mod:`oasr_scaled_mm.w8a8.row_quantizer` writes), each a kit
:class:`~oasr_core.kit.helpers.HelperKernel` bound from its declared argument types:
:func:`row_quantizer` / :func:`quantize_rows_with`, :func:`norm_quantizer` /
:func:`norm_quantize_rows_with`, and :func:`quantize_step` (a bench arm's quantizer into
fixed buffers). Importing this module imports no torch.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from oasr_core.kit.helpers import HelperKernel

ROW_QUANTIZER_ARGTYPES = (ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64,
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
"""``(x, dtype, rows, k, q, scale, stream)`` of a row quantizer's export; it returns int32."""


def row_quantizer(spec_of: Callable[[str], Any], symbol: str, *, label: str) -> HelperKernel:
    """The :class:`HelperKernel` of a row quantizer exporting ``symbol`` from the module
    ``spec_of(arch)`` (torch quantizes where it cannot load)."""
    return HelperKernel(spec_of, symbol, ROW_QUANTIZER_ARGTYPES, ctypes.c_int32, label=label,
                        fallback="quantizing with torch")


def quantize_rows_with(kernel: HelperKernel, x: Any, arch: str, q_dtype: Any
                       ) -> tuple[Any, Any] | None:
    """``(q [..., K] of q_dtype, scale float32 [...])`` of a contiguous fp16/bf16 CUDA tensor
    by a row quantizer ``kernel`` (C ABI ``(x, dtype 0 fp16 / 1 bf16, rows, k, q, scale,
    stream) -> status``) on the current stream, or None when it is unavailable or refused the
    call (the caller quantizes with torch)."""
    return _rows_call(kernel, x, arch, q_dtype, lambda code, rows, k: (x.data_ptr(), code, rows,
                                                                       k))


def _rows_call(kernel: HelperKernel, x: Any, arch: str, q_dtype: Any,
               leading: Callable[[int, int, int], tuple]) -> tuple[Any, Any] | None:
    """Call a row kernel writing ``(q [..., K] of q_dtype, scale float32 [...])`` for the rows
    of ``x``: its arguments ``leading(dtype code, rows, K)``, then ``q, scale, stream``; None
    when it cannot load or returns a non-zero status."""
    import torch

    fn = kernel.get(arch)
    if fn is None:
        return None
    k = x.shape[-1]
    rows = x.numel() // k if k else 0
    q = torch.empty(x.shape, dtype=q_dtype, device=x.device)
    scale = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    if rows == 0:
        return q, scale
    stream = torch._C._cuda_getCurrentRawStream(x.device.index)
    code = 0 if x.dtype == torch.float16 else 1
    status = fn(*leading(code, rows, k), q.data_ptr(), scale.data_ptr(), stream)
    return (q, scale) if status == 0 else None


NORM_QUANTIZER_ARGTYPES = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float,
                           ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p)
"""``(x, gamma, beta, eps, dtype, rows, k, q, scale, stream)`` of a row quantizer's fused
layer-norm export (:func:`oasr_scaled_mm.w8a8.row_quantizer.norm_symbol`); it returns int32."""


def norm_quantizer(spec_of: Callable[[str], Any], symbol: str, *, label: str) -> HelperKernel:
    """The :class:`HelperKernel` of the fused layer norm beside the row quantizer exporting
    ``symbol`` from the module ``spec_of(arch)`` (the norm and quantizer run apart where it
    cannot load)."""
    from oasr_scaled_mm.w8a8.row_quantizer import norm_symbol

    return HelperKernel(spec_of, norm_symbol(symbol), NORM_QUANTIZER_ARGTYPES, ctypes.c_int32,
                        label=label, fallback="the layer norm and the quantizer run apart")


def norm_quantize_rows_with(kernel: HelperKernel, x: Any, norm: Any, arch: str, q_dtype: Any
                            ) -> tuple[Any, Any] | None:
    """``(q [..., K] of q_dtype, scale float32 [...])`` of ``norm(x)`` (an ``nn.LayerNorm``
    over ``K``, its parameters in ``x``'s dtype or absent) for contiguous fp16/bf16 CUDA rows,
    by the fused kernel on the current stream; None when it is unavailable or refused the
    call (:func:`oasr_scaled_mm.w8a8.normed.quantize_after_norm` then runs them apart)."""
    gamma, beta = (None if p is None else p.data_ptr() for p in (norm.weight, norm.bias))
    return _rows_call(kernel, x, arch, q_dtype, lambda code, rows, k: (
        x.data_ptr(), gamma, beta, float(norm.eps), code, rows, k))


def quantize_step(kernel: HelperKernel, x: Any, q: Any, scale: Any, index: int,
                  reference: Callable[[Any], tuple[Any, Any]]) -> Callable[[], None]:
    """A call quantizing ``x`` per row into the fixed buffers ``q`` / ``scale`` on CUDA device
    ``index``'s current stream by the row quantizer ``kernel`` (what a bench arm times before
    the GEMM, as the quantized linear runs it); ``reference(x)`` copied in where the kernel
    cannot load or refuses the call."""
    import torch
    from oasr_core.runtime import device_arch_of

    fn = kernel.get(device_arch_of(index))
    k = x.shape[-1]
    rows, code = x.numel() // k, 0 if x.dtype == torch.float16 else 1
    stream_of = torch._C._cuda_getCurrentRawStream
    args = (x.data_ptr(), code, rows, k, q.data_ptr(), scale.data_ptr())

    def quantize() -> None:
        if fn is None or fn(*args, stream_of(index)):
            got, got_scale = reference(x)
            q.copy_(got)
            scale.copy_(got_scale)

    return quantize
