"""oasr_scaled_mm: the int8 W8A8 scaled GEMM family of oasr (``scaled_mm``, ``scaled_mm_quant``).

``oasr_scaled_mm.scaled_mm(a, w, a_scale, w_scale, bias=None, out_dtype=torch.float16)``
computes ``(a @ w.T) * a_scale[:, None] * w_scale[None, :] (+ bias)`` from int8 ``a [..., K]``
and ``w [N, K]`` with an exact int32 accumulator; ``scaled_mm_quant(..., out_scale)`` writes
the same value divided by ``out_scale``, rounded to nearest even and saturated to int8, for
the next GEMM. Each call shape resolves once per tuning epoch, through ``oasr_core.select``,
to a CUTLASS config of the device's lane (``sm90_int8_wgmma`` on Hopper, ``sm80_int8_mma`` on
Ampere/Ada) or to torch; every config computes the same bits.

Importing this package is cheap: it imports neither torch nor CUTLASS and compiles nothing;
the ops module loads on first attribute access.
"""

from __future__ import annotations

from oasr_core.kit.lazy import lazy_attributes

__version__ = "0.1.0"

_LAZY = {"scaled_mm", "scaled_mm_quant", "select_config", "select_quant_config",
         "unquantized", "reserve_workspace", "stats", "reset_stats"}

__all__ = ["__version__", *sorted(_LAZY)]

__getattr__ = lazy_attributes(__name__, "ops", _LAZY)
