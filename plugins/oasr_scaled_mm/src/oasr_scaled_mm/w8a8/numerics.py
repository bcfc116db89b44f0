"""Test and benchmark operands of a W8A8 format, from its row quantizer and largest value.

:func:`operand_helpers` gives a format's ``numerics`` module its ``make_operands`` (random
quantized operands, the kit's :func:`~oasr_core.kit.benching.quantized_operands` with the
format's quantizer) and ``out_scale_for`` (a per-tensor output scale mapping a result's absmax
to the format's largest value). Importing this module imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def operand_helpers(quantize_rows: Callable[[Any], tuple[Any, Any]], qmax: float,
                    element: str) -> dict[str, Callable[..., Any]]:
    """``{"make_operands": ..., "out_scale_for": ...}`` for a format whose quantizer is
    ``quantize_rows`` and whose largest value is ``qmax`` (``element`` names it in the
    docstrings)."""

    def make_operands(m: int, n: int, k: int, *, bias: bool = True, device: Any = "cpu",
                      seed: int = 0) -> tuple[Any, Any, Any, Any, Any]:
        from oasr_core.kit.benching import quantized_operands

        return quantized_operands(quantize_rows, m, n, k, bias=bias, device=device, seed=seed)

    def out_scale_for(y: Any) -> float:
        amax = float(y.detach().abs().amax()) if y.numel() else 0.0
        return amax / qmax if amax > 0 else 1.0

    make_operands.__doc__ = (f"Random ``(a [m, k] {element}, a_scale [m], w [n, k] {element}, "
                             "w_scale [n], bias [n] | None)``, quantized per row.")
    out_scale_for.__doc__ = (f"A per-tensor output scale mapping ``y``'s absmax to {qmax:g} "
                             "(1.0 for an all-zero ``y``).")
    return {"make_operands": make_operands, "out_scale_for": out_scale_for}
