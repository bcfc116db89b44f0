"""oasr_gemm: the fp16/bf16 GEMM family of oasr (``gemm``, ``gemm_activation``,
``gemm_residual``, ``gemm_log_softmax``, ``bmm``, ``group_gemm``) and its lanes.

``oasr_gemm.gemm(a, w, bias=None, out=None)`` computes ``a @ w.T (+ bias)`` like
``torch.nn.functional.linear``; ``oasr_gemm.gemm_activation(a, w, bias, activation)`` fuses a
ReLU, GELU or SiLU into the epilogue; ``oasr_gemm.gemm_residual(a, w, bias, residual, alpha)``
adds the result, scaled by ``alpha``, to a residual in the epilogue (Hopper lane);
``oasr_gemm.gemm_log_softmax(a, w, bias)`` is the CTC head, the GEMM then a row log-softmax
over the vocabulary; ``oasr_gemm.bmm(a, b)`` is ``torch.bmm`` on the same kernels in batched
mode (attention products written without SDPA); ``oasr_gemm.group_gemm(xs, ws, biases)`` is
a group of linears of equal weight shape in one call. Each call shape resolves once per tuning
epoch, through ``oasr_core.select``, to a CUTLASS kernel config of the device's lane
(``sm90_wgmma`` on Hopper, ``sm80_mma`` on Ampere/Ada) or to torch.

Importing this package is cheap: it imports neither torch nor CUTLASS and compiles nothing;
the ops module loads on first attribute access.
"""

from __future__ import annotations

from oasr_core.kit.lazy import lazy_attributes

__version__ = "0.1.0"

_LAZY = {"gemm", "gemm_activation", "gemm_residual", "gemm_log_softmax", "bmm", "group_gemm",
         "reserve_workspace", "stats", "reset_stats"}

__all__ = ["__version__", *sorted(_LAZY)]

__getattr__ = lazy_attributes(__name__, "ops", _LAZY)
