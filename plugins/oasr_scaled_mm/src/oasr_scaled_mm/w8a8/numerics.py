"""Test and benchmark operands of a W8A8 format, from its row quantizer and largest value.

:func:`quantized_operands` quantizes random float operands with a format's quantizer;
:func:`operand_helpers` gives a format's ``numerics`` module its ``make_operands`` (that, with
the format's quantizer) and ``out_scale_for`` (a per-tensor output scale mapping a result's
absmax to the format's largest value). Importing this module imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def quantized_operands(quantize_rows: Callable[[Any], tuple[Any, Any]], m: int, n: int, k: int,
                       *, bias: bool = True, device: Any = "cpu", seed: int = 0
                       ) -> tuple[Any, Any, Any, Any, Any]:
    """Random ``(a [m, k], a_scale [m], w [n, k], w_scale [n], bias [n] | None)`` of a W8A8
    family: a float activation and weight (std 1 and 1/sqrt(k),
    :func:`oasr_core.kit.benching.float_operands`) quantized per token / per channel by
    ``quantize_rows``, so outputs are O(1); bias float32. Never zeros or constants."""
    from oasr_core.kit.benching import float_operands

    x, wf, b = float_operands(m, n, k, bias=bias, seed=seed)
    a, a_scale = quantize_rows(x)
    w, w_scale = quantize_rows(wf)
    move = (lambda t: t.to(device)) if str(device) != "cpu" else (lambda t: t)
    return move(a), move(a_scale), move(w), move(w_scale), (move(b) if b is not None else None)


def operand_helpers(quantize_rows: Callable[[Any], tuple[Any, Any]], qmax: float,
                    element: str) -> dict[str, Callable[..., Any]]:
    """``{"make_operands": ..., "out_scale_for": ...}`` for a format whose quantizer is
    ``quantize_rows`` and whose largest value is ``qmax`` (``element`` names it in the
    docstrings)."""

    def make_operands(m: int, n: int, k: int, *, bias: bool = True, device: Any = "cpu",
                      seed: int = 0) -> tuple[Any, Any, Any, Any, Any]:
        return quantized_operands(quantize_rows, m, n, k, bias=bias, device=device, seed=seed)

    def out_scale_for(y: Any) -> float:
        amax = float(y.detach().abs().amax()) if y.numel() else 0.0
        return amax / qmax if amax > 0 else 1.0

    make_operands.__doc__ = (f"Random ``(a [m, k] {element}, a_scale [m], w [n, k] {element}, "
                             "w_scale [n], bias [n] | None)``, quantized per row.")
    out_scale_for.__doc__ = (f"A per-tensor output scale mapping ``y``'s absmax to {qmax:g} "
                             "(1.0 for an all-zero ``y``).")
    return {"make_operands": make_operands, "out_scale_for": out_scale_for}
