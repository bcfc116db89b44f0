"""oasr_scaled_mm_fp8: the fp8 e4m3 W8A8 scaled GEMM family of oasr (``scaled_mm_fp8``,
``scaled_mm_fp8_quant``).

``oasr_scaled_mm_fp8.scaled_mm_fp8(a, w, a_scale, w_scale, bias=None, out_dtype=torch.bfloat16)``
computes ``(a @ w.T) * a_scale[:, None] * w_scale[None, :] (+ bias)`` from e4m3 ``a [..., K]``
and ``w [N, K]``; ``scaled_mm_fp8_quant(..., out_scale)`` writes the value divided by
``out_scale`` as saturated e4m3 for the next GEMM. Each call shape resolves once per tuning
epoch to a CUTLASS config of the device's lane (``sm90_fp8_wgmma`` on Hopper,
``sm89_fp8_mma`` on Ada) or to torch.

Importing this package is cheap: no torch, no CUTLASS, nothing compiled; the ops module loads
on first attribute access.
"""

from __future__ import annotations

from oasr_core.kit.lazy import lazy_attributes

__version__ = "0.1.0"

_LAZY = {"scaled_mm_fp8", "scaled_mm_fp8_quant", "select_config", "select_quant_config",
         "unquantized", "reserve_workspace", "stats", "reset_stats"}

__all__ = ["__version__", *sorted(_LAZY)]

__getattr__ = lazy_attributes(__name__, "ops", _LAZY)
